"""Storyboards: a YAML file that lists the shots of a video, validated with pydantic.

A storyboard never holds a number: its text fields are jinja2 templates rendered over the run
data (``metrics``, ``meta``, ``run_id``, the shot's ``episode``/``question``), so every figure
on screen is traceable to a run's logs. ``storyboards/README.md`` documents the format.

Errors name the file, the line and the problem. PyYAML's ``compose`` keeps the start mark of
every node, so we build plain Python values from the node tree while recording the line of
each mapping key and sequence item (``LineMap``); pydantic's error location is then walked
back through that map to the closest line.

A storyboard is data, never code: its templates run in jinja2's immutable sandbox without the
globals that reach Python (``cycler``, ``joiner``, ``lipsum``), a template that names a Python
internal (``__class__``, ``_data``) is refused at load time, and the YAML is refused past
``MAX_STORYBOARD_BYTES`` or when its aliases expand past ``MAX_YAML_NODES`` values.

>>> sb = loads_storyboard('''
... title: Demo
... format: short
... shots:
...   - scene: title
...     params: {title: "{{ run_id }}"}
...     duration: 3
... ''', "demo.yaml")
>>> sb.size, sb.shots[0].line
((1080, 1920), 5)
>>> render_text("{{ 0.4123 | pct }} {{ [0.35, 0.46] | ci }} {{ 0.05 | signed }}", {}, where="x")
'41% 95% CI 35–46% +0.05'
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Literal

import jinja2
import jinja2.nodes
import jinja2.sandbox
import yaml
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, field_validator, model_validator

from library.errors import DataFileError
from scenes.payloads import PAYLOAD_MODELS

FORMATS: dict[str, tuple[int, int]] = {"short": (1080, 1920), "explainer": (1920, 1080)}
FPS = 30
#: A YouTube Short is at most 60 s; checked before any rendering.
SHORT_MAX_SECONDS = 60.0
#: Crossfade between consecutive shots; shots overlap by this much in the final video.
XFADE_SECONDS = 0.3
#: ``duration: narration`` = the crossfade in + narration + this breath + the crossfade out, so the
#: narration starts once the shot is faded in and ends before the next shot starts fading in.
NARRATION_PAD_SECONDS = 0.2
#: the last shot holds this long after its narration (no crossfade follows it)
END_HOLD_SECONDS = 0.6
#: Storyboards are hand-written (the shipped ones are under 25 kB); anything larger is refused unread.
MAX_STORYBOARD_BYTES = 1_000_000
#: Values a storyboard may expand to, aliases counted at every use (the shipped ones have ~250):
#: an alias bomb ("billion laughs") is refused here instead of filling memory.
MAX_YAML_NODES = 20_000
#: Nesting depth of a storyboard's values (the shipped ones reach 7); also stops a recursive alias.
MAX_YAML_DEPTH = 50


# --------------------------------------------------------------------------- YAML with lines


class LineMap:
    """Line numbers (1-based) of every mapping key / sequence item of a loaded YAML tree.

    ``lines[path]`` is the line where the value at ``path`` (a tuple of keys and indices)
    starts; ``line_of(path)`` falls back to the closest ancestor that has one. ``text_starts[path]``
    is where a block scalar's (``|``, ``>``) text starts: the line after its key.
    """

    def __init__(self) -> None:
        self.lines: dict[tuple, int] = {}
        self.text_starts: dict[tuple, int] = {}

    def line_of(self, path: tuple) -> int | None:
        path = tuple(path)
        while True:
            if path in self.lines:
                return self.lines[path]
            if not path:
                return None
            path = path[:-1]


def _construct(node: yaml.Node, path: tuple, lines: LineMap, source: str, budget: list[int] | None = None) -> Any:
    # An alias is the same node object reached again, so counting visits counts the expansion.
    budget = budget if budget is not None else [MAX_YAML_NODES]
    budget[0] -= 1
    line = node.start_mark.line + 1
    if budget[0] < 0:
        raise DataFileError(source, f"the storyboard expands to more than {MAX_YAML_NODES} values (YAML aliases "
                                    f"repeated inside each other?); write the values out or use fewer aliases", line=line)
    if len(path) > MAX_YAML_DEPTH:
        raise DataFileError(source, f"values nested more than {MAX_YAML_DEPTH} levels deep (a YAML alias that "
                                    f"contains itself?)", line=line)
    lines.lines.setdefault(path, line)
    if isinstance(node, yaml.MappingNode):
        out: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            key = _scalar(key_node)
            if key in out:
                raise DataFileError(source, f"duplicate key {key!r}", line=key_node.start_mark.line + 1)
            lines.lines[path + (key,)] = key_node.start_mark.line + 1
            out[key] = _construct(value_node, path + (key,), lines, source, budget)
        return out
    if isinstance(node, yaml.SequenceNode):
        items = []
        for i, item in enumerate(node.value):
            lines.lines[path + (i,)] = item.start_mark.line + 1
            items.append(_construct(item, path + (i,), lines, source, budget))
        return items
    if getattr(node, "style", None) in ("|", ">"):
        # the text (and so line 1 of a template) starts on the line after the indicator
        lines.text_starts[path] = line + 1
    return _scalar(node)


def _scalar(node: yaml.Node) -> Any:
    # Resolve one scalar exactly as SafeLoader would (ints, floats, bools, null, strings).
    if not isinstance(node, yaml.ScalarNode):
        raise yaml.constructor.ConstructorError(None, None, "mapping keys must be scalars", node.start_mark)
    return yaml.SafeLoader("").construct_object(node, deep=True)


def load_yaml_with_lines(text: str, source: str | Path) -> tuple[Any, LineMap]:
    """Parse YAML into plain values plus a LineMap; syntax errors, a text over
    MAX_STORYBOARD_BYTES and aliases expanding past MAX_YAML_NODES become DataFileError."""
    size = len(text.encode("utf-8"))
    if size > MAX_STORYBOARD_BYTES:
        raise DataFileError(source, f"storyboard is {size} bytes; at most {MAX_STORYBOARD_BYTES} are read")
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except RecursionError:
        raise DataFileError(source, "values nested too deeply to read") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        raise DataFileError(source, f"invalid YAML: {getattr(exc, 'problem', None) or exc}", line=line) from None
    lines = LineMap()
    if node is None:
        return None, lines
    try:
        return _construct(node, (), lines, str(source)), lines
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        raise DataFileError(source, f"invalid YAML: {exc}", line=mark.line + 1 if mark else None) from None


# --------------------------------------------------------------------------- schema


class Voice(BaseModel):
    """Narration voice: ``hibari`` (default: hibari-tts's ``heart``, inside its wheel; espeak-ng
    stands in, with a warning, when it cannot load), ``espeak-ng`` or ``piper`` (bring your own)."""

    model_config = ConfigDict(extra="forbid")
    engine: Literal["hibari", "espeak-ng", "piper"] = "hibari"
    voice: str | None = None  # hibari's voice (default heart) or espeak-ng's (default en-us); ignored by piper
    speed: int = Field(default=160, ge=80, le=400)  # espeak-ng words per minute (and the --no-voice estimate)


class Shot(BaseModel):
    """One shot: a scene type, its params, a duration, narration and caption templates."""

    model_config = ConfigDict(extra="forbid")
    scene: str
    params: dict[str, Any] = Field(default_factory=dict)
    duration: float | Literal["narration"]
    narration: str = ""
    caption: str = ""
    #: optional jinja expression; the shot is left out when it is false (e.g. a section of
    #: metrics.json that only some runs have: ``when: metrics.distribution is defined``)
    when: str | None = None
    #: optional chapter title (a template) starting at this shot, for the upload text's chapters
    chapter: str | None = None
    #: optional: another run folder this one shot reads (its episodes, KG and templates), e.g. a
    #: run on a graph that branches; ``when:`` still reads the storyboard's run
    run: str | None = None
    _line: int = PrivateAttr(0)  # set by the loader: where the shot starts in the file

    @property
    def line(self) -> int:
        return self._line

    @field_validator("scene")
    @classmethod
    def _known_scene(cls, v: str) -> str:
        if v not in PAYLOAD_MODELS:
            raise ValueError(f"unknown scene type {v!r}; known: {', '.join(sorted(PAYLOAD_MODELS))}")
        return v

    @field_validator("duration")
    @classmethod
    def _positive(cls, v: float | str) -> float | str:
        if isinstance(v, (int, float)) and not (0 < v <= 600 and math.isfinite(v)):
            raise ValueError(f"duration must be in (0, 600] seconds, got {v}")
        return v

    @model_validator(mode="after")
    def _narration_needed(self) -> "Shot":
        if self.duration == "narration" and not self.narration.strip():
            raise ValueError("duration: narration needs a narration text")
        return self


class Upload(BaseModel):
    """What the video is published with, written beside the MP4: ``<name>.upload.txt`` (title,
    description, chapters from the shots' ``chapter``) and ``<name>.thumbnail.png`` (the middle
    frame of shot ``thumbnail_shot`` with ``headline`` drawn on it). Texts are templates over
    the run's logs, like every caption."""

    model_config = ConfigDict(extra="forbid")
    title: str
    description: str
    thumbnail_shot: int = Field(1, ge=1)  # 1-based, in the storyboard's shot list
    headline: str = ""


