"""The prompt as constant context (library/train/prompt_context.py): the loss is the one-pass loss,
the gradient is the one transformers' own key-value cache gives when each row's prompt is prefilled
without autograd, each row sees only its own prompt, and the model's attention is restored."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from library.model.generate import _cache_keyword
from library.model.load import load_model
from library.train import prompt_context
from library.train.sft import completion_positions_loss


@pytest.fixture
def tiny():
    torch.manual_seed(0)
    model, tok = load_model("tiny")
    return model.train(), tok


def packed(rows: list[tuple[int, int]], seed: int = 0) -> dict:
    """TRL's padding-free collation of rows given as (prompt length, completion length)."""
    g = torch.Generator().manual_seed(seed)
    lengths = [p + c for p, c in rows]
    ids = torch.randint(10, 2000, (1, sum(lengths)), generator=g)
    labels = ids.clone()
    bounds = [0]
    for (p, _), n in zip(rows, lengths):
        labels[0, bounds[-1]:bounds[-1] + p] = -100
        bounds.append(bounds[-1] + n)
    positions = torch.cat([torch.arange(n) for n in lengths]).unsqueeze(0)
    cu = torch.tensor(bounds, dtype=torch.int32)
    return {"input_ids": ids, "position_ids": positions, "labels": labels, "cu_seq_lens_q": cu, "cu_seq_lens_k": cu}


def grads(model) -> list[torch.Tensor]:
    return [p.grad.clone() if p.grad is not None else torch.zeros_like(p) for p in model.parameters()]


def loss_and_grads(model, batch, prompt_gradient: bool):
    model.zero_grad(set_to_none=True)
    loss, _, _ = completion_positions_loss(model, dict(batch), prompt_gradient=prompt_gradient)
    loss.backward()
    return loss.detach(), grads(model)


def cache_reference(model, rows: list[tuple[int, int]], batch) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """Each row on its own through transformers' KV cache: the prompt (all but its last token)
    prefilled under no_grad, the rest run with autograd on top of that cache."""
    model.zero_grad(set_to_none=True)
    ids, bounds = batch["input_ids"][0], batch["cu_seq_lens_q"].tolist()
    kw = _cache_keyword(type(model))
    total, n_scored = 0.0, sum(c for _, c in rows)
    for (p, _), a, b in zip(rows, bounds[:-1], bounds[1:]):
        row = ids[a:b].unsqueeze(0)
        with torch.no_grad():
            cache = model(input_ids=row[:, :p - 1], use_cache=True).past_key_values
        logits = model(input_ids=row[:, p - 1:-1], position_ids=torch.arange(p - 1, b - a - 1).unsqueeze(0),
                       use_cache=True, **{kw: cache}).logits[0]
        total = total + F.cross_entropy(logits.float(), row[0, p:], reduction="sum")
    loss = total / n_scored
    loss.backward()
    return loss.detach(), grads(model)


ROWS = [(7, 5), (11, 4), (5, 9)]


def test_the_loss_is_the_one_pass_loss(tiny):
    model, _ = tiny
    batch = packed(ROWS)
    one_pass, _ = loss_and_grads(model, batch, prompt_gradient=True)
    context, _ = loss_and_grads(model, batch, prompt_gradient=False)
    assert context.item() == pytest.approx(one_pass.item(), rel=1e-5)


def test_the_gradient_is_the_cached_prompts_gradient_and_not_the_one_pass_gradient(tiny):
    model, _ = tiny
    batch = packed(ROWS)
    _, one_pass = loss_and_grads(model, batch, prompt_gradient=True)
    loss, context = loss_and_grads(model, batch, prompt_gradient=False)
    ref_loss, reference = cache_reference(model, ROWS, batch)
    assert loss.item() == pytest.approx(ref_loss.item(), rel=1e-5)
    for got, want in zip(context, reference):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-6)
    # the prompt's keys and values get no gradient, so the gradients are not the one-pass ones
    assert any(not torch.allclose(a, b, rtol=1e-3, atol=1e-5) for a, b in zip(context, one_pass))


def test_a_row_sees_only_its_own_prompt(tiny):
    model, _ = tiny
    batch = packed(ROWS)
    other = dict(batch)
    ids = batch["input_ids"].clone()
    ids[0, :ROWS[0][0] - 1] = torch.randint(10, 2000, (ROWS[0][0] - 1,), generator=torch.Generator().manual_seed(9))
    other["input_ids"] = ids  # the first row's prompt changes, the later rows do not
    scored = F.pad(batch["labels"], (0, 1), value=-100)[:, 1:] != -100
    model.eval()
    with torch.no_grad():
        a = prompt_context.prompt_as_context(model, {k: v for k, v in batch.items() if k != "labels"}, scored)
        b = prompt_context.prompt_as_context(model, {k: v for k, v in other.items() if k != "labels"}, scored)
    first = ROWS[0][1]
    assert not torch.allclose(a[:first], b[:first])
    torch.testing.assert_close(a[first:], b[first:])


def test_the_attention_is_restored_also_after_an_error(tiny, monkeypatch):
    model, _ = tiny
    batch = packed(ROWS)

    def broken(*args, **kwargs):
        raise RuntimeError("boom")

    from transformers import AttentionInterface
    monkeypatch.setitem(AttentionInterface._global_mapping, prompt_context.NAME, broken)
    with pytest.raises(RuntimeError, match="boom"):
        completion_positions_loss(model, dict(batch), prompt_gradient=False)
    assert model.config._attn_implementation == "sdpa"
    assert prompt_context._active is None


def test_batches_it_cannot_split_take_the_one_pass(tiny):
    model, _ = tiny
    batch = packed(ROWS)
    scored = F.pad(batch["labels"], (0, 1), value=-100)[:, 1:] != -100
    no_bounds = {k: v for k, v in batch.items() if k not in ("labels", "cu_seq_lens_q")}
    assert prompt_context.context_split(no_bounds, scored) is None
    scored_from_start = scored.clone()
    scored_from_start[0, 0] = True  # a row with no prompt before its first scored position
    assert prompt_context.context_split({k: v for k, v in batch.items() if k != "labels"}, scored_from_start) is None
    model.activation_checkpointing_enable()
    assert not prompt_context.usable(model, batch)


def test_the_attention_refuses_to_run_outside_the_passes(tiny):
    model, _ = tiny
    with pytest.raises(RuntimeError, match="only inside"):
        prompt_context._attention(model.model.layers[0].self_attn, *(torch.zeros(1, 1, 2, 4),) * 3, None)
