"""Multi-hop multiple-choice questions generated from knowledge-graph paths.

A question names the start entity and the whole relation chain, so exactly one option is
reachable; the three distractors are near misses of the answer's type that the chain
provably does not reach (docs/DESIGN.md, "Lessons").

The pieces, one concern a module (this module only gathers their public names, so callers can
keep importing them from here):

- library/questions/wording.py: the question text, the prompt and the reference TRACE;
- library/questions/distractors.py: the near-miss options;
- library/questions/multiple_choice.py: one question from one path (make, verify, shuffle);
- library/questions/leakage.py: the audit of held-out paths inside training splits;
- library/questions/candidates.py: every question a graph gives at a hop length, where random paths find too few;
- library/questions/splits.py: the splits and their stats;
- library/questions/plan.py: which walks and how many questions, ``plan_dataset`` and ``build_dataset`` (``kgr data``).
"""

from __future__ import annotations

from library.questions.distractors import DISTRACTOR_SOURCES, distractor_candidates, pick_distractors
from library.questions.leakage import entity_seq, leakage_report, path_edges, windows
from library.questions.multiple_choice import ID_FORMATS, make_question, question_id, shuffle_question, verify_unique
from library.questions.plan import Plan, build_dataset, plan_dataset
from library.questions.splits import (SPLIT_FILES, STATS_FILE, DatasetConfig, DatasetError, DatasetStats, parse_hops,
                                      question_key)
from library.questions.wording import blank_tags, question_text, reference_trace, render_prompt

__all__ = [
    "DISTRACTOR_SOURCES", "ID_FORMATS", "SPLIT_FILES", "STATS_FILE",
    "DatasetConfig", "DatasetError", "DatasetStats", "Plan", "build_dataset", "parse_hops", "plan_dataset",
    "blank_tags", "distractor_candidates", "entity_seq", "leakage_report", "make_question", "path_edges",
    "pick_distractors", "question_id", "question_key", "question_text", "reference_trace", "render_prompt",
    "shuffle_question", "verify_unique", "windows",
]