class Storyboard(BaseModel):
    model_config = ConfigDict(extra="forbid")
    title: str
    format: Literal["short", "explainer"]
    run: str = "data/runs/reference"
    kg: str | None = None
    questions: str | None = None
    voice: Voice = Field(default_factory=Voice)
    #: named episode selections shared by several shots (``params: {episode: hero}``)
    episodes: dict[str, dict[str, Any]] = Field(default_factory=dict)
    shots: list[Shot] = Field(min_length=1)
    upload: Upload | None = None
    # set by the loader (private: not storyboard fields)
    _source: str = PrivateAttr("")
    _lines: LineMap | None = PrivateAttr(None)

    @property
    def source(self) -> str:
        return self._source

    @property
    def lines(self) -> LineMap | None:
        return self._lines

    @property
    def name(self) -> str:
        return Path(self.source).stem if self.source else "storyboard"

    @property
    def size(self) -> tuple[int, int]:
        return FORMATS[self.format]

    def fail(self, path: tuple, message: str) -> DataFileError:
        """A DataFileError at the line of ``path`` (e.g. ``("shots", 2, "params")``)."""
        line = self.lines.line_of(path) if self.lines is not None else None
        return DataFileError(self.source, message, line=line)

    def check_short_length(self, durations: list[float]) -> None:
        """Fail (naming the shot that crosses the limit) if a Short would exceed 60 s."""
        if self.format != "short":
            return
        total = 0.0
        for i, d in enumerate(durations):
            total += d - (XFADE_SECONDS if i else 0.0)
            if total > SHORT_MAX_SECONDS + 1e-6:
                full = sum(durations) - XFADE_SECONDS * (len(durations) - 1)
                raise self.fail(("shots", i), f"a Short must be at most {SHORT_MAX_SECONDS:g} s; "
                                              f"it reaches {full:.1f} s (the limit is crossed at shot {i + 1})")


