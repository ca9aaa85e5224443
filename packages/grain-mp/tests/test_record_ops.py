"""Grain's DataLoader operations: Map/RandomMap/Filter/BatchOperation and callables over Records.

The facts pinned here come from running Grain 0.2.18 as a black box: an
operation's ``__call__`` takes an iterator of Records and returns a generator of
Records; Map/Filter/Batch drop the `record_key` of the metadata; a batch
carries its last record's metadata; `batch_fn` gets a list of the data; a
failing user function is re-raised as ValueError with the original as cause;
any callable in `operations` is run as an operation.
"""

import dataclasses
import json
import types

import numpy as np
import pytest

from grain_dataset import Batch, FilterTransform, MapTransform, RandomMapTransform
from grain_index import IndexSampler, Record, RecordMetadata
from grain_mp import (
    BatchOperation,
    DataLoader,
    FilterOperation,
    MapOperation,
    RandomMapOperation,
)

N = 40


def _records(n=5, rng=False):
    return [
        Record(
            RecordMetadata(
                index=i, record_key=100 + i, rng=np.random.default_rng(i) if rng else None
            ),
            i,
        )
        for i in range(n)
    ]


def _plain(element):
    if isinstance(element, np.ndarray):
        return element.tolist()
    if isinstance(element, tuple | list):
        return type(element)(_plain(e) for e in element)
    if isinstance(element, dict):
        return {k: _plain(v) for k, v in element.items()}
    return element


def _loader(operations, workers=0, *, n=N, epochs=2, seed=3):
    return DataLoader(
        data_source=list(range(n)),
        sampler=IndexSampler(n, shuffle=True, num_epochs=epochs, seed=seed),
        operations=operations,
        worker_count=workers,
    )


def _read(loader):
    return [_plain(x) for x in loader]


# -- the operations on their own ----------------------------------------------------------


def test_map_operation_is_a_lazy_generator_that_drops_record_keys():
    out = MapOperation(lambda x: x * 10)(iter(_records()))
    assert isinstance(out, types.GeneratorType)
    out = list(out)
    assert [r.data for r in out] == [0, 10, 20, 30, 40]
    assert [r.metadata for r in out] == [RecordMetadata(index=i) for i in range(5)]


def test_filter_operation_keeps_what_the_condition_accepts():
    out = list(FilterOperation(lambda x: x % 2 == 0)(iter(_records())))
    assert [(r.metadata.index, r.metadata.record_key, r.data) for r in out] == [
        (0, None, 0),
        (2, None, 2),
        (4, None, 4),
    ]


def test_random_map_operation_draws_from_each_records_rng():
    out = list(
        RandomMapOperation(lambda x, rng: (x, int(rng.integers(1000))))(iter(_records(3, True)))
    )
    assert [r.data for r in out] == [
        (i, int(np.random.default_rng(i).integers(1000))) for i in range(3)
    ]
    with pytest.raises(ValueError, match="seed"):
        list(RandomMapOperation(lambda x, rng: x)(iter(_records(1))))


def test_batch_operation_keeps_the_last_metadata_and_stacks():
    out = list(BatchOperation(2)(iter(_records())))
    assert [r.metadata for r in out] == [RecordMetadata(index=i) for i in (1, 3, 4)]
    assert [r.data.tolist() for r in out] == [[0, 1], [2, 3], [4]]
    dropped = list(BatchOperation(2, drop_remainder=True)(iter(_records())))
    assert [r.data.tolist() for r in dropped] == [[0, 1], [2, 3]]
    seen = []
    listed = list(
        BatchOperation(2, batch_fn=lambda xs: seen.append(type(xs)) or tuple(xs))(iter(_records()))
    )
    assert [r.data for r in listed] == [(0, 1), (2, 3), (4,)]
    assert seen == [list, list, list]
    trees = [Record(RecordMetadata(i), {"a": np.arange(i, i + 2), "b": i}) for i in range(3)]
    batch = next(BatchOperation(3)(iter(trees))).data
    assert batch["a"].shape == (3, 2)
    assert batch["b"].tolist() == [0, 1, 2]


def test_user_errors_become_value_errors_with_the_cause():
    def boom(x):
        raise KeyError("zz")

    for op in (MapOperation(boom), FilterOperation(boom), RandomMapOperation(lambda x, r: boom(x))):
        with pytest.raises(ValueError, match="index 0") as info:
            list(op(iter(_records(2, rng=True))))
        assert isinstance(info.value.__cause__, KeyError)


