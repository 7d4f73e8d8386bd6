"""The data contracts between the training half and the video half (docs/CONTRACTS.md).

One pydantic model per record kind. Extra fields are allowed on records so that a newer
writer never breaks an older reader, but the named fields are required and typed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_serializer

Letter = Literal["A", "B", "C", "D"]
LETTERS: tuple[str, ...] = ("A", "B", "C", "D")
Split = Literal["train", "eval", "train_hard", "eval_shuffled", "dev", "eval_far", "dev_far"]
Phase = Literal["base", "sft", "rsft", "grpo"]
PHASES: tuple[str, ...] = ("base", "sft", "rsft", "grpo")

# Blank tags (docs/CONTRACTS.md): each blank of a question carries a tag, "[K]", and the TRACE
# writes that tag before and after the entity that fills it; the last blank's tag is "[?]".
# Tags are drawn at random per question (library/questions/wording.py), so the only way to know which
# relation comes next is to find the tag just written in the question and copy what follows it,
# which works at any chain length. The reward reads traces with the tags removed.
BLANK_TAG_POOL = "EFGHJKLMNPQRSTUVWXYZ"  # capitals, minus the option letters A-D and I/O
FINAL_TAG = "?"
BLANK_TAG_RE = re.compile(r"[ \t]*\[(?:[A-Z]|\?)\]")


class PathEdge(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    src: str
    rel: str
    dst: str


class GoldPath(BaseModel):
    model_config = ConfigDict(extra="forbid")
    entities: list[str]
    edges: list[PathEdge]


class Reference(BaseModel):
    model_config = ConfigDict(extra="allow")
    trace: str


class Question(BaseModel):
    """One line of data/train.jsonl, eval.jsonl, train_hard.jsonl, eval_shuffled.jsonl or dev.jsonl."""

    model_config = ConfigDict(extra="allow")
    id: str
    split: Split
    hop_len: int = Field(ge=1)
    question: str
    options: dict[Letter, str]
    answer_star: Letter
    path_star: GoldPath
    prompt: str
    ref: Reference
    meta: dict[str, Any] = Field(default_factory=dict)


class Claim(BaseModel):
    """One ``entity relation entity`` statement the reward read in a TRACE, judged once at
    scoring time: is it an edge of the KG, and is it an edge of the question's gold path."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    src: str
    rel: str
    dst: str
    in_kg: bool
    on_gold_path: bool


#: ``(start, end, entity id)``: where a text names a KG entity, as character offsets into it
Span = tuple[int, int, str]


