"""First-fit, best-fit and concat-then-split packing.

Outputs are checked by properties on random data: every input token comes out
exactly once, segment ids and positions describe where each token came from,
no example is longer than its packed length. Token j of a feature of element i
is ``i * 1000 + j + 1`` (lengths stay below 1000), so every output token names
its element and position. The few exact outputs checked are small cases whose
packing follows from the documented rule.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from grain_dataset import (
    IterDataset,
    MapDataset,
    ReadOptions,
    assert_equal_output_after_checkpoint,
    without_fingerprint,
)
from grain_dataset._sequences._concat_split import BOSHandling, ConcatThenSplitIterDataset
from grain_dataset._sequences._packing import BestFitPackIterDataset, FirstFitPackIterDataset

pytestmark = pytest.mark.timeout(60)

PACKERS = [FirstFitPackIterDataset, BestFitPackIterDataset]
STRIDE = 1000


def make_elements(
    n: int, lengths: dict[str, tuple[int, int]], seed: int = 0, dtype: type = np.int32
) -> list[dict[str, np.ndarray]]:
    """n dicts; feature k of element i has a length uniform in lengths[k] (inclusive)."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        element = {}
        for key, (low, high) in lengths.items():
            size = int(rng.integers(low, high + 1))
            element[key] = np.arange(i * STRIDE + 1, i * STRIDE + 1 + size, dtype=dtype)
        out.append(element)
    return out


def source(elements: list, num_threads: int = 0) -> IterDataset:
    return MapDataset.source(elements).to_iter_dataset(ReadOptions(num_threads=num_threads))


