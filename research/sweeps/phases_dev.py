"""Every phase of finished runs judged on dev, paired against the first run's SFT: how a recipe is chosen.

A run's own evaluation answers eval questions, which report and never choose. This script loads
each run's saved phase models (``adapters/<phase>``), answers the same hop-balanced dev questions
greedily with each (DevJudge: eval.jsonl is never read) and pairs every phase against the SFT of
the first run given, per hop length. Runs forked from one another (``kgr train --from``) share
that SFT, so their RL recipes are paired on the same start.

    python -m research.sweeps.phases_dev data/runs/mammals data/experiments/mammals-rl4 \\
        --out data/experiments/mammals-rl4/phases_dev.json

``--split dev_far`` judges on dev_far instead: one hop past eval's lengths (6 on 4-5), a length
no phase trains on, where ``kgr data`` wrote it; the answer window grows to hold its longest
reference.

One JSON object goes to ``--out``: per run and phase, accuracy by hop with its Wilson interval, the
paired difference against the first run's SFT (bootstrap over questions), and each dev answer's
right/wrong (``answers``) for pairing over seeds.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path


def main(argv: list[str] | None = None) -> dict:
    from library.experiments import run_profile, start_backend
    from library.jsonl import atomic_write_json
    from library.model.precision import run_precision
    from library.runs.folder import RunDir
    from library.train.checkpoints import load_phase_model
    from library.train.fork import sft_source
    from research.sweeps.dev_judge import DevJudge

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", type=Path, nargs="+",
                    help="a finished run, then runs forked from it (kgr train --from); its SFT is the baseline")
    ap.add_argument("--phases", default="sft,rsft,grpo")
    ap.add_argument("--n-dev", type=int, default=100)
    ap.add_argument("--split", choices=("dev", "dev_far"), default="dev",
                    help="dev (eval's lengths) or dev_far (one hop past them: a length no phase trains on)")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--keep", type=Path, help="also keep each phase's dev episodes here, as <run>-<phase>.jsonl")
    args = ap.parse_args(argv)

    phases = [p for p in args.phases.split(",") if p]
    first = RunDir.open(args.runs[0])
    later = [RunDir.open(r) for r in args.runs[1:]]
    for run in later:  # every RL adapter goes on the first run's SFT model: it must be theirs too
        if sft_source(run.path).resolve() != sft_source(first.path).resolve():
            raise SystemExit(f"{run.path} is not forked from {first.path} (kgr train --from, directly or through "
                             "forks): its SFT may differ")
    config = run_profile(first)
    out: dict = {"n_dev": args.n_dev, "split": args.split, "baseline": f"{first.path}:sft", "dev": {}}
    with run_precision(config), tempfile.TemporaryDirectory() as tmp:
        config, context, backend = start_backend(config, first)
        questions = None
        if args.split == "dev_far":
            config, questions = far_questions(config, context.data, context.tokenizer, args.n_dev)
            out["max_new_tokens"] = config.eval.max_new_tokens
        judge = DevJudge(config, context.data, context.tokenizer, args.n_dev, questions=questions)
        baseline: list = []
        for run in [first, *later]:
            copied = set((run.read_meta().get("forked_from") or {}).get("phases") or ())
            for phase in phases:
                if (phase in copied and run is not first) or not (run.path / "adapters" / phase).is_dir():
                    continue  # a later fork's copied phase is its source's model, judged already
                base = backend.base if phase == "sft" else backend.rl_base()
                model = load_phase_model(base, run.path / "adapters", phase, sft_full=False)
                model.eval()
                label = f"{run.path.name}-{phase}"
                block, episodes = judge.episodes(model, Path(tmp), label, phase=phase,
                                                 keep=args.keep / f"{label}.jsonl" if args.keep else None)
                if hasattr(model, "unload"):  # take the LoRA layers off the shared SFT model again
                    model.unload()
                if run is first and phase == "sft":
                    baseline = [e.model_copy(update={"phase": "baseline"}) for e in episodes]
                out["dev"][f"{run.path}:{phase}"] = judge.figures(block, baseline, episodes, label, "baseline")
                out.setdefault("answers", {})[f"{run.path}:{phase}"] = {e.ex_id: bool(e.correct) for e in episodes}
                print(json.dumps({f"{run.path}:{phase}": out["dev"][f"{run.path}:{phase}"]}), flush=True)
    atomic_write_json(args.out, out)
    return out


def far_questions(config, data, tokenizer, n: int):
    """(``config`` with an answer window that holds dev_far's longest reference completion, ``n``
    hop-balanced dev_far questions): the window rule of ``fit_generation_lengths``, for a split
    the run's own evaluation did not size."""
    from library.questions.balance import select_balanced
    from library.train.data import reference_window

    if not data.dev_far:
        raise SystemExit(f"{config.data_dir} has no dev_far.jsonl: `kgr data` writes it where the graph gives it")
    questions = select_balanced(data.dev_far, n, f"{config.seed}:dev_far")
    window = max(config.eval.max_new_tokens, reference_window(questions, tokenizer))
    return config.model_copy(update={"eval": config.eval.model_copy(update={"max_new_tokens": window})}), questions


if __name__ == "__main__":
    main()
