"""Subclasses written against Grain: the protected names the bases give them.

Grain's documentation invites MapDataset, IterDataset and DatasetIterator
subclasses, and real ones (AirIO's packing and feature converters) read
``self._parent`` and ``self._parents``, seed themselves from
``self._default_seed``, look at ``self._ctx`` and call ``self._stats``. The
subclasses here are written the way such code is, through ``import grain``
only, and run through batching, worker processes and checkpoints.
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

import grain
from grain_dataset import assert_equal_output_after_checkpoint

# Most pipelines here read through to_iter_dataset's threads; the mp ones set their own.
pytestmark = pytest.mark.timeout(60)

# -- subclasses as users write them -------------------------------------------------------------


class Squares(grain.MapDataset):
    """A source: ``super().__init__()`` with no parent."""

    def __init__(self, n: int):
        super().__init__()
        self._n = n

    def __len__(self):
        return self._n

    def __getitem__(self, index):
        if isinstance(index, slice):
            return self.slice(index)
        return (index % self._n) ** 2


class FeatureConverter(grain.MapDataset):
    """A feature converter in AirIO's style: one parent, read as ``self._parent[index]``."""

    def __init__(self, parent: grain.MapDataset, pad_to: int):
        super().__init__(parent)
        self._pad_to = pad_to

    def __len__(self):
        return len(self._parent)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return self.slice(index)
        value = self._parent[index]
        if value is None:
            return None
        tokens = np.zeros(self._pad_to, np.int64)
        tokens[: value % self._pad_to] = value
        return {"tokens": tokens, "length": value % self._pad_to}


class Pair(grain.MapDataset):
    """Two parents, given as a list and read back from ``self._parents``."""

    def __init__(self, first: grain.MapDataset, second: grain.MapDataset):
        super().__init__([first, second])

    def __len__(self):
        return min(len(parent) for parent in self._parents)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return self.slice(index)
        first, second = self._parents
        return (first[index], second[index])


class _Countdown(grain.DatasetIterator):
    """The docs' parentless iterator: ``super().__init__()``."""

    def __init__(self, start: int):
        super().__init__()
        self._next = start

    def __next__(self):
        if self._next <= 0:
            raise StopIteration
        self._next -= 1
        return self._next + 1

    def get_state(self):
        return {"next": self._next}

    def set_state(self, state):
        self._next = state["next"]


class _PackIterator(grain.DatasetIterator):
    """Packs lengths greedily into bins of `capacity`, as AirIO's packing iterator does.

    It reads ``next(self._parent)`` and saves the partly filled bin in its
    state beside its parent's state.
    """

    def __init__(self, parent: grain.DatasetIterator, capacity: int):
        super().__init__(parent)
        self._capacity = capacity
        self._bin: list[int] = []

    def __next__(self):
        while True:
            try:
                length = next(self._parent)
            except StopIteration:
                if self._bin:
                    packed, self._bin = self._bin, []
                    return packed
                raise
            if sum(self._bin) + length > self._capacity:
                packed, self._bin = self._bin, [length]
                return packed
            self._bin.append(length)

    def get_state(self):
        return {"parent": self._parent.get_state(), "bin": list(self._bin)}

    def set_state(self, state):
        self._parent.set_state(state["parent"])
        self._bin = list(state["bin"])


@dataclasses.dataclass(frozen=False)
class Pack(grain.IterDataset):
    """AirIO decorates its packing dataset as a dataclass (so it is unhashable, and
    every two instances compare equal) and passes its parent in a list."""

    def __init__(self, parent: grain.IterDataset, capacity: int):
        super().__init__([parent])
        self._capacity = capacity

    def __iter__(self):
        return _PackIterator(iter(self._parent), self._capacity)


class _ZipIterator(grain.DatasetIterator):
    def __init__(self, parents):
        super().__init__(parents)

    def __next__(self):
        return tuple([next(parent) for parent in self._parents])

    def get_state(self):
        return {"parents": [parent.get_state() for parent in self._parents]}

    def set_state(self, state):
        for parent, parent_state in zip(self._parents, state["parents"], strict=True):
            parent.set_state(parent_state)


