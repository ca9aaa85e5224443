"""Range reads from object stores (s3://, gs://, any fsspec protocol), with retries and a deadline.

`ObjectStore` is the one layer every source reads a bucket through: ``size(url)``,
``read(url, offset, length)`` and ``read_many(requests)`` (many ranges at once,
concurrently). Each request is retried on transient errors (5xx, resets,
timeouts) with full-jitter exponential backoff, and gives up at a total deadline
with an `ObjectStoreError` that names the URL and the last cause. A missing
object, a denied request or a malformed URL fail at once: retrying cannot help.

Every request runs as a coroutine on the filesystem's event loop (fsspec's
async filesystems: s3fs, gcsfs, http) or in a thread (synchronous ones: local,
memory), so many reader threads share one connection pool and a batch of ranges
is one ``gather``. The filesystem is created lazily in the process that reads
(`_filesystem`): after a fork, or in a spawned worker, a fresh one is made from
the protocol and storage options that the pickled `ObjectStore` carries, never
the parent's sockets or event loop.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import os
import random
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import numpy as np

from grain_sources._checks import NoSuchFileError

_INSTALL = "pip install grain-sources[cloud]"


class ObjectStoreError(OSError):
    """A request to an object store that kept failing until the deadline."""


class ObjectAccessDeniedError(PermissionError):
    """An object store refused the credentials (or their absence) for an object."""


@dataclasses.dataclass(frozen=True)
class RetryPolicy:
    """How hard a request is tried before it fails.

    Attributes:
      attempts: at most this many tries of one request.
      deadline_s: a request (all its tries and waits) fails after this long.
      attempt_timeout_s: one try is abandoned after this long.
      backoff_s: the wait before the second try is up to this long; it doubles
        with every try (each wait drawn uniformly from [0, bound]: full jitter,
        so that many readers do not retry in step).
      max_backoff_s: the bound on one wait.
    """

    attempts: int = 6
    deadline_s: float = 60.0
    attempt_timeout_s: float = 20.0
    backoff_s: float = 0.05
    max_backoff_s: float = 2.0

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError(f"RetryPolicy.attempts must be >= 1, got {self.attempts}.")
        for name in ("deadline_s", "attempt_timeout_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"RetryPolicy.{name} must be > 0, got {getattr(self, name)}.")


def is_url(path: Any) -> bool:
    """Whether `path` names an object by URL (``s3://b/k``), not a local file."""
    if not isinstance(path, str) or "://" not in path:
        return False
    return path.split("://", 1)[0] not in ("", "file", "local")


def protocol_of(url: str) -> str:
    return url.split("://", 1)[0] if "://" in url else "file"


def _fsspec() -> Any:
    try:
        import fsspec
    except ImportError as error:
        raise ImportError(f"reading from object stores needs fsspec: {_INSTALL}") from error
    return fsspec


# Errors that retrying cannot fix, by what they mean.
_NOT_FOUND = (FileNotFoundError, IsADirectoryError, NotADirectoryError)


def _is_denied(error: BaseException) -> bool:
    if isinstance(error, PermissionError):
        return True
    code = getattr(error, "code", None) or getattr(error, "status", None)
    return code in (401, 403)


def _is_permanent(error: BaseException) -> bool:
    """Malformed requests: a bad bucket name, an invalid argument."""
    if isinstance(error, ValueError | TypeError | NotImplementedError):
        return True
    code = getattr(error, "code", None) or getattr(error, "status", None)
    return isinstance(code, int) and code in (400, 404, 405, 412, 416)


class ObjectStore:
    """Range reads from URLs of one protocol, retried within a deadline.

    `requests` and `bytes_read` count the range reads of this process that
    succeeded (for read amplification: bytes moved per byte delivered).

    Args:
      protocol: the URL scheme (``"s3"``, ``"gs"``, ...) this store reads.
      filesystem: an fsspec filesystem to read with (its endpoint, credentials
        and options); None creates one from the protocol and `storage_options`.
      storage_options: keyword arguments for the fsspec filesystem (e.g.
        ``{"endpoint_url": ...}`` for S3); ignored when `filesystem` is given.
      retry: the retry and deadline policy.
      max_concurrency: at most this many requests in flight per process.

    Pickling keeps the protocol, options and policy (and `filesystem`, which
    fsspec filesystems pickle as their constructor arguments); each process
    builds its own filesystem and connection pool on first use.
    """

    def __init__(
        self,
        protocol: str,
        filesystem: Any = None,
        storage_options: dict[str, Any] | None = None,
        retry: RetryPolicy | None = None,
        max_concurrency: int = 64,
    ):
        self.protocol = protocol
        self._given = filesystem
        self._options = dict(storage_options or {})
        if filesystem is None and "endpoint_url" not in self._options:
            self._options.update(_endpoint_from_environment(protocol))
        self.retry = retry or RetryPolicy()
        self._max_concurrency = max_concurrency
        self._reset()
        self.requests = 0
        self.bytes_read = 0

    def _reset(self) -> None:
        self._pid = os.getpid()
        self._lock = threading.Lock()
        self._fs: Any = None
        self._semaphore: asyncio.Semaphore | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {
            "protocol": self.protocol,
            "given": self._given,
            "options": self._options,
            "retry": self.retry,
            "max_concurrency": self._max_concurrency,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.protocol = state["protocol"]
        self._given = state["given"]
        self._options = state["options"]
        self.retry = state["retry"]
        self._max_concurrency = state["max_concurrency"]
        self._reset()
        self.requests = 0
        self.bytes_read = 0

    # -- the filesystem of this process ------------------------------------------------

    def _filesystem(self) -> Any:
        if self._pid != os.getpid():
            self._reset()
        fs = self._fs
        if fs is not None:
            return fs
        with self._lock:
            if self._fs is None:
                self._fs = self._make_filesystem()
            return self._fs

    def _make_filesystem(self) -> Any:
        fsspec = _fsspec()
        if self._given is not None:
            given = self._given
            if getattr(given, "_pid", os.getpid()) == os.getpid():
                return given
            # A filesystem made before a fork: its loop and sockets are the parent's.
            return type(given)(**{**given.storage_options, "skip_instance_cache": True})
        options = {**_default_options(self.protocol), **self._options}
        try:
            if self.protocol in ("gs", "gcs") and "endpoint_url" in options:
                # gcsfs's default class (unless GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT=false)
                # probes a bucket-type API that emulators lack, a minute per filesystem;
                # the core class reads objects the same way without it.
                from gcsfs.core import GCSFileSystem

                return GCSFileSystem(skip_instance_cache=True, **options)
            return fsspec.filesystem(self.protocol, skip_instance_cache=True, **options)
        except ImportError as error:
            raise ImportError(
                f"reading {self.protocol}:// URLs needs the fsspec backend for it ({error}): "
                f"{_INSTALL}"
            ) from error
        except ValueError as error:
            raise ValueError(f"unknown URL protocol {self.protocol!r}: {error}") from error

    def strip(self, url: str) -> str:
        """The path `url` names, as the filesystem takes it (no protocol)."""
        return self._filesystem()._strip_protocol(url)

    # -- requests ----------------------------------------------------------------------

    def size(self, url: str) -> int:
        """The size of the object at `url`, in bytes."""
        info = self._call("info", url, "reading the size of")
        if info.get("type") == "directory":
            raise IsADirectoryError(
                f"{url!r} is a directory (a prefix), not an object: name an object in it, or "
                "a glob pattern such as 'prefix/*.array_record'."
            )
        return int(info["size"])

    def read(self, url: str, offset: int, length: int) -> bytes:
        """The `length` bytes of the object at `url` from byte `offset`."""
        return bytes(self.read_many([(url, offset, length)])[0])

    def read_many(
        self, requests: Sequence[tuple[str, int, int]], coalesce_gap: int | None = None
    ) -> list[bytes | memoryview]:
        """The byte ranges ``(url, offset, length)``, read concurrently, in order.

        With `coalesce_gap`, ranges of one object that are sorted by offset and
        at most that many bytes apart are read as one request (the bytes between
        them are read and dropped): fewer round trips for neighbouring records.
        """
        if not requests:
            return []
        if coalesce_gap is not None and len(requests) > 1:
            return self._coalesced(requests, coalesce_gap)
        fs = self._filesystem()

        async def gather() -> list[bytes]:
            if self._semaphore is None:
                self._semaphore = asyncio.Semaphore(self._max_concurrency)
            return list(await asyncio.gather(*(self._read_one(fs, *req) for req in requests)))

        return self._run(gather)

    def _coalesced(
        self, requests: Sequence[tuple[str, int, int]], gap: int
    ) -> list[bytes | memoryview]:
        urls = [url for url, _, _ in requests]
        begins = np.array([offset for _, offset, _ in requests], dtype=np.int64)
        ends = begins + np.array([length for _, _, length in requests], dtype=np.int64)
        same = np.array([a == b for a, b in zip(urls[1:], urls[:-1], strict=True)], dtype=bool)
        # A new merged range starts at the first request, a change of object, a step
        # back, or a gap wider than `gap` after everything merged so far.
        reach = np.maximum.accumulate(ends)
        starts = np.concatenate(([True], ~same | (begins[1:] > reach[:-1] + gap)))
        starts[1:] |= begins[1:] < begins[:-1]
        group = np.cumsum(starts) - 1
        first = np.flatnonzero(starts)
        group_begin = begins[first]
        group_end = np.maximum.reduceat(ends, first)
        merged = [
            (urls[i], int(b), int(e - b))
            for i, b, e in zip(first.tolist(), group_begin, group_end, strict=True)
        ]
        data = [memoryview(part) for part in self.read_many(merged)]
        relative = (begins - group_begin[group]).tolist()
        return [
            data[g][r : r + int(e - b)]
            for g, r, b, e in zip(group.tolist(), relative, begins, ends, strict=True)
        ]

    async def _read_one(self, fs: Any, url: str, offset: int, length: int) -> bytes:
        path = fs._strip_protocol(url)
        end = offset + length
        semaphore = self._semaphore
        assert semaphore is not None

        async def call() -> bytes:
            async with semaphore:
                if fs.async_impl:
                    return await fs._cat_file(path, start=offset, end=end)
                return await asyncio.to_thread(fs.cat_file, path, start=offset, end=end)

        data = await self._attempts(call, url, f"reading bytes {offset}..{end} of")
        # Counted on the loop's thread only: no lock needed.
        self.requests += 1
        self.bytes_read += len(data)
        if len(data) != length:
            raise ObjectStoreError(
                f"reading bytes {offset}..{end} of {url!r} returned {len(data)} bytes: the "
                "object is shorter than expected (it changed after the source was created?)."
            )
        return data

    async def _attempts(self, call: Callable[[], Awaitable[Any]], url: str, what: str) -> Any:
        policy = self.retry
        start = time.monotonic()
        last: BaseException | None = None
        tries = 0
        for tries in range(1, policy.attempts + 1):
            left = policy.deadline_s - (time.monotonic() - start)
            if left <= 0:
                break
            try:
                # A timeout scope, not wait_for: no extra task per request on the loop.
                async with asyncio.timeout(min(policy.attempt_timeout_s, left)):
                    return await call()
            except _NOT_FOUND as error:
                raise NoSuchFileError(
                    f"{url!r} does not exist ({_cause(error)}): check the bucket and object "
                    "name (list them with your storage tool)."
                ) from None
            except Exception as error:
                if _is_denied(error):
                    raise ObjectAccessDeniedError(
                        f"access to {url!r} was denied ({_cause(error)}): check the "
                        "credentials (AWS_* variables or profile for s3://, "
                        "GOOGLE_APPLICATION_CREDENTIALS for gs://) and the bucket's permissions."
                    ) from None
                if _is_permanent(error):
                    raise ValueError(
                        f"{what} {url!r} failed ({_cause(error)}): the URL or request is "
                        "invalid; check the bucket and object name."
                    ) from None
                last = error
            bound = min(policy.max_backoff_s, policy.backoff_s * 2 ** (tries - 1))
            left = policy.deadline_s - (time.monotonic() - start)
            if tries < policy.attempts and left > 0:
                await asyncio.sleep(min(random.uniform(0, bound), left))
        elapsed = time.monotonic() - start
        raise ObjectStoreError(
            f"{what} {url!r} failed {tries} time(s) in {elapsed:.1f} s (deadline "
            f"{policy.deadline_s:g} s, at most {policy.attempts} tries); last error: "
            f"{_cause(last)}. The server or network keeps failing: check the endpoint, or pass "
            "a RetryPolicy with a longer deadline."
        )

    def _run(self, make: Callable[[], Awaitable[Any]]) -> Any:
        """Runs the coroutine `make()` on the filesystem's loop (fsspec's IO thread)."""
        fs = self._filesystem()
        loop = getattr(fs, "loop", None) if fs.async_impl else None
        if loop is None:
            _fsspec()
            import fsspec.asyn

            loop = fsspec.asyn.get_loop()
        future: concurrent.futures.Future[Any] = asyncio.run_coroutine_threadsafe(
            make(),  # type: ignore[arg-type]
            loop,
        )
        # Every request inside has its own deadline; this wait never outlives them by much.
        return future.result(self.retry.deadline_s * 2 + 5)

    def _call(self, method: str, url: str, what: str, *args: Any, path_last: bool = False) -> Any:
        """``fs.<method>(path, *args)`` (or ``(*args, path)``), retried within the deadline.

        Async filesystems run their coroutine ``_<method>`` on their loop; others
        run the plain method in a thread.
        """
        fs = self._filesystem()
        path = fs._strip_protocol(url)
        ordered = (*args, path) if path_last else (path, *args)
        if fs.async_impl:
            call: Callable[[], Awaitable[Any]] = lambda: getattr(fs, f"_{method}")(*ordered)  # noqa: E731
        else:
            call = lambda: asyncio.to_thread(getattr(fs, method), *ordered)  # noqa: E731
        return self._run(lambda: self._attempts(call, url, what))

    def put_bytes(self, url: str, data: bytes) -> None:
        """Writes `data` as the object at `url` (replacing it), retried like reads."""
        self._call("pipe_file", url, "writing", data)

    def put_file(self, local: str, url: str) -> None:
        """Uploads the local file `local` as the object at `url`, retried like reads."""
        self._call("put_file", url, "uploading to", local, path_last=True)

    def get_file(self, url: str, local: str) -> None:
        """Downloads the object at `url` into the local file `local`, retried like reads."""
        self._call("get_file", url, "downloading", local)

    def glob(self, pattern: str) -> list[str]:
        """The URLs of the objects matching `pattern`, sorted."""
        fs = self._filesystem()
        prefix = f"{self.protocol}://"
        matches = self._run(
            lambda: self._attempts(lambda: asyncio.to_thread(fs.glob, pattern), pattern, "listing")
        )
        return sorted(prefix + match.split("://", 1)[-1] for match in matches)

    def __repr__(self) -> str:
        return f"ObjectStore({self.protocol!r}, retry={self.retry})"


def _cause(error: BaseException | None) -> str:
    if error is None:
        return "no attempt was made within the deadline"
    text = str(error).strip().splitlines()[0] if str(error).strip() else ""
    name = "timed out" if isinstance(error, TimeoutError) else type(error).__name__
    return f"{name}: {text}" if text else name


def _default_options(protocol: str) -> dict[str, Any]:
    """Client options that leave retrying and timeouts to `ObjectStore`."""
    if protocol in ("s3", "s3a"):
        return {
            "config_kwargs": {
                "retries": {"max_attempts": 1, "mode": "standard"},
                "max_pool_connections": 64,
                "connect_timeout": 10,
                "read_timeout": 30,
            },
        }
    return {}


def _endpoint_from_environment(protocol: str) -> dict[str, str]:
    """The endpoint the environment names for `protocol`, kept in the pickled store.

    Worker processes may have been started (a fork server) before the variable
    was set; carrying the endpoint makes them read the same server as the parent.
    """
    if protocol in ("gs", "gcs"):
        host = os.environ.get("STORAGE_EMULATOR_HOST")
        if host:
            # An emulator: anonymous, no credentials to look for.
            return {"endpoint_url": host if "://" in host else f"http://{host}", "token": "anon"}
    if protocol in ("s3", "s3a"):
        url = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
        if url:
            return {"endpoint_url": url}
    return {}


_STORES: dict[tuple[str, int, str], ObjectStore] = {}


def default_store(protocol: str) -> ObjectStore:
    """One shared store per protocol (and process) for URLs read without `filesystem=`."""
    key = (protocol, os.getpid(), str(_endpoint_from_environment(protocol)))
    store = _STORES.get(key)
    if store is None:
        store = _STORES.setdefault(key, ObjectStore(protocol))
    return store
