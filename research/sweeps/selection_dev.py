"""The RSFT selection experiment's arms judged on dev (finding 51's check on the split that chooses recipes).

The selection experiment (research/selection.py) trains RSFT's winners chosen by the KG
reward and by correctness alone at several seeds and pairs them on the RSFT phase's *eval*
questions, which report and never choose. This script answers the same question on dev: it loads
every arm's saved adapter of a finished run (``<run>/adapters/selection/``; the RSFT phase's own
as ``reward-seed<run seed>``), answers the hop-balanced dev questions greedily with each (DevJudge: eval.jsonl is never read)
and pairs the rules per seed and over seeds. One JSON object is written to ``--out``.

    python -m research.sweeps.selection_dev data/experiments/quick-selection \\
        --profile data/experiments/quick-selection/profile.yaml --seeds 0,1,2 --out data/experiments/quick-selection/selection_dev.json
"""

from __future__ import annotations

import argparse
import json
import re
import tempfile
from pathlib import Path


def main(argv: list[str] | None = None) -> dict:
    from library.experiments import run_profile, start_backend
    from research.sweeps.dev_judge import DevJudge
    from library.jsonl import atomic_write_json
    from library.model.precision import run_precision
    from library.runs.folder import RunDir
    from library.stats import paired_difference, paired_difference_repeated
    from library.train.checkpoints import load_phase_model
    from library.train.rsft import SELECTION_RULES

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", type=Path)
    ap.add_argument("--profile", default=None, help="the run's own profile (default: the one its meta.json names)")
    ap.add_argument("--seeds", default="0,1,2", help="the selection experiment's seeds, comma-separated")
    ap.add_argument("--n-dev", type=int, default=100)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)

    run = RunDir.open(args.run)
    config = run_profile(run, args.profile)
    adapters = run.path / "adapters"
    arms = {f"reward-seed{config.seed}": adapters / "rsft"}
    arms.update({p.name: p for p in sorted((adapters / "selection").iterdir()) if p.is_dir()})
    seeds = [int(x) for x in args.seeds.split(",") if x.strip()]
    names = [f"{rule}-seed{seed}" for seed in seeds for rule in SELECTION_RULES]
    missing = [n for n in names if n not in arms]
    if missing:
        raise SystemExit(f"{run.path}: no saved adapter for {', '.join(missing)} (run the selection experiment first)")
    with run_precision(config):
        config, context, backend = start_backend(config, run)
        tokenizer = context.tokenizer
        judge = DevJudge(config, context.data, tokenizer, args.n_dev)
        outcomes: dict[str, list[bool]] = {}
        with tempfile.TemporaryDirectory() as tmp:
            for name in names:
                path = arms[name]
                model = load_phase_model(backend.rl_base(), path.parent, path.name, sft_full=False)
                model.eval()
                _, episodes = judge.episodes(model, Path(tmp), re.sub(r"\W", "_", name))
                model.unload()
                by_id = {e.ex_id: bool(e.correct) for e in episodes}
                outcomes[name] = [by_id[q.id] for q in judge.dev]
                print(f"{name}: {sum(outcomes[name])}/{len(judge.dev)} on dev", flush=True)
    result = {
        "run": str(run.path), "n_dev": len(judge.dev), "seeds": seeds,
        "right": {name: sum(v) for name, v in outcomes.items()},
        "vs_reward_by_seed": {str(s): paired_difference(outcomes[f"reward-seed{s}"], outcomes[f"correctness-seed{s}"])
                              for s in seeds},
        "over_seeds": paired_difference_repeated([outcomes[f"reward-seed{s}"] for s in seeds],
                                                 [outcomes[f"correctness-seed{s}"] for s in seeds]),
    }
    atomic_write_json(args.out, result)
    print(json.dumps({"right": result["right"], "over_seeds": result["over_seeds"]}))
    return result


if __name__ == "__main__":
    main()
