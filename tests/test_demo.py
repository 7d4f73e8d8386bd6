"""`kgr demo` / `kgr serve`: the static site's data, the server, and Try it (tiny model)."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from conftest import REPO
from library.contracts import PHASES
from library.demo.layout import layout_subgraph
from library.demo.site import build_demo, collect
from library.runs.folder import RunDir


@pytest.fixture
def runs_root(fixture_run) -> Path:
    """The fixture run plus three bad run folders next to it."""
    root = fixture_run.path.parent
    (root / "broken-meta").mkdir()
    (root / "broken-meta" / "meta.json").write_text('{"model": ')
    bad_eps = RunDir.create(root, run_id="broken-episodes")
    bad_eps.write_meta({"run_id": "broken-episodes"})
    (bad_eps.path / "episodes.jsonl").write_text('{"phase": "sft", "step": 0}\n')
    empty = RunDir.create(root, run_id="empty")
    empty.write_meta({"run_id": "empty"})
    return root


def _get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=30) as res:
            return res.status, res.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def _post(url: str, obj) -> tuple[int, dict]:
    req = urllib.request.Request(url, data=json.dumps(obj).encode(), headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=300) as res:
            return res.status, json.loads(res.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


# ----------------------------------------------------------------------------- site data
def test_bad_runs_are_skipped_with_reasons(runs_root, kg_file, tmp_path):
    index, site = build_demo([runs_root], tmp_path / "site", kg_path=kg_file, data_dir=tmp_path / "no-data")
    assert [r["run_id"] for r in site.runs] == ["fixture"]
    skipped = {Path(s["path"]).name: s["reason"] for s in site.skipped}
    assert set(skipped) == {"broken-meta", "broken-episodes", "empty"}
    assert "invalid JSON" in skipped["broken-meta"]
    assert "episodes.jsonl:1" in skipped["broken-episodes"]
    assert "neither episodes nor metrics" in skipped["empty"]
    html = index.read_text()
    for name in skipped:  # visible in the static HTML itself, not only after JS runs
        assert f"Skipped run</strong> {runs_root / name}" in html
    data = json.loads((tmp_path / "site" / "data.json").read_text())
    embedded = html.split('<script id="demo-data" type="application/json">')[1].split("</script>")[0]
    assert json.loads(embedded) == data
    assert (tmp_path / "site" / "static" / "app.js").exists() and (tmp_path / "site" / "static" / "style.css").exists()
    assert "http" not in (tmp_path / "site" / "static" / "app.js").read_text().replace("http://www.w3.org/2000/svg", "")


def test_no_valid_runs_gives_a_visible_message(tmp_path, kg_file):
    index, site = build_demo([tmp_path / "missing"], tmp_path / "site", kg_path=kg_file, data_dir=tmp_path / "no-data")
    assert site.runs == [] and len(site.skipped) == 1
    html = index.read_text()
    assert 'id="no-runs"' in html and "run folder not found" in html


def test_episode_numbers_come_from_the_run(fixture_run, kg_file, tiny_kg, tmp_path):
    site = collect([fixture_run.path], kg_path=kg_file, data_dir=tmp_path / "no-data")
    run = site.runs[0]
    logged = [json.loads(line) for line in (fixture_run.path / "episodes.jsonl").read_text().splitlines()]
    shown = [ep for phase in run["episodes"].values() for eps in phase.values() for ep in eps]
    assert len(shown) == len(logged) == run["n_episodes"]
    for ep in shown:
        src = logged[ep["i"]]
        assert ep["completion"] == src["completion"] and ep["ex_id"] == src["ex_id"]
        assert ep["reward"] == {k: v for k, v in src["reward"].items() if not isinstance(v, str)}
        assert ep["correct"] == (src["parsed"]["answer"] == src["answer_star"])
    assert set(run["episodes"]) == set(PHASES)
    assert run["headline"]["eval"]["grpo"]["accuracy"] == 1.0
    assert run["n_missing_questions"] == 1  # the GRPO training log's "train-00001" has no question file
    assert [p["step"] for p in run["step_curves"]["grpo"]] == [1, 2, 3, 4]
    lo, hi = run["step_curves"]["grpo"][1]["accuracy_ci"]
    assert lo < 1.0 <= hi


def test_graph_highlights_the_gold_path_and_false_claims(fixture_run, kg_file, tiny_kg, tmp_path):
    run = collect([fixture_run.path], kg_path=kg_file, data_dir=tmp_path / "no-data").runs[0]
    for qid, q in run["questions"].items():
        hops = [e["hop"] for e in q["graph"]["edges"] if e.get("hop") is not None]  # packed: a KG edge off the path has none
        assert sorted(hops) == list(range(q["hop_len"])), qid
        xy = [(n["x"], n["y"]) for n in q["graph"]["nodes"]]
        assert len(set(xy)) == len(xy), "two nodes drawn on top of each other"
    # the SFT "partial" trace claims TLS handshake error -leads_to-> service down: not an edge of the KG
    sft = run["episodes"]["sft"]["eval"][0]
    false = [c for c in sft["claims"] if not c["in_kg"]]
    assert [(c["src"], c["rel"], c["dst"]) for c in false] == [("TLSHandshakeError", "leads_to", "ServiceDown")]
    graph_edges = run["questions"][sft["ex_id"]]["graph"]["edges"]
    assert {"src": "TLSHandshakeError", "rel": "leads_to", "dst": "ServiceDown", "hop": None, "kind": "claim"} in graph_edges
    assert all(c["in_kg"] and c["on_path"] for c in run["episodes"]["grpo"]["eval"][0]["claims"])
    assert len(run["episodes"]["grpo"]["eval"][0]["claims"]) == 4


def test_entity_spans_are_whole_words_longest_first(fixture_run, tiny_kg):
    """The spans the page marks are the ones scoring stored: the reward's own entity matcher."""
    from library.runs.reader import RunView
    from library.scoring.reward import RewardModel

    text = "TRACE: TLS handshake error is caused by clock skew; clock skewed openssl.\nANSWER: A"
    q = next(iter(RunView.open(fixture_run.path).questions().values()))
    spans = RewardModel(tiny_kg).score(q, text).parsed.spans
    assert [(text[s:e], ent) for s, e, ent in spans] == [
        ("TLS handshake error", "TLSHandshakeError"), ("clock skew", "ClockSkew"), ("openssl", "openssl")]


