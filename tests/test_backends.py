"""Backends: selection and its errors, mlx data/config export, peft <-> mlx adapter round trip."""

import json
import sys

import numpy as np
import pytest
import yaml

from library.train.backends import BackendUnavailable, select_backend
from library.train.backends import mlx as mlx_backend
from library.train.backends import mlx_adapters, mlx_grpo
from library.contracts import GoldPath, Question
from library.jsonl import write_jsonl_atomic


def _q(i: int, split: str = "train") -> Question:
    return Question(
        id=f"{split}-{i:05d}", split=split, hop_len=1, question=f"q{i}",
        options={"A": "a", "B": "b", "C": "c", "D": "d"}, answer_star="B",
        path_star=GoldPath(entities=["X", "Y"], edges=[{"src": "X", "rel": "caused_by", "dst": "Y"}]),
        prompt=f"Question {i}?", ref={"trace": f"x{i} is caused by y.", "completion": f"TRACE: x{i} is caused by y.\nANSWER: B"},
    )


def test_torch_backend_is_always_available():
    assert select_backend("torch").name == "torch"


@pytest.fixture
def mlx_platform_unknown(monkeypatch):
    """This machine as one MLX has no build for (mlx runs on Apple Silicon and Linux x86-64)."""
    monkeypatch.setattr("library.train.backends.MLX_PLATFORMS", {})


def test_mlx_backend_refused_off_its_platforms_with_a_clear_message(mlx_platform_unknown):
    with pytest.raises(BackendUnavailable, match="Apple Silicon.*Linux x86-64 through MLX's CPU build mlx-cpu"):
        select_backend("mlx")


def test_mlx_platforms_are_apple_silicon_and_linux_x86_64():
    from library.train.backends import MLX_PLATFORMS

    assert set(MLX_PLATFORMS) == {("darwin", "arm64"), ("linux", "x86_64")}


def test_unsloth_backend_refused_without_cuda():
    pytest.importorskip("torch")
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    with pytest.raises(BackendUnavailable, match="CUDA"):
        select_backend("unsloth")


def test_unknown_backend():
    with pytest.raises(BackendUnavailable, match="choose one of: mlx, torch, unsloth"):
        select_backend("jax")


def test_mlx_data_folder_exact_files(tmp_path):
    train = tmp_path / "train.jsonl"
    write_jsonl_atomic(train, [_q(i) for i in range(40)])
    t, v = mlx_backend.write_data_folder(train, tmp_path / "mlx", valid_fraction=0.05)
    train_lines = t.read_text().splitlines()
    valid_lines = v.read_text().splitlines()
    assert (len(train_lines), len(valid_lines)) == (38, 2)
    first = json.loads(train_lines[0])
    assert first == {"messages": [{"role": "user", "content": "Question 0?"},
                                  {"role": "assistant", "content": "TRACE: x0 is caused by y.\nANSWER: B"}]}
    assert json.loads(valid_lines[0])["messages"][0]["content"] == "Question 19?"


def test_mlx_export_refuses_eval_questions(tmp_path):
    path = tmp_path / "eval.jsonl"
    write_jsonl_atomic(path, [_q(1, split="eval")])
    with pytest.raises(ValueError, match="only training splits"):
        mlx_backend.write_data_folder(path, tmp_path / "mlx")


def test_mlx_lora_config(tmp_path):
    cfg = mlx_backend.MlxLoraConfig(rank=16, alpha=16, iters=30)
    path = mlx_backend.write_lora_config(cfg, "/models/smollm2", tmp_path / "data", tmp_path / "ad", tmp_path / "c.yaml")
    doc = yaml.safe_load(path.read_text())
    assert doc["mask_prompt"] is True and doc["fine_tune_type"] == "lora" and doc["iters"] == 30
    assert doc["lora_parameters"]["scale"] == 1.0 and doc["lora_parameters"]["rank"] == 16
    assert "mlp.down_proj" in doc["lora_parameters"]["keys"]
    assert mlx_backend.lora_command(path)[1:] == ["-m", "library.train.backends.mlx", "lora", str(path)]


