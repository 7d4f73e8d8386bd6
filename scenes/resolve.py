"""Resolution: turn each storyboard shot plus a run's logs and the KG into a scene payload.

A payload (``scenes/payloads.py``) holds only resolved strings and numbers. Building it here,
from ``metrics.json``, ``episodes.jsonl``, the eval questions and ``kg.json`` through the
storyboard's templates, is what makes "every number on screen comes from the logs" hold: the
scenes never read a file. A clip's cache key is the hash of its payload, so a clip is
re-rendered exactly when the data it shows changes.

The parts, one module each: the run (``scenes/run_data.py``: RunData), which episode a shot
shows (``scenes/query.py``), the payload of each scene type (``scenes/builders.py``); here,
the shots themselves. Imports neither torch nor manim.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from library.errors import DataFileError
from scenes.builders import BUILDERS
from scenes.payloads import validate_payload
from scenes.query import ShotError, select_episode
from scenes.run_data import RunData
from scenes.spoken import spoken
from scenes.storyboard import (
    END_HOLD_SECONDS,
    NARRATION_PAD_SECONDS,
    XFADE_SECONDS,
    Storyboard,
    evaluate_when,
    render_params,
    render_text,
)


@dataclass
class ResolvedShot:
    """A shot with everything resolved except its narration-timed duration."""

    index: int
    line: int
    scene: str
    payload: dict[str, Any]
    narration: str
    caption: str
    duration: float | None  # None: as long as the narration (+ crossfades and NARRATION_PAD_SECONDS)
    ex_id: str | None = None
    texts: list[str] = field(default_factory=list)  # every on-screen/spoken string (for audits)
    #: every episode the shot shows or quotes ({phase, ex_id, role}), for the render manifest
    episodes: list[dict[str, str]] = field(default_factory=list)
    selection: dict[str, Any] | None = None  # {query, fallback} of a query selection
    chapter: str | None = None  # the chapter this shot starts, for the upload text
    run: str | None = None  # another run this shot reads (Shot.run), None for the storyboard's

    @property
    def spoken(self) -> str:
        """The narration as the voice reads it (scenes/spoken.py); the caption stays written."""
        return spoken(self.narration)

    def manifest_entry(self) -> dict[str, Any]:
        """This shot in ``renders/<name>.manifest.json``: enough to trace a frame to its log lines."""
        entry: dict[str, Any] = {"shot": self.index + 1, "line": self.line, "scene": self.scene,
                                 "episodes": self.episodes}
        if self.selection is not None:
            entry["selection"] = self.selection
        if self.run is not None:
            entry["run"] = self.run
        return entry

    def final_duration(self, narration_seconds: float | None, *, first: bool = False, last: bool = False) -> float:
        """The shot's length: a number as written, or, for ``duration: narration``, the speech
        framed so that no crossfade covers a word: the fade in (not before the first shot), the
        speech, a breath and the fade out (the last shot holds END_HOLD_SECONDS instead).

        >>> shot = ResolvedShot(0, 1, "title", {}, "Hello.", "", None)
        >>> shot.final_duration(4.0), shot.final_duration(4.0, first=True), shot.final_duration(4.0, last=True)
        (4.8, 4.5, 5.1)
        """
        if self.duration is not None:
            return self.duration
        assert narration_seconds is not None
        lead = 0.0 if first else XFADE_SECONDS
        tail = END_HOLD_SECONDS if last else XFADE_SECONDS
        return round(lead + narration_seconds + NARRATION_PAD_SECONDS + tail, 3)


def resolve_upload(sb: Storyboard, data: RunData) -> dict[str, str] | None:
    """The storyboard's upload texts (title, description, thumbnail headline) over the run's logs."""
    if sb.upload is None:
        return None
    ctx = data.template_context()
    return {key: render_text(getattr(sb.upload, key), ctx, where=f"upload.{key}", sb=sb, path=("upload", key)).strip()
            for key in ("title", "description", "headline")}


def resolve_shots(sb: Storyboard, data: RunData) -> list[ResolvedShot]:
    """Resolve every shot; any problem raises DataFileError at the line of the shot (or field).
    A shot naming its own ``run:`` reads that run (loaded once) instead of ``data``."""
    main_ctx = data.template_context()
    others: dict[str, tuple[RunData, dict[str, Any]]] = {}
    out = []
    for i, shot in enumerate(sb.shots):
        if not evaluate_when(shot, main_ctx, sb, i):
            continue
        data_here, base_ctx = data, main_ctx
        if shot.run is not None:
            if shot.run not in others:
                try:
                    other = RunData.load(shot.run, kg_default=sb.kg, questions_default=sb.questions)
                except DataFileError as exc:
                    raise DataFileError(exc.path, f"{exc.message} (the run that {sb.source} shot {i + 1}, line "
                                                  f"{shot.line}, names)", line=exc.line) from None
                # the storyboard's run stays readable there as `main`
                others[shot.run] = (other, {**other.template_context(), "main": main_ctx})
            data_here, base_ctx = others[shot.run]
        try:
            params = dict(shot.params)
            sel = select_episode(data_here, params.pop("episode"), sb, i) if "episode" in params else None
            ctx = {**base_ctx, **(sel.context(data_here) if sel else {})}
            rendered = render_params(params, ctx, sb, i)
            payload = BUILDERS[shot.scene](data_here, rendered, sel)
            try:
                validate_payload(shot.scene, payload)
            except ValueError as exc:
                raise ShotError(str(exc), ("shots", i, "params")) from None
            narration = render_text(shot.narration, ctx, where=f"shots.{i}.narration", sb=sb, path=("shots", i, "narration"))
            caption = render_text(shot.caption, ctx, where=f"shots.{i}.caption", sb=sb, path=("shots", i, "caption"))
            chapter = (render_text(shot.chapter, ctx, where=f"shots.{i}.chapter", sb=sb, path=("shots", i, "chapter"))
                       if shot.chapter is not None else None)
        except ShotError as exc:
            raise sb.fail(exc.path or ("shots", i), f"shot {i + 1} ({shot.scene}): {exc}") from None
        except DataFileError as exc:
            if exc.path == sb.source:
                raise
            # a data file problem (missing questions, bad KG): say which shot needed it
            raise DataFileError(exc.path, f"{exc.message} (needed by {sb.source} shot {i + 1}, line {shot.line})", line=exc.line) from None
        texts = [narration, caption] + _strings(payload)
        out.append(ResolvedShot(i, shot.line, shot.scene, payload, narration, caption,
                                None if shot.duration == "narration" else float(shot.duration),
                                sel.ex_id if sel else None, texts, sel.episodes() if sel else [],
                                {"query": list(sel.query), "fallback": sel.fallback} if sel and sel.query else None,
                                chapter, shot.run))
    return out


def _strings(obj: Any) -> list[str]:
    if isinstance(obj, str):
        return [obj]
    if isinstance(obj, dict):
        return [s for v in obj.values() for s in _strings(v)]
    if isinstance(obj, (list, tuple)):
        return [s for v in obj for s in _strings(v)]
    return []


__all__ = ["RunData", "ResolvedShot", "resolve_shots", "resolve_upload"]
