"""library.model.generate: the fast path must give the same answers as model.generate."""

from __future__ import annotations

import pytest
import torch

from library.model.generate import GenerationStats, _nucleus, flatten, generate, generate_completions
from library.model.load import load_model
from library.model.chat import format_prompt

pytestmark = pytest.mark.train

PROMPTS = [
    "Start at TLS handshake error. It is caused by something, which is fixed by what?",
    "Hi",
    "Start at connection refused. It is caused by something, which leads to something, which is caused by what? "
    "A) service down B) clock skew C) NTP drift D) openssl",
    "Which tool?",
    "x y z",
]


@pytest.fixture(scope="module")
def tiny():
    torch.set_num_threads(2)
    return load_model("tiny")


def _plain_greedy(model, tok, texts, max_new_tokens):
    enc = tok([format_prompt(tok, t) for t in texts], return_tensors="pt", padding=True)
    with torch.no_grad():
        out = model.generate(**enc, max_new_tokens=max_new_tokens, do_sample=False)
    return [tok.decode(row[enc["input_ids"].shape[1]:], skip_special_tokens=True).strip() for row in out]


def test_greedy_equals_plain_generate(tiny):
    model, tok = tiny
    ours = generate(model, tok, PROMPTS, max_new_tokens=12, batch_size=2, progress=False)
    assert [g[0] for g in ours] == _plain_greedy(model, tok, PROMPTS, 12)


def test_the_cache_goes_under_the_forwards_own_keyword_without_a_deprecation_warning(tiny):
    """transformers 5.2x renamed ``past_key_values`` to ``cache`` and warns that the old name goes
    away in 5.40; the loop must use whichever name the installed forward declares."""
    import inspect
    import warnings

    model, tok = tiny
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*past_key_values.*")
        out = generate(model, tok, PROMPTS[:2], max_new_tokens=3, batch_size=2, progress=False)
    assert len(out) == 2
    declared = inspect.signature(type(model).forward).parameters
    assert ("cache" in declared) or ("past_key_values" in declared)


def test_order_restored_and_independent_of_batching(tiny):
    model, tok = tiny
    one = generate(model, tok, PROMPTS, max_new_tokens=8, batch_size=1, progress=False)
    many = generate(model, tok, PROMPTS, max_new_tokens=8, batch_size=4, progress=False)
    assert one == many
    # each answer belongs to its own prompt, whatever the length sorting did
    for text, answer in zip(PROMPTS, one):
        assert generate(model, tok, [text], max_new_tokens=8, progress=False) == [answer]


def test_sampling_is_seeded_and_respects_num_return_sequences(tiny):
    model, tok = tiny
    kw = dict(max_new_tokens=6, do_sample=True, num_return_sequences=3, batch_size=6, progress=False)
    a = generate(model, tok, PROMPTS[:3], seed=1, **kw)
    b = generate(model, tok, PROMPTS[:3], seed=1, **kw)
    c = generate(model, tok, PROMPTS[:3], seed=2, **kw)
    assert a == b
    assert a != c
    assert [len(g) for g in a] == [3, 3, 3]
    assert len(set(a[0])) > 1  # samples within a group differ (the random model is near-uniform)
    assert len(flatten(a)) == 9


def test_duplicate_prompts_share_a_prefill_and_keep_positions(tiny):
    model, tok = tiny
    stats = GenerationStats()
    out = generate(model, tok, ["Hi", "Which tool?", "Hi"], max_new_tokens=5, progress=False, stats=stats)
    assert out[0] == out[2] and len(out) == 3
    prompt_len = {t: len(tok(format_prompt(tok, t), add_special_tokens=False)["input_ids"]) for t in ("Hi", "Which tool?")}
    assert stats.prefill_tokens == sum(prompt_len.values())
    assert stats.sequences == 3 and stats.new_tokens > 0


@pytest.mark.parametrize("texts", [PROMPTS, ["Which tool A?", "Which tool B?", "Which tool C?"]],
                         ids=["padded", "equal-length"])
def test_shared_prompt_prefix_runs_once_and_changes_nothing(tiny, monkeypatch, texts):
    import library.model.generate as generation

    model, tok = tiny
    ids = [tok(format_prompt(tok, t), add_special_tokens=False)["input_ids"] for t in texts]
    assert generation._shared_prefix_length(ids) >= generation.MIN_SHARED_PREFIX  # the chat template's turn
    shared = generate(model, tok, texts, max_new_tokens=10, batch_size=8, progress=False)
    monkeypatch.setattr(generation, "MIN_SHARED_PREFIX", 10**9)
    assert generation._shared_prefix_length(ids) == 0
    alone = generate(model, tok, texts, max_new_tokens=10, batch_size=8, progress=False)
    assert shared == alone
    assert [g[0] for g in shared] == _plain_greedy(model, tok, texts, 10)


