"""Answers made to game the reward: what a policy under RL pressure might write instead of
reasoning, built from a question and the KG (never sampled from a model).

The videos score them beside an honest answer to show what the reward does with a hack; the
adversarial tests (tests/test_reward_adversarial.py) check that none outranks the honest one
under any preset. Each maker takes ``(kg, question)`` and returns a completion:

>>> from types import SimpleNamespace
>>> q = SimpleNamespace(options={"A": "TLS handshake error", "B": "sync clocks with NTP",
...                              "C": "clock skew", "D": "NTP drift"}, answer_star="B")
>>> print(options_listed(None, q))  # reads the question alone
TRACE: A) TLS handshake error B) sync clocks with NTP C) clock skew D) NTP drift
ANSWER: B
"""

from __future__ import annotations

from typing import Any, Callable

#: how many times ``names_repeated`` repeats the path's names
REPEATS = 5


def path_labels(kg: Any, question: Any) -> list[str]:
    """The gold path's entity labels, start to answer."""
    return [kg.label(e) for e in question.path_star.entities]


def names_repeated(kg: Any, question: Any) -> str:
    """Every entity of the gold path, named over and over, no relation claimed, the right letter:
    all the names a path reward counts, none of the reasoning."""
    return f"TRACE: {' '.join(path_labels(kg, question) * REPEATS)}\nANSWER: {question.answer_star}"


def options_listed(kg: Any, question: Any) -> str:
    """The four options copied into the TRACE as the question words them, the right letter: the
    answer's name is in it whichever letter is right."""
    listed = " ".join(f"{k}) {v}" for k, v in question.options.items())
    return f"TRACE: {listed}\nANSWER: {question.answer_star}"


HACKS: dict[str, Callable[[Any, Any], str]] = {"names_repeated": names_repeated, "options_listed": options_listed}
