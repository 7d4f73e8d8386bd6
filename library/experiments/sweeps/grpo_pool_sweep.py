"""GRPO on prompts chosen by pass rate, under the path reward and under correctness alone, judged on dev.

GRPO has changed next to no answer in any profile because its groups carry no advantage: the
policy solves its pool (docs/FINDINGS.md findings 20, 46, 47). This script gives it a pool with
something to learn (``grpo.pool.by_pass_rate``, library/train/pool.py: candidates the starting
policy answers right in some but not all of k samples), then trains GRPO from a finished run's
``grpo.init_from`` adapter once per arm (``<reward preset>@<seed>``: the same prompts, the seed
of GRPO's sampling and order), and judges every arm greedily on hop-balanced dev questions
(DevJudge; eval.jsonl is never read), paired against the starting policy and, preset against
preset, per seed and over seeds. It also re-estimates each arm's pass rates on the pool it
trained on (did RL move what it trained on?).

    python -m library.experiments.sweeps.grpo_pool_sweep data/experiments/quick-selection \\
        --profile data/experiments/quick-selection/profile.yaml \\
        --grpo '{"max_steps": 16, "prompts_per_step": 4, "num_generations": 8, "pool": {"by_pass_rate": true, "hops": [3]}}' \\
        --arms paper+edges@0,paper+edges+correctness@0 --out data/experiments/quick-selection/grpo_pool.jsonl

``--grpo`` overrides the profile's GRPO settings (not ``n_prompts`` or ``enabled``, which decide
SFT's rows: the run's selection must stay the run's); the seed is the run's own (its meta.json).
One JSON line per arm is appended to ``--out`` as it finishes, then one line with the pooled
comparisons; ``--episodes DIR`` keeps the dev answers (``start.jsonl``, ``<arm>.jsonl``) so that
arms of different runs can be paired over seeds later (docs/FINDINGS.md finding 63).
"""

from __future__ import annotations

import argparse
import json
import re
import tempfile
import time
from pathlib import Path


def parse_arms(text: str) -> list[tuple[str, int]]:
    """``"paper+edges@0,correctness@1"`` -> ``[("paper+edges", 0), ("correctness", 1)]``.

    >>> parse_arms("paper+edges@0, correctness@1")
    [('paper+edges', 0), ('correctness', 1)]
    """
    arms = []
    for part in text.split(","):
        preset, _, seed = part.strip().rpartition("@")
        if not preset or not seed.isdigit():
            raise ValueError(f"arm {part.strip()!r}: expected <reward preset>@<seed>")
        arms.append((preset, int(seed)))
    return arms


def heldout_questions(config, data, selection, n: int) -> list:
    """``n`` training questions of the pool's hops (hop-balanced) that no phase trains on: outside
    SFT's rows, RSFT's prompts, the held-out GRPO pool and the pass-rate candidates."""
    from library.questions.balance import select_balanced

    used = {q.id for qs in (selection.sft, selection.rsft_prompts, selection.grpo_pool, selection.grpo_candidates)
            for q in qs}
    hops = set(config.grpo.pool.hops or ())
    free = [q for q in data.train if q.id not in used and (not hops or q.hop_len in hops)]
    return select_balanced(free, n, f"{config.seed}:grpo_heldout")


