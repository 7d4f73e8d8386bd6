"""One verdict from generation to the screen (issue 11): a completion is parsed and judged
once, by ``RewardModel.score``, and the metrics, the video's scene payloads and the demo page
all show that stored verdict and those stored claims.

Tricky completions go through the episode writer (``Episode.from_scored``); the readers then
run with the parser and the claim extractor made to fail, so any re-parse would show.
"""

from __future__ import annotations

import json

import pytest

from library.scoring import answer_format, matching, reward
from library.contracts import Episode, Question
from library.demo.site import collect
from library.errors import DataFileError
from library.evaluation.evaluate import metrics_from_run
from library.jsonl import write_jsonl_atomic
from library.scoring.reward import RewardModel
from library.runs.folder import RunDir
from scenes.resolve import RunData, resolve_shots
from scenes.storyboard import loads_storyboard

TRUE_CHAIN = "TLS handshake error is caused by clock skew; clock skew is fixed by sync clocks with NTP."
FALSE_CHAIN = "TLS handshake error is fixed by clock skew; clock skew is caused by sync clocks with NTP."

#: name -> (completion, correct?, number of false claims)
CASES = {
    "no_trace": ("ANSWER: B", False, 0),  # right letter, malformed: wrong everywhere
    "hedged": (f"TRACE: {TRUE_CHAIN}\nANSWER: A or B", False, 0),
    "bold_keywords": (f"**TRACE:** {TRUE_CHAIN}\n**ANSWER:** B", True, 0),
    "false_chain": (f"TRACE: {FALSE_CHAIN}\nANSWER: B", True, 2),  # right answer, two false claims
}


def _question(kg, idx: int) -> Question:
    path = kg.path_from_entities(["TLSHandshakeError", "ClockSkew", "NTPSync"], ["caused_by", "fixed_by"])
    options = {"A": kg.label("ClockSkew"), "B": kg.label("NTPSync"), "C": kg.label("openssl"), "D": kg.label("ServiceDown")}
    return Question(id=f"eval-{idx:04d}", split="eval", hop_len=2, question="Start at TLS handshake error.",
                    options=options, answer_star="B", path_star=path, prompt="p", ref={"trace": TRUE_CHAIN})


@pytest.fixture
def agreement_run(tmp_path, tiny_kg, tiny_kg_dict):
    run = RunDir.create(tmp_path, run_id="agree")
    questions = [_question(tiny_kg, i + 1) for i in range(len(CASES))]
    rm = RewardModel.from_preset(tiny_kg, "toy+edges")
    episodes = [Episode.from_scored(rm.score(q, text), q, text, phase="sft", step=0, kind="eval", eval_split="eval")
                for q, (text, _, _) in zip(questions, CASES.values())]
    run.append_episodes(episodes)
    write_jsonl_atomic(run.path / "eval_questions.jsonl", questions)
    (run.path / "kg.json").write_text(json.dumps(tiny_kg_dict))
    run.write_meta({"run_id": "agree", "reward": {"preset": "toy", "edge_verified": True}})
    run.write_metrics({"eval": {"sft": metrics_from_run(run, phase="sft", split="eval")}})
    return run, dict(zip(CASES, questions))


def _refuse(*args, **kwargs):
    raise AssertionError("a reader parsed a completion again")


def test_metrics_scene_and_page_agree_on_tricky_completions(agreement_run, monkeypatch):
    run, questions = agreement_run
    for module, name in ((answer_format, "parse_completion"), (reward, "parse_completion"), (matching, "extract_claims")):
        monkeypatch.setattr(module, name, _refuse)

    shots = "".join(f"  - scene: kg_path\n    duration: 2\n    params:\n      episode: {{id: {q.id}, phase: sft}}\n"
                    for q in questions.values())
    sb = loads_storyboard(f"title: t\nformat: short\nrun: {run.path}\nshots:\n{shots}")
    scenes = {shot.ex_id: shot.payload for shot in resolve_shots(sb, RunData.load(run.path))}
    page = {ep["ex_id"]: ep for ep in collect([run.path], kg_path=None, data_dir=None).runs[0]["episodes"]["sft"]["eval"]}
    stored = {ep.ex_id: ep for ep in run.read_episodes()}

    for name, (_, correct, n_false) in CASES.items():
        qid = questions[name].id
        metric = metrics_from_run(run, phase="sft", split="eval", ex_ids=[qid])["correct"] == 1
        assert (stored[qid].correct, metric, scenes[qid]["correct"], page[qid]["correct"]) == (correct,) * 4, name
        false_stored = [(c.src, c.dst) for c in stored[qid].parsed.claims if not c.in_kg]
        false_scene = [(e["src"], e["dst"]) for e in scenes[qid]["wrong_edges"]]
        false_page = [(c["src"], c["dst"]) for c in page[qid]["claims"] if not c["in_kg"]]
        assert len(false_stored) == n_false and false_scene == false_page == false_stored, name
    assert page[questions["bold_keywords"].id]["claims"] == [
        {"src": "TLSHandshakeError", "rel": "caused_by", "dst": "ClockSkew", "in_kg": True, "on_path": True},
        {"src": "ClockSkew", "rel": "fixed_by", "dst": "NTPSync", "in_kg": True, "on_path": True}]
    block = run.read_metrics()["eval"]["sft"]
    assert block["correct"] == sum(c for _, c, _ in CASES.values()) == 2


