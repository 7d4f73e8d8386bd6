"""GRPO on the mlx backend: ``mlx-lm-lora``'s GRPO trainer with the KG reward plugged in as
its custom reward function.

What runs here (any OS, no mlx needed) and is tested: the reward bridge
(:class:`MlxGrpoReward`: scores through ``score_episodes``, logs the rollouts, maps the total into
the [0, 1] mlx-lm-lora accepts), the GRPO rows, the generated reward file and the trainer's
YAML. What needs mlx and mlx-lm-lora: :func:`train_grpo` (run end to end on Linux with mlx-cpu
by tests/test_backend_mlx.py; not yet on a Mac, docs/BACKENDS.md).

mlx-lm-lora 5.10.2 puts its LoRA on every linear layer of each block whatever
``lora_parameters.keys`` says (its ``from_pretrained`` drops the keys): the same modules as the
torch path's default ``target_modules`` (all seven projections), more than a narrower list.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Iterable

import yaml

from library.contracts import ROLLOUT_KIND, Question
from library.graph.kg import load_kg
from library.jsonl import atomic_write_text, read_jsonl, write_jsonl_atomic
from library.runs.folder import RunDir
from library.runs.rollouts import log_episodes, score_episodes
from library.train.backends import BackendUnavailable, select_backend
from library.train.backends.mlx import (MlxLoraConfig, fuse_adapter, repo_pythonpath, run_trainer_logged,
                                        trainer_command)
from library.train.data import assert_training_only
from library.train.rewards import RunRewards

# mlx and mlx-lm-lora run in the trainer's subprocess (library.train.backends.mlx.run_trainer),
# never imported here.

GRPO_REWARD_NAME = "kgr_reward"
VALID_SUFFIX = "#valid"


def reward_bounds(cfg) -> tuple[float, float]:
    """Bounds that the total of ``RewardConfig`` ``cfg`` can never leave (library/scoring/reward.py).

    mlx-lm-lora clamps every reward function's output to [0, 1]; mapping our total affinely from
    these bounds into [0, 1] loses nothing: GRPO's group-normalised advantages
    ((r - mean) / std) are unchanged by a positive affine map. (With ``dr_grpo``, which does
    not divide by the std, the advantages are scaled by 1 / (hi - lo).)

    >>> from library.scoring.reward import RewardConfig
    >>> reward_bounds(RewardConfig.preset_named("paper+edges"))
    (-2.0, 2.1)
    >>> reward_bounds(RewardConfig.preset_named("toy"))
    (-2.5, 1.5)
    """
    if cfg.preset == "toy":
        lo, hi = cfg.toy_wrong, cfg.toy_correct
        path_hi, spam_hi = cfg.toy_path_weight, cfg.toy_spam_penalty
    else:
        lo, hi = cfg.paper_wrong, cfg.paper_correct
        path_hi, spam_hi = cfg.paper_path_cap, 0.0  # paper: path - spam = path * repetition >= 0
    if cfg.correctness_only:
        return (float(lo), float(hi))
    lo, hi = lo - spam_hi, hi + path_hi
    if cfg.edge_verified:
        lo, hi = lo - cfg.edge_false_cap, hi + cfg.edge_weight
    return (round(float(lo), 10), round(float(hi), 10))


def to_unit(total: float, bounds: tuple[float, float]) -> float:
    """Affine map of a total inside ``bounds`` onto [0, 1] (the range mlx-lm-lora accepts)."""
    lo, hi = bounds
    if not lo - 1e-9 <= total <= hi + 1e-9:
        raise ValueError(f"reward total {total} outside its bounds {bounds}: reward_bounds is out of date")
    return min(1.0, max(0.0, (total - lo) / (hi - lo)))


def grpo_records(questions: Iterable[Question], *, system: str, valid: bool = False) -> list[dict]:
    """mlx-lm-lora GRPO rows. ``answer`` carries the question id (never shown to the model): the
    reward function gets it back and looks the question up to score the completion on the KG.
    Validation copies get ``#valid`` appended so their rollouts are not logged as training."""
    rows = []
    for q in questions:
        if q.split not in ("train", "train_hard"):
            raise ValueError(f"{q.id}: only training splits may be exported for training, not {q.split!r}")
        rows.append({"prompt": q.prompt, "system": system, "answer": q.id + (VALID_SUFFIX if valid else ""),
                     "type": "kgr"})
    return rows


