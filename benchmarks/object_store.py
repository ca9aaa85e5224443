"""Random-record reads from object stores (moto, fake-gcs-server) vs the C++ reader, JSON lines.

Usage: python benchmarks/object_store.py [--records 2000] [--record-bytes 1024] [--seaweed]

Run by ``python -m benchmarks`` too (``--quick``: 200 records, under a minute). Every
line names its server by ``server`` (words) and ``server_id`` (``local``, ``moto``,
``fake_gcs``, ``seaweed``). The servers stop when the run ends, however it ends
(a SIGTERM unwinds; the servers die with this process even if it is killed).

Writes `records` random records into 2 ArrayRecord shards (group_size:1), puts
them in a bucket of each server (started on 127.0.0.1 on free ports, as the
tests do), and measures in one run:

  random_threads_T   records/s of ``source[i]`` over a random permutation from
                     T reader threads (T = 1, 8, 32), for each server and for the
                     C++ reader on the same files through a local path;
  random_batched     records/s of ``source.__getitems__`` in batches of 256 (one
                     concurrent round trip per batch), one thread; `_no_hash`
                     with ``verify_hashes=False`` (the pure-Python hash's cost);
  workers_2          records/s of a shuffled pipeline with 2 worker processes
                     (``mp_prefetch``, 16 reading threads each), start-up excluded;
  first_batch_s      seconds from creating the source (opening the footers) to
                     the first batch of 32 of a shuffled threaded pipeline;
  amplification      bytes moved per byte delivered for random records, from the
                     store's counters: ArrayRecord (group_size 1 and 64),
                     Parquet (100 and 1000 rows per row group, a row group per
                     random row) and TFRecord (by its sidecar offset index).

Every read is checked against the records written (``ok``).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import importlib.util
import json
import os
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

import grain
import grain_sources
from grain_sources import ArrayRecordDataSource

_SERVERS = Path(__file__).resolve().parents[1] / "packages/grain-sources/tests/conftest.py"


def _servers() -> Any:
    """The tests' server fixtures' module (started here as plain context managers)."""
    spec = importlib.util.spec_from_file_location("object_servers", _SERVERS)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _emit(**fields: Any) -> None:
    print(json.dumps(fields), flush=True)


def _random_threads(source: Any, order: np.ndarray, threads: int, records: list[bytes]) -> tuple:
    parts = np.array_split(order, threads)

    def read(part: np.ndarray) -> bool:
        return all(source[int(i)] == records[int(i)] for i in part)

    start = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(threads) as pool:
        ok = all(pool.map(read, parts))
    return len(order) / (time.perf_counter() - start), ok


def _batched(source: Any, order: np.ndarray, records: list[bytes]) -> tuple:
    start = time.perf_counter()
    ok = True
    for part in np.array_split(order, max(1, len(order) // 256)):
        ok &= source.__getitems__(part) == [records[int(i)] for i in part]
    return len(order) / (time.perf_counter() - start), ok


def _workers(source: Any, count: int) -> tuple:
    ds = grain.MapDataset.source(source).shuffle(seed=0).map(len)
    ds = ds.to_iter_dataset(grain.ReadOptions(num_threads=16)).batch(64)
    ds = ds.mp_prefetch(grain.MultiprocessingOptions(num_workers=2))
    iterator = iter(ds)
    first = next(iterator)
    start = time.perf_counter()
    seen = len(first)
    for batch in iterator:
        seen += len(batch)
    elapsed = time.perf_counter() - start
    return (seen - len(first)) / elapsed, seen == count


def _first_batch(make_source: Any) -> tuple:
    start = time.perf_counter()
    source = make_source()
    ds = grain.MapDataset.source(source).shuffle(seed=1)
    batch = next(iter(ds.to_iter_dataset(grain.ReadOptions(num_threads=16)).batch(32)))
    return time.perf_counter() - start, len(batch) == 32


def _amplification_of(name: str, store: Any, read: Any, delivered: int) -> None:
    """Emits bytes moved per byte delivered while `read()` (which returns ok) runs."""
    before = store.bytes_read
    ok = read()
    moved = store.bytes_read - before
    _emit(
        case="amplification",
        format=name,
        bytes_per_byte=round(moved / delivered, 3),
        how="measured",
        ok=bool(ok),
    )


def _amplification(put: Any, fs: Any, tmp: Path, records: list[bytes], rng: Any) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    sample = rng.permutation(len(records))[:300]
    expected = [records[int(i)] for i in sample]
    delivered = sum(map(len, expected))
    for group in (1, 64):
        (path,) = grain_sources.write_array_record(
            records, tmp / f"amp{group}.ar", options=f"group_size:{group},zstd:3"
        )
        source = ArrayRecordDataSource(put(path, f"amp{group}.ar"), filesystem=fs)
        _amplification_of(
            f"array_record group_size:{group}",
            source.store,
            lambda source=source: source.__getitems__(sample) == expected,
            delivered,
        )
    # Parquet: a random row through ParquetReader costs its row group.
    few = sample[:40].tolist()

    def random_rows(reader: Any) -> bool:
        ok = True
        for i in few:
            reader.seek(i)
            ok &= next(reader)["r"] == records[i]
            reader.close()  # the next random row is elsewhere: its row group is read anew
        return ok

    for rows in (100, 1000):
        pq.write_table(pa.table({"r": records}), tmp / f"p{rows}.parquet", row_group_size=rows)
        reader = grain_sources.ParquetReader(
            put(tmp / f"p{rows}.parquet", f"p{rows}.parquet"), filesystem=fs
        )
        _amplification_of(
            f"parquet {rows} rows/group",
            reader._store,
            lambda reader=reader: random_rows(reader),
            sum(len(records[i]) for i in few),
        )
    # TFRecord by its sidecar offset index.
    grain_sources.write_tfrecord(records, tmp / "t.tfrecord")
    url = put(tmp / "t.tfrecord", "t.tfrecord")
    grain_sources.write_tfrecord_index(url, filesystem=fs)
    tfrecords = grain_sources.TFRecordDataSource(url, filesystem=fs)
    _amplification_of(
        "tfrecord with offset index",
        tfrecords._store,
        lambda: tfrecords.__getitems__(sample) == expected,
        delivered,
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=2000)
    parser.add_argument("--record-bytes", type=int, default=1024)
    parser.add_argument("--seaweed", action="store_true", help="also SeaweedFS (starts in ~10 s)")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    records = [rng.bytes(args.record_bytes) for _ in range(args.records)]
    order = rng.permutation(args.records)
    servers = _servers()
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        tmp_path = Path(tmp)
        paths = grain_sources.write_array_record(records, tmp_path / "data", num_shards=2)
        moto = _start(stack, servers, "moto", tmp_path)
        gcs = _start(stack, servers, "gcs", tmp_path)
        weed = _start(stack, servers, "seaweed", tmp_path) if args.seaweed else None
        local = ArrayRecordDataSource(paths)
        where = {"server": "local C++ reader", "server_id": "local"}
        for threads in (1, 8, 32):
            rate, ok = _random_threads(local, order, threads, records)
            _emit(case=f"random_threads_{threads}", **where, records_per_s=round(rate), ok=ok)
        rate, ok = _batched(local, order, records)
        _emit(case="random_batched", **where, records_per_s=round(rate), ok=ok)
        rate, ok = _workers(local, len(records))
        _emit(case="workers_2", **where, records_per_s=round(rate), ok=ok)

        targets = [("moto (S3)", "moto", moto.put, moto.filesystem())]
        targets.append(("fake-gcs-server (GCS)", "fake_gcs", gcs.put, None))
        if weed is not None:
            targets.append(("SeaweedFS (S3)", "seaweed", weed.put, weed.filesystem()))
        for name, server_id, put, fs in targets:
            where = {"server": name, "server_id": server_id}
            urls = [put(path, Path(path).name) for path in paths]
            source = ArrayRecordDataSource(urls, filesystem=fs)
            for threads in (1, 8, 32):
                rate, ok = _random_threads(source, order, threads, records)
                _emit(case=f"random_threads_{threads}", **where, records_per_s=round(rate), ok=ok)
            rate, ok = _batched(source, order, records)
            _emit(case="random_batched", **where, records_per_s=round(rate), ok=ok)
            unverified = ArrayRecordDataSource(urls, filesystem=fs, verify_hashes=False)
            rate, ok = _batched(unverified, order, records)
            _emit(case="random_batched_no_hash", **where, records_per_s=round(rate), ok=ok)
            rate, ok = _workers(source, len(records))
            _emit(case="workers_2", **where, records_per_s=round(rate), ok=ok)
            seconds, ok = _first_batch(
                lambda urls=urls, fs=fs: ArrayRecordDataSource(urls, filesystem=fs)
            )
            _emit(case="first_batch_s", **where, seconds=round(seconds, 3), ok=ok)
        _amplification(moto.put, moto.filesystem(), tmp_path, records, rng)


def _start(stack: contextlib.ExitStack, servers: Any, which: str, tmp: Path) -> Any:
    """Starts a server through the tests' fixture generator, stopped when `stack` closes."""
    fixture = {"moto": servers.moto_s3, "gcs": servers.fake_gcs, "seaweed": servers.seaweed_s3}
    factory = _TmpFactory(tmp / which)
    generator = fixture[which].__wrapped__(factory)
    server = next(generator)
    stack.callback(lambda: next(generator, None))
    return server


class _TmpFactory:
    def __init__(self, root: Path):
        self._root = root

    def mktemp(self, name: str) -> Path:
        path = self._root / name
        path.mkdir(parents=True, exist_ok=True)
        return path


if __name__ == "__main__":
    # A terminated run still stops its servers (the ExitStack unwinds on SystemExit).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
    sys.exit(main())
