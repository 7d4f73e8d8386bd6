"""The mlx backend: the same SFT -> RSFT -> GRPO phases with mlx-lm on Apple Silicon.

What runs here (any OS, no mlx needed) and is tested: converting our question splits into
mlx-lm's data folder, writing its LoRA config, and converting adapters between peft and
mlx-lm layouts. What runs only on a Mac: the ``mlx_lm lora`` training itself, sampling with
``mlx_lm generate`` for RSFT, and GRPO through the ``mlx-lm-lora`` package.

Adapter layouts (why the conversion is written by hand: neither library exports the other's):

- peft: ``adapter_model.safetensors`` with ``base_model.model.model.layers.{i}.{mod}.lora_A.weight``
  of shape (r, in) and ``...lora_B.weight`` of shape (out, r); output = W x + (alpha/r) B A x.
- mlx-lm: ``adapters.safetensors`` with ``model.layers.{i}.{mod}.lora_a`` of shape (in, r) and
  ``...lora_b`` of shape (r, out); output = W x + scale (x a) b. So a = A^T, b = B^T, scale = alpha/r.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

import numpy as np
import yaml

from library.answer_format import clean_completion
from library.contracts import Question
from library.grpo import rollout_episodes
from library.jsonl import atomic_write_bytes, atomic_write_text, read_jsonl, write_jsonl_atomic

PEFT_KEY = re.compile(r"^base_model\.model\.(?P<stem>.+)\.lora_(?P<ab>[AB])\.weight$")
MLX_KEY = re.compile(r"^(?P<stem>.+)\.lora_(?P<ab>[ab])$")
LAYER_MODULE = re.compile(r"^model\.layers\.(?P<layer>\d+)\.(?P<module>.+)$")


@dataclass(frozen=True)
class MlxLoraConfig:
    """The settings we pass to ``mlx_lm lora`` (mirrors the torch SFT defaults)."""

    rank: int = 16
    alpha: float = 16.0
    dropout: float = 0.05
    keys: tuple[str, ...] = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                             "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")
    num_layers: int = -1  # -1: every layer (mlx-lm counts from the last layer)
    iters: int = 200
    batch_size: int = 8
    learning_rate: float = 2e-4
    max_seq_length: int = 512
    seed: int = 0
    extra: dict = field(default_factory=dict)

    @property
    def scale(self) -> float:
        return self.alpha / self.rank


def sft_records(questions: Iterable[Question], *, system: str | None = None) -> list[dict]:
    """mlx-lm's chat format: one ``{"messages": [user, assistant]}`` per question.

    >>> from library.contracts import GoldPath
    >>> q = Question(id="train-1", split="train", hop_len=1, question="q", options={"A": "a", "B": "b", "C": "c", "D": "d"},
    ...              answer_star="A", path_star=GoldPath(entities=["x", "y"], edges=[]), prompt="Which?",
    ...              ref={"trace": "x is caused by y.", "completion": "TRACE: x is caused by y.\\nANSWER: A"})
    >>> sft_records([q])[0]["messages"][1]["content"]
    'TRACE: x is caused by y.\\nANSWER: A'
    """
    records = []
    for q in questions:
        if q.split not in ("train", "train_hard"):
            raise ValueError(f"{q.id}: only training splits may be exported for training, not {q.split!r}")
        completion = getattr(q.ref, "completion", None) or f"TRACE: {q.ref.trace}\nANSWER: {q.answer_star}"
        records.append(chat_record(q.prompt, completion, system=system))
    return records


def chat_record(user_text: str, completion: str, *, system: str | None = None) -> dict:
    """One mlx-lm chat example. ``system`` must be the system prompt the torch path formats every
    prompt with (``library.model.SYSTEM_PROMPT``): the mlx-trained adapter is evaluated by the torch
    code, and without it SmolLM2's chat template would insert its own default system prompt."""
    messages = [] if system is None else [{"role": "system", "content": system}]
    return {"messages": messages + [{"role": "user", "content": user_text},
                                    {"role": "assistant", "content": completion.strip()}]}


