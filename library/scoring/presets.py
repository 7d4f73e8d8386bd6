"""The reward's preset names and how one is read: ``base[+edges][+correctness]``.

A leaf: the training config (library/config.py) checks a profile's preset names here without
loading the reward itself, and :meth:`library.scoring.reward.RewardConfig.preset_named` builds
the weights from what :func:`parse_preset` reads.

>>> parse_preset("paper+edges"), parse_preset("correctness")
(('paper', True, False), ('toy', True, True))
>>> parse_preset("toy+edgy")
Traceback (most recent call last):
...
ValueError: unknown reward preset 'toy+edgy'; expected one of toy, paper, toy+edges, paper+edges, correctness (or base+edges+correctness)
"""

from __future__ import annotations

from typing import Literal

#: The base of a preset: which path term the reward adds to correctness (docs/DESIGN.md).
PresetName = Literal["toy", "paper"]
BASES: tuple[str, ...] = ("toy", "paper")
PRESET_NAMES: tuple[str, ...] = ("toy", "paper", "toy+edges", "paper+edges", "correctness")


def parse_preset(name: str) -> tuple[str, bool, bool]:
    """``(base, edge_verified, correctness_only)`` of a preset name: ``base[+edges][+correctness]``
    (base: toy | paper, case and spaces ignored); ``correctness`` alone is ``toy+edges+correctness``.
    A ValueError names the known presets."""
    parts = [p.strip().lower() for p in name.split("+")]
    if parts == ["correctness"]:
        parts = ["toy", "edges", "correctness"]
    base, flags = parts[0], parts[1:]
    if base not in BASES or any(f not in ("edges", "correctness") for f in flags) or len(set(flags)) != len(flags):
        raise ValueError(f"unknown reward preset {name!r}; expected one of {', '.join(PRESET_NAMES)} "
                         "(or base+edges+correctness)")
    return base, "edges" in flags, "correctness" in flags