def test_peft_mlx_adapter_round_trip_preserves_the_model(tmp_path):
    torch = pytest.importorskip("torch")
    from peft import LoraConfig, PeftModel, get_peft_model
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    base = LlamaForCausalLM(config)
    base_weights = {k: v.clone() for k, v in base.state_dict().items()}  # before LoRA is injected
    model = get_peft_model(base, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "down_proj"]))
    with torch.no_grad():  # lora_B starts at zero: give it values so the test can fail
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.5)
    model.save_pretrained(tmp_path / "peft")
    ids = torch.tensor([[1, 5, 9, 3]])
    expected = model(ids).logits

    mlx_dir = mlx_adapters.peft_to_mlx(tmp_path / "peft", tmp_path / "mlx")
    mlx_cfg = json.loads((mlx_dir / "adapter_config.json").read_text())
    assert mlx_cfg["lora_parameters"] == {"rank": 4, "scale": 2.0, "dropout": 0.0,
                                          "keys": ["mlp.down_proj", "self_attn.q_proj", "self_attn.v_proj"]}
    assert mlx_cfg["num_layers"] == 2
    from safetensors.numpy import load_file

    mlx_tensors = load_file(str(mlx_dir / "adapters.safetensors"))
    a = mlx_tensors["model.layers.0.self_attn.q_proj.lora_a"]
    b = mlx_tensors["model.layers.0.self_attn.q_proj.lora_b"]
    assert a.shape == (32, 4) and b.shape == (4, 32)
    # mlx-lm's forward, scale * (x a) b, equals peft's (alpha/r) B A x
    x = np.random.default_rng(0).normal(size=(3, 32)).astype(np.float32)
    q = model.base_model.model.model.layers[0].self_attn.q_proj
    peft_delta = (q.lora_B["default"](q.lora_A["default"](torch.from_numpy(x))) * 2.0).detach().numpy()
    np.testing.assert_allclose(2.0 * (x @ a) @ b, peft_delta, rtol=1e-5, atol=1e-5)

    back = mlx_adapters.mlx_to_peft(mlx_dir, tmp_path / "peft2")
    fresh = LlamaForCausalLM(config).eval()
    fresh.load_state_dict(base_weights)  # same base weights; the LoRA weights come only from `back`
    reloaded = PeftModel.from_pretrained(fresh, back)
    with torch.no_grad():
        got = reloaded(ids).logits
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


# ====================================================================== selection and the pipeline
from pathlib import Path  # noqa: E402

from library.train.backends import BACKENDS, Backend  # noqa: E402


def test_mlx_refusal_names_the_reason_and_the_fix(mlx_platform_unknown):
    with pytest.raises(BackendUnavailable) as err:
        select_backend("mlx")
    msg = str(err.value)
    assert "Apple Silicon" in msg and sys.platform in msg and "--backend torch" in msg


def test_unsloth_refusal_names_the_reason_and_the_fix():
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    with pytest.raises(BackendUnavailable) as err:
        select_backend("unsloth")
    msg = str(err.value)
    assert "NVIDIA GPU" in msg and "torch.cuda.is_available() is False" in msg and "--backend torch" in msg


def test_missing_package_message_names_the_extra(monkeypatch):
    """Right platform, package absent: the message says which modules and which pip extra."""
    import importlib.util

    fake = Backend("mlx", "mlx", "test", lambda: None, ("mlx", "mlx_lm"))
    monkeypatch.setitem(BACKENDS, "mlx", fake)
    real_find_spec = importlib.util.find_spec  # mlx may be installed here: hide it
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name.split(".")[0] in fake.modules else real_find_spec(name, *a))
    with pytest.raises(BackendUnavailable, match=r"needs mlx, mlx_lm, which is not installed; install it with: "
                                                 r"pip install -e '\.\[mlx\]'"):
        select_backend("mlx")