def test_layout_keeps_path_on_one_row(tiny_kg):
    path = ["NTPDrift", "TLSHandshakeError", "CertificateExpired"]
    layout = layout_subgraph(tiny_kg, path, extra=["chronyc"])
    pos = {n["id"]: (n["x"], n["y"]) for n in layout["nodes"]}
    assert len({pos[e][1] for e in path}) == 1
    assert [pos[e][0] for e in path] == sorted(pos[e][0] for e in path)
    assert "chronyc" in pos and all(0 <= x <= layout["width"] and 0 <= y <= layout["height"] for x, y in pos.values())


def test_demo_and_site_need_no_torch(runs_root, kg_file, tmp_path):
    code = (
        "import sys; from pathlib import Path; from library.demo.site import build_demo; "
        "import library.demo.server, library.demo.tryit, library.cli; "
        f"build_demo([Path({str(runs_root)!r})], Path({str(tmp_path / 'o')!r}), kg_path=Path({str(kg_file)!r}), data_dir=Path({str(tmp_path / 'no-data')!r})); "
        "bad = [m for m in ('torch', 'transformers', 'peft', 'manim', 'moviepy', 'scenes') if m in sys.modules]; "
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO)


def test_cli_demo_command(runs_root, kg_file, tmp_path):
    from typer.testing import CliRunner

    from library.cli import app

    out = tmp_path / "cli-site"
    result = CliRunner().invoke(app, ["demo", str(runs_root), "--out", str(out), "--kg", str(kg_file), "--data", str(tmp_path / "none")])
    assert result.exit_code == 0, result.output
    assert "1 run(s), 3 skipped" in result.output
    assert (out / "index.html").exists()
    # nothing readable: the page says so, and so does the exit status
    result = CliRunner().invoke(app, ["demo", str(runs_root / "empty"), str(runs_root / "broken-meta"),
                                      "--out", str(tmp_path / "empty-site"), "--kg", str(kg_file)])
    assert result.exit_code == 2 and "no run could be read" in result.output, result.output
    assert (tmp_path / "empty-site" / "index.html").exists()


