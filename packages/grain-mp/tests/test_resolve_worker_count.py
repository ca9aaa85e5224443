"""`resolve_worker_count`: the DataLoader's rule for `worker_count`, which Grain's
private `_determine_worker_count` exposes (axlearn calls it).

None means one worker per CPU; an int >= 0 is itself; anything else is refused
with the argument named, and the DataLoader applies the same rule.
"""

import os

import numpy as np
import pytest

from grain_index import IndexSampler
from grain_mp import DataLoader, resolve_worker_count


def test_none_is_one_worker_per_cpu_and_ints_are_themselves():
    assert resolve_worker_count(None) == (os.cpu_count() or 1)
    assert resolve_worker_count(0) == 0
    assert resolve_worker_count(5) == 5
    assert resolve_worker_count(np.int64(2)) == 2
    assert type(resolve_worker_count(np.int64(2))) is int


@pytest.mark.parametrize(
    ("value", "error"),
    [(-1, ValueError), (2.5, TypeError), ("4", TypeError), (True, TypeError)],
)
def test_bad_counts_are_refused_with_the_fix(value, error):
    with pytest.raises(error, match=r"`worker_count`.*None for one worker per CPU"):
        resolve_worker_count(value)


def test_the_data_loader_uses_the_same_rule():
    sampler = IndexSampler(4, num_epochs=1, shuffle=False, seed=0)
    loader = DataLoader(data_source=list(range(4)), sampler=sampler, worker_count=None)
    assert loader._worker_count == resolve_worker_count(None)
    with pytest.raises(ValueError, match="worker_count"):
        DataLoader(data_source=list(range(4)), sampler=sampler, worker_count=-2)
