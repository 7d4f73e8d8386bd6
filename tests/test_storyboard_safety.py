"""A storyboard is data, never code: template escapes, YAML alias bombs and oversized files are
refused with a DataFileError naming the file and line, and a storyboard whose every shot is
skipped says so in one sentence.

No rendering here: each storyboard is loaded and resolved against the synthetic fixture run
(tests/fixture_run.py), which takes well under a second.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from library.errors import DataFileError
from scenes.build import prepare
from scenes.resolve import RunData, resolve_shots
from scenes.storyboard import MAX_STORYBOARD_BYTES, load_storyboard, loads_storyboard, render_text

OUTSIDE = "template reaches outside the storyboard's data"


@pytest.fixture
def run_with_kg(fixture_run, tiny_kg_dict) -> Path:
    # as in tests/test_storyboard.py: the run carries its own kg.json, so data/kg.json is not read
    (fixture_run.path / "kg.json").write_text(json.dumps(tiny_kg_dict))
    return fixture_run.path


def _storyboard(run: Path, shot: str) -> str:
    """A one-shot storyboard over ``run``; ``shot`` is the shot's YAML body (4-space indented).
    The shot starts on line 5, its first field on line 5 too (``  - scene: title``)."""
    return f"title: t\nformat: short\nrun: {run}\nshots:\n  - scene: title\n{shot}"


def _load_and_resolve(path: Path, run: Path):
    return resolve_shots(load_storyboard(path), RunData.load(run))


# name: (the shot's fields after `scene: title`, the field's line, the dotted field)
ATTACKS = {
    "when: os.system through cycler": (
        "    params: {{title: x}}\n    duration: 2\n"
        "    when: \"cycler.__init__.__globals__.os.system('id > {out}') == 12345\"\n", 8, "shots.0.when"),
    "params.title: os.popen through cycler": (
        "    params:\n      title: \"{{{{ cycler.__init__.__globals__.os.popen('id > {out}').read() }}}}\"\n"
        "    duration: 2\n", 7, "shots.0.params.title"),
    "caption: os through lipsum's globals": (
        "    params: {{title: x}}\n    duration: 2\n"
        "    caption: \"{{{{ lipsum.__globals__['os'].popen('id > {out}').read() }}}}\"\n", 8, "shots.0.caption"),
    "caption: the class hierarchy": (
        "    params: {{title: x}}\n    duration: 2\n    caption: \"{{{{ ''.__class__.__mro__ }}}}\"\n", 8, "shots.0.caption"),
    "a second line of a multi-line caption": (
        "    params: {{title: x}}\n    duration: 2\n    caption: |\n      fine\n"
        "      {{{{ (steps | map(attribute='__class__') | list) }}}}\n", 10, "shots.0.caption"),
}


@pytest.mark.parametrize("name", sorted(ATTACKS))
def test_a_template_that_reaches_for_python_is_refused_and_runs_nothing(tmp_path, run_with_kg, name):
    shot, line, field = ATTACKS[name]
    pwned = tmp_path / "pwned"
    path = tmp_path / "attack.yaml"
    path.write_text(_storyboard(run_with_kg, shot.format(out=pwned)))
    with pytest.raises(DataFileError) as err:
        _load_and_resolve(path, run_with_kg)
    assert not pwned.exists(), f"the storyboard ran code: {pwned.read_text()}"
    assert (err.value.path, err.value.line) == (str(path), line), str(err.value)
    assert f"{field}: {OUTSIDE}: " in err.value.message
    assert "is a Python internal, not a field of the run's data" in err.value.message


RUNTIME = {
    # escapes no template text shows, built from pieces: the sandbox stops them while rendering
    "attr built from pieces": ("caption", "{{ '' | attr('_' ~ '_class__') }}", "access to attribute '__class__'"),
    "mutating the run data": ("params.title", "{{ metrics.update({'x': 1}) }}", "access to attribute 'update'"),
}


@pytest.mark.parametrize("name", sorted(RUNTIME))
def test_the_sandbox_stops_what_only_shows_at_render_time(tmp_path, run_with_kg, name):
    where, template, fragment = RUNTIME[name]
    path = tmp_path / "attack.yaml"
    fields = {"params.title": "x", "caption": ""}
    fields[where] = template
    path.write_text(_storyboard(run_with_kg, f"    params:\n      title: {json.dumps(fields['params.title'])}\n"
                                             f"    duration: 2\n    caption: {json.dumps(fields['caption'])}\n"))
    with pytest.raises(DataFileError) as err:
        _load_and_resolve(path, run_with_kg)
    assert err.value.path == str(path)
    assert err.value.line == (7 if where == "params.title" else 9), str(err.value)
    assert f"shots.0.{where}: {OUTSIDE}: " in err.value.message and fragment in err.value.message


def test_str_format_cannot_reach_attributes(run_with_kg):
    # str.format reads attributes by itself ("{0.__class__}"); the sandbox checks each one
    ctx = RunData.load(run_with_kg).template_context()
    assert render_text("{{ '{0}-{1}'.format(run_id, 2) }}", ctx, where="t") == "fixture-2"
    with pytest.raises(DataFileError, match=OUTSIDE):
        render_text("{{ ('{0._' ~ '_class__}').format(run_id) }}", ctx, where="t")


@pytest.mark.parametrize("name", ["cycler", "joiner", "lipsum"])
def test_the_globals_that_reach_python_are_gone(run_with_kg, name):
    ctx = RunData.load(run_with_kg).template_context()
    with pytest.raises(DataFileError, match=f"'{name}' is undefined"):
        render_text("{{ " + name + " }}", ctx, where="t")
    # the sandbox's range is bounded
    with pytest.raises(DataFileError, match="Range too big"):
        render_text("{{ range(10 ** 9) | length }}", ctx, where="t")


def test_templates_cannot_build_huge_values(run_with_kg):
    # not code, but a render held for minutes and gigabytes: * and ** are bounded
    ctx = RunData.load(run_with_kg).template_context()
    assert render_text("{{ '-' * 3 }}{{ 2 ** 3 }}", ctx, where="t") == "---8"
    for template in ("{{ ('x' * 1000000) | length }}", "{{ (1000000 * [1]) | length }}", "{{ (10 ** 100000) | string | length }}"):
        with pytest.raises(DataFileError, match=OUTSIDE):
            render_text(template, ctx, where="t")


@pytest.mark.parametrize("template", [
    # state carried across a loop doubles a text 33 times: namespace is gone
    "{% set ns = namespace(s='x') %}{% for i in range(33) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s|length }}",
    "{% for i in range(100000) %}x{% endfor %}",  # loops are bounded
    "{% for i in range(900) %}{{ 'x' * 9000 }}{% endfor %}",  # and so is what a template writes
    "{{ (((((2**64)**64)**64)**64)**64) is number }}",  # powers by their size, not only their exponent
])
def test_templates_cannot_grow_without_bound(run_with_kg, template):
    ctx = RunData.load(run_with_kg).template_context()
    with pytest.raises(DataFileError, match=f"{OUTSIDE}|'namespace' is undefined"):
        render_text(template, ctx, where="t")


def test_nesting_too_deep_is_one_sentence(tmp_path):
    with pytest.raises(DataFileError, match="nested too deeply"):
        loads_storyboard("title: t\nformat: short\na: " + "[" * 5000 + "]" * 5000 + "\n", tmp_path / "deep.yaml")
    with pytest.raises(DataFileError, match="nested too deeply"):
        loads_storyboard("title: t\nformat: short\nshots:\n  - scene: title\n    params: {title: x}\n    duration: 2\n"
                         "    caption: '{{ " + "(" * 3000 + "1" + ")" * 3000 + " }}'\n", tmp_path / "deep.yaml")


def test_shipped_templates_still_render(run_with_kg):
    # filters, loops, `set`, `selectattr`, `'%+d' % x` and `range` stay allowed
    for name in ("short", "explainer"):
        assert resolve_shots(load_storyboard(Path(__file__).resolve().parents[1] / "storyboards" / f"{name}.yaml"),
                             RunData.load(run_with_kg))
    ctx = RunData.load(run_with_kg).template_context()
    assert render_text("{% for i in range(3) %}{{ i }}{% endfor %} {{ '%+d' % 5 }} {{ kg.entities > 0 }}", ctx,
                       where="t") == "012 +5 True"


# ------------------------------------------------------------------------- YAML limits


def test_a_yaml_alias_bomb_is_refused(tmp_path):
    # "billion laughs": 9 levels of 9 aliases each, 9**9 strings once expanded
    levels = ['  l0: &l0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for k in range(1, 10):
        levels.append(f"  l{k}: &l{k} [" + ", ".join([f"*l{k - 1}"] * 9) + "]")
    path = tmp_path / "bomb.yaml"
    path.write_text("title: t\nformat: short\nepisodes:\n" + "\n".join(levels) + "\n"
                    "shots:\n  - scene: title\n    params: {title: x}\n    duration: 2\n")
    with pytest.raises(DataFileError) as err:
        load_storyboard(path)
    assert err.value.path == str(path) and err.value.line is not None
    assert "expands to more than" in err.value.message and "aliases" in err.value.message


def test_an_alias_that_contains_itself_is_refused(tmp_path):
    path = tmp_path / "loop.yaml"
    path.write_text("title: t\nformat: short\nepisodes:\n  hero: &h {query: best, again: *h}\n"
                    "shots:\n  - scene: title\n    params: {title: x}\n    duration: 2\n")
    with pytest.raises(DataFileError) as err:
        load_storyboard(path)
    assert err.value.path == str(path) and err.value.line == 4, str(err.value)
    assert "nested more than" in err.value.message


def test_a_few_aliases_still_load():
    sb = loads_storyboard("title: t\nformat: short\nshots:\n  - &s {scene: title, params: {title: x}, duration: 2}\n"
                          "  - *s\n", "ok.yaml")
    assert len(sb.shots) == 2


def test_an_oversized_storyboard_is_refused_unread(tmp_path):
    path = tmp_path / "big.yaml"
    path.write_text("title: t\nformat: short\n" + "# padding\n" * (MAX_STORYBOARD_BYTES // 10 + 1))
    with pytest.raises(DataFileError, match=r"big\.yaml: storyboard is \d+ bytes; at most 1000000 are read"):
        load_storyboard(path)
    with pytest.raises(DataFileError, match="at most 1000000 are read"):
        loads_storyboard(path.read_text(), path)


# ------------------------------------------------------------------------- every shot skipped

SKIPPED = "    params: {title: x}\n    duration: 2\n    when: metrics.no_such_section is defined\n"


def test_a_storyboard_whose_every_shot_is_skipped_says_so(tmp_path, run_with_kg):
    path = tmp_path / "skipped.yaml"
    path.write_text(_storyboard(run_with_kg, SKIPPED))
    with pytest.raises(DataFileError) as err:
        prepare(path, voice=False, cache_dir=tmp_path / "cache")
    assert err.value.path == str(path) and err.value.line == 4, str(err.value)
    assert err.value.message.startswith("every shot was skipped (their when: conditions are false for run ")
    assert err.value.message.endswith("); nothing to render")


def test_kgr_render_exits_2_when_every_shot_is_skipped(tmp_path, run_with_kg):
    from library.cli import app
    from scenes.cli import register

    register(app)
    path = tmp_path / "skipped.yaml"
    path.write_text(_storyboard(run_with_kg, SKIPPED))
    result = CliRunner().invoke(app, ["render", str(path), "--no-voice", "--out", str(tmp_path / "out")])
    assert result.exit_code == 2, result.output
    # rich wraps long lines: compare without whitespace
    assert f"{path}:4:everyshotwasskipped" in "".join(result.output.split())
    assert "Traceback" not in result.output