def write_data_folder(train_path: Path, out_dir: Path, valid_fraction: float = 0.05) -> tuple[Path, Path]:
    """Write ``train.jsonl`` and ``valid.jsonl`` for ``mlx_lm lora --data out_dir``.

    The validation slice is carved from the TRAINING split (every 1/valid_fraction-th line,
    deterministically), never from eval: mlx-lm requires a valid.jsonl but eval must stay unseen.
    """
    questions = read_jsonl(train_path, Question)
    records = sft_records(questions)
    every = max(2, round(1 / valid_fraction))
    valid = [r for i, r in enumerate(records) if i % every == every - 1]
    train = [r for i, r in enumerate(records) if i % every != every - 1]
    out_dir.mkdir(parents=True, exist_ok=True)
    write_jsonl_atomic(out_dir / "train.jsonl", train)
    write_jsonl_atomic(out_dir / "valid.jsonl", valid)
    return out_dir / "train.jsonl", out_dir / "valid.jsonl"


def write_lora_config(config: MlxLoraConfig, model_path: str, data_dir: Path, adapter_dir: Path, out: Path) -> Path:
    """The YAML file for ``mlx_lm lora --config``: LoRA on the same projections as the torch path,
    prompt masked (loss on the completion only)."""
    doc = {
        "model": str(model_path), "train": True, "data": str(data_dir), "fine_tune_type": "lora",
        "mask_prompt": True, "num_layers": config.num_layers, "batch_size": config.batch_size,
        "iters": config.iters, "learning_rate": config.learning_rate, "max_seq_length": config.max_seq_length,
        "seed": config.seed, "adapter_path": str(adapter_dir),
        "lora_parameters": {"keys": list(config.keys), "rank": config.rank, "scale": config.scale,
                            "dropout": config.dropout},
        **config.extra,
    }
    atomic_write_text(out, yaml.safe_dump(doc, sort_keys=False))
    return out


def lora_command(config_path: Path) -> list[str]:
    """The mlx-lm training command (run on a Mac by :func:`train_sft`)."""
    return [sys.executable, "-m", "mlx_lm", "lora", "--config", str(config_path)]


def train_sft(config: MlxLoraConfig, model_path: str, train_path: Path, work_dir: Path) -> Path:
    """Run mlx-lm LoRA SFT; returns the adapter folder. Needs Apple Silicon and mlx-lm."""
    from library.backends import select_backend

    select_backend("mlx")
    data_dir, adapter_dir = work_dir / "mlx_data", work_dir / "adapters" / "sft-mlx"
    write_data_folder(train_path, data_dir)
    cfg = write_lora_config(config, model_path, data_dir, adapter_dir, work_dir / "mlx_lora.yaml")
    subprocess.run(lora_command(cfg), check=True)
    return adapter_dir


# ----------------------------------------------------------------- adapter conversion
def _load_safetensors(path: Path) -> dict[str, np.ndarray]:
    from safetensors.numpy import load_file

    return load_file(str(path))


def _save_safetensors(tensors: dict[str, np.ndarray], path: Path) -> None:
    from safetensors.numpy import save

    atomic_write_bytes(path, save({k: np.ascontiguousarray(v) for k, v in sorted(tensors.items())}))


