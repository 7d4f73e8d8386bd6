"""Loudness to the platforms' norm: integrated -14 LUFS (± 1 LU), true peak at most -1 dBTP.

YouTube and the other platforms turn a louder upload down and leave a quieter one quiet, so a
narration mixed at the TTS engine's own level (hibari: about -26 LUFS) sounds faint beside
everything else. The assembly (``scenes/assemble.py``) measures its mixed narration first
(``ffmpeg``'s ``ebur128`` filter, ITU-R BS.1770), then raises it by the missing gain in the
same encode and limits its peaks (``alimiter``) under ``PEAK_CEILING_DBFS``: speech peaks sit
~18 dB over its loudness, more than -14 LUFS leaves below -1 dBTP, and a limiter only touches
those few peaks where a compressor would pump the whole voice. The build then measures the MP4
itself (``measure``) and records the result in the render manifest.

>>> gain_filter(-26.0)
'volume=12.00dB,alimiter=limit=0.7943:attack=2:release=40:level=false:latency=true'
>>> Loudness(-14.2, -1.9, 2.7).ok, Loudness(-15.3, -1.9, 2.7).ok, Loudness(-14.0, -0.5, 2.7).ok
(True, False, False)
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path

from scenes.ffmpeg import ffmpeg_exe

TARGET_LUFS = -14.0
TOLERANCE_LU = 1.0
MAX_TRUE_PEAK_DBTP = -1.0
#: the limiter's sample ceiling: AAC and the inter-sample peaks it creates add up to ~0.5 dB
PEAK_CEILING_DBFS = -2.0
#: what ebur128 reports for a silent track (below its absolute gate)
SILENT_LUFS = -70.0


@dataclass(frozen=True)
class Loudness:
    """ebur128's summary of a file: integrated loudness, true peak, loudness range."""

    integrated_lufs: float
    true_peak_dbtp: float
    lra_lu: float

    @property
    def ok(self) -> bool:
        return abs(self.integrated_lufs - TARGET_LUFS) <= TOLERANCE_LU and self.true_peak_dbtp <= MAX_TRUE_PEAK_DBTP

    def record(self) -> dict:
        return {**asdict(self), "target_lufs": TARGET_LUFS, "ok": self.ok}


def gain_filter(measured_lufs: float) -> str:
    """The filters that bring a track measured at ``measured_lufs`` to the target: a gain,
    then a peak limiter at PEAK_CEILING_DBFS (no make-up gain: it only catches peaks)."""
    ceiling = 10 ** (PEAK_CEILING_DBFS / 20)
    return (f"volume={TARGET_LUFS - measured_lufs:.2f}dB,"
            f"alimiter=limit={ceiling:.4f}:attack=2:release=40:level=false:latency=true")


_SUMMARY = re.compile(r"Summary:.*?I:\s+(?P<i>-?[\d.]+|-inf) LUFS.*?LRA:\s+(?P<lra>-?[\d.]+) LU"
                      r"(?:.*?True peak:\s+Peak:\s+(?P<tp>-?[\d.]+|-inf) dBFS)?", re.S)


def parse_summary(stderr: str) -> Loudness:
    """The last ebur128 summary in an ffmpeg log.

    >>> log = '''[Parsed_ebur128_0 @ 0x1] Summary:
    ...   Integrated loudness:
    ...     I:         -14.2 LUFS
    ...     Threshold: -24.6 LUFS
    ...   Loudness range:
    ...     LRA:         2.7 LU
    ...   True peak:
    ...     Peak:       -1.9 dBFS'''
    >>> parse_summary(log)
    Loudness(integrated_lufs=-14.2, true_peak_dbtp=-1.9, lra_lu=2.7)
    """
    found = list(_SUMMARY.finditer(stderr))
    if not found:
        raise RuntimeError(f"no ebur128 summary in ffmpeg's output: {stderr[-500:]}")
    m = found[-1]
    value = lambda s: float("-inf") if s in (None, "-inf") else float(s)  # noqa: E731
    return Loudness(value(m["i"]), value(m["tp"]), value(m["lra"]))


def measure_command(ffmpeg: str, inputs: list[str], graph: list[str] | None = None) -> list[str]:
    """An ffmpeg command that decodes ``inputs`` (after ``graph``, a filtergraph ending in
    ``[aout]``, when given) and prints ebur128's summary, writing nothing."""
    cmd = [ffmpeg, "-hide_banner", "-nostdin", "-nostats", "-loglevel", "info"]
    for i in inputs:
        cmd += ["-i", i]
    meter = "ebur128=peak=true"
    if graph:
        cmd += ["-filter_complex", ";".join(graph + [f"[aout]{meter}[meter]"]), "-map", "[meter]"]
    else:
        cmd += ["-map", "0:a:0", "-af", meter]
    return cmd + ["-f", "null", "-"]


def run_measure(cmd: list[str], **popen) -> Loudness:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, **popen)
    if proc.returncode != 0:
        raise RuntimeError(f"loudness measurement failed ({proc.returncode}): {proc.stderr[-1000:]}")
    return parse_summary(proc.stderr)


def measure(path: str | Path, ffmpeg: str | None = None) -> Loudness:
    """Integrated loudness, true peak and loudness range of a file's first audio stream."""
    return run_measure(measure_command(ffmpeg or ffmpeg_exe(), [str(path)]))


__all__ = ["Loudness", "measure", "gain_filter", "TARGET_LUFS", "MAX_TRUE_PEAK_DBTP"]
