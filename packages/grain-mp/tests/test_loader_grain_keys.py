"""The DataLoader's state in Grain's keys, its worker-count-free output, and Grain's sampler rule.

* `last_seen_indices`, `last_worker_index`, `worker_count` mean what they mean in
  Grain: checked against an oracle built from the outputs themselves (records are
  their own sampler indices), for 0 to 3 workers, with and without batches.
* Clients edit them (AirIO sets ``last_seen_indices["0"]``): the loader goes there.
* The batches do not depend on worker_count (a difference from Grain, kept): 0, 1
  and 2 workers give the same batches, and their states restore into each other.
* A sampler over more records than the source reads ``key % len(source)``, as
  Grain's DataLoader does.
"""

import collections
import json

import numpy as np
import pytest

from grain_dataset import Batch, FilterTransform, MapTransform
from grain_index import IndexSampler, NoSharding, ShardOptions
from grain_mp import DataLoader, DataLoaderIterator

N = 23


class NotMultipleOf3(FilterTransform):
    def filter(self, element):
        return element % 3 != 0


class Double(MapTransform):
    def map(self, element):
        return element * 2


def _loader(operations=(), workers=0, *, shuffle=False, source=None, sampler=None, **kwargs):
    if sampler is None:
        sampler = IndexSampler(N, NoSharding(), shuffle=shuffle, num_epochs=2, seed=4)
    return DataLoader(
        data_source=list(range(N)) if source is None else source,
        sampler=sampler,
        operations=operations,
        worker_count=workers,
        **kwargs,
    )


def _plain(element):
    return np.asarray(element).tolist()


def _oracle(outputs, workers, batch):
    """Grain's keys after `outputs`: output j (a unit) came from worker j % n."""
    n = max(workers, 1)
    seen = {str(w): w - n for w in range(n)}
    step = 0
    for j, output in enumerate(outputs):
        step += np.size(output) if batch else 1
        seen[str(j % n)] = step - 1
    return seen, len(outputs) % n - 1