def test_operations_are_dataclasses_compared_by_value():
    assert MapOperation(abs) == MapOperation(abs)
    assert BatchOperation(3) == BatchOperation(3, False, None)
    assert repr(MapOperation(abs)) == "MapOperation(map_function=<built-in function abs>)"
    assert [f.name for f in dataclasses.fields(BatchOperation)] == [
        "batch_size",
        "drop_remainder",
        "batch_fn",
    ]


@pytest.mark.parametrize(
    ("make", "error", "match"),
    [
        (lambda: BatchOperation(0), ValueError, "`batch_size` must be a positive integer"),
        (lambda: BatchOperation(-1), ValueError, "`batch_size`"),
        (lambda: BatchOperation("2"), TypeError, "`batch_size`"),
        (lambda: BatchOperation(2, drop_remainder="x"), TypeError, "`drop_remainder`"),
        (lambda: BatchOperation(2, batch_fn=3), TypeError, "`batch_fn`"),
        (lambda: MapOperation(5), TypeError, "`map_function`"),
        (lambda: FilterOperation(None), TypeError, "`condition_function`"),
        (lambda: RandomMapOperation("f"), TypeError, "`random_map_function`"),
        (lambda: list(MapOperation(abs)(iter([1, 2]))), TypeError, "Record"),
    ],
)
def test_bad_arguments_are_named(make, error, match):
    with pytest.raises(error, match=match):
        make()


# -- in the DataLoader ----------------------------------------------------------------------


class Double(MapTransform):
    def map(self, x):
        return x * 2


class NotMultipleOf3(FilterTransform):
    def filter(self, x):
        return x % 3 != 0


class Noise(RandomMapTransform):
    def random_map(self, x, rng):
        return x + 1000 * int(rng.integers(1, 1000))


def _double(x):
    return x * 2


def _not_multiple_of_3(x):
    return x % 3 != 0


def _noise(x, rng):
    return x + 1000 * int(rng.integers(1, 1000))


@pytest.mark.timeout(60)
@pytest.mark.parametrize("workers", [0, 2])
def test_grain_operations_equal_the_matching_transforms(workers):
    ops = [
        MapOperation(_double),
        RandomMapOperation(_noise),
        FilterOperation(_not_multiple_of_3),
        BatchOperation(4),
    ]
    transforms = [Double(), Noise(), NotMultipleOf3(), Batch(4)]
    expected = _read(_loader(transforms))
    assert expected
    assert _read(_loader(ops, workers)) == expected
    mixed = [Double(), RandomMapOperation(_noise), NotMultipleOf3(), BatchOperation(4)]
    assert _read(_loader(mixed, workers)) == expected


def test_the_plan_runs_grain_operations_in_the_workers():
    loader = _loader(
        [MapOperation(_double), FilterOperation(_not_multiple_of_3), BatchOperation(2)]
    )
    plan = loader._plan
    assert (plan.unit, len(plan.worker), len(plan.tail)) == ("chunk", 2, 1)
    assert not plan.may_replay  # no record operation stage in the parent


class SeeRecords:
    """Records what it receives, yields (data, index, key) keeping the metadata."""

    def __init__(self):
        self.seen = []

    def __call__(self, records):
        for record in records:
            self.seen.append(record)
            yield Record(record.metadata, (record.data, record.metadata.index))


def test_a_callable_operation_gets_records_with_the_samplers_metadata():
    op = SeeRecords()
    loader = _loader([Double(), op], epochs=1)
    sampler = IndexSampler(N, shuffle=True, num_epochs=1, seed=3)
    assert _read(loader) == [(2 * sampler[k].record_key, k) for k in range(N)]
    first = op.seen[0].metadata
    assert (first.index, first.record_key) == (0, sampler[0].record_key)
    assert isinstance(first.rng, np.random.Generator)


# Callable operations of every shape, for the exact-state property below.


class Pairs:
    """Two records in, one out, with the second one's metadata; an odd last one is dropped."""

    def __call__(self, records):
        records = iter(records)
        for first in records:
            second = next(records, None)
            if second is not None:
                yield Record(second.metadata, first.data * 1000 + second.data)


class Twice:
    """An expander: each record twice, both with the record's index."""

    def __call__(self, records):
        for record in records:
            yield Record(record.metadata, (record.data, 0))
            yield Record(record.metadata, (record.data, 1))


