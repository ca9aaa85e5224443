"""Part 7 of issue 29: grain.config, SharedMemoryArray pickling, ThreadPrefetchDatasetIterator
over any iterator, RngPool pickling and threads, private paths clients import."""

from __future__ import annotations

import contextlib
import gc
import pickle
import subprocess
import sys
import threading

import numpy as np

import grain
from _registry import case, expr

# ------------------------------------------------------------------ grain.config
GRAIN_OPTIONS = (
    "py_dataset_visualization_output_dir",
    "py_debug_mode",
    "py_relay_sigterm_to_main",
    "py_traceback_filtering",
    "tf_interleaved_shuffle",
    "tf_interleaved_shuffle_block_size",
    "tf_interleaved_shuffle_parallel_blocks",
    "tf_lookup_batch_size",
    "tf_lookup_fast_warmup",
    "tf_lookup_num_parallel_calls",
    "tf_optimized_sequential_read",
    "tf_prefetch_buffer_size",
)


@case("misc7.config.every_option_default")
def _():
    return {name: grain.config.get_or_default(name) for name in GRAIN_OPTIONS}


@case("misc7.config.flags_that_are_not_options")
def _():
    out = {}
    for name in (
        "enable_multiprocess_worker_profiling",
        "num_threads_computing_num_records",
        "num_threads_fetching_records",
    ):
        try:
            out[name] = grain.config.get_or_default(name)
        except ValueError as error:
            out[name] = f"ValueError: {error}".split(".")[0]
    return out


expr(
    "misc7.config.visualization_output_dir",
    "grain.config.get_or_default('py_dataset_visualization_output_dir')",
)
expr("misc7.config.get_unknown", "grain.config.get_or_default('py_dataset_debug_mode')")
expr("misc7.config.update_unknown", "grain.config.update('no_such_option', True)")
expr("misc7.config.attribute_unknown", "grain.config.no_such_option")


@case("misc7.config.assign_known_attribute")
def _():
    try:
        grain.config.py_debug_mode = True
    finally:
        after = grain.config.get_or_default("py_debug_mode")
        grain.config.update("py_debug_mode", False)
    return after


@case("misc7.config.assign_unknown_attribute")
def _():
    grain.config.no_such_option = 1


@case("misc7.config.assignment_changes_nothing")
def _():
    with contextlib.suppress(ValueError):
        grain.config.py_debug_mode = True
    return grain.config.get_or_default("py_debug_mode")


@case("misc7.config.update_then_read")
def _():
    grain.config.update("py_debug_mode", True)
    try:
        return [grain.config.get_or_default("py_debug_mode"), grain.config.py_debug_mode]
    finally:
        grain.config.update("py_debug_mode", False)


# ------------------------------------------------------------------ SharedMemoryArray pickle
def _shm(shape, dtype=np.int32):
    return grain.multiprocessing.SharedMemoryArray(shape, dtype=dtype)


def _drop(array):
    array.unlink_on_del()
    del array
    gc.collect()


@case("misc7.shm.pickle_shares_the_segment")
def _():
    a = _shm((2, 3))
    a[:] = np.arange(6).reshape(2, 3)
    b = pickle.loads(pickle.dumps(a))
    try:
        b[0, 0] = 42
        a[1, 2] = -1
        return {
            "type": type(b).__name__,
            "same_metadata": b.metadata == a.metadata,
            "seen_in_original": int(a[0, 0]),
            "seen_in_unpickled": int(b[1, 2]),
            "values": b.tolist(),
        }
    finally:
        del b
        _drop(a)


@case("misc7.shm.pickle_protocols")
def _():
    a = _shm((4,), np.float32)
    a[:] = [1, 2, 3, 4]
    out = {}
    try:
        for protocol in (2, 4, 5):
            b = pickle.loads(pickle.dumps(a, protocol=protocol))
            b[0] += 1
            out[protocol] = [type(b).__name__, float(a[0])]
            del b
        return out
    finally:
        _drop(a)


