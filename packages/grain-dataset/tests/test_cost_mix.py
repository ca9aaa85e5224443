"""MapDataset.mix and IterDataset.mix with `costs=`: token shares, exact resume, bad input."""

import collections
import json
import logging

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grain_dataset import IterDataset, MapDataset, assert_equal_output_after_checkpoint


def _corpus(seed, sizes=(120, 80, 60), means=(5, 15, 50)):
    """Components of {"c": component, "i": index, "n": tokens} with lognormal lengths."""
    rng = np.random.default_rng(seed)
    lengths = [
        rng.lognormal(np.log(m), 0.8, n).astype(np.int64) + 1
        for m, n in zip(means, sizes, strict=True)
    ]
    parts = [
        MapDataset.source([{"c": j, "i": i, "n": int(n)} for i, n in enumerate(lens)])
        for j, lens in enumerate(lengths)
    ]
    return parts, lengths


def _shares(elements, count):
    tokens = np.zeros(count)
    for x in elements:
        tokens[x["c"]] += x["n"]
    return tokens / tokens.sum()


def _bound(lengths, weights, total):
    """One record of each component, relative to `total` tokens: the schedule's tolerance."""
    return 2 * max(int(lens.max()) for lens in lengths) / total


# -- MapDataset -----------------------------------------------------------------------------


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 10**6), st.lists(st.floats(0.1, 5.0), min_size=3, max_size=3))
def test_map_mix_token_shares_follow_the_weights(seed, weights):
    parts, lengths = _corpus(seed)
    ds = MapDataset.mix(parts, weights, costs=lengths)
    elements = [ds[i] for i in range(3 * len(ds))]
    total = sum(x["n"] for x in elements)
    shares = _shares(elements, 3)
    target = np.asarray(weights) / sum(weights)
    assert np.abs(shares - target).max() <= _bound(lengths, weights, total), (shares, target)


def test_record_weights_miss_the_token_shares_that_costs_hit():
    parts, lengths = _corpus(3)
    by_records = list(MapDataset.mix(parts, [1, 1, 1]))
    by_tokens = list(MapDataset.mix(parts, [1, 1, 1], costs=lengths).repeat(4))
    assert np.abs(_shares(by_records, 3) - 1 / 3).max() > 0.2
    assert np.abs(_shares(by_tokens, 3) - 1 / 3).max() < 0.03


@settings(max_examples=20, deadline=None)
@given(st.integers(0, 10**6), st.integers(1, 4))
def test_map_mix_reads_each_record_once_per_component_epoch(seed, epochs):
    parts, lengths = _corpus(seed)
    ds = MapDataset.mix(parts, [0.2, 0.3, 0.5], costs=lengths)
    elements = list(ds.repeat(epochs))
    for j, lens in enumerate(lengths):
        seen = [x["i"] for x in elements if x["c"] == j]
        # Component j is read in order, cycled: index k of the mix reads record k % n.
        assert seen == [k % len(lens) for k in range(len(seen))]
    counts = collections.Counter(x["c"] for x in elements[: len(ds)])
    assert max(counts[j] - len(lengths[j]) for j in range(3)) <= 0


def test_map_mix_random_access_agrees_with_iteration_and_batched_reads():
    parts, lengths = _corpus(5)
    ds = MapDataset.mix(parts, [2, 1, 1], costs=lengths)
    straight = list(ds.repeat(3))
    again = MapDataset.mix(parts, [2, 1, 1], costs=lengths)
    rng = np.random.default_rng(0)
    for i in rng.permutation(len(straight)).tolist():
        assert again[i] == straight[i]
    assert list(again.repeat(3)[7:300:3]) == straight[7:300:3]
    batched = MapDataset.mix(parts, [2, 1, 1], costs=lengths).repeat(3).batch(16)
    flat = [
        {"c": int(c), "i": int(i), "n": int(n)}
        for b in batched
        for c, i, n in zip(b["c"], b["i"], b["n"], strict=True)
    ]
    assert flat == straight[: len(flat)]


def test_map_mix_by_cost_restores_at_every_step_after_a_shuffle():
    parts, lengths = _corpus(11, sizes=(30, 20, 10))
    ds = MapDataset.mix(parts, [1, 2, 1], costs=lengths).repeat(2).shuffle(seed=4)
    assert_equal_output_after_checkpoint(ds, max_steps=80)


