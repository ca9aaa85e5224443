"""`grain demo`: the library's main job on built-in data, checking itself as it goes.

One pipeline, the way a training job reads: two sharded ArrayRecord sources,
globally shuffled, decoded and mixed 0.7/0.3, a seeded random augmentation,
batches of 32, two worker processes (`mp_prefetch`) and, when jax imports,
`grain.experimental.device_put` onto the CPU devices. It runs one epoch with a
progress bar and per-stage statistics (`grain_dataset.track_stats`), saves a
checkpoint a third of the way in (through Orbax when it imports, else as JSON),
restores it into a fresh pipeline with fresh workers and checks that the rest
of the epoch is identical, batch for batch (compared by a digest of every
batch). The same epoch read in-process with 0 and 4 threads must be identical
too. Any mismatch: exit 1.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import tempfile
import time
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np

import grain
import grain_dataset
from grain._cli_common import EXIT_FAILED, EXIT_OK, ProgressBar, format_rate, tree_nbytes
from grain_index import derive_seed, index_shuffle_array
from grain_sources import write_array_record

T = TypeVar("T")

SUMMARY = "run the full pipeline on built-in data: mix, shuffle, workers, devices, checkpoint"
DESCRIPTION = """\
Runs one pipeline the way a training job reads, on built-in data written to a
temporary directory as sharded ArrayRecord files:

  books (4 shards) -> global shuffle -> decode \\
                                                mix 0.7/0.3 -> random_map -> batch 32
  web (2 shards)   -> global shuffle -> decode /
      -> mp_prefetch (2 worker processes) -> device_put (CPU devices, when jax imports)