def _pydantic_error(exc: ValidationError, source: str, lines: LineMap) -> DataFileError:
    errors = exc.errors()
    # a misspelt key also shows up as "field required" for the right name; the typo is the
    # more useful message, so unknown-key errors go first
    err = sorted(errors, key=lambda e: e["type"] != "extra_forbidden")[0]
    loc = tuple(p for p in err["loc"] if not isinstance(p, str) or not p.startswith("function-"))
    # pydantic adds union-branch names ('float', 'literal[...]') to loc; drop those that are
    # not real keys so the line lookup lands on the field itself.
    real: list = []
    for p in loc:
        if (tuple(real) + (p,)) in lines.lines or isinstance(p, int):
            real.append(p)
        else:
            break
    # a missing or unknown key is not in the file's line map but is the useful name; any
    # other extra element is a pydantic union-branch label ('float', "literal['narration']")
    shown = loc[: len(real) + 1] if err["type"] in ("missing", "extra_forbidden") else tuple(real)
    where = ".".join(str(p) for p in shown) or "<top level>"
    msg = err["msg"].removeprefix("Value error, ")
    if real and real[-1] == "duration" and err["type"] != "value_error":
        msg = f"duration must be a number of seconds or 'narration' ({msg})"

    return DataFileError(source, f"{where}: {msg}", line=lines.line_of(tuple(real)))


