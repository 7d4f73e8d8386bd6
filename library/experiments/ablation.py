"""The reward ablation: does the path reward matter? GRPO again from the main GRPO phase's
start, on the same prompts with the same settings, under another reward (default: correctness
only), evaluated on the same eval questions and compared pairwise with the main GRPO phase.

It runs beside the pipeline, on a finished run (:func:`library.experiments.run_experiments`).
"""

from __future__ import annotations

import time
from typing import Any, Callable

from rich.console import Console

from library.config import TrainConfig
from library.contracts import EVAL_KIND
from library.evaluation.evaluate import compare_phases, evaluate
from library.evaluation.monitor import live_monitor, monitor_block
from library.model.distributed import is_writer, wait_for_everyone
from library.runs.folder import RunDir
from library.train.data import DataBundle, Selection
from library.train.grpo import run_grpo
from library.train.rewards import RunRewards

# torch, transformers and trl are imported inside the functions that train (the CLI starts without them).


def run_ablation(policy: Callable[[str], Any], tokenizer, config: TrainConfig, data: DataBundle,
                 selection: Selection, rewards: RunRewards, run: RunDir, console: Console) -> dict[str, Any]:
    """GRPO from the main GRPO phase's start under ``config.ablation.reward_preset``, evaluated on
    the main eval subset and compared pairwise with the main GRPO phase (same questions).

    Its rollouts and eval episodes go to ``<run>/ablation/<preset>/`` (a sub-run, as the
    distribution experiment's), its adapter and checkpoints beside the main ones, so a killed
    ablation resumes from its checkpoint. ``vs_grpo`` is ``library.evaluation.evaluate.compare_phases`` of
    the main GRPO phase (a) against the ablation (b): a negative ``diff`` means the path reward helped.
    """
    from transformers import set_seed

    preset = config.ablation.reward_preset
    console.rule(f"[bold]ablation: GRPO with reward {preset}")
    set_seed(config.seed)
    sub = RunDir(run.path / "ablation" / preset)
    sub.path.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    # The same live monitor as the main GRPO phase: both arms of the comparison play by one rule
    # (a stop ends either one early).
    start = policy(config.grpo.init_from)
    pool = selection.grpo_pool  # the main GRPO phase's prompts
    monitor = live_monitor("grpo", config.monitor, pool, data.kg, console)
    model, res = run_grpo(start, tokenizer, pool, config.grpo, rewards["ablation"], sub,
                          ckpt_dir=run.path / "checkpoints" / "ablation" / preset,
                          adapter_dir=run.path / "adapters" / "ablation" / preset,
                          seed=config.seed, forbidden_ids=selection.forbidden_ids, resume=True, monitor=monitor)
    # An eval left by an interrupted attempt may come from a less-trained adapter: redo it.
    if is_writer():
        sub.keep_episodes(lambda ep: ep.get("kind") != EVAL_KIND)
    wait_for_everyone()
    model.eval()
    block = evaluate(model, tokenizer, selection.eval, rewards["eval"], phase="grpo", split="eval", run=sub,
                     batch_size=config.eval.batch_size, max_new_tokens=config.eval.max_new_tokens)
    model.unload()
    main_grpo = [e for e in run.read_episodes(split="eval") if e.phase == "grpo"]
    ablated = [e.model_copy(update={"phase": "ablation"}) for e in sub.read_episodes(split="eval")]
    out = {k: block[k] for k in ("n", "correct", "accuracy", "accuracy_ci") if k in block}
    out.update({"reward_preset": preset, "main_reward_preset": config.grpo.reward_preset,
                "by_hop": block.get("by_hop", {}), "steps": res.steps, "curve": res.curve,
                "vs_grpo": compare_phases(main_grpo + ablated, "eval", "grpo", "ablation"),
                "seconds": round(time.perf_counter() - t0, 2)})
    if res.stopped_by_monitor:
        out["stopped_by_monitor"] = res.stopped_by_monitor
    if config.monitor.enabled:  # does the other reward invite gaming the graph? (what `kgr monitor` recomputes)
        out["monitor"] = monitor_block("grpo", res.episodes, pool, data.kg, config.monitor, res.curve)
    return out
