"""The demo page in headless Debian chromium: `kgr serve` on a free loopback port, step through
episodes, switch phase, check the DOM against the run's numbers, use Try it, take screenshots.

Screenshots go to the test's tmp folder, or to $KGR_DEMO_SCREENSHOTS when set (to look at them).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import REPO, TINY_KG
from library.contracts import PHASES
from library.demo.site import build_demo

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--no-first-run", "--disable-sync", "--disable-quic"]

REWARD_COMPONENTS = ("correctness", "path_coverage", "path_reward", "edge_reward", "spam_penalty", "total")

pytestmark = [pytest.mark.slow]


def _start_server(site: Path, run: Path | None, kg: Path) -> tuple[subprocess.Popen, str]:
    cmd = [sys.executable, "-m", "library.cli", "serve", "--dir", str(site), "--port", "0", "--kg", str(kg)]
    if run is not None:
        cmd += ["--model", str(run), "--max-new-tokens", "24"]
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line and proc.poll() is not None:
            break
        m = re.search(r"Serving (http://127\.0\.0\.1:\d+/)", line)
        if m:
            return proc, m.group(1)
    proc.kill()
    raise AssertionError(f"kgr serve did not start: {proc.stdout.read()}")


def _open_chromium(playwright, tmp_path: Path):
    """Debian chromium, headless, with a profile in the test's tmp folder: (context, page)."""
    ctx = playwright.chromium.launch_persistent_context(
        str(tmp_path / "chromium-profile"), executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS,
        viewport={"width": 1600, "height": 1000})
    return ctx, (ctx.pages[0] if ctx.pages else ctx.new_page())


def _stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()


def _episode_checks(page, data, phase):
    """Step through every episode of ``phase`` (eval split) with Next and check the DOM."""
    eps = data["runs"][0]["episodes"][phase]["eval"]
    questions = data["runs"][0]["questions"]
    for k, ep in enumerate(eps):
        page.wait_for_function(f"document.body.dataset.episode === '{ep['i']}'")
        page.wait_for_function("document.querySelector('#graph').dataset.litComplete === '1'")
        lit_edges = page.locator("#graph .edge.path.lit").count()
        assert lit_edges == ep["hop_len"] == questions[ep["ex_id"]]["hop_len"], (phase, k)
        assert page.locator("#graph .node.path.lit").count() == ep["hop_len"] + 1
        bars = page.eval_on_selector_all("#hud .bar", "els => els.map(e => [e.dataset.key, Number(e.dataset.value)])")
        details = page.eval_on_selector_all("#hud .detail", "els => els.map(e => [e.dataset.key, Number(e.dataset.value)])")
        components = {k: v for k, v in ep["reward"].items() if k in REWARD_COMPONENTS}
        assert dict(bars) == components and len(bars) == len(components) >= 5 and bars[-1][0] == "total"
        assert dict(details) == {k: v for k, v in ep["reward"].items() if k not in REWARD_COMPONENTS}
        widths = page.eval_on_selector_all("#hud .bar-fill", "els => els.map(e => e.getBoundingClientRect().width)")
        assert [w > 0 for w in widths] == [v != 0 for _, v in bars]
        assert page.locator("#answer").get_attribute("data-correct") == ("1" if ep["correct"] else "0")
        marked = page.eval_on_selector_all("#completion mark.ent", "els => els.map(e => e.dataset.id)")
        assert marked == [s[2] for s in ep["spans"]]
        n_false = sum(not c["in_kg"] for c in ep["claims"])
        assert page.locator("#graph .edge.false-claim").count() == n_false
        assert page.locator("#claims li.claim.false").count() == n_false
        assert page.locator("#counter").inner_text() == f"{k + 1} / {len(eps)}"
        if k + 1 < len(eps):
            page.click("#next")


