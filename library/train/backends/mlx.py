"""The mlx backend's LoRA training and sampling with mlx-lm (SFT and RSFT).

What runs on any OS without mlx (unit-tested in tests/test_backends.py): turning our questions
and RSFT winners into mlx-lm's chat records and data folder, writing its LoRA config, reading
its loss log. What needs mlx (Apple Silicon, or Linux x86-64 through mlx-cpu, MLX's CPU build):
the ``mlx_lm lora`` training itself, sampling with ``mlx_lm.generate`` for RSFT and fusing an
adapter into its base; tests/test_backend_mlx.py runs all of it end to end on the tiny model
with mlx-cpu. Not yet run on a Mac (docs/BACKENDS.md).

The rest of the backend, one idea a module: :mod:`library.train.backends.mlx_adapters` converts
adapters between the peft and mlx-lm layouts, :mod:`library.train.backends.mlx_grpo` runs GRPO through
the ``mlx-lm-lora`` package with the KG reward, :mod:`library.train.backends.mlx_phases` is the phase
loop's backend built on them.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

import yaml

from library.contracts import Question
from library.jsonl import atomic_write_text, read_jsonl, write_jsonl_atomic
from library.model.chat import format_prompt
from library.questions.wording import reference_completion
from library.scoring.answer_format import clean_completion
from library.train.backends import select_backend

# mlx, mlx_lm and mlx_lm_lora are imported inside the functions marked "needs mlx" (and in the
# trainer subprocess): this module loads on any OS.

#: the checkout: the trainer subprocesses import this package from it (python -m library...)
REPO_ROOT = Path(__file__).resolve().parents[3]


@dataclass(frozen=True)
class MlxLoraConfig:
    """The settings we pass to ``mlx_lm lora`` (mirrors the torch SFT defaults)."""

    rank: int = 16
    alpha: float = 16.0
    dropout: float = 0.05
    keys: tuple[str, ...] = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                             "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")
    num_layers: int = -1  # -1: every layer (mlx-lm counts from the last layer)
    iters: int = 200
    batch_size: int = 8
    learning_rate: float = 2e-4
    max_seq_length: int = 512
    seed: int = 0
    extra: dict = field(default_factory=dict)

    @property
    def scale(self) -> float:
        return self.alpha / self.rank


def sft_records(questions: Iterable[Question], *, system: str | None = None) -> list[dict]:
    """mlx-lm's chat format: one ``{"messages": [user, assistant]}`` per question.

    >>> from library.contracts import GoldPath
    >>> q = Question(id="train-1", split="train", hop_len=1, question="q", options={"A": "a", "B": "b", "C": "c", "D": "d"},
    ...              answer_star="A", path_star=GoldPath(entities=["x", "y"], edges=[]), prompt="Which?",
    ...              ref={"trace": "x is caused by y.", "completion": "TRACE: x is caused by y.\\nANSWER: A"})
    >>> sft_records([q])[0]["messages"][1]["content"]
    'TRACE: x is caused by y.\\nANSWER: A'
    """
    records = []
    for q in questions:
        if q.split not in ("train", "train_hard"):
            raise ValueError(f"{q.id}: only training splits may be exported for training, not {q.split!r}")
        # the one gold completion (library.scoring.answer_format), as the data files word it
        completion = reference_completion(q)
        records.append(chat_record(q.prompt, completion, system=system))
    return records


def chat_record(user_text: str, completion: str, *, system: str | None = None) -> dict:
    """One mlx-lm chat example. ``system`` must be the system prompt the torch path formats every
    prompt with (``library.model.chat.SYSTEM_PROMPT``): the mlx-trained adapter is evaluated by the torch
    code, and without it SmolLM2's chat template would insert its own default system prompt."""
    messages = [] if system is None else [{"role": "system", "content": system}]
    return {"messages": messages + [{"role": "user", "content": user_text},
                                    {"role": "assistant", "content": completion.strip()}]}


def write_data_folder(train_path: Path, out_dir: Path, valid_fraction: float = 0.05) -> tuple[Path, Path]:
    """Write ``train.jsonl`` and ``valid.jsonl`` for ``mlx_lm lora --data out_dir``.

    The validation slice is carved from the TRAINING split (every 1/valid_fraction-th line,
    deterministically), never from eval: mlx-lm requires a valid.jsonl but eval must stay unseen.
    """
    questions = read_jsonl(train_path, Question)
    records = sft_records(questions)
    every = max(2, round(1 / valid_fraction))
    valid = [r for i, r in enumerate(records) if i % every == every - 1]
    train = [r for i, r in enumerate(records) if i % every != every - 1]
    out_dir.mkdir(parents=True, exist_ok=True)
    write_jsonl_atomic(out_dir / "train.jsonl", train)
    write_jsonl_atomic(out_dir / "valid.jsonl", valid)
    return out_dir / "train.jsonl", out_dir / "valid.jsonl"


