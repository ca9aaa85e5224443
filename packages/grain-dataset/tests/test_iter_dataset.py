"""IterDataset's transformations, its `mix`, custom datasets and iterators, and mp_prefetch.

Random stages are checked by their properties (determinism for a seed,
difference between seeds, independence from the data), never against one
hard-coded draw.
"""

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from grain_dataset import (
    DatasetIterator,
    FilterTransform,
    IterDataset,
    MapDataset,
    MapTransform,
    MapWithIndex,
    RandomMapTransform,
    ReadOptions,
    assert_equal_output_after_checkpoint,
)
from grain_dataset._runtime._guard import unguard

pytestmark = pytest.mark.timeout(60)


def source(n: int = 10, num_threads: int = 0) -> IterDataset:
    return MapDataset.range(n).to_iter_dataset(ReadOptions(num_threads=num_threads))


def draw(x, rng):
    return int(rng.integers(1 << 62))


# -- map / filter ----------------------------------------------------------------------------


class AddTen(MapTransform):
    def map(self, element):
        return element + 10


class Even(FilterTransform):
    def filter(self, element):
        return element % 2 == 0


def test_spec_examples_map_and_filter():
    assert list(MapDataset.range(5).to_iter_dataset().map(lambda x: x + 10)) == [10, 11, 12, 13, 14]
    assert list(MapDataset.range(5).to_iter_dataset().filter(lambda x: x % 2 == 0)) == [0, 2, 4]


@pytest.mark.parametrize("num_threads", [0, 4])
def test_map_and_filter_accept_transform_objects(num_threads):
    ds = source(20, num_threads).map(AddTen()).filter(Even())
    assert list(ds) == [x + 10 for x in range(20) if x % 2 == 0]


def test_filter_keeps_by_truthiness():
    ds = source(6).map(lambda x: [0] * (x % 3)).filter(lambda x: x)
    assert list(ds) == [[0], [0, 0], [0], [0, 0]]


def test_transformations_do_not_change_the_dataset():
    ds = source(5)
    mapped = ds.map(lambda x: x * 2)
    ds.filter(lambda x: x > 2)
    assert list(ds) == [0, 1, 2, 3, 4]
    assert list(mapped) == [0, 2, 4, 6, 8]
    assert list(mapped.parents) == [ds]


def test_a_transform_of_the_wrong_kind_is_rejected():
    with pytest.raises(TypeError):
        source().map(Even())
    with pytest.raises(TypeError):
        source().filter(AddTen())
    with pytest.raises(TypeError):
        source().map(3)


def test_error_in_an_iter_map_keeps_its_type_and_names_the_stage():
    def broken(x):
        if x == 3:
            raise KeyError(x)
        return x

    it = iter(source(6).map(broken))
    assert [next(it) for _ in range(3)] == [0, 1, 2]
    with pytest.raises(KeyError) as caught:
        next(it)
    assert any("broken" in note for note in caught.value.__notes__)


# -- map_with_index ----------------------------------------------------------------------------


class Tag(MapWithIndex):
    def map_with_index(self, index, element):
        return (index, element)


def test_map_with_index_counts_from_zero_in_the_iter_dataset():
    assert list(source(5).map_with_index(lambda i, x: (i, 2**x))) == [
        (0, 1),
        (1, 2),
        (2, 4),
        (3, 8),
        (4, 16),
    ]


@pytest.mark.parametrize("num_threads", [0, 4])
def test_map_with_index_counts_output_elements_not_source_positions(num_threads):
    ds = source(30, num_threads).filter(lambda x: x % 3 == 0).map_with_index(Tag())
    assert list(ds) == list(enumerate(range(0, 30, 3)))


def test_map_with_index_restarts_for_every_iterator():
    ds = source(4).map_with_index(lambda i, x: i)
    assert list(ds) == list(ds) == [0, 1, 2, 3]


# -- random_map / seed -----------------------------------------------------------------------


def test_spec_example_random_map():
    ds = MapDataset.range(5).to_iter_dataset()
    ds = ds.random_map(lambda x, rng: x + rng.integers(5, 10), seed=3)
    assert set(ds).issubset(set(range(5, 15)))


