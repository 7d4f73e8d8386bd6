"""``kgr train --backend torch|mlx|unsloth``: one entry point, the same phases, the same run folder.

:func:`run_training_with_backend` is what the CLI calls. ``torch`` is ``library.train.run_training``
unchanged (meta.json then gets ``"backend": "torch"``). ``mlx`` and ``unsloth`` first check the
platform (``select_backend``), so on a machine that cannot run them the user gets the clear
BackendUnavailable message before any data is read or any folder is created; then they run
base -> SFT -> RSFT -> GRPO with their own trainers and write the same contract as torch:

- ``meta.json`` from ``library.train.build_meta`` plus ``backend`` (and ``backend_options``),
  ``phases_completed`` / ``status`` as on torch, so ``--resume`` works the same way;
- ``metrics.json``: per phase the SAME evaluation (``library.train.evaluate_phase``: greedy,
  ``library.generate`` on the transformers model with the phase's peft adapter), curves,
  timings, resources;
- ``episodes.jsonl``: eval episodes and RSFT/GRPO rollouts with the torch field names;
- ``adapters/<phase>/``: a peft adapter for every phase (mlx adapters are converted with
  ``library.backends.mlx.mlx_to_peft``; the native ones stay in ``adapters/<phase>-mlx/``).

Because every backend's adapters are evaluated by the same torch code on the same base
weights, the numbers of a torch, an mlx and an unsloth run compare in one table.

The mlx and unsloth paths are UNTESTED ON HARDWARE (no Mac, no NVIDIA GPU was available);
see docs/BACKENDS.md for what is verified where.
"""

from __future__ import annotations

import datetime as _dt
import time
from pathlib import Path
from typing import Any

from rich.console import Console

from library.backends import BackendUnavailable, select_backend
from library.config import TrainConfig

REPO_ROOT = Path(__file__).resolve().parents[2]
TINY_CACHE_NAME = "tiny-random-llama"


def run_training_with_backend(config: TrainConfig, run_dir: str | Path, *, backend: str = "torch",
                              resume: bool = False, console: Console | None = None,
                              stop_after: str | None = None, load_in_4bit: bool = False,
                              max_seq_length: int | None = None, eval_device: str | None = None):
    """Run (or resume) every phase of ``config`` into ``run_dir`` with ``backend``; return the RunDir.

    ``backend``: ``"torch"`` (default; CPU/CUDA/MPS, multi-GPU through ``accelerate launch``),
    ``"mlx"`` (Apple Silicon) or ``"unsloth"`` (NVIDIA CUDA). Backend options:
    ``load_in_4bit`` / ``max_seq_length`` (unsloth only), ``eval_device`` (mlx: ``"cpu"`` or
    ``"mps"`` for the torch evaluation, default cpu; unsloth: default ``"cuda"``).
    Raises ``BackendUnavailable`` (before touching ``run_dir``) when the platform lacks the backend.
    """
    if backend == "torch":
        select_backend("torch")
        check_multi_process()
        if load_in_4bit or max_seq_length is not None or eval_device is not None:
            raise ValueError("load_in_4bit / max_seq_length / eval_device are options of the mlx and unsloth backends")
        from library.train import run_training

        run = run_training(config, run_dir, resume=resume, console=console, stop_after=stop_after)
        _tag_backend(run, "torch")
        return run
    select_backend(backend)  # raises BackendUnavailable with the reason and the fix
    if world_size() > 1:
        raise BackendUnavailable(f"the {backend} backend trains on one device; launch it without accelerate/torchrun "
                                 "(multi-GPU training is the torch backend's)")
    if config.distribution.enabled:
        raise BackendUnavailable(f"the distribution experiment runs on the torch backend only; "
                                 f"disable distribution.enabled to train with {backend!r}")
    if backend == "mlx":
        if load_in_4bit or max_seq_length is not None:
            raise ValueError("load_in_4bit / max_seq_length are options of the unsloth backend")
        runner: _BackendRun = _MlxRun(config, run_dir, eval_device=eval_device or "cpu")
    elif backend == "unsloth":
        runner = _UnslothRun(config, run_dir, load_in_4bit=load_in_4bit, eval_device=eval_device or "cuda",
                             max_seq_length=max_seq_length or max(config.sft.max_length, config.rsft.max_length, 512))
    else:  # pragma: no cover - select_backend knows only these three
        raise BackendUnavailable(f"unknown backend {backend!r}")
    return runner.run(resume=resume, console=console or Console(stderr=True), stop_after=stop_after)


