"""Batches by token budget: properties on random lengths, states, errors.

Token j of element i is ``i * STRIDE + j + 1`` (lengths stay below STRIDE), so
every output token names its element and position, and the check of an
output finds every element exactly once without knowing the order.
"""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from grain_dataset import (
    MapDataset,
    ReadOptions,
    TokenBudgetBatchIterDataset,
    assert_equal_output_after_checkpoint,
    without_fingerprint,
)

pytestmark = pytest.mark.timeout(120)

STRIDE = 10_000
_SETTINGS = settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True
)


def sequences(lengths: list[int]) -> list[np.ndarray]:
    return [
        np.arange(i * STRIDE + 1, i * STRIDE + 1 + n, dtype=np.int32) for i, n in enumerate(lengths)
    ]


def dicts(lengths: list[int]) -> list[dict[str, np.ndarray]]:
    # "targets" is shorter than "tokens"; "id" is not a sequence.
    return [
        {"tokens": s, "targets": s[: len(s) // 2] * -1, "id": np.int64(i)}
        for i, s in enumerate(sequences(lengths))
    ]


def source(elements: list) -> MapDataset:
    return MapDataset.source(elements)


def stage(elements: list, **kwargs) -> TokenBudgetBatchIterDataset:
    read = ReadOptions(num_threads=0)
    return TokenBudgetBatchIterDataset(source(elements).to_iter_dataset(read), **kwargs)


def element_ids(batch) -> list[int]:
    """The elements of a bare-array batch, in row order (padding rows left out)."""
    values, lengths, _mask, row_mask = batch
    ids = []
    for row in np.flatnonzero(row_mask):
        ids.append(-1 if lengths[row] == 0 else int(values[row, 0] - 1) // STRIDE)
    return ids


def check_batches(batches, lengths: list[int], ds: TokenBudgetBatchIterDataset) -> list[list[int]]:
    """Asserts the output properties of bare-array batches; returns each batch's elements."""
    shapes = set(ds.shapes)
    padded_lengths = ds._lengths
    seen = []
    for values, got_lengths, mask, row_mask in batches:
        rows, padded = values.shape
        assert (rows, padded) in shapes, "a shape outside the declared set"
        assert rows * padded <= ds.token_budget
        assert got_lengths.dtype == np.int32
        assert mask.dtype == row_mask.dtype == bool
        count = int(row_mask.sum())
        assert row_mask[:count].all(), "padding rows last"
        assert not row_mask[count:].any(), "padding rows last"
        assert 0 < count <= rows
        # The padded length is the smallest declared one that holds the longest row.
        longest = int(got_lengths.max())
        assert padded == min(length for length in padded_lengths if length >= longest)
        np.testing.assert_array_equal(mask, np.arange(padded) < got_lengths[:, None])
        assert not values[~mask].any(), "padding is 0"
        assert not got_lengths[~row_mask].any()
        for row in range(count):
            n = got_lengths[row]
            if n:
                first = int(values[row, 0] - 1) // STRIDE
                np.testing.assert_array_equal(
                    values[row, :n], np.arange(first * STRIDE + 1, first * STRIDE + 1 + n)
                )
                assert n == lengths[first], "an element cut or merged"
        seen.append(element_ids((values, got_lengths, mask, row_mask)))
    # Every element exactly once (empty ones show as -1: count them).
    flat = [i for ids in seen for i in ids]
    assert sorted(i for i in flat if i >= 0) == [i for i, n in enumerate(lengths) if n]
    assert flat.count(-1) == sum(1 for n in lengths if n == 0)
    return seen


CONFIG = st.fixed_dictionaries(
    {
        "lengths": st.lists(st.integers(0, 64), max_size=80),
        "budget": st.integers(64, 400),
        "padded": st.sampled_from([[8, 16, 32, 64], [16, 64], [64], [4, 8, 12, 24, 48, 64]]),
        "rows": st.sampled_from([None, [1, 2, 4, 8, 16, 32], [1, 3, 5, 100], [2, 4, 6]]),
        "window": st.sampled_from([None, 1, 5, 16, 1000]),
        "full_rows": st.booleans(),
    }
)


def build(config, elements=None) -> tuple[TokenBudgetBatchIterDataset, list[int]]:
    lengths = config["lengths"]
    ds = stage(
        sequences(lengths) if elements is None else elements,
        token_budget=config["budget"],
        padded_lengths=config["padded"],
        batch_sizes=config["rows"],
        bucket_window=config["window"],
        full_rows=config["full_rows"],
    )
    return ds, lengths


def feasible(config) -> bool:
    rows = config["rows"] or [1]
    return all(rows[0] * length <= config["budget"] for length in config["padded"])


@_SETTINGS
@given(config=CONFIG)
def test_every_element_once_within_budget_in_declared_shapes(config):
    if not feasible(config):
        with pytest.raises(ValueError, match="holds no batch"):
            build(config)
        return
    ds, lengths = build(config)
    seen = check_batches(list(ds), lengths, ds)
    window = config["window"]
    if window is None:
        # Stream order, and greedy: a batch closes only when the next element does not fit.
        flat = [i for ids in seen for i in ids]
        order = [i for i, n in enumerate(lengths) if n]
        assert [i for i in flat if i >= 0] == order
    else:
        # Bucketing never mixes two windows in one batch.
        for ids in seen:
            real = [i for i in ids if i >= 0]
            assert len({i // window for i in real}) <= 1


@_SETTINGS
@given(config=CONFIG)
def test_stream_order_closes_a_batch_only_when_the_next_element_does_not_fit(config):
    config = {**config, "window": None, "full_rows": False}
    if not feasible(config):
        return
    lengths = [max(n, 1) for n in config["lengths"]]  # ids of empty elements are unknown
    ds, _ = build(config, sequences(lengths))
    batches = [element_ids(batch) for batch in ds]
    most = dict(zip(ds._lengths, ds._max_rows, strict=True))

    def padded(n: int) -> int:
        return min(length for length in ds._lengths if length >= n)

    for ids, following in itertools.pairwise(batches):
        longest = max(padded(lengths[i]) for i in [*ids, following[0]])
        assert len(ids) + 1 > most[longest], "a batch closed with room for the next element"


@_SETTINGS
@given(config=CONFIG, data=st.data())
def test_a_state_restores_exactly_at_a_random_position(config, data):
    if not feasible(config):
        return
    ds, _ = build(config)
    expected = [batch[0].tolist() for batch in ds]
    step = data.draw(st.integers(0, len(expected)))
    iterator = iter(ds)
    for _ in range(step):
        next(iterator)
    state = json.loads(json.dumps(iterator.get_state()))
    assert len(json.dumps(without_fingerprint(state))) < 120, "a state holds positions only"
    fresh = iter(ds)
    fresh.set_state(state)
    assert expected[:step] + [batch[0].tolist() for batch in fresh] == expected


def _contract_pipeline(window: int | None, full_rows: bool) -> TokenBudgetBatchIterDataset:
    rng = np.random.default_rng(3)
    lengths = np.minimum(rng.lognormal(2.5, 0.8, size=150).astype(int), 64).tolist()
    # A counting stage upstream: it must replay exactly with the stage.
    return TokenBudgetBatchIterDataset(
        source(dicts(lengths)).to_iter_dataset().map_with_index(lambda i, e: {**e, "id": i}),
        token_budget=256,
        padded_lengths=[16, 32, 64],
        bucket_window=window,
        full_rows=full_rows,
        sequence_keys=["tokens", "targets"],
    )


# This stage's entries in the checkpoint-conformance run of test_stage_contract.py.
CONFORMANCE = {
    "token_budget_stream_order": (lambda: _contract_pipeline(None, False), None),
    "token_budget_bucketed_full_rows": (lambda: _contract_pipeline(7, True), None),
}


@pytest.mark.parametrize("window", [None, 7])
@pytest.mark.parametrize("full_rows", [False, True])
def test_checkpoint_contract_at_every_step(window, full_rows):
    assert_equal_output_after_checkpoint(_contract_pipeline(window, full_rows), max_steps=300)


def test_dict_elements_get_lengths_masks_and_a_row_mask():
    lengths = [5, 3, 12, 0]
    ds = stage(
        dicts(lengths),
        token_budget=64,
        padded_lengths=[8, 16],
        batch_sizes=[1, 2, 4],
        sequence_keys=["tokens", "targets"],
        padding_value={"tokens": -1, "targets": 7},
    )
    (batch,) = list(ds)
    assert sorted(batch) == sorted(
        [
            "tokens",
            "tokens_lengths",
            "tokens_mask",
            "targets",
            "targets_lengths",
            "targets_mask",
            "id",
            "row_mask",
        ]
    )
    assert batch["tokens"].shape == batch["targets"].shape == (4, 16)
    assert batch["tokens_lengths"].tolist() == [5, 3, 12, 0]
    assert batch["targets_lengths"].tolist() == [2, 1, 6, 0]
    assert batch["tokens"][0].tolist() == [1, 2, 3, 4, 5] + [-1] * 11
    assert batch["targets"][1].tolist() == [-10001] + [7] * 15
    assert batch["id"].tolist() == [0, 1, 2, 3]
    assert batch["row_mask"].tolist() == [True] * 4  # the empty element is a row of length 0
    np.testing.assert_array_equal(
        batch["targets_mask"], np.arange(16) < batch["targets_lengths"][:, None]
    )


def test_padding_rows_of_other_features_are_zero():
    ds = stage(
        dicts([3, 4, 5]),
        token_budget=64,
        padded_lengths=[8],
        batch_sizes=[4, 8],
        sequence_keys=["tokens", "targets"],
    )
    (batch,) = list(ds)
    assert batch["id"].tolist() == [0, 1, 2, 0]
    assert batch["row_mask"].tolist() == [True, True, True, False]
    assert batch["tokens_lengths"].tolist() == [3, 4, 5, 0]


def test_full_rows_gives_one_shape_per_padded_length():
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, 65, size=300).tolist()
    ds = stage(sequences(lengths), token_budget=256, padded_lengths=[16, 32, 64], full_rows=True)
    assert ds.shapes == [(4, 64), (8, 32), (16, 16)]
    assert {batch[0].shape for batch in ds} <= set(ds.shapes)
    check_batches(list(ds), lengths, ds)


def test_bucketing_pads_less_than_stream_order_on_skewed_lengths():
    rng = np.random.default_rng(1)
    lengths = np.clip(rng.lognormal(3.5, 1.0, size=2000).astype(int), 1, 512).tolist()

    def padding(window):
        ds = stage(
            sequences(lengths),
            token_budget=2048,
            padded_lengths=[32, 64, 128, 256, 512],
            bucket_window=window,
        )
        slots = real = 0
        for values, got, _, _ in ds:
            slots += values.size
            real += int(got.sum())
        return 1 - real / slots

    assert padding(256) < padding(None)


def test_defaults_are_powers_of_two():
    ds = stage(sequences([1, 2]), token_budget=100)
    assert ds._lengths == [16, 32, 64]
    assert ds._rows == [1, 2, 4]
    assert ds.max_length == 64
    assert max(rows * length for rows, length in ds.shapes) <= 100


def test_an_element_longer_than_the_longest_padded_length_raises():
    ds = stage(sequences([3, 40, 2]), token_budget=64, padded_lengths=[8, 32])
    with pytest.raises(ValueError, match=r"40 tokens, more than the longest padded length 32"):
        list(ds)


def test_truncate_cuts_long_elements_to_the_longest_padded_length():
    elements = dicts([3, 40, 2])
    ds = stage(
        elements,
        token_budget=64,
        padded_lengths=[8, 32],
        truncate=True,
        sequence_keys=["tokens", "targets"],
    )
    batches = list(ds)
    tokens = np.concatenate([b["tokens"][b["tokens_mask"]] for b in batches])
    assert sorted(tokens.tolist()) == sorted(
        np.concatenate(
            [elements[0]["tokens"], elements[1]["tokens"][:32], elements[2]["tokens"]]
        ).tolist()
    )
    bare = stage(sequences([40]), token_budget=64, padded_lengths=[32], truncate=True)
    (values, lengths, _, _) = next(iter(bare))
    assert lengths.tolist() == [32]
    assert values.shape[1] == 32


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"token_budget": 0}, ValueError, "token_budget"),
        ({"token_budget": 64, "padded_lengths": [16, 8]}, ValueError, "strictly increasing"),
        ({"token_budget": 64, "padded_lengths": []}, ValueError, "empty"),
        ({"token_budget": 64, "padded_lengths": [128]}, ValueError, "exceed `token_budget`"),
        (
            {"token_budget": 64, "padded_lengths": [64], "batch_sizes": [2]},
            ValueError,
            "holds no batch of padded length 64",
        ),
        ({"token_budget": 64, "bucket_window": 0}, ValueError, "bucket_window"),
        ({"token_budget": 64, "sequence_keys": "tokens"}, TypeError, "sequence_keys"),
        ({"token_budget": 64, "sequence_keys": []}, ValueError, "sequence_keys"),
        ({"token_budget": 64, "padding_value": "x"}, TypeError, "padding_value"),
        ({"token_budget": 64, "full_rows": 1}, TypeError, "full_rows"),
        ({"token_budget": 64, "padded_lengths": "abc"}, TypeError, "padded_lengths"),
    ],
)
def test_bad_arguments(kwargs, error, match):
    with pytest.raises(error, match=match):
        stage(sequences([1]), **kwargs)