def write_lora_config(config: MlxLoraConfig, model_path: str, data_dir: Path, adapter_dir: Path, out: Path) -> Path:
    """The YAML file for ``mlx_lm lora --config``: LoRA on the same projections as the torch path,
    prompt masked (loss on the completion only)."""
    doc = {
        "model": str(model_path), "train": True, "data": str(data_dir), "fine_tune_type": "lora",
        "mask_prompt": True, "num_layers": config.num_layers, "batch_size": config.batch_size,
        "iters": config.iters, "learning_rate": config.learning_rate, "max_seq_length": config.max_seq_length,
        "seed": config.seed, "adapter_path": str(adapter_dir),
        "lora_parameters": {"keys": list(config.keys), "rank": config.rank, "scale": config.scale,
                            "dropout": config.dropout},
        **config.extra,
    }
    atomic_write_text(out, yaml.safe_dump(doc, sort_keys=False))
    return out


def lora_command(config_path: Path, loss_log: Path | None = None) -> list[str]:
    """The mlx-lm LoRA training command run by :func:`train_lora_records`: ``mlx_lm lora`` through
    this module's runner (:func:`run_trainer`), which also writes the loss curve as JSON lines."""
    return trainer_command("lora", config_path, loss_log)


def trainer_command(tool: str, config_path: Path, loss_log: Path | None = None) -> list[str]:
    """``python -m library.train.backends.mlx {lora|grpo} CONFIG [LOSS_LOG]`` (see :func:`run_trainer`).

    >>> trainer_command("grpo", Path("g.yaml"), Path("g.losses.jsonl"))[1:]
    ['-m', 'library.train.backends.mlx', 'grpo', 'g.yaml', 'g.losses.jsonl']
    """
    if tool not in TRAINERS:
        raise ValueError(f"unknown mlx trainer {tool!r}; choose one of {sorted(TRAINERS)}")
    return [sys.executable, "-m", "library.train.backends.mlx", tool, str(config_path)] + \
        ([str(loss_log)] if loss_log is not None else [])


#: the trainers :func:`run_trainer` drives: mlx-lm's LoRA SFT and mlx-lm-lora's trainers (GRPO)
TRAINERS = {"lora": "mlx_lm.lora", "grpo": "mlx_lm_lora.train"}


def run_trainer(tool: str, config_path: Path, loss_log: Path | None = None) -> None:
    """Run ``mlx_lm lora`` (``tool="lora"``) or ``mlx_lm_lora.train`` (``"grpo"``) on the YAML
    ``config_path`` in THIS process, appending every train/val loss report as a JSON line to
    ``loss_log``. Called in a subprocess by :func:`train_lora_records` / ``mlx_grpo.train_grpo``.

    Why not the libraries' own command lines (checked on mlx-lm 0.32.2 / mlx-lm-lora 5.10.2):

    - mlx-lm 0.32 prints its loss curve as a styled table (3 decimals), no longer as parseable
      ``Iter N: Train loss X`` lines, and its ``run()`` drops the training callback it is given;
      we hand ours in through ``get_reporting_callbacks``, which ``run()`` calls instead.
    - ``mlx_lm_lora.train --config`` lets the argparse defaults win over the YAML for every
      option whose default is not None (``group_size`` 4, ``temperature`` 1.0,
      ``max_completion_length`` 512, ``grpo_loss_type`` "grpo", ...): our settings would be
      silently ignored. Its ``main(args=dict)`` applies a dict over the defaults instead.
    """
    from mlx_lm.tuner.callbacks import TrainingCallback

    def plain(value):
        return value.item() if hasattr(value, "item") else str(value)

    class LossLog(TrainingCallback):
        def _write(self, kind: str, info: dict) -> None:
            if loss_log is not None:
                with open(loss_log, "a", encoding="utf-8") as fh:
                    fh.write(json.dumps({"kind": kind, **info}, default=plain) + "\n")

        def on_train_loss_report(self, train_info: dict):
            self._write("train", train_info)

        def on_val_loss_report(self, val_info: dict):
            self._write("val", val_info)

    callback = LossLog()
    if tool == "lora":
        import mlx_lm.lora as lora

        lora.get_reporting_callbacks = lambda *a, **k: callback
        sys.argv = ["mlx_lm.lora", "--config", str(config_path)]
        lora.main()
    elif tool == "grpo":
        import mlx_lm_lora.train as trainer

        with open(config_path, encoding="utf-8") as fh:
            doc = yaml.load(fh, trainer.yaml_loader)
        run = trainer.run
        trainer.run = lambda args, training_callback=None: run(args, callback)
        trainer.main(args=doc)
    else:
        raise ValueError(f"unknown mlx trainer {tool!r}; choose one of {sorted(TRAINERS)}")


