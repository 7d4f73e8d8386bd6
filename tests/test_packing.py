"""Row-by-row attention in padding-free batches (library/train/packing.py): it runs on each row's
slice, gives the loss and gradients of the block-diagonal mask over the whole packed sequence,
is taken only where it pays and is safe, and leaves the model's attention as it was."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
import transformers.integrations.sdpa_attention as sdpa
from transformers import AttentionInterface

import library.train.packing as packing
from library.model.load import load_model
from library.train.packing import rows_apart
from library.train.finetune import completion_positions_loss


@pytest.fixture
def tiny():
    torch.manual_seed(0)
    model, tok = load_model("tiny")
    return model.train(), tok


def packed(lengths: list[int], seed: int = 0) -> dict:
    """A batch as TRL's padding-free collator makes it: one flat row, positions restarting at 0,
    the rows' boundaries in ``cu_seq_lens_q``; the first half of each row is prompt (no loss)."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(10, 2000, (1, sum(lengths)), generator=g)
    labels = ids.clone()
    bounds = [0]
    for n in lengths:
        labels[0, bounds[-1]:bounds[-1] + n // 2] = -100
        bounds.append(bounds[-1] + n)
    positions = torch.cat([torch.arange(n) for n in lengths]).unsqueeze(0)
    cu = torch.tensor(bounds, dtype=torch.int32)
    return {"input_ids": ids, "position_ids": positions, "labels": labels, "cu_seq_lens_q": cu, "cu_seq_lens_k": cu}


def forward_of(batch: dict) -> dict:
    return {k: v for k, v in batch.items() if k != "labels"}


def loss_and_grads(model, batch, *, min_rows: int, monkeypatch) -> tuple[torch.Tensor, list[torch.Tensor]]:
    monkeypatch.setattr(packing, "MIN_ROWS", min_rows)
    model.zero_grad(set_to_none=True)
    loss, _, _ = completion_positions_loss(model, dict(batch))
    loss.backward()
    return loss.detach(), [p.grad.clone() for p in model.parameters() if p.grad is not None]


def recorded_attention(monkeypatch) -> list[tuple[int, bool]]:
    """(query length, masked?) of every SDPA call from now on."""
    calls: list[tuple[int, bool]] = []
    real = sdpa.sdpa_attention_forward

    def spy(module, query, key, value, attention_mask, **kwargs):
        calls.append((query.shape[2], attention_mask is not None))
        return real(module, query, key, value, attention_mask, **kwargs)

    monkeypatch.setattr(sdpa, "sdpa_attention_forward", spy)  # what the row attention calls
    monkeypatch.setitem(AttentionInterface._global_mapping, "sdpa", spy)  # what the model's "sdpa" calls
    return calls


def test_each_row_is_attended_on_its_own_slice(tiny, monkeypatch):
    model, _ = tiny
    lengths = [9, 14, 7, 12, 10]
    calls = recorded_attention(monkeypatch)
    completion_positions_loss(model, packed(lengths))
    assert calls == [(n, False) for _ in range(model.config.num_hidden_layers) for n in lengths]


def test_rows_apart_gives_the_packed_loss_and_gradients(tiny, monkeypatch):
    model, _ = tiny
    batch = packed([9, 14, 7, 12, 10])
    rows_loss, rows_grads = loss_and_grads(model, batch, min_rows=3, monkeypatch=monkeypatch)
    mask_loss, mask_grads = loss_and_grads(model, batch, min_rows=10**9, monkeypatch=monkeypatch)
    assert rows_loss.item() == pytest.approx(mask_loss.item(), rel=1e-6)
    assert len(rows_grads) == len(mask_grads) > 0
    for a, b in zip(rows_grads, mask_grads):
        assert torch.allclose(a, b, rtol=1e-4, atol=1e-7)


def test_a_row_does_not_see_the_rows_before_it(tiny):
    """The last row's logits are the same whatever rows come before it in the packed sequence."""
    model, _ = tiny
    model.eval()
    a, b = packed([8, 11, 6], seed=1), packed([5, 9, 6], seed=2)
    b["input_ids"][0, -6:] = a["input_ids"][0, -6:]
    logits = []
    for batch in (a, b):
        with torch.no_grad(), rows_apart(model, batch):
            assert model.config._attn_implementation == packing.NAME
            logits.append(model(**forward_of(batch), use_cache=False).logits[0, -6:])
    assert torch.allclose(logits[0], logits[1], atol=1e-6)
    # without the boundaries, the same call would mix the rows: the masked path is what keeps them apart
    plain = model(input_ids=a["input_ids"], use_cache=False).logits[0, -6:]
    assert not torch.allclose(plain, logits[0], atol=1e-4)


def test_two_rows_keep_the_models_own_attention_and_the_loss_bit_for_bit(tiny, monkeypatch):
    """SFT's 2-row batches are computed exactly as before the change (the committed runs' arithmetic):
    the model's masked attention, and the loss TRL's cross-entropy gave."""
    model, _ = tiny
    batch = packed([12, 9])
    calls = recorded_attention(monkeypatch)
    ours, _, _ = completion_positions_loss(model, dict(batch))
    assert calls and all(masked and n == 21 for n, masked in calls)
    labels = batch["labels"]
    next_labels = F.pad(labels, (0, 1), value=-100)[:, 1:]
    scored = next_labels != -100
    logits = model(**forward_of(batch), use_cache=False, logits_to_keep=scored).logits.float()
    before = F.cross_entropy(logits, next_labels[scored], reduction="sum") / scored.sum()
    assert torch.equal(ours, before)


def test_attention_is_restored_after_the_pass_and_after_an_error(tiny):
    model, _ = tiny
    batch = packed([5, 6, 7])
    with rows_apart(model, batch):
        model(**forward_of(batch), use_cache=False)
    assert model.config._attn_implementation == "sdpa"
    with pytest.raises(RuntimeError, match="a failed step"), rows_apart(model, batch):
        raise RuntimeError("a failed step")
    assert model.config._attn_implementation == "sdpa"


def test_the_row_attention_refuses_a_call_without_row_boundaries(tiny):
    """Under its name transformers builds no mask, so attending without the boundaries would be unmasked."""
    model, _ = tiny
    batch = packed([5, 6, 7])
    forward = {k: v for k, v in forward_of(batch).items() if not k.startswith("cu_seq_lens")}
    with rows_apart(model, batch), pytest.raises(RuntimeError, match="cu_seq_lens_q"):
        model(**forward, use_cache=False)


@pytest.mark.parametrize("setup", ["eager", "checkpointing", "sliding_window", "padded"])
def test_where_it_would_not_be_safe_the_attention_is_left_alone(tiny, setup):
    model, _ = tiny
    batch = packed([5, 6, 7])
    if setup == "eager":
        model.config._attn_implementation = "eager"
    elif setup == "checkpointing":  # the backward pass would recompute attention after the block
        model.gradient_checkpointing_enable()
    elif setup == "sliding_window":  # only a mask applies a sliding window
        model.config.sliding_window = 4
    else:  # a padded batch of rows (no boundaries) attends row by row already
        batch = {"input_ids": torch.ones((3, 6), dtype=torch.long)}
    before = model.config._attn_implementation
    with rows_apart(model, batch):
        assert model.config._attn_implementation == before
