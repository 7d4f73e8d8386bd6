"""The distribution trap: RSFT from the SFT result on easy (1-3-hop) against hard (4-5-hop)
training prompts, each evaluated on the same eval subset. Does training on problems like the
test set beat training on easier ones the model can already solve?

It runs beside the pipeline, on a finished run (:func:`library.experiments.run_experiments`).
"""

from __future__ import annotations

import time
from typing import Any, Callable

from rich.console import Console

from library.config import TrainConfig
from library.contracts import ROLLOUT_KIND
from library.evaluation.evaluate import evaluate
from library.model.distributed import is_writer, wait_for_everyone
from library.questions.balance import select_balanced
from library.runs.folder import RunDir
from library.train.data import DataBundle, Selection, reference_window, rsft_pool, select_prompts
from library.train.rewards import RunRewards
from library.train.rsft import run_rsft

# torch, transformers and trl are imported inside the functions that train (the CLI starts without them).


def run_distribution(policy: Callable[[str], Any], tokenizer, config: TrainConfig, data: DataBundle,
                     selection: Selection, rewards: RunRewards, run: RunDir, console: Console,
                     main_rsft: dict[str, Any] | None = None) -> dict[str, Any]:
    """RSFT from the SFT result (``policy("sft")``: a trainable policy, from the torch backend) on
    each training distribution, each evaluated on the same eval subset.

    Each condition is its own small run folder under ``<run>/distribution/<condition>/`` (its
    rollouts and eval episodes would otherwise mix with the main RSFT phase's in episodes.jsonl).
    ``easy`` draws prompts of SFT's longest training length that SFT did not show, ``hard``
    train_hard's (4-5 hops), ``mix`` half each; each keeps winners as the main RSFT phase does,
    in a window that holds its longest reference. A condition whose prompts and settings are
    the main RSFT phase's (``main_rsft`` is its training info: the paper profile's ``easy``) is
    not trained twice: its adapter is evaluated on the subset, and the entry says
    ``"from_phase": "rsft"``.
    """
    from transformers import set_seed

    out: dict[str, Any] = {}
    eval_sub = select_balanced(data.eval, config.distribution.n_eval, f"{config.seed}:distribution")
    grpo_ids = {q.id for q in selection.grpo_pool}
    # easy: SFT's longest training length, questions SFT did not show; hard: train_hard (4-5 hops)
    easy = rsft_pool(data, [max(q.hop_len for q in selection.sft)], selection.sft, grpo_ids)
    pools = {"easy": easy, "hard": [], "mix": easy}
    main_ids = [q.id for q in selection.rsft_prompts]
    for cond in config.distribution.conditions:
        console.rule(f"[bold]distribution: RSFT on {cond}")
        set_seed(config.seed)
        sub = RunDir(run.path / "distribution" / cond)
        sub.path.mkdir(parents=True, exist_ok=True)
        prompts = select_prompts(pools[cond], data.train_hard, cond, config.rsft.n_prompts, config.seed,
                                 exclude=grpo_ids)
        settings = config.rsft.model_copy(update={"distribution": cond})
        if config.generation.fit_windows:  # 5-hop TRACEs are longer than the main RSFT's window
            settings.max_new_tokens = max(settings.max_new_tokens, reference_window(prompts, tokenizer))
        t0 = time.perf_counter()
        # the main RSFT phase trained these very prompts from the same SFT (config's window was
        # already fitted to them, so the settings are its settings)
        reused = main_rsft is not None and config.rsft.enabled and [q.id for q in prompts] == main_ids
        if reused:
            console.print(f"  [dim]{cond}: the main RSFT phase's adapter (same SFT start, prompts and settings)[/]")
            model = policy("rsft")
            n_winners, n_prompts = main_rsft.get("n_winners"), main_rsft.get("n_prompts")
            if is_writer():
                sub.keep_episodes(lambda ep: False)  # an eval left by an interrupted attempt: redo it
        else:
            start = policy("sft")
            model, res = run_rsft(start, tokenizer, prompts, settings, rewards["rsft"], sub,
                                  ckpt_dir=run.path / "checkpoints" / "distribution" / cond,
                                  adapter_dir=run.path / "adapters" / "distribution" / cond,
                                  seed=config.seed, forbidden_ids=selection.forbidden_ids, resume=True)
            n_winners, n_prompts = res.n_winners, res.n_prompts
            # An eval left by an interrupted attempt may come from a less-trained adapter: redo it.
            if is_writer():
                sub.keep_episodes(lambda ep: ep.get("kind") == ROLLOUT_KIND)
        wait_for_everyone()
        model.eval()
        block = evaluate(model, tokenizer, eval_sub, rewards["eval"], phase="rsft", split="eval", run=sub,
                         batch_size=config.eval.batch_size, max_new_tokens=config.eval.max_new_tokens)
        model.unload()
        train_split = {"easy": "train", "hard": "train_hard", "mix": "train+train_hard"}[cond]
        out[cond] = {k: block[k] for k in ("n", "correct", "accuracy", "accuracy_ci") if k in block}
        out[cond].update({"by_hop": block.get("by_hop", {}), "train_split": train_split,
                          "prompt_hops": sorted({q.hop_len for q in prompts}),
                          "n_winners": n_winners, "n_prompts": n_prompts,
                          "seconds": round(time.perf_counter() - t0, 2)})
        if reused:
            out[cond]["from_phase"] = "rsft"
    return out
