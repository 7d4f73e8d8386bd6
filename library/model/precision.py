"""Compute precision and memory: which arithmetic a run trains and generates in, and how freed
memory is kept.

Weights are always kept in fp32. Arithmetic follows the *compute precision*
(:func:`set_compute_precision`, ``precision`` in the run config): ``"auto"`` picks bfloat16 on a
bf16-capable CUDA GPU and float32 on every CPU. On a CPU with AMX, bf16 matmuls run 3-8x faster
than fp32 (docs/MEASUREMENTS.md), but bf16 autocast training cost the full profile 10-12 points
and quick's SFT 23, so only ``"fast"`` takes it there; on a CPU without bf16 instructions (the
AVX2 AMD EPYC of the first measurements) bf16 runs ~38x slower, and neither picks it.

Generation has its own precision (:func:`generation_precision`, ``generation.precision``):
``"auto"`` follows a bf16 training precision and also picks bfloat16 on CPUs without AMX whose
bf16 matmuls *measure* at least 1.5x fp32 (:func:`bf16_matmul_speedup`; the AVX512-BF16 AMD
EPYC: 3.4-4x). Training stays fp32 there: a quick run trained under bf16 autocast on that CPU
scored 45.3% after SFT against 60.0% in fp32, while bf16 *generation* of the fp32-trained model
answered 137 of 150 eval questions identically (accuracy -1.3 points [-4.7, +2.0]).

Sampled generation - RL's draws: RSFT's samples, GRPO's groups, the pass-rate pool's estimates -
has a third (:func:`sampling_precision`, ``generation.sampling_precision``, fp32 by default): a
bf16 draw depends on the CPU's kernels (another CPU's draw of the same seed shares ~3 in 4 of its
samples), an fp32 draw does not (docs/FINDINGS.md finding 54), so the same seed gives the same RL
samples on any CPU.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import platform
import time
from contextlib import contextmanager

import torch


#: Compute precisions a run can ask for ("auto" is resolved by :func:`resolve_precision`).
PRECISIONS = ("auto", "fast", "float32", "bfloat16")


_compute_precision = "float32"  # what library calls use until a run sets it (exact fp32)


_generation_precision = "float32"
_sampling_precision = "float32"


def bf16_matrix_units(device: str = "cpu") -> bool:
    """Whether ``device`` multiplies bfloat16 matrices in hardware (CPU: Intel AMX tiles).

    AVX512-BF16 alone does not count: it is 4x faster than fp32 on one machine kind here and 2x
    slower on another (:func:`bf16_matmul_speedup` measures it for generation instead).
    """
    if device.startswith("cuda"):
        return torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    probe = getattr(torch.cpu, "_is_amx_tile_supported", None)
    return bool(probe and probe())


@functools.lru_cache(maxsize=None)
def bf16_matmul_speedup(rows: int = 64, pairs: int = 15) -> float:
    """fp32 time / bf16 time of one SmolLM2 MLP matmul (``rows`` x 576 @ 576 x 1536) on this CPU.

    Measured, not read from CPU flags (see :func:`bf16_matrix_units`): the median over ``pairs``
    interleaved fp32 / bf16 timings of two calls each, after a warm-up, once per process (~10 ms
    where bf16 is fast, ~1 s where it is emulated). Why interleaved: the best of five consecutive
    bf16 timings (~2 ms in all) read under 1.5x once in a demo run on an AMD EPYC (family 25) that
    measures 2.2-2.5x, when one stall of the VM covered all five, and the run answered in fp32.

    >>> bf16_matmul_speedup() > 0
    True
    """
    gen = torch.Generator().manual_seed(0)
    x, w = torch.randn(rows, 576, generator=gen), torch.randn(1536, 576, generator=gen)
    operands = {dtype: (x.to(dtype), w.to(dtype)) for dtype in (torch.float32, torch.bfloat16)}

    def seconds(dtype: torch.dtype) -> float:
        xd, wd = operands[dtype]
        start = time.perf_counter()
        for _ in range(2):
            torch.nn.functional.linear(xd, wd)
        return time.perf_counter() - start

    for dtype in operands:
        seconds(dtype)  # the warm-up: kernels chosen, caches filled
    ratios = sorted(seconds(torch.float32) / seconds(torch.bfloat16) for _ in range(pairs))
    return ratios[len(ratios) // 2]


def resolve_precision(precision: str = "auto", device: str | None = None) -> str:
    """``"float32"`` or ``"bfloat16"`` for a requested precision on ``device`` (default: CUDA if any).

    >>> resolve_precision("float32")
    'float32'
    >>> resolve_precision("auto") in ("float32", "bfloat16")
    True
    """
    if precision not in PRECISIONS:
        raise ValueError(f"unknown precision {precision!r} (known: {', '.join(PRECISIONS)})")
    if precision not in ("auto", "fast"):
        return precision
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device.startswith("cuda"):
        return "bfloat16" if bf16_matrix_units(device) else "float32"
    # On a CPU "auto" trains in fp32 even with bf16 matrix units (AMX): bf16 autocast training cost
    # the full profile 10-12 points and quick's SFT 23 (docs/MEASUREMENTS.md, "Precision"). "fast"
    # takes bf16 for speed where it is fast: matrix units, or bf16 matmuls >= BF16_MIN_SPEEDUP x fp32.
    fast_cpu = precision == "fast" and (bf16_matrix_units(device) or bf16_matmul_speedup() >= BF16_MIN_SPEEDUP)
    return "bfloat16" if fast_cpu else "float32"


def resolve_generation_precision(precision: str = "auto", training: str | None = None,
                                 device: str | None = None) -> str:
    """``"float32"`` or ``"bfloat16"`` for generation, given the resolved ``training`` precision.

    ``"auto"``: bfloat16 where training is bf16 or where bf16 is fast for inference alone: bf16 matrix units, or a CPU whose bf16 matmuls measure at
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