class MlxGrpoReward:
    """The KG reward as an mlx-lm-lora reward function: ``(completions, ids) -> [0, 1] scores``.

    Scores through ``score_episodes`` (the same episodes the torch GRPO logs), appends one
    episode per training rollout to the run (phase ``grpo``, ``kind: rollout``, ``step`` = the
    training batch, ``sample_idx`` within the prompt's group) and returns the affine map of the
    total into [0, 1] (:func:`reward_bounds`). Runs without mlx (tested here).
    """

    def __init__(self, questions: Iterable[Question], reward_model, run=None, *, forbidden_ids: Iterable[str] = ()):
        self.by_id = {q.id: q for q in questions}
        assert_training_only(self.by_id.values(), forbidden_ids)
        self.reward_model = reward_model
        self.run = run
        self.bounds = reward_bounds(reward_model.config)
        self.step = 0

    @classmethod
    def from_spec(cls, spec: dict) -> "MlxGrpoReward":
        """The reward in mlx-lm-lora's process, from the spec the run wrote (:func:`train_grpo`)."""
        rm = RunRewards(load_kg(spec["kg_path"]), {"grpo": spec["reward_preset"]})["grpo"]
        return cls(read_jsonl(spec["questions_path"], Question), rm,
                   RunDir(spec["run_dir"]) if spec.get("run_dir") else None,
                   forbidden_ids=spec.get("forbidden_ids", ()))

    def __call__(self, completions: list[str], answers: list[str]) -> list[float]:
        ids = [a.strip() for a in answers]
        is_valid = [i.endswith(VALID_SUFFIX) for i in ids]
        ids = [i[: -len(VALID_SUFFIX)] if v else i for i, v in zip(ids, is_valid)]
        unknown = sorted({i for i in ids if i not in self.by_id})
        if unknown:
            raise KeyError(f"GRPO reward got ids that are not in the RL pool: {unknown[:5]}")
        questions = [self.by_id[i] for i in ids]
        training = not all(is_valid)
        if training:
            self.step += 1
        episodes = score_episodes(self.reward_model, questions, list(completions), phase="grpo", step=self.step,
                                  kind=ROLLOUT_KIND, backend="mlx")
        if self.run is not None and training:  # validation copies are scored, never logged
            log_episodes(self.run, [ep for ep, v in zip(episodes, is_valid) if not v], gathered=True)
        return [to_unit(float(ep.reward.total), self.bounds) for ep in episodes]


REWARD_FILE_TEMPLATE = '''"""Generated by library.train.backends.mlx_grpo.write_reward_file: the KG reward for mlx-lm-lora GRPO."""
import json
import sys

sys.path.insert(0, {repo!r})
try:
    from mlx_lm_lora.trainer.grpo_reward_functions import register_reward_function
except ImportError:  # older/newer layouts of mlx-lm-lora
    from mlx_lm_lora.reward_functions import register_reward_function
from library.train.backends.mlx_grpo import MlxGrpoReward

_REWARD = MlxGrpoReward.from_spec(json.loads({spec!r}))


@register_reward_function({name!r})
def {name}(prompts, completions, answer, types=None, **kwargs):
    return _REWARD(list(completions), list(answer))
'''


def write_reward_file(path: Path, spec: dict, repo_root: Path) -> Path:
    """The ``--reward-functions-file`` for mlx-lm-lora (registers ``kgr_reward``)."""
    text = REWARD_FILE_TEMPLATE.format(repo=str(repo_root), spec=json.dumps(spec, sort_keys=True), name=GRPO_REWARD_NAME)
    atomic_write_text(path, text)
    return path


#: torch/TRL loss_type -> mlx-lm-lora --grpo-loss-type (TRL's "dapo" normalises over all tokens
#: of the batch, which is mlx-lm-lora's "bnpo")
GRPO_LOSS_FOR = {"grpo": "grpo", "bnpo": "bnpo", "dr_grpo": "dr_grpo", "dapo": "bnpo"}


