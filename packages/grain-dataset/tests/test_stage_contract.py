"""Every stage class of the workspace against the declared stage contract.

The contract is grain_dataset._common._contract: the traits other modules read off a
stage or an iterator, each with its default. This test imports every module of
the packages that define stages, enumerates the subclasses of the bases, and
checks for each class that

- its traits hold values of the declared kinds and agree with each other
  (a position kind comes with its position-wise work, an index-mapping stage
  maps indices, ...);
- the checkpoint-conformance helper runs over it: a `CONFORMANCE` table (the
  one below, or one in the stage's own test module, which this test collects
  from every packages/*/tests/test_*.py) builds a pipeline that contains it;
  the test looks the class up in the built pipeline and its iterators, and
  runs the helper over every pipeline of every table;
- if it is public (named in grain_dataset.stages, the one list of public
  stages), it is exported by grain_dataset and grain.experimental;

and that no module of the packages looks a trait up by name (getattr, hasattr
or __dict__ with the trait's name): callers read the declared attribute.
"""

from __future__ import annotations

import importlib
import importlib.util
import pathlib
import pkgutil
import re
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

import grain
import grain_dataset
import grain_dataset.stages
import grain_mp
from grain_dataset import DatasetIterator, IterDataset, MapDataset
from grain_dataset.extension import IteratorTraits, IterStageTraits, MapTraits, StageTraits

pytestmark = pytest.mark.timeout(300)

_PACKAGES = ("grain_dataset", "grain_mp", "grain_jax", "grain")
_ROOT = pathlib.Path(__file__).resolve().parents[3]


def _import_all() -> None:
    for name in _PACKAGES:
        try:
            package = importlib.import_module(name)
        except ImportError:  # grain_jax without jax
            continue
        for info in pkgutil.walk_packages(package.__path__, f"{name}."):
            try:
                importlib.import_module(info.name)
            except ImportError:
                continue


def _subclasses(base: type) -> Iterator[type]:
    pending = [base]
    while pending:
        cls = pending.pop()
        for sub in cls.__subclasses__():
            pending.append(sub)
            yield sub


def _ours(cls: type) -> bool:
    return cls.__module__.split(".")[0] in _PACKAGES


def stage_classes() -> list[type]:
    _import_all()
    bases = (MapDataset, IterDataset, DatasetIterator, IteratorTraits)
    found = {cls for base in bases for cls in _subclasses(base) if _ours(cls)}
    return sorted(found, key=lambda cls: (cls.__module__, cls.__qualname__))


STAGES = stage_classes()


def _overrides(cls: type, name: str, traits: type) -> bool:
    return getattr(cls, name) is not getattr(traits, name)


# -- the traits ---------------------------------------------------------------------------


@pytest.mark.parametrize("cls", STAGES, ids=lambda cls: cls.__qualname__)
def test_traits_hold_declared_values_that_agree(cls):
    if issubclass(cls, StageTraits):
        assert type(cls._order_as_grain) is bool
        assert type(cls._starts_worker_processes) is bool
        assert callable(cls._fingerprint_token)
        assert callable(cls._fingerprint_parents)
    if issubclass(cls, MapTraits):
        assert cls.discards_elements is None or (
            isinstance(cls.discards_elements, str) and cls.discards_elements
        )
        assert type(cls._maps_indices) is bool
        if cls._maps_indices:  # a stage that maps indices says how
            assert _overrides(cls, "_parent_indices", MapTraits), cls
    if issubclass(cls, IterStageTraits):
        assert cls._position_kind in (None, "map", "filter", "indexed", "same")
        if cls._position_kind in ("map", "filter", "indexed"):
            assert _overrides(cls, "_at_position", IterStageTraits), cls
        assert type(cls._positional_chain) is bool
        if cls._positional_chain:
            assert not cls._many_parents
            # Not inherited: the class itself declares it (see IterStageTraits).
            assert cls.__dict__.get("_positional_chain") is True
        if cls._position_kind is not None:
            assert cls._positional_chain, f"{cls} works by position but the split stops at it"
    if issubclass(cls, IteratorTraits):
        assert isinstance(cls._MADE_BY, str)
        assert cls._MADE_BY
        assert cls._closed_wording is None or isinstance(cls._closed_wording, str)
        for flag in (
            "_STATS_HIDDEN",
            "_STATS_ASYNC",
            "_STATS_READERS_UNTRACKED",
            "_STATS_SELF_COUNTED",
            "_reads_ahead",
            "_restores_from_all_shards",
        ):
            assert type(getattr(cls, flag)) is bool, (cls, flag)
        if cls._STATS_SELF_COUNTED:
            assert _overrides(cls, "_stats_counts", IteratorTraits), cls
        if cls._reads_ahead:
            assert _overrides(cls, "_read_ahead_step", IteratorTraits), cls