def set_compute_precision(precision: str = "auto", generation: str | None = None,
                          sampling: str | None = None) -> str:
    """Set the process's compute precision for training, generation and sampling; returns the training one.

    Process-wide, like ``torch.set_num_threads``: ``kgr train`` sets it once from the config.
    bfloat16 training means mixed precision (fp32 master weights, bf16 autocast: the TRL
    configs get ``bf16=True``, see :func:`library.train.checkpoints.cpu_training_args`); bfloat16 generation
    means a bf16 copy of the weights (:func:`library.model.generate.generation_model`).
    ``generation`` (``None``: the same as training) is resolved by
    :func:`resolve_generation_precision`; ``sampling`` (``None`` or ``"generation"``: the same as
    generation) is ``"float32"`` or ``"bfloat16"``. Note that ``None`` here is not the config's
    default (``float32``): a run sets all three with :func:`run_precision`.
    """
    global _compute_precision, _generation_precision, _sampling_precision
    if sampling not in (None, "generation", "float32", "bfloat16"):
        raise ValueError(f"unknown sampling precision {sampling!r} (known: generation, float32, bfloat16)")
    _compute_precision = resolve_precision(precision)
    _generation_precision = (_compute_precision if generation is None
                             else resolve_generation_precision(generation, _compute_precision))
    _sampling_precision = _generation_precision if sampling in (None, "generation") else sampling
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


def sampling_precision() -> str:
    """The process's resolved precision for sampled generation (RL's draws; ``"float32"`` unless set).

    >>> with using_precision("float32", generation="bfloat16", sampling="float32"):
    ...     generation_precision(), sampling_precision()
    ('bfloat16', 'float32')
    """
    return _sampling_precision


@contextmanager
def using_precision(precision: str, generation: str | None = None, sampling: str | None = None):
    """Temporarily set the compute precisions (a run, tests and benchmarks).

    >>> with using_precision("bfloat16"):
    ...     compute_precision(), generation_precision(), sampling_precision()
    ('bfloat16', 'bfloat16', 'bfloat16')
    >>> with using_precision("float32", generation="bfloat16"):
    ...     compute_precision(), generation_precision()
    ('float32', 'bfloat16')
    """
    before = (_compute_precision, _generation_precision, _sampling_precision)
    set_compute_precision(precision, generation, sampling)
    try:
        yield _compute_precision
    finally:
        set_compute_precision(*before)


def run_precision(config):
    """:func:`using_precision` as a run's config (``precision``, ``generation.precision`` and
    ``generation.sampling_precision``) sets it: the pipeline and every experiment on a run."""
    return using_precision(config.precision, config.generation.precision, config.generation.sampling_precision)


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


#: How much faster than fp32 bf16 must multiply on a CPU without AMX before generation's "auto"
#: picks it. Measured with :func:`bf16_matmul_speedup` (2 threads): 3.7-4.0x on an AMD EPYC with
#: AVX512-BF16 (family 26), 0.5-0.7x on an Intel Xeon with AVX512-BF16 but no AMX, below 0.1x
#: without bf16 instructions (docs/MEASUREMENTS.md). 1.5 leaves both sides far from the line.
BF16_MIN_SPEEDUP = 1.5
