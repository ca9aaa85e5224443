"""The tutorials and the user guide's examples run, and the guide quotes real messages.

- Every file in docs/tutorials runs in its own interpreter (the tutorials start
  worker processes and JAX devices, and register TFDS builders), from a scratch
  directory, with a time limit: it must exit with 0, and its stderr must show
  no traceback, not even one Python swallowed ("Exception ignored in ...").
- The ```python blocks of each page in EXAMPLE_PAGES (the new guide pages and
  the packages' READMEs) run top to bottom in one fresh interpreter per page,
  like a notebook.
- Each error message that docs/troubleshooting.md quotes is produced here by
  the call that causes it, and must appear in the page verbatim.

docs/examples/*.py runs in test_train_example.py.
"""

import asyncio
import functools
import os
import pathlib
import re
import resource
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import grain
import grain.python as pygrain
import grain_sources

ROOT = pathlib.Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
TUTORIALS = sorted((DOCS / "tutorials").glob("*.py"))
GUIDE_PAGES = [
    "checkpointing.md",
    "concepts.md",
    "contributing.md",
    "data_loader.md",
    "elastic.md",
    "multiprocessing.md",
    "performance.md",
    "troubleshooting.md",
]
# Pages whose ```python blocks run: the guide pages above and the packages' READMEs.
EXAMPLE_PAGES = [f"docs/{page}" for page in GUIDE_PAGES] + [
    f"packages/{name}/README.md"
    for name in [
        "grain",
        "grain-index",
        "grain-sources",
        "grain-dataset",
        "grain-mp",
        "grain-convert",
    ]
]
# Seconds per tutorial or page; all of them together take about half a minute on 2 cores.
LIMIT_S = 60


def _run(command, cwd):
    started = time.monotonic()
    done = subprocess.run(
        command,
        cwd=cwd,
        env={**os.environ, "PYTHONWARNINGS": "default"},
        capture_output=True,
        text=True,
        timeout=LIMIT_S,
    )
    took = time.monotonic() - started
    report = f"({took:.1f} s)\n--- stdout\n{done.stdout}\n--- stderr\n{done.stderr}"
    if done.returncode != 0:
        _skip_where_no_wheel(done.stderr)
    assert done.returncode == 0, report
    assert "Traceback" not in done.stderr, report
    assert "Exception ignored" not in done.stderr, report
    assert done.stdout.strip(), report


# Modules without a free-threaded (cp313t) wheel; see docs/freethreaded.md.
# tensorflow_datasets is left out of that environment with tensorflow, which has none.
_NO_FREE_THREADED_WHEEL = ("array_record", "orbax", "tensorstore", "tensorflow_datasets")


def _skip_where_no_wheel(stderr):
    """On free-threaded CPython, skips a page that stopped for a module it cannot have."""
    if getattr(sys, "_is_gil_enabled", lambda: True)():
        return
    last = stderr.strip().splitlines()[-1] if stderr.strip() else ""
    for name in _NO_FREE_THREADED_WHEEL:
        if f"No module named '{name}" in last or f"needs {name}" in last:
            pytest.skip(f"needs {name}, which has no free-threaded wheel: {last}")


def test_there_are_tutorials():
    names = {path.name for path in TUTORIALS}
    assert {"dataset_basics.py", "dataset_advanced.py", "data_loader.py"} <= names


@pytest.mark.timeout(LIMIT_S + 30)
@pytest.mark.parametrize("path", TUTORIALS, ids=[path.stem for path in TUTORIALS])
def test_tutorial_runs(path, tmp_path):
    _run([sys.executable, str(path)], tmp_path)


@pytest.mark.timeout(LIMIT_S + 30)
@pytest.mark.parametrize("page", EXAMPLE_PAGES)
def test_page_examples_run(page, tmp_path):
    text = (ROOT / page).read_text()
    blocks = re.findall(r"^```python\n(.*?)^```", text, flags=re.DOTALL | re.MULTILINE)
    assert blocks, f"{page} has no python example"
    script = tmp_path / "examples.py"
    script.write_text("\n\n".join(blocks))
    _run([sys.executable, str(script)], tmp_path)


def test_index_links_every_page():
    index = (DOCS / "index.md").read_text()
    for page in [*GUIDE_PAGES, "dataset.md", "sources.md", "jax.md", "index_math.md"]:
        assert f"({page})" in index, page
    for path in TUTORIALS:
        if not path.name.startswith("tiny_"):
            assert f"(tutorials/{path.name})" in index, path.name


# -- the messages docs/troubleshooting.md quotes ----------------------------------------------


def _message(error):
    """The exception as Python prints its last line, plus its notes.

    The note that our own frames were dropped from the traceback (the page
    explains it once, in "Tracebacks") is left out of each quote.
    """
    notes = [n for n in getattr(error, "__notes__", ()) if not n.startswith(FILTER_NOTE_START)]
    return "\n".join([f"{type(error).__name__}: {error}", *notes])


