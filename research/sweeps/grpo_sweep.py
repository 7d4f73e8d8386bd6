"""GRPO learning-rate sweep on the dev split: can RL move a fully fine-tuned SFT model at all?

The reference run's GRPO (a fresh LoRA adapter at lr 2e-5) left every greedy eval answer
unchanged (KL <= 6e-5, docs/FINDINGS.md finding 13). This script starts each case from the same
saved SFT model (``recipe_sweep.py --save``), trains a fresh LoRA adapter with the pipeline's
own ``run_grpo`` on the pipeline's RL pool (training questions held out of SFT), and measures
greedy accuracy on ``--n-dev`` dev questions (4-5 hops; eval.jsonl is never read), paired
against the SFT model on the same questions (bootstrap over questions).

Usage::

    .venv/bin/python -m research.sweeps.recipe_sweep --cases cover_full_lr2e-4_k0_q1000 --save /tmp/sft
    .venv/bin/python -m research.sweeps.grpo_sweep --start /tmp/sft/cover_full_lr2e-4_k0_q1000 --cases 2e-5@0.6,2e-4@1.0

A case is ``<learning rate>@<sampling temperature>``: the rate sets how far a step moves the
adapter; the temperature sets how often a group of samples disagrees (a group whose samples all
get the same reward has zero advantage and teaches nothing).

One JSON line per case goes to ``--out`` as it finishes (with the per-step curve: reward, KL,
seconds); the last line printed is one JSON object with every case's figures.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--start", type=Path, required=True, help="a fully fine-tuned SFT model folder")
    ap.add_argument("--cases", default="2e-5@0.6,2e-4@0.6,1e-3@0.6,2e-4@1.0",
                    help="comma-separated <learning rate>@<temperature> GRPO cases")
    ap.add_argument("--profile", default="quick")
    ap.add_argument("--steps", type=int, default=12, help="GRPO optimizer steps per case")
    ap.add_argument("--prompts-per-step", type=int, default=4)
    ap.add_argument("--n-dev", type=int, default=100, help="dev questions (hop-balanced)")
    ap.add_argument("--out", type=Path, default=REPO / "data" / "experiments" / "sweeps" / "grpo_sweep.jsonl")
    args = ap.parse_args()

    import torch
    from transformers import set_seed

    from research.sweeps.dev_judge import DevJudge, record

    from library.config import load_config
    from library.train.grpo import run_grpo
    from library.model.load import load_tokenizer
    from library.scoring.reward import RewardModel
    from library.model.precision import run_precision
    from library.runs.folder import RunDir
    from library.train.checkpoints import add_lora, load_full_model
    from library.train.data import load_data, make_selection

    args.out.parent.mkdir(parents=True, exist_ok=True)
    cases = [(float(lr), float(temp)) for lr, temp in (c.split("@") for c in args.cases.split(","))]
    grpo = {"max_steps": args.steps, "prompts_per_step": args.prompts_per_step,
            "n_prompts": args.steps * args.prompts_per_step, "save_steps": args.steps, "init_from": "sft"}
    cfg = load_config(args.profile, overrides={"grpo": grpo})
    torch.set_num_threads(cfg.threads or torch.get_num_threads())
    data = load_data(cfg)
    selection = make_selection(cfg, data)
    judge = DevJudge(cfg, data, load_tokenizer(cfg.model), args.n_dev)
    tok = judge.tokenizer
    rl_reward = RewardModel.from_preset(data.kg, cfg.grpo.reward_preset)
    base = load_full_model(args.start)

    finals: dict[str, dict] = {}
    with run_precision(cfg), tempfile.TemporaryDirectory() as tmp:  # the profile's precisions, as a run
        t0 = time.perf_counter()
        sft_block, sft_eps = judge.episodes(base, Path(tmp), "sft", phase="grpo")
        finals["sft"] = {"dev_accuracy": sft_block["accuracy"], "dev_ci": sft_block.get("accuracy_ci"),
                         "by_hop": sft_block.get("by_hop"), "eval_seconds": round(time.perf_counter() - t0, 1)}
        print(json.dumps({"case": "sft", **finals["sft"]}), flush=True)
        for lr, temperature in cases:
            name = f"grpo_lr{lr:g}_t{temperature:g}"
            set_seed(cfg.seed)
            settings = cfg.grpo.model_copy(update={"learning_rate": lr, "temperature": temperature})
            policy = add_lora(base, cfg.sft.lora)
            run = RunDir.create(Path(tmp), f"{name}-train")
            t0 = time.perf_counter()
            model, res = run_grpo(policy, tok, selection.grpo_pool, settings, rl_reward, run,
                                  ckpt_dir=Path(tmp) / name / "ckpt", adapter_dir=Path(tmp) / name / "adapter",
                                  seed=cfg.seed, forbidden_ids=selection.forbidden_ids, resume=False)
            train_s = time.perf_counter() - t0
            model.eval()
            block, eps = judge.episodes(model, Path(tmp), name, phase="grpo")
            line = {"case": name, "learning_rate": lr, "temperature": temperature, "steps": res.steps, "train_seconds": round(train_s, 1),
                    **judge.figures(block, sft_eps, eps, name),
                    "frac_reward_zero_std": round(sum(p.get("frac_reward_zero_std", 0.0) for p in res.curve)
                                                  / max(1, len(res.curve)), 3),
                    "curve": [{k: p.get(k) for k in ("step", "reward_total", "accuracy", "frac_reward_zero_std", "kl", "loss")}
                              for p in res.curve]}
            record(args.out, line)
            finals[name] = {k: line[k] for k in ("dev_accuracy", "dev_ci", "vs_sft", "frac_reward_zero_std", "train_seconds")}
            base = model.unload()  # the SFT weights without this case's adapter, for the next case
    print(json.dumps(finals))


if __name__ == "__main__":
    main()