def check_output(
    outputs: list[dict], elements: list[dict], lengths: dict[str, int], *, split: bool
) -> float:
    """Asserts the packing properties; returns the padding fraction."""
    slots = used = 0
    for key, length in lengths.items():
        tokens = np.stack([o[key] for o in outputs]) if outputs else np.zeros((0, length))
        segments = np.stack([o[f"{key}_segment_ids"] for o in outputs]) if outputs else tokens
        positions = np.stack([o[f"{key}_positions"] for o in outputs]) if outputs else tokens
        assert tokens.shape[1:] == (length,), "an example is not exactly the packed length"
        assert segments.dtype == positions.dtype == np.int32
        real = segments > 0
        # Every input token exactly once.
        expected = np.sort(np.concatenate([e[key] for e in elements]))
        np.testing.assert_array_equal(np.sort(tokens[real]), expected)
        # Padding is 0 everywhere, and only after the tokens of an example.
        assert not tokens[~real].any()
        assert not positions[~real].any()
        assert not (np.diff(real.astype(int), axis=1) > 0).any(), "a token after padding"
        # A segment is one run of one element's tokens; ids increase along the example.
        element = np.where(real, (tokens - 1) // STRIDE, -1)
        new = np.ones_like(real)
        new[:, 1:] = element[:, 1:] != element[:, :-1]
        previous = np.zeros_like(segments)
        previous[:, 1:] = segments[:, :-1]
        starts = real & new
        np.testing.assert_array_equal(starts, real & (segments != previous))
        assert (segments[starts] > previous[starts]).all()
        # Positions count from 0 within each run, and consecutive tokens of the element.
        columns = np.arange(length)[None, :]
        run_start = np.maximum.accumulate(np.where(starts, columns, 0), axis=1)
        np.testing.assert_array_equal(positions[real], (columns - run_start)[real])
        in_element = (tokens - 1) % STRIDE
        if not split:
            np.testing.assert_array_equal(positions[real], in_element[real])
        slots += tokens.size
        used += int(real.sum())
    if outputs and len(lengths) == 1:
        (key,) = lengths
        # With one feature, segment ids are exactly 1, 2, ... in each example.
        for o in outputs:
            ids = o[f"{key}_segment_ids"]
            ids = ids[ids > 0]
            np.testing.assert_array_equal(np.unique(ids), np.arange(1, ids.max() + 1))
    return 1 - used / slots if slots else 0.0


def pack(cls, elements, lengths, **kwargs):
    kwargs.setdefault("num_packing_bins", 4)
    return list(cls(source(elements), length_struct=lengths, **kwargs))


# -- first fit and best fit -----------------------------------------------------------------


@pytest.mark.parametrize("cls", PACKERS)
@pytest.mark.parametrize("shuffle_bins", [False, True])
@pytest.mark.parametrize(
    ("spec", "lengths"),
    [
        ({"tokens": (1, 40)}, {"tokens": 64}),
        ({"inputs": (1, 40), "targets": (0, 20)}, {"inputs": 64, "targets": 24}),
    ],
)
def test_packing_keeps_every_token_once(cls, shuffle_bins, spec, lengths):
    elements = make_elements(300, spec, seed=1)
    outputs = pack(cls, elements, lengths, num_packing_bins=5, shuffle_bins=shuffle_bins)
    check_output(outputs, elements, lengths, split=False)
    assert set(outputs[0]) == {
        f"{key}{suffix}" for key in lengths for suffix in ("", "_segment_ids", "_positions")
    }


def test_first_fit_fills_the_first_bin_that_fits_and_flushes_all_bins():
    elements = [{"t": np.arange(n) + 1} for n in (3, 2, 4, 1, 5, 2)]
    outputs = pack(FirstFitPackIterDataset, elements, {"t": 5}, num_packing_bins=2,
                   shuffle_bins=False)  # fmt: skip
    # 3 -> bin 0; 2 -> bin 0 (full); 4 -> bin 1; 1 -> bin 1 (full); 5 fits nowhere:
    # both bins are emitted, in bin order, and 5 starts bin 0 of the next group.
    assert [o["t"].tolist() for o in outputs] == [
        [1, 2, 3, 1, 2],
        [1, 2, 3, 4, 1],
        [1, 2, 3, 4, 5],
        [1, 2, 0, 0, 0],
    ]
    assert outputs[0]["t_segment_ids"].tolist() == [1, 1, 1, 2, 2]
    assert outputs[3]["t_positions"].tolist() == [0, 1, 0, 0, 0]


def test_best_fit_chooses_the_tightest_bin():
    elements = [{"t": np.arange(n) + 1} for n in (3, 4, 1, 2)]
    first = pack(FirstFitPackIterDataset, elements, {"t": 5}, num_packing_bins=2,
                 shuffle_bins=False)  # fmt: skip
    best = pack(BestFitPackIterDataset, elements, {"t": 5}, num_packing_bins=2,
                shuffle_bins=False)  # fmt: skip
    # First fit puts the 1 beside the 3, leaving no bin for the 2; best fit puts it
    # beside the 4 (1 left rather than 2).
    assert [o["t_segment_ids"].tolist() for o in first] == [
        [1, 1, 1, 2, 0],
        [1, 1, 1, 1, 0],
        [1, 1, 0, 0, 0],
    ]
    assert [o["t_segment_ids"].tolist() for o in best] == [[1, 1, 1, 2, 2], [1, 1, 1, 1, 2]]


def test_best_fit_scores_bins_by_room_summed_over_features():
    sizes = [(7, 0), (4, 8), (1, 1)]
    elements = [{"a": np.arange(a) + 1, "b": np.arange(b) + 1} for a, b in sizes]
    outputs = pack(BestFitPackIterDataset, elements, {"a": 10, "b": 10}, num_packing_bins=2,
                   shuffle_bins=False)  # fmt: skip
    # Room left (a, b): bin 0 (3, 10), bin 1 (6, 2). The last element goes to bin 1,
    # which has fewer tokens of room in all (8 < 13) though more room in "a".
    assert [o["a_segment_ids"].tolist()[:6] for o in outputs] == [
        [1, 1, 1, 1, 1, 1],
        [1, 1, 1, 1, 2, 0],
    ]


def test_best_fit_pads_no_more_than_first_fit_on_random_data():
    lengths = {"t": 100}
    padding = dict.fromkeys(PACKERS, 0.0)
    for seed in range(4):
        elements = make_elements(400, {"t": (1, 100)}, seed=seed)
        for cls in PACKERS:
            outputs = pack(cls, elements, lengths, num_packing_bins=8)
            padding[cls] += check_output(outputs, elements, lengths, split=False)
    assert padding[BestFitPackIterDataset] < padding[FirstFitPackIterDataset]


@pytest.mark.parametrize("cls", PACKERS)
def test_shuffle_bins_permutes_each_group_by_seed(cls):
    elements = make_elements(200, {"t": (1, 30)}, seed=2)

    def run(**kwargs):
        return [o["t"].tolist() for o in pack(cls, elements, {"t": 40}, **kwargs)]

    plain = run(shuffle_bins=False)
    seeded = run(shuffle_bins=True, seed=3)
    assert run(shuffle_bins=True, seed=3) == seeded
    assert seeded != plain
    assert run(shuffle_bins=True, seed=4) != seeded
    # The same bins, only reordered within each group of num_packing_bins (a group is
    # full except the last: a flush happens when no bin has room), each group by its
    # own permutation.
    permutations = set()
    for start in range(0, len(plain) - len(plain) % 4, 4):
        group = plain[start : start + 4]
        assert sorted(seeded[start : start + 4]) == sorted(group)
        permutations.add(tuple(group.index(bin_) for bin_ in seeded[start : start + 4]))
    assert sorted(seeded) == sorted(plain)
    assert len(permutations) > 3


def test_shuffle_seed_from_ds_seed():
    elements = make_elements(100, {"t": (1, 30)})
    ds = source(elements)
    with pytest.raises(ValueError, match=r"needs a seed: call ds\.seed"):
        FirstFitPackIterDataset(ds, length_struct={"t": 40}, num_packing_bins=4, seed=None)

    def run(seed):
        seeded = source(elements).seed(seed)
        packed = FirstFitPackIterDataset(
            seeded, length_struct={"t": 40}, num_packing_bins=4, seed=None
        )
        return [o["t"].tolist() for o in packed]

    assert run(1) == run(1)
    assert run(1) != run(2)


@pytest.mark.parametrize("cls", PACKERS)
def test_max_sequences_per_bin(cls):
    elements = make_elements(200, {"t": (1, 5)}, seed=3)
    outputs = pack(cls, elements, {"t": 64}, max_sequences_per_bin=3)
    check_output(outputs, elements, {"t": 64}, split=False)
    assert max(o["t_segment_ids"].max() for o in outputs) == 3


def test_meta_features_and_padding_struct():
    elements = [{"t": np.arange(n) + 1, "w": np.ones(n, np.float32)} for n in (3, 2, 4)]
    outputs = pack(
        FirstFitPackIterDataset,
        elements,
        {"t": 6, "w": 6},
        num_packing_bins=2,
        shuffle_bins=False,
        meta_features=["w"],
        padding_struct={"t": -1, "w": 0.5},
    )
    assert set(outputs[0]) == {"t", "t_segment_ids", "t_positions", "w"}
    assert outputs[0]["t"].tolist() == [1, 2, 3, 1, 2, -1]
    assert outputs[0]["w"].tolist() == [1, 1, 1, 1, 1, 0.5]
    assert outputs[0]["t_segment_ids"].tolist() == [1, 1, 1, 2, 2, 0]


def test_tuple_and_nested_elements():
    tuples = [(np.arange(n) + 1, np.arange(n, dtype=np.int16)) for n in (2, 3)]
    (values, segments, positions), *_ = pack(
        FirstFitPackIterDataset, tuples, (5, 6), num_packing_bins=1, shuffle_bins=False
    )
    assert values[0].tolist() == [1, 2, 1, 2, 3]
    assert values[1].dtype == np.int16
    assert segments[1].tolist() == [1, 1, 2, 2, 2, 0]
    assert positions[0].tolist() == [0, 1, 0, 1, 2]

    nested = [{"a": {"x": np.arange(n) + 1}} for n in (2, 3)]
    (out,) = pack(FirstFitPackIterDataset, nested, {"a": {"x": 6}}, num_packing_bins=1)
    assert set(out["a"]) == {"x", "x_segment_ids", "x_positions"}
    assert out["a"]["x_segment_ids"].tolist() == [1, 1, 2, 2, 2, 0]


@pytest.mark.parametrize("packer", [FirstFitPackIterDataset, BestFitPackIterDataset])
def test_an_element_longer_than_the_packed_length_raises_as_in_grain(packer):
    elements = [{"t": np.arange(n) + 1} for n in (3, 9, 2)]
    packed = packer(source(elements), length_struct={"t": 5}, num_packing_bins=2)
    with pytest.raises(ValueError, match=r"has 9 tokens, more than its packed length 5.*Truncate"):
        list(packed)


@pytest.mark.parametrize("cls", PACKERS)
def test_empty_elements_are_skipped_and_empty_parents_give_nothing(cls):
    elements = [{"t": np.arange(n, dtype=np.int32) + 1} for n in (2, 0, 3)]
    outputs = pack(cls, elements, {"t": 8})
    assert [o["t_segment_ids"].tolist() for o in outputs] == [[1, 1, 2, 2, 2, 0, 0, 0]]
    assert pack(cls, [], {"t": 8}) == []


@pytest.mark.parametrize("cls", PACKERS)
def test_packing_is_deterministic_and_accepts_a_map_dataset(cls):
    elements = make_elements(150, {"t": (1, 30)}, seed=5)
    ds = cls(MapDataset.source(elements), length_struct={"t": 50}, num_packing_bins=3)
    first = [o["t"].tolist() for o in ds]
    assert first == [o["t"].tolist() for o in ds]
    threaded = cls(source(elements, num_threads=4), length_struct={"t": 50}, num_packing_bins=3)
    assert [o["t"].tolist() for o in threaded] == first


# -- checkpoints ------------------------------------------------------------------------------


@pytest.mark.parametrize("cls", PACKERS)
@pytest.mark.parametrize("shuffle_bins", [False, True])
def test_packing_checkpoints(cls, shuffle_bins):
    elements = make_elements(120, {"a": (1, 12), "b": (0, 6)}, seed=6)
    # A stateful stage upstream: its count must replay exactly with the group.
    ds = source(elements).map_with_index(lambda i, e: {**e, "b": e["b"] + i * 0})
    packed = cls(
        ds,
        length_struct={"a": 20, "b": 10},
        num_packing_bins=3,
        shuffle_bins=shuffle_bins,
        max_sequences_per_bin=4,
    )
    # Every step: states in the middle of a flush, right after one, and at the end.
    assert_equal_output_after_checkpoint(packed)


@pytest.mark.parametrize("cls", PACKERS)
def test_restored_packing_state_is_small_and_replays_one_group(cls):
    elements = make_elements(200, {"t": (1, 30)}, seed=7)
    packed = cls(source(elements), length_struct={"t": 40}, num_packing_bins=4)
    iterator = iter(packed)
    for _ in range(10):
        next(iterator)
    state = iterator.get_state()
    assert set(without_fingerprint(state)) == {"parent", "consumed", "emitted", "group"}
    assert len(json.dumps(without_fingerprint(state))) < 120  # positions only, never tokens
    assert 0 < state["emitted"] < 4 or state["emitted"] == 0 < state["consumed"]
    fresh = iter(packed)
    fresh.set_state(state)
    rest = [o["t"].tolist() for o in fresh]
    assert rest == [o["t"].tolist() for o in iterator]


def test_restoring_a_state_of_another_pipeline_raises():
    elements = make_elements(50, {"t": (1, 30)})
    packed = FirstFitPackIterDataset(source(elements), length_struct={"t": 40}, num_packing_bins=4)
    iterator = iter(packed)
    next(iterator)
    state = iterator.get_state()
    with pytest.raises(ValueError, match="does not belong"):
        iter(packed).set_state({"parent": state["parent"], "consumed": 1})
    with pytest.raises(ValueError, match="fits no bin"):
        iter(packed).set_state({**state, "consumed": 10_000})
    with pytest.raises(ValueError, match="fits no bin"):
        iter(packed).set_state({**state, "consumed": state["consumed"] + 40})
    with pytest.raises(ValueError, match="emitted"):
        iter(packed).set_state({**state, "emitted": 99})
    short = FirstFitPackIterDataset(
        source([{"t": np.arange(2)}] * 3), length_struct={"t": 40}, num_packing_bins=4
    )
    start = iter(short).get_state()
    with pytest.raises(ValueError, match="the parent ended after 3"):
        iter(short).set_state({**start, "consumed": 5})


# -- concat then split --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "lengths"),
    [
        ({"t": (1, 90)}, {"t": 32}),
        ({"inputs": (1, 40), "targets": (0, 30)}, {"inputs": 48, "targets": 24}),
    ],
)
def test_concat_then_split_keeps_every_token_once(spec, lengths):
    elements = make_elements(200, spec, seed=8)
    outputs = list(ConcatThenSplitIterDataset(source(elements), length_struct=lengths))
    check_output(outputs, elements, lengths, split=True)
    # Only the last example has room left in every feature.
    for o in outputs[:-1]:
        assert any(o[f"{key}_segment_ids"][-1] > 0 for key in lengths)


