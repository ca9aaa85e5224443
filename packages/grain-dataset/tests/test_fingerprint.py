"""Checkpoints carry their pipeline's fingerprint: a state of another pipeline is refused.

`get_state()` has Grain's shapes (no fingerprint); the checkpoint file holds
the fingerprint beside the state and hands both to `set_state`
(`checkpoint_state` below does what reading the file does). The deliberate
changes (map functions, IterDataset.batch sizes, IterDataset.mix weights and
components, a MapDataset.batch size that divides the position) restore at the
same element; `force_restore` overrides the check; a checkpoint file without a
fingerprint (an older checkpoint) restores with a warning.
"""

import asyncio
import json
import logging

import numpy as np
import pytest

from grain_dataset import (
    IterDataset,
    MapDataset,
    ReadOptions,
    UnverifiedStateWarning,
    force_restore,
    without_fingerprint,
)
from grain_dataset.extension import state_to_text

KEY = "grain_fingerprint"


def shuffled(seed, n=100, batch=None):
    ds = MapDataset.range(n).shuffle(seed=seed).map(lambda x: x)
    if batch:
        ds = ds.batch(batch)
    return ds.to_iter_dataset(ReadOptions(num_threads=0))


def checkpoint_state(it):
    """The state as reading `it`'s checkpoint file hands it to set_state: fingerprint added."""
    saved = json.loads(state_to_text(it.get_state(), it))
    return {**saved["state"], KEY: saved[KEY]}


def state_after(ds, steps):
    it = iter(ds)
    head = [next(it) for _ in range(steps)]
    return checkpoint_state(it), head, it


# -- refusals ------------------------------------------------------------------------------


def test_a_state_of_another_shuffle_seed_is_refused_naming_the_shuffle():
    state, _, it = state_after(shuffled(1), 10)
    assert it.get_state() == {"next_index": 10}  # Grain's shape, as clients compare it
    assert without_fingerprint(state) == {"next_index": 10}
    with pytest.raises(ValueError, match=r"different pipeline: stage 2 .*'shuffle\(#") as info:
        iter(shuffled(2)).set_state(state)
    assert "force_restore" in str(info.value)


def test_a_state_of_the_shuffled_pipeline_is_refused_without_the_shuffle():
    state, _, _ = state_after(shuffled(1), 10)
    plain = MapDataset.range(100).map(lambda x: x).to_iter_dataset(ReadOptions(num_threads=0))
    with pytest.raises(ValueError, match=r"stage 2 counting from the source is 'to_iter' here"):
        iter(plain).set_state(state)


@pytest.mark.parametrize(
    ("name", "other"),
    [
        ("source length", lambda: MapDataset.range(101).shuffle(seed=1)),
        ("source kind", lambda: MapDataset.source(list(range(100))).shuffle(seed=1)),
        ("slice", lambda: MapDataset.range(100).shuffle(seed=1)[::2]),
        ("repeat", lambda: MapDataset.range(100).shuffle(seed=1).repeat(2)),
        (
            "batch with the position at no batch start",
            lambda: MapDataset.range(100).shuffle(seed=1).batch(7),
        ),
        (
            "mix weights",
            lambda: MapDataset.mix([MapDataset.range(50), MapDataset.range(50)], [0.3, 0.7]),
        ),
        (
            "concatenate",
            lambda: MapDataset.concatenate([MapDataset.range(50), MapDataset.range(50)]),
        ),
    ],
)
def test_states_of_pipelines_with_other_positions_are_refused(name, other):
    bases = {
        "mix weights": MapDataset.mix([MapDataset.range(50), MapDataset.range(50)], [0.5, 0.5]),
        "concatenate": MapDataset.concatenate([MapDataset.range(60), MapDataset.range(40)]),
        "batch with the position at no batch start": MapDataset.range(100).shuffle(seed=1).batch(4),
    }
    base = bases.get(name, MapDataset.range(100).shuffle(seed=1))
    state, _, _ = state_after(base.to_iter_dataset(ReadOptions(num_threads=0)), 3)
    with pytest.raises(ValueError, match=r"different pipeline|does not start a batch"):
        iter(other().to_iter_dataset(ReadOptions(num_threads=0))).set_state(state)