class TraceStep(BaseModel):
    """One fact clause of a TRACE as a card shows it (library/scoring/answer_format.py:
    ``trace_steps``): the model's own words without the blank tags and the copied question
    steps, and the entities it names (``spans``, offsets into ``text``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    text: str
    spans: list[Span]


def _without_none(data: dict[str, Any], names: tuple[str, ...]) -> dict[str, Any]:
    """``data`` without those of ``names`` that are None: an optional field not recorded is left
    out of the JSONL line (its absence reads back as None)."""
    for name in names:
        if data.get(name, 0) is None:
            del data[name]
    return data


# What scoring stores for readers beyond the parse (None: an episode logged before it did,
# left out of the JSONL line; `kgr migrate` adds them, and readers refuse a run without them).
_PARSED_FOR_READERS = ("spans", "steps", "steps_hidden")


class ParsedCompletion(BaseModel):
    """What the reward parser read from a completion (see library/scoring/reward.py), with the
    claims it judged and what readers show of it: readers use these and never scan the
    completion again.

    ``spans``: every mention of a KG entity in the completion (the reward's EntityMatcher);
    ``steps``: the TRACE's fact clauses as a card shows them; ``steps_hidden``: what the steps
    leave out of the TRACE (``"tags"``, ``"copied question steps"``)."""

    model_config = ConfigDict(extra="allow")
    answer: Letter | None
    trace_text: str
    trace_entities: list[str]
    path_entities: list[str]
    valid_format: bool
    claims: list[Claim]
    spans: list[Span] | None = None
    steps: list[TraceStep] | None = None
    steps_hidden: list[str] | None = None

    @model_serializer(mode="wrap")
    def _drop_unrecorded(self, handler):
        return _without_none(handler(self), _PARSED_FOR_READERS)


class RewardBreakdown(BaseModel):
    """Every reward component, logged separately. ``total`` is what the trainer optimises."""

    model_config = ConfigDict(extra="allow")
    correctness: float
    path_coverage: float
    path_reward: float
    spam_penalty: float
    total: float


EpisodeKind = Literal["eval", "rollout"]
EVAL_KIND = "eval"  # one greedy answer per question, after a phase
ROLLOUT_KIND = "rollout"  # a training sample of RSFT or GRPO
# Optional fields of an episode; None means "does not apply" and is left out of the JSONL line.
_EPISODE_OPTIONAL = ("hop_len", "answer_star", "grounded", "sample_idx", "selected", "eval_split", "finished", "backend")


@dataclass(frozen=True, slots=True)
class Scored:
    """What :meth:`library.scoring.reward.RewardModel.score` returns, computed once per completion:
    the parse (with the typed claims, entity spans and TRACE steps), the reward breakdown, the
    correctness verdict and whether the answer is grounded."""

    parsed: ParsedCompletion
    reward: RewardBreakdown
    correct: bool
    grounded: bool | None = None


class Episode(BaseModel):
    """One model completion, as written to data/runs/<run_id>/episodes.jsonl.

    Every writer builds it with :meth:`from_scored`. ``kind`` tells eval answers (``"eval"``,
    one greedy answer per question) from training samples (``"rollout"``, RSFT/GRPO groups);
    ``eval_split`` is the metrics key of an eval answer (``eval``, ``train_sample``...).
    Readers use ``correct``, ``grounded`` and ``parsed`` (claims, entity spans, TRACE steps)
    and never parse ``completion`` again.
    """

    model_config = ConfigDict(extra="allow")
    phase: Phase
    step: int
    ex_id: str
    split: Split
    prompt: str
    completion: str
    parsed: ParsedCompletion
    reward: RewardBreakdown
    kind: EpisodeKind
    hop_len: int | None = None
    answer_star: Letter | None = None
    correct: bool  # library.scoring.answer_format.is_correct, decided once when it was scored
    #: well-formed, and the TRACE claims every gold edge in path order (decided once when scored)
    grounded: bool | None = None
    sample_idx: int | None = None  # index within an RSFT/GRPO group
    selected: bool | None = None  # RSFT: the sample that was trained on
    eval_split: str | None = None
    finished: bool | None = None  # generation stopped on EOS rather than the token limit
    backend: str | None = None

    @classmethod
    def from_scored(cls, scored: Scored, question: Any, completion: str, *, phase: str, step: int,
                    kind: EpisodeKind, split: str | None = None, **fields: Any) -> "Episode":
        """The one way an episode is made: a question, a completion and its score.

        ``split`` defaults to the question's own split; ``fields`` are the other typed fields
        (``sample_idx``, ``selected``, ``eval_split``, ``finished``, ``backend``).
        """
        return cls(phase=phase, step=step, ex_id=question.id, split=split or question.split, prompt=question.prompt,
                   completion=completion, parsed=scored.parsed, reward=scored.reward, kind=kind,
                   hop_len=question.hop_len, answer_star=question.answer_star, correct=scored.correct,
                   grounded=scored.grounded, **fields)

    def for_readers(self) -> bool:
        """Whether scoring stored what readers show (``grounded``, entity spans, TRACE steps):
        false for an episode logged before it did, which ``kgr migrate`` brings up to date."""
        p = self.parsed
        return self.grounded is not None and p.spans is not None and p.steps is not None and p.steps_hidden is not None

    @model_serializer(mode="wrap")
    def _drop_unrecorded(self, handler):
        return _without_none(handler(self), _EPISODE_OPTIONAL)