def test_concat_then_split_restarts_segments_and_positions_after_a_split():
    elements = [{"t": np.arange(n) + 1} for n in (3, 12, 2)]
    outputs = list(ConcatThenSplitIterDataset(source(elements), length_struct={"t": 5}))
    assert [o["t"].tolist() for o in outputs] == [
        [1, 2, 3, 1, 2],
        [3, 4, 5, 6, 7],
        [8, 9, 10, 11, 12],
        [1, 2, 0, 0, 0],
    ]
    assert [o["t_segment_ids"].tolist() for o in outputs] == [
        [1, 1, 1, 2, 2],
        [1, 1, 1, 1, 1],
        [1, 1, 1, 1, 1],
        [1, 1, 0, 0, 0],
    ]
    assert outputs[1]["t_positions"].tolist() == [0, 1, 2, 3, 4]


def test_concat_then_split_fills_other_features_until_an_element_does_not_fit():
    def element(i, inputs, targets):
        return {
            "inputs": np.arange(inputs) + 1 + i * STRIDE,
            "targets": np.arange(targets) + 1 + i * STRIDE,
        }

    # Element 0 fills "targets" exactly; element 1 still gives its inputs to the first
    # example and its targets open the second.
    elements = [element(0, 2, 4), element(1, 3, 2), element(2, 1, 1)]
    ds = ConcatThenSplitIterDataset(source(elements), length_struct={"inputs": 6, "targets": 4})
    first, second = list(ds)
    assert first["inputs_segment_ids"].tolist() == [1, 1, 2, 2, 2, 0]
    assert first["targets_segment_ids"].tolist() == [1, 1, 1, 1]
    assert second["inputs"].tolist() == [2001, 0, 0, 0, 0, 0]
    assert second["inputs_segment_ids"].tolist() == [2, 0, 0, 0, 0, 0]
    assert second["targets"].tolist() == [1001, 1002, 2001, 0]
    assert second["targets_segment_ids"].tolist() == [1, 1, 2, 0]


