"""The RSFT selection experiment: does the KG's path reward choose better training data than a
right/wrong reward would?

RSFT samples K completions per prompt and trains on one winner each. The phase ranks a prompt's
samples by the KG reward (right answer, then the path it names: :func:`library.train.rsft.rank_key`);
an outcome-only reward could only tell right from wrong, so it would train on any right sample.
This experiment takes the RSFT phase's own logged samples (the same prompts, the same draws),
picks the winners both ways (:func:`library.train.rsft.winners_from_rollouts`), trains each set
from the SFT result with the RSFT settings at every seed listed, and answers the RSFT phase's
eval questions with each. Only the choice of winners differs between the arms of a seed, so their
paired difference is what the path reward contributed to RSFT; over several seeds the training
order's share of the difference shows too. On a run whose RSFT kept grounded winners only
(``rsft.winners: grounded``, finding 69), the ``reward`` arm's winners passed that filter as well,
so the difference also holds the filter's share: read the run's ``meta.json`` before the verdict.

The reward rule at the run's own seed is the RSFT phase itself (same winners, same start, same
seed): its adapter and eval episodes are reused, not trained twice. Every other arm is a sub-run
``<out>/<rule>-seed<N>/`` (its eval episodes), its adapter and checkpoints in the run's
git-ignored ``adapters/selection/`` and ``checkpoints/selection/`` beside the phases' own, so a
killed experiment resumes from its checkpoints and a finished arm is read back. The block goes
to ``<out>/selection.json`` (and, with ``--into-metrics``, to the run's metrics.json under
``selection``, where the storyboards and the demo page read it)::

    .venv/bin/python -m research.selection data/runs/food --profile data/experiments/food-selection/profile.yaml \\
        --out data/experiments/food-selection --seeds 0,1,2

Research beside the product: no shipped profile runs it (measured: no reliable difference,
docs/FINDINGS.md finding 51). It starts from a finished run as the library's experiments do
(:func:`library.experiments.run_profile`, :func:`library.experiments.start_backend`).
"""

from __future__ import annotations

import time
from pathlib import Path
from statistics import mean
from typing import Any, Callable

from rich.console import Console

from library.config import TrainConfig
from library.evaluation.evaluate import grounded_episode
from library.runs.folder import RunDir
from library.train.data import DataBundle, Selection


def winner_summary(rollouts: list, winners: dict[str, list[tuple[Any, str]]]) -> dict[str, Any]:
    """How the rules' winners differ: counts, prompts whose winner is another sample, the mean path
    coverage of each rule's winners and how many of them are grounded (their TRACE claims every
    gold edge in order), from the rewards the samples got.

    >>> from types import SimpleNamespace as NS
    >>> q = NS(id="q")
    >>> r = lambda c, cov, hits: NS(completion=c, ex_id="q", hop_len=3, parsed=NS(valid_format=True, answer="A"),
    ...                             reward=NS(path_coverage=cov, model_extra={"edge_hits": hits}))
    >>> s = winner_summary([r("a", 0.5, 1), r("b", 1.0, 3)], {"reward": [(q, "b")], "correctness": [(q, "a")]})
    >>> s["n_winners"], s["prompts_with_another_winner"], s["winner_path_coverage"], s["winners_grounded"]
    ({'reward': 1, 'correctness': 1}, 1, {'reward': 1.0, 'correctness': 0.5}, {'reward': 1, 'correctness': 0})
    """
    by_key = {(ep.ex_id, ep.completion): ep for ep in rollouts}
    chosen = {rule: {q.id: c for q, c in pairs} for rule, pairs in winners.items()}
    rules = list(winners)
    prompts = set().union(*(set(c) for c in chosen.values()))
    differ = sum(1 for pid in prompts if len({chosen[r].get(pid) for r in rules}) > 1)

    def coverage(rule: str) -> float:
        eps = [by_key[(pid, c)] for pid, c in chosen[rule].items()]
        return round(mean(float(ep.reward.path_coverage) for ep in eps), 4) if eps else 0.0

    return {"n_prompts": len({ep.ex_id for ep in rollouts}), "n_samples": len(rollouts),
            "n_winners": {r: len(chosen[r]) for r in rules},
            "prompts_with_another_winner": differ,
            "winner_path_coverage": {r: coverage(r) for r in rules},
            "winners_grounded": {r: sum(grounded_episode(by_key[(pid, c)]) for pid, c in chosen[r].items())
                                 for r in rules}}