# ----------------------------------------------------------------------------- server
def test_server_serves_site_and_try_is_off_without_model(fixture_run, kg_file, tmp_path):
    from library.demo.server import start_in_thread

    build_demo([fixture_run.path], tmp_path / "site", kg_path=kg_file, data_dir=tmp_path / "no-data")
    server = start_in_thread(tmp_path / "site", 0)
    try:
        assert server.server_address[0] == "127.0.0.1"
        status, body = _get(server.url)
        assert status == 200 and b"episode player" in body
        status, body = _get(server.url + "data.json")
        assert status == 200 and json.loads(body)["runs"][0]["run_id"] == "fixture"
        assert json.loads(_get(server.url + "api/status")[1]) == {"try_enabled": False}
        status, body = _post(server.url + "api/try", {"start": "ClockSkew", "chain": ["fixed_by"]})
        assert status == 404 and "--model" in body["error"]
    finally:
        server.shutdown()
        server.server_close()


# ----------------------------------------------------------------------------- try it
def test_question_text_round_trips(tiny_kg, fixture_run, kg_file):
    from library.demo.tryit import TryIt, TryItError, parse_question_text
    from library.questions import question_text

    for start, chain in [("NTPDrift", ["leads_to", "caused_by"]), ("ClockSkew", ["diagnosed_by", "uses_tool"])]:
        text = question_text(tiny_kg, start, chain)
        assert parse_question_text(tiny_kg, text) == (start, chain)
        assert parse_question_text(tiny_kg, "  " + text.lower()) == (start, chain)
    with pytest.raises(TryItError):
        parse_question_text(tiny_kg, "What causes everything?")
    tryit = TryIt(fixture_run.path, kg_path=kg_file)
    q = tryit.build_question("TLSHandshakeError", ["caused_by", "leads_to", "caused_by"])
    assert q.path_star.entities == ["TLSHandshakeError", "CertificateExpired", "HTTP502BadGateway", "ServiceDown"]
    assert q.options[q.answer_star] == tiny_kg.label("ServiceDown") and q.hop_len == 3
    assert tryit.build_question("http 502 bad gateway", ["caused_by"]).path_star.entities[-1] == "ServiceDown"
    with pytest.raises(TryItError, match="distractors"):  # the tiny KG has one cause left to offer
        tryit.build_question("NTPDrift", ["leads_to", "caused_by"])
    with pytest.raises(TryItError, match="no path"):
        tryit.build_question("openssl", ["fixed_by"])
    with pytest.raises(TryItError, match="unknown relation"):
        tryit.build_question("NTPDrift", ["eats"])


def test_try_it_answers_with_the_last_completed_phase_it_saved(tmp_path):
    from library.demo.tryit import final_phase
    from library.runs.folder import RunDir
    from library.runs.reader import RunView

    run = RunDir.create(tmp_path, run_id="r")
    run.write_meta({"phases_completed": ["base", "sft", "rsft"]})
    view = RunView.open(run.path)
    assert final_phase(view) is None  # nothing saved: the base model answers
    (run.path / "adapters" / "sft").mkdir(parents=True)
    (run.path / "adapters" / "sft" / "config.json").write_text("{}")  # a fully fine-tuned SFT model
    assert final_phase(view) == "sft"
    for phase in ("rsft", "grpo"):  # grpo saved but never evaluated (the run stopped): not served
        (run.path / "adapters" / phase).mkdir()
        (run.path / "adapters" / phase / "adapter_config.json").write_text("{}")
    assert final_phase(view) == "rsft" and final_phase(view, "sft") == "sft"
    with pytest.raises(FileNotFoundError, match="phase 'x'"):
        final_phase(view, "x")


CHAIN = ["caused_by", "leads_to", "caused_by"]


