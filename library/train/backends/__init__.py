"""Training backends: ``torch`` (portable default: transformers + peft + TRL), ``mlx``
(Apple Silicon, mlx-lm; also Linux x86-64 through mlx-cpu) and ``unsloth`` (NVIDIA CUDA).

Every backend writes the same run-folder contract (library/runs/folder.py) and is evaluated by the
same code, so runs from any backend render into the same videos and compare in one table.
The mlx and unsloth packages are platform-gated extras, never part of the default install:
``pip install unsloth`` on a CPU machine replaces torch with a CUDA build and then refuses to
import, and mlx's Linux CPU build (mlx-cpu) is slow, reference BLAS: it is there so that the
test suite runs the mlx backend end to end on the tiny model (docs/MEASUREMENTS.md).

>>> BACKENDS["torch"].extra
'train'
>>> sorted(BACKENDS)
['mlx', 'torch', 'unsloth']
"""

from __future__ import annotations

import importlib.util
import platform
import sys
from dataclasses import dataclass
from typing import Callable


class BackendUnavailable(RuntimeError):
    """The requested backend cannot run on this machine; the message says why and what to do."""


@dataclass(frozen=True)
class Backend:
    name: str
    extra: str
    description: str
    platform_check: Callable[[], str | None]  # None when the platform fits, else the reason
    modules: tuple[str, ...]                   # importable modules the backend needs


def _torch_platform() -> str | None:
    return None


#: Where the mlx backend runs: Apple Silicon (Metal, the design's first platform) and Linux
#: x86-64 through ``mlx-cpu``, MLX's Linux CPU build (correct but slow: the test suite runs the
#: whole backend on the tiny model with it; docs/BACKENDS.md).
MLX_PLATFORMS = {("darwin", "arm64"): "Apple Silicon", ("linux", "x86_64"): "Linux x86-64 (mlx-cpu, CPU only)"}


def _mlx_platform() -> str | None:
    if (sys.platform, platform.machine()) not in MLX_PLATFORMS:
        return (f"mlx needs Apple Silicon (macOS on arm64), or Linux x86-64 through MLX's CPU build mlx-cpu; "
                f"this machine is {sys.platform}/{platform.machine()}. Use --backend torch here.")
    if sys.platform == "linux" and importlib.util.find_spec("mlx") is not None:
        try:  # mlx-cpu's library needs glibc 2.35+: say so here, not as a trainer's traceback
            import mlx.core  # noqa: F401
        except ImportError as exc:
            return (f"mlx is installed but its Linux CPU build (mlx-cpu) does not load here: {exc}. "
                    "Reinstall it with pip install -e '.[mlx]', or use --backend torch.")
    return None


def _unsloth_platform() -> str | None:
    if not sys.platform.startswith("linux") and sys.platform != "win32":
        return f"unsloth needs an NVIDIA GPU with CUDA (Linux or Windows); this machine is {sys.platform}."
    if importlib.util.find_spec("torch") is None:
        return "unsloth needs torch with CUDA; torch is not installed."
    import torch  # local: only when the unsloth backend is asked for

    if not torch.cuda.is_available():
        return ("unsloth needs an NVIDIA GPU with CUDA; torch.cuda.is_available() is False here. "
                "Use --backend torch on CPU.")
    return None


BACKENDS: dict[str, Backend] = {
    "torch": Backend("torch", "train", "transformers + peft + TRL; CPU, CUDA or MPS; multi-GPU via accelerate",
                     _torch_platform, ("torch", "transformers", "peft", "trl")),
    "mlx": Backend("mlx", "mlx", "mlx-lm LoRA on Apple Silicon (or Linux x86-64 CPU via mlx-cpu); GRPO via mlx-lm-lora",
                   _mlx_platform, ("mlx", "mlx_lm", "mlx_lm_lora")),
    "unsloth": Backend("unsloth", "unsloth", "Unsloth FastLanguageModel + TRL on NVIDIA CUDA, optional 4-bit",
                       _unsloth_platform, ("unsloth", "trl", "peft")),
}


def select_backend(name: str) -> Backend:
    """The backend called ``name``, after checking that it can run here.

    Raises BackendUnavailable with a one-paragraph reason (never a bare ImportError trace).

    >>> select_backend("torch").name
    'torch'
    >>> try:
    ...     select_backend("tensorflow")
    ... except BackendUnavailable as exc:
    ...     print(exc)
    unknown backend 'tensorflow'; choose one of: mlx, torch, unsloth
    """
    if name not in BACKENDS:
        raise BackendUnavailable(f"unknown backend {name!r}; choose one of: {', '.join(sorted(BACKENDS))}")
    backend = BACKENDS[name]
    reason = backend.platform_check()
    if reason:
        raise BackendUnavailable(reason)
    missing = [m for m in backend.modules if importlib.util.find_spec(m) is None]
    if missing:
        raise BackendUnavailable(
            f"backend {name!r} needs {', '.join(missing)}, which is not installed; "
            f"install it with: pip install -e '.[{backend.extra}]'"
        )
    return backend
