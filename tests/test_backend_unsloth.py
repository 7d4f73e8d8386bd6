"""The unsloth backend: where CUDA exists, it runs end to end on the tiny model (base -> SFT ->
RSFT -> GRPO, evaluated after each); everywhere else, ``kgr train --backend unsloth`` stops with
the one-paragraph reason before reading data or creating the run folder.

``make test`` never installs unsloth (on a CPU machine ``pip install unsloth`` replaces torch
with a CUDA build and then refuses to import, docs/MEASUREMENTS.md): on a CUDA machine, install
a CUDA torch and ``pip install -e '.[train,unsloth]'`` first, or the end-to-end branch skips
with that instruction.
"""

from __future__ import annotations

import importlib.util

import pytest

from library.train.backends import BackendUnavailable

pytestmark = [pytest.mark.slow, pytest.mark.train]


def test_unsloth_runs_end_to_end_where_cuda_exists_and_refuses_clearly_elsewhere(tmp_path):
    torch = pytest.importorskip("torch")
    from test_train import tiny_config, write_tiny_data

    from library.train import pipeline

    data_dir = write_tiny_data(tmp_path / "data")
    config = tiny_config(data_dir)
    run_dir = tmp_path / "runs" / "unsloth"

    if not torch.cuda.is_available():
        with pytest.raises(BackendUnavailable) as err:
            pipeline.run_training_with_backend(config, run_dir, backend="unsloth")
        msg = str(err.value)
        assert "NVIDIA GPU" in msg and "--backend torch" in msg and "Traceback" not in msg
        assert not run_dir.exists() and not run_dir.parent.exists()
        return

    if importlib.util.find_spec("unsloth") is None:
        pytest.skip("CUDA is here but unsloth is not installed: pip install -e '.[train,unsloth]' "
                    "(with a CUDA build of torch) to run the unsloth backend end to end")
    run = pipeline.run_training_with_backend(config, run_dir, backend="unsloth", load_in_4bit=False)
    meta, metrics = run.read_meta(), run.read_metrics()
    assert meta["backend"] == "unsloth" and meta["status"] == "complete"
    assert meta["phases_completed"] == ["base", "sft", "rsft", "grpo"]
    for phase in ("base", "sft", "rsft", "grpo"):
        assert metrics["eval"][phase]["n"] == config.eval.n_eval
    for phase in ("sft", "rsft", "grpo"):
        assert (run.path / "adapters" / phase / "adapter_model.safetensors").exists()
        assert metrics["training"][phase]["backend"] == "unsloth"
    assert metrics["curves"]["sft"], "SFT logged no loss"
    rollouts = [ep for ep in run.iter_episodes(phase="grpo") if ep.kind == "rollout"]
    assert len(rollouts) == config.grpo.max_steps * config.grpo.prompts_per_step * config.grpo.num_generations
