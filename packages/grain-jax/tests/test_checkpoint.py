"""The Orbax handler for data iterators, through a real `ocp.CheckpointManager`.

Covered: the advanced tutorial's flow (save at step k, restore into a fresh
iterator, identical continuation); the state captured at `save()` with async
checkpointing; a Composite of jax parameters and the iterator, and a partial
restore of the iterator alone; DataLoader iterators (JSON-bytes state) with and
without worker processes; a pipeline with `mp_prefetch` workers; the errors for
another pipeline, another process count and a wrong item; `max_to_keep`; and
interoperation with `DatasetIterator.save/load` (same file) and Orbax's v1
checkpointables API (which calls those methods).
"""

import asyncio
import json
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

# Before grain_jax._checkpoint, which needs orbax too.
ocp = pytest.importorskip(
    "orbax.checkpoint", reason="orbax-checkpoint needs tensorstore (no free-threaded wheel)"
)

from grain_dataset import Batch, MapDataset, MapTransform, without_fingerprint  # noqa: E402
from grain_index import IndexSampler, NoSharding  # noqa: E402
from grain_jax import _checkpoint  # noqa: E402
from grain_jax._checkpoint import (  # noqa: E402
    CheckpointHandler,
    CheckpointRestore,
    CheckpointSave,
)
from grain_mp import DataLoader, MultiprocessingOptions  # noqa: E402

# Orbax runs its save/restore work on threads; workers are processes.
pytestmark = pytest.mark.timeout(120)


def pipeline(n=60, batch=4):
    return (
        MapDataset.range(n)
        .shuffle(seed=7)
        .map(lambda x: x * 3)
        .batch(batch, drop_remainder=True)
        .to_iter_dataset()
    )


def take(iterator, count):
    return [np.asarray(next(iterator)).tolist() for _ in range(count)]


def manager(path, **options):
    return ocp.CheckpointManager(path, options=ocp.CheckpointManagerOptions(**options))


def files(root):
    """Relative paths of the files under `root` (pathlib: epath has no recursive glob)."""
    root = pathlib.Path(root)
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def test_tutorial_flow_save_at_step_k_and_continue_exactly(tmp_path):
    uninterrupted = take(iter(pipeline()), 12)

    it = iter(pipeline())
    with manager(tmp_path / "ckpt") as mngr:
        for step in range(5):
            next(it)
            mngr.save(step, args=CheckpointSave(it))
        mngr.wait_until_finished()
        assert mngr.latest_step() == 4

        fresh = iter(pipeline())
        restored = mngr.restore(mngr.latest_step(), args=CheckpointRestore(fresh))

    assert restored is fresh
    assert take(fresh, 7) == uninterrupted[5:]
    assert "4/default/process_0-of-1.json" in files(tmp_path / "ckpt")
    saved = json.loads((tmp_path / "ckpt/4/default/process_0-of-1.json").read_text())
    # The whole state (the next batch to read, in Grain's shape), under the marker of our
    # format, with the pipeline's fingerprint beside it.
    assert set(saved) == {"grain_py_state_format", "state", "grain_fingerprint"}
    assert saved["state"] == {"next_index": 5}
    assert saved["grain_fingerprint"].endswith("to_iter")


def test_async_save_captures_the_state_at_save_time(tmp_path):
    it = iter(pipeline())
    take(it, 3)
    with manager(tmp_path, enable_async_checkpointing=True) as mngr:
        mngr.save(3, args=CheckpointSave(it))
        expected = take(it, 4)  # Advance while Orbax may still be writing.
        mngr.wait_until_finished()
        fresh = mngr.restore(3, args=CheckpointRestore(iter(pipeline())))
    assert take(fresh, 4) == expected


def test_composite_with_params_and_partial_restore(tmp_path):
    params = {"w": jnp.arange(12.0).reshape(3, 4), "b": jnp.ones(4, dtype=jnp.bfloat16)}
    it = iter(pipeline())
    take(it, 2)
    with manager(tmp_path, enable_async_checkpointing=True, max_to_keep=3) as mngr:
        mngr.save(
            2,
            args=ocp.args.Composite(
                state=ocp.args.StandardSave(params), data_iter=CheckpointSave(it)
            ),
        )
        expected = take(it, 3)
        mngr.wait_until_finished()

        abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, params)
        out = mngr.restore(
            2,
            args=ocp.args.Composite(
                state=ocp.args.StandardRestore(abstract),
                data_iter=CheckpointRestore(iter(pipeline())),
            ),
        )
        assert jax.tree.map(lambda a, b: bool((a == b).all()), out.state, params) == {
            "w": True,
            "b": True,
        }
        assert take(out.data_iter, 3) == expected

        # Only the data iterator, e.g. an evaluation job that needs no parameters.
        partial = mngr.restore(
            2, args=ocp.args.Composite(data_iter=CheckpointRestore(iter(pipeline())))
        )
        assert "state" not in partial
        assert take(partial.data_iter, 3) == expected

    layout = files(tmp_path)
    assert "2/data_iter/process_0-of-1.json" in layout
    assert any(name.startswith("2/state/") for name in layout)