def _quick_config(tmp_path):
    from library.config import load_config

    return load_config("quick", overrides={"model": "tiny", "data_dir": str(tmp_path / "no-data"),
                                           "kg_path": str(tmp_path / "no-data" / "kg.json")})


@pytest.mark.parametrize("backend", ["mlx", "unsloth"])
def test_pipeline_refuses_unavailable_backend_before_touching_anything(tmp_path, monkeypatch, backend):
    from library.train import pipeline
    from library.train.backends import phases

    if backend == "mlx":  # mlx runs here when the mlx extra is installed (tests/test_backend_mlx.py)
        monkeypatch.setattr("library.train.backends.MLX_PLATFORMS", {})
    try:
        select_backend(backend)
        pytest.skip(f"{backend} is available on this machine")
    except BackendUnavailable:
        pass

    def boom(*a, **k):  # any data loading before the refusal fails the test
        raise AssertionError("data was loaded before the backend check")

    monkeypatch.setattr(phases, "load_data", boom)
    config = _quick_config(tmp_path)
    fresh = tmp_path / "runs" / "new-run"
    with pytest.raises(BackendUnavailable):
        pipeline.run_training_with_backend(config, fresh, backend=backend)
    assert not fresh.exists() and not fresh.parent.exists()

    existing = tmp_path / "runs2" / "old-run"  # an existing run folder is left byte-for-byte alone
    existing.mkdir(parents=True)
    (existing / "meta.json").write_text('{"status": "running"}', encoding="utf-8")
    before = {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in existing.iterdir()}
    with pytest.raises(BackendUnavailable):
        pipeline.run_training_with_backend(config, existing, backend=backend, resume=True)
    assert {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in existing.iterdir()} == before


def test_pipeline_unknown_backend_and_misplaced_options(tmp_path):
    from library.train import pipeline

    config = _quick_config(tmp_path)
    with pytest.raises(BackendUnavailable, match="choose one of"):
        pipeline.run_training_with_backend(config, tmp_path / "r", backend="jax")
    with pytest.raises(ValueError, match="options of the mlx and unsloth backends"):
        pipeline.run_training_with_backend(config, tmp_path / "r", backend="torch", load_in_4bit=True)
    assert not (tmp_path / "r").exists()


def test_multi_process_launch_runs_torch_and_names_the_backends_that_cannot(monkeypatch):
    """A multi-process launch is the torch backend's (its phase loop is rank-aware; the run
    itself is tests/test_scale_out.py); mlx and unsloth stop with what to run instead."""
    from library.train import pipeline

    monkeypatch.setenv("WORLD_SIZE", "2")
    pipeline.check_multi_process("torch")
    with pytest.raises(BackendUnavailable, match="only the torch backend trains across processes"):
        pipeline.check_multi_process("unsloth")
    monkeypatch.setenv("WORLD_SIZE", "1")
    pipeline.check_multi_process("unsloth")  # a single process is always fine


@pytest.mark.parametrize("name", ["ddp", "deepspeed_zero2", "deepspeed_zero3"])
def test_shipped_accelerate_configs_load_and_leave_per_phase_values_to_the_trainers(name):
    """Each config is read by accelerate's own loader and turned into launch arguments; the
    DeepSpeed ones must not pin gradient accumulation or clipping (the phases differ, and
    transformers refuses a DeepSpeed value that disagrees with a trainer's arguments)."""
    from accelerate.commands.config.config_args import load_config_from_file
    from accelerate.commands.launch import _validate_launch_command, launch_command_parser

    from library.model.distributed import accelerate_launch_args

    path = Path(__file__).resolve().parents[1] / "library" / "profiles" / "accelerate" / f"{name}.yaml"
    config = load_config_from_file(str(path))
    args = launch_command_parser().parse_args(
        accelerate_launch_args(4, ["train", "--profile", "full"], config_file=str(path), port=29555))
    args, _, _ = _validate_launch_command(args)
    assert args.num_processes == 4 and args.module and args.training_script == "library.cli"
    if name == "ddp":
        assert config.distributed_type == "MULTI_GPU" and args.multi_gpu
    else:
        assert config.distributed_type == "DEEPSPEED" and args.use_deepspeed
        assert config.deepspeed_config["zero_stage"] == int(name[-1])
        assert not {"gradient_accumulation_steps", "gradient_clipping"} & set(config.deepspeed_config)
        assert args.gradient_accumulation_steps is None and args.gradient_clipping is None


