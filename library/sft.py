"""LoRA supervised fine-tuning with TRL's ``SFTTrainer`` (used by SFT and, on other rows, by RSFT).

What this module guarantees, and why:

- **Loss on the completion only.** Rows are TRL's prompt-completion format: ``prompt`` is the
  chat-formatted user turn (``library.model.format_prompt``, the exact text generation sees) and
  ``completion`` is ``TRACE: ...\\nANSWER: X<|im_end|>``. With ``completion_only_loss=True`` TRL sets
  the labels of every prompt token to -100 (the public attempt trained on the prompt too).
- **Base weights frozen.** peft's LoRA wrapper freezes everything except the adapter matrices
  (r=16, alpha=16, dropout 0.05 on all attention and MLP projections); :func:`trainable_report`
  lets tests and meta.json check it.
- **CPU-safe.** ``bf16=False, use_cpu=True`` always (TRL defaults to bf16, which this CPU runs
  ~38x slower), no gradient checkpointing (135M parameters fit easily; it would only cost time).
- **Resumable.** Checkpoints go to ``<run>/checkpoints/<phase>/`` (git-ignored); a rerun resumes
  from the newest one, optimizer and data order included. The finished adapter is saved to
  ``<run>/adapters/<phase>/`` (git-ignored) and is what the next phase loads.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

from library.config import LoraSettings, SFTSettings


@dataclass
class LoraTrainResult:
    adapter_dir: Path
    steps: int
    n_examples: int
    curve: list[dict[str, float]] = field(default_factory=list)
    seconds: float = 0.0
    resumed_from: str | None = None
    trainable_params: int = 0
    total_params: int = 0


# ----------------------------------------------------------------------------- rows
def sft_rows(tokenizer, examples: Iterable[tuple[str, str]]) -> list[dict[str, str]]:
    """``(user_text, completion)`` pairs -> TRL prompt-completion rows (chat template applied once, here)."""
    from library.model import format_example

    return [format_example(tokenizer, user, completion).as_dict() for user, completion in examples]


def question_rows(tokenizer, questions: Sequence[Any]) -> list[dict[str, str]]:
    """Gold rows for SFT: each question's prompt and its reference ``TRACE/ANSWER`` completion."""
    return sft_rows(tokenizer, ((q.prompt, reference_completion(q)) for q in questions))


def reference_completion(question: Any) -> str:
    """The gold completion text. ``ref.completion`` when the data has it, else built from the trace."""
    ref = question.ref
    completion = getattr(ref, "completion", None)
    if completion is None and isinstance(getattr(ref, "model_extra", None), dict):
        completion = ref.model_extra.get("completion")
    if completion:
        return str(completion).strip()
    trace = ref.trace.strip()
    if not trace.startswith("TRACE:"):
        trace = f"TRACE: {trace}"
    return f"{trace}\nANSWER: {question.answer_star}"


# ------------------------------------------------------------------------- helpers
def lora_config(settings: LoraSettings):
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


def loss_curve(log_history: list[dict[str, Any]]) -> list[dict[str, float]]:
    """Trainer log history -> ``[{"step", "loss", "learning_rate", "grad_norm"}]`` (training logs only)."""
    curve = []
    for entry in log_history:
        if "loss" not in entry or "step" not in entry:
            continue
        point = {"step": int(entry["step"]), "loss": float(entry["loss"])}
        for key in ("learning_rate", "grad_norm", "mean_token_accuracy"):
            if key in entry and entry[key] is not None and math.isfinite(float(entry[key])):
                point[key] = float(entry[key])
        curve.append(point)
    return curve


def save_adapter(model, out_dir: Path) -> Path:
    """Save only the trained ("default") adapter; GRPO's frozen "ref" copy is not a result."""
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(out_dir), selected_adapters=["default"])
    return out_dir


def load_adapter(base_model, adapter_dir: Path, trainable: bool = True):
    """Wrap ``base_model`` with a saved LoRA adapter (trainable for the next phase, or frozen for eval)."""
    from peft import PeftModel

    return PeftModel.from_pretrained(base_model, str(adapter_dir), is_trainable=trainable)


def cpu_training_args(**kwargs) -> dict[str, Any]:
    """Arguments every TRL config gets on this machine (see NOTES.md: bf16 is ~38x slower here)."""
    import torch

    base = dict(
        bf16=False,
        fp16=False,
        use_cpu=not torch.cuda.is_available(),
        report_to=[],
        gradient_checkpointing=False,
        dataloader_num_workers=0,
        save_strategy="steps",
        save_total_limit=1,
        logging_strategy="steps",
        disable_tqdm=False,
    )
    base.update(kwargs)
    return base


