"""subclass.*: MapDataset / IterDataset / DatasetIterator subclasses written as Grain's
docs and real clients (AirIO's packing and feature converters) write them.

They read the protected names of the bases: `_parent` (the one parent),
`_parents`, `_default_seed`, an iterator's `_ctx` (`mp_context`,
`dataset_options`) and `_stats`, and call `_getitems` with a list. The classes
are defined at module level so that worker processes can unpickle them.
"""

from __future__ import annotations

import dataclasses
import itertools
import numbers
from typing import Any

import numpy as np

import grain
from _registry import case, take

# ------------------------------------------------------------------ the subclasses


class Squares(grain.MapDataset):
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
    def __init__(self, parent: Any, pad_to: int = 4):
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


class OneInList(grain.MapDataset):
    def __init__(self, parent: Any):
        super().__init__([parent])

    def __len__(self):
        return len(self._parent)

    def __getitem__(self, index):
        return self._parent[index] + 100


class Pair(grain.MapDataset):
    def __init__(self, first: Any, second: Any):
        super().__init__([first, second])

    def __len__(self):
        return min(len(p) for p in self._parents)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return self.slice(index)
        first, second = self._parents
        return (first[index], second[index])


class Tens(grain.MapDataset):
    def __init__(self, parent: Any):
        super().__init__(parent)

    def __len__(self):
        return len(self._parent)

    def __getitem__(self, index):
        return self._parent[index] * 10

    def _getitems(self, indices):
        return [x * 10 for x in self._parent._getitems([int(i) for i in indices])]


class Noise(grain.MapDataset):
    def __init__(self, parent: Any):
        super().__init__(parent)

    def __len__(self):
        return len(self._parent)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return self.slice(index)
        rng = np.random.default_rng([int(self._default_seed), index])
        return int(rng.integers(1 << 30))


class Declared(grain.MapDataset):
    def __init__(self, parent: Any):
        super().__init__(parent)

    def __len__(self):
        return len(self._parent)

    def __getitem__(self, index):
        return self._parent[index]

    @property
    def _element_spec(self):
        spec = grain.experimental.ShapeDtypeStruct(shape=(3,), dtype=np.int32)
        return {"x": spec}


class Pool(grain.MapDataset):
    """Pools consecutive elements, reading `len(self._parent)` in __init__ (AirIO's shape)."""

    def __init__(self, parent: Any, pool_size: int):
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


class PackPool(grain.experimental.FlatMapTransform):
    def __init__(self, pool_size: int):
        self.max_fan_out = pool_size

    def flat_map(self, pool):
        current: list[int] = []
        for x in pool:
            if sum(current) + x > 8:
                yield current
                current = [x]
            else:
                current.append(x)
        if current:
            yield current


@dataclasses.dataclass(frozen=False)
class PackMap(grain.MapDataset):
    """A sparse packed MapDataset over a flat map of pools, with a `parent` property."""

    def __init__(self, parent: Any, pool_size: int):
        super().__init__([parent])
        pools = Pool(parent, pool_size)
        self._packed = grain.experimental.FlatMapMapDataset(pools, PackPool(pool_size))

    @property
    def parent(self):
        return self._parent

    def __len__(self):
        return len(self.parent)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return self.slice(index)
        return self._packed[index]


class PackIterator(grain.DatasetIterator):
    def __init__(self, parent: Any, capacity: int):
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
    def __init__(self, parent: Any, capacity: int = 10):
        super().__init__([parent])
        self._capacity = capacity

    def __iter__(self):
        return PackIterator(iter(self._parent), self._capacity)


class ZipIterator(grain.DatasetIterator):
    def __init__(self, parents: Any):
        super().__init__(parents)

    def __next__(self):
        return tuple([next(p) for p in self._parents])

    def get_state(self):
        return {"parents": [p.get_state() for p in self._parents]}

    def set_state(self, state):
        for p, s in zip(self._parents, state["parents"], strict=True):
            p.set_state(s)


class ZipTwo(grain.IterDataset):
    def __init__(self, first: Any, second: Any):
        super().__init__([first, second])

    def __iter__(self):
        return ZipIterator([iter(p) for p in self._parents])


class Countdown(grain.DatasetIterator):
    def __init__(self, start: int = 3):
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


class CountdownDataset(grain.IterDataset):
    def __iter__(self):
        return Countdown(3)


