"""InterleaveIterDataset: one element from each of `cycle_length` open datasets in turn.

The order is deterministic, so here a fixed order *is* the spec: `reference`
below is the documented round robin in its simplest form (an exhausted slot
is refilled at once with the next dataset, which yields in the same turn), and
every configuration of threads must match it. Threads must only make that
order faster: opening ahead in the background, in parallel.
"""

import collections
import gc
import json
import random
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from grain_dataset import DatasetIterator, IterDataset, MapDataset, ReadOptions
from grain_dataset._common._conformance import assert_equal_output_after_checkpoint
from grain_dataset._core._state import check_state
from grain_dataset._iter_stages._file_iter import TFRecordIterDataset
from grain_dataset._iter_stages._interleave import OPEN_THREAD_NAME, InterleaveIterDataset
from grain_dataset._map_stages._window_shuffle import WindowShuffleIterDataset
from grain_dataset._threads._thread_prefetch import THREAD_NAME
from grain_sources import write_tfrecord

pytestmark = pytest.mark.timeout(60)

LENGTHS = [3, 0, 5, 1, 0, 4, 2]
CONTENTS = [[100 * d + j for j in range(n)] for d, n in enumerate(LENGTHS)]
ALL = [x for items in CONTENTS for x in items]
CONFIGS = [
    {"num_make_iter_threads": 0, "iter_buffer_size": 0},
    {"num_make_iter_threads": 1, "iter_buffer_size": 1},
    {"num_make_iter_threads": 2, "make_iter_buffer_size": 3, "iter_buffer_size": 0},
    {"num_make_iter_threads": 0, "iter_buffer_size": 2},
]


def reference(datasets: list[list], cycle_length: int) -> list:
    """The documented order (Grain's): round robin; an exhausted slot takes the next dataset,
    which gives its first element on the slot's next turn."""
    slots = [iter(d) for d in datasets[:cycle_length]]
    slots += [None] * (cycle_length - len(slots))
    next_dataset, position, dead, out = len(datasets[:cycle_length]), 0, 0, []
    while dead < cycle_length:
        slot = slots[position]
        if slot is None:
            position, dead = (position + 1) % cycle_length, dead + 1
            continue
        try:
            value = next(slot)
        except StopIteration:
            if next_dataset < len(datasets):
                slots[position] = iter(datasets[next_dataset])
                next_dataset += 1
                position = (position + 1) % cycle_length
            else:
                slots[position] = None
            continue
        out.append(value)
        position, dead = (position + 1) % cycle_length, 0
    return out


class Items(IterDataset):
    """The items of a list; `on_iter` runs in __iter__, `fail_at` positions raise."""

    def __init__(self, items, on_iter=None, fail_at=()):
        super().__init__()
        self.items, self.on_iter, self.fail_at = list(items), on_iter, set(fail_at)

    def __iter__(self):
        if self.on_iter is not None:
            self.on_iter()
        return ItemsIterator(self)


class ItemsIterator(DatasetIterator):
    def __init__(self, dataset):
        super().__init__()
        self._ds = dataset
        self._next = 0

    def __next__(self):
        i = self._next
        if i >= len(self._ds.items):
            raise StopIteration
        self._next += 1
        if i in self._ds.fail_at:
            raise KeyError(f"item {i} is bad")
        return self._ds.items[i]

    def get_state(self):
        return {"next": self._next}

    def set_state(self, state):
        check_state(state, "Items", ("next",))
        self._next = state["next"]


def items_datasets() -> MapDataset:
    return MapDataset.range(len(CONTENTS)).map(lambda d: Items(CONTENTS[d]))


def live(name: str) -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name == name and t.is_alive()}


def still_alive(threads, timeout: float = 5.0) -> list[threading.Thread]:
    deadline = time.monotonic() + timeout
    while any(t.is_alive() for t in threads) and time.monotonic() < deadline:
        time.sleep(0.01)
    return [t for t in threads if t.is_alive()]


# -- the order ------------------------------------------------------------------------------


@pytest.mark.parametrize("config", CONFIGS)
@pytest.mark.parametrize("cycle_length", [1, 3, 7, 10])
def test_order_is_the_documented_round_robin(cycle_length, config):
    ds = InterleaveIterDataset(items_datasets(), cycle_length=cycle_length, **config)
    got = list(ds)
    assert got == reference(CONTENTS, cycle_length)
    assert collections.Counter(got) == collections.Counter(ALL)


