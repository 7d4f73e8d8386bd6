"""``kgr serve``: a stdlib HTTP server for the demo site, bound to loopback only.

GET serves the files of the site folder (``renders/demo/``): only regular files inside it (those
in its manifest, ``.kgr-demo-manifest.json``, when it has one), ``/`` its index.html, no directory
listings, no hidden files, nothing a link leads to outside the folder (404 for all of those), and
it never writes there. ``GET /api/status`` says whether "Try it" is on;
``POST /api/try`` (only with ``--model <run>``) builds a question, generates with the run's
adapter and returns the completion and its reward breakdown (see :mod:`library.demo.tryit`).

Hardening (any web page the user visits can send requests to 127.0.0.1, and generation is slow):

* ``POST /api/try`` needs ``Content-Type: application/json`` (415 otherwise: a plain HTML form or
  a "simple" cross-site ``fetch`` cannot send it without a CORS preflight, which is never granted),
  and a browser ``Origin`` (or ``Sec-Fetch-Site``) naming another site gets 403. No CORS headers
  are ever sent.
* Bodies: a ``Content-Length`` is required (411), at most ``max_body`` bytes (413, answered
  without reading the body), read within ``read_timeout`` seconds in total (408), JSON nested at
  most ``max_depth`` deep (400; checked by a scan before ``json.loads``, so no RecursionError).
* Generation runs ``workers`` at a time with at most ``max_queue`` requests waiting; beyond that
  the answer is an immediate 503 with ``Retry-After``.
* The request line and headers must arrive within ``read_timeout`` seconds in all (not per byte:
  a client dribbling a byte at a time is cut off at the deadline); every connection has that
  socket timeout too; threads are daemons; the listen backlog is 128. Paths with control characters or undecodable escapes get 400; an unexpected
  exception gets a 500 JSON answer and one line on stderr, never a traceback or a dropped
  connection.
"""

from __future__ import annotations

import io
import json
import math
import os
import re
import select
import socket
import stat
import sys
import threading
import time
from functools import partial
from http import HTTPStatus
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from library.demo.manifest import read_manifest, valid_rel
from library.demo.tryit import TryItError
from library.errors import DataFileError

HOST = "127.0.0.1"
MAX_BODY = 64 * 1024  # bytes of JSON a /api/try request may send
MAX_JSON_DEPTH = 32  # nesting of [ and { in a request body
MAX_QUEUE = 8  # generation requests waiting behind the running ones; more get 503
WORKERS = 1  # generations at a time (TryIt generates one at a time anyway: the CPU is shared)
READ_TIMEOUT = 10.0  # seconds: socket timeout, and the deadline for the request line + headers, and for a body
BACKLOG = 128  # listen(2) backlog
LINGER_SECONDS = 1.0  # after answering without reading a body: drain it this long at most ...
LINGER_BYTES = 1 << 20  # ... and this much at most, so the client reads the answer, not a reset
LOOPBACK_NAMES = ("127.0.0.1", "localhost")

_JSON_TOKENS = re.compile(r'[\[\]{}"\\]')


def json_depth(text: str, limit: int | None = None) -> int:
    """The deepest nesting of ``[``/``{`` outside strings in ``text`` (linear, no recursion).

    Stops counting once ``limit`` is exceeded (returns ``limit + 1``). Malformed JSON gives some
    number; ``json.loads`` rejects it afterwards anyway."""
    depth = best = 0
    in_string = False
    skip_to = -1
    for m in _JSON_TOKENS.finditer(text):
        i = m.start()
        if i < skip_to:  # the character after a backslash inside a string
            continue
        c = m.group()
        if in_string:
            if c == "\\":
                skip_to = i + 2
            elif c == '"':
                in_string = False
        elif c == '"':
            in_string = True
        elif c in "[{":
            depth += 1
            if depth > best:
                best = depth
                if limit is not None and best > limit:
                    return best
        elif c in "]}":
            depth -= 1
    return best