def test_concat_then_split_bos_replaces_the_first_token_of_every_piece():
    elements = [{"t": np.arange(n) + 1, "u": np.arange(n) + 1} for n in (3, 6)]
    ds = ConcatThenSplitIterDataset(
        source(elements),
        length_struct={"t": 5, "u": 5},
        bos_handling=BOSHandling.REPLACE_FIRST_TOKEN_WITH_BOS,
        bos_features=["t"],
        bos_token_id=-1,
    )
    outputs = list(ds)
    assert [o["t"].tolist() for o in outputs] == [[-1, 2, 3, -1, 2], [-1, 4, 5, 6, 0]]
    assert [o["u"].tolist() for o in outputs] == [[1, 2, 3, 1, 2], [3, 4, 5, 6, 0]]
    assert outputs[1]["t_positions"].tolist() == [0, 1, 2, 3, 0]


def test_concat_then_split_checkpoints():
    elements = make_elements(60, {"a": (0, 30), "b": (1, 9)}, seed=9)
    ds = ConcatThenSplitIterDataset(
        source(elements).filter(lambda e: len(e["a"]) != 7),
        length_struct={"a": 16, "b": 8},
        bos_handling=BOSHandling.REPLACE_FIRST_TOKEN_WITH_BOS,
        bos_features=["a"],
        bos_token_id=0,
    )
    assert_equal_output_after_checkpoint(ds)
    iterator = iter(ds)
    for _ in range(5):
        next(iterator)
    state = iterator.get_state()
    assert set(without_fingerprint(state)) == {"parent", "offsets"}
    assert len(state["offsets"]) == 2


