"""Sharded streaming sources: read throughput, restore latency and memory, as JSON lines.

Usage: uv run python benchmarks/streaming_sources.py [--rows 50000] [--repeats 3]

Data (written once to a temp dir): two Parquet files of `--rows` rows each
(``{"id": int, "text": ~60 characters}``, row groups of 10 000 rows), the same
rows as two JSON-lines files and two TFRecord files (JSON bytes, with their
sidecar offset indexes).

Cases, each the median of `--repeats` rounds, the cases of a round run one
after another (A/B interleaved within a round):

  read_*      rows/s of one whole pass, one process, no workers:
              parquet_iter (the per-file ParquetIterDataset, the reference),
              sharded_parquet, record_source (the Parquet files as a
              RecordFilesDataSource through ``MapDataset.source(...)
              .to_iter_dataset(ReadOptions(num_threads=0))``), sharded_jsonl,
              sharded_tfrecord, hf_raw (iterating the HF streaming dataset
              itself, the reference for HF), hf_iter (HFIterDataset over it).
  restore_*   seconds from a fresh iterator's set_state at row 3/4 of the data
              to its first element (the cost of resuming): parquet_iter,
              sharded_parquet, sharded_jsonl (includes the line index pass),
              hf_state (HFIterDataset with HF's state_dict; HF reads its shard,
              here a file, from the start, skipping Arrow tables),
              hf_state_reshard (the same over ``hf.reshard()``: one HF shard
              per row group), hf_replay (resume="replay": reads and discards
              3/4 of the data).
  resize_sharded_parquet  a run of 4 hosts x 4 workers (in-process worker
              slices, each worker stopped at a different position, as a filter
              makes them), resumed on 1 host: seconds of `resized_state` plus
              set_state to the first element, the state's JSON bytes, and the
              rows/s of reading the rest (compare read_sharded_parquet).
  Each restore line also has `peak_python_mb` (tracemalloc's peak over the
  restore and first element, from a second, traced restore; the time comes
  from the untraced one) and `arrow_mb` (pyarrow's allocated bytes right
  after the first element).

Every restore is checked: its first element is the row the uninterrupted run
gives there (exit status 3 otherwise).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import tracemalloc
import warnings

import grain


def write_data(root: str, rows: int) -> dict[str, list[str]]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from grain_sources import write_tfrecord, write_tfrecord_index

    paths: dict[str, list[str]] = {"parquet": [], "jsonl": [], "tfrecord": []}
    for f in range(2):
        records = [
            {"id": i, "text": f"row {i} " + "abcdefgh" * (4 + i % 5)}
            for i in range(f * rows, (f + 1) * rows)
        ]
        base = os.path.join(root, f"part{f}")
        pq.write_table(pa.Table.from_pylist(records), base + ".parquet", row_group_size=10_000)
        lines = [json.dumps(r) for r in records]
        with open(base + ".jsonl", "w") as file:
            file.write("\n".join(lines) + "\n")
        write_tfrecord([line.encode() for line in lines], base + ".tfrecord")
        write_tfrecord_index(base + ".tfrecord")
        for kind in paths:
            paths[kind].append(base + "." + kind)
    return paths


def hf_stream(paths: dict[str, list[str]]):
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    import datasets

    return datasets.load_dataset(
        "parquet", data_files=paths["parquet"], split="train", streaming=True
    )


def make(case: str, paths: dict[str, list[str]]):
    exp = grain.experimental
    if case == "parquet_iter":
        # One file at a time, concatenated: the per-file datasets read in file order.
        return exp.ParquetIterDataset(paths["parquet"][0])
    if case == "sharded_parquet":
        return exp.ShardedParquetIterDataset(paths["parquet"])
    if case == "sharded_jsonl":
        return exp.ShardedJsonLinesIterDataset(paths["jsonl"])
    if case == "sharded_tfrecord":
        return exp.ShardedTFRecordIterDataset(paths["tfrecord"])
    if case == "record_source":
        from grain_sources import ParquetRecordFiles, RecordFilesDataSource

        source = RecordFilesDataSource(ParquetRecordFiles(paths["parquet"]))
        read = grain.ReadOptions(num_threads=0)
        return grain.MapDataset.source(source).to_iter_dataset(read)
    if case == "hf_raw":
        return hf_stream(paths)
    if case in ("hf_iter", "hf_state"):
        return exp.HFIterDataset(hf_stream(paths))
    if case == "hf_state_reshard":
        # One HF shard per row group: HF's state then names a row group and an offset.
        return exp.HFIterDataset(hf_stream(paths).reshard())
    if case == "hf_replay":
        return exp.HFIterDataset(hf_stream(paths), resume="replay")
    raise ValueError(case)


def time_read(case: str, paths: dict[str, list[str]]) -> tuple[float, int]:
    ds = make(case, paths)
    started = time.perf_counter()
    count = 0
    iterator = iter(ds)
    for _ in iterator:
        count += 1
    took = time.perf_counter() - started
    close = getattr(iterator, "close", None)
    if close is not None:
        close()
    return took, count


def state_at(case: str, paths: dict[str, list[str]], position: int) -> dict:
    """The state after `position` elements, from a straight run (untimed)."""
    iterator = iter(make(case, paths))
    for _ in range(position):
        next(iterator)
    state = iterator.get_state()
    iterator.close()
    return json.loads(json.dumps(state))


def restore(case: str, paths, state: dict, traced: bool) -> tuple[float, float, float, int]:
    """(seconds to the first element, tracemalloc peak MB, Arrow MB, its id).

    tracemalloc slows every allocation, so a traced restore gives the memory
    figures and an untraced one the time.
    """
    import pyarrow as pa

    ds = make(case, paths)
    if traced:
        tracemalloc.start()
    started = time.perf_counter()
    iterator = iter(ds)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # hf_replay says it replays: that is the case
        iterator.set_state(state)
    first = next(iterator)
    took = time.perf_counter() - started
    peak = 0
    if traced:
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    arrow = pa.total_allocated_bytes()
    iterator.close()
    return took, peak / 2**20, arrow / 2**20, int(first["id"])


def resize_case(paths: dict[str, list[str]]) -> tuple[float, int, float, list[int]]:
    """(seconds to the first element, state bytes, rows/s of the rest, the ids read)."""
    from grain_dataset.extension import iter_worker_slice

    exp, hosts, workers = grain.experimental, 4, 4
    old, read = [], []
    for host in range(hosts):
        ds = exp.ShardedParquetIterDataset(
            paths["parquet"], shard_options=grain.sharding.ShardOptions(host, hosts)
        )
        leaves = []
        for worker in range(workers):
            iterator = iter_worker_slice(ds, worker, workers)
            start, stop = ds.shard_range
            for _ in range((stop - start) // (4 * workers) + 97 * worker):
                read.append(int(next(iterator)["id"]))
            leaves.append(iterator.get_state())
            iterator.close()
        old.append({"next_worker": 0, "parents": leaves})
    states = json.loads(json.dumps(old))
    source = exp.ShardedParquetIterDataset(paths["parquet"])
    started = time.perf_counter()
    iterator = iter(source)
    resized = source.resized_state(states, iterator.get_state())
    iterator.set_state(resized)
    read.append(int(next(iterator)["id"]))
    first = time.perf_counter() - started
    started = time.perf_counter()
    rest = [int(row["id"]) for row in iterator]
    took = time.perf_counter() - started
    iterator.close()
    return first, len(json.dumps(resized)), len(rest) / took, read + rest


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=50_000, help="rows per file")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    load = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="streaming_bench_") as root:
        paths = write_data(root, args.rows)
        total = 2 * args.rows
        position = total * 3 // 4
        reads = ["parquet_iter", "sharded_parquet", "record_source", "sharded_jsonl"]
        reads += ["sharded_tfrecord"]
        reads += ["hf_raw", "hf_iter"]
        restores = ["parquet_iter", "sharded_parquet", "sharded_jsonl", "hf_state"]
        restores += ["hf_state_reshard", "hf_replay"]
        # parquet_iter reads one file: restore at 3/4 of it.
        positions = dict.fromkeys(restores, position)
        positions["parquet_iter"] = args.rows * 3 // 4
        states = {case: state_at(case, paths, positions[case]) for case in restores}
        read_times: dict[str, list[float]] = {case: [] for case in reads}
        counts: dict[str, int] = {}
        restore_rows: dict[str, list[tuple[float, float, float]]] = {c: [] for c in restores}
        bad = []
        for _ in range(args.repeats):
            for case in reads:
                took, counts[case] = time_read(case, paths)
                read_times[case].append(took)
            for case in restores:
                took, _, _, first = restore(case, paths, states[case], traced=False)
                # A traced replay runs many times slower (tracemalloc on every allocation
                # of 3/4 of the data): its memory is measured in the first round only.
                traced = case != "hf_replay" or not restore_rows[case]
                _, peak, arrow, again = restore(case, paths, states[case], traced=traced)
                if not traced:
                    peak, arrow = restore_rows[case][0][1:]
                restore_rows[case].append((took, peak, arrow))
                if first != positions[case] or again != positions[case]:
                    bad.append(f"{case}: restored at {first}, expected {positions[case]}")
        common = {"rows": total, "repeats": args.repeats, "load_1m": round(load[0], 2)}
        for case in reads:
            seconds = statistics.median(read_times[case])
            line = {"case": f"read_{case}", "rows_read": counts[case], "seconds": seconds}
            line["rows_per_s"] = round(counts[case] / seconds)
            print(json.dumps({**line, **common}))
        for case in restores:
            rows = restore_rows[case]
            line = {
                "case": f"restore_{case}",
                "at_row": positions[case],
                "seconds": statistics.median(r[0] for r in rows),
                "peak_python_mb": round(statistics.median(r[1] for r in rows), 2),
                "arrow_mb": round(statistics.median(r[2] for r in rows), 2),
            }
            print(json.dumps({**line, **common}))
        resizes = [resize_case(paths) for _ in range(args.repeats)]
        if sorted(resizes[0][3]) != sorted(range(total)):
            bad.append("resize_sharded_parquet: records lost or repeated")
        line = {
            "case": "resize_sharded_parquet",
            "seconds": statistics.median(r[0] for r in resizes),
            "state_bytes": resizes[0][1],
            "rows_per_s": round(statistics.median(r[2] for r in resizes)),
        }
        print(json.dumps({**line, **common}))
    for problem in bad:
        print(problem, file=sys.stderr)
    return 3 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
