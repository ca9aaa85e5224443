"""Iterator state: its shape, exact restores, rejected states, and the conformance helper.

`assert_equal_output_after_checkpoint` is run over a table of pipelines (every
transformation, alone and combined, without and with threads). It is also
shown to fail on broken iterators, and a hand-written restore loop checks a
few pipelines without it, so that the helper is not the only judge of itself.
Datasets stay small: the helper restores at every step, O(n^2).
"""

import json

import pytest

from grain_dataset import (
    DatasetIterator,
    DatasetOptions,
    DatasetSelectionMap,
    IterDataset,
    MapDataset,
    ReadOptions,
    WithOptionsIterDataset,
    assert_equal_output_after_checkpoint,
)

pytestmark = pytest.mark.timeout(60)


def draw(x, rng):
    return int(rng.integers(1000))


def noisy(x, rng):
    return (x, int(rng.integers(1 << 30)))


class Alternate(DatasetSelectionMap):
    """Even positions read dataset 0, odd positions every other element of dataset 1."""

    def __len__(self):
        return 24

    def __getitem__(self, index):
        return (0, index // 2) if index % 2 == 0 else (1, index - 1)


def records(n):
    import numpy as np

    return [{"id": i, "pixels": np.full((2, 2), i, dtype=np.uint8)} for i in range(n)]


# Each builder takes the ReadOptions of its to_iter_dataset calls; ~60 elements at most.
PIPELINES = {
    "range": lambda ro: MapDataset.range(20).to_iter_dataset(ro),
    "shuffle_repeat": lambda ro: MapDataset.range(12).shuffle(seed=3).repeat(3).to_iter_dataset(ro),
    "seed_shuffle_repeat_filter": lambda ro: (
        MapDataset.range(15).seed(4).shuffle().repeat(3).filter(lambda x: x % 4).to_iter_dataset(ro)
    ),
    "map_filter": lambda ro: (
        MapDataset.range(40).map(lambda x: x * x).filter(lambda x: x % 3).to_iter_dataset(ro)
    ),
    "allow_nones": lambda ro: (
        MapDataset.range(20).filter(lambda x: x % 3).to_iter_dataset(ro, allow_nones=True)
    ),
    # Dropping everything on purpose: the warning about it is off.
    "all_filtered": lambda ro: WithOptionsIterDataset(
        MapDataset.range(30).filter(lambda x: False).to_iter_dataset(ro),
        DatasetOptions(filter_warn_threshold_ratio=None),
    ),
    "empty": lambda ro: MapDataset.range(0).to_iter_dataset(ro),
    "iter_filter": lambda ro: MapDataset.range(40).to_iter_dataset(ro).filter(lambda x: x % 3),
    "map_with_index_both_sides": lambda ro: (
        MapDataset.range(30)
        .map_with_index(lambda i, x: 100 * i + x)
        .to_iter_dataset(ro)
        .filter(lambda x: x % 7)
        .map_with_index(lambda i, x: (i, x))
    ),
    "random_map_both_sides": lambda ro: (
        MapDataset.range(30)
        .seed(7)
        .random_map(draw)
        .to_iter_dataset(ro)
        .filter(lambda x: x % 3)
        .random_map(noisy, seed=1)
    ),
    "iter_seed_random_map": lambda ro: (
        MapDataset.range(20).to_iter_dataset(ro).seed(3).random_map(draw).map(lambda x: x % 7)
    ),
    "map_mix": lambda ro: MapDataset.mix(
        [MapDataset.range(10), MapDataset.range(100, 130).shuffle(seed=2)], [1, 2]
    ).to_iter_dataset(ro),
    "map_mix_shuffled_repeated": lambda ro: MapDataset.mix(
        [MapDataset.range(6).shuffle(seed=1).repeat(4), MapDataset.range(50, 56).repeat(4)],
        [2, 1],
    ).to_iter_dataset(ro),
    "iter_mix": lambda ro: IterDataset.mix(
        [
            MapDataset.range(20).filter(lambda x: x % 2).to_iter_dataset(ro),
            MapDataset.range(100, 140).to_iter_dataset(ro),
        ],
        [1, 3],
    ),
    "iter_mix_nested": lambda ro: IterDataset.mix(
        [
            IterDataset.mix(
                [
                    MapDataset.range(15).to_iter_dataset(ro).random_map(draw, seed=2),
                    MapDataset.range(20, 40).to_iter_dataset(ro).filter(lambda x: x % 5),
                ]
            ),
            MapDataset.range(200, 230).to_iter_dataset(ro).map_with_index(lambda i, x: i - x),
        ],
        [2, 1],
    ),
    "map_batch_partial": lambda ro: (
        MapDataset.range(23).batch(4).filter(lambda b: b[0] % 8).to_iter_dataset(ro)
    ),
    "map_batch_drop_remainder_repeat": lambda ro: (
        MapDataset.range(23)
        .shuffle(seed=5)
        .batch(4, drop_remainder=True)
        .repeat(2)
        .to_iter_dataset(ro)
    ),
    "iter_batch": lambda ro: (
        MapDataset.range(40).to_iter_dataset(ro).filter(lambda x: x % 3).batch(4)
    ),
    "iter_batch_drop_remainder": lambda ro: (
        MapDataset.range(40).to_iter_dataset(ro).batch(6, drop_remainder=True)
    ),
    "batch_of_records": lambda ro: MapDataset.source(records(13)).batch(3).to_iter_dataset(ro),
    "concatenate": lambda ro: (
        MapDataset.concatenate([MapDataset.range(5), MapDataset.range(10, 17).shuffle(seed=2)])
        .repeat(2)
        .to_iter_dataset(ro)
    ),
    "select_from_datasets": lambda ro: MapDataset.select_from_datasets(
        [MapDataset.range(12), MapDataset.range(100, 130)], Alternate()
    ).to_iter_dataset(ro),
    "slice": lambda ro: MapDataset.range(60)[3:50:4].to_iter_dataset(ro),
    "shard_of_shuffle_repeat": lambda ro: (
        MapDataset.range(40).shuffle(seed=1)[1::3].repeat(2).to_iter_dataset(ro)
    ),
    "with_options": lambda ro: WithOptionsIterDataset(
        MapDataset.range(30).filter(lambda x: x % 2).to_iter_dataset(ro),
        DatasetOptions(filter_warn_threshold_ratio=None),
    ).map(lambda x: -x),
    "everything": lambda ro: (
        MapDataset.range(30)
        .seed(1)
        .shuffle()
        .map_with_index(lambda i, x: i + x)
        .filter(lambda x: x % 4)
        .random_map(draw)
        .repeat(2)
        .to_iter_dataset(ro)
        .random_map(noisy)
        .batch(3)
    ),
}

# Infinite pipelines: the helper cuts the run at `max_steps`.
INFINITE = {
    "repeat_forever": lambda ro: MapDataset.range(7).shuffle(seed=6).repeat().to_iter_dataset(ro),
    "mix_forever": lambda ro: IterDataset.mix(
        [
            MapDataset.range(4).repeat().to_iter_dataset(ro),
            MapDataset.range(50, 53).repeat().to_iter_dataset(ro).random_map(draw, seed=3),
        ],
        [2, 1],
    ),
}

THREADS = [0, 4]


def options(num_threads):
    return ReadOptions(num_threads=num_threads, prefetch_buffer_size=8)


@pytest.mark.parametrize("num_threads", THREADS)
@pytest.mark.parametrize("name", sorted(PIPELINES))
def test_every_state_restores_exactly(name, num_threads):
    assert_equal_output_after_checkpoint(PIPELINES[name](options(num_threads)))


@pytest.mark.parametrize("num_threads", THREADS)
@pytest.mark.parametrize("name", sorted(INFINITE))
def test_every_state_of_an_infinite_pipeline_restores_exactly(name, num_threads):
    assert_equal_output_after_checkpoint(INFINITE[name](options(num_threads)), max_steps=40)


# -- the shape of a state ------------------------------------------------------------------


def leaves(state, path="state"):
    """(path, value) of every position; fails unless the state is dicts/lists of ints.

    States have Grain's shapes: no pipeline fingerprint (the checkpoint file holds
    it), and the only flags are bools (a mix's "stop"), counted as 0 or 1.
    """
    if isinstance(state, dict):
        assert all(isinstance(key, str) for key in state), path
        assert "grain_fingerprint" not in state, path
        return [leaf for key, value in state.items() for leaf in leaves(value, f"{path}.{key}")]
    if isinstance(state, list):
        return [leaf for i, value in enumerate(state) for leaf in leaves(value, f"{path}[{i}]")]
    if type(state) is bool:
        return [(path, int(state))]
    assert type(state) is int, f"{path} is {state!r}, not an int"
    return [(path, state)]


def states_of_a_run(ds, limit=200):
    it = iter(ds)
    states = [it.get_state()]
    for _ in zip(range(limit), it, strict=False):
        states.append(it.get_state())
    if hasattr(it, "close"):
        it.close()
    return states


@pytest.mark.parametrize("name", sorted(PIPELINES))
def test_state_is_a_small_dict_of_ints_with_one_shape(name):
    states = states_of_a_run(PIPELINES[name](options(4)))
    first = states[0]
    assert isinstance(first, dict)
    paths = [path for path, _ in leaves(first)]
    assert 1 <= len(paths) <= 12
    for state in states:
        assert json.loads(json.dumps(state)) == state
        assert [path for path, _ in leaves(state)] == paths
        assert all(value >= 0 for _, value in leaves(state))


@pytest.mark.parametrize("name", sorted(INFINITE))
def test_state_does_not_grow_with_the_run(name):
    states = states_of_a_run(INFINITE[name](options(4)), limit=3000)
    first, last = states[0], states[-1]
    assert [p for p, _ in leaves(last)] == [p for p, _ in leaves(first)]
    # Only the digits of the positions may grow.
    assert len(json.dumps(last)) <= len(json.dumps(first)) + 4 * len(leaves(first))


def test_state_is_a_copy_not_a_live_view():
    it = iter(PIPELINES["iter_mix_nested"](options(0)))
    next(it)
    state = it.get_state()
    saved = json.dumps(state)
    for _ in range(5):
        next(it)
    assert json.dumps(state) == saved


# -- restores by hand (without the helper) ---------------------------------------------------


@pytest.mark.parametrize(("saved_with", "restored_with"), [(0, 0), (4, 4), (4, 0), (0, 4)])
def test_restoring_at_every_step_across_epochs_by_hand(saved_with, restored_with):
    def build(num_threads):
        ds = MapDataset.range(9).shuffle(seed=8).repeat(3).filter(lambda x: x != 4)
        ds = ds.to_iter_dataset(options(num_threads)).map_with_index(lambda i, x: (i, x))
        return ds.random_map(noisy, seed=5)

    it = iter(build(saved_with))
    states, elements = [json.dumps(it.get_state())], []
    for element in it:
        elements.append(element)
        states.append(json.dumps(it.get_state()))
    it.close()
    assert len(elements) == 24
    # Every epoch holds all kept elements once, in a new order.
    epochs = [[e[0][1] for e in elements[k : k + 8]] for k in (0, 8, 16)]
    assert all(sorted(epoch) == [x for x in range(9) if x != 4] for epoch in epochs)
    for step, state in enumerate(states):
        fresh = iter(build(restored_with))
        fresh.set_state(json.loads(state))
        assert list(fresh) == elements[step:], step


def test_restoring_a_running_iterator_to_an_earlier_state():
    ds = PIPELINES["iter_mix"](options(4))
    it = iter(ds)
    head = [next(it) for _ in range(10)]
    state = it.get_state()
    tail = list(it)
    it.set_state(state)
    assert list(it) == tail
    it.set_state(iter(ds).get_state())
    assert list(it) == head + tail


# -- the helper fails on broken iterators ------------------------------------------------------


class CountIterator(DatasetIterator):
    """A correct iterator over 0..stop-1; subclasses break one thing each."""

    def __init__(self, stop=12):
        super().__init__()
        self._next, self._stop = 0, stop

    def __next__(self):
        if self._next >= self._stop:
            raise StopIteration
        self._next += 1
        return self._next - 1

    def get_state(self):
        return {"next": self._next}

    def set_state(self, state):
        self._next = state["next"]


class OffByOne(CountIterator):
    def set_state(self, state):
        self._next = state["next"] + 1


class OffByOneAtOneStep(CountIterator):
    def set_state(self, state):
        self._next = state["next"] + (state["next"] == 7)


class IgnoresState(CountIterator):
    def set_state(self, state):
        pass


class NotJson(CountIterator):
    def get_state(self):
        return {"next": self._next, "seen": set(range(self._next))}

    def set_state(self, state):
        self._next = state["next"]


class Growing(CountIterator):
    def get_state(self):
        return {"history": list(range(self._next))}

    def set_state(self, state):
        self._next = len(state["history"])


class ChangesType(CountIterator):
    def get_state(self):
        return {"next": self._next if self._next % 2 else str(self._next)}

    def set_state(self, state):
        self._next = int(state["next"])


class RunsPastTheEnd(CountIterator):
    def set_state(self, state):
        self._next, self._stop = state["next"], self._stop + 3


class OnlyFresh(CountIterator):
    """Restores only an iterator that has not started: a used one stays where it is."""

    def set_state(self, state):
        if self._next == 0:
            self._next = state["next"]


class LiveState(CountIterator):
    # Nested: the outermost iterator copies the top level of a state as it adds the
    # pipeline's fingerprint, which hides a live view only there.
    def __init__(self, stop=12):
        super().__init__(stop)
        self._state = {"at": {"next": 0}}

    def __next__(self):
        value = super().__next__()
        self._state["at"]["next"] = self._next
        return value

    def get_state(self):
        return self._state

    def set_state(self, state):
        self._next = state["at"]["next"]
        self._state = {"at": dict(state["at"])}


class Of(IterDataset):
    """An IterDataset whose iterators are `cls()`."""

    def __init__(self, cls):
        super().__init__()
        self._cls = cls

    def __iter__(self):
        return self._cls()


def test_helper_passes_a_correct_custom_iterator():
    assert_equal_output_after_checkpoint(Of(CountIterator))
    assert_equal_output_after_checkpoint(Of(CountIterator).map(lambda x: x + 1).batch(5))


@pytest.mark.parametrize(
    "cls",
    [
        OffByOne,
        OffByOneAtOneStep,
        IgnoresState,
        NotJson,
        Growing,
        ChangesType,
        RunsPastTheEnd,
        LiveState,
        OnlyFresh,
    ],
)
def test_helper_fails_on_a_broken_iterator(cls):
    with pytest.raises(AssertionError, match="step"):
        assert_equal_output_after_checkpoint(Of(cls))


@pytest.mark.parametrize("cls", [OffByOne, NotJson])
def test_helper_fails_on_a_broken_iterator_inside_a_pipeline(cls):
    with pytest.raises(AssertionError):
        assert_equal_output_after_checkpoint(Of(cls).map(lambda x: x * 2).filter(lambda x: x > 2))


def test_helper_fails_on_a_dataset_that_changes_between_iterators():
    class Drifting(IterDataset):
        def __init__(self):
            super().__init__()
            self._runs = 0

        def __iter__(self):
            self._runs += 1
            return CountIterator(12 + self._runs)

    with pytest.raises(AssertionError):
        assert_equal_output_after_checkpoint(Drifting())


@pytest.mark.parametrize(
    "steps",
    [[3, 5], (3, 5), range(3, 6, 2), iter([3, 5])],
    ids=["list", "tuple", "range", "iterator"],
)
def test_helper_checks_the_steps_asked_for_also_on_the_used_iterator(steps):
    # OnlyFresh fails only when a used iterator is restored; any iterable of
    # steps must be checked that way too.
    with pytest.raises(AssertionError, match="original iterator"):
        assert_equal_output_after_checkpoint(Of(OnlyFresh), steps=steps)


def test_helper_rejects_steps_outside_the_run():
    with pytest.raises(ValueError, match="steps"):
        assert_equal_output_after_checkpoint(Of(CountIterator), steps=[13])


def test_helper_restores_only_the_steps_asked_for():
    # OffByOneAtOneStep is wrong only at step 7.
    assert_equal_output_after_checkpoint(Of(OffByOneAtOneStep), steps=[0, 3, 11, 12])
    with pytest.raises(AssertionError, match="step 7"):
        assert_equal_output_after_checkpoint(Of(OffByOneAtOneStep), steps=[7])


# -- malformed states are rejected -------------------------------------------------------------


def plain():
    return MapDataset.range(50).to_iter_dataset(options(0))


def random_mapped():
    return plain().random_map(draw, seed=1)


def mixed():
    return IterDataset.mix([plain(), plain()])


def mixed_three():
    return IterDataset.mix([plain(), plain(), plain()])


def indexed():
    return plain().map_with_index(lambda i, x: i)


def state_after(build, steps):
    it = iter(build())
    for _ in range(steps):
        next(it)
    state = it.get_state()
    it.close()
    return state


RNG = "index_for_rng"
MIX0 = {"parents": [{"next_index": 0}] * 2, "index": 0, "stop": False}


def older_mix(state):
    """The state of an earlier version, without its fingerprint (components by place)."""
    return {"position": state["index"], "parents": state["parents"]}


BAD_STATES = [
    ("mix state into plain", plain, lambda: state_after(mixed, 3)),
    ("plain state into random_map", random_mapped, lambda: state_after(plain, 3)),
    ("random_map state into mix", mixed, lambda: state_after(random_mapped, 3)),
    # A mix checkpoint names its components in its fingerprint, so they may change on
    # purpose (test_fingerprint.py); a state without it must have one per component.
    ("3-way mix state into 2-way mix", mixed, lambda: state_after(mixed_three, 3)),
    ("2-way mix state into 3-way mix", mixed_three, lambda: state_after(mixed, 3)),
    ("older 3-way mix state into 2-way mix", mixed, lambda: older_mix(state_after(mixed_three, 3))),
    ("older 2-way mix state into 3-way mix", mixed_three, lambda: older_mix(state_after(mixed, 3))),
    ("map_with_index state into mix", mixed, lambda: state_after(indexed, 3)),
    ("longer pipeline's state", plain, lambda: {"next_index": 80}),
    ("missing key", random_mapped, lambda: {"parent": {"next_index": 0}}),
    ("extra key", random_mapped, lambda: {RNG: 0, "parent": {"next_index": 0}, "x": 1}),
    ("negative count", random_mapped, lambda: {RNG: -1, "parent": {"next_index": 0}}),
    ("float count", random_mapped, lambda: {RNG: 1.0, "parent": {"next_index": 1}}),
    ("negative nested", random_mapped, lambda: {RNG: 0, "parent": {"next_index": -2}}),
    ("nested past the end", random_mapped, lambda: {RNG: 0, "parent": {"next_index": 51}}),
    ("nested non-dict", random_mapped, lambda: {RNG: 0, "parent": [0]}),
    ("old and new keys", random_mapped, lambda: {RNG: 0, "index": 0, "parent": {"next_index": 0}}),
    ("mix parents not a list", mixed, lambda: {**MIX0, "parents": {"0": {}, "1": {}}}),
    ("mix negative index", mixed, lambda: {**MIX0, "index": -1}),
    ("mix stop not a bool", mixed, lambda: {**MIX0, "stop": 0}),
    ("mix bad component", mixed, lambda: {**MIX0, "parents": [{"next_index": 0}, {}]}),
    ("old mix parents not a list", mixed, lambda: {"position": 0, "parents": {"0": {}, "1": {}}}),
    ("old mix negative position", mixed, lambda: {"position": -1, "parents": MIX0["parents"]}),
    ("string", plain, lambda: "next_index=3"),
    ("list", mixed, lambda: [0, [{"next_index": 0}] * 2]),
    ("none", indexed, lambda: None),
]


@pytest.mark.parametrize(
    ("build", "state"), [case[1:] for case in BAD_STATES], ids=[c[0] for c in BAD_STATES]
)
def test_set_state_rejects_a_state_that_does_not_belong(build, state):
    it = iter(build())
    with pytest.raises((ValueError, TypeError)):
        it.set_state(state())


def test_a_state_of_the_same_pipeline_built_again_is_accepted():
    state = state_after(mixed, 7)
    it = iter(mixed())
    it.set_state(state)
    assert list(it) == list(mixed())[7:]
