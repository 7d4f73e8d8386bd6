"""Payload models for the Manim scenes: one pydantic model per scene type.

A payload holds fully RESOLVED data: every string is already formatted and every number is
the value to draw. The storyboard compiler (``scenes/storyboard.py``) fills these from run
data through its templates, so no scene reads a file or formats a metric itself; that keeps
"every number on screen comes from run data" checkable in one place.

Models forbid unknown keys so that a typo in a storyboard fails loudly here instead of being
silently dropped, and cross-field checks (path ids exist, ranges are ordered, ...) run at
validation time so a render never starts on data it cannot draw.

>>> TitlePayload(title="Teaching a small model to hop").subtitle
''
>>> try:
...     RewardComponent(name="path", value=2.0, lo=0.0, hi=1.0)
... except ValueError as e:
...     print("outside its range [0.0, 1.0]" in str(e))
True
"""

from __future__ import annotations

import math
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

# Tolerance for "value inside its range" checks: values come from float arithmetic in the run
# logs, and a reward of 1.0000000002 against hi=1.0 is not a data error.
_EPS = 1e-9

NonEmptyStr = Annotated[str, Field(min_length=1)]


class _Model(BaseModel):
    """Base for all payload parts: unknown keys are errors, NaN/inf are rejected."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


def _check_range(name: str, lo: float, hi: float) -> None:
    if not lo <= hi:
        raise ValueError(f"{name}: range [{lo}, {hi}] is reversed (lo must be <= hi)")


# --------------------------------------------------------------------------- title


class TitlePayload(_Model):
    """Title card: a title, an optional subtitle and an optional small footer line."""

    title: NonEmptyStr
    subtitle: str = ""
    footer: str = ""


# --------------------------------------------------------------------------- kg_path


class KGNode(_Model):
    """One entity of the drawn subgraph. ``type`` is the KG entity type (symptom, cause, ...)."""

    id: NonEmptyStr
    label: NonEmptyStr
    type: str = ""


class KGEdge(_Model):
    """One KG edge of the drawn subgraph; ``rel_label`` is the human-readable relation."""

    src: NonEmptyStr
    rel: NonEmptyStr
    rel_label: str
    dst: NonEmptyStr


class WrongEdge(_Model):
    """An edge the model's TRACE claimed that is not in the KG (or a wrong hop)."""

    src: NonEmptyStr
    rel_label: str
    dst: NonEmptyStr


class KGPathPayload(_Model):
    """A question, the subgraph around its gold path, and what the model's trace claimed.

    ``path`` lists entity ids in hop order; consecutive ids must be joined by an edge in
    ``edges`` (either direction is accepted, so a reversed relation still draws). ``mentioned``
    and the endpoints of ``wrong_edges`` must be nodes of the subgraph. ``correct`` is None when
    no model answer is shown (the scene then only reveals the gold answer).

    ``branch_edges``: true edges the model's TRACE stated that the reasoning procedure carries
    off the gold path (on a branching graph it states every successor of every held entity;
    library/graph/oracle.py), taken from the claims the reward stored with the episode. They
    are branches the graph prunes: none reaches the answer. Empty on a functional graph.
    ``branches_not_shown`` counts the branch entities left out of ``nodes`` (the node cap), so
    the scene can say how many it does not draw.
    """

    question: NonEmptyStr
    nodes: list[KGNode] = Field(min_length=1)
    edges: list[KGEdge] = Field(default_factory=list)
    path: list[str] = Field(min_length=1)
    mentioned: list[str] = Field(default_factory=list)
    wrong_edges: list[WrongEdge] = Field(default_factory=list)
    branch_edges: list[KGEdge] = Field(default_factory=list)
    branches_not_shown: int = Field(default=0, ge=0)
    answer_label: NonEmptyStr
    predicted_label: str = ""
    correct: bool | None = None
    phase_label: str = ""

    @model_validator(mode="after")
    def _check_references(self) -> "KGPathPayload":
        ids = [n.id for n in self.nodes]
        dup = sorted({i for i in ids if ids.count(i) > 1})
        if dup:
            raise ValueError(f"duplicate node ids: {dup}")
        known = set(ids)

        def need(where: str, node_id: str) -> None:
            if node_id not in known:
                raise ValueError(f"{where} refers to unknown node id {node_id!r} (not in nodes)")

        for e in self.edges:
            need(f"edge {e.src}-{e.rel}->{e.dst}", e.src)
            need(f"edge {e.src}-{e.rel}->{e.dst}", e.dst)
        for i, p in enumerate(self.path):
            need(f"path[{i}]", p)
        if len(set(self.path)) != len(self.path):
            raise ValueError(f"path visits a node twice: {self.path}")
        pairs = {(e.src, e.dst) for e in self.edges} | {(e.dst, e.src) for e in self.edges}
        for a, b in zip(self.path, self.path[1:]):
            if (a, b) not in pairs:
                raise ValueError(f"path hop {a} -> {b} has no edge in edges")
        for m in self.mentioned:
            need("mentioned", m)
        for w in self.wrong_edges:
            need(f"wrong edge {w.src}->{w.dst}", w.src)
            need(f"wrong edge {w.src}->{w.dst}", w.dst)
        hops = set(zip(self.path, self.path[1:]))
        for b in self.branch_edges:
            need(f"branch edge {b.src}-{b.rel}->{b.dst}", b.src)
            need(f"branch edge {b.src}-{b.rel}->{b.dst}", b.dst)
            if (b.src, b.dst) in hops:
                raise ValueError(f"branch edge {b.src}-{b.rel}->{b.dst} is a hop of the gold path, not a branch")
        return self


