"""One verdict from generation to the screen (issue 11): a completion is parsed and judged
once, by ``RewardModel.score``, and the metrics, the video's scene payloads and the demo page
all show that stored verdict and those stored claims.

Tricky completions go through the episode writer (``Episode.from_scored``); the readers then
run with the parser and the claim extractor made to fail, so any re-parse would show.
"""

from __future__ import annotations

import json

import pytest

from library import answer_format, matching, reward
from library.contracts import Episode, Question
from library.demo.site import collect
from library.errors import DataFileError
from library.evaluate import metrics_from_run
from library.jsonl import write_jsonl_atomic
from library.reward import RewardConfig, RewardModel
from library.runs import RunDir
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
    rm = RewardModel(tiny_kg, RewardConfig.preset_named("toy+edges"))
    episodes = [Episode.from_scored(rm.score(q, text), q, text, phase="sft", step=0, kind="eval", eval_split="eval")
                for q, (text, _, _) in zip(questions, CASES.values())]
    run.append_episodes(episodes)
    write_jsonl_atomic(run.path / "eval_questions.jsonl", questions)
    (run.path / "kg.json").write_text(json.dumps(tiny_kg_dict))
    run.write_meta({"run_id": "agree", "reward": {"preset": "toy", "edge_verified": True}})
    run.update_metrics("eval", {"sft": metrics_from_run(run, phase="sft", split="eval")})
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


def test_old_logs_keep_loading_with_one_verdict(tmp_path):
    """A line written before the fields were typed: its stored ``correct`` (the old rule, no
    format check) is replaced by the one rule, ``kind`` is derived, and nothing new is written
    back into its JSON shape."""
    line = {"phase": "sft", "step": 0, "ex_id": "eval-0001", "split": "eval", "prompt": "p", "completion": "ANSWER: B",
            "parsed": {"answer": "B", "trace_text": "", "trace_entities": [], "path_entities": [], "valid_format": False},
            "reward": {"correctness": -2.0, "path_coverage": 0.0, "path_reward": 0.0, "spam_penalty": 0.0, "total": -2.0},
            "hop_len": 2, "answer_star": "B", "correct": True}
    ep = Episode.model_validate(line)
    assert ep.correct is False and ep.kind == "eval" and ep.parsed.claims is None
    dumped = ep.model_dump(mode="json")
    assert "claims" not in dumped["parsed"] and "sample_idx" not in dumped and dumped["correct"] is False


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
