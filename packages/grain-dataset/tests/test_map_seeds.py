"""How MapDataset's random stages get their seeds: the API reference's five examples.

A random stage uses its own ``seed=`` if given, else a seed derived from the
nearest ``ds.seed(...)`` upstream and the stage's position, else it raises.
Seeds are observed through their effects: a shuffle's order and the numbers a
random map draws (one 62-bit draw per element, so equal seeds are the only
plausible way for two stages to agree).
"""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grain_dataset import MapDataset

seeds = st.integers(0, 2**32 - 1)
two_seeds = st.lists(seeds, min_size=2, max_size=2, unique=True)

N = 40


def draw(x, rng):
    return int(rng.integers(2**62))


def append_draw(x, rng):
    return (*x, int(rng.integers(2**62)))


def as_tuple(x):
    return (x,)


def epoch(ds, e=0):
    n = len(ds)
    return [ds[i] for i in range(e * n, (e + 1) * n)]


def identity(x):
    return x


# -- example 1: ds.seed(seed).shuffle() -----------------------------------------------------


@given(seed=seeds)
@settings(max_examples=20, deadline=None)
def test_shuffle_takes_its_seed_from_ds_seed(seed):
    ds = MapDataset.range(N).seed(seed).shuffle()
    order = epoch(ds)
    assert sorted(order) == list(range(N))
    assert order == epoch(MapDataset.range(N).seed(seed).shuffle()), "rebuilding changed it"
    assert list(ds) == order


@given(seed=seeds)
@settings(max_examples=20, deadline=None)
def test_shuffle_derives_a_seed_of_its_own_rather_than_reusing_ds_seed(seed):
    derived = epoch(MapDataset.range(N).seed(seed).shuffle())
    assert derived != epoch(MapDataset.range(N).shuffle(seed=seed))


# -- example 2: two random stages after one ds.seed ------------------------------------------


@given(seed=seeds)
@settings(max_examples=20, deadline=None)
def test_two_random_maps_after_one_seed_draw_different_numbers(seed):
    ds = MapDataset.range(N).map(as_tuple).seed(seed).random_map(append_draw)
    ds = ds.random_map(append_draw)
    for _, first, second in epoch(ds):
        assert first != second


@given(seed=seeds)
@settings(max_examples=20, deadline=None)
def test_shuffle_and_random_map_after_one_seed_are_both_seeded(seed):
    ds = MapDataset.range(N).seed(seed).shuffle().random_map(draw)
    values = epoch(ds)
    assert len(set(values)) == N
    assert values == epoch(MapDataset.range(N).seed(seed).shuffle().random_map(draw))


def test_two_shuffles_after_one_seed_use_different_seeds():
    # Two shuffles with one seed would compose the same permutation twice; with
    # distinct seeds the composition is unrelated to either square.
    ds = MapDataset.range(N).seed(7).shuffle()
    first = epoch(ds)
    twice = epoch(ds.shuffle())
    same_seed_squared = [first[i] for i in first]
    assert twice != same_seed_squared


# -- example 3: an explicit seed= wins ------------------------------------------------------


@given(seed=seeds, pipeline_seeds=two_seeds)
@settings(max_examples=20, deadline=None)
def test_explicit_seed_wins_over_ds_seed(seed, pipeline_seeds):
    s1, s2 = pipeline_seeds
    alone = epoch(MapDataset.range(N).random_map(draw, seed=seed))
    assert epoch(MapDataset.range(N).seed(s1).random_map(draw, seed=seed)) == alone
    assert epoch(MapDataset.range(N).seed(s2).random_map(draw, seed=seed)) == alone
    order = epoch(MapDataset.range(N).shuffle(seed=seed))
    assert epoch(MapDataset.range(N).seed(s1).shuffle(seed=seed)) == order
    assert epoch(MapDataset.range(N).seed(s2).shuffle(seed=seed)) == order


# -- example 4: a second ds.seed overrides for what follows only -----------------------------


@given(first=two_seeds, second=two_seeds)
@settings(max_examples=20, deadline=None)
def test_second_seed_overrides_for_the_stages_after_it_only(first, second):
    def build(s1, s2):
        return MapDataset.range(N).seed(s1).shuffle().seed(s2).random_map(draw)

    def shuffle_order(s1, s2):
        return epoch(MapDataset.range(N).seed(s1).shuffle().seed(s2))

    base = build(first[0], second[0])
    # The random map's numbers depend on the second seed only, not the first.
    assert epoch(build(first[1], second[0])) == epoch(base)
    assert epoch(build(first[0], second[1])) != epoch(base)
    # The shuffle's order depends on the first seed only.
    assert shuffle_order(first[0], second[0]) == shuffle_order(first[0], second[1])
    assert shuffle_order(first[0], second[0]) != shuffle_order(first[1], second[0])


# -- example 5: a stage after a mix depends on every component's seed -----------------------


def mixed(s1, s2):
    ds1 = MapDataset.range(N).seed(s1).shuffle()
    ds2 = MapDataset.range(100, 100 + N).seed(s2).shuffle()
    return MapDataset.mix([ds1, ds2], [1, 1])


@given(s1=two_seeds, s2=two_seeds)
@settings(max_examples=20, deadline=None)
def test_random_map_after_a_mix_derives_from_both_seeds(s1, s2):
    def numbers(a, b):
        return epoch(mixed(a, b).random_map(draw))

    base = numbers(s1[0], s2[0])
    assert numbers(s1[0], s2[0]) == base
    assert numbers(s1[1], s2[0]) != base
    assert numbers(s1[0], s2[1]) != base


