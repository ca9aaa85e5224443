"""ElasticIterator with `batching`: one token-budget batch per step, exactly once across resizes.

Every element is a sequence whose tokens all equal its id + 1, so a batch's
rows say which elements it delivered. The properties: over plain, filtered and
mixed pipelines and random resizes at random steps (with another per-shard
budget each time), every element of the epoch is delivered exactly once (the
stage emits its last, partial batch, so nothing is left over at the end), each
row holds one whole element, and every batch keeps its shard's budget.
"""

import collections
import functools

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from grain_dataset import FirstFitPackIterDataset, MapDataset, ReadOptions
from grain_dataset.stages import TokenBudgetBatchIterDataset
from grain_index import ShardOptions
from grain_mp import ElasticIterator, MultiprocessingOptions

pytestmark = [
    pytest.mark.timeout(120),
    pytest.mark.filterwarnings("ignore:the filters .* dropped:UserWarning"),
]

_LENGTHS = [8, 16, 32]


def _keep(x):
    return (x * 2654435761) % 997 < 0.6 * 997


def _tokens(x):
    # Skewed lengths 1..32; every token of element x is x + 1 (0 is padding).
    length = 1 + (x * 7919) % 32 if x % 3 else 1 + x % 6
    return {"tokens": np.full(length, x + 1, dtype=np.int32), "id": np.int64(x)}


