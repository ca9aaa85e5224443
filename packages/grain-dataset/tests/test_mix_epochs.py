"""MapDataset.mix past its first mixed epoch: every component continues where it stopped.

A mix's length is its first mixed epoch, which ends when the first component
runs out. Read on (an index past the length, `.repeat()`, a shuffle of the
repeat), the schedule goes on and each component is read from where it
stopped, into its own later epochs, as in Grain 0.2.18. Restarting every
component at each mixed epoch would never read the records of the longer
ones that the first mixed epoch left out.
"""

import collections

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grain_dataset import MapDataset, ReadOptions, assert_equal_output_after_checkpoint
from grain_index import MAX_PERIOD, integer_weights

seeds = st.integers(0, 2**32 - 1)


def grain_example():
    # Grain 0.2.18 gives 10, 11, 20, 12 | 10, 21, 11, 12 | 22, 10, 11, 20 | 12 for it.
    return MapDataset.mix(
        [MapDataset.source([10, 11, 12]), MapDataset.source([20, 21, 22])], weights=[2, 1]
    )


def tagged(lengths):
    """One source per component whose records say (component, record)."""
    return [MapDataset.source([(c, j) for j in range(n)]) for c, n in enumerate(lengths)]


def reads_by_component(values):
    reads = collections.defaultdict(list)
    for c, j in values:
        reads[c].append(j)
    return reads


def test_grain_example_reads_on_past_the_first_mixed_epoch():
    ds = grain_example()
    assert len(ds) == 4
    assert list(ds) == [10, 11, 20, 12]
    assert [ds[i] for i in range(4, 13)] == [10, 21, 11, 12, 22, 10, 11, 20, 12]
    # The batched path (one gather per component) reads the same.
    assert list(ds.repeat(4)) == [ds[i] for i in range(16)]


def test_repeat_reads_the_records_the_first_mixed_epoch_left_out():
    ds = grain_example()
    three = list(ds.repeat(3))
    assert three == [ds[i] for i in range(12)]
    assert [x for x in three if x >= 20] == [20, 21, 22, 20]
    endless = ds.repeat()
    assert [endless[i] for i in range(40)] == [ds[i] for i in range(40)]
    assert {endless[i] for i in range(12)} == {10, 11, 12, 20, 21, 22}


def test_repeat_without_reseed_rereads_the_first_mixed_epoch():
    ds = grain_example()
    assert list(ds.repeat(3, reseed_each_epoch=False)) == list(ds) * 3


