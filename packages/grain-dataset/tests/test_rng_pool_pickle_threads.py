"""`RngPool` pickles, and generators taken from many threads at once stay independent.

Grain 0.2.18 (run as a black box) pickles a pool as its seed (the unpickled
pool has an empty cache and a new lock) and its draws depend only on (seed,
op_seed, index). So: an unpickled pool draws what the original draws; threads
sharing one pool each get a generator nobody else holds, and the numbers for a
key are the same whatever the interleaving.
"""

import pickle
import threading

import numpy as np
import pytest

from grain_dataset import RngPool

KEYS = [(index, op_seed) for index in range(40) for op_seed in (0, 1, 7)]


def draws(pool, index, op_seed):
    rng = pool.acquire_rng(index, op_seed=op_seed)
    try:
        return rng.integers(0, 2**63, size=8).tolist()
    finally:
        pool.release_rng(rng)


def test_a_pool_pickles_and_the_copy_draws_the_same():
    pool = RngPool(seed=11)
    before = {key: draws(pool, *key) for key in KEYS[:10]}  # the cache now holds a generator
    copy = pickle.loads(pickle.dumps(pool))
    assert type(copy) is RngPool
    assert repr(copy) == repr(pool)
    assert {key: draws(copy, *key) for key in KEYS[:10]} == before
    # Both stay usable, independently.
    assert draws(pool, 3, 1) == draws(copy, 3, 1)
    assert draws(RngPool(seed=12), 3, 1) != draws(copy, 3, 1)


@pytest.mark.timeout(60)
def test_threads_sharing_a_pool_draw_reproducibly_whatever_the_interleaving():
    expected = {key: draws(RngPool(seed=5), *key) for key in KEYS}
    pool = RngPool(seed=5)
    results: dict[tuple[int, int], list[list[int]]] = {}
    held: list[int] = []
    errors: list[BaseException] = []
    start, all_holding = threading.Barrier(8), threading.Barrier(8)
    lock = threading.Lock()

    def work(worker):
        try:
            start.wait(timeout=30)
            # Each thread takes its own keys in its own order and holds all its
            # generators until every thread holds its own: none may be handed out twice.
            order = KEYS[worker::8][:: 1 if worker % 2 else -1]
            rngs = [(key, pool.acquire_rng(key[0], op_seed=key[1])) for key in order]
            all_holding.wait(timeout=30)
            with lock:
                held.extend(id(rng) for _, rng in rngs)
            for key, rng in reversed(rngs):
                value = rng.integers(0, 2**63, size=8).tolist()
                with lock:
                    results.setdefault(key, []).append(value)
            for _, rng in rngs:
                pool.release_rng(rng)
        except BaseException as error:  # reported by the main thread
            errors.append(error)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
        assert not thread.is_alive()
    assert errors == []
    assert results == {key: [value] for key, value in expected.items()}
    assert len(held) == len(KEYS) == len(set(held))


def test_generators_of_different_keys_are_independent_streams():
    pool = RngPool(seed=3)
    streams = np.array([draws(pool, *key) for key in KEYS])
    assert len({tuple(row) for row in streams.tolist()}) == len(KEYS)