def test_cycle_length_one_chains_and_a_full_cycle_takes_one_of_each_in_turn():
    assert list(InterleaveIterDataset(items_datasets(), cycle_length=1)) == ALL
    got = list(InterleaveIterDataset(items_datasets(), cycle_length=len(CONTENTS)))
    assert got[:5] == [0, 200, 300, 500, 600]  # the first element of each non-empty dataset


def test_the_order_of_a_small_case_by_hand():
    # Slots [a, b]; b is empty, so c takes its place and yields on b's next turn (Grain's
    # order, checked against Grain 0.2.18).
    datasets = [["a0", "a1", "a2"], [], ["c0"], ["d0", "d1"]]
    got = list(InterleaveIterDataset(datasets, cycle_length=2))
    assert got == ["a0", "a1", "c0", "a2", "d0", "d1"]


@pytest.mark.parametrize(
    "make",
    [
        lambda: [Items(items) for items in CONTENTS],
        lambda: [MapDataset.source(items) if items else MapDataset.range(0) for items in CONTENTS],
        lambda: [MapDataset.source(items).to_iter_dataset() for items in CONTENTS],
        lambda: [list(items) for items in CONTENTS],
        lambda: tuple(tuple(items) for items in CONTENTS),
    ],
    ids=["iter-datasets", "map-datasets", "to-iter-datasets", "lists", "tuples"],
)
def test_datasets_of_every_kind_give_the_same_order(make):
    ds = InterleaveIterDataset(make(), cycle_length=3)
    assert list(ds) == reference(CONTENTS, 3)
    assert_equal_output_after_checkpoint(ds, steps=[0, 4, 9, 15])


@pytest.mark.parametrize("cycle_length", [1, 4])
def test_no_datasets_or_only_empty_ones_yield_nothing(cycle_length):
    for datasets in ([], [[], []], MapDataset.range(3).map(lambda d: Items([]))):
        ds = InterleaveIterDataset(datasets, cycle_length=cycle_length)
        assert list(ds) == []
        assert_equal_output_after_checkpoint(ds)


def test_a_filtered_position_is_an_empty_dataset():
    datasets = MapDataset.range(len(CONTENTS)).filter(lambda d: d != 2)
    datasets = datasets.map(lambda d: Items(CONTENTS[d]))
    kept = [items if d != 2 else [] for d, items in enumerate(CONTENTS)]
    assert list(InterleaveIterDataset(datasets, cycle_length=3)) == reference(kept, 3)


def test_infinitely_many_datasets():
    datasets = MapDataset.range(3).map(lambda d: Items(CONTENTS[d])).repeat()
    it = iter(InterleaveIterDataset(datasets, cycle_length=2))
    got = [next(it) for _ in range(40)]
    assert got == reference(CONTENTS[:3] * 40, 2)[:40]


def test_tfrecord_files(tmp_path):
    records = [[f"file{f}-rec{r}".encode() for r in range(n)] for f, n in enumerate([4, 0, 2, 6])]
    paths = []
    for f, recs in enumerate(records):
        path = tmp_path / f"data-{f}.tfrecord"
        write_tfrecord(recs, path)
        paths.append(str(path))
    ds = InterleaveIterDataset(MapDataset.source(paths).map(TFRecordIterDataset), cycle_length=2)
    assert list(ds) == reference(records, 2)
    assert_equal_output_after_checkpoint(ds)
    it = iter(ds)
    next(it)
    state = it.get_state()
    # The second record of file 0 starts after 16 bytes of framing and the 10-byte first one.
    assert state["iterators_in_use_indices"][0] == 0
    assert state["iterators_in_use_states"][0] == {"offset": 16 + 10, "index": 1}


def test_tutorial_hierarchical_shuffle():
    files = MapDataset.source([Items(items) for items in CONTENTS])
    ds = WindowShuffleIterDataset(
        InterleaveIterDataset(files, cycle_length=len(CONTENTS)), window_size=4, seed=42
    )
    got = list(ds)
    assert sorted(got) == sorted(ALL)
    expected = reference(CONTENTS, len(CONTENTS))
    for start in range(0, len(expected), 4):  # a window shuffle keeps each window's set
        assert sorted(got[start : start + 4]) == sorted(expected[start : start + 4])
    assert_equal_output_after_checkpoint(ds)


