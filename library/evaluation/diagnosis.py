"""Why answers are wrong: where each eval TRACE of a run first leaves its gold path.

Accuracy says how often a phase is right; this says what the wrong answers have in common, read
from the claims the reward stored with each episode (:func:`library.scoring.matching.first_departure`).
The two failure modes that matter here are told apart: a ``fact`` departure (right relation from
the right entity, wrong object) is knowledge the model lacks; a ``relation`` departure (the
question's *i*-th relation not used at step *i*) is a model that knows its facts and lost its
place in the chain, the length-generalization failure of docs/FINDINGS.md findings 12 and 24-29.

    $ kgr diagnose data/experiments/reference-chain
    sft   n=300 wrong=126  relation 83 (62 at step 5) | short 22 | fact 21 | ...

Nothing is generated: a finished run is read as it is (episodes.jsonl and the question files).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any, Iterable, Mapping

from library.contracts import PHASES, Episode, Question
from library.graph.oracle import question_walk, walk_claims
from library.scoring.matching import DEPARTURES, first_departure

__all__ = ["departure_block", "diagnose_run"]


def departure_block(episodes: Iterable[Episode], questions: Mapping[str, Question], kg: Any = None) -> dict[str, Any]:
    """Departure counts of one phase's eval episodes (one greedy answer per question).

    With the ``kg``, each TRACE is held against the whole procedure (on a branching graph, every
    branch it carries: a ``branch`` departure at hop *i* is a branch dropped there); without
    it, against the gold path.

    ``wrong`` counts the wrong answers by kind, ``wrong_by_step`` by ``"kind@step"``; ``right``
    counts the right answers the same way (a right letter reached off the gold path shows up as
    a departure there: a guess, or a near-miss the options forgive).
    """
    wrong: Counter[str] = Counter()
    wrong_by_step: Counter[str] = Counter()
    right: Counter[str] = Counter()
    n = 0
    for ep in episodes:
        question = questions[ep.ex_id]
        edges = question.path_star.edges
        procedure = walk_claims(question_walk(kg, question)) if kg is not None else None
        kind, step = first_departure(ep.parsed.claims, edges, procedure)
        n += 1
        if ep.correct:
            right[kind] += 1
        else:
            wrong[kind] += 1
            wrong_by_step[kind if step is None else f"{kind}@{step}"] += 1
    order = {kind: i for i, kind in enumerate(DEPARTURES)}
    return {
        "n": n,
        "n_wrong": sum(wrong.values()),
        "wrong": {k: wrong[k] for k in sorted(wrong, key=lambda k: (-wrong[k], order[k]))},
        "wrong_by_step": dict(sorted(wrong_by_step.items(), key=lambda kv: (order[kv[0].split("@")[0]], kv[0]))),
        "right": {k: right[k] for k in sorted(right, key=lambda k: (-right[k], order[k]))},
    }


def diagnose_run(run_dir: str | Path, *, split: str = "eval", data_dir: str | Path | None = None,
                 kg_path: str | Path | None = None) -> dict[str, dict[str, Any]]:
    """:func:`departure_block` for every phase of a run that has eval episodes on ``split``.

    The question files and the KG default to the run's own (library/runs/reader.py).
    """
    from library.runs.reader import RunView

    run = RunView.open(Path(run_dir), kg=kg_path, data_dir=data_dir)
    by_phase = {phase: run.eval_episodes(phase, split) for phase in PHASES}
    by_phase = {phase: eps for phase, eps in by_phase.items() if eps}
    questions = run.questions_for(ep for eps in by_phase.values() for ep in eps.values())
    return {phase: departure_block(eps.values(), questions, run.kg) for phase, eps in by_phase.items()}
