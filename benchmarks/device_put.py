"""device_put: host-to-device rate and the consumer's step time, as JSON lines.

Usage: python benchmarks/device_put.py [--repeats 5] [--batches 1000] [--steps 200]
       [--worker-batches 300] [--no-workers]

Batches are 32x224x224x3 uint8 (4.8 MB), put onto 8 CPU devices (the script
sets XLA_FLAGS=--xla_force_host_platform_device_count=8 before jax loads) with
``NamedSharding(Mesh(devices, ("data",)), PartitionSpec("data"))``. 16 distinct
batches are made once and cycled, so the figures are the transfer's, not the
data's. Cases (median of `--repeats` runs each, alternating):

(a) ``plain_loop``: ``x = jax.device_put(batch, sharding); x.block_until_ready()``
    for each of `--batches` batches, in a plain Python loop (the reference).
(b) ``device_put``: ``device_put(MapDataset.source(batches).to_iter_dataset(
    ReadOptions(num_threads=0)), sharding)`` (default buffers 4 and 2), the
    consumer calling ``block_until_ready`` on each. (a) and (b) run back to back
    in each round; `ratio_vs_plain` is the median over rounds of (b)'s rate over
    (a)'s (`round_ratios` lists them).
(c) ``consumer_sleep_5ms`` / ``consumer_numpy_5ms``: the consumer works 5 ms on
    each batch (``time.sleep`` / numpy ufuncs of ~5 ms, which release the GIL)
    through device_put; `step_ms` is the median time between consecutive batches
    as the consumer sees them, `wait_ms` the median time it waited in ``next``.
    ``plain_loop_sleep_5ms`` is the same consumer transferring each batch itself.
    If the transfer overlaps, `step_ms` stays ~5 ms.

(d) ``workers_2_map_batch`` / ``workers_2_iter_batch``: the bytes path from worker
    processes to the devices, ``MapDataset.range(n).map(image).batch(32)
    .to_iter_dataset()`` (or ``.to_iter_dataset().batch(32)``) ``.mp_prefetch(
    MultiprocessingOptions(num_workers=2, per_worker_buffer_size=2)) -> device_put``,
    each image a ready 224x224x3 array (made once per process), so the figure is the
    batching, the shared-memory transport and the transfer, not the data. Timed from
    the second batch (worker start-up is mp.py's time to first batch), against the
    plain loop's rate over the same number of batches measured in the same rounds:
    `ratio_vs_plain` (median over rounds). On CPU jax aliases an aligned host array
    instead of copying it, so the plain loop is nearly free there and the ratio says
    how far the pipeline is from a free transfer; on an accelerator it is the DMA.

Checks: in (a) and (b) an untimed warm-up run checks every batch (order: a
batch's first byte names it; shape; sharding) and timed runs check the count;
in (c) every batch is checked outside the step's clock. A wrong or missing
batch sets `ok` to false.
"""

from __future__ import annotations

import os

_FLAG = "--xla_force_host_platform_device_count=8"
if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {_FLAG}".strip()

import argparse  # noqa: E402 - XLA_FLAGS must be set before jax is imported
import json  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable, Iterator, Sequence  # noqa: E402
from typing import Any, TextIO  # noqa: E402

import jax  # noqa: E402
import numpy as np  # noqa: E402
from _bench_common import implementation, json_stdout  # noqa: E402

import grain  # noqa: E402

try:
    from grain.experimental import device_put  # type: ignore[attr-defined]
except ImportError:  # not exported yet
    from grain_jax import device_put

SHAPE = (32, 224, 224, 3)
DISTINCT = 16
WORK_S = 0.005


def _make_batches() -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    batches = []
    for k in range(DISTINCT):
        batch = rng.integers(0, 256, SHAPE, dtype=np.uint8)
        batch[0, 0, 0, 0] = k
        batches.append(batch)
    return batches


def _first_byte(array: jax.Array) -> int:
    shard = min(array.addressable_shards, key=lambda s: s.index[0].start or 0)
    return int(np.asarray(shard.data)[0, 0, 0, 0])


class _Checker:
    """Checks each delivered batch after the clock stops (arrays are kept briefly)."""

    def __init__(self, sharding: Any):
        self.sharding = sharding
        self.ok = True
        self.count = 0

    def check(self, array: jax.Array) -> None:
        self.ok = (
            self.ok
            and array.shape == SHAPE
            and array.sharding == self.sharding
            and _first_byte(array) == self.count % DISTINCT
        )
        self.count += 1


def _plain(batches: list[np.ndarray], sharding: Any, n: int) -> Callable[[], Iterator[Any]]:
    def run() -> Iterator[Any]:
        for i in range(n):
            yield jax.device_put(batches[i % DISTINCT], sharding)

    return run


def _ours(batches: list[np.ndarray], sharding: Any, n: int) -> Callable[[], Iterator[Any]]:
    source = [batches[i % DISTINCT] for i in range(n)]
    ds = grain.MapDataset.source(source).to_iter_dataset(grain.ReadOptions(num_threads=0))
    ds = device_put(ds, sharding)
    return lambda: iter(ds)


