"""The DataLoader as one Dataset pipeline: positions, worker side, prefetch, parent side.

::

    SamplerSourceMapDataset         position k reads data_source[sampler[k].record_key]
    -> worker-side operations       MapDataset stages: one unit per position
    -> LoaderPositionsIterDataset   to_iter_dataset (+ mp_prefetch with workers), the
                                    items of list units (chunks, flat-map outputs)
    -> parent-side operations       IterDataset batch, map, filter, flat map, and
                                    RecordOperationIterDataset for record operations
    -> the Records' data            when the parent side carries Records

(`grain_mp._operations` plans which operation runs on which side.) Every stage
keeps its own state, so the pipeline iterator's `get_state` is the loader's
position, exact at every output.
"""

from __future__ import annotations

from typing import Any

from grain_dataset import (
    DatasetOptions,
    FlatMapIterDataset,
    IterDataset,
    MapDataset,
    ReadOptions,
    WithOptionsIterDataset,
)
from grain_mp._loader_positions import LoaderPositionsIterDataset
from grain_mp._operations import (
    AsFlatMap,
    BatchStep,
    FlatMapStep,
    Plan,
    RecordsStep,
    as_list,
    strip_metadata,
)
from grain_mp._options import MultiprocessingOptions
from grain_mp._record_stage import RecordOperationIterDataset

# Grain's DataLoader does not judge how much its filters drop (Dataset pipelines do).
_LOADER_OPTIONS = DatasetOptions(filter_warn_threshold_ratio=None)


def _is_kept(item: Any) -> bool:
    return item is not None  # an ElementStep filter's None: dropped


def build_units(plan: Plan, source: MapDataset[Any]) -> MapDataset[Any]:
    """The worker-side MapDataset: one unit per position (see `Plan.unit`)."""
    ds = source
    for op in plan.worker:
        if isinstance(op, BatchStep):
            ds = ds.batch(op.batch_size, drop_remainder=op.drop_remainder, batch_fn=op)
        else:
            ds = ds.map(op)
    if plan.worker_metadata and not plan.tail_metadata:
        ds = ds.map(strip_metadata)  # no Record (or rng) crosses to the parent needlessly
    if plan.unit == "chunk":
        ds = ds.batch(plan.chunk_size, batch_fn=as_list)
    elif plan.unit == "fan_out":
        assert plan.fan_out is not None  # a plan of fan-out units has its flat-map step
        ds = ds.map(plan.fan_out)
    return ds


def build_pipeline(
    plan: Plan,
    units: MapDataset[Any],
    read_options: ReadOptions,
    options: MultiprocessingOptions,
) -> IterDataset[Any]:
    """The whole loader over `units` (from `build_units`), as an IterDataset."""
    ds: IterDataset[Any] = LoaderPositionsIterDataset(
        units, read_options, options, lists=plan.list_units
    )
    for op in plan.tail:
        if isinstance(op, BatchStep):
            ds = ds.batch(op.batch_size, drop_remainder=op.drop_remainder, batch_fn=op)
        elif isinstance(op, FlatMapStep):
            ds = FlatMapIterDataset(ds, AsFlatMap(op))
        elif isinstance(op, RecordsStep):
            ds = RecordOperationIterDataset(ds, op)
        elif op.kind == "filter":
            ds = ds.map(op).filter(_is_kept)
        else:
            ds = ds.map(op)
    if plan.tail_metadata:
        ds = ds.map(strip_metadata)
    return WithOptionsIterDataset(ds, _LOADER_OPTIONS)