class ZipTwo(grain.IterDataset):
    def __init__(self, first: grain.IterDataset, second: grain.IterDataset):
        super().__init__([first, second])

    def __iter__(self):
        return _ZipIterator([iter(parent) for parent in self._parents])


class _WorkerTagIterator(grain.DatasetIterator):
    """Tags each element with the worker that produced it, from ``self._ctx.mp_context``."""

    def __init__(self, parent: grain.DatasetIterator):
        super().__init__(parent)

    def __next__(self):
        value = next(self._parent)
        context = self._ctx.mp_context
        with self._stats.record_self_time():
            return self._stats.record_output_spec(
                (value, context.process_index, context.process_count)
            )

    def get_state(self):
        return self._parent.get_state()

    def set_state(self, state):
        self._parent.set_state(state)


class WorkerTag(grain.IterDataset):
    def __init__(self, parent: grain.IterDataset):
        super().__init__(parent)

    def __iter__(self):
        return _WorkerTagIterator(iter(self._parent))


class Noise(grain.MapDataset):
    """A random stage of a user's: its seed is ``self._default_seed``, as the docs say."""

    def __init__(self, parent: grain.MapDataset):
        super().__init__(parent)

    def __len__(self):
        return len(self._parent)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return self.slice(index)
        rng = np.random.default_rng([self._default_seed, index])
        return int(rng.integers(1 << 30))


LENGTHS = [3, 5, 2, 7, 1, 4, 4, 6, 2, 2, 8, 1, 3]


def _assert_restores_at_every_step(ds):
    """Like `assert_equal_output_after_checkpoint`, for states whose shape may change
    (a packing iterator's partly filled bin is a list of any length, as AirIO's is)."""
    iterator = iter(ds)
    elements, states = [], [json.loads(json.dumps(iterator.get_state()))]
    for element in iterator:
        elements.append(element)
        states.append(json.loads(json.dumps(iterator.get_state())))
    assert elements
    for step, state in enumerate(states):
        fresh = iter(ds)
        fresh.set_state(state)
        rest = list(fresh)
        assert len(rest) == len(elements) - step, step
        for got, want in zip(rest, elements[step:], strict=True):
            np.testing.assert_array_equal(got, want)


def _packed(lengths, capacity):
    out, current = [], []
    for length in lengths:
        if sum(current) + length > capacity:
            out.append(current)
            current = [length]
        else:
            current.append(length)
    return out + ([current] if current else [])


# -- `_parent` and `_parents` -------------------------------------------------------------------


def test_parent_is_the_single_parent_of_datasets_and_iterators():
    base = grain.MapDataset.range(6)
    converter = FeatureConverter(base, pad_to=4)
    assert converter._parent is base
    assert converter._parents == (base,)
    assert isinstance(converter._parents, tuple)

    iter_base = base.to_iter_dataset()
    pack = Pack(iter_base, capacity=10)  # the parent passed in a list
    assert pack._parent is iter_base
    assert pack._parents == (iter_base,)

    iterator = iter(pack)
    assert isinstance(iterator, _PackIterator)
    assert isinstance(iterator._parent, grain.DatasetIterator)
    assert iterator._parents == (iterator._parent,)


@pytest.mark.parametrize("count", [0, 2])
def test_parent_with_no_parent_or_several_raises_assertion_error_naming_parents(count):
    parents = [grain.MapDataset.range(3) for _ in range(count)]
    dataset = Squares(3) if count == 0 else Pair(*parents)
    with pytest.raises(AssertionError, match=f"{count} parents.*`self._parents`"):
        _ = dataset._parent
    assert len(dataset._parents) == count

    if count == 0:
        iterator = _Countdown(3)
    else:
        iterator = iter(ZipTwo(*(parent.to_iter_dataset() for parent in parents)))
    with pytest.raises(AssertionError, match=f"{count} parents"):
        _ = iterator._parent