CHILD = """
import pickle, sys
array = pickle.loads(sys.stdin.buffer.read())
array[1] = 5
print(type(array).__name__, int(array[0]))
"""


@case("misc7.shm.pickle_child_process_writes_through", timeout=90)
def _():
    a = _shm((3,), np.int64)
    a[:] = [7, 0, 0]
    try:
        result = subprocess.run(
            [sys.executable, "-c", CHILD],
            input=pickle.dumps(a),
            capture_output=True,
            timeout=80,
        )
        return {
            "returncode": result.returncode,
            "child_saw": result.stdout.decode().split(),
            "parent_sees": a.tolist(),
        }
    finally:
        _drop(a)


@case("misc7.shm.pickle_after_owner_unlinked")
def _():
    a = _shm((2,))
    data = pickle.dumps(a)
    _drop(a)
    return pickle.loads(data)


# Isolated: upstream's answer depends on what earlier cases in the same process left
# behind (in a shared worker it kept the segment once, alone it removes it).
@case("misc7.shm.unpickled_unlink_on_del_removes_segment", isolated=True)
def _():
    a = _shm((2,))
    metadata = a.metadata
    b = pickle.loads(pickle.dumps(a))
    b.unlink_on_del()
    del b
    gc.collect()
    try:
        grain.multiprocessing.SharedMemoryArray.from_metadata(metadata)
        return "still attachable"
    except FileNotFoundError:
        return "gone"
    finally:
        del a
        gc.collect()


@case("misc7.shm.pickle_a_view")
def _():
    a = _shm((2, 3))
    a[:] = np.arange(6).reshape(2, 3)
    try:
        b = pickle.loads(pickle.dumps(a[1]))
        out = {"type": type(b).__name__, "values": b.tolist()}
        del b
        return out
    finally:
        _drop(a)


@case("misc7.shm.pickle_arithmetic_result")
def _():
    a = _shm((3,))
    a[:] = [1, 2, 3]
    try:
        b = pickle.loads(pickle.dumps(a + 1))
        return [type(b).__name__, b.tolist()]
    finally:
        _drop(a)


# ------------------------------------------------------------------ ThreadPrefetch over any iterator
class _Counter:
    """A plain iterator with get_state/set_state: no grain base class."""

    def __init__(self, stop):
        self.position = 0
        self.stop = stop

    def __next__(self):
        if self.position >= self.stop:
            raise StopIteration
        self.position += 1
        return self.position * 10

    def get_state(self):
        return {"position": self.position}

    def set_state(self, state):
        self.position = state["position"]


def _thread_prefetch(parent, size):
    return grain.experimental.ThreadPrefetchDatasetIterator(parent, size)


def _run_and_restore(size):
    it = _thread_prefetch(_Counter(5), size)
    states, values = [it.get_state()], []
    for value in it:
        values.append(value)
        states.append(it.get_state())
    restored = []
    for state in states:
        fresh = _thread_prefetch(_Counter(5), size)
        fresh.set_state(state)
        restored.append(list(fresh))
        fresh.close()
    it.close()
    return {"values": values, "states": states, "restored": restored}


@case("misc7.thread_prefetch.plain_iterator", timeout=30)
def _():
    return _run_and_restore(3)


@case("misc7.thread_prefetch.plain_iterator_buffer_0", timeout=30)
def _():
    return _run_and_restore(0)


@case("misc7.thread_prefetch.plain_iterator_set_state_midway", timeout=30)
def _():
    it = _thread_prefetch(_Counter(50), 8)
    first = [next(it) for _ in range(3)]
    saved = it.get_state()
    ahead = [next(it) for _ in range(4)]
    it.set_state(saved)
    again = [next(it), next(it)]
    state = it.get_state()
    it.close()
    return {"first": first, "saved": saved, "ahead": ahead, "again": again, "state": state}


@case("misc7.thread_prefetch.plain_iterator_is_not_closed", timeout=30)
def _():
    class Closable(_Counter):
        closed = False

        def close(self):
            self.closed = True

    parent = Closable(3)
    it = _thread_prefetch(parent, 2)
    values = list(it)
    it.close()
    return {"values": values, "parent_closed": parent.closed}


