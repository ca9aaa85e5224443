"""PackAndBatchOperation: Grain 0.2.18's outputs on the same inputs, and exact loader states.

The expected arrays below were printed by Grain 0.2.18's
``grain.experimental.PackAndBatchOperation`` (run as a black box) for the same
records: first fit within the batch, a batch closed by the first element that
fits no row, int32 segment ids from 1 and positions from 0, zero padding, the
data's dtype kept, the last placed record's metadata without `record_key`.
"""

import json

import numpy as np
import pytest

from grain_index import IndexSampler, Record, RecordMetadata
from grain_mp import DataLoader, PackAndBatchOperation


def _run(op, elements):
    records = [Record(RecordMetadata(index=i, record_key=i), e) for i, e in enumerate(elements)]
    return list(op(iter(records)))


def _as_lists(record):
    return [{k: (v.dtype, v.shape, v.tolist()) for k, v in part.items()} for part in record.data]


def test_first_fit_within_a_batch_matches_grain():
    lengths = [3, 2, 4, 5, 1, 6, 2]
    elements = [{"x": np.arange(1, n + 1, dtype=np.int32) * (i + 1)} for i, n in enumerate(lengths)]
    out = _run(PackAndBatchOperation(length_struct={"x": 6}, batch_size=2), elements)
    assert [r.metadata for r in out] == [RecordMetadata(index=i) for i in (2, 5, 6)]
    i32 = np.dtype(np.int32)
    assert _as_lists(out[0]) == [
        {"x": (i32, (2, 6), [[1, 2, 3, 2, 4, 0], [3, 6, 9, 12, 0, 0]])},
        {"x": (i32, (2, 6), [[1, 1, 1, 2, 2, 0], [1, 1, 1, 1, 0, 0]])},
        {"x": (i32, (2, 6), [[0, 1, 2, 0, 1, 0], [0, 1, 2, 3, 0, 0]])},
    ]
    assert _as_lists(out[1]) == [
        {"x": (i32, (2, 6), [[4, 8, 12, 16, 20, 5], [6, 12, 18, 24, 30, 36]])},
        {"x": (i32, (2, 6), [[1, 1, 1, 1, 1, 2], [1, 1, 1, 1, 1, 1]])},
        {"x": (i32, (2, 6), [[0, 1, 2, 3, 4, 0], [0, 1, 2, 3, 4, 5]])},
    ]
    assert _as_lists(out[2])[1] == {"x": (i32, (2, 6), [[1, 1, 0, 0, 0, 0], [0] * 6])}


def test_every_feature_must_fit_and_keeps_its_dtype():
    elements = [
        {"a": np.ones(2, np.float32), "b": np.full(3, 2.0)},
        {"a": np.ones(2, np.float32) * 3, "b": np.ones(1)},
        {"a": np.ones(1, np.float32) * 4, "b": np.ones(1)},
    ]
    (out,) = _run(PackAndBatchOperation({"a": 4, "b": 3}, 2), elements)
    data, segments, positions = out.data
    assert data["a"].dtype == np.float32
    assert data["b"].dtype == np.float64
    assert data["a"].tolist() == [[1, 1, 0, 0], [3, 3, 4, 0]]
    assert data["b"].tolist() == [[2, 2, 2], [1, 1, 0]]
    assert segments["a"].tolist() == [[1, 1, 0, 0], [1, 1, 2, 0]]
    assert segments["b"].tolist() == [[1, 1, 1], [1, 2, 0]]
    assert positions["b"].tolist() == [[0, 1, 2], [0, 0, 0]]