def _pipeline(seed, kind, n=150):
    def component(k, length):
        ds = MapDataset.range(10_000 * k, 10_000 * k + length).shuffle(seed=seed + k)
        return ds.filter(_keep) if kind != "plain" else ds

    if kind == "mix":
        ds = MapDataset.mix([component(0, n), component(1, n // 2)], [0.7, 0.3])
    else:
        ds = component(0, n)
    return ds.map(_tokens)


_BATCHING = functools.partial(
    TokenBudgetBatchIterDataset, padded_lengths=_LENGTHS, sequence_keys=["tokens"]
)


def _shards(ds, count, budget, workers=0):
    mp = MultiprocessingOptions(num_workers=workers, per_worker_buffer_size=2) if workers else None
    return [
        ElasticIterator(
            ds,
            count * budget,
            ShardOptions(index, count),
            read_options=ReadOptions(num_threads=0),
            multiprocessing_options=mp,
            batching=_BATCHING,
        )
        for index in range(count)
    ]


def _ids(batch, budget):
    """The ids a batch delivers, after checking its shape, budget and rows."""
    tokens, lengths, rows = batch["tokens"], batch["tokens_lengths"], batch["row_mask"]
    count, padded = tokens.shape
    assert padded in _LENGTHS
    assert count * padded <= budget
    assert rows.any()
    assert (np.diff(rows.astype(np.int8)) <= 0).all()  # elements first, then padding rows
    ids = batch["id"][rows].tolist()
    for row, x in enumerate(ids):
        assert lengths[row] == len(_tokens(x)["tokens"])
        assert (tokens[row, : lengths[row]] == x + 1).all()
        assert not tokens[row, lengths[row] :].any()
    assert not lengths[~rows].any()
    return ids


def _run(ds, count, budget, states=None, steps=None, workers=0):
    """Shards restored from `states` (None: fresh) run `steps` steps (None: to the end)."""
    iterators = _shards(ds, count, budget, workers)
    streams = collections.defaultdict(list)
    try:
        for it in iterators:
            if states is not None:
                it.set_state(states)
        alive, step = set(range(count)), 0
        while alive and (steps is None or step < steps):
            for index in sorted(alive):
                try:
                    batch = next(iterators[index])
                except StopIteration:
                    alive.discard(index)
                    continue
                streams[index].append(_ids(batch, budget))
            step += 1
        return dict(streams), [it.get_state() for it in iterators]
    finally:
        for it in iterators:
            it.close()


def _flat(streams):
    return [x for batches in streams.values() for batch in batches for x in batch]


def _epoch(ds):
    return collections.Counter(int(element["id"]) for element in ds)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True
)
@given(
    seed=st.integers(0, 1000),
    kind=st.sampled_from(["plain", "filter", "mix"]),
    generations=st.lists(
        st.tuples(st.integers(1, 4), st.sampled_from([32, 48, 64, 128]), st.integers(0, 6)),
        min_size=1,
        max_size=4,
    ),
    last=st.tuples(st.integers(1, 4), st.sampled_from([32, 64])),
)
def test_every_element_exactly_once_across_resizes(seed, kind, generations, last):
    ds = _pipeline(seed, kind)
    delivered, states = [], None
    for count, budget, steps in generations:
        streams, states = _run(ds, count, budget, states, steps)
        delivered += _flat(streams)
    streams, _ = _run(ds, *last, states)
    delivered += _flat(streams)
    assert collections.Counter(delivered) == _epoch(ds)


def test_a_step_delivers_a_prefix_of_the_shard_in_stream_order():
    # One shard, no resize: the batches are the plain stage's over the same elements.
    ds = _pipeline(3, "filter")
    streams, _ = _run(ds, 1, 64)
    plain = _BATCHING(ds.to_iter_dataset(), token_budget=64)
    assert streams[0] == [batch["id"][batch["row_mask"]].tolist() for batch in plain]


def test_the_same_shard_count_resumes_as_if_uninterrupted():
    ds = _pipeline(5, "mix")
    whole, _ = _run(ds, 3, 48)
    for steps in (0, 1, 4, 9):
        head, states = _run(ds, 3, 48, steps=steps)
        for index, it in enumerate(_shards(ds, 3, 48)):
            it.set_state(states[index])  # each shard from its own state alone
            tail = [_ids(batch, 48) for batch in it]
            assert head.get(index, []) + tail == whole[index]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("workers", [0, 2])
def test_two_shards_then_three_then_one_with_workers(workers):
    ds = _pipeline(7, "filter", n=240)
    delivered = []
    first, states = _run(ds, 2, 64, steps=3, workers=workers)
    delivered += _flat(first)
    second, states = _run(ds, 3, 32, states, steps=5, workers=workers)
    delivered += _flat(second)
    third, _ = _run(ds, 1, 128, states, workers=workers)
    delivered += _flat(third)
    assert collections.Counter(delivered) == _epoch(ds)
    if workers:
        # The worker count changes nothing: the same streams as in this process.
        reference = [
            _run(ds, 2, 64, steps=3)[0],
            _run(ds, 3, 32, _run(ds, 2, 64, steps=3)[1], steps=5)[0],
        ]
        assert [first, second] == reference


@pytest.mark.timeout(300)
def test_a_checkpoint_with_two_workers_restores_with_none_on_another_shard_count():
    ds = _pipeline(9, "mix")
    head, states = _run(ds, 2, 64, steps=4, workers=2)
    tail, _ = _run(ds, 3, 48, states)
    assert collections.Counter(_flat(head) + _flat(tail)) == _epoch(ds)


def test_one_shard_state_is_not_enough_on_another_shard_count():
    ds = _pipeline(1, "plain")
    _, states = _run(ds, 2, 64, steps=2)
    assert states[0]["one_to_one"] is False  # steps take different numbers of elements
    it = _shards(ds, 3, 64)[0]
    with pytest.raises(ValueError, match="needs the states of all 2 old shards"):
        it.set_state(states[0])


def test_bad_combinations_say_what_is_wrong():
    ds = _pipeline(0, "plain")

    def shard(**kwargs):
        return ElasticIterator(ds, 128, ShardOptions(0, 2), **kwargs)

    with pytest.raises(ValueError, match="needs stream order, got bucket_window=16"):
        shard(batching=functools.partial(_BATCHING, bucket_window=16))
    with pytest.raises(ValueError, match="`packing` or `batching`, not both"):
        shard(
            batching=_BATCHING,
            packing=functools.partial(FirstFitPackIterDataset, length_struct={"tokens": 32}),
        )
    with pytest.raises(ValueError, match="leave token_budget out"):
        shard(batching=functools.partial(_BATCHING, token_budget=64))
    with pytest.raises(ValueError, match=r"128 // 2 = 64: .*exceed `token_budget`"):
        shard(batching=functools.partial(_BATCHING, padded_lengths=[32, 128]))
    with pytest.raises(TypeError, match="no stage after it"):
        shard(
            batching=lambda elements, token_budget: _BATCHING(
                elements, token_budget=token_budget
            ).batch(2)
        )
    with pytest.raises(ValueError, match="pass on the token_budget it is given"):
        shard(batching=lambda elements, token_budget: _BATCHING(elements, token_budget=32))
    with pytest.raises(TypeError, match="`batching` must be callable"):
        shard(batching=64)