def test_concat_then_split_checkpoints_after_exact_fills():
    # Each example is exactly two elements; the third is read before the example is
    # emitted (it might have fit in another feature) and must be read again on restore.
    elements = [{"t": np.arange(4) + 1 + i * STRIDE} for i in range(9)]
    ds = ConcatThenSplitIterDataset(source(elements), length_struct={"t": 8})
    assert len(list(ds)) == 5
    assert_equal_output_after_checkpoint(ds)
    iterator = iter(ds)
    next(iterator)
    assert without_fingerprint(iterator.get_state()) == {
        "parent": {"next_index": 2},
        "offsets": [0],
    }


def test_concat_then_split_bad_states():
    elements = make_elements(20, {"t": (5, 9)})
    ds = ConcatThenSplitIterDataset(source(elements), length_struct={"t": 4})
    iterator = iter(ds)
    next(iterator)
    state = iterator.get_state()
    assert state["offsets"] != [0]
    with pytest.raises(ValueError, match="must list 1 integers"):
        iter(ds).set_state({**state, "offsets": [1, 2]})
    with pytest.raises(ValueError, match="does not belong"):
        iter(ds).set_state({"parent": state["parent"]})
    fresh = iter(ds)
    fresh.set_state({**state, "offsets": [50]})
    with pytest.raises(ValueError, match="do not fit"):
        next(fresh)


# -- bad input ------------------------------------------------------------------------------


