"""Why answers are wrong: where each eval TRACE of a run first leaves its gold path.

Accuracy says how often a phase is right; this says what the wrong answers have in common, read
from the claims the reward stored with each episode (:func:`library.matching.first_departure`).
The two failure modes that matter here are told apart: a ``fact`` departure (right relation from
the right entity, wrong object) is knowledge the model lacks; a ``relation`` departure (the
question's *i*-th relation not used at step *i*) is a model that knows its facts and lost its
place in the chain, the length-generalization failure of docs/RECIPE.md findings 12 and 24-29.

    $ kgr diagnose data/runs/reference-chain
    sft   n=300 wrong=126  relation 83 (62 at step 5) | short 22 | fact 21 | ...

Nothing is generated: a finished run is read as it is (episodes.jsonl and the question files).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any, Iterable, Mapping

from library.contracts import PHASES, Episode, Question
from library.matching import DEPARTURES, first_departure, stored_claims

__all__ = ["departure_block", "diagnose_run"]


def departure_block(episodes: Iterable[Episode], questions: Mapping[str, Question], kg: Any = None) -> dict[str, Any]:
    """Departure counts of one phase's eval episodes (one greedy answer per question).

    ``wrong`` counts the wrong answers by kind, ``wrong_by_step`` by ``"kind@step"``; ``right``
    counts the right answers the same way (a right letter reached off the gold path shows up as
    a departure there: a guess, or a near-miss the options forgive). ``kg`` reads claims of old
    logs that did not store them.
    """
    wrong: Counter[str] = Counter()
    wrong_by_step: Counter[str] = Counter()
    right: Counter[str] = Counter()
    n = 0
    for ep in episodes:
        question = questions[ep.ex_id]
        edges = question.path_star.edges
        kind, step = first_departure(stored_claims(ep.parsed, kg, edges) if kg is not None else (ep.parsed.claims or []),
                                     edges)
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

    The question files and the KG default to the run's own (``meta.json`` config).
    """
    from library.errors import DataFileError
    from library.evaluate import eval_episodes
    from library.jsonl import iter_jsonl
    from library.kg import load_kg
    from library.questions import SPLIT_FILES
    from library.runs import RunDir

    run = RunDir.open(Path(run_dir))
    config = run.read_meta().get("config") or {}
    kg = load_kg(kg_path or config.get("kg_path") or "data/kg.json")
    episodes = list(run.iter_episodes())
    by_phase = {phase: eval_episodes(episodes, phase=phase, split=split) for phase in PHASES}
    by_phase = {phase: eps for phase, eps in by_phase.items() if eps}
    wanted = {qid for eps in by_phase.values() for qid in eps}
    # the shuffled copy's questions carry their own ids in their own file
    path = Path(data_dir or config.get("data_dir") or "data") / SPLIT_FILES.get(split, f"{split}.jsonl")
    if not path.exists():
        raise DataFileError(path, f"question file of the {split!r} episodes not found (pass --data)")
    questions = {q.id: q for _, q in iter_jsonl(path, Question) if q.id in wanted}
    missing = sorted(wanted - set(questions))
    if missing:
        raise DataFileError(path, f"{len(missing)} {split} question(s) of the run are not in this file, e.g. {missing[:3]}")
    return {phase: departure_block(eps.values(), questions, kg) for phase, eps in by_phase.items()}
