"""Run folders: ``data/runs/<run_id>/{meta.json, metrics.json, episodes.jsonl}``.

This module is the only writer and reader of run logs. It imports neither torch nor manim,
so the video side and the demo page read runs through it cheaply.

Writes are atomic: ``meta.json`` and ``metrics.json`` are replaced whole; episodes are
appended in whole-line chunks with one ``write`` + ``fsync`` each, and a line left
half-written by a crash is cut off the next time the run is opened for appending
(so an interrupted training can resume from a clean log).

>>> import tempfile
>>> root = tempfile.mkdtemp()
>>> run = RunDir.create(root, run_id="demo")
>>> run.write_meta({"model": "tiny"})
>>> run.read_meta()["model"]
'tiny'
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import os
import secrets
import sys
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from library.contracts import Episode
from library.errors import DataFileError
from library.jsonl import atomic_write_json, atomic_write_text, dumps_line, iter_jsonl, read_json

LOCK = ".lock"  # held by the one process that writes the run (git-ignored by its dot name)
META = "meta.json"
METRICS = "metrics.json"
EPISODES = "episodes.jsonl"
DEFAULT_RUNS_ROOT = Path("data/runs")


def new_run_id(prefix: str = "run") -> str:
    """A sortable, collision-safe run id such as ``run-20261122-041500-3fa2``."""
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%d-%H%M%S")
    return f"{prefix}-{stamp}-{secrets.token_hex(2)}"


class RunLockedError(RuntimeError):
    """Another process writes this run folder."""


class RunDir:
    """A handle on one run folder."""

    def __init__(self, path: str | Path):
        self.path = Path(path)

    # ----------------------------------------------------------------- creation
    @classmethod
    def create(cls, root: str | Path = DEFAULT_RUNS_ROOT, run_id: str | None = None, exist_ok: bool = False) -> "RunDir":
        path = Path(root) / (run_id or new_run_id())
        path.mkdir(parents=True, exist_ok=exist_ok)
        return cls(path)

    @classmethod
    def open(cls, path: str | Path) -> "RunDir":
        path = Path(path)
        if not path.is_dir():
            raise DataFileError(path, "run folder not found")
        return cls(path)

    @property
    def run_id(self) -> str:
        return self.path.name

    # --------------------------------------------------------------------- lock
    @contextlib.contextmanager
    def lock(self) -> Iterator[None]:
        """Own the run folder while the block runs: an OS lock (``flock``) on ``<run>/.lock``,
        released when the process ends however it ends. A second writer gets RunLockedError
        naming the holder (its pid and command line) instead of racing on the same files.

        >>> import tempfile
        >>> run = RunDir.create(tempfile.mkdtemp(), run_id="r")
        >>> with run.lock():
        ...     pass
        """
        import fcntl

        created = not self.path.exists()
        self.path.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.pread(fd, 4096, 0).decode("utf-8", "replace").strip() or "another process"
                raise RunLockedError(f"{self.path} is being written by {holder}; wait for it to finish, "
                                     "or choose another --run") from None
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"pid {os.getpid()} ({' '.join(sys.argv)[:300]})\n".encode(), 0)
            yield
        finally:
            # a run refused before it wrote anything (bad data, bad settings) leaves no folder behind;
            # removed while the lock is still held, so no other writer can be starting in it
            if created and [p.name for p in self.path.iterdir()] == [LOCK]:
                (self.path / LOCK).unlink(missing_ok=True)
                with contextlib.suppress(OSError):
                    self.path.rmdir()
            os.close(fd)  # closing the descriptor releases the lock

    # --------------------------------------------------------------------- meta
    def write_meta(self, meta: dict[str, Any]) -> None:
        atomic_write_json(self.path / META, meta)

    def read_meta(self) -> dict[str, Any]:
        return read_json(self.path / META)

    # ------------------------------------------------------------------ metrics
    def write_metrics(self, metrics: dict[str, Any]) -> None:
        atomic_write_json(self.path / METRICS, metrics)

    def read_metrics(self) -> dict[str, Any]:
        path = self.path / METRICS
        return read_json(path) if path.exists() else {}

    # ----------------------------------------------------------------- episodes
    @property
    def episodes_path(self) -> Path:
        return self.path / EPISODES

    def _repair_tail(self) -> None:
        """Cut a trailing partial line (a crash mid-append) so appends start on a clean line."""
        path = self.episodes_path
        if not path.exists() or path.stat().st_size == 0:
            return
        with path.open("rb+") as handle:
            data = handle.read()
            if data.endswith(b"\n"):
                return
            cut = data.rfind(b"\n") + 1
            handle.truncate(cut)

    def append_episodes(self, episodes: Iterable[Episode | dict[str, Any]]) -> int:
        """Validate and append episodes in one write; returns how many were written."""
        lines = []
        for ep in episodes:
            record = ep if isinstance(ep, Episode) else Episode.model_validate(ep)
            lines.append(dumps_line(record))
        if not lines:
            return 0
        self._repair_tail()
        with self.episodes_path.open("a", encoding="utf-8") as handle:
            handle.write("".join(lines))
            handle.flush()
            os.fsync(handle.fileno())
        return len(lines)

    def iter_episodes(self, phase: str | None = None, split: str | None = None) -> Iterator[Episode]:
        """Validated episodes in file order; a bad line raises DataFileError with its number."""
        if not self.episodes_path.exists():
            return
        for _, ep in iter_jsonl(self.episodes_path, Episode):
            if phase is not None and ep.phase != phase:
                continue
            if split is not None and ep.split != split:
                continue
            yield ep

    def read_episodes(self, phase: str | None = None, split: str | None = None) -> list[Episode]:
        return list(self.iter_episodes(phase=phase, split=split))

    def edit_episodes(self, edit: Callable[[dict[str, Any]], bool]) -> int:
        """Let ``edit`` change episode lines in place (it returns True for a line it changed) and
        rewrite episodes.jsonl atomically when it changed any; returns how many it changed. What
        ``kgr migrate`` uses to add what an older log lacks.

        >>> import tempfile
        >>> run = RunDir.create(tempfile.mkdtemp(), run_id="r")
        >>> run.edit_episodes(lambda ep: True)
        0
        """
        return self._rewrite(lambda obj: (True, bool(edit(obj))))

    def keep_episodes(self, keep: Callable[[dict[str, Any]], bool]) -> int:
        """Rewrite episodes.jsonl (atomically) with the lines ``keep`` accepts; returns how many
        were dropped. A resumed phase cuts what it will make again: GRPO the rollouts after its
        checkpoint, RSFT a half-done eval, a phase re-run from scratch all of its own.

        >>> import tempfile
        >>> run = RunDir.create(tempfile.mkdtemp(), run_id="r")
        >>> run.keep_episodes(lambda ep: True)
        0
        """
        def visit(obj: dict[str, Any]) -> tuple[bool, bool]:
            kept = bool(keep(obj))
            return kept, not kept

        return self._rewrite(visit)

    def _rewrite(self, visit: Callable[[dict[str, Any]], tuple[bool, bool]]) -> int:
        """The one rewrite of episodes.jsonl: ``visit`` says of each line (keep it, changed
        something); the file is replaced atomically when anything changed; returns the count."""
        path = self.episodes_path
        if not path.exists():
            return 0
        self._repair_tail()  # a line half-written by a kill would otherwise fail to parse
        lines, changed = [], 0
        for _, obj in iter_jsonl(path):
            kept, touched = visit(obj)
            changed += touched
            if kept:
                lines.append(dumps_line(obj))
        if changed:
            atomic_write_text(path, "".join(lines))
        return changed

    def drop_episodes(self, phase: str) -> int:
        """Remove every episode of ``phase`` (a phase re-run from scratch on resume)."""
        return self.keep_episodes(lambda ep: ep.get("phase") != phase)

def list_runs(root: str | Path = DEFAULT_RUNS_ROOT) -> list[RunDir]:
    """Run folders under ``root`` that have a meta.json, sorted by name."""
    root = Path(root)
    if not root.is_dir():
        return []
    return [RunDir(p) for p in sorted(root.iterdir()) if (p / META).exists()]