@pytest.mark.parametrize("cls", PACKERS)
@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"num_packing_bins": 0}, ValueError, "`num_packing_bins` must be >= 1"),
        ({"num_packing_bins": -3}, ValueError, "`num_packing_bins` must be >= 1"),
        ({"num_packing_bins": True}, TypeError, "`num_packing_bins` must be an integer"),
        ({"length_struct": {"t": 0}}, ValueError, r"`length_struct\['t'\]` must be >= 1"),
        ({"length_struct": {"t": -2}}, ValueError, r"`length_struct\['t'\]` must be >= 1"),
        ({"length_struct": {"t": 2.5}}, TypeError, r"`length_struct\['t'\]` must be an integer"),
        ({"length_struct": {}}, ValueError, "empty dict"),
        ({"shuffle_bins": 1}, TypeError, "`shuffle_bins` must be a bool"),
        ({"seed": -1}, ValueError, "`seed` must be >= 0"),
        ({"max_sequences_per_bin": 0}, ValueError, "`max_sequences_per_bin` must be >= 1"),
        ({"meta_features": [3]}, TypeError, "`meta_features`"),
        ({"meta_features": "t"}, TypeError, "`meta_features` must be a sequence"),
        ({"padding_struct": {"u": 0}}, ValueError, "`padding_struct` must have the structure"),
        ({"pack_alignment_struct": {"t": 0}}, ValueError, "pack_alignment_struct"),
        ({"pack_alignment_struct": {"x": 4}}, ValueError, "pack_alignment_struct"),
        ({"shuffle_bins_group_by_feature": "t"}, NotImplementedError, "group_by_feature"),
        (
            {"length_struct": {"t": 4, "t_positions": 4}},
            ValueError,
            "packing adds",
        ),
    ],
)
def test_packing_bad_arguments(cls, kwargs, error, match):
    arguments = {"length_struct": {"t": 4}, "num_packing_bins": 2, **kwargs}
    with pytest.raises(error, match=match):
        cls(source([{"t": np.arange(3)}]), **arguments)


def test_packing_parent_must_be_a_dataset():
    with pytest.raises(TypeError, match="`parent` of FirstFitPackIterDataset must be"):
        FirstFitPackIterDataset([1, 2], length_struct={"t": 4}, num_packing_bins=1)


@pytest.mark.parametrize("cls", [*PACKERS, ConcatThenSplitIterDataset])
@pytest.mark.parametrize(
    ("element", "error", "match"),
    [
        ({"a": np.arange(3)}, ValueError, r"lacks \['b'\], which `length_struct` names"),
        (
            {"a": np.arange(3), "b": np.arange(2), "c": np.arange(1)},
            ValueError,
            r"has \['c'\], which `length_struct` lacks",
        ),
        ({"a": np.zeros((2, 3)), "b": np.arange(2)}, ValueError, r"\['a'\].*shape \(2, 3\).*1-D"),
        ({"a": np.array(["x"]), "b": np.arange(2)}, TypeError, "numeric arrays"),
        ([np.arange(3), np.arange(2)], ValueError, "must be a dict like `length_struct"),
    ],
)
def test_elements_not_matching_length_struct(cls, element, error, match):
    kwargs = {} if cls is ConcatThenSplitIterDataset else {"num_packing_bins": 2}
    good = {"a": np.arange(2), "b": np.arange(2)}
    ds = cls(source([good, element]), length_struct={"a": 8, "b": 8}, **kwargs)
    with pytest.raises(error, match=match):
        list(ds)


@pytest.mark.parametrize("cls", [*PACKERS, ConcatThenSplitIterDataset])
def test_mixed_dtypes_raise(cls):
    kwargs = {} if cls is ConcatThenSplitIterDataset else {"num_packing_bins": 2}
    elements = [{"t": np.arange(3, dtype=np.int32)}, {"t": np.arange(3, dtype=np.int64)}]
    with pytest.raises(TypeError, match="dtype int64, but earlier elements had int32"):
        list(cls(source(elements), length_struct={"t": 8}, **kwargs))


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"bos_handling": 2}, TypeError, "`bos_handling` must be a BOSHandling"),
        (
            {"bos_handling": BOSHandling.REPLACE_FIRST_TOKEN_WITH_BOS, "bos_features": ["t"]},
            ValueError,
            "`bos_token_id` is required",
        ),
        (
            {"bos_handling": BOSHandling.REPLACE_FIRST_TOKEN_WITH_BOS, "bos_token_id": 1},
            ValueError,
            "`bos_features` is empty",
        ),
        (
            {
                "bos_handling": BOSHandling.REPLACE_FIRST_TOKEN_WITH_BOS,
                "bos_token_id": 1,
                "bos_features": ["x"],
            },
            ValueError,
            r"`bos_features` names \['x'\]",
        ),
        ({"bos_token_id": 1}, ValueError, "only apply with"),
        ({"meta_features": ["nope"]}, ValueError, "meta_features"),
        ({"split_full_length_features": 0}, TypeError, "split_full_length"),
        ({"length_struct": {"t": 0}}, ValueError, r"`length_struct\['t'\]` must be >= 1"),
    ],
)
def test_concat_then_split_bad_arguments(kwargs, error, match):
    arguments = {"length_struct": {"t": 4}, **kwargs}
    with pytest.raises(error, match=match):
        ConcatThenSplitIterDataset(source([{"t": np.arange(3)}]), **arguments)