# ------------------------------------------------------------------------- training
def build_sft_trainer(
    model,
    tokenizer,
    rows: list[dict[str, str]],
    *,
    ckpt_dir: Path,
    learning_rate: float,
    max_steps: int,
    batch_size: int,
    max_length: int,
    seed: int,
    lora: LoraSettings | None = None,
    grad_accum: int = 1,
    warmup_steps: int = 0,
    lr_scheduler: str = "linear",
    weight_decay: float = 0.0,
    logging_steps: int = 1,
    save_steps: int = 20,
    callbacks: list | None = None,
):
    """An SFTTrainer over prompt-completion ``rows`` with completion-only loss and LoRA.

    ``model`` is either a plain causal LM (a new adapter is created from ``lora``) or a PeftModel
    whose "default" adapter is trainable (RSFT continues the SFT adapter this way).
    """
    from datasets import Dataset
    from peft import PeftModel
    from trl import SFTConfig, SFTTrainer

    if not rows:
        raise ValueError("no training rows")
    is_peft = isinstance(model, PeftModel)
    if not is_peft and lora is None:
        raise ValueError("a plain model needs LoRA settings (full fine-tuning is not supported here)")
    Path(ckpt_dir).mkdir(parents=True, exist_ok=True)
    args = SFTConfig(
        **cpu_training_args(
            output_dir=str(ckpt_dir),
            max_steps=max_steps,
            per_device_train_batch_size=batch_size,
            gradient_accumulation_steps=grad_accum,
            learning_rate=learning_rate,
            lr_scheduler_type=lr_scheduler,
            warmup_steps=warmup_steps,
            weight_decay=weight_decay,
            logging_steps=logging_steps,
            save_steps=save_steps,
            seed=seed,
            data_seed=seed,
            max_length=max_length,
            completion_only_loss=True,
            packing=False,
            dataset_num_proc=None,
        )
    )
    trainer = SFTTrainer(
        model=model,
        args=args,
        train_dataset=Dataset.from_list(rows),
        processing_class=tokenizer,
        peft_config=None if is_peft else lora_config(lora),
        callbacks=callbacks or [],
    )
    report = trainable_report(trainer.model)
    if report["non_lora_trainable"]:
        raise RuntimeError(f"base weights are not frozen: {report['non_lora_trainable'][:5]}")
    if report["trainable_params"] == 0:
        raise RuntimeError("nothing to train: the adapter was loaded frozen (is_trainable=False)")
    return trainer


def train_lora(model, tokenizer, rows: list[dict[str, str]], *, ckpt_dir: Path, adapter_dir: Path,
               resume: bool = True, **kwargs) -> tuple[Any, LoraTrainResult]:
    """Train (or resume training) a LoRA adapter on ``rows``; save it to ``adapter_dir``.

    Returns ``(peft_model, result)``. Keyword arguments are :func:`build_sft_trainer`'s.
    """
    ckpt_dir = Path(ckpt_dir)
    resume_from = last_checkpoint(ckpt_dir) if resume else None
    trainer = build_sft_trainer(model, tokenizer, rows, ckpt_dir=ckpt_dir, **kwargs)
    report = trainable_report(trainer.model)

    start = time.perf_counter()
    trainer.train(resume_from_checkpoint=str(resume_from) if resume_from else None)
    seconds = time.perf_counter() - start

    peft_model = trainer.model
    save_adapter(peft_model, Path(adapter_dir))
    result = LoraTrainResult(
        adapter_dir=Path(adapter_dir),
        steps=int(trainer.state.global_step),
        n_examples=len(rows),
        curve=loss_curve(trainer.state.log_history),
        seconds=seconds,
        resumed_from=str(resume_from) if resume_from else None,
        trainable_params=report["trainable_params"],
        total_params=report["total_params"],
    )
    peft_model.eval()
    return peft_model, result


def run_sft(model, tokenizer, questions: Sequence[Any], settings: SFTSettings, *, ckpt_dir: Path,
            adapter_dir: Path, seed: int, resume: bool = True, callbacks: list | None = None):
    """Phase 2: LoRA SFT on the reference completions of ``questions`` (training questions only)."""
    rows = question_rows(tokenizer, questions)
    return train_lora(
        model, tokenizer, rows,
        ckpt_dir=ckpt_dir, adapter_dir=adapter_dir,
        learning_rate=settings.learning_rate, max_steps=settings.max_steps,
        batch_size=settings.batch_size, grad_accum=settings.grad_accum,
        max_length=settings.max_length, warmup_steps=settings.warmup_steps,
        lr_scheduler=settings.lr_scheduler, weight_decay=settings.weight_decay,
        logging_steps=settings.logging_steps, save_steps=settings.save_steps,
        seed=seed, lora=settings.lora, resume=resume, callbacks=callbacks,
    )
