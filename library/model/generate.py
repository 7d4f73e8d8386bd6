"""Batched generation on CPU, faster than ``model.generate`` for our workloads.

What makes it faster (measured in ``benchmarks/generation.py``):

- **Prompt de-duplication for groups.** RSFT/GRPO draw ``num_return_sequences`` samples per
  prompt. ``model.generate`` runs the prompt through the model once per sample; here each unique
  prompt is prefilled once and its KV cache is copied to the group. Prompts (~130 tokens) are
  longer than completions (<=64), so prefill is most of the compute this saves.
- **A preallocated KV cache.** transformers' ``DynamicCache`` grows by ``torch.cat`` at every
  step, copying the whole cache of all 30 layers per token; :class:`_PreallocLayer` writes
  the new key/value into a buffer sized prompt + ``max_new_tokens`` and attends over a view.
- **Dropping finished rows.** When a quarter of the rows in a batch have emitted ``<|im_end|>``
  they are removed from the batch (cache, mask, positions), so short answers stop costing
  compute; the loop ends as soon as every row is done.
- **Exact top-p without a full-vocabulary sort.** Sorting 49,152 logits per row per step is the
  most expensive part of HF's sampling; we take the top 256 first, then the top 4,096 where a
  row's top-256 mass is below ``top_p``, and sort the whole vocabulary only when that is not
  enough either, which yields the same nucleus; after a fallback the draw runs over the
  nucleus only, not over 49k candidates a row (the base model's flat distributions took the
  full sort on 34 of 64 steps: sampled batch 32 went from 72-90 to 123-124 tok/s).
- **A batch's shared prompt prefix is prefilled once** (:func:`_shared_prefix_length`): the chat
  template's system turn, 22 of ~122 tokens of an eval prompt; its cache is copied to every row
  and the rest of each prompt is left-padded after it (fp32 prefill of 32 eval prompts 3.39 ->
  2.96 s).
- **The prefill's LM head runs on a gathered last position**, not on a strided view of it: on
  the view PyTorch broadcast the 49k x 576 head into one copy per row (2.6 s and 1.8 GB a bf16
  batch of 32, on an AMX Xeon; see :func:`_prefill`).
- **Length-sorted batching** (less left padding), ``torch.inference_mode``, only the last
  position's logits (``logits_to_keep``).
- **LoRA merged for generation.** A peft model is merged into a copy of its weights
  (``merge_and_unload`` on a deep copy, ~0.5 s) so each step runs 7 fewer small matmul chains
  per layer; the trained model is not touched (no merge/unmerge rounding drift).

Greedy output equals ``model.generate(do_sample=False)`` (tested on the tiny model). Sampling
follows the same distribution as HF (temperature, then top-p, then multinomial) but draws from
its own ``torch.Generator`` seeded per batch, so results are reproducible under ``seed`` for the
same inputs and ``batch_size``, but are not the same draws as ``model.generate``.

>>> from library.model.load import load_model
>>> model, tok = load_model("tiny")
>>> outs = generate(model, tok, ["Hello", "Hi there"], max_new_tokens=4, progress=False)
>>> len(outs), [len(o) for o in outs]
(2, [1, 1])
"""

from __future__ import annotations

import contextlib
import copy
import functools
import inspect
import time
from dataclasses import dataclass, field
from typing import Iterator, Sequence

import torch
from tqdm.auto import tqdm
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

from library.model.chat import format_prompt
from library.model.precision import generation_precision, sampling_precision

#: Candidates kept before the exact top-p cut: first the top 256; where some row's top-256 mass
#: is below top_p (a flat distribution, e.g. the base model), the top 4,096 (11 ms for 32 rows
#: against 58 ms for a full sort here); only then the whole vocabulary, sorted. These only
#: affect speed, never the distribution.
TOPK_PREFILTER = 256
TOPK_FALLBACK = 4096


@dataclass
class Completion:
    """One generated sample: decoded ``text`` (special tokens removed) and its token ids.

    ``token_ids`` includes the final eos when the model emitted one (``finished``); that is
    what a policy-gradient loss should score. ``prompt_ids`` are the prompt's tokens (no padding).
    """

    text: str
    token_ids: list[int]
    finished: bool
    prompt_ids: list[int] = field(default_factory=list)


