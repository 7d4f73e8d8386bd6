"""Why answers are wrong: where each eval TRACE of a run first leaves its gold path.

Accuracy says how often a phase is right; this says what the wrong answers have in common, read
from the claims the reward stored with each episode (:func:`library.scoring.matching.first_departure`).
The two failure modes that matter here are told apart: a ``fact`` departure (right relation from
the right entity, wrong object) is knowledge the model lacks; a ``relation`` departure (the
question's *i*-th relation not used at step *i*) is a model that knows its facts and lost its
place in the chain, the length-generalization failure of docs/FINDINGS.md findings 12 and 24-29.

    $ kgr diagnose data/experiments/reference-chain --data data/experiments/reference-chain/data
    sft   n=300 wrong=126  relation 83 (62 at step 5) | short 22 | fact 21 | ...

Each wrong answer is also placed by what RL on training prompts can show of it (``reach``): the
graph's facts are taught whatever a chain's length, so a ``fact`` departure can show as a wrong
answer on a training prompt; a departure past the longest training chain (*L* steps), or one that
takes the question's last step at step *L* and ends there, is a choice that every training chain
rewards as right (``beyond``); the rest is ``within``. RL on training prompts can reach the first
and the last, not ``beyond`` (docs/FINDINGS.md findings 60 and 65).

Nothing is generated: a finished run is read as it is (episodes.jsonl and the question files).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from library.contracts import PHASES, Claim, Episode, Question
from library.errors import DataFileError
from library.graph.oracle import question_walk, walk_claims
from library.runs.reader import RunView
from library.scoring.matching import DEPARTURES, departure_index, first_departure, held_procedure

__all__ = ["REACH", "departure_block", "diagnose_run", "diagnose_view", "longest_trained", "reach", "repair_block"]

#: What RL on training prompts can show of a departure (:func:`reach`), in the order a report lists them.
REACH = ("fact", "within", "beyond")


def reach(kind: str, hop: int | None, claims: Sequence[Claim], procedure: Sequence[tuple[str, str, str, int]],
          longest_trained: int) -> str:
    """Can a training chain of at most ``longest_trained`` steps tell this departure from the
    procedure? ``fact``: a fact not recalled (the facts are taught whatever a chain's length);
    ``beyond``: no: the departure comes after step ``longest_trained``, or at that step it takes
    the question's last relation and states nothing else after (what every chain of that length
    does right); ``within``: yes (on a question no longer than the training chains, always).

    ``procedure`` is the honest TRACE's claims ``(src, rel, dst, hop)``, as
    :func:`library.scoring.matching.first_departure` holds them. With 3-step training chains:

    >>> from library.contracts import Claim
    >>> c = lambda s, r, d: Claim(src=s, rel=r, dst=d, in_kg=True, on_gold_path=False)
    >>> walk = [("A", "r", "B", 1), ("B", "s", "C", 2), ("C", "r", "D", 3), ("D", "t", "E", 4)]
    >>> took_last = [c("A", "r", "B"), c("B", "s", "C"), c("C", "t", "X")]   # step 3 took the [?] step
    >>> reach("relation", 3, took_last, walk, 3), reach("short", 4, took_last[:2] + [c("C", "r", "D")], walk, 3)
    ('beyond', 'beyond')
    >>> reach("relation", 2, [c("A", "r", "B"), c("B", "r", "X")], walk, 3), reach("fact", 4, [], walk, 3)
    ('within', 'fact')
    >>> reach("long", 4, took_last[:2] + [c("C", "r", "D"), c("D", "s", "F")], walk[:3], 3)  # a 3-hop question
    'within'
    """
    if kind == "fact":
        return "fact"
    if hop is None or hop < longest_trained or (procedure and procedure[-1][3] <= longest_trained):
        return "within"
    if hop > longest_trained:
        return "beyond"
    # at the last trained step: from the departing claim on, only the question's last relation
    last_rel = procedure[-1][1]
    rest = claims[departure_index(claims, procedure):]
    return "beyond" if kind == "relation" and rest and all(cl.rel == last_rel for cl in rest) else "within"


def _departures(episodes: Iterable[Episode], questions: Mapping[str, Question], kg: Any,
                longest_trained: int | None = None) -> dict[str, tuple[Episode, str, str, str | None]]:
    """``{ex_id: (episode, kind, "kind@step", reach)}``: where each TRACE first leaves its path (one
    answer per question: a phase's greedy eval answers), and :func:`reach` where
    ``longest_trained`` is given (else None)."""
    out = {}
    for ep in episodes:
        if ep.ex_id in out:
            raise ValueError(f"two answers to question {ep.ex_id} of one phase: departures count one answer per question")
        question = questions[ep.ex_id]
        start = question.path_star.entities[0]
        if kg is not None and start not in kg.entities:
            raise DataFileError(kg.source, f"question {question.id} starts at {start!r}, which this graph does not "
                                           "hold: is it the run's graph? (pass --kg)")
        procedure = walk_claims(question_walk(kg, question)) if kg is not None else None
        kind, step = first_departure(ep.parsed.claims, question.path_star.edges, procedure)
        where = None
        if longest_trained is not None:
            held = held_procedure(question.path_star.edges, procedure)
            where = reach(kind, step, ep.parsed.claims, held, longest_trained)
        out[ep.ex_id] = (ep, kind, kind if step is None else f"{kind}@{step}", where)
    return out


def _by_kind(counts: Counter[str]) -> dict[str, int]:
    order = {kind: i for i, kind in enumerate(DEPARTURES)}
    return {k: counts[k] for k in sorted(counts, key=lambda k: (-counts[k], order[k]))}


def _by_step(counts: Counter[str]) -> dict[str, int]:
    order = {kind: i for i, kind in enumerate(DEPARTURES)}
    return dict(sorted(counts.items(), key=lambda kv: (order[kv[0].split("@")[0]], kv[0])))


def departure_block(episodes: Iterable[Episode], questions: Mapping[str, Question], kg: Any = None, *,
                    longest_trained: int | None = None) -> dict[str, Any]:
    """Departure counts of one phase's eval episodes (one greedy answer per question).

    With the ``kg``, each TRACE is held against the whole procedure (on a branching graph, every
    branch it carries: a ``branch`` departure at hop *i* is a branch dropped there); without
    it, against the gold path.

    ``wrong`` counts the wrong answers by kind, ``wrong_by_step`` by ``"kind@step"``; ``right``
    counts the right answers the same way (a right letter reached off the gold path shows up as
    a departure there: a guess, or a near-miss the options forgive). With ``longest_trained``
    (the most steps of a training chain), ``wrong_by_reach`` counts the wrong answers by
    :func:`reach`.
    """
    return _departure_counts(_departures(episodes, questions, kg, longest_trained))


def _departure_counts(departures: Mapping[str, tuple[Episode, str, str, str | None]]) -> dict[str, Any]:
    wrong: Counter[str] = Counter()
    wrong_by_step: Counter[str] = Counter()
    wrong_by_reach: Counter[str] = Counter()
    right: Counter[str] = Counter()
    for ep, kind, at_step, where in departures.values():
        if ep.correct:
            right[kind] += 1
        else:
            wrong[kind] += 1
            wrong_by_step[at_step] += 1
            wrong_by_reach[where] += 1
    block = {
        "n": len(departures),
        "n_wrong": sum(wrong.values()),
        "wrong": _by_kind(wrong),
        "wrong_by_step": _by_step(wrong_by_step),
        "right": _by_kind(right),
    }
    if departures and all(where is not None for *_, where in departures.values()):
        block["wrong_by_reach"] = {where: wrong_by_reach[where] for where in REACH}
    return block


def repair_block(before: Iterable[Episode], after: Iterable[Episode], questions: Mapping[str, Question],
                 kg: Any = None, *, longest_trained: int | None = None) -> dict[str, Any]:
    """What a phase repaired: the earlier phase's wrong answers by departure kind, and how many of
    each the later phase answers right; ``broken`` counts the questions it turned from right to
    wrong. Only questions both phases answered count. With ``longest_trained``, the same by
    :func:`reach` (``wrong_by_reach``, ``repaired_by_reach``).

    RL that only sees short prompts can repair what shows on them (a fact not recalled) and not a
    rule that fits every short chain (the last step after the second tag), so the kinds tell
    which failures a phase reaches (docs/FINDINGS.md finding 60). For example, on the paper
    profile's run (RL on 1-3-hop prompts) and on the reference run (RSFT on 3- and 4-hop prompts)::

        >>> from library.runs.reader import RunView
        >>> repo = Path(__file__).resolve().parents[2]
        >>> for name in ("experiments/reference-paper", "runs/reference"):
        ...     run = RunView.open(repo / "data" / name)
        ...     sft, grpo = run.eval_episodes("sft"), run.eval_episodes("grpo")
        ...     block = repair_block(sft.values(), grpo.values(), run.questions_for(sft.values()), run.kg)
        ...     print(block["wrong"]["fact"], block["repaired"]["fact"], block["repaired_by_step"].get("relation@4", 0))
        29 14 0
        26 7 8
    """
    later = {ep.ex_id: ep for ep in after}
    return _repair_counts(_departures((ep for ep in before if ep.ex_id in later), questions, kg, longest_trained),
                          later)


def _repair_counts(earlier: Mapping[str, tuple[Episode, str, str, str | None]],
                   later: Mapping[str, Episode]) -> dict[str, Any]:
    wrong: Counter[str] = Counter()
    wrong_by_step: Counter[str] = Counter()
    wrong_by_reach: Counter[str] = Counter()
    repaired: Counter[str] = Counter()
    repaired_by_step: Counter[str] = Counter()
    repaired_by_reach: Counter[str] = Counter()
    broken = n = 0
    for ex_id, (ep, kind, at_step, where) in earlier.items():
        if ex_id not in later:
            continue
        n += 1
        now_right = later[ex_id].correct
        if ep.correct:
            broken += not now_right
            continue
        wrong[kind] += 1
        wrong_by_step[at_step] += 1
        repaired[kind] += now_right
        repaired_by_step[at_step] += now_right
        wrong_by_reach[where] += 1
        repaired_by_reach[where] += now_right
    block = {
        "n": n,
        "wrong": _by_kind(wrong),
        "repaired": {kind: repaired[kind] for kind in _by_kind(wrong)},
        "wrong_by_step": _by_step(wrong_by_step),
        "repaired_by_step": {key: repaired_by_step[key] for key in _by_step(wrong_by_step)},
        "broken": broken,
    }
    if earlier and all(where is not None for *_, where in earlier.values()):
        block["wrong_by_reach"] = {where: wrong_by_reach[where] for where in REACH}
        block["repaired_by_reach"] = {where: repaired_by_reach[where] for where in REACH}
    return block


def diagnose_run(run_dir: str | Path, *, split: str = "eval", data_dir: str | Path | None = None,
                 kg_path: str | Path | None = None) -> dict[str, dict[str, Any]]:
    """:func:`departure_block` for every phase of a run that has eval episodes on ``split``, each
    after the first with ``from``: its :func:`repair_block` against the phase before it (named
    by ``from["before"]``).

    The question files and the KG default to the run's own (library/runs/reader.py).
    """
    return diagnose_view(RunView.open(Path(run_dir), kg=kg_path, data_dir=data_dir), split)


def longest_trained(run: Any) -> int | None:
    """The most steps of a chain the run could train on: the longest question of its training
    split, and of ``train_hard`` where its RSFT or GRPO prompts may come from there (RSFT's
    ``hard`` or ``mix`` distribution, ``grpo.pool.splits`` of older runs), or the longest RL
    prompt length (``prompt_hops``, one past SFT's with ``next``); None where the run's data
    folder has no training split. A training file that is there and broken is an error (DataFileError)."""
    config = run.config or {}
    rsft, grpo = config.get("rsft") or {}, config.get("grpo") or {}
    pool = grpo.get("pool") or {}
    splits = ["train"]
    if (rsft.get("enabled", True) and rsft.get("distribution") in ("hard", "mix")) or "train_hard" in (pool.get("splits") or []):
        splits.append("train_hard")
    if not run.questions_file("train").is_file():
        return None
    rl = [h for section in (rsft, grpo) if section.get("enabled", True)
          for h in (section.get("prompt_hops") or ()) if isinstance(h, int)]
    return max((*(q.hop_len for split in splits for q in run.questions(split).values()), *rl), default=None)


def diagnose_view(run: Any, split: str = "eval") -> dict[str, dict[str, Any]]:
    """:func:`diagnose_run` of a run already opened (a :class:`library.runs.reader.RunView`).
    Every block carries ``longest_trained`` and counts by :func:`reach` where the run's training
    split can be read."""
    by_phase = {phase: run.eval_episodes(phase, split) for phase in PHASES}
    by_phase = {phase: eps for phase, eps in by_phase.items() if eps}
    questions = run.questions_for(ep for eps in by_phase.values() for ep in eps.values())
    longest = longest_trained(run)
    # each phase's departures once: its own block and the next phase's repairs both read them
    departures = {phase: _departures(eps.values(), questions, run.kg, longest) for phase, eps in by_phase.items()}
    report = {phase: _departure_counts(found) for phase, found in departures.items()}
    if longest is not None:
        for block in report.values():
            block["longest_trained"] = longest
    phases = list(by_phase)
    for before, after in zip(phases, phases[1:]):
        report[after]["from"] = {"before": before, **_repair_counts(departures[before], by_phase[after])}
        if longest is not None:
            report[after]["from"]["longest_trained"] = longest
    return report