def test_a_refused_state_leaves_the_iterator_where_it_was():
    it = iter(shuffled(2))
    head = [next(it) for _ in range(5)]
    reference = list(iter(shuffled(2)))
    state, _, _ = state_after(shuffled(1), 10)
    with pytest.raises(ValueError, match="different pipeline"):
        it.set_state(state)
    assert head + list(it) == reference


def test_a_corrupt_fingerprint_is_refused():
    state, _, _ = state_after(shuffled(1), 3)
    with pytest.raises(ValueError, match="must be the string get_state"):
        iter(shuffled(1)).set_state({**state, KEY: 7})
    with pytest.raises(ValueError, match="different pipeline"):
        iter(shuffled(1)).set_state({**state, KEY: state[KEY] + " > x"})


def test_a_long_pipeline_stores_one_hash_per_stage_and_still_names_the_stage():
    def pipeline(seed):
        ds = MapDataset.range(1000)
        for step in range(40):
            ds = ds.shuffle(seed=seed if step == 30 else step)
        return ds.to_iter_dataset(ReadOptions(num_threads=0))

    state, _, _ = state_after(pipeline(1), 3)
    assert all(part.startswith("#") for part in state[KEY].split(" > "))
    assert len(json.dumps(state)) < 40 + 12 * 43  # 8 hex digits and " > " per stage
    with pytest.raises(ValueError, match=r"stage 32 counting from the source is 'shuffle\("):
        iter(pipeline(2)).set_state(state)


def test_states_inside_mp_style_wrappers_keep_their_own_fingerprint_only_at_the_top():
    ds = MapDataset.mix(
        [MapDataset.range(30).shuffle(seed=1), MapDataset.range(40).shuffle(seed=2)]
    ).to_iter_dataset(ReadOptions(num_threads=0))
    state, _, _ = state_after(ds.batch(2).map(lambda x: x), 4)
    text = json.dumps(state)
    assert text.count(KEY) == 1
    assert state[KEY].count(" > ") == 5  # range, shuffle, range, shuffle, mix/2, to_iter


# -- deliberate changes --------------------------------------------------------------------


def test_a_changed_map_function_resumes_at_the_same_position():
    state, _, _ = state_after(shuffled(1), 10)
    changed = MapDataset.range(100).shuffle(seed=1).map(lambda x: -x)
    it = iter(changed.to_iter_dataset(ReadOptions(num_threads=0)))
    it.set_state(state)
    rest = list(it)
    assert rest == [-x for x in list(iter(shuffled(1)))[10:]]


@pytest.mark.parametrize(("old", "new"), [(4, 6), (6, 4), (5, 1)])
def test_a_changed_iter_batch_size_resumes_at_the_same_element(old, new):
    def pipeline(size):
        return shuffled(3, n=60).batch(size)

    state, head, _ = state_after(pipeline(old), 3)
    it = iter(pipeline(new))
    it.set_state(state)
    seen = [x for batch in head for x in batch.tolist()]
    rest = [x for batch in it for x in batch.tolist()]
    assert seen + rest == list(iter(shuffled(3, n=60)))
    assert all(len(batch) == new for batch in [np.asarray(b) for b in []])


@pytest.mark.parametrize(
    ("old", "new", "drop", "steps"),
    [(4, 2, False, 3), (4, 8, False, 2), (6, 4, False, 2), (4, 12, True, 3), (8, 4, False, 13)],
)
def test_a_changed_map_batch_size_resumes_at_the_same_element(old, new, drop, steps):
    def pipeline(size):
        ds = MapDataset.range(100).shuffle(seed=5).batch(size, drop_remainder=drop)
        return ds.to_iter_dataset(ReadOptions(num_threads=0))

    elements = list(iter(MapDataset.range(100).shuffle(seed=5).to_iter_dataset()))
    state, head, _ = state_after(pipeline(old), steps)
    it = iter(pipeline(new))
    it.set_state(state)
    rest = [batch.tolist() for batch in it]
    seen = [x for batch in head for x in batch.tolist()]
    flat = [x for batch in rest for x in batch]
    assert all(len(batch) == new for batch in rest[:-1])
    # Exactly the elements after the last one returned, in order (with drop_remainder the
    # new batching may leave out a shorter tail).
    assert seen + flat == elements[: len(seen) + len(flat)]
    if not drop:
        assert seen + flat == elements