@pytest.mark.timeout(120)
@pytest.mark.parametrize("workers", [0, 1, 2, 3])
@pytest.mark.parametrize("batch", [None, 4])
def test_grain_keys_name_the_last_index_each_worker_read(workers, batch):
    operations = [] if batch is None else [Batch(batch)]
    it = iter(_loader(operations, workers))
    outputs = []
    for k in range(2 * N // (batch or 1) + 1):
        state = json.loads(it.get_state())
        assert state["version"] == 2
        assert state["worker_count"] == workers
        seen, last = _oracle(outputs, workers, batch)
        assert (state["last_seen_indices"], state["last_worker_index"]) == (seen, last), k
        try:
            outputs.append(next(it))
        except StopIteration:
            break
    it.close()
    # Unshuffled over range(N): the outputs are the indices themselves, modulo N.
    flat = [x for output in outputs for x in np.ravel(_plain(output))]
    assert flat == [k % N for k in range(2 * N)]


def test_a_fresh_state_is_graines_fresh_state():
    for workers, seen in [(0, {"0": -1}), (1, {"0": -1}), (3, {"0": -3, "1": -2, "2": -1})]:
        state = json.loads(iter(_loader([Batch(5)], workers)).get_state())
        assert (state["last_seen_indices"], state["last_worker_index"]) == (seen, -1)


def test_sharded_indices_count_in_the_sampler_index_space():
    # Grain's loader reads sampler indices shard_index, shard_index + shard_count, ...
    sampler = IndexSampler(N, ShardOptions(1, 3), shuffle=False, num_epochs=1, seed=0)
    it = iter(_loader([], sampler=sampler))
    assert json.loads(it.get_state())["last_seen_indices"] == {"0": 1 - 3}
    next(it)
    next(it)
    assert json.loads(it.get_state())["last_seen_indices"] == {"0": 1 + 3}
    rest = [_plain(x) for x in it]
    resumed = iter(_loader([], sampler=sampler))
    state = json.loads(iter(_loader([], sampler=sampler)).get_state())
    state["last_seen_indices"] = {"0": 4}
    resumed.set_state(state)
    assert [_plain(x) for x in resumed] == rest


def test_an_edit_of_last_seen_indices_moves_the_loader_as_airio_does():
    loader = _loader()
    everything = [_plain(x) for x in loader]
    state = json.loads(iter(loader).get_state())
    state["last_seen_indices"]["0"] = 1  # "the first two elements have been read"
    it = DataLoaderIterator(loader, state)
    assert next(it) == everything[2]
    assert json.loads(it.get_state())["last_seen_indices"] == {"0": 2}
    # With batches of 3: the end of the second batch (index 5) moves to the third.
    batched = _loader([Batch(3)])
    batches = [_plain(x) for x in batched]
    state = json.loads(iter(batched).get_state())
    state["last_seen_indices"]["0"] = 5
    it = iter(batched)
    it.set_state(json.dumps(state).encode())
    assert [_plain(x) for x in it] == batches[2:]
    state["last_seen_indices"]["0"] = 4  # inside a batch: no position of this loader
    with pytest.raises(ValueError, match="no position of this DataLoader"):
        iter(batched).set_state(state)


def test_an_edit_is_refused_where_the_pipeline_state_says_more():
    loader = _loader([NotMultipleOf3(), Batch(2)])
    it = iter(loader)
    next(it)
    state = json.loads(it.get_state())
    state["last_seen_indices"]["0"] += 2
    with pytest.raises(ValueError, match="cannot be moved by editing"):
        iter(loader).set_state(state)


def test_a_state_of_other_operations_is_refused_by_its_fingerprint():
    it = iter(_loader([Batch(4)]))
    next(it)
    state = json.loads(it.get_state())
    assert state["fingerprint"] == "SamplerSourceMapDataset(len=46) > batch(4,False) > to_iter"
    with pytest.raises(ValueError, match="other operations or data"):
        iter(_loader([Double(), Batch(2), Batch(2)])).set_state(state)


@pytest.mark.timeout(240)
def test_batches_do_not_depend_on_the_worker_count_and_states_cross_restore():
    """A stated difference from Grain, whose batches depend on its worker count."""
    operations = [NotMultipleOf3(), Double(), Batch(3)]
    outputs = {}
    for workers in (0, 1, 2):
        outputs[workers] = [_plain(x) for x in _loader(operations, workers, shuffle=True)]
    assert outputs[0] == outputs[1] == outputs[2]
    # Not one fixed order: a shuffled epoch, every kept record twice over the two epochs.
    counts = collections.Counter(x for batch in outputs[0] for x in batch)
    assert counts == {2 * x: 2 for x in range(N) if x % 3}
    everything = outputs[0]
    for saved in (0, 1, 2):
        it = iter(_loader(operations, saved, shuffle=True))
        for _ in range(5):
            next(it)
        state = it.get_state()
        it.close()
        for restored in (0, 1, 2):
            resumed = iter(_loader(operations, restored, shuffle=True))
            resumed.set_state(state)
            assert [_plain(x) for x in resumed] == everything[5:], (saved, restored)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("workers", [0, 2])
def test_a_sampler_over_more_records_than_the_source_reads_it_again(workers):
    sampler = IndexSampler(13, NoSharding(), shuffle=False, num_epochs=1, seed=0)
    loader = _loader([], workers, source=list(range(10)), sampler=sampler)
    assert [_plain(x) for x in loader] == [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 1, 2]
    shuffled = IndexSampler(13, NoSharding(), shuffle=True, num_epochs=2, seed=3)
    loader = _loader([Batch(4)], workers, source=list(range(100, 110)), sampler=shuffled)
    keys = [shuffled[k].record_key for k in range(26)]
    got = [x for batch in loader for x in _plain(batch)]
    assert got == [100 + key % 10 for key in keys]
    assert max(keys) >= 10  # the sampler did name records the source does not hold


def test_an_empty_source_with_records_to_read_is_refused():
    with pytest.raises(ValueError, match="`data_source` is empty"):
        _loader([], source=[])
