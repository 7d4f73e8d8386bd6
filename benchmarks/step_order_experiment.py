"""Dev experiment (docs/RECIPE.md finding 41): the question's later steps in a shuffled order, keyed by tags.

Usage::

    .venv/bin/python benchmarks/step_order_experiment.py \\
        --cases order_copy_hop3_full_lr2e-4_k2_q600 --n-dev 100 --eval-max-new-tokens 150

Question: the committed runs fail mostly by losing their place in the question's chain, not by
missing facts (``kgr diagnose``: 83 of the reference SFT's 126 wrong answers write a wrong
*relation* first, 62 of them at the fifth step). Trained on chains of at most 3 steps, the model
finds the next step by its position ("after the second tag comes the last step", findings 24-29)
instead of by the tag it has just written. Here every step after the first names the tag it
starts from and the later steps are written in a shuffled order, so on the training data only
the tag lookup finds the next step::

    Start at X. It leads to [K]; [G] is fixed by [?]; [K] is caused by [G]. (3 steps)
    TRACE: X leads to [K] Y [K]; [K] is caused by [G]: Y is caused by [G] Z [G]; [G] is fixed by [?]: Z is fixed by [?] W (B).

After ``Y [K]`` the TRACE writes ``; [K]`` and copies what follows ``; [K]`` in the question,
which occurs once. The tags, paths, options and splits are the data files' (same seed); only the
question's wording and the reference TRACE change. The splits are rebuilt into ``--data-dir``
(default ``/tmp/data_step_order``) and :mod:`benchmarks.recipe_sweep` runs on them in this
process, so the figures compare with the sweep's other dev cases (finding 22: 60.0% for the
copied step in chain order, same recipe).

Why a patch rather than a data option: adopting the wording changes eval.jsonl, so every
committed run would have to be re-run; this script measures it first. It replaces
``question_text`` and ``reference_trace`` (and the names imported from them) for this process.
"""

from __future__ import annotations

import random
import sys
from pathlib import Path
from typing import Sequence

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import library.multiple_choice  # noqa: E402
import library.questions  # noqa: E402
import library.wording  # noqa: E402
from library.contracts import GoldPath  # noqa: E402
from library.wording import blank_tags, fact_clause  # noqa: E402

_COMMON = {"method": "full", "learning_rate": 2e-4, "knowledge_epochs": 2, "n_questions": 600,
           "batch_size": 2, "grad_accum": 1}
CASES = {
    # quick's recipe (600 3-hop rows, the copied step) on the shuffled wording
    "order_copy_hop3_full_lr2e-4_k2_q600": {**_COMMON, "question_hops": [3]},
    # 1-3-hop rows: the last step then comes after 0, 1 or 2 tags, so no count finds it either
    "order_copy_hop123_full_lr2e-4_k2_q600": {**_COMMON, "question_hops": [1, 2, 3]},
}


def _later_steps(kg, chain: Sequence[str], tags: Sequence[str]) -> list[str]:
    """``"[<tag before>] <relation> [<tag>]"`` for every step after the first, in chain order."""
    return [f"[{tags[i - 1]}] {kg.relation_label(chain[i])} [{tags[i]}]" for i in range(1, len(chain))]


def shuffled_question_text(kg, start: str, chain: Sequence[str], tags: Sequence[str] | None = None) -> str:
    """The question with its later steps keyed by tags and shuffled (seeded by the path)."""
    tags = blank_tags(start, chain) if tags is None else tags
    later = _later_steps(kg, chain, tags)
    random.Random("step-order:" + start + ":" + ",".join(chain)).shuffle(later)
    steps = f"{len(chain)} step" + ("s" if len(chain) != 1 else "")
    first = f"It {kg.relation_label(chain[0])} [{tags[0]}]"
    return f"Start at {kg.label(start)}. " + "; ".join([first] + later) + f". ({steps})"


def keyed_reference_trace(kg, path: GoldPath, style: str = "copy") -> str:
    """The copied-step TRACE for :func:`shuffled_question_text`: ``; [K] <rel> [T]: <fact clause>``."""
    if style != "copy":
        raise ValueError("the step-order experiment measures the copied-step TRACE only")
    chain = [e.rel for e in path.edges]
    tags = blank_tags(path.entities[0], chain)
    clauses = [fact_clause(kg, e.src, e.rel, e.dst, tag) for e, tag in zip(path.edges, tags)]
    copied = [""] + ["; " + step + ": " for step in _later_steps(kg, chain, tags)]
    return "".join(step + clause for step, clause in zip(copied, clauses)) + "."


def main() -> None:
    argv = sys.argv[1:]
    data_dir = Path("/tmp/data_step_order")
    if "--data-dir" in argv:
        data_dir = Path(argv[argv.index("--data-dir") + 1])
    else:
        argv += ["--data-dir", str(data_dir)]
    for module in (library.wording, library.questions, library.multiple_choice):
        module.question_text = shuffled_question_text
        module.reference_trace = keyed_reference_trace
    if not (data_dir / "dev.jsonl").exists():
        from library.questions import DatasetConfig, build_dataset

        data_dir.mkdir(parents=True, exist_ok=True)
        stats = build_dataset(DatasetConfig(kg_path=REPO / "data" / "kg.json", out_dir=data_dir, seed=0, progress=False))
        print(stats.summary(), flush=True)

    import benchmarks.recipe_sweep as sweep

    sweep.CASES.update(CASES)
    sys.argv = [sys.argv[0]] + argv
    sweep.main()


if __name__ == "__main__":
    main()
