"""Everything measured after a phase: greedy answers on the eval subset, its option-shuffled
twin and a train sample (library/evaluation/evaluate.py), and fact recall of the facts the eval
chains need (library/evaluation/recall.py).
"""

from __future__ import annotations

import time
from typing import Any

from rich.console import Console

from library.config import EvalSettings
from library.evaluation.evaluate import evaluate
from library.evaluation.recall import eval_fact_groups, fact_recall, trace_recall
from library.model.distributed import is_writer, wait_for_everyone
from library.questions.balance import select_balanced


# ----------------------------------------------------------------------------- what is measured
def phase_questions(selection: Any, phase: str, settings: EvalSettings, seed: int, last: bool = True) -> dict[str, list]:
    """The questions ``phase``'s evaluation answers, by metrics key: the eval subset (before the
    ``last`` phase ``settings.n_eval_between`` of them, for the base model ``settings.n_eval_base``
    of those, each hop-balanced), its option-shuffled twin where ``settings.shuffled_phases`` asks
    for it, the train sample, and eval_far (one hop past eval) after ``settings.far_phases``."""
    answered = selection.eval
    if not last and settings.n_eval_between is not None and settings.n_eval_between < len(answered):
        answered = select_balanced(answered, settings.n_eval_between, f"{seed}:between")
    if phase == "base" and settings.n_eval_base is not None and settings.n_eval_base < len(answered):
        answered = select_balanced(answered, settings.n_eval_base, f"{seed}:base_eval")
    shuffled_phases = settings.shuffled_phases
    shuffled = selection.eval_shuffled if shuffled_phases is None or phase in shuffled_phases else []
    far = selection.eval_far if phase in settings.far_phases else []
    return {"eval": answered, "eval_shuffled": shuffled, "train_sample": selection.train_sample, "eval_far": far}


def answer_window(key: str, settings: EvalSettings) -> int:
    """The most tokens an answer to ``key``'s questions (a :func:`phase_questions` key) may take:
    eval_far's chains are a hop longer than the others'."""
    return settings.far_max_new_tokens if key == "eval_far" else settings.max_new_tokens


def measures_recall(phase: str, settings: EvalSettings) -> bool:
    """Whether ``phase``'s evaluation measures fact recall (``settings.recall_phases``)."""
    return settings.recall_phases is None or phase in settings.recall_phases


def traced_questions(eval_questions: list, settings: EvalSettings, seed: int) -> list:
    """The eval questions whose gold TRACE the in-TRACE recall teacher-forces."""
    n_trace = settings.n_trace_recall
    return eval_questions if n_trace is None else select_balanced(eval_questions, n_trace, f"{seed}:trace_recall")


# ----------------------------------------------------------------------------- eval
def evaluate_phase(model, tokenizer, phase: str, selection: Any, reward_model, run: Any, settings: EvalSettings,
                   console: Console, *, seed: int, kg: Any = None, last: bool = True) -> dict[str, dict[str, Any]]:
    """Greedy eval of ``model`` on the eval subset, its shuffled twin and the train sample, and
    fact recall (library/train/facts.py) of the (entity, relation) groups the eval chains use.

    ``selection``: the run's question sets (library.train.data.Selection: ``eval``,
    ``eval_shuffled``, ``train_sample``); the in-TRACE recall teacher-forces the data's reference
    TRACE, the one SFT taught. Returns ``{key: block}`` (keys: eval, eval_shuffled,
    train_sample, facts); the episodes go to the run's episodes.jsonl.

    Across N processes (library/model/distributed.py) the greedy answers are sharded: each process
    answers a contiguous slice of every split, the episodes are gathered in question order and
    the main process logs them (``library.evaluation.evaluate.evaluate``), so the answers cost 1/N of the
    time. Fact recall is teacher-forced (one forward pass per batch, no decoding loop) and runs
    on the main process while the others wait at the barrier after it: it is the cheaper part
    (~55 s of a ~130 s quick-profile eval on this CPU against ~75 s of decoding), and sharding it
    would need its per-group hits gathered for the per-relation shares. Why sharding the
    answers rather than answering on the main process alone: decoding is per-question work with
    no communication, so N processes finish it in ~1/N of the time, while the main-only design
    leaves N-1 GPUs idle for the whole decoding. (On this 2-core CPU, shared with another job,
    the two designs could not be timed apart meaningfully: docs/SCALE_OUT.md.)
    """
    kg = kg if kg is not None else reward_model.kg
    blocks = {}
    for key, questions in phase_questions(selection, phase, settings, seed, last).items():
        if not questions:
            continue
        t0 = time.perf_counter()
        # run_training is the single writer of metrics.json (it writes the blocks when the phase
        # completes), so a half-done phase never shows up as a result.
        blocks[key] = evaluate(
            model, tokenizer, questions, reward_model, phase=phase, split=key, run=run,
            batch_size=settings.batch_size, max_new_tokens=answer_window(key, settings),
        )
        acc = blocks[key].get("accuracy")
        console.print(f"  [dim]{phase} eval[/] {key:<14} n={len(questions):<4} accuracy={acc:.3f} "
                      f"({time.perf_counter() - t0:.0f}s)")
    if selection.eval and is_writer() and measures_recall(phase, settings):
        # Did the model learn the facts the eval chains need (apart from composing them)?
        # Recall where the facts were taught (knowledge rows) and where composition needs them
        # (inside the gold TRACE of each eval question, teacher-forced): docs/FINDINGS.md.
        t0 = time.perf_counter()
        blocks["facts"] = fact_recall(model, tokenizer, kg, eval_fact_groups(kg, selection.eval))
        traced = traced_questions(selection.eval, settings, seed)
        in_trace = trace_recall(model, tokenizer, kg, traced)
        in_trace.pop("hits")
        blocks["facts"]["in_trace"] = in_trace
        console.print(f"  [dim]{phase} eval[/] {'facts':<14} n={blocks['facts']['n']:<4} "
                      f"recall={blocks['facts']['recall']:.3f}, inside the TRACE {in_trace['recall']:.3f} "
                      f"({time.perf_counter() - t0:.0f}s)")
    wait_for_everyone()  # the other processes wait while the main one measures fact recall
    return blocks