def loads_storyboard(text: str, source: str | Path = "<storyboard>") -> Storyboard:
    source = str(source)
    obj, lines = load_yaml_with_lines(text, source)
    if not isinstance(obj, dict):
        raise DataFileError(source, "a storyboard must be a YAML mapping (title, format, run, shots)", line=1)
    try:
        sb = Storyboard.model_validate(obj)
    except ValidationError as exc:
        raise _pydantic_error(exc, source, lines) from None
    sb._source = source
    sb._lines = lines
    for i, shot in enumerate(sb.shots):
        shot._line = lines.line_of(("shots", i)) or 0
    # Static length check: only when every duration is a number (narration-timed shots are
    # checked again after the narration is synthesised, still before any clip renders).
    if all(isinstance(s.duration, (int, float)) for s in sb.shots):
        sb.check_short_length([float(s.duration) for s in sb.shots])
    # Templates are compiled now so a syntax error fails at load time with its line.
    if sb.upload is not None:
        for key in ("title", "description", "headline"):
            _compile(getattr(sb.upload, key), sb, ("upload", key))
        if sb.upload.thumbnail_shot > len(sb.shots):
            raise sb.fail(("upload", "thumbnail_shot"), f"upload.thumbnail_shot {sb.upload.thumbnail_shot}: the "
                                                        f"storyboard has {len(sb.shots)} shots")
    for i, shot in enumerate(sb.shots):
        for key in ("narration", "caption"):
            _compile(getattr(shot, key), sb, ("shots", i, key))
        if shot.when is not None:
            _compile("{{ " + shot.when + " }}", sb, ("shots", i, "when"))
        if shot.chapter is not None:
            _compile(shot.chapter, sb, ("shots", i, "chapter"))
        _walk_strings(shot.params, lambda s, p, i=i: _compile(s, sb, ("shots", i, "params") + p))
    return sb


def load_storyboard(path: str | Path) -> Storyboard:
    path = Path(path)
    if not path.is_file():
        raise DataFileError(path, "storyboard file not found")
    # checked before reading so that a huge file is never loaded into memory
    size = path.stat().st_size
    if size > MAX_STORYBOARD_BYTES:
        raise DataFileError(path, f"storyboard is {size} bytes; at most {MAX_STORYBOARD_BYTES} are read")
    return loads_storyboard(path.read_text(encoding="utf-8"), path)


# --------------------------------------------------------------------------- templates


def pct(v: float, digits: int = 0) -> str:
    """0.4123 -> '41%' (``digits`` decimals)."""
    return f"{float(v) * 100:.{digits}f}%"


def pct1(v: float) -> str:
    return pct(v, 1)


def num(v: float, digits: int = 2) -> str:
    """Integers as integers, other numbers with ``digits`` decimals."""
    v = float(v)
    if v.is_integer():
        return str(int(v))
    return f"{v:.{digits}f}"


def ci(v: list[float] | tuple[float, float], digits: int = 0) -> str:
    """[0.35, 0.46] -> '95% CI 35–46%' (the interval is a 95% Wilson interval in metrics.json)."""
    lo, hi = (float(x) * 100 for x in v)
    return f"95% CI {lo:.{digits}f}–{hi:.{digits}f}%"


def signed(v: float, digits: int = 2) -> str:
    """0.05 -> '+0.05', -0.1 -> '-0.10'."""
    return f"{float(v):+.{digits}f}"


def signed_pct(v: float) -> str:
    """A difference of two rates in percentage points: 0.3333 -> '+33 pts'."""
    return f"{float(v) * 100:+.0f} pts"


def points(step: dict) -> str:
    """A paired difference in points with its interval and, where the step has one, the number
    of questions it was paired on (a difference names its own n: quick's SFT - base is paired
    on the 30 questions base answered, not on SFT's 150).

    >>> points({"diff": 0.05, "ci": [0.02, 0.08], "n": 300})
    '+5.0 points (95% CI +2.0 to +8.0, n = 300)'
    """
    lo, hi = step["ci"]
    n = f", n = {step['n']}" if "n" in step else ""
    return f"{step['diff'] * 100:+.1f} points (95% CI {lo * 100:+.1f} to {hi * 100:+.1f}{n})"


PHASE_LABELS = {"base": "Base", "sft": "SFT", "rsft": "RSFT", "grpo": "GRPO"}


def phase_label(v: str) -> str:
    return PHASE_LABELS.get(str(v), str(v))


FILTERS = {"pct": pct, "pct1": pct1, "num": num, "ci": ci, "signed": signed, "signed_pct": signed_pct,
           "phase": phase_label, "points": points}

