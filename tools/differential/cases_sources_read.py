"""How a user's source is read: `source[i]`, whatever its `__getitems__` does.

Grain 0.2.18 reads a data source with ``source[i]`` and never calls its
``__getitems__``. Each source here has one kind of `__getitems__` (missing,
broken the way tfds.testing.mock_data's is, returning other records, returning
a collated batch, returning too few, not callable) and is read through the
public API: indexing, slices, batches, a map, reading threads, iterator
batches, mp_prefetch workers, the DataLoader with 0 and 2 workers,
ElasticIterator. Both implementations must give the records of ``source[i]``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import grain
import grain.python as pg
from _registry import case, expr, sampler

N = 10


class _Records:
    """Record i is ``{"i": i, "x": 3 * i}`` (a module-level class: workers unpickle it)."""

    def __len__(self) -> int:
        return N

    def __getitem__(self, index: int) -> Any:
        index = int(index)
        if not 0 <= index < N:
            raise IndexError(index)
        return {"i": index, "x": 3 * index}

    def __repr__(self) -> str:  # the DataLoader's checkpoint names the source by it
        return f"{type(self).__name__}(n={N})"


class Missing(_Records):
    pass


class Broken(_Records):
    # As tfds.testing.mock_data's: the function is stored where a bound method is
    # expected, so every call misses an argument.
    __getitems__ = staticmethod(lambda self, record_keys: record_keys)


class Different(_Records):
    def __getitems__(self, indices: Any) -> list[Any]:
        return [{"i": -1, "x": -1} for _ in indices]


class Collated(_Records):
    """PyTorch's style: one batch of arrays instead of a list of records."""

    def __getitems__(self, indices: Any) -> Any:
        indices = np.asarray(list(indices))
        return {"i": indices, "x": 3 * indices}


class TooFew(_Records):
    def __getitems__(self, indices: Any) -> list[Any]:
        return [self[i] for i in list(indices)[:1]]


class NotCallable(_Records):
    __getitems__ = None


class Declared(_Records):
    """Declares batched reads in ours (an attribute upstream does not know): same records."""

    batched_reads = True

    def __getitems__(self, indices: Any) -> list[Any]:
        return [self[i] for i in indices]


KINDS = {
    "missing": Missing,
    "broken": Broken,
    "different": Different,
    "collated": Collated,
    "too_few": TooFew,
    "not_callable": NotCallable,
    "declared": Declared,
}
KINDS_BY_CLASS_NAME = {kind.__name__: kind for kind in KINDS.values()}


def _plus(record: Any) -> Any:
    return {"i": record["i"], "x": record["x"] + 1}


def _elastic(source: Any, workers: int) -> Any:
    mp = grain.MultiprocessingOptions(num_workers=workers) if workers else None
    out = []
    for index in range(2):
        it = grain.experimental.ElasticIterator(
            grain.MapDataset.source(source),
            4,
            grain.sharding.ShardOptions(index, 2),
            multiprocessing_options=mp,
        )
        out.append(list(it))
    return out


def _loader(source: Any, workers: int, operations: Any = ()) -> Any:
    return list(
        pg.DataLoader(
            data_source=source,
            sampler=sampler(N, num_epochs=1, shuffle=False),
            operations=list(operations),
            worker_count=workers,
        )
    )


# Each read as the expression the report shows; SRC is replaced by the source.
READS: dict[str, tuple[str, float]] = {
    "getitem": ("[grain.MapDataset.source(SRC)[i] for i in (0, 3, 9, 12)]", 10),
    "slice": ("list(grain.MapDataset.source(SRC)[2:7])", 10),
    "iterate": ("list(grain.MapDataset.source(SRC))", 10),
    "batch": ("list(grain.MapDataset.source(SRC).batch(3))", 10),
    "batch_index": ("grain.MapDataset.source(SRC).batch(4)[1]", 10),
    "map_batch": ("list(grain.MapDataset.source(SRC).map(_plus).batch(4))", 10),
    "shuffle_batch": (
        "[sorted(b['i'].tolist()) for b in grain.MapDataset.source(SRC).shuffle(seed=1).batch(10)]",
        10,
    ),
    "threads": (
        "list(grain.MapDataset.source(SRC).to_iter_dataset(grain.ReadOptions(num_threads=2)))",
        10,
    ),
    "iter_batch": (
        "list(grain.MapDataset.source(SRC).to_iter_dataset(grain.ReadOptions(num_threads=2, prefetch_buffer_size=4)).batch(4))",
        10,
    ),
    "mp_prefetch": (
        "list(grain.MapDataset.source(SRC).to_iter_dataset().mp_prefetch(grain.MultiprocessingOptions(num_workers=2)))",
        60,
    ),
    "loader0_batch": ("_loader(SRC, 0, [grain.transforms.Batch(3)])", 30),
    "loader2": ("_loader(SRC, 2)", 60),
    "elastic": ("_elastic(SRC, 0)", 30),
    "elastic_workers": ("_elastic(SRC, 2)", 60),
}
_ENV = {"_plus": _plus, "_loader": _loader, "_elastic": _elastic, **KINDS_BY_CLASS_NAME}

for _kind, _source_class in KINDS.items():
    for _read, (_text, _timeout) in READS.items():
        expr(
            f"srcread.{_kind}.{_read}",
            _text.replace("SRC", f"{_source_class.__name__}()"),
            env=_ENV,
            timeout=_timeout,
        )


@case("srcread.declared_without_getitems")
def _():
    class Promises(_Records):
        batched_reads = True

    return grain.MapDataset.source(Promises()).batch(4)[0]


@case("srcread.ndarray.batch")
def _():
    return list(grain.MapDataset.source(np.arange(12).reshape(6, 2)).batch(4))


@case("srcread.getitems_is_not_called", timeout=30)
def _():
    calls: list[int] = []

    class Logged(_Records):
        def __getitems__(self, indices: Any) -> list[Any]:
            calls.append(len(indices))
            return [self[i] for i in indices]

    ds = grain.MapDataset.source(Logged())
    list(ds.batch(4))
    list(ds.to_iter_dataset(grain.ReadOptions(num_threads=2)))
    _loader(Logged(), 0, [grain.transforms.Batch(3)])
    return calls
