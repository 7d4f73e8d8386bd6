"""bf16 against fp32 generation for a trained model: same answers? same accuracy? how much faster?

Usage::

    .venv/bin/python -m research.sweeps.precision_agreement                      # data/runs/quick, SFT model
    .venv/bin/python -m research.sweeps.precision_agreement --run data/runs/reference --phase grpo

Loads a phase's trained model from a run folder (its adapters are git-ignored: the run must have
been trained on this machine), answers the run's own eval questions greedily with the pipeline's
generator (``library.model.generate``) twice - float32 weights, then a bfloat16 copy - scores both with
the one correctness rule, and reports: identical completions, identical answers, each accuracy,
the paired difference (bf16 - fp32) with its 95% bootstrap interval, and the seconds of each
pass. The last line is one JSON object with those figures.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", default="data/runs/quick")
    ap.add_argument("--phase", default="sft", choices=["sft", "rsft", "grpo"])
    ap.add_argument("--n", type=int, default=None, help="first N of the run's eval questions (default all)")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()

    import torch

    from library.experiments import run_profile
    from library.runs.folder import RunDir
    from library.stats import paired_difference
    from library.model.generate import GenerationStats, generate_completions
    from library.model.load import load_model
    from library.scoring.reward import RewardModel
    from library.train.checkpoints import load_adapter, load_full_model
    from library.train.data import load_data, make_selection

    torch.set_num_threads(args.threads)
    run = REPO / args.run
    folder = RunDir.open(run)
    meta = folder.read_meta()
    cfg = run_profile(folder)  # the run's own profile, seed and model
    data = load_data(cfg)
    selection = make_selection(cfg, data)
    wanted = meta["selection"]["eval"]["ids"]
    by_id = {q.id: q for q in selection.eval}
    questions = [by_id[i] for i in wanted if i in by_id][: args.n]
    if len(questions) != len(wanted[: args.n]):
        raise SystemExit(f"{run}: {len(wanted) - len(questions)} eval ids of meta.json are not in data/eval.jsonl "
                         "(rebuild the data with the run's seed: kgr data)")
    base, tok = load_model(cfg.model)
    adapters = run / "adapters"
    sft = adapters / "sft"
    if not sft.exists():
        raise SystemExit(f"{sft} does not exist: adapters are not committed; train the run on this machine first")
    model = load_full_model(sft) if (sft / "config.json").exists() and not (sft / "adapter_config.json").exists() \
        else load_adapter(base, sft, trainable=False)
    if args.phase != "sft":
        model = load_adapter(model, adapters / args.phase, trainable=False)
    reward = RewardModel.from_preset(data.kg, cfg.eval.reward_preset)
    prompts = [q.prompt for q in questions]

    texts, correct, seconds = {}, {}, {}
    for precision in ("float32", "bfloat16"):
        generate_completions(model, tok, prompts[:2], max_new_tokens=4, progress=False, precision=precision)  # warm-up
        stats = GenerationStats()
        start = time.perf_counter()
        outs = generate_completions(model, tok, prompts, max_new_tokens=cfg.eval.max_new_tokens, do_sample=False,
                                    batch_size=cfg.eval.batch_size, progress=True, stats=stats, precision=precision)
        seconds[precision] = time.perf_counter() - start
        texts[precision] = [group[0].text for group in outs]
        correct[precision] = [reward.score(q, t).correct for q, t in zip(questions, texts[precision])]
        print(f"{precision}: {sum(correct[precision])}/{len(questions)} correct, {seconds[precision]:.1f} s, "
              f"{stats.tokens_per_second:.1f} generated tok/s", flush=True)
    answers = {p: [reward.score(q, t).parsed.answer for q, t in zip(questions, texts[p])] for p in texts}
    diff = paired_difference(correct["float32"], correct["bfloat16"])
    result = {
        "run": args.run, "phase": args.phase, "n": len(questions),
        "identical_completions": sum(a == b for a, b in zip(texts["float32"], texts["bfloat16"])),
        "identical_answers": sum(a == b for a, b in zip(answers["float32"], answers["bfloat16"])),
        "fp32_accuracy": round(diff["accuracy_a"], 4), "bf16_accuracy": round(diff["accuracy_b"], 4),
        "bf16_minus_fp32": round(diff["diff"], 4), "ci95": [round(x, 4) for x in diff["ci"]],
        "discordant": diff["discordant"],
        "fp32_seconds": round(seconds["float32"], 1), "bf16_seconds": round(seconds["bfloat16"], 1),
        "speedup": round(seconds["float32"] / seconds["bfloat16"], 2), "threads": args.threads,
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