def test_try_endpoint_generates_with_the_runs_adapter_and_scores_it(fixture_run, kg_file, tiny_kg, tmp_path):
    """The tiny random model with a LoRA adapter saved in the run folder: the endpoint's
    reward must equal RewardModel.score on the same completion (content is gibberish)."""
    pytest.importorskip("torch")
    pytest.importorskip("peft")
    from peft import LoraConfig, get_peft_model

    from library.demo.server import start_in_thread
    from library.demo.tryit import TryIt, reward_config_from_meta
    from library.model.load import load_model
    from library.scoring.reward import RewardModel

    base, _ = load_model("tiny")
    peft_model = get_peft_model(base, LoraConfig(r=4, lora_alpha=4, target_modules=["q_proj", "v_proj"]))
    peft_model.save_pretrained(str(fixture_run.path / "adapters" / "grpo"))  # the fixture's final phase

    tryit = TryIt(fixture_run.path, kg_path=kg_file, max_new_tokens=24)
    assert tryit.model_spec == "tiny" and tryit.adapter == fixture_run.path / "adapters" / "grpo"
    build_demo([fixture_run.path], tmp_path / "site", kg_path=kg_file, data_dir=tmp_path / "no-data")
    server = start_in_thread(tmp_path / "site", 0, tryit)
    try:
        status = json.loads(_get(server.url + "api/status")[1])
        assert status["try_enabled"] and status["adapter"].endswith("adapters/grpo") and status["phase"] == "grpo"
        assert status["example"] is not None and ["NTPDrift", "NTP drift"] in status["entities"]
        code, out = _post(server.url + "api/try", {"start": "TLSHandshakeError", "chain": CHAIN})
        assert code == 200, out
        model, _ = tryit.load()
        assert type(model).__name__ == "PeftModel"
        q = tryit.build_question("TLSHandshakeError", CHAIN)
        assert out["question"]["question"] == q.question and out["question"]["answer_star"] == q.answer_star
        assert out["question"]["path"] == q.path_star.entities
        assert isinstance(out["completion"], str)
        scored = RewardModel(tiny_kg, reward_config_from_meta(fixture_run.read_meta())).score(q, out["completion"])
        parsed, reward = scored.parsed, scored.reward
        assert out["parsed"] == parsed.model_dump(mode="json")
        expected = {k: v for k, v in reward.model_dump(mode="json").items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
        assert out["reward"] == expected
        assert {"correctness", "path_coverage", "path_reward", "spam_penalty", "total"} <= set(out["reward"])
        assert out["correct"] == (parsed.answer == q.answer_star)
        assert out["correct"] == scored.correct  # the reward's one verdict
        hops = [e["hop"] for e in out["question"]["graph"]["edges"] if e["hop"] is not None]
        assert sorted(hops) == [0, 1, 2]
        # the same question typed in the generator's wording
        code, typed = _post(server.url + "api/try", {"question": q.question})
        assert code == 200 and typed["question"]["id"] == out["question"]["id"]
        assert typed["completion"] == out["completion"]  # greedy decoding
        code, err = _post(server.url + "api/try", {"question": "why is the sky blue"})
        assert code == 400 and "start entity" in err["error"]
    finally:
        server.shutdown()
        server.server_close()


def test_try_reads_the_pipelines_meta_layout(fixture_run, kg_file):
    """library/train/pipeline.py writes model = model_info(...) (spec nested) and one reward config per use."""
    from library.demo.tryit import TryIt, reward_config_from_meta
    from library.scoring.reward import RewardConfig

    meta = fixture_run.read_meta()
    meta["model"] = {"class": "LlamaForCausalLM", "spec": {"spec": "tiny", "kind": "tiny", "name": "tiny-random"}}
    meta["reward"] = {"preset": "paper+edges", "eval": RewardConfig.preset_named("paper").as_dict()}
    fixture_run.write_meta(meta)
    assert TryIt(fixture_run.path, kg_path=kg_file).model_spec == "tiny"
    assert reward_config_from_meta(meta).name == "paper"
    assert reward_config_from_meta({"reward": {"preset": "toy", "edge_verified": False}}).name == "toy"
    assert reward_config_from_meta({}).name == "toy+edges"


def test_the_monitor_chart_reads_the_run(tmp_path):
    """The charts' monitor points: metrics.json's monitor block when the run has one, else the
    monitor recomputed from the rollouts (runs from before the monitor have no block)."""
    from library.config import MonitorSettings
    from library.evaluation.monitor import monitor_run, threshold_ratios

    quick = REPO / "data" / "runs" / "quick"
    run = collect([quick], kg_path=REPO / "data" / "kg.json", data_dir=REPO / "data" / "keyed").runs[0]
    recomputed = monitor_run(quick, data_dir=REPO / "data" / "keyed", kg_path=REPO / "data" / "kg.json")["phases"]
    expected = [{"phase": phase, "step": p["step"], "status": p["status"], "rule": p["rule"],
                 "ratios": threshold_ratios(p, MonitorSettings())}
                for phase in ("rsft", "grpo") for p in recomputed[phase]["steps"]]
    assert run["monitor"] == expected
    grpo_steps = json.loads((quick / "meta.json").read_text())["config"]["grpo"]["max_steps"]
    assert [(p["phase"], p["step"]) for p in run["monitor"]] == (
        [("rsft", 0)] + [("grpo", step) for step in range(1, grpo_steps + 1)])

    # a run that logged its monitor is shown as logged (and with its own thresholds)
    logged = RunDir.create(tmp_path, "logged")
    logged.write_meta({"config": {"monitor": {"max_spam_rate": 0.5}}})
    step = {"step": 1, "status": "warning", "rule": "one signal over its threshold: spam_rate 0.6 > 0.5",
            "spam_rate": 0.6, "option_listing_rate": 0.0, "coverage_without_correctness_rate": 0.0,
            "false_edge_rise": None, "trace_chars_z": None, "kl": 0.1}
    logged.write_metrics({"monitor": {"grpo": {"status": "warning", "stop_step": None, "steps": [step]}}})
    shown = collect([logged.path], kg_path=REPO / "data" / "kg.json", data_dir=None).runs[0]["monitor"]
    assert shown == [{"phase": "grpo", "step": 1, "status": "warning", "rule": step["rule"],
                      "ratios": {"spam_rate": 1.2, "option_listing_rate": 0.0,
                                 "coverage_without_correctness_rate": 0.0, "kl": 0.2}}]


def test_the_page_headline_counts_grounded_right_answers():
    """The phase table shows right answers whose TRACE states the gold path (metrics.json
    ``grounded``) beside accuracy: on the committed food run, 117 of GRPO's 130."""
    site = collect([REPO / "data" / "runs" / "food"])
    headline = site.runs[0]["headline"]["eval"]
    assert (headline["grpo"]["correct"], headline["grpo"]["grounded"]) == (130, 117)
    assert headline["base"]["grounded"] == 0


def test_the_page_says_what_each_rl_phase_repaired(fixture_run, kg_file, tmp_path):
    """Per RL phase, the phase before's wrong answers by why they were wrong and how many it made
    right, as ``kgr diagnose`` counts them: on the committed keyed reference, RSFT (3- and 4-hop
    prompts) made 21 of SFT's 28 relation errors right and 7 of its 26 fact errors; a run whose
    questions are not all found gives none and still builds."""
    from library.evaluation.diagnosis import diagnose_run

    site = collect([REPO / "data" / "runs" / "reference"])
    repairs = site.runs[0]["repairs"]
    assert [(b["before"], b["phase"]) for b in repairs] == [("sft", "rsft"), ("rsft", "grpo")]
    report = diagnose_run(REPO / "data" / "runs" / "reference")
    assert repairs[0]["repaired"] == report["rsft"]["from"]["repaired"] and repairs[0]["wrong"]["fact"] == 26
    assert repairs[0]["repaired"]["fact"] == 7 and repairs[0]["repaired"]["relation"] == 21
    assert repairs[0]["broken"] == report["rsft"]["from"]["broken"]
    import shutil

    from library.runs.reader import RUN_QUESTIONS

    gone = tmp_path / "no-questions"
    shutil.copytree(fixture_run.path, gone)
    (gone / RUN_QUESTIONS).unlink()
    fixture = collect([gone], kg_path=kg_file, data_dir=tmp_path / "no-data").runs[0]
    assert fixture["repairs"] == [] and fixture["n_episodes"] > 0


def test_the_page_shows_eval_far_apart_where_a_run_measured_it(tmp_path):
    """metrics.json's eval_far (one hop past eval) reaches the page's headline data per phase,
    beside eval, never mixed into it; a run without it shows none."""
    from library.runs.folder import RunDir

    run = RunDir.create(tmp_path, "far")
    run.write_meta({"config": {}})
    block = {"n": 150, "correct": 60, "accuracy": 0.4, "accuracy_ci": [0.33, 0.48], "valid_format_rate": 0.9,
             "path_coverage": 0.5, "spam_rate": 0.0, "reward": {"total": 0.1}, "grounded": {"correct": 50}}
    run.write_metrics({"eval": {"sft": {**block, "accuracy": 0.8}}, "eval_far": {"sft": block}})
    headline = collect([run.path], kg_path=REPO / "data" / "kg.json", data_dir=None).runs[0]["headline"]
    assert headline["eval_far"]["sft"]["accuracy"] == 0.4 and headline["eval_far"]["sft"]["grounded"] == 50
    assert headline["eval"]["sft"]["accuracy"] == 0.8
    food = collect([REPO / "data" / "runs" / "food"]).runs[0]["headline"]
    assert "eval_far" not in food
