"""Does the same seed draw the same RL samples on another CPU? fp32 against bf16 sampling.

RSFT's samples (and GRPO's groups) are drawn by the
pipeline's generator; until this measurement (docs/FINDINGS.md finding 54) they were drawn at the
generation precision (bf16 where fast), now at ``generation.sampling_precision`` (fp32 by
default). Two CPUs round differently: their kernels
(matmul, softmax, attention) differ by instruction set, so a logit can land on the other side
of a sampling boundary and the rest of the completion differs. docs/FINDINGS.md finding 52:
the same fp32-trained SFT model on two EPYCs drew 129 of 256 equal RSFT samples in bf16, and
RSFT's gain moved from +5.3 to +0.7 points.

Another CPU is emulated here on one machine by restricting the kernels' instruction sets in
a fresh process for each draw (environment variables read when the libraries load):

- ``native``: this CPU's own kernels;
- ``aten-avx2``: PyTorch's own vectorised kernels (softmax, norms, attention) at AVX2, as on a
  CPU without AVX-512 (``ATEN_CPU_CAPABILITY=avx2``);
- ``mkl-compat``: MKL's fp32 matmuls on its portable code path (``MKL_CBWR=COMPATIBLE``), as
  on a CPU whose MKL dispatches to other kernels (an Intel CPU: MKL picks its AVX-512 kernels
  there, AVX2 ones on AMD);
- ``onednn-avx512``: oneDNN's bf16 matmuls without bf16 instructions (``ONEDNN_MAX_CPU_ISA=
  AVX512_CORE``), as on a CPU whose bf16 kernels differ (AMX against AVX512-BF16);
- ``avx2``: all three at once, an AVX2 laptop; ``threads1``: one thread instead of two.

Each draw samples RSFT's own prompts of a finished run from its SFT adapter with RSFT's
settings and seed, as the phase did, scores them with the one correctness rule and picks the
winners (``rsft.score_and_select``). Against the ``native`` draw of the same precision: equal
samples, equal winners, right samples; and the seconds of each draw.

    python -m research.sweeps.sampling_agreement data/experiments/quick-selection \\
        --profile data/experiments/quick-selection/profile.yaml --out data/experiments/quick-selection/sampling.jsonl

One JSON line per draw is appended to ``--out`` as it finishes; each also says how many of its
samples equal the run's own logged RSFT samples (``vs_run_log``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

#: Kernel restrictions that make this CPU compute as another kind would (see the module docstring).
VARIANTS: dict[str, dict[str, str]] = {
    "native": {},
    "aten-avx2": {"ATEN_CPU_CAPABILITY": "avx2"},
    "mkl-compat": {"MKL_CBWR": "COMPATIBLE"},
    "onednn-avx512": {"ONEDNN_MAX_CPU_ISA": "AVX512_CORE"},
    "avx2": {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "COMPATIBLE", "ONEDNN_MAX_CPU_ISA": "AVX2"},
    "threads1": {},
}
DEFAULT_DRAWS = ("native:float32,aten-avx2:float32,mkl-compat:float32,avx2:float32,threads1:float32,"
                 "native:bfloat16,aten-avx2:bfloat16,onednn-avx512:bfloat16,threads1:bfloat16")


def agreement(ref: list[list[str]], other: list[list[str]]) -> dict[str, int]:
    """Equal samples (character for character) and equal groups of two draws of the same prompts.

    >>> agreement([["a", "b"], ["c", "d"]], [["a", "b"], ["c", "x"]])
    {'samples': 4, 'equal_samples': 3, 'groups': 2, 'equal_groups': 1}
    """
    pairs = [(a, b) for ga, gb in zip(ref, other, strict=True) for a, b in zip(ga, gb, strict=True)]
    return {"samples": len(pairs), "equal_samples": sum(a == b for a, b in pairs),
            "groups": len(ref), "equal_groups": sum(ga == gb for ga, gb in zip(ref, other))}


def rsft_log(run: Path) -> dict[str, list[str]]:
    """The run's own RSFT samples by prompt, in sample order (which draw reproduces the run?)."""
    from library.runs.folder import RunDir

    groups: dict[str, list] = {}
    for ep in RunDir.open(run).iter_episodes(phase="rsft"):
        if ep.kind == "rollout":
            groups.setdefault(ep.ex_id, []).append(ep)
    return {i: [e.completion for e in sorted(g, key=lambda e: e.sample_idx)] for i, g in groups.items()}


