"""The data contracts between the training half and the video half (docs/CONTRACTS.md).

One pydantic model per record kind. Extra fields are allowed on records so that a newer
writer never breaks an older reader, but the named fields are required and typed.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

Letter = Literal["A", "B", "C", "D"]
LETTERS: tuple[str, ...] = ("A", "B", "C", "D")
Split = Literal["train", "eval", "train_hard", "eval_shuffled", "dev"]
Phase = Literal["base", "sft", "rsft", "grpo"]
PHASES: tuple[str, ...] = ("base", "sft", "rsft", "grpo")

# Blank tags (docs/CONTRACTS.md): each blank of a question carries a tag, "[K]", and the TRACE
# writes that tag before and after the entity that fills it; the last blank's tag is "[?]".
# Tags are drawn at random per question (library/questions.py), so the only way to know which
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


class ParsedCompletion(BaseModel):
    """What the reward parser read from a completion (see library/reward.py)."""

    model_config = ConfigDict(extra="allow")
    answer: Letter | None
    trace_text: str
    trace_entities: list[str]
    path_entities: list[str]
    valid_format: bool


class RewardBreakdown(BaseModel):
    """Every reward component, logged separately. ``total`` is what the trainer optimises."""

    model_config = ConfigDict(extra="allow")
    correctness: float
    path_coverage: float
    path_reward: float
    spam_penalty: float
    total: float


class Episode(BaseModel):
    """One model completion, as written to data/runs/<run_id>/episodes.jsonl."""

    model_config = ConfigDict(extra="allow")
    phase: Phase
    step: int
    ex_id: str
    split: Split
    prompt: str
    completion: str
    parsed: ParsedCompletion
    reward: RewardBreakdown
