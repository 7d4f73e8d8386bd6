"""Row-by-row attention in padding-free batches (library/train/packing.py): the same loss and
gradients as the block-diagonal mask over the whole packed sequence, taken only where it pays,
and the model's attention left as it was afterwards."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import library.train.packing as packing
from library.model.load import load_model
from library.train.packing import row_bounds, rows_apart
from library.train.sft import completion_positions_loss


@pytest.fixture
def tiny():
    torch.manual_seed(0)
    model, tok = load_model("tiny")
    return model.train(), tok


def packed(lengths: list[int], seed: int = 0) -> dict:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(10, 2000, (1, sum(lengths)), generator=g)
    labels = ids.clone()
    start = 0
    for n in lengths:  # the first half of each row is its prompt: no loss there
        labels[0, start:start + n // 2] = -100
        start += n
    positions = torch.cat([torch.arange(n) for n in lengths]).unsqueeze(0)
    return {"input_ids": ids, "position_ids": positions, "labels": labels}


def loss_and_grads(model, batch, *, min_rows: int, monkeypatch) -> tuple[torch.Tensor, list[torch.Tensor]]:
    monkeypatch.setattr(packing, "MIN_ROWS", min_rows)
    model.zero_grad(set_to_none=True)
    loss, _, _ = completion_positions_loss(model, dict(batch))
    loss.backward()
    return loss.detach(), [p.grad.clone() for p in model.parameters() if p.grad is not None]


def test_row_bounds_reads_where_positions_restart():
    assert row_bounds(torch.tensor([[0, 1, 2, 0, 1, 0, 1, 2, 3]])) == [0, 3, 5, 9]
    assert row_bounds(torch.tensor([[0, 1, 2, 3]])) is None          # one row
    assert row_bounds(torch.tensor([[0, 1, 0, 1], [0, 1, 0, 1]])) is None  # padded batches attend per row already
    assert row_bounds(torch.tensor([[3, 4, 0, 1]])) is None          # not a batch of whole rows
    assert row_bounds(None) is None


def test_rows_apart_gives_the_packed_loss_and_gradients(tiny, monkeypatch):
    model, _ = tiny
    batch = packed([9, 14, 7, 12, 10])
    rows_loss, rows_grads = loss_and_grads(model, batch, min_rows=3, monkeypatch=monkeypatch)
    mask_loss, mask_grads = loss_and_grads(model, batch, min_rows=10**9, monkeypatch=monkeypatch)
    assert rows_loss.item() == pytest.approx(mask_loss.item(), rel=1e-6)
    assert len(rows_grads) == len(mask_grads) > 0
    for a, b in zip(rows_grads, mask_grads):
        assert torch.allclose(a, b, rtol=1e-4, atol=1e-7)


def test_each_row_sees_only_itself(tiny):
    """A row's logits do not change when the rows packed beside it do (no attention across rows)."""
    model, _ = tiny
    model.eval()
    a, b = packed([8, 11, 6], seed=1), packed([8, 5, 9], seed=2)
    b["input_ids"][0, :8] = a["input_ids"][0, :8]  # the same first row, other neighbours
    logits = []
    for batch in (a, b):
        forward = {k: v for k, v in batch.items() if k != "labels"}
        with torch.no_grad(), rows_apart(model, forward) as forward:
            assert "kgr_row_bounds" in forward
            logits.append(model(**forward, use_cache=False).logits[0, :8])
    assert torch.allclose(logits[0], logits[1], atol=1e-6)


def test_two_rows_keep_the_models_own_attention_bit_for_bit(tiny, monkeypatch):
    """SFT's 2-row batches are computed exactly as before (the committed runs' arithmetic)."""
    model, _ = tiny
    batch = packed([12, 9])
    with rows_apart(model, {k: v for k, v in batch.items() if k != "labels"}) as forward:
        assert "kgr_row_bounds" not in forward and model.config._attn_implementation == "sdpa"
    ours, ours_grads = loss_and_grads(model, batch, min_rows=3, monkeypatch=monkeypatch)
    model.zero_grad(set_to_none=True)
    labels = batch["labels"]
    logits = model(input_ids=batch["input_ids"], position_ids=batch["position_ids"], use_cache=False).logits
    plain = F.cross_entropy(logits[0, :-1], labels[0, 1:], ignore_index=-100, reduction="sum") / (labels[0, 1:] != -100).sum()
    assert ours.item() == pytest.approx(plain.item(), rel=1e-6)


def test_attention_is_restored_after_the_pass_and_after_an_error(tiny):
    model, _ = tiny
    forward = {k: v for k, v in packed([5, 6, 7]).items() if k != "labels"}
    with rows_apart(model, forward) as inner:
        assert model.config._attn_implementation == packing.NAME
        model(**inner, use_cache=False)
    assert model.config._attn_implementation == "sdpa"
    with pytest.raises(RuntimeError), rows_apart(model, forward):
        raise RuntimeError("a failed step")
    assert model.config._attn_implementation == "sdpa"


def test_other_attention_implementations_are_left_alone(tiny):
    model, _ = tiny
    model.config._attn_implementation = "eager"
    forward = {k: v for k, v in packed([5, 6, 7]).items() if k != "labels"}
    with rows_apart(model, forward) as inner:
        assert inner is forward and model.config._attn_implementation == "eager"
