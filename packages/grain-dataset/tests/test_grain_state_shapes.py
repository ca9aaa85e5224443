"""`get_state()` equals Grain's dict where a stage means the same thing.

The literal dicts are what Grain 0.2.18 returns for the same pipelines at the
same points (fresh, mid-way, exhausted): facts about positions, not
randomness. Clients read and compare them (AirIO compares a dataset iterator's
state with ``{"next_index": 0}``). The seeded stages are here too: their
element order differs from Grain's, their state's keys and positions do not.
"""

from __future__ import annotations

import pytest

from grain_dataset import (
    IterDataset,
    LimitIterDataset,
    MapDataset,
    ReadOptions,
    RepeatIterDataset,
    ThreadPrefetchIterDataset,
    ZipIterDataset,
)


def _it(n=10, **options):
    return MapDataset.range(n).to_iter_dataset(ReadOptions(**options) if options else None)


def states(ds, steps=3):
    it = iter(ds)
    fresh = it.get_state()
    for _ in range(steps):
        next(it)
    middle = it.get_state()
    count = steps + len(list(it))
    end = it.get_state()
    it.close()
    return fresh, middle, end, count


CASES = {
    "to_iter_dataset": (
        lambda: _it(),
        ({"next_index": 0}, {"next_index": 3}, {"next_index": 10}, 10),
    ),
    "to_iter_dataset with read threads": (
        lambda: _it(num_threads=2, prefetch_buffer_size=4),
        ({"next_index": 0}, {"next_index": 3}, {"next_index": 10}, 10),
    ),
    "to_iter_dataset without threads": (
        lambda: _it(num_threads=0),
        ({"next_index": 0}, {"next_index": 3}, {"next_index": 10}, 10),
    ),
    "shuffled, filtered, mapped MapDataset": (
        lambda: (
            MapDataset.range(10)
            .shuffle(seed=1)
            .filter(lambda x: x % 2 == 0)
            .map(lambda x: x)
            .to_iter_dataset()
        ),
        None,  # positions depend on the shuffle (checked below), not the keys
    ),
    "IterDataset.map": (
        lambda: _it().map(lambda x: x + 1),
        ({"next_index": 0}, {"next_index": 3}, {"next_index": 10}, 10),
    ),
    "IterDataset.filter": (
        lambda: _it().filter(lambda x: x % 2 == 0),
        ({"next_index": 0}, {"next_index": 5}, {"next_index": 10}, 5),
    ),
    "IterDataset.random_map": (
        lambda: _it().seed(3).random_map(lambda x, rng: x),
        (
            {"parent": {"next_index": 0}, "index_for_rng": 0},
            {"parent": {"next_index": 3}, "index_for_rng": 3},
            {"parent": {"next_index": 10}, "index_for_rng": 10},
            10,
        ),
    ),
    "IterDataset.map_with_index": (
        lambda: _it().map_with_index(lambda i, x: x),
        (
            {"parent": {"next_index": 0}, "counter": 0},
            {"parent": {"next_index": 3}, "counter": 3},
            {"parent": {"next_index": 10}, "counter": 10},
            10,
        ),
    ),
    "IterDataset.batch": (
        lambda: _it().batch(3),
        ({"next_index": 0}, {"next_index": 9}, {"next_index": 10}, 4),
    ),
    "IterDataset.batch drop_remainder": (
        lambda: _it().batch(3, drop_remainder=True),
        ({"next_index": 0}, {"next_index": 9}, {"next_index": 10}, 3),
    ),
    "IterDataset.mix of two, equal weights": (
        lambda: IterDataset.mix([_it(), MapDataset.range(10).to_iter_dataset()], [0.5, 0.5]),
        (
            {"parents": [{"next_index": 0}, {"next_index": 0}], "index": 0, "stop": False},
            {"parents": [{"next_index": 2}, {"next_index": 1}], "index": 3, "stop": False},
            # The call that found the end counts, as in Grain.
            {"parents": [{"next_index": 10}, {"next_index": 10}], "index": 21, "stop": True},
            20,
        ),
    ),
    "ThreadPrefetchIterDataset": (
        lambda: ThreadPrefetchIterDataset(_it(), prefetch_buffer_size=2),
        ({"next_index": 0}, {"next_index": 3}, {"next_index": 10}, 10),
    ),
    "ZipIterDataset": (
        lambda: ZipIterDataset([_it(), _it()]),
        (
            {"parents": [{"next_index": 0}, {"next_index": 0}]},
            {"parents": [{"next_index": 3}, {"next_index": 3}]},
            {"parents": [{"next_index": 10}, {"next_index": 10}]},
            10,
        ),
    ),
    "LimitIterDataset": (
        lambda: LimitIterDataset(_it(), count=5),
        (
            {"parent": {"next_index": 0}, "count_elements_read": 0},
            {"parent": {"next_index": 3}, "count_elements_read": 3},
            {"parent": {"next_index": 5}, "count_elements_read": 5},
            5,
        ),
    ),
    "RepeatIterDataset": (
        lambda: RepeatIterDataset(_it(3), num_epochs=2),
        (
            {"parent": {"next_index": 0}, "epoch": 0},
            {"parent": {"next_index": 3}, "epoch": 0},
            {"parent": {"next_index": 3}, "epoch": 2},
            6,
        ),
    ),
    "MapDataset iterator": (
        lambda: MapDataset.range(10),
        ({"next_index": 0}, {"next_index": 3}, {"next_index": 10}, 10),
    ),
}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("name", sorted(name for name, (_, want) in CASES.items() if want))
def test_state_equals_grains(name):
    make, want = CASES[name]
    assert states(make()) == want


@pytest.mark.timeout(60)
def test_a_filtered_shuffle_counts_positions_as_grain_does():
    make, _ = CASES["shuffled, filtered, mapped MapDataset"]
    fresh, middle, end, count = states(make())
    assert (fresh, end, count) == ({"next_index": 0}, {"next_index": 10}, 5)
    assert set(middle) == {"next_index"}
    assert 3 <= middle["next_index"] <= 10


@pytest.mark.timeout(60)
@pytest.mark.parametrize("name", sorted(CASES))
def test_a_grain_shaped_state_restores_where_it_says(name):
    make, _ = CASES[name]
    it = iter(make())
    head = [next(it) for _ in range(3)]
    state = it.get_state()
    rest = list(it)
    again = iter(make())
    again.set_state(state)
    assert list(again) == rest
    assert head  # the state was taken mid-way
