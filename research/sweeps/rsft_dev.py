"""RSFT settings judged on dev from a finished run's SFT, paired against the run's own RSFT.

A finished run (``kgr train``) saved its SFT model and its RSFT adapter. Each case here trains
RSFT again from that SFT with the run's selection (the same prompts) and some RSFT settings
changed, answers the same hop-balanced dev and dev_far questions greedily (eval.jsonl is never
read), and pairs each answer against the run's RSFT and SFT on the same questions. ``rounds``
> 1 is expert iteration: each further round samples the same prompts from the policy the round
before trained, keeps its winners by the same rule and trains the same adapter on them.
Prompts are drawn as the pipeline draws them (``library.train.data.draw_rsft_prompts``), so a
case that keeps ``prompt_hops`` and ``n_prompts`` trains on the run's own prompts, and
``{"prompt_hops": [4, 3], "n_prompts": 300}`` on the run's 150 4-hop ones followed by 150 3-hop
ones (reference.jsonl's ``mix34``, recorded then as ``"add_prompts": {"3": 150}``).

    python -m research.sweeps.rsft_dev data/runs/reference \\
        --case 'k8={"k_samples": 8}' --case 'two_rounds={"rounds": 2}' \\
        --out data/experiments/sweeps/rsft_dev/reference.jsonl

One JSON line per case goes to ``--out`` as it finishes: dev and dev_far accuracy by hop with
Wilson intervals, the paired differences, the winners per round and the seconds spent.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections import Counter
from pathlib import Path


def parse_case(text: str) -> tuple[str, dict]:
    """``name={"key": value}`` -> (name, RSFT overrides); ``rounds`` is this script's.

    >>> parse_case('k8={"k_samples": 8}')
    ('k8', {'k_samples': 8})
    """
    name, _, body = text.partition("=")
    return name.strip(), json.loads(body) if body.strip() else {}


def main(argv: list[str] | None = None) -> None:
    from transformers import set_seed

    from library.experiments import run_profile, start_backend
    from library.model.precision import run_precision
    from library.runs.folder import RunDir
    from library.train.data import draw_rsft_prompts
    from library.train.rsft import run_rsft
    from research.sweeps.dev_judge import DevJudge, record
    from research.sweeps.phases_dev import far_questions

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", type=Path, help="a finished run with adapters/sft (or a full SFT model) and adapters/rsft")
    ap.add_argument("--case", action="append", required=True, help='name={"rsft setting": value, ...} (repeatable)')
    ap.add_argument("--n-dev", type=int, default=100)
    ap.add_argument("--n-far", type=int, default=100, help="dev_far questions (0: none)")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)

    run = RunDir.open(args.run)
    config = run_profile(run)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with run_precision(config), tempfile.TemporaryDirectory() as tmp:
        config, context, backend = start_backend(config, run)
        data, selection, tokenizer, rewards = context.data, context.selection, context.tokenizer, context.rewards
        judges = {"dev": DevJudge(config, data, tokenizer, args.n_dev)}
        if args.n_far:
            far_config, questions = far_questions(config, data, tokenizer, args.n_far)
            judges["dev_far"] = DevJudge(far_config, data, tokenizer, args.n_far, questions=questions)
        refs: dict[str, dict[str, list]] = {}
        for phase in ("sft", "rsft"):
            model = backend.rl_base() if phase == "sft" else backend.policy("rsft")
            model.eval()
            for split, judge in judges.items():
                refs.setdefault(split, {})[phase] = judge.episodes(model, Path(tmp), f"run-{phase}-{split}", phase=phase)[1]
            if hasattr(model, "unload"):
                model.unload()
        for text in args.case:
            name, overrides = parse_case(text)
            rounds = int(overrides.pop("rounds", 1))
            # the run's profile with these RSFT settings (validated, "next"/"longest" read as lengths);
            # the window stays the run's, as the cases in reference.jsonl were sampled
            settings = run_profile(run, overrides={"rsft": overrides}).rsft.model_copy(
                update={"max_new_tokens": config.rsft.max_new_tokens})
            # drawn as make_selection draws them: the run's own prompts where the case keeps them
            prompts = draw_rsft_prompts(data, settings, selection.sft, {q.id for q in selection.grpo_pool}, config.seed)
            set_seed(config.seed)
            model = backend.policy("sft")
            t0, winners = time.perf_counter(), []
            for r in range(rounds):
                sub = RunDir.create(Path(tmp), f"{name}-round{r}")
                model, res = run_rsft(model, tokenizer, prompts, settings, rewards["rsft"], sub,
                                      ckpt_dir=Path(tmp) / name / f"ckpt{r}", adapter_dir=Path(tmp) / name / f"adapter{r}",
                                      seed=config.seed + r, forbidden_ids=selection.forbidden_ids, resume=False)
                winners.append(res.n_winners)
            seconds = time.perf_counter() - t0
            model.eval()
            line = {"case": name, "run": str(args.run), "rsft": {**overrides, "rounds": rounds},
                    "winners": winners,
                    "prompts": dict(sorted(Counter(q.hop_len for q in prompts).items())),
                    "seconds": round(seconds, 1)}
            for split, judge in judges.items():
                block, eps = judge.episodes(model, Path(tmp), f"{name}-{split}")
                line[split] = {"accuracy": block["accuracy"], "ci": block.get("accuracy_ci"), "by_hop": block.get("by_hop"),
                               "vs_run_rsft": judge.paired(refs[split]["rsft"], eps, f"run-rsft-{split}", f"{name}-{split}"),
                               "vs_run_sft": judge.paired(refs[split]["sft"], eps, f"run-sft-{split}", f"{name}-{split}"),
                               "answers": {e.ex_id: bool(e.correct) for e in eps}}
            model.unload()
            record(args.out, line)


if __name__ == "__main__":
    main()