def peft_to_mlx(peft_dir: Path, out_dir: Path, num_layers: int | None = None) -> Path:
    """Convert a peft LoRA adapter folder into an mlx-lm adapter folder."""
    cfg = json.loads((Path(peft_dir) / "adapter_config.json").read_text())
    r, alpha = int(cfg["r"]), float(cfg["lora_alpha"])
    tensors = _load_safetensors(Path(peft_dir) / "adapter_model.safetensors")
    out, modules, layers = {}, set(), set()
    for key, value in tensors.items():
        m = PEFT_KEY.match(key)
        if not m:
            raise ValueError(f"{peft_dir}: unexpected tensor {key!r} (only LoRA A/B weights are convertible)")
        stem = m["stem"]
        lm = LAYER_MODULE.match(stem)
        if lm:
            layers.add(int(lm["layer"]))
            modules.add(lm["module"])
        out[f"{stem}.lora_{m['ab'].lower()}"] = value.T
    n_layers = num_layers if num_layers is not None else (max(layers) + 1 if layers else -1)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    _save_safetensors(out, out_dir / "adapters.safetensors")
    mlx_cfg = {"fine_tune_type": "lora", "num_layers": n_layers,
               "lora_parameters": {"rank": r, "scale": alpha / r, "dropout": float(cfg.get("lora_dropout", 0.0)),
                                   "keys": sorted(modules)}}
    atomic_write_text(out_dir / "adapter_config.json", json.dumps(mlx_cfg, indent=2) + "\n")
    return out_dir


def mlx_to_peft(mlx_dir: Path, out_dir: Path, base_model: str = "") -> Path:
    """Convert an mlx-lm adapter folder into a peft LoRA adapter folder (loadable by PeftModel)."""
    cfg = json.loads((Path(mlx_dir) / "adapter_config.json").read_text())
    params = cfg["lora_parameters"]
    r = int(params["rank"])
    alpha = float(params["scale"]) * r
    tensors = _load_safetensors(Path(mlx_dir) / "adapters.safetensors")
    out, modules = {}, set()
    for key, value in tensors.items():
        m = MLX_KEY.match(key)
        if not m:
            raise ValueError(f"{mlx_dir}: unexpected tensor {key!r} (only LoRA a/b weights are convertible)")
        lm = LAYER_MODULE.match(m["stem"])
        if lm:
            modules.add(lm["module"].split(".")[-1])
        out[f"base_model.model.{m['stem']}.lora_{m['ab'].upper()}.weight"] = value.T
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    _save_safetensors(out, out_dir / "adapter_model.safetensors")
    peft_cfg = {"peft_type": "LORA", "task_type": "CAUSAL_LM", "base_model_name_or_path": base_model,
                "r": r, "lora_alpha": alpha, "lora_dropout": float(params.get("dropout", 0.0)),
                "target_modules": sorted(modules), "bias": "none", "fan_in_fan_out": False,
                "inference_mode": True}
    atomic_write_text(out_dir / "adapter_config.json", json.dumps(peft_cfg, indent=2) + "\n")
    return out_dir


# =================================================================== the phases on mlx
# Everything above and the pure helpers below run anywhere (and are tested here). The functions
# marked "needs Apple Silicon" call select_backend("mlx") first and are UNTESTED ON HARDWARE:
# no Mac was available when they were written (see docs/BACKENDS.md).

#: torch/peft module names (library.config.LLAMA_TARGET_MODULES) -> mlx-lm LoRA key paths
MLX_KEY_FOR = {
    "q_proj": "self_attn.q_proj", "k_proj": "self_attn.k_proj", "v_proj": "self_attn.v_proj",
    "o_proj": "self_attn.o_proj", "gate_proj": "mlp.gate_proj", "up_proj": "mlp.up_proj",
    "down_proj": "mlp.down_proj",
}
ITER_LINE = re.compile(r"Iter (?P<step>\d+): Train loss (?P<loss>[-+0-9.eE]+)"
                       r"(?:, Learning Rate (?P<lr>[-+0-9.eE]+))?")
GRPO_REWARD_NAME = "kgr_reward"
VALID_SUFFIX = "#valid"


