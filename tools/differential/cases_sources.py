"""grain.sources: RangeDataSource, in-memory/shared-memory sources, ArrayRecord."""

from __future__ import annotations

import contextlib
import os
from typing import Any

import grain
import grain.python as pg
from _registry import case, expr, sampler, tmpdir, write_array_record

# ------------------------------------------------------------------ RangeDataSource
expr(
    "src.range.items",
    "[grain.sources.RangeDataSource(0, 10, 3)[i] for i in range(len(grain.sources.RangeDataSource(0, 10, 3)))]",
)
expr("src.range.len", "len(grain.sources.RangeDataSource(2, 9, 2))")
expr("src.range.empty", "len(grain.sources.RangeDataSource(5, 5, 1))")
expr(
    "src.range.negative_step",
    "[len(grain.sources.RangeDataSource(5, 0, -1)), grain.sources.RangeDataSource(5, 0, -1)[0]]",
)
expr("src.range.getitem_past_end", "grain.sources.RangeDataSource(0, 3, 1)[5]")
expr("src.range.getitem_negative", "grain.sources.RangeDataSource(0, 3, 1)[-1]")
expr("src.range.kw", "len(grain.sources.RangeDataSource(start=0, stop=4, step=1))")
expr("src.range.element_type", "type(grain.sources.RangeDataSource(0, 3, 1)[1]).__name__")
expr("src.range.pg_alias", "pg.RangeDataSource is grain.sources.RangeDataSource")
expr(
    "src.range.is_random_access",
    "isinstance(grain.sources.RangeDataSource(0, 3, 1), grain.sources.RandomAccessDataSource)",
)
expr("src.range.repr_or_str", "str(grain.sources.RangeDataSource(0, 3, 1)) != ''")

# ------------------------------------------------------------------ protocol
expr(
    "src.protocol.list_is_random_access", "isinstance([1, 2], grain.sources.RandomAccessDataSource)"
)
expr("src.protocol.pg_alias", "pg.RandomAccessDataSource is grain.sources.RandomAccessDataSource")


@case("src.protocol.duck_typed")
def _():
    class Src:
        def __getitem__(self, i):
            return i

        def __len__(self):
            return 2

    return isinstance(Src(), grain.sources.RandomAccessDataSource)


# ------------------------------------------------------------------ shared / in-memory
@case("src.shared_memory.basic")
def _():
    src = grain.sources.SharedMemoryDataSource([1, "a", 2.5, None, b"x", True])
    try:
        return {"len": len(src), "items": [src[i] for i in range(len(src))]}
    finally:
        _close(src)


def _close(src: Any) -> None:
    for m in ("close", "unlink"):
        with contextlib.suppress(Exception):
            getattr(src, m)()


@case("src.shared_memory.by_name")
def _():
    a = grain.sources.SharedMemoryDataSource([1, 2, 3])
    try:
        # ShareableList's public `shm` attribute names the segment.
        b = grain.sources.SharedMemoryDataSource(name=a.shm.name)
        return [b[i] for i in range(len(b))]
    finally:
        _close(a)


@case("src.shared_memory.dataset")
def _():
    src = grain.sources.SharedMemoryDataSource([5, 6, 7])
    try:
        return list(grain.MapDataset.source(src).map(lambda x: x * 2))
    finally:
        _close(src)


@case("src.shared_memory.negative_index")
def _():
    src = grain.sources.SharedMemoryDataSource([5, 6, 7])
    try:
        return src[-1]
    finally:
        _close(src)


@case("src.shared_memory.past_end")
def _():
    src = grain.sources.SharedMemoryDataSource([5, 6, 7])
    try:
        return src[3]
    finally:
        _close(src)


@case("src.shared_memory.unsupported_value")
def _():
    src = grain.sources.SharedMemoryDataSource([{"a": 1}])
    _close(src)
    return "constructed"


@case("src.in_memory.pg")
def _():
    src = pg.InMemoryDataSource([1, 2, 3])
    try:
        return {"len": len(src), "items": [src[i] for i in range(3)]}
    finally:
        _close(src)


@case("src.in_memory.is_shared_memory")
def _():
    return pg.InMemoryDataSource is grain.sources.SharedMemoryDataSource


@case("src.in_memory.neither")
def _():
    return pg.InMemoryDataSource()


@case("src.shared_memory.neither")
def _():
    return grain.sources.SharedMemoryDataSource()


