"""Fuzzed `set_state`: malformed, truncated, wrongly typed and foreign states, every stage.

A state handed to `set_state` that a pipeline could never have produced must
fail with a clear exception (a TypeError or ValueError whose message talks about
the state), raised by `set_state` itself or, for worker processes that check
the state where it is used, by the first `next()`. Never a crash, a hang, an
obscure KeyError or AttributeError, or an iterator that silently continues
from some other position.

Mutations (drawn by hypothesis, from a valid state taken after a few
elements): drop a key, add a key, truncate a list, replace any node by a value
of another type (None, strings, floats, bools, negative ints, lists, dicts),
replace the whole state by another stage's state, and for the DataLoader's JSON
bytes, cut the bytes short. Two mutations are allowed to be accepted: a huge
integer where an integer belongs (a far position is still a position; it may
simply be at the end), and None where the stage itself writes None (an empty
interleave slot). Every replacement is checked on every stage exhaustively for
the foreign states (`test_foreign_states_are_rejected`).
"""

from __future__ import annotations

import contextlib
import copy
import functools
import json
import signal
import threading
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import grain
import grain.experimental as ge
from grain_dataset import FlatMapTransform

# Each example may start worker processes or threads; one that takes this long hangs.
HANG_S = 20.0
ELEMENTS_BEFORE = 7


def _base(n: int = 100, threads: int = 0) -> grain.IterDataset:
    return grain.MapDataset.range(n).seed(1).to_iter_dataset(grain.ReadOptions(num_threads=threads))


def _plus_one(x: int) -> int:
    return x + 1


def _first_odd(batch) -> bool:
    return bool(batch[0] % 2)


def _odd(x: int) -> bool:
    return bool(x % 2)


def _index_and(index: int, x: int) -> tuple[int, int]:
    return index, x


def _noise(x: int, rng: np.random.Generator) -> int:
    return x + int(rng.integers(10))


def _tokens(i: int) -> dict[str, np.ndarray]:
    return {"t": np.arange(i % 7 + 1, dtype=np.int32)}


class _Twice(FlatMapTransform):
    max_fan_out = 2

    def flat_map(self, element: Any) -> list[Any]:
        return [element, element]


def _token_ds() -> grain.IterDataset:
    return grain.MapDataset.range(80).map(_tokens).to_iter_dataset(grain.ReadOptions(num_threads=0))


def _loader(workers: int) -> grain.python.DataLoader:
    sampler = grain.python.IndexSampler(
        50, shard_options=grain.python.NoSharding(), shuffle=True, num_epochs=1, seed=3
    )
    return grain.python.DataLoader(
        data_source=grain.python.RangeDataSource(0, 50, 1),
        sampler=sampler,
        operations=[grain.python.Batch(2)],
        worker_count=workers,
    )


@pytest.fixture(scope="module")
def pipelines(tmp_path_factory) -> dict[str, Callable[[], Any]]:
    """name -> a function making the iterable (a dataset or a DataLoader) of one stage."""
    root = tmp_path_factory.mktemp("fuzz_state")
    tfrecord = root / "data.tfrecord"
    from grain_sources import write_tfrecord

    write_tfrecord([b"r%d" % i for i in range(40)], str(tfrecord))
    import pyarrow as pa
    import pyarrow.parquet as pq

    parquet = root / "data.parquet"
    pq.write_table(pa.table({"x": list(range(40))}), parquet, row_group_size=8)
    import jax

    return {
        "to_iter_dataset": lambda: _base(),
        "to_iter_dataset+threads": lambda: _base(threads=4),
        "map": lambda: _base().map(_plus_one),
        "map_with_index": lambda: _base().map_with_index(_index_and),
        "random_map": lambda: _base().random_map(_noise),
        "filter": lambda: _base().filter(_odd),
        "batch": lambda: _base().batch(3),
        "MapDataset stages": lambda: (
            grain.MapDataset.range(60).seed(2).shuffle().map(_plus_one).batch(2).filter(_first_odd)
        ).to_iter_dataset(),
        "mix": lambda: grain.IterDataset.mix([_base(), _base()], [1, 2]),
        "zip": lambda: ge.ZipIterDataset([_base(), _base()]),
        "interleave": lambda: ge.InterleaveIterDataset([_base(), _base(), _base()], cycle_length=2),
        "interleave+threads": lambda: ge.InterleaveIterDataset(
            [_base(30), _base(30), _base(30)], cycle_length=2, iter_buffer_size=2
        ),
        "flat_map": lambda: ge.FlatMapIterDataset(_base(), _Twice()),
        "window_shuffle": lambda: ge.WindowShuffleIterDataset(_base(), window_size=5, seed=1),
        "limit": lambda: ge.LimitIterDataset(_base(), 50),
        "repeat": lambda: ge.RepeatIterDataset(_base(), 2),
        "rebatch": lambda: ge.RebatchIterDataset(_base().batch(4), 3),
        "thread_prefetch": lambda: ge.ThreadPrefetchIterDataset(_base(), prefetch_buffer_size=2),
        "with_options": lambda: ge.WithOptionsIterDataset(
            _base(), grain.experimental.DatasetOptions(filter_raise_threshold_ratio=0.9)
        ),
        "concat_then_split": lambda: ge.ConcatThenSplitIterDataset(
            _token_ds(), length_struct={"t": 8}
        ),
        "first_fit_pack": lambda: ge.FirstFitPackIterDataset(
            _token_ds(), length_struct={"t": 8}, num_packing_bins=3
        ),
        "best_fit_pack": lambda: ge.BestFitPackIterDataset(
            _token_ds(), length_struct={"t": 8}, num_packing_bins=3
        ),
        "tfrecord": lambda: ge.TFRecordIterDataset(str(tfrecord)),
        "parquet": lambda: ge.ParquetIterDataset(str(parquet)),
        "mp_prefetch": lambda: _base().mp_prefetch(grain.MultiprocessingOptions(num_workers=2)),
        "device_put": lambda: ge.device_put(_base().batch(2), jax.devices()[0]),
        "DataLoader": lambda: _loader(0),
        "DataLoader+workers": lambda: _loader(2),
    }