def test_the_contract_lists_every_trait_its_classes_declare():
    from grain_dataset._common._contract import TRAITS

    for traits, names in TRAITS.items():
        own = {name for name in vars(traits) if not name.startswith("__")}
        assert own == set(names), traits


def test_positional_traits_are_not_inherited_by_a_subclass():
    class Mine(grain_dataset.LimitIterDataset):
        pass

    assert grain_dataset.LimitIterDataset._positional_chain
    assert not Mine._positional_chain  # it may change __next__: the plain pipeline runs it


def _trait_names() -> set[str]:
    from grain_dataset._common._contract import TRAITS

    return {name for names in TRAITS.values() for name in names}


def test_no_module_looks_a_trait_up_by_name():
    names = "|".join(sorted(_trait_names()))
    lookup = re.compile(
        rf"""(getattr|hasattr)\([^()]*,\s*["']({names})["']"""
        rf"""|__dict__(\.get\(|\[)\s*["']({names})["']"""
    )
    offenders = []
    for path in sorted(_ROOT.glob("packages/*/src/**/*.py")):
        if path.name == "_contract.py":  # where the traits are declared
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if lookup.search(line):
                offenders.append(f"{path.relative_to(_ROOT)}:{number}: {line.strip()}")
    assert offenders == []


# -- exports ------------------------------------------------------------------------------


def test_public_stages_are_stage_classes_exported_by_every_namespace():
    public = grain_dataset.stages.__all__
    assert public == sorted(public)
    for name in public:
        cls = getattr(grain_dataset.stages, name)
        assert cls in STAGES, name
        assert getattr(grain_dataset, name) is cls
        assert getattr(grain.experimental, name) is cls
        assert name in grain_dataset.__all__
        assert name in grain.experimental.__all__


def test_every_exported_stage_class_is_listed_as_public():
    listed = set(grain_dataset.stages.__all__)
    for module in (grain_dataset, grain.experimental):
        for name in module.__all__:
            value = getattr(module, name)
            if value in STAGES and value not in (MapDataset, IterDataset, DatasetIterator):
                assert name in listed or _ours_outside_dataset(value), (module.__name__, name)


def _ours_outside_dataset(cls: type) -> bool:
    return not cls.__module__.startswith("grain_dataset")


# -- conformance ----------------------------------------------------------------------------


def _square(x: Any) -> Any:
    return x * x


def _draw(x: Any, rng: np.random.Generator) -> Any:
    return (x, int(rng.integers(1000)))


def _odd(x: Any) -> bool:
    return x % 2 == 1


def _pairs(x: Any) -> Any:
    return [x, x + 100]


class _TwoEach(grain_dataset.FlatMapTransform):
    max_fan_out = 2

    def flat_map(self, element: Any) -> Any:
        return [element, -element]