class TagIterator(grain.DatasetIterator):
    def __init__(self, parent: Any):
        super().__init__(parent)

    def __next__(self):
        value = next(self._parent)
        mp = self._ctx.mp_context
        with self._stats.record_self_time():
            return self._stats.record_output_spec((value, mp.process_index, mp.process_count))

    def get_state(self):
        return self._parent.get_state()

    def set_state(self, state):
        self._parent.set_state(state)


class Tag(grain.IterDataset):
    def __init__(self, parent: Any):
        super().__init__(parent)

    def __iter__(self):
        return TagIterator(iter(self._parent))


class FromDataset(grain.IterDataset):
    """A mistake: passes its parent dataset, not an iterator, to the iterator."""

    def __init__(self, parent: Any):
        super().__init__(parent)

    def __iter__(self):
        return TagIterator(self._parent)


LENGTHS = [3, 5, 2, 7, 1, 4, 4, 6, 2, 2, 8, 1, 3]


def _lengths() -> Any:
    return grain.MapDataset.source(LENGTHS).to_iter_dataset()


def _raises(fn: Any) -> Any:
    """The exception's type name, so that a case records both values and failures."""
    try:
        fn()
    except Exception as e:  # the type is the point of the case
        return type(e).__name__
    return "no error"


def _pack_resume(ds: Any, k: int) -> dict[str, Any]:
    it = iter(ds)
    head = take(it, k)
    state = it.get_state()
    rest = list(it)
    fresh = iter(ds)
    fresh.set_state(state)
    return {
        "head": head,
        "rest": rest,
        "resumed": list(fresh),
        "bin": state["bin"],
        "parent_next_index": state["parent"]["next_index"],
    }


# ------------------------------------------------------------------ _parent / _parents


@case("subclass.map.parent_is_the_parent")
def _():
    base = grain.MapDataset.range(6)
    ds = FeatureConverter(base)
    return {
        "is": ds._parent is base,
        "parents_is_tuple": isinstance(ds._parents, tuple),
        "parents": [p is base for p in ds._parents],
        "public_parents": [p is base for p in ds.parents],
    }


@case("subclass.map.parent_given_in_a_list")
def _():
    base = grain.MapDataset.range(4)
    ds = OneInList(base)
    return {"is": ds._parent is base, "values": list(ds)}


@case("subclass.map.parent_of_a_source")
def _():
    return Squares(3)._parent


@case("subclass.map.parent_of_two_parents")
def _():
    return Pair(grain.MapDataset.range(3), grain.MapDataset.range(3))._parent


@case("subclass.map.parents_of_source_and_pair")
def _():
    pair = Pair(grain.MapDataset.range(3), Squares(4))
    return {"source": len(Squares(3)._parents), "pair": len(pair._parents)}


@case("subclass.iter.parent_is_the_parent")
def _():
    base = _lengths()
    ds = Pack(base)
    it = iter(ds)
    return {
        "dataset": ds._parent is base,
        "iterator_parent_is_iterator": isinstance(it._parent, grain.DatasetIterator),
        "parents": [p is it._parent for p in it._parents],
        "parents_is_tuple": isinstance(it._parents, tuple),
    }


@case("subclass.iter.iterator_parent_without_parents")
def _():
    return Countdown()._parent


@case("subclass.iter.iterator_parent_of_two")
def _():
    it = iter(ZipTwo(_lengths(), _lengths()))
    return it._parent


@case("subclass.iter.iterator_of_a_dataset_not_an_iterator")
def _():
    return list(FromDataset(_lengths()))


# ------------------------------------------------------------------ a feature converter


@case("subclass.map.feature_converter.values")
def _():
    ds = FeatureConverter(grain.MapDataset.range(9).map(lambda x: x * 3))
    return {"all": list(ds), "last": ds[-1], "past_end": ds[11], "slice": list(ds[2:5])}


@case("subclass.map.feature_converter.batch")
def _():
    return list(FeatureConverter(grain.MapDataset.range(9)).batch(4))


@case("subclass.map.feature_converter.to_iter_batch_resume")
def _():
    ds = FeatureConverter(grain.MapDataset.range(10)).to_iter_dataset().batch(3)
    it = iter(ds)
    head = take(it, 2)
    state = it.get_state()
    rest = list(it)
    fresh = iter(ds)
    fresh.set_state(state)
    return {"head": head, "rest": rest, "resumed": list(fresh)}


@case("subclass.map.feature_converter.after_filter")
def _():
    ds = FeatureConverter(grain.MapDataset.range(12).filter(lambda x: x % 3 != 0))
    return {"lengths": [e["length"] for e in ds], "none_at_0": ds[0] is None}


