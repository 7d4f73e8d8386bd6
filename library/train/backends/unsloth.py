"""The unsloth backend: Unsloth's FastLanguageModel (LoRA, optional 4-bit) under the SAME torch
phases (library.train.sft.run_sft, library.train.rsft.run_rsft, library.train.grpo.run_grpo) and the SAME eval.

UNTESTED ON HARDWARE: no NVIDIA GPU was available when this was written; what is tested here
is the pure part (the LoRA settings mapping) and that every entry point refuses with a clear
BackendUnavailable on a machine without CUDA (docs/BACKENDS.md).

Why this shape:

- ``unsloth`` is imported only inside functions, after ``select_backend("unsloth")``: on a CPU
  machine the import itself fails (and ``pip install unsloth`` replaces torch, docs/MEASUREMENTS.md), so
  the user must see our one-paragraph reason, never an import trace. Unsloth must also be
  imported *before* trl/peft/transformers build their trainers (it patches them); the library's
  trainers import trl lazily, so loading the model here first is enough.
- The model Unsloth returns is already a ``PeftModel`` with a trainable "default" adapter.
  ``library.train.sft.build_sft_trainer`` sees a PeftModel and adds no second adapter; RSFT and
  GRPO continue that adapter, exactly as they continue the SFT adapter on the torch path.
- **Generation never runs through the Unsloth model here.** ``library.model.generate`` drives the
  forward pass with its own preallocated KV cache and deep-copies + merges LoRA; Unsloth
  replaces the Llama forward with fused kernels and its own cache handling, and merging into
  4-bit weights re-quantizes. So evaluation and RSFT sampling use a plain fp32 transformers
  copy of the base model with the phase's saved peft adapter (``torch_reference_model``) -
  which is also what makes the numbers comparable with torch and mlx runs. Were the Unsloth
  model used to generate, it would have to be wrapped as::

      FastLanguageModel.for_inference(model)   # before any generate()
      ...                                      # generate
      FastLanguageModel.for_training(model)    # before the next trainer.train()

  TRL's GRPOTrainer generates through the Unsloth model itself; Unsloth's patched trainer
  switches modes around its own generation.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from library.config import LoraSettings
from library.train.backends import select_backend
from library.train.checkpoints import load_adapter


def unsloth_peft_kwargs(lora: LoraSettings, *, seed: int) -> dict[str, Any]:
    """``FastLanguageModel.get_peft_model`` keyword arguments equal to the torch path's LoRA
    (``library.train.checkpoints.lora_config``): same r, alpha, dropout, target modules, no bias.

    >>> kw = unsloth_peft_kwargs(LoraSettings(), seed=3)
    >>> kw["r"], kw["lora_alpha"], kw["lora_dropout"], kw["random_state"], len(kw["target_modules"])
    (16, 16, 0.05, 3, 7)
    """
    return {
        "r": lora.r,
        "lora_alpha": lora.alpha,
        "lora_dropout": lora.dropout,
        "target_modules": list(lora.target_modules),
        "bias": "none",
        "use_gradient_checkpointing": "unsloth",  # Unsloth's offloaded checkpointing (less VRAM)
        "random_state": seed,
        "use_rslora": False,   # plain alpha/r scaling, as peft's default on the torch path
        "loftq_config": None,
    }


def load_model_unsloth(spec: str, *, max_seq_length: int, load_in_4bit: bool, lora: LoraSettings, seed: int,
                       dtype: Any = None):
    """``(peft_model, tokenizer)`` from Unsloth for a model spec (embedded | tiny | folder | hub id).

    The tokenizer is prepared like ``library.model.load.load_tokenizer`` (pad = eos, left padding)
    and must carry the chat template the torch path formats prompts with. ``dtype=None`` lets
    Unsloth choose (bf16 on Ampere+, fp16 before). Needs an NVIDIA GPU (untested on hardware).
    """
    select_backend("unsloth")
    from unsloth import FastLanguageModel  # noqa: first: unsloth patches transformers/trl/peft

    from library.model.load import model_source, prepare_tokenizer, resolve_model_spec

    source = model_source(spec)
    model, tokenizer = FastLanguageModel.from_pretrained(
        model_name=str(source), max_seq_length=max_seq_length, dtype=dtype, load_in_4bit=load_in_4bit,
    )
    tokenizer = prepare_tokenizer(tokenizer)
    if not getattr(tokenizer, "chat_template", None):
        raise ValueError(f"{spec}: the tokenizer has no chat template; prompts could not be formatted "
                         "like the torch path's (library.model.chat.format_prompt)")
    model.config.pad_token_id = tokenizer.pad_token_id
    if getattr(model, "generation_config", None) is not None:
        model.generation_config.pad_token_id = tokenizer.pad_token_id
        model.generation_config.eos_token_id = tokenizer.eos_token_id
    model = FastLanguageModel.get_peft_model(model, max_seq_length=max_seq_length, **unsloth_peft_kwargs(lora, seed=seed))
    model.kgr_spec = resolve_model_spec(spec)  # for meta.json, like library.model.load.load_model
    return model, tokenizer


def load_adapter_weights(model, adapter_dir) -> None:
    """Put a saved peft adapter's weights into ``model``'s "default" adapter (same r/modules).

    Used when GRPO starts from the SFT adapter after RSFT changed the live one, and on resume.
    """
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    state = load_file(str(Path(adapter_dir) / "adapter_model.safetensors"))
    result = set_peft_model_state_dict(model, state, adapter_name="default")
    missing = [k for k in getattr(result, "unexpected_keys", []) if "lora_" in k]
    if missing:
        raise RuntimeError(f"{adapter_dir}: adapter tensors did not match the model: {missing[:5]}")


def torch_reference_model(spec: str, adapter_dir=None, *, device: str = "cuda"):
    """The plain transformers model (fp32, library.model.load.load_model) with a saved peft adapter,
    frozen: what evaluation and RSFT sampling generate with on this backend (see module doc)."""
    from library.model.load import load_model

    model, tokenizer = load_model(spec, device=device)
    if adapter_dir is not None:
        model = load_adapter(model, adapter_dir, trainable=False)
    model.eval()
    return model, tokenizer
