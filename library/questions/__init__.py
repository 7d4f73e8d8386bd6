"""Multi-hop multiple-choice questions generated from knowledge-graph paths.

A question names the start entity and the whole relation chain, so exactly one option is
reachable; the three distractors are near misses of the answer's type that the chain
provably does not reach (docs/DESIGN.md, "Lessons").

The pieces, one concern a module:

- library/questions/wording.py: the question text, the prompt and the reference TRACE;
- library/questions/distractors.py: the near-miss options;
- library/questions/multiple_choice.py: one question from one path (make, verify, shuffle);
- library/questions/leakage.py: the audit of held-out paths inside training splits;
- library/questions/dataset.py: a dataset's settings (``DatasetConfig``), files, stats and hop lengths;
- library/questions/candidates.py: every question a graph gives at a hop length, where random paths find too few;
- library/questions/splits.py: building the splits and their stats;
- library/questions/split_set.py: writing and checking a folder of splits as one set;
- library/questions/plan.py: which walks and how many questions, ``plan_dataset`` and ``build_dataset`` (``kgr data``).

This module gathers the public names of one question and of a dataset's settings, so callers
can import them from here; building a dataset (splits.py, plan.py) is imported from its module,
so that reading a question or a setting never loads the generator.
"""

from __future__ import annotations

from library.questions.dataset import SPLIT_FILES, STATS_FILE, DatasetConfig, DatasetError, DatasetStats, parse_hops
from library.questions.distractors import DISTRACTOR_SOURCES, distractor_candidates, pick_distractors
from library.questions.leakage import entity_seq, leakage_report, path_edges, windows
from library.questions.multiple_choice import ID_FORMATS, make_question, question_id, shuffle_question, verify_unique
from library.questions.wording import blank_tags, question_text, reference_trace, render_prompt

__all__ = [
    "DISTRACTOR_SOURCES", "ID_FORMATS", "SPLIT_FILES", "STATS_FILE",
    "DatasetConfig", "DatasetError", "DatasetStats", "parse_hops",
    "blank_tags", "distractor_candidates", "entity_seq", "leakage_report", "make_question", "path_edges",
    "pick_distractors", "question_id", "question_text", "reference_trace", "render_prompt",
    "shuffle_question", "verify_unique", "windows",
]
