"""Records, options, config, SharedMemoryArray, checkpoint handler, monitoring."""

from __future__ import annotations

import numpy as np

import grain
import grain.python as pg
from _registry import case, expr, sampler

# ------------------------------------------------------------------ Record / RecordMetadata
expr(
    "rec.metadata.fields",
    "[pg.RecordMetadata(3).index, pg.RecordMetadata(3).record_key, pg.RecordMetadata(3).rng]",
)
expr(
    "rec.metadata.kw",
    "[pg.RecordMetadata(index=1, record_key=2).index, pg.RecordMetadata(index=1, record_key=2).record_key]",
)
expr("rec.metadata.eq", "pg.RecordMetadata(1, 2) == pg.RecordMetadata(1, 2)")
expr(
    "rec.metadata.remove_record_key",
    "[pg.RecordMetadata(1, 2).remove_record_key().record_key, pg.RecordMetadata(1, 2).remove_record_key().index]",
)
expr("rec.metadata.str", "str(pg.RecordMetadata(1, 2))")
expr(
    "rec.record.fields",
    "[pg.Record(pg.RecordMetadata(0), 'x').data, pg.Record(pg.RecordMetadata(0), 'x').metadata.index]",
)
expr("rec.record.aliases", "[grain.Record is pg.Record, grain.RecordMetadata is pg.RecordMetadata]")
expr("rec.record.eq", "pg.Record(pg.RecordMetadata(0), 1) == pg.Record(pg.RecordMetadata(0), 1)")
expr("rec.record.kw", "pg.Record(metadata=pg.RecordMetadata(0), data=5).data")
expr(
    "rec.record.is_dataclass",
    "[__import__('dataclasses').is_dataclass(pg.Record), __import__('dataclasses').is_dataclass(pg.RecordMetadata)]",
)
expr("rec.record.metadata_frozen", "outcome(lambda: setattr(pg.RecordMetadata(0), 'index', 1))")

# ------------------------------------------------------------------ options
expr("opt.read.defaults", "grain.ReadOptions()")
expr("opt.read.fields", "grain.ReadOptions(num_threads=2, prefetch_buffer_size=7)")
expr("opt.read.eq", "grain.ReadOptions(2, 3) == grain.ReadOptions(2, 3)")
expr("opt.read.pg_alias", "pg.ReadOptions is grain.ReadOptions")
expr("opt.mp.defaults", "grain.MultiprocessingOptions()")
expr(
    "opt.mp.fields",
    "grain.MultiprocessingOptions(num_workers=3, per_worker_buffer_size=2, enable_profiling=True)",
)
expr(
    "opt.mp.aliases",
    "[grain.MultiprocessingOptions is pg.MultiprocessingOptions, grain.MultiprocessingOptions is grain.multiprocessing.MultiprocessingOptions]",
)
expr("opt.mp.frozen", "outcome(lambda: setattr(grain.MultiprocessingOptions(), 'num_workers', 2))")
expr("opt.read.frozen", "outcome(lambda: setattr(grain.ReadOptions(), 'num_threads', 2))")
expr("opt.mp.hashable", "outcome(lambda: hash(grain.MultiprocessingOptions()))")
expr(
    "opt.mp.replace",
    "__import__('dataclasses').replace(grain.MultiprocessingOptions(), num_workers=4)",
)

# ------------------------------------------------------------------ config
expr(
    "config.type_has_update",
    "[hasattr(grain.config, 'update'), hasattr(grain.config, 'get_or_default')]",
)
expr("config.pg_alias", "pg.config is grain.config")
expr("config.get_unknown", "grain.config.get_or_default('no_such_flag_xyz')")
expr("config.update_unknown", "grain.config.update('no_such_flag_xyz', 1)")


@case("config.py_debug_mode_roundtrip")
def _():
    before = grain.config.get_or_default("py_debug_mode")
    grain.config.update("py_debug_mode", True)
    try:
        during = grain.config.get_or_default("py_debug_mode")
    finally:
        grain.config.update("py_debug_mode", before)
    return {"before": before, "during": during}