def test_parent_follows_a_reassigned_parents_and_a_stage_may_set_its_own():
    first, second = grain.MapDataset.range(3), grain.MapDataset.range(5)
    converter = FeatureConverter(first, pad_to=2)
    converter._parents = (second,)
    assert converter._parent is second
    assert len(converter) == 5

    class Rewired(grain.MapDataset):
        def __init__(self, parent):
            super().__init__(parent)
            self._parent = parent.map(lambda x: -x)  # a plain attribute wins

        def __len__(self):
            return len(self._parent)

        def __getitem__(self, index):
            return self._parent[index]

    rewired = Rewired(first)
    assert list(rewired) == [0, -1, -2]
    assert rewired._parents == (first,)


def test_a_subclass_skipping_super_init_is_told_to_call_it():
    class Forgetful(grain.MapDataset):
        def __init__(self, parent):
            self._wrapped = parent

        def __len__(self):
            return 1

        def __getitem__(self, index):
            return 0

    with pytest.raises(AttributeError, match=r"super\(\).__init__"):
        _ = Forgetful(grain.MapDataset.range(2))._parent


# -- a feature converter (MapDataset) -----------------------------------------------------------


def test_feature_converter_reads_its_parent_by_index_through_every_path():
    base = grain.MapDataset.range(9).map(lambda x: x * 3)
    converter = FeatureConverter(base, pad_to=4)
    expected = [FeatureConverter(base, 4)[i] for i in range(9)]
    assert [e["length"] for e in expected] == [(3 * i) % 4 for i in range(9)]

    assert [e["length"] for e in converter] == [e["length"] for e in expected]
    batches = list(converter.batch(4))
    assert [len(b["length"]) for b in batches] == [4, 4, 1]
    np.testing.assert_array_equal(
        np.concatenate([b["tokens"] for b in batches]), np.stack([e["tokens"] for e in expected])
    )
    iter_batches = list(converter.to_iter_dataset().batch(4, drop_remainder=True))
    np.testing.assert_array_equal(iter_batches[1]["length"], [e["length"] for e in expected[4:8]])
    assert converter[-1]["length"] == expected[-1]["length"]
    assert [e["length"] for e in converter[2:5]] == [e["length"] for e in expected[2:5]]


def test_feature_converter_after_a_filter_sees_none_and_state_round_trips():
    base = grain.MapDataset.range(20).filter(lambda x: x % 3 != 0)
    converter = FeatureConverter(base, pad_to=5).shuffle(seed=4).repeat(2)
    values = [e["length"] for e in converter]
    assert len(values) == 2 * len([x for x in range(20) if x % 3])
    assert_equal_output_after_checkpoint(converter.to_iter_dataset().batch(3), max_steps=40)


def test_two_parent_dataset_pairs_its_parents():
    pair = Pair(grain.MapDataset.range(4), Squares(6))
    assert list(pair) == [(0, 0), (1, 1), (2, 4), (3, 9)]
    assert [[a.tolist() for a in b] for b in pair.batch(2)][1] == [[2, 3], [4, 9]]
    assert_equal_output_after_checkpoint(pair.to_iter_dataset())


# -- a packing IterDataset and its DatasetIterator ----------------------------------------------


def test_packing_subclass_packs_and_batches():
    pack = Pack(grain.MapDataset.source(LENGTHS).to_iter_dataset(), capacity=10)
    assert list(pack) == _packed(LENGTHS, 10)
    sums = list(pack.map(sum).batch(2))
    flat = np.concatenate(sums).tolist()
    assert flat == [sum(b) for b in _packed(LENGTHS, 10)]
    assert all(total <= 10 for total in flat)


def test_packing_subclass_checkpoints_through_its_parent_at_every_step():
    pack = Pack(grain.MapDataset.source(LENGTHS).to_iter_dataset(), capacity=9)
    _assert_restores_at_every_step(pack)
    _assert_restores_at_every_step(pack.map(sum).batch(2))

    iterator = iter(pack)
    head = [next(iterator) for _ in range(3)]
    state = json.loads(json.dumps(iterator.get_state()))
    rest = list(iterator)
    fresh = iter(Pack(grain.MapDataset.source(LENGTHS).to_iter_dataset(), capacity=9))
    fresh.set_state(state)
    assert list(fresh) == rest
    assert head + rest == _packed(LENGTHS, 9)