class Swap:
    """Breaks the index contract: yields pairs in reverse order (indices go down)."""

    def __call__(self, records):
        records = iter(records)
        for first in records:
            second = next(records, None)
            if second is not None:
                yield second
            yield first


class EveryThird:
    """Drops records whose data is a multiple of 3, and holds one record back."""

    def __call__(self, records):
        held = None
        for record in records:
            if record.data % 3 == 0:
                continue
            if held is not None:
                yield held
            held = record
        if held is not None:
            yield held


OPERATION_PIPELINES = {
    "pairs": [Double(), Pairs()],
    "twice": [Twice()],
    "twice_then_batch": [Twice(), Batch(3)],
    "filter_batch_then_pairs": [NotMultipleOf3(), Batch(2), Pairs()],
    "pairs_then_twice": [Pairs(), Batch(2), Twice()],
    "swap": [Swap(), MapOperation(_double)],
    "every_third_then_batch": [EveryThird(), BatchOperation(3)],
    "random_after": [Pairs(), Noise()],
}


def _replay(state):
    """The outputs the record operations' stages replay on restoring `state`."""
    total, part = 0, json.loads(state)["pipeline"]
    while isinstance(part, dict):
        total, part = total + part.get("replay", 0), part.get("parent")
    return total


def _restores_at_every_point(loader, other, points):
    expected = _read(loader)
    replays = []
    for point in points:
        it = iter(loader)
        head = [_plain(next(it)) for _ in range(point)]
        state = it.get_state()
        replays.append(_replay(state))
        it.close()
        resumed = iter(other)
        resumed.set_state(state)
        assert head + _read(resumed) == expected, f"restored at {point}"
    return replays


@pytest.mark.parametrize("name", sorted(OPERATION_PIPELINES))
def test_state_restores_exactly_at_every_point(name):
    loader = _loader(OPERATION_PIPELINES[name], epochs=1)
    total = len(_read(loader))
    assert total
    replays = _restores_at_every_point(loader, loader, range(total + 1))
    if name != "swap":  # operations that keep the contract restore after a few outputs
        assert max(replays) <= 4, replays
    else:  # it breaks the contract: restoring replays from the start
        assert replays == list(range(total + 1))


@pytest.mark.timeout(60)
@pytest.mark.parametrize("name", ["pairs", "twice_then_batch", "every_third_then_batch"])
def test_state_restores_across_worker_counts(name):
    single = _loader(OPERATION_PIPELINES[name])
    workers = _loader(OPERATION_PIPELINES[name], 2)
    total = len(_read(single))
    assert _read(workers) == _read(single)
    points = sorted({0, 1, total // 2, total - 1, total})
    _restores_at_every_point(workers, single, points)
    _restores_at_every_point(single, workers, points[::2])


def test_an_operation_must_yield_records():
    class Bare:
        def __call__(self, records):
            for record in records:
                yield record.data

    with pytest.raises(TypeError, match=r"operations\[1\].*Record"):
        _read(_loader([Double(), Bare()]))
    with pytest.raises(TypeError, match=r"operations\[0\].*not an iterator"):
        _read(_loader([lambda records: 5]))


def test_a_plain_lambda_passing_records_through_is_an_identity_operation():
    assert _read(_loader([lambda records: records])) == _read(_loader([]))


def test_in_the_loader_grain_operations_drop_record_keys_and_name_failing_indices():
    op = SeeRecords()
    _read(_loader([MapOperation(_double), op], epochs=1))
    assert {record.metadata.record_key for record in op.seen} == {None}
    assert [record.metadata.index for record in op.seen] == list(range(N))
    batches = SeeRecords()
    _read(_loader([BatchOperation(4), batches], epochs=1))
    assert [(r.metadata.index, r.metadata.record_key) for r in batches.seen][:2] == [
        (3, None),
        (7, None),
    ]

    def fail_on_6(x):
        if x == 6:
            raise KeyError(x)
        return x

    sampler = IndexSampler(N, shuffle=True, num_epochs=1, seed=3)
    step = next(k for k in range(N) if sampler[k].record_key == 6)
    with pytest.raises(ValueError, match=f"index {step}") as info:
        _read(_loader([MapOperation(fail_on_6), SeeRecords()], epochs=1))
    assert isinstance(info.value.__cause__, KeyError)
