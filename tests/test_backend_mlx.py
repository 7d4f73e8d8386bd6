"""The mlx backend end to end with real MLX: base -> SFT -> RSFT -> GRPO, evaluated after each
phase, on the tiny model and the tiny KG (``kgr train --backend mlx`` with small step counts).

Runs on Apple Silicon and on Linux x86-64 through ``mlx-cpu`` (MLX's Linux CPU build), which
``make test`` installs with the ``mlx`` extra. Nothing of the backend is faked: ``mlx_lm lora``
trains SFT and RSFT, ``mlx_lm.generate`` samples RSFT's rollouts, ``mlx_lm fuse`` builds GRPO's KL
reference, ``mlx-lm-lora`` runs GRPO with the KG reward, every adapter is converted to peft and
evaluated by the torch code. One thing is added: the random tiny model is never right, so one
reference completion joins RSFT's real samples, or RSFT would have no winner to train on.

Skipped (with the reason) only where the mlx backend cannot run: mlx not installed, or a
platform MLX has no build for. In CI on a platform the extra installs on, that is a failure.
"""

from __future__ import annotations

import json
import math
import os
import platform
import sys

import numpy as np
import pytest

from library.train.backends import BACKENDS, BackendUnavailable, select_backend

pytestmark = [pytest.mark.slow, pytest.mark.train]


def _require_mlx() -> None:
    try:
        select_backend("mlx")
    except BackendUnavailable as exc:
        if os.environ.get("CI") == "true" and BACKENDS["mlx"].platform_check() is None:
            pytest.fail(f"CI installs the mlx extra on {sys.platform}/{platform.machine()} (Makefile `test`), "
                        f"yet the mlx backend is unavailable: {exc}")
        pytest.skip(f"the mlx backend cannot run here: {exc}")


#: a step or two of each phase (tests/test_train.py's tiny settings, GRPO cut to one step)
MLX_OVERRIDES = {
    "sft": {"max_steps": 2, "batch_size": 2},
    "rsft": {"n_prompts": 2, "k_samples": 2, "max_steps": 1, "batch_size": 1},
    "grpo": {"n_prompts": 2, "prompts_per_step": 1, "num_generations": 2, "max_completion_length": 8, "max_steps": 1},
}


@pytest.fixture(scope="module")
def mlx_run(tmp_path_factory):
    _require_mlx()
    from test_train import tiny_config, write_tiny_data

    from library.contracts import Question
    from library.jsonl import read_jsonl
    from library.questions.wording import reference_completion
    from library.train.backends import mlx as M
    from library.train import pipeline

    root = tmp_path_factory.mktemp("mlx")
    data_dir = write_tiny_data(root / "data")
    config = tiny_config(data_dir, **MLX_OVERRIDES)
    gold = {q.prompt: reference_completion(q) for q in read_jsonl(data_dir / "train.jsonl", Question)}
    sampled: list[list[list[str]]] = []
    real_sample = M.sample_mlx

    def sample_plus_one_reference(model_path, adapter_dir, user_texts, *, k, **kw):
        groups = real_sample(model_path, adapter_dir, user_texts, k=k, **kw)
        sampled.append([list(g) for g in groups])
        groups[0][-1] = gold[user_texts[0]]
        return groups

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(M, "sample_mlx", sample_plus_one_reference)
        run = pipeline.run_training_with_backend(config, root / "run", backend="mlx")
    return run, config, sampled


def test_mlx_runs_every_phase_and_writes_the_run_contract(mlx_run):
    run, config, _ = mlx_run
    meta, metrics = run.read_meta(), run.read_metrics()
    assert meta["backend"] == "mlx" and meta["status"] == "complete"
    assert meta["phases_completed"] == ["base", "sft", "rsft", "grpo"]
    for phase in ("base", "sft", "rsft", "grpo"):
        assert metrics["eval"][phase]["n"] == config.eval.n_eval
    for phase in ("sft", "rsft", "grpo"):
        assert (run.path / "adapters" / phase / "adapter_model.safetensors").exists()
        assert (run.path / "adapters" / f"{phase}-mlx" / "adapters.safetensors").exists()
        assert metrics["training"][phase]["backend"] == "mlx"
    evals = [ep for ep in run.iter_episodes() if getattr(ep, "kind", None) == "eval"]
    assert {ep.phase for ep in evals} == {"base", "sft", "rsft", "grpo"}