FILTER_NOTE_START = "grain: the library's own frames were removed"


def parse_record(record):
    return record["text"].decode()  # records have no "text": a KeyError


def fails_on_5(x):
    if x == 5:
        raise ValueError("bad record 5")
    return x


def dies_on_5(x):
    if x == 5:
        os.kill(os.getpid(), 9)
    return x


def never_returns(x):
    time.sleep(3600)


class Jitter(pygrain.RandomMapTransform):
    def random_map(self, element, rng):
        return element + rng.random()


def double(x):
    return 2 * x


def inner(n):
    # A pipeline with workers, iterated inside a worker: it cannot start them.
    options = grain.MultiprocessingOptions(num_workers=2)
    return sum(grain.MapDataset.range(n).to_iter_dataset().mp_prefetch(options))


def image(i):
    return np.zeros((224, 224, 3), np.uint8)


def limit_file_size(worker_index, worker_count):
    # Segments are files: below 1 MiB, none can be made (SIGXFSZ ignored: EFBIG instead).
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    hard = resource.getrlimit(resource.RLIMIT_FSIZE)[1]
    resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 19, hard))


def add_under(lock, x):
    with lock:
        return x + 1


def make_pipeline():
    # A lock: fork copies it, spawn would have to pickle it.
    return grain.MapDataset.range(3).map(functools.partial(add_under, threading.Lock()))


