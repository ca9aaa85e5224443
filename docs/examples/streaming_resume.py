"""Streaming sources that shard by record range and resume exactly, on local files.

    uv run python docs/examples/streaming_resume.py [--workdir DIR] [--hosts 8] [--workers 2]

1. Writes two Parquet files (a text column, row groups of 500 rows) and the
   same rows as one JSON-lines file.
2. Splits the two Parquet files over `--hosts` hosts with
   ShardedParquetIterDataset: every host gets a contiguous record range, the
   ranges differ by at most one record and together hold every row once.
3. Runs host 1's pipeline (filter, map to token counts, batch) under
   mp_prefetch workers, "crashes" after a few batches with its state saved as
   JSON, and resumes in a fresh pipeline: the batches after the checkpoint are
   the ones an uninterrupted run gives.
4. If the `datasets` package is installed, does the same with HFIterDataset over
   a HuggingFace streaming dataset of the JSON-lines file, filtered in HF.

Exits with status 1 if any check fails.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import sys
import tempfile

import grain

ROWS_PER_FILE = (3_001, 2_002)  # 5003 rows: hosts differ by one row


def write_files(workdir: pathlib.Path) -> tuple[list[str], str]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    parquet, lines, start = [], [], 0
    for f, count in enumerate(ROWS_PER_FILE):
        rows = [{"id": i, "text": "word " * (1 + i % 13)} for i in range(start, start + count)]
        start += count
        path = workdir / f"part-{f}.parquet"
        pq.write_table(pa.Table.from_pylist(rows), path, row_group_size=500)
        parquet.append(str(path))
        lines += [json.dumps(row) for row in rows]
    jsonl = workdir / "all.jsonl"
    jsonl.write_text("\n".join(lines) + "\n")
    return parquet, str(jsonl)


def keep(row: dict) -> bool:
    return row["id"] % 5 != 0


def tokens(row: dict) -> int:
    return len(row["text"].split())


def run_interrupted(make_pipeline, crash_after: int, state_file: pathlib.Path) -> list:
    """The batches of a run stopped after `crash_after` batches and resumed from its state."""
    iterator = iter(make_pipeline())
    head = [next(iterator).tolist() for _ in range(crash_after)]
    state_file.write_text(json.dumps(iterator.get_state()))
    iterator.close()  # the "crash": workers and files are gone, only the state file is left
    resumed = iter(make_pipeline())
    resumed.set_state(json.loads(state_file.read_text()))
    rest = [batch.tolist() for batch in resumed]
    resumed.close()
    return head + rest


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=pathlib.Path, default=None)
    parser.add_argument("--hosts", type=int, default=8)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    workdir = args.workdir or pathlib.Path(tempfile.mkdtemp(prefix="streaming_resume_"))
    workdir.mkdir(parents=True, exist_ok=True)
    parquet, jsonl = write_files(workdir)
    total = sum(ROWS_PER_FILE)
    ok = True

    # 2. Two files over many hosts, by record range.
    shards = []
    for host in range(args.hosts):
        options = grain.sharding.ShardOptions(shard_index=host, shard_count=args.hosts)
        ds = grain.experimental.ShardedParquetIterDataset(
            parquet, shard_options=options, columns=["id"]
        )
        shards.append([row["id"] for row in ds])
    sizes = [len(shard) for shard in shards]
    every_row_once = sorted(i for shard in shards for i in shard) == list(range(total))
    print(f"{len(parquet)} files over {args.hosts} hosts: rows per host {sizes}")
    print(f"  every row exactly once: {every_row_once}; sizes differ by {max(sizes) - min(sizes)}")
    ok &= every_row_once and max(sizes) - min(sizes) <= 1

    # 3. Host 1's pipeline under workers, interrupted and resumed.
    workers = grain.multiprocessing.MultiprocessingOptions(num_workers=args.workers)
    host = grain.sharding.ShardOptions(shard_index=1, shard_count=args.hosts)

    def parquet_pipeline():
        ds = grain.experimental.ShardedParquetIterDataset(parquet, shard_options=host)
        return ds.filter(keep).map(tokens).batch(16).mp_prefetch(workers)

    straight = [batch.tolist() for batch in parquet_pipeline()]
    resumed = run_interrupted(parquet_pipeline, 7, workdir / "parquet_state.json")
    same = resumed == straight
    print(
        f"Parquet, host 1, {args.workers} workers: {len(straight)} batches; resumed after 7 "
        f"equals the uninterrupted run: {same}"
    )
    ok &= same

    # 4. A HuggingFace streaming dataset, filtered in HF.
    try:
        os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
        import datasets
    except ImportError:
        print("datasets is not installed: skipping HFIterDataset (pip install datasets)")
        return 0 if ok else 1
    stream = datasets.load_dataset("json", data_files=[jsonl], split="train", streaming=True)
    stream = stream.filter(keep)

    def hf_pipeline():
        ds = grain.experimental.HFIterDataset(stream)
        return ds.map(tokens).batch(16)

    straight = [batch.tolist() for batch in hf_pipeline()]
    resumed = run_interrupted(hf_pipeline, 11, workdir / "hf_state.json")
    same = resumed == straight
    print(
        f"HFIterDataset after an HF filter: {len(straight)} batches; resumed after 11 equals "
        f"the uninterrupted run: {same}"
    )
    ok &= same
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
