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
from library.runs.folder import RunDir
from library.train.data import DataBundle, Selection
from library.evaluation.monitor import monitor_block


def run_ablation(policy: Callable[[str], Any], tokenizer, config: TrainConfig, data: DataBundle,
                 selection: Selection, run: RunDir, console: Console) -> dict[str, Any]:
    """GRPO from the main GRPO phase's start under ``config.ablation.reward_preset``, evaluated on
    the main eval subset and compared pairwise with the main GRPO phase (same questions).

    Its rollouts and eval episodes go to ``<run>/ablation/<preset>/`` (a sub-run, as the
    distribution experiment's), its adapter and checkpoints beside the main ones, so a killed
    ablation resumes from its checkpoint. ``vs_grpo`` is ``library.evaluation.evaluate.compare_phases`` of
    the main GRPO phase (a) against the ablation (b): a negative ``diff`` means the path reward helped.
    """
    from transformers import set_seed

    from library.model.distributed import is_writer, wait_for_everyone
    from library.evaluation.evaluate import compare_phases, evaluate
    from library.contracts import EVAL_KIND
    from library.train.grpo import filter_episodes, run_grpo
    from library.scoring.reward import RewardModel

    preset = config.ablation.reward_preset
    console.rule(f"[bold]ablation: GRPO with reward {preset}")
    set_seed(config.seed)
    sub = RunDir(run.path / "ablation" / preset)
    sub.path.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    reward = RewardModel.from_preset(data.kg, preset)
    # The same live monitor as the main GRPO phase: both arms of the comparison play by one rule
    # (a stop ends either one early).
    from library.evaluation.monitor import live_monitor
    from library.train.pool import POOL_FILE, grpo_prompts

    start = policy(config.grpo.init_from)
    # the main GRPO phase's prompts (by pass rate: read from its cache, or drawn again the same way)
    pool, pool_info = grpo_prompts(start, tokenizer, selection, config.grpo, RewardModel.from_preset(data.kg, config.grpo.reward_preset),
                           seed=config.seed, cache=run.path / "checkpoints" / "grpo" / POOL_FILE)
    monitor = live_monitor("grpo", config.monitor, pool, data.kg, console)
    model, res = run_grpo(start, tokenizer, pool, config.grpo, reward, sub,
                          ckpt_dir=run.path / "checkpoints" / "ablation" / preset,
                          adapter_dir=run.path / "adapters" / "ablation" / preset,
                          seed=config.seed, forbidden_ids=selection.forbidden_ids, resume=True, monitor=monitor,
                          pass_rates=(pool_info or {}).get("right_kept"))
    # An eval left by an interrupted attempt may come from a less-trained adapter: redo it.
    if is_writer():
        filter_episodes(sub, lambda ep: ep.get("kind") != EVAL_KIND)
    wait_for_everyone()
    model.eval()
    eval_reward = RewardModel.from_preset(data.kg, config.eval.reward_preset)
    block = evaluate(model, tokenizer, selection.eval, eval_reward, phase="grpo", split="eval", run=sub,
                     batch_size=config.eval.batch_size, max_new_tokens=config.eval.max_new_tokens,
                     store_metrics=True)
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
        out["monitor"] = monitor_block("grpo", sub.iter_episodes(phase="grpo"), pool, data.kg,
                                       config.monitor, res.curve)
    return out