def test_unsloth_module_never_imports_unsloth_and_refuses_here():
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    from library.train.backends import unsloth as U
    from library.config import LoraSettings

    assert "unsloth" not in sys.modules
    with pytest.raises(BackendUnavailable, match="CUDA"):
        U.load_model_unsloth("tiny", max_seq_length=256, load_in_4bit=True, lora=LoraSettings(), seed=0)
    assert "unsloth" not in sys.modules


def test_mlx_hardware_paths_refuse_off_its_platforms(tmp_path, mlx_platform_unknown):
    with pytest.raises(BackendUnavailable, match="Apple Silicon"):
        mlx_backend.sample_mlx("m", None, ["q"], k=2, temperature=0.8, top_p=0.95, max_tokens=8, seed=0)
    with pytest.raises(BackendUnavailable, match="Apple Silicon"):
        mlx_backend.train_lora_records(mlx_backend.MlxLoraConfig(), "m", [{"messages": []}], tmp_path, tmp_path / "a")
    assert not list(tmp_path.iterdir())


# ====================================================================== LoRA settings mappings
@pytest.mark.parametrize("settings", [
    {}, {"r": 8, "alpha": 32, "dropout": 0.1, "target_modules": ["q_proj", "v_proj", "down_proj"]},
])
def test_unsloth_lora_kwargs_equal_the_torch_lora(settings):
    from library.train.backends.unsloth import unsloth_peft_kwargs
    from library.config import LoraSettings
    from library.train.checkpoints import lora_config

    lora = LoraSettings(**settings)
    kw = unsloth_peft_kwargs(lora, seed=7)
    peft_cfg = lora_config(lora)
    assert (kw["r"], kw["lora_alpha"], kw["lora_dropout"], kw["bias"]) == \
           (peft_cfg.r, peft_cfg.lora_alpha, peft_cfg.lora_dropout, peft_cfg.bias)
    assert set(kw["target_modules"]) == set(peft_cfg.target_modules) == set(lora.target_modules)
    assert kw["use_rslora"] is False and kw["random_state"] == 7


def test_mlx_lora_config_equals_the_torch_lora():
    from library.config import LoraSettings

    lora = LoraSettings(r=8, alpha=32, dropout=0.1, target_modules=["q_proj", "o_proj", "up_proj"])
    cfg = mlx_backend.mlx_lora_config(lora, iters=3, batch_size=2, learning_rate=1e-4, max_seq_length=128, seed=1)
    assert (cfg.rank, cfg.alpha, cfg.scale, cfg.dropout) == (8, 32.0, 4.0, 0.1)
    assert cfg.keys == ("self_attn.q_proj", "self_attn.o_proj", "mlp.up_proj")
    with pytest.raises(ValueError, match="no mlx-lm key"):
        mlx_backend.mlx_lora_config(LoraSettings(target_modules=["lm_head"]), iters=1, batch_size=1,
                                    learning_rate=1e-4, max_seq_length=64, seed=0)


# ====================================================================== mlx RSFT winners -> data folder
def _kg_question(qid: str, *, path, answer: str, options: dict, prompt: str) -> Question:
    entities = [path[0][0]] + [dst for _, _, dst in path]
    return Question(id=qid, split="train", hop_len=len(path), question=prompt, options=options, answer_star=answer,
                    path_star=GoldPath(entities=entities, edges=[{"src": s, "rel": r, "dst": d} for s, r, d in path]),
                    prompt=prompt, ref={"trace": "x"})


