"""`kgr serve` under abuse: bounded try-it queue, content-type/origin checks (CSRF), body limits,
read timeouts and odd paths. A real server on 127.0.0.1:0 in a thread, with a fake TryIt whose
answer() sleeps briefly, so no model is needed."""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from library.demo.server import DemoServer, json_depth, start_in_thread

DELAY = 0.2


class FakeTryIt:
    """Just enough of :class:`library.demo.tryit.TryIt` for the server."""

    def __init__(self, delay: float = DELAY):
        self.delay = delay
        self.calls = 0
        self.running = 0
        self.max_running = 0
        self._lock = threading.Lock()

    def status(self) -> dict:
        return {"try_enabled": True, "model": "fake"}

    def load(self) -> None:
        pass

    def answer(self, payload):
        with self._lock:
            self.calls += 1
            self.running += 1
            self.max_running = max(self.max_running, self.running)
        try:
            time.sleep(self.delay)
            return {"echo": payload}
        finally:
            with self._lock:
                self.running -= 1


@pytest.fixture
def site(tmp_path):
    root = tmp_path / "site"
    (root / "static").mkdir(parents=True)
    (root / "index.html").write_text("<html>episode player</html>")
    (root / "static" / "app.js").write_text("console.log('app');")
    (tmp_path / "secret.txt").write_text("TOP-SECRET")
    return root


@pytest.fixture
def make_server(site):
    servers: list[DemoServer] = []

    def make(tryit=None, **options) -> DemoServer:
        server = DemoServer(site, 0, tryit, **options)
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        servers.append(server)
        return server

    yield make
    for server in servers:
        server.shutdown()
        server.server_close()