# -- running one state -------------------------------------------------------------------


class Hang(BaseException):
    """Raised in the main thread by the watchdog: not an Exception, so nothing swallows it."""


@contextlib.contextmanager
def watchdog(what: str):
    """Raises Hang in this (main) thread if the block takes longer than HANG_S."""
    main = threading.get_ident()

    def on_signal(*_: Any) -> None:
        raise Hang(f"{what} hung for {HANG_S} s")

    previous = signal.signal(signal.SIGUSR1, on_signal)
    timer = threading.Timer(HANG_S, signal.pthread_kill, (main, signal.SIGUSR1))
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
        signal.signal(signal.SIGUSR1, previous)


def close(iterator: Any) -> None:
    with watchdog("close()"):
        iterator.close()


@functools.cache
def _valid_state_text(name: str, make: Callable[[], Any]) -> str:
    iterator = iter(make())
    try:
        for _ in range(ELEMENTS_BEFORE):
            next(iterator)
        state = iterator.get_state()
    finally:
        close(iterator)
    if isinstance(state, bytes):  # the DataLoader: JSON bytes
        state = json.loads(state)
    return json.dumps(state)


def valid_state(pipelines: dict[str, Callable[[], Any]], name: str) -> Any:
    return json.loads(_valid_state_text(name, pipelines[name]))


def outcome(make: Callable[[], Any], state: Any) -> tuple[str, BaseException | None]:
    """("set_state" | "next" | "accepted", the exception) of restoring `state` and reading on."""
    iterator = iter(make())
    try:
        with watchdog("set_state()"):
            try:
                iterator.set_state(state)
            except Exception as error:
                return "set_state", error
        with watchdog("next() after set_state()"):
            try:
                for _ in range(3):
                    next(iterator)
            except StopIteration:
                pass
            except Exception as error:
                return "next", error
        return "accepted", None
    finally:
        close(iterator)


def assert_clear(where: str, error: BaseException | None, description: str) -> None:
    assert error is not None, f"{description}: accepted silently"
    assert isinstance(error, TypeError | ValueError), (
        f"{description}: {where} raised {type(error).__name__}: {error}"
    )
    text = str(error).lower()
    assert "state" in text, f"{description}: the message does not say it is the state: {error}"


