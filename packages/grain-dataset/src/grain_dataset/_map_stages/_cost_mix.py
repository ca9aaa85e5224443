"""The `costs=` argument of `MapDataset.mix` and `IterDataset.mix`: mixing by tokens.

With `costs`, a mix's weights are shares of a per-record cost (tokens, bytes,
FLOPs) rather than of records. A MapDataset mix needs each component's costs
up front, one per index (an array, or the lengths `grain convert --lengths`
wrote beside its shards, named by the manifest), so that any position is
found by arithmetic (grain_index.CostMixingSchedule). An IterDataset mix sees
its elements one at a time, so its costs are functions of the element,
evaluated as each is read.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

_MANIFEST_SUFFIX = ".manifest.json"


def manifest_lengths(path: str | os.PathLike[str]) -> np.ndarray:
    """The per-record lengths that `grain convert --lengths` wrote, in record order.

    `path` is the ``DEST.manifest.json`` of a finished conversion; the result
    is one int64 per record of ``ArrayRecordDataSource("DEST@N")``, read from
    the ``SHARD.lengths.npy`` files beside its shards.
    """
    path = os.fspath(path)
    try:
        with open(path, encoding="utf-8") as file:
            manifest = json.load(file)
    except (OSError, ValueError) as error:
        raise ValueError(f"cannot read the manifest {path}: {error}") from None
    if not isinstance(manifest, dict) or not isinstance(manifest.get("shards"), list):
        raise ValueError(f"{path} is not a manifest written by grain convert.")
    if not manifest.get("lengths"):
        raise ValueError(
            f"the manifest {path} has no per-record lengths: convert with `--lengths FIELD` "
            "(or lengths=... in Python) to write them, or pass the costs as an array."
        )
    directory = os.path.dirname(os.path.abspath(path))
    parts = []
    for shard in manifest["shards"]:
        if not shard["records"]:
            continue
        shard_dir = os.path.dirname(os.path.join(directory, shard["shard"]))
        lengths_file = os.path.join(shard_dir, shard["lengths"]["file"])
        array = np.load(lengths_file, allow_pickle=False)
        if len(array) != shard["records"]:
            raise ValueError(
                f"{lengths_file} holds {len(array)} lengths for {shard['records']} records; "
                f"run `grain inspect {path}` to check the conversion."
            )
        parts.append(array.astype(np.int64))
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)


def map_costs(costs: Any, lengths: Sequence[int]) -> list[np.ndarray]:
    """Each component's per-index costs for a MapDataset mix, checked against its length."""
    if isinstance(costs, str | os.PathLike | np.ndarray) or not isinstance(costs, Sequence):
        raise TypeError(
            "`costs` of MapDataset.mix must be a list with one entry per dataset (an array "
            "of per-record costs, or the path of a grain convert manifest with lengths), "
            f"got {type(costs).__name__}."
        )
    if len(costs) != len(lengths):
        raise ValueError(
            f"`costs` of mix must have one entry per dataset: got {len(costs)} entries for "
            f"{len(lengths)} datasets."
        )
    arrays = []
    for j, (value, length) in enumerate(zip(costs, lengths, strict=True)):
        if callable(value):
            raise TypeError(
                f"`costs[{j}]` of MapDataset.mix is a function: a MapDataset mix needs every "
                "record's cost up front (an array, or a manifest's lengths) to find any "
                "position by arithmetic. Precompute the costs, or mix IterDatasets, whose "
                "costs are functions of the element."
            )
        array = manifest_lengths(value) if isinstance(value, str | os.PathLike) else value
        array = np.asarray(array)
        if array.ndim != 1 or len(array) != length:
            raise ValueError(
                f"`costs[{j}]` of mix must hold one cost per record of `datasets[{j}]` "
                f"({length}), got shape {array.shape}."
            )
        arrays.append(array)
    return arrays


def costs_digest(arrays: Sequence[np.ndarray]) -> str:
    """A short hash of the costs: a checkpoint of a mix with other costs is another pipeline."""
    digest = hashlib.sha256()
    for array in arrays:
        digest.update(np.ascontiguousarray(array, dtype=np.float64).tobytes())
        digest.update(b"|")
    return digest.hexdigest()[:12]


def iter_costs(costs: Any, count: int, names: Sequence[str] | None) -> list[Callable[[Any], Any]]:
    """One cost function per component of an IterDataset mix.

    One function serves every component; a list gives one per component, a
    dict one per name when the datasets are a dict.
    """
    if callable(costs):
        return [costs] * count
    if isinstance(costs, Mapping):
        if names is None or set(costs) != set(names):
            raise ValueError(
                "`costs` of mix is a dict, so `datasets` must be a dict with the same keys "
                f"({sorted(names) if names else 'not a dict'}); got {sorted(costs)}."
            )
        costs = [costs[name] for name in names]
    if isinstance(costs, str | np.ndarray) or not isinstance(costs, Sequence):
        raise TypeError(
            "`costs` of IterDataset.mix must be a function of an element (its cost, e.g. "
            "lambda x: len(x['tokens'])), or one such function per dataset; got "
            f"{type(costs).__name__}."
        )
    if len(costs) != count:
        raise ValueError(
            f"`costs` of mix must have one function per dataset: got {len(costs)} for "
            f"{count} datasets."
        )
    for j, value in enumerate(costs):
        if not callable(value):
            raise TypeError(
                f"`costs[{j}]` of IterDataset.mix must be a function of an element returning "
                f"its cost, got {type(value).__name__}; an IterDataset's records have no "
                "index to look an array up with."
            )
    return list(costs)


def element_cost(value: Any, component: int) -> float:
    """A cost function's result as a float, after checking it is a finite number > 0."""
    try:
        cost = float(value)
    except (TypeError, ValueError):
        raise TypeError(
            f"the cost function of component {component} of mix returned "
            f"{type(value).__name__} {value!r:.80}; it must return a number (the element's "
            "cost, e.g. its token count)."
        ) from None
    if isinstance(value, bool) or not math.isfinite(cost) or cost <= 0:
        raise ValueError(
            f"the cost function of component {component} of mix returned {value!r} for an "
            "element: costs must be finite and > 0 (a record of cost 0 takes no share; "
            "filter empty records out before mixing)."
        )
    return cost
