"""The DataLoader guide's calls, through `import grain.python as grain`.

TFDS, OpenCV and Orbax are left out: a small list-of-dicts source stands in for
``tfds.data_source("imagenet_a")``, numpy cropping for cv2, and a JSON file for
the Orbax checkpoint (what GrainCheckpointSave writes is ``get_state()``).
"""

import json
import multiprocessing
import time

import numpy as np
import pytest

import grain.python as grain


class ImageSource:
    """Stands in for the guide's TFDS source: records with an image, a file name, a label."""

    def __init__(self, n=12):
        self._n = n

    def __len__(self):
        return self._n

    def __getitem__(self, index):
        if not 0 <= index < self._n:
            raise IndexError(index)
        return {
            "image": np.full((300, 260, 3), index % 256, dtype=np.uint8),
            "file_name": f"image_{index:03d}.jpg",
            "label": index % 5,
        }

    def __repr__(self):
        return f"ImageSource(n={self._n})"


class ResizeAndCrop(grain.MapTransform):
    def map(self, element):
        image = element["image"]
        image = image[:256, :256]  # the guide resizes with cv2 first
        image = image[:224, :224]
        element["image"] = image
        return element


def _index_sampler():
    return grain.IndexSampler(
        num_records=5,
        num_epochs=2,
        shard_options=grain.ShardOptions(shard_index=0, shard_count=1, drop_remainder=True),
        shuffle=True,
        seed=0,
    )


def _no_children_left():
    deadline = time.monotonic() + 5
    while multiprocessing.active_children() and time.monotonic() < deadline:
        time.sleep(0.02)
    return not multiprocessing.active_children()


def test_guide_data_loader_with_transformations(capsys):
    index_sampler_example = _index_sampler()
    for record_metadata in index_sampler_example:
        print(record_metadata)
    assert capsys.readouterr().out.count("RecordMetadata(index=") == 10

    source = ImageSource()
    transformations = [ResizeAndCrop()]
    data_loader = grain.DataLoader(
        data_source=source, operations=transformations, sampler=_index_sampler(), worker_count=0
    )
    elements = list(data_loader)
    assert len(elements) == 10
    assert all(element["image"].shape == (224, 224, 3) for element in elements)
    labels = sorted(element["file_name"] for element in elements)
    assert labels == sorted([f"image_{i:03d}.jpg" for i in range(5)] * 2)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("worker_count", [0, 2])
def test_guide_checkpointing_restores_the_iterator(tmp_path, worker_count):
    data_loader = grain.DataLoader(
        data_source=ImageSource(),
        operations=[ResizeAndCrop()],
        sampler=_index_sampler(),
        worker_count=worker_count,
    )
    data_iter = iter(data_loader)
    num_steps = 5
    for _ in range(num_steps):
        next(data_iter)

    # What GrainCheckpointSave(data_iter) stores, and `!cat` shows.
    checkpoint = tmp_path / "5" / "default" / "process_0-of-1.json"
    checkpoint.parent.mkdir(parents=True)
    checkpoint.write_bytes(data_iter.get_state())
    saved = json.loads(checkpoint.read_text())
    assert saved["sampler"] == repr(_index_sampler())  # the guide's note: both reprs are kept
    assert saved["data_source"] == "ImageSource(n=12)"

    after = [next(data_iter) for _ in range(5, 10)]
    data_iter.set_state(checkpoint.read_bytes())  # GrainCheckpointRestore(data_iter)
    again = [next(data_iter) for _ in range(5, 10)]
    assert [(x["file_name"], x["label"]) for x in again] == [
        (x["file_name"], x["label"]) for x in after
    ]
    data_iter.close()
    assert _no_children_left()


def test_guide_checkpoint_refuses_another_sampler():
    data_iter = iter(grain.DataLoader(data_source=ImageSource(), sampler=_index_sampler()))
    next(data_iter)
    state = data_iter.get_state()
    other = grain.IndexSampler(
        num_records=5, num_epochs=2, shard_options=grain.NoSharding(), shuffle=True, seed=1
    )
    with pytest.raises(ValueError, match="sampler"):
        iter(grain.DataLoader(data_source=ImageSource(), sampler=other)).set_state(state)


@pytest.mark.timeout(60)
def test_guide_in_memory_data_source_with_five_workers(capsys):
    in_memory_datasource = grain.InMemoryDataSource(range(5))
    print(in_memory_datasource)
    print(f"First Record Read: {in_memory_datasource[0]}")
    data_loader = grain.DataLoader(
        data_source=in_memory_datasource,
        sampler=grain.IndexSampler(
            num_records=len(in_memory_datasource),
            num_epochs=2,
            shard_options=grain.NoSharding(),
            shuffle=True,
            seed=0,
        ),
        worker_count=5,
    )
    data_iter = iter(data_loader)
    out = []
    for _ in range(len(in_memory_datasource) * 2):
        x = next(data_iter)
        print(x)
        out.append(x)
    assert sorted(out[:5]) == sorted(out[5:]) == [0, 1, 2, 3, 4]
    assert "First Record Read: 0" in capsys.readouterr().out
    data_iter.close()
    in_memory_datasource.close()
    assert _no_children_left()


@pytest.mark.timeout(60)
def test_guide_per_worker_read_options():
    source = ImageSource()
    data_loader = grain.DataLoader(
        data_source=source,
        sampler=grain.IndexSampler(
            num_records=len(source),
            num_epochs=2,
            shard_options=grain.NoSharding(),
            shuffle=True,
            seed=0,
        ),
        worker_count=10,
        read_options=grain.ReadOptions(num_threads=8, prefetch_buffer_size=500),
    )
    names = [x["file_name"] for x in data_loader]
    assert sorted(names) == sorted([f"image_{i:03d}.jpg" for i in range(12)] * 2)
    assert _no_children_left()


def test_guide_batch_is_grain_python_batch():
    source = grain.InMemoryDataSource(range(10))
    data_loader = grain.DataLoader(
        data_source=source,
        sampler=grain.IndexSampler(
            num_records=10, shard_options=grain.NoSharding(), shuffle=False, num_epochs=1
        ),
        operations=[grain.Batch(batch_size=4, drop_remainder=False)],
    )
    assert [batch.tolist() for batch in data_loader] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    source.close()