def test_a_dataclass_subclass_is_unhashable_and_still_iterates_and_restores():
    parent = grain.MapDataset.source(LENGTHS).to_iter_dataset()
    pack = Pack(parent, capacity=10)
    with pytest.raises(TypeError):
        hash(pack)
    assert pack == Pack(parent, capacity=3)  # the dataclass's __eq__ sees no fields
    assert str(pack.map(sum))  # the pipeline description does not hash its stages
    _assert_restores_at_every_step(pack.map(len))


def test_two_parent_iterator_reads_parents_and_restores():
    zipped = ZipTwo(
        grain.MapDataset.range(5).to_iter_dataset(),
        grain.MapDataset.range(10, 20).to_iter_dataset(),
    )
    assert list(zipped) == [(i, 10 + i) for i in range(5)]
    iterator = iter(zipped)
    assert len(iterator._parents) == 2
    assert_equal_output_after_checkpoint(zipped)


# -- worker processes ---------------------------------------------------------------------------


@pytest.mark.timeout(120)
def test_subclasses_run_in_two_worker_processes_and_restore():
    options = grain.MultiprocessingOptions(num_workers=2)
    pack = Pack(grain.MapDataset.source(LENGTHS).to_iter_dataset(), capacity=10)
    # Each worker packs its own share of the positions (every other length).
    out = list(pack.mp_prefetch(options))
    shares = [_packed(LENGTHS[w::2], 10) for w in range(2)]
    assert sorted(map(tuple, out)) == sorted(map(tuple, shares[0] + shares[1]))

    converter = FeatureConverter(grain.MapDataset.range(10), pad_to=3).to_iter_dataset()
    lengths = [e["length"] for e in converter.mp_prefetch(options)]
    assert lengths == [i % 3 for i in range(10)]

    ds = Pack(grain.MapDataset.source(LENGTHS).to_iter_dataset(), capacity=10).mp_prefetch(options)
    iterator = iter(ds)
    head = [next(iterator) for _ in range(2)]
    state = iterator.get_state()
    rest = list(iterator)
    iterator.close()
    with iter(ds) as fresh:
        fresh.set_state(state)
        assert list(fresh) == rest
    assert sorted(map(tuple, head + rest)) == sorted(map(tuple, out))


@pytest.mark.timeout(120)
def test_mp_context_says_which_worker_of_how_many():
    tagged = WorkerTag(grain.MapDataset.range(8).to_iter_dataset())
    assert {(w, n) for _, w, n in tagged} == {(0, 1)}
    out = list(tagged.mp_prefetch(grain.MultiprocessingOptions(num_workers=2)))
    assert sorted(v for v, _, _ in out) == list(range(8))
    assert {n for _, _, n in out} == {2}
    # Positions are dealt round robin: the worker of an element is its position's.
    assert {(v, w) for v, w, _ in out} == {(v, v % 2) for v in range(8)}


# -- seeds, context, stats, _getitems -----------------------------------------------------------


def test_default_seed_is_a_valid_seed_that_differs_by_position():
    assert Noise(grain.MapDataset.range(3))._default_seed is None
    seeded = grain.MapDataset.range(50).seed(7)
    first = Noise(seeded)
    second = Noise(first)
    seeds = [first._default_seed, second._default_seed]
    assert all(type(s) is int and 0 <= s < 1 << 32 for s in seeds)
    assert seeds[0] != seeds[1]
    assert first._default_seed == Noise(grain.MapDataset.range(50).seed(7))._default_seed
    assert Noise(grain.MapDataset.range(50).seed(8))._default_seed != seeds[0]
    # Grain's seeds are valid `seed=` arguments: a subclass may hand its own on.
    shuffled = first.shuffle(seed=first._default_seed)
    assert sorted(shuffled) == sorted(first)
    assert len(set(first)) > 45  # random values, not one repeated


