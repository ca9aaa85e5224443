"""DatasetIterator.save / load: the coroutines Orbax awaits, and their JSON file per process.

Covered: a round trip through `asyncio.run`; the state is the one of the
moment `save()` is called, not of when its coroutine runs; the file name comes
from jax's process index only when jax is already imported; a directory
awaiting creation is awaited first; Orbax's two-phase protocol (the awaited
save returns an awaitable); and the errors for another process count, another
pipeline, a missing file and a state that is not JSON.
"""

import asyncio
import json
import sys
import types

import pytest

from grain_dataset import DatasetIterator, MapDataset
from grain_dataset._runtime._state_file import state_file_name


def pipeline():
    return MapDataset.range(40).shuffle(seed=3).map(lambda x: x * 10).batch(3).to_iter_dataset()


def rows(iterator, count):
    return [next(iterator).tolist() for _ in range(count)]


@pytest.fixture
def no_jax(monkeypatch):
    """This process as one without jax imported: files are process_0-of-1."""
    monkeypatch.delitem(sys.modules, "jax", raising=False)


def fake_jax(monkeypatch, index, count):
    jax = types.SimpleNamespace(process_index=lambda: index, process_count=lambda: count)
    monkeypatch.setitem(sys.modules, "jax", jax)


def test_round_trip_continues_exactly(tmp_path, no_jax):
    it = iter(pipeline())
    rows(it, 4)
    asyncio.run(it.save(tmp_path))
    expected = rows(it, 5)

    fresh = iter(pipeline())
    asyncio.run(fresh.load(tmp_path))

    assert rows(fresh, 5) == expected
    saved = json.loads((tmp_path / "process_0-of-1.json").read_text())
    assert saved["grain_py_state_format"] == 1
    # Grain's state, and beside it (not in it) the pipeline's fingerprint.
    assert set(saved) == {"grain_py_state_format", "state", "grain_fingerprint"}
    assert saved["state"] == {"next_index": 4}
    assert "shuffle" in saved["grain_fingerprint"]


def test_state_is_taken_when_save_is_called(tmp_path, no_jax):
    it = iter(pipeline())
    rows(it, 2)
    coroutine = it.save(tmp_path)  # Nothing is written yet, but the state is taken.
    expected = rows(it, 3)  # Advancing now must not change the checkpoint.
    asyncio.run(coroutine)

    fresh = iter(pipeline())
    asyncio.run(fresh.load(tmp_path))
    assert rows(fresh, 3) == expected


def test_save_creates_a_missing_directory(tmp_path, no_jax):
    it = iter(pipeline())
    asyncio.run(it.save(tmp_path / "a" / "b"))
    assert (tmp_path / "a" / "b" / "process_0-of-1.json").exists()


def test_file_is_named_after_the_jax_process(tmp_path, monkeypatch):
    fake_jax(monkeypatch, index=1, count=3)
    it = iter(pipeline())
    next(it)
    asyncio.run(it.save(tmp_path))
    assert [p.name for p in tmp_path.iterdir()] == ["process_1-of-3.json"]

    fresh = iter(pipeline())
    asyncio.run(fresh.load(tmp_path))
    assert fresh.get_state() == it.get_state()


def test_path_awaiting_creation_is_awaited_before_writing(tmp_path, no_jax):
    target = tmp_path / "being_created"
    events = []

    class PathAwaitingCreation:
        async def await_creation(self):
            events.append(("created", target.exists()))
            target.mkdir()
            return target

    asyncio.run(iter(pipeline()).save(PathAwaitingCreation()))
    assert events == [("created", False)]
    saved = json.loads((target / "process_0-of-1.json").read_text())
    assert saved["grain_py_state_format"] == 1
    # Grain's state, and beside it (not in it) the pipeline's fingerprint.
    assert set(saved) == {"grain_py_state_format", "state", "grain_fingerprint"}
    assert saved["state"] == {"next_index": 0}
    assert "shuffle" in saved["grain_fingerprint"]


