"""`grain bench`: how fast a pipeline runs, and which of its stages bounds it.

The pipeline comes from a user's file (its ``make_dataset()``) or is one of
the built-in ones. Rates leave out the start-up (making the iterator and
producing the first element: worker processes start, files open, tables are
built), which is reported on its own; so do the statistics, switched on with
``grain_dataset.track_stats`` once the first element is out: they time one call
in 16 and scale it up, and a sampled start-up would count sixteen times.
The summary is the same table ``it.stats()`` prints in a program.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

import grain
import grain_dataset
from grain._cli_common import (
    EXIT_OK,
    CommandError,
    ProgressBar,
    UsageError,
    format_bytes,
    format_rate,
    tree_nbytes,
)
from grain_sources import write_array_record

SUMMARY = "time a pipeline (your make_dataset() or a built-in one): elements/s, MB/s, stages"
DESCRIPTION = """\
Reads --num-elements elements from a pipeline and prints elements/s, MB/s (the
bytes of each element's numpy array leaves) and the per-stage statistics
(grain_dataset.track_stats, the table of it.stats()): each stage's elements
and own time, and the stage that bounds the throughput.

PIPELINE_FILE is a Python file that defines a function make_dataset(), called
with no arguments, returning a grain.MapDataset or a grain.IterDataset:

    import grain

    def parse(x):                      # module level: worker processes pickle it
        return {"x": x, "y": x % 10}

    def make_dataset():
        ds = grain.MapDataset.range(100_000).shuffle(seed=0).map(parse).batch(32)
        return ds.to_iter_dataset()    # a MapDataset is read with .to_iter_dataset()

The file is imported as a module named after it, with its directory first on
sys.path, so that its functions pickle for mp_prefetch worker processes.

Built-in pipelines (--builtin NAME):
  range-map-batch            MapDataset.range -> to_iter_dataset -> map (a
                             256-float vector) -> batch 64, in this process
  arrayrecord-shuffle-batch  10,000 records of 1 KB written to a temporary
                             ArrayRecord file -> global shuffle -> decode,
                             read by 4 threads -> batch 64
  mp-images                  random_map making 64x64x3 uint8 images -> flip and
                             normalize to float32 -> batch 32 -> mp_prefetch with
                             2 worker processes

The rates leave out the start-up (making the iterator and the first element),
which is reported on its own. --json prints one JSON line instead of the text,
with the keys pipeline, elements, timed_elements, seconds, elements_per_s,
mb_per_s, bytes, bytes_per_element, startup_s, ended_early, stages (a list of
{name, elements, self_ms, share}) and bottleneck (a stage name)."""


# ---------------------------------------------------------------- built-in pipelines
# Module-level functions: the mp-images workers receive them by pickling.


def _vector(index: int) -> dict[str, Any]:
    return {"x": np.full(256, index, dtype=np.float32) * 0.5, "y": np.int32(index % 10)}


def _decode_record(record: bytes) -> np.ndarray:
    return np.frombuffer(record, dtype=np.uint8)


def _make_image(index: int, rng: np.random.Generator) -> dict[str, Any]:
    image = rng.integers(0, 256, size=(64, 64, 3), dtype=np.uint8)
    return {"image": image, "label": np.int32(index % 1000)}


def _flip_normalize(example: dict[str, Any]) -> dict[str, Any]:
    image = example["image"][:, ::-1].astype(np.float32) * (1 / 255)
    return {"image": image, "label": example["label"]}


def _range_map_batch(num_elements: int, stack: contextlib.ExitStack) -> grain.IterDataset:
    ds = grain.MapDataset.range(num_elements * 64).to_iter_dataset()
    return ds.map(_vector).batch(64)


def _arrayrecord_shuffle_batch(num_elements: int, stack: contextlib.ExitStack) -> grain.IterDataset:
    directory = stack.enter_context(tempfile.TemporaryDirectory(prefix="grain-bench-"))
    path = os.path.join(directory, "records.array_record")
    rng = np.random.default_rng(0)
    rows = rng.integers(0, 256, size=(10_000, 1024), dtype=np.uint8)
    write_array_record([row.tobytes() for row in rows], path)
    source = stack.enter_context(grain.sources.ArrayRecordDataSource(path))
    records = grain.MapDataset.source(source).seed(0).shuffle().map(_decode_record).repeat()
    ds = records.to_iter_dataset(grain.ReadOptions(num_threads=4, prefetch_buffer_size=256))
    return ds.batch(64)


def _mp_images(num_elements: int, stack: contextlib.ExitStack) -> grain.IterDataset:
    images = grain.MapDataset.range(num_elements * 32).seed(0).random_map(_make_image)
    ds: grain.IterDataset[Any] = images.map(_flip_normalize).batch(32).to_iter_dataset()
    return ds.mp_prefetch(grain.MultiprocessingOptions(num_workers=2))


BUILTINS: dict[str, Callable[[int, contextlib.ExitStack], Any]] = {
    "range-map-batch": _range_map_batch,
    "arrayrecord-shuffle-batch": _arrayrecord_shuffle_batch,
    "mp-images": _mp_images,
}


# ---------------------------------------------------------------- arguments


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "pipeline_file",
        nargs="?",
        metavar="PIPELINE_FILE",
        help="a Python file defining make_dataset() (see above)",
    )
    parser.add_argument(
        "--builtin", choices=tuple(BUILTINS), metavar="NAME", help="run a built-in pipeline"
    )
    parser.add_argument(
        "--num-elements",
        type=int,
        default=1000,
        metavar="N",
        help="how many elements to read (default: 1000)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON line")


def check_arguments(args: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
    if (args.pipeline_file is None) == (args.builtin is None):
        parser.error(
            "give a PIPELINE_FILE or --builtin NAME "
            + ("(not both)" if args.builtin else f"(one of: {', '.join(BUILTINS)})")
        )
    if args.num_elements < 1:
        parser.error("--num-elements must be >= 1")


# ---------------------------------------------------------------- the user's file


@contextlib.contextmanager
def _imported(path: str) -> Iterator[Any]:
    """Imports the file at `path` as a module; undoes it (sys.modules, sys.path) after."""
    if not os.path.exists(path):
        raise UsageError(f"no such file: {path}")
    if os.path.isdir(path):
        raise UsageError(f"{path} is a directory: pass a Python file defining make_dataset()")
    stem = os.path.splitext(os.path.basename(path))[0]
    name = stem if stem.isidentifier() and stem not in sys.modules else "_grain_bench_pipeline"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise UsageError(f"{path} is not a Python file (name it *.py)")
    module = importlib.util.module_from_spec(spec)
    directory = os.path.dirname(os.path.abspath(path))
    sys.path.insert(0, directory)
    sys.modules[name] = module
    try:
        try:
            spec.loader.exec_module(module)
        except Exception as error:
            traceback.print_exc()
            raise CommandError(f"importing {path} raised {type(error).__name__}: {error}") from None
        yield module
    finally:
        sys.modules.pop(name, None)
        with contextlib.suppress(ValueError):
            sys.path.remove(directory)


def _from_file(path: str, stack: contextlib.ExitStack) -> Any:
    module = stack.enter_context(_imported(path))
    make_dataset = getattr(module, "make_dataset", None)
    if not callable(make_dataset):
        raise UsageError(
            f"{path} defines no make_dataset() function: define one returning a "
            "grain.MapDataset or grain.IterDataset"
        )
    try:
        return make_dataset()
    except Exception as error:
        traceback.print_exc()
        raise CommandError(f"make_dataset() raised {type(error).__name__}: {error}") from None


# ---------------------------------------------------------------- running


def _measure(ds: grain.IterDataset, num_elements: int, show_bar: bool) -> dict[str, Any]:
    bar = ProgressBar(num_elements, "bench", unit="elements")
    if not show_bar:
        bar.enabled = False
    count = nbytes = 0
    start = first = time.perf_counter()
    iterator = iter(ds)
    stats = None
    try:
        while count < num_elements:
            try:
                element = next(iterator)
            except StopIteration:
                break
            except Exception as error:
                traceback.print_exc()
                raise CommandError(
                    f"the pipeline raised {type(error).__name__} at element {count}: {error}"
                ) from None
            count += 1
            if count == 1:
                first = time.perf_counter()
                # Tracked from here: a start-up in a timed sample would be scaled up
                # as if every call had cost as much.
                grain_dataset.track_stats(iterator)
            else:
                nbytes += tree_nbytes(element)
            bar.update(count)
        end = time.perf_counter()
        if count:
            stats = iterator.stats()
    finally:
        iterator.close()
        bar.close()
    if count == 0:
        raise CommandError("the pipeline produced no element: nothing to measure")
    timed = count - 1
    seconds = end - first if timed else end - start
    if not timed:  # one element: its time is all there is
        timed, nbytes = 1, tree_nbytes(element)
    return {
        "elements": count,
        "timed_elements": timed,
        "seconds": seconds,
        "elements_per_s": timed / seconds if seconds > 0 else float("inf"),
        "mb_per_s": nbytes / 1e6 / seconds if seconds > 0 else float("inf"),
        "bytes": nbytes,
        "bytes_per_element": nbytes / timed,
        "startup_s": first - start,
        "ended_early": count < num_elements,
        "stats": stats,
    }


def _as_json(name: str, result: dict[str, Any]) -> str:
    stats = result.pop("stats")
    total = sum(stage.self_ns for stage in stats.stages) or 1
    result["stages"] = [
        {
            "name": stage.name,
            "elements": stage.elements,
            "self_ms": round(stage.self_ns / 1e6, 3),
            "share": round(stage.self_ns / total, 4),
        }
        for stage in stats.stages
    ]
    bottleneck = stats.bottleneck
    result["bottleneck"] = None if bottleneck is None else bottleneck.name
    return json.dumps({"pipeline": name, **result})


def run(args: argparse.Namespace) -> int:
    with contextlib.ExitStack() as stack:
        if args.builtin:
            name = f"builtin:{args.builtin}"
            ds = BUILTINS[args.builtin](args.num_elements, stack)
        else:
            name = args.pipeline_file
            ds = _from_file(args.pipeline_file, stack)
        if isinstance(ds, grain.MapDataset):
            ds = ds.to_iter_dataset()
        if not isinstance(ds, grain.IterDataset):
            raise CommandError(
                f"make_dataset() returned {type(ds).__name__}, not a grain.MapDataset or "
                "grain.IterDataset"
            )
        if not args.json:
            print(f"grain bench: {name}, {args.num_elements:,} elements")
        result = _measure(ds, args.num_elements, show_bar=not args.json)
    if args.json:
        print(_as_json(name, result))
        return EXIT_OK
    if result["ended_early"]:
        print(f"  the pipeline ended after {result['elements']:,} elements")
    print(f"  start-up (iterator and first element): {result['startup_s']:.3f} s")
    timed = "then " if result["elements"] > 1 else ""
    print(
        f"  {timed}{result['timed_elements']:,} elements in {result['seconds']:.3f} s: "
        f"{format_rate(result['elements_per_s'], 'elements')}, "
        f"{result['mb_per_s']:,.1f} MB/s "
        f"({format_bytes(result['bytes_per_element'])} of arrays per element)"
    )
    print("  " + str(result["stats"]).replace("\n", "\n  "))
    return EXIT_OK
