"""Dev experiment (docs/FINDINGS.md finding 41): the question's later steps in a shuffled order, keyed by tags.

Usage::

    .venv/bin/python -m research.sweeps.step_order_experiment \\
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
question's wording and the reference TRACE change. :mod:`research.sweeps.recipe_sweep` runs on the
splits of ``--data-dir`` (default ``data/keyed``, written by ``kgr data --step-order keyed --out
data/keyed``; built there first if missing) in this process, so the figures compare with the
sweep's other dev cases (finding 22: 60.0% for the copied step in chain order, same recipe).
"""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

#: the splits these cases train and judge on (kgr data --step-order keyed --out data/keyed)
DATA_DIR = REPO / "data" / "keyed"

_COMMON = {"method": "full", "learning_rate": 2e-4, "knowledge_epochs": 2, "n_questions": 600,
           "batch_size": 2, "grad_accum": 1}
CASES = {
    # quick's recipe (600 3-hop rows, the copied step) on the shuffled wording
    "order_copy_hop3_full_lr2e-4_k2_q600": {**_COMMON, "question_hops": [3]},
    # 1-3-hop rows: the last step then comes after 0, 1 or 2 tags, so no count finds it either
    "order_copy_hop123_full_lr2e-4_k2_q600": {**_COMMON, "question_hops": [1, 2, 3]},
    # (retired with sft.extra_questions: "order_copy_hop3_short300_full_lr2e-4_k2_q600", 300 more
    # 1-2-hop rows beside quick's 600 3-hop ones; docs/FINDINGS.md finding 43)
    # the full profile's SFT (4 passes over the facts) at quick's size: does knowing the facts also
    # keep the chain going where 2 passes stopped after the third step? (finding 62)
    "order_copy_hop3_full_lr2e-4_k4_q600": {**_COMMON, "knowledge_epochs": 4, "question_hops": [3]},
}


def main() -> None:
    from research.sweeps.recipe_sweep import sweep_on_splits

    sweep_on_splits(CASES, DATA_DIR, step_order="keyed")


if __name__ == "__main__":
    main()
