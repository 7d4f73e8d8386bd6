"""SFT throughput: real (non-pad) tokens per second, the first version's settings against the pipeline's.

Usage::

    .venv/bin/python benchmarks/training.py              # embedded SmolLM2-135M, ~3 minutes
    .venv/bin/python benchmarks/training.py --model tiny # smoke run

Both cases run ``--steps`` optimizer steps of TRL's SFTTrainer through ``library.train.sft``, in the
same process, on the same machine state:

- ``baseline``: the first version's SFT: LoRA r=16 on all projections, batches of 8 question
  rows padded to the longest (pad tokens computed and masked), lr 2e-4, TRL's own loss;
- ``baseline_pipeline_loss``: the same LoRA batches with the pipeline's loss
  (``library.train.finetune.completion_positions_loss``), the figure for LoRA SFT (``lora_real_tok_s``);
- ``pipeline_default_malloc``: the quick profile's SFT settings (``library/profiles/quick.yaml``):
  the knowledge rows and question rows it trains on, padding-free batches (one flat sequence, no
  pad token computed), full fine-tuning or LoRA as configured, fused AdamW; glibc's default
  allocator settings (run it without ``MALLOC_MMAP_MAX_`` in the environment, as ``make bench`` does);
- ``pipeline_trl_loss``: the same rows after ``library.model.precision.keep_freed_memory()``, with TRL's own
  SFT loss (on CPU its fused LM head projects every position, prompt tokens included);
- ``pipeline_float32`` (only when ``--precision`` resolves to bfloat16): the pipeline in float32;
- ``pipeline``: the same, with the pipeline's loss (``library.train.finetune.completion_positions_loss``:
  only the scored positions go through the LM head), as ``kgr train`` runs: in the compute
  precision that ``precision: auto`` resolves to here (bf16 autocast on an AMX CPU).
- ``rsft_packed`` / ``rsft_rows`` (first; ``--only-rsft`` runs them alone): RSFT's shape, a LoRA
  adapter on padding-free batches of 8 question rows, with the rows attending as one sequence
  under a block-diagonal mask against row by row (``library/train/packing.py``, as ``kgr train``
  runs), ``--rsft-steps`` steps each, alternated ``--rsft-rounds`` times on fresh weights.

The LoRA and pipeline cases run in ``--precision`` (default auto, as ``kgr train``); the
first version's case always in float32.

Real tokens are the tokens of the rows trained on (prompt and completion; padding excluded),
counted from the rows themselves, over the time of all steps. The last line
is one JSON object: ``real_tok_s`` (pipeline), ``baseline_real_tok_s``, ``ratio``, the
padded share of the baseline's computed tokens, ``default_malloc_real_tok_s`` and
``trl_loss_real_tok_s``, ``precision`` and ``float32_real_tok_s``, and the RSFT cases' best
seconds a step (``rsft_packed_s_per_step``, ``rsft_rows_s_per_step``) and their ratio (``rsft_speedup``).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def measure(name: str, model, tok, rows: list[dict], *, steps: int, batch_size: int, padding_free: bool,
            full: bool, lora, learning_rate: float, trl_loss: bool = False, precision: str = "float32") -> dict:
    import types

    from library.model.precision import using_precision

    from transformers import TrainerCallback
    from trl import SFTTrainer

    from library.train.finetune import build_sft_trainer

    times: list[float] = []

    class Clock(TrainerCallback):
        def on_step_begin(self, args, state, control, **kw):
            self.t0 = time.perf_counter()

        def on_step_end(self, args, state, control, **kw):
            times.append(time.perf_counter() - self.t0)

    with tempfile.TemporaryDirectory() as tmp, using_precision(precision):
        trainer = build_sft_trainer(model, tok, rows[: steps * batch_size], ckpt_dir=Path(tmp), learning_rate=learning_rate,
                                    max_steps=steps, batch_size=batch_size, max_length=512, seed=0, lora=lora, full=full,
                                    padding_free=padding_free, save_steps=10_000, callbacks=[Clock()])
        if trl_loss:  # TRL's own loss: on CPU its fused head projects every position, prompt included
            trainer.compute_loss = types.MethodType(SFTTrainer.compute_loss, trainer)
        # Every row is trained on exactly once (steps x batch_size rows), so the real tokens are
        # the rows' lengths; the computed tokens (padding included) come from the collated batches.
        real = sum(len(ex["input_ids"]) for ex in trainer.train_dataset)
        computed = sum(batch["input_ids"].numel() for batch in trainer.get_train_dataloader())
        trainer.train()
    seconds = sum(times)
    result = {"case": name, "steps": steps, "batch_size": batch_size, "padding_free": padding_free, "full": full,
              "precision": precision, "seconds_per_step": round(seconds / max(1, len(times)), 3),
              "real_tok_s": round(real / seconds, 1),
              "pad_share": round(1 - real / computed, 3)}
    print(json.dumps(result), flush=True)
    if hasattr(trainer.model, "unload"):
        trainer.model.unload()
    return result


def rsft_cases(cfg, questions, *, rounds: int, steps: int, precision: str) -> dict:
    """RSFT's training shape (a LoRA adapter, padding-free batches of ``rsft.batch_size`` question
    rows) with the packed rows attending as one sequence under a block-diagonal mask
    (``rsft_packed``, as before library/train/packing.py) against row by row (``rsft_rows``, as
    ``kgr train`` runs), alternated ``rounds`` times on fresh weights."""
    if rounds <= 0:
        return {}
    import library.train.packing as packing
    from library.model.load import load_model
    from library.train.sft import question_rows

    runs: dict[str, list[dict]] = {"rsft_packed": [], "rsft_rows": []}
    default = packing.MIN_ROWS
    try:
        for _ in range(rounds):
            for name in runs:
                packing.MIN_ROWS = 10**9 if name == "rsft_packed" else default
                model, tok = load_model(cfg.model)
                rows = question_rows(tok, [q for q in questions if q.hop_len == 3][: steps * cfg.rsft.batch_size])
                runs[name].append(measure(name, model, tok, rows, steps=steps, batch_size=cfg.rsft.batch_size,
                                          padding_free=True, full=False, lora=cfg.sft.lora,
                                          learning_rate=cfg.rsft.learning_rate, precision=precision))
    finally:
        packing.MIN_ROWS = default
    best = {name: min(r["seconds_per_step"] for r in rs) for name, rs in runs.items()}
    return {"rsft_packed_s_per_step": best["rsft_packed"], "rsft_rows_s_per_step": best["rsft_rows"],
            "rsft_speedup": round(best["rsft_packed"] / best["rsft_rows"], 2)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="embedded")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--rsft-steps", type=int, default=6, help="optimizer steps of each RSFT-shaped case")
    ap.add_argument("--rsft-rounds", type=int, default=2,
                    help="alternated rounds of the RSFT-shaped cases (0 skips them)")
    ap.add_argument("--only-rsft", action="store_true", help="run the RSFT-shaped cases alone")
    ap.add_argument("--precision", default="auto", help="compute precision of the pipeline cases (auto | float32 | "
                                                        "bfloat16); the first version's case is always float32")
    args = ap.parse_args()

    import torch

    from library.config import LoraSettings, load_config
    from library.model.load import load_model
    from library.model.precision import keep_freed_memory, resolve_precision
    from library.train.finetune import sft_rows
    from library.train.sft import question_rows, sft_examples
    from library.train.data import load_data, make_selection

    torch.set_num_threads(args.threads)
    precision = resolve_precision(args.precision)
    cfg = load_config("quick", overrides={"model": args.model})
    data = load_data(cfg)
    selection = make_selection(cfg, data)
    model, tok = load_model(cfg.model)
    rng = random.Random(0)

    questions = list(selection.sft)
    rng.shuffle(questions)
    rsft = rsft_cases(cfg, questions, rounds=args.rsft_rounds, steps=args.rsft_steps, precision=precision)
    if args.only_rsft:
        print(json.dumps({**rsft, "precision": precision, "threads": args.threads, "model": args.model}))
        return
    baseline_rows = question_rows(tok, questions[: args.steps * 8])
    base = measure("baseline", model, tok, baseline_rows, steps=args.steps, batch_size=8, padding_free=False,
                   full=False, lora=LoraSettings(r=16, alpha=16), learning_rate=2e-4, trl_loss=True)

    # The first version's shape (LoRA r=16, padded batches of 8) with the pipeline's loss: what
    # the loss alone does for LoRA SFT (RSFT trains LoRA adapters this way)
    model, tok = load_model(cfg.model)
    lora_ours = measure("baseline_pipeline_loss", model, tok, baseline_rows, steps=args.steps, batch_size=8,
                        padding_free=False, full=False, lora=LoraSettings(r=16, alpha=16), learning_rate=2e-4,
                        precision=precision)

    examples = sft_examples(selection.sft, cfg.sft, kg=data.kg, seed=cfg.seed)
    rng.shuffle(examples)
    pipeline_rows = sft_rows(tok, examples)
    measured = {}
    names = ["pipeline_default_malloc", "pipeline_trl_loss", "pipeline"]
    if precision != "float32":
        names.insert(2, "pipeline_float32")  # the same run's before/after for the compute precision
    for name in names:
        if name == "pipeline_trl_loss":
            keep_freed_memory()
        model, tok = load_model(cfg.model)  # fresh weights for each case
        measured[name] = measure(name, model, tok, pipeline_rows, steps=args.steps, batch_size=cfg.sft.batch_size,
                                 padding_free=cfg.sft.padding_free, full=cfg.sft.method == "full",
                                 lora=cfg.sft.lora, learning_rate=cfg.sft.learning_rate,
                                 trl_loss=name == "pipeline_trl_loss",
                                 precision="float32" if name == "pipeline_float32" else precision)
    pipe = measured["pipeline"]
    print(json.dumps({"real_tok_s": pipe["real_tok_s"], "baseline_real_tok_s": base["real_tok_s"],
                      "ratio": round(pipe["real_tok_s"] / base["real_tok_s"], 2),
                      "default_malloc_real_tok_s": measured["pipeline_default_malloc"]["real_tok_s"],
                      "trl_loss_real_tok_s": measured["pipeline_trl_loss"]["real_tok_s"],
                      "lora_real_tok_s": lora_ours["real_tok_s"],
                      "precision": precision,
                      "float32_real_tok_s": measured.get("pipeline_float32", pipe)["real_tok_s"],
                      "lora_ratio": round(lora_ours["real_tok_s"] / base["real_tok_s"], 2),
                      "malloc_env_set": "MALLOC_MMAP_MAX_" in os.environ,
                      "baseline_pad_share": base["pad_share"], "pipeline_method": cfg.sft.method, **rsft,
                      "threads": args.threads, "model": args.model}))


if __name__ == "__main__":
    main()
