"""Attention row by row inside a padding-free batch.

A padding-free batch is one flat sequence of several training rows, told apart by position ids
that restart at 0 (TRL's padding-free collator). transformers keeps the rows apart with a
block-diagonal mask, and on CPU SDPA then computes every query against every key of the whole
flat sequence: for 8 rows of ~180 tokens, 8 times the attention work of the rows alone. Here the
same attention runs on each row's own slice with a causal mask, through transformers' own SDPA
function, so nothing but the wasted blocks changes (the result agrees to float rounding, not bit
for bit: the kernel's blocks fall elsewhere).

Why by hand: transformers' variable-length attention (``flash_attention_2``) and flex attention
need a GPU or a compiler; on CPU nothing in the stack splits a packed sequence (measured on RSFT's
8-row LoRA batches, full model: forward and backward 16.4 s -> 11.0 s a step; docs/MEASUREMENTS.md).

Only batches of more than :data:`MIN_ROWS` - 1 rows use it: at SFT's 2 rows the saving was within
the noise (2.7-2.9 s against 2.3-2.8 s a step), and keeping its arithmetic keeps the committed runs'
SFT answer for answer.

>>> import torch
>>> row_bounds(torch.tensor([[0, 1, 2, 0, 1, 0, 1, 2, 3]]))
[0, 3, 5, 9]
>>> row_bounds(torch.tensor([[0, 1, 2, 3]])) is None   # one row: nothing to split
True
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterator

NAME = "kgr_rows"
"""The attention implementation's name in transformers' registry (used only inside :func:`rows_apart`)."""

MIN_ROWS = 3
"""Packed batches with at least this many rows attend row by row."""


def row_bounds(position_ids) -> list[int] | None:
    """Where each row of a packed sequence starts, plus its end; None unless the batch is one
    flat sequence of several rows (position ids restarting at 0)."""
    if position_ids is None or position_ids.dim() != 2 or position_ids.shape[0] != 1:
        return None
    starts = (position_ids[0] == 0).nonzero().flatten().tolist()
    if len(starts) < 2 or starts[0] != 0:
        return None
    return starts + [int(position_ids.shape[1])]


def _rows_attention(module, query, key, value, attention_mask, *, kgr_row_bounds=None, **kwargs):
    """transformers' SDPA attention on each row's slice (causal), the outputs joined again."""
    import torch
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    if kgr_row_bounds is None:  # not a packed training batch: exactly what "sdpa" does
        return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)
    keep = {k: kwargs[k] for k in ("dropout", "scaling") if k in kwargs}
    outs = [sdpa_attention_forward(module, query[:, :, a:b], key[:, :, a:b], value[:, :, a:b], None,
                                   is_causal=True, **keep)[0]
            for a, b in zip(kgr_row_bounds[:-1], kgr_row_bounds[1:])]
    return torch.cat(outs, dim=1), None


def _register() -> None:
    from transformers import AttentionInterface

    if NAME not in AttentionInterface._global_mapping:
        AttentionInterface.register(NAME, _rows_attention)


@contextmanager
def rows_apart(model, forward: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Inside the block, a forward pass of ``model`` on ``forward`` (a collated batch) attends row
    by row when the batch packs :data:`MIN_ROWS` or more rows; yields the keyword arguments to
    call the model with. Elsewhere, and for every other batch, the model's attention is unchanged.

    A model whose attention is not transformers' "sdpa" (eager, a GPU kernel) is left as it is.
    """
    bounds = row_bounds(forward.get("position_ids"))
    config = getattr(getattr(model, "module", model), "config", None)
    if (bounds is None or len(bounds) - 1 < MIN_ROWS or config is None
            or getattr(config, "_attn_implementation", None) != "sdpa"):
        yield forward
        return
    _register()
    config._attn_implementation = NAME  # not in the mask registry: transformers builds no L x L mask
    try:
        yield {**forward, "kgr_row_bounds": bounds}
    finally:
        config._attn_implementation = "sdpa"
