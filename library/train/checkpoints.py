"""Checkpoints, adapters and trainer arguments shared by every training phase (SFT, RSFT, GRPO).

A phase's result is saved under ``<run>/adapters/<phase>/``: a LoRA adapter, or a whole model
folder when SFT fine-tuned every weight; :func:`load_adapter` reads either. Trainer checkpoints
go to ``<run>/checkpoints/<phase>/checkpoint-<step>`` and :func:`last_checkpoint` finds the
newest complete one, which is what makes a killed phase resumable.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from library.model.distributed import is_writer, wait_for_everyone

# torch, transformers and peft are imported inside the functions that need them (the CLI starts
# without them). LoRA settings are library.config.LoraSettings, passed in, not imported: this
# module stays below the config in the import levels.


def lora_config(settings: Any):
    """peft's LoraConfig for ``settings`` (a :class:`library.config.LoraSettings`)."""
    from peft import LoraConfig

    return LoraConfig(
        r=settings.r,
        lora_alpha=settings.alpha,
        lora_dropout=settings.dropout,
        target_modules=list(settings.target_modules),
        bias="none",
        task_type="CAUSAL_LM",
    )


def trainable_report(model) -> dict[str, Any]:
    """Which parameters train. With LoRA every trainable name contains ``lora_``."""
    trainable = [(n, p.numel()) for n, p in model.named_parameters() if p.requires_grad]
    total = sum(p.numel() for p in model.parameters())
    return {
        "trainable_params": sum(n for _, n in trainable),
        "total_params": total,
        "non_lora_trainable": [n for n, _ in trainable if "lora_" not in n],
    }


def last_checkpoint(ckpt_dir: Path) -> Path | None:
    """Newest ``checkpoint-<step>`` folder with a trainer state (a half-written one is ignored)."""
    if not ckpt_dir.is_dir():
        return None
    found = []
    for p in ckpt_dir.glob("checkpoint-*"):
        try:
            step = int(p.name.split("-")[-1])
        except ValueError:
            continue
        if (p / "trainer_state.json").exists():
            found.append((step, p))
    return max(found)[1] if found else None


def checkpoint_step(path: Path | None) -> int:
    return int(path.name.split("-")[-1]) if path is not None else 0


def save_full_model(model, out_dir: Path) -> Path:
    """Save a fully fine-tuned model (~540 MB fp32 for SmolLM2-135M; run folders' adapters/ are
    git-ignored) to a temporary sibling, then rename it into place, so a kill never leaves a
    half-written model that resume would load.

    Across processes the main one saves (DDP keeps the weights identical on every process) and
    the others wait until the folder is complete, since the next phase loads it."""
    if is_writer():
        tmp = out_dir.with_name(out_dir.name + ".partial")
        shutil.rmtree(tmp, ignore_errors=True)
        model.save_pretrained(str(tmp))
        shutil.rmtree(out_dir, ignore_errors=True)
        tmp.rename(out_dir)
    wait_for_everyone()
    return out_dir


def save_adapter(model, out_dir: Path) -> Path:
    """Save only the trained ("default") adapter; GRPO's frozen "ref" copy is not a result.
    Across processes the main one saves and the others wait until it has (as above)."""
    if is_writer():
        out_dir.mkdir(parents=True, exist_ok=True)
        model.save_pretrained(str(out_dir), selected_adapters=["default"])
    wait_for_everyone()
    return out_dir


def is_full_model_dir(path: Path) -> bool:
    """A phase result saved by full fine-tuning (a whole model folder, not a LoRA adapter)."""
    path = Path(path)
    return (path / "config.json").exists() and not (path / "adapter_config.json").exists()


def load_adapter(base_model, adapter_dir: Path, trainable: bool = True):
    """A phase's saved result on top of ``base_model``: a LoRA adapter wraps it (trainable for
    the next phase, or frozen for eval); a fully fine-tuned model folder replaces it."""
    if is_full_model_dir(adapter_dir):
        return load_full_model(adapter_dir, trainable=trainable)
    from peft import PeftModel

    return PeftModel.from_pretrained(base_model, str(adapter_dir), is_trainable=trainable)


def load_full_model(model_dir: Path, trainable: bool = False):
    """A fully fine-tuned model saved by :func:`train_lora` with ``full=True`` (fp32, like the base)."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32)
    model.requires_grad_(trainable)
    return model.train() if trainable else model.eval()


def add_lora(model, settings: Any):
    """A fresh trainable LoRA adapter on ``model`` (RL on top of a fully fine-tuned SFT model)."""
    from peft import get_peft_model

    return get_peft_model(model, lora_config(settings))


def cpu_training_args(**kwargs) -> dict[str, Any]:
    """Arguments every TRL config gets (CPU-safe; mixed precision from the compute precision).

    ``bf16`` follows :func:`library.model.precision.compute_precision`: True only where a run asked
    for bf16 where it is fast (``fast`` on AMX: SFT 1.5x the fp32 tokens per second, benchmarks/training.py),
    never on a CPU without them (bf16 is ~38x slower there, docs/MEASUREMENTS.md). TRL's own
    default (``bf16=True``) is never taken blindly.
    """
    import torch
    from transformers import TrainingArguments

    from library.model.precision import compute_precision

    # Activation ("gradient") checkpointing off: it recomputes activations to save memory we have.
    # transformers 5.2x renamed the argument to ``activation_checkpointing`` and applies the old
    # name only while the new one is unset, so TRL's default (``gradient_checkpointing=True``)
    # would win over a new-name default of a later release; we set the name the installed
    # TrainingArguments declares (pyproject allows any transformers>=5.0).
    checkpointing = ("activation_checkpointing" if "activation_checkpointing" in TrainingArguments.__dataclass_fields__
                     else "gradient_checkpointing")
    base = dict(
        bf16=compute_precision() == "bfloat16",
        fp16=False,
        use_cpu=not torch.cuda.is_available(),
        report_to=[],
        **{checkpointing: False},
        # fused AdamW: 0.12 s a step for all 135M weights on this CPU, against 0.6-0.8 s unfused
        optim="adamw_torch_fused",
        dataloader_num_workers=0,
        save_strategy="steps",
        save_total_limit=1,
        logging_strategy="steps",
        disable_tqdm=False,
    )
    base.update(kwargs)
    return base


def load_phase_model(base, adapter_root: Path, phase: str, *, sft_full: bool, trainable: bool = False):
    """The model phase ``phase`` was evaluated with, from its saved result in ``adapter_root``:
    the base for ``base``; the SFT result (a LoRA adapter on the base, or the whole fine-tuned
    model) for ``sft``; an RL phase's LoRA adapter on the fully fine-tuned SFT model when
    ``sft_full``, else on the base (its adapter continued the SFT adapter). What "try it" serves
    and what the evaluation of a resumed run loads."""
    if phase == "base":
        return base
    adapter_root = Path(adapter_root)
    if phase != "sft" and sft_full:
        base = load_full_model(adapter_root / "sft")
    return load_adapter(base, adapter_root / phase, trainable=trainable)


def saved_phase(adapter_dir: Path) -> bool:
    """Whether a phase's result was saved in ``adapter_dir`` (an adapter or a whole model)."""
    return (Path(adapter_dir) / "adapter_config.json").exists() or is_full_model_dir(adapter_dir)