def draw(args) -> dict:
    """One draw in this process (the parent set its environment): RSFT's samples, scored."""
    import torch

    from library.experiments import run_profile, start_backend
    from library.model.precision import using_precision
    from library.runs.folder import RunDir
    from library.scoring.reward import RewardModel
    from library.train.rsft import sample_rsft, score_and_select

    torch.set_num_threads(1 if args.variant == "threads1" else args.threads)
    run = RunDir.open(args.run)
    config = run_profile(run, args.profile)
    with using_precision("float32", args.precision, sampling=args.precision):
        config, context, backend = start_backend(config, run)
        questions = context.selection.rsft_prompts[: args.n_prompts]
        model = backend.policy("sft")
        model.eval()
        t0 = time.perf_counter()
        samples = sample_rsft(model, context.tokenizer, questions, config.rsft, config.seed)
        seconds = time.perf_counter() - t0
    episodes, winners = score_and_select(questions, samples, RewardModel.from_preset(context.data.kg,
                                                                                    config.rsft.reward_preset))
    return {"variant": args.variant, "precision": args.precision, "env": VARIANTS[args.variant],
            "threads": torch.get_num_threads(), "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "n_prompts": len(questions), "k": config.rsft.k_samples, "seconds": round(seconds, 1),
            "right": sum(1 for e in episodes if e.correct), "winners": {q.id: c for q, c in winners},
            "samples": samples, "order": [q.id for q in questions]}


def main(argv: list[str] | None = None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", type=Path, help="a finished run folder (its SFT adapter samples)")
    ap.add_argument("--profile", required=True, help="the run's own profile")
    ap.add_argument("--draws", default=DEFAULT_DRAWS, help="<variant>:<float32|bfloat16>, comma-separated")
    ap.add_argument("--n-prompts", type=int, default=None, help="the first N of RSFT's prompts (default all)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--variant", help=argparse.SUPPRESS)  # a child process: one draw
    ap.add_argument("--precision", help=argparse.SUPPRESS)
    ap.add_argument("--child-out", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    if args.variant:
        args.child_out.write_text(json.dumps(draw(args)), encoding="utf-8")
        return []
    from research.sweeps.dev_judge import record

    draws = [tuple(d.strip().split(":")) for d in args.draws.split(",")]
    for variant, precision in draws:
        if variant not in VARIANTS or precision not in ("float32", "bfloat16"):
            raise SystemExit(f"--draws: {variant}:{precision}? variants {', '.join(VARIANTS)}; float32 or bfloat16")
    results: dict[tuple[str, str], dict] = {}
    logged = rsft_log(args.run)
    lines = []
    with tempfile.TemporaryDirectory() as tmp:
        for variant, precision in draws:
            child_out = Path(tmp) / f"{variant}-{precision}.json"
            cmd = [sys.executable, "-m", "research.sweeps.sampling_agreement", str(args.run),
                   "--profile", args.profile, "--threads", str(args.threads), "--variant", variant,
                   "--precision", precision, "--child-out", str(child_out), "--out", str(args.out)]
            if args.n_prompts:
                cmd += ["--n-prompts", str(args.n_prompts)]
            subprocess.run(cmd, check=True, env={**os.environ, **VARIANTS[variant]})
            result = json.loads(child_out.read_text(encoding="utf-8"))
            results[(variant, precision)] = result
            line = {k: v for k, v in result.items() if k not in ("samples", "winners", "order")}
            line["n_winners"] = len(result["winners"])
            ref = results.get(("native", precision))
            if ref is not None and variant != "native":
                line["vs_native"] = agreement(ref["samples"], result["samples"])
                line["vs_native"]["equal_winners"] = sum(result["winners"].get(i) == c for i, c in ref["winners"].items())
            other = results.get(("native", "float32" if precision == "bfloat16" else "bfloat16"))
            if variant == "native" and other is not None:
                line["vs_native_other_precision"] = agreement(other["samples"], result["samples"])
            if logged:
                line["vs_run_log"] = agreement([logged[q] for q in result["order"]], result["samples"])
            record(args.out, line)
            lines.append(line)
    return lines


if __name__ == "__main__":
    main()