It reads one epoch with a progress bar, saves a checkpoint a third of the way
in (Orbax's CheckpointManager with grain.checkpoint.CheckpointSave when orbax
imports, else the iterator's get_state() as JSON), restores it into a fresh
pipeline with fresh worker processes and checks that the rest of the epoch is
identical, batch for batch. It prints throughput and the per-stage statistics
(which stage bounds the throughput), then reads the same epoch in-process with
0 and 4 threads, which must give the same batches. Exit status 1 if any check
fails."""

BATCH = 32
_WEIGHTS = (0.7, 0.3)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--num-records",
        type=int,
        default=100_000,
        metavar="N",
        help="records in the main source; the second has N/2 (default: 100000, at least 320)",
    )
    parser.add_argument("--seed", type=int, default=42, help="pipeline seed (default: 42)")


def check_arguments(args: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
    if args.num_records < 10 * BATCH:
        parser.error(f"--num-records must be >= {10 * BATCH} (ten batches of {BATCH})")


# ---------------------------------------------------------------- built-in data


def _encode_records(start: int, stop: int) -> np.ndarray:
    """Built-in "documents" as rows of int32: 64 token ids, then a label."""
    index = np.arange(start, stop, dtype=np.int32)[:, None]
    tokens = (np.arange(64, dtype=np.int32) * 31 + index) % 1000
    return np.concatenate([tokens, index % 10], axis=1)


def _write_sources(directory: str, n: int) -> tuple[str, str]:
    """Writes the built-in data as sharded ArrayRecord files; returns their patterns."""
    patterns = []
    for name, start, stop, shards in (("books", 0, n, 4), ("web", n, n + n // 2, 2)):
        rows = _encode_records(start, stop)
        base = os.path.join(directory, name)
        begin = time.perf_counter()
        write_array_record([row.tobytes() for row in rows], base, num_shards=shards)
        elapsed = time.perf_counter() - begin
        print(
            f"  wrote {len(rows):,} records into {shards} ArrayRecord shards ({name}): "
            f"{format_rate(len(rows) / elapsed, 'records')}"
        )
        patterns.append(f"{base}@{shards}")
    return patterns[0], patterns[1]


# ---------------------------------------------------------------- the pipeline


def _decode(record: bytes) -> dict[str, np.ndarray]:
    row = np.frombuffer(record, dtype=np.int32)
    return {"tokens": row[:64], "label": row[64]}


def _augment(record: dict[str, np.ndarray], rng: np.random.Generator) -> dict[str, np.ndarray]:
    return {**record, "noise": rng.standard_normal(4).astype(np.float32)}


def _pipeline(
    sources: tuple[str, str],
    n: int,
    seed: int,
    threads: int = 0,
    workers: int = 0,
    device: Any = None,
) -> grain.IterDataset:
    """Two shuffled file sources mixed 0.7/0.3, a random augmentation, batches of 32."""
    books_files, web_files = sources
    books = grain.MapDataset.source(grain.sources.ArrayRecordDataSource(books_files))
    web = grain.MapDataset.source(grain.sources.ArrayRecordDataSource(web_files))
    books = books.seed(seed).shuffle().map(_decode)
    web = web.seed(seed + 1).shuffle().map(_decode)
    mixed = grain.MapDataset.mix([books.repeat(), web.repeat()], weights=list(_WEIGHTS))
    ds: grain.IterDataset[Any] = (
        mixed.seed(seed)
        .random_map(_augment)
        .batch(BATCH, drop_remainder=True)[: n // BATCH]
        .to_iter_dataset(grain.ReadOptions(num_threads=threads, prefetch_buffer_size=64))
    )
    if workers:
        options = grain.MultiprocessingOptions(num_workers=workers, per_worker_buffer_size=8)
        ds = ds.mp_prefetch(options)
    if device is not None:
        ds = grain.experimental.device_put(ds, device)
    return ds


def _digest(batch: dict[str, Any]) -> bytes:
    """A digest of a batch's arrays (numpy or jax), to compare whole epochs cheaply."""
    digest = hashlib.blake2b(digest_size=16)
    for key in sorted(batch):
        array = np.ascontiguousarray(np.asarray(batch[key]))
        digest.update(f"{key}:{array.dtype.str}:{array.shape}".encode())
        digest.update(array.tobytes())
    return digest.digest()


class _Run:
    """What one pass over (part of) the epoch produced."""

    def __init__(self) -> None:
        self.digests: list[bytes] = []
        self.records = 0
        self.nbytes = 0
        self.seconds = 0.0
        self.stats: Any = None
        self.checkpoint_note = ""
        self.checkpoint_seconds = 0.0  # saving is not reading: kept out of the rate

    @property
    def rate(self) -> float:
        """Records per second while reading."""
        return self.records / max(self.seconds - self.checkpoint_seconds, 1e-9)


def _read(
    ds: grain.IterDataset,
    label: str,
    total: int,
    restore: Callable[[grain.DatasetIterator], None] | None = None,
    save_at: int | None = None,
    save: Callable[[grain.DatasetIterator, int], str] | None = None,
    track: bool = False,
) -> _Run:
    """Reads `ds` to its end; restores first and saves after batch `save_at` when asked.

    With `track`, per-stage statistics are recorded from the second batch on
    (`grain_dataset.track_stats`): the first one carries the start-up (worker
    processes, file readers), and as the statistics time one call in 16 and
    scale it up, a sampled start-up would count sixteen times.
    """
    run = _Run()
    bar = ProgressBar(total, f"  {label}", unit="batches")
    start = time.perf_counter()
    iterator = iter(ds)
    try:
        if restore is not None:
            restore(iterator)
        for batch in iterator:
            run.digests.append(_digest(batch))
            run.records += len(batch["label"])
            run.nbytes += tree_nbytes(batch)
            bar.update(len(run.digests))
            if track and len(run.digests) == 1:
                grain_dataset.track_stats(iterator)
            if save is not None and len(run.digests) == save_at:
                began = time.perf_counter()
                run.checkpoint_note = save(iterator, save_at)
                run.checkpoint_seconds = time.perf_counter() - began
        run.seconds = time.perf_counter() - start
        if track:
            run.stats = iterator.stats()
    finally:
        iterator.close()
        bar.close()
    return run


# ---------------------------------------------------------------- jax and orbax


def _load_jax() -> Any:
    """jax, or None when it does not import (the demo then stays on the host)."""
    try:
        import jax
    except ImportError:
        return None
    return jax


def _load_orbax() -> Any:
    """orbax.checkpoint, or None when it does not import (checkpoints are then JSON)."""
    try:
        import orbax.checkpoint as ocp
    except ImportError:
        return None
    return ocp


def _cpu_target(jax: Any) -> tuple[Any, str]:
    """Where device_put sends batches: the CPU devices, split along the batch when several."""
    devices = jax.devices("cpu")
    if len(devices) > 1 and BATCH % len(devices) == 0:
        mesh = jax.sharding.Mesh(np.array(devices), ("data",))
        sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("data"))
        return sharding, f"{len(devices)} CPU devices, each batch split along its first axis"
    return devices[0], repr(devices[0])


