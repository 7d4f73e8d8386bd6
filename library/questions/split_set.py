"""A folder of splits is one set: written whole, checked whole, never mixed.

``kgr data`` writes ``stats.json`` *before* it moves the new split files into place, and
``stats.json`` records every split's sha256. So wherever a run of ``kgr data`` is killed, the
folder holds either the old set (killed before ``stats.json``: the new files were only
temporary files) or a ``stats.json`` that some split file does not match, which
:func:`verify_split_set` refuses. A folder without ``stats.json`` (made by hand) is taken as it is.

>>> import tempfile
>>> folder = Path(tempfile.mkdtemp())
>>> write_split_set(folder, {"train.jsonl": b"a\\n", "eval.jsonl": b"b\\n"}, {"seed": 0})
>>> verify_split_set(folder)
>>> _ = (folder / "eval.jsonl").write_bytes(b"c\\n")
>>> try:
...     verify_split_set(folder)
... except DataFileError as exc:
...     print(str(exc).split(": ", 1)[1][:45])
eval.jsonl does not match the stats.json writ
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Mapping

from library.errors import DataFileError
from library.jsonl import atomic_write_json, read_json, sha256_bytes, sha256_file, staged_write
from library.questions.dataset import SPLIT_FILES, STATS_FILE


def changed_files(out_dir: Path, files: Mapping[str, bytes]) -> list[str]:
    """The names of ``files`` that exist in ``out_dir`` with other content (what writing would replace)."""
    return [name for name, data in files.items()
            if (out_dir / name).is_file() and sha256_file(out_dir / name) != sha256_bytes(data)]


def write_split_set(out_dir: Path, files: Mapping[str, bytes], stats: dict[str, Any]) -> None:
    """Write ``files`` and ``stats.json`` (given ``files``' hashes as ``stats["files"]``) so
    that no moment leaves a folder that passes :func:`verify_split_set` with a mix of sets."""
    out_dir = Path(out_dir)
    stats["files"] = {name: sha256_bytes(data) for name, data in files.items()}
    staged: list[tuple[Path, Path]] = []
    try:
        for name, data in files.items():  # the slow part, under temporary names
            staged.append(staged_write(out_dir / name, data))
        atomic_write_json(out_dir / STATS_FILE, stats)
    except BaseException:  # a full disk or a stop before stats.json: the old set stays as it was
        for tmp, _ in staged:
            tmp.unlink(missing_ok=True)
        raise
    for i, (tmp, final) in enumerate(staged):
        try:
            os.replace(tmp, final)
        except OSError as exc:  # e.g. a folder where a split goes: stats.json now refuses the set
            for left, _ in staged[i:]:
                left.unlink(missing_ok=True)
            raise DataFileError(final, f"cannot write it ({exc.strerror or exc}); the folder holds a partial set "
                                       f"that `kgr train` refuses: run `kgr data --out {out_dir}` again") from exc


def verify_split_set(data_dir: str | Path) -> None:
    """Refuse a folder whose split files are not the set its ``stats.json`` was written with
    (an interrupted ``kgr data``, or files copied in from another set): DataFileError naming them."""
    data_dir = Path(data_dir)
    stats_path = data_dir / STATS_FILE
    if not stats_path.is_file():
        return
    stats = read_json(stats_path)
    recorded = stats.get("files") if isinstance(stats, dict) else None
    if not isinstance(recorded, dict) or not all(isinstance(v, str) for v in recorded.values()):
        if isinstance(stats, dict) and "files" not in stats:
            return  # written before stats.json recorded hashes: nothing to check against
        raise DataFileError(stats_path, "is not the stats.json `kgr data` writes (no table of file hashes under "
                                        f"\"files\"): run `kgr data --out {data_dir}` again")
    differ = [name for name, digest in recorded.items()
              if not (data_dir / name).is_file() or sha256_file(data_dir / name) != digest]
    if differ:
        raise DataFileError(data_dir / differ[0], f"{', '.join(differ)} do{'es' if len(differ) == 1 else ''} not "
                            f"match the stats.json written with {'it' if len(differ) == 1 else 'them'} (an interrupted "
                            f"`kgr data`, or files from another set): run `kgr data --out {data_dir}` again")


def runs_trained_on(data_dir: str | Path, runs_root: str | Path) -> list[Path]:
    """Run folders under ``runs_root`` (and one level of sub-folders) whose meta.json records
    ``data_dir``'s current split files, by hash."""
    data_dir, runs_root = Path(data_dir), Path(runs_root)
    current = {name: sha256_file(path) for name in SPLIT_FILES.values() if (path := data_dir / name).is_file()}
    found = []
    for meta_path in sorted([*runs_root.glob("*/meta.json"), *runs_root.glob("*/*/meta.json")]):
        try:
            recorded = json.loads(meta_path.read_text(encoding="utf-8")).get("data") or {}
        except (OSError, ValueError, AttributeError):
            continue
        if current and any(recorded.get(name) == digest for name, digest in current.items()):
            found.append(meta_path.parent)
    return found

