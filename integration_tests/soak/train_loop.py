"""A training loop that the preemption soak (`driver.py`) kills and restarts.

It reads a shuffled, mixed, filtered, batched pipeline over ArrayRecord files
through `mp_prefetch` (2 worker processes), appends every batch it consumes to
an append-only JSON-lines log, and checkpoints the data iterator with an Orbax
`CheckpointManager` every `--checkpoint-every` steps. On start it restores the
latest complete checkpoint (if any) and continues from there, so the steps
after that checkpoint are consumed, and logged, a second time.

    uv run python integration_tests/soak/train_loop.py --workdir /tmp/run \
        --data /tmp/data --steps 200 --checkpoint-every 8

(`driver.py --keep DIR` writes the data; `train_loop.write_data` does it too.)

Log. One line per step, ``{"step": s, "ids": [...]}``: the ids of batch `s`
(steps count from 1; the checkpoint of step s holds the state after batch s).
Each line goes to the file with one unbuffered ``write(2)`` on an ``O_APPEND``
descriptor: once the call returns the line is in the kernel and survives a
SIGKILL of the process (``--fsync`` also syncs it to the disk, for power loss).
A line cut by a kill would lack its newline; the next run first ends it, so the
torn line stays a line of its own that readers skip.

Events, on stdout (flushed), for the driver to time its kills:
``ready <restored step>``, ``step <s>`` after logging step s,
``save-begin <s>`` / ``save-end <s>`` around `CheckpointManager.save`, and
``done <s>`` after the last step and the last save are complete.

The batch's feature rows must equal its ids (they travel through shared
memory); the run exits with status 3 if they do not, so wrong data can never
pass as a good run. Exit status 0 means every step was consumed and saved.
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import os
import pathlib
import signal
import sys
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import numpy as np

import grain

SOURCES = {"a": (0, 1500), "b": (100_000, 700)}  # name: (first id, count)
FEATURES = 160  # float32: a batch of 8 holds 5 KiB, so it travels through shared memory
BATCH = 8
WORKERS = 2
WEIGHTS = (0.7, 0.3)


def write_data(directory: pathlib.Path) -> None:
    """Writes the two ArrayRecord datasets (2 shards each) into `directory`, once."""
    from grain_sources import write_array_record

    directory.mkdir(parents=True, exist_ok=True)
    for name, (first, count) in SOURCES.items():
        if list(directory.glob(f"{name}.array_record-*")):
            continue
        records = [int(i).to_bytes(8, "little") for i in range(first, first + count)]
        write_array_record(records, str(directory / f"{name}.array_record"), num_shards=2)


def decode(record: bytes) -> dict[str, np.ndarray]:
    """Record bytes -> {"id": int64[], "x": float32[FEATURES] filled with the id}."""
    ident = np.int64(int.from_bytes(record, "little"))
    return {"id": ident, "x": np.full(FEATURES, ident, dtype=np.float32)}


def keep(element: dict[str, np.ndarray]) -> bool:
    """Drops one element in five (ids ending in 3 or 8)."""
    return int(element["id"]) % 5 != 3


def make_pipeline(data: pathlib.Path, seed: int) -> grain.IterDataset:
    """source x2 -> shuffle -> mix -> decode -> filter -> batch -> 2 worker processes."""
    components = []
    for offset, name in enumerate(SOURCES):
        paths = sorted(str(p) for p in data.glob(f"{name}.array_record-*"))
        source = grain.sources.ArrayRecordDataSource(paths)
        components.append(grain.MapDataset.source(source).seed(seed + offset).shuffle())
    return (
        grain.MapDataset.mix(components, weights=list(WEIGHTS))
        .map(decode)
        .to_iter_dataset(grain.ReadOptions(num_threads=2, prefetch_buffer_size=16))
        .filter(keep)
        .batch(BATCH, drop_remainder=True)
        .mp_prefetch(grain.MultiprocessingOptions(num_workers=WORKERS, per_worker_buffer_size=2))
    )


class Log:
    """The append-only JSON-lines log of consumed batches."""

    def __init__(self, path: pathlib.Path, fsync: bool):
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._fsync = fsync
        size = os.fstat(self._fd).st_size
        if size:  # end a line a kill may have cut, so that it stays a line of its own
            with open(path, "rb") as existing:
                existing.seek(size - 1)
                if existing.read(1) != b"\n":
                    os.write(self._fd, b"\n")

    def write(self, step: int, ids: list[int]) -> None:
        line = json.dumps({"step": step, "ids": ids}, separators=(",", ":")) + "\n"
        os.write(self._fd, line.encode())
        if self._fsync:
            os.fsync(self._fd)

    def close(self) -> None:
        os.close(self._fd)


def event(*words: object) -> None:
    print(*words, flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workdir", type=pathlib.Path, required=True)
    parser.add_argument("--data", type=pathlib.Path, required=True)
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--checkpoint-every", type=int, default=8)
    parser.add_argument("--step-sleep", type=float, default=0.002, help="the 'training' time")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--fsync", action="store_true", help="fsync every log line")
    args = parser.parse_args(argv)
    # The driver asks for every thread's stack with SIGUSR1 before it kills a hung run.
    faulthandler.register(signal.SIGUSR1, all_threads=True)

    import orbax.checkpoint as ocp  # after argparse: --help stays fast

    args.workdir.mkdir(parents=True, exist_ok=True)
    if not list(args.data.glob("*.array_record-*")):
        write_data(args.data)
    iterator = iter(make_pipeline(args.data, args.seed))
    log = Log(args.workdir / "log.jsonl", args.fsync)
    options = ocp.CheckpointManagerOptions(max_to_keep=2)
    with ocp.CheckpointManager(args.workdir / "checkpoints", options=options) as manager:
        step = manager.latest_step() or 0
        if step:
            manager.restore(step, args=grain.checkpoint.CheckpointRestore(iterator))
        event("ready", step)
        while step < args.steps:
            batch = next(iterator)
            ids = batch["id"]
            if not np.array_equal(batch["x"], np.repeat(ids[:, None], FEATURES, 1)):
                event("wrong-data", step + 1)
                return 3
            time.sleep(args.step_sleep)  # the training step
            step += 1
            log.write(step, ids.tolist())
            event("step", step)
            if step % args.checkpoint_every == 0 or step == args.steps:
                event("save-begin", step)
                manager.save(step, args=grain.checkpoint.CheckpointSave(iterator))
                event("save-end", step)
        manager.wait_until_finished()
    iterator.close()
    log.close()
    event("done", step)
    return 0


if __name__ == "__main__":
    sys.exit(main())