class _Every3rd(grain_dataset.DatasetSelectionMap):
    def __len__(self) -> int:
        return 12

    def __getitem__(self, index: int) -> tuple[int, int]:
        return (int(index % 3 == 0), index // 3 if index % 3 == 0 else index - index // 3 - 1)


def _tokens(n: int) -> MapDataset[Any]:
    return MapDataset.range(n).map(lambda i: {"t": np.arange(i % 4 + 1, dtype=np.int32)})


def _mp(ds: IterDataset[Any]) -> IterDataset[Any]:
    return ds.mp_prefetch(grain_mp.MultiprocessingOptions(num_workers=1))


def _read(ds: MapDataset[Any]) -> IterDataset[Any]:
    return ds.to_iter_dataset(grain_dataset.ReadOptions(num_threads=2, prefetch_buffer_size=4))


M = MapDataset
# Each entry: a small pipeline, and the restore steps (None: every step).
CONFORMANCE: dict[str, tuple[Callable[[], Any], list[int] | None]] = {
    "map_stages": (
        lambda: (
            M.range(10)
            .seed(1)
            .shuffle()
            .map(_square)
            .map_with_index(lambda i, x: i + x)
            .random_map(_draw)
            .repeat(2)[1:17]
            .batch(2)
            .filter(lambda b: b[0][0] % 3)
        ),
        None,
    ),
    "map_mix_select_concat": (
        lambda: M.concatenate(
            [
                M.mix([M.range(4), M.range(10, 14)]),
                M.select_from_datasets([M.range(4), M.range(20, 28)], _Every3rd()),
            ]
        ),
        None,
    ),
    "source_zip_cache": (
        lambda: grain_dataset.ZipMapDataset(
            [grain_dataset.CachedMapDataset(M.source([1, 2, 3, 4])), M.range(4)]
        ),
        None,
    ),
    "window_shuffle_flat_map": (
        lambda: grain_dataset.FlatMapMapDataset(
            grain_dataset.WindowShuffleMapDataset(M.range(6), window_size=3, seed=1), _TwoEach()
        ),
        None,
    ),
    "iter_stages": (
        lambda: (
            _read(M.range(12))
            .seed(2)
            .map(_square)
            .filter(_odd)
            .map_with_index(lambda i, x: (i, x))
            .random_map(_draw)
            .batch(2)
        ),
        None,
    ),
    "iter_more": (
        lambda: grain_dataset.LimitIterDataset(
            grain_dataset.RebatchIterDataset(
                grain_dataset.RepeatIterDataset(
                    grain_dataset.WindowShuffleIterDataset(
                        grain_dataset.FlatMapIterDataset(M.range(5).to_iter_dataset(), _TwoEach()),
                        window_size=3,
                        seed=0,
                    ),
                    num_epochs=2,
                ).batch(3),
                batch_size=2,
            ),
            count=5,
        ),
        None,
    ),
    "iter_mix_zip_options": (
        lambda: grain_dataset.WithOptionsIterDataset(
            grain_dataset.ZipIterDataset(
                [
                    IterDataset.mix(
                        [M.range(6).to_iter_dataset(), M.range(10, 16).to_iter_dataset()]
                    ),
                    grain_dataset.CacheIterDataset(M.range(12).to_iter_dataset()),
                ]
            ),
            grain_dataset.DatasetOptions(filter_warn_threshold_ratio=None),
        ),
        None,
    ),
    "interleave_thread_prefetch": (
        lambda: grain_dataset.ThreadPrefetchIterDataset(
            grain_dataset.InterleaveIterDataset(
                [M.range(4).to_iter_dataset(), M.range(10, 13).to_iter_dataset()], cycle_length=2
            ),
            prefetch_buffer_size=2,
        ),
        None,
    ),
    "packing": (
        lambda: grain_dataset.ConcatThenSplitIterDataset(
            grain_dataset.FirstFitPackIterDataset(
                grain_dataset.BestFitPackIterDataset(
                    _tokens(10).to_iter_dataset(), length_struct={"t": 4}, num_packing_bins=2
                ).map(lambda packed: {"t": packed["t"]}),
                length_struct={"t": 8},
                num_packing_bins=2,
            ).map(lambda packed: {"t": packed["t"]}),
            length_struct={"t": 5},
        ),
        None,
    ),
    # Worker processes: a fresh iterator starts one, so a few steps only.
    "mp_prefetch_positional": (lambda: _mp(_read(M.range(12)).map(_square)), [0, 1, 5, 12]),
    "mp_prefetch_plain": (
        # A mixture is not position-wise: each worker runs its slice of the pipeline.
        lambda: _mp(IterDataset.mix([_read(M.range(6)), _read(M.range(10, 16))])),
        [0, 3, 8],
    ),
    "multithread_prefetch": (
        lambda: grain.experimental.multithread_prefetch(
            _read(M.range(10)).map(_square), num_threads=2, buffer_size=2
        ),
        [0, 1, 4, 10],
    ),
}


def _tables() -> dict[str, tuple[Callable[[], Any], list[int] | None]]:
    """This module's CONFORMANCE and those of the stages' own test modules."""
    tables = {f"stage_contract/{name}": entry for name, entry in CONFORMANCE.items()}
    for path in sorted(_ROOT.glob("packages/*/tests/test_*.py")):
        if path == pathlib.Path(__file__).resolve() or "\nCONFORMANCE" not in path.read_text():
            continue
        name = f"_conformance_of_{path.parent.parent.name}_{path.stem}".replace("-", "_")
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None
        assert spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        for key, entry in module.CONFORMANCE.items():
            tables[f"{path.stem}/{key}"] = entry
    return tables


TABLES = _tables()


def _graph(root: Any) -> Iterator[Any]:
    """`root` and the datasets and iterators it holds, each once."""
    seen: set[int] = set()
    pending = [root]
    while pending:
        node = pending.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, list | tuple):
            pending.extend(node)
            continue
        if not isinstance(node, MapDataset | IterDataset | DatasetIterator | IteratorTraits):
            continue
        yield node
        pending.extend(vars(node).values())


