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

from library.contracts import Question
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


def sft_records(questions: Iterable[Question]) -> list[dict]:
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
        records.append({"messages": [{"role": "user", "content": q.prompt},
                                     {"role": "assistant", "content": completion}]})
    return records


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