class _OrbaxCheckpoints:
    """The data iterator's checkpoints in an orbax CheckpointManager, one step each."""

    kind = "Orbax"

    def __init__(self, ocp: Any, directory: str):
        self._directory = directory
        self._manager = ocp.CheckpointManager(directory)

    def save(self, iterator: grain.DatasetIterator, step: int) -> str:
        self._manager.save(step, args=grain.checkpoint.CheckpointSave(iterator))
        self._manager.wait_until_finished()
        state = json.dumps(iterator.get_state())
        return f"Orbax step {step} in {os.path.basename(self._directory)}/{step}/: {state}"

    def restore(self, iterator: grain.DatasetIterator, step: int) -> None:
        self._manager.restore(step, args=grain.checkpoint.CheckpointRestore(iterator))

    def close(self) -> None:
        self._manager.close()


class _JsonCheckpoints:
    """The data iterator's `get_state()` as a JSON file per step."""

    kind = "JSON"

    def __init__(self, directory: str):
        os.makedirs(directory, exist_ok=True)
        self._directory = directory

    def _path(self, step: int) -> str:
        return os.path.join(self._directory, f"data-{step}.json")

    def save(self, iterator: grain.DatasetIterator, step: int) -> str:
        state = json.dumps(iterator.get_state())
        with open(self._path(step), "w") as file:
            file.write(state)
        return f"JSON file {os.path.basename(self._path(step))}: {state}"

    def restore(self, iterator: grain.DatasetIterator, step: int) -> None:
        with open(self._path(step)) as file:
            iterator.set_state(json.loads(file.read()))

    def close(self) -> None:
        pass


# ---------------------------------------------------------------- the demo


def _devices_and_checkpoints(directory: str) -> tuple[Any, Any]:
    """Where batches go (None: the host) and how checkpoints are kept; prints both."""
    jax = _load_jax()
    device, where = None, "jax does not import here"
    if jax is not None:
        try:
            device, where = _cpu_target(jax)
        except RuntimeError as error:  # no CPU backend: stay on the host
            where = f"jax has no CPU device here ({error})"
    ocp = _load_orbax() if device is not None else None
    path = os.path.join(directory, "checkpoints")
    checkpoints = _JsonCheckpoints(path) if ocp is None else _OrbaxCheckpoints(ocp, path)
    print(
        "  books, web: global shuffle -> decode; mix 0.7/0.3 -> random_map -> batch 32\n"
        "  -> mp_prefetch, 2 worker processes"
        + (f" -> device_put onto {where}" if device is not None else "")
    )
    if device is None:
        print(f"  ({where}: batches stay numpy arrays on the host)")
    how = (
        "orbax.checkpoint.CheckpointManager + grain.checkpoint.CheckpointSave"
        if ocp is not None
        else "iterator.get_state(), since orbax does not import"
    )
    print(f"  checkpoints: {checkpoints.kind} ({how})")
    return device, checkpoints


