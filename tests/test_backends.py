"""Backends: selection and its errors, mlx data/config export, peft <-> mlx adapter round trip."""

import json
import sys

import numpy as np
import pytest
import yaml

from library.backends import BackendUnavailable, select_backend
from library.backends import mlx as mlx_backend
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


@pytest.mark.skipif(sys.platform == "darwin", reason="checks the non-Apple message")
def test_mlx_backend_refused_off_apple_silicon_with_a_clear_message():
    with pytest.raises(BackendUnavailable, match="Apple Silicon"):
        select_backend("mlx")


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
    assert mlx_backend.lora_command(path)[-4:] == ["mlx_lm", "lora", "--config", str(path)]


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

    mlx_dir = mlx_backend.peft_to_mlx(tmp_path / "peft", tmp_path / "mlx")
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

    back = mlx_backend.mlx_to_peft(mlx_dir, tmp_path / "peft2")
    fresh = LlamaForCausalLM(config).eval()
    fresh.load_state_dict(base_weights)  # same base weights; the LoRA weights come only from `back`
    reloaded = PeftModel.from_pretrained(fresh, back)
    with torch.no_grad():
        got = reloaded(ids).logits
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