def world_size() -> int:
    """How many processes ``accelerate launch`` / torchrun started (1 for a plain run)."""
    import os

    try:
        return int(os.environ.get("WORLD_SIZE", "1"))
    except ValueError:
        return 1


def check_multi_process() -> None:
    """Refuse a multi-process (DDP / DeepSpeed) torch run until ``library.train`` is rank-aware.

    Under ``accelerate launch`` every process runs ``run_training`` in full; TRL's trainers
    shard the training correctly, but the evaluation, the RSFT sampling and every write to the
    run folder (meta.json, metrics.json, episodes.jsonl, adapters/) would run once per GPU:
    duplicated episodes and racing writers. ``library.train`` declares that it gates those to
    rank 0 by setting ``MULTI_PROCESS_SAFE = True``; until then this raises instead of
    silently corrupting the run log (docs/BACKENDS.md lists what the gating needs).
    """
    n = world_size()
    if n <= 1:
        return
    import library.train as train

    if not getattr(train, "MULTI_PROCESS_SAFE", False):
        raise BackendUnavailable(
            f"this is a {n}-process launch (WORLD_SIZE={n}), but library.train does not yet gate evaluation, "
            "RSFT sampling and run-folder writes to rank 0 (MULTI_PROCESS_SAFE is not set), so every GPU "
            "would log its own copy of every episode. Run on one GPU (plain `kgr train`) for now; "
            "see docs/BACKENDS.md, 'Multi-GPU'.")


def _tag_backend(run, name: str) -> None:
    meta_path = run.path / "meta.json"
    if meta_path.exists():
        meta = run.read_meta()
        if meta.get("backend") != name:
            meta["backend"] = name
            run.write_meta(meta)


def model_source(spec: str, *, cache_dir: str | Path | None = None) -> str:
    """A folder (or hub id) that non-transformers loaders (mlx-lm, Unsloth) can read for ``spec``.

    ``embedded``: the dequantized fp32 folder (built once by ``library.model.convert_embedded``);
    ``tiny``: the seeded tiny model saved once to ``<cache>/tiny-random-llama``; a local folder or
    a hub id is passed through.
    """
    from library.model import DEFAULT_CACHE_DIR, resolve_model_spec

    cache = Path(cache_dir) if cache_dir is not None else DEFAULT_CACHE_DIR
    resolved = resolve_model_spec(spec, cache_dir=cache)
    if resolved.kind == "embedded":
        from library.model import convert_embedded

        return str(convert_embedded(cache))
    if resolved.kind == "tiny":
        target = cache / TINY_CACHE_NAME
        if not (target / "config.json").exists():
            from library.model import build_tiny_model, load_tokenizer

            tokenizer = load_tokenizer("tiny", cache_dir=cache)
            model = build_tiny_model(tokenizer)
            target.mkdir(parents=True, exist_ok=True)
            tokenizer.save_pretrained(target)
            model.save_pretrained(target)  # config.json last-ish: its presence marks a full save
        return str(target)
    return str(resolved.path) if resolved.path is not None else resolved.name