def _pipeline_demo(directory: str, n: int, seed: int) -> bool:
    print("[1/4] data")
    sources = _write_sources(directory, n)
    batches = n // BATCH
    print("\n[2/4] the pipeline")
    device, checkpoints = _devices_and_checkpoints(directory)

    ok = True
    save_at = batches // 3
    print(f"\n[3/4] one epoch of {batches:,} batches, checkpoint after batch {save_at:,}")
    try:
        main = _read(
            _pipeline(sources, n, seed, workers=2, device=device),
            "2 workers",
            batches,
            save_at=save_at,
            save=checkpoints.save,
            track=True,
        )
        reading = main.seconds - main.checkpoint_seconds
        print(
            f"  epoch: {main.records:,} records in {reading:.2f} s with 2 worker processes "
            f"(and {main.checkpoint_seconds:.2f} s saving the checkpoint): "
            f"{format_rate(main.rate, 'records')}, "
            f"{format_rate(len(main.digests) / reading, 'batches')}, "
            f"{main.nbytes / 1e6 / reading:.1f} MB/s"
        )
        print(f"  checkpoint after batch {save_at:,}: {main.checkpoint_note}")
        print(
            "  where the time goes, after the first batch (the stages of this process; "
            "those before mp_prefetch run in the workers):"
        )
        print("    " + str(main.stats).replace("\n", "\n    "))
        print(
            "    (mp_prefetch's time is this process waiting on its workers: their work, as "
            "seen from here"
            + (
                ";\n    device_put's is waiting on its transfer thread, which runs the rows "
                "above it)"
                if device is not None
                else ")"
            )
        )

        resumed = _read(
            _pipeline(sources, n, seed, workers=2, device=device),
            "restored",
            batches - save_at,
            restore=lambda iterator: checkpoints.restore(iterator, save_at),
        )
    finally:
        checkpoints.close()
    if len(main.digests) != batches:
        print(f"  MISMATCH: the epoch has {len(main.digests):,} batches, not {batches:,}")
        ok = False
    same = resumed.digests == main.digests[save_at:]
    print(
        f"  restored into a fresh pipeline with fresh worker processes: the remaining "
        f"{len(resumed.digests):,} batches are identical: {same}"
    )
    ok &= same

    print("\n[4/4] the same epoch in this process (identical batches expected)")
    in_process = []
    for threads in (0, 4):
        run = _read(
            _pipeline(sources, n, seed, threads=threads, device=device),
            f"{threads} threads",
            batches,
        )
        same = run.digests == main.digests
        print(
            f"  {threads} threads, no workers: {run.records:,} records in {run.seconds:.2f} s: "
            f"{format_rate(run.rate, 'records')}, same batches as with 2 workers: {same}"
        )
        in_process.append(run.rate)
        ok &= same
    print("  " + _workers_verdict(main.rate, max(in_process)))
    return ok


def _workers_verdict(with_workers: float, without: float) -> str:
    """One line: are the workers faster here, and if not, why not on this data."""
    if with_workers >= without:
        return (
            f"2 workers read {with_workers / without:.1f}x as fast as this process alone "
            f"({format_rate(with_workers, 'records')} against {format_rate(without, 'records')})"
        )
    cores = os.cpu_count() or 1
    return (
        f"2 workers are slower here ({format_rate(with_workers, 'records')} against "
        f"{format_rate(without, 'records')}): a record takes {1e6 / without:.0f} us to read "
        f"and decode in-process, less than sending it between processes, and the {cores} "
        f"CPU cores are shared by the workers, this process and its threads; workers pay "
        "off when a record costs more (image decoding, tokenizing) and cores are free"
    )


def _index_demo(n: int, seed: int) -> bool:
    shards = 2
    samplers = [
        grain.samplers.IndexSampler(
            num_records=n,
            shard_options=grain.sharding.ShardOptions(i, shards, drop_remainder=True),
            shuffle=True,
            num_epochs=2,
            seed=seed,
        )
        for i in range(shards)
    ]
    steps = np.arange(len(samplers[0]))
    keys, elapsed = _timed(lambda: [s.record_keys(steps) for s in samplers])
    total = shards * len(steps)
    print(
        f"  sampler: global shuffle, {shards} shards x 2 epochs: {total:,} record keys  "
        f"{format_rate(total / elapsed)}"
    )
    epoch = len(steps) // 2
    first_epoch = np.concatenate([k[:epoch] for k in keys])
    disjoint = len(np.unique(first_epoch)) == len(first_epoch)
    print(f"  epoch 0 shards are disjoint: {disjoint}")
    big = index_shuffle_array(
        np.arange(1_000_000), max_index=10**12 - 1, seed=derive_seed(seed, "demo")
    )
    print(
        f"  shuffle of a 10^12-record index space: first keys {big[:3].tolist()} (no O(n) memory)"
    )
    return disjoint


def _timed(fn: Callable[[], T]) -> tuple[T, float]:
    """Runs `fn` twice and times the second, warm run (the first builds tables)."""
    fn()
    start = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - start


def run(args: argparse.Namespace) -> int:
    n, seed = args.num_records, args.seed
    print(f"grain demo: {n:,} + {n // 2:,} built-in records, seed {seed}\n")
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="grain-demo-") as directory:
        ok = _pipeline_demo(directory, n, seed)
    print("\nindex math")
    ok &= _index_demo(n, seed)
    verdict = "all checks passed" if ok else "A CHECK FAILED"
    print(f"\n{verdict} ({time.perf_counter() - start:.1f} s)")
    return EXIT_OK if ok else EXIT_FAILED
