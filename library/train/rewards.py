"""The rewards of a training run, built in one place: the KG reward under each use's preset.

A run scores with up to four presets (``config.<use>.reward_preset``): ``eval`` (every
evaluation), ``rsft`` (RSFT's samples), ``grpo`` (GRPO's rollouts) and ``ablation`` (the reward
ablation's GRPO). :func:`run_rewards` reads them from the config once; the phase loop, every
backend and the experiments take their :class:`~library.scoring.reward.RewardModel` from the
result, and meta.json records the same configs (:meth:`RunRewards.meta`). Every score then goes
through ``library.runs.rollouts.score_episodes``.

>>> rewards = RunRewards(None, {"eval": "paper+edges", "grpo": "paper+edges", "rsft": "toy"})
>>> rewards.meta()["preset"], rewards.meta()["rsft"]["name"]
('paper+edges', 'toy')
"""

from __future__ import annotations

from typing import Any, Mapping

from library.scoring.reward import RewardConfig, RewardModel

#: what meta.json's ``reward`` section records, in this order (``preset`` is GRPO's)
META_USES = ("eval", "rsft", "grpo")


class RunRewards:
    """The run's reward models by use (``rewards["grpo"]``), each built once, on first use
    (building compiles the KG's matchers); uses that share a preset share one model (scoring
    keeps no state between completions that could tell them apart)."""

    def __init__(self, kg: Any, presets: Mapping[str, str]):
        self.kg = kg
        self.presets = dict(presets)
        self._models: dict[str, RewardModel] = {}

    def __getitem__(self, use: str) -> RewardModel:
        preset = self.presets[use]
        if preset not in self._models:
            self._models[preset] = RewardModel(self.kg, self.config(use))
        return self._models[preset]

    def config(self, use: str) -> RewardConfig:
        """The reward config of ``use``, without building its model."""
        return RewardConfig.preset_named(self.presets[use])

    def meta(self) -> dict[str, Any]:
        """meta.json's ``reward``: GRPO's preset name and the whole config of each use."""
        return {"preset": self.presets["grpo"], **{use: self.config(use).as_dict() for use in META_USES}}


def run_rewards(config: Any, kg: Any) -> RunRewards:
    """The rewards of a run of ``config`` (a :class:`library.config.TrainConfig`) on ``kg``."""
    return RunRewards(kg, {use: getattr(config, use).reward_preset for use in ("eval", "rsft", "grpo", "ablation")})
