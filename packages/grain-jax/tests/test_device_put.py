"""device_put: batches become jax.Arrays on a device or sharding, transferred ahead.

What must hold: every batch arrives, in order, as the same PyTree of
`jax.Array`s with the requested placement and the input's values; the state
counts batches delivered, never those read or transferred ahead, so a fresh
iterator restored from it continues exactly; errors of the parent arrive at
their position with their own type; closing, dropping or breaking out of a
loop leaves no thread behind, and nothing is printed at interpreter exit.

Written against `jax.devices()`, so the same tests run on CPU (the root
conftest asks for 8 host devices) and on an accelerator; the tests that need 8
devices skip with fewer.
"""

import gc
import json
import os
import subprocess
import sys
import textwrap
import threading
import time

import jax
import numpy as np
import pytest
from jax.sharding import Mesh, NamedSharding, PartitionSpec

import grain_dataset as gd
from grain_dataset import assert_equal_output_after_checkpoint
from grain_jax._device_put import (
    DevicePutDatasetIterator,
    DevicePutIterDataset,
    _process_local_put,
    device_put,
)

BATCH = 16  # divisible by 8 devices


def _batch(i):
    """A nested PyTree batch whose values say its index."""
    return {
        "image": np.full((BATCH, 4, 3), i, dtype=np.uint8),
        "label": np.arange(BATCH, dtype=np.int32) + 100 * i,
        "meta": (np.full((BATCH,), i, dtype=np.float32), [np.full((BATCH, 2), -i, np.int64)]),
    }


def _batches(n=12):
    return gd.MapDataset.range(n).map(_batch).to_iter_dataset()


def _data_sharding(n=None):
    devices = jax.devices()
    if n is not None:
        if len(devices) < n:
            pytest.skip(f"needs {n} devices, found {len(devices)}")
        devices = devices[:n]
    mesh = Mesh(np.array(devices), axis_names=("data",))
    return NamedSharding(mesh, PartitionSpec("data"))


def _to_numpy(tree):
    return jax.tree.map(np.asarray, tree)


def _assert_tree_equal(got, want):
    assert jax.tree.structure(got) == jax.tree.structure(want)
    for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        assert isinstance(g, jax.Array)
        np.testing.assert_array_equal(np.asarray(g), w)
        assert g.dtype == w.dtype  # int64 leaves become int32 unless x64 is on
    return got