def test_old_logs_are_refused_by_name_then_migrated_once_to_the_one_format(agreement_run):
    """A line written before claims, kinds and verdicts were stored: the reader refuses it with
    the file, the line and `kgr migrate`'s reason; `migrate_run` writes what the reward would
    store today (claims, max_mentions, kind) and the one correctness rule, and is a no-op after."""
    from library.runs.migrate import migrate_run

    run, _ = agreement_run
    current = run.episodes_path.read_text().splitlines()
    old = []
    for line in current:
        obj = json.loads(line)
        del obj["parsed"]["claims"], obj["kind"], obj["reward"]["max_mentions"]
        obj["correct"] = obj["reward"]["correctness"] > -99  # the old rule had no format check
        old.append(json.dumps(obj, ensure_ascii=False, separators=(", ", ": ")))
    run.episodes_path.write_text("\n".join(old) + "\n")
    with pytest.raises(DataFileError, match=r"episodes.jsonl:1: .*claims"):
        run.read_episodes()
    assert migrate_run(run.path)["episodes"] == len(current)
    assert [json.loads(x) for x in run.episodes_path.read_text().splitlines()] == [json.loads(x) for x in current]
    assert migrate_run(run.path) == {"episodes": 0, "files": 0, "meta": 0, "metrics": 0}


def test_migrate_gives_old_metrics_the_grounded_count_of_their_episodes(tmp_path):
    """metrics.json written before ``grounded`` was counted gets it from the run's episodes, by
    the metrics' own function: the committed quick run's blocks come back as they are."""
    import shutil
    from pathlib import Path

    from library.runs.migrate import migrate_run

    quick = Path(__file__).resolve().parents[1] / "data" / "runs" / "quick"
    run = tmp_path / "quick"
    run.mkdir()
    for name in ("meta.json", "metrics.json", "episodes.jsonl"):
        shutil.copy(quick / name, run / name)
    current = json.loads((run / "metrics.json").read_text())
    old = json.loads(json.dumps(current))
    blocks = [b for split in ("eval", "train_sample") for b in old[split].values()]
    for block in blocks:
        del block["grounded"]
    (run / "metrics.json").write_text(json.dumps(old))
    assert migrate_run(run)["metrics"] == len(blocks) == 8
    assert json.loads((run / "metrics.json").read_text()) == current
    assert current["eval"]["grpo"]["grounded"]["correct"] == 118  # of 130 right answers


def test_grounded_selection_reads_stored_claims_only(agreement_run, monkeypatch):
    # the hero query judges "grounded" from the claims stored with each episode: no reader may
    # parse a completion again, and the right answer on a false chain is never the hero
    run, questions = agreement_run
    for module, name in ((answer_format, "parse_completion"), (reward, "parse_completion"), (matching, "extract_claims")):
        monkeypatch.setattr(module, name, _refuse)
    shot = ("  - scene: kg_path\n    duration: 2\n    params:\n"
            "      episode: {query: [correct, grounded], phase: sft, prefer: id}\n")
    sb = loads_storyboard(f"title: t\nformat: short\nrun: {run.path}\nshots:\n{shot}")
    (resolved,) = resolve_shots(sb, RunData.load(run.path))
    assert resolved.ex_id == questions["bold_keywords"].id
    assert resolved.episodes == [{"phase": "sft", "ex_id": questions["bold_keywords"].id, "role": "selected"}]
    # the false chain is right by its letter: without `grounded` the query refuses to show it
    sb = loads_storyboard(f"title: t\nformat: short\nrun: {run.path}\nshots:\n"
                          + shot.replace("[correct, grounded], phase: sft, prefer: id", "correct, phase: sft, prefer: id, index: 1"))
    with pytest.raises(DataFileError, match="not grounded"):
        resolve_shots(sb, RunData.load(run.path))


#: Everything that reads a completion: a reader that calls any of these re-parses or re-scores.
_SCANNERS = ((answer_format, "parse_completion"), (answer_format, "trace_steps"), (reward, "parse_completion"),
             (reward, "trace_steps"), (matching, "extract_claims"), (matching.EntityMatcher, "spans"),
             (matching.TraceScanner, "scan"), (RewardModel, "score"))


