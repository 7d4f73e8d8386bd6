"""RSFT sweep on the dev split: which RL prompts move a saved SFT model on 4-5-hop questions?

The distribution experiment showed RSFT on the model's own 4-5-hop traces lifting eval by ~15
points, while RSFT on 1-3-hop prompts the SFT model already solves changes nothing (docs/FINDINGS.md
findings 20-21). The main pipeline may train on 1-3 hops only, so the question this script asks
is whether RSFT on prompts *one hop longer than SFT demonstrated* (e.g. SFT on 1-2-hop rows,
RSFT on 3-hop prompts) extends the procedure the way the long traces did.

Each case starts from the same SFT model (``recipe_sweep.py --save``), samples its prompts with
the pipeline's own selection (``make_selection``: training questions outside SFT and the GRPO
pool, filtered by ``rsft.prompt_hops``), trains a fresh LoRA adapter with the pipeline's
``run_rsft``, and measures greedy accuracy on ``--n-dev`` dev questions (4-5 hops; eval.jsonl
is never read), paired against the SFT model on the same questions (bootstrap over questions).

Usage::

    .venv/bin/python -m research.sweeps.recipe_sweep --cases copy_hop12_full_lr2e-4_k2_q600 --save /tmp/sft
    .venv/bin/python -m research.sweeps.rsft_sweep --start /tmp/sft/copy_hop12_full_lr2e-4_k2_q600 \\
        --sft-case copy_hop12_full_lr2e-4_k2_q600 --cases 3:128:5e-4,123:128:5e-4

A case is ``<prompt hops>:<prompts>:<learning rate>`` ("3" = 3-hop prompts, "123" = 1-3 hops).
``--seed`` re-runs the cases with another RSFT seed (sampling and training only; the case name
gets ``_s<seed>``), so a difference between cases can be checked against RSFT's own variance.
``--sft-seed N`` names the seed ``--start`` was trained with (``recipe_sweep.py --seed N``), so its
SFT rows are the ones left out of RSFT's prompts; ``--data-dir`` reads other question splits (the
keyed cases of ``step_order_experiment.py`` train on ``data/keyed``) and ``--episodes DIR`` keeps
the dev answers of the start and of each case for pairing (``kgr diagnose``'s ``repair_block``).
One JSON line per case goes to ``--out`` as it finishes; the last line printed is one JSON object
with every case's figures.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def parse_case(text: str) -> dict:
    """``"3:128:5e-4"`` -> the case's RSFT overrides.

    >>> parse_case("23:64:1e-4")
    {'prompt_hops': [2, 3], 'n_prompts': 64, 'learning_rate': 0.0001}
    """
    hops, n, lr = text.split(":")
    return {"prompt_hops": [int(h) for h in hops], "n_prompts": int(n), "learning_rate": float(lr)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--start", type=Path, required=True, help="a fully fine-tuned SFT model folder")
    ap.add_argument("--sft-case", required=True,
                    help="the recipe_sweep or step_order_experiment case that trained --start (its SFT "
                         "questions are left out of RSFT; a step-order case reads data/keyed unless --data-dir)")
    ap.add_argument("--cases", default="3:128:5e-4", help="comma-separated <hops>:<prompts>:<lr> RSFT cases")
    ap.add_argument("--profile", default="quick")
    ap.add_argument("--model", default=None, help="the model --start was trained from (its tokenizer; default: the profile's)")
    ap.add_argument("--k-samples", type=int, default=4)
    ap.add_argument("--epochs", type=float, default=2.0, help="passes over the winners (sets max_steps)")
    ap.add_argument("--n-dev", type=int, default=100, help="dev questions (hop-balanced)")
    ap.add_argument("--seed", type=int, default=None,
                    help="seed of RSFT's sampling and training (default: the SFT's); the prompts, "
                         "SFT's questions and the dev questions stay the SFT seed's")
    ap.add_argument("--sft-seed", type=int, default=None,
                    help="the seed --start was trained with (default: the profile's): its SFT rows and RSFT's prompts")
    ap.add_argument("--data-dir", type=Path, default=None,
                    help="question splits to read (default: the case's: the profile's, or data/keyed for a step-order case)")
    ap.add_argument("--eval-max-new-tokens", type=int, default=0, help="dev generation length (0: the profile's)")
    ap.add_argument("--episodes", type=Path, default=None,
                    help="keep the dev episodes as EPISODES/rsft-<sft case>-seed<N>-<case>.jsonl (and -sft.jsonl)")
    ap.add_argument("--out", type=Path, default=REPO / "data" / "experiments" / "sweeps" / "rsft_sweep.jsonl")
    args = ap.parse_args()

    import math

    import torch
    from transformers import set_seed

    from research.sweeps.dev_judge import DevJudge, record
    from research.sweeps.recipe_sweep import CASES, sweep_overrides
    from research.sweeps.step_order_experiment import CASES as ORDER_CASES, DATA_DIR as ORDER_DATA_DIR
    from library.config import load_config
    from library.model.load import load_tokenizer
    from library.scoring.reward import RewardModel
    from library.train.rsft import run_rsft
    from library.model.precision import run_precision
    from library.runs.folder import RunDir
    from library.train.checkpoints import add_lora, load_full_model
    from library.train.data import load_data, make_selection

    args.out.parent.mkdir(parents=True, exist_ok=True)
    if args.sft_case not in CASES and args.sft_case not in ORDER_CASES:
        ap.error(f"--sft-case {args.sft_case!r} is no case of recipe_sweep.py or step_order_experiment.py")
    if args.sft_case in ORDER_CASES and args.data_dir is None:
        args.data_dir = ORDER_DATA_DIR  # the splits the case was trained on
    common = sweep_overrides(ORDER_CASES[args.sft_case] if args.sft_case in ORDER_CASES else CASES[args.sft_case],
                             model=args.model, seed=args.sft_seed, data_dir=args.data_dir,
                             eval_max_new_tokens=args.eval_max_new_tokens)
    cfg0 = load_config(args.profile, overrides=common)
    keep = (lambda label: args.episodes / f"rsft-{args.sft_case}-seed{cfg0.seed}-{label}.jsonl") if args.episodes else (lambda label: None)
    torch.set_num_threads(cfg0.threads or torch.get_num_threads())
    data = load_data(cfg0)
    judge = DevJudge(cfg0, data, load_tokenizer(cfg0.model), args.n_dev)
    tok = judge.tokenizer
    base = load_full_model(args.start)

    finals: dict[str, dict] = {}
    with run_precision(cfg0), tempfile.TemporaryDirectory() as tmp:  # the profile's precisions, as a run
        t0 = time.perf_counter()
        sft_block, sft_eps = judge.episodes(base, Path(tmp), "sft", phase="sft", keep=keep("sft"))
        finals["sft"] = {"dev_accuracy": sft_block["accuracy"], "dev_ci": sft_block.get("accuracy_ci"),
                         "by_hop": sft_block.get("by_hop"), "eval_seconds": round(time.perf_counter() - t0, 1)}
        print(json.dumps({"case": "sft", **finals["sft"]}), flush=True)
        for text in args.cases.split(","):
            case = parse_case(text)
            name = "rsft_h{}_n{}_lr{:g}".format("".join(map(str, case["prompt_hops"])), case["n_prompts"],
                                                 case["learning_rate"]) + (f"_s{args.seed}" if args.seed is not None else "")
            cfg = load_config(args.profile, overrides={**common, "rsft": {**case, "k_samples": args.k_samples}})
            selection = make_selection(cfg, data)
            rl_reward = RewardModel.from_preset(data.kg, cfg.rsft.reward_preset)
            # max_steps from the expected winners: ~epochs passes at the profile's batch size
            steps = max(1, math.ceil(args.epochs * len(selection.rsft_prompts) / cfg.rsft.batch_size))
            settings = cfg.rsft.model_copy(update={"max_steps": steps, "save_steps": steps})
            seed = cfg.seed if args.seed is None else args.seed
            set_seed(seed)
            policy = add_lora(base, cfg.sft.lora)
            run = RunDir.create(Path(tmp), f"{name}-train")
            t0 = time.perf_counter()
            model, res = run_rsft(policy, tok, selection.rsft_prompts, settings, rl_reward, run,
                                  ckpt_dir=Path(tmp) / name / "ckpt", adapter_dir=Path(tmp) / name / "adapter",
                                  seed=seed, forbidden_ids=selection.forbidden_ids, resume=False)
            train_s = time.perf_counter() - t0
            model.eval()
            block, eps = judge.episodes(model, Path(tmp), name, keep=keep(name))
            line = {"case": name, "sft_case": args.sft_case, "sft_seed": cfg0.seed, "data_dir": str(cfg0.data_dir), **case, "k_samples": args.k_samples, "seed": seed, "max_steps": steps,
                    "n_prompts": res.n_prompts, "n_winners": res.n_winners,
                    "sample_accuracy": round(res.sample_accuracy, 3),
                    "sampling_seconds": round(res.seconds_sampling, 1), "train_seconds": round(train_s, 1),
                    **judge.figures(block, sft_eps, eps, name)}
            base = model.unload()  # the SFT weights without this case's adapter, for the next case
            record(args.out, line)
            finals[name] = {k: line[k] for k in ("dev_accuracy", "dev_ci", "vs_sft", "n_winners", "train_seconds")}
    print(json.dumps(finals))


if __name__ == "__main__":
    main()