def test_iterator_context_carries_the_pipelines_options():
    options = grain.experimental.DatasetOptions(filter_raise_threshold_ratio=0.5)
    tagged = WorkerTag(grain.MapDataset.range(3).to_iter_dataset())
    iterator = iter(grain.experimental.WithOptionsIterDataset(tagged, options))
    inner = iterator
    while not isinstance(inner, _WorkerTagIterator):
        inner = inner._parents[0]
    assert inner._ctx is inner._parent._ctx
    assert inner._ctx.dataset_options.filter_raise_threshold_ratio == 0.5
    assert inner._ctx.mp_context.process_index == 0
    assert inner._ctx.mp_context.process_count == 1
    with pytest.raises(dataclasses.FrozenInstanceError):
        inner._ctx.mp_context.process_index = 1  # type: ignore[misc]


def test_iterator_context_without_options_gives_the_defaults():
    iterator = _Countdown(2)
    options = iterator._ctx.dataset_options
    assert isinstance(options, grain.experimental.DatasetOptions)
    assert options == grain.experimental.DatasetOptions()
    assert options.filter_warn_threshold_ratio == 0.9
    assert iter(WorkerTag(grain.MapDataset.range(2).to_iter_dataset()))._ctx.dataset_options == (
        grain.experimental.DatasetOptions()
    )


def test_stats_calls_of_grain_stages_pass_values_through():
    iterator = iter(WorkerTag(grain.MapDataset.range(3).to_iter_dataset()))
    assert list(iterator) == [(0, 0, 1), (1, 0, 1), (2, 0, 1)]
    stats = iterator._stats
    assert stats.record_bytes_consumed(b"ab") == b"ab"
    assert stats.record_output_spec_for_batch([1, 2]) == [1, 2]
    assert grain.MapDataset.range(2)._stats.record_output_spec(5) == 5


def test_getitems_takes_a_list_on_every_stage_and_a_subclass_override_is_used():
    stages = {
        "range": grain.MapDataset.range(6),
        "source": grain.MapDataset.source(list(range(6))),
        "map": grain.MapDataset.range(6).map(lambda x: x + 1),
        "filter": grain.MapDataset.range(6).filter(lambda x: x % 2),
        "batch": grain.MapDataset.range(12).batch(2),
        "subclass": FeatureConverter(grain.MapDataset.range(6), 4),
    }
    for name, stage in stages.items():
        by_list = stage._getitems([0, 5, 7])
        expected = [stage[i] for i in (0, 5, 7)]
        assert len(by_list) == 3, name
        for got, want in zip(by_list, expected, strict=True):
            if isinstance(want, dict):
                np.testing.assert_array_equal(got["tokens"], want["tokens"])
            else:
                np.testing.assert_array_equal(got, want)

    received = []

    class Tens(grain.MapDataset):
        def __init__(self, parent):
            super().__init__(parent)

        def __len__(self):
            return len(self._parent)

        def __getitem__(self, index):
            return self._parent[index] * 10

        def _getitems(self, indices):
            received.append(list(indices))
            return [x * 10 for x in self._parent._getitems([int(i) for i in indices])]

    tens = Tens(grain.MapDataset.range(6))
    assert [b.tolist() for b in tens.batch(3)] == [[0, 10, 20], [30, 40, 50]]
    assert tens._getitems((1, 2)) == [10, 20]
    assert received[-1] == [1, 2]


def test_a_declared_element_spec_is_returned_without_reading_an_element():
    read = []

    class Declared(grain.MapDataset):
        def __init__(self, parent):
            super().__init__(parent)

        def __len__(self):
            return len(self._parent)

        def __getitem__(self, index):
            read.append(index)
            return self._parent[index]

        @property
        def _element_spec(self):
            return {"x": grain.experimental.ShapeDtypeStruct(shape=(3,), dtype=np.int32)}

    spec = grain.experimental.get_element_spec(Declared(grain.MapDataset.range(4)))
    assert spec["x"].shape == (3,)
    assert spec["x"].dtype == np.int32
    assert read == []
    # Without a declaration the spec is read from the first element.
    plain = FeatureConverter(grain.MapDataset.range(4), pad_to=5)
    assert grain.experimental.get_element_spec(plain)["tokens"].shape == (5,)
    with pytest.raises(NotImplementedError):
        _ = plain._element_spec