class Square(MapTransform):
    def map(self, element):
        return element * element


def loader(workers):
    return DataLoader(
        data_source=list(range(50)),
        sampler=IndexSampler(
            num_records=50, shard_options=NoSharding(), shuffle=True, num_epochs=1, seed=5
        ),
        operations=[Square(), Batch(batch_size=4, drop_remainder=True)],
        worker_count=workers,
    )


@pytest.mark.parametrize("workers", [0, 2])
def test_data_loader_iterator(tmp_path, workers):
    uninterrupted = take(iter(loader(0)), 12)
    it = iter(loader(workers))
    try:
        take(it, 5)
        with manager(tmp_path, enable_async_checkpointing=True) as mngr:
            mngr.save(5, args=CheckpointSave(it))
            take(it, 2)
            mngr.wait_until_finished()
            # Restored into a loader with another worker count: the state does not depend on it.
            fresh = mngr.restore(5, args=CheckpointRestore(iter(loader(2 - workers))))
        try:
            assert take(fresh, 7) == uninterrupted[5:]
        finally:
            fresh.close()
    finally:
        it.close()
    saved = json.loads((tmp_path / "5/default/process_0-of-1.json").read_bytes())
    # The DataLoader's own JSON, under the marker: Grain's keys say 5 batches of 4 were read,
    # unit u by worker u % n.
    seen = {"0": 19} if workers == 0 else {"0": 19, "1": 15}
    assert saved["state"]["last_seen_indices"] == seen


def test_iterator_with_mp_prefetch_workers(tmp_path):
    def build():
        return pipeline().mp_prefetch(MultiprocessingOptions(num_workers=2))

    uninterrupted = take(iter(pipeline()), 10)
    it = iter(build())
    try:
        take(it, 3)
        with manager(tmp_path, enable_async_checkpointing=True) as mngr:
            mngr.save(3, args=CheckpointSave(it))
            take(it, 2)
            mngr.wait_until_finished()
            fresh = mngr.restore(3, args=CheckpointRestore(iter(build())))
        try:
            assert take(fresh, 7) == uninterrupted[3:]
        finally:
            fresh.close()
    finally:
        it.close()


def test_restore_into_another_pipeline_names_file_and_mismatch(tmp_path):
    with manager(tmp_path) as mngr:
        mngr.save(1, args=CheckpointSave(iter(pipeline())))
        mngr.wait_until_finished()
        other = iter(MapDataset.range(10).to_iter_dataset().map_with_index(lambda i, x: x))
        with pytest.raises(ValueError, match=r"default/process_0-of-1\.json does not fit") as info:
            mngr.restore(1, args=CheckpointRestore(other))
    assert "different pipeline" in str(info.value)


def test_states_of_loaders_and_datasets_do_not_mix(tmp_path):
    with manager(tmp_path) as mngr:
        mngr.save(1, args=CheckpointSave(iter(loader(0))))
        mngr.save(2, args=CheckpointSave(iter(pipeline())))
        mngr.wait_until_finished()
        with pytest.raises(ValueError, match=r"1/default/process_0-of-1\.json does not fit"):
            mngr.restore(1, args=CheckpointRestore(iter(pipeline())))
        with pytest.raises(ValueError, match="not a DataLoader state"):
            mngr.restore(2, args=CheckpointRestore(iter(loader(0))))


def test_restore_with_another_process_count(tmp_path, monkeypatch):
    # Write as process 0 of 2 would; this single-process run is then "0 of 1".
    monkeypatch.setattr(_checkpoint, "_process", lambda: (0, 2))
    with manager(tmp_path) as mngr:
        mngr.save(1, args=CheckpointSave(iter(pipeline())))
        mngr.wait_until_finished()
    monkeypatch.undo()
    with manager(tmp_path) as mngr:
        assert files(tmp_path / "1/default") == ["commit_success.txt", "process_0-of-2.json"]
        with pytest.raises(ValueError, match="written by 2 processes, this run has 1"):
            mngr.restore(1, args=CheckpointRestore(iter(pipeline())))


