"""Phase 2, SFT: the knowledge stage and the training questions' reference completions,
trained with the completion-only fine-tuning of :mod:`library.train.finetune` (LoRA, or every
weight with ``sft.method: full``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from library.questions.wording import reference_completion
from library.train.facts import knowledge_rows
from library.train.finetune import sft_rows, train_lora

# The settings are library.config.SFTSettings, passed in, not imported (this module stays below
# the config in the import levels); trl and torch come in through finetune's functions.


def question_rows(tokenizer, questions: Sequence[Any]) -> list[dict[str, str]]:
    """Gold rows for SFT: each question's prompt and its reference ``TRACE/ANSWER`` completion."""
    return sft_rows(tokenizer, ((q.prompt, reference_completion(q)) for q in questions))


def sft_examples(questions: Sequence[Any], settings: Any, *, kg: Any = None, seed: int) -> list[tuple[str, str]]:
    """What SFT trains on, as ``(user_text, completion)`` pairs in training order (before TRL's shuffle).

    The knowledge stage (``settings.knowledge_epochs`` passes over every KG fact, see
    library/train/facts.py) and ``settings.question_epochs`` passes over the questions' reference
    completions, mixed into one set so the format is learned while the facts are, and no stage
    makes the model forget the other.
    """
    examples = [(q.prompt, reference_completion(q)) for q in questions] * settings.question_epochs
    if settings.knowledge_epochs:
        if kg is None:
            raise ValueError("the knowledge stage needs the KG (sft.knowledge_epochs > 0)")
        examples += knowledge_rows(kg, epochs=settings.knowledge_epochs, facts_per_row=settings.facts_per_row, seed=seed)
    return examples


def run_sft(model, tokenizer, questions: Sequence[Any], settings: Any, *, ckpt_dir: Path,
            adapter_dir: Path, seed: int, kg: Any = None, resume: bool = True, callbacks: list | None = None):
    """Phase 2: SFT on KG facts and the reference completions of ``questions`` (training questions only)."""
    rows = sft_rows(tokenizer, sft_examples(questions, settings, kg=kg, seed=seed))
    return train_lora(
        model, tokenizer, rows, full=settings.method == "full",
        ckpt_dir=ckpt_dir, adapter_dir=adapter_dir, padding_free=settings.padding_free,
        learning_rate=settings.learning_rate, max_steps=settings.max_steps,
        batch_size=settings.batch_size, grad_accum=settings.grad_accum,
        max_length=settings.max_length, warmup_steps=settings.warmup_steps,
        lr_scheduler=settings.lr_scheduler, weight_decay=settings.weight_decay,
        logging_steps=settings.logging_steps, save_steps=settings.save_steps,
        seed=seed, lora=settings.lora, resume=resume, callbacks=callbacks,
    )