@case("subclass.map.two_parents.values")
def _():
    pair = Pair(grain.MapDataset.range(4), Squares(6))
    return {"all": list(pair), "batch": list(pair.batch(2))}


@case("subclass.map.feature_converter.mp_prefetch", timeout=60)
def _():
    ds = FeatureConverter(grain.MapDataset.range(10), pad_to=3).to_iter_dataset()
    return list(ds.mp_prefetch(grain.MultiprocessingOptions(num_workers=2)))


@case("subclass.map.pool_pack_flat_map")
def _():
    ds = PackMap(grain.MapDataset.source(LENGTHS), 3)
    return {
        "len": len(ds),
        "by_index": [ds[i] for i in range(len(ds))],
        "iter": list(ds),
        "to_iter": list(ds.to_iter_dataset()),
        "slice": list(ds[1:4]),
    }


# ------------------------------------------------------------------ a packing IterDataset


@case("subclass.iter.pack.values")
def _():
    return list(Pack(_lengths()))


@case("subclass.iter.pack.map_batch")
def _():
    return list(Pack(_lengths()).map(sum).batch(2))


@case("subclass.iter.pack.resume")
def _():
    return [_pack_resume(Pack(_lengths(), capacity=9), k) for k in (0, 1, 3, 6)]


@case("subclass.iter.pack.dataclass_unhashable")
def _():
    ds = Pack(_lengths())
    return {"hash": _raises(lambda: hash(ds)), "eq": ds == Pack(_lengths(), 3)}


@case("subclass.iter.pack.mp_prefetch", timeout=60)
def _():
    return list(Pack(_lengths()).mp_prefetch(grain.MultiprocessingOptions(num_workers=2)))


@case("subclass.iter.pack.mp_prefetch_resume", timeout=60)
def _():
    ds = Pack(_lengths()).mp_prefetch(grain.MultiprocessingOptions(num_workers=2))
    it = iter(ds)
    head = take(it, 2)
    state = it.get_state()
    rest = list(it)
    it.close()
    fresh = iter(ds)
    fresh.set_state(state)
    resumed = list(fresh)
    fresh.close()
    return {"head": head, "rest": rest, "resumed": resumed}


@case("subclass.iter.zip_two.values")
def _():
    ds = ZipTwo(_lengths(), grain.MapDataset.range(100, 110).to_iter_dataset())
    it = iter(ds)
    head = take(it, 3)
    state = it.get_state()
    fresh = iter(ds)
    fresh.set_state(state)
    return {"head": head, "rest": list(it), "resumed": list(fresh)}


@case("subclass.iter.countdown.map")
def _():
    return list(CountdownDataset().map(lambda x: x * 10))


# ------------------------------------------------------------------ _ctx and _stats


@case("subclass.iter.ctx.mp_context")
def _():
    it = iter(Tag(_lengths()))
    return {"values": list(it), "shared": it._ctx is it._parent._ctx}


@case("subclass.iter.ctx.mp_context_in_workers", timeout=60)
def _():
    ds = Tag(grain.MapDataset.range(8).to_iter_dataset())
    return list(ds.mp_prefetch(grain.MultiprocessingOptions(num_workers=2)))


@case("subclass.iter.ctx.dataset_options")
def _():
    options = grain.experimental.DatasetOptions(filter_raise_threshold_ratio=0.5)
    ds = grain.experimental.WithOptionsIterDataset(Tag(_lengths()), options)
    inner = iter(ds)
    while not isinstance(inner, TagIterator):
        inner = inner._parents[0]
    return inner._ctx.dataset_options.filter_raise_threshold_ratio


@case("subclass.iter.ctx.dataset_options_default")
def _():
    options = Countdown()._ctx.dataset_options
    inner = iter(Tag(_lengths()))._ctx.dataset_options
    return {
        "warn": options.filter_warn_threshold_ratio,
        "raise": options.filter_raise_threshold_ratio,
        "min_shm_size": options.min_shm_size,
        "inner_warn": inner.filter_warn_threshold_ratio,
    }


@case("subclass.iter.ctx.mp_context_frozen")
def _():
    it = iter(Tag(_lengths()))

    def assign() -> None:
        it._ctx.mp_context.process_index = 1

    return _raises(assign)


@case("subclass.iter.stats.pass_through")
def _():
    it = iter(Tag(_lengths()))
    stats = it._stats
    with stats.record_self_time(num_elements=2):
        pass
    return {
        "spec": stats.record_output_spec(5),
        "batch": stats.record_output_spec_for_batch([1, 2]),
        "consumed": stats.record_bytes_consumed(b"ab").decode(),
        "dataset": grain.MapDataset.range(2)._stats.record_output_spec(7),
    }