def test_max_to_keep(tmp_path):
    it = iter(pipeline())
    with manager(tmp_path, max_to_keep=2, enable_async_checkpointing=True) as mngr:
        for step in range(1, 6):
            next(it)
            mngr.save(step, args=CheckpointSave(it))
        mngr.wait_until_finished()
        assert mngr.all_steps() == [4, 5]
        fresh = mngr.restore(4, args=CheckpointRestore(iter(pipeline())))
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_dir()) == ["4", "5"]
    assert without_fingerprint(fresh.get_state()) == {"next_index": 4}


def test_handler_and_dataset_iterator_save_share_the_file(tmp_path):
    it = iter(pipeline())
    take(it, 2)
    asyncio.run(it.save(tmp_path / "direct"))
    handler = CheckpointHandler()
    fresh = handler.restore(tmp_path / "direct", args=CheckpointRestore(iter(pipeline())))
    assert fresh.get_state() == it.get_state()

    (tmp_path / "by_handler").mkdir()
    handler.save(tmp_path / "by_handler", args=CheckpointSave(it))
    again = iter(pipeline())
    asyncio.run(again.load(tmp_path / "by_handler"))
    assert again.get_state() == it.get_state()
    assert handler.metadata(tmp_path / "by_handler") is None


def test_handler_refuses_what_is_not_an_iterator(tmp_path):
    handler = CheckpointHandler()
    with pytest.raises(TypeError, match="get_state\\(\\) and set_state\\(\\)"):
        handler.save(tmp_path, args=CheckpointSave({"w": np.zeros(3)}))
    with pytest.raises(ValueError, match="needs the iterator"):
        handler.restore(tmp_path)


def test_orbax_v1_checkpointables_use_save_and_load(tmp_path):
    """Orbax's v1 API recognizes a DatasetIterator by its save/load coroutines."""
    ocp_v1 = pytest.importorskip("orbax.checkpoint.experimental.v1")
    it = iter(pipeline())
    take(it, 4)
    ocp_v1.save_checkpointables(tmp_path / "v1", {"dataset": it})
    expected = take(it, 2)
    fresh = iter(pipeline())
    ocp_v1.load_checkpointables(tmp_path / "v1", {"dataset": fresh})
    assert take(fresh, 2) == expected
    assert "dataset/process_0-of-1.json" in files(tmp_path / "v1")


def test_a_checkpoint_of_the_same_shape_but_another_seed_is_refused(tmp_path):
    """The state alone ({"next_index": k}, Grain's shape) fits both; the file's fingerprint
    tells the pipelines apart."""

    def seeded(seed):
        return MapDataset.range(60).shuffle(seed=seed).batch(4).to_iter_dataset()

    it = iter(seeded(7))
    take(it, 3)
    with manager(tmp_path) as mngr:
        mngr.save(3, args=CheckpointSave(it))
        mngr.wait_until_finished()
        other = iter(seeded(8))
        with pytest.raises(ValueError, match=r"different pipeline: stage 2 .*shuffle") as info:
            mngr.restore(3, args=CheckpointRestore(other))
        assert "process_0-of-1.json" in str(info.value)
        same = mngr.restore(3, args=CheckpointRestore(iter(seeded(7))))
    assert it.get_state() == same.get_state() == {"next_index": 3}
    assert take(same, 2) == take(it, 2)


def test_a_bare_grain_state_restores_where_the_order_is_grains_and_is_refused_elsewhere(
    tmp_path,
):
    """Google's Grain writes the bare state, without our marker: it means the same element
    here when no stage orders differently (no shuffle, seed or mixture)."""
    directory = tmp_path / "grain"
    directory.mkdir()
    (directory / "process_0-of-1.json").write_text(json.dumps({"next_index": 4}))
    plain = iter(MapDataset.range(20).map(lambda x: x * 2).batch(2).to_iter_dataset())
    CheckpointHandler().restore(directory, args=CheckpointRestore(plain))
    assert take(plain, 2) == [[16, 18], [20, 22]]
    shuffled = iter(MapDataset.range(20).shuffle(seed=1).to_iter_dataset())
    with pytest.raises(ValueError, match="different element order in Grain"):
        CheckpointHandler().restore(directory, args=CheckpointRestore(shuffled))