def _messages(tmp_path, monkeypatch):
    """(what the page shows, the message) for every quoted error, in page order."""
    out = []

    def expect(kind, call, edit=lambda message: message):
        with pytest.raises(kind) as caught:
            call()
        out.append(edit(_message(caught.value)))

    expect(ValueError, lambda: grain.MapDataset.range(10).shuffle())
    expect(TypeError, lambda: grain.MapDataset.source(x for x in range(3)))
    expect(AttributeError, lambda: grain.MapDataset.range(10).mp_prefetch())
    expect(AttributeError, lambda: grain.MapDataset.range(10).to_iter_dataset().shuffle(seed=0))
    options = grain.MultiprocessingOptions(num_workers=2)
    expect(
        ValueError,
        lambda: (
            grain.MapDataset.range(10)
            .to_iter_dataset()
            .mp_prefetch(options)
            .map(double)
            .mp_prefetch(options)
        ),
    )
    expect(KeyError, lambda: next(iter(grain.MapDataset.source([{"id": 1}]).map(parse_record))))
    expect(ValueError, lambda: grain.MapDataset.source([np.zeros(2), np.zeros(3)]).batch(2)[0])
    with pytest.warns(UserWarning, match="filter_warn_threshold_ratio") as warned:
        list(grain.MapDataset.range(1000).filter(lambda x: x == 0).to_iter_dataset())
    out.append(f"UserWarning: {warned[0].message}")
    with pytest.warns(UserWarning, match="dropped 50 of 50") as warned:
        list(grain.MapDataset.source([None] * 50).to_iter_dataset())
    out.append(f"UserWarning: {warned[0].message}")
    expect(TypeError, lambda: pygrain.InMemoryDataSource([{"id": 1}]))

    with monkeypatch.context() as patch:
        patch.setenv("GRAIN_MP_START_METHOD", "spawn")
        expect(TypeError, lambda: make_pipeline().to_iter_dataset().mp_prefetch(options))
    ds = grain.MapDataset.range(10)
    expect(
        ValueError,
        lambda: list(ds.map(fails_on_5).to_iter_dataset().mp_prefetch(options)),
        # The worker's traceback follows; it names this machine's paths.
        edit=lambda message: message.split("where it raised:")[0] + "where it raised:",
    )
    expect(RuntimeError, lambda: list(ds.map(dies_on_5).to_iter_dataset().mp_prefetch(options)))
    expect(
        RuntimeError,
        lambda: list(ds.map(inner).to_iter_dataset().mp_prefetch(options)),
        edit=lambda message: message.split("where it raised:")[0] + "where it raised:",
    )
    images = grain.MapDataset.range(4).map(image).to_iter_dataset()
    with pytest.warns(RuntimeWarning, match="Not enough shared memory") as warned:
        list(images.mp_prefetch(options, worker_init_fn=limit_file_size))
    out.append(re.sub(r"'grain_\w+'", "'<name>'", f"RuntimeWarning: {warned[0].message}"))

    def closed_while_waiting():
        it = iter(ds.map(never_returns).to_iter_dataset().mp_prefetch(options))
        closer = threading.Timer(0.5, it.close)  # a watchdog
        closer.start()
        try:
            next(it)
        finally:
            closer.join()

    expect(ValueError, closed_while_waiting)

    def other_seed_state():
        it = iter(grain.MapDataset.range(10).shuffle(seed=1).to_iter_dataset())
        next(it)
        asyncio.run(it.save(tmp_path / "seed_ckpt"))
        other = grain.MapDataset.range(10).shuffle(seed=2).to_iter_dataset()
        asyncio.run(iter(other).load(tmp_path / "seed_ckpt"))

    expect(ValueError, other_seed_state, lambda message: message.replace(str(tmp_path), "..."))

    def worker_state():
        # Sequential slices: a pipeline whose workers own their slices (not positional).
        ds = grain.MapDataset.range(10).to_iter_dataset()
        with iter(ds.mp_prefetch(options, sequential_slice=True)) as it:
            next(it)
            state = it.get_state()
        one = grain.MultiprocessingOptions(num_workers=1)
        iter(ds.mp_prefetch(one, sequential_slice=True)).set_state(state)

    expect(ValueError, worker_state)

    def loader(seed):
        sampler = pygrain.IndexSampler(
            10, pygrain.NoSharding(), shuffle=True, num_epochs=1, seed=seed
        )
        return pygrain.DataLoader(data_source=list(range(10)), sampler=sampler)

    def loader_state():
        it = iter(loader(seed=0))
        next(it)
        iter(loader(seed=1)).set_state(it.get_state())

    expect(ValueError, loader_state)

    def process_count():
        directory = tmp_path / "ckpt"
        directory.mkdir()
        it = iter(grain.MapDataset.range(10).to_iter_dataset())
        asyncio.run(it.save(directory))
        (directory / "process_0-of-1.json").rename(directory / "process_0-of-4.json")
        asyncio.run(it.load(directory))

    expect(
        ValueError,
        process_count,
        edit=lambda message: message.replace(str(tmp_path / "ckpt"), "/ckpt/1000/default"),
    )

    expect(FileNotFoundError, lambda: grain.sources.ArrayRecordDataSource("/data/train@4"))
    expect(FileNotFoundError, lambda: grain.sources.ArrayRecordDataSource("/data/train-*"))
    broken = tmp_path / "part-0.array_record"
    grain_sources.write_array_record([b"x" * 100] * 10, str(broken))
    broken.write_bytes(broken.read_bytes()[:100])
    expect(
        ValueError,
        lambda: grain.sources.ArrayRecordDataSource(str(broken)),
        edit=lambda message: message.replace(str(broken), "/data/part-0.array_record"),
    )

    no_sharding = pygrain.NoSharding()
    expect(  # a callable is an operation (as in Grain): it fails when iterated
        TypeError,
        lambda: list(
            pygrain.DataLoader(
                data_source=[1, 2, 3],
                sampler=pygrain.IndexSampler(3, no_sharding, num_epochs=1),
                operations=[double],
            )
        ),
    )
    expect(
        ValueError,
        lambda: pygrain.DataLoader(
            data_source=[1, 2, 3],
            sampler=pygrain.IndexSampler(3, no_sharding, num_epochs=1),
            operations=[Jitter()],
        ),
    )
    expect(TypeError, lambda: grain.experimental.device_put(grain.MapDataset.range(3), None))
    expect(ValueError, lambda: grain.experimental.make_global_batch({"image": np.zeros((6, 2))}))
    return [re.sub(r" at 0x[0-9a-f]+>", " at 0x...>", message) for message in out]


@pytest.mark.timeout(120)
def test_troubleshooting_quotes_real_messages(tmp_path, monkeypatch):
    import jax

    assert jax.device_count() == 8, "the page quotes make_global_batch with 8 devices"
    # The page quotes worker processes' messages (threads on free-threaded Python differ).
    monkeypatch.setenv("GRAIN_PY_WORKER_EXECUTOR", "processes")
    page = _counts_elided((DOCS / "troubleshooting.md").read_text())
    missing = [m for m in map(_counts_elided, _messages(tmp_path, monkeypatch)) if m not in page]
    assert not missing, "\n\n".join(missing)


def _counts_elided(text):
    """The filter warning's counts as N, M, P: with threads they depend on when a chunk ended."""
    return re.sub(r"dropped \d+ of \d+ elements \([\d.]+%\)", "dropped N of M elements (P%)", text)


def test_troubleshooting_quotes_the_shared_memory_message():
    # /dev/shm cannot be filled in a test: the page quotes the source's template.
    source = (ROOT / "packages/grain-mp/src/grain_mp/_sweep.py").read_text()
    page = (DOCS / "troubleshooting.md").read_text()
    for fragment in [
        "is full. Enlarge it (e.g. docker run --shm-size=8g), ",
        "use fewer workers or smaller prefetch buffers, or remove stale ",
    ]:
        assert fragment in source
        assert fragment.strip() in page