# -- state --------------------------------------------------------------------------------


@pytest.mark.parametrize("config", CONFIGS)
@pytest.mark.parametrize("cycle_length", [1, 3, 10])
def test_checkpoint_conformance(cycle_length, config):
    ds = InterleaveIterDataset(items_datasets(), cycle_length=cycle_length, **config)
    assert_equal_output_after_checkpoint(ds)


def test_checkpoint_conformance_through_read_ahead_pipelines():
    datasets = MapDataset.range(5).map(
        lambda d: MapDataset.range(d * 3).map(lambda x, d=d: (d, x)).to_iter_dataset()
    )
    ds = InterleaveIterDataset(datasets, cycle_length=3).map(lambda t: t[0] * 100 + t[1])
    assert_equal_output_after_checkpoint(ds)


def grain_state(turn, next_dataset, indices, states, exhausted):
    return {
        "next_index_in_cycle": turn,
        "next_index_in_datasets": next_dataset,
        "iterators_in_use_indices": indices,
        "iterators_in_use_states": states,
        "exhausted": exhausted,
        "future_states": {},
    }


def test_state_says_which_dataset_each_slot_reads_and_where():
    """Grain's shape and values (checked against Grain 0.2.18 on random lengths)."""
    ds = InterleaveIterDataset(items_datasets(), cycle_length=3, iter_buffer_size=0)
    it = iter(ds)
    assert it.get_state() == grain_state(0, 3, [0, 1, 2], [{"next": 0}] * 3, [0, 0, 0])
    # Dataset 1 was empty: as in Grain, its slot shows it exhausted until the slot's next
    # turn opens dataset 3 (this iterator opened it already, to read ahead).
    assert [next(it) for _ in range(2)] == [0, 200]
    state = it.get_state()
    assert state == grain_state(0, 3, [0, 1, 2], [{"next": 1}, {"next": 0}, {"next": 1}], [0, 1, 0])
    assert json.loads(json.dumps(state)) == state
    next(it)
    assert it.get_state()["iterators_in_use_indices"] == [0, 1, 2]  # slot 1's turn is next
    next(it)
    assert it.get_state()["iterators_in_use_indices"] == [0, 3, 2]
    assert it.get_state()["next_index_in_datasets"] == 4
    fresh = iter(ds)
    fresh.set_state(state)  # a pending refill restores: dataset 3 opens on slot 1's turn
    assert list(fresh) == reference(CONTENTS, 3)[2:]


def test_a_state_of_an_earlier_version_restores():
    ds = InterleaveIterDataset(items_datasets(), cycle_length=3, iter_buffer_size=0)
    older = {
        "next_dataset": 4,
        "slot": 0,
        "iterators": [
            {"dataset": 0, "state": {"next": 1}},
            {"dataset": 3, "state": {"next": 0}},
            {"dataset": 2, "state": {"next": 1}},
        ],
    }
    it = iter(ds)
    it.set_state(older)
    assert list(it) == reference(CONTENTS, 3)[2:]


def test_only_slots_with_a_dataset_are_listed_and_exhausted_ones_keep_their_last_state():
    it = iter(InterleaveIterDataset([[1], [2, 3]], cycle_length=3))
    assert list(it) == [1, 2, 3]
    assert it.get_state() == grain_state(0, 2, [0, 1], [{"index": 1}, {"index": 2}], [1, 1])
    again = iter(InterleaveIterDataset([[1], [2, 3]], cycle_length=3))
    again.set_state(it.get_state())
    assert list(again) == []