#: The sandbox refuses Python internals (``__class__``, ``_private``), unsafe calls and, being
#: immutable, changes to the run data that later shots read.
class _BoundedSandbox(jinja2.sandbox.ImmutableSandboxedEnvironment):
    """The sandbox, with ``*`` and ``**`` bounded: a caption never needs ``'x' * 10**9``, which
    would hold a render for minutes and gigabytes."""

    intercepted_binops = frozenset({"*", "**"})

    def call_binop(self, context, operator, left, right):  # type: ignore[override]
        if operator == "**" and isinstance(right, (int, float)) and abs(right) > 64:
            raise jinja2.sandbox.SecurityError(f"power {right} is larger than a storyboard needs (at most 64)")
        if operator == "**" and isinstance(left, int) and isinstance(right, int) and left.bit_length() * right > 4096:
            raise jinja2.sandbox.SecurityError("a power of over 4,096 bits")
        if operator == "*" and isinstance(left, int) and isinstance(right, (str, list, tuple)):
            left, right = right, left
        if operator == "*" and isinstance(left, (str, list, tuple)) and isinstance(right, int) \
                and len(left) * right > 10_000:
            raise jinja2.sandbox.SecurityError("a repeated text or list of over 10,000 items")
        return super().call_binop(context, operator, left, right)


_ENV = _BoundedSandbox(undefined=jinja2.StrictUndefined, autoescape=False, keep_trailing_newline=False)
_ENV.filters.update(FILTERS)
# cycler/joiner/lipsum are Python objects and functions a template could climb out of (and
# lipsum writes megabytes on request); no storyboard needs them. range is the sandbox's bounded one.
for _name in ("cycler", "joiner", "lipsum", "namespace"):  # namespace: state that grows across a loop
    _ENV.globals.pop(_name, None)
_ENV.globals["range"] = lambda *args: _bounded_range(*args)

#: The most a storyboard's text may hold once rendered, and the longest loop it may run.
MAX_RENDERED_CHARS = 100_000
MAX_RANGE = 1_000


def _bounded_range(*args: int) -> range:
    numbers = range(*args)
    if len(numbers) > MAX_RANGE:
        raise jinja2.sandbox.SecurityError(f"Range too big: {len(numbers)} numbers (a storyboard loops at most {MAX_RANGE})")
    return numbers

#: what every template error that leaves the data says, before the detail
OUTSIDE = "template reaches outside the storyboard's data"


def _field_line(sb: Storyboard | None, path: tuple, lineno: int | None) -> int | None:
    """The file line of line ``lineno`` (1-based) of the template at ``path``."""
    if sb is None or sb.lines is None:
        return None
    line = sb.lines.text_starts.get(tuple(path)) or sb.lines.line_of(path)
    # a multi-line template reports its own line; add it to the field's line
    if line is not None and lineno:
        line += lineno - 1
    return line


def _internal_name(tree: jinja2.nodes.Template) -> tuple[str, int] | None:
    """A name in ``tree`` that starts with ``_`` and is read as an attribute or a key
    (``x.__class__``, ``x['__globals__']``, ``x | attr('_data')``), with its template line.
    No run data has such a field, and the known escapes from a jinja template all need one."""
    for node in tree.find_all((jinja2.nodes.Getattr, jinja2.nodes.Getitem, jinja2.nodes.Filter)):
        if isinstance(node, jinja2.nodes.Getattr):
            name = node.attr
        elif isinstance(node, jinja2.nodes.Getitem):
            name = node.arg.value if isinstance(node.arg, jinja2.nodes.Const) else None
        else:
            arg = node.args[0] if node.name in ("attr", "map", "selectattr", "rejectattr", "sort", "groupby",
                                                "sum", "unique", "min", "max") and node.args else None
            name = arg.value if isinstance(arg, jinja2.nodes.Const) else None
            name = next((kw.value.value for kw in node.kwargs if kw.key == "attribute"
                         and isinstance(kw.value, jinja2.nodes.Const)), name)
        # filters read dotted attribute paths (``map(attribute='a.__class__')``): check each part
        if isinstance(name, str) and any(part.strip().startswith("_") for part in name.split(".")):
            return name, node.lineno
    return None