def test_random_map_is_deterministic_for_a_seed():
    first = list(source(50).random_map(draw, seed=7))
    assert first == list(source(50, num_threads=4).random_map(draw, seed=7))
    ds = source(50).random_map(draw, seed=7)
    assert list(ds) == list(ds) == first


RANDOM_PIPELINES = textwrap.dedent(
    """
    import json
    import grain_dataset as gd

    def draw(x, rng):
        return int(rng.integers(1 << 62))

    def source():
        return gd.MapDataset.range(20).to_iter_dataset(gd.ReadOptions(num_threads=2))

    print(json.dumps([
        list(source().random_map(draw, seed=7)),
        list(source().seed(3).random_map(draw)),
        list(source().filter(lambda x: x % 2).seed(3).random_map(draw).random_map(draw)),
    ]))
    """
)


def test_random_map_is_the_same_in_every_process():
    outputs = set()
    for hash_seed in ("0", "1", "12345"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        result = subprocess.run(
            [sys.executable, "-c", RANDOM_PIPELINES],
            capture_output=True,
            text=True,
            env=env,
            timeout=30,
            check=True,
        )
        outputs.add(result.stdout)
    assert len(outputs) == 1
    explicit, seeded, chained = json.loads(outputs.pop())
    assert explicit == list(source(20).random_map(draw, seed=7))
    assert seeded == list(source(20).seed(3).random_map(draw))
    assert len(chained) == 10


def test_random_map_gives_each_element_its_own_numbers():
    values = list(source(50).random_map(draw, seed=7))
    assert len(set(values)) == 50


def test_random_map_differs_between_seeds():
    assert list(source(50).random_map(draw, seed=1)) != list(source(50).random_map(draw, seed=2))


def test_random_map_is_keyed_by_element_count_not_by_the_element():
    # The k-th output element gets the k-th generator, whatever its value.
    low = list(MapDataset.range(40).to_iter_dataset().random_map(draw, seed=5))
    high = list(MapDataset.range(1000, 1040).to_iter_dataset().random_map(draw, seed=5))
    assert low == high
    filtered = list(
        MapDataset.range(80).to_iter_dataset().filter(lambda x: x % 2).random_map(draw, seed=5)
    )
    assert filtered == low


def test_random_map_passes_a_numpy_generator_and_accepts_transform_objects():
    class Noise(RandomMapTransform):
        def random_map(self, element, rng):
            assert isinstance(rng, np.random.Generator)
            return element + rng.random()

    values = list(source(20).random_map(Noise(), seed=0))
    assert [int(v) for v in values] == list(range(20))
    assert len({v - int(v) for v in values}) == 20


def test_random_map_restored_mid_way_draws_the_same_numbers():
    ds = source(30, num_threads=4).random_map(draw, seed=11)
    expected = list(ds)
    it = iter(ds)
    for _ in range(13):
        next(it)
    state = it.get_state()
    it.close()
    fresh = iter(ds)
    fresh.set_state(state)
    assert list(fresh) == expected[13:]


def test_random_map_needs_a_seed():
    with pytest.raises(ValueError, match="seed"):
        source().random_map(draw)


@pytest.mark.parametrize(
    ("seed", "error"), [(-1, ValueError), (1 << 32, ValueError), (0.5, TypeError)]
)
def test_random_map_rejects_bad_seeds(seed, error):
    with pytest.raises(error):
        source().random_map(draw, seed=seed)


def test_seed_passes_elements_unchanged():
    assert list(source(8).seed(3)) == list(range(8))


def test_seed_makes_later_random_stages_deterministic_and_distinct():
    first = list(source(40).seed(1).random_map(draw))
    assert first == list(source(40).seed(1).random_map(draw))
    assert first != list(source(40).seed(2).random_map(draw))
    # Two random stages downstream of one seed get different seeds.
    pairs = list(
        source(40)
        .seed(1)
        .random_map(lambda x, rng: [draw(x, rng)])
        .random_map(lambda pair, rng: (pair[0], draw(None, rng)))
    )
    assert any(a != b for a, b in pairs)


def test_an_explicit_seed_ignores_the_pipeline_seed():
    a = list(source(30).seed(1).random_map(draw, seed=9))
    b = list(source(30).seed(2).random_map(draw, seed=9))
    assert a == b


def test_a_later_seed_overrides_an_earlier_one():
    a = list(source(30).seed(1).seed(5).random_map(draw))
    b = list(source(30).seed(2).seed(5).random_map(draw))
    assert a == b


def test_seed_of_the_map_dataset_reaches_an_iter_random_map():
    a = list(MapDataset.range(30).seed(1).to_iter_dataset().random_map(draw))
    b = list(MapDataset.range(30).seed(2).to_iter_dataset().random_map(draw))
    assert a != b
    assert a == list(MapDataset.range(30).seed(1).to_iter_dataset().random_map(draw))


# -- batch ---------------------------------------------------------------------------------------


def batches_as_lists(ds):
    return [b.tolist() for b in ds]


@pytest.mark.parametrize("num_threads", [0, 4])
def test_batch_keeps_a_partial_last_batch(num_threads):
    batches = list(source(5, num_threads).batch(batch_size=2))
    assert all(isinstance(b, np.ndarray) for b in batches)
    assert [b.tolist() for b in batches] == [[0, 1], [2, 3], [4]]


def test_batch_drop_remainder():
    assert batches_as_lists(source(5).batch(2, drop_remainder=True)) == [[0, 1], [2, 3]]
    assert batches_as_lists(source(6).batch(2, drop_remainder=True)) == [[0, 1], [2, 3], [4, 5]]
    assert batches_as_lists(source(1).batch(2, drop_remainder=True)) == []
    assert batches_as_lists(source(0).batch(2)) == []


def test_batch_counts_only_the_elements_that_pass_a_filter():
    ds = source(20).filter(lambda x: x % 3 == 0).batch(3)
    assert batches_as_lists(ds) == [[0, 3, 6], [9, 12, 15], [18]]


def test_batch_stacks_pytrees():
    ds = source(3).map(lambda x: {"x": np.full(2, x), "y": (x, float(x))}).batch(2)
    first, last = list(ds)
    np.testing.assert_array_equal(first["x"], [[0, 0], [1, 1]])
    np.testing.assert_array_equal(first["y"][0], [0, 1])
    np.testing.assert_array_equal(first["y"][1], [0.0, 1.0])
    assert last["x"].shape == (1, 2)


def test_batch_fn_replaces_stacking():
    assert list(source(5).batch(2, batch_fn=tuple)) == [(0, 1), (2, 3), (4,)]


@pytest.mark.parametrize(("size", "error"), [(0, ValueError), (-2, ValueError), (1.5, TypeError)])
def test_batch_rejects_bad_sizes(size, error):
    with pytest.raises(error, match="batch_size"):
        source().batch(size)


# -- pipe ------------------------------------------------------------------------------------------


def test_pipe_calls_the_function_with_the_dataset_and_arguments():
    ds = source(6)

    def take_every(dataset, step, *, offset=0):
        assert dataset is ds
        return dataset.filter(lambda x: (x - offset) % step == 0)

    assert list(ds.pipe(take_every, 2, offset=1)) == [1, 3, 5]
    assert ds.pipe(lambda d: 42) == 42


# -- mix -----------------------------------------------------------------------------------------


def test_spec_example_mix_stops_at_the_first_exhausted_component():
    ds1 = MapDataset.range(5).to_iter_dataset()
    ds2 = MapDataset.range(7, 10).to_iter_dataset()
    assert list(IterDataset.mix([ds1, ds2])) == [0, 7, 1, 8, 2, 9, 3]


@pytest.mark.parametrize("weights", [[0, 1], [1.0, 0.0], [np.float32(0), 1]])
def test_mix_refuses_a_zero_weight_as_grain_does(weights):
    parts = [MapDataset.range(3), MapDataset.range(3)]
    for mix in (
        lambda: MapDataset.mix(parts, weights),
        lambda: IterDataset.mix([p.to_iter_dataset() for p in parts], weights),
    ):
        with pytest.raises(ValueError, match=r"`weights` of mix: weights\[\d\] is 0"):
            mix()


def test_map_mix_refuses_an_empty_dataset():
    with pytest.raises(ValueError, match=r"`datasets\[1\]` of mix is empty"):
        MapDataset.mix([MapDataset.range(3), MapDataset.range(3)[:0]])


def test_mix_stops_when_the_component_it_needs_is_exhausted():
    ds = IterDataset.mix([source(3), MapDataset.range(10, 20).to_iter_dataset()])
    it = iter(ds)
    assert list(it) == [0, 10, 1, 11, 2, 12]
    with pytest.raises(StopIteration):
        next(it)


@pytest.mark.parametrize("num_threads", [0, 4])
@pytest.mark.parametrize("weights", [[0.7, 0.3], [1, 2], [1, 1, 2], [3, 0.5, 1]])
def test_mix_follows_the_weights(num_threads, weights):
    components = [
        MapDataset.range(1000).map(lambda x, c=c: (c, x)).to_iter_dataset(ReadOptions(num_threads))
        for c in range(len(weights))
    ]
    n = 400
    it = iter(IterDataset.mix(components, weights))
    values = [next(it) for _ in range(n)]
    it.close()
    total = sum(weights)
    for c, weight in enumerate(weights):
        mine = [x for component, x in values if component == c]
        # Each component is read in its own order, none skipped or repeated.
        assert mine == list(range(len(mine)))
        assert abs(len(mine) - n * weight / total) <= 2, (c, len(mine))
    if 0 in weights:
        assert all(c != weights.index(0) for c, _ in values)


def test_mix_of_filtered_components():
    evens = source(40).filter(lambda x: x % 2 == 0)
    odds = source(40).filter(lambda x: x % 2 == 1)
    assert list(IterDataset.mix([evens, odds]))[:10] == list(range(10))


def test_mix_can_be_nested_and_transformed():
    inner = IterDataset.mix(
        [source(20).map(lambda x: ("a", x)), source(20).map(lambda x: ("b", x))]
    )
    outer = IterDataset.mix([inner, source(20).map(lambda x: ("c", x))], [2, 1])
    values = list(outer.map(lambda pair: pair[0]))
    assert set(values) == {"a", "b", "c"}
    assert abs(values.count("c") - len(values) / 3) <= 2


@pytest.mark.parametrize(
    "weights",
    [[1], [1, 2, 3], [-1, 2], [0, 0], [float("nan"), 1], [float("inf"), 1]],
)
def test_mix_rejects_bad_weights(weights):
    with pytest.raises(ValueError, match="weight"):
        IterDataset.mix([source(), source()], weights)


def test_mix_rejects_no_datasets():
    with pytest.raises(ValueError, match="empty"):
        IterDataset.mix([])


# -- custom datasets and iterators ------------------------------------------------------------


class CountIterator(DatasetIterator):
    """The iterator of the DatasetIterator docstring."""

    def __init__(self, stop):
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


class Countdown(IterDataset):
    """The IterDataset of the IterDataset docstring (counting up, here)."""

    def __init__(self, n):
        super().__init__()
        self._n = n

    def __iter__(self):
        return CountIterator(self._n)


class TwiceIterator(DatasetIterator):
    """Yields every element of its parent twice."""

    def __init__(self, parent):
        super().__init__(parent)
        self._parent = parent
        self._pending = None

    def __next__(self):
        if self._pending is not None:
            value, self._pending = self._pending, None
            return value
        self._state = self._parent.get_state()
        self._pending = next(self._parent)
        return self._pending

    def get_state(self):
        if self._pending is None:
            return {"parent": self._parent.get_state(), "second": 0}
        return {"parent": self._state, "second": 1}

    def set_state(self, state):
        self._parent.set_state(state["parent"])
        self._pending = None
        if state["second"]:
            self._state = state["parent"]
            self._pending = next(self._parent)


class Twice(IterDataset):
    def __init__(self, parent):
        super().__init__(parent)

    def __iter__(self):
        return TwiceIterator(iter(self.parents[0]))


def test_custom_dataset_from_the_docstrings_works_in_pipelines():
    ds = Countdown(7).map(lambda x: x * 3).filter(lambda x: x % 2 == 0).batch(2)
    assert batches_as_lists(ds) == [[0, 6], [12, 18]]
    assert_equal_output_after_checkpoint(Countdown(25).map_with_index(lambda i, x: i + x))
    assert_equal_output_after_checkpoint(
        IterDataset.mix([Countdown(10), source(10)], [1, 2]).random_map(draw, seed=1)
    )


@pytest.mark.parametrize("num_threads", [0, 4])
def test_custom_stage_with_a_parent_works_in_pipelines_with_state(num_threads):
    ds = Twice(source(12, num_threads).filter(lambda x: x != 5)).map(lambda x: x + 1)
    assert list(ds) == [v for x in range(12) if x != 5 for v in (x + 1, x + 1)]
    assert ds.parents[0].parents[0].parents  # the chain is visible
    assert_equal_output_after_checkpoint(ds.batch(3))


class ForgetfulIterator(DatasetIterator):
    """Forgets to call super().__init__()."""

    def __init__(self, n):
        self._i, self._n = 0, n

    def __next__(self):
        if self._i >= self._n:
            raise StopIteration
        self._i += 1
        return self._i - 1

    def get_state(self):
        return {"i": self._i}

    def set_state(self, state):
        self._i = state["i"]


class Forgetful(IterDataset):
    def __init__(self, n):
        super().__init__()
        self._n = n

    def __iter__(self):
        return ForgetfulIterator(self._n)


def test_iterator_without_super_init_fails_with_an_actionable_message_in_a_pipeline():
    with pytest.raises(AttributeError, match=r"super\(\)\.__init__"):
        list(Forgetful(3).map(lambda x: x))


def test_iterator_without_super_init_fails_when_the_pipeline_iterator_is_built():
    ds = Forgetful(3).map(lambda x: x)
    with pytest.raises(AttributeError, match=r"super\(\)\.__init__"):
        iter(ds)


def test_iterator_without_super_init_names_the_fix_for_parents():
    with pytest.raises(AttributeError, match=r"super\(\)\.__init__"):
        _ = ForgetfulIterator(3).parents


def test_dataset_without_super_init_fails_with_an_actionable_message():
    class NoInit(IterDataset):
        def __init__(self):
            pass

        def __iter__(self):
            return CountIterator(3)

    with pytest.raises(AttributeError, match=r"super\(\)\.__init__"):
        NoInit().map(lambda x: x)


def test_iterator_is_its_own_iterator():
    it = iter(source(3))
    assert iter(it) is it
    assert isinstance(it, DatasetIterator)


# -- mp_prefetch ----------------------------------------------------------------------------------


def test_mp_prefetch_without_grain_mp_names_the_package_to_install(monkeypatch):
    # grain-mp is installed in the workspace: its import fails here as if it were not.
    # (mp_prefetch itself is tested in grain-mp's tests.)
    monkeypatch.setitem(sys.modules, "grain_mp", None)
    ds = source(5)
    with pytest.raises(ImportError, match="grain-mp"):
        ds.mp_prefetch()
    with pytest.raises(ImportError, match="grain-mp"):
        ds.prefetch(None)


# -- the thread guard (from integration_tests/test_resilience_regressions.py, issue 9) ----------


def test_only_the_outermost_iterator_is_guarded_and_keeps_its_class():
    iterator = iter(source(20).map(lambda x: x).batch(2))
    inner = iterator._parent
    assert "_call_lock" in iterator.__dict__
    assert "_call_lock" not in inner.__dict__
    assert type(iterator).__name__ == "_BatchIterator"
    assert (
        type(iterator).__module__ == "grain_dataset._map_stages._batch"
    )  # its own class, none made
    assert isinstance(iterator, DatasetIterator)
    unguard(iterator)
    assert "_call_lock" not in iterator.__dict__
    assert next(iterator).tolist() == [0, 1]