def read_loss_log(path: Path) -> list[dict]:
    """The training-loss curve from :func:`run_trainer`'s JSON lines (same points as
    :func:`parse_train_log`); an absent file gives ``[]``.

    >>> import tempfile, json
    >>> p = Path(tempfile.mkdtemp()) / "l.jsonl"
    >>> _ = p.write_text(json.dumps({"kind": "val", "iteration": 0, "val_loss": 3.0}) + "\\n"
    ...                  + json.dumps({"kind": "train", "iteration": 2, "train_loss": 1.5, "learning_rate": 1e-4}) + "\\n")
    >>> read_loss_log(p)
    [{'step': 2, 'loss': 1.5, 'learning_rate': 0.0001}]
    """
    path = Path(path)
    if not path.exists():
        return []
    curve = []
    for line in path.read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        if row.get("kind") != "train":
            continue
        point = {"step": int(row["iteration"]), "loss": float(row["train_loss"])}
        if row.get("learning_rate") is not None:
            point["learning_rate"] = float(row["learning_rate"])
        curve.append(point)
    return curve


def repo_pythonpath() -> dict[str, str]:
    """``PYTHONPATH`` with the checkout first, for subprocesses that import ``library``."""
    rest = os.environ.get("PYTHONPATH")
    return {"PYTHONPATH": str(REPO_ROOT) + (os.pathsep + rest if rest else "")}


def run_trainer_logged(tool: str, config_path: Path, log_path: Path, env: dict | None = None) -> list[dict]:
    """:func:`trainer_command` in a subprocess (output kept in ``log_path``); returns its loss curve."""
    loss_log = Path(log_path).with_suffix(".losses.jsonl")
    loss_log.unlink(missing_ok=True)  # a redone phase starts a fresh curve
    out = run_logged(trainer_command(tool, config_path, loss_log), Path(log_path), env=env)
    return read_loss_log(loss_log) or parse_train_log(out)


# =================================================================== what mlx_phases calls
# Everything above and the pure helpers below run anywhere (and are tested here). The functions
# marked "needs mlx" call select_backend("mlx") first; tests/test_backend_mlx.py runs them on
# Linux with mlx-cpu (on a Mac they are the same calls, on Metal; not yet run there).

#: torch/peft module names (library.config.LLAMA_TARGET_MODULES) -> mlx-lm LoRA key paths
MLX_KEY_FOR = {
    "q_proj": "self_attn.q_proj", "k_proj": "self_attn.k_proj", "v_proj": "self_attn.v_proj",
    "o_proj": "self_attn.o_proj", "gate_proj": "mlp.gate_proj", "up_proj": "mlp.up_proj",
    "down_proj": "mlp.down_proj",
}
ITER_LINE = re.compile(r"Iter (?P<step>\d+): Train loss (?P<loss>[-+0-9.eE]+)"
                       r"(?:, Learning Rate (?P<lr>[-+0-9.eE]+))?")


def mlx_lora_config(lora, *, iters: int, batch_size: int, learning_rate: float, max_seq_length: int,
                    seed: int, extra: dict | None = None) -> MlxLoraConfig:
    """The mlx-lm settings equivalent to a torch ``LoraSettings`` (same r, alpha, dropout, modules).

    >>> from library.config import LoraSettings
    >>> c = mlx_lora_config(LoraSettings(), iters=5, batch_size=2, learning_rate=1e-4, max_seq_length=256, seed=0)
    >>> c.rank, c.scale, c.keys[0], c.keys[-1]
    (16, 1.0, 'self_attn.q_proj', 'mlp.down_proj')
    """
    unknown = [m for m in lora.target_modules if m not in MLX_KEY_FOR]
    if unknown:
        raise ValueError(f"no mlx-lm key known for LoRA target modules {unknown}; known: {sorted(MLX_KEY_FOR)}")
    return MlxLoraConfig(rank=lora.r, alpha=float(lora.alpha), dropout=lora.dropout,
                         keys=tuple(MLX_KEY_FOR[m] for m in lora.target_modules), iters=iters,
                         batch_size=batch_size, learning_rate=learning_rate, max_seq_length=max_seq_length,
                         seed=seed, extra=dict(extra or {}))