def mlx_lora_config(lora, *, iters: int, batch_size: int, learning_rate: float, max_seq_length: int,
                    seed: int, extra: dict | None = None) -> MlxLoraConfig:
    """The mlx-lm settings equivalent to a torch ``LoraSettings`` (same r, alpha, dropout, modules).

    >>> from library.config import LoraSettings
    >>> c = mlx_lora_config(LoraSettings(), iters=5, batch_size=2, learning_rate=1e-4, max_seq_length=256, seed=0)
    >>> c.rank, c.scale, c.keys[0], c.keys[-1]
    (16, 1.0, 'self_attn.q_proj', 'mlp.down_proj')
    """
    unknown = [m for m in lora.target_modules if m not in MLX_KEY_FOR]
    if unknown:
        raise ValueError(f"no mlx-lm key known for LoRA target modules {unknown}; known: {sorted(MLX_KEY_FOR)}")
    return MlxLoraConfig(rank=lora.r, alpha=float(lora.alpha), dropout=lora.dropout,
                         keys=tuple(MLX_KEY_FOR[m] for m in lora.target_modules), iters=iters,
                         batch_size=batch_size, learning_rate=learning_rate, max_seq_length=max_seq_length,
                         seed=seed, extra=dict(extra or {}))


def train_valid_split(records: list[dict], *, valid_fraction: float = 0.05, min_valid: int = 1) -> tuple[list[dict], list[dict]]:
    """Training keeps EVERY record (the torch path trains on all of them too); ``valid`` is a
    copy of every 1/valid_fraction-th record, topped up (cycling from the start) to ``min_valid``.

    mlx-lm refuses to train without a validation set, and one smaller than the batch size; its
    validation loss here is only a sanity check, the phase's real measure is the torch eval.

    >>> rs = [{"i": i} for i in range(5)]
    >>> train_valid_split(rs, valid_fraction=0.5, min_valid=3)[1]
    [{'i': 1}, {'i': 3}, {'i': 0}]
    """
    if not records:
        raise ValueError("no records to write")
    every = max(2, round(1 / valid_fraction))
    valid = [r for i, r in enumerate(records) if i % every == every - 1]
    i = 0
    while len(valid) < min_valid:
        valid.append(records[i % len(records)])
        i += 1
    return list(records), valid


def write_records_folder(records: list[dict], out_dir: Path, *, valid_fraction: float = 0.05,
                         min_valid: int = 1) -> tuple[Path, Path]:
    """``train.jsonl`` + ``valid.jsonl`` for ``mlx_lm lora --data out_dir`` / ``mlx_lm_lora.train``."""
    train, valid = train_valid_split(records, valid_fraction=valid_fraction, min_valid=min_valid)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    write_jsonl_atomic(out_dir / "train.jsonl", train)
    write_jsonl_atomic(out_dir / "valid.jsonl", valid)
    return out_dir / "train.jsonl", out_dir / "valid.jsonl"


def rsft_records(winners: Iterable[tuple[Question, str]], *, system: str | None) -> list[dict]:
    """RSFT winners -> chat records, cut after the ANSWER line exactly as the torch RSFT does."""
    return [chat_record(q.prompt, clean_completion(c), system=system) for q, c in winners]


def select_rsft_winners(questions, completions, reward_model, *, forbidden_ids: Iterable[str] = (), **fields):
    """Score K samples per training prompt and pick winners with the torch RSFT's own ranking
    (``library.rsft.score_and_select``: best by ``rank_key``, dropped when the best is wrong).
    Returns ``(episodes, winners)``; the episodes are what RSFT logs (phase rsft, kind rollout,
    plus ``fields`` such as ``backend``)."""
    from library.rsft import assert_training_only, score_and_select

    assert_training_only(questions, forbidden_ids)
    return score_and_select(questions, completions, reward_model, **fields)


