"""The torch backend (transformers + peft + TRL; CPU, CUDA or MPS): the portable default.

Phases: ``library.train.sft.run_sft``, ``library.train.rsft.run_rsft``, ``library.train.grpo.run_grpo``. The
model a phase trains is the one its evaluation then uses (no reload from disk), and training
and evaluation share one base model: each phase's adapter is put on it and taken off again.

With full-fine-tuning SFT (``sft.method: full``) the SFT model, not the original, is what RSFT
and GRPO put their LoRA adapters on; a resumed run that starts after SFT loads it once.
"""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from library.train.backends.phases import PhaseBackend, RunContext


class TorchBackend(PhaseBackend):
    name = "torch"
    pass_rate_pool = True

    def start(self, ctx: RunContext, base) -> None:
        super().start(ctx, base)
        self.sft_full = ctx.config.sft.method == "full"
        self.base_is_sft = False
        self.trained = None  # the model train_phase just trained, evaluated as it is

    def rl_base(self):
        """The model RL adapters go on: the SFT model with full fine-tuning, else the base."""
        if self.sft_full and not self.base_is_sft:
            from library.train.checkpoints import load_full_model

            self.base, self.base_is_sft = load_full_model(self.ctx.adapter_root / "sft"), True
        return self.base

    def policy(self, init_from: str):
        """The trainable policy an RL phase starts from: the saved result of ``init_from``."""
        from library.train.checkpoints import add_lora, load_adapter

        if self.sft_full and init_from == "sft":
            return add_lora(self.rl_base(), self.ctx.config.sft.lora)
        return load_adapter(self.rl_base(), self.ctx.adapter_root / init_from, trainable=True)

    def train_phase(self, phase: str, ckpt_dir: Path, adapter_dir: Path) -> dict[str, Any]:
        from library.scoring.reward import RewardModel

        ctx = self.ctx
        config, selection, kg = ctx.config, ctx.selection, ctx.data.kg
        if phase == "sft":
            from library.train.sft import run_sft

            self.trained, res = run_sft(self.base, ctx.tokenizer, selection.sft, config.sft, ckpt_dir=ckpt_dir, kg=kg,
                                        train_paths=selection.train_paths, adapter_dir=adapter_dir,
                                        seed=config.seed, resume=True)
            return sft_info(res, selection)
        if phase == "rsft":
            from library.train.rsft import run_rsft

            start = self.policy("sft")
            reward = RewardModel.from_preset(kg, config.rsft.reward_preset)
            self.trained, res = run_rsft(start, ctx.tokenizer, selection.rsft_prompts, config.rsft, reward, ctx.run,
                                         ckpt_dir=ckpt_dir, adapter_dir=adapter_dir, seed=config.seed,
                                         forbidden_ids=selection.forbidden_ids, resume=True,
                                         monitor=self.phase_monitor("rsft", selection.rsft_prompts))
            return rsft_info(res, config)
        if phase == "grpo":
            from library.train.grpo import run_grpo

            from library.train.pool import POOL_FILE, grpo_prompts, pool_pass_rates

            start = self.policy(config.grpo.init_from)
            reward = RewardModel.from_preset(kg, config.grpo.reward_preset)
            pool, pool_info = grpo_prompts(start, ctx.tokenizer, selection, config.grpo, reward, seed=config.seed,
                                           cache=ckpt_dir / POOL_FILE)
            self.trained, res = run_grpo(start, ctx.tokenizer, pool, config.grpo, reward, ctx.run,
                                         ckpt_dir=ckpt_dir, adapter_dir=adapter_dir, seed=config.seed,
                                         forbidden_ids=selection.forbidden_ids, resume=True,
                                         monitor=self.phase_monitor("grpo", pool),
                                         pass_rates=(pool_info or {}).get("right_kept"))
            info = grpo_info(res)
            if pool_info is not None:
                info["pool"] = {**pool_info, **pool_pass_rates(self.trained, ctx.tokenizer, pool, config.grpo, reward,
                                                                config.seed)}
            return info
        raise ValueError(phase)

    @contextmanager
    def eval_model(self, phase: str, adapter_dir: Path) -> Iterator[Any]:
        if phase == "base":
            yield self.base
            return
        model, self.trained = self.trained, None
        if model is None:  # trained by an earlier process: its saved result, resolved as "try it" does
            from library.train.checkpoints import load_phase_model

            # the SFT model is loaded once and kept as every later phase's base (rl_base)
            base = self.base if phase == "sft" else self.rl_base()
            model = load_phase_model(base, adapter_dir.parent, phase, sft_full=False)
        yield model
        if phase == "sft" and self.sft_full:  # trained in place: every later phase's base
            self.base, self.base_is_sft = model, True
        else:
            self.base = model.unload()  # drop the LoRA layers (unmerged): the next phase loads its own adapter


# The ``training`` records of the phase functions' results (the unsloth backend runs the same
# functions and records them the same way).
def sft_info(res, selection) -> dict[str, Any]:
    return {"steps": res.steps, "n_examples": res.n_examples, "curve": res.curve,
            "seconds": res.seconds, "resumed_from": res.resumed_from,
            "trainable_params": res.trainable_params, "total_params": res.total_params,
            "ex_ids": [q.id for q in selection.sft]}  # what SFT trained on, for audits


def rsft_info(res, config, **overrides: Any) -> dict[str, Any]:
    info = {"n_prompts": res.n_prompts, "n_samples": res.n_samples, "n_winners": res.n_winners,
            "n_dropped_wrong": res.n_dropped_wrong, "sample_accuracy": res.sample_accuracy,
            "seconds_sampling": res.seconds_sampling, "seconds_training": res.seconds_training,
            "reused_rollouts": res.reused_rollouts, "distribution": config.rsft.distribution,
            "winner_ids": res.winner_ids,
            "curve": res.train.curve if res.train else [], "steps": res.train.steps if res.train else 0}
    info.update(overrides)
    info.update(res.extra)
    return info


def grpo_info(res) -> dict[str, Any]:
    return {"steps": res.steps, "n_prompts": res.n_prompts, "n_episodes": res.n_episodes,
            "curve": res.curve, "seconds": res.seconds, "resumed_from": res.resumed_from,
            "reward_weights": res.reward_weights,
            **({"stopped_by_monitor": res.stopped_by_monitor} if res.stopped_by_monitor else {}),
            **({"pool_learned_at": res.learned_at} if res.learned_at else {}),
            **({"draws": res.draws} if res.draws else {})}
