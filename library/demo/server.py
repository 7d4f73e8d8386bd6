"""``kgr serve``: a stdlib HTTP server for the demo site, bound to loopback only.

GET serves the files of ``renders/demo/``; ``GET /api/status`` says whether "Try it" is on;
``POST /api/try`` (only with ``--model <run>``) builds a question, generates with the run's
adapter and returns the completion and its reward breakdown (see :mod:`library.demo.tryit`).
"""

from __future__ import annotations

import json
import sys
import threading
from functools import partial
from http import HTTPStatus
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

HOST = "127.0.0.1"
MAX_BODY = 64 * 1024


class DemoHandler(SimpleHTTPRequestHandler):
    tryit: Any = None  # set per server class below
    quiet = True

    def __init__(self, *args, directory: str, **kwargs):
        super().__init__(*args, directory=directory, **kwargs)

    def end_headers(self) -> None:
        self.send_header("Cache-Control", "no-store")
        super().end_headers()

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (stdlib signature)
        if not self.quiet:
            super().log_message(format, *args)

    def _json(self, status: int, obj: Any) -> None:
        body = json.dumps(obj, ensure_ascii=False).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:  # noqa: N802
        path = urlsplit(self.path).path
        if path == "/api/status":
            tryit = self.server.tryit  # type: ignore[attr-defined]
            self._json(HTTPStatus.OK, tryit.status() if tryit is not None else {"try_enabled": False})
            return
        super().do_GET()

    def do_POST(self) -> None:  # noqa: N802
        path = urlsplit(self.path).path
        if path != "/api/try":
            self._json(HTTPStatus.NOT_FOUND, {"error": f"no such endpoint: {path}"})
            return
        tryit = self.server.tryit  # type: ignore[attr-defined]
        if tryit is None:
            self._json(HTTPStatus.NOT_FOUND, {"error": "Try it is off: start the server with kgr serve --model RUN_FOLDER"})
            return
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = -1
        if not 0 < length <= MAX_BODY:
            self._json(HTTPStatus.BAD_REQUEST, {"error": f"send a JSON body of at most {MAX_BODY} bytes"})
            return
        try:
            payload = json.loads(self.rfile.read(length).decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            self._json(HTTPStatus.BAD_REQUEST, {"error": f"invalid JSON: {exc}"})
            return
        from library.demo.tryit import TryItError

        try:
            self._json(HTTPStatus.OK, tryit.answer(payload))
        except TryItError as exc:
            self._json(HTTPStatus.BAD_REQUEST, {"error": str(exc)})
        except Exception as exc:  # a model failure must not kill the server; say what went wrong
            self._json(HTTPStatus.INTERNAL_SERVER_ERROR, {"error": f"{type(exc).__name__}: {exc}"})


class DemoServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, root: Path, port: int = 0, tryit: Any = None, quiet: bool = True):
        self.root = Path(root)
        self.tryit = tryit
        handler = type("Handler", (DemoHandler,), {"quiet": quiet})
        super().__init__((HOST, port), partial(handler, directory=str(self.root)))

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host}:{port}/"


def start_in_thread(root: Path, port: int = 0, tryit: Any = None) -> DemoServer:
    """A running server on a background thread (for tests and notebooks); call ``shutdown()``."""
    server = DemoServer(root, port, tryit)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def serve(root: Path, port: int = 0, tryit: Any = None, preload: bool = True, quiet: bool = True) -> None:
    """Serve until interrupted. Prints ``Serving <url>`` (flushed) once the socket is bound;
    with ``preload`` the try-it model loads on a background thread right away."""
    server = DemoServer(root, port, tryit, quiet=quiet)
    print(f"Serving {server.url}  (directory {root}; try-it {'on' if tryit else 'off'}; Ctrl-C to stop)", flush=True)
    if tryit is not None and preload:
        def _preload() -> None:
            try:
                tryit.load()
                print("try-it model loaded", flush=True)
            except Exception as exc:  # noqa: BLE001 (shown on the page via /api/status)
                print(f"try-it model failed to load: {exc}", file=sys.stderr, flush=True)

        threading.Thread(target=_preload, daemon=True).start()
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
