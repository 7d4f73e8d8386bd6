"""Scene registry: scene type name -> (manim Scene class, payload model).

The storyboard compiler and the build look scene types up here; ``payload_model`` is also
available without manim through ``scenes.payloads.PAYLOAD_MODELS``.
"""

from __future__ import annotations

from manim import Scene
from pydantic import BaseModel

from scenes.before_after import BeforeAfterScene
from scenes.distribution_trap import DistributionTrapScene
from scenes.kg_overview import KGOverviewScene
from scenes.kg_path import KGPathScene
from scenes.payloads import PAYLOAD_MODELS
from scenes.phase_flow import PhaseFlowScene
from scenes.question_build import QuestionBuildScene
from scenes.results_table import ResultsTableScene
from scenes.reward_bars import RewardBarsScene
from scenes.title_card import TitleCardScene
from scenes.training_curves import TrainingCurvesScene

SCENE_TYPES: dict[str, tuple[type[Scene], type[BaseModel]]] = {
    "title": (TitleCardScene, PAYLOAD_MODELS["title"]),
    "kg_path": (KGPathScene, PAYLOAD_MODELS["kg_path"]),
    "reward_bars": (RewardBarsScene, PAYLOAD_MODELS["reward_bars"]),
    "before_after": (BeforeAfterScene, PAYLOAD_MODELS["before_after"]),
    "training_curves": (TrainingCurvesScene, PAYLOAD_MODELS["training_curves"]),
    "distribution_trap": (DistributionTrapScene, PAYLOAD_MODELS["distribution_trap"]),
    "results_table": (ResultsTableScene, PAYLOAD_MODELS["results_table"]),
    "monitor": (TrainingCurvesScene, PAYLOAD_MODELS["monitor"]),
    "intervals": (DistributionTrapScene, PAYLOAD_MODELS["intervals"]),
    "phase_flow": (PhaseFlowScene, PAYLOAD_MODELS["phase_flow"]),
    "question_build": (QuestionBuildScene, PAYLOAD_MODELS["question_build"]),
    "kg_overview": (KGOverviewScene, PAYLOAD_MODELS["kg_overview"]),
}


def payload_model(scene_type: str) -> type[BaseModel]:
    """The payload model of ``scene_type``; ValueError naming the known types otherwise."""
    try:
        return SCENE_TYPES[scene_type][1]
    except KeyError:
        raise ValueError(
            f"unknown scene type {scene_type!r}; known: {', '.join(sorted(SCENE_TYPES))}"
        ) from None
