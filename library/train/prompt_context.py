"""The prompt as context: a training step with no backward pass through prompt tokens.

SFT scores only the completion, yet every prompt token costs a forward *and* a backward pass
(about 6 x params FLOPs a token) because the completion attends to it. Inside
:func:`prompt_as_context` a padding-free batch runs in two passes instead:

1. each row's prompt (all but its last token) without autograd, 2 x params FLOPs a token, its
   keys and values kept per layer;
2. the rest of each row, from the prompt's last token on (its logits predict the completion's
   first token), with autograd, attending to its own row's prompt keys and values as constants.

The forward values, and so the loss, are the one-pass values (to float rounding). The gradient
differs: the weights still learn how the completion reads the prompt (its queries, and every
projection through the completion's own tokens), not how the prompt's keys and values are
written for later tokens. That makes it a recipe setting (``sft.prompt_gradient``), measured over
seeds, not a free speed-up (docs/FINDINGS.md).

Why by hand: transformers' key-value cache prefills one prompt per batch row; here the rows are
packed into one flat sequence (TRL's padding-free collation), and each row must see only its own
prompt. Two attention passes over the packed rows are the whole mechanism.

>>> import torch
>>> from library.model.load import load_model
>>> model, _ = load_model("tiny")
>>> batch = {"input_ids": torch.tensor([[5, 6, 7, 8, 9, 10, 11]]),
...          "position_ids": torch.tensor([[0, 1, 2, 3, 0, 1, 2]]),
...          "cu_seq_lens_q": torch.tensor([0, 4, 7])}
>>> scored = torch.tensor([[False, True, True, False, False, True, False]])  # positions whose next token is labelled
>>> split = context_split(batch, scored)
>>> split.prompt_bounds, split.rest_bounds          # row 0: prompt [5], rest [6, 7, 8]; row 1: [9], [10, 11]
([(0, 1), (1, 2)], [(0, 3), (3, 5)])
>>> logits = prompt_as_context(model, batch, scored)
>>> tuple(logits.shape)                                # the three scored positions, as one pass gives them
(3, 49152)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

NAME = "kgr_prompt_context"
"""The attention implementation's name in transformers' registry (set only during the two passes;
it has no mask function, so transformers builds no mask under it)."""


@dataclass
class ContextSplit:
    """Where each row of a packed batch splits: ``prompt_index`` and ``rest_index`` are positions
    of the flat sequence; the bounds are each row's slice of the two new flat sequences."""

    prompt_index: Any
    rest_index: Any
    prompt_bounds: list[tuple[int, int]]
    rest_bounds: list[tuple[int, int]]
    kv: dict[int, tuple[Any, Any]] = field(default_factory=dict)  # layer -> the prompts' keys, values
    phase: str = "prompt"


_active: ContextSplit | None = None


def context_split(batch: dict[str, Any], scored) -> ContextSplit | None:
    """The two passes' layout for a padding-free ``batch`` (``input_ids`` [1, T], ``position_ids``,
    ``cu_seq_lens_q``) and the ``scored`` positions (those whose next token is labelled); None where
    the batch is not such a batch or a row has no prompt before its first scored position."""
    import torch

    bounds, ids = batch.get("cu_seq_lens_q"), batch.get("input_ids")
    if bounds is None or ids is None or ids.shape[0] != 1 or batch.get("position_ids") is None:
        return None
    flags = scored[0]
    prompt_index, rest_index, prompt_bounds, rest_bounds = [], [], [], []
    p_at = r_at = 0
    for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
        hits = torch.nonzero(flags[a:b]).flatten()
        if len(hits) == 0 or hits[0].item() == 0:
            return None
        start = a + hits[0].item()
        prompt_index.append(torch.arange(a, start))
        rest_index.append(torch.arange(start, b))
        prompt_bounds.append((p_at, p_at + start - a))
        rest_bounds.append((r_at, r_at + b - start))
        p_at, r_at = prompt_bounds[-1][1], rest_bounds[-1][1]
    device = ids.device
    return ContextSplit(torch.cat(prompt_index).to(device), torch.cat(rest_index).to(device),
                        prompt_bounds, rest_bounds)