def _total_seconds(arms: dict[str, Any]) -> float | None:
    """The trained arms' seconds summed; None when an arm's were not recorded (read back from an
    older log).

    >>> _total_seconds({"reward-seed0": {"from_phase": "rsft"}, "correctness-seed0": {"seconds": 200.0}})
    200.0
    >>> _total_seconds({"correctness-seed0": {"seconds": None}}) is None
    True
    """
    seconds = [arm.get("seconds") for arm in arms.values() if "from_phase" not in arm]
    return None if any(x is None for x in seconds) else round(sum(seconds), 2)


def run_selection(policy: Callable[[str], Any], tokenizer, config: TrainConfig, data: DataBundle,
                  selection: Selection, run: RunDir, console: Console, *, seeds: list[int], out: Path,
                  before: dict[str, Any] | None = None) -> dict[str, Any]:
    """Both selection rules at every seed of ``seeds``, the arms' logs under ``out`` (``before``: an
    earlier block of this experiment, whose arms' seconds are kept); returns the metrics block:
    the winners' summary; each arm's accuracy on the RSFT phase's eval questions; the correctness
    rule at the run's seed as a metrics block (``correctness``, the layout of an eval phase's)
    paired with the RSFT phase (``vs_rsft``, :func:`library.evaluation.evaluate.compare_phases`);
    the paired difference correctness - reward at each seed (``vs_reward_by_seed``) and over all
    seeds (``over_seeds``: questions resampled, each averaged over the seeds; ``over_seeds_grounded``
    the same for right answers whose TRACE holds the gold path). A negative ``diff`` means the path
    reward chose better training data. The intervals hold the run's one draw of samples fixed."""
    from transformers import set_seed

    from library.contracts import ROLLOUT_KIND
    from library.evaluation.evaluate import compare_phases, evaluate, metrics_from_episodes
    from library.runs.reader import eval_episodes
    from library.scoring.reward import RewardModel
    from library.stats import paired_difference, paired_difference_repeated
    from library.train.rsft import SELECTION_RULES, train_winners, winners_from_rollouts

    rollouts = [ep for ep in run.iter_episodes(phase="rsft") if ep.kind == ROLLOUT_KIND]
    if not rollouts:
        raise SelectionError(f"{run.path}: the RSFT phase logged no samples to choose from")
    by_id = {q.id: q for q in selection.rsft_prompts}
    winners = {rule: winners_from_rollouts(rollouts, by_id, rule) for rule in SELECTION_RULES}
    out: dict[str, Any] = winner_summary(rollouts, winners)
    console.rule("[bold]selection: RSFT winners by the KG reward and by correctness alone")
    console.print(f"  {out['n_winners']['reward']} winners by reward, {out['n_winners']['correctness']} by correctness; "
                  f"{out['prompts_with_another_winner']} of {out['n_prompts']} prompts train on another sample")

    metrics = run.read_metrics()
    main_eval = eval_episodes(run.iter_episodes(phase="rsft"), phase="rsft", split="eval", step=0)
    questions = [q for q in selection.eval if q.id in main_eval]
    phase = metrics.get("training", {}).get("rsft", {})
    # The reward rule at the run's seed is the RSFT phase itself (the pipeline seeds a phase as this
    # experiment seeds an arm) only when the phase trained, here, on its winners.
    phase_is_arm = phase.get("backend", "torch") == "torch" and "skipped_training" not in phase
    before = (before or {}).get("arms", {})
    eval_reward = RewardModel.from_preset(data.kg, config.eval.reward_preset)
    arm_episodes: dict[tuple[str, int], list] = {}
    arms: dict[str, Any] = {}
    for seed in seeds:
        for rule in SELECTION_RULES:
            name = f"{rule}-seed{seed}"
            if rule == "reward" and seed == config.seed and phase_is_arm:
                console.print(f"  [dim]{name}: the RSFT phase itself (same winners, start and seed)[/]")
                arm_episodes[(rule, seed)] = [main_eval[q.id] for q in questions]
                arms[name] = {"from_phase": "rsft"}
                continue
            sub = RunDir(out / name)
            sub.path.mkdir(parents=True, exist_ok=True)
            found = eval_episodes(sub.iter_episodes(phase="rsft"), phase="rsft", split="eval", step=0)
            arms[name] = {"steps": config.rsft.max_steps if winners[rule] else None,
                          "seconds": before.get(name, {}).get("seconds")}
            if not all(q.id in found for q in questions):
                # (a finished arm is read back: its eval starts only once its training has finished)
                console.rule(f"[bold]selection: {name}")
                t0 = time.perf_counter()
                set_seed(seed)
                model = policy("sft")
                if winners[rule]:  # no right sample at all: the arm is the SFT result, as in the phase
                    model, train = train_winners(model, tokenizer, winners[rule], config.rsft,
                                                 ckpt_dir=run.path / "checkpoints" / "selection" / name,
                                                 adapter_dir=run.path / "adapters" / "selection" / name,
                                                 seed=seed, forbidden_ids=selection.forbidden_ids, resume=True)
                    arms[name]["steps"] = train.steps
                # An eval left by an interrupted attempt came from this finished adapter (training
                # resumed to the end first): evaluate() answers only the questions still missing.
                model.eval()
                evaluate(model, tokenizer, questions, eval_reward, phase="rsft", split="eval", run=sub,
                         batch_size=config.eval.batch_size, max_new_tokens=config.eval.max_new_tokens)
                model.unload()
                arms[name]["seconds"] = round(time.perf_counter() - t0, 2)
                found = eval_episodes(sub.iter_episodes(phase="rsft"), phase="rsft", split="eval", step=0)
            arm_episodes[(rule, seed)] = [found[q.id] for q in questions]
    for (rule, seed), episodes in arm_episodes.items():
        block = metrics_from_episodes(episodes)
        arms[f"{rule}-seed{seed}"].update({"n": block["n"], "correct": block["correct"],
                                           "grounded": block["grounded"]["correct"], "accuracy": block["accuracy"]})
    seeds = list(seeds)
    right = {key: [bool(e.correct) for e in eps] for key, eps in arm_episodes.items()}
    solid = {key: [bool(e.correct) and grounded_episode(e) for e in eps] for key, eps in arm_episodes.items()}

    def over_seeds(flags: dict[tuple[str, int], list[bool]]) -> dict[str, Any]:
        return paired_difference_repeated([flags[("reward", seed)] for seed in seeds],
                                          [flags[("correctness", seed)] for seed in seeds])

    # The row beside the phases: the correctness rule at the run's own seed, paired with the RSFT phase.
    own = [e.model_copy(update={"phase": "selection"}) for e in arm_episodes[("correctness", config.seed)]]
    out.update({"seeds": seeds, "n": len(questions), "arms": arms,
                "correctness": {**metrics_from_episodes(own), "seed": config.seed},
                "vs_rsft": compare_phases([main_eval[q.id] for q in questions] + own, "eval", "rsft", "selection"),
                "vs_reward_by_seed": {str(seed): paired_difference(right[("reward", seed)], right[("correctness", seed)])
                                      for seed in seeds},
                "over_seeds": over_seeds(right), "over_seeds_grounded": over_seeds(solid),
                "seconds": _total_seconds(arms)})
    return out


