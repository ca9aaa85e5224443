"""The conversion plan: which input records go to which output shard, decided from metadata.

The global order of the input is: files in the order `detect` lists them
(name order in a directory, a HuggingFace dataset's own file order), then
records in file order. Shard s of `num_shards` holds the global records
``[s * N // num_shards, (s + 1) * N // num_shards)``, so record i of the input
is index i of ``ArrayRecordDataSource("DEST@num_shards")`` whoever wrote the
shard. Each shard is a list of pieces (a file and a range of its records,
with the seek point to start reading from) and a hash of everything its
bytes depend on: its pieces, the identity (path, size, mtime) of the files
they read, the row format, the transform, the lengths option and the writer
options ("auto" resolved from the input's bytes per record). A marker whose
hash matches says the shard is done; the plan's hash (over all of it) is what
the manifest records.
"""

from __future__ import annotations

import hashlib
import json
import os
import uuid
from typing import Any

import numpy as np

from grain_convert._inputs import SEEK_STRIDE, InputFile, scan
from grain_convert._options import resolve_writer_options

PLAN_VERSION = 1


def shard_names(dest: str, num_shards: int) -> list[str]:
    """``dest`` for one shard, else ``dest-00000-of-0000N`` ...: what ``dest@N`` opens."""
    if num_shards == 1:
        return [dest]
    return [f"{dest}-{i:05d}-of-{num_shards:05d}" for i in range(num_shards)]


def digest(value: Any) -> str:
    """The SHA-256 of a JSON value written canonically (sorted keys, no spaces)."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def make_plan(
    kind: str,
    files: list[str],
    dest: str,
    num_shards: int,
    *,
    row_format: str,
    writer_options: str,
    transform_id: str | None,
    lengths_id: str | None,
) -> dict[str, Any]:
    """The plan (a JSON value) for writing the input's records into `num_shards` shards."""
    inputs = scan(kind, files)
    counts = np.array([entry.records for entry in inputs], dtype=np.int64)
    ends = np.cumsum(counts)
    total = int(ends[-1]) if len(ends) else 0
    # "auto" is resolved here, from the sizes the scan found, so the plan (and
    # every shard's hash) names the options the bytes depend on.
    mean_record = sum(entry.size for entry in inputs) / max(total, 1)
    writer_options = resolve_writer_options(writer_options, mean_record)
    bounds = np.arange(num_shards + 1, dtype=np.int64) * total // num_shards
    settings = {
        "format": kind,
        "row_format": row_format,
        "writer_options": writer_options,
        "transform": transform_id,
        "lengths": lengths_id,
    }
    shards = []
    for index, name in enumerate(shard_names(os.path.abspath(dest), num_shards)):
        start, stop = int(bounds[index]), int(bounds[index + 1])
        pieces = _pieces(inputs, ends, start, stop)
        used = [inputs[piece["file"]].identity() for piece in pieces]
        shard = {
            "index": index,
            "name": os.path.basename(name),
            "start": start,
            "stop": stop,
            "pieces": pieces,
        }
        shard["hash"] = digest({"shard": shard, "files": used, "settings": settings})
        shards.append(shard)
    plan: dict[str, Any] = {
        "version": PLAN_VERSION,
        "settings": settings,
        "files": [entry.identity() | {"records": entry.records} for entry in inputs],
        "num_records": total,
        "num_shards": num_shards,
        "shards": shards,
    }
    plan["hash"] = digest(plan)
    return plan


def _pieces(inputs: list[InputFile], ends: np.ndarray, start: int, stop: int) -> list[dict]:
    """The files and record ranges that make up global records [start, stop)."""
    if start == stop:
        return []
    first = int(np.searchsorted(ends, start, side="right"))
    last = int(np.searchsorted(ends, stop - 1, side="right"))
    pieces = []
    for number in range(first, last + 1):
        entry = inputs[number]
        file_start = int(ends[number]) - entry.records
        low, high = max(start, file_start) - file_start, min(stop, int(ends[number])) - file_start
        piece: dict[str, Any] = {"file": number, "path": entry.path, "start": low, "stop": high}
        if entry.seek:
            # The last seek point at or before `low`: the task reads forward from there.
            piece["seek"] = entry.seek[low // SEEK_STRIDE]
        pieces.append(piece)
    return pieces


def write_json(path: str, value: Any) -> None:
    """Writes `value` as JSON to `path` atomically (a temporary name, then a rename)."""
    temp = f"{path}.tmp-{os.getpid()}-{uuid.uuid4().hex[:12]}"
    with open(temp, "w", encoding="utf-8") as file:
        json.dump(value, file, indent=1, sort_keys=True)
        file.write("\n")
        file.flush()
        os.fsync(file.fileno())
    os.replace(temp, path)
