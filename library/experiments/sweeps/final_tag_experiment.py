"""Dev experiment (docs/FINDINGS.md finding 29): the last blank gets an ordinary random tag, not ``[?]``.

Usage::

    .venv/bin/python -m library.experiments.sweeps.final_tag_experiment \\
        --cases notag_copy_hop3_full_lr2e-4_k2_q600 --n-dev 100 --eval-max-new-tokens 140

Question: does the model jump to the question's last step because ``[?]`` marks it? Here every
blank, the last included, takes a random capital (``... which is fixed by [M]. (4 steps)``; the
TRACE closes the last blank's tag too). The splits are rebuilt with that wording into
``--data-dir`` (default ``/tmp/data_final_tag``; same questions, options and paths as ``data/``,
only the tags differ) and :mod:`library.experiments.sweeps.recipe_sweep` runs on them in this process.

Why a patch rather than a setting: the result was negative (dev 34.0% against 60.0% with
``[?]``), so the wording did not become a data option; this script keeps the measurement
repeatable. It replaces ``library.questions.wording.blank_tags`` (and the names imported from it) for
this process only.
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO))

import library.train.facts  # noqa: E402
import library.questions  # noqa: E402
import library.questions.wording  # noqa: E402
from library.contracts import BLANK_TAG_POOL  # noqa: E402

CASES = {
    "notag_copy_hop3_full_lr2e-4_k2_q600": {"method": "full", "learning_rate": 2e-4, "knowledge_epochs": 2,
                                            "n_questions": 600, "question_hops": [3], "batch_size": 2,
                                            "grad_accum": 1},
}


def letter_tags(start: str, chain) -> list[str]:
    """Like :func:`library.questions.wording.blank_tags`, with a random capital for the last blank too."""
    rng = random.Random("blank-tags:" + start + ":" + ",".join(chain))
    return rng.sample(BLANK_TAG_POOL, len(chain))


def main() -> None:
    for module in (library.questions.wording, library.train.facts, library.questions):
        module.blank_tags = letter_tags
    from library.experiments.sweeps.recipe_sweep import sweep_on_splits

    sweep_on_splits(CASES, Path("/tmp/data_final_tag"))


if __name__ == "__main__":
    main()