# ----------------------------------------------------------------------------- the shared loop
class _BackendRun:
    """Bookkeeping shared by the mlx and unsloth runs, mirroring ``library.train.run_training``."""

    name = ""

    def __init__(self, config: TrainConfig, run_dir: str | Path, *, eval_device: str):
        self.config = config
        self.run_dir = Path(run_dir)
        self.eval_device = eval_device

    def options(self) -> dict[str, Any]:
        return {"eval_device": self.eval_device}

    # per-backend hooks ---------------------------------------------------------
    def train_phase(self, phase: str, ckpt_dir: Path, adapter_dir: Path) -> dict[str, Any]:
        raise NotImplementedError

    def keep_rollouts_on_redo(self, phase: str) -> bool:
        return phase in ("rsft", "grpo")

    # the loop ------------------------------------------------------------------
    def run(self, *, resume: bool, console: Console, stop_after: str | None):
        from transformers import set_seed

        from library.model import load_model, model_info
        from library.reward import RewardConfig, RewardModel
        from library.runs import RunDir
        from library.sft import load_adapter
        from library.train import (ResumeError, _drop_phase_episodes, _mark_trained, _trained, build_meta,
                                   evaluate_phase, finish_run, load_data, make_selection, peak_rss_mb)

        config, run_dir = self.config, self.run_dir
        run = RunDir(run_dir)
        fresh = not (run_dir / "meta.json").exists()
        if not fresh and not resume:
            raise ResumeError(f"{run_dir} already holds a run; pass --resume to continue it or choose another --run")
        run_dir.mkdir(parents=True, exist_ok=True)
        t_start = time.perf_counter()
        self.data = data = load_data(config)
        self.selection = selection = make_selection(config, data)
        self.run_handle = run
        self.console = console
        # The evaluation model: the same transformers base the torch backend evaluates.
        base, tokenizer = load_model(config.model, device=self.eval_device)
        self.eval_tokenizer = tokenizer
        if fresh:
            meta = build_meta(config, run, data, selection, model_info(base))
            meta["backend"] = self.name
            meta["backend_options"] = self.options()
            run.write_meta(meta)
        else:
            meta = run.read_meta()
            if meta.get("backend", "torch") != self.name:
                raise ResumeError(f"{run_dir} was trained with backend {meta.get('backend', 'torch')!r}, not {self.name!r}")
            if meta.get("config") != config.to_meta():
                raise ResumeError(f"{run_dir} was started with different settings; resume needs the same profile and model")
            if meta.get("data") != data.hashes:
                raise ResumeError(f"the data files changed since {run_dir} was started (sha256 differs)")
            if meta.get("status") != "complete":
                meta["status"] = "running"
                meta.setdefault("resumed", []).append(_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"))
                run.write_meta(meta)
        completed: list[str] = list(meta.get("phases_completed", []))
        metrics = run.read_metrics()
        for key in ("curves", "timings", "resources"):
            metrics.setdefault(key, {})
        eval_reward = RewardModel(data.kg, RewardConfig.preset_named(config.eval.reward_preset))
        ckpt_root, adapter_root = run_dir / "checkpoints", run_dir / "adapters"
        self.adapter_root = adapter_root
        console.print(f"[bold]kgr train[/] backend={self.name} profile={config.profile} model={config.model} "
                      f"run={run_dir} phases={' -> '.join(config.phases())}")

        did_work = False
        for phase in config.phases():
            if phase in completed:
                continue
            console.rule(f"[bold]{phase} ({self.name})")
            set_seed(config.seed)
            ckpt_dir, adapter_dir = ckpt_root / phase, adapter_root / phase
            t0 = time.perf_counter()
            phase_model = base
            if phase == "base":
                _drop_phase_episodes(run, phase, keep_rollouts=False, keep_eval=True)
            else:
                info = _trained(ckpt_dir, adapter_dir)
                _drop_phase_episodes(run, phase, keep_rollouts=self.keep_rollouts_on_redo(phase),
                                     keep_eval=info is not None)
                if info is None:
                    ckpt_dir.mkdir(parents=True, exist_ok=True)
                    info = self.train_phase(phase, ckpt_dir, adapter_dir)
                    info["backend"] = self.name
                    info.setdefault("wall_seconds", round(time.perf_counter() - t0, 2))
                    _mark_trained(ckpt_dir, info)
                    metrics["curves"][phase] = info.get("curve", [])
                    metrics["timings"][phase] = round(time.perf_counter() - t0, 2)
                    metrics.setdefault("training", {})[phase] = {k: v for k, v in info.items()
                                                                 if k not in ("curve", "ex_ids", "winner_ids")}
                else:
                    console.print(f"  training of {phase} already finished; re-running its eval only")
                phase_model = load_adapter(base, adapter_dir, trainable=False)
            t1 = time.perf_counter()
            phase_model.eval()
            blocks = evaluate_phase(phase_model, tokenizer, phase, selection, eval_reward, run, config, console)
            metrics["timings"][f"{phase}_eval"] = round(time.perf_counter() - t1, 2)
            if phase_model is not base:
                base = phase_model.unload()
            did_work = True
            for key, block in blocks.items():
                metrics.setdefault(key, {})[phase] = block
            metrics["resources"]["peak_rss_mb"] = max(peak_rss_mb(), metrics["resources"].get("peak_rss_mb", 0.0))
            metrics["resources"].setdefault("peak_rss_mb_after", {})[phase] = peak_rss_mb()
            run.write_metrics(metrics)
            completed.append(phase)
            meta["phases_completed"] = list(completed)
            run.write_meta(meta)
            if stop_after == phase:
                meta["status"] = f"stopped after {phase}"
                run.write_meta(meta)
                return run
        if did_work or meta.get("status") != "complete":
            finish_run(run, meta, metrics, t_start)
        console.print(f"[bold green]done[/] ({self.name}) in {time.perf_counter() - t_start:.0f}s")
        return run


# ----------------------------------------------------------------------------- mlx (Apple Silicon)
class _MlxRun(_BackendRun):
    """SFT with ``mlx_lm lora`` (prompt masked), RSFT by sampling with ``mlx_lm.generate`` and
    training further with ``--resume-adapter-file``, GRPO with ``mlx-lm-lora --train-mode grpo``
    and the KG reward as its custom reward function. UNTESTED ON HARDWARE."""

    name = "mlx"

    def __init__(self, config: TrainConfig, run_dir, *, eval_device: str):
        super().__init__(config, run_dir, eval_device=eval_device)
        self._model_path: str | None = None

    @property
    def model_path(self) -> str:
        if self._model_path is None:
            self._model_path = model_source(self.config.model)
        return self._model_path

    def keep_rollouts_on_redo(self, phase: str) -> bool:
        # RSFT: finished rollouts are reused (rollouts.done), as on torch. GRPO on mlx restarts
        # from its starting adapter, so its earlier rollouts go.
        return phase == "rsft"

    def _mlx_dir(self, phase: str) -> Path:
        return self.adapter_root / f"{phase}-mlx"

    def _lora(self, *, iters: int, batch_size: int, learning_rate: float, max_seq_length: int,
              save_every: int, warmup: int = 0, schedule: str = "constant"):
        from library.backends.mlx import mlx_lora_config

        extra: dict[str, Any] = {"save_every": save_every, "steps_per_report": 1,
                                 "steps_per_eval": max(iters, 1), "val_batches": 1}
        if schedule == "linear":  # the torch path's linear decay (with warmup)
            extra["lr_schedule"] = {"name": "linear_schedule", "arguments": [learning_rate, 0.0, max(1, iters - warmup)],
                                    "warmup": warmup, "warmup_init": 0.0}
        return mlx_lora_config(self.config.sft.lora, iters=iters, batch_size=batch_size, learning_rate=learning_rate,
                               max_seq_length=max_seq_length, seed=self.config.seed, extra=extra)

    def train_phase(self, phase: str, ckpt_dir: Path, adapter_dir: Path) -> dict[str, Any]:
        from library.backends import mlx as M
        from library.model import SYSTEM_PROMPT

        cfg, sel = self.config, self.selection
        if phase == "sft":
            s = cfg.sft
            records = M.sft_records(sel.sft, system=SYSTEM_PROMPT)
            lora = self._lora(iters=s.max_steps, batch_size=s.batch_size * s.grad_accum, learning_rate=s.learning_rate,
                              max_seq_length=s.max_length, save_every=s.save_steps, warmup=s.warmup_steps,
                              schedule=s.lr_scheduler)
            t0 = time.perf_counter()
            curve = M.train_lora_records(lora, self.model_path, records, ckpt_dir, self._mlx_dir("sft"), name="sft")
            M.mlx_to_peft(self._mlx_dir("sft"), adapter_dir, base_model=cfg.model)
            return {"steps": s.max_steps, "n_examples": len(records), "curve": curve,
                    "seconds": round(time.perf_counter() - t0, 2), "ex_ids": [q.id for q in sel.sft]}
        if phase == "rsft":
            return self._rsft(ckpt_dir, adapter_dir)
        if phase == "grpo":
            from library.grpo import curve_from_episodes

            s = cfg.grpo
            init = self._mlx_dir(s.init_from)
            lora = self._lora(iters=s.max_steps, batch_size=s.prompts_per_step, learning_rate=s.learning_rate,
                              max_seq_length=max(cfg.sft.max_length, 512), save_every=s.save_steps)
            t0 = time.perf_counter()
            log_curve = M.train_grpo(s, lora, self.model_path, list(sel.grpo_pool), work_dir=ckpt_dir,
                                     adapter_dir=self._mlx_dir("grpo"), init_adapter_dir=init,
                                     kg_path=Path(cfg.kg_path), run_dir=self.run_dir, system=SYSTEM_PROMPT,
                                     seed=cfg.seed, forbidden_ids=sel.forbidden_ids, repo_root=REPO_ROOT)
            M.mlx_to_peft(self._mlx_dir("grpo"), adapter_dir, base_model=cfg.model)
            episodes = list(self.run_handle.iter_episodes(phase="grpo"))
            return {"steps": s.max_steps, "n_prompts": len(sel.grpo_pool),
                    "n_episodes": sum(1 for ep in episodes if ep.kind == "rollout"),
                    "curve": curve_from_episodes(episodes, log_curve), "seconds": round(time.perf_counter() - t0, 2),
                    "reward_to_unit_bounds": list(M.reward_bounds(_reward_config(s.reward_preset)))}
        raise ValueError(phase)

    def _rsft(self, ckpt_dir: Path, adapter_dir: Path) -> dict[str, Any]:
        import shutil

        from library.backends import mlx as M
        from library.model import SYSTEM_PROMPT
        from library.reward import RewardModel
        from library.rsft import ROLLOUT_KIND, ROLLOUTS_DONE

        cfg, sel, run = self.config, self.selection, self.run_handle
        s = cfg.rsft
        questions = list(sel.rsft_prompts)
        by_id = {q.id: q for q in questions}
        done = ckpt_dir / ROLLOUTS_DONE
        t0 = time.perf_counter()
        reused = done.exists()
        if reused:
            episodes = [ep for ep in run.iter_episodes(phase="rsft") if ep.kind == ROLLOUT_KIND]
            winners = [(by_id[ep.ex_id], ep.completion) for ep in episodes if ep.selected]
        else:
            run.drop_episodes("rsft")
            completions = M.sample_mlx(self.model_path, self._mlx_dir("sft"), [q.prompt for q in questions],
                                       k=s.k_samples, temperature=s.temperature, top_p=s.top_p,
                                       max_tokens=s.max_new_tokens, seed=cfg.seed)
            reward = RewardModel(self.data.kg, _reward_config(s.reward_preset))
            episodes, winners = M.select_rsft_winners(questions, completions, reward, forbidden_ids=sel.forbidden_ids,
                                                      backend="mlx")
            run.append_episodes(episodes)
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
        M.mlx_to_peft(self._mlx_dir("rsft"), adapter_dir, base_model=cfg.model)
        return info


def _reward_config(name: str):
    from library.reward import RewardConfig

    return RewardConfig.preset_named(name)


# ----------------------------------------------------------------------------- unsloth (CUDA)
class _UnslothRun(_BackendRun):
    """The torch phases (run_sft / run_rsft / run_grpo) on an Unsloth FastLanguageModel.
    UNTESTED ON HARDWARE."""

    name = "unsloth"

    def __init__(self, config: TrainConfig, run_dir, *, load_in_4bit: bool, eval_device: str, max_seq_length: int):
        super().__init__(config, run_dir, eval_device=eval_device)
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
        from library.backends.unsloth import load_adapter_weights, load_model_unsloth

        if self._model is None:
            self._model, self._tokenizer = load_model_unsloth(
                self.config.model, max_seq_length=self.max_seq_length, load_in_4bit=self.load_in_4bit,
                lora=self.config.sft.lora, seed=self.config.seed)
            self._live = None
        if start_from is not None and self._live != start_from:
            load_adapter_weights(self._model, self.adapter_root / start_from)
            self._live = start_from
        return self._model, self._tokenizer

    def train_phase(self, phase: str, ckpt_dir: Path, adapter_dir: Path) -> dict[str, Any]:
        from library.reward import RewardModel

        cfg, sel, run = self.config, self.selection, self.run_handle
        if phase == "sft":
            from library.sft import run_sft

            model, tok = self._unsloth(None)
            model, res = run_sft(model, tok, sel.sft, cfg.sft, ckpt_dir=ckpt_dir, adapter_dir=adapter_dir,
                                 seed=cfg.seed, kg=self.data.kg, train_paths=sel.train_paths, resume=True)
            self._model, self._live = model, "sft"
            return {"steps": res.steps, "n_examples": res.n_examples, "curve": res.curve, "seconds": res.seconds,
                    "resumed_from": res.resumed_from, "trainable_params": res.trainable_params,
                    "total_params": res.total_params, "ex_ids": [q.id for q in sel.sft]}
        if phase == "rsft":
            from library.rsft import run_rsft

            reward = RewardModel(self.data.kg, _reward_config(cfg.rsft.reward_preset))
            sampled, reused = self._sample_rsft_rollouts(ckpt_dir, reward)
            model, tok = self._unsloth("sft")
            model, res = run_rsft(model, tok, sel.rsft_prompts, cfg.rsft, reward, run, ckpt_dir=ckpt_dir,
                                  adapter_dir=adapter_dir, seed=cfg.seed, forbidden_ids=sel.forbidden_ids, resume=True)
            self._model, self._live = model, "rsft"
            return {"n_prompts": res.n_prompts, "n_samples": res.n_samples, "n_winners": res.n_winners,
                    "n_dropped_wrong": res.n_dropped_wrong, "sample_accuracy": res.sample_accuracy,
                    "seconds_sampling": sampled, "seconds_training": res.seconds_training,
                    "reused_rollouts": reused, "distribution": cfg.rsft.distribution,
                    "sampled_with": "transformers fp32 base + the SFT peft adapter",
                    "winner_ids": res.winner_ids, "curve": res.train.curve if res.train else [],
                    "steps": res.train.steps if res.train else 0, **res.extra}
        if phase == "grpo":
            from library.grpo import run_grpo

            reward = RewardModel(self.data.kg, _reward_config(cfg.grpo.reward_preset))
            model, tok = self._unsloth(cfg.grpo.init_from)
            model, res = run_grpo(model, tok, sel.grpo_pool, cfg.grpo, reward, run, ckpt_dir=ckpt_dir,
                                  adapter_dir=adapter_dir, seed=cfg.seed, forbidden_ids=sel.forbidden_ids, resume=True)
            self._model, self._live = model, "grpo"
            return {"steps": res.steps, "n_prompts": res.n_prompts, "n_episodes": res.n_episodes, "curve": res.curve,
                    "seconds": res.seconds, "resumed_from": res.resumed_from, "reward_weights": res.reward_weights}
        raise ValueError(phase)

    def _sample_rsft_rollouts(self, ckpt_dir: Path, reward) -> tuple[float, bool]:
        """RSFT's sampling step with the transformers copy + SFT adapter (never the Unsloth model,
        see library/backends/unsloth.py), logged exactly as ``run_rsft`` logs it, with its
        ``rollouts.done`` marker: ``run_rsft`` then reuses these rollouts and only trains.
        Returns ``(sampling seconds, reused)``; reused when an earlier attempt already sampled."""
        from library.backends.unsloth import torch_reference_model
        from library.rsft import ROLLOUTS_DONE, assert_training_only, sample_completions, score_and_select

        done = ckpt_dir / ROLLOUTS_DONE
        if done.exists():
            return 0.0, True
        cfg, sel, run = self.config, self.selection, self.run_handle
        questions = list(sel.rsft_prompts)
        assert_training_only(questions, sel.forbidden_ids)
        t0 = time.perf_counter()
        sampler, tok = torch_reference_model(cfg.model, self.adapter_root / "sft", device=self.eval_device)
        run.drop_episodes("rsft")
        completions = sample_completions(sampler, tok, questions, cfg.rsft, cfg.seed)
        episodes, _ = score_and_select(questions, completions, reward)
        run.append_episodes(episodes)
        done.write_text(f"{len(episodes)}\n", encoding="utf-8")
        del sampler
        return round(time.perf_counter() - t0, 2), False


__all__ = ["run_training_with_backend", "model_source", "BackendUnavailable"]