@given(s1=two_seeds, s2=two_seeds)
@settings(max_examples=20, deadline=None)
def test_each_shuffle_before_a_mix_derives_from_its_own_seed(s1, s2):
    def parts(a, b):
        values = epoch(mixed(a, b))
        return [x for x in values if x < 100], [x for x in values if x >= 100]

    low, high = parts(s1[0], s2[0])
    assert parts(s1[0], s2[1])[0] == low
    assert parts(s1[1], s2[0])[1] == high
    assert parts(s1[1], s2[0])[0] != low
    assert parts(s1[0], s2[1])[1] != high


def test_random_map_after_a_mix_of_seeded_and_unseeded_components():
    # The code's choice: a mix has a seed when any component has one.
    ds = MapDataset.mix([MapDataset.range(5).seed(1), MapDataset.range(5)]).random_map(draw)
    assert epoch(ds) == epoch(
        MapDataset.mix([MapDataset.range(5).seed(1), MapDataset.range(5)]).random_map(draw)
    )


# -- the same seed gives the same pipeline -------------------------------------------------


def pipeline(seed):
    return (
        MapDataset.range(60)
        .seed(seed)
        .shuffle()
        .random_map(draw)
        .batch(4, batch_fn=tuple)
        .filter(lambda batch: sum(batch) % 3 != 0)
        .shuffle()
    )


@given(pair=two_seeds)
@settings(max_examples=20, deadline=None)
def test_same_seed_same_output_other_seed_other_output(pair):
    a, b = pair
    assert epoch(pipeline(a), 2) == epoch(pipeline(a), 2)
    assert list(pipeline(a)) == list(pipeline(a))
    assert epoch(pipeline(a)) != epoch(pipeline(b))


def test_seeds_follow_the_stage_position():
    # The spec's warning: a stage added before a random stage changes its seed.
    plain = epoch(MapDataset.range(N).seed(3).shuffle())
    assert epoch(MapDataset.range(N).seed(3).map(identity).shuffle()) != plain
    # ...while an explicit seed= keeps the order.
    explicit = epoch(MapDataset.range(N).shuffle(seed=3))
    assert epoch(MapDataset.range(N).map(identity).shuffle(seed=3)) == explicit


def test_seed_stage_passes_elements_through():
    ds = MapDataset.source(list("abcdef")).seed(12)
    assert len(ds) == 6
    assert list(ds) == list("abcdef")
    assert ds[7] == "b"


# -- missing and bad seeds ----------------------------------------------------------------

UNSEEDED = {
    "shuffle": lambda: MapDataset.range(5).shuffle(),
    "random_map": lambda: MapDataset.range(5).random_map(draw),
    "shuffle after map": lambda: MapDataset.range(5).map(identity).shuffle(),
    "shuffle after mix": lambda: MapDataset.mix(
        [MapDataset.range(3), MapDataset.range(3)]
    ).shuffle(),
    "random_map after concatenate": lambda: MapDataset.concatenate(
        [MapDataset.range(3), MapDataset.range(3)]
    ).random_map(draw),
}


@pytest.mark.parametrize("build", UNSEEDED.values(), ids=UNSEEDED.keys())
def test_random_stage_without_any_seed_raises(build):
    with pytest.raises(ValueError, match=r"ds\.seed"):
        build()


STAGES = {
    "shuffle": lambda ds, seed: ds.shuffle(seed=seed),
    "random_map": lambda ds, seed: ds.random_map(draw, seed=seed),
}


@pytest.mark.parametrize("stage", STAGES.values(), ids=STAGES.keys())
@pytest.mark.parametrize("seed", [0, 1, 2**31, 2**32 - 1, np.uint32(5), np.int64(7)])
def test_explicit_seed_in_range_is_accepted(stage, seed):
    assert len(epoch(stage(MapDataset.range(5), seed))) == 5


@pytest.mark.parametrize("stage", STAGES.values(), ids=STAGES.keys())
@pytest.mark.parametrize("seed", [-1, 2**32, 2**64, -(2**40)])
def test_explicit_seed_out_of_range_raises_value_error(stage, seed):
    with pytest.raises(ValueError, match="seed"):
        stage(MapDataset.range(5), seed)


@pytest.mark.parametrize("stage", STAGES.values(), ids=STAGES.keys())
@pytest.mark.parametrize("seed", [1.0, 0.5, True, False, "1", np.float64(3.0)])
def test_explicit_seed_of_wrong_type_raises_type_error(stage, seed):
    with pytest.raises(TypeError, match="seed"):
        stage(MapDataset.range(5), seed)


@pytest.mark.parametrize("seed", [1.0, True, "3", None])
def test_ds_seed_of_wrong_type_raises_type_error(seed):
    with pytest.raises(TypeError, match="seed"):
        MapDataset.range(5).seed(seed)


def test_ds_seed_must_not_be_negative():
    with pytest.raises(ValueError, match="seed"):
        MapDataset.range(5).seed(-1)


def test_ds_seed_accepts_large_seeds():
    # The code's choice: ds.seed takes any seed in [0, 2**64), not only 32-bit ones.
    a = epoch(MapDataset.range(N).seed(2**40).shuffle())
    b = epoch(MapDataset.range(N).seed(2**40 + 1).shuffle())
    assert sorted(a) == list(range(N))
    assert a != b