@pytest.mark.parametrize(
    ("state", "match"),
    [
        ([1, 2], "must be a dict"),
        ({"next_dataset": 3, "slot": 0}, "missing"),
        ({"next_dataset": 3, "slot": 0, "iterators": [None] * 3, "x": 1}, "unexpected"),
        ({"next_dataset": -1, "slot": 0, "iterators": [None] * 3}, "next_dataset"),
        ({"next_dataset": 8, "slot": 0, "iterators": [None] * 3}, "past the 7 datasets"),
        ({"next_dataset": 3, "slot": 3, "iterators": [None] * 3}, "cycle_length=3"),
        ({"next_dataset": 3, "slot": 0, "iterators": [None] * 2}, "one entry per slot"),
        ({"next_dataset": 3, "slot": 0, "iterators": [None, None, {"dataset": 3}]}, "iterators"),
        (
            {"next_dataset": 3, "slot": 0, "iterators": [None, None, {"dataset": 3, "state": {}}]},
            "below next_dataset",
        ),
        (
            {
                "next_dataset": 3,
                "slot": 0,
                "iterators": [None, {"dataset": 1, "state": {}}, {"dataset": 1, "state": {}}],
            },
            "distinct",
        ),
    ],
)
def test_set_state_rejects_states_of_another_shape(state, match):
    it = iter(InterleaveIterDataset(items_datasets(), cycle_length=3))
    with pytest.raises((ValueError, TypeError), match=match):
        it.set_state(state)


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"future_states": None}, "future_states"),
        ({"future_states": {"x": {}}}, "future_states"),
        ({"future_states": {"1": {}}}, "future_states"),
        ({"next_index_in_cycle": 3}, "not below the 3 slots"),
        ({"next_index_in_datasets": 8}, "past the 7 datasets"),
        ({"next_index_in_datasets": 2}, "below next_index_in_datasets=2"),
        ({"exhausted": [0, 2, 0]}, "0 or 1"),
        ({"exhausted": [0, 0]}, "one entry per slot in use"),
        ({"iterators_in_use_indices": [0, 0, 2]}, "distinct"),
        ({"x": 1}, "unexpected"),
    ],
)
def test_set_state_rejects_grain_shaped_states_that_do_not_fit(change, match):
    """(Datasets Grain opened ahead, future_states, are not positions: read from their start.)"""
    it = iter(InterleaveIterDataset(items_datasets(), cycle_length=3))
    state = {**it.get_state(), **change}
    with pytest.raises((ValueError, TypeError), match=match):
        it.set_state(state)


@pytest.mark.parametrize("threads", [0, 2])
def test_a_state_its_datasets_reject_leaves_the_iterator_where_it_was(threads):
    ds = InterleaveIterDataset(items_datasets(), cycle_length=3, num_make_iter_threads=threads)
    it = iter(ds)
    head = [next(it) for _ in range(4)]
    state = it.get_state()
    state["iterators_in_use_states"][1] = {"position": 1}
    with pytest.raises(ValueError, match="Items") as info:
        it.set_state(state)
    assert any("dataset 3" in note for note in info.value.__notes__)
    assert head + list(it) == reference(CONTENTS, 3)


# -- threads ------------------------------------------------------------------------------------


@pytest.mark.timeout(60)
def test_a_slow_opening_happens_ahead_without_stalling_the_others():
    opening, release = threading.Event(), threading.Event()

    def slow_open():
        opening.set()
        assert release.wait(timeout=30)

    datasets = [Items(range(6)), Items(range(100, 106)), Items([200, 201], on_iter=slow_open)]
    ds = InterleaveIterDataset(
        datasets, cycle_length=2, num_make_iter_threads=1, make_iter_buffer_size=1
    )
    it = iter(ds)
    assert next(it) == 0
    # Dataset 2 is needed only after 12 elements, but its opening has begun ...
    assert opening.wait(timeout=10)
    # ... and while it is stuck, the open datasets go on.
    rest_of_first_two = [next(it) for _ in range(11)]
    assert rest_of_first_two == reference([list(range(6)), list(range(100, 106))], 2)[1:]
    release.set()
    assert list(it) == [200, 201]


@pytest.mark.timeout(60)
def test_without_opening_threads_a_dataset_is_opened_only_when_needed():
    opening = threading.Event()
    datasets = [Items(range(6)), Items(range(100, 106)), Items([200], on_iter=opening.set)]
    it = iter(InterleaveIterDataset(datasets, cycle_length=2, num_make_iter_threads=0))
    assert len([next(it) for _ in range(12)]) == 12
    assert not opening.is_set()
    assert next(it) == 200
    assert opening.is_set()