def test_slice_past_its_length_reads_the_mix_on():
    ds = grain_example()
    window = ds[1:3]
    assert list(window) == [11, 20]
    # Epoch e of a slice is the same slice of the parent's epoch e (Grain's values).
    assert [window[i] for i in range(8)] == [11, 20, 21, 11, 10, 11, 10, 21]
    assert [window[i] for i in range(8)] == [ds[4 * (i // 2) + 1 + i % 2] for i in range(8)]


@given(
    lengths=st.lists(st.integers(1, 20), min_size=1, max_size=4),
    data=st.data(),
)
@settings(max_examples=120, deadline=None)
def test_k_mixed_epochs_read_every_component_in_order_and_in_proportion(lengths, data):
    n = len(lengths)
    weights = data.draw(
        st.one_of(
            st.lists(st.integers(1, 12), min_size=n, max_size=n),
            st.lists(st.floats(0.01, 100.0), min_size=n, max_size=n),
        ),
        label="weights",
    )
    k = data.draw(st.integers(1, 5), label="k")
    ds = MapDataset.mix(tagged(lengths), weights)
    end = k * len(ds)
    values = list(ds.repeat(k))
    assert values == [ds[i] for i in range(end)], "scalar and batched paths differ"
    assert list(ds.repeat(k).to_iter_dataset()) == values
    reads = reads_by_component(values)
    integer = integer_weights(weights)
    period = sum(integer)
    for c, length in enumerate(lengths):
        got = reads[c]
        # In order, continuing across mixed epochs: nothing skipped, nothing re-read early.
        assert got == [j % length for j in range(len(got))], f"component {c} skipped records"
        # The schedule's bound: within one element of the exact share of its weight.
        assert abs(len(got) - end * integer[c] / period) < 1, (c, len(got), end)
        share = weights[c] / sum(weights)
        assert abs(len(got) - end * share) < 1 + end * n / MAX_PERIOD
    # Every record of a component that was read for at least its length was read.
    for c, length in enumerate(lengths):
        if len(reads[c]) >= length:
            assert set(reads[c]) == set(range(length))


@given(lengths=st.lists(st.integers(1, 8), min_size=2, max_size=3), data=st.data())
@settings(max_examples=40, deadline=None)
def test_shuffled_components_go_on_into_their_own_later_epochs(lengths, data):
    weights = data.draw(st.lists(st.integers(1, 4), min_size=len(lengths), max_size=len(lengths)))
    parts = [
        MapDataset.source([(c, j) for j in range(n)]).shuffle(seed=data.draw(seeds))
        for c, n in enumerate(lengths)
    ]
    ds = MapDataset.mix(parts, weights)
    values = [ds[i] for i in range(4 * len(ds))]
    for c, got in reads_by_component(values).items():
        assert [(c, j) for j in got] == [parts[c][i] for i in range(len(got))]


@given(seed=seeds, k=st.integers(2, 4))
@settings(max_examples=30, deadline=None)
def test_shuffle_of_the_repeated_mix_is_a_permutation_of_it(seed, k):
    ds = MapDataset.mix(tagged([3, 4]), [2, 1])
    repeated = list(ds.repeat(k))
    shuffled = list(ds.repeat(k).shuffle(seed=seed))
    assert sorted(shuffled) == sorted(repeated)
    # Over k mixed epochs the second component is read on, not restarted.
    second = reads_by_component(repeated)[1]
    assert second == [j % 4 for j in range(len(second))]


@given(seed=seeds)
@settings(max_examples=30, deadline=None)
def test_each_epoch_of_a_shuffled_mix_permutes_that_mixed_epoch(seed):
    ds = grain_example()
    shuffled = ds.shuffle(seed=seed)
    n = len(ds)
    for e in range(4):
        epoch = [shuffled[i] for i in range(e * n, (e + 1) * n)]
        assert sorted(epoch) == sorted(ds[i] for i in range(e * n, (e + 1) * n))


def test_state_of_a_repeated_mix_is_its_position_and_restores_past_the_first_epoch():
    ds = grain_example().repeat()
    iterator = iter(ds.to_iter_dataset())
    for _ in range(7):
        next(iterator)
    state = iterator.get_state()
    assert state["next_index"] == 7
    fresh = iter(ds.to_iter_dataset())
    fresh.set_state(state)
    assert [next(fresh) for _ in range(9)] == [ds[i] for i in range(7, 16)]


@pytest.mark.parametrize("shuffle", [False, True])
def test_every_state_over_three_mixed_epochs_restores(shuffle):
    ds = MapDataset.mix(tagged([5, 2, 9]), [0.5, 0.2, 0.3]).repeat(3)
    if shuffle:
        ds = ds.shuffle(seed=7)
    assert_equal_output_after_checkpoint(ds.to_iter_dataset())


@pytest.mark.timeout(60)
def test_every_state_restores_with_read_ahead_threads():
    ds = MapDataset.mix(tagged([6, 4]), [3, 1]).repeat(4)
    read = ReadOptions(num_threads=3, prefetch_buffer_size=4)
    assert list(ds.to_iter_dataset(read)) == [ds[i] for i in range(len(ds))]
    assert_equal_output_after_checkpoint(ds.to_iter_dataset(read), steps=range(0, len(ds) + 1, 3))


def test_random_access_far_past_the_first_epoch_is_arithmetic():
    ds = MapDataset.mix(tagged([3, 1000]), [1, 1])
    far = 10**15
    assert ds[far] == (0, (far // 2) % 3)
    assert ds[far + 1] == (1, (far // 2) % 1000)
    # A slice of the endless repeat reads these positions in one vectorized gather.
    assert list(ds.repeat()[far : far + 6]) == [ds[i] for i in range(far, far + 6)]
