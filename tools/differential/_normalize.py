"""Turn whatever a case returned into plain JSON data, the same way on both sides.

numpy arrays and tuples become lists, numpy scalars Python numbers, dataclasses
dicts, sets sorted lists, enums "Class.NAME", bytes their repr, NaN and the
infinities strings; any other object becomes {"__object__": its class name}
(so two datasets compare by class name only, never by address or repr).
"""

from __future__ import annotations

import dataclasses
import enum
import json
import math
from collections.abc import Mapping
from typing import Any

MAX_ITEMS = 2000


def normalize(x: Any, depth: int = 0) -> Any:
    if depth > 40:
        return "<too deep>"
    if x is None or isinstance(x, bool | str):
        return x
    if isinstance(x, enum.Enum):
        return f"{type(x).__name__}.{x.name}"
    if isinstance(x, int):
        return int(x)
    if isinstance(x, float):
        return _float(x)
    try:
        import numpy as np
    except ImportError:  # pragma: no cover - both sides have numpy
        np = None
    if np is not None:
        if isinstance(x, np.ndarray):
            if x.dtype.kind in "biufcUS?":
                return normalize(x.tolist(), depth + 1)
            return [normalize(v, depth + 1) for v in x.tolist()]
        if isinstance(x, np.generic):
            return normalize(x.item(), depth + 1)
    if isinstance(x, bytes | bytearray | memoryview):
        return repr(bytes(x))
    if isinstance(x, BaseException):
        return {
            "__exception__": type(x).__name__,
            "mro": [c.__name__ for c in type(x).__mro__ if c not in (object, BaseException)],
        }
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        return {
            "__dataclass__": type(x).__name__,
            **{
                f.name: normalize(getattr(x, f.name, None), depth + 1)
                for f in dataclasses.fields(x)
                if not f.name.startswith("_")
            },
        }
    if isinstance(x, Mapping):
        items = sorted(((str(k), v) for k, v in x.items()), key=lambda kv: kv[0])
        return {k: normalize(v, depth + 1) for k, v in items}
    if isinstance(x, list | tuple):
        if len(x) > MAX_ITEMS:
            return [normalize(v, depth + 1) for v in x[:MAX_ITEMS]] + ["<truncated>"]
        return [normalize(v, depth + 1) for v in x]
    if isinstance(x, set | frozenset):
        vals = [normalize(v, depth + 1) for v in x]
        return sorted(vals, key=lambda v: json.dumps(v, sort_keys=True))
    if isinstance(x, type):
        return {"__class__": x.__name__}
    return {"__object__": type(x).__name__}


def _float(x: float) -> Any:
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return x