def test_parent_must_be_a_dataset():
    with pytest.raises(TypeError, match="must be an IterDataset or a MapDataset"):
        TokenBudgetBatchIterDataset([1, 2], token_budget=8)
    # A MapDataset is read with to_iter_dataset().
    out = list(
        TokenBudgetBatchIterDataset(source(sequences([2, 3])), token_budget=16, padded_lengths=[4])
    )
    assert [b[1].tolist() for b in out] == [[2, 3]]


@pytest.mark.parametrize(
    ("elements", "kwargs", "error", "match"),
    [
        ([{"t": np.arange(3)}, {"t": np.arange(3, dtype=np.int8)}], {}, TypeError, "dtype int8"),
        ([{"t": np.arange(3)}, {"t": np.arange(3), "u": 1}], {}, ValueError, "same features"),
        ([{"t": np.arange(3)}, np.arange(3)], {}, TypeError, "one structure"),
        ([np.arange(3), {"t": np.arange(3)}], {}, TypeError, "after bare-array"),
        ([{"t": 3}], {}, ValueError, "scalar"),
        ([{"t": np.arange(3), "t_mask": 1}], {"sequence_keys": ["t"]}, ValueError, "rename"),
        ([{"t": np.arange(3)}], {"sequence_keys": ["s"]}, ValueError, "lacks"),
        ([{"t": np.array(["a"])}], {}, TypeError, "numeric"),
        ([{"t": np.arange(3)}], {"padding_value": {"u": 1}}, ValueError, "not sequence"),
        ([np.arange(3, dtype=np.uint8)], {"padding_value": 300}, ValueError, "does not fit"),
        (
            [{"t": np.arange(3), "x": np.arange(2)}, {"t": np.arange(3), "x": np.arange(3)}],
            {"sequence_keys": ["t"]},
            ValueError,
            "list it in `sequence_keys`",
        ),
    ],
)
def test_bad_elements_raise_naming_the_fix(elements, kwargs, error, match):
    ds = stage(elements, token_budget=64, padded_lengths=[8], **kwargs)
    with pytest.raises(error, match=match):
        list(ds)