@pytest.fixture
def kg_questions():
    q1 = _kg_question("train-00001", path=[("TLSHandshakeError", "caused_by", "ClockSkew"), ("ClockSkew", "fixed_by", "NTPSync")],
                      answer="C", prompt="A TLS handshake error is caused by something. What fixes that cause?",
                      options={"A": "RenewCertificate", "B": "RestartService", "C": "NTPSync", "D": "CheckClockOffset"})
    q2 = _kg_question("train-00002", path=[("HTTP502BadGateway", "caused_by", "ServiceDown")], answer="A",
                      prompt="What causes an HTTP 502 bad gateway?",
                      options={"A": "ServiceDown", "B": "ClockSkew", "C": "CertificateExpired", "D": "NTPDrift"})
    q3 = q1.model_copy(update={"id": "train-00003"})
    return [q1, q2, q3]


GOOD_1 = ("TRACE: TLS handshake error is caused by clock skew, which is fixed by sync clocks with NTP.\n"
          "ANSWER: C\nand then some rambling")
SAMPLES = [
    ["TRACE: I guess.\nANSWER: C", GOOD_1, "TRACE: TLS handshake error is caused by expired certificate.\nANSWER: A"],
    ["garbage", "TRACE: HTTP 502 bad gateway is caused by service down.\nANSWER: A"],
    ["TRACE: TLS handshake error is caused by expired certificate.\nANSWER: A", "ANSWER: B"],  # nothing right
]


def test_mlx_rsft_winners_data_folder_exact_files(tmp_path, tiny_kg, kg_questions):
    from library.scoring.reward import RewardModel
    from library.train.backends import mlx_phases

    rm = RewardModel.from_preset(tiny_kg, "paper+edges")
    episodes, winners = mlx_phases.select_rsft_winners(kg_questions, SAMPLES, rm, forbidden_ids={"eval-0001"})
    assert len(episodes) == 7
    assert [(ep.ex_id, ep.sample_idx) for ep in episodes if ep.selected] == [("train-00001", 1), ("train-00002", 1)]
    assert all(ep.phase == "rsft" and ep.kind == "rollout" for ep in episodes)

    records = mlx_backend.rsft_records(winners, system="SYS")
    t, v = mlx_backend.write_records_folder(records, tmp_path / "rsft", valid_fraction=0.5, min_valid=2)
    r1 = {"messages": [{"role": "system", "content": "SYS"},
                       {"role": "user", "content": kg_questions[0].prompt},
                       {"role": "assistant", "content": "TRACE: TLS handshake error is caused by clock skew, which is "
                                                        "fixed by sync clocks with NTP.\nANSWER: C"}]}
    r2 = {"messages": [{"role": "system", "content": "SYS"},
                       {"role": "user", "content": "What causes an HTTP 502 bad gateway?"},
                       {"role": "assistant", "content": "TRACE: HTTP 502 bad gateway is caused by service down.\nANSWER: A"}]}
    assert [json.loads(x) for x in t.read_text(encoding="utf-8").splitlines()] == [r1, r2]
    assert [json.loads(x) for x in v.read_text(encoding="utf-8").splitlines()] == [r2, r1]  # every 2nd, topped up
    assert sorted(p.name for p in (tmp_path / "rsft").iterdir()) == ["train.jsonl", "valid.jsonl"]


def test_mlx_rsft_refuses_eval_prompts(tiny_kg, kg_questions):
    from library.scoring.reward import RewardModel
    from library.train.backends import mlx_phases
    from library.train.data import LeakageError

    rm = RewardModel.from_preset(tiny_kg, "paper")
    with pytest.raises(LeakageError):
        mlx_phases.select_rsft_winners(kg_questions, SAMPLES, rm, forbidden_ids={"train-00002"})


def test_mlx_sft_records_carry_the_torch_system_prompt(tmp_path):
    from library.model.chat import SYSTEM_PROMPT

    rec = mlx_backend.sft_records([_q(3)], system=SYSTEM_PROMPT)[0]
    assert rec["messages"][0] == {"role": "system", "content": SYSTEM_PROMPT}
    assert [m["role"] for m in rec["messages"]] == ["system", "user", "assistant"]