def test_map_mix_fingerprint_tells_costs_apart():
    parts, lengths = _corpus(2)
    a = MapDataset.mix(parts, [1, 1, 1], costs=lengths)
    b = MapDataset.mix(parts, [1, 1, 1], costs=[lens + 1 for lens in lengths])
    state = iter(a).get_state()
    assert state == iter(b).get_state()  # the positions' shape is the record mix's
    assert "by cost" in repr(a)
    assert a._fingerprint_token() != b._fingerprint_token()


@pytest.mark.parametrize(
    ("costs", "error", "match"),
    [
        ("lengths.npy", TypeError, r"`costs` of MapDataset.mix must be a list"),
        ([np.ones(120), np.ones(80)], ValueError, r"one entry per dataset: got 2 entries for 3"),
        (
            [np.ones(120), np.ones(79), np.ones(60)],
            ValueError,
            r"`costs\[1\]` of mix must hold one cost per record of `datasets\[1\]` \(80\)",
        ),
        ([np.ones(120), np.zeros(80), np.ones(60)], ValueError, r"`costs\[1\]\[0\]` is 0.0"),
        ([np.ones(120), -np.ones(80), np.ones(60)], ValueError, r"must be finite and > 0"),
        ([len, len, len], TypeError, r"`costs\[0\]` of MapDataset.mix is a function"),
    ],
)
def test_map_mix_bad_costs_name_the_problem(costs, error, match):
    parts, _ = _corpus(0)
    with pytest.raises(error, match=match):
        MapDataset.mix(parts, costs=costs)


def test_map_mix_by_cost_refuses_infinite_components_and_bad_weights():
    parts, lengths = _corpus(0)
    with pytest.raises(ValueError, match=r"`datasets\[1\]` of mix is infinite.*\.repeat\(\)"):
        MapDataset.mix([parts[0], parts[1].repeat()], costs=lengths[:2])
    with pytest.raises(ValueError, match="one weight per dataset"):
        MapDataset.mix(parts, [1, 2], costs=lengths)
    with pytest.raises(ValueError, match="non-zero proportions"):
        MapDataset.mix(parts, [1, 0, 2], costs=lengths)


def test_map_mix_reads_a_manifests_lengths(tmp_path):
    from grain_dataset._map_stages._cost_mix import manifest_lengths

    with pytest.raises(ValueError, match="cannot read the manifest"):
        manifest_lengths(tmp_path / "missing.manifest.json")
    (tmp_path / "x.manifest.json").write_text(json.dumps({"shards": [], "lengths": None}))
    with pytest.raises(ValueError, match=r"no per-record lengths: convert with `--lengths"):
        manifest_lengths(tmp_path / "x.manifest.json")


# -- IterDataset ----------------------------------------------------------------------------


def _iter_mix(parts, weights, costs=lambda x: x["n"], names=False):
    iters = [p.repeat().to_iter_dataset() for p in parts]
    if names:
        return IterDataset.mix(
            {f"d{j}": d for j, d in enumerate(iters)},
            {f"d{j}": w for j, w in enumerate(weights)},
            costs=costs,
        )
    return IterDataset.mix(iters, weights, costs=costs)


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 10**6), st.lists(st.floats(0.1, 5.0), min_size=3, max_size=3))
def test_iter_mix_token_shares_follow_the_weights(seed, weights):
    parts, lengths = _corpus(seed)
    it = iter(_iter_mix(parts, weights))
    elements = [next(it) for _ in range(600)]
    target = np.asarray(weights) / sum(weights)
    tokens = np.zeros(3)
    biggest = max(int(lens.max()) for lens in lengths)
    for x in elements:
        tokens[x["c"]] += x["n"]
        # Every prefix: each component within a record of its share (half, and rounding).
        assert np.abs(tokens - target * tokens.sum()).max() <= biggest


def _cost_of_index(lengths):
    return lambda x: int(lengths[x["i"]])