@pytest.mark.timeout(60)
def test_datasets_are_opened_in_parallel():
    # Each opening waits for the other two: this finishes only if all three run at once.
    barrier = threading.Barrier(3, timeout=20)
    datasets = MapDataset.range(3).map(lambda d: Items([d], on_iter=barrier.wait))
    ds = InterleaveIterDataset(
        datasets, cycle_length=3, num_make_iter_threads=3, make_iter_buffer_size=0
    )
    assert list(ds) == [0, 1, 2]


@pytest.mark.timeout(60)
def test_close_stops_every_thread():
    before = live(OPEN_THREAD_NAME) | live(THREAD_NAME)
    it = iter(InterleaveIterDataset(items_datasets(), cycle_length=3, num_make_iter_threads=2))
    next(it)
    started = (live(OPEN_THREAD_NAME) | live(THREAD_NAME)) - before
    assert started  # opening threads and one read-ahead thread per open dataset
    it.close()
    assert still_alive(started) == []
    it.close()  # idempotent


@pytest.mark.parametrize("config", CONFIGS)
def test_a_closed_iterator_refuses_next_and_its_state_resumes_elsewhere(config):
    expected = reference(CONTENTS, 3)
    ds = InterleaveIterDataset(items_datasets(), cycle_length=3, **config)
    it = iter(ds)
    got = [next(it) for _ in range(5)]
    state = it.get_state()
    it.close()
    assert it.get_state() == state
    it.close()
    with pytest.raises(ValueError, match="closed iterator"):
        next(it)
    resumed = iter(ds)
    resumed.set_state(state)
    got += list(resumed)
    assert got == expected


@pytest.mark.timeout(60)
def test_dropping_the_iterator_stops_every_thread():
    before = live(OPEN_THREAD_NAME) | live(THREAD_NAME)
    it = iter(InterleaveIterDataset(items_datasets(), cycle_length=3, num_make_iter_threads=2))
    next(it)
    started = (live(OPEN_THREAD_NAME) | live(THREAD_NAME)) - before
    it.cycle = it  # only the garbage collector can free it
    del it
    gc.collect()
    assert still_alive(started) == []