# ====================================================================== mlx GRPO reward plumbing
def test_reward_bounds_hold_and_the_unit_map_keeps_grpo_advantages(tiny_kg, kg_questions):
    from library.scoring.reward import PRESET_NAMES, RewardConfig, RewardModel

    texts = [s for group in SAMPLES for s in group] + [
        "TRACE: clock skew clock skew clock skew clock skew clock skew.\nANSWER: C",
        "TRACE: TLS handshake error leads to service down, which is fixed by renew the certificate.\nANSWER: C", ""]
    for name in PRESET_NAMES:
        cfg = RewardConfig.preset_named(name)
        rm, bounds = RewardModel(tiny_kg, cfg), mlx_grpo.reward_bounds(cfg)
        totals = np.array([rm.score(kg_questions[0], t).reward.total for t in texts])
        unit = np.array([mlx_grpo.to_unit(float(x), bounds) for x in totals])
        assert ((0 <= unit) & (unit <= 1)).all()
        adv = lambda r: (r - r.mean()) / (r.std() + 1e-12)  # noqa: E731 - GRPO's group normalisation
        np.testing.assert_allclose(adv(unit), adv(totals), atol=1e-9)
    with pytest.raises(ValueError, match="outside its bounds"):
        mlx_grpo.to_unit(5.0, (-1.0, 1.0))


