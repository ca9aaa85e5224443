"""``DEST.manifest.json``: what a finished conversion wrote, and the check `grain inspect` runs.

Written last, only when every shard's marker matches the plan: the shards
(names relative to the manifest's directory), their record counts, byte sizes
and checksums, the plan's hash, and, when lengths were asked for, their files
and a summary. `check` reads the shards back and recomputes all of it.

Public (``grain_convert.manifest``): a job that consumes a conversion's output
can call ``check(path)`` before it trusts the files, as ``grain inspect`` does.
"""

from __future__ import annotations

import json
import os
import re
from typing import Any

import numpy as np

from grain_convert._task import file_checksum

MANIFEST_SUFFIX = ".manifest.json"
PLAN_SUFFIX = ".plan.json"
KIND = "grain-convert-manifest"
_SHARD_FIELDS = ("shard", "records", "bytes", "record_bytes", "checksum", "lengths")
_SHARD_NAME = re.compile(r"-\d{5}-of-\d{5}$")


def build(plan: dict[str, Any], markers: list[dict[str, Any]], pattern: str) -> dict[str, Any]:
    """The manifest of a plan whose shards all carry these markers (in shard order)."""
    manifest: dict[str, Any] = {
        "kind": KIND,
        "version": 1,
        "pattern": pattern,
        "plan_hash": plan["hash"],
        "settings": plan["settings"],
        "num_records": sum(marker["records"] for marker in markers),
        "shards": [{key: marker[key] for key in _SHARD_FIELDS} for marker in markers],
        "lengths": None,
    }
    if plan["settings"]["lengths"] is not None:
        summaries = [marker["lengths"] for marker in markers if marker["records"]]
        total = sum(summary["sum"] for summary in summaries)
        manifest["lengths"] = {
            "of": plan["settings"]["lengths"],
            "total": total,
            "min": min((summary["min"] for summary in summaries), default=0),
            "max": max((summary["max"] for summary in summaries), default=0),
            "mean": total / max(manifest["num_records"], 1),
        }
    return manifest


def find(path: str) -> str | None:
    """The manifest beside what `grain inspect` was given (name@N, a shard, a directory)."""
    if path.endswith(MANIFEST_SUFFIX):
        return path
    if os.path.isdir(path):
        found = sorted(name for name in os.listdir(path) if name.endswith(MANIFEST_SUFFIX))
        return os.path.join(path, found[0]) if len(found) == 1 else None
    base = re.sub(r"@\d+$", "", path)
    base = _SHARD_NAME.sub("", base)
    candidate = base + MANIFEST_SUFFIX
    return candidate if os.path.isfile(candidate) else None


def load(path: str) -> dict[str, Any]:
    """The manifest at `path`; ValueError when it cannot be read or is not one of ours."""
    try:
        with open(path, encoding="utf-8") as file:
            manifest = json.load(file)
    except (OSError, ValueError) as error:
        raise ValueError(f"cannot read the manifest {path}: {error}") from None
    if not isinstance(manifest, dict) or manifest.get("kind") != KIND:
        raise ValueError(f"{path} is not a manifest written by grain convert")
    return manifest


def shard_paths(path: str, manifest: dict[str, Any]) -> list[str]:
    """The shard files that `manifest`, read from `path`, lists (beside the manifest)."""
    directory = os.path.dirname(os.path.abspath(path))
    return [os.path.join(directory, shard["shard"]) for shard in manifest["shards"]]


def check(path: str) -> list[str]:
    """Every way the files differ from the manifest at `path` (empty when they match)."""
    manifest = load(path)
    problems = []
    for shard, file in zip(manifest["shards"], shard_paths(path, manifest), strict=True):
        problems.extend(_check_shard(shard, file))
    if sum(shard["records"] for shard in manifest["shards"]) != manifest["num_records"]:
        problems.append("the shards' record counts do not add up to num_records")
    return problems


def _check_shard(shard: dict[str, Any], file: str) -> list[str]:
    if not os.path.isfile(file):
        return [f"{file} is missing"]
    if os.path.getsize(file) != shard["bytes"]:
        return [f"{file} has {os.path.getsize(file)} bytes, the manifest says {shard['bytes']}"]
    try:
        count, checksum = file_checksum(file)
    except (RuntimeError, OSError) as error:  # ArrayRecord reports damage as RuntimeError
        return [f"cannot read {file}: {error}"]
    problems = []
    if count != shard["records"]:
        problems.append(f"{file} holds {count} records, the manifest says {shard['records']}")
    elif checksum != shard["checksum"]:
        problems.append(f"{file}: the records' checksum differs from the manifest's")
    lengths = shard.get("lengths")
    if lengths:
        lengths_file = os.path.join(os.path.dirname(file), lengths["file"])
        try:
            array = np.load(lengths_file, allow_pickle=False)
        except (OSError, ValueError) as error:
            return [*problems, f"cannot read {lengths_file}: {error}"]
        if len(array) != shard["records"] or int(array.sum()) != lengths["sum"]:
            problems.append(f"{lengths_file} does not match the manifest's lengths")
    return problems
