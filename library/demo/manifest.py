"""What kgr demo wrote into a site folder, as the builder (``library/demo/site.py``), the server
(``library/demo/server.py``) and ``kgr serve --dir`` read it: the manifest
(``.kgr-demo-manifest.json``: every file with its sha256) and the one rule for a safe relative
path, which both the manifest's entries and the URLs the server answers must follow.

Stdlib only (and the project's error type), so the server imports it without the page builder.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from pathlib import Path

from library.errors import DataFileError

MANIFEST = ".kgr-demo-manifest.json"  # in the site folder: every file kgr demo wrote there, with its sha256
UNSURE = "so kgr demo cannot tell which files it wrote here"
REBUILD = "remove it or choose another --out folder"  # what to do about it, as kgr demo says it


def valid_rel(rel: object) -> bool:
    """A path names a file inside its folder: relative, no empty or hidden part (``..``, ``.env``),
    no backslash: what the server serves and what a kgr demo manifest may list.

    >>> [valid_rel(r) for r in ("static/app.js", "../x", "/etc/passwd", ".env", "a//b", "a\\\\b", "", "static/")]
    [True, False, False, False, False, False, False, False]
    """
    return (isinstance(rel, str) and "\\" not in rel and "\x00" not in rel
            and all(part and not part.startswith(".") for part in rel.split("/")))


def plain_file(path: Path) -> bool:
    """A regular file, not a symbolic link to one."""
    return path.is_file() and not path.is_symlink()


def read_manifest(folder: Path, advice: str = REBUILD) -> dict[str, frozenset[str]] | None:
    """The files kgr demo wrote into ``folder``, each with the sha256 it may have (two while a build
    is under way: the old content and the new), or None when the folder has no manifest. A manifest
    that cannot be read is a DataFileError ending with ``advice``: it decides what kgr demo may overwrite."""
    path = Path(folder) / MANIFEST
    if not os.path.lexists(path):
        return None
    if not plain_file(path):
        raise DataFileError(path, f"is not a plain file, {UNSURE}: {advice}")
    try:
        obj = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as exc:
        raise DataFileError(path, f"cannot be read ({exc}), {UNSURE}: {advice}") from None
    owned: dict[str, set[str]] = defaultdict(set)
    for block in (obj.get("files"), obj.get("pending", {})) if isinstance(obj, dict) else (None,):
        if not isinstance(block, dict) or not all(valid_rel(k) and isinstance(v, str) for k, v in block.items()):
            raise DataFileError(path, f"is not a kgr demo manifest ('files': relative path -> sha256), {UNSURE}: {advice}")
        for rel, sha in block.items():
            owned[rel].add(sha)
    return {rel: frozenset(shas) for rel, shas in owned.items()}
