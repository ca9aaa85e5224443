"""device_put over mp_prefetch: batches from worker processes' shared memory.

The parent hands device_put views of the workers' segments; ``jax.device_put``
copies them to an accelerator, and on CPU it may alias them instead (zero
copy), so a `jax.Array` can live on the segment's pages. What must hold: every
batch arrives with its own values even while all of them are kept (a segment
given back to its worker and rewritten under a live array would show another
batch's values), and once the arrays and the iterator are gone no segment of
this process is left in /dev/shm.
"""

import gc
import os

import jax
import numpy as np
import pytest

import grain_dataset as gd
from grain_jax import device_put
from grain_mp import MultiprocessingOptions

BATCH = 8
SHM = "/dev/shm"


def _image(index):
    return np.full((32, 32, 3), index % 251, np.uint8)


def _ours():
    """Our segments in /dev/shm: grain_<namespace>_<owner pid>_... (grain_mp._sweep's names)."""
    if not os.path.isdir(SHM):
        return set()
    me = str(os.getpid())
    return {
        name
        for name in os.listdir(SHM)
        if name.startswith("grain_") and name.split("_")[2:3] == [me]
    }


def _pipeline(count, iter_batch):
    images = gd.MapDataset.range(count * BATCH).map(_image)
    ds = (
        images.to_iter_dataset().batch(BATCH)
        if iter_batch
        else images.batch(BATCH).to_iter_dataset()
    )
    options = MultiprocessingOptions(num_workers=2, per_worker_buffer_size=2)
    return ds.mp_prefetch(options)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("iter_batch", [False, True])
def test_every_batch_keeps_its_values_while_all_are_held(iter_batch, monkeypatch):
    # Worker processes on every interpreter: without the GIL they would be threads,
    # which hand batches over without shared memory.
    monkeypatch.setenv("GRAIN_PY_WORKER_EXECUTOR", "processes")
    before = _ours()
    iterator = iter(device_put(_pipeline(30, iter_batch), jax.devices()[0]))
    batches = [next(iterator)]
    assert _ours() - before  # the workers' segments, which the batches come through
    batches += list(iterator)
    assert len(batches) == 30
    for k, batch in enumerate(batches):
        assert isinstance(batch, jax.Array)
        assert batch.shape == (BATCH, 32, 32, 3)
        want = (np.arange(k * BATCH, (k + 1) * BATCH) % 251).astype(np.uint8)
        np.testing.assert_array_equal(np.asarray(batch)[:, 0, 0, 0], want)
        np.testing.assert_array_equal(np.asarray(batch).min(axis=(1, 2, 3)), want)
    iterator.close()
    del batches, batch
    gc.collect()
    assert _ours() - before == set()
