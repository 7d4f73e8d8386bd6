"""`kgr demo --out` and `kgr serve --dir` never destroy or expose what they did not write: the
builder keeps a manifest of its own files and refuses folders holding others (``--force``: its
own names only), never writes through links, says so in one sentence where it cannot write; the
server serves only regular files inside its folder, lists no folders, never builds into it, and
gives the request line and headers one deadline in all."""

from __future__ import annotations

import hashlib
import json
import os
import socket
import threading
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from library.cli import app
from library.demo.server import DemoServer
from library.demo.site import LEGACY_FILES, MANIFEST, build_demo, read_manifest
from library.errors import DataFileError

USER_FILES = {"static/mine.css": "body { color: hotpink }", "static/photos/a.jpg": "JPEG",
              "data.json": '{"mine": true}', "notes.txt": "my notes"}


@pytest.fixture
def demo(fixture_run, kg_file, tmp_path):
    """``kgr demo FIXTURE_RUN --out OUT [more]`` through the CLI: the result."""
    def run(out: Path, *more: str):
        return CliRunner().invoke(app, ["demo", str(fixture_run.path), "--out", str(out), "--kg", str(kg_file),
                                        "--data", str(tmp_path / "no-data"), *more])
    return run


def _write(folder: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_text(text)


def _contents(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _own_files(out: Path) -> set[str]:
    return {"index.html", "data.json"} | {f"static/{p.name}" for p in (out / "static").iterdir()
                                          if p.name in ("app.js", "style.css")}


# ----------------------------------------------------------------------------- kgr demo --out
def test_a_folder_with_other_files_is_refused_and_left_as_it_was(demo, tmp_path):
    # Old builder: rmtree(OUT/static) took mine.css and photos/, data.json was replaced, rc 0.
    out = tmp_path / "mine"
    _write(out, USER_FILES)
    before = _contents(out)
    result = demo(out)
    assert result.exit_code == 2, result.output
    assert "holds files kgr demo did not write (data.json, notes.txt, static/mine.css, static/photos/a.jpg)" \
        in result.output and "--force" in result.output and "Traceback" not in result.output
    assert _contents(out) == before  # nothing written, nothing removed


def test_force_writes_its_own_names_and_touches_nothing_else(demo, tmp_path):
    out = tmp_path / "mine"
    _write(out, USER_FILES)
    result = demo(out, "--force")
    assert result.exit_code == 0, result.output
    after = _contents(out)
    for rel, text in USER_FILES.items():
        if rel != "data.json":  # the one user file with a name kgr demo writes
            assert after[rel] == text.encode(), rel
    assert json.loads(after["data.json"])["runs"][0]["run_id"] == "fixture"
    manifest = json.loads(after[MANIFEST])
    assert set(manifest["files"]) == _own_files(out) and "pending" not in manifest
    assert all(hashlib.sha256(after[rel]).hexdigest() == sha for rel, sha in manifest["files"].items())
    # the user's files are still not kgr demo's: the next build without --force is refused again
    assert demo(out).exit_code == 2
    assert _contents(out) == after


def test_rebuild_over_its_own_output_replaces_only_its_files(demo, tmp_path):
    out = tmp_path / "site"
    assert demo(out).exit_code == 0
    assert demo(out).exit_code == 0  # its own folder: rebuilt without --force
    # a file an earlier build wrote and this one does not is removed, when still as it was written;
    # one the user changed since is theirs now: the build is refused and it stays
    (out / "static" / "old.js").write_text("old")
    (out / "static" / "edited.js").write_text("edited")
    manifest = json.loads((out / MANIFEST).read_text())
    manifest["files"]["static/old.js"] = hashlib.sha256(b"old").hexdigest()
    manifest["files"]["static/edited.js"] = hashlib.sha256(b"as written").hexdigest()
    (out / MANIFEST).write_text(json.dumps(manifest))
    result = demo(out)
    assert result.exit_code == 2 and "static/edited.js (changed since kgr demo wrote it)" in result.output, result.output
    assert demo(out, "--force").exit_code == 0
    assert not (out / "static" / "old.js").exists()
    assert (out / "static" / "edited.js").read_text() == "edited"
    assert set(json.loads((out / MANIFEST).read_text())["files"]) == _own_files(out)


def test_a_folder_built_before_the_manifest_still_rebuilds(demo, tmp_path):
    out = tmp_path / "old-build"
    assert demo(out).exit_code == 0
    (out / MANIFEST).unlink()  # what renders/demo looks like from an older kgr demo
    assert demo(out).exit_code == 0, "an older build's files are its own"
    assert read_manifest(out).keys() == _own_files(out)
    # ... but not a folder merely holding the same names: its index.html is not kgr demo's page
    other = tmp_path / "other-site"
    _write(other, {rel: "someone else's" for rel in LEGACY_FILES})
    result = demo(other)
    assert result.exit_code == 2 and "index.html" in result.output
    assert _contents(other) == {rel: b"someone else's" for rel in LEGACY_FILES}


def test_a_symlinked_static_folder_is_a_clear_error(demo, tmp_path):
    # Old builder: rmtree() on the link raised OSError with a traceback.
    elsewhere = tmp_path / "elsewhere"
    _write(elsewhere, {"precious.css": "keep me"})
    out = tmp_path / "site"
    out.mkdir()
    (out / "static").symlink_to(elsewhere, target_is_directory=True)
    for more in ((), ("--force",)):
        result = demo(out, *more)
        assert result.exit_code == 2, result.output
        assert f"{out / 'static'}: is a symbolic link" in result.output and "Traceback" not in result.output
    assert _contents(elsewhere) == {"precious.css": b"keep me"}
    assert not (out / "index.html").exists()


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_a_read_only_folder_is_one_sentence(demo, tmp_path):
    out = tmp_path / "ro"
    out.mkdir()
    out.chmod(0o555)
    try:
        result = demo(out)
    finally:
        out.chmod(0o755)
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert f"{out}: cannot write the demo site into this folder (Permission denied); nothing was written" \
        in result.output, result.output
    assert list(out.iterdir()) == []


def test_a_write_that_fails_half_way_is_one_sentence(demo, tmp_path, monkeypatch):
    """What a read-only folder (or a full disk) does to the writes, also when the tests run as root."""
    import library.demo.site as site

    def refuse(path, data):
        raise DataFileError(path, "cannot write it (Permission denied); nothing was written") from PermissionError(
            13, "Permission denied")

    out = tmp_path / "site"
    monkeypatch.setattr(site, "atomic_write_bytes", refuse)
    result = demo(out)
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert f"{out}: cannot write the demo site into this folder (Permission denied); it may be half updated" \
        in result.output, result.output  # the manifest was written first: a rerun still owns the folder
    monkeypatch.undo()
    assert demo(out).exit_code == 0
    monkeypatch.setattr(site.os, "access", lambda *a, **k: False)  # refused before the runs are read
    with pytest.raises(DataFileError) as refused:
        site.check_out_dir(out)
    assert str(refused.value) == (f"{out}: cannot write the demo site into this folder (Permission denied); "
                                  "nothing was written: choose a writable --out folder")


def test_demo_from_another_folder_says_so_and_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["demo"])
    assert result.exit_code == 2
    assert ("no run folders found under ./data/runs: run kgr demo from the project folder or name the runs"
            in result.output), result.output
    assert list(tmp_path.iterdir()) == []


# ----------------------------------------------------------------------------- kgr serve --dir
def test_serve_never_builds_into_its_folder(tmp_path, monkeypatch):
    # Old server: built the demo into DIR (mine.css gone, data.json replaced), then served it all.
    folder = tmp_path / "mine"
    _write(folder, USER_FILES)
    before = _contents(folder)
    monkeypatch.chdir(tmp_path)
    served = []
    monkeypatch.setattr("library.demo.server.serve", lambda *a, **k: served.append(a))  # never serve forever here
    for args in (["serve", "--dir", str(folder)], ["serve"]):
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 2 and "(index.html missing): build one with `kgr demo --out" in result.output, \
            result.output
    assert _contents(folder) == before and served == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine"]


@pytest.fixture
def serve_folder():
    servers: list[DemoServer] = []

    def start(folder: Path, **options) -> DemoServer:
        server = DemoServer(folder, 0, None, **options)
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def _get(server: DemoServer, path: str) -> tuple[int, bytes]:
    with socket.create_connection(("127.0.0.1", server.server_address[1]), timeout=5) as sock:
        sock.sendall(f"GET {path} HTTP/1.0\r\n\r\n".encode())
        out = b""
        while chunk := sock.recv(65536):
            out += chunk
    return int(out.split(b" ", 2)[1]), out.partition(b"\r\n\r\n")[2]


def test_serve_gives_only_the_sites_files(fixture_run, kg_file, tmp_path, serve_folder):
    # Old server: /leak.txt served the outside file, /updir/ listed the parent, /static/ was listed.
    (tmp_path / "outside.txt").write_text("OUTSIDE-SECRET")
    site = tmp_path / "site"
    build_demo([fixture_run.path], site, kg_path=kg_file, data_dir=tmp_path / "no-data")
    (site / "leak.txt").symlink_to(tmp_path / "outside.txt")
    (site / "updir").symlink_to(tmp_path, target_is_directory=True)
    (site / "extra.txt").write_text("not built by kgr demo")
    server = serve_folder(site)
    assert _get(server, "/")[0] == 200 and b"episode player" in _get(server, "/")[1]
    for path in ("/index.html", "/data.json", "/static/app.js", "/static/style.css"):
        assert _get(server, path)[0] == 200, path
    for path in ("/leak.txt", "/updir/", "/updir/outside.txt", "/static/", "/static", "/updir",
                 f"/{MANIFEST}", "/extra.txt", "/static/app.js/", "//static/app.js/.."):
        status, body = _get(server, path)
        assert status == 404 and b"OUTSIDE-SECRET" not in body and b"Directory listing" not in body, path

    # a site without a manifest (built by hand, or by an older kgr demo): any regular file inside it
    (site / MANIFEST).unlink()
    (site / "inside-link.txt").symlink_to(site / "extra.txt")
    assert _get(server, "/extra.txt") == (200, b"not built by kgr demo")
    assert _get(server, "/inside-link.txt") == (200, b"not built by kgr demo")
    for path in ("/leak.txt", "/updir/outside.txt", "/static/", "/updir/"):
        assert _get(server, path)[0] == 404, path


def test_the_request_headers_have_one_deadline(tmp_path, serve_folder):
    # Old server: the timeout was per recv, so a byte every 0.25 s (under read_timeout 1 s) held the
    # connection open for as long as the client liked; here the client's own 6 s timeout fires -> fails.
    _write(tmp_path / "site", {"index.html": "<html></html>"})
    server = serve_folder(tmp_path / "site", read_timeout=1.0)
    sock = socket.create_connection(("127.0.0.1", server.server_address[1]), timeout=6)
    stop = threading.Event()

    def dribble():
        try:
            for byte in b"GET / HTTP/1.1\r\nHost: x\r\n" + b"X-Slow: " + b"a" * 1000:
                if stop.wait(0.25):
                    return
                sock.sendall(bytes([byte]))
        except OSError:
            pass

    t0 = time.monotonic()
    threading.Thread(target=dribble, daemon=True).start()
    try:
        while sock.recv(65536):  # the server closes the connection at its deadline
            pass
        elapsed = time.monotonic() - t0
    except ConnectionResetError:
        elapsed = time.monotonic() - t0
    finally:
        stop.set()
        sock.close()
    assert elapsed < 3, elapsed
    # a prompt request on a fresh connection is served as ever
    assert _get(server, "/") == (200, b"<html></html>")