def test_mlx_grpo_reward_scores_and_logs_training_rollouts_only(tmp_path, tiny_kg, kg_questions):
    from library.scoring.reward import RewardModel
    from library.runs.folder import RunDir

    run = RunDir(tmp_path / "run")
    run.path.mkdir()
    rm = RewardModel.from_preset(tiny_kg, "paper+edges")
    reward = mlx_grpo.MlxGrpoReward(kg_questions[:2], rm, run)
    comps = [SAMPLES[0][1], SAMPLES[0][0], SAMPLES[1][1], SAMPLES[1][0]]
    ids = ["train-00001", "train-00001", "train-00002", "train-00002"]
    got = reward(comps, ids)
    bounds = mlx_grpo.reward_bounds(rm.config)
    want = [mlx_grpo.to_unit(rm.score(kg_questions[i // 2], c).reward.total, bounds) for i, c in enumerate(comps)]
    assert got == want and got[0] > got[1]
    eps = list(run.iter_episodes(phase="grpo"))
    assert [(e.ex_id, e.step, e.sample_idx, e.kind) for e in eps] == [
        ("train-00001", 1, 0, "rollout"), ("train-00001", 1, 1, "rollout"),
        ("train-00002", 1, 0, "rollout"), ("train-00002", 1, 1, "rollout")]
    reward([SAMPLES[1][1]], ["train-00002" + mlx_grpo.VALID_SUFFIX])  # a validation batch: scored, not logged
    assert len(list(run.iter_episodes(phase="grpo"))) == 4 and reward.step == 1
    with pytest.raises(KeyError, match="not in the RL pool"):
        reward(["x"], ["eval-0001"])


def test_mlx_grpo_rows_reward_file_and_config(tmp_path, kg_questions):
    from library.config import GRPOSettings

    rows = mlx_grpo.grpo_records(kg_questions[:2], system="SYS")
    assert rows[0] == {"prompt": kg_questions[0].prompt, "system": "SYS", "answer": "train-00001", "type": "kgr"}
    assert mlx_grpo.grpo_records(kg_questions[:1], system="SYS", valid=True)[0]["answer"] == "train-00001#valid"
    path = mlx_grpo.write_reward_file(tmp_path / "r.py", {"kg_path": "kg.json"}, Path("/repo"))
    src = path.read_text(encoding="utf-8")
    compile(src, str(path), "exec")
    assert "register_reward_function('kgr_reward')" in src and "def kgr_reward(prompts, completions, answer" in src
    settings = GRPOSettings(num_generations=4, prompts_per_step=2, max_steps=7, beta=0.05)
    lora = mlx_backend.MlxLoraConfig()
    cfg = yaml.safe_load(mlx_grpo.write_grpo_config(
        settings, lora, "/m", tmp_path / "d", tmp_path / "a", path, tmp_path / "g.yaml",
        resume_adapter_file=tmp_path / "sft" / "adapters.safetensors", reference_model_path="/fused", seed=0).read_text())
    assert (cfg["train_mode"], cfg["group_size"], cfg["batch_size"], cfg["iters"], cfg["beta"]) == ("grpo", 4, 2, 7, 0.05)
    assert (cfg["reward_functions"], cfg["grpo_loss_type"], cfg["reference_model_path"]) == ("kgr_reward", "bnpo", "/fused")
    assert cfg["resume_adapter_file"].endswith("sft/adapters.safetensors") and cfg["temperature"] == 0.6
    with pytest.raises(ValueError, match="no mlx-lm-lora equivalent"):
        mlx_grpo.write_grpo_config(settings.model_copy(update={"loss_type": "cispo"}), lora, "/m", tmp_path, tmp_path,
                                      path, tmp_path / "h.yaml", resume_adapter_file=None, reference_model_path=None, seed=0)


# ====================================================================== accelerate configs
ACCEL = Path(__file__).resolve().parents[1] / "library" / "profiles" / "accelerate"


@pytest.mark.parametrize("name,kind", [("ddp.yaml", "MULTI_GPU"), ("deepspeed_zero2.yaml", "DEEPSPEED")])
def test_accelerate_configs_parse(name, kind):
    doc = yaml.safe_load((ACCEL / name).read_text(encoding="utf-8"))
    assert doc["distributed_type"] == kind and doc["num_machines"] == 1 and doc["use_cpu"] is False
    if kind == "DEEPSPEED":
        assert doc["deepspeed_config"]["zero_stage"] == 2
    pytest.importorskip("accelerate")
    from accelerate.commands.config.config_args import load_config_from_file

    assert load_config_from_file(str(ACCEL / name)).distributed_type.value == kind


def test_cli_is_runnable_as_a_module():
    """``accelerate launch -m library.cli train ...`` needs the module to run main()."""
    src = (Path(__file__).resolve().parents[1] / "library" / "cli.py").read_text(encoding="utf-8")
    assert 'if __name__ == "__main__":' in src and "main()" in src.split('if __name__ == "__main__":')[1]


# ====================================================================== the mlx run loop, mlx faked
@pytest.mark.slow
@pytest.mark.train
def test_mlx_pipeline_writes_the_run_folder_contract_with_mlx_faked(tmp_path, monkeypatch):
    """Only the four calls that need a Mac are replaced (they write real mlx-layout adapters
    converted from a real peft adapter); the loop, meta/metrics/episodes, the peft conversion
    and the torch evaluation of every phase are the code a Mac would run."""
    from test_train import TINY_OVERRIDES, write_tiny_data

    from library.train import pipeline
    from library.config import LoraSettings, load_config
    from library.model.load import load_model
    from library.runs.folder import RunDir
    from library.train.checkpoints import lora_config
    from peft import get_peft_model

    data_dir = write_tiny_data(tmp_path / "data")
    overrides = json.loads(json.dumps(TINY_OVERRIDES))
    overrides.update({"data_dir": str(data_dir), "kg_path": str(data_dir / "kg.json"), "threads": None})
    config = load_config("quick", overrides)

    base, _ = load_model("tiny")
    peft_dir = tmp_path / "peft-src"
    get_peft_model(base, lora_config(LoraSettings())).save_pretrained(peft_dir)
    calls = []

    def fake_train(cfg, model_path, records, work_dir, adapter_dir, *, resume_adapter_file=None, name="sft"):
        calls.append((name, len(records), resume_adapter_file is not None, cfg.rank, cfg.scale))
        mlx_adapters.peft_to_mlx(peft_dir, adapter_dir)
        return [{"step": 1, "loss": 2.0}]

    def fake_sample(model_path, adapter_dir, user_texts, *, k, **kw):
        calls.append(("sample", len(user_texts), k))
        return [["TRACE: nothing.\nANSWER: A"] * k for _ in user_texts]

    def fake_grpo(settings, lora, model_path, questions, *, adapter_dir, init_adapter_dir, **kw):
        calls.append(("grpo", len(questions), Path(init_adapter_dir).name))
        mlx_adapters.peft_to_mlx(peft_dir, adapter_dir)
        return [{"step": 1, "loss": 0.1}]

    monkeypatch.setattr(pipeline, "select_backend", lambda name: None)
    from library.train.backends import mlx_phases

    monkeypatch.setattr(mlx_phases, "model_source", lambda spec, **kw: "/fake/mlx-model")
    monkeypatch.setattr(mlx_backend, "train_lora_records", fake_train)
    monkeypatch.setattr(mlx_backend, "sample_mlx", fake_sample)
    monkeypatch.setattr(mlx_grpo, "train_grpo", fake_grpo)

    run = pipeline.run_training_with_backend(config, tmp_path / "run", backend="mlx")
    meta, metrics = run.read_meta(), run.read_metrics()
    assert meta["backend"] == "mlx" and meta["status"] == "complete"
    assert meta["phases_completed"] == ["base", "sft", "rsft", "grpo"]
    for phase in ("base", "sft", "rsft", "grpo"):
        assert metrics["eval"][phase]["n"] == 4
        if phase != "base":
            assert (run.path / "adapters" / phase / "adapter_model.safetensors").exists()
            assert (run.path / "adapters" / f"{phase}-mlx" / "adapters.safetensors").exists()
            assert metrics["training"][phase]["backend"] == "mlx"
    # RSFT: sampled the training prompts only; "A" is wrong unless A is the answer, so winners vary
    sample_call = next(c for c in calls if c[0] == "sample")
    assert sample_call[1:] == (config.rsft.n_prompts, config.rsft.k_samples)
    assert calls[0][:1] == ("sft",) and calls[0][3:] == (16, 1.0)
    assert calls[-1] == ("grpo", config.grpo.n_prompts, "rsft-mlx")
    rollouts = [ep for ep in run.iter_episodes(phase="rsft") if ep.kind == "rollout"]
    assert len(rollouts) == config.rsft.n_prompts * config.rsft.k_samples
    evals = [ep for ep in RunDir(run.path).iter_episodes() if getattr(ep, "kind", None) == "eval"]
    assert {ep.phase for ep in evals} == {"base", "sft", "rsft", "grpo"}
    # a second call without --resume is refused; with it, nothing is redone
    from library.train.pipeline import ResumeError

    with pytest.raises(ResumeError):
        pipeline.run_training_with_backend(config, run.path, backend="mlx")
    n = len(calls)
    pipeline.run_training_with_backend(config, run.path, backend="mlx", resume=True)
    assert len(calls) == n
    from rich.console import Console

    from library.train.backends.unsloth_phases import UnslothBackend
    from library.train.pipeline import run_training

    with pytest.raises(ResumeError, match="backend 'mlx'"):  # another backend cannot resume it
        run_training(config, run.path, backend=UnslothBackend(load_in_4bit=False, eval_device="cpu", max_seq_length=256),
                     resume=True, console=Console(quiet=True), stop_after=None)


def test_cli_backend_refusal_is_one_clear_error(tmp_path):
    import subprocess

    run_dir = tmp_path / "run"
    # the CLI as a platform MLX has no build for sees it (mlx itself may be installed here)
    code = ("import library.train.backends as b; b.MLX_PLATFORMS.clear(); "
            "from library.cli import main; main()")
    proc = subprocess.run([sys.executable, "-c", code, "train", "--backend", "mlx", "--run", str(run_dir)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert "Apple Silicon" in proc.stderr and "Traceback" not in proc.stderr
    assert not run_dir.exists()