def _new_threads(before, timeout=5.0):
    """Threads started since `before` that are still alive after `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        extra = [t for t in threading.enumerate() if t not in before and t.is_alive()]
        if not extra or time.monotonic() > deadline:
            return extra
        time.sleep(0.01)


def _fix_dtype(tree):
    """The input as jax stores it (int64 -> int32 without jax_enable_x64)."""
    return jax.tree.map(lambda x: np.asarray(x, dtype=jax.dtypes.canonicalize_dtype(x.dtype)), tree)


# -- placement -----------------------------------------------------------------------


@pytest.mark.timeout(60)
def test_named_sharding_over_eight_devices():
    sharding = _data_sharding(8)
    out = list(device_put(_batches(), sharding, cpu_buffer_size=3, device_buffer_size=2))
    assert len(out) == 12
    for i, batch in enumerate(out):
        _assert_tree_equal(batch, _fix_dtype(_batch(i)))
        for leaf in jax.tree.leaves(batch):
            assert leaf.sharding == sharding
            assert leaf.is_fully_addressable
            shards = leaf.addressable_shards
            assert len(shards) == 8
            assert {shard.device for shard in shards} == set(sharding.mesh.devices.flat)
            assert all(shard.data.shape == (BATCH // 8, *leaf.shape[1:]) for shard in shards)


@pytest.mark.timeout(60)
def test_documented_usage_with_all_devices():
    n = len(jax.devices())
    mesh = jax.sharding.Mesh(np.array(jax.devices()), axis_names=("data",))
    sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("data"))
    ds = gd.MapDataset.range(5).map(lambda i: np.full((2 * n, 3), i, np.float32))
    ds = ds.to_iter_dataset()
    ds = device_put(ds=ds, device=sharding, cpu_buffer_size=3, device_buffer_size=2)
    assert isinstance(ds, gd.IterDataset)
    for i, batch in enumerate(ds):
        assert batch.sharding == sharding
        assert batch.addressable_shards[0].data.shape == (2, 3)
        np.testing.assert_array_equal(np.asarray(batch), np.full((2 * n, 3), i, np.float32))


@pytest.mark.timeout(60)
@pytest.mark.parametrize("which", [0, -1])
def test_single_device(which):
    device = jax.devices()[which]
    out = list(device_put(_batches(5), device))
    for i, batch in enumerate(out):
        _assert_tree_equal(batch, _fix_dtype(_batch(i)))
        for leaf in jax.tree.leaves(batch):
            assert leaf.devices() == {device}
            assert leaf.committed


@pytest.mark.timeout(60)
def test_replicated_and_two_axis_shardings():
    sharding = _data_sharding(8)
    mesh = Mesh(np.array(jax.devices()[:8]).reshape(4, 2), axis_names=("data", "model"))
    two_axes = NamedSharding(mesh, PartitionSpec("data", "model"))
    ds = gd.MapDataset.range(3).map(lambda i: np.full((8, 6), i, np.float32)).to_iter_dataset()
    for batch in device_put(ds, two_axes):
        assert batch.sharding == two_axes
        assert {shard.data.shape for shard in batch.addressable_shards} == {(2, 3)}
    replicated = NamedSharding(sharding.mesh, PartitionSpec())
    for i, batch in enumerate(device_put(ds, replicated)):
        assert batch.sharding.is_fully_replicated
        assert all(shard.data.shape == (8, 6) for shard in batch.addressable_shards)
        np.testing.assert_array_equal(np.asarray(batch), np.full((8, 6), i, np.float32))


@pytest.mark.timeout(60)
def test_nested_pytrees_and_scalars_keep_their_structure():
    def element(i):
        return {
            "a": [np.full((8,), i), (np.ones((8, 2), np.float32) * i, {"deep": np.zeros(8)})],
            "b": (np.int32(i), 2.5),
        }

    ds = gd.MapDataset.range(4).map(element).to_iter_dataset()
    device = jax.devices()[0]
    for i, batch in enumerate(device_put(ds, device, cpu_buffer_size=1, device_buffer_size=1)):
        want = element(i)
        assert jax.tree.structure(batch) == jax.tree.structure(want)
        for got, expected in zip(jax.tree.leaves(batch), jax.tree.leaves(want), strict=True):
            assert isinstance(got, jax.Array)
            np.testing.assert_array_equal(np.asarray(got), np.asarray(expected))


def test_process_local_path_matches_device_put():
    # The path used when a sharding spans other processes' devices; with one
    # process the process-local data is the whole array.
    sharding = _data_sharding()
    n = len(jax.devices())
    tree = {"x": np.arange(4 * n * 3).reshape(4 * n, 3), "y": (np.ones(4 * n, np.float32),)}
    out = _process_local_put(tree, sharding)
    assert jax.tree.structure(out) == jax.tree.structure(tree)
    for got, want in zip(jax.tree.leaves(out), jax.tree.leaves(tree), strict=True):
        assert got.sharding == sharding
        np.testing.assert_array_equal(np.asarray(got), want)


# -- state -----------------------------------------------------------------------------


@pytest.mark.timeout(60)
def test_checkpoint_conformance():
    ds = device_put(_batches(10), _data_sharding(), cpu_buffer_size=2, device_buffer_size=1)
    assert_equal_output_after_checkpoint(ds.map(_to_numpy))


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("cpu", "dev"), [(1, 1), (4, 2), (8, 8)])
def test_state_counts_delivered_batches_not_read_ahead(cpu, dev):
    sharding = _data_sharding()
    parent = _batches(20)
    plain = iter(parent)
    parent_states = [plain.get_state()]
    for _ in plain:
        parent_states.append(plain.get_state())

    iterator = iter(device_put(parent, sharding, cpu_buffer_size=cpu, device_buffer_size=dev))
    states = [iterator.get_state()]
    for k in range(20):
        batch = next(iterator)
        np.testing.assert_array_equal(np.asarray(batch["image"]), _batch(k)["image"])
        if k % 5 == 0:
            time.sleep(0.05)  # let both buffers fill: the state must not move
        states.append(iterator.get_state())
        assert states[-1] == parent_states[k + 1]
    with pytest.raises(StopIteration):
        next(iterator)
    iterator.close()
    assert states == parent_states

    # A fresh iterator restored from the state after k batches continues with batch k.
    for k in [0, 1, 2, 7, 13, 19, 20]:
        fresh = iter(device_put(parent, sharding, cpu_buffer_size=cpu, device_buffer_size=dev))
        fresh.set_state(json.loads(json.dumps(states[k])))
        rest = [int(np.asarray(batch["meta"][0])[0]) for batch in fresh]
        assert rest == list(range(k, 20)), k
        fresh.close()


@pytest.mark.timeout(60)
def test_set_state_on_a_running_iterator_moves_it_back_and_forth():
    ds = device_put(_batches(12).map(lambda b: b["label"]), _data_sharding(), cpu_buffer_size=4)
    iterator = iter(ds)
    states = [iterator.get_state()]
    values = []
    for batch in iterator:
        values.append(np.asarray(batch))
        states.append(iterator.get_state())
    for k in [9, 2, 11, 0, 5]:
        iterator.set_state(states[k])
        got = next(iterator)
        np.testing.assert_array_equal(np.asarray(got), values[k])
        assert iterator.get_state() == states[k + 1]
    iterator.close()


@pytest.mark.timeout(60)
def test_start_prefetch_fills_buffers_without_moving_the_state():
    calls = []

    def record(i):
        calls.append(i)
        return _batch(i)

    ds = gd.MapDataset.range(30).to_iter_dataset(gd.ReadOptions(num_threads=0)).map(record)
    iterator = iter(device_put(ds, jax.devices()[0], cpu_buffer_size=3, device_buffer_size=2))
    start = iterator.get_state()
    iterator.start_prefetch()
    deadline = time.monotonic() + 5
    while len(calls) < 5 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(calls) >= 5
    time.sleep(0.05)
    # Bounded read-ahead: the host buffer, the batch in transfer, the device buffer.
    assert len(calls) <= 3 + 1 + 2
    assert iterator.get_state() == start
    assert int(np.asarray(next(iterator)["label"])[0]) == 0
    iterator.close()


# -- errors and arguments ----------------------------------------------------------------


class BadElementError(Exception):
    pass


def _outcomes(iterator, limit=10):
    """What each `next` gives: a batch's index, the error's type and message, or "end"."""
    out = []
    for _ in range(limit):
        try:
            out.append(int(np.asarray(next(iterator)["meta"][0])[0]))
        except StopIteration:
            out.append("end")
            break
        except Exception as error:
            out.append((type(error), str(error)))
    return out


@pytest.mark.timeout(60)
@pytest.mark.parametrize("where", ["map_dataset", "iter_dataset"])
def test_parent_errors_arrive_at_their_position_with_their_type(where):
    def maybe_fail(i):
        if i == 3:
            raise BadElementError(f"element {i}")
        return _batch(i)

    if where == "map_dataset":  # to_iter_dataset: the error is sticky
        ds = gd.MapDataset.range(6).map(maybe_fail).to_iter_dataset()
    else:  # an IterDataset map: the failed element is skipped, the stream goes on
        ds = gd.MapDataset.range(6).to_iter_dataset().map(maybe_fail)
    expected = _outcomes(iter(ds))
    assert expected[:4] == [0, 1, 2, (BadElementError, "element 3")]
    iterator = iter(device_put(ds, _data_sharding(), cpu_buffer_size=4, device_buffer_size=2))
    assert _outcomes(iterator) == expected
    iterator.close()


@pytest.mark.timeout(60)
def test_transfer_errors_name_the_stage():
    sharding = _data_sharding(8)
    ds = gd.MapDataset.range(3).map(lambda i: np.zeros((7, 2))).to_iter_dataset()
    iterator = iter(device_put(ds, sharding))
    # 7 rows cannot be split over 8 devices: jax's own error, with a note naming the stage.
    with pytest.raises(ValueError, match="7") as info:
        next(iterator)
    assert any("device_put transfer" in note for note in getattr(info.value, "__notes__", []))
    iterator.close()


def test_rejects_a_map_dataset_with_a_hint():
    with pytest.raises(TypeError, match=r"`ds`.*to_iter_dataset\(\)"):
        device_put(gd.MapDataset.range(4), jax.devices()[0])
    with pytest.raises(TypeError, match="`ds` of device_put must be an IterDataset, got list"):
        device_put([1, 2], jax.devices()[0])


@pytest.mark.parametrize("device", ["cpu", 0, None, jax.devices])
def test_rejects_what_is_not_a_device_or_sharding(device):
    with pytest.raises(TypeError, match=r"`device` of device_put must be a jax.Device"):
        device_put(_batches(2), device)


@pytest.mark.parametrize("name", ["cpu_buffer_size", "device_buffer_size"])
@pytest.mark.parametrize(
    ("value", "error"), [(0, ValueError), (-2, ValueError), (2.0, TypeError), (True, TypeError)]
)
def test_rejects_buffer_sizes_that_are_not_positive_ints(name, value, error):
    with pytest.raises(error, match=f"`{name}` of device_put must be a positive int"):
        device_put(_batches(2), jax.devices()[0], **{name: value})


def test_accepts_numpy_integers_and_describes_itself():
    ds = device_put(_batches(2), jax.devices()[0], cpu_buffer_size=np.int64(3))
    assert isinstance(ds, DevicePutIterDataset)
    assert ds.cpu_buffer_size == 3
    assert ds.device_buffer_size == 2
    assert ds.device == jax.devices()[0]
    assert repr(ds).startswith("DevicePutIterDataset(device=")
    assert "cpu_buffer_size=3, device_buffer_size=2" in repr(ds)
    assert str(ds).splitlines()[-1] == repr(ds)
    iterator = iter(ds)
    assert isinstance(iterator, DevicePutDatasetIterator)
    assert "cpu_buffer_size=3" in repr(iterator)
    iterator.close()


@pytest.mark.timeout(60)
def test_stats_name_the_inner_stages():
    iterator = gd.track_stats(iter(device_put(_batches(4), jax.devices()[0])))
    assert len(list(iterator)) == 4
    names = [stage.name for stage in iterator.stats().stages]
    assert any(name.startswith("DevicePutIterDataset(") for name in names)
    assert any(name.startswith("device_put host buffer(") for name in names)
    assert any(name.startswith("device_put transfer(") for name in names)
    iterator.close()


# -- shutdown ------------------------------------------------------------------------------


def _endless():
    return gd.MapDataset.range(10**9).map(_batch).to_iter_dataset(gd.ReadOptions(num_threads=2))


@pytest.mark.timeout(60)
def test_break_close_and_del_leave_no_thread():
    sharding = _data_sharding()
    before = set(threading.enumerate())

    for _ in device_put(_endless(), sharding):
        break
    assert _new_threads(before) == []

    iterator = iter(device_put(_endless(), sharding, cpu_buffer_size=2))
    next(iterator)
    iterator.close()
    iterator.close()  # idempotent
    assert _new_threads(before) == []

    iterator = iter(device_put(_endless(), sharding))
    next(iterator)
    time.sleep(0.02)
    del iterator
    assert _new_threads(before) == []

    with iter(device_put(_endless(), sharding)) as iterator:
        next(iterator)
    assert _new_threads(before) == []

    # Never started, and started but never read.
    iterator = iter(device_put(_endless(), sharding))
    del iterator
    iterator = iter(device_put(_endless(), sharding))
    iterator.start_prefetch()
    del iterator
    gc.collect()
    assert _new_threads(before) == []


_AT_EXIT = """
import time
import jax
import numpy as np
import grain_dataset as gd
from grain_jax._device_put import device_put