def test_demo_page_in_chromium(fixture_run, tmp_path):
    sync_api = pytest.importorskip("playwright.sync_api")
    if not Path(CHROMIUM).exists():
        pytest.skip("Debian chromium is not installed (.ci/run installs it)")
    t0 = time.monotonic()
    kg = tmp_path / "kg.json"
    kg.write_text(json.dumps(TINY_KG))
    (fixture_run.path.parent / "bad-run").mkdir()
    (fixture_run.path.parent / "bad-run" / "meta.json").write_text("not json")
    site = tmp_path / "site"
    build_demo([fixture_run.path.parent], site, kg_path=kg, data_dir=tmp_path / "no-data")
    data = json.loads((site / "data.json").read_text())
    shots = Path(os.environ.get("KGR_DEMO_SCREENSHOTS") or tmp_path / "shots")
    shots.mkdir(parents=True, exist_ok=True)
    try_it = all(__import__("importlib").util.find_spec(m) for m in ("torch", "transformers", "peft"))

    proc, url = _start_server(site, fixture_run.path if try_it else None, kg)
    try:
        with sync_api.sync_playwright() as p:
            ctx, page = _open_chromium(p, tmp_path)
            errors: list[str] = []
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(url + "?hop_ms=20")
            page.wait_for_function("document.body.dataset.ready === '1'")

            notice = page.locator(".notice.skipped")
            assert notice.count() == 1 and notice.is_visible() and "bad-run" in notice.inner_text()
            assert page.locator("#headline tr[data-phase]").count() == 4

            # step through every phase's episodes; each phase switch keeps the question
            for phase in PHASES:
                page.click(f"#phase-picker button[data-phase='{phase}']")
                page.wait_for_function(f"document.body.dataset.phase === '{phase}'")
                assert page.locator("#phase-picker button.active").get_attribute("data-phase") == phase
                page.fill("#scrubber", "0")
                _episode_checks(page, data, phase)
            # phase switch on the last question keeps it; before/after shows all four phases
            last = data["runs"][0]["episodes"]["grpo"]["eval"][-1]
            page.click("#phase-picker button[data-phase='base']")
            page.wait_for_function("document.querySelector('#graph').dataset.litComplete === '1'")
            base_same = [e for e in data["runs"][0]["episodes"]["base"]["eval"] if e["ex_id"] == last["ex_id"]][0]
            assert page.evaluate("document.body.dataset.episode") == str(base_same["i"])
            assert page.locator("#compare .compare-col").count() == 4
            assert page.locator("#compare .compare-col.current").get_attribute("data-phase") == "base"
            # prev and the scrubber
            page.click("#prev")
            assert page.locator("#counter").inner_text() == "2 / 3"
            page.fill("#scrubber", "0")
            assert page.locator("#counter").inner_text() == "1 / 3"
            # charts drawn from metrics: one bar per (phase, hop) with an interval
            assert page.locator("#chart-hop .hop-bar").count() == 8
            # the SFT episode with a false claim, then a screenshot to look at
            page.click("#phase-picker button[data-phase='sft']")
            page.wait_for_function("document.querySelector('#graph').dataset.litComplete === '1'")
            assert page.locator("#graph .edge.false-claim").count() == 1
            page.screenshot(path=str(shots / "demo-page.png"), full_page=True)

            # demo mode: 1080p, large type, autoplay advances on its own
            page.set_viewport_size({"width": 1920, "height": 1080})
            page.keyboard.press("d")
            assert page.evaluate("document.body.classList.contains('demo') && document.body.classList.contains('playing')")
            start_ep = page.evaluate("document.body.dataset.episode")
            page.wait_for_function(f"document.body.dataset.episode !== '{start_ep}'", timeout=8000)
            page.wait_for_function("document.querySelector('#graph').dataset.litComplete === '1'")
            assert float(page.evaluate("getComputedStyle(document.body).fontSize").rstrip("px")) >= 24
            page.screenshot(path=str(shots / "demo-mode-1080p.png"))
            page.keyboard.press("d")

            if try_it:
                page.set_viewport_size({"width": 1600, "height": 1000})
                page.wait_for_selector("#try-panel:not([hidden])", timeout=20000)
                page.select_option("#try-start", "TLSHandshakeError")
                rels = page.locator("#try-rels select")
                while rels.count() < 3:
                    page.click("#try-add-rel")
                while rels.count() > 3:
                    page.click("#try-del-rel")
                for i, rel in enumerate(["caused_by", "leads_to", "caused_by"]):
                    rels.nth(i).select_option(rel)
                page.click("#try-submit")
                page.wait_for_selector("#try-result:not([hidden])", timeout=60000)
                page.wait_for_function("document.querySelector('#try-graph').dataset.litComplete === '1'")
                assert page.locator("#try-graph .edge.path.lit").count() == 3
                keys = page.eval_on_selector_all("#try-hud .bar", "els => els.map(e => e.dataset.key)")
                assert {"correctness", "path_reward", "total"} <= set(keys)
                assert page.locator("#try-answer").get_attribute("data-correct") in ("0", "1")
                page.locator("#try-panel").screenshot(path=str(shots / "try-it.png"))
            assert errors == []
            ctx.close()
    finally:
        _stop(proc)
    assert time.monotonic() - t0 < 90


