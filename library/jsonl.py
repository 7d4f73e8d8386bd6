"""Atomic writes and line-numbered JSONL reading.

Every file the project writes (splits, run logs, metrics) goes through ``atomic_write_text``
so a crash never leaves a half-written file at the final path: we write a temporary file in
the same folder, fsync it, then ``os.replace`` it (atomic on POSIX).
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any, Iterable, Iterator, TypeVar

from pydantic import BaseModel, ValidationError

from library.errors import DataFileError

ModelT = TypeVar("ModelT", bound=BaseModel)
_UMASK = os.umask(0)
os.umask(_UMASK)


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    """Write ``data`` to ``path`` whole or not at all. A folder that cannot be written (read-only,
    full disk, no permission) is a :class:`DataFileError` naming the file, and the old file stays.

    >>> import tempfile, os
    >>> folder = Path(tempfile.mkdtemp())
    >>> atomic_write_bytes(folder / "a.txt", b"one")
    >>> os.chmod(folder, 0o500)
    >>> try:
    ...     atomic_write_bytes(folder / "a.txt", b"two")
    ... except DataFileError as exc:
    ...     print("cannot write" in str(exc) or os.geteuid() == 0)
    ... else:
    ...     print(os.geteuid() == 0)  # root writes anywhere
    True
    >>> (folder / "a.txt").read_bytes()[:3] in (b"one", b"two")
    True
    """
    path = Path(path)
    try:
        _atomic_write(path, data)
    except OSError as exc:
        raise DataFileError(path, f"cannot write it ({exc.strerror or exc}); nothing was written") from exc


def _atomic_write(path: Path, data: bytes) -> None:
    tmp = _write_temp(path, data)
    try:
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _write_temp(path: Path, data: bytes) -> Path:
    """``data`` in a synced temporary file beside ``path``, with a plain file's mode."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        # mkstemp creates 0600; give the file the mode a plain open() would (0666 minus umask)
        os.chmod(tmp, 0o666 & ~_UMASK)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return Path(tmp)


def staged_write(path: str | Path, data: bytes) -> tuple[Path, Path]:
    """Write ``data`` beside ``path`` under a temporary name; returns ``(temporary, path)`` for the
    caller to ``os.replace`` when a whole set of files is ready (DataFileError as for atomic writes)."""
    path = Path(path)
    try:
        return _write_temp(path, data), path
    except OSError as exc:
        raise DataFileError(path, f"cannot write it ({exc.strerror or exc}); nothing was written") from exc


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: str | Path) -> str:
    """The sha256 of a file, read in 1 MiB chunks."""
    h = hashlib.sha256()
    with Path(path).open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def atomic_write_text(path: str | Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def dumps_line(record: Any) -> str:
    """One canonical JSONL line: stable key order as given, UTF-8 kept readable."""
    if isinstance(record, BaseModel):
        record = record.model_dump(mode="json")
    return json.dumps(record, ensure_ascii=False, separators=(", ", ": ")) + "\n"


def atomic_write_json(path: str | Path, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, ensure_ascii=False, indent=2, sort_keys=False) + "\n")


def write_jsonl_atomic(path: str | Path, records: Iterable[Any]) -> None:
    atomic_write_text(path, "".join(dumps_line(r) for r in records))


def _describe(err: ValidationError) -> str:
    parts = []
    for e in err.errors():
        loc = ".".join(str(p) for p in e["loc"]) or "<record>"
        parts.append(f"{loc}: {e['msg']}")
    return "; ".join(parts)


def iter_jsonl(path: str | Path, model: type[ModelT] | None = None) -> Iterator[tuple[int, Any]]:
    """Yield ``(line_number, record)`` for each non-blank line, validated against ``model``.

    A bad line raises :class:`DataFileError` naming the file, the 1-based line and the problem.
    """
    path = Path(path)
    if not path.exists():
        raise DataFileError(path, "file not found")
    with path.open("r", encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise DataFileError(path, f"invalid JSON: {exc.msg} (column {exc.colno})", line=number) from None
            except RecursionError:
                raise DataFileError(path, "JSON nested too deeply to read", line=number) from None
            if model is None:
                yield number, obj
                continue
            try:
                yield number, model.model_validate(obj)
            except ValidationError as exc:
                raise DataFileError(path, _describe(exc), line=number) from None


def read_jsonl(path: str | Path, model: type[ModelT] | None = None) -> list[Any]:
    return [record for _, record in iter_jsonl(path, model)]


def read_json(path: str | Path, model: type[ModelT] | None = None) -> Any:
    path = Path(path)
    if not path.exists():
        raise DataFileError(path, "file not found")
    try:
        obj = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise DataFileError(path, f"invalid JSON: {exc.msg} (column {exc.colno})", line=exc.lineno) from None
    except RecursionError:
        raise DataFileError(path, "JSON nested too deeply to read") from None
    except UnicodeDecodeError as exc:
        raise DataFileError(path, f"not UTF-8 text (byte {exc.start})") from None
    if model is None:
        return obj
    try:
        return model.model_validate(obj)
    except ValidationError as exc:
        raise DataFileError(path, _describe(exc)) from None