@case("misc7.thread_prefetch.parent_without_get_state")
def _():
    class Bare:
        def __next__(self):
            return 1

    return _thread_prefetch(Bare(), 2)


# ------------------------------------------------------------------ RngPool
def _draw(pool, index, op_seed=0):
    rng = pool.acquire_rng(index, op_seed=op_seed)
    try:
        return rng.integers(0, 2**62, size=4).tolist()
    finally:
        pool.release_rng(rng)


@case("misc7.rng_pool.pickle_roundtrip")
def _():
    pool = grain.experimental.RngPool(7)
    before = [_draw(pool, i, op) for i in range(5) for op in (0, 3)]
    copy = pickle.loads(pickle.dumps(pool))
    after = [_draw(copy, i, op) for i in range(5) for op in (0, 3)]
    return {
        "type": type(copy).__name__,
        "same_draws": after == before,
        "original_still_draws_the_same": [_draw(pool, i, op) for i in range(5) for op in (0, 3)]
        == before,
    }


@case("misc7.rng_pool.pickle_fresh_pool")
def _():
    copy = pickle.loads(pickle.dumps(grain.experimental.RngPool(3)))
    return _draw(copy, 2) == _draw(grain.experimental.RngPool(3), 2)


@case("misc7.rng_pool.threads_reproducible", timeout=30)
def _():
    keys = [(index, op) for index in range(24) for op in (0, 5)]
    expected = {key: _draw(grain.experimental.RngPool(11), *key) for key in keys}
    pool = grain.experimental.RngPool(11)
    results, held, errors = {}, [], []
    start, holding = threading.Barrier(6), threading.Barrier(6)
    lock = threading.Lock()

    def work(worker):
        try:
            start.wait(timeout=20)
            mine = keys[worker::6][:: 1 if worker % 2 else -1]
            rngs = [(key, pool.acquire_rng(key[0], op_seed=key[1])) for key in mine]
            holding.wait(timeout=20)
            with lock:
                held.extend(id(rng) for _, rng in rngs)
            for key, rng in rngs:
                value = rng.integers(0, 2**62, size=4).tolist()
                with lock:
                    results[key] = value
            for _, rng in rngs:
                pool.release_rng(rng)
        except BaseException as error:
            errors.append(repr(error))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=25)
    return {
        "errors": errors,
        "reproducible": results == expected,
        "distinct_generators_held_at_once": len(held) == len(set(held)) == len(keys),
    }


# ------------------------------------------------------------------ private paths of clients
TFRECORD = bytes.fromhex(
    "01000000000000000175de4161786ee428020000000000000078270b3462626397e2a50000000000"
    "00000029039807d8ea82a20300000000000000b099490e636363e5bf1d8e"
)
RECORDS = [b"a", b"bb", b"", b"ccc"]


def _tfrecord_file():
    import os

    from _registry import tmpdir

    path = os.path.join(tmpdir(), "data.tfrecord")
    with open(path, "wb") as file:
        file.write(TFRECORD)
    return path


def _tfrecord_module():
    import importlib

    return importlib.import_module("grain._src.python.dataset.sources.tfrecord_dataset")


def _drain(reader):
    out = []
    while True:
        try:
            out.append(next(reader))
        except StopIteration:
            return out


@case("misc7.paths.tfrecord_reader")
def _():
    reader = _tfrecord_module()._TFRecordReader(_tfrecord_file())
    tells = [reader.tell()]
    records = []
    for _ in RECORDS:
        records.append(next(reader))
        tells.append(reader.tell())
    rest = _drain(reader)
    reader.seek(tells[1])
    again = next(reader)
    return {"records": records, "tells": tells, "rest": rest, "after_seek": again}