_IMAGES: list[np.ndarray] = []


def _image(index: int) -> np.ndarray:
    """A ready 224x224x3 image whose first byte names its batch (made once per process)."""
    if not _IMAGES:
        for k in range(DISTINCT):
            image = np.random.default_rng(k).integers(0, 256, SHAPE[1:], dtype=np.uint8)
            image[0, 0, 0] = k
            _IMAGES.append(image)
    return _IMAGES[(index // SHAPE[0]) % DISTINCT]


def _workers(sharding: Any, n: int, iter_batch: bool) -> Callable[[], Iterator[Any]]:
    ds = grain.MapDataset.range(n * SHAPE[0]).map(_image)
    read = grain.ReadOptions(num_threads=0)
    if iter_batch:
        ds = ds.to_iter_dataset(read).batch(SHAPE[0])
    else:
        ds = ds.batch(SHAPE[0]).to_iter_dataset(read)
    options = grain.MultiprocessingOptions(num_workers=2, per_worker_buffer_size=2)
    ds = device_put(ds.mp_prefetch(options), sharding)
    return lambda: iter(ds)


def _throughput(
    run: Callable[[], Iterator[Any]], n: int, checker: _Checker | None = None
) -> tuple[float, bool]:
    """Seconds for n batches (each blocked on), and whether n arrived; checks each if asked."""
    count = 0
    iterator = run()
    start = time.perf_counter()
    for array in iterator:
        array.block_until_ready()
        if checker is not None:
            checker.check(array)
        count += 1
    wall = time.perf_counter() - start
    close = getattr(iterator, "close", None)
    if close:
        close()
    return wall, count == n and (checker is None or checker.ok)


def _calibrate_numpy() -> Callable[[], None]:
    """A numpy workload of about WORK_S (large ufuncs, which release the GIL)."""
    a = np.random.default_rng(1).random(1 << 18, dtype=np.float32)
    out = np.empty_like(a)

    def once() -> None:
        np.sqrt(a, out=out)
        np.multiply(out, 1.0001, out=out)

    reps = 1
    while True:
        start = time.perf_counter()
        for _ in range(reps):
            once()
        if time.perf_counter() - start > 0.02:
            break
        reps *= 2
    per = (time.perf_counter() - start) / reps
    count = max(1, round(WORK_S / per))

    def work() -> None:
        for _ in range(count):
            once()

    return work


def _consumer(
    iterator: Iterator[Any], work: Callable[[], None], sharding: Any
) -> tuple[list[float], list[float], bool]:
    """Per-step times and waits of a consumer doing `work` on each batch."""
    steps, waits, checker = [], [], _Checker(sharding)
    while True:
        before = time.perf_counter()
        try:
            array = next(iterator)
        except StopIteration:
            break
        array.block_until_ready()
        waits.append(time.perf_counter() - before)
        work()
        steps.append(time.perf_counter() - before)
        checker.check(array)  # outside the step: a zero-copy view on CPU
        del array
    return steps[1:], waits[1:], checker.ok  # the first step includes the start-up


def _timed_after_first(
    run: Callable[[], Iterator[Any]], n: int, checker: _Checker | None
) -> tuple[float, bool]:
    """Seconds for batches 2..n (each blocked on); the first waits for the workers to start."""
    count = 0
    iterator = run()
    start = 0.0
    for array in iterator:
        array.block_until_ready()
        if checker is not None:
            checker.check(array)
        count += 1
        if count == 1:
            start = time.perf_counter()
    wall = time.perf_counter() - start
    close = getattr(iterator, "close", None)
    if close:
        close()
    return wall, count == n and (checker is None or checker.ok)


def _workers_rows(
    out: TextIO, args: argparse.Namespace, sharding: Any, batches: list[np.ndarray], env: Any
) -> None:
    """(d): worker processes -> shared memory -> device_put, against the plain loop."""
    n = args.worker_batches
    cases = {
        "plain_loop": _plain(batches, sharding, n),
        "workers_2_map_batch": _workers(sharding, n, iter_batch=False),
        "workers_2_iter_batch": _workers(sharding, n, iter_batch=True),
    }
    walls: dict[str, list[float]] = {name: [] for name in cases}
    oks = dict.fromkeys(cases, True)
    for repeat in range(args.repeats + 1):
        for name, run in cases.items():
            checker = _Checker(sharding)  # every batch, in every case alike
            wall, ok = _timed_after_first(run, n, checker)
            oks[name] = oks[name] and ok
            if repeat:  # repeat 0 warms up (the first fork, jax's first transfers)
                walls[name].append(wall)
    megabytes = batches[0].nbytes / 1e6
    for name in cases:
        if name == "plain_loop":
            continue
        rate = (n - 1) / statistics.median(walls[name])
        plain = (n - 1) / statistics.median(walls["plain_loop"])
        ratios = [p / w for p, w in zip(walls["plain_loop"], walls[name], strict=True)]
        line = {
            "case": name,
            "batches": n,
            "batch_mb": round(megabytes, 3),
            "batches_per_s": round(rate, 1),
            "mb_per_s": round(rate * megabytes, 1),
            "plain_mb_per_s": round(plain * megabytes, 1),
            "ratio_vs_plain": round(statistics.median(ratios), 3),
            "round_ratios": [round(ratio, 3) for ratio in ratios],
        }
        _emit(out, {**line, "ok": oks[name] and oks["plain_loop"], **env})


def _emit(out: TextIO, line: dict[str, Any]) -> None:
    out.write(json.dumps(line) + "\n")
    out.flush()


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--batches", type=int, default=1000)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--worker-batches", type=int, default=300)
    parser.add_argument(
        "--no-workers", dest="workers", action="store_false", help="skip (d), worker processes"
    )
    args = parser.parse_args(argv)
    out = json_stdout()

    devices = jax.devices()[:8]
    mesh = jax.sharding.Mesh(np.array(devices), axis_names=("data",))
    sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("data"))
    batches = _make_batches()
    megabytes = batches[0].nbytes / 1e6
    env = {
        "devices": len(devices),
        "platform": devices[0].platform,
        "cpus": os.cpu_count(),
        "implementation": implementation(),
        "jax": jax.__version__,
    }

    # (a), (b): throughput, alternating, after one untimed warm-up of each.
    cases = {
        "plain_loop": _plain(batches, sharding, args.batches),
        "device_put": _ours(batches, sharding, args.batches),
    }
    walls: dict[str, list[float]] = {name: [] for name in cases}
    oks = dict.fromkeys(cases, True)
    for repeat in range(args.repeats + 1):
        for name, run in cases.items():
            # The warm-up (repeat 0) checks every batch; timed runs count them.
            wall, ok = _throughput(run, args.batches, None if repeat else _Checker(sharding))
            oks[name] = oks[name] and ok
            if repeat:
                walls[name].append(wall)
    rates = {name: args.batches / statistics.median(walls[name]) for name in cases}
    # Each round times both cases back to back: the median of the rounds' ratios
    # is steadier than the ratio of medians on a noisy machine.
    round_ratios = [p / o for p, o in zip(walls["plain_loop"], walls["device_put"], strict=True)]
    for name in cases:
        line = {
            "case": name,
            "batches": args.batches,
            "batch_mb": round(megabytes, 3),
            "batches_per_s": round(rates[name], 1),
            "mb_per_s": round(rates[name] * megabytes, 1),
        }
        if name == "device_put":
            line["ratio_vs_plain"] = round(statistics.median(round_ratios), 3)
            line["round_ratios"] = [round(ratio, 3) for ratio in round_ratios]
        _emit(out, {**line, "ok": oks[name], **env})

    if args.workers:
        _workers_rows(out, args, sharding, batches, env)

    # (c): the consumer's step time with 5 ms of work per batch.
    numpy_work = _calibrate_numpy()
    consumers: dict[str, tuple[Callable[[], Iterator[Any]], Callable[[], None]]] = {
        "plain_loop_sleep_5ms": (_plain(batches, sharding, args.steps), lambda: time.sleep(WORK_S)),
        "consumer_sleep_5ms": (_ours(batches, sharding, args.steps), lambda: time.sleep(WORK_S)),
        "consumer_numpy_5ms": (_ours(batches, sharding, args.steps), numpy_work),
    }
    work_alone = {"sleep": [], "numpy": []}
    for _ in range(50):
        for kind, work in (("sleep", lambda: time.sleep(WORK_S)), ("numpy", numpy_work)):
            start = time.perf_counter()
            work()
            work_alone[kind].append(time.perf_counter() - start)
    results: dict[str, dict[str, Any]] = {}
    for _ in range(args.repeats):
        for name, (run, work) in consumers.items():
            iterator = run()
            steps, waits, ok = _consumer(iterator, work, sharding)
            close = getattr(iterator, "close", None)
            if close:
                close()
            result = results.setdefault(name, {"steps": [], "waits": [], "p90": [], "ok": True})
            result["steps"].append(statistics.median(steps))
            result["p90"].append(float(np.percentile(steps, 90)))
            result["waits"].append(statistics.median(waits))
            result["ok"] = result["ok"] and ok and len(steps) == args.steps - 1
    for name, result in results.items():
        kind = "numpy" if "numpy" in name else "sleep"
        alone = statistics.median(work_alone[kind])
        step = statistics.median(result["steps"])
        _emit(
            out,
            {
                "case": name,
                "steps": args.steps,
                "work_alone_ms": round(alone * 1e3, 3),
                "step_ms": round(step * 1e3, 3),
                "step_p90_ms": round(statistics.median(result["p90"]) * 1e3, 3),
                "wait_ms": round(statistics.median(result["waits"]) * 1e3, 3),
                "step_over_work": round(step / alone, 3),
                "ok": bool(result["ok"]),
                **env,
            },
        )


if __name__ == "__main__":
    sys.exit(main())
