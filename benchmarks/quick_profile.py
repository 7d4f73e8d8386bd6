"""The quick profile's cost on this CPU: phase times and tokens per second against the measured matmul peak.

    .venv/bin/python benchmarks/quick_profile.py                      # calibration + estimate, ~1 minute
    .venv/bin/python benchmarks/quick_profile.py --run RUN [--seed N]  # and a finished run's measured phases

1. **Peak**: the best of several 2048 x 2048 x 2048 matmuls in fp32 and in bf16 (GFLOP/s), the
   physical limit that training and decoding arithmetic can approach on this CPU with torch.
2. **Rates**: ``library.train.estimate.calibrate`` on the embedded model, exactly as ``kgr train``
   runs it at start-up: a forward and backward pass over two SFT rows in the profile's training
   precision (tokens/s, and GFLOP/s at 6 x parameters per token, as a share of the fp32 peak) and the
   generator decoding 32 eval prompts (tokens/s, and GFLOP/s at 2 x parameters per token, as
   a share of the generation precision's peak).
3. **Estimate**: ``plan_work`` over the quick profile's own rows and questions, timed by those rates:
   seconds per phase and evaluation.
4. With ``--run``: that run's measured seconds per entry (``metrics.json`` ``timings``), its SFT
   tokens per second and GFLOP/s over the whole phase (optimizer, logging and saving included),
   and the estimate's error per entry.

The last line is one JSON object. ``--run`` counts tokens from today's data files: give it a run of
them (same prompts) and of this CPU; a run measured on another CPU compares with its own
``meta.json`` ``estimate``, not with this one.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def matmul_peak(dtype, n: int = 2048, repeats: int = 5) -> float:
    """GFLOP/s of the best of ``repeats`` n x n x n matmuls in ``dtype``."""
    import torch

    a, b = torch.randn(n, n).to(dtype), torch.randn(n, n).to(dtype)
    a @ b  # warm-up
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - start)
    return 2 * n ** 3 / best / 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--profile", default="quick")
    parser.add_argument("--run", type=Path, default=None, help="a finished run of the profile to compare with")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=None, help="the run's seed (it draws the rows counted)")
    parser.add_argument("--precision", default=None, help="training precision, as kgr train --precision")
    args = parser.parse_args()

    import torch

    from library.config import load_config
    from library.model.load import load_model
    from library.model.precision import compute_precision, generation_precision, run_precision, sampling_precision
    from library.train.data import load_data, make_selection
    from library.train.estimate import calibrate_run, estimate, plan_work

    torch.set_num_threads(args.threads)
    peak = {"float32": matmul_peak(torch.float32), "bfloat16": matmul_peak(torch.bfloat16)}
    overrides = {k: v for k, v in (("seed", args.seed), ("precision", args.precision)) if v is not None}
    config = load_config(args.profile, overrides)
    data = load_data(config)
    selection = make_selection(config, data)
    model, tokenizer = load_model(config.model)
    params = sum(p.numel() for p in model.parameters())
    with run_precision(config):
        gen_precision, train_precision, samp_precision = generation_precision(), compute_precision(), sampling_precision()
        plan = plan_work(config, selection, tokenizer, data.kg)
        rates = calibrate_run(config, selection, tokenizer, data.kg, model)
    seconds = estimate(plan, rates)
    train_tok_s = 1 / rates.train_s_per_token
    decode_tok_s = rates.decode_rows / rates.decode_s_per_step
    out = {
        "benchmark": "quick_profile", "profile": config.profile, "threads": args.threads,
        "params": params, "peak_gflops": {k: round(v, 1) for k, v in peak.items()},
        "generation_precision": gen_precision, "train_precision": train_precision,
        "train_tok_s": round(train_tok_s, 1),
        "train_gflops": round(6 * params * train_tok_s / 1e9, 1),
        "train_share_of_fp32_peak": round(6 * params * train_tok_s / 1e9 / peak["float32"], 3),
        "decode_tok_s_at_rows": [round(decode_tok_s, 1), rates.decode_rows],
        "decode_share_of_peak": round(2 * params * decode_tok_s / 1e9 / peak[gen_precision], 3),
        "sampling_precision": samp_precision,
        "sampling_decode_tok_s_at_rows": [round(rates.decode_rows / rates.sampling_decode_s_per_step(), 1), rates.decode_rows],
        "prefill_tok_s": round(1 / rates.prefill_s_per_token, 1) if rates.prefill_s_per_token else None,
        "fp32_forward_tok_s": round(1 / rates.forward_s_per_token, 1),
        "estimate_s": {k: round(v, 1) for k, v in seconds.items()},
        "estimate_total_s": round(sum(seconds.values()), 1),
        "sft_train_tokens": plan["sft"].train_tokens,
    }
    print(f"peak: fp32 {peak['float32']:.0f} GFLOP/s, bf16 {peak['bfloat16']:.0f} GFLOP/s")
    print(f"training (fwd+bwd, {out['train_precision']}): {train_tok_s:.0f} tok/s = {out['train_gflops']:.0f} GFLOP/s "
          f"({100 * out['train_share_of_fp32_peak']:.0f}% of the fp32 peak)")
    print(f"decoding ({gen_precision}, {rates.decode_rows} rows): {decode_tok_s:.0f} tok/s "
          f"({100 * out['decode_share_of_peak']:.0f}% of the {gen_precision} peak)")
    if samp_precision != gen_precision:
        print(f"sampling ({samp_precision}, {rates.decode_rows} rows): "
              f"{out['sampling_decode_tok_s_at_rows'][0]:.0f} tok/s")
    for name, s in seconds.items():
        print(f"  estimate {name:<12} {s:7.0f} s")
    print(f"  estimate total        {out['estimate_total_s']:7.0f} s")
    if args.run is not None:
        metrics = json.loads((args.run / "metrics.json").read_text())
        timings = {k: v for k, v in metrics["timings"].items() if k != "total"}
        sft_s = metrics["training"]["sft"]["seconds"]
        out["run"] = str(args.run)
        out["measured_s"] = timings
        out["measured_total_s"] = round(sum(timings.values()), 1)
        out["sft_measured_tok_s"] = round(plan["sft"].train_tokens / sft_s, 1)
        out["sft_measured_share_of_fp32_peak"] = round(6 * params * plan["sft"].train_tokens / sft_s / 1e9
                                                       / peak["float32"], 3)
        out["estimate_error"] = {k: round(seconds[k] / v - 1, 3) for k, v in timings.items() if k in seconds and v}
        print(f"{args.run}: measured {out['measured_total_s']:.0f} s; SFT {out['sft_measured_tok_s']:.0f} tok/s "
              f"({100 * out['sft_measured_share_of_fp32_peak']:.0f}% of the fp32 peak)")
        for k, v in timings.items():
            print(f"  measured {k:<12} {v:7.0f} s   estimate {seconds.get(k, float('nan')):7.0f} s")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
