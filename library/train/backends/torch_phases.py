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

from library.train.backends.phases import PhaseBackend, RunContext, grpo_info, rsft_info, sft_info
from library.train.checkpoints import add_lora, load_adapter, load_full_model, load_phase_model
from library.train.grpo import run_grpo
from library.train.rsft import run_rsft
from library.train.sft import run_sft

# torch, transformers, peft and trl are imported inside the phase functions (the CLI starts without them).


class TorchBackend(PhaseBackend):
    name = "torch"

    def start(self, ctx: RunContext, base) -> None:
        super().start(ctx, base)
        self.sft_full = ctx.config.sft.method == "full"
        self.base_is_sft = False
        self.trained = None  # the model train_phase just trained, evaluated as it is

    def rl_base(self):
        """The model RL adapters go on: the SFT model with full fine-tuning, else the base."""
        if self.sft_full and not self.base_is_sft:
            self.base, self.base_is_sft = load_full_model(self.ctx.adapter_root / "sft"), True
        return self.base

    def policy(self, init_from: str):
        """The trainable policy an RL phase starts from: the saved result of ``init_from``."""
        if self.sft_full and init_from == "sft":
            return add_lora(self.rl_base(), self.ctx.config.sft.lora)
        return load_adapter(self.rl_base(), self.ctx.adapter_root / init_from, trainable=True)

    def train_phase(self, phase: str, ckpt_dir: Path, adapter_dir: Path) -> dict[str, Any]:
        ctx = self.ctx
        config, selection, kg = ctx.config, ctx.selection, ctx.data.kg
        if phase == "sft":
            self.trained, res = run_sft(self.base, ctx.tokenizer, selection.sft, config.sft, ckpt_dir=ckpt_dir, kg=kg,
                                        adapter_dir=adapter_dir,
                                        seed=config.seed, resume=True)
            return sft_info(res, selection)
        if phase == "rsft":
            start = self.policy("sft")
            self.trained, res = run_rsft(start, ctx.tokenizer, selection.rsft_prompts, config.rsft, ctx.rewards["rsft"],
                                         ctx.run, ckpt_dir=ckpt_dir, adapter_dir=adapter_dir, seed=config.seed,
                                         forbidden_ids=selection.forbidden_ids, resume=True,
                                         monitor=self.phase_monitor("rsft", selection.rsft_prompts))
            return rsft_info(res, config)
        if phase == "grpo":
            start = self.policy(config.grpo.init_from)
            self.trained, res = run_grpo(start, ctx.tokenizer, selection.grpo_pool, config.grpo, ctx.rewards["grpo"],
                                         ctx.run, ckpt_dir=ckpt_dir, adapter_dir=adapter_dir, seed=config.seed,
                                         forbidden_ids=selection.forbidden_ids, resume=True,
                                         monitor=self.phase_monitor("grpo", selection.grpo_pool))
            return grpo_info(res)
        raise ValueError(phase)

    @contextmanager
    def eval_model(self, phase: str, adapter_dir: Path) -> Iterator[Any]:
        if phase == "base":
            yield self.base
            return
        model, self.trained = self.trained, None
        if model is None:  # trained by an earlier process: its saved result, resolved as "try it" does
            # the SFT model is loaded once and kept as every later phase's base (rl_base)
            base = self.base if phase == "sft" else self.rl_base()
            model = load_phase_model(base, adapter_dir.parent, phase, sft_full=False)
        yield model
        if phase == "sft" and self.sft_full:  # trained in place: every later phase's base
            self.base, self.base_is_sft = model, True
        else:
            self.base = model.unload()  # drop the LoRA layers (unmerged): the next phase loads its own adapter