def test_prefill_with_a_shared_prefix_gives_each_prompts_own_next_token_logits(tiny):
    from library.model.generate import _prefill, _shared_prefix_length

    model, tok = tiny
    ids = [tok(format_prompt(tok, t), add_special_tokens=False)["input_ids"] for t in PROMPTS]
    assert _shared_prefix_length(ids) > 0
    with torch.inference_mode():
        logits, cache, mask, positions, padded = _prefill(model, ids, tok.pad_token_id or 0)
        for row, prompt in enumerate(ids):
            alone = model(input_ids=torch.tensor([prompt])).logits[0, -1]
            assert torch.allclose(logits[row], alone, atol=1e-4), row
    assert padded and mask.shape == (len(ids), max(map(len, ids)))
    assert positions[:, -1].tolist() == [len(p) - 1 for p in ids]


def test_completion_token_ids_stop_at_eos(tiny):
    model, tok = tiny
    eos = tok.eos_token_id
    groups = generate_completions(model, tok, PROMPTS[:2], max_new_tokens=5, progress=False)
    for (c,) in groups:
        assert 1 <= len(c.token_ids) <= 5
        assert c.finished == (c.token_ids[-1] == eos)
        assert eos not in c.token_ids[:-1]
        assert c.text == tok.decode(c.token_ids, skip_special_tokens=True).strip()
    # Force an immediate stop: a hook makes eos the argmax of every step's logits.
    handle = model.lm_head.register_forward_hook(lambda m, i, o: o.index_fill(-1, torch.tensor([eos]), 1e4))
    try:
        (c,), = generate_completions(model, tok, ["Hi"], max_new_tokens=5, progress=False)
    finally:
        handle.remove()
    assert c.token_ids == [eos] and c.finished and c.text == ""


def test_nucleus_matches_transformers_top_p():
    """The same nucleus and the same probabilities as transformers' warpers on each path: the
    top-256 prefilter (peaked rows), the top-4,096 fallback (a moderately flat row) and the full
    sort (a flat row), where the candidates are cut to the widest row's nucleus."""
    from transformers.generation.logits_process import TemperatureLogitsWarper, TopPLogitsWarper

    from library.model.generate import TOPK_FALLBACK, TOPK_PREFILTER

    g = torch.Generator().manual_seed(0)
    peaked = torch.randn(3, 50000, generator=g) * 4
    moderate = torch.randn(1, 50000, generator=g) * 2.2
    flat = torch.randn(1, 50000, generator=g) * 0.1
    widths = set()
    for logits in (peaked, torch.cat([peaked, moderate]), torch.cat([peaked, flat])):
        for temperature, top_p in ((0.6, 0.9), (1.0, 0.5), (0.6, 0.99)):
            probs, idx = _nucleus(logits, temperature, top_p)
            widths.add(probs.shape[-1])
            warped = TopPLogitsWarper(top_p)(None, TemperatureLogitsWarper(temperature)(None, logits.clone()))
            expected = torch.softmax(warped, dim=-1)
            for row in range(logits.shape[0]):
                kept = probs[row] > 0
                assert set(idx[row][kept].tolist()) == set(torch.nonzero(expected[row]).flatten().tolist())
                ours = probs[row][kept] / probs[row][kept].sum()
                assert torch.allclose(ours, expected[row][idx[row][kept]], atol=1e-5)
    # every path ran: the prefilter, the 4,096 fallback (cut to its nucleus) and the full sort
    assert TOPK_PREFILTER in widths
    assert any(TOPK_PREFILTER < w <= TOPK_FALLBACK for w in widths) and any(w > TOPK_FALLBACK for w in widths)


def test_lora_model_generates_with_merged_copy_and_stays_untouched(tiny):
    from peft import LoraConfig, get_peft_model

    model, tok = load_model("tiny")
    peft_model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "up_proj"],
                                                  init_lora_weights=False))
    peft_model.eval()
    before = {k: v.clone() for k, v in peft_model.state_dict().items()}
    merged = generate(peft_model, tok, PROMPTS[:3], max_new_tokens=8, progress=False)
    unmerged = generate(peft_model, tok, PROMPTS[:3], max_new_tokens=8, progress=False, merge_lora=False)
    assert merged == unmerged == [[t] for t in _plain_greedy(peft_model, tok, PROMPTS[:3], 8)]
    after = peft_model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)
    base_only = generate(tiny[0], tok, PROMPTS[:3], max_new_tokens=8, progress=False)
    assert base_only != merged  # the adapter (random, non-zero B) changes the output


