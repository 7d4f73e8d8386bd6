"""Errors for bad input files: each names the file, the line (when known) and what is wrong."""

from __future__ import annotations

from pathlib import Path


class DataFileError(ValueError):
    """A data file (kg.json, a JSONL split, an episode log, a storyboard) is malformed.

    >>> str(DataFileError("data/eval.jsonl", "missing field 'id'", line=12))
    "data/eval.jsonl:12: missing field 'id'"
    """

    def __init__(self, path: str | Path, message: str, line: int | None = None):
        self.path = str(path)
        self.line = line
        self.message = message
        where = f"{self.path}:{line}" if line is not None else self.path
        super().__init__(f"{where}: {message}")
