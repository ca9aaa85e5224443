"""ThreadPrefetchDatasetIterator over any iterator with get_state/set_state, as in Grain.

Grain 0.2.18 (run as a black box) takes as parent any object with ``__next__``,
``get_state`` and ``set_state`` (its "CheckpointableIterator"): it asks the
parent's state at the start and after each element, in the prefetch thread,
returns that state as its own (read-ahead never shows in it), passes a state
given to `set_state` to the parent unchanged, and does not close such a parent.
An object lacking one of the three methods is refused when the iterator is built.
"""

import threading

import pytest

from grain_dataset import ThreadPrefetchDatasetIterator


class Counter:
    """A plain Python iterator with a state, no grain base class."""

    def __init__(self, stop):
        self.position = 0
        self.stop = stop
        self.threads = set()
        self.closed = False

    def __next__(self):
        self.threads.add(threading.current_thread().name)
        if self.position >= self.stop:
            raise StopIteration
        self.position += 1
        return self.position * 10

    def get_state(self):
        return {"position": self.position}

    def set_state(self, state):
        self.position = state["position"]

    def close(self):  # not part of the contract: must not be called
        self.closed = True


@pytest.mark.timeout(60)
@pytest.mark.parametrize("buffer_size", [0, 1, 3, 16])
def test_reads_a_plain_iterator_and_restores_at_every_step(buffer_size):
    parent = Counter(6)
    it = ThreadPrefetchDatasetIterator(parent, buffer_size)
    states, values = [it.get_state()], []
    for value in it:
        values.append(value)
        states.append(it.get_state())
    assert values == [10, 20, 30, 40, 50, 60]
    # The state is the parent's own, as after the element last returned.
    assert states == [{"position": k} for k in range(7)]
    for k, state in enumerate(states):
        fresh = ThreadPrefetchDatasetIterator(Counter(6), buffer_size)
        fresh.set_state(state)
        assert list(fresh) == values[k:]
        fresh.close()
    it.close()
    assert not parent.closed  # its owner closes it
    if buffer_size:
        assert parent.threads != {threading.current_thread().name}  # read in the background


@pytest.mark.timeout(60)
def test_set_state_on_a_running_iterator_discards_what_was_read_ahead():
    parent = Counter(100)
    it = ThreadPrefetchDatasetIterator(parent, 8)
    assert [next(it) for _ in range(3)] == [10, 20, 30]
    saved = it.get_state()
    assert [next(it) for _ in range(5)] == [40, 50, 60, 70, 80]
    it.set_state(saved)
    assert next(it) == 40
    assert it.get_state() == {"position": 4}
    it.close()


@pytest.mark.timeout(60)
def test_errors_of_a_plain_parent_reach_the_consumer_in_order():
    class Failing(Counter):
        def __next__(self):
            value = super().__next__()
            if value == 30:
                raise KeyError("element 3 is bad")
            return value

    it = ThreadPrefetchDatasetIterator(Failing(5), 4)
    assert [next(it), next(it)] == [10, 20]
    with pytest.raises(KeyError, match="element 3 is bad"):
        next(it)
    assert next(it) == 40  # what the parent yields when asked again
    it.close()


class NoState:
    def __next__(self):
        return 1


class NoNext:
    def get_state(self):
        return {}

    def set_state(self, state):
        pass


@pytest.mark.parametrize(
    ("parent", "missing"),
    [
        (NoState(), "get_state, set_state"),
        (iter([1, 2]), "get_state, set_state"),
        (NoNext(), "__next__"),
        ([1, 2], "__next__, get_state, set_state"),
    ],
)
def test_a_parent_without_the_three_methods_is_refused_at_once(parent, missing):
    with pytest.raises(TypeError, match=f"lacks {missing}"):
        ThreadPrefetchDatasetIterator(parent, 2)
