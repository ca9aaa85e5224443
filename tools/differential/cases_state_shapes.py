"""Iterator states, exactly: `get_state()` of every stage fresh, mid-way and exhausted.

Clients read and compare dataset-iterator states as Grain gives them (AirIO
compares with ``{"next_index": 0}``), so for each stage the whole dict is
compared, not only its shape, at three points; and Grain-shaped dicts written
by hand are restored (``set_state`` of a literal) and the continuation
compared. Stages whose state is still our own format are listed in
bydesign.py with the reason.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np

import grain
from _registry import case, take


def gx() -> Any:
    return grain.experimental


def _it(n: int = 10) -> Any:
    return grain.MapDataset.range(n).to_iter_dataset()


def states(ds: Any, steps: tuple[int, ...] = (3,), limit: int = 200) -> dict[str, Any]:
    """get_state() fresh, after each count in `steps`, and after the end."""
    it = iter(ds)
    out: dict[str, Any] = {"fresh": it.get_state()}
    done = 0
    for step in steps:
        take(it, step - done)
        done = step
        out[f"after_{step}"] = it.get_state()
    rest = list(itertools.islice(it, limit))
    out["n"] = done + len(rest)
    out["exhausted"] = it.get_state()
    try:
        next(it)
    except StopIteration:
        out["after_stop_again"] = it.get_state()
    return out


def restored(ds: Any, state: Any, limit: int = 50) -> Any:
    """The elements after `state` (a dict written by hand) is set on a fresh iterator."""
    it = iter(ds)
    it.set_state(state)
    return [np.asarray(x).tolist() for x in itertools.islice(it, limit)]


def _state_case(name: str, make: Any, steps: tuple[int, ...] = (3,), timeout: float = 10.0):
    case(f"stateshape.{name}", timeout=timeout)(lambda: states(make(), steps))


class _Twice(grain.experimental.FlatMapTransform):
    max_fan_out = 3

    def flat_map(self, element: int) -> list[int]:
        return [element] * (element % 3)


def _seqs(lengths: list[int]) -> Any:
    return grain.MapDataset.source(
        [{"tokens": np.arange(n, dtype=np.int32) + 10 * i + 1} for i, n in enumerate(lengths)]
    ).to_iter_dataset()


# ------------------------------------------------------------------ MapDataset side
_state_case("map_iterator", lambda: grain.MapDataset.range(8))
_state_case("to_iter", lambda: _it(10), (0, 3, 9))
_state_case(
    "to_iter_shuffled", lambda: grain.MapDataset.range(10).shuffle(seed=3).to_iter_dataset()
)
_state_case(
    "to_iter_filtered",
    lambda: grain.MapDataset.range(12).filter(lambda x: x % 3 == 0).to_iter_dataset(),
    (1, 2),
)
_state_case(
    "to_iter_read_options",
    lambda: grain.MapDataset.range(10).to_iter_dataset(
        grain.ReadOptions(num_threads=2, prefetch_buffer_size=4)
    ),
)
_state_case(
    "to_iter_no_threads",
    lambda: grain.MapDataset.range(10).to_iter_dataset(grain.ReadOptions(num_threads=0)),
)
_state_case(
    "map_batch_to_iter", lambda: grain.MapDataset.range(11).batch(3).to_iter_dataset(), (2,)
)
_state_case(
    "map_repeat_to_iter", lambda: grain.MapDataset.range(4).repeat(2).to_iter_dataset(), (5,)
)

# ------------------------------------------------------------------ IterDataset stages
_state_case("iter_map", lambda: _it().map(lambda x: x + 1))
_state_case("iter_filter", lambda: _it().filter(lambda x: x % 2 == 0), (2,))
_state_case("iter_random_map", lambda: _it().seed(3).random_map(lambda x, rng: x))
_state_case("iter_map_with_index", lambda: _it().map_with_index(lambda i, x: (i, x)))
_state_case("iter_batch", lambda: _it(10).batch(3), (1, 3))
_state_case("iter_batch_drop", lambda: _it(10).batch(3, drop_remainder=True), (1, 3))
_state_case(
    "iter_map_filter_batch",
    lambda: _it(20).map(lambda x: x * 2).filter(lambda x: x % 3).batch(4),
    (2,),
)
_state_case(
    "iter_mix_shape_equal_weights",
    lambda: grain.IterDataset.mix([_it(4), _it(4)], [0.5, 0.5]),
    (0, 4),
)
_state_case(
    "thread_prefetch", lambda: gx().ThreadPrefetchIterDataset(_it(), prefetch_buffer_size=2)
)
_state_case("zip", lambda: gx().ZipIterDataset([_it(5), _it(5)]))
_state_case("flat_map", lambda: gx().FlatMapIterDataset(_it(6), _Twice()), (1, 2, 3))
_state_case("limit", lambda: gx().LimitIterDataset(_it(), count=5))
_state_case("limit_over", lambda: gx().LimitIterDataset(_it(3), count=5), (1,))
_state_case("repeat", lambda: gx().RepeatIterDataset(_it(3), num_epochs=2), (2, 4))
_state_case("rebatch", lambda: gx().RebatchIterDataset(_it(7).batch(3), batch_size=2), (1, 2, 3))
_state_case(
    "rebatch_drop",
    lambda: gx().RebatchIterDataset(_it(10).batch(4), batch_size=3, drop_remainder=True),
    (1, 2),
)
_state_case(
    "window_shuffle",
    lambda: gx().WindowShuffleIterDataset(_it(10), window_size=4, seed=1),
    (3, 4, 5),
)
_state_case(
    "window_shuffle_full_last",
    lambda: gx().WindowShuffleIterDataset(_it(6), window_size=3, seed=1),
    (3,),
)


@case("stateshape.window_shuffle_sorted_windows")
def _():
    """The order within windows differs (seeded); each window's set does not."""
    it = iter(gx().WindowShuffleIterDataset(_it(10), window_size=4, seed=1))
    out = list(it)
    return [sorted(out[0:4]), sorted(out[4:8]), sorted(out[8:])]