def test_keyed_run_shows_the_keyed_wording_it_was_asked_in(tmp_path):
    """`kgr demo` with no runs packs the reference run alone (a page of a few MB) and opens on it;
    its questions are shown in the wording the run was trained and evaluated on (data/keyed),
    read through the one run reader, never the chain-order data/ files."""
    sync_api = pytest.importorskip("playwright.sync_api")
    if not Path(CHROMIUM).exists():
        pytest.skip("Debian chromium is not installed (.ci/run installs it)")
    from library.contracts import Question
    from library.demo.site import default_runs
    from library.evaluation.diagnosis import diagnose_run
    from library.jsonl import read_jsonl
    from library.questions.wording import step_order_of

    site = tmp_path / "site"
    runs = default_runs(REPO / "data" / "runs")
    assert [p.name for p in runs] == ["reference"]
    build_demo(runs, site)
    assert (site / "index.html").stat().st_size < 8 * 2**20
    keyed = {q.id: q.question for q in read_jsonl(REPO / "data" / "keyed" / "eval.jsonl", Question)}
    proc, url = _start_server(site, None, REPO / "data" / "kg.json")
    try:
        with sync_api.sync_playwright() as p:
            ctx, page = _open_chromium(p, tmp_path)
            page.goto(url + "?hop_ms=0")
            page.wait_for_function("document.body.dataset.ready === '1'")
            run_id = json.loads((REPO / "data" / "runs" / "reference" / "meta.json").read_text())["run_id"]
            assert page.locator("#run-picker option").all_inner_texts() == [run_id]  # meta.json's run_id
            data = json.loads((site / "data.json").read_text())
            episodes = {str(ep["i"]): ep for group in data["runs"][0]["episodes"].values()
                        for eps in group.values() for ep in eps}
            for _ in range(3):
                ep = episodes[page.evaluate("document.body.dataset.episode")]
                shown = page.locator("#question").inner_text().strip()
                assert shown == keyed[ep["ex_id"]] and step_order_of(shown) == "keyed", shown
                page.click("#next")
            # the reward ablation is stated from metrics.json, with its interval
            vs = json.loads((REPO / "data" / "runs" / "reference" / "metrics.json").read_text())["ablation"]["vs_grpo"]
            adds = page.locator("#reward-adds li").all_inner_texts()
            assert len(adds) == 1 and adds[0].startswith("GRPO with a correctness-only reward")
            assert f"{100 * vs['diff']:+.1f} points [{100 * vs['ci'][0]:+.1f}, {100 * vs['ci'][1]:+.1f}]" in adds[0]
            # what each RL phase made right, by why the phase before was wrong (kgr diagnose's counts)
            came = diagnose_run(REPO / "data" / "runs" / "reference")["rsft"]["from"]
            repairs = page.locator("#repairs li").all_inner_texts()
            assert len(repairs) == 2 and repairs[0].startswith(f"RSFT made right, of SFT's {sum(came['wrong'].values())} wrong: ")
            assert f"{came['repaired']['fact']} of {came['wrong']['fact']} a fact not recalled" in repairs[0]
            assert f"turned {came['broken']} right answer" in repairs[0] and repairs[1].startswith("GRPO made right, of RSFT's")
            # and how many of them no training question could show (past the longest chain trained)
            assert (f"{came['repaired_by_reach']['beyond']} of the {came['wrong_by_reach']['beyond']} that no training "
                    f"question could show wrong: a step after step {came['longest_trained']}") in repairs[0]
            ctx.close()
    finally:
        _stop(proc)


def test_the_page_says_what_the_graphs_reward_added_to_rsft(tmp_path):
    """A run with the RSFT selection experiment (the committed food run): the page states the
    difference over its seeds, grounded answers too, 'not measurable' where the interval holds 0."""
    sync_api = pytest.importorskip("playwright.sync_api")
    if not Path(CHROMIUM).exists():
        pytest.skip("Debian chromium is not installed (.ci/run installs it)")
    site = tmp_path / "site"
    build_demo([REPO / "data" / "runs" / "food"], site)
    sel = json.loads((REPO / "data" / "runs" / "food" / "metrics.json").read_text())["selection"]
    proc, url = _start_server(site, None, REPO / "data" / "food" / "kg.json")
    try:
        with sync_api.sync_playwright() as p:
            ctx, page = _open_chromium(p, tmp_path)
            page.goto(url + "?hop_ms=0")
            page.wait_for_function("document.body.dataset.ready === '1'")
            adds = page.locator("#reward-adds li").all_inner_texts()
            assert len(adds) == 1 and adds[0].startswith("RSFT data chosen by correctness alone")
            o = sel["over_seeds"]
            unmeasurable = o["ci"][0] <= 0 <= o["ci"][1]
            assert f"3 seeds: {100 * o['diff']:+.1f} points" in adds[0]
            assert ("(not measurable)" in adds[0].split(";")[0]) == unmeasurable
            ctx.close()
    finally:
        _stop(proc)
