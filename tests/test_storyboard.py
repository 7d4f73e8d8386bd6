"""Storyboard loading, validation errors with lines, templates, and the number audit.

No rendering here: these run in a second or two. The number audit resolves the shipped
storyboards against the synthetic fixture run and checks that every number that would appear
on screen or in the narration is one of the values logged in that run.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from library.errors import DataFileError
from library.scoring.matching import extract_claims
from scenes.query import MADE_ANSWERS, made_answer
from scenes.resolve import RunData, resolve_shots
from scenes.storyboard import load_storyboard, loads_storyboard, render_text

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def run_with_kg(fixture_run, tiny_kg_dict) -> Path:
    # the fixture run is built over tests/conftest.py's tiny KG; the per-run kg.json override
    # lets storyboards read it without touching data/kg.json
    (fixture_run.path / "kg.json").write_text(json.dumps(tiny_kg_dict))
    return fixture_run.path


HEADER = "title: t\nformat: short\nrun: RUN\n"


def _shots(body: str) -> str:
    return HEADER + "shots:\n" + body


BAD = {
    # name: (yaml, expected line, fragment of the message)
    "unknown scene": (_shots("  - scene: title\n    duration: 2\n  - scene: pie_chart\n    duration: 2\n"), 7, "unknown scene type 'pie_chart'"),
    "bad template syntax": (_shots("  - scene: title\n    params: {title: x}\n    duration: 2\n    caption: \"{{ metrics.eval[ }}\"\n"), 8, "bad template"),
    "too long a short": (_shots("".join(f"  - scene: title\n    params: {{title: x}}\n    duration: 20\n" for _ in range(4))), 14, "at most 60 s"),
    "narration without text": (_shots("  - scene: title\n    params: {title: x}\n    duration: narration\n"), 5, "needs a narration"),
    "unknown key": (_shots("  - scene: title\n    duraton: 2\n"), 6, "duraton"),
    "bad yaml": (HEADER + "shots: [\n  - a\n", 5, "invalid YAML"),
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_bad_storyboards_name_file_and_line(tmp_path, name):
    text, line, fragment = BAD[name]
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(DataFileError) as err:
        load_storyboard(path)
    assert err.value.path == str(path)
    assert err.value.line == line, str(err.value)
    assert fragment in str(err.value)


RESOLVE_BAD = {
    # errors that need the run data: raised while resolving, still at the right line
    "missing episode": ("  - scene: kg_path\n    duration: 2\n    params:\n      episode: {id: eval-9999, phase: grpo}\n", 8, "no eval episode 'eval-9999'"),
    "undefined template variable": ("  - scene: title\n    params: {title: x}\n    duration: 2\n    caption: \"{{ metrics.eval.grpo.acuracy | pct }}\"\n", 8, "acuracy"),
    "phase not in run": ("  - scene: reward_bars\n    duration: 2\n    params:\n      episode: {query: best, phase: ppo}\n", 8, "phase 'ppo'"),
    "no improved question": ("  - scene: kg_path\n    duration: 2\n    params:\n      episode: {query: improved, from: grpo, to: base}\n", 8, "no eval question was wrong in grpo"),
}


@pytest.mark.parametrize("name", sorted(RESOLVE_BAD))
def test_resolution_errors_name_the_line(tmp_path, run_with_kg, name):
    body, line, fragment = RESOLVE_BAD[name]
    path = tmp_path / "bad.yaml"
    path.write_text(_shots(body).replace("RUN", str(run_with_kg)))
    sb = load_storyboard(path)
    with pytest.raises(DataFileError) as err:
        resolve_shots(sb, RunData.load(run_with_kg))
    assert (err.value.path, err.value.line) == (str(path), line), str(err.value)
    assert fragment in str(err.value)


def test_shipped_storyboards_load():
    for name in ("short", "explainer"):
        sb = load_storyboard(REPO / "storyboards" / f"{name}.yaml")
        assert sb.shots and all(s.line > 0 for s in sb.shots)
    assert load_storyboard(REPO / "storyboards" / "short.yaml").size == (1080, 1920)
    assert load_storyboard(REPO / "storyboards" / "explainer.yaml").size == (1920, 1080)


def test_filters():
    ctx = {"m": {"acc": 0.4123, "ci": [0.351, 0.462], "d": -0.1}}
    out = render_text("{{ m.acc | pct }}|{{ m.acc | pct1 }}|{{ m.ci | ci }}|{{ m.d | signed }}|{{ 3.0 | num }}|{{ 'grpo' | phase }}", ctx, where="t")
    assert out == "41%|41.2%|95% CI 35–46%|-0.10|3|GRPO"


def test_improved_query_picks_longest_hop_then_id(run_with_kg):
    sb = loads_storyboard(_shots("  - scene: kg_path\n    duration: 2\n    params:\n      episode: {query: improved, from: base, to: grpo}\n"
                                 "  - scene: kg_path\n    duration: 2\n    params:\n      episode: {query: improved, prefer: shortest_hop}\n"
                                 ).replace("RUN", str(run_with_kg)))
    a, b = resolve_shots(sb, RunData.load(run_with_kg))
    # fixture: all three eval questions are wrong in base and right in grpo; eval-0002 is the 5-hop one
    assert a.ex_id == "eval-0002" and b.ex_id == "eval-0001"
    assert a.payload["path"][0] == "NTPDrift" and a.payload["correct"] is True
    assert len(a.payload["nodes"]) <= 12


def test_kg_path_marks_wrong_claims(run_with_kg):
    # in SFT the fixture's eval-0001 trace claims "TLS handshake error leads to service down",
    # which is not a KG edge: it must come back as a wrong edge, and both ends as nodes
    sb = loads_storyboard(_shots("  - scene: kg_path\n    duration: 2\n    params:\n      episode: {id: eval-0001, phase: sft}\n").replace("RUN", str(run_with_kg)))
    (shot,) = resolve_shots(sb, RunData.load(run_with_kg))
    assert shot.payload["wrong_edges"] == [{"src": "TLSHandshakeError", "rel_label": "leads to", "dst": "ServiceDown"}]
    assert shot.payload["correct"] is True and shot.payload["phase_label"] == "SFT"


# --------------------------------------------------------------------------- selection queries


def _set_answers(run: Path, kg, phase: str, answers: dict[str, tuple[str, str]]) -> None:
    """Rewrite ``phase``'s eval answers: ``{ex_id: (letter, trace style)}`` with the fixture's
    own completion writer (styles: full = the gold chain, partial = one gold edge and a false
    one, none = no claim at all)."""
    from fixture_run import _completion

    questions = RunData.load(run).questions()
    path = run / "episodes.jsonl"
    lines = []
    for line in path.read_text().splitlines():
        ep = json.loads(line)
        if ep["phase"] == phase and ep["split"] == "eval" and ep["ex_id"] in answers:
            ep["completion"], ep["parsed"], ep["reward"], ep["grounded"] = _completion(kg, questions[ep["ex_id"]],
                                                                                       *answers[ep["ex_id"]])
            ep["correct"] = answers[ep["ex_id"]][0] == ep["answer_star"]
        lines.append(json.dumps(ep))
    path.write_text("\n".join(lines) + "\n")


def _resolve_one(run: Path, episode: str):
    sb = loads_storyboard(_shots(f"  - scene: kg_path\n    duration: 2\n    params:\n      episode: {episode}\n").replace("RUN", str(run)))
    (shot,) = resolve_shots(sb, RunData.load(run))
    return shot


def test_an_ungrounded_success_is_never_the_hero(run_with_kg, tiny_kg):
    # GRPO gets the 5-hop eval-0002 right with a partial trace: a right letter, not the path
    _set_answers(run_with_kg, tiny_kg, "grpo", {"eval-0002": ("A", "partial")})
    data = RunData.load(run_with_kg)
    lucky = data.eval_episode("eval-0002", "grpo")
    assert lucky.correct and not lucky.grounded
    # the grounded query skips it: the longest remaining grounded improvement (4 hops, smallest id)
    hero = _resolve_one(run_with_kg, "{query: [improved, grounded], from: base, to: grpo}")
    assert hero.ex_id == "eval-0001" and hero.payload["correct"] is True
    assert _resolve_one(run_with_kg, "{query: [correct, grounded]}").ex_id == "eval-0001"
    # a query that does not say grounded refuses to show the lucky guess, naming it and the run
    with pytest.raises(DataFileError) as err:
        _resolve_one(run_with_kg, "{query: improved}")
    assert "eval-0002" in str(err.value) and "not grounded" in str(err.value) and "fixture" in str(err.value)
    assert err.value.line == 8
    # ...unless the storyboard says, explicitly, that it shows a guess
    assert _resolve_one(run_with_kg, "{query: improved, allow_ungrounded: true}").ex_id == "eval-0002"
    # the shipped Short's hero follows the same rule
    shots = resolve_shots(load_storyboard(REPO / "storyboards" / "short.yaml"), data)
    heroes = {s.ex_id for s in shots if s.ex_id}
    assert heroes == {"eval-0001"}
    for s in shots:
        for e in s.episodes:
            if e["role"] == "selected":
                ep = data.eval_episode(e["ex_id"], e["phase"])
                assert not ep.correct or ep.grounded


def test_declared_fallback_shows_the_best_grounded_attempt_and_says_it_is_wrong(run_with_kg, tiny_kg):
    # no grounded success left in GRPO: eval-0001 walks the gold chain but answers B (wrong),
    # eval-0002 and eval-0003 are right without the path
    _set_answers(run_with_kg, tiny_kg, "grpo", {"eval-0001": ("B", "full"), "eval-0002": ("A", "partial"),
                                                "eval-0003": ("A", "none")})
    data = RunData.load(run_with_kg)
    with pytest.raises(DataFileError) as err:  # no fallback declared: a clear error, query and run named
        _resolve_one(run_with_kg, "{query: [improved, grounded]}")
    msg = str(err.value)
    assert "improved + grounded" in msg and "run fixture" in msg and "no fallback" in msg
    with pytest.raises(DataFileError) as err:  # a fallback that finds nothing: both are named
        _resolve_one(run_with_kg, "{query: [improved, grounded], fallback: {query: [correct, grounded]}}")
    assert "improved + grounded" in str(err.value) and "its fallback found nothing either" in str(err.value)
    assert "correct + grounded" in str(err.value) and err.value.line == 8
    shot = _resolve_one(run_with_kg, "{query: [improved, grounded], fallback: {query: grounded, prefer: reward}}")
    assert shot.ex_id == "eval-0001" and shot.payload["correct"] is False
    assert shot.selection == {"query": ["grounded"], "fallback": True}
    # the Short's own fallback: the caption and narration say the attempt is wrong
    sb = load_storyboard(REPO / "storyboards" / "short.yaml")
    kg_shot = next(s for s in resolve_shots(sb, data) if s.scene == "kg_path")
    assert kg_shot.ex_id == "eval-0001"
    assert kg_shot.caption.startswith("Best reasoned attempt.") and "✗ wrong" in kg_shot.caption and "✓" not in kg_shot.caption
    assert "which is wrong" in kg_shot.narration
    # failed_honestly: wrong, well-formed, only KG edges claimed (eval-0001 here; base's bare
    # guesses claim nothing and SFT's partial traces claim a false edge)
    assert _resolve_one(run_with_kg, "{query: failed_honestly}").ex_id == "eval-0001"
    with pytest.raises(DataFileError, match="no eval question failed honestly in sft"):
        _resolve_one(run_with_kg, "{query: failed_honestly, phase: sft}")


def test_contradictory_or_unknown_queries_fail_at_their_line(run_with_kg):
    for spec, fragment in [("{query: [improved, failed_honestly]}", "contradicts itself"),
                           ("{query: [grounded, lucky]}", "unknown episode query")]:
        with pytest.raises(DataFileError) as err:
            _resolve_one(run_with_kg, spec)
        assert fragment in str(err.value) and err.value.line == 8


def test_manifest_entries_name_every_shown_episode(run_with_kg):
    sb = load_storyboard(REPO / "storyboards" / "short.yaml")
    entries = [s.manifest_entry() for s in resolve_shots(sb, RunData.load(run_with_kg))]
    assert [e["scene"] for e in entries] == SHORT_SCENES
    assert entries[0]["episodes"] == [] and "selection" not in entries[0]
    hero = {"phase": "grpo", "ex_id": "eval-0002", "role": "selected"}
    before = {"phase": "base", "ex_id": "eval-0002", "role": "before"}
    assert entries[1]["episodes"] == [hero, before]
    assert entries[1]["selection"] == {"query": ["improved", "grounded"], "fallback": False}
    # before/after: every phase's answer it draws
    ba = entries[SHORT_SCENES.index("before_after")]
    assert {(e["phase"], e["ex_id"]) for e in ba["episodes"]} == {(p, "eval-0002") for p in ("base", "sft", "rsft", "grpo")}
    # the curve and the distribution trap show run-wide logs, no episode
    assert all(e["episodes"] == [] for e in entries if e["scene"] in ("training_curves", "distribution_trap"))


#: the shipped Short over the fixture run, which logs an SFT curve and the distribution experiment
SHORT_SCENES = ["title", "kg_path", "reward_bars", "training_curves", "before_after", "distribution_trap",
                "results_table", "title"]


def test_the_short_shows_learning_and_the_distribution_trap_only_for_runs_that_logged_them(run_with_kg):
    sb = load_storyboard(REPO / "storyboards" / "short.yaml")
    data = RunData.load(run_with_kg)
    shots = {s.scene: s for s in resolve_shots(sb, data)}
    assert list(shots) == list(dict.fromkeys(SHORT_SCENES))
    # learning over training: the SFT loss as logged, step by step (smoothed, never invented)
    curve = shots["training_curves"].payload
    logged = [pt["loss"] for pt in data.metrics["curves"]["sft"]]
    (series,) = curve["series"]
    assert [x for x, _ in series["points"]] == [pt["step"] for pt in data.metrics["curves"]["sft"]]
    assert min(logged) <= min(y for _, y in series["points"]) <= max(y for _, y in series["points"]) <= max(logged)
    assert str(len(logged)) in shots["training_curves"].narration
    # the distribution trap: one bar per logged condition with its interval and n, and the
    # caption's figures are those conditions' own
    trap = shots["distribution_trap"].payload
    dist = data.metrics["distribution"]
    assert [(b["value"], [b["lo"], b["hi"]], b["n"]) for b in trap["bars"]] == \
        [(d["accuracy"], d["accuracy_ci"], d["n"]) for d in dist.values()]
    for name, d in dist.items():
        assert f"{name}: {d['accuracy'] * 100:.0f}%, n = {d['n']}" in shots["distribution_trap"].caption
    # the results table: every accuracy with its interval, and n
    table = shots["results_table"].payload
    final = data.metrics["eval"]["grpo"]
    lo, hi = final["accuracy_ci"]
    assert table["rows"][-1][1] == f"{final['accuracy'] * 100:.0f}% ({lo * 100:.0f}–{hi * 100:.0f}%)"
    assert f"n = {final['n']}" in table["note"] and "95%" in table["note"]

    # a run without the experiment, or without an SFT curve: those shots are left out, the rest stays
    del data.metrics["distribution"]
    assert [s.scene for s in resolve_shots(sb, data)] == [x for x in SHORT_SCENES if x != "distribution_trap"]
    del data.metrics["curves"]["sft"]
    assert [s.scene for s in resolve_shots(sb, data)] == [x for x in SHORT_SCENES
                                                           if x not in ("distribution_trap", "training_curves")]
    del data.metrics["curves"]
    assert "training_curves" not in [s.scene for s in resolve_shots(sb, data)]


def test_the_short_over_the_committed_run_has_its_learning_curve_and_no_trap():
    # data/runs/quick did not run the distribution experiment: its Short has no trap shot
    sb = load_storyboard(REPO / "storyboards" / "short.yaml")
    data = RunData.load(REPO / "data" / "runs" / "quick", kg_default=REPO / sb.kg, questions_default=REPO / sb.questions)
    assert "distribution" not in data.metrics
    assert [s.scene for s in resolve_shots(sb, data)] == [x for x in SHORT_SCENES if x != "distribution_trap"]


def test_the_short_over_the_reference_run_shows_its_distribution_experiment():
    # data/runs/reference ran the easy-vs-hard experiment: its Short has every shot, trap included
    sb = load_storyboard(REPO / "storyboards" / "short.yaml")
    assert sb.run == "data/runs/reference"  # the storyboards' default run
    data = RunData.load(REPO / sb.run, kg_default=REPO / sb.kg, questions_default=REPO / sb.questions)
    assert set(data.metrics["distribution"]) == {"easy", "hard"}
    assert [s.scene for s in resolve_shots(sb, data)] == SHORT_SCENES
    # it trained on data/keyed: its questions are read from there, in the wording it was asked in
    from library.questions.wording import step_order_of

    assert data.questions_file() == Path("data/keyed/eval.jsonl")
    assert step_order_of(next(iter(data.questions().values())).question) == "keyed"


def test_training_curve_smoothing_stays_inside_each_phase(run_with_kg):
    data = RunData.load(run_with_kg)
    data.metrics["curves"]["rsft"] = [{"step": s, "loss": 10.0} for s in (1, 2, 3)]
    text = _shots("  - scene: training_curves\n    duration: 2\n    params:\n      series:\n"
                  "        - {metric: loss, phases: [sft, rsft], smooth: SMOOTH}\n").replace("RUN", str(run_with_kg))
    (shot,) = resolve_shots(loads_storyboard(text.replace("SMOOTH", "3")), data)
    (series,) = shot.payload["series"]
    sft = [pt["loss"] for pt in data.metrics["curves"]["sft"]]
    ys = [y for _, y in series["points"]]
    # SFT's points are means of SFT's own (never pulled up by RSFT's 10s); RSFT's stay 10
    assert ys[:len(sft)] == pytest.approx([sum(sft[max(0, i - 1):i + 2]) / len(sft[max(0, i - 1):i + 2]) for i in range(len(sft))])
    assert ys[len(sft):] == [10.0, 10.0, 10.0]
    assert series["name"] == "loss (moving average)"
    with pytest.raises(DataFileError, match="smooth must be a whole number"):
        resolve_shots(loads_storyboard(text.replace("SMOOTH", "0")), data)


def test_parse_claims_reads_the_trace_format(tiny_kg):
    claims = extract_claims(tiny_kg, "NTP drift leads to TLS handshake error; TLS handshake error is caused by clock skew.")
    assert claims == [("NTPDrift", "leads_to", "TLSHandshakeError"), ("TLSHandshakeError", "caused_by", "ClockSkew")]


# --------------------------------------------------------------------------- number audit

NUMBER = re.compile(r"\d+(?:\.\d+)?")
#: The confidence level printed by the `ci` filter and the results table: a property of the
#: interval method (95% Wilson, docs/CONTRACTS.md), not a measured value.
CONSTANTS = {"95"}


def _formats(v: float) -> set[str]:
    out = {str(v), f"{v:.2f}", f"{abs(v):.2f}", f"{v * 100:.0f}", f"{v * 100:.1f}", f"{abs(v) * 100:.0f}"}
    if float(v).is_integer():
        out |= {str(int(v)), str(abs(int(v)))}
    return out


def allowed_numbers(data: RunData, shown: tuple[str, ...] = ()) -> set[str]:
    """Every number spelling the templates can produce from this run's logs and inputs
    (``shown``: the questions the shots select, whose made answers they may score)."""
    allowed: set[str] = set(CONSTANTS)

    def walk(obj):
        if isinstance(obj, bool):
            return
        if isinstance(obj, (int, float)):
            allowed.update(_formats(float(obj)))
        elif isinstance(obj, str):
            allowed.update(NUMBER.findall(obj))
        elif isinstance(obj, dict):
            for k, v in obj.items():
                walk(k)  # by_hop keys ("4", "5") become "4-hop" headers
                walk(v)
        elif isinstance(obj, list):
            allowed.add(str(len(obj)))  # `| length` of a logged list
            for v in obj:
                walk(v)

    walk(data.metrics)
    walk(data.meta)
    walk(data.run_id)
    # the episodes' figures; not the character offsets of their entity spans (where a name stands
    # in the text is no figure a template shows) nor the steps, which are trace_text's own words
    walk([e.model_dump(mode="json", exclude={"parsed": {"spans", "steps"}}) for e in data.episodes])
    walk([q.model_dump(mode="json") for q in data.questions().values()])
    walk([e.label for e in data.kg.entities.values()])
    walk([len(data.kg.entities), len(data.kg.edges), len(data.kg.relations)])  # kg.* template counts
    ctx_kg = data.template_context()["kg"]
    walk([ctx_kg.groups, ctx_kg.functional, ctx_kg.max_fanout])  # kg.* fan-out figures
    walk(data.data_stats)  # stats.* (kgr data's stats.json), where the data folder has one
    if (data.meta.get("model") or {}).get("params"):
        allowed.add(str(round(data.meta["model"]["params"] / 1e6)))  # "135 million parameters"
    # the made answers' rewards (reference and hacks), scored by the run's evaluation reward
    for ex_id in shown:
        for name in MADE_ANSWERS:
            walk(made_answer(data, data.questions()[ex_id], name)[1].reward.model_dump(mode="json"))
    return allowed


def audit(texts: list[str], allowed: set[str]) -> list[str]:
    return [f"{n!r} in {t!r}" for t in texts for n in NUMBER.findall(t) if n not in allowed]


@pytest.mark.parametrize("name", ["short", "explainer"])
def test_every_number_in_shipped_storyboards_is_logged(run_with_kg, name):
    sb = load_storyboard(REPO / "storyboards" / f"{name}.yaml")
    data = RunData.load(run_with_kg)
    shots = resolve_shots(sb, data)
    texts = [t for s in shots for t in s.texts]
    assert any(NUMBER.search(t) for t in texts)  # the audit has something to check
    # a shot that reads another run (`run:`) is audited against that run, and the storyboard's
    # (its templates may read `main`)
    own = [s for s in shots if s.run is None]
    assert audit([t for s in own for t in s.texts], allowed_numbers(data, tuple({s.ex_id for s in own if s.ex_id}))) == []
    for s in shots:
        if s.run is not None:
            other = RunData.load(REPO / s.run)
            allowed = allowed_numbers(other, (s.ex_id,) if s.ex_id else ()) | allowed_numbers(data)
            assert audit(s.texts, allowed) == [], s.index + 1


def test_number_audit_catches_a_typed_number(run_with_kg):
    # the audit must be able to fail: a hand-typed figure is not in the logs
    sb = loads_storyboard(_shots("  - scene: title\n    params: {title: \"Accuracy 88%\"}\n    duration: 2\n").replace("RUN", str(run_with_kg)))
    data = RunData.load(run_with_kg)
    texts = [t for s in resolve_shots(sb, data) for t in s.texts]
    assert audit(texts, allowed_numbers(data)) == ["'88' in 'Accuracy 88%'"]


def test_when_skips_shots_for_sections_a_run_lacks(run_with_kg):
    text = _shots("  - scene: title\n    params: {title: a}\n    duration: 2\n"
                  "  - scene: distribution_trap\n    when: metrics.distribution is defined\n    duration: 2\n"
                  ).replace("RUN", str(run_with_kg))
    data = RunData.load(run_with_kg)
    assert [s.scene for s in resolve_shots(loads_storyboard(text), data)] == ["title", "distribution_trap"]
    del data.metrics["distribution"]  # an older run without the easy-vs-hard experiment
    assert [s.scene for s in resolve_shots(loads_storyboard(text), data)] == ["title"]
    with pytest.raises(DataFileError) as err:  # an unknown jinja test fails at load time
        loads_storyboard(text.replace("is defined", "is definedd"), "bad.yaml")
    assert err.value.line == 9 and "definedd" in str(err.value)
    undefined = loads_storyboard(text.replace("metrics.distribution is defined", "metrics.distribution.hard.n > 2"), "u.yaml")
    with pytest.raises(DataFileError) as err:  # ...and a strict-undefined name at resolve time
        resolve_shots(undefined, data)
    assert err.value.line == 9


def test_doctests_of_the_video_modules():
    # pytest collects doctests only under tests/ and library/ (pyproject); run the video
    # side's here so its examples stay true
    import doctest

    import scenes.assemble
    import scenes.build
    import scenes.builders
    import scenes.resolve
    import scenes.storyboard

    for mod in (scenes.storyboard, scenes.resolve, scenes.builders, scenes.assemble, scenes.build):
        result = doctest.testmod(mod)
        assert result.failed == 0 and result.attempted > 0, mod.__name__


def test_the_short_credits_each_phase_with_what_it_added_on_the_run(run_with_kg):
    """The end card and the narration come from paired differences on the run's questions: a
    phase whose interval includes 0 is told as adding nothing measurable (the fixture's GRPO:
    3 of 3 against RSFT's 2 of 3, n = 3), and the reference run's GRPO likewise; its RSFT gain is
    stated with its sign and size (+6 points, interval [+3, +10])."""
    sb = load_storyboard(REPO / "storyboards" / "short.yaml")
    fixture = resolve_shots(sb, RunData.load(run_with_kg))
    assert "GRPO: nothing measurable." in fixture[-1].caption
    assert "GRPO added nothing measurable" in fixture[-1].narration
    assert "graph is the reward model" not in " ".join(s.narration + s.caption for s in fixture).lower()
    reference = RunData.load(REPO / sb.run, kg_default=REPO / sb.kg, questions_default=REPO / sb.questions)
    end = resolve_shots(sb, reference)[-1]
    assert end.caption == "SFT +80, RSFT +10 points. GRPO: nothing measurable."
    assert [s["measurable"] for s in reference.steps()] == [True, True, False]


def test_the_selection_experiment_is_told_only_where_the_run_measured_it():
    """A run with the RSFT selection experiment (the committed food run) gets the explainer's shot
    "What the graph's reward adds" and a line on the Short's end card, numbers from its
    metrics.json, said to be unmeasurable when the interval includes 0; a run without it (the
    reference run) gets neither."""
    import json

    food = RunData.load(REPO / "data" / "runs" / "food", kg_default=REPO / "data" / "food" / "kg.json",
                        questions_default=REPO / "data" / "food" / "eval.jsonl")
    over = json.loads((REPO / "data" / "runs" / "food" / "metrics.json").read_text())["selection"]["over_seeds"]
    short = load_storyboard(REPO / "storyboards" / "short.yaml")
    footer = resolve_shots(short, food)[-1].payload["footer"]
    measurable = over["ci"][0] > 0 or over["ci"][1] < 0
    assert footer.startswith(f"RSFT data by right answers only, not the path: {100 * over['diff']:+.0f} pts"
                             + ("" if measurable else " (not measurable)") + ", 3 seeds.")
    explainer = load_storyboard(REPO / "storyboards" / "explainer.yaml")
    shot = [s for s in resolve_shots(explainer, food) if s.chapter == "What the graph's reward adds"]
    assert len(shot) == 1 and shot[0].scene == "intervals"
    # a bar per seed, then the seeds pooled, each with its paired interval
    bars = shot[0].payload["bars"]
    assert [b["label"] for b in bars] == [f"seed {k}" for k in over_seeds_keys(food)] + ["3 seeds pooled"]
    # logged as right-answers-only minus the path reward; drawn as what the path reward added
    assert bars[-1]["text"] == f"{-100 * over['diff']:+.1f}" and bars[-1]["hi"] == pytest.approx(-100 * over["ci"][0])
    assert ("within noise" in shot[0].narration) == (not measurable)
    reference = RunData.load(REPO / explainer.run, kg_default=REPO / explainer.kg,
                             questions_default=REPO / explainer.questions)
    assert not [s for s in resolve_shots(explainer, reference) if s.chapter == "What the graph's reward adds"]
    assert "RSFT data" not in resolve_shots(short, reference)[-1].payload["footer"]


def over_seeds_keys(data: RunData) -> list[str]:
    return list(data.metrics["selection"]["vs_reward_by_seed"])


@pytest.mark.parametrize("run", ["reference", "quick", "food"])
def test_the_explainer_runs_six_to_ten_minutes_with_its_sections(run, tmp_path):
    """The explainer teaches the method: on each committed run it lasts 6-10 minutes (narration
    timed by the real voice where espeak-ng is installed, else by its words-per-minute estimate)
    and has its chapters: the worked example, unique answers, the reward and its hacks, the
    phases, the monitor, a branching graph, the caveats."""
    from scenes.narration import engine_available, estimate_seconds, synthesize

    sb = load_storyboard(REPO / "storyboards" / "explainer.yaml")
    data = RunData.load(REPO / "data" / "runs" / run, kg_default=REPO / sb.kg, questions_default=REPO / sb.questions)
    shots = resolve_shots(sb, data)
    voice = sb.voice.model_dump()
    voiced = engine_available(voice["engine"])
    seconds = 0.0
    for s in shots:
        if s.duration is not None:  # a chapter title: its fixed seconds, no narration
            assert not s.narration.strip() and s.duration <= 3, (run, s.index + 1)
            seconds += s.duration
            continue
        said = (synthesize(s.narration, tmp_path, engine=voice["engine"], voice=voice.get("voice"), speed=voice["speed"]).seconds
                if voiced else estimate_seconds(s.narration, voice["speed"]))
        seconds += s.final_duration(said)
    assert 6 * 60 <= seconds <= 10 * 60, (run, seconds)
    chapters = [s.chapter for s in shots if s.chapter]
    for chapter in ("From graph to question", "Unique answers, no leaks", "The reward, term by term",
                    "Can the reward be gamed?", "The training phases", "The hacking monitor",
                    "When the graph branches", "What each phase added", "Caveats"):
        assert chapter in chapters, (run, chapter)
    # the worked example walks the hero question's gold path hop by hop, in the graph's words
    (example,) = [s for s in shots if s.chapter == "From graph to question"]
    q = data.questions()[example.ex_id]
    for e in q.path_star.edges:
        assert f"{data.kg.label(e.src)}: it {data.kg.relation_label(e.rel)} {data.kg.label(e.dst)}" in example.narration
    # the branching section reads this run's graph: functional here, branching on food
    (branch,) = [s for s in shots if s.chapter == "When the graph branches"]
    assert ("every hop is unique" in branch.narration) == (run != "food")
    # ...and on a functional graph draws a branching TRACE from the food run, saying so
    if run != "food":
        assert branch.run == "data/runs/food" and "From run food" in branch.caption
        assert branch.payload["branch_edges"], "the food run's answer carried no branch"
    else:
        assert branch.run is None
    # every section has a picture: text cards only as chapter titles
    assert all(s.scene != "title" or s.duration == 3 for s in shots)


def test_a_made_answer_is_scored_by_the_runs_evaluation_reward(tmp_path):
    """``reward_bars`` with ``answer:`` shows a completion made for the selected question (the
    reference, or a hack from library/scoring/hacks.py), scored as the run's evaluation scored
    its answers; the hacked ones score below the honest reference on the committed run; an
    unknown name fails at its line."""
    from library.questions.wording import reference_completion
    from library.scoring.hacks import HACKS
    from library.scoring.reward import RewardModel

    run = REPO / "data" / "runs" / "reference"
    body = ("  - scene: reward_bars\n    params: {episode: {id: eval-0001, phase: grpo}, answer: NAME}\n"
            "    duration: 2\n    caption: \"{{ made.NAME.reward.total }} {{ made.reference.reward.total }}\"\n")
    data = RunData.load(run)
    preset = data.config["eval"]["reward_preset"]
    q = data.questions()["eval-0001"]
    honest = RewardModel.from_preset(data.kg, preset).score(q, reference_completion(q))
    for name, make in HACKS.items():
        sb = loads_storyboard(_shots(body.replace("NAME", name)).replace("RUN", str(run)))
        (shot,) = resolve_shots(sb, data)
        scored = RewardModel.from_preset(data.kg, preset).score(q, make(data.kg, q))
        assert shot.payload["total"] == pytest.approx(scored.reward.total)
        assert shot.caption == f"{scored.reward.total} {honest.reward.total}"
        assert scored.reward.total < honest.reward.total, name
    bad = loads_storyboard(_shots(body.replace("answer: NAME", "answer: nope").replace("made.NAME", "made.reference"))
                           .replace("RUN", str(run)))
    with pytest.raises(DataFileError, match="unknown made answer 'nope'") as exc:
        resolve_shots(bad, data)
    assert exc.value.line == 5