@pytest.mark.timeout(60)
def test_interpreter_exit_is_silent():
    code = textwrap.dedent(
        """
        import time
        from grain_dataset import MapDataset
        from grain_dataset._iter_stages._interleave import InterleaveIterDataset

        def make(d):
            time.sleep(0.5 if d == 2 else 0)  # still opening at exit
            return MapDataset.range(1000).to_iter_dataset()

        ds = InterleaveIterDataset(MapDataset.range(4).map(make), cycle_length=2)
        it = iter(ds)
        next(it)
        print("ok")
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=30, check=False
    )
    assert result.stderr == ""
    assert result.returncode == 0
    assert result.stdout == "ok\n"


# -- errors --------------------------------------------------------------------------------


@pytest.mark.parametrize("config", CONFIGS)
def test_an_error_while_reading_is_raised_at_its_position_naming_the_dataset(config):
    datasets = [Items(items, fail_at={1} if d == 5 else ()) for d, items in enumerate(CONTENTS)]
    it = iter(InterleaveIterDataset(datasets, cycle_length=3, **config))
    expected = reference(CONTENTS, 3)
    position = expected.index(501)
    assert [next(it) for _ in range(position)] == expected[:position]
    with pytest.raises(KeyError, match="item 1 is bad") as info:
        next(it)
    assert any("dataset 5" in note for note in info.value.__notes__)
    # The turn stays with dataset 5, whose iterator moved past its bad item: the
    # rest is the round robin of the same datasets without that item.
    without = [[x for x in items if x != 501] for items in CONTENTS]
    assert list(it) == reference(without, 3)[position:]


@pytest.mark.parametrize("threads", [0, 2])
def test_an_error_while_opening_is_raised_where_the_dataset_would_start(threads):
    def make(d):
        if d == 3:
            raise OSError("cannot open shard 3")
        return Items(CONTENTS[d])

    datasets = MapDataset.range(len(CONTENTS)).map(make)
    it = iter(InterleaveIterDataset(datasets, cycle_length=2, num_make_iter_threads=threads))
    expected = reference(CONTENTS, 2)
    position = expected.index(300)
    assert [next(it) for _ in range(position)] == expected[:position]
    with pytest.raises(OSError, match="cannot open shard 3") as info:
        next(it)
    assert any("dataset 3" in note for note in info.value.__notes__)


def test_a_dataset_that_is_not_iterable_is_reported_with_its_index():
    datasets = MapDataset.range(3).map(lambda d: [d] if d != 1 else 42)
    it = iter(InterleaveIterDataset(datasets, cycle_length=1))
    assert next(it) == 0
    with pytest.raises(TypeError, match="dataset 1") as info:
        next(it)
    assert "int 42" in str(info.value)


@pytest.mark.parametrize(
    ("cycle_length", "error"),
    [(0, ValueError), (-1, ValueError), (1.5, TypeError), ("3", TypeError), (True, TypeError)],
)
def test_bad_cycle_length_is_rejected(cycle_length, error):
    with pytest.raises(error, match="cycle_length"):
        InterleaveIterDataset(items_datasets(), cycle_length=cycle_length)


@pytest.mark.parametrize(
    "name", ["num_make_iter_threads", "make_iter_buffer_size", "iter_buffer_size"]
)
def test_bad_thread_options_are_rejected(name):
    with pytest.raises(ValueError, match=name):
        InterleaveIterDataset(items_datasets(), cycle_length=2, **{name: -1})
    with pytest.raises(TypeError, match=name):
        InterleaveIterDataset(items_datasets(), cycle_length=2, **{name: 1.0})


@pytest.mark.parametrize(
    ("datasets", "match"),
    [
        (5, "int"),
        (None, "NoneType"),
        ("abc", "str"),
        (MapDataset.range(3).to_iter_dataset(), "random access"),
        ([Items([1]), 5], r"datasets\[1\].*int 5"),
        ([["a"], "shard-0.tfrecord"], r"datasets\[1\].*map file names"),
        ([[1], (x for x in [2])], r"datasets\[1\].*one-shot iterator"),
    ],
)
def test_datasets_that_are_not_datasets_are_rejected(datasets, match):
    with pytest.raises(TypeError, match=match):
        InterleaveIterDataset(datasets, cycle_length=2)


def test_options_are_keyword_only():
    with pytest.raises(TypeError):
        InterleaveIterDataset(items_datasets(), 2)


def test_read_options_of_the_inner_datasets_do_not_change_the_order():
    fast = MapDataset.range(4).map(
        lambda d: MapDataset.range(d + 2).to_iter_dataset(ReadOptions(num_threads=4))
    )
    slow = MapDataset.range(4).map(
        lambda d: MapDataset.range(d + 2).to_iter_dataset(ReadOptions(num_threads=0))
    )
    expected = reference([list(range(d + 2)) for d in range(4)], 3)
    assert list(InterleaveIterDataset(fast, cycle_length=3)) == expected
    assert list(InterleaveIterDataset(slow, cycle_length=3)) == expected


@pytest.mark.timeout(60)
@pytest.mark.parametrize("seed", range(4))
def test_restoring_random_earlier_states_continues_the_reference_order(seed):
    rng = random.Random(seed)
    cycle_length = rng.choice([1, 2, 3, 5, 8])
    config = rng.choice(CONFIGS)
    expected = reference(CONTENTS, cycle_length)
    it = iter(InterleaveIterDataset(items_datasets(), cycle_length=cycle_length, **config))
    saved = {0: it.get_state()}
    position = 0
    for _ in range(120):
        if rng.random() < 0.8:
            value = next(it, None)
            assert value == (expected[position] if position < len(expected) else None)
            position = min(position + 1, len(expected))
            saved[position] = it.get_state()
        else:
            position = rng.choice(sorted(saved))
            target = it if rng.random() < 0.5 else iter(it_dataset(cycle_length, config))
            target.set_state(saved[position])
            if target is not it:
                it.close()
                it = target
    it.close()


def it_dataset(cycle_length, config):
    return InterleaveIterDataset(items_datasets(), cycle_length=cycle_length, **config)


def test_a_grain_state_with_datasets_opened_ahead_restores():
    ds = InterleaveIterDataset(items_datasets(), cycle_length=3, iter_buffer_size=0)
    it = iter(ds)
    state = it.get_state()
    state["future_states"] = {"3": {"next": 0}, "4": {"next": 0}}
    it.set_state(state)
    assert list(it) == reference(CONTENTS, 3)