@dataclass
class GenerationStats:
    """Counters of one :func:`generate_completions` call (for benchmarks and logs)."""

    prompts: int = 0
    sequences: int = 0
    new_tokens: int = 0          # tokens actually generated (eos included, padding not)
    prefill_tokens: int = 0      # prompt tokens run through the model (after de-duplication)
    seconds: float = 0.0
    prefill_seconds: float = 0.0  # of ``seconds``: the prompts' forward passes
    decode_steps: int = 0        # one-token forward passes after the prefill (a batch's rows at once)
    decode_row_steps: int = 0    # rows those passes computed (finished rows are dropped, see _generate_batch)
    decode_seconds: float = 0.0  # of ``seconds``: the decoding loops

    @property
    def tokens_per_second(self) -> float:
        return self.new_tokens / self.seconds if self.seconds > 0 else 0.0


class _PreallocLayer(DynamicLayer):
    """A KV-cache layer over a preallocated buffer: in-place writes instead of ``torch.cat``."""

    def __init__(self, keys: torch.Tensor, values: torch.Tensor, length: int):
        super().__init__()
        self.kbuf, self.vbuf, self.n = keys, values, length
        self.dtype, self.device = keys.dtype, keys.device
        self.is_initialized = True
        self._views()

    def _views(self) -> None:
        self.keys = self.kbuf[:, :, : self.n]
        self.values = self.vbuf[:, :, : self.n]

    def update(self, key_states, value_states, *args, **kwargs):
        step = key_states.shape[-2]
        if self.n + step > self.kbuf.shape[2]:
            raise RuntimeError("preallocated KV cache is full (max_new_tokens exceeded)")
        self.kbuf[:, :, self.n : self.n + step] = key_states
        self.vbuf[:, :, self.n : self.n + step] = value_states
        self.n += step
        self._views()
        return self.keys, self.values

    def get_seq_length(self) -> int:
        return self.n

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        self.kbuf = self.kbuf.index_select(0, indices)
        self.vbuf = self.vbuf.index_select(0, indices)
        self._views()


def _expand_cache(cache: DynamicCache, repeats: int, extra: int) -> DynamicCache:
    """A preallocated cache holding ``cache``'s prefix, each row repeated ``repeats`` times."""
    out = DynamicCache()
    layers = []
    for layer in cache.layers:
        k, v = layer.keys, layer.values
        b, h, t, d = k.shape
        kbuf = k.new_empty(b * repeats, h, t + extra, d)
        vbuf = v.new_empty(b * repeats, h, t + extra, d)
        kbuf[:, :, :t] = k.repeat_interleave(repeats, dim=0) if repeats > 1 else k
        vbuf[:, :, :t] = v.repeat_interleave(repeats, dim=0) if repeats > 1 else v
        layers.append(_PreallocLayer(kbuf, vbuf, t))
    out.layers = layers
    return out