@case("misc7.paths.tfrecord_dataset_iterator_state")
def _():
    module = _tfrecord_module()
    path = _tfrecord_file()
    it = module._TFRecordDatasetIterator(path)
    states, values = [it.get_state()], []
    for value in it:
        values.append(value)
        states.append(it.get_state())
    restored = []
    for state in states:
        fresh = module._TFRecordDatasetIterator(path)
        fresh.set_state(state)
        restored.append(list(fresh))
    return {
        "is_dataset_iterator": isinstance(it, grain.DatasetIterator),
        "values": values,
        "states": states,
        "restored": restored,
    }


@case("misc7.paths.tfrecord_maxtext_subclasses")
def _():
    import io

    module = _tfrecord_module()
    blobs = {"gs://bucket/data.tfrecord": TFRECORD}

    class BlobReader(module._TFRecordReader):
        def __init__(self, path):
            self._reader = io.BytesIO(blobs[path])

    class BlobIterator(module._TFRecordDatasetIterator):
        def __init__(self, path):
            grain.DatasetIterator.__init__(self)
            self._reader = BlobReader(path)

    class BlobIterDataset(grain.experimental.TFRecordIterDataset):
        def __iter__(self):
            return BlobIterator(self._path)

    ds = BlobIterDataset("gs://bucket/data.tfrecord")
    it = iter(ds)
    first = next(it)
    state = it.get_state()
    rest = list(it)
    again = iter(ds)
    again.set_state(state)
    return {
        "path_kept": ds._path,
        "first": first,
        "reader_offset": state["reader_offset"],
        "rest": rest,
        "restored": list(again),
        "mapped": list(ds.map(len)),
    }


@case("misc7.paths.even_split")
def _():
    import importlib

    sharding = importlib.import_module("grain._src.core.sharding")
    out = []
    for n, index, count in [(10, 0, 4), (10, 1, 4), (10, 3, 4), (10, 2, 3), (3, 2, 5), (0, 0, 2)]:
        for drop in (False, True):
            options = grain.sharding.ShardOptions(index, count, drop_remainder=drop)
            out.append(list(sharding.even_split(n, options)))
    out.append(list(sharding.even_split(7, grain.sharding.NoSharding())))
    return out


@case("misc7.paths.determine_worker_count")
def _():
    import importlib
    import os

    data_loader = importlib.import_module("grain._src.python.data_loader")
    count = data_loader._determine_worker_count
    return [count(None) == os.cpu_count(), count(3), count(0)]


@case("misc7.paths.same_classes")
def _():
    import importlib

    def module(path):
        return importlib.import_module(path)

    prefetch = module("grain._src.python.dataset.transformations.prefetch")
    dataset = module("grain._src.python.dataset.dataset")
    ipc = module("grain._src.python.ipc.shared_memory_array")
    data_loader = module("grain._src.python.data_loader")
    sharding = module("grain._src.core.sharding")
    tfrecord = _tfrecord_module()
    return {
        "ThreadPrefetchIterDataset": prefetch.ThreadPrefetchIterDataset
        is grain.experimental.ThreadPrefetchIterDataset,
        "ThreadPrefetchDatasetIterator": prefetch.ThreadPrefetchDatasetIterator
        is grain.experimental.ThreadPrefetchDatasetIterator,
        "MapDataset": dataset.MapDataset is grain.MapDataset,
        "IterDataset": dataset.IterDataset is grain.IterDataset,
        "DatasetIterator": dataset.DatasetIterator is grain.DatasetIterator,
        "SharedMemoryArray": ipc.SharedMemoryArray is grain.multiprocessing.SharedMemoryArray,
        "SharedMemoryArrayMetadata": ipc.SharedMemoryArrayMetadata
        is grain.multiprocessing.SharedMemoryArrayMetadata,
        "DataLoader": data_loader.DataLoader is grain.DataLoader,
        "DataLoaderIterator": data_loader.DataLoaderIterator is grain.DataLoaderIterator,
        "ShardOptions": sharding.ShardOptions is grain.sharding.ShardOptions,
        "NoSharding": sharding.NoSharding is grain.sharding.NoSharding,
        "TFRecordIterDataset": tfrecord.TFRecordIterDataset
        is grain.experimental.TFRecordIterDataset,
    }
