"""Errors open with Grain's wording, which clients match with `assertRaisesRegex`.

Each case is an error Grain 0.2.18 raises with the same exception type; the
pattern is Grain's message with this call's values, escaped. Ours follows it
with its own explanation.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from grain_dataset import MapDataset
from grain_index import IndexSampler, NoSharding
from grain_mp import (
    BatchOperation,
    DataLoader,
    ElasticIterator,
    FilterOperation,
    MapOperation,
    MultiprocessingOptions,
    PackAndBatchOperation,
    SharedMemoryArray,
)


def _sampler(n, **kwargs):
    return IndexSampler(n, shard_options=NoSharding(), num_epochs=1, **kwargs)


def _loader(**kwargs):
    kwargs.setdefault("data_source", [1, 2, 3, 0])
    kwargs.setdefault("sampler", _sampler(4))
    kwargs.setdefault("worker_count", 0)
    return DataLoader(**kwargs)


CASES = [
    (
        lambda: _loader(worker_count=-1),
        ValueError,
        "Worker count should be greater than or equal zero.Current worker_count is -1.",
    ),
    (
        lambda: _loader(worker_buffer_size=-1),
        ValueError,
        "Worker buffer size must be greater than or equal zero.Current worker_buffer_size is -1.",
    ),
    (
        lambda: list(_loader(operations=[MapOperation(lambda x: 1 // x)])),
        ValueError,
        "PyGrain encountered an error when calling map function.",
    ),
    (
        lambda: list(_loader(operations=[FilterOperation(lambda x: 1 // x > 0)])),
        ValueError,
        "PyGrain encountered an error when calling condition function.",
    ),
    (
        lambda: BatchOperation(batch_size=0),
        ValueError,
        "batch_size must be a positive integer. Got 0.",
    ),
    (
        lambda: list(
            _loader(
                data_source=[{"t": np.arange(9)}],
                sampler=_sampler(1),
                operations=[PackAndBatchOperation(length_struct={"t": 4}, batch_size=1)],
            )
        ),
        ValueError,
        "Inputs to PackAndBatchOperation must be truncated to max length.",
    ),
    (
        lambda: ElasticIterator(
            MapDataset.range(8), global_batch_size=0, shard_options=NoSharding()
        ),
        ValueError,
        "batch_size must be positive.",
    ),
    (
        lambda: MultiprocessingOptions(per_worker_buffer_size=0),
        ValueError,
        "`buffer_size` must be greater than 0, got 0.",
    ),
    (
        lambda: SharedMemoryArray((-1,), dtype=np.int32),
        ValueError,
        "'size' must be a positive integer",
    ),
]


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("call", "error", "grain"), CASES)
def test_message_opens_with_grains_wording(call, error, grain):
    with pytest.raises(error, match="^" + re.escape(grain)) as info:
        call()
    assert len(str(info.value)) > len(grain)


@pytest.mark.timeout(60)
def test_state_of_another_sampler_has_grains_wording():
    saved = _sampler(4, shuffle=True, seed=1)
    iterator = iter(_loader(sampler=saved))
    next(iterator)
    state = iterator.get_state()
    other = iter(_loader(sampler=_sampler(4, shuffle=True, seed=2)))
    grain = (
        "Sampler in checkpoint does not match dataloader sampler.\n"
        f"sampler in checkpoint: {saved!r}\n"
        f"sampler in dataloader: {_sampler(4, shuffle=True, seed=2)!r}\n"
        "Grain uses `repr(sampler)` to validate the sampler, so you may need to implement a "
        "custom `__repr__`."
    )
    with pytest.raises(ValueError, match="^" + re.escape(grain)):
        other.set_state(state)