def parse_train_log(text: str) -> list[dict]:
    """The loss curve from mlx-lm / mlx-lm-lora stdout (``Iter N: Train loss X, Learning Rate Y``).

    >>> parse_train_log("Iter 1: Val loss 3.0\\nIter 10: Train loss 1.25, Learning Rate 2.000e-04, It/sec 3")
    [{'step': 10, 'loss': 1.25, 'learning_rate': 0.0002}]
    """
    curve = []
    for m in ITER_LINE.finditer(text):
        point = {"step": int(m["step"]), "loss": float(m["loss"])}
        if m["lr"]:
            point["learning_rate"] = float(m["lr"])
        curve.append(point)
    return curve


# ------------------------------------------------------------------------- GRPO reward
def reward_bounds(cfg) -> tuple[float, float]:
    """Bounds that the total of ``RewardConfig`` ``cfg`` can never leave (library/reward.py).

    mlx-lm-lora clamps every reward function's output to [0, 1]; mapping our total affinely from
    these bounds into [0, 1] loses nothing: GRPO's group-normalised advantages
    ((r - mean) / std) are unchanged by a positive affine map. (With ``dr_grpo``, which does
    not divide by the std, the advantages are scaled by 1 / (hi - lo).)

    >>> from library.reward import RewardConfig
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

    Scores with ``RewardModel.score`` (the same numbers the torch GRPO logs), appends one
    episode per training rollout to the run (phase ``grpo``, ``kind: rollout``, ``step`` = the
    training batch, ``sample_idx`` within the prompt's group) and returns the affine map of the
    total into [0, 1] (:func:`reward_bounds`). Runs without mlx (tested here).
    """

    def __init__(self, questions: Iterable[Question], reward_model, run=None, *, forbidden_ids: Iterable[str] = ()):
        from library.rsft import assert_training_only

        self.by_id = {q.id: q for q in questions}
        assert_training_only(self.by_id.values(), forbidden_ids)
        self.reward_model = reward_model
        self.run = run
        self.bounds = reward_bounds(reward_model.config)
        self.step = 0

    @classmethod
    def from_spec(cls, spec: dict) -> "MlxGrpoReward":
        from library.jsonl import read_jsonl
        from library.kg import load_kg
        from library.reward import RewardConfig, RewardModel
        from library.runs import RunDir

        rm = RewardModel(load_kg(spec["kg_path"]), RewardConfig.preset_named(spec["reward_preset"]))
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
        scored = [self.reward_model.score(q, c) for q, c in zip(questions, completions)]
        training = not all(is_valid)
        if training:
            self.step += 1
        if self.run is not None and training:
            batch = [(q, c, s) for q, c, s, v in zip(questions, completions, scored, is_valid) if not v]
            self.run.append_episodes(rollout_episodes(*zip(*batch), step=self.step, backend="mlx") if batch else [])
        return [to_unit(float(s.reward.total), self.bounds) for s in scored]


