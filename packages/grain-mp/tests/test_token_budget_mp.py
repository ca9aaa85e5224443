"""Batches by token budget under mp_prefetch: the batches and states ignore the worker count.

The stage runs on the merged stream in the consuming process (a positional
pipeline's tail), so its output must be the single-process output for every
worker count, and a state saved with one count must continue with another.
"""

import functools
import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from grain_dataset import MapDataset, TokenBudgetBatchIterDataset
from grain_mp import MultiprocessingOptions

_SETTINGS = settings(
    max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True
)


def _document(lengths, index):
    n = int(lengths[index])
    return {"tokens": np.arange(index * 1000 + 1, index * 1000 + 1 + n, dtype=np.int32)}


def _keep(element):
    return len(element["tokens"]) % 5 != 0


def _pipeline(size, seed, window):
    lengths = np.minimum(np.random.default_rng(seed).lognormal(2.5, 1.0, size).astype(int), 64)
    ds = (
        MapDataset.range(size)
        .shuffle(seed=seed)
        .map(functools.partial(_document, lengths))
        .to_iter_dataset()
        .filter(_keep)
    )
    return TokenBudgetBatchIterDataset(
        ds, token_budget=256, padded_lengths=[16, 32, 64], bucket_window=window
    )


def _plain(batches):
    return [(b["tokens"].tolist(), b["tokens_lengths"].tolist()) for b in batches]


def _options(workers):
    return MultiprocessingOptions(num_workers=workers, per_worker_buffer_size=2)


@pytest.mark.timeout(120)
@_SETTINGS
@given(
    size=st.integers(0, 120),
    seed=st.integers(0, 5),
    window=st.sampled_from([None, 9]),
    saved_with=st.sampled_from([0, 1, 2]),
    restored_with=st.sampled_from([0, 2, 3]),
    fraction=st.floats(0, 1),
)
def test_batches_and_states_ignore_the_worker_count(
    size, seed, window, saved_with, restored_with, fraction
):
    ds = _pipeline(size, seed, window)
    expected = _plain(ds)
    assert _plain(ds.mp_prefetch(_options(2))) == expected
    steps = int(fraction * len(expected))
    with iter(ds.mp_prefetch(_options(saved_with))) as it:
        head = _plain(next(it) for _ in range(steps))
        state = json.loads(json.dumps(it.get_state()))
    with iter(ds.mp_prefetch(_options(restored_with))) as resumed:
        resumed.set_state(state)
        assert head + _plain(resumed) == expected


@pytest.mark.timeout(120)
@pytest.mark.parametrize("workers", [1, 2, 3])
def test_with_sequential_slices_each_worker_batches_its_own_slice(workers):
    # Not positional (sequential_slice=True): the stage runs in every worker on its
    # slice, as docs/dataset.md says; every element still comes out exactly once,
    # within budget, and the same way for the same worker count.
    ds = _pipeline(150, 2, None)
    expected = sorted(t for tokens, _ in _plain(ds) for row in tokens for t in row if t)

    def run():
        mp = ds.mp_prefetch(_options(workers), sequential_slice=True)
        return _plain(mp)

    first = run()
    assert sorted(t for tokens, _ in first for row in tokens for t in row if t) == expected
    assert all(len(tokens) * len(tokens[0]) <= 256 for tokens, _ in first)
    assert run() == first