def train_valid_split(records: list[dict], *, valid_fraction: float = 0.05, min_valid: int = 1) -> tuple[list[dict], list[dict]]:
    """Training keeps EVERY record (the torch path trains on all of them too); ``valid`` is a
    copy of every 1/valid_fraction-th record, topped up (cycling from the start) to ``min_valid``.

    mlx-lm refuses to train without a validation set, and one smaller than the batch size; its
    validation loss here is only a sanity check, the phase's real measure is the torch eval.

    >>> rs = [{"i": i} for i in range(5)]
    >>> train_valid_split(rs, valid_fraction=0.5, min_valid=3)[1]
    [{'i': 1}, {'i': 3}, {'i': 0}]
    """
    if not records:
        raise ValueError("no records to write")
    every = max(2, round(1 / valid_fraction))
    valid = [r for i, r in enumerate(records) if i % every == every - 1]
    i = 0
    while len(valid) < min_valid:
        valid.append(records[i % len(records)])
        i += 1
    return list(records), valid


def write_records_folder(records: list[dict], out_dir: Path, *, valid_fraction: float = 0.05,
                         min_valid: int = 1) -> tuple[Path, Path]:
    """``train.jsonl`` + ``valid.jsonl`` for ``mlx_lm lora --data out_dir`` / ``mlx_lm_lora.train``."""
    train, valid = train_valid_split(records, valid_fraction=valid_fraction, min_valid=min_valid)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    write_jsonl_atomic(out_dir / "train.jsonl", train)
    write_jsonl_atomic(out_dir / "valid.jsonl", valid)
    return out_dir / "train.jsonl", out_dir / "valid.jsonl"


def rsft_records(winners: Iterable[tuple[Question, str]], *, system: str | None) -> list[dict]:
    """RSFT winners -> chat records, cut after the ANSWER line exactly as the torch RSFT does."""
    return [chat_record(q.prompt, clean_completion(c), system=system) for q, c in winners]


def parse_train_log(text: str) -> list[dict]:
    """The loss curve from mlx-lm / mlx-lm-lora stdout (``Iter N: Train loss X, Learning Rate Y``).

    >>> parse_train_log("Iter 1: Val loss 3.0\\nIter 10: Train loss 1.25, Learning Rate 2.000e-04, It/sec 3")
    [{'step': 10, 'loss': 1.25, 'learning_rate': 0.0002}]
    """
    curve = []
    for m in ITER_LINE.finditer(text):
        point = {"step": int(m["step"]), "loss": float(m["loss"])}
        if m["lr"]:
            point["learning_rate"] = float(m["lr"])
        curve.append(point)
    return curve


# ------------------------------------------------------------- needs mlx
def run_logged(cmd: list[str], log_path: Path, env: dict | None = None) -> str:
    """Run ``cmd``, echo and keep its output (the loss curve is parsed from it)."""
    proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **(env or {})})
    out = (proc.stdout or "") + (proc.stderr or "")
    atomic_write_text(log_path, out)
    print(out[-4000:], file=sys.stderr)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:4])} ... failed with exit code {proc.returncode}; log: {log_path}")
    return out


def train_lora_records(config: MlxLoraConfig, model_path: str, records: list[dict], work_dir: Path,
                       adapter_dir: Path, *, resume_adapter_file: Path | None = None, name: str = "sft") -> list[dict]:
    """``mlx_lm lora`` on chat ``records`` (prompt masked); returns the loss curve. Needs mlx."""
    select_backend("mlx")
    work_dir = Path(work_dir)
    batch = min(config.batch_size, len(records))
    extra = dict(config.extra)
    if resume_adapter_file is not None:
        extra["resume_adapter_file"] = str(resume_adapter_file)  # continue the previous phase's adapter
    cfg = MlxLoraConfig(**{**config.__dict__, "batch_size": batch, "extra": extra})
    data_dir = work_dir / f"mlx_data_{name}"
    write_records_folder(records, data_dir, min_valid=batch)
    path = write_lora_config(cfg, model_path, data_dir, Path(adapter_dir), work_dir / f"mlx_{name}.yaml")
    return run_trainer_logged("lora", path, work_dir / f"mlx_{name}.log", env=repo_pythonpath())