def test_next_index_hooks_of_the_base_raise_and_a_subclass_may_define_them():
    class Plain(grain.DatasetIterator):
        def __init__(self, parent):
            super().__init__(parent)

        def __next__(self):
            return next(self._parent)

        def get_state(self):
            return self._parent.get_state()

        def set_state(self, state):
            self._parent.set_state(state)

    class Indexed(Plain):
        def _get_next_index(self):
            return grain.experimental.get_next_index(self._parent)

        def _set_next_index(self, index):
            grain.experimental.set_next_index(self._parent, index)

    plain = Plain(iter(grain.MapDataset.range(6).to_iter_dataset()))
    with pytest.raises(NotImplementedError, match="get_state"):
        plain._get_next_index()
    with pytest.raises(NotImplementedError, match="get_state"):
        grain.experimental.get_next_index(plain)
    with pytest.raises(NotImplementedError):
        plain._set_next_index(2)

    indexed = Indexed(iter(grain.MapDataset.range(6).to_iter_dataset()))
    next(indexed)
    assert grain.experimental.get_next_index(indexed) == 1
    grain.experimental.set_next_index(indexed, 4)
    assert list(indexed) == [4, 5]


def test_closed_flag_and_assert_not_closed_for_a_subclass_with_its_own_close():
    class Guarded(grain.DatasetIterator):
        def __init__(self, parent):
            super().__init__(parent)
            self.closes = 0

        def __next__(self):
            self._assert_not_closed()
            return next(self._parent)

        def get_state(self):
            return self._parent.get_state()

        def set_state(self, state):
            self._parent.set_state(state)

        def close(self):
            if self._closed:
                return
            self.closes += 1
            super().close()

    parent = iter(grain.MapDataset.range(4).to_iter_dataset())
    guarded = Guarded(parent)
    assert guarded._closed is False
    assert next(guarded) == 0
    guarded.close()
    guarded.close()
    assert guarded._closed is True
    assert guarded.closes == 1
    with pytest.raises(ValueError, match="closed"):
        guarded._assert_not_closed()
    with pytest.raises(ValueError, match="closed"):
        next(guarded)
    assert guarded.get_state() == parent.get_state()  # still says where it stopped


class _Pool(grain.MapDataset):
    """AirIO's pooling stage: reads ``len(self._parent)`` in __init__."""

    def __init__(self, parent, pool_size):
        super().__init__(parent)
        self._pool_size = pool_size
        self._length = -(-len(self._parent) // pool_size)

    def __len__(self):
        return self._length

    def __getitem__(self, index):
        if isinstance(index, slice):
            return self.slice(index)
        start = index * self._pool_size
        stop = min(len(self._parent), start + self._pool_size)
        return [self._parent[i] for i in range(start, stop)]


class _PackPool(grain.experimental.FlatMapTransform):
    max_fan_out = 3

    def flat_map(self, pool):
        yield from _packed(pool, 8)


@dataclasses.dataclass(frozen=False)
class _PackMap(grain.MapDataset):
    """AirIO's sparse map packing: a dataclass with a `parent` property over `_parent`."""

    def __init__(self, parent):
        super().__init__([parent])
        self._packed = grain.experimental.FlatMapMapDataset(_Pool(parent, 3), _PackPool())

    @property
    def parent(self):
        return self._parent

    def __len__(self):
        return len(self.parent)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return self.slice(index)
        return self._packed[index]


def test_map_packing_over_pools_is_sparse_and_keeps_every_element():
    ds = _PackMap(grain.MapDataset.source(LENGTHS))
    assert len(ds) == len(LENGTHS)
    pools = [LENGTHS[i : i + 3] for i in range(0, len(LENGTHS), 3)]
    expected = [b for pool in pools for b in _packed(pool, 8)]
    assert list(ds) == expected
    assert list(ds.to_iter_dataset()) == expected
    assert sum(x is None for x in (ds[i] for i in range(len(ds)))) == len(LENGTHS) - len(expected)
    assert_equal_output_after_checkpoint(ds.to_iter_dataset().map(sum))
