"""How many elements of a worker a consumer may hold as zero-copy views.

The parent hands out views of a worker's shared memory segment while the
consumer holds fewer than `HELD_BY_CONSUMER` elements of that worker; past
that it copies, so that a consumer keeping everything costs copies, not
segments. The bound must cover what device_put's default buffers hold (up to
8 batches: 4 read ahead, 2 transferred, the one in transfer, the caller's),
or the pipeline pays a copy of a whole batch that nobody needs. A view owns
no data (``flags.owndata`` is False); a copy owns its data.
"""

import collections

import numpy as np
import pytest

import grain_dataset as gd
from grain_mp import MultiprocessingOptions
from grain_mp._mp_worker import HELD_BY_CONSUMER

pytestmark = pytest.mark.usefixtures("no_leaked_segments")


def _image(index):
    """A 12 KB array (above the 4 KB threshold of shared memory) that says its index."""
    return np.full((64, 64, 3), index % 251, np.uint8)


def _pipeline(count, workers):
    options = MultiprocessingOptions(num_workers=workers, per_worker_buffer_size=2)
    return gd.MapDataset.range(count).map(_image).to_iter_dataset().mp_prefetch(options)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("workers", [1, 2])
def test_a_consumer_holding_seven_elements_gets_only_views(workers):
    window = collections.deque(maxlen=7)  # with the loop's own reference: device_put's 8
    views = []
    for index, image in enumerate(_pipeline(60, workers)):
        assert image.shape == (64, 64, 3)
        assert int(image[0, 0, 0]) == index % 251
        views.append(not image.flags.owndata)
        window.append(image)
    assert len(views) == 60
    assert all(views), f"copied: elements {[i for i, v in enumerate(views) if not v]}"
    # The views are still right after the workers moved on (no segment reused under them).
    assert [int(image[0, 0, 0]) for image in window] == list(range(53, 60))


@pytest.mark.timeout(60)
def test_a_consumer_keeping_everything_gets_copies_past_the_bound():
    held = list(_pipeline(40, 1))
    assert [int(image[0, 0, 0]) for image in held] == list(range(40))
    views = [not image.flags.owndata for image in held]
    assert views == [True] * HELD_BY_CONSUMER + [False] * (40 - HELD_BY_CONSUMER)