# --------------------------------------------------------------------------- reward_bars


class RewardComponent(_Model):
    """One reward term: its value and the range it can take (the bar's scale)."""

    name: NonEmptyStr
    value: float
    lo: float
    hi: float

    @model_validator(mode="after")
    def _check(self) -> "RewardComponent":
        _check_range(f"component {self.name!r}", self.lo, self.hi)
        if not self.lo - _EPS <= self.value <= self.hi + _EPS:
            raise ValueError(
                f"component {self.name!r}: value {self.value} is outside its range "
                f"[{self.lo}, {self.hi}] (the bar scale would lie)"
            )
        return self


class RewardBarsPayload(_Model):
    """Reward components as bars (can be negative) plus a highlighted total bar."""

    title: str
    components: list[RewardComponent] = Field(min_length=1)
    total: float
    total_range: tuple[float, float]
    note: str = ""

    @model_validator(mode="after")
    def _check(self) -> "RewardBarsPayload":
        lo, hi = self.total_range
        _check_range("total_range", lo, hi)
        if not lo - _EPS <= self.total <= hi + _EPS:
            raise ValueError(f"total {self.total} is outside total_range [{lo}, {hi}]")
        return self


# --------------------------------------------------------------------------- before_after


class TraceStep(_Model):
    """One hop of a TRACE as a card shows it: the model's own words, tags and copied question
    steps hidden (``parsed.steps``, stored by scoring). ``path``: character spans of ``text`` that
    name entities of the gold path (the step's stored entity spans, of the entities of the claims
    the reward judged on the gold path), drawn highlighted."""

    text: NonEmptyStr
    path: list[tuple[int, int]] = Field(default_factory=list)

    @model_validator(mode="after")
    def _check(self) -> "TraceStep":
        end = 0
        for a, b in self.path:
            if not end <= a < b <= len(self.text):
                raise ValueError(f"path span ({a}, {b}) is not an ordered span of {self.text!r}")
            end = b
        return self


class PhaseAnswer(_Model):
    """What one training phase's model wrote for the question. ``answer`` None = no answer.

    ``steps``: the TRACE as displayed (empty: ``trace`` as written); only ever the TRACE with
    parts left out, never a word added (checked). ``note`` says what the steps leave out.
    ``summary``: one line about the TRACE's stored claims, for a card too small to quote it."""

    phase_label: NonEmptyStr
    trace: str
    answer: str | None = None
    correct: bool
    steps: list[TraceStep] = Field(default_factory=list)
    note: str = ""
    summary: str = ""

    @model_validator(mode="after")
    def _check(self) -> "PhaseAnswer":
        # the steps are the TRACE with parts hidden: their characters, in order, are a
        # subsequence of the TRACE's (whitespace aside), so no display adds a word
        it = iter("".join(self.trace.split()))
        shown = "".join("".join(s.text.split()) for s in self.steps)
        if not all(ch in it for ch in shown):
            raise ValueError(f"the steps {[s.text for s in self.steps]} are not the TRACE {self.trace!r} with parts left out")
        return self


class BeforeAfterPayload(_Model):
    """The same question answered by 1-4 phases (base, SFT, RSFT, GRPO, ...)."""

    question: NonEmptyStr
    options: dict[str, str] = Field(default_factory=dict)
    answer_star: str
    rows: list[PhaseAnswer] = Field(min_length=1, max_length=4)

    @model_validator(mode="after")
    def _check(self) -> "BeforeAfterPayload":
        if self.options and self.answer_star not in self.options:
            raise ValueError(
                f"answer_star {self.answer_star!r} is not one of the options {sorted(self.options)}"
            )
        return self


# --------------------------------------------------------------------------- training_curves