@pytest.mark.parametrize("packer", [*PACKERS, ConcatThenSplitIterDataset])
def test_a_scalar_feature_is_a_sequence_of_one_token_as_in_grain(packer):
    elements = [{"a": np.arange(n) + 1, "b": np.int64(10 * n)} for n in (2, 3)]
    kwargs = {} if packer is ConcatThenSplitIterDataset else {"num_packing_bins": 1}
    (packed,) = list(packer(source(elements), length_struct={"a": 5, "b": 2}, **kwargs))
    assert packed["a"].tolist() == [1, 2, 1, 2, 3]
    assert packed["b"].tolist() == [20, 30]
    assert packed["b_segment_ids"].tolist() == [1, 2]


# -- ConcatThenSplit: meta features and split_full_length_features=False -----------------------
# The expected outputs are Grain 0.2.18's for the same inputs.


def _seqs(sizes):
    return source(
        [{"t": np.arange(1, n + 1, dtype=np.int32) + 10 * i} for i, n in enumerate(sizes)]
    )


NO_SPLIT = {
    (4, 2, 3): [[11, 12, 21, 22], [1, 2, 3, 4], [23, 0, 0, 0]],
    (2, 4, 1, 4, 3): [[1, 2, 21, 41], [11, 12, 13, 14], [31, 32, 33, 34], [42, 43, 0, 0]],
    (4, 4, 1): [[21, 0, 0, 0], [1, 2, 3, 4], [11, 12, 13, 14]],
    (1, 4): [[1, 0, 0, 0], [11, 12, 13, 14]],
    (3, 1, 4, 4, 2, 2): [[1, 2, 3, 11], [21, 22, 23, 24], [31, 32, 33, 34], [41, 42, 51, 52]],
    (5, 4): [[1, 2, 3, 4], [5, 0, 0, 0], [11, 12, 13, 14]],
    (2, 2, 4, 1): [[1, 2, 11, 12], [21, 22, 23, 24], [31, 0, 0, 0]],
    (4, 4): [[1, 2, 3, 4], [11, 12, 13, 14]],
    (4, 1, 4, 1, 1, 1): [[11, 31, 41, 51], [1, 2, 3, 4], [21, 22, 23, 24]],
    (2, 2, 2, 4, 2): [[1, 2, 11, 12], [21, 22, 41, 42], [31, 32, 33, 34]],
    (4, 1, 1, 1, 1, 4, 1, 1, 1, 1): [
        [11, 21, 31, 41],
        [1, 2, 3, 4],
        [51, 52, 53, 54],
        [61, 71, 81, 91],
    ],
    (2, 4, 2, 4, 2): [[1, 2, 21, 22], [11, 12, 13, 14], [31, 32, 33, 34], [41, 42, 0, 0]],
}


@pytest.mark.parametrize("sizes", NO_SPLIT, ids=str)
def test_no_split_passes_full_length_elements_through_in_grains_order(sizes):
    ds = ConcatThenSplitIterDataset(
        _seqs(sizes), length_struct={"t": 4}, split_full_length_features=False
    )
    outputs = list(ds)
    assert [o["t"].tolist() for o in outputs] == NO_SPLIT[sizes]
    for output in outputs:  # a passed-through element is one whole segment
        if 0 not in output["t_segment_ids"] and len(set(output["t_segment_ids"])) == 1:
            assert output["t_positions"].tolist() == [0, 1, 2, 3]
    assert_equal_output_after_checkpoint(ds)


def test_no_split_state_restores_in_a_fresh_iterator_at_every_step():
    def make():
        return ConcatThenSplitIterDataset(
            _seqs((1, 4, 4, 2, 4, 1, 3, 4, 4, 1, 1)),
            length_struct={"t": 4},
            split_full_length_features=False,
        )

    expected = [o["t"].tolist() for o in make()]
    for k in range(len(expected) + 1):
        it = iter(make())
        head = [next(it)["t"].tolist() for _ in range(k)]
        state = it.get_state()
        assert set(without_fingerprint(state)) == {
            "parent",
            "offsets",
            "replay",
            "pending",
            "emitted",
        }
        fresh = iter(make())
        fresh.set_state(state)
        assert head + [o["t"].tolist() for o in fresh] == expected