def test_rejects_greedy_groups(tiny):
    model, tok = tiny
    with pytest.raises(ValueError):
        generate(model, tok, ["Hi"], num_return_sequences=2, progress=False)


def test_bfloat16_generates_from_a_bf16_copy_equal_to_plain_bf16_generate(tiny):
    """precision="bfloat16": the loop runs on a bf16 copy (the fp32 weights stay untouched) and
    its greedy answers equal ``model.generate`` on a bf16 copy of the same weights."""
    import copy

    from library.model.generate import generation_model
    from library.model.precision import using_precision

    model, tok = tiny
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with generation_model(model, precision="bfloat16") as gen:
        assert gen is not model and next(gen.parameters()).dtype == torch.bfloat16
    with generation_model(model, precision="float32") as gen:
        assert gen is model  # nothing to merge or convert: no copy
    ours = generate(model, tok, PROMPTS, max_new_tokens=10, batch_size=2, progress=False, precision="bfloat16")
    with using_precision("bfloat16"):  # the process-wide setting reaches the same path
        assert generate(model, tok, PROMPTS, max_new_tokens=10, batch_size=2, progress=False) == ours
    assert [g[0] for g in ours] == _plain_greedy(copy.deepcopy(model).to(torch.bfloat16), tok, PROMPTS, 10)
    assert next(model.parameters()).dtype == torch.float32
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_sampled_generation_runs_at_the_sampling_precision(tiny, monkeypatch):
    """RL's draws (do_sample) run at the process's sampling precision, greedy answers at the
    generation precision; an explicit ``precision`` wins; "generation" follows the answers'."""
    import library.model.generate as g
    from library.model.precision import using_precision

    model, tok = tiny
    seen = []
    real = g.generation_model

    def spy(model, merge_lora=True, precision=None):
        seen.append(precision)
        return real(model, merge_lora, precision)

    monkeypatch.setattr(g, "generation_model", spy)
    kwargs = dict(max_new_tokens=3, batch_size=4, progress=False)
    with using_precision("float32", generation="bfloat16", sampling="float32"):
        generate(model, tok, PROMPTS, do_sample=True, num_return_sequences=2, seed=1, **kwargs)
        generate(model, tok, PROMPTS, **kwargs)
        generate(model, tok, PROMPTS, do_sample=True, precision="bfloat16", **kwargs)
    with using_precision("float32", generation="bfloat16", sampling="generation"):
        generate(model, tok, PROMPTS, do_sample=True, seed=1, **kwargs)
    assert seen == ["float32", None, "bfloat16", "bfloat16"]  # None: the generation precision


def test_generation_copy_runs_its_own_weights_when_a_trainer_patched_forward():
    """Trainers patch ``model.forward`` on the instance with a closure over the original model
    (TRL's fused LM head); a deep copy must not call back into the original: the bf16 copy
    computes in bf16, and a LoRA model left in training mode (dropout) generates as in eval mode."""
    from peft import LoraConfig, get_peft_model
    from trl.trainer.utils import add_fused_lm_head

    from library.model.generate import generation_model

    model, tok = load_model("tiny")
    add_fused_lm_head(model)  # what TRL's SFTTrainer does to the model it trains
    assert "forward" in model.__dict__
    ids = tok(["Start at TLS handshake error."], return_tensors="pt")["input_ids"]
    with generation_model(model, precision="bfloat16") as gen, torch.no_grad():
        assert gen(input_ids=ids).logits.dtype == torch.bfloat16  # the copy's weights, not the original's

    peft_model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, lora_dropout=0.5, init_lora_weights=False,
                                                  target_modules=["q_proj", "v_proj", "up_proj"]))
    peft_model.train()  # as a trainer leaves it
    kw = dict(max_new_tokens=8, progress=False, precision="float32")
    first = generate(peft_model, tok, PROMPTS[:3], **kw)
    assert generate(peft_model, tok, PROMPTS[:3], **kw) == first  # no dropout draws
    peft_model.eval()
    assert generate(peft_model, tok, PROMPTS[:3], **kw) == first
    assert peft_model.training is False