class CurveSeries(_Model):
    """One polyline: (x, y) points in increasing x."""

    name: NonEmptyStr
    points: list[tuple[float, float]] = Field(min_length=1)

    @model_validator(mode="after")
    def _check(self) -> "CurveSeries":
        xs = [p[0] for p in self.points]
        if any(b < a for a, b in zip(xs, xs[1:])):
            raise ValueError(f"series {self.name!r}: x values must be non-decreasing")
        return self


class PhaseBoundary(_Model):
    """A dashed vertical line at ``x`` labelled with the phase that starts there."""

    x: float
    label: str


class HLine(_Model):
    """A dashed horizontal line at ``y`` (a threshold), labelled at its right end."""

    y: float
    label: str


class StepMark(_Model):
    """A step the chart marks on its x axis: where a monitor warned, or where it stopped."""

    x: float
    kind: Literal["warning", "stop"]


class TrainingCurvesPayload(_Model):
    """Line chart of 1+ series over training steps, with phase boundaries (or any labelled
    step, such as where a monitor stopped a phase), horizontal lines and a legend."""

    title: str
    series: list[CurveSeries] = Field(min_length=1, max_length=6)
    phase_boundaries: list[PhaseBoundary] = Field(default_factory=list)
    hlines: list[HLine] = Field(default_factory=list, max_length=3)
    marks: list[StepMark] = Field(default_factory=list)
    x_label: str
    y_label: str
    y_range: tuple[float, float]

    @model_validator(mode="after")
    def _check(self) -> "TrainingCurvesPayload":
        lo, hi = self.y_range
        if not lo < hi:
            raise ValueError(f"y_range [{lo}, {hi}] must have lo < hi")
        return self

    @property
    def x_range(self) -> tuple[float, float]:
        """Smallest x interval holding every point and boundary (widened if degenerate)."""
        xs = [p[0] for s in self.series for p in s.points] + [b.x for b in self.phase_boundaries]
        lo, hi = min(xs), max(xs)
        if math.isclose(lo, hi):
            lo, hi = lo - 0.5, hi + 0.5
        return lo, hi


# --------------------------------------------------------------------------- distribution_trap


class ErrorBar(_Model):
    """A bar with an interval [lo, hi] around ``value`` and its sample count ``n``; ``text``
    (optional) is the value as the bar's label writes it ("+4.0 points")."""

    label: NonEmptyStr
    value: float
    lo: float
    hi: float
    n: int = Field(ge=0)
    text: str = ""

    @model_validator(mode="after")
    def _check(self) -> "ErrorBar":
        _check_range(f"bar {self.label!r}", self.lo, self.hi)
        return self


class DistributionTrapPayload(_Model):
    """Accuracy (or any score) per training distribution, with error bars and n."""

    title: str
    bars: list[ErrorBar] = Field(min_length=1, max_length=8)
    y_label: str
    note: str = ""


# --------------------------------------------------------------------------- phase_flow


class PhaseBox(_Model):
    """One phase: its name, what it trained on (a short line each) and its result."""

    label: NonEmptyStr
    lines: list[str] = Field(default_factory=list, max_length=4)
    result: str = ""


class PhaseArrow(_Model):
    """What the next phase changed: the arrow's label, and whether it is measurable (its
    paired interval excludes 0), which decides the arrow's colour."""

    text: NonEmptyStr
    measurable: bool = False
    diff: float = 0.0  # the difference's sign colours a measurable arrow: a gain green, a loss red


class PhaseFlowPayload(_Model):
    """The phases as boxes joined by arrows; ``arrows[i]`` leads from box i to box i + 1."""

    title: str
    boxes: list[PhaseBox] = Field(min_length=1, max_length=5)
    arrows: list[PhaseArrow] = Field(default_factory=list)
    note: str = ""

    @model_validator(mode="after")
    def _check(self) -> "PhaseFlowPayload":
        if len(self.arrows) != len(self.boxes) - 1:
            raise ValueError(f"{len(self.boxes)} boxes need {len(self.boxes) - 1} arrows, got {len(self.arrows)}")
        return self


# --------------------------------------------------------------------------- question_build


class WalkHop(_Model):
    """One hop of the walk a question was made from, as labels."""

    src: NonEmptyStr
    rel: NonEmptyStr
    dst: NonEmptyStr


class BuiltOption(_Model):
    """An option as the generator made it: the answer (the walk's end) or a distractor, with
    where it came from (``meta.distractors[].source``, in words)."""

    letter: NonEmptyStr
    label: NonEmptyStr
    source: NonEmptyStr
    answer: bool = False


class DataCheck(_Model):
    """One of the data's own checks (stats.json), its count in words and whether it passed."""

    label: NonEmptyStr
    ok: bool