class GenerationGate:
    """At most ``workers`` generations at a time and ``max_queue`` waiting for one.

    ``admit()`` never blocks: False means "full, answer 503". An admitted request runs inside
    ``with gate.slot():`` (which waits its turn) and must call ``leave()`` afterwards."""

    def __init__(self, workers: int = WORKERS, max_queue: int = MAX_QUEUE):
        if workers < 1 or max_queue < 0:
            raise ValueError("workers must be >= 1 and max_queue >= 0")
        self.workers = workers
        self.max_queue = max_queue
        self._lock = threading.Lock()
        self._run = threading.Semaphore(workers)
        self.admitted = 0  # running + waiting
        self._avg_seconds: float | None = None

    def admit(self) -> bool:
        with self._lock:
            if self.admitted >= self.workers + self.max_queue:
                return False
            self.admitted += 1
            return True

    def leave(self) -> None:
        with self._lock:
            self.admitted -= 1

    def slot(self) -> _Slot:
        return _Slot(self)

    def record(self, seconds: float) -> None:
        with self._lock:
            self._avg_seconds = seconds if self._avg_seconds is None else 0.7 * self._avg_seconds + 0.3 * seconds

    @property
    def waiting(self) -> int:
        return max(0, self.admitted - self.workers)

    def retry_after(self) -> int:
        """Seconds until a slot is likely free (whole seconds, 1 to 120)."""
        with self._lock:
            per = self._avg_seconds if self._avg_seconds is not None else 5.0
            ahead = self.admitted
        return int(min(120, max(1, math.ceil(per * ahead / self.workers))))


class _Slot:
    def __init__(self, gate: GenerationGate):
        self.gate = gate

    def __enter__(self) -> _Slot:
        self.gate._run.acquire()
        self.t0 = time.monotonic()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.gate.record(time.monotonic() - self.t0)
        self.gate._run.release()


def site_path(path: str) -> str | None:
    """The site-relative file a URL path names (``/`` is index.html), or None for a folder, an
    empty, hidden (``.``, ``..``, ``.env``) or backslashed part: those are never served.

    >>> [site_path(p) for p in ("/", "/static/app.js", "/static/", "//../x", "/.kgr-demo-manifest.json", "/a\\\\b")]
    ['index.html', 'static/app.js', None, None, None, None]
    """
    if path == "/":
        return "index.html"
    rel = path.lstrip("/")
    return rel if valid_rel(rel) else None


class _DeadlineReader(io.RawIOBase):
    """A connection's reads, each allowed only the time left before ``deadline`` (when set), so the
    request line and headers arrive within one deadline in all rather than one timeout per byte."""

    def __init__(self, raw: Any, sock: socket.socket):
        self.raw = raw
        self.sock = sock
        self.deadline: float | None = None

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int | None:
        if self.deadline is not None:
            left = self.deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("the request line and headers did not arrive in time")
            self.sock.settimeout(left)
        return self.raw.readinto(buffer)

    def close(self) -> None:
        try:
            self.raw.close()
        finally:
            super().close()


class _ClientGone(Exception):
    """The client closed the connection before sending its whole body."""


_ANSWERED = object()  # _read_json_body: a 4xx was sent (or the client left); nothing more to do


