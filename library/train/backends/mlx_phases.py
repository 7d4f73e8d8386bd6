"""The mlx backend's phases (Apple Silicon, or Linux x86-64 through mlx-cpu): SFT with ``mlx_lm lora`` (prompt masked), RSFT by
sampling with ``mlx_lm.generate`` and training further with ``--resume-adapter-file``, GRPO
with ``mlx-lm-lora --train-mode grpo`` and the KG reward as its custom reward function.

Native adapters stay in ``adapters/<phase>-mlx/``; each is converted to a peft adapter in
``adapters/<phase>/`` (``library.train.backends.mlx_adapters.mlx_to_peft``), which the shared torch evaluation
loads. Run end to end on the tiny model with mlx-cpu by tests/test_backend_mlx.py; not yet run
on a Mac (docs/BACKENDS.md).
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any, Iterable

from library.contracts import ROLLOUT_KIND
from library.model.chat import SYSTEM_PROMPT
from library.model.load import model_source
from library.runs.rollouts import log_episodes
from library.train.backends import mlx as M
from library.train.backends import mlx_adapters, mlx_grpo
from library.train.backends.phases import PhaseBackend
from library.train.data import assert_training_only
from library.train.grpo import curve_from_episodes
from library.train.rsft import ROLLOUTS_DONE, score_and_select, winners_from_rollouts

# mlx trains and samples in subprocesses and inside library.train.backends.mlx's functions;
# nothing here imports it (the module loads on any OS).

REPO_ROOT = Path(__file__).resolve().parents[3]


class MlxBackend(PhaseBackend):
    name = "mlx"

    def __init__(self, *, eval_device: str = "cpu"):
        super().__init__(eval_device=eval_device)
        self._model_path: str | None = None

    def options(self) -> dict[str, Any]:
        return {"eval_device": self.eval_device}

    @property
    def model_path(self) -> str:
        if self._model_path is None:  # the base folder, with mlx-lm's RoPE keys where it needs them
            self._model_path = M.mlx_model_folder(model_source(self.ctx.config.model),
                                                  self.ctx.run.path / "checkpoints" / "mlx-model")
        return self._model_path

    def keep_rollouts_on_redo(self, phase: str) -> bool:
        # RSFT: finished rollouts are reused (rollouts.done), as on torch. GRPO on mlx restarts
        # from its starting adapter, so its earlier rollouts go.
        return phase == "rsft"

    def _mlx_dir(self, phase: str) -> Path:
        return self.ctx.adapter_root / f"{phase}-mlx"

    def _lora(self, *, iters: int, batch_size: int, learning_rate: float, max_seq_length: int,
              save_every: int, warmup: int = 0, schedule: str = "constant"):
        extra: dict[str, Any] = {"save_every": save_every, "steps_per_report": 1,
                                 "steps_per_eval": max(iters, 1), "val_batches": 1}
        if schedule == "linear":  # the torch path's linear decay (with warmup)
            extra["lr_schedule"] = {"name": "linear_schedule", "arguments": [learning_rate, 0.0, max(1, iters - warmup)],
                                    "warmup": warmup, "warmup_init": 0.0}
        config = self.ctx.config
        return M.mlx_lora_config(config.sft.lora, iters=iters, batch_size=batch_size, learning_rate=learning_rate,
                                 max_seq_length=max_seq_length, seed=config.seed, extra=extra)

    def train_phase(self, phase: str, ckpt_dir: Path, adapter_dir: Path) -> dict[str, Any]:
        cfg, sel = self.ctx.config, self.ctx.selection
        if phase == "sft":
            s = cfg.sft
            records = M.sft_records(sel.sft, system=SYSTEM_PROMPT)
            lora = self._lora(iters=s.max_steps, batch_size=s.batch_size * s.grad_accum, learning_rate=s.learning_rate,
                              max_seq_length=s.max_length, save_every=s.save_steps, warmup=s.warmup_steps,
                              schedule=s.lr_scheduler)
            t0 = time.perf_counter()
            curve = M.train_lora_records(lora, self.model_path, records, ckpt_dir, self._mlx_dir("sft"), name="sft")
            mlx_adapters.mlx_to_peft(self._mlx_dir("sft"), adapter_dir, base_model=cfg.model)
            return {"steps": s.max_steps, "n_examples": len(records), "curve": curve,
                    "seconds": round(time.perf_counter() - t0, 2), "ex_ids": [q.id for q in sel.sft]}
        if phase == "rsft":
            return self._rsft(ckpt_dir, adapter_dir)
        if phase == "grpo":
            s = cfg.grpo
            init = self._mlx_dir(s.init_from)
            lora = self._lora(iters=s.max_steps, batch_size=s.prompts_per_step, learning_rate=s.learning_rate,
                              max_seq_length=max(cfg.sft.max_length, 512), save_every=s.save_steps)
            t0 = time.perf_counter()
            log_curve = mlx_grpo.train_grpo(s, lora, self.model_path, list(sel.grpo_pool), work_dir=ckpt_dir,
                                            adapter_dir=self._mlx_dir("grpo"), init_adapter_dir=init,
                                            kg_path=Path(cfg.kg_path), run_dir=self.ctx.run.path, system=SYSTEM_PROMPT,
                                            seed=cfg.seed, forbidden_ids=sel.forbidden_ids, repo_root=REPO_ROOT)
            mlx_adapters.mlx_to_peft(self._mlx_dir("grpo"), adapter_dir, base_model=cfg.model)
            # the rollouts were logged by mlx-lm-lora's process (mlx_grpo.MlxGrpoReward): read them back once
            episodes = [ep for ep in self.ctx.run.iter_episodes(phase="grpo") if ep.kind == ROLLOUT_KIND]
            return {"steps": s.max_steps, "n_prompts": len(sel.grpo_pool), "n_episodes": len(episodes),
                    "curve": curve_from_episodes(episodes, log_curve), "seconds": round(time.perf_counter() - t0, 2),
                    "reward_to_unit_bounds": list(mlx_grpo.reward_bounds(self.ctx.rewards.config("grpo"))),
                    "rollouts": episodes}
        raise ValueError(phase)

    def _rsft(self, ckpt_dir: Path, adapter_dir: Path) -> dict[str, Any]:
        cfg, sel, run = self.ctx.config, self.ctx.selection, self.ctx.run
        s = cfg.rsft
        questions = list(sel.rsft_prompts)
        by_id = {q.id: q for q in questions}
        done = ckpt_dir / ROLLOUTS_DONE
        t0 = time.perf_counter()
        reused = done.exists()
        if reused:
            episodes = [ep for ep in run.iter_episodes(phase="rsft") if ep.kind == ROLLOUT_KIND]
            winners = winners_from_rollouts(episodes, by_id, "reward")
        else:
            run.drop_episodes("rsft")
            completions = M.sample_mlx(self.model_path, self._mlx_dir("sft"), [q.prompt for q in questions],
                                       k=s.k_samples, temperature=s.temperature, top_p=s.top_p,
                                       max_tokens=s.max_new_tokens, seed=cfg.seed)
            episodes, winners = select_rsft_winners(questions, completions, self.ctx.rewards["rsft"],
                                                    forbidden_ids=sel.forbidden_ids, winners_rule=s.winners,
                                                    backend="mlx")
            episodes = log_episodes(run, episodes, gathered=True)
            done.write_text(f"{len(episodes)}\n", encoding="utf-8")
        t_sample = time.perf_counter() - t0
        n_correct = sum(1 for ep in episodes if ep.correct)
        info: dict[str, Any] = {
            "n_prompts": len(questions), "n_samples": len(episodes), "n_winners": len(winners),
            "n_dropped_wrong": len(questions) - len(winners), "winner_ids": [q.id for q, _ in winners],
            "sample_accuracy": n_correct / len(episodes) if episodes else 0.0, "seconds_sampling": round(t_sample, 2),
            "reused_rollouts": reused, "distribution": s.distribution, "curve": [], "steps": 0,
        }
        if winners:
            records = M.rsft_records(winners, system=SYSTEM_PROMPT)
            lora = self._lora(iters=s.max_steps, batch_size=s.batch_size, learning_rate=s.learning_rate,
                              max_seq_length=s.max_length, save_every=s.save_steps)
            t1 = time.perf_counter()
            info["curve"] = M.train_lora_records(lora, self.model_path, records, ckpt_dir, self._mlx_dir("rsft"),
                                                 resume_adapter_file=self._mlx_dir("sft") / "adapters.safetensors",
                                                 name="rsft")
            info["steps"] = s.max_steps
            info["seconds_training"] = round(time.perf_counter() - t1, 2)
        else:  # nothing correct to learn from: the SFT adapter is this phase's result, as on torch
            shutil.copytree(self._mlx_dir("sft"), self._mlx_dir("rsft"), dirs_exist_ok=True)
            info["skipped_training"] = "no correct samples"
        mlx_adapters.mlx_to_peft(self._mlx_dir("rsft"), adapter_dir, base_model=cfg.model)
        info["rollouts"] = episodes
        return info


def select_rsft_winners(questions, completions, reward_model, *, forbidden_ids: Iterable[str] = (),
                        winners_rule: str = "correct", **fields):
    """Score K samples per training prompt and pick winners with the torch RSFT's own ranking
    (``library.train.rsft.score_and_select``: best by ``rank_key`` under ``rsft.winners``, dropped when
    no sample qualifies).
    Returns ``(episodes, winners)``; the episodes are what RSFT logs (phase rsft, kind rollout,
    plus ``fields`` such as ``backend``)."""
    assert_training_only(questions, forbidden_ids)
    return score_and_select(questions, completions, reward_model, winners_rule=winners_rule, **fields)
