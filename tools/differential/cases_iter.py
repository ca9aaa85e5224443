"""IterDataset and DatasetIterator: transformations, iteration, state."""

from __future__ import annotations

import copy
import itertools
from typing import Any

import numpy as np

import grain
import grain.python as pg
from _registry import L, case, expr, logged_or_warned, state_shape, take, types_of


def _it(n: int = 6) -> Any:
    return grain.MapDataset.range(n).to_iter_dataset()


def deep_equal(a: Any, b: Any) -> bool:
    """Equality over nested dicts/lists/tuples with numpy arrays as leaves."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return bool(np.shape(a) == np.shape(b) and np.array_equal(np.asarray(a), np.asarray(b)))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(deep_equal(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(deep_equal(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def resume(ds: Any, k: int, limit: int = 200, mode: str = "exact") -> dict[str, Any]:
    """Read k elements, save the state, read the rest; restore into a fresh iterator.

    mode "exact" returns the elements; "sorted" only their sorted multiset (for
    pipelines whose order legitimately differs: shuffles); "none" only how many
    (for random values); all modes say whether the restored iterator continued
    with exactly the same elements, and the state's shape.
    """
    it = iter(ds)
    head = take(it, k)
    st = copy.deepcopy(it.get_state())
    rest = list(itertools.islice(it, limit))
    it2 = iter(ds)
    it2.set_state(st)
    rest2 = list(itertools.islice(it2, limit))
    same = len(rest) == len(rest2) and all(
        deep_equal(a, b) for a, b in zip(rest, rest2, strict=False)
    )
    out: dict[str, Any] = {"resumed_equal": same, "state_shape": state_shape(st)}
    if mode == "exact":
        out.update(head=head, rest=rest)
    elif mode == "sorted":
        out.update(all_sorted=sorted(head + rest), n_head=len(head))
    else:
        out.update(n_head=len(head), n_rest=len(rest))
    return out


# ------------------------------------------------------------------ basics
expr("iter.list", "list(grain.MapDataset.range(5).to_iter_dataset())")
expr("iter.map", "list(grain.MapDataset.range(5).to_iter_dataset().map(lambda x: x + 10))")
expr(
    "iter.filter", "list(grain.MapDataset.range(5).to_iter_dataset().filter(lambda x: x % 2 == 0))"
)
expr(
    "iter.map_with_index",
    "list(grain.MapDataset.range(10, 15).to_iter_dataset().map_with_index(lambda i, x: (i, x)))",
)
expr(
    "iter.map_with_index_after_filter",
    "list(grain.MapDataset.range(10).to_iter_dataset().filter(lambda x: x % 3 == 0).map_with_index(lambda i, x: (i, x)))",
)
expr("iter.batch", "[b.tolist() for b in grain.MapDataset.range(5).to_iter_dataset().batch(2)]")
expr("iter.batch_types", "types_of(list(grain.MapDataset.range(5).to_iter_dataset().batch(2)))")
expr(
    "iter.batch_drop_remainder",
    "[b.tolist() for b in grain.MapDataset.range(5).to_iter_dataset().batch(2, drop_remainder=True)]",
)
expr(
    "iter.batch_fn",
    "list(grain.MapDataset.range(5).to_iter_dataset().batch(2, batch_fn=lambda xs: list(xs)))",
)
expr(
    "iter.batch_after_filter",
    "[b.tolist() for b in grain.MapDataset.range(10).to_iter_dataset().filter(lambda x: x % 2 == 0).batch(2)]",
)
expr(
    "iter.batch_larger_than_data",
    "[b.tolist() for b in grain.MapDataset.range(3).to_iter_dataset().batch(10)]",
)
expr(
    "iter.batch_larger_than_data_drop",
    "list(grain.MapDataset.range(3).to_iter_dataset().batch(10, drop_remainder=True))",
)
expr("iter.batch_empty_input", "list(grain.MapDataset.range(0).to_iter_dataset().batch(2))")
expr(
    "iter.isinstance",
    "[isinstance(grain.MapDataset.range(3).to_iter_dataset(), grain.IterDataset), isinstance(grain.MapDataset.range(3).to_iter_dataset(), grain.MapDataset)]",
)
expr(
    "iter.pipe",
    "list(grain.MapDataset.range(4).to_iter_dataset().pipe(lambda ds, k: ds.map(lambda x: x * k), k=5))",
)
expr("iter.parents", "len(grain.MapDataset.range(4).to_iter_dataset().map(str).parents)")
expr(
    "iter.map_returns_none_kept",
    "list(grain.MapDataset.range(4).to_iter_dataset().map(lambda x: None if x == 1 else x))",
)
expr(
    "iter.has_no_shuffle",
    "[hasattr(grain.MapDataset.range(3).to_iter_dataset(), m) for m in ('shuffle', 'slice', 'repeat', '__len__', '__getitem__')]",
)


@case("iter.batch_dicts")
def _():
    ds = grain.MapDataset.range(4).to_iter_dataset().map(lambda x: {"x": x, "y": [x, x]})
    b = next(iter(ds.batch(2)))
    return {"value": b, "types": types_of(b)}


@case("iter.batch_mismatched_shapes")
def _():
    ds = grain.MapDataset.source([np.zeros(2), np.zeros(3)]).to_iter_dataset().batch(2)
    return next(iter(ds))


@case("iter.batch_mismatched_structure")
def _():
    ds = grain.MapDataset.source([{"a": 1}, {"b": 2}]).to_iter_dataset().batch(2)
    return next(iter(ds))


@case("map.batch_mismatched_shapes")
def _():
    return grain.MapDataset.source([np.zeros(2), np.zeros(3)]).batch(2)[0]


@case("iter.random_map_deterministic")
def _():
    ds = _it(8).random_map(lambda x, rng: int(rng.integers(0, 10**6)), seed=3)
    return {"same": list(ds) == list(ds), "n": len(list(ds))}


@case("iter.random_map_seeded_by_ds_seed")
def _():
    ds = (
        grain.MapDataset.range(8)
        .to_iter_dataset()
        .seed(2)
        .random_map(lambda x, r: float(r.random()))
    )
    return list(ds) == list(ds)


@case("iter.random_map_class")
def _():
    class R(grain.transforms.RandomMap):
        def random_map(self, x, rng):
            return (x, type(rng).__name__)

    return list(_it(3).random_map(R(), seed=0))


@case("iter.map_class")
def _():
    class M(pg.MapTransform):
        def map(self, x):
            return -x

    return list(_it(3).map(M()))


@case("iter.filter_class")
def _():
    class F(grain.transforms.Filter):
        def filter(self, x):
            return x > 2

    return list(_it(6).filter(F()))


@case("iter.map_with_index_class")
def _():
    class T(grain.transforms.MapWithIndex):
        def map_with_index(self, i, x):
            return i - x

    return list(_it(4).map_with_index(T()))


@case("iter.apply_list")
def _():
    class Plus(grain.transforms.Map):
        def map(self, x):
            return x + 1

    return [
        b.tolist() for b in _it(5).apply([Plus(), grain.transforms.Batch(2, drop_remainder=True)])
    ]


@case("iter.filter_warns_threshold", isolated=True)
def _():
    ds = grain.MapDataset.range(3000).to_iter_dataset().filter(lambda x: x < 5)
    return logged_or_warned(lambda: list(ds))


@case("iter.filter_no_warning_below_threshold", isolated=True)
def _():
    ds = grain.MapDataset.range(3000).to_iter_dataset().filter(lambda x: x % 2 == 0)
    return logged_or_warned(lambda: len(list(ds)))


# ------------------------------------------------------------------ mix
expr(
    "iter.mix.uniform",
    "list(grain.IterDataset.mix([grain.MapDataset.range(5).to_iter_dataset(), grain.MapDataset.range(7, 10).to_iter_dataset()]))",
)
expr(
    "iter.mix.weights",
    "list(grain.IterDataset.mix([grain.MapDataset.range(10).to_iter_dataset(), grain.MapDataset.range(100, 110).to_iter_dataset()], weights=[3, 1]))",
)
expr(
    "iter.mix.single", "list(grain.IterDataset.mix([grain.MapDataset.range(3).to_iter_dataset()]))"
)
expr(
    "iter.mix.map_datasets",
    "list(grain.IterDataset.mix([grain.MapDataset.range(3), grain.MapDataset.range(10, 13)]))",
)
expr(
    "iter.mix.mapping",
    "list(grain.IterDataset.mix({'a': grain.MapDataset.range(3).to_iter_dataset(), 'b': grain.MapDataset.range(10, 13).to_iter_dataset()}, weights={'a': 1.0, 'b': 1.0}))",
)
expr(
    "iter.mix.mapping_no_weights",
    "list(grain.IterDataset.mix({'a': grain.MapDataset.range(3).to_iter_dataset(), 'b': grain.MapDataset.range(10, 13).to_iter_dataset()}))",
)
expr(
    "iter.mix.filtered_component",
    "list(grain.IterDataset.mix([grain.MapDataset.range(20).to_iter_dataset().filter(lambda x: x % 5 == 0), grain.MapDataset.range(100, 104).to_iter_dataset()]))",
)


@case("iter.mix.resume")
def _():
    ds = grain.IterDataset.mix(
        [_it(10), grain.MapDataset.range(100, 110).to_iter_dataset()], weights=[2, 1]
    )
    return resume(ds, 4)


@case("iter.mix.state_shape_fresh")
def _():
    ds = grain.IterDataset.mix([_it(3), _it(3)])
    return state_shape(iter(ds).get_state())


# ------------------------------------------------------------------ iterator protocol
@case("iter.iterator.iter_is_self")
def _():
    it = iter(_it(3))
    return iter(it) is it


@case("iter.iterator.exhausted_stays_exhausted")
def _():
    it = iter(_it(2))
    out = [next(it), next(it)]
    res = []
    for _ in range(3):
        try:
            next(it)
            res.append("value")
        except StopIteration:
            res.append("StopIteration")
    return {"out": out, "after": res}


@case("iter.iterator.map_dataset_iter_exhausted")
def _():
    it = iter(grain.MapDataset.range(1))
    next(it)
    r = []
    for _ in range(2):
        try:
            next(it)
            r.append("value")
        except StopIteration:
            r.append("StopIteration")
    return r


@case("iter.iterator.next_after_close")
def _():
    it = iter(_it(5))
    next(it)
    it.close()
    return next(it)


@case("iter.iterator.close_twice")
def _():
    it = iter(_it(5))
    it.close()
    it.close()
    return "ok"


@case("iter.iterator.close_then_get_state")
def _():
    it = iter(_it(5))
    next(it)
    it.close()
    return it.get_state()


@case("iter.iterator.context_manager")
def _():
    it = iter(_it(5))
    return hasattr(it, "__enter__") and hasattr(it, "__exit__")


@case("iter.iterator.start_prefetch_then_next")
def _():
    it = iter(_it(5))
    it.start_prefetch()
    return list(it)


@case("iter.iterator.map_iter_start_prefetch")
def _():
    it = iter(grain.MapDataset.range(3))
    it.start_prefetch()
    return list(it)


@case("iter.iterator.two_iterators_independent")
def _():
    ds = _it(5)
    a, b = iter(ds), iter(ds)
    return [next(a), next(a), next(b), next(a), next(b)]


@case("iter.iterator.isinstance")
def _():
    it = iter(_it(3))
    return [isinstance(it, grain.DatasetIterator), isinstance(it, pg.DatasetIterator)]


@case("iter.iterator.custom_subclass")
def _():
    class Counter(grain.DatasetIterator):
        def __init__(self):
            super().__init__()
            self._i = 0

        def __next__(self):
            if self._i >= 3:
                raise StopIteration
            self._i += 1
            return self._i

        def get_state(self):
            return {"i": self._i}

        def set_state(self, state):
            self._i = state["i"]

    class Ds(grain.IterDataset):
        def __iter__(self):
            return Counter()

    ds = Ds().map(lambda x: x * 10)
    return resume(ds, 1)


@case("iter.iterator.custom_iter_dataset_with_parent")
def _():
    class Inner(grain.DatasetIterator):
        def __init__(self, parent):
            super().__init__(parent)
            self._p = parent

        def __next__(self):
            return next(self._p) + 1

        def get_state(self):
            return self._p.get_state()

        def set_state(self, state):
            self._p.set_state(state)

    class Plus(grain.IterDataset):
        def __init__(self, parent):
            super().__init__(parent)

        def __iter__(self):
            return Inner(iter(self.parents[0]))

    return resume(Plus(_it(5)), 2)


# ------------------------------------------------------------------ state
@case("state.to_iter.shape")
def _():
    it = iter(_it(5))
    next(it)
    return {"state_shape": state_shape(it.get_state()), "state": it.get_state()}


@case("state.to_iter.fresh")
def _():
    return iter(_it(5)).get_state()


@case("state.to_iter.exhausted")
def _():
    it = iter(_it(3))
    list(it)
    return it.get_state()


@case("state.map_iter.shape")
def _():
    it = iter(grain.MapDataset.range(5))
    next(it)
    return {"state_shape": state_shape(it.get_state()), "state": it.get_state()}


def _resume_case(name: str, build: Any, k: int, limit: int = 200, mode: str = "exact") -> None:
    def fn() -> Any:
        return resume(build(), k, limit, mode)

    from _registry import Case, _lambda_text, _register

    _register(Case(name, fn, f"resume({_lambda_text(build)}, k={k})"))


_resume_case("state.resume.to_iter", lambda: _it(10), 3)
_resume_case("state.resume.to_iter_at_start", lambda: _it(10), 0)
_resume_case("state.resume.to_iter_at_end", lambda: _it(5), 5)
_resume_case(
    "state.resume.shuffle",
    lambda: grain.MapDataset.range(20).shuffle(seed=5).to_iter_dataset(),
    7,
    mode="sorted",
)
_resume_case(
    "state.resume.filter",
    lambda: grain.MapDataset.range(20).to_iter_dataset().filter(lambda x: x % 3 == 0),
    2,
)
_resume_case(
    "state.resume.map_filter",
    lambda: grain.MapDataset.range(20).filter(lambda x: x % 3 == 0).to_iter_dataset(),
    2,
)
_resume_case("state.resume.batch", lambda: grain.MapDataset.range(11).to_iter_dataset().batch(3), 2)
_resume_case(
    "state.resume.map_batch", lambda: grain.MapDataset.range(11).batch(3).to_iter_dataset(), 2
)
_resume_case(
    "state.resume.random_map",
    lambda: (
        grain.MapDataset.range(10)
        .to_iter_dataset()
        .random_map(lambda x, r: int(r.integers(0, 1000)), seed=1)
    ),
    4,
    mode="none",
)
_resume_case(
    "state.resume.map_random_map",
    lambda: (
        grain.MapDataset.range(10)
        .random_map(lambda x, r: int(r.integers(0, 1000)), seed=1)
        .to_iter_dataset()
    ),
    4,
    mode="none",
)
_resume_case(
    "state.resume.repeat_across_epoch",
    lambda: grain.MapDataset.range(4).shuffle(seed=2).repeat(3).to_iter_dataset(),
    6,
    mode="sorted",
)
_resume_case(
    "state.resume.map_with_index",
    lambda: grain.MapDataset.range(8).to_iter_dataset().map_with_index(lambda i, x: i * 100 + x),
    3,
)
_resume_case(
    "state.resume.mix_map",
    lambda: grain.MapDataset.mix(
        [grain.MapDataset.range(5), grain.MapDataset.range(10, 15)], weights=[1, 2]
    ).to_iter_dataset(),
    4,
    mode="none",
)
_resume_case(
    "state.resume.read_options_threads",
    lambda: (
        grain.MapDataset.range(30)
        .map(lambda x: x * 2)
        .to_iter_dataset(grain.ReadOptions(num_threads=4, prefetch_buffer_size=8))
    ),
    9,
)


@case("state.set_state_then_get_state")
def _():
    ds = _it(10).batch(2)
    it = iter(ds)
    take(it, 2)
    st = it.get_state()
    it2 = iter(ds)
    it2.set_state(st)
    return it2.get_state() == st


@case("state.set_state_backwards")
def _():
    ds = _it(10)
    it = iter(ds)
    take(it, 2)
    st = it.get_state()
    take(it, 5)
    it.set_state(st)
    return take(it, 3)


@case("state.state_is_json_serializable")
def _():
    import json

    ds = grain.IterDataset.mix([_it(5).batch(2), _it(5).batch(2)]).map(lambda x: x)
    it = iter(ds)
    next(it)
    return json.loads(json.dumps(it.get_state())) == it.get_state()


@case("state.shape_stable_over_iteration")
def _():
    ds = grain.MapDataset.range(10).to_iter_dataset().filter(lambda x: x % 2).batch(2)
    it = iter(ds)
    shapes = [state_shape(it.get_state())]
    for _ in it:
        shapes.append(state_shape(it.get_state()))
    return {"distinct": len({repr(s) for s in shapes}), "first": shapes[0]}


@case("state.shape.batch")
def _():
    it = iter(_it(6).batch(2))
    next(it)
    return state_shape(it.get_state())


@case("state.shape.filter")
def _():
    it = iter(_it(6).filter(lambda x: x % 2 == 0))
    next(it)
    return state_shape(it.get_state())


@case("state.shape.map")
def _():
    it = iter(_it(6).map(lambda x: x))
    next(it)
    return state_shape(it.get_state())


@case("state.shape.random_map")
def _():
    it = iter(_it(6).random_map(lambda x, r: x, seed=0))
    next(it)
    return state_shape(it.get_state())


@case("state.shape.mix")
def _():
    it = iter(grain.IterDataset.mix([_it(6), _it(6)], weights=[1, 2]))
    next(it)
    return state_shape(it.get_state())


@case("state.values.mix")
def _():
    it = iter(grain.IterDataset.mix([_it(6), _it(6)], weights=[1, 2]))
    take(it, 4)
    return it.get_state()


@case("state.values.batch")
def _():
    it = iter(_it(10).batch(3))
    take(it, 2)
    return it.get_state()


@case("state.values.filter")
def _():
    it = iter(_it(10).filter(lambda x: x % 4 == 0))
    take(it, 2)
    return it.get_state()


# ------------------------------------------------------------------ mp_prefetch / prefetch
expr(
    "iter.mp_prefetch.zero_workers",
    "list(grain.MapDataset.range(6).to_iter_dataset().mp_prefetch(grain.MultiprocessingOptions(num_workers=0)))",
    timeout=30,
)


@case("iter.mp_prefetch.one_worker", timeout=60)
def _():
    ds = grain.MapDataset.range(8).map(lambda x: x * 2).to_iter_dataset()
    ds = ds.mp_prefetch(grain.MultiprocessingOptions(num_workers=1))
    it = iter(ds)
    head = take(it, 3)
    st = it.get_state()
    rest = list(it)
    return {"head": head, "rest": rest, "state_shape": state_shape(st)}


@case("iter.mp_prefetch.two_workers_order", timeout=60)
def _():
    ds = grain.MapDataset.range(10).to_iter_dataset()
    return list(ds.mp_prefetch(grain.MultiprocessingOptions(num_workers=2)))


@case("iter.prefetch.deprecated_alias", timeout=60)
def _():
    ds = grain.MapDataset.range(4).to_iter_dataset()
    return list(ds.prefetch(grain.MultiprocessingOptions(num_workers=1)))


_ = (L, pg)
