"""Completion-only fine-tuning with TRL's ``SFTTrainer``, LoRA or full: what SFT trains the
reference completions with and RSFT its winners (library/train/sft.py, library/train/rsft.py).

What this module guarantees, and why:

- **Loss on the completion only.** Rows are TRL's prompt-completion format: ``prompt`` is the
  chat-formatted user turn (``library.model.chat.format_prompt``, the exact text generation sees) and
  ``completion`` is ``TRACE: ...\\nANSWER: X<|im_end|>``. With ``completion_only_loss=True`` TRL sets
  the labels of every prompt token to -100 (the public attempt trained on the prompt too).
- **Base weights frozen.** peft's LoRA wrapper freezes everything except the adapter matrices
  (r=16, alpha=16, dropout 0.05 on all attention and MLP projections); :func:`trainable_report`
  lets tests and meta.json check it.
- **CPU-safe.** ``use_cpu=True`` on CPU, bf16 autocast only where the compute precision says so
  (AMX; TRL defaults to bf16, which a CPU without bf16 units runs ~38x slower), no gradient checkpointing (135M parameters fit easily; it would only cost time).
- **Resumable.** Checkpoints go to ``<run>/checkpoints/<phase>/`` (git-ignored); a rerun resumes
  from the newest one, optimizer and data order included. The finished adapter is saved to
  ``<run>/adapters/<phase>/`` (git-ignored) and is what the next phase loads.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterable

from library.model.chat import format_example
from library.train.checkpoints import (save_full_model, cpu_training_args, last_checkpoint, lora_config, save_adapter,
                                       trainable_report)
from library.train.packing import rows_apart

# torch, trl, peft and datasets are imported inside the functions that train (the CLI starts
# without them). LoRA settings are library.config.LoraSettings, passed in, not imported here:
# this module stays below the config in the import levels.

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
    return [format_example(tokenizer, user, completion).as_dict() for user, completion in examples]


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


# ------------------------------------------------------------------------- training
def completion_positions_loss(model, inputs: dict[str, Any], num_items_in_batch=None):
    """Next-token cross-entropy computed only at the positions that have a label.

    Returns ``(loss, scored_log_probs, targets)``. ``inputs`` is a collated batch with ``labels``
    (-100 on prompt and padding tokens). Position ``i`` predicts ``labels[i + 1]``, so the
    positions kept are those whose *next* label is set, and only they go through the LM head
    (``logits_to_keep`` as a boolean mask). The loss is the mean over scored tokens, or the sum
    divided by ``num_items_in_batch`` when the Trainer passes it (gradient accumulation counts
    every scored token of the accumulated micro-batches, as TRL does).

    Why by hand: TRL's fused LM head scores only labelled positions on CUDA/XPU, but on CPU it
    projects every position, prompt included, through the 49,152-wide head (and again in its
    backward). Prompt tokens are over half of a question row here; measured on the quick
    profile's rows, full fine-tuning: 0.997 s a step against 1.06-1.26 s (docs/MEASUREMENTS.md).

    >>> import torch
    >>> from library.model.load import build_tiny_model, load_tokenizer
    >>> tok = load_tokenizer("tiny"); model = build_tiny_model(tok)
    >>> batch = {"input_ids": torch.tensor([[5, 6, 7, 8]]), "labels": torch.tensor([[-100, -100, 7, 8]])}
    >>> loss, log_p, targets = completion_positions_loss(model, batch)
    >>> tuple(log_p.shape), targets.tolist()   # positions 1 and 2 predict tokens 7 and 8
    ((2, 49152), [7, 8])
    """
    import torch
    import torch.nn.functional as F

    labels = inputs["labels"]
    next_labels = F.pad(labels, (0, 1), value=-100)[:, 1:]
    scored = next_labels != -100
    forward = {k: v for k, v in inputs.items() if k != "labels"}
    with rows_apart(model, forward):  # SDPA over a whole packed sequence would compute every row against every other
        logits = model(**forward, use_cache=False, logits_to_keep=scored).logits.float()
    targets = next_labels[scored]
    n_scored = scored.sum() if num_items_in_batch is None else num_items_in_batch
    # cross_entropy is log_softmax then nll_loss (bit for bit); the log-probs are kept for the
    # logged metrics, which would otherwise take a second log_softmax over the 49,152-wide rows
    log_p = logits.log_softmax(-1)
    loss = F.nll_loss(log_p, targets, reduction="sum") / torch.as_tensor(n_scored).clamp(min=1)
    return loss, log_p, targets


@lru_cache(maxsize=1)
def _completion_positions_sft_trainer():
    """TRL's SFTTrainer with :func:`completion_positions_loss` as its loss (built on first use:
    this module does not import TRL at import time)."""
    import torch
    from trl import SFTTrainer

    class CompletionPositionsSFTTrainer(SFTTrainer):
        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            loss, log_p, targets = completion_positions_loss(model, inputs, num_items_in_batch)
            if self.args.average_tokens_across_devices and num_items_in_batch is not None:
                loss = loss * self.accelerator.num_processes  # DDP averages the ranks' gradients
            mode = "train" if model.training else "eval"
            with torch.no_grad():  # the metrics TRL logs, on the scored positions only
                n = self.accelerator.gather_for_metrics(torch.tensor(len(targets), device=log_p.device)).sum()
                correct = self.accelerator.gather_for_metrics((log_p.argmax(-1) == targets).sum()).sum()
                entropy = self.accelerator.gather_for_metrics(-(log_p.exp() * log_p).sum()).sum()
            self._metrics[mode]["mean_token_accuracy"].append((correct / n).item() if n > 0 else 0.0)
            self._metrics[mode]["entropy"].append((entropy / n).item() if n > 0 else 0.0)
            if return_outputs:
                return loss, {"logits": log_p}  # log-probs: the same distribution as the logits
            return loss

    return CompletionPositionsSFTTrainer


def build_sft_trainer(
    model,
    tokenizer,
    rows: list[dict[str, str]],
    *,
    ckpt_dir: Path,
    learning_rate: float,
    max_steps: int | None,
    batch_size: int,
    max_length: int,
    seed: int,
    lora: Any = None,  # library.config.LoraSettings
    full: bool = False,
    padding_free: bool = True,
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

    ``max_steps=None`` makes one pass over ``rows``. ``padding_free`` flattens each batch into
    one sequence with per-example position ids (TRL's padding-free collator): no pad token is
    computed, and transformers' attention masks keep the examples apart (it builds a
    block-diagonal causal mask from the position ids when the cache is off, as TRL's training
    step sets; ``tests/test_sft.py`` checks the losses equal the unpacked ones).
    """
    from datasets import Dataset
    from peft import PeftModel
    from trl import SFTConfig

    if not rows:
        raise ValueError("no training rows")
    is_peft = isinstance(model, PeftModel)
    if full and is_peft:
        raise ValueError("full fine-tuning needs a plain model, not a LoRA-wrapped one")
    if not is_peft and lora is None and not full:
        raise ValueError("a plain model needs LoRA settings, or full=True for full fine-tuning")
    if full:
        model.requires_grad_(True)
    Path(ckpt_dir).mkdir(parents=True, exist_ok=True)
    args = SFTConfig(
        **cpu_training_args(
            output_dir=str(ckpt_dir),
            max_steps=max_steps if max_steps is not None else -1,
            num_train_epochs=1,
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
            # TRL enforces max_length only by truncating padded batches; padding-free rows are ours
            # and short (a 5-hop question row is < 200 tokens), so they are checked below instead.
            max_length=None if padding_free else max_length,
            completion_only_loss=True,
            packing=False,
            padding_free=padding_free,
            dataset_num_proc=None,
        )
    )
    trainer = _completion_positions_sft_trainer()(
        model=model,
        args=args,
        train_dataset=Dataset.from_list(rows),
        processing_class=tokenizer,
        peft_config=None if (is_peft or full) else lora_config(lora),
        callbacks=callbacks or [],
    )
    if padding_free:
        longest = max(len(ex["input_ids"]) for ex in trainer.train_dataset)
        if longest > max_length:
            raise ValueError(f"a training row has {longest} tokens, over max_length={max_length}")
    report = trainable_report(trainer.model)
    if report["non_lora_trainable"] and not full:
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
    if kwargs.get("full"):
        save_full_model(peft_model, Path(adapter_dir))
    else:
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