def test_mlx_sft_and_rsft_train_with_mlx_lm(mlx_run):
    run, config, sampled = mlx_run
    metrics = run.read_metrics()
    training, curves = metrics["training"], metrics["curves"]
    assert [p["step"] for p in curves["sft"]] == list(range(1, config.sft.max_steps + 1))
    assert all(math.isfinite(p["loss"]) and p["loss"] > 0 for p in curves["sft"])
    # RSFT sampled every prompt k times with mlx_lm.generate, scored them, trained on the winner
    assert len(sampled) == 1 and len(sampled[0]) == config.rsft.n_prompts
    assert all(len(g) == config.rsft.k_samples and all(isinstance(c, str) for c in g) for g in sampled[0])
    assert any(c.strip() for g in sampled[0] for c in g), "mlx generated nothing"
    rsft = training["rsft"]
    assert rsft["n_samples"] == config.rsft.n_prompts * config.rsft.k_samples
    assert rsft["n_winners"] >= 1 and rsft["steps"] == config.rsft.max_steps and "skipped_training" not in rsft
    assert curves["rsft"] and all(math.isfinite(p["loss"]) for p in curves["rsft"])
    rollouts = [ep for ep in run.iter_episodes(phase="rsft") if ep.kind == "rollout"]
    assert len(rollouts) == rsft["n_samples"] and sum(ep.selected for ep in rollouts) == rsft["n_winners"]

    from safetensors.numpy import load_file

    sft_w = load_file(str(run.path / "adapters" / "sft" / "adapter_model.safetensors"))
    rsft_w = load_file(str(run.path / "adapters" / "rsft" / "adapter_model.safetensors"))
    assert sft_w.keys() == rsft_w.keys()
    lora_b = [k for k in sft_w if "lora_B" in k]
    assert lora_b and any(np.abs(sft_w[k]).max() > 0 for k in lora_b), "SFT left LoRA B at its zero init"
    assert any(not np.array_equal(sft_w[k], rsft_w[k]) for k in sft_w), "RSFT did not continue the SFT adapter"


def test_mlx_grpo_runs_mlx_lm_lora_with_the_kg_reward(mlx_run):
    run, config, _ = mlx_run
    s = config.grpo
    metrics = run.read_metrics()
    grpo, curve = metrics["training"]["grpo"], metrics["curves"]["grpo"]
    ckpt = run.path / "checkpoints" / "grpo"
    # the settings reach mlx-lm-lora (its --config path would replace them with its defaults)
    log = (ckpt / "mlx_grpo.log").read_text(encoding="utf-8")
    assert f"(limit: {s.max_completion_length})" in log and "kgr_reward" in log
    assert grpo["n_episodes"] == s.max_steps * s.prompts_per_step * s.num_generations
    assert [p["step"] for p in curve] == list(range(1, s.max_steps + 1))
    assert all(math.isfinite(p["loss"]) for p in curve)
    rollouts = [ep for ep in run.iter_episodes(phase="grpo") if ep.kind == "rollout"]
    assert len(rollouts) == grpo["n_episodes"] and {ep.step for ep in rollouts} == {1}
    assert sorted(ep.sample_idx for ep in rollouts) == list(range(s.num_generations))
    assert (ckpt / "grpo_reference" / "config.json").exists()  # beta > 0: the fused starting policy
    assert not (run.path / "adapters" / "grpo-mlx" / "model.safetensors").exists()  # fuse: False


def test_mlx_adapter_gives_the_same_logits_in_mlx_and_in_the_torch_evaluation(mlx_run, tmp_path):
    """The converted peft adapter on the torch base reproduces the mlx model + adapter: the
    numbers every backend's evaluation reports are the trained model's."""
    run, config, _ = mlx_run
    import mlx.core as mx
    import torch
    from mlx_lm import load

    from peft import PeftModel

    from library.model.load import load_model, model_source
    from library.train.backends.mlx import mlx_model_folder

    ids = [1, 505, 2000, 17, 9, 4242, 2]
    folder = mlx_model_folder(model_source(config.model), tmp_path / "mlx-model")
    mlx_model, _ = load(folder, adapter_path=str(run.path / "adapters" / "grpo-mlx"))
    want = np.array(mlx_model(mx.array([ids])).astype(mx.float32))
    base, _ = load_model(config.model)
    model = PeftModel.from_pretrained(base, run.path / "adapters" / "grpo").eval()
    with torch.no_grad():
        got = model(torch.tensor([ids])).logits.numpy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_mlx_run_record_names_each_phases_log(mlx_run):
    """Each phase leaves the trainer's own output and its loss log (JSON lines) next to its YAML."""
    run, _, _ = mlx_run
    for phase, name in (("sft", "sft"), ("rsft", "rsft"), ("grpo", "grpo")):
        ckpt = run.path / "checkpoints" / phase
        assert (ckpt / f"mlx_{name}.yaml").exists() and (ckpt / f"mlx_{name}.log").exists()
        rows = [json.loads(x) for x in (ckpt / f"mlx_{name}.losses.jsonl").read_text(encoding="utf-8").splitlines()]
        assert {"train", "val"} <= {r["kind"] for r in rows}