# -- mutations ---------------------------------------------------------------------------


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [prefix]
    if isinstance(node, dict):
        for key, value in node.items():
            found += _paths(value, (*prefix, key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            found += _paths(value, (*prefix, index))
    return found


def _at(node: Any, path: tuple[Any, ...]) -> Any:
    for step in path:
        node = node[step]
    return node


def _replace(state: Any, path: tuple[Any, ...], value: Any) -> Any:
    if not path:
        return value
    state = copy.deepcopy(state)
    _at(state, path[:-1])[path[-1]] = value
    return state


HUGE = 2**70
GARBAGE = st.one_of(
    st.none(),
    st.text(max_size=4),
    st.floats(allow_nan=False),
    st.booleans(),
    st.integers(max_value=-1),
    st.just(HUGE),
    st.lists(st.integers(0, 5), max_size=3),
    st.dictionaries(st.sampled_from(["x", "next_index", "parent"]), st.integers(0, 3), max_size=2),
)


def _none_allowed(name: str, path: tuple[Any, ...]) -> bool:
    """Where a stage itself writes None: an empty interleave slot, or one not opened yet."""
    return name.startswith("interleave") and len(path) >= 2 and path[0] == "iterators"


def _optional(path: tuple[Any, ...], key: Any) -> bool:
    """Keys that a state may lack and still restore.

    The pipeline fingerprint at the top (states of earlier versions carried it;
    now the checkpoint file does) and an earlier version's mix component hashes
    (components then matched by their place).
    """
    return (not path and key == "grain_fingerprint") or key == "components"


def _benign(name: str, path: tuple[Any, ...], old: Any, new: Any) -> bool:
    """Whether replacing `old` by `new` at `path` may give a state the stage could write."""
    if new is None and _none_allowed(name, path):
        return True
    if len(path) >= 2 and path[-2] == "components" and isinstance(new, str):
        return True  # another component hash: a component changed since, by design
    if type(new) is bool and type(old) is bool:
        return True  # the other value of a flag (a mix's "stop"): a state it could write
    if type(new) is int and new >= 0 and type(old) is int:
        return True  # another position (HUGE: a far one)
    if name.startswith("DataLoader") and path[:1] == ("last_seen_indices",) and type(new) is int:
        return True  # Grain's key, edited by clients; negative: a worker that read nothing
    if isinstance(new, dict | list) and _shape(new) == _shape(old):
        return True  # the same structure, other integers: maybe another position
    if not path and isinstance(old, dict) and isinstance(new, dict):
        older = {key: value for key, value in old.items() if key != "grain_fingerprint"}
        if _shape(new) == _shape(older):
            return True  # a state as older versions wrote it: restores, with a warning
    return new == old and type(new) is type(old)


@st.composite
def mutated(draw: Any, pipelines: dict[str, Callable[[], Any]]) -> tuple[str, Any, str, bool]:
    """(stage, mutated state, description, whether it must be rejected)."""
    name = draw(st.sampled_from(sorted(pipelines)))
    state = valid_state(pipelines, name)
    paths = _paths(state)
    kind = draw(st.sampled_from(["drop", "add", "truncate", "replace", "foreign", "cut bytes"]))
    if kind == "foreign":
        other = draw(st.sampled_from(sorted(set(pipelines) - {name})))
        foreign = valid_state(pipelines, other)
        must_reject = _shape(foreign) != _shape(state) and not _restores_into(other, name)
        return name, foreign, f"{name} <- state of {other}", must_reject
    if kind == "cut bytes" and name.startswith("DataLoader"):
        text = json.dumps(state).encode()
        cut = draw(st.integers(0, len(text) - 1))
        return name, text[:cut], f"{name}: JSON bytes cut at {cut}", True
    if kind == "drop":
        dicts = [p for p in paths if isinstance(_at(state, p), dict) and _at(state, p)]
        if dicts:
            path = draw(st.sampled_from(dicts))
            key = draw(st.sampled_from(sorted(_at(state, path))))
            bad = copy.deepcopy(state)
            del _at(bad, path)[key]
            return name, bad, f"{name}: drop {(*path, key)}", not _optional(path, key)
    if kind == "add":
        dicts = [p for p in paths if isinstance(_at(state, p), dict)]
        if dicts:
            path = draw(st.sampled_from(dicts))
            bad = copy.deepcopy(state)
            _at(bad, path)["unexpected"] = draw(st.integers(0, 3))
            return name, bad, f"{name}: add a key at {path}", True
    if kind == "truncate":
        lists = [p for p in paths if isinstance(_at(state, p), list) and _at(state, p)]
        if lists:
            path = draw(st.sampled_from(lists))
            bad = copy.deepcopy(state)
            del _at(bad, path)[-1]
            return name, bad, f"{name}: truncate the list at {path}", True
    path = draw(st.sampled_from(paths))
    old = _at(state, path)
    new = draw(GARBAGE)
    description = f"{name}: {path} = {new!r} (was {old!r})"
    return name, _replace(state, path, new), description, not _benign(name, path, old, new)


def _restores_into(source: str, target: str) -> bool:
    """Whether a state of stage `source` is, by design, a position of stage `target` too.

    A DataLoader's state restores with any worker count (its Grain keys name one entry
    per worker, so the shapes differ).
    """
    return source.startswith("DataLoader") and target.startswith("DataLoader")


def _shape(state: Any) -> Any:
    if isinstance(state, dict):
        return {key: _shape(value) for key, value in state.items()}
    if isinstance(state, list):
        return [_shape(value) for value in state]
    return type(state).__name__


def check(make: Callable[[], Any], state: Any, description: str, must_reject: bool) -> None:
    where, error = outcome(make, state)
    if must_reject:
        assert_clear(where, error, description)
    elif error is not None:
        assert isinstance(error, TypeError | ValueError | OverflowError), (
            f"{description}: {where} raised {type(error).__name__}: {error}"
        )


# -- the tests ---------------------------------------------------------------------------


@pytest.mark.timeout(240)
def test_every_stage_restores_its_own_state(pipelines):
    """The baseline: unmutated states restore (so a rejection below is the mutation's doing)."""
    for name, make in pipelines.items():
        where, error = outcome(make, valid_state(pipelines, name))
        assert error is None, f"{name}: {where} raised {error!r}"


@pytest.mark.timeout(240)
@settings(
    max_examples=250,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_malformed_states_raise_clear_errors(pipelines, data):
    name, state, description, must_reject = data.draw(mutated(pipelines))
    check(pipelines[name], state, description, must_reject)


REPRESENTATIVES = [None, "0", 1.5, True, -1, HUGE, [], {}, [0], {"x": 0}]


def every_mutation(name: str, state: Any) -> list[tuple[Any, str, bool]]:
    """Each single mutation of `state`: (state, description, whether it must be rejected)."""
    found = []
    for path in _paths(state):
        node = _at(state, path)
        if isinstance(node, dict):
            for key in node:
                bad = copy.deepcopy(state)
                del _at(bad, path)[key]
                found.append((bad, f"{name}: drop {(*path, key)}", not _optional(path, key)))
            bad = copy.deepcopy(state)
            _at(bad, path)["unexpected"] = 0
            found.append((bad, f"{name}: add a key at {path}", True))
        if isinstance(node, list) and node:
            bad = copy.deepcopy(state)
            del _at(bad, path)[-1]
            found.append((bad, f"{name}: truncate the list at {path}", True))
        for value in REPRESENTATIVES:
            if value == node and type(value) is type(node):
                continue
            description = f"{name}: {path} = {value!r} (was {node!r})"
            bad = _replace(state, path, value)
            found.append((bad, description, not _benign(name, path, node, value)))
    return found


@pytest.mark.timeout(240)
def test_every_single_mutation_of_every_stage(pipelines):
    """Exhaustive over paths, with one value of each wrong type: the sweep hypothesis samples."""
    checked, failures = 0, []
    for name, make in pipelines.items():
        for state, description, must_reject in every_mutation(name, valid_state(pipelines, name)):
            try:
                check(make, state, description, must_reject)
            except AssertionError as failure:
                failures.append(str(failure).split("\n")[0])
            checked += 1
    assert not failures, "\n".join(failures)
    assert checked > 1000


@pytest.mark.timeout(240)
def test_foreign_states_are_rejected(pipelines):
    """Every stage's state into every other stage: a different shape must be rejected."""
    names = sorted(pipelines)
    checked, failures = 0, []
    for target in names:
        own = _shape(valid_state(pipelines, target))
        for other in names:
            foreign = valid_state(pipelines, other)
            if other == target or _shape(foreign) == own or _restores_into(other, target):
                continue  # the same shape is a position of this stage too
            try:
                check(pipelines[target], foreign, f"{target} <- state of {other}", True)
            except AssertionError as failure:
                failures.append(str(failure).split("\n")[0])
            checked += 1
    assert not failures, "\n".join(failures)
    assert checked > 300


@pytest.mark.timeout(60)
@pytest.mark.parametrize("state", [None, 0, "", "{}", b"", b"\xff\xfe", [], ["next_index", 0], 3.5])
def test_states_of_the_wrong_type_on_the_outermost_stage(pipelines, state):
    for name in ("map", "mix", "mp_prefetch", "DataLoader", "interleave", "device_put"):
        where, error = outcome(pipelines[name], state)
        assert_clear(where, error, f"{name} <- {state!r}")