def _nucleus(logits: torch.Tensor, temperature: float, top_p: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Temperature + exact nucleus (top-p): unnormalised kept probabilities and their token ids.

    Keeps, in descending probability order, every token whose preceding cumulative mass is
    below ``top_p`` (the smallest set reaching ``top_p``, at least one token) - the same set as
    transformers' ``TopPLogitsWarper``. Dropped candidates get probability 0.
    """
    logits = logits.float() / max(temperature, 1e-5)
    logprobs = torch.log_softmax(logits, dim=-1)
    vocab = logits.shape[-1]
    probs = idx = None
    if top_p < 1.0:
        for k in (TOPK_PREFILTER, TOPK_FALLBACK):
            top_lp, top_idx = torch.topk(logprobs, min(k, vocab), dim=-1)
            if bool((top_lp.exp().sum(-1) >= top_p).all()):
                probs, idx = top_lp.exp(), top_idx
                break
            if k >= vocab:
                break
    fallback = probs is None or probs.shape[-1] > TOPK_PREFILTER
    if probs is None:  # the flattest distributions (or top_p == 1): the whole vocabulary, sorted
        probs, idx = torch.sort(logprobs.exp(), dim=-1, descending=True)
    if top_p < 1.0:
        before = probs.cumsum(-1) - probs
        probs = torch.where(before < top_p, probs, torch.zeros_like(probs))
        if fallback:
            # Each row keeps a prefix of its sorted candidates: cut the columns no row keeps, so
            # the draw costs the nucleus, not 49k exponentials a row (the top-256 case is left
            # as it was, so its draws under a seed do not change).
            width = max(1, int((probs > 0).sum(-1).max()))
            probs, idx = probs[:, :width], idx[:, :width]
    return probs, idx


def _sample(logits: torch.Tensor, temperature: float, top_p: float, generator: torch.Generator) -> torch.Tensor:
    """One token per row from the nucleus distribution, drawn with ``generator``."""
    probs, idx = _nucleus(logits, temperature, top_p)
    choice = torch.multinomial(probs, 1, generator=generator)
    return idx.gather(-1, choice).squeeze(-1)


@contextlib.contextmanager
def generation_model(model, merge_lora: bool = True, precision: str | None = None) -> Iterator[torch.nn.Module]:
    """The model to generate with: a copy when LoRA must be merged or the compute precision
    differs from the weights' dtype, else the model itself.

    ``precision`` defaults to the process's :func:`library.model.precision.generation_precision`. With
    bfloat16 (AMX CPUs, bf16 GPUs, CPUs with fast AVX512-BF16) the copy's weights are bf16: on
    an AMX CPU prefill runs 3.7x and whole generations ~2.3x faster than fp32
    (benchmarks/generation.py), while greedy answers may differ from fp32's in a few cases
    (research/sweeps/precision_agreement.py measures how many).
    The copy is made per call so training weights are never modified; it is freed on exit.
    """
    dtype = torch.bfloat16 if (precision or generation_precision()) == "bfloat16" else torch.float32
    is_peft = hasattr(model, "merge_and_unload") and hasattr(model, "peft_config")
    merge = merge_lora and is_peft
    if not merge and next(model.parameters()).dtype == dtype:
        was_training = model.training
        model.eval()  # no dropout while generating (a trainer leaves its model in training mode)
        try:
            yield model
        finally:
            model.train(was_training)
        return
    if merge:  # merge in the weights' own precision, then convert
        copied = copy.deepcopy(model).merge_and_unload()
    else:  # convert while copying: no full-precision copy first (2.4x faster for 135M, here)
        memo = {id(p): torch.nn.Parameter(p.detach().to(dtype), requires_grad=False) for p in model.parameters()}
        copied = copy.deepcopy(model, memo)
    copied = _own_forward(copied).to(dtype).eval()
    try:
        yield copied
    finally:
        del copied


def _own_forward(model: torch.nn.Module) -> torch.nn.Module:
    """Drop instance-level ``forward`` patches from a deep copy, so the copy runs its class's forward.

    Why: trainers patch ``model.forward`` on the instance (TRL's fused LM head, accelerate's
    autocast wrapper), and the patch's closure holds the *original* model's bound forward.
    ``copy.deepcopy`` does not copy functions, so a copy keeps calling the original - its fp32
    weights, unmerged LoRA layers and training-mode dropout - while looking like the copy
    (measured: a bf16 copy of a trained model generated at fp32 speed, 2.3x slower than a
    fresh one). Our loop needs only the plain causal-LM forward.
    """
    for module in model.modules():
        module.__dict__.pop("forward", None)
        module.__dict__.pop("_original_forward", None)
    return model


def _eos_ids(model, tokenizer) -> list[int]:
    ids = {tokenizer.eos_token_id}
    gen_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    if isinstance(gen_eos, int):
        ids.add(gen_eos)
    elif gen_eos:
        ids.update(gen_eos)
    return sorted(i for i in ids if i is not None)


@functools.lru_cache(maxsize=None)
def _cache_keyword(model_class: type) -> str:
    """The forward's keyword for the KV cache: ``cache`` in recent transformers, where
    ``past_key_values`` still works but warns that it goes away in 5.40; ``past_key_values`` in
    older 5.x releases, which pyproject.toml allows (``transformers>=5.0``). Read from the
    signature, so either release runs the same loop without the warning.

    >>> class OlderModel:
    ...     def forward(self, input_ids=None, past_key_values=None, use_cache=None): ...
    >>> _cache_keyword(OlderModel)
    'past_key_values'
    """
    parameters = inspect.signature(model_class.forward).parameters
    return "cache" if "cache" in parameters else "past_key_values"


def _batches(order: list[int], per_batch: int) -> list[list[int]]:
    return [order[i : i + per_batch] for i in range(0, len(order), per_batch)]


#: A batch's common prompt prefix is run once when at least this many tokens long: it costs a
#: forward call of its own, which a few tokens would not repay (a round lower bound, not tuned;
#: the prefixes that occur here are the chat template's 22-token system turn or nothing).
MIN_SHARED_PREFIX = 8


def _shared_prefix_length(prompt_ids: list[list[int]]) -> int:
    """Tokens all prompts of a batch start with, leaving each prompt at least one of its own.

    >>> _shared_prefix_length([[1, 2, 3, 4, 5, 6, 7, 8, 9, 10], [1, 2, 3, 4, 5, 6, 7, 8, 11]])
    8
    >>> _shared_prefix_length([[1, 2, 3], [1, 2, 4]])  # too short to pay
    0
    >>> _shared_prefix_length([[1, 2, 3, 4, 5, 6, 7, 8, 9, 10]])  # one prompt: nothing to share
    0
    """
    if len(prompt_ids) < 2:
        return 0
    shortest = min(len(p) for p in prompt_ids)
    first = prompt_ids[0]
    n = 0
    while n < shortest - 1 and all(p[n] == first[n] for p in prompt_ids):
        n += 1
    return n if n >= MIN_SHARED_PREFIX else 0


def _prefill(model, prompt_ids: list[list[int]], pad_id: int):
    """Run a batch of prompts through the model: the next-token logits of each row, the cache,
    the [rows, prompt] attention mask, the positions, and whether any row is padded."""
    device = next(model.parameters()).device
    b = len(prompt_ids)
    cache = DynamicCache()
    cache_kw = _cache_keyword(type(model))
    shared = _shared_prefix_length(prompt_ids)
    if shared:
        # The tokens every prompt starts with (the chat template's system turn) are run once
        # and their cache copied to each row: 22 of ~122 tokens of an eval prompt.
        model(input_ids=torch.tensor([prompt_ids[0][:shared]], device=device),
              position_ids=torch.arange(shared, device=device).unsqueeze(0), **{cache_kw: cache},
              use_cache=True, logits_to_keep=1)
        cache.batch_repeat_interleave(b)
    rests = [ids[shared:] for ids in prompt_ids]
    width = max(len(r) for r in rests)
    input_ids = torch.full((b, width), pad_id, dtype=torch.long)
    own = torch.zeros((b, width), dtype=torch.long)
    for row, ids in enumerate(rests):  # left padding (after the shared prefix, if any)
        input_ids[row, width - len(ids):] = torch.tensor(ids, dtype=torch.long)
        own[row, width - len(ids):] = 1
    input_ids, own = input_ids.to(device), own.to(device)
    mask = torch.cat([own.new_ones(b, shared), own], dim=1)
    positions = (mask.cumsum(-1) - 1).clamp(min=0)[:, shared:]
    # No attention mask when nothing is padded: SDPA then takes its causal fast path.
    padded = bool((own == 0).any())
    # The last position as an index tensor, not ``logits_to_keep=1``: transformers then gathers
    # a contiguous [rows, 1, hidden] copy instead of slicing a strided view, and the LM head is
    # one matmul. On the strided view PyTorch's matmul expands the 49k x 576 head per row (a
    # [32, 576, 49152] copy): 2,586 ms against 3.8 ms in bf16, 9.4 against 7.9 ms in fp32, a
    # batch of 32 on an AMX Xeon (benchmarks/generation.py, "last-position head", one run).
    out = model(input_ids=input_ids, attention_mask=mask if padded else None, position_ids=positions,
                use_cache=True, logits_to_keep=torch.tensor([width - 1], device=device), **{cache_kw: cache})
    return out.logits[:, -1, :], cache, mask, positions, padded


def drops_finished_rows(done: int, carried: int) -> bool:
    """Whether a batch drops its ``done`` finished rows of the ``carried`` it still computes: once
    they are a quarter of them. Each drop copies the cache once, so doing it for every single
    finished row would cost more than it saves. (The start-up estimate counts rows by this rule:
    library/train/estimate.py.)

    >>> drops_finished_rows(1, 6), drops_finished_rows(2, 8)
    (False, True)
    """
    return done > 0 and done * 4 >= carried


@torch.inference_mode()
def _generate_batch(model, prompt_ids: list[list[int]], *, repeats: int, max_new_tokens: int, do_sample: bool,
                    temperature: float, top_p: float, eos_ids: list[int], pad_id: int,
                    generator: torch.Generator, stats: GenerationStats | None = None,
                    ) -> tuple[list[list[int]], list[bool]]:
    """Generate for one batch of unique prompts, ``repeats`` rows each; returns ids per row."""
    device = next(model.parameters()).device
    start = time.perf_counter()
    logits, cache, mask, positions, padded = _prefill(model, prompt_ids, pad_id)
    decoding = time.perf_counter()
    if stats is not None:
        stats.prefill_seconds += decoding - start
    b = len(prompt_ids)
    cache = _expand_cache(cache, repeats, max_new_tokens)
    if repeats > 1:
        logits = logits.repeat_interleave(repeats, dim=0)
        mask = mask.repeat_interleave(repeats, dim=0)
        positions = positions.repeat_interleave(repeats, dim=0)
    rows = b * repeats
    last_pos = positions[:, -1:]
    cache_kw = _cache_keyword(type(model))
    eos = torch.tensor(eos_ids, device=device)

    tokens: list[list[int]] = [[] for _ in range(rows)]
    finished = [False] * rows
    alive = torch.arange(rows, device=device)  # original row of each current batch row
    done_now = torch.zeros(rows, dtype=torch.bool, device=device)
    full_mask = torch.cat([mask, mask.new_ones(rows, max_new_tokens)], dim=1) if padded else None
    seen = mask.shape[1]  # prompt positions in the cache (shared prefix + padded rest)
    for step in range(max_new_tokens):
        if do_sample:
            nxt = _sample(logits, temperature, top_p, generator)
        else:
            nxt = logits.argmax(-1)
        nxt_list = nxt.tolist()
        is_eos = torch.isin(nxt, eos)
        for i, (row, tok) in enumerate(zip(alive.tolist(), nxt_list)):
            if not done_now[i]:
                tokens[row].append(tok)
        done_now = done_now | is_eos
        for i in torch.nonzero(is_eos).flatten().tolist():
            finished[alive[i].item()] = True
        if bool(done_now.all()) or step == max_new_tokens - 1:
            break
        n_done = int(done_now.sum())
        if drops_finished_rows(n_done, len(alive)):
            keep = torch.nonzero(~done_now).flatten()
            for layer in cache.layers:
                layer.batch_select_indices(keep)
            alive, nxt, last_pos = alive[keep], nxt[keep], last_pos[keep]
            done_now = done_now[keep]
            if full_mask is not None:
                full_mask = full_mask[keep]
        seen += 1
        last_pos = last_pos + 1
        if stats is not None:
            stats.decode_steps += 1
            stats.decode_row_steps += len(alive)
        out = model(input_ids=nxt.unsqueeze(-1), attention_mask=full_mask[:, :seen] if full_mask is not None else None,
                    position_ids=last_pos, use_cache=True, logits_to_keep=1, **{cache_kw: cache})
        logits = out.logits[:, -1, :]
    if stats is not None:
        stats.decode_seconds += time.perf_counter() - decoding
    return tokens, finished


def generate_completions(model, tokenizer, user_texts: Sequence[str], *, max_new_tokens: int = 64,
                         do_sample: bool = False, temperature: float = 0.6, top_p: float = 0.9,
                         num_return_sequences: int = 1, batch_size: int = 16, seed: int = 0,
                         progress: bool = True, chat: bool = True, merge_lora: bool = True,
                         stats: GenerationStats | None = None, precision: str | None = None) -> list[list[Completion]]:
    """Like :func:`generate` but returns :class:`Completion` objects (text + token ids).

    ``batch_size`` counts generated rows: a batch holds ``max(1, batch_size // n)`` unique
    prompts times ``n = num_return_sequences`` samples. ``chat=False`` takes ``user_texts`` as
    already formatted prompt strings. ``precision`` ("float32" or "bfloat16") overrides the process's
    generation precision (sampling precision with ``do_sample``) for the PyTorch loop (:func:`generation_model`).
    """
    if precision is None and do_sample:  # RL's draws: the same on any CPU in fp32 (finding 54)
        precision = sampling_precision()
    if num_return_sequences < 1:
        raise ValueError("num_return_sequences must be >= 1")
    if not do_sample and num_return_sequences > 1:
        raise ValueError("greedy decoding gives identical samples; set do_sample=True for num_return_sequences > 1")
    start = time.perf_counter()
    texts = [format_prompt(tokenizer, t) if chat else t for t in user_texts]
    encoded = tokenizer(texts, add_special_tokens=False)["input_ids"]
    # Unique prompts only: duplicates in user_texts share one prefill as well.
    unique: dict[tuple[int, ...], int] = {}
    for ids in encoded:
        unique.setdefault(tuple(ids), len(unique))
    unique_ids = [list(k) for k in unique]
    n = num_return_sequences
    per_batch = max(1, batch_size // n)
    order = sorted(range(len(unique_ids)), key=lambda i: (len(unique_ids[i]), i))
    batches = _batches(order, per_batch)
    eos_ids = _eos_ids(model, tokenizer)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos_ids[0]
    results: dict[int, list[Completion]] = {}
    with generation_model(model, merge_lora, precision) as gen_model:
        bar = tqdm(total=len(unique_ids) * n, disable=not progress, desc="generate", unit="seq")
        for index, batch in enumerate(batches):
            # One generator per batch, seeded from (seed, batch index): reproducible, and a
            # batch's draws do not depend on how many tokens earlier batches consumed.
            generator = torch.Generator(device="cpu").manual_seed(seed * 1_000_003 + index)
            prompt_ids = [unique_ids[i] for i in batch]
            tokens, finished = _generate_batch(
                gen_model, prompt_ids, repeats=n, max_new_tokens=max_new_tokens, do_sample=do_sample,
                temperature=temperature, top_p=top_p, eos_ids=eos_ids, pad_id=pad_id, generator=generator,
                stats=stats)
            for j, u in enumerate(batch):
                rows = range(j * n, (j + 1) * n)
                decoded = tokenizer.batch_decode([tokens[r] for r in rows], skip_special_tokens=True)
                results[u] = [Completion(text=decoded[k].strip(), token_ids=tokens[r], finished=finished[r],
                                         prompt_ids=unique_ids[u]) for k, r in enumerate(rows)]
                if stats is not None:
                    stats.new_tokens += sum(len(tokens[r]) for r in rows)
            if stats is not None:
                stats.prefill_tokens += sum(len(p) for p in prompt_ids)
            bar.update(len(batch) * n)
        bar.close()
    if stats is not None:
        stats.prompts += len(encoded)
        stats.sequences += len(encoded) * n
        stats.seconds += time.perf_counter() - start
    return [results[unique[tuple(ids)]] for ids in encoded]


def generate(model, tokenizer, user_texts: Sequence[str], *, max_new_tokens: int = 64, do_sample: bool = False,
             temperature: float = 0.6, top_p: float = 0.9, num_return_sequences: int = 1, batch_size: int = 16,
             seed: int = 0, progress: bool = True, chat: bool = True, merge_lora: bool = True,
             stats: GenerationStats | None = None, precision: str | None = None) -> list[list[str]]:
    """Completions for each user text: ``out[i]`` is a list of ``num_return_sequences`` strings.

    The texts are wrapped in the chat template (:func:`library.model.chat.format_prompt`) unless
    ``chat=False``. Output order follows ``user_texts`` whatever the internal batching.
    Greedy by default (evaluation); ``do_sample=True`` for rollouts.

    >>> from library.model.load import load_model
    >>> model, tok = load_model("tiny")
    >>> outs = generate(model, tok, ["Q1", "Q2"], do_sample=True, num_return_sequences=3,
    ...                 max_new_tokens=3, progress=False)
    >>> [len(o) for o in outs]
    [3, 3]
    """
    completions = generate_completions(
        model, tokenizer, user_texts, max_new_tokens=max_new_tokens, do_sample=do_sample, temperature=temperature,
        top_p=top_p, num_return_sequences=num_return_sequences, batch_size=batch_size, seed=seed,
        progress=progress, chat=chat, merge_lora=merge_lora, stats=stats, precision=precision)
    return [[c.text for c in group] for group in completions]


def flatten(groups: list[list[str]]) -> list[str]:
    """``[[a1, a2], [b1, b2]] -> [a1, a2, b1, b2]`` (the order TRL's GRPO uses for groups).

    >>> flatten([["a1", "a2"], ["b1", "b2"]])
    ['a1', 'a2', 'b1', 'b2']
    """
    return [text for group in groups for text in group]