@settings(max_examples=30, deadline=None)
@given(
    st.lists(st.lists(st.integers(1, 60), min_size=1, max_size=30), min_size=1, max_size=4),
    st.integers(0, 1),
)
def test_map_and_iter_mixes_by_cost_give_the_same_order(lengths, choice):
    # Both clocks compute (2 tally + cost) / share from exact integer tallies: ties included.
    table = {
        1: [[1], [3]],
        2: [[1, 1], [1, 3]],
        3: [[1, 1, 2], [4, 2, 2]],
        4: [[1, 1, 1, 1], [1, 1, 2, 4]],
    }
    weights = table[len(lengths)][choice]
    parts = [
        MapDataset.source([{"c": j, "i": i} for i in range(len(lens))])
        for j, lens in enumerate(lengths)
    ]
    by_map = list(MapDataset.mix(parts, weights, costs=lengths).repeat(3))
    streams = [p.repeat().to_iter_dataset() for p in parts]
    costs = [_cost_of_index(lens) for lens in lengths]
    it = iter(IterDataset.mix(streams, weights, costs=costs))
    assert [next(it) for _ in range(len(by_map))] == by_map


def test_iter_mix_costs_by_name_and_per_component_functions():
    parts, _lengths = _corpus(1)
    named = _iter_mix(
        parts, [1, 1, 2], names=True, costs={f"d{j}": (lambda x: x["n"]) for j in range(3)}
    )
    listed = _iter_mix(parts, [1, 1, 2], costs=[lambda x: x["n"]] * 3)
    a, b = iter(named), iter(listed)
    assert [next(a) for _ in range(200)] == [next(b) for _ in range(200)]


def test_iter_mix_restores_at_every_step():
    parts, _lengths = _corpus(9, sizes=(20, 15, 10))
    ds = IterDataset.mix(
        [p.to_iter_dataset() for p in parts], [0.5, 0.3, 0.2], costs=lambda x: x["n"]
    )
    assert_equal_output_after_checkpoint(ds, max_steps=60)


@settings(max_examples=20, deadline=None)
@given(st.integers(0, 10**6), st.integers(0, 300))
def test_iter_mix_resumes_exactly_at_random_positions(seed, position):
    parts, _ = _corpus(seed)
    ds = _iter_mix(parts, [3, 2, 1])
    it = iter(ds)
    for _ in range(position):
        next(it)
    state = json.loads(json.dumps(it.get_state()))
    expected = [next(it) for _ in range(100)]
    fresh = iter(ds)
    fresh.set_state(state)
    assert [next(fresh) for _ in range(100)] == expected


def test_iter_mix_stops_when_the_component_it_needs_is_exhausted():
    parts, _lengths = _corpus(4, sizes=(5, 50, 50))
    ds = IterDataset.mix([p.to_iter_dataset() for p in parts], costs=lambda x: x["n"])
    elements = list(ds)
    assert sum(x["c"] == 0 for x in elements) == 5
    assert len({(x["c"], x["i"]) for x in elements}) == len(elements)


def test_iter_mix_new_weights_after_a_checkpoint_count_afresh(caplog):
    parts, _ = _corpus(6)
    old = iter(_iter_mix(parts, [1, 1, 1]))
    delivered = [next(old) for _ in range(150)]
    state = old.get_state()
    new = iter(_iter_mix(parts, [0.6, 0.2, 0.2]))
    with caplog.at_level(logging.WARNING, logger="grain"):
        new.set_state(state)
    assert "the weights changed since the checkpoint" in caplog.text
    later = [next(new) for _ in range(600)]
    assert new.get_state()["shares"] == pytest.approx([0.6, 0.2, 0.2])
    # Each component continues where it stopped: nothing lost or repeated.
    for j in range(3):
        indices = [x["i"] for x in delivered + later if x["c"] == j]
        n = len(parts[j])
        assert indices == [k % n for k in range(len(indices))]
    # From the restore on, the new weights hold (no catch-up run of one component).
    assert np.abs(_shares(later, 3) - [0.6, 0.2, 0.2]).max() < 0.05


def test_iter_mix_record_state_restores_into_a_mix_by_cost():
    parts, _ = _corpus(8)
    by_records = iter(_iter_mix(parts, [1, 1, 1], costs=None))
    for _ in range(30):
        next(by_records)
    state = by_records.get_state()
    by_cost = iter(_iter_mix(parts, [1, 1, 1]))
    by_cost.set_state(state)
    assert by_cost.get_state()["cost_read"] == [0.0, 0.0, 0.0]
    assert by_cost.get_state()["parents"] == state["parents"]