class SelectionError(RuntimeError):
    """The run cannot host the experiment (unfinished, other settings, no RSFT samples, bad seeds)."""


def check_seeds(seeds: list[int], run_seed: int) -> list[int]:
    """The seeds to train at: each once, the run's own among them (its reward arm is the RSFT phase).

    >>> check_seeds([0, 1, 2], 0)
    [0, 1, 2]
    >>> check_seeds([1, 2], 0)
    Traceback (most recent call last):
    ...
    research.selection.SelectionError: --seeds [1, 2] must include the run's seed 0 (its correctness arm is paired with the RSFT phase)
    """
    if len(set(seeds)) != len(seeds):
        raise SelectionError(f"--seeds repeats a seed: {seeds}")
    if run_seed not in seeds:
        raise SelectionError(f"--seeds {seeds} must include the run's seed {run_seed} "
                             "(its correctness arm is paired with the RSFT phase)")
    return seeds


def main(argv: list[str] | None = None) -> dict[str, Any]:
    import argparse
    import json

    from transformers import set_seed

    from library.experiments import run_profile, start_backend
    from library.jsonl import atomic_write_json
    from library.model.precision import run_precision
    from library.train.bookkeeping import comparable_config, config_differences

    ap = argparse.ArgumentParser(description="RSFT winners by the KG reward against by correctness alone, "
                                             "on a finished run's own samples, at several seeds")
    ap.add_argument("run", type=Path, help="a finished run folder (kgr train)")
    ap.add_argument("--profile", default=None, help="the run's own profile (default: the one its meta.json names)")
    ap.add_argument("--seeds", default="0,1,2", help="training seeds, comma-separated; must hold the run's seed")
    ap.add_argument("--out", type=Path, default=None,
                    help="where the arms' eval episodes and selection.json go (default data/experiments/<run>-selection)")
    ap.add_argument("--into-metrics", action="store_true",
                    help="also store the block in the run's metrics.json under 'selection' (what renders read)")
    args = ap.parse_args(argv)

    run = RunDir.open(args.run)
    meta = run.read_meta()
    if meta.get("status") != "complete":
        raise SystemExit(f"{run.path}: the experiment runs on a finished run (status: {meta.get('status')!r})")
    config = run_profile(run, args.profile)
    recorded = meta.get("config") or {}
    if comparable_config(config) != comparable_config(recorded):
        raise SystemExit(f"{run.path} was trained with other settings than this profile's "
                         f"({config_differences(recorded, config)}); give the run's own profile (--profile)")
    if not config.rsft.enabled:
        raise SystemExit(f"{run.path}: the experiment re-chooses the RSFT phase's samples, but rsft is disabled")
    try:
        seeds = check_seeds([int(x) for x in args.seeds.split(",") if x.strip()], config.seed)
    except (SelectionError, ValueError) as exc:
        raise SystemExit(str(exc)) from None
    out = args.out or Path("data") / "experiments" / f"{run.path.name}-selection"
    out.mkdir(parents=True, exist_ok=True)
    block_path = out / "selection.json"
    before = (json.loads(block_path.read_text(encoding="utf-8")) if block_path.exists()
              else run.read_metrics().get("selection"))
    console = Console(stderr=True)
    with run.lock(), run_precision(config):
        config, context, backend = start_backend(config, run, console=console)
        set_seed(config.seed)
        block = run_selection(backend.policy, context.tokenizer, config, context.data, context.selection, run,
                              console, seeds=seeds, out=out, before=before)
        atomic_write_json(block_path, block)
        if args.into_metrics:
            metrics = run.read_metrics()
            metrics["selection"] = block
            run.write_metrics(metrics)
    over = block["over_seeds"]
    console.print(f"correctness - reward over seeds {seeds}: {over['diff']:+.3f} {over['ci']} (n={block['n']}); "
                  f"{block_path}")
    return block


if __name__ == "__main__":
    main()
