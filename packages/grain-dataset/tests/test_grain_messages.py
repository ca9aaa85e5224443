"""Errors open with (or contain) Grain's wording, which clients match with `assertRaisesRegex`.

Each case is an error Grain 0.2.18 raises with the same exception type (or one
ours subclasses); the pattern is Grain's message with this call's values,
escaped. Ours follows it with its own explanation and fix.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from grain_dataset import (
    Batch,
    BestFitPackIterDataset,
    BOSHandling,
    ConcatThenSplitIterDataset,
    DatasetOptions,
    FirstFitPackIterDataset,
    FlatMapMapDataset,
    FlatMapTransform,
    LimitIterDataset,
    MapDataset,
    ReadOptions,
    RebatchIterDataset,
    RepeatIterDataset,
    ThreadPrefetchIterDataset,
    WithOptionsIterDataset,
    ZipIterDataset,
    ZipMapDataset,
    batch_and_pad,
    config,
    set_next_index,
)

M = MapDataset


class _Split(FlatMapTransform):
    max_fan_out = 1

    def flat_map(self, element):
        return [element, element]


def _it(elements):
    return M.source(elements).to_iter_dataset()


OPENS_WITH = [
    # Batches of elements of different structures.
    (
        lambda: M.source([{"a": 1}, {"b": 2}]).batch(2)[0],
        ValueError,
        "Expected all input elements to have the same structure but got:\n'list<dict>[2]'",
    ),
    (
        lambda: list(_it([np.zeros(2), np.zeros(3)]).batch(2)),
        ValueError,
        "Expected all input elements to have the same structure but got:\n"
        "'list<ndarray>[unknown shape]'",
    ),
    (
        lambda: M.source([(1, 2), (1, 2, 3)]).batch(2)[0],
        ValueError,
        "Expected all input elements to have the same structure but got:\n"
        "'list<tuple>[unknown shape]'",
    ),
    # Batch sizes.
    (lambda: M.range(4).batch(0), ValueError, "batch_size must be positive."),
    (lambda: M.range(4).to_iter_dataset().batch(-1), ValueError, "batch_size must be positive."),
    (lambda: Batch(batch_size=0), ValueError, "batch_size must be positive."),
    (
        lambda: RebatchIterDataset(M.range(4).batch(1).to_iter_dataset(), batch_size=0),
        ValueError,
        "batch_size must be positive.",
    ),
    (
        lambda: M.range(4).filter(lambda x: True).batch(2),
        ValueError,
        "`MapDataset.batch` can not follow `MapDataset.filter` because `filter` can discard "
        "elements. Convert `MapDataset` to `IterDataset` with `to_iter_dataset()` before "
        "calling `batch`.",
    ),
    (lambda: batch_and_pad([1, 2, 3], batch_size=2), ValueError, "Cannot batch 3 values to 2."),
    (lambda: batch_and_pad([], batch_size=2), ValueError, "Cannot batch 0 values."),
    (lambda: batch_and_pad([1], batch_size=0), ValueError, "Cannot batch 1 values to 0."),
    # Seeds.
    (
        lambda: M.range(4).shuffle(seed=-1),
        ValueError,
        "Seed must be an integer between 0 and 2**32-1 (got seed=-1).",
    ),
    (
        lambda: M.range(4).shuffle(),
        ValueError,
        "`shuffle` requires a seed. Please provide it with `ds.seed(seed)`",
    ),
    (
        lambda: M.range(4).random_map(lambda x, rng: x),
        ValueError,
        "`random_map` requires a seed. Please either provide it with `ds.seed(seed)` before any "
        "random transformations or pass it directly with `ds.random_map(transform, seed=seed)`.",
    ),
    # Slices, repeat, concatenate, mix, zip.
    (lambda: M.range(5)[::0], ValueError, "slice step cannot be zero"),
    (lambda: M.range(5).slice(3), ValueError, "sl is not a slice: <class 'int'>"),
    (lambda: M.range(3).repeat(0), ValueError, "num_epochs must be positive, but got 0."),
    (
        lambda: RepeatIterDataset(M.range(3).to_iter_dataset(), num_epochs=-1),
        ValueError,
        "num_epochs must be positive, but got -1.",
    ),
    (
        lambda: M.range(3).repeat().repeat(),
        ValueError,
        "Repeating already infinite dataset RepeatMapDataset(num_epochs=None) does nothing.",
    ),
    (
        lambda: M.concatenate([M.range(3).repeat(), M.range(2)]),
        ValueError,
        "Cannot concatenate infinite datasets. RepeatMapDataset(num_epochs=None) is infinite.",
    ),
    (
        lambda: M.mix([M.range(3), M.range(3)], [1, 0]),
        ValueError,
        "Must specify all non-zero proportions for mixing.",
    ),
    (
        lambda: M.mix([M.range(0), M.range(0)]),
        ValueError,
        "All datasets must have positive length for mixing, but dataset(s) at index 0 "
        "(RangeMapDataset(start=0, stop=0, step=1)), index 1 (RangeMapDataset(start=0, stop=0, "
        "step=1)) have length 0.",
    ),
    (
        lambda: ZipMapDataset([M.range(2), M.range(3)]),
        ValueError,
        "All parents must have the same length.",
    ),
    (lambda: ZipMapDataset([]), ValueError, "At least one parent must be provided."),
    (
        lambda: list(ZipIterDataset([_it([1, 2]), _it([1, 2, 3])], strict=True)),
        ValueError,
        "ZipIterDataset argument 2 is longer than argument 1",
    ),
    (
        lambda: list(ZipIterDataset([_it([1, 2, 3]), _it([1, 2])], strict=True)),
        ValueError,
        "ZipIterDataset argument 2 is shorter than argument 1",
    ),
    # Transforms.
    (lambda: M.range(3).apply(5), NotImplementedError, "Transformation type: 5 is not supported."),
    (
        lambda: FlatMapMapDataset(M.range(3), _Split())[0],
        ValueError,
        "The user-provided FlatMapTransform has a split that exceeds specified max fan-out size.",
    ),
    # Options and the experimental stages.
    (lambda: ReadOptions(num_threads=-1), ValueError, "num_threads must be non-negative, got -1"),
    (
        lambda: ReadOptions(prefetch_buffer_size=-1),
        ValueError,
        "prefetch_buffer_size must be non-negative, got -1",
    ),
    (
        lambda: ThreadPrefetchIterDataset(M.range(3).to_iter_dataset(), prefetch_buffer_size=-1),
        ValueError,
        "`prefetch_buffer_size` must be greater than or equal to 0, got -1.",
    ),
    (
        lambda: LimitIterDataset(M.range(3).to_iter_dataset(), count=0),
        ValueError,
        "Count must be a non-negative integer. Got 0",
    ),
    (
        lambda: FirstFitPackIterDataset(
            _it([{"t": np.arange(2)}]),
            length_struct={"t": 4},
            num_packing_bins=2,
            max_sequences_per_bin=0,
        ),
        ValueError,
        "If specified, `max_sequences_per_bin` must be a positive integer, but got 0.",
    ),
    (
        lambda: list(
            FirstFitPackIterDataset(
                _it([{"tokens": np.arange(9)}]), length_struct={"tokens": 5}, num_packing_bins=2
            )
        ),
        ValueError,
        "Inputs to PackedBatch must be truncated to max length. Exceeds: (feature_path, "
        "feature_length, max_length) = [((DictKey(key='tokens'),), 9, 5)]",
    ),
    (
        lambda: list(
            BestFitPackIterDataset(
                _it([{"tokens": np.arange(7)}]), length_struct={"tokens": 5}, num_packing_bins=2
            )
        ),
        ValueError,
        "Inputs to packer must be truncated to max length. Exceeds: (feature_path, "
        "feature_length, max_length) = [((DictKey(key='tokens'),), 7, 5)]",
    ),
    (
        lambda: list(
            ConcatThenSplitIterDataset(
                _it([{"tokens": np.arange(2, dtype=np.int32)}]), length_struct={"other": 4}
            )
        ),
        ValueError,
        "Parent element has structure {'tokens': 'int32[2]'} but target sequence length is "
        "{'other': 4}. There must be a sequence length for each feature.",
    ),
    (
        lambda: list(ConcatThenSplitIterDataset(_it([0, 1, 2]), length_struct={"tokens": 4})),
        ValueError,
        "Parent elements must be unnested dictionaries but got int[].",
    ),
    (
        lambda: ConcatThenSplitIterDataset(
            _it([{"tokens": np.arange(2)}]),
            length_struct={"tokens": 4},
            bos_handling=BOSHandling.REPLACE_FIRST_TOKEN_WITH_BOS,
        ),
        ValueError,
        "bos_token_id must be set if bos_handling is BOSHandling.REPLACE_FIRST_TOKEN_WITH_BOS.",
    ),
    (lambda: config.update("no_such_option", 1), ValueError, "Unrecognized config option: "),
]


@pytest.mark.parametrize(("call", "error", "grain"), OPENS_WITH)
def test_message_opens_with_grains_wording(call, error, grain):
    with pytest.raises(error, match="^" + re.escape(grain)) as info:
        call()
    # Ours adds its explanation after Grain's wording.
    assert len(str(info.value)) > len(grain)


def test_unknown_config_option_is_named_unquoted_as_grain_does():
    with pytest.raises(ValueError, match=r"^Unrecognized config option: no_such_option\. "):
        config.update("no_such_option", 1)


@pytest.mark.timeout(60)
def test_closed_iterator_says_trying_to_advance_a_closed_iterator():
    for ds in (M.range(5).to_iter_dataset(), M.range(5).to_iter_dataset().batch(2)):
        it = iter(ds)
        next(it)
        it.close()
        with pytest.raises(ValueError, match=r"^Trying to advance a closed iterator: '.+'\."):
            next(it)


@pytest.mark.timeout(60)
def test_closed_thread_prefetch_says_attempting_to_use_a_closed_iterator():
    it = iter(ThreadPrefetchIterDataset(M.range(5).to_iter_dataset(), prefetch_buffer_size=2))
    next(it)
    it.close()
    with pytest.raises(ValueError, match=r"^Attempting to use a closed iterator\."):
        next(it)


def test_next_index_past_the_end_has_grains_wording():
    grain = "Checkpoint `next_index` 10 is out of range for dataset of length 3."
    it = iter(M.range(3).to_iter_dataset())
    with pytest.raises(IndexError, match="^" + re.escape(grain)):
        it.set_state({"next_index": 10})
    with pytest.raises(IndexError, match="^" + re.escape(grain)):
        set_next_index(iter(M.range(3).to_iter_dataset()), 10)


def test_negative_next_index_has_grains_opening():
    it = iter(M.range(3).to_iter_dataset())
    with pytest.raises(IndexError, match=r"^Checkpoint `next_index` -1 is out of range"):
        it.set_state({"next_index": -1})
    with pytest.raises(IndexError, match=r"^Checkpoint `next_index` -1 is out of range"):
        set_next_index(iter(M.range(3).to_iter_dataset()), -1)


def test_filter_threshold_has_grains_format():
    ds = WithOptionsIterDataset(
        M.range(2000).to_iter_dataset().filter(lambda x: x % 10 == 0),
        DatasetOptions(filter_raise_threshold_ratio=0.5),
    )
    pattern = (
        r"^Transformation .+ skipped \d+\.\d\d % of the last seen \d+ elements\. Please check "
        r"the filtering logic\. If this is intended, consider pre-filtering the input dataset "
        r"before training\. To disable this check, set "
        r"`grain\.experimental\.DatasetOptions\.filter_raise_threshold_ratio` used in "
        r"`WithOptionsIterDataset` to `None`\."
    )
    with pytest.raises(ValueError, match=pattern):
        list(ds)