def write_grpo_config(settings, lora: MlxLoraConfig, model_path: str, data_dir: Path, adapter_dir: Path,
                      reward_file: Path, out: Path, *, resume_adapter_file: Path | None,
                      reference_model_path: str | None, seed: int) -> Path:
    """The YAML for ``python -m mlx_lm_lora.train --config``: GRPO on the SFT/RSFT adapter.

    Differences from the torch GRPO that cannot be configured away (mlx-lm-lora 5.10.2): no top_p
    (sampling at ``temperature`` only); the KL reference is ``reference_model_path`` (we pass the
    starting adapter fused into the base, the same reference as the torch path).
    """
    if settings.loss_type not in GRPO_LOSS_FOR:
        raise ValueError(f"grpo.loss_type {settings.loss_type!r} has no mlx-lm-lora equivalent ({sorted(GRPO_LOSS_FOR)})")
    doc = {
        "model": str(model_path), "train": True, "train_mode": "grpo", "train_type": "lora",
        "data": str(data_dir), "seed": seed, "num_layers": lora.num_layers,
        "batch_size": settings.prompts_per_step, "iters": settings.max_steps,
        "learning_rate": settings.learning_rate, "adapter_path": str(adapter_dir),
        "save_every": settings.save_steps, "max_seq_length": lora.max_seq_length,
        "lora_parameters": {"keys": list(lora.keys), "rank": lora.rank, "scale": lora.scale, "dropout": lora.dropout},
        "group_size": settings.num_generations, "beta": settings.beta, "temperature": settings.temperature,
        "max_completion_length": settings.max_completion_length,
        "grpo_loss_type": GRPO_LOSS_FOR[settings.loss_type],
        "reward_functions": GRPO_REWARD_NAME, "reward_functions_file": str(reward_file),
        "val_batches": 1, "steps_per_eval": max(settings.max_steps, 1), "steps_per_report": 1,
        "fuse": False,  # mlx-lm-lora's default fuses the trained model into adapter_path
    }
    if resume_adapter_file is not None:
        doc["resume_adapter_file"] = str(resume_adapter_file)
    if reference_model_path is not None:
        doc["reference_model_path"] = str(reference_model_path)
    atomic_write_text(out, yaml.safe_dump(doc, sort_keys=False))
    return out


def grpo_command(config_path: Path, loss_log: Path | None = None) -> list[str]:
    """mlx-lm-lora's GRPO trainer on ``config_path`` through the mlx module's runner
    (``library.train.backends.mlx.run_trainer``: the YAML's values reach the trainer, the loss
    curve comes back as JSON lines)."""
    return trainer_command("grpo", config_path, loss_log)


def train_grpo(settings, lora: MlxLoraConfig, model_path: str, questions: list[Question], *, work_dir: Path,
               adapter_dir: Path, init_adapter_dir: Path, kg_path: Path, run_dir: Path, system: str, seed: int,
               forbidden_ids: Iterable[str], repo_root: Path) -> list[dict]:
    """GRPO through mlx-lm-lora with the KG reward plugged in as a custom reward function.
    Returns the loss curve. Needs mlx and ``mlx-lm-lora``."""
    select_backend("mlx")
    if importlib.util.find_spec("mlx_lm_lora") is None:
        raise BackendUnavailable("GRPO on mlx needs the mlx-lm-lora package: pip install -e '.[mlx]'")
    work_dir = Path(work_dir)
    forbidden = sorted(set(forbidden_ids))
    pool_path = work_dir / "grpo_pool.jsonl"
    write_jsonl_atomic(pool_path, questions)
    data_dir = work_dir / "mlx_data_grpo"
    data_dir.mkdir(parents=True, exist_ok=True)
    write_jsonl_atomic(data_dir / "train.jsonl", grpo_records(questions, system=system))
    write_jsonl_atomic(data_dir / "valid.jsonl", grpo_records(questions[: max(1, settings.prompts_per_step)],
                                                              system=system, valid=True))
    spec = {"kg_path": str(kg_path), "questions_path": str(pool_path), "reward_preset": settings.reward_preset,
            "run_dir": str(run_dir), "forbidden_ids": forbidden}
    reward_file = write_reward_file(work_dir / "kgr_mlx_reward.py", spec, repo_root)
    reference = None
    if settings.beta > 0:  # KL to the starting policy, as the torch path (not to the bare base)
        reference = str(fuse_adapter(model_path, init_adapter_dir, work_dir / "grpo_reference"))
    cfg = write_grpo_config(settings, lora, model_path, data_dir, Path(adapter_dir), reward_file,
                            work_dir / "mlx_grpo.yaml", resume_adapter_file=Path(init_adapter_dir) / "adapters.safetensors",
                            reference_model_path=reference, seed=seed)
    return run_trainer_logged("grpo", cfg, work_dir / "mlx_grpo.log", env=repo_pythonpath())