class DemoHandler(SimpleHTTPRequestHandler):
    tryit: Any = None  # set per server class below
    quiet = True
    timeout = READ_TIMEOUT  # socket timeout (StreamRequestHandler.setup applies it); set per server
    max_body = MAX_BODY
    max_depth = MAX_JSON_DEPTH
    server_version = "kgr-serve"
    sys_version = ""

    def __init__(self, *args, directory: str, **kwargs):
        self._unread_body = False
        self._response_started = False
        super().__init__(*args, directory=directory, **kwargs)

    # ------------------------------------------------------------------ plumbing
    def setup(self) -> None:
        super().setup()
        plain = self.rfile
        self._reader = _DeadlineReader(self.connection.makefile("rb", buffering=0), self.connection)
        self.rfile = io.BufferedReader(self._reader)
        plain.close()

    def _end_header_deadline(self) -> None:
        """Back to the plain socket timeout once the headers are in (a body has its own deadline)."""
        if self._reader.deadline is not None:
            self._reader.deadline = None
            try:
                self.connection.settimeout(self.timeout)
            except OSError:
                pass

    def parse_request(self) -> bool:
        try:
            return super().parse_request()
        finally:
            self._end_header_deadline()

    def end_headers(self) -> None:
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        super().end_headers()

    def send_response(self, code: int, message: str | None = None) -> None:
        self._response_started = True
        super().send_response(code, message)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (stdlib signature)
        if not self.quiet:
            super().log_message(format, *args)

    def _log_problem(self, what: str) -> None:
        """One line on stderr, whatever ``quiet`` says (something went wrong on the server)."""
        request = getattr(self, "requestline", "") or ""
        try:
            print(f"kgr serve: {self.client_address[0]} {request[:200]!r}: {what}", file=sys.stderr, flush=True)
        except Exception:  # noqa: BLE001 (logging must never take the handler down)
            pass

    def handle_one_request(self) -> None:
        self._unread_body = False
        self._response_started = False
        if self.timeout is not None:  # the wait for the request line counts too: an idle connection ends there
            self._reader.deadline = time.monotonic() + self.timeout
        try:
            super().handle_one_request()
        except (ConnectionError, TimeoutError):  # the client went away or stalled mid-answer
            self.close_connection = True
        except Exception as exc:  # noqa: BLE001 (a 500 and one log line, never a dropped connection)
            self._log_problem(f"{type(exc).__name__}: {exc}")
            self.close_connection = True
            if not self._response_started:
                try:
                    self._json(HTTPStatus.INTERNAL_SERVER_ERROR, {"error": f"internal server error ({type(exc).__name__})"})
                except OSError:
                    pass
        finally:
            self._end_header_deadline()

    def finish(self) -> None:
        if self._unread_body:
            self._linger()
        super().finish()

    def _linger(self) -> None:
        """Answered without reading the body: send FIN, then drain a little of what the client
        is still sending, so that closing does not reset the connection before it reads the answer."""
        conn = self.connection
        try:
            self.wfile.flush()
            conn.shutdown(socket.SHUT_WR)
            deadline = time.monotonic() + LINGER_SECONDS
            drained = 0
            while drained < LINGER_BYTES:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                conn.settimeout(left)
                data = conn.recv(65536)
                if not data:
                    break
                drained += len(data)
        except OSError:
            pass

    def _json(self, status: int, obj: Any, headers: dict[str, str] | None = None) -> None:
        body = json.dumps(obj, ensure_ascii=False).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        if status >= 400:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    # -------------------------------------------------------------------- checks
    def _path_problem(self) -> str | None:
        """Why the request path cannot name a file (control characters, bad escapes), or None."""
        raw = urlsplit(self.path).path
        try:
            decoded = unquote(raw, errors="strict")
        except UnicodeDecodeError:
            return "the path is not valid UTF-8"
        if any(ord(c) < 0x20 or ord(c) == 0x7F for c in raw + decoded):
            return "control character in the path"
        return None

    def _origin_problem(self) -> str | None:
        """Why a browser's request comes from another site, or None. Requests without ``Origin``
        (curl, scripts) pass; browsers always send it on POST."""
        fetch_site = (self.headers.get("Sec-Fetch-Site") or "").strip().lower()
        if fetch_site and fetch_site not in ("same-origin", "none"):
            return f"cross-site request (Sec-Fetch-Site: {fetch_site})"
        origin = self.headers.get("Origin")
        if origin is None:
            return None
        origin = origin.strip().lower().rstrip("/")
        port = self.server.server_address[1]
        if origin in {f"http://{name}:{port}" for name in LOOPBACK_NAMES}:
            return None
        # Reached through a port forward (ssh -L 9000:localhost:PORT): the page's own origin is
        # the loopback name and port the browser used, which is exactly the Host header.
        host = (self.headers.get("Host") or "").strip().lower()
        try:
            hostname = urlsplit("//" + host).hostname
        except ValueError:
            hostname = None
        if hostname in LOOPBACK_NAMES and origin == f"http://{host}":
            return None
        return f"cross-origin request from {origin[:100]!r}"

    def _read_json_body(self) -> Any:
        """The request's JSON body, or ``_ANSWERED`` after answering 4xx. Checks, in order: Content-Type
        (415), Content-Length (411/400/413), the body itself within the deadline (408), then
        UTF-8, nesting depth and JSON syntax (400)."""
        headers = self.headers
        ctype = headers.get("Content-Type")
        charset = (headers.get_content_charset() or "utf-8").lower() if ctype else "utf-8"
        if not ctype or headers.get_content_type() != "application/json" or charset not in ("utf-8", "utf8"):
            self._json(HTTPStatus.UNSUPPORTED_MEDIA_TYPE,
                       {"error": "send the request with Content-Type: application/json (UTF-8)"})
            return _ANSWERED
        if headers.get("Transfer-Encoding"):
            self._json(HTTPStatus.LENGTH_REQUIRED, {"error": "send a Content-Length (chunked bodies are not accepted)"})
            return _ANSWERED
        lengths = set(headers.get_all("Content-Length") or [])
        if not lengths:
            self._json(HTTPStatus.LENGTH_REQUIRED, {"error": "send a Content-Length"})
            return _ANSWERED
        try:
            (length,) = {int(v.strip()) for v in lengths}
        except ValueError:
            length = -1
        if length <= 0:
            self._json(HTTPStatus.BAD_REQUEST, {"error": f"send a JSON body of 1 to {self.max_body} bytes"})
            return _ANSWERED
        if length > self.max_body:
            self._json(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, {"error": f"the body is limited to {self.max_body} bytes"})
            return _ANSWERED
        try:
            raw = self._read_exactly(length)
        except TimeoutError:
            self._json(HTTPStatus.REQUEST_TIMEOUT,
                       {"error": f"the body did not arrive within {self.timeout:g} s"})
            return _ANSWERED
        except _ClientGone:
            self.close_connection = True
            return _ANSWERED
        self._unread_body = False
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            self._json(HTTPStatus.BAD_REQUEST, {"error": f"the body is not UTF-8: {exc}"})
            return _ANSWERED
        if json_depth(text, self.max_depth) > self.max_depth:
            self._json(HTTPStatus.BAD_REQUEST, {"error": f"JSON nested deeper than {self.max_depth} levels"})
            return _ANSWERED
        try:
            return json.loads(text)
        except (json.JSONDecodeError, RecursionError, ValueError) as exc:
            self._json(HTTPStatus.BAD_REQUEST, {"error": f"invalid JSON: {exc}"})
            return _ANSWERED

    def _read_exactly(self, length: int) -> bytes:
        """``length`` body bytes, all within ``self.timeout`` seconds (not per recv: a client
        dribbling one byte at a time cannot hold the thread longer)."""
        deadline = None if self.timeout is None else time.monotonic() + self.timeout
        chunks: list[bytes] = []
        got = 0
        while got < length:
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError("body deadline")
                self.connection.settimeout(left)
            chunk = self.rfile.read1(min(65536, length - got))
            if not chunk:
                raise _ClientGone
            chunks.append(chunk)
            got += len(chunk)
        self.connection.settimeout(self.timeout)
        return b"".join(chunks)

    def _client_gone(self) -> bool:
        """True when the client has closed its end (checked before a queued generation starts)."""
        try:
            poller = select.poll()
            poller.register(self.connection, select.POLLIN)
            if not poller.poll(0):
                return False
            return self.connection.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
        except (OSError, AttributeError, ValueError):
            return False

    # ------------------------------------------------------------------ static files
    def _site_file(self) -> str | None:
        """The real path of the regular file the request names inside the site folder, or None:
        listed in the manifest when there is one, never a folder, never through a link out."""
        rel = site_path(unquote(urlsplit(self.path).path))  # _path_problem refused bad escapes already
        if rel is None:
            return None
        names = self._manifest_names()
        if names is not None and rel not in names:
            return None
        root = os.path.realpath(self.directory)
        real = os.path.realpath(os.path.join(root, *rel.split("/")))
        if os.path.commonpath([root, real]) != root or not os.path.isfile(real):
            return None
        return real

    def _manifest_names(self) -> frozenset[str] | None:
        """The files kgr demo wrote into the site (read each time: a rebuild may change them), or
        None for a site without a manifest; a manifest that cannot be read allows nothing."""
        try:
            manifest = read_manifest(Path(self.directory))
        except DataFileError as exc:
            self._log_problem(str(exc))
            return frozenset()
        return None if manifest is None else frozenset(manifest)

    def send_head(self) -> Any:
        """Headers for the site file the request names, and the open file; a 404 and None for
        anything else (SimpleHTTPRequestHandler's would list folders and follow links out)."""
        path = self._site_file()
        handle = None
        if path is not None:
            try:
                handle = os.fdopen(os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0)), "rb")
            except OSError:
                handle = None
        if handle is None:
            self.send_error(HTTPStatus.NOT_FOUND, "File not found")
            return None
        try:
            info = os.fstat(handle.fileno())
            if not stat.S_ISREG(info.st_mode):
                handle.close()
                self.send_error(HTTPStatus.NOT_FOUND, "File not found")
                return None
            self.send_response(HTTPStatus.OK)
            self.send_header("Content-type", self.guess_type(path))
            self.send_header("Content-Length", str(info.st_size))
            self.send_header("Last-Modified", self.date_time_string(info.st_mtime))
            self.end_headers()
            return handle
        except BaseException:
            handle.close()
            raise

    def list_directory(self, path: Any) -> None:
        """Never a listing (send_head above does not ask for one; this is the backstop)."""
        self.send_error(HTTPStatus.NOT_FOUND, "File not found")
        return None

    # ------------------------------------------------------------------ handlers
    def do_GET(self) -> None:  # noqa: N802
        if self._serve_api_get():
            return
        super().do_GET()

    def do_HEAD(self) -> None:  # noqa: N802
        if self._serve_api_get():
            return
        super().do_HEAD()

    def _serve_api_get(self) -> bool:
        """Answers bad paths and /api/ GETs; False means "a static file, go on"."""
        problem = self._path_problem()
        if problem:
            self.send_error(HTTPStatus.BAD_REQUEST, problem)
            return True
        path = urlsplit(self.path).path
        if not path.startswith("/api/"):
            return False
        problem = self._origin_problem()
        if problem:
            self._json(HTTPStatus.FORBIDDEN, {"error": problem})
        elif path == "/api/status":
            tryit = self.server.tryit  # type: ignore[attr-defined]
            self._json(HTTPStatus.OK, tryit.status() if tryit is not None else {"try_enabled": False})
        else:
            self._json(HTTPStatus.NOT_FOUND, {"error": f"no such endpoint: {path}"})
        return True

    def do_POST(self) -> None:  # noqa: N802
        self._unread_body = bool(self.headers.get("Content-Length") or self.headers.get("Transfer-Encoding"))
        problem = self._path_problem()
        if problem:
            self._json(HTTPStatus.BAD_REQUEST, {"error": problem})
            return
        path = urlsplit(self.path).path
        if path != "/api/try":
            self._json(HTTPStatus.NOT_FOUND, {"error": f"no such endpoint: {path}"})
            return
        problem = self._origin_problem()
        if problem:
            self._json(HTTPStatus.FORBIDDEN, {"error": problem})
            return
        tryit = self.server.tryit  # type: ignore[attr-defined]
        if tryit is None:
            self._json(HTTPStatus.NOT_FOUND, {"error": "Try it is off: start the server with kgr serve --model RUN_FOLDER"})
            return
        payload = self._read_json_body()
        if payload is _ANSWERED:
            return
        gate: GenerationGate = self.server.gate  # type: ignore[attr-defined]
        if not gate.admit():
            self._json(HTTPStatus.SERVICE_UNAVAILABLE,
                       {"error": f"busy: {gate.waiting} request(s) already waiting for the model; try again shortly"},
                       headers={"Retry-After": str(gate.retry_after())})
            return
        try:
            queued_at = time.monotonic()
            with gate.slot():
                if time.monotonic() - queued_at > 0.05 and self._client_gone():
                    self.close_connection = True  # it gave up while waiting: do not generate for nobody
                    return
                self._answer(tryit, payload)
        finally:
            gate.leave()

    def _answer(self, tryit: Any, payload: Any) -> None:
        try:
            result = tryit.answer(payload)
        except TryItError as exc:
            self._json(HTTPStatus.BAD_REQUEST, {"error": str(exc)})
            return
        except Exception as exc:  # noqa: BLE001 (a model failure must not kill the server; say what went wrong)
            self._log_problem(f"try-it failed: {type(exc).__name__}: {exc}")
            self._json(HTTPStatus.INTERNAL_SERVER_ERROR, {"error": f"{type(exc).__name__}: {exc}"})
            return
        self._json(HTTPStatus.OK, result)


class DemoServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = BACKLOG

    def __init__(self, root: Path, port: int = 0, tryit: Any = None, quiet: bool = True, *,
                 max_queue: int = MAX_QUEUE, workers: int = WORKERS, read_timeout: float | None = READ_TIMEOUT,
                 max_body: int = MAX_BODY, max_depth: int = MAX_JSON_DEPTH):
        self.root = Path(root)
        self.tryit = tryit
        self.gate = GenerationGate(workers=workers, max_queue=max_queue)
        handler = type("Handler", (DemoHandler,), {"quiet": quiet, "timeout": read_timeout,
                                                     "max_body": max_body, "max_depth": max_depth})
        super().__init__((HOST, port), partial(handler, directory=str(self.root)))

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host}:{port}/"

    def handle_error(self, request: Any, client_address: Any) -> None:
        """One line instead of socketserver's traceback (handlers answer 500 themselves)."""
        exc = sys.exc_info()[1]
        if isinstance(exc, (ConnectionError, TimeoutError)):
            return
        print(f"kgr serve: {client_address[0] if client_address else '?'}: {type(exc).__name__}: {exc}",
              file=sys.stderr, flush=True)


def start_in_thread(root: Path, port: int = 0, tryit: Any = None, **options: Any) -> DemoServer:
    """A running server on a background thread (for tests and notebooks); call ``shutdown()``.
    ``options`` are :class:`DemoServer`'s (quiet, max_queue, workers, read_timeout, ...)."""
    server = DemoServer(root, port, tryit, **options)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def serve(root: Path, port: int = 0, tryit: Any = None, preload: bool = True, quiet: bool = True, *,
          max_queue: int = MAX_QUEUE, workers: int = WORKERS, read_timeout: float | None = READ_TIMEOUT) -> None:
    """Serve until interrupted. Prints ``Serving <url>`` (flushed) once the socket is bound;
    with ``preload`` the try-it model loads on a background thread right away. At most
    ``max_queue`` try-it requests wait for the model (more get 503 + Retry-After)."""
    server = DemoServer(root, port, tryit, quiet=quiet, max_queue=max_queue, workers=workers, read_timeout=read_timeout)
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