def test_a_map_batch_size_that_does_not_divide_the_position_is_refused_with_the_fix():
    def pipeline(size):
        return MapDataset.range(100).batch(size).to_iter_dataset(ReadOptions(num_threads=0))

    state, _, _ = state_after(pipeline(4), 3)  # element 12 is next
    with pytest.raises(
        ValueError, match=r"element 12 of its epoch, which does not start a batch of 8"
    ):
        iter(pipeline(8)).set_state(state)


def _mix(components, weights):
    return IterDataset.mix(components, weights)


def _component(start, n=40):
    return MapDataset.range(start, start + n).to_iter_dataset(ReadOptions(num_threads=0))


@pytest.mark.parametrize(
    ("new_components", "new_weights"),
    [
        ([0, 1], [0.9, 0.1]),  # new weights
        ([1, 0], [0.5, 0.5]),  # reordered
        ([0, 1, 2], [0.4, 0.3, 0.3]),  # one added
        ([1], [1.0]),  # one removed
        ([2, 0], [0.5, 0.5]),  # one replaced
    ],
)
def test_a_changed_iter_mix_continues_every_component_where_it_stopped(
    new_components, new_weights, caplog
):
    starts = [0, 1000, 5000]
    state, head, _ = state_after(_mix([_component(0), _component(1000)], [0.5, 0.5]), 9)
    it = iter(_mix([_component(starts[c]) for c in new_components], new_weights))
    with caplog.at_level(logging.WARNING, logger="grain"):
        it.set_state(state)
    rest = list(it)
    changed = new_components != [0, 1]
    assert ("the mixture changed" in caplog.text) == changed
    for start in starts:
        delivered = [x for x in head + rest if start <= x < start + 40]
        # Each component: never an element twice, none skipped (a prefix of its order).
        assert delivered == list(range(start, start + len(delivered)))
    # The mix goes on from the same position, with the new weights (Grain's "index"
    # also counts the call that found the end).
    assert it.get_state()["index"] == 9 + len(rest) + 1
    assert it.get_state()["stop"] is True
    if 0 not in new_components:
        assert not [x for x in rest if x < 40]


def test_an_iter_mix_state_set_by_hand_restores_by_place():
    """A state without the checkpoint's fingerprint (Grain's way) takes components by place."""
    _, head, it = state_after(_mix([_component(0), _component(1000)], [0.5, 0.5]), 6)
    state = it.get_state()
    assert set(state) == {"parents", "index", "stop"}
    older = {"position": 6, "parents": state["parents"]}  # an earlier version's, no fingerprint
    reference = list(iter(_mix([_component(0), _component(1000)], [0.5, 0.5])))
    for saved in (state, older):
        again = iter(_mix([_component(0), _component(1000)], [0.5, 0.5]))
        again.set_state(saved)
        assert head + list(again) == reference
    swapped = iter(_mix([_component(1000), _component(0)], [0.5, 0.5]))
    # By place: the first component (now 1000..) takes the first saved state.
    swapped.set_state({**state, "parents": [{"next_index": 5}, {"next_index": 1}]})
    rest = list(swapped)
    assert [x for x in rest if x >= 1000][:2] == [1005, 1006]
    assert [x for x in rest if x < 1000][:2] == [1, 2]
    with pytest.raises(ValueError, match="must list 3 parent states"):
        iter(_mix([_component(0), _component(1), _component(2)], [0.3, 0.3, 0.4])).set_state(state)


def test_a_checkpoint_with_a_mix_state_lacking_its_components_is_refused():
    """Part of the checkpoint's fingerprint, the components' hashes may not go missing."""
    state, _, _ = state_after(_mix([_component(0), _component(1000)], [0.5, 0.5]), 6)
    older = {"position": 6, "parents": state["parents"], KEY: "mix"}  # fingerprint, no hashes
    with pytest.raises(ValueError, match="no 'components' entry"):
        iter(_mix([_component(0), _component(1000)], [0.5, 0.5])).set_state(older)
    hashless = {**state, KEY: "mix"}  # a new state under an earlier version's fingerprint
    with pytest.raises(ValueError, match="without its components' hashes"):
        iter(_mix([_component(0), _component(1000)], [0.5, 0.5])).set_state(hashless)


