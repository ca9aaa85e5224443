"""Grain's private paths that well-known clients import at module level.

Each alias under `grain._src` must import, offer exactly the names the client
uses, and behave as the client uses them: MaxText reads TFRecord files through
`_TFRecordReader` / `_TFRecordDatasetIterator` and subclasses both (to read
GCS); axlearn calls `_determine_worker_count`, `even_split` and checks
`isinstance(ds, MultiprocessPrefetchIterDataset)`. The expected values were
taken from Grain 0.2.18 run as a black box.
"""

import importlib
import io
import os
import pkgutil
from pathlib import Path

import numpy as np
import pytest

import grain
import grain._src
from grain_sources import write_tfrecord

ALIASES = {
    "grain._src.python.shared_memory_array": {"SharedMemoryArray", "SharedMemoryArrayMetadata"},
    "grain._src.python.ipc.shared_memory_array": {
        "SharedMemoryArray",
        "SharedMemoryArrayMetadata",
    },
    "grain._src.python.dataset.sources.tfrecord_dataset": {
        "TFRecordIterDataset",
        "_TFRecordDatasetIterator",
        "_TFRecordReader",
    },
    "grain._src.python.dataset.transformations.prefetch": {
        "MultiprocessPrefetchIterDataset",
        "ThreadPrefetchDatasetIterator",
        "ThreadPrefetchIterDataset",
    },
    "grain._src.python.dataset.dataset": {"DatasetIterator", "IterDataset", "MapDataset"},
    "grain._src.python.data_loader": {
        "DataLoader",
        "DataLoaderIterator",
        "_determine_worker_count",
    },
    "grain._src.core.sharding": {"NoSharding", "ShardByJaxProcess", "ShardOptions", "even_split"},
}

RECORDS = [b"a", b"bb", b"", b"x" * 300, bytes(range(256))]


def test_the_private_tree_holds_exactly_the_aliased_modules():
    found = {
        info.name
        for info in pkgutil.walk_packages(grain._src.__path__, "grain._src.")
        if not info.ispkg
    }
    assert found == set(ALIASES)


@pytest.mark.parametrize("path", sorted(ALIASES))
def test_each_path_imports_and_offers_the_names_clients_use(path):
    module = importlib.import_module(path)
    assert set(module.__all__) == ALIASES[path]
    for name in ALIASES[path]:
        assert getattr(module, name) is not None, name


def test_public_classes_are_the_same_objects():
    from grain._src.core import sharding
    from grain._src.python import data_loader
    from grain._src.python.dataset import dataset
    from grain._src.python.dataset.sources import tfrecord_dataset
    from grain._src.python.dataset.transformations import prefetch
    from grain._src.python.ipc import shared_memory_array

    assert shared_memory_array.SharedMemoryArray is grain.multiprocessing.SharedMemoryArray
    assert (
        shared_memory_array.SharedMemoryArrayMetadata
        is grain.multiprocessing.SharedMemoryArrayMetadata
    )
    assert tfrecord_dataset.TFRecordIterDataset is grain.experimental.TFRecordIterDataset
    assert prefetch.ThreadPrefetchIterDataset is grain.experimental.ThreadPrefetchIterDataset
    assert (
        prefetch.ThreadPrefetchDatasetIterator is grain.experimental.ThreadPrefetchDatasetIterator
    )
    assert dataset.MapDataset is grain.MapDataset
    assert dataset.IterDataset is grain.IterDataset
    assert dataset.DatasetIterator is grain.DatasetIterator
    assert data_loader.DataLoader is grain.DataLoader
    assert data_loader.DataLoaderIterator is grain.DataLoaderIterator
    assert sharding.ShardOptions is grain.sharding.ShardOptions
    assert sharding.NoSharding is grain.sharding.NoSharding
    assert sharding.ShardByJaxProcess is grain.sharding.ShardByJaxProcess


# -- MaxText: _TFRecordReader and _TFRecordDatasetIterator ---------------------------------------


@pytest.fixture
def tfrecord(tmp_path):
    path = tmp_path / "data.tfrecord"
    write_tfrecord(RECORDS, path)
    return str(path)


def drain(reader):
    out = []
    while True:
        try:
            out.append(next(reader))
        except StopIteration:
            return out


def test_tfrecord_reader_reads_a_real_file_as_maxtext_does(tfrecord):
    from grain._src.python.dataset.sources.tfrecord_dataset import _TFRecordReader

    reader = _TFRecordReader(tfrecord)
    assert reader.tell() == 0
    assert next(reader) == b"a"
    after_first = reader.tell()
    assert after_first == 8 + 4 + 1 + 4  # length, its checksum, the data, its checksum
    assert drain(reader) == RECORDS[1:]
    assert reader.tell() == os.path.getsize(tfrecord)
    with pytest.raises(StopIteration):
        next(reader)  # the end stays the end
    reader.seek(after_first)
    assert next(reader) == b"bb"
    reader.seek(0)
    assert drain(reader) == RECORDS
    stream = reader._reader
    del reader
    assert stream.closed  # the reader closes the file it opened