def test_states_of_another_pipeline_raise():
    ds = stage(sequences([5] * 40), token_budget=64, padded_lengths=[8], bucket_window=10)
    iterator = iter(ds)
    next(iterator)
    state = iterator.get_state()
    short = stage(sequences([5] * 3), token_budget=64, padded_lengths=[8], bucket_window=10)
    with pytest.raises(ValueError, match="parent ended after 3"):
        iter(short).set_state(state)
    with pytest.raises(ValueError, match="exceeds bucket_window"):
        iter(ds).set_state({**state, "consumed": 11})
    with pytest.raises(ValueError, match="exceeds the"):
        iter(ds).set_state({**state, "consumed": 10, "emitted": 9})
    with pytest.raises(ValueError, match="expected the keys"):
        iter(ds).set_state({"parent": state["parent"]})
    in_order = stage(sequences([5] * 40), token_budget=64, padded_lengths=[8])
    with pytest.raises(ValueError, match="gives 0 batches, but the state says 1"):
        iter(in_order).set_state({**state, "consumed": 1, "emitted": 1})


def test_an_empty_parent_gives_nothing():
    assert list(stage([], token_budget=64)) == []
    assert list(stage([], token_budget=64, bucket_window=4)) == []


def test_sequence_features_with_trailing_dimensions_pad_along_the_first_axis():
    rng = np.random.default_rng(4)
    elements = [{"frames": rng.normal(size=(n, 3)).astype(np.float32)} for n in (2, 7, 5)]
    ds = stage(elements, token_budget=64, padded_lengths=[4, 8], padding_value=-1.0)
    (batch,) = list(ds)
    assert batch["frames"].shape == (4, 8, 3)
    assert batch["frames"].dtype == np.float32
    assert batch["frames_mask"].shape == (4, 8)
    for row, element in enumerate(elements):
        n = len(element["frames"])
        np.testing.assert_array_equal(batch["frames"][row, :n], element["frames"])
        assert (batch["frames"][row, n:] == -1.0).all()
    bad = stage([*elements, {"frames": np.zeros((2, 4), np.float32)}], token_budget=64)
    with pytest.raises(TypeError, match=r"shape \(2, 4\)"):
        list(bad)
