"""Adapters converted between the peft and mlx-lm layouts, both ways (numpy and safetensors
only: runs on any OS, no mlx needed).

Why by hand: neither library exports the other's layout.

- peft: ``adapter_model.safetensors`` with ``base_model.model.model.layers.{i}.{mod}.lora_A.weight``
  of shape (r, in) and ``...lora_B.weight`` of shape (out, r); output = W x + (alpha/r) B A x.
- mlx-lm: ``adapters.safetensors`` with ``model.layers.{i}.{mod}.lora_a`` of shape (in, r) and
  ``...lora_b`` of shape (r, out); output = W x + scale (x a) b. So a = A^T, b = B^T, scale = alpha/r.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np

from library.jsonl import atomic_write_bytes, atomic_write_text

PEFT_KEY = re.compile(r"^base_model\.model\.(?P<stem>.+)\.lora_(?P<ab>[AB])\.weight$")
MLX_KEY = re.compile(r"^(?P<stem>.+)\.lora_(?P<ab>[ab])$")
LAYER_MODULE = re.compile(r"^model\.layers\.(?P<layer>\d+)\.(?P<module>.+)$")


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