def test_tfrecord_reader_refuses_damaged_records_at_their_offset(tfrecord, tmp_path):
    from grain._src.python.dataset.sources.tfrecord_dataset import _TFRecordReader

    data = bytearray(Path(tfrecord).read_bytes())
    data[-1] ^= 0xFF  # the data checksum of the last record
    damaged = tmp_path / "damaged.tfrecord"
    damaged.write_bytes(bytes(data))
    reader = _TFRecordReader(damaged)
    assert [next(reader) for _ in range(4)] == RECORDS[:4]
    at = reader.tell()
    with pytest.raises(ValueError, match=f"byte offset {at} has a wrong data checksum"):
        next(reader)
    assert reader.tell() == at  # nothing skipped
    truncated = tmp_path / "truncated.tfrecord"
    truncated.write_bytes(Path(tfrecord).read_bytes()[:-3])
    with pytest.raises(ValueError, match="truncated TFRecord"):
        drain(_TFRecordReader(truncated))
    with pytest.raises(FileNotFoundError):
        _TFRecordReader(tmp_path / "missing.tfrecord")
    with pytest.raises(TypeError, match="`path` must be a str"):
        _TFRecordReader(5)


def test_tfrecord_dataset_iterator_state_is_graines_reader_offset(tfrecord):
    from grain._src.python.dataset.sources.tfrecord_dataset import _TFRecordDatasetIterator

    it = _TFRecordDatasetIterator(tfrecord)
    assert isinstance(it, grain.DatasetIterator)
    states, values = [it.get_state()], []
    for value in it:
        values.append(value)
        states.append(it.get_state())
    assert values == RECORDS
    assert states[0] == {"reader_offset": 0}
    assert states[-1] == {"reader_offset": os.path.getsize(tfrecord)}
    for k, state in enumerate(states):
        fresh = _TFRecordDatasetIterator(tfrecord)
        fresh.set_state(state)
        assert list(fresh) == RECORDS[k:]
    for bad in ({"offset": 0}, {"reader_offset": -1}, {"reader_offset": "0"}, [0]):
        with pytest.raises(ValueError, match=r"\{'reader_offset': n\} with an int n >= 0"):
            it.set_state(bad)


def test_maxtexts_gcs_subclasses_work_over_any_stream(tfrecord):
    # MaxText's pattern: the reader skips __init__ and sets `_reader` to its own stream
    # (a GCS blob reader there; an in-memory copy here); the iterator calls
    # DatasetIterator.__init__ and sets `_reader`; the dataset reads `self._path`.
    from grain._src.python.dataset.sources.tfrecord_dataset import (
        _TFRecordDatasetIterator,
        _TFRecordReader,
    )

    blobs = {"gs://bucket/data.tfrecord": Path(tfrecord).read_bytes()}

    class BlobReader(_TFRecordReader):
        def __init__(self, path):
            self._reader = io.BytesIO(blobs[path])

    class BlobIterator(_TFRecordDatasetIterator):
        def __init__(self, path):
            grain.DatasetIterator.__init__(self)
            self._reader = BlobReader(path)

    class BlobIterDataset(grain.experimental.TFRecordIterDataset):
        def __iter__(self):
            return BlobIterator(self._path)

    ds = BlobIterDataset("gs://bucket/data.tfrecord")  # no request to GCS here
    assert ds._path == "gs://bucket/data.tfrecord"
    assert list(ds.map(len)) == [len(r) for r in RECORDS]
    it = iter(ds)
    assert next(it) == b"a"
    saved = it.get_state()
    assert saved["reader_offset"] == 17
    rest = list(it)
    again = iter(ds)
    again.set_state(saved)
    assert list(again) == rest == RECORDS[1:]


# -- axlearn and others: sharding, worker count, prefetch --------------------------------------


@pytest.mark.parametrize(
    ("n", "index", "count", "drop", "expected"),
    [
        (10, 0, 4, False, (0, 3)),
        (10, 1, 4, False, (3, 6)),
        (10, 3, 4, False, (8, 10)),
        (10, 0, 4, True, (0, 2)),
        (10, 3, 4, True, (6, 8)),
        (10, 2, 3, False, (7, 10)),
        (3, 2, 5, False, (2, 3)),
        (3, 2, 5, True, (0, 0)),
        (0, 0, 2, False, (0, 0)),
    ],
)
def test_even_split_gives_graines_ranges(n, index, count, drop, expected):
    from grain._src.core.sharding import ShardOptions, even_split

    options = ShardOptions(shard_index=index, shard_count=count, drop_remainder=drop)
    assert even_split(n, options) == expected
    assert even_split(num_examples=n, options=options) == expected


def test_even_split_covers_every_record_once():
    from grain._src.core.sharding import NoSharding, ShardOptions, even_split

    assert even_split(10, NoSharding()) == (0, 10)
    for n in (0, 1, 7, 100):
        for count in (1, 3, 8):
            bounds = [even_split(n, ShardOptions(i, count)) for i in range(count)]
            covered = np.concatenate([np.arange(start, end) for start, end in bounds])
            assert covered.tolist() == list(range(n))


def test_determine_worker_count():
    from grain._src.python.data_loader import _determine_worker_count

    assert _determine_worker_count(None) == (os.cpu_count() or 1)
    assert _determine_worker_count(3) == 3
    assert _determine_worker_count(0) == 0
    with pytest.raises(ValueError, match="worker_count"):
        _determine_worker_count(-1)


@pytest.mark.timeout(60)
def test_mp_prefetch_gives_a_multiprocess_prefetch_iter_dataset():
    from grain._src.python.dataset.transformations.prefetch import (
        MultiprocessPrefetchIterDataset,
    )

    ds = grain.MapDataset.range(4).to_iter_dataset()
    assert not isinstance(ds, MultiprocessPrefetchIterDataset)
    prefetched = ds.mp_prefetch(grain.MultiprocessingOptions(num_workers=1))
    assert isinstance(prefetched, MultiprocessPrefetchIterDataset)
    with iter(prefetched) as it:
        assert list(it) == [0, 1, 2, 3]