def test_two_phase_protocol_of_orbax(tmp_path, no_jax):
    """Orbax awaits save() for the blocking part, then awaits what it returned."""
    it = iter(pipeline())
    rows(it, 3)

    async def orbax_like():
        background = await it.save(tmp_path)
        await background
        fresh = iter(pipeline())
        background = await fresh.load(tmp_path)
        await background
        return fresh

    fresh = asyncio.run(orbax_like())
    assert fresh.get_state() == it.get_state()


def test_load_from_another_process_count_names_the_mismatch(tmp_path, monkeypatch):
    fake_jax(monkeypatch, index=0, count=2)
    asyncio.run(iter(pipeline()).save(tmp_path))
    fake_jax(monkeypatch, index=0, count=1)
    with pytest.raises(ValueError, match="written by 2 processes, this run has 1"):
        asyncio.run(iter(pipeline()).load(tmp_path))


def test_load_into_another_pipeline_names_the_file(tmp_path, no_jax):
    asyncio.run(iter(pipeline()).save(tmp_path))
    other = MapDataset.range(10).to_iter_dataset().map_with_index(lambda i, x: x)
    with pytest.raises(ValueError, match=r"process_0-of-1\.json does not fit") as info:
        asyncio.run(iter(other).load(tmp_path))
    assert "different pipeline" in str(info.value)  # The check's own explanation is kept.


def test_load_without_a_state_file(tmp_path, no_jax):
    with pytest.raises(FileNotFoundError, match=r"no iterator state process_0-of-1\.json"):
        asyncio.run(iter(pipeline()).load(tmp_path))


# What Grain 0.2.18's checkpoint handler writes: the bare state, under the same file name.
GRAIN_FILES = {
    "dataset iterator": '{\n    "next_index": 2\n}',
    "mix": '{"parents": [{"next_index": 1}, {"next_index": 0}], "index": 1, "stop": false}',
    "DataLoader": json.dumps(
        {
            "version": 2,
            "last_seen_indices": {"0": 0},
            "last_worker_index": -1,
            "worker_count": 0,
            "sampler": "IndexSampler(num_records=10, shard_options=NoSharding(shard_index=0, "
            "shard_count=1, drop_remainder=False), shuffle=True, num_epochs=1, seed=1)",
            "data_source": "RangeDataSource(start=0, stop=10, step=1)",
        },
        indent=4,
    ),
}


@pytest.mark.parametrize("text", GRAIN_FILES.values(), ids=GRAIN_FILES.keys())
def test_a_checkpoint_written_by_grain_is_refused_with_the_reason(tmp_path, no_jax, text):
    (tmp_path / "process_0-of-1.json").write_text(text)
    fresh = iter(pipeline())
    with pytest.raises(ValueError, match="Google's Grain") as info:
        asyncio.run(fresh.load(tmp_path))
    assert "different element order" in str(info.value)
    assert rows(fresh, 2) == rows(iter(pipeline()), 2), "a refused load moved the iterator"


def test_a_checkpoint_of_a_newer_format_is_refused(tmp_path, no_jax):
    newer = {"grain_py_state_format": 2, "state": {"next_index": 1}}
    (tmp_path / "process_0-of-1.json").write_text(json.dumps(newer))
    with pytest.raises(ValueError, match="format 2"):
        asyncio.run(iter(pipeline()).load(tmp_path))


def test_load_of_corrupt_json(tmp_path, no_jax):
    (tmp_path / "process_0-of-1.json").write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        asyncio.run(iter(pipeline()).load(tmp_path))


class Opaque(DatasetIterator):
    def __next__(self):
        raise StopIteration

    def get_state(self):
        return {"position": object()}

    def set_state(self, state):
        pass


def test_state_that_is_not_json_is_refused_at_save(tmp_path):
    with pytest.raises(TypeError, match="Opaque is not JSON-serializable"):
        Opaque().save(tmp_path)


def test_file_name_checks_the_index():
    assert state_file_name(2, 4) == "process_2-of-4.json"
    with pytest.raises(ValueError, match="process_index"):
        state_file_name(4, 4)
