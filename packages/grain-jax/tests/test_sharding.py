"""ShardByJaxProcess and make_global_batch in one process over 8 CPU devices.

The root conftest.py asks XLA for 8 host devices before jax starts. The
multi-process behaviour (2 and 4 processes) is checked by
integration_tests/test_multihost.py.
"""

import dataclasses

import jax
import numpy as np
import pytest
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from grain_dataset import MapDataset
from grain_index import IndexSampler, ShardOptions
from grain_jax._sharding import ShardByJaxProcess, make_global_batch
from grain_mp import DataLoader


@pytest.fixture(scope="module")
def devices():
    if jax.device_count() < 8:
        pytest.fail(f"expected the 8 CPU devices of conftest.py's XLA_FLAGS, got {jax.devices()}")
    return jax.devices()


def test_shard_by_jax_process_is_shard_0_of_1_in_one_process():
    options = ShardByJaxProcess()
    assert isinstance(options, ShardOptions)
    assert (options.shard_index, options.shard_count, options.drop_remainder) == (0, 1, False)
    assert ShardByJaxProcess(drop_remainder=True).drop_remainder is True
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.shard_index = 1


def test_shard_by_jax_process_is_accepted_as_shard_options():
    sampler = IndexSampler(
        num_records=10, shard_options=ShardByJaxProcess(), shuffle=False, num_epochs=1, seed=0
    )
    loader = DataLoader(data_source=list(range(10)), sampler=sampler, worker_count=0)
    assert list(loader) == list(range(10))


def test_shard_by_jax_process_checks_drop_remainder():
    with pytest.raises(TypeError, match="drop_remainder"):
        ShardByJaxProcess(drop_remainder="yes")


def test_slicing_by_process_index():
    ds = MapDataset.range(10)
    assert list(ds[jax.process_index() :: jax.process_count()]) == list(range(10))
    shards = [list(ds[i::3]) for i in range(3)]
    assert sorted(x for shard in shards for x in shard) == list(range(10))


def test_make_global_batch_default_sharding(devices):
    batch = {"x": np.arange(32, dtype=np.float32).reshape(16, 2), "y": np.arange(16)}
    out = make_global_batch(batch)
    mesh_sharding = NamedSharding(Mesh(np.asarray(devices), ("data",)), PartitionSpec("data"))
    for name, leaf in out.items():
        assert isinstance(leaf, jax.Array)
        assert leaf.shape == batch[name].shape  # One process: the global batch is the local one.
        assert leaf.sharding.is_equivalent_to(mesh_sharding, leaf.ndim)
        assert len(leaf.addressable_shards) == 8
        np.testing.assert_array_equal(np.asarray(leaf), batch[name])
    assert out["x"].addressable_shards[0].data.shape == (2, 2)
    assert float(jax.jit(jax.numpy.sum)(out["x"])) == float(batch["x"].sum())


def test_make_global_batch_with_a_given_sharding(devices):
    mesh = Mesh(np.asarray(devices).reshape(4, 2), ("data", "model"))
    rows_over_data = NamedSharding(mesh, PartitionSpec("data"))
    out = make_global_batch((np.arange(12).reshape(4, 3),), rows_over_data)
    assert out[0].shape == (4, 3)
    assert out[0].addressable_shards[0].data.shape == (1, 3)

    # Replicated: any batch size fits.
    replicated = make_global_batch(np.arange(3), NamedSharding(mesh, PartitionSpec()))
    np.testing.assert_array_equal(np.asarray(replicated), np.arange(3))


def test_make_global_batch_rejects_an_uneven_batch(devices):
    with pytest.raises(ValueError, match=r"leaf \['y'\] of `batch` has a leading dimension of 6"):
        make_global_batch({"x": np.zeros((8, 1)), "y": np.zeros(6)})
    mesh = Mesh(np.asarray(devices).reshape(4, 2), ("data", "model"))
    with pytest.raises(ValueError, match="multiple of 4"):
        make_global_batch(np.zeros(6), NamedSharding(mesh, PartitionSpec("data")))


def test_make_global_batch_rejects_scalars_and_non_shardings(devices):
    with pytest.raises(ValueError, match="`batch` is a scalar"):
        make_global_batch(np.float32(1.0))
    with pytest.raises(TypeError, match=r"`sharding` must be a jax\.sharding\.Sharding"):
        make_global_batch(np.zeros(8), sharding="data")