def request(server, method: str, path: str, body: bytes | None = None, headers: dict | None = None,
            timeout: float = 10.0) -> tuple[int, http.client.HTTPMessage, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", server.server_address[1], timeout=timeout)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        res = conn.getresponse()
        return res.status, res.headers, res.read()
    finally:
        conn.close()


def try_it(server, obj=None, headers: dict | None = None, body: bytes | None = None, timeout: float = 10.0):
    body = json.dumps(obj if obj is not None else {"start": "ClockSkew", "chain": ["fixed_by"]}).encode() if body is None else body
    return request(server, "POST", "/api/try", body, {"Content-Type": "application/json", **(headers or {})}, timeout)


def raw_exchange(server, data: bytes, timeout: float = 5.0) -> bytes:
    """Send raw bytes, read until the server closes (for paths http.client would not send)."""
    with socket.create_connection(("127.0.0.1", server.server_address[1]), timeout=timeout) as sock:
        sock.sendall(data)
        return _read_to_eof(sock)


def _read_to_eof(sock: socket.socket) -> bytes:
    out = b""
    while True:
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            break
        if not chunk:
            return out
        out += chunk
    return out


def _status(response: bytes) -> int:
    return int(response.split(b" ", 2)[1])


# ------------------------------------------------------------------------- queue / load
def test_concurrent_try_requests_get_200_or_immediate_503(make_server):
    # Old server: no queue bound, so all 50 got 200 (after up to 50 x the generation time,
    # and on a busy machine resets from the backlog of 5): no 503 -> fails.
    fake = FakeTryIt()
    server = make_server(fake, max_queue=2)
    n = 50
    barrier = threading.Barrier(n)

    def one(i: int):
        barrier.wait()
        t0 = time.monotonic()
        status, headers, body = try_it(server, {"start": "ClockSkew", "chain": ["fixed_by"], "i": i}, timeout=20)
        return status, headers.get("Retry-After"), json.loads(body), time.monotonic() - t0

    with ThreadPoolExecutor(n) as pool:
        results = list(pool.map(one, range(n)))  # a reset or connection error would raise here
    statuses = [r[0] for r in results]
    assert set(statuses) <= {200, 503}, statuses
    assert statuses.count(503) >= 1 and statuses.count(200) >= 3
    for status, retry_after, body, seconds in results:
        if status == 503:
            assert retry_after is not None and int(retry_after) >= 1
            assert "busy" in body["error"]
            assert seconds < 5  # refused at once, not after waiting in line
        else:
            assert body["echo"]["start"] == "ClockSkew"
    assert fake.max_running == 1  # one generation at a time; the others waited in the bounded queue
    # defaults: a queue of 8, a realistic backlog, daemon threads, a read timeout
    assert server.gate.max_queue == 2
    default = start_in_thread(server.root, 0, FakeTryIt())
    default.shutdown()
    default.server_close()
    assert default.gate.max_queue == 8 and default.request_queue_size >= 128 and default.daemon_threads
    assert default.RequestHandlerClass.func.timeout == 10


# ------------------------------------------------------------------------- CSRF
def test_try_needs_json_content_type(make_server):
    # Old server: generated for any content type (200) -> fails.
    fake = FakeTryIt(delay=0)
    server = make_server(fake)
    body = json.dumps({"start": "ClockSkew", "chain": ["fixed_by"]}).encode()
    for ctype in ("text/plain", "text/plain;charset=UTF-8", "application/x-www-form-urlencoded",
                  "multipart/form-data; boundary=x", None):
        headers = {"Content-Type": ctype} if ctype else {}
        status, _, out = request(server, "POST", "/api/try", body, headers)
        assert status == 415, ctype
        assert "application/json" in json.loads(out)["error"]
    assert fake.calls == 0
    assert try_it(server, headers={"Content-Type": "application/json; charset=utf-8"})[0] == 200
    assert fake.calls == 1


def test_foreign_origin_is_forbidden_and_no_cors_headers(make_server):
    # Old server: ignored Origin, so a foreign page's request got 200 -> fails.
    fake = FakeTryIt(delay=0)
    server = make_server(fake)
    port = server.server_address[1]
    for origin in ("http://evil.example", f"http://evil.example:{port}", f"http://127.0.0.1:{port + 1}",
                   f"https://127.0.0.1:{port}", "http://localhost:3000", "null"):
        status, headers, out = try_it(server, headers={"Origin": origin})
        assert status == 403, origin
        assert "cross-origin" in json.loads(out)["error"]
        assert not any(k.lower().startswith("access-control-") for k in headers)
    assert try_it(server, headers={"Sec-Fetch-Site": "cross-site"})[0] == 403
    assert request(server, "GET", "/api/status", headers={"Origin": "http://evil.example"})[0] == 403
    assert fake.calls == 0
    for origin in (f"http://127.0.0.1:{port}", f"http://localhost:{port}"):
        status, headers, out = try_it(server, headers={"Origin": origin, "Sec-Fetch-Site": "same-origin"})
        assert status == 200, origin
        assert not any(k.lower().startswith("access-control-") for k in headers)
    # reached through a port forward: the browser's origin is the loopback Host it used
    assert try_it(server, headers={"Origin": "http://localhost:9000", "Host": "localhost:9000"})[0] == 200
    assert try_it(server, headers={"Origin": "http://evil.example:9000", "Host": "evil.example:9000"})[0] == 403
    assert try_it(server)[0] == 200  # no Origin: curl, scripts
    assert fake.calls == 4


# ------------------------------------------------------------------------- bodies
def test_oversized_body_gets_413_without_being_read(make_server):
    # Old server: 400 for any Content-Length over 64 KiB (and closed the socket on the unread body).
    fake = FakeTryIt(delay=0)
    server = make_server(fake)
    head = (b"POST /api/try HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Content-Length: 10000000\r\n\r\n")
    with socket.create_connection(("127.0.0.1", server.server_address[1]), timeout=5) as sock:
        t0 = time.monotonic()
        try:
            sock.sendall(head + b"[" + b" " * (256 * 1024))  # a small part of the 10 MB, then we wait
        except OSError:
            pass  # the server may stop reading: the answer is what matters
        response = _read_to_eof(sock)
        assert time.monotonic() - t0 < 4
    assert _status(response) == 413, response[:200]
    assert b"limited to 65536 bytes" in response
    # no Content-Length / chunked: 411; a zero or bogus length: 400
    no_length = b"POST /api/try HTTP/1.0\r\nContent-Type: application/json\r\n\r\n"
    assert _status(raw_exchange(server, no_length)) == 411
    assert request(server, "POST", "/api/try", None, {"Content-Type": "application/json"})[0] == 400  # length 0
    chunked = (b"POST /api/try HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
               b"Transfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n")
    assert _status(raw_exchange(server, chunked)) == 411
    bogus = b"POST /api/try HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: -5\r\n\r\n"
    assert _status(raw_exchange(server, bogus)) == 400
    assert fake.calls == 0
    assert try_it(server)[0] == 200


def test_deeply_nested_json_is_400(make_server, capfd):
    # Old server: json.loads raised RecursionError, uncaught: the connection dropped with a
    # traceback in the log (http.client raises RemoteDisconnected) -> fails.
    fake = FakeTryIt(delay=0)
    server = make_server(fake)
    status, _, out = try_it(server, body=b"[" * 30000)
    assert status == 400 and "nested deeper than 32" in json.loads(out)["error"]
    status, _, out = try_it(server, body=b'{"a": ' + b"[" * 32 + b"]" * 32 + b"}")  # 33 levels
    assert status == 400
    status, _, out = try_it(server, body=b"[" * 32 + b"]" * 32)  # 32 levels: fine (the fake echoes it)
    assert status == 200
    text = '{"question": "' + "[{\\\"" * 5000 + '"}'  # brackets inside a string do not count
    assert json_depth(text) == 1
    assert try_it(server, body=text.encode())[0] == 200
    assert try_it(server, body=b'{"start": "x", ')[0] == 400  # plain invalid JSON
    assert try_it(server, body=b"\xff\xfe{}")[0] == 400  # not UTF-8
    assert fake.calls == 2
    assert "Traceback" not in capfd.readouterr().err


def test_unexpected_errors_are_500_json_not_dropped_connections(make_server, capfd):
    # Old server: an exception in do_GET (here tryit.status()) dropped the connection with a
    # traceback -> fails.
    class Broken(FakeTryIt):
        def status(self):
            raise RuntimeError("status exploded")

        def answer(self, payload):
            raise KeyError("model exploded")

    server = make_server(Broken())
    status, _, out = request(server, "GET", "/api/status")
    assert status == 500 and "RuntimeError" in json.loads(out)["error"]
    status, _, out = try_it(server)
    assert status == 500 and "KeyError" in json.loads(out)["error"]
    assert request(server, "GET", "/")[0] == 200
    err = capfd.readouterr().err
    assert "Traceback" not in err
    assert "RuntimeError: status exploded" in err  # one line per problem


# ------------------------------------------------------------------------- paths / static
def test_odd_paths_get_4xx_and_static_files_still_served(make_server, capfd):
    # Old server: open() of a path with NUL raised ValueError (not OSError): dropped connection
    # and a traceback -> fails.
    server = make_server(FakeTryIt(delay=0))
    for path in ("/%00/", "/%00", "/static/%00.js", "/static/app.js%00.html", "/%ff/", "/%ed%a0%80/", "/a%0d%0ab"):
        for method in ("GET", "HEAD"):
            status, _, _ = request(server, method, path)
            assert 400 <= status < 500, (method, path, status)
    assert 400 <= request(server, "POST", "/%00/", b"{}", {"Content-Type": "application/json"})[0] < 500
    # raw bytes in the request line
    assert 400 <= _status(raw_exchange(server, b"GET /\x00/ HTTP/1.0\r\n\r\n")) < 500
    assert 400 <= _status(raw_exchange(server, b"GET /\xff\xfe HTTP/1.0\r\n\r\n")) < 500
    # the site is still served, with no way out of its folder
    status, _, body = request(server, "GET", "/")
    assert status == 200 and b"episode player" in body
    status, _, body = request(server, "GET", "/static/app.js")
    assert status == 200 and b"console.log" in body
    for path in (b"/../secret.txt", b"/static/../../secret.txt", b"/%2e%2e/secret.txt",
                 b"/static/..%2f..%2fsecret.txt", b"//../secret.txt"):
        response = raw_exchange(server, b"GET " + path + b" HTTP/1.0\r\n\r\n")
        assert b"TOP-SECRET" not in response and _status(response) in (301, 404), path
    assert json.loads(request(server, "GET", "/api/status")[2]) == {"try_enabled": True, "model": "fake"}
    assert "Traceback" not in capfd.readouterr().err


# ------------------------------------------------------------------------- timeouts
def test_stalled_body_times_out_without_blocking_others(make_server):
    # Old server: no read timeout, the stalled request held its thread (and socket) forever:
    # our recv below times out after 6 s -> fails.
    fake = FakeTryIt()
    server = make_server(fake, read_timeout=1.0)
    port = server.server_address[1]
    t0 = time.monotonic()
    stalled = socket.create_connection(("127.0.0.1", port), timeout=6)
    try:
        stalled.sendall(b"POST /api/try HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                        b"Content-Length: 100\r\n\r\n" + b'{"start": ')
        # meanwhile the server answers others, generation included
        assert request(server, "GET", "/api/status", timeout=3)[0] == 200
        status, _, out = try_it(server, timeout=3)
        assert status == 200 and json.loads(out)["echo"]["chain"] == ["fixed_by"]
        response = _read_to_eof(stalled)  # 408 then close, at the read timeout
        elapsed = time.monotonic() - t0
    finally:
        stalled.close()
    assert response == b"" or _status(response) == 408, response[:200]
    assert elapsed < 4, elapsed
    assert fake.calls == 1


def test_dribbled_body_hits_the_deadline(make_server):
    # One byte every 0.25 s never trips a per-recv timeout; the body has one deadline in all.
    # Old server: no timeout at all -> the 6 s client timeout fires first -> fails.
    fake = FakeTryIt(delay=0)
    server = make_server(fake, read_timeout=1.0)
    sock = socket.create_connection(("127.0.0.1", server.server_address[1]), timeout=6)
    stop = threading.Event()

    def dribble():
        try:
            while not stop.wait(0.25):
                sock.sendall(b" ")
        except OSError:
            pass

    t0 = time.monotonic()
    try:
        sock.sendall(b"POST /api/try HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 1000\r\n\r\n")
        threading.Thread(target=dribble, daemon=True).start()
        response = _read_to_eof(sock)
        elapsed = time.monotonic() - t0
    finally:
        stop.set()
        sock.close()
    assert _status(response) == 408 and elapsed < 4, (response[:200], elapsed)
    assert fake.calls == 0