def _compile(text: str, sb: Storyboard | None, path: tuple) -> jinja2.Template:
    source = sb.source if sb else "<template>"
    try:
        tree = _ENV.parse(text)
    except RecursionError:
        raise DataFileError(source, f"bad template in {_dotted(path)}: nested too deeply to read",
                            line=_field_line(sb, path, None)) from None
    except jinja2.TemplateSyntaxError as exc:
        raise DataFileError(source, f"bad template in {_dotted(path)}: {exc.message}",
                            line=_field_line(sb, path, exc.lineno)) from None
    # refused at load time, before any run data is read; the sandbox would stop it at render time
    if (found := _internal_name(tree)) is not None:
        name, lineno = found
        raise DataFileError(source, f"{_dotted(path)}: {OUTSIDE}: {name!r} is a Python internal, not a field "
                                    f"of the run's data", line=_field_line(sb, path, lineno))
    try:
        return _ENV.from_string(tree)
    except RecursionError:
        raise DataFileError(source, f"bad template in {_dotted(path)}: nested too deeply to read",
                            line=_field_line(sb, path, None)) from None
    except jinja2.TemplateSyntaxError as exc:  # an unknown filter or test is found while compiling
        raise DataFileError(source, f"bad template in {_dotted(path)}: {exc.message}",
                            line=_field_line(sb, path, exc.lineno)) from None


def _template_error(exc: Exception, field: str, sb: Storyboard | None, path: tuple) -> DataFileError:
    """The DataFileError for ``exc`` raised while rendering the template ``field``: a sandbox
    refusal says the template left the data, anything else is a bad template."""
    if isinstance(exc, jinja2.sandbox.SecurityError):
        message = f"{field}: {OUTSIDE}: {exc}"
    else:
        message = f"bad template in {field}: {exc}"
    if sb is not None:
        return sb.fail(path, message)
    return DataFileError("<template>", message)


#: errors a template's own expressions raise (a missing field, a filter given the wrong type,
#: a division by zero, a sandbox refusal); others (a ShotError from ``made``) keep their meaning
_TEMPLATE_ERRORS = (jinja2.TemplateError, TypeError, ValueError, LookupError, ArithmeticError, AttributeError)


def _dotted(path: tuple) -> str:
    return ".".join(str(p) for p in path)


def render_text(text: str, context: dict[str, Any], *, where: str, sb: Storyboard | None = None, path: tuple = ()) -> str:
    """Render one template; undefined names and filter errors become DataFileError at the line."""
    template = _compile(text, sb, path)
    try:
        parts, size = [], 0
        for chunk in template.generate(**context):  # stopped as it grows, not after
            size += len(chunk)
            if size > MAX_RENDERED_CHARS:
                raise jinja2.sandbox.SecurityError(f"the text grows past {MAX_RENDERED_CHARS:,} characters")
            parts.append(chunk)
        return " ".join("".join(parts).split())
    except _TEMPLATE_ERRORS as exc:
        raise _template_error(exc, where, sb, path) from None


def evaluate_when(shot: Shot, context: dict[str, Any], sb: Storyboard, shot_index: int) -> bool:
    """The truth of a shot's ``when:`` expression (True when it has none)."""
    if shot.when is None:
        return True
    path = ("shots", shot_index, "when")
    # the same load-time refusals as every other template (a Storyboard may be built in code)
    _compile("{{ " + shot.when + " }}", sb, path)
    try:
        return bool(_ENV.compile_expression(shot.when, undefined_to_none=False)(**context))
    except jinja2.TemplateSyntaxError as exc:
        raise sb.fail(path, f"bad template in {_dotted(path)}: {exc.message}") from None
    except _TEMPLATE_ERRORS as exc:
        raise _template_error(exc, _dotted(path), sb, path) from None


def _walk_strings(obj: Any, fn, path: tuple = ()) -> Any:
    """Apply ``fn(string, path)`` to every string inside dicts/lists; return the new tree."""
    if isinstance(obj, str):
        return fn(obj, path)
    if isinstance(obj, dict):
        return {k: _walk_strings(v, fn, path + (k,)) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_walk_strings(v, fn, path + (i,)) for i, v in enumerate(obj)]
    return obj


def render_params(params: dict[str, Any], context: dict[str, Any], sb: Storyboard, shot_index: int) -> dict[str, Any]:
    """Render every string value of a shot's params as a template."""
    base = ("shots", shot_index, "params")
    return _walk_strings(params, lambda s, p: render_text(s, context, where=_dotted(base + p), sb=sb, path=base + p))