def test_the_cards_steps_and_the_pages_spans_are_the_ones_scoring_stored(agreement_run, monkeypatch):
    """The before/after card shows the TRACE steps stored with each episode, marking the entities
    of its on-path claims where scoring found them; the page marks the entity spans stored with
    the completion; neither reader scans a completion (every scanner refuses here)."""
    run, questions = agreement_run
    stored = {ep.ex_id: ep for ep in run.read_episodes()}
    for target, name in _SCANNERS:
        monkeypatch.setattr(target, name, _refuse)
    shots = "".join(f"  - scene: before_after\n    duration: 2\n    params:\n      episode: {{id: {q.id}, phase: sft}}\n"
                    f"      phases: [sft]\n" for q in questions.values())
    sb = loads_storyboard(f"title: t\nformat: short\nrun: {run.path}\nshots:\n{shots}")
    cards = {shot.ex_id: shot.payload["rows"][0] for shot in resolve_shots(sb, RunData.load(run.path))}
    page = {ep["ex_id"]: ep for ep in collect([run.path], kg_path=None, data_dir=None).runs[0]["episodes"]["sft"]["eval"]}
    bold, liar = stored[questions["bold_keywords"].id], stored[questions["false_chain"].id]
    assert bold.grounded and not liar.grounded and liar.correct  # right by its letter, on a false chain
    assert [s.text for s in liar.parsed.steps] == [FALSE_CHAIN] and liar.parsed.steps_hidden == []
    for qid, ep in stored.items():
        assert [s["text"] for s in cards[qid]["steps"]] == [s.text for s in ep.parsed.steps], qid
        on_path = {x for c in ep.parsed.claims if c.on_gold_path for x in (c.src, c.dst)}
        assert [p for s in cards[qid]["steps"] for p in s["path"]] == [
            (a, b) for s in ep.parsed.steps for a, b, e in s.spans if e in on_path], qid
        assert page[qid]["spans"] == [list(s) for s in ep.parsed.spans], qid
    text = liar.completion
    assert [(text[a:b], e) for a, b, e in page[liar.ex_id]["spans"]] == [
        ("TLS handshake error", "TLSHandshakeError"), ("clock skew", "ClockSkew"), ("clock skew", "ClockSkew"),
        ("sync clocks with NTP", "NTPSync")]


def test_a_run_logged_before_spans_steps_and_grounded_is_refused_then_migrated(agreement_run):
    """Readers refuse a run whose episodes lack what scoring stores for them, in one sentence that
    names `kgr migrate RUN` (never scoring them again themselves); the migration adds exactly those
    fields, by the one scoring function, and leaves every other field as it was."""
    from library.runs.migrate import migrate_run

    run, _ = agreement_run
    current = [json.loads(line) for line in run.episodes_path.read_text().splitlines()]
    old = json.loads(json.dumps(current))
    for obj in old:
        del obj["grounded"], obj["parsed"]["spans"], obj["parsed"]["steps"], obj["parsed"]["steps_hidden"]
    run.episodes_path.write_text("".join(json.dumps(obj) + "\n" for obj in old))
    with pytest.raises(DataFileError) as refused:
        RunData.load(run.path)
    assert str(refused.value) == (f"{run.episodes_path}: 4 of 4 episodes were logged before scoring stored their "
                                  f"entity spans, TRACE steps and grounded verdict: run `kgr migrate {run.path}` "
                                  "once to add them")
    (skipped,) = collect([run.path], kg_path=None, data_dir=None).skipped
    assert f"run `kgr migrate {run.path}` once" in skipped["reason"]
    assert migrate_run(run.path)["episodes"] == len(current)
    assert [json.loads(line) for line in run.episodes_path.read_text().splitlines()] == current
    assert migrate_run(run.path)["episodes"] == 0
    RunData.load(run.path)


def test_migrate_gives_a_run_older_than_the_monitor_the_blocks_training_writes(tmp_path):
    """metrics.json of a run logged before the reward-hacking monitor gets the monitor section
    (and the ablation's) that training writes today, recomputed from its rollouts: the committed
    reference run's blocks come back as they are, and a second migration changes nothing."""
    import shutil
    from pathlib import Path

    from library.runs.migrate import migrate_run

    reference = Path(__file__).resolve().parents[1] / "data" / "runs" / "reference"
    run = tmp_path / "reference"
    shutil.copytree(reference, run, ignore=shutil.ignore_patterns("adapters", "checkpoints", ".lock"))
    current = json.loads((run / "metrics.json").read_text())
    old = json.loads(json.dumps(current))
    del old["monitor"], old["ablation"]["monitor"]
    (run / "metrics.json").write_text(json.dumps(old))
    assert migrate_run(run)["metrics"] == len(current["monitor"]) + 1
    assert json.loads((run / "metrics.json").read_text()) == current
    assert migrate_run(run)["metrics"] == 0