META = {
    ((3, 1), (3, 1), (2, 1)): (
        {"t": 4, "m": 3},
        [
            ([1, 2, 3, 11], [1, 1, 1, 2], [100, 101, 0]),
            ([12, 13, 21, 22], [1, 1, 2, 2], [101, 102, 0]),
        ],
    ),
    ((3, 2), (3, 2)): (
        {"t": 4, "m": 3},
        [
            ([1, 2, 3, 0], [1, 1, 1, 0], [100, 100, 0]),
            ([11, 12, 13, 0], [1, 1, 1, 0], [101, 101, 0]),
        ],
    ),
    ((6, 1), (1, 1)): (
        {"t": 4, "m": 4},
        [
            ([1, 2, 3, 4], [1, 1, 1, 1], [100, 0, 0, 0]),
            ([5, 6, 11, 0], [1, 1, 2, 0], [100, 101, 0, 0]),
        ],
    ),
    ((2, 2), (1, 2), (1, 1)): (
        {"t": 4, "m": 3},
        [
            ([1, 2, 0, 0], [1, 1, 0, 0], [100, 100, 0]),
            ([11, 21, 0, 0], [1, 2, 0, 0], [101, 101, 102]),
        ],
    ),
}


@pytest.mark.parametrize("rows", META, ids=str)
def test_meta_features_are_never_split_and_repeat_with_a_split_element(rows):
    lengths, expected = META[rows]
    elements = [
        {"t": np.arange(1, x + 1, dtype=np.int32) + 10 * i, "m": np.full(y, 100 + i, np.int32)}
        for i, (x, y) in enumerate(rows)
    ]
    ds = ConcatThenSplitIterDataset(source(elements), length_struct=lengths, meta_features=["m"])
    outputs = list(ds)
    assert [(o["t"].tolist(), o["t_segment_ids"].tolist(), o["m"].tolist()) for o in outputs] == (
        expected
    )
    assert all(set(o) == {"t", "t_segment_ids", "t_positions", "m"} for o in outputs)
    assert_equal_output_after_checkpoint(ds)


def test_a_meta_feature_longer_than_its_length_raises():
    elements = [{"t": np.arange(2, dtype=np.int32), "m": np.arange(5, dtype=np.int32)}]
    ds = ConcatThenSplitIterDataset(
        source(elements), length_struct={"t": 4, "m": 3}, meta_features=["m"]
    )
    with pytest.raises(ValueError, match="never split"):
        list(ds)


# -- first/best fit: alignment and meta features that `length_struct` lacks ---------------------
# The expected outputs are Grain 0.2.18's for the same inputs.

ALIGNED = [
    (
        (3, 2, 5),
        {"t": 12},
        1,
        {"t": 4},
        [[1, 2, 3, 0, 11, 12] + [0] * 6, [21, 22, 23, 24, 25] + [0] * 7],
    ),
    (
        (3, 2, 3, 1),
        {"t": 8},
        2,
        {"t": 4},
        [[1, 2, 3, 0, 11, 12, 0, 0], [21, 22, 23, 0, 31, 0, 0, 0]],
    ),
    ((4, 1, 3), {"t": 10}, 1, {"t": 3}, [[1, 2, 3, 4, 0, 0, 11, 0, 0, 0], [21, 22, 23] + [0] * 7]),
    ((3, 3, 2), {"t": 10}, 1, {"t": 4}, [[1, 2, 3, 0, 11, 12, 13, 0, 21, 22]]),
]


@pytest.mark.parametrize("packer", PACKERS)
@pytest.mark.parametrize(("sizes", "lengths", "bins", "align", "expected"), ALIGNED)
def test_pack_alignment_starts_each_element_at_a_multiple(
    packer, sizes, lengths, bins, align, expected
):
    ds = packer(
        _seqs(sizes),
        length_struct=lengths,
        num_packing_bins=bins,
        shuffle_bins=False,
        pack_alignment_struct=align,
    )
    assert [o["t"].tolist() for o in ds] == expected
    assert_equal_output_after_checkpoint(ds)


@pytest.mark.parametrize("packer", PACKERS)
def test_meta_features_not_in_length_struct_are_listed_per_bin(packer):
    elements = [
        {"t": np.arange(1, n + 1, dtype=np.int32) + 10 * i, "id": i, "name": f"d{i}"}
        for i, n in enumerate([2, 3, 4])
    ]
    ds = packer(
        source(elements),
        length_struct={"t": 6},
        num_packing_bins=2,
        shuffle_bins=False,
        meta_features=["id", "name"],
    )
    outputs = list(ds)
    assert [(o["t"].tolist(), o["id"], o["name"]) for o in outputs] == [
        ([1, 2, 11, 12, 13, 0], [0, 1], ["d0", "d1"]),
        ([21, 22, 23, 24, 0, 0], [2], ["d2"]),
    ]
    assert_equal_output_after_checkpoint(ds)
    with pytest.raises(ValueError, match="lacks the meta features"):
        list(
            packer(
                source([{"t": np.arange(2)}]),
                length_struct={"t": 6},
                num_packing_bins=1,
                meta_features=["id"],
            )
        )
