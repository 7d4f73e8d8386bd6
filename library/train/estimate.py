"""How long a run will take on this machine: its work counted in tokens, timed by a short calibration.

A run's time is matrix arithmetic over tokens. SFT runs a forward and a backward pass over every
token of its rows; RSFT and GRPO train an adapter on their own samples; every evaluation and
every RL sample is decoded token by token; fact recall is a teacher-forced forward pass.
:func:`plan_work` counts those tokens from the run's own rows and settings before anything trains,
:func:`calibrate` times this machine on a few of them (a forward and backward pass over two real
SFT rows, a short decoding batch of eval prompts halfway through their answers: seconds), and
:func:`estimate` multiplies.
Why by hand: no library estimates a whole run's time before it starts (a Trainer's progress bar
knows one phase, once it has begun), and a machine 1.3x slower than the one a profile was
measured on should be told so at start-up, not after 20 minutes.

The estimate is a model, and the run reports it beside what it measured: ``meta.json``
``estimate`` holds the calibration and the per-phase seconds, ``metrics.json`` ``timings`` the
actual ones; :func:`remaining` rescales the phases still to come by how the finished ones
compared with their estimate.

>>> rates = Rates(train_s_per_token=0.005, forward_s_per_token=0.002, prefill_s_per_token=0.001,
...               decode_s_per_step=0.05, decode_rows=32)
>>> plan = {"sft": Work(train_tokens=1000), "sft_eval": Work(prefill_tokens=3200, decode_steps=100, decode_rows=64)}
>>> {k: round(v) for k, v in estimate(plan, rates).items()}
{'sft': 5, 'sft_eval': 11}
>>> round(remaining(estimate(plan, rates), {"sft": 10.0}))   # SFT, a third of the run, took 2x its estimate
14

A full fine-tuning step also updates every weight (clipping and fused AdamW), timed apart and
counted once per step:

>>> timed = Rates(**{**rates.__dict__, "optimizer_s_per_step": 0.1})
>>> round(estimate({"sft": Work(train_tokens=1000, optimizer_steps=20)}, timed)["sft"])
7

RSFT and GRPO (and LoRA SFT) train an adapter on frozen weights: the backward pass carries the
activations' gradients and skips the weights'. How much that saves differs by CPU: RSFT's training
ran at 0.76-1.17x (median 0.97) the full-training rate in 13 quick and demo runs on a Xeon, and at
0.72-0.85x (0.70-0.76x their own SFT's rate) in three demo runs on an AMD EPYC (family 25), where a timed pass with frozen weights
measured 0.73x. So the calibration times that pass too (``adapter_s_per_token``), and an adapter's
token is timed at it; an older run's meta.json without it times the adapter as a trained token.

>>> round(estimate({"rsft": Work(train_tokens=1000, adapter=True)}, rates)["rsft"])
5
>>> frozen = Rates(**{**rates.__dict__, "adapter_s_per_token": 0.0036})
>>> round(estimate({"rsft": Work(train_tokens=1000, adapter=True)}, frozen)["rsft"], 1)
3.6

RL's draws are sampled at the sampling precision, which can be slower than the answers' (fp32
against bf16): they are counted as sampled work and timed at the sampling rates where those differ.

>>> draws = {"rsft": Work(prefill_tokens=3200, decode_steps=100, decode_rows=32).sampled()}
>>> fp32 = Rates(**{**rates.__dict__, "sample_prefill_s_per_token": 0.002, "sample_decode_s_per_step": 0.1})
>>> round(estimate(draws, rates)["rsft"]), round(estimate(draws, fp32)["rsft"])
(8, 16)
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass
from typing import Any, Sequence

from rich.table import Table

from library.evaluation.phase import answer_window, measures_recall, phase_questions, traced_questions
from library.evaluation.recall import eval_fact_groups
from library.model.chat import format_example, format_prompt
from library.questions.wording import reference_completion
from library.train.sft import sft_examples

#: Trained-token equivalents of one GRPO rollout token with a KL reference (see plan_work).
GRPO_TOKEN_COST = 2.0
#: The base model does not follow the format: half its answers end within BASE_ANSWER_TOKENS,
#: and BASE_WINDOW_ANSWERS of them run the whole window (median 17 tokens, 7.9% at the window,
#: over 7,754 base answers in the committed runs; docs/MEASUREMENTS.md).
BASE_ANSWER_TOKENS = 17
BASE_WINDOW_ANSWERS = 0.079
#: Decoding steps the calibration times in each precision, on a batch of CALIBRATION_ROWS contexts.
CALIBRATION_STEPS = 17
CALIBRATION_ROWS = 32

# torch and the generator (library.model.generate, library.model.precision) are imported inside
# calibrate and _live_row_steps (the CLI starts without them).


@dataclass(frozen=True)
class Rates:
    """This machine's measured costs: seconds per trained token (forward + backward, in the
    training precision), per teacher-forced token (an fp32 forward pass: fact recall), per
    prompt token prefilled by the generator, and per decoding step of ``decode_rows`` rows; the
    last two again for sampled generation where it runs in another precision (None: the same);
    per token trained through an adapter on frozen weights (None, in older runs: as a trained token);
    per optimizer step over every weight (gradient clipping and fused AdamW; None, in older runs: 0)."""

    train_s_per_token: float
    forward_s_per_token: float
    prefill_s_per_token: float
    decode_s_per_step: float
    decode_rows: int
    sample_prefill_s_per_token: float | None = None
    sample_decode_s_per_step: float | None = None
    adapter_s_per_token: float | None = None
    optimizer_s_per_step: float | None = None

    def as_dict(self) -> dict[str, float]:
        return {k: round(v, 6) for k, v in asdict(self).items() if v is not None}

    def trained_s_per_token(self, adapter: bool = False) -> float:
        return self.adapter_s_per_token if adapter and self.adapter_s_per_token else self.train_s_per_token

    def sampling_prefill_s_per_token(self) -> float:
        return self.prefill_s_per_token if self.sample_prefill_s_per_token is None else self.sample_prefill_s_per_token

    def sampling_decode_s_per_step(self) -> float:
        return self.decode_s_per_step if self.sample_decode_s_per_step is None else self.sample_decode_s_per_step


@dataclass(frozen=True)
class Work:
    """One phase's tokens: trained (forward + backward), teacher-forced in the training precision
    (forward only: fact recall), prefilled by the generator, and decoded (``decode_steps`` steps
    of ``decode_rows`` rows each, summed over batches), greedily (answers) and by sampling (RL's
    draws, ``sample_*``: at the sampling precision). ``adapter``: the trained tokens go through
    an adapter on frozen weights (RSFT, GRPO, LoRA SFT). ``optimizer_steps``: steps that update
    every weight (full SFT; an adapter's few weights update in no measurable time)."""

    train_tokens: int = 0
    forward_tokens: int = 0
    prefill_tokens: int = 0
    decode_steps: int = 0
    decode_rows: int = 0
    sample_prefill_tokens: int = 0
    sample_decode_steps: int = 0
    sample_decode_rows: int = 0
    adapter: bool = False
    optimizer_steps: int = 0

    def sampled(self) -> "Work":
        """The same generation, drawn by sampling."""
        if self.sample_decode_steps or self.sample_prefill_tokens:
            raise ValueError("Work.sampled() of work that already has sampled decoding")
        return Work(train_tokens=self.train_tokens, forward_tokens=self.forward_tokens,
                    sample_prefill_tokens=self.prefill_tokens, sample_decode_steps=self.decode_steps,
                    sample_decode_rows=self.decode_rows, adapter=self.adapter, optimizer_steps=self.optimizer_steps)


def step_seconds(rates: Rates, rows: int, sampled: bool = False) -> float:
    """One decoding step of ``rows`` rows. A step reads every weight once whatever its width, and
    its arithmetic grows with the rows: half of the calibrated step is taken as fixed and half as
    proportional to the rows (at 32 -> 128 rows the pipeline's generator measured 1.7-2.1x the
    tokens per second, docs/MEASUREMENTS.md, i.e. about this)."""
    step = rates.sampling_decode_s_per_step() if sampled else rates.decode_s_per_step
    return step * _row_factor(rows, rates.decode_rows)


def _row_factor(rows: float, calibrated_rows: float) -> float:
    """A step of ``rows`` rows against one of ``calibrated_rows``: half fixed, half per row (:func:`step_seconds`)."""
    return 0.5 + 0.5 * rows / max(calibrated_rows, 1)


def estimate(plan: dict[str, Work], rates: Rates) -> dict[str, float]:
    """Seconds per entry of ``plan`` (phase names and ``<phase>_eval``) on a machine with ``rates``."""
    out = {}
    for name, work in plan.items():
        out[name] = (work.train_tokens * rates.trained_s_per_token(work.adapter)
                     + work.optimizer_steps * (rates.optimizer_s_per_step or 0.0)
                     + work.forward_tokens * rates.forward_s_per_token
                     + work.prefill_tokens * rates.prefill_s_per_token
                     + work.decode_steps * step_seconds(rates, work.decode_rows)
                     + work.sample_prefill_tokens * rates.sampling_prefill_s_per_token()
                     + work.sample_decode_steps * step_seconds(rates, work.sample_decode_rows, sampled=True))
    return out


def remaining(estimates: dict[str, float], done: dict[str, float]) -> float:
    """Seconds left: the entries not in ``done`` (actual seconds), scaled by actual / estimated
    over the entries that are, trusted as far as they are a share of the whole estimate: a
    20-second base evaluation that ran 30% fast says little about a 13-minute SFT (scaling the
    rest by it made "time left" jump by a quarter after the first phase), while a finished SFT,
    most of the run, says a lot.

    >>> remaining({"grpo": 20.0, "grpo_eval": 30.0}, {"grpo": 60.0})   # 3x, over 40% of the estimate
    54.0
    >>> remaining({"base": 2.0, "sft": 98.0}, {"base": 1.0})            # 0.5x, over 2%: ~unchanged
    97.02
    """
    finished = [k for k in done if k in estimates]
    expected = sum(estimates[k] for k in finished)
    total = sum(estimates.values())
    if expected <= 0 or total <= 0:
        return sum(v for k, v in estimates.items() if k not in done)
    measured = sum(done[k] for k in finished) / expected
    factor = 1.0 + (measured - 1.0) * expected / total
    return factor * sum(v for k, v in estimates.items() if k not in done)


# ----------------------------------------------------------------------------- the plan
def _live_row_steps(lengths: Sequence[int]) -> int:
    """Rows computed over a batch's decoding steps when its answers have ``lengths`` tokens: the
    generator runs a batch until its longest answer ends and drops finished rows once they are a
    quarter of the rows it still carries (library/model/generate.py).

    >>> _live_row_steps([10, 10, 10, 30])   # 4 rows for 10 steps, then 1 for 20
    60
    >>> _live_row_steps([10, 30, 30, 30, 30, 30])   # one of 6 done is under a quarter: kept
    180
    """
    from library.model.generate import drops_finished_rows

    ends = sorted(lengths)
    carried, finished, row_steps = len(ends), 0, 0
    for step in range(1, (ends[-1] if ends else 0) + 1):
        row_steps += carried
        while finished < len(ends) and ends[finished] <= step:
            finished += 1
        done = finished - (len(ends) - carried)  # finished rows still carried
        if drops_finished_rows(done, carried):
            carried -= done
    return row_steps


def _generation(prompt_lengths: Sequence[int], new_tokens: Sequence[int], batch_rows: int, repeats: int = 1) -> Work:
    """Decoding ``len(prompt_lengths)`` prompts ``repeats`` times each, in batches of
    ``batch_rows`` rows, each batch running until its longest answer (``new_tokens``) ends;
    ``decode_rows`` is the mean rows a step computes (:func:`_live_row_steps`).

    >>> w = _generation([40, 40, 40, 40], [10, 10, 10, 30], batch_rows=4)
    >>> w.decode_steps, w.decode_rows
    (30, 2)
    """
    per_batch = max(1, batch_rows // repeats)
    order = sorted(range(len(prompt_lengths)), key=lambda i: prompt_lengths[i])  # as the generator batches
    steps = row_steps = 0
    for start in range(0, len(order), per_batch):
        batch = order[start:start + per_batch]
        steps += max(new_tokens[i] for i in batch)
        row_steps += _live_row_steps([new_tokens[i] for i in batch for _ in range(repeats)])
    return Work(prefill_tokens=sum(prompt_lengths), decode_steps=steps,
                decode_rows=round(row_steps / steps) if steps else 0)


def _base_generation(prompt_lengths: Sequence[int], window: int, batch_rows: int) -> Work:
    """The base model's answers in batches of ``batch_rows``, in expectation: a batch runs the
    whole window if one of its answers does (else to about twice a typical answer), and the
    generator drops finished rows (library/model/generate.py), so a step has the batch's mean
    live rows.

    >>> w = _base_generation([50] * 30, 144, 150)
    >>> w.decode_steps, w.decode_rows      # 30 rows: one runs the window 92% of the time
    (135, 6)
    """
    p, typical = BASE_WINDOW_ANSWERS, min(BASE_ANSWER_TOKENS, window)
    steps = row_steps = 0.0
    for start in range(0, len(prompt_lengths), max(1, batch_rows)):
        rows = len(prompt_lengths[start:start + batch_rows])
        reaches = 1 - (1 - p) ** rows  # some answer of the batch runs the window
        steps += reaches * window + (1 - reaches) * min(2 * typical, window)
        row_steps += rows * (p * window + (1 - p) * typical)
    return Work(prefill_tokens=sum(prompt_lengths), decode_steps=round(steps),
                decode_rows=round(row_steps / steps) if steps else 0)


def plan_work(config: Any, selection: Any, tokenizer: Any, kg: Any) -> dict[str, Work]:
    """The tokens each phase of ``config`` trains on, prefills and decodes, from the run's own
    questions (``selection``) and rows. Answers not generated yet are counted at their reference
    completion's length (a trained model writes about that much); the base model, which does not
    stop where a trained one does, as _base_generation."""
    def n_tokens(text: str) -> int:
        return len(tokenizer(text, add_special_tokens=False)["input_ids"])

    ref_len: dict[str, int] = {}

    def reference(q: Any) -> int:
        if q.id not in ref_len:
            ref_len[q.id] = n_tokens(reference_completion(q)) + 1
        return ref_len[q.id]

    prompt_lengths: dict[str, int] = {}

    def prompt_len(q: Any) -> int:
        if q.id not in prompt_lengths:
            prompt_lengths[q.id] = n_tokens(format_prompt(tokenizer, q.prompt))
        return prompt_lengths[q.id]

    ev = config.eval
    plan: dict[str, Work] = {}
    sft_rows = sft_examples(selection.sft, config.sft, kg=kg, seed=config.seed)
    sft = config.sft
    full = sft.method != "lora"
    # the Trainer's steps: one pass of batch_size-row batches, grad_accum of them a step, unless max_steps
    steps = sft.max_steps or math.ceil(math.ceil(len(sft_rows) / sft.batch_size) / sft.grad_accum)
    plan["sft"] = Work(train_tokens=sum(n_tokens(format_example(tokenizer, u, c).text) for u, c in sft_rows),
                       adapter=not full, optimizer_steps=steps if full else 0)

    recall = Work()
    if selection.eval:
        groups = eval_fact_groups(kg, selection.eval)
        traced = traced_questions(selection.eval, ev, config.seed)
        # a fact group is a short row (~12 tokens); a traced question is its prompt and gold TRACE
        recall = Work(forward_tokens=12 * len(groups) + sum(prompt_len(q) + reference(q) for q in traced))
    for phase in config.phases():
        # each split is generated on its own (library/evaluation/phase.py), in its own batches
        gen = Work(forward_tokens=recall.forward_tokens if measures_recall(phase, ev) else 0)
        for key, questions in phase_questions(selection, phase, ev, config.seed, config.is_final(phase)).items():
            window = answer_window(key, ev)
            if questions and phase == "base":
                gen = _sum(gen, _base_generation([prompt_len(q) for q in questions], window, ev.batch_size))
            elif questions:
                lengths = [min(reference(q), window) for q in questions]
                gen = _sum(gen, _generation([prompt_len(q) for q in questions], lengths, ev.batch_size))
        plan[f"{phase}_eval"] = gen
        if phase == "rsft":
            r = config.rsft
            qs = selection.rsft_prompts
            gen = _generation([prompt_len(q) for q in qs], [min(reference(q), r.max_new_tokens) for q in qs],
                              r.gen_batch_size, repeats=r.k_samples)
            row = sum(prompt_len(q) + reference(q) for q in qs) / max(len(qs), 1)
            plan["rsft"] = Work(train_tokens=round(r.max_steps * r.batch_size * row), adapter=True,
                                prefill_tokens=gen.prefill_tokens, decode_steps=gen.decode_steps,
                                decode_rows=gen.decode_rows).sampled()
        elif phase == "grpo":
            g = config.grpo
            qs = selection.grpo_pool
            row = sum(prompt_len(q) + min(reference(q), g.max_completion_length) for q in qs) / max(len(qs), 1)
            window = max((min(reference(q), g.max_completion_length) for q in qs), default=0)
            rollouts = g.max_steps * g.prompts_per_step * g.num_generations
            # each rollout is trained on once and scored by the policy and (beta > 0) the reference,
            # and TRL's step has its own overhead: GRPO's training measured 2.0x (1.1-2.6x) its
            # rollouts' tokens at the trained rate over 12 quick runs with beta 0.05
            plan["grpo"] = Work(train_tokens=round(rollouts * row * (GRPO_TOKEN_COST if g.beta > 0 else 1.5)), adapter=True,
                                prefill_tokens=round(g.max_steps * g.prompts_per_step * row),
                                decode_steps=g.max_steps * window,
                                decode_rows=g.prompts_per_step * g.num_generations).sampled()
    order = ["base_eval"] + [k for p in config.phases() if p != "base" for k in (p, f"{p}_eval")]
    out = {k: plan[k] for k in order if k in plan}
    # the experiments kgr train runs after the phases: RSFT per condition, GRPO again, each evaluated
    if config.distribution.enabled and "rsft" in plan:
        for condition in config.distribution.conditions:
            out[f"distribution_{condition}"] = _sum(plan["rsft"], plan["rsft_eval"])
    if config.ablation.enabled and "grpo" in plan:
        out["ablation"] = _sum(plan["grpo"], plan["grpo_eval"])
    return out


def _sum(a: Work, b: Work) -> Work:
    """Two entries' work as one (an experiment's phase and its evaluation); a step of the sum
    has the steps' mean rows."""
    def mean_rows(s1: int, r1: int, s2: int, r2: int) -> int:
        return round((s1 * r1 + s2 * r2) / (s1 + s2)) if s1 + s2 else 0

    return Work(train_tokens=a.train_tokens + b.train_tokens, adapter=a.adapter or b.adapter,
                optimizer_steps=a.optimizer_steps + b.optimizer_steps,
                forward_tokens=a.forward_tokens + b.forward_tokens,
                prefill_tokens=a.prefill_tokens + b.prefill_tokens, decode_steps=a.decode_steps + b.decode_steps,
                decode_rows=mean_rows(a.decode_steps, a.decode_rows, b.decode_steps, b.decode_rows),
                sample_prefill_tokens=a.sample_prefill_tokens + b.sample_prefill_tokens,
                sample_decode_steps=a.sample_decode_steps + b.sample_decode_steps,
                sample_decode_rows=mean_rows(a.sample_decode_steps, a.sample_decode_rows,
                                             b.sample_decode_steps, b.sample_decode_rows))


# ----------------------------------------------------------------------------- calibration
def calibrate(model: Any, tokenizer: Any, train_rows: Sequence[tuple[str, str]], contexts: Sequence[str], *,
              rows: int = CALIBRATION_ROWS, generation_precision: str | None = None,
              sampling_precision: str | None = None, samples: int = 4) -> Rates:
    """Time this machine: a forward and backward pass over ``train_rows`` (two SFT rows as
    ``(prompt, completion)`` texts, as one padding-free sequence whose LM head runs on the
    completions' tokens alone, as the trainers' loss does; the gradients are dropped, no weight
    changes) in fp32 and, where training autocasts to bf16, in bf16 too; and the pipeline's
    generator on ``rows`` of ``contexts`` (formatted texts the decoding continues: see
    :func:`calibrate_run`) for :data:`CALIBRATION_STEPS` decoding steps, its prefill and its steps timed
    apart (:class:`~library.model.generate.GenerationStats`), and again at the sampling precision
    where RL's draws run in another one than the answers, drawn ``samples`` to a prompt."""
    import torch

    from library.model.generate import GenerationStats, generate_completions
    from library.model.precision import compute_precision
    from library.model.precision import generation_precision as precision_of_generation
    from library.model.precision import sampling_precision as precision_of_sampling

    ids, scored = [], []
    for prompt, completion in train_rows:
        row = tokenizer(prompt + completion, add_special_tokens=False)["input_ids"]
        start = len(tokenizer(prompt, add_special_tokens=False)["input_ids"])
        ids.append(row)
        scored += [start <= p for p in range(len(row))]
    flat = torch.tensor([[i for row in ids for i in row]])
    positions = torch.tensor([[p for row in ids for p in range(len(row))]])
    # TRL's fused LM head scores the completion tokens only; the whole sequence's logits timed
    # the pass 8% slow (two demo rows, 146 of 376 tokens completion, on a 2-core EPYC)
    head = {"logits_to_keep": torch.tensor(scored)}
    was_training = model.training
    flags = [p.requires_grad for p in model.parameters()]
    model.train()
    model.requires_grad_(True)

    def timed_pass(bf16: bool, frozen: bool = False, keep_grads: bool = False) -> tuple[float, float]:
        """Seconds of the forward and of the backward pass over ``flat``; ``frozen``: the weights
        get no gradients and the backward pass carries the activations' alone, as under an adapter;
        ``keep_grads``: the gradients are left for :func:`optimizer_step`."""
        model.requires_grad_(not frozen)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            start = time.perf_counter()
            if frozen:
                embeds = model.get_input_embeddings()(flat).detach().requires_grad_(True)
                out = model(inputs_embeds=embeds, position_ids=positions, use_cache=False, **head)
            else:
                out = model(input_ids=flat, position_ids=positions, use_cache=False, **head)
            loss = out.logits.float().logsumexp(-1).mean()
        middle = time.perf_counter()
        loss.backward()
        end = time.perf_counter()
        if not keep_grads:
            model.zero_grad(set_to_none=True)
        return middle - start, end - middle

    def optimizer_step() -> float:
        """Seconds of a full fine-tuning step's update on the gradients a pass left: gradient
        clipping and the Trainer's fused AdamW over every weight (library/train/checkpoints.py),
        the faster of two after the one that allocates its state. Its learning rate is 0, so no
        weight changes (p - 0 * update); at ~0.1 s a step it was 4-5% of SFT's step on a 2-core
        EPYC (family 25), which the passes alone missed."""
        weights = [p for p in model.parameters() if p.requires_grad]
        adamw = torch.optim.AdamW(weights, lr=0.0, weight_decay=0.0, fused=True)
        times = []
        for _ in range(3):
            start = time.perf_counter()
            torch.nn.utils.clip_grad_norm_(weights, 1.0)
            adamw.step()
            times.append(time.perf_counter() - start)
        model.zero_grad(set_to_none=True)
        del adamw  # its state, two copies of the weights
        return min(times[1:])

    def median_pass(bf16: bool, frozen: bool = False, warm_up: bool = True) -> tuple[float, float]:
        """The median of three timed passes after a warm-up: a pass slowed by another process for
        a moment (one was, by 60%, in a demo run) does not set the rate of a whole SFT, and a
        fast moment does not either: with the faster of two, SFT's estimate ran 1-15% under the
        SFT that followed in five of six demo runs on a 2-core EPYC (family 25), whose passes vary
        by +-6% within a process (docs/MEASUREMENTS.md)."""
        if warm_up:
            timed_pass(bf16, frozen)
        return sorted((timed_pass(bf16, frozen) for _ in range(3)), key=sum)[1]

    try:
        timed_pass(False, keep_grads=True)  # the warm-up, whose gradients the optimizer is timed on
        optimizer = optimizer_step()
        fp32_forward, fp32_backward = median_pass(False, warm_up=False)
        bf16 = compute_precision() == "bfloat16"  # training autocasts to bf16 (the Trainer's bf16=True)
        forward, backward = median_pass(True) if bf16 else (fp32_forward, fp32_backward)
        train = forward + backward
        adapter = sum(median_pass(bf16, frozen=True, warm_up=False))  # the kernels are warm by now
    finally:
        model.zero_grad(set_to_none=True)
        for p, flag in zip(model.parameters(), flags):
            p.requires_grad_(flag)
        model.train(was_training)
    n = flat.shape[1]
    batch = list(contexts[:rows])

    def generator_rates(precision: str | None, sampled: bool = False) -> tuple[float, float, int]:
        """Seconds per prefilled token, per decoding step, and the step's mean rows, in
        ``precision``: one batch of CALIBRATION_STEPS decoding steps, each part timed inside the generator (two
        calls' difference, 8 steps, had varied 0.06-0.12 s a step between runs on one machine).
        ``sampled``: drawn as RL draws, ``samples`` per prompt from one prefill of each (a quarter
        of the prefill of ``rows`` prompts, and the rate RL's prompts are prefilled at)."""
        stats = GenerationStats()
        prompts_in = batch[:max(1, len(batch) // samples)] if sampled else batch
        generate_completions(model, tokenizer, prompts_in, max_new_tokens=CALIBRATION_STEPS + 1, batch_size=len(batch),
                             chat=False, do_sample=sampled, num_return_sequences=samples if sampled else 1,
                             progress=False, stats=stats, precision=precision)
        steps = max(stats.decode_steps, 1)
        return (stats.prefill_seconds / max(stats.prefill_tokens, 1), stats.decode_seconds / steps,
                max(round(stats.decode_row_steps / steps), 1))

    gen = generation_precision or precision_of_generation()
    prefill, step, step_rows = generator_rates(gen)
    sample_prefill = sample_step = None
    if (sampling_precision or precision_of_sampling()) != gen:
        sample_prefill, sample_step, sample_rows = generator_rates(sampling_precision or precision_of_sampling(),
                                                                   sampled=True)
        sample_step /= _row_factor(sample_rows, step_rows)  # the step at step_rows rows
    return Rates(train_s_per_token=train / n, forward_s_per_token=fp32_forward / n,
                 prefill_s_per_token=prefill, decode_s_per_step=step, decode_rows=step_rows,
                 sample_prefill_s_per_token=sample_prefill, sample_decode_s_per_step=sample_step,
                 adapter_s_per_token=adapter / n, optimizer_s_per_step=optimizer)


def calibrate_run(config: Any, selection: Any, tokenizer: Any, kg: Any, model: Any) -> Rates:
    """:func:`calibrate` on the run's own material: its first two SFT question rows (no knowledge
    rows), and its eval prompts (the SFT questions' where it has none) each followed by the first
    half of its reference completion, so that the timed decoding steps attend over as much
    context as an answer's steps do on average.

    Why half an answer: a step reads the cache of every earlier token, and a trained model's
    answer is ~100 tokens on a ~130-token prompt; steps timed right after the prompt
    under-estimated the evaluations' steps by 5-10% in interleaved trials on a 2-core EPYC
    (family 25), and by 10% on average over six demo runs (docs/MEASUREMENTS.md)."""
    questions_only = config.sft.model_copy(update={"knowledge_epochs": 0})
    rows = sft_examples(selection.sft[:2], questions_only, kg=kg, seed=config.seed)
    formatted = [format_example(tokenizer, u, c) for u, c in rows]

    def halfway(q: Any) -> str:
        answer = tokenizer(reference_completion(q), add_special_tokens=False)["input_ids"]
        return format_prompt(tokenizer, q.prompt) + tokenizer.decode(answer[:len(answer) // 2])

    return calibrate(model, tokenizer, [(e.prompt, e.completion) for e in formatted],
                     [halfway(q) for q in (selection.eval or selection.sft)[:CALIBRATION_ROWS]],
                     samples=config.rsft.k_samples)


def minutes(seconds: float) -> str:
    """``"4 min 05 s"``, or ``"45 s"`` under a minute.

    >>> minutes(245.2), minutes(45)
    ('4 min 05 s', '45 s')
    """
    s = round(seconds)
    return f"{s // 60} min {s % 60:02d} s" if s >= 60 else f"{s} s"


def startup_estimate(config: Any, selection: Any, tokenizer: Any, kg: Any, model: Any, console: Any,
                     done: Sequence[str] = ()) -> dict[str, Any]:
    """Plan, calibrate and print how long each phase still to run will take here; returns what
    ``meta.json`` records as ``estimate`` (the rates, each entry's seconds, the total)."""
    t0 = time.perf_counter()
    plan = plan_work(config, selection, tokenizer, kg)
    rates = calibrate_run(config, selection, tokenizer, kg, model)
    # a phase with work to do never reads "0 s" (a tiny run on a quick CPU rounds under 0.05 s)
    seconds = {k: max(round(v, 1), 0.1) if v > 0 else 0.0 for k, v in estimate(plan, rates).items()
               if k.removesuffix("_eval") not in done}
    table = Table(title=f"estimated time on this machine (calibrated in {time.perf_counter() - t0:.0f} s)",
                  title_justify="left")
    for column in ("phase", "trains on", "decodes", "estimate"):
        table.add_column(column, justify="left" if column == "phase" else "right")
    for name, s in seconds.items():
        work = plan[name]
        table.add_row(name, f"{work.train_tokens:,} tok" if work.train_tokens else "",
                      " + ".join(f"{steps:,} steps x {rows}{label}" for steps, rows, label in
                                 ((work.sample_decode_steps, work.sample_decode_rows, " sampled"),
                                  (work.decode_steps, work.decode_rows, "")) if steps), minutes(s))
    table.add_row("[bold]total", "", "", f"[bold]{minutes(sum(seconds.values()))}")
    console.print(table)
    return {"rates": rates.as_dict(), "seconds": seconds, "total_s": round(sum(seconds.values()), 1),
            "work": {k: asdict(v) for k, v in plan.items()}}