@case("config.known_flags_defaults")
def _():
    out = {}
    for flag in (
        "py_debug_mode",
        "py_dataset_visualization_output_dir",
        "py_dataset_debug_mode",
        "py_benchmark",
    ):
        try:
            out[flag] = grain.config.get_or_default(flag)
        except Exception as e:
            out[flag] = f"raised {type(e).__name__}"
    return out


# ------------------------------------------------------------------ SharedMemoryArray
@case("shm_array.basic")
def _():
    a = grain.multiprocessing.SharedMemoryArray((2, 3), dtype=np.int32)
    a[:] = 7
    try:
        return {
            "isinstance_ndarray": isinstance(a, np.ndarray),
            "shape": list(a.shape),
            "dtype": str(a.dtype),
            "sum": int(a.sum()),
            "metadata_type": type(a.metadata).__name__,
        }
    finally:
        a.unlink_on_del()
        del a


@case("shm_array.metadata_roundtrip")
def _():
    a = grain.multiprocessing.SharedMemoryArray((4,), dtype=np.float32)
    a[:] = np.arange(4)
    md = a.metadata
    b = grain.multiprocessing.SharedMemoryArray.from_metadata(md)
    try:
        return {
            "values": b.tolist(),
            "md_shape": list(md.shape),
            "md_dtype": str(np.dtype(md.dtype)),
        }
    finally:
        b.unlink_on_del()
        del a, b


@case("shm_array.default_dtype")
def _():
    a = grain.multiprocessing.SharedMemoryArray((2,))
    try:
        return str(a.dtype)
    finally:
        a.unlink_on_del()
        del a


@case("shm_array.pg_alias")
def _():
    return pg.SharedMemoryArray is grain.multiprocessing.SharedMemoryArray


@case("shm_array.zero_size")
def _():
    a = grain.multiprocessing.SharedMemoryArray((0,), dtype=np.int32)
    try:
        return list(a.shape)
    finally:
        a.unlink_on_del()
        del a


@case("shm_array.negative_shape")
def _():
    return grain.multiprocessing.SharedMemoryArray((-1,), dtype=np.int32)


@case("shm_array.metadata_fields")
def _():
    md = grain.multiprocessing.SharedMemoryArrayMetadata(name="x", shape=(2,), dtype=np.int8)
    return {"name": md.name, "shape": list(md.shape), "dtype": str(np.dtype(md.dtype))}


# ------------------------------------------------------------------ checkpoint handler
expr("ckpt.handler_alias", "pg.PyGrainCheckpointHandler is grain.checkpoint.CheckpointHandler")


@case("ckpt.handler_save_restore_dataset_iterator")
def _():
    import pathlib

    from _registry import tmpdir

    ds = grain.MapDataset.range(10).to_iter_dataset()
    it = iter(ds)
    next(it)
    next(it)
    d = pathlib.Path(tmpdir())
    h = grain.checkpoint.CheckpointHandler()
    h.save(d, it)
    it2 = iter(ds)
    h.restore(d, it2)
    return {"files": sorted(p.name for p in d.iterdir()), "next": next(it2)}


@case("ckpt.handler_save_restore_dataloader", timeout=20)
def _():
    import pathlib

    from _registry import tmpdir

    loader = pg.DataLoader(
        data_source=list(range(6)),
        sampler=sampler(6, num_epochs=1),
        worker_count=0,
    )
    it = iter(loader)
    next(it)
    d = pathlib.Path(tmpdir())
    h = grain.checkpoint.CheckpointHandler()
    h.save(d, it)
    it2 = iter(loader)
    h.restore(d, it2)
    return {"files": sorted(p.name for p in d.iterdir()), "rest": list(it2)}


@case("ckpt.iterator_save_load_async")
def _():
    import asyncio

    methods = {m: hasattr(grain.DatasetIterator, m) for m in ("save", "load")}
    return {"methods": methods, "asyncio": asyncio.iscoroutinefunction(grain.DatasetIterator.save)}


# ------------------------------------------------------------------ monitoring
expr("monitoring.module", "type(grain.monitoring).__name__")
expr("monitoring.record_framework_type", "grain.monitoring.record_framework_type('test')")
expr("monitoring.get_monitoring_root", "grain.monitoring.get_monitoring_root()")
expr("monitoring.units", "[m.name for m in grain.monitoring.Units]")