class QuestionBuildPayload(_Model):
    """A question being built: the walk, the options with their sources, then the checks."""

    title: str
    question: NonEmptyStr
    hops: list[WalkHop] = Field(min_length=1, max_length=8)
    options: list[BuiltOption] = Field(min_length=2, max_length=8)
    checks: list[DataCheck] = Field(default_factory=list, max_length=12)

    @model_validator(mode="after")
    def _check(self) -> "QuestionBuildPayload":
        if sum(o.answer for o in self.options) != 1:
            raise ValueError("exactly one option must be the answer")
        return self


# --------------------------------------------------------------------------- kg_overview


class OverviewNode(_Model):
    """A node of the overview: ``x``, ``y`` in [0, 1] (the layout, fitted to the frame by the
    scene), its ``wave`` (when it appears: undirected hops from the walk) and its type."""

    id: NonEmptyStr
    label: NonEmptyStr
    type: str = ""
    x: float = Field(ge=0, le=1)
    y: float = Field(ge=0, le=1)
    wave: int = Field(ge=0)


class OverviewEdge(_Model):
    src: NonEmptyStr
    dst: NonEmptyStr


class KGOverviewPayload(_Model):
    """A sample of the graph around one question's walk, drawn wave by wave, with the graph's
    counts; then the walk, hop by hop, labelled. ``walk`` lists node ids in hop order."""

    title: str
    nodes: list[OverviewNode] = Field(min_length=1, max_length=80)
    edges: list[OverviewEdge] = Field(default_factory=list)
    walk: list[str] = Field(default_factory=list)
    counts: list[str] = Field(default_factory=list, max_length=4)
    note: str = ""

    @model_validator(mode="after")
    def _check(self) -> "KGOverviewPayload":
        ids = {n.id for n in self.nodes}
        for ref in [e.src for e in self.edges] + [e.dst for e in self.edges] + self.walk:
            if ref not in ids:
                raise ValueError(f"{ref!r} is not a node of the overview")
        pairs = {(e.src, e.dst) for e in self.edges} | {(e.dst, e.src) for e in self.edges}
        for a, b in zip(self.walk, self.walk[1:]):
            if (a, b) not in pairs:
                raise ValueError(f"walk hop {a} -> {b} has no edge")
        return self


# --------------------------------------------------------------------------- results_table


class ResultsTablePayload(_Model):
    """A grid of pre-formatted cells; ``highlight_row`` indexes ``rows`` (header excluded)."""

    title: str
    columns: list[str] = Field(min_length=1)
    rows: list[list[str]] = Field(min_length=1)
    highlight_row: int | None = None
    note: str = ""

    @model_validator(mode="after")
    def _check(self) -> "ResultsTablePayload":
        for i, r in enumerate(self.rows):
            if len(r) != len(self.columns):
                raise ValueError(
                    f"row {i} has {len(r)} cells but there are {len(self.columns)} columns"
                )
        if self.highlight_row is not None and not 0 <= self.highlight_row < len(self.rows):
            raise ValueError(
                f"highlight_row {self.highlight_row} is out of range (0..{len(self.rows) - 1})"
            )
        return self


#: scene type -> payload model. The registry pairs these with scene classes; this map lets the
#: storyboard compiler validate payloads without importing manim.
PAYLOAD_MODELS: dict[str, type[BaseModel]] = {
    "title": TitlePayload,
    "kg_path": KGPathPayload,
    "reward_bars": RewardBarsPayload,
    "before_after": BeforeAfterPayload,
    "training_curves": TrainingCurvesPayload,
    "distribution_trap": DistributionTrapPayload,
    "results_table": ResultsTablePayload,
    "monitor": TrainingCurvesPayload,
    "intervals": DistributionTrapPayload,
    "phase_flow": PhaseFlowPayload,
    "question_build": QuestionBuildPayload,
    "kg_overview": KGOverviewPayload,
}


def validate_payload(scene_type: str, payload: dict) -> BaseModel:
    """Validate ``payload`` for ``scene_type``; raise ValueError naming the scene type.

    >>> validate_payload("title", {"title": "Hi"}).title
    'Hi'
    >>> validate_payload("nope", {})
    Traceback (most recent call last):
    ...
    ValueError: unknown scene type 'nope'; known: before_after, distribution_trap, intervals, kg_overview, kg_path, monitor, phase_flow, question_build, results_table, reward_bars, title, training_curves
    """
    model = PAYLOAD_MODELS.get(scene_type)
    if model is None:
        raise ValueError(f"unknown scene type {scene_type!r}; known: {', '.join(sorted(PAYLOAD_MODELS))}")
    try:
        return model.model_validate(payload)
    except Exception as exc:  # pydantic.ValidationError: re-raise with the scene type in front
        raise ValueError(f"invalid {scene_type!r} payload: {exc}") from exc