@case("src.shared_memory.empty")
def _():
    src = grain.sources.SharedMemoryDataSource([])
    try:
        return len(src)
    finally:
        _close(src)


@case("src.shared_memory.dataloader", timeout=20)
def _():
    src = grain.sources.SharedMemoryDataSource([1, 2, 3])
    try:
        loader = pg.DataLoader(
            data_source=src,
            sampler=sampler(3, num_epochs=1),
            worker_count=0,
        )
        return list(loader)
    finally:
        _close(src)


# ------------------------------------------------------------------ ArrayRecord
@case("src.array_record.read")
def _():
    path = write_array_record([b"a", b"bb", b"ccc"])
    src = grain.sources.ArrayRecordDataSource(path)
    return {"len": len(src), "items": [src[i] for i in range(len(src))]}


@case("src.array_record.list_of_paths")
def _():
    p1 = write_array_record([b"a", b"b"], "one.array_record")
    p2 = write_array_record([b"c"], "two.array_record")
    src = grain.sources.ArrayRecordDataSource([p1, p2])
    return [src[i] for i in range(len(src))]


@case("src.array_record.pathlike")
def _():
    import pathlib

    p = write_array_record([b"x", b"y"])
    src = grain.sources.ArrayRecordDataSource(pathlib.Path(p))
    return len(src)


@case("src.array_record.dataset")
def _():
    p = write_array_record([str(i).encode() for i in range(6)])
    ds = grain.MapDataset.source(grain.sources.ArrayRecordDataSource(p)).map(int).shuffle(seed=2)
    return sorted(ds)


@case("src.array_record.dataloader", timeout=20)
def _():
    p = write_array_record([str(i).encode() for i in range(5)])
    loader = pg.DataLoader(
        data_source=pg.ArrayRecordDataSource(p),
        sampler=sampler(5, num_epochs=1),
        worker_count=0,
    )
    return list(loader)


@case("src.array_record.past_end")
def _():
    p = write_array_record([b"a", b"b"])
    return grain.sources.ArrayRecordDataSource(p)[2]


@case("src.array_record.negative_index")
def _():
    p = write_array_record([b"a", b"b"])
    return grain.sources.ArrayRecordDataSource(p)[-1]


@case("src.array_record.missing_file")
def _():
    return len(grain.sources.ArrayRecordDataSource(os.path.join(tmpdir(), "nope.array_record")))


@case("src.array_record.not_array_record")
def _():
    p = os.path.join(tmpdir(), "garbage.array_record")
    with open(p, "wb") as f:
        f.write(b"this is not an array record file" * 10)
    src = grain.sources.ArrayRecordDataSource(p)
    return [len(src), src[0]]


@case("src.array_record.empty_list")
def _():
    return len(grain.sources.ArrayRecordDataSource([]))


@case("src.array_record.empty_file")
def _():
    p = write_array_record([])
    return len(grain.sources.ArrayRecordDataSource(p))


@case("src.array_record.iter")
def _():
    p = write_array_record([b"a", b"b"])
    return list(iter(grain.sources.ArrayRecordDataSource(p)))


@case("src.array_record.context_manager")
def _():
    p = write_array_record([b"a"])
    with grain.sources.ArrayRecordDataSource(p) as src:
        return src[0]


@case("src.array_record.paths_property")
def _():
    p = write_array_record([b"a"])
    paths = grain.sources.ArrayRecordDataSource(p).paths
    return {
        "type": type(paths).__name__,
        "basename": [
            os.path.basename(str(x))
            for x in (paths if isinstance(paths, list | tuple) else [paths])
        ],
    }


@case("src.array_record.pickle")
def _():
    import pickle

    p = write_array_record([b"q", b"r"])
    src = pickle.loads(pickle.dumps(grain.sources.ArrayRecordDataSource(p)))
    return [src[0], src[1]]


@case("src.array_record.directory")
def _():
    return len(grain.sources.ArrayRecordDataSource(tmpdir()))


@case("src.array_record.int_path")
def _():
    return len(grain.sources.ArrayRecordDataSource(5))


@case("src.array_record.many_records")
def _():
    p = write_array_record([i.to_bytes(4, "little") for i in range(300)])
    src = grain.sources.ArrayRecordDataSource(p)
    return [int.from_bytes(src[i], "little") for i in (0, 150, 299)]