# Classes the table does not build, each with where its checkpoints are checked instead.
ELSEWHERE = {
    "DatasetIterator": "the base of every iterator",
    "_ElementwiseIterator": "a base of the map, filter, ... iterators",
    "_CountingIterator": "a base of the map_with_index and random_map iterators",
    "MapStage": "a base: every concrete MapDataset stage",
    "IterStage": "a base: every concrete IterDataset stage",
    "StageIterator": "a base: every concrete IterDataset stage's iterator",
    "_ElementwiseIterDataset": "a base of map, filter, map_with_index, random_map",
    "_PackIterDataset": "the base of the two packing stages",
    "_ElementwiseMapDataset": "a base of the MapDataset map stages",
    "RoundRobinIterator": "the base of mp_prefetch's per-worker iterator",
    "ElasticIterator": "built over a dataset, not by iter(): grain_mp tests/test_elastic*.py",
    "DataLoaderIterator": "the DataLoader's: grain_mp tests/test_data_loader*.py",
    "SamplerSourceMapDataset": "the DataLoader's pipeline: grain_mp tests/test_data_loader*.py",
    "RecordOperationIterDataset": "DataLoader operations: grain_mp tests/test_operations*.py",
    "_RecordOperationIterator": "DataLoader operations: grain_mp tests/test_operations*.py",
    "_BlockUnits": "mp_prefetch with a batch in its workers: grain_mp tests/test_mp_prefetch.py",
    "ParquetIterDataset": "needs a file: grain_dataset tests/test_file_iter_datasets.py",
    "_ParquetIterator": "needs a file: grain_dataset tests/test_file_iter_datasets.py",
    "TFRecordIterDataset": "needs a file: grain_dataset tests/test_file_iter_datasets.py",
    "_TFRecordIterator": "needs a file: grain_dataset tests/test_file_iter_datasets.py",
    "_TFRecordDatasetIterator": "grain's TFRecord reader: grain tests/test_grain_api.py",
    "RecordRangeIterDataset": "the base of the Sharded* readers below",
    "ShardedParquetIterDataset": "needs files: tests/test_record_range_datasets.py",
    "ShardedTFRecordIterDataset": "needs files: tests/test_record_range_datasets.py",
    "ShardedJsonLinesIterDataset": "needs files: tests/test_record_range_datasets.py",
    "_RecordRangeIterator": "needs files: tests/test_record_range_datasets.py",
    "HFIterDataset": "needs a HF dataset (state None before the first element): "
    "tests/test_hf_iter_dataset.py",
    "_HFIterator": "needs a HF dataset: tests/test_hf_iter_dataset.py",
    "_CheckpointableParent": "a plain parent: tests/test_thread_prefetch_plain_parent.py",
    "_ReiterableIterator": "interleave over iterables: grain_dataset tests/test_interleave.py",
    "DevicePutIterDataset": "needs jax devices: grain_jax tests/test_device_put.py",
    "DevicePutDatasetIterator": "needs jax devices: grain_jax tests/test_device_put.py",
    "_TransferIterator": "needs jax devices: grain_jax tests/test_device_put.py",
    "_HostBuffer": "needs jax devices: grain_jax tests/test_device_put.py",
}


def test_the_conformance_table_covers_every_stage_class():
    covered: set[type] = set()
    for build, _ in TABLES.values():
        ds = build()
        covered.update(type(node) for node in _graph(ds))
        with iter(ds) as it:
            for _ in zip(range(3), it, strict=False):
                pass
            covered.update(type(node) for node in _graph(it))
    missing = [
        cls.__qualname__
        for cls in STAGES
        if cls not in covered and cls.__qualname__ not in ELSEWHERE
    ]
    assert missing == [], f"add a pipeline with these stages to CONFORMANCE: {missing}"
    stale = [name for name in ELSEWHERE if name in {cls.__qualname__ for cls in covered}]
    assert stale == [], f"covered by the table now: drop them from ELSEWHERE: {stale}"
    assert set(ELSEWHERE) <= {cls.__qualname__ for cls in STAGES}


@pytest.mark.parametrize("name", sorted(TABLES))
def test_every_state_restores_exactly(name):
    build, steps = TABLES[name]
    grain_dataset.assert_equal_output_after_checkpoint(build(), steps=steps)