def test_max_sequences_per_bin_and_trailing_dimensions():
    ones = [{"a": np.arange(1, 2)} for _ in range(5)]
    out = _run(PackAndBatchOperation({"a": 10}, 2, max_sequences_per_bin=2), ones)
    assert [r.metadata.index for r in out] == [3, 4]
    assert out[0].data[1]["a"][:, :3].tolist() == [[1, 2, 0], [1, 2, 0]]
    wide = [{"a": np.ones((2, 3), np.int64) * (i + 1)} for i in range(2)]
    (packed,) = _run(PackAndBatchOperation({"a": 4}, 1), wide)
    assert packed.data[0]["a"].shape == (1, 4, 3)
    assert packed.data[1]["a"].tolist() == [[1, 1, 2, 2]]
    assert packed.data[2]["a"].tolist() == [[0, 1, 0, 1]]


def test_bare_arrays_tuples_empty_elements_and_no_input():
    (out,) = _run(PackAndBatchOperation(5, 2), [np.arange(1, 3), np.arange(1, 4)])
    assert out.data[0].tolist() == [[1, 2, 1, 2, 3], [0] * 5]
    assert out.data[1].tolist() == [[1, 1, 2, 2, 2], [0] * 5]
    (pair,) = _run(PackAndBatchOperation((3, 2), 1), [(np.arange(1, 3), np.arange(1, 2))])
    assert [part.tolist() for part in pair.data[0]] == [[[1, 2, 0]], [[1, 0]]]
    (empty_first,) = _run(
        PackAndBatchOperation({"a": 4}, 1),
        [{"a": np.array([], np.int32)}, {"a": np.array([3], np.int32)}],
    )
    assert empty_first.data[1]["a"].tolist() == [[2, 0, 0, 0]]  # the empty one was segment 1
    assert _run(PackAndBatchOperation({"a": 4}, 2), []) == []  # Grain fails here


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda: PackAndBatchOperation({"a": 4}, 0), "`batch_size`"),
        (lambda: PackAndBatchOperation({"a": 0}, 1), "`length_struct`"),
        (lambda: PackAndBatchOperation({"a": 4}, 1, max_sequences_per_bin=0), "max_sequences"),
        (lambda: _run(PackAndBatchOperation({"a": 4}, 2), [{"a": np.arange(6)}]), "truncate"),
        (lambda: _run(PackAndBatchOperation({"a": 4}, 2), [{"b": np.arange(2)}]), "structure"),
        (lambda: _run(PackAndBatchOperation({"a": 4}, 2), [{"a": 3}]), "first"),
    ],
)
def test_bad_input_is_explained(make, match):
    with pytest.raises(ValueError, match=match):
        make()


class Tokens:
    """Record k: a sequence of 1 + (k * 7) % 5 tokens, all equal to k + 1."""

    def __len__(self):
        return 50

    def __getitem__(self, key):
        return {"tokens": np.full(1 + (key * 7) % 5, key + 1, np.int32)}


def _loader(workers=0):
    return DataLoader(
        data_source=Tokens(),
        sampler=IndexSampler(50, shuffle=True, num_epochs=2, seed=1),
        operations=[PackAndBatchOperation({"tokens": 8}, batch_size=3)],
        worker_count=workers,
    )


def _plain(batch):
    return [{k: v.tolist() for k, v in part.items()} for part in batch]


@pytest.mark.timeout(60)
def test_a_packing_loader_loses_nothing_and_restores_exactly():
    out = [_plain(batch) for batch in _loader()]
    tokens = [t for data, _, _ in out for row in data["tokens"] for t in row if t]
    assert sorted(set(tokens)) == list(range(1, 51))
    assert len(tokens) == 2 * sum(1 + (k * 7) % 5 for k in range(50))
    assert [_plain(batch) for batch in _loader(2)] == out
    for point in range(len(out) + 1):
        it = iter(_loader())
        head = [_plain(next(it)) for _ in range(point)]
        state = it.get_state()
        record_stage = json.loads(state)["pipeline"]
        assert record_stage["replay"] <= 1, "packing restores after at most one batch"
        resumed = iter(_loader())
        resumed.set_state(state)
        assert head + [_plain(b) for b in resumed] == out, f"restored at {point}"