mesh = jax.sharding.Mesh(np.array(jax.devices()), axis_names=("data",))
sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("data"))
n = len(jax.devices())

def slow(i):
    time.sleep(0.05)
    return np.full((n, 4), i, np.float32)

big = gd.MapDataset.range(10**9).map(lambda i: np.full((8 * n, 256, 256), i % 256, np.uint8))
big = big.to_iter_dataset()
# Left alive at exit: idle with full buffers, busy in a slow parent, busy
# transferring large batches, started but never read, never started.
idle = iter(device_put(gd.MapDataset.range(10**9).map(lambda i: np.ones((n, 2))).to_iter_dataset(),
                       sharding))
next(idle)
busy = iter(device_put(gd.MapDataset.range(10**9).map(slow).to_iter_dataset(), sharding))
next(busy)
transferring = iter(device_put(big, sharding, cpu_buffer_size=8, device_buffer_size=8))
next(transferring)
started = iter(device_put(big, jax.devices()[-1]))
started.start_prefetch()
unstarted = iter(device_put(big, sharding))
time.sleep(DELAY)
# Dropped just before exit: their threads are still winding down, freeing arrays.
for batch in device_put(big, sharding):
    break
closed = iter(device_put(big, sharding, cpu_buffer_size=8, device_buffer_size=8))
next(closed)
closed.close()
print("done")
"""


@pytest.mark.timeout(120)
def test_nothing_printed_at_interpreter_exit():
    # Each run exits while the threads are in a different place; a daemon thread
    # ended by finalization inside jax's C++ code would abort with a message.
    env = dict(os.environ)
    for delay in (0.0, 0.01, 0.1):
        script = textwrap.dedent(_AT_EXIT).replace("DELAY", repr(delay))
        proc = subprocess.run(
            [sys.executable, "-c", script],
            capture_output=True,
            text=True,
            timeout=100,
            env=env,
            check=False,
        )
        assert proc.returncode == 0, (delay, proc.returncode, proc.stderr)
        assert proc.stdout.strip() == "done"
        assert proc.stderr == "", (delay, proc.stderr)


@pytest.mark.timeout(60)
def test_importing_the_module_does_not_import_jax(tmp_path):
    code = "import sys, grain_jax._device_put; print('jax' in sys.modules)"
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "False"