@pytest.mark.parametrize(
    ("costs", "error", "match"),
    [
        ([np.ones(3)] * 3, TypeError, r"`costs\[0\]` of IterDataset.mix must be a function"),
        ("n", TypeError, r"`costs` of IterDataset.mix must be a function of an element"),
        ([len, len], ValueError, r"one function per dataset: got 2 for 3"),
        ({"a": len}, ValueError, r"`costs` of mix is a dict, so `datasets` must be a dict"),
    ],
)
def test_iter_mix_bad_costs_name_the_problem(costs, error, match):
    parts, _ = _corpus(0)
    with pytest.raises(error, match=match):
        IterDataset.mix([p.to_iter_dataset() for p in parts], costs=costs)


@pytest.mark.parametrize(
    ("function", "error", "match"),
    [
        (lambda x: 0, ValueError, r"component 0 of mix returned 0 .* finite and > 0"),
        (lambda x: -3, ValueError, r"returned -3 "),
        (lambda x: "long", TypeError, r"returned str 'long'; it must return a number"),
        (lambda x: float("nan"), ValueError, r"returned nan "),
        (lambda x: True, ValueError, r"returned True "),
    ],
)
def test_iter_mix_bad_cost_values_name_the_component(function, error, match):
    parts, _ = _corpus(0)
    it = iter(IterDataset.mix([p.to_iter_dataset() for p in parts], costs=function))
    with pytest.raises(error, match=match):
        next(it)
    with pytest.raises(error, match=match):  # the same element again: nothing skipped
        next(it)


def test_iter_mix_cost_error_skips_nothing():
    parts, _ = _corpus(0)
    failing = {3}

    def cost(x):
        if x["c"] == 1 and x["i"] in failing:
            failing.clear()
            raise RuntimeError("tokenizer hiccup")
        return x["n"]

    it = iter(IterDataset.mix([p.to_iter_dataset() for p in parts], costs=cost))
    seen = []
    error = None
    while error is None:
        try:
            seen.append(next(it))
        except RuntimeError as raised:
            error = raised
    assert "tokenizer hiccup" in str(error)
    seen.extend(next(it) for _ in range(100))
    reference = iter(IterDataset.mix([p.to_iter_dataset() for p in parts], costs=_n))
    assert seen == [next(reference) for _ in range(len(seen))]


def _n(x):
    return x["n"]


@pytest.mark.parametrize("key", ["cost_read", "cost_per_share"])
def test_iter_mix_corrupt_cost_state_is_refused(key):
    parts, _ = _corpus(0)
    it = iter(_iter_mix(parts, [1, 1, 1]))
    state = it.get_state()
    del state["cost_read"]
    state[key] = [1.0, "x", 2.0]
    with pytest.raises(ValueError, match=rf"state\['{key}'\] .* must be a list of finite"):
        iter(_iter_mix(parts, [1, 1, 1])).set_state(state)


def test_iter_mix_restores_a_state_of_the_earlier_cost_per_share_format():
    parts, _ = _corpus(4)
    ds = _iter_mix(parts, [1, 1, 2])
    it = iter(ds)
    for _ in range(40):
        next(it)
    state = it.get_state()
    expected = [next(it) for _ in range(60)]
    # The earlier version saved the tallies over the shares, with these shares (1/4: exact).
    shares = state["shares"]
    state["cost_per_share"] = [t / w for t, w in zip(state.pop("cost_read"), shares, strict=True)]
    restored = iter(ds)
    restored.set_state(state)
    assert [next(restored) for _ in range(60)] == expected
    assert restored.get_state()["cost_read"] == it.get_state()["cost_read"]


def test_map_and_iter_mixes_by_cost_agree_on_a_tie_that_rounding_broke():
    # Shares 1/4 and 3/4: at the seventh element both clocks read 10 for both datasets.
    # Summed cost over share by cost over share, the second reached 9.999...; a tie.
    lengths = [[1, 1, 1, 1, 36, 60, 60], [1, 1, 1, 4] + [1] * 10 + [30, 1, 2, 60]]
    parts = [
        MapDataset.source([{"c": j, "i": i} for i in range(len(lens))])
        for j, lens in enumerate(lengths)
    ]
    by_map = list(MapDataset.mix(parts, [1, 3], costs=lengths))
    streams = [p.repeat().to_iter_dataset() for p in parts]
    it = iter(IterDataset.mix(streams, [1, 3], costs=[_cost_of_index(x) for x in lengths]))
    got = [next(it) for _ in range(len(by_map))]
    assert got[6] == by_map[6] == {"c": 0, "i": 2}  # the tie goes to the lower dataset
    assert got == by_map
