"""Attention row by row inside a padding-free batch.

A padding-free batch is one flat sequence of several training rows; TRL's collator marks where
each row starts (``cu_seq_lens_q``, the boundaries varlen kernels read). On CPU transformers keeps
the rows apart with a block-diagonal mask instead, and SDPA then computes every query against
every key of the whole flat sequence: for 8 rows of ~180 tokens, 8 times the attention work of the
rows alone. Inside :func:`rows_apart` the same attention runs on each row's own slice with a
causal mask, through transformers' own SDPA function, so nothing but the wasted blocks changes
(the result agrees to float rounding, not bit for bit: the kernel's blocks fall elsewhere).

Why by hand: transformers' variable-length attention (``flash_attention_2``) and flex attention
need a GPU or a compiler; on CPU nothing in the stack splits a packed sequence (RSFT's 8-row LoRA
batches: 12.2-14.0 s -> 7.8-8.7 s a step, docs/MEASUREMENTS.md).

Only batches of :data:`MIN_ROWS` rows or more use it: at SFT's 2 rows the saving was within the
noise, and keeping its arithmetic keeps the committed runs' SFT answer for answer.

>>> import torch
>>> from library.model.load import load_model
>>> model, _ = load_model("tiny")
>>> batch = {"input_ids": torch.tensor([[5, 6, 7, 8, 9, 10]]), "cu_seq_lens_q": torch.tensor([0, 2, 4, 6])}
>>> with rows_apart(model, batch):   # three rows: each attends to itself only
...     model.config._attn_implementation
'kgr_rows'
>>> model.config._attn_implementation
'sdpa'
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterator

NAME = "kgr_rows"
"""The attention implementation's name in transformers' registry (set only inside :func:`rows_apart`;
it has no mask function, so transformers builds no mask under it)."""

MIN_ROWS = 3
"""Packed batches with at least this many rows attend row by row."""


def _rows_attention(module, query, key, value, attention_mask, *, cu_seq_lens_q=None, **kwargs):
    """transformers' SDPA attention on each row's slice (causal), the outputs joined again."""
    import torch
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    if cu_seq_lens_q is None:  # under this name transformers built no mask: never attend unmasked
        raise RuntimeError(f"attention {NAME!r} needs the batch's row boundaries (cu_seq_lens_q)")
    bounds = cu_seq_lens_q.tolist()
    keep = {k: kwargs[k] for k in ("dropout", "scaling") if k in kwargs}
    outs = [sdpa_attention_forward(module, query[:, :, a:b], key[:, :, a:b], value[:, :, a:b], None,
                                   is_causal=True, **keep)[0]
            for a, b in zip(bounds[:-1], bounds[1:])]
    return torch.cat(outs, dim=1), None


def _register() -> None:
    from transformers import AttentionInterface

    if NAME not in AttentionInterface._global_mapping:
        AttentionInterface.register(NAME, _rows_attention)


@contextmanager
def rows_apart(model, batch: dict[str, Any]) -> Iterator[None]:
    """Inside the block, a forward pass of ``model`` on ``batch`` (TRL's padding-free collation:
    one flat sequence, ``cu_seq_lens_q`` its row boundaries) attends row by row when it holds
    :data:`MIN_ROWS` rows or more. Every other batch, and every model whose attention is not
    transformers' "sdpa", keeps its attention as it is; so does a model that recomputes
    activations in its backward pass (activation checkpointing would redo them after the block,
    unmasked) or has a sliding window (which only a mask applies)."""
    bounds = batch.get("cu_seq_lens_q")
    ids = batch.get("input_ids")
    inner = getattr(model, "module", model)  # DDP wraps the model; peft's config is the base model's
    config = getattr(inner, "config", None)
    if (bounds is None or len(bounds) - 1 < MIN_ROWS or ids is None or ids.shape[0] != 1 or config is None
            or getattr(config, "_attn_implementation", None) != "sdpa"
            or getattr(config, "sliding_window", None) is not None
            or any(getattr(m, "gradient_checkpointing", False) for m in inner.modules())):
        yield
        return
    _register()
    config._attn_implementation = NAME
    try:
        yield
    finally:
        config._attn_implementation = "sdpa"