@case("stateshape.mp_prefetch_one_worker", timeout=60)
def _():
    ds = _it(8).map(lambda x: x * 2).mp_prefetch(grain.MultiprocessingOptions(num_workers=1))
    return states(ds)


@case("stateshape.mp_prefetch_two_workers", timeout=60)
def _():
    ds = _it(8).map(lambda x: x * 2).mp_prefetch(grain.MultiprocessingOptions(num_workers=2))
    return states(ds)


@case("stateshape.interleave")
def _():
    return states(gx().InterleaveIterDataset([_it(3), _it(2), _it(3)], cycle_length=2), (2,))


@case("stateshape.pack_first_fit")
def _():
    ds = gx().FirstFitPackIterDataset(
        _seqs([3, 2, 4, 1, 2]), length_struct={"tokens": 5}, num_packing_bins=2
    )
    return states(ds, (1,))


@case("stateshape.pack_concat_then_split")
def _():
    return states(
        gx().ConcatThenSplitIterDataset(_seqs([3, 4, 2]), length_struct={"tokens": 4}), (1,)
    )


# ------------------------------------------------------------------ Grain-shaped dicts by hand
@case("stateshape.restore.to_iter")
def _():
    return restored(_it(10).map(lambda x: x * 3), {"next_index": 4})


@case("stateshape.restore.batch")
def _():
    return restored(_it(10).batch(3), {"next_index": 6})


@case("stateshape.restore.random_map_counter")
def _():
    return restored(
        _it(10).map_with_index(lambda i, x: i * 100 + x),
        {"parent": {"next_index": 4}, "counter": 2},
    )


@case("stateshape.restore.limit")
def _():
    return restored(
        gx().LimitIterDataset(_it(10), count=6),
        {"parent": {"next_index": 3}, "count_elements_read": 3},
    )


@case("stateshape.restore.repeat")
def _():
    return restored(
        gx().RepeatIterDataset(_it(3), num_epochs=3), {"parent": {"next_index": 1}, "epoch": 1}
    )


@case("stateshape.restore.flat_map_mid_element")
def _():
    return restored(
        gx().FlatMapIterDataset(_it(6), _Twice()),
        {"parent": {"next_index": 2}, "next_index_in_buffer": 1},
    )


@case("stateshape.restore.flat_map_used_up")
def _():
    return restored(
        gx().FlatMapIterDataset(_it(6), _Twice()),
        {"parent": {"next_index": 2}, "next_index_in_buffer": 2},
    )


@case("stateshape.restore.rebatch")
def _():
    return restored(
        gx().RebatchIterDataset(_it(7).batch(3), batch_size=2),
        {"parent": {"next_index": 3}, "batch_idx": 1},
    )


@case("stateshape.restore.zip")
def _():
    return restored(
        gx().ZipIterDataset([_it(5), _it(5)]), {"parents": [{"next_index": 2}, {"next_index": 2}]}
    )


@case("stateshape.restore.mix_stopped")
def _():
    ds = grain.IterDataset.mix([_it(4), _it(4)], [0.5, 0.5])
    return restored(
        ds, {"parents": [{"next_index": 2}, {"next_index": 2}], "index": 5, "stop": True}
    )


@case("stateshape.restore.window_shuffle_used_up_window")
def _():
    ds = gx().WindowShuffleIterDataset(_it(6), window_size=3, seed=1)
    state = {"parent_window_start_state": {"next_index": 0}, "window_index": 1, "pos_in_window": 3}
    return sorted(restored(ds, state))