def test_an_iter_mix_state_with_corrupt_component_hashes_is_refused():
    state, _, _ = state_after(_mix([_component(0), _component(1000)], [0.5, 0.5]), 6)
    older = {"position": 6, "parents": state["parents"], KEY: "mix"}
    for components in (["a"], "ab", [1, 2]):
        with pytest.raises(ValueError, match="components"):
            iter(_mix([_component(0), _component(1000)], [0.5, 0.5])).set_state(
                {**older, "components": components}
            )
    with pytest.raises(ValueError, match="components' hashes"):
        iter(_mix([_component(0), _component(1000)], [0.5, 0.5])).set_state(
            {**state, KEY: "mix[ab]"}
        )


# -- older states and forcing --------------------------------------------------------------


def test_a_state_set_by_hand_is_checked_by_shape_only_and_without_a_warning(recwarn):
    state, _, it = state_after(shuffled(1), 10)
    plain = it.get_state()
    assert plain == without_fingerprint(state) == {"next_index": 10}
    again = iter(shuffled(1))
    again.set_state(plain)
    assert list(again) == list(iter(shuffled(1)))[10:]
    assert not [w for w in recwarn if issubclass(w.category, UnverifiedStateWarning)]


def test_a_checkpoint_file_without_a_fingerprint_restores_with_a_warning(tmp_path):
    it = iter(shuffled(1))
    for _ in range(10):
        next(it)
    asyncio.run(it.save(tmp_path))
    path = tmp_path / "process_0-of-1.json"
    saved = json.loads(path.read_text())
    assert saved[KEY] == "range(0:100:1) > shuffle(#88235af5) > to_iter"
    assert saved["state"] == {"next_index": 10}
    del saved[KEY]  # as a file of a version before fingerprints
    path.write_text(json.dumps(saved))
    restored = iter(shuffled(1))
    with pytest.warns(UnverifiedStateWarning, match="without a pipeline fingerprint"):
        asyncio.run(restored.load(tmp_path))
    assert list(restored) == list(iter(shuffled(1)))[10:]


def test_a_corrupt_state_without_a_fingerprint_raises_before_any_warning(recwarn):
    with pytest.raises(ValueError, match="next_index"):
        iter(shuffled(1)).set_state({"next_index": "x"})
    assert not [w for w in recwarn if issubclass(w.category, UnverifiedStateWarning)]


def test_force_restore_accepts_a_state_of_another_pipeline_once(caplog):
    state, _, _ = state_after(shuffled(1), 10)
    it = iter(shuffled(2))
    with caplog.at_level(logging.WARNING, logger="grain"):
        assert force_restore(it) is it
        it.set_state(state)
    assert "forced" in caplog.text
    assert list(it) == list(iter(shuffled(2)))[10:]
    with pytest.raises(ValueError, match="different pipeline"):
        it.set_state(state)
    with pytest.raises(TypeError, match="set_state"):
        force_restore(object())


def test_force_restore_still_needs_a_state_of_the_right_shape():
    state, _, _ = state_after(shuffled(1), 10)
    limited = shuffled(1).map(lambda x: x)
    from grain_dataset import LimitIterDataset

    it = force_restore(iter(LimitIterDataset(limited, 5)))
    with pytest.raises(ValueError, match="expected the keys"):
        it.set_state(state)


# -- size ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "make", "limit"),
    [
        ("shuffle, map, batch", lambda: shuffled(1, batch=32), 120),
        (
            "mix of two shuffled sources, batch",
            lambda: (
                MapDataset.mix(
                    [MapDataset.range(500).shuffle(seed=1), MapDataset.range(300).shuffle(seed=2)],
                    [0.7, 0.3],
                )
                .batch(32)
                .to_iter_dataset()
            ),
            200,
        ),
        (
            "IterDataset.mix of two",
            lambda: _mix([_component(0), _component(1000)], [0.5, 0.5]),
            160,
        ),
    ],
)
def test_states_stay_small(name, make, limit):
    state, _, it = state_after(make(), 2)
    it.close()
    size = len(json.dumps(state))
    print(f"{name}: {size} bytes, fingerprint {len(state[KEY])}: {json.dumps(state)}")
    assert size <= limit