def _attention(module, query, key, value, attention_mask, **kwargs):
    """Pass 1: each prompt attends causally to itself, and its keys and values are kept. Pass 2:
    each row's rest attends to its prompt's kept keys and values, then causally to itself."""
    import torch
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    split = _active
    if split is None:  # under this name transformers built no mask: never attend unmasked
        raise RuntimeError(f"attention {NAME!r} runs only inside prompt_as_context")
    keep = {k: kwargs[k] for k in ("dropout", "scaling") if k in kwargs}
    outs = []
    if split.phase == "prompt":
        split.kv[module.layer_idx] = (key, value)
        for a, b in split.prompt_bounds:
            outs.append(sdpa_attention_forward(module, query[:, :, a:b], key[:, :, a:b], value[:, :, a:b], None,
                                               is_causal=True, **keep)[0])
    else:
        prompt_key, prompt_value = split.kv[module.layer_idx]
        for (pa, pb), (a, b) in zip(split.prompt_bounds, split.rest_bounds):
            p, n = pb - pa, b - a
            keys = torch.cat([prompt_key[:, :, pa:pb], key[:, :, a:b]], dim=2)
            values = torch.cat([prompt_value[:, :, pa:pb], value[:, :, a:b]], dim=2)
            # query i of the rest sees the whole prompt and the rest's keys up to itself
            mask = torch.ones(n, p + n, dtype=torch.bool, device=query.device).tril(diagonal=p)
            outs.append(sdpa_attention_forward(module, query[:, :, a:b], keys, values, mask[None, None],
                                               is_causal=False, **keep)[0])
    return torch.cat(outs, dim=1), None


def _register() -> None:
    from transformers import AttentionInterface

    if NAME not in AttentionInterface._global_mapping:
        AttentionInterface.register(NAME, _attention)


def usable(model, batch: dict[str, Any]) -> bool:
    """Whether ``model`` can take the two passes: transformers' "sdpa" attention, no sliding window,
    no activation checkpointing (it would recompute the attention after the passes, unmasked)."""
    inner = getattr(model, "module", model)  # DDP wraps the model; peft's config is the base model's
    config = getattr(inner, "config", None)
    return (config is not None and getattr(config, "_attn_implementation", None) == "sdpa"
            and getattr(config, "sliding_window", None) is None
            and not any(getattr(m, "gradient_checkpointing", False) for m in inner.modules()))


def prompt_as_context(model, batch: dict[str, Any], scored, split: ContextSplit | None = None):
    """The logits of the ``scored`` positions of ``batch`` (in order, as ``model(...,
    logits_to_keep=scored)`` returns them), computed with the prompts as constant context.
    The caller checks :func:`usable` and :func:`context_split` first."""
    import torch

    global _active
    split = split or context_split(batch, scored)
    if split is None:
        raise ValueError("the batch is not a padding-free batch whose rows start with a prompt")
    inner = getattr(model, "module", model)  # pass 1 needs no gradient, so no DDP hooks either
    config = getattr(inner, "config")
    ids, positions = batch["input_ids"], batch["position_ids"]
    _register()
    _active = split
    config._attn_implementation = NAME
    try:
        with torch.no_grad():
            inner(input_ids=ids[:, split.prompt_index], position_ids=positions[:, split.prompt_index],
                  use_cache=False, logits_to_keep=1)
        split.phase = "rest"
        keep = scored[:, split.rest_index]
        return model(input_ids=ids[:, split.rest_index], position_ids=positions[:, split.rest_index],
                     use_cache=False, logits_to_keep=keep).logits
    finally:
        config._attn_implementation = "sdpa"
        _active = None