# ------------------------------------------------------------------ _default_seed


@case("subclass.seed.default_seed")
def _():
    unseeded = Noise(grain.MapDataset.range(3))._default_seed
    first = Noise(grain.MapDataset.range(50).seed(7))
    second = Noise(first)
    seeds = [first._default_seed, second._default_seed]
    return {
        "unseeded": unseeded,
        "integral": all(isinstance(s, numbers.Integral) for s in seeds),
        "in_range": all(0 <= int(s) < 1 << 32 for s in seeds),
        "distinct": seeds[0] != seeds[1],
        "stable": int(Noise(grain.MapDataset.range(50).seed(7))._default_seed) == int(seeds[0]),
        "distinct_values": len(set(first)) > 45,
    }


@case("subclass.seed.default_seed_as_a_seed")
def _():
    ds = Noise(grain.MapDataset.range(20).seed(3))
    values = sorted(ds)
    return {
        "shuffle": sorted(ds.shuffle(seed=ds._default_seed)) == values,
        "random_map": len(list(ds.random_map(lambda x, r: x, seed=ds._default_seed))),
    }


# ------------------------------------------------------------------ _getitems


@case("subclass.getitems.list_on_builtin_stages")
def _():
    stages = {
        "range": grain.MapDataset.range(6),
        "source": grain.MapDataset.source(list(range(6))),
        "map": grain.MapDataset.range(6).map(lambda x: x + 1),
        "filter": grain.MapDataset.range(6).filter(lambda x: x % 2),
        "batch": grain.MapDataset.range(12).batch(2),
        "repeat": grain.MapDataset.range(3).repeat(3),
    }
    return {name: stage._getitems([0, 5, 7]) for name, stage in stages.items()}


@case("subclass.getitems.override")
def _():
    ds = Tens(grain.MapDataset.range(6))
    return {
        "direct": ds._getitems([1, 2]),
        "tuple": ds._getitems((3, 7)),
        "batch": list(ds.batch(3)),
        "iter": list(itertools.islice(ds.to_iter_dataset(), 4)),
    }


# ------------------------------------------------------------------ start_prefetch / close


@case("subclass.iter.start_prefetch_and_close")
def _():
    it = iter(Tag(_lengths()))
    started = it.start_prefetch()
    head = next(it)
    closed = it.close()
    return {
        "start_prefetch": started,
        "head": head,
        "close": closed,
        "next_after_close": _raises(lambda: next(it)),
        "close_again": _raises(it.close),
    }


# ------------------------------------------------------------------ _element_spec


@case("subclass.declared_spec.returned")
def _():
    spec = grain.experimental.get_element_spec(Declared(grain.MapDataset.range(4)))
    return {"shape": list(spec["x"].shape), "dtype": np.dtype(spec["x"].dtype).name}


# ------------------------------------------------------------------ next-index hooks


class Indexed(TagIterator):
    def _get_next_index(self):
        return grain.experimental.get_next_index(self._parent)

    def _set_next_index(self, index):
        grain.experimental.set_next_index(self._parent, index)


@case("subclass.next_index.base_hooks_raise")
def _():
    it = TagIterator(iter(_lengths()))
    return {
        "direct_get": _raises(it._get_next_index),
        "direct_set": _raises(lambda: it._set_next_index(2)),
        "get_next_index": _raises(lambda: grain.experimental.get_next_index(it)),
    }


@case("subclass.next_index.defined_by_subclass")
def _():
    it = Indexed(iter(_lengths()))
    next(it)
    at = grain.experimental.get_next_index(it)
    grain.experimental.set_next_index(it, 10)
    return {"at": at, "rest": list(it)}


# ------------------------------------------------------------------ _closed


class Guarded(TagIterator):
    closes = 0

    def __next__(self):
        self._assert_not_closed()
        return super().__next__()

    def close(self):
        if self._closed:
            return
        self.closes += 1
        super().close()


@case("subclass.closed.flag_and_assert")
def _():
    it = Guarded(iter(_lengths()))
    before = it._closed
    head = next(it)
    it.close()
    it.close()
    return {
        "before": before,
        "after": it._closed,
        "closes": it.closes,
        "head": head,
        "assert": _raises(it._assert_not_closed),
        "next": _raises(lambda: next(it)),
    }
