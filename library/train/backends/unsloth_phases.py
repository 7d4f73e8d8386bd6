"""The unsloth backend's phases (NVIDIA CUDA): the torch phase functions (``run_sft``,
``run_rsft``, ``run_grpo``) on an Unsloth FastLanguageModel (``library.train.backends.unsloth``).

Generation never runs through the Unsloth model: RSFT samples, and every phase is evaluated,
with a plain fp32 transformers copy of the base and the phase's saved peft adapter (why: the
module doc of ``library.train.backends.unsloth``). UNTESTED ON HARDWARE (docs/BACKENDS.md).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from library.runs.rollouts import log_episodes
from library.train.backends.phases import PhaseBackend, grpo_info, rsft_info, sft_info
from library.train.backends.unsloth import load_adapter_weights, load_model_unsloth, torch_reference_model
from library.train.data import assert_training_only
from library.train.grpo import run_grpo
from library.train.rsft import ROLLOUTS_DONE, run_rsft, sample_rsft, score_and_select
from library.train.sft import run_sft

# unsloth, torch and trl are imported inside functions (library.train.backends.unsloth says why:
# on a machine without CUDA, importing unsloth fails, and the user gets BackendUnavailable instead).


class UnslothBackend(PhaseBackend):
    name = "unsloth"

    def __init__(self, *, load_in_4bit: bool, eval_device: str = "cuda", max_seq_length: int):
        super().__init__(eval_device=eval_device)
        self.load_in_4bit = load_in_4bit
        self.max_seq_length = max_seq_length
        self._model = None
        self._tokenizer = None
        self._live: str | None = None  # which phase's weights the live adapter holds

    def options(self) -> dict[str, Any]:
        return {"eval_device": self.eval_device, "load_in_4bit": self.load_in_4bit,
                "max_seq_length": self.max_seq_length}

    def _unsloth(self, start_from: str | None):
        """The Unsloth peft model, its adapter holding ``start_from``'s weights (None: fresh LoRA)."""
        config = self.ctx.config
        if self._model is None:
            self._model, self._tokenizer = load_model_unsloth(
                config.model, max_seq_length=self.max_seq_length, load_in_4bit=self.load_in_4bit,
                lora=config.sft.lora, seed=config.seed)
            self._live = None
        if start_from is not None and self._live != start_from:
            load_adapter_weights(self._model, self.ctx.adapter_root / start_from)
            self._live = start_from
        return self._model, self._tokenizer

    def train_phase(self, phase: str, ckpt_dir: Path, adapter_dir: Path) -> dict[str, Any]:
        cfg, sel, run, kg = self.ctx.config, self.ctx.selection, self.ctx.run, self.ctx.data.kg
        if phase == "sft":
            model, tok = self._unsloth(None)
            model, res = run_sft(model, tok, sel.sft, cfg.sft, ckpt_dir=ckpt_dir, adapter_dir=adapter_dir,
                                 seed=cfg.seed, kg=kg, resume=True)
            self._model, self._live = model, "sft"
            return sft_info(res, sel)
        if phase == "rsft":
            from library.model.precision import sampling_precision

            reward = self.ctx.rewards["rsft"]
            sampled, reused = self._sample_rsft_rollouts(ckpt_dir, reward)
            model, tok = self._unsloth("sft")
            model, res = run_rsft(model, tok, sel.rsft_prompts, cfg.rsft, reward, run, ckpt_dir=ckpt_dir,
                                  adapter_dir=adapter_dir, seed=cfg.seed, forbidden_ids=sel.forbidden_ids, resume=True,
                                  monitor=self.phase_monitor("rsft", sel.rsft_prompts))
            self._model, self._live = model, "rsft"
            return rsft_info(res, cfg, seconds_sampling=sampled, reused_rollouts=reused,
                             sampled_with=f"transformers base + the SFT peft adapter, {sampling_precision()}")
        if phase == "grpo":
            reward = self.ctx.rewards["grpo"]
            model, tok = self._unsloth(cfg.grpo.init_from)
            model, res = run_grpo(model, tok, sel.grpo_pool, cfg.grpo, reward, run, ckpt_dir=ckpt_dir,
                                  adapter_dir=adapter_dir, seed=cfg.seed, forbidden_ids=sel.forbidden_ids, resume=True,
                                  monitor=self.phase_monitor("grpo", sel.grpo_pool))
            self._model, self._live = model, "grpo"
            return grpo_info(res)
        raise ValueError(phase)

    def _sample_rsft_rollouts(self, ckpt_dir: Path, reward) -> tuple[float, bool]:
        """RSFT's sampling step with the transformers copy + SFT adapter (never the Unsloth model),
        logged exactly as ``run_rsft`` logs it, with its ``rollouts.done`` marker: ``run_rsft``
        then reuses these rollouts and only trains. Returns ``(sampling seconds, reused)``;
        reused when an earlier attempt already sampled."""
        done = ckpt_dir / ROLLOUTS_DONE
        if done.exists():
            return 0.0, True
        cfg, sel, run = self.ctx.config, self.ctx.selection, self.ctx.run
        questions = list(sel.rsft_prompts)
        assert_training_only(questions, sel.forbidden_ids)
        t0 = time.perf_counter()
        sampler, tok = torch_reference_model(cfg.model, self.ctx.adapter_root / "sft", device=self.eval_device)
        run.drop_episodes("rsft")
        completions = sample_rsft(sampler, tok, questions, cfg.rsft, cfg.seed)
        episodes, _ = score_and_select(questions, completions, reward, winners_rule=cfg.rsft.winners)
        log_episodes(run, episodes, gathered=True)
        done.write_text(f"{len(episodes)}\n", encoding="utf-8")
        del sampler
        return round(time.perf_counter() - t0, 2), False
