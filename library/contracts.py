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
Split = Literal["train", "eval", "train_hard", "eval_shuffled", "dev"]
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


class ParsedCompletion(BaseModel):
    """What the reward parser read from a completion (see library/scoring/reward.py), with the
    claims it judged: readers use these and never scan the TRACE again."""

    model_config = ConfigDict(extra="allow")
    answer: Letter | None
    trace_text: str
    trace_entities: list[str]
    path_entities: list[str]
    valid_format: bool
    claims: list[Claim]


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
_EPISODE_OPTIONAL = ("hop_len", "answer_star", "sample_idx", "selected", "eval_split", "finished", "backend")


@dataclass(frozen=True, slots=True)
class Scored:
    """What :meth:`library.scoring.reward.RewardModel.score` returns, computed once per completion:
    the parse (with the typed claims), the reward breakdown and the correctness verdict."""

    parsed: ParsedCompletion
    reward: RewardBreakdown
    correct: bool


class Episode(BaseModel):
    """One model completion, as written to data/runs/<run_id>/episodes.jsonl.

    Every writer builds it with :meth:`from_scored`. ``kind`` tells eval answers (``"eval"``,
    one greedy answer per question) from training samples (``"rollout"``, RSFT/GRPO groups);
    ``eval_split`` is the metrics key of an eval answer (``eval``, ``train_sample``...).
    Readers use ``correct`` and ``parsed.claims`` and never parse ``completion`` again.
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
                   hop_len=question.hop_len, answer_star=question.answer_star, correct=scored.correct, **fields)

    @model_serializer(mode="wrap")
    def _drop_unrecorded(self, handler):
        data = handler(self)
        for name in _EPISODE_OPTIONAL:
            if data.get(name, 0) is None:
                del data[name]
        return data