def main(argv: list[str] | None = None) -> list[dict]:
    from transformers import set_seed

    from library.evaluation.evaluate import compare_phases
    from library.evaluation.monitor import live_monitor
    from library.experiments import run_profile, start_backend
    from library.experiments.sweeps.dev_judge import DevJudge, record
    from library.model.precision import run_precision, sampling_precision
    from library.runs.folder import RunDir
    from library.scoring.reward import RewardModel
    from library.stats import paired_difference_repeated
    from library.train.checkpoints import load_adapter
    from library.train.grpo import run_grpo
    from library.train.pool import POOL_FILE, grpo_prompts, pool_pass_rates

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", type=Path, help="a finished run folder (its adapters are the start)")
    ap.add_argument("--profile", default=None, help="the run's own profile (default: the one its meta.json names)")
    ap.add_argument("--grpo", default="{}", help="JSON overrides of the profile's grpo section")
    ap.add_argument("--arms", default="paper+edges@0,paper+edges+correctness@0", help="<reward preset>@<seed>, comma-separated")
    ap.add_argument("--n-dev", type=int, default=100)
    ap.add_argument("--n-heldout", type=int, default=0,
                    help="also judge on this many training questions of the pool's hops that no phase trained "
                         "on and the pool did not sample (did GRPO learn its pool, or the pool's kind of question?)")
    ap.add_argument("--no-monitor", action="store_true", help="train every arm without the reward-hacking monitor")
    ap.add_argument("--episodes", type=Path, default=None,
                    help="keep each arm's dev episodes as EPISODES/<arm>.jsonl (and start.jsonl), to pair arms "
                         "of different runs later")
    ap.add_argument("--name", default="",
                    help="a suffix for the arms' names and folders, so that arms of other --grpo settings "
                         "(e.g. pool.refresh) are trained, not read back from another setting's adapters")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)

    overrides = json.loads(args.grpo)
    if {"n_prompts", "enabled"} & set(overrides):
        raise SystemExit("--grpo: n_prompts and enabled decide SFT's rows; the run's own values stay")
    arms = parse_arms(args.arms)
    run = RunDir.open(args.run)
    meta = run.read_meta()
    config = run_profile(run, args.profile, {"grpo": overrides})
    meta_pool = ((meta.get("selection") or {}).get("grpo_pool") or {}).get("ids")
    work = run.path / "grpo_pool_sweep"
    keep = (lambda label: args.episodes / f"{label}.jsonl") if args.episodes else (lambda label: None)
    lines: list[dict] = []
    with run_precision(config):
        config, context, backend = start_backend(config, run)
        selection, tokenizer, kg = context.selection, context.tokenizer, context.data.kg
        if meta_pool is not None and meta_pool != [q.id for q in selection.grpo_pool]:
            raise SystemExit(f"{run.path}: this profile draws another GRPO pool than the run's, so other SFT rows")
        judge = DevJudge(config, context.data, tokenizer, args.n_dev)
        g = config.grpo
        heldout = DevJudge(config, context.data, tokenizer, 0, questions=heldout_questions(
            config, context.data, selection, args.n_heldout)) if args.n_heldout else None
        with tempfile.TemporaryDirectory() as tmp:
            start = backend.policy(g.init_from)
            t0 = time.perf_counter()
            pool, pool_info = grpo_prompts(start, tokenizer, selection, g, RewardModel.from_preset(kg, "correctness"),
                                           seed=config.seed, cache=work / POOL_FILE)
            pool_seconds = round(time.perf_counter() - t0, 1)
            start.eval()
            start_block, start_eps = judge.episodes(start, Path(tmp), "start", phase="grpo", keep=keep("start"))
            held_start = heldout.episodes(start, Path(tmp) / "heldout", "start", phase="grpo") if heldout else None
            # The kept prompts were chosen on one draw of the start's samples, so that draw's pass
            # rates are biased towards the middle; a second draw is the fair "before" for the arms.
            resampled = pool_pass_rates(start, tokenizer, pool, g, RewardModel.from_preset(kg, "correctness"),
                                         config.seed + 1000, when="start") if pool_info is not None else None
            start.unload()
            head = {"arm": "start", "init_from": g.init_from, "dev_right": start_block["correct"],
                    "n_dev": start_block["n"], "pool": pool_info, "pool_seconds": pool_seconds,
                    "start_resampled": resampled, "sampling_precision": sampling_precision(),
                    **({"heldout_right": held_start[0]["correct"], "n_heldout": held_start[0]["n"]} if heldout else {}),
                    "grpo": g.model_dump(mode="json")}
            record(args.out, head)
            outcomes: dict[tuple[str, int], list[bool]] = {}
            for preset, seed in arms:
                name = f"{preset}@{seed}" + (f"-{args.name}" if args.name else "")
                label = re.sub(r"\W", "_", name)
                set_seed(seed)
                reward = RewardModel.from_preset(kg, preset)
                sub = RunDir.create(Path(tmp), f"{label}-train")
                monitor = None if args.no_monitor else live_monitor("grpo", config.monitor, pool, kg, context.console)
                t0 = time.perf_counter()
                adapter_dir = work / label / "adapter"
                if (adapter_dir / "adapter_config.json").exists():  # a finished arm: judged again, not trained
                    model, res = load_adapter(backend.rl_base(), adapter_dir, trainable=False), None
                else:
                    model, res = run_grpo(backend.policy(g.init_from), tokenizer, pool, g, reward, sub,
                                          ckpt_dir=work / label / "checkpoints", adapter_dir=adapter_dir,
                                          seed=seed, forbidden_ids=selection.forbidden_ids, resume=True,
                                          monitor=monitor, pass_rates=(pool_info or {}).get("right_kept"))
                train_s = time.perf_counter() - t0
                model.eval()
                held = heldout.episodes(model, Path(tmp) / "heldout", label, phase="grpo") if heldout else None
                after = pool_pass_rates(model, tokenizer, pool, g, RewardModel.from_preset(kg, "correctness"), seed)
                block, eps = judge.episodes(model, Path(tmp), label, phase="grpo", keep=keep(label))
                model.unload()
                paired = compare_phases(start_eps + eps, "dev", "start", label)
                by_id = {e.ex_id: bool(e.correct) for e in eps}
                outcomes[(preset, seed)] = [by_id[q.id] for q in judge.dev]
                start_text = {e.ex_id: e.completion for e in start_eps}
                curve = res.curve if res is not None else []
                line = {"arm": name, "reward_preset": preset, "seed": seed,
                        "steps": res.steps if res is not None else "read back from its saved adapter",
                        "dev_right": block["correct"], "n_dev": block["n"], "by_hop": block.get("by_hop"),
                        "vs_start": {k: paired.get(k) for k in ("n", "diff", "ci", "discordant")},
                        "completions_changed": sum(1 for e in eps if e.completion != start_text.get(e.ex_id)),
                        **after,
                        **({"heldout_right": held[0]["correct"], "n_heldout": held[0]["n"],
                            "heldout_vs_start": {k: v for k, v in compare_phases(held_start[1] + held[1], "dev", "start",
                                                                                 label).items()
                                                 if k in ("n", "diff", "ci", "discordant")}} if heldout else {}),
                        "frac_reward_zero_std": round(sum(p.get("frac_reward_zero_std", 0.0) for p in curve)
                                                      / max(1, len(curve)), 3),
                        "max_kl": max((p.get("kl") or 0.0 for p in curve), default=0.0),
                        "stopped_by_monitor": res.stopped_by_monitor if res is not None else None,
                        **({"pool_learned_at": res.learned_at, "draws": res.draws}
                           if res is not None and g.pool.refresh else {}),
                        "train_seconds": round(train_s, 1),
                        "curve": [{k: p.get(k) for k in ("step", "reward_total", "accuracy", "frac_reward_zero_std", "kl")}
                                  for p in curve]}
                record(args.out, line)
                lines.append(line)
    presets = sorted({p for p, _ in arms})
    if len(presets) == 2:
        a, b = presets
        seeds = sorted({s for p, s in arms if p == a} & {s for p, s in arms if p == b})
        if seeds:
            pooled = {"arm": "pooled", "a": a, "b": b, "seeds": seeds,
                      "b_minus_a": paired_difference_repeated([outcomes[(a, s)] for s in seeds],
                                                              [outcomes[(b, s)] for s in seeds])}
            record(args.out, pooled)
            lines.append(pooled)
    return lines


if __name__ == "__main__":
    main()