REWARD_FILE_TEMPLATE = '''"""Generated by library.backends.mlx.write_reward_file: the KG reward for mlx-lm-lora GRPO."""
import json
import sys

sys.path.insert(0, {repo!r})
try:
    from mlx_lm_lora.trainer.grpo_reward_functions import register_reward_function
except ImportError:  # older/newer layouts of mlx-lm-lora
    from mlx_lm_lora.reward_functions import register_reward_function
from library.backends.mlx import MlxGrpoReward

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

    Differences from the torch GRPO that cannot be configured away (mlx-lm-lora 0.8): no top_p
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
    }
    if resume_adapter_file is not None:
        doc["resume_adapter_file"] = str(resume_adapter_file)
    if reference_model_path is not None:
        doc["reference_model_path"] = str(reference_model_path)
    atomic_write_text(out, yaml.safe_dump(doc, sort_keys=False))
    return out


# ------------------------------------------------------------- needs Apple Silicon (untested)
def _run_logged(cmd: list[str], log_path: Path, env: dict | None = None) -> str:
    """Run ``cmd``, echo and keep its output (the loss curve is parsed from it)."""
    import os

    proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **(env or {})})
    out = (proc.stdout or "") + (proc.stderr or "")
    atomic_write_text(log_path, out)
    print(out[-4000:], file=sys.stderr)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:4])} ... failed with exit code {proc.returncode}; log: {log_path}")
    return out


def train_lora_records(config: MlxLoraConfig, model_path: str, records: list[dict], work_dir: Path,
                       adapter_dir: Path, *, resume_adapter_file: Path | None = None, name: str = "sft") -> list[dict]:
    """``mlx_lm lora`` on chat ``records`` (prompt masked); returns the loss curve. Needs Apple Silicon."""
    from library.backends import select_backend

    select_backend("mlx")
    work_dir = Path(work_dir)
    batch = min(config.batch_size, len(records))
    extra = dict(config.extra)
    if resume_adapter_file is not None:
        extra["resume_adapter_file"] = str(resume_adapter_file)  # continue the previous phase's adapter
    cfg = MlxLoraConfig(**{**config.__dict__, "batch_size": batch, "extra": extra})
    data_dir = work_dir / f"mlx_data_{name}"
    write_records_folder(records, data_dir, min_valid=batch)
    path = write_lora_config(cfg, model_path, data_dir, Path(adapter_dir), work_dir / f"mlx_{name}.yaml")
    return parse_train_log(_run_logged(lora_command(path), work_dir / f"mlx_{name}.log"))


def sample_mlx(model_path: str, adapter_dir: Path | None, user_texts: list[str], *, k: int, temperature: float,
               top_p: float, max_tokens: int, seed: int) -> list[list[str]]:
    """K sampled completions per prompt with mlx-lm's ``generate`` (same chat formatting and
    system prompt as the torch path). Needs Apple Silicon."""
    from library.backends import select_backend

    select_backend("mlx")
    import mlx.core as mx
    from mlx_lm import generate, load
    from mlx_lm.sample_utils import make_sampler

    from library.model import format_prompt

    model, tokenizer = load(str(model_path), adapter_path=str(adapter_dir) if adapter_dir else None)
    mx.random.seed(seed)
    sampler = make_sampler(temp=temperature, top_p=top_p)
    eos = getattr(tokenizer, "eos_token", None) or "<|im_end|>"
    out = []
    for text in user_texts:
        prompt = format_prompt(tokenizer, text)
        group = []
        for _ in range(k):
            completion = generate(model, tokenizer, prompt=prompt, max_tokens=max_tokens, sampler=sampler, verbose=False)
            group.append(completion.split(eos)[0].strip())
        out.append(group)
    return out


def fuse_adapter(model_path: str, adapter_dir: Path, save_path: Path) -> Path:
    """Base + adapter fused into one model folder (the KL reference for GRPO). Needs Apple Silicon."""
    from library.backends import select_backend

    select_backend("mlx")
    cmd = [sys.executable, "-m", "mlx_lm", "fuse", "--model", str(model_path), "--adapter-path", str(adapter_dir),
           "--save-path", str(save_path)]
    _run_logged(cmd, Path(save_path).with_suffix(".log"))
    return Path(save_path)


def grpo_command(config_path: Path) -> list[str]:
    return [sys.executable, "-m", "mlx_lm_lora.train", "--config", str(config_path)]


def train_grpo(settings, lora: MlxLoraConfig, model_path: str, questions: list[Question], *, work_dir: Path,
               adapter_dir: Path, init_adapter_dir: Path, kg_path: Path, run_dir: Path, system: str, seed: int,
               forbidden_ids: Iterable[str], repo_root: Path) -> list[dict]:
    """GRPO through mlx-lm-lora with the KG reward plugged in as a custom reward function.
    Returns the loss curve. Needs Apple Silicon and ``mlx-lm-lora``."""
    from library.backends import BackendUnavailable, select_backend

    select_backend("mlx")
    import importlib.util

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
    return parse_train_log(_run_logged(grpo_command(cfg), work_dir / "mlx_grpo.log",
                                       env={"PYTHONPATH": str(repo_root)}))