def mlx_model_folder(model_path: str, out_dir: Path) -> str:
    """``model_path`` as mlx-lm must read it to build the same model as transformers.

    transformers 5 writes a Llama's RoPE settings only as config.json's ``rope_parameters``;
    mlx-lm 0.32's llama reads a top-level ``rope_theta`` (default 10000) and ``rope_scaling``,
    so on SmolLM2's folder (theta 100000) it would silently train and sample a model with other
    position encodings than the one the torch evaluation loads. When that is the case, this
    writes ``out_dir``: links to every file of the folder and a config.json with the top-level
    keys added. Anything else (a folder that has them, a hub id) is returned as it is.

    >>> import tempfile
    >>> src, out = Path(tempfile.mkdtemp()), Path(tempfile.mkdtemp()) / "mlx"
    >>> _ = (src / "config.json").write_text('{"rope_parameters": {"rope_theta": 100000.0, "rope_type": "default"}}')
    >>> _ = (src / "model.safetensors").write_bytes(b"w")
    >>> folder = Path(mlx_model_folder(str(src), out))
    >>> json.loads((folder / "config.json").read_text())["rope_theta"], (folder / "model.safetensors").read_bytes()
    (100000.0, b'w')
    >>> mlx_model_folder(str(folder), out) == str(folder)
    True
    """
    src = Path(model_path)
    if not (src / "config.json").is_file():
        return model_path
    cfg = json.loads((src / "config.json").read_text(encoding="utf-8"))
    params = cfg.get("rope_parameters")
    if "rope_theta" in cfg or not isinstance(params, dict) or "rope_theta" not in params:
        return model_path
    fixed = {**cfg, "rope_theta": params["rope_theta"]}
    if params.get("rope_type", "default") != "default" and cfg.get("rope_scaling") is None:
        fixed["rope_scaling"] = {k: v for k, v in params.items() if k != "rope_theta"}
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    for f in src.iterdir():
        if f.name == "config.json":
            continue
        link = out_dir / f.name
        if link.is_symlink() or link.exists():
            link.unlink()
        os.symlink(f.resolve(), link)
    atomic_write_text(out_dir / "config.json", json.dumps(fixed, indent=2) + "\n")
    return str(out_dir)


def sample_mlx(model_path: str, adapter_dir: Path | None, user_texts: list[str], *, k: int, temperature: float,
               top_p: float, max_tokens: int, seed: int) -> list[list[str]]:
    """K sampled completions per prompt with mlx-lm's ``generate`` (same chat formatting and
    system prompt as the torch path). Needs mlx."""
    select_backend("mlx")
    import mlx.core as mx
    from mlx_lm import generate, load
    from mlx_lm.sample_utils import make_sampler

    model, tokenizer = load(str(model_path), adapter_path=str(adapter_dir) if adapter_dir else None)
    mx.random.seed(seed)
    sampler = make_sampler(temp=temperature, top_p=top_p)
    eos = getattr(tokenizer, "eos_token", None) or "<|im_end|>"
    out = []
    for text in user_texts:
        prompt = format_prompt(tokenizer, text)
        group = []
        for _ in range(k):
            completion = generate(model, tokenizer, prompt=prompt, max_tokens=max_tokens, sampler=sampler, verbose=False)
            group.append(completion.split(eos)[0].strip())
        out.append(group)
    return out


def fuse_adapter(model_path: str, adapter_dir: Path, save_path: Path) -> Path:
    """Base + adapter fused into one model folder (the KL reference for GRPO). Needs mlx."""
    select_backend("mlx")
    cmd = [sys.executable, "-m", "mlx_lm", "fuse", "--model", str(model_path), "--adapter-path", str(adapter_dir),
           "--save-path", str(save_path)]
    run_logged(cmd, Path(save_path).with_suffix(".log"))
    return Path(save_path)


if __name__ == "__main__":  # python -m library.train.backends.mlx {lora|grpo} CONFIG [LOSS_LOG]
    if len(sys.argv) not in (3, 4):
        raise SystemExit("usage: python -m library.train.backends.mlx {lora|grpo} CONFIG.yaml [LOSS_LOG.jsonl]")
    run_trainer(sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3]) if len(sys.argv) == 4 else None)
