"""The case table and the helpers that cases use.

A *case* is a small named function that calls the public Grain API and returns
something JSON-able (after `normalize`), or raises. The same case modules are
imported by the worker in both interpreters (ours and upstream Grain 0.2.18), so
they may import only `grain`, `grain.python`, numpy and the standard library at
module level; every other public name is reached through attributes inside the
case, so that a name missing on one side is recorded as that case's outcome
instead of breaking the import of the whole table.

Three ways to declare a case:

    @case("map.range.basic")
    def _():
        return list(grain.MapDataset.range(5))

    expr("map.len", "len(grain.MapDataset.range(5))")   # one expression

    bad("map.batch.size_zero", lambda: grain.MapDataset.range(5).batch(0))
        # construct, then consume a few elements; records at which stage it raised

Options: `shuffled=True` compares top-level lists as multisets (a shuffle's order
legitimately differs between implementations); `timeout=` seconds (default 10);
`kind=` "value" (default), "sig" (a signature, compared for compatibility) or
"names" (a namespace listing).
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import inspect
import itertools
import math
import os
import shutil
import sys
import tempfile
import textwrap
import warnings
from collections.abc import Callable, Mapping
from typing import Any

CASES: dict[str, Case] = {}


@dataclasses.dataclass
class Case:
    name: str
    fn: Callable[[], Any]
    call: str
    shuffled: bool = False
    timeout: float = 10.0
    kind: str = "value"
    isolated: bool = False

    @property
    def area(self) -> str:
        return self.name.split(".", 1)[0]

    def meta(self) -> dict[str, Any]:
        return {
            "case": self.name,
            "area": self.area,
            "call": self.call,
            "shuffled": self.shuffled,
            "timeout": self.timeout,
            "kind": self.kind,
            "isolated": self.isolated,
        }


def _register(c: Case) -> None:
    if c.name in CASES:
        raise ValueError(f"duplicate case name {c.name!r}")
    CASES[c.name] = c


def _source_of(fn: Callable[..., Any]) -> str:
    """The body of a case function, dedented, without the decorator and def line."""
    try:
        lines = inspect.getsource(fn).splitlines()
    except (OSError, TypeError):
        return getattr(fn, "__name__", "?")
    body = [ln for ln in lines if not ln.lstrip().startswith("@")]
    if body and body[0].lstrip().startswith("def "):
        body = body[1:]
    text = textwrap.dedent("\n".join(body)).strip()
    return text


def case(
    name: str,
    *,
    shuffled: bool = False,
    timeout: float = 10.0,
    kind: str = "value",
    isolated: bool = False,
) -> Callable[[Callable[[], Any]], Callable[[], Any]]:
    """Register a function case. `isolated=True` runs it in a fresh worker process
    (for behaviour that depends on process history, like once-per-process logging)."""

    def deco(fn: Callable[[], Any]) -> Callable[[], Any]:
        _register(Case(name, fn, _source_of(fn), shuffled, timeout, kind, isolated))
        return fn

    return deco


def expr(
    name: str,
    source: str,
    *,
    env: Mapping[str, Any] | None = None,
    shuffled: bool = False,
    timeout: float = 10.0,
    kind: str = "value",
) -> None:
    """A case that is one Python expression, evaluated with `namespace()` in scope."""
    code = compile(source, f"<case {name}>", "eval")

    def fn() -> Any:
        ns = namespace()
        if env:
            ns.update(env)
        return eval(code, ns)

    _register(Case(name, fn, source, shuffled, timeout, kind))


def bad(
    name: str,
    make: Callable[[], Any],
    *,
    call: str | None = None,
    n: int = 6,
    timeout: float = 10.0,
    shuffled: bool = False,
) -> None:
    """A case that builds something and then uses it (`use`), recording the stage."""

    def fn() -> Any:
        return staged(make, n)

    _register(Case(name, fn, call or _lambda_text(make), shuffled, timeout, "value"))


def _lambda_text(fn: Callable[..., Any]) -> str:
    try:
        src = inspect.getsource(fn).strip()
    except (OSError, TypeError):
        return "?"
    i = src.find("lambda")
    if i < 0:
        return src
    body = src[i + len("lambda") :]
    body = body[body.find(":") + 1 :].strip()
    # Trim what follows the lambda on its line: a closing paren of bad(...) and options.
    depth = 0
    for j, ch in enumerate(body):
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            if depth == 0:
                return body[:j].strip().rstrip(",")
            depth -= 1
        elif ch == "," and depth == 0:
            return body[:j].strip()
    return body.rstrip(",").strip()


# --------------------------------------------------------------------------- helpers


def namespace() -> dict[str, Any]:
    """What an `expr` case sees: the public modules and the helpers below."""
    import numpy as np

    import grain
    import grain.python as pg

    ns: dict[str, Any] = {"grain": grain, "pg": pg, "np": np, "sys": sys, "itertools": itertools}
    ns.update(HELPERS)
    return ns


def _tag(e: BaseException, stage: str) -> None:
    with contextlib.suppress(Exception):
        if not hasattr(e, "_diff_stage"):
            e._diff_stage = stage  # type: ignore[attr-defined]


def staged(make: Callable[[], Any], n: int = 6) -> Any:
    """Build with `make()`, then `use` the result; tag an exception with its stage."""
    try:
        obj = make()
    except BaseException as e:
        _tag(e, "construct")
        raise
    try:
        return use(obj, n)
    except BaseException as e:
        _tag(e, "use")
        raise


def use(obj: Any, n: int = 6) -> Any:
    """Consume a little of whatever a call returned, without ever running forever.

    A MapDataset-like object (len and getitem): its length and the first `n`
    elements by iteration. An IterDataset: the first `n` elements. A sampler: its
    length and first `n` records. An iterator: its next `n` elements. Anything
    else: itself.
    """
    cls_names = {c.__name__ for c in type(obj).__mro__}
    if "MapDataset" in cls_names:
        length = len(obj)
        return {"type": "MapDataset", "len": length, "items": first(obj, n)}
    if "IterDataset" in cls_names:
        return {"type": "IterDataset", "items": first(obj, n)}
    if any(n.endswith("Sampler") for n in cls_names):
        length = len(obj)
        return {"type": "Sampler", "len": length, "items": [obj[i] for i in range(min(length, n))]}
    if "DatasetIterator" in cls_names or (hasattr(obj, "__next__") and hasattr(obj, "__iter__")):
        return {"type": "iterator", "items": list(itertools.islice(obj, n))}
    if "DataLoader" in cls_names:
        return {"type": "DataLoader", "items": first(obj, n)}
    return obj


def first(iterable: Any, n: int = 6) -> list[Any]:
    """The first `n` elements of a fresh iterator over `iterable`."""
    return list(itertools.islice(iter(iterable), n))


def L(iterable: Any, limit: int = 10_000) -> list[Any]:  # noqa: N802 - short on purpose
    """The whole of a finite iterable (a safety cap stops an infinite one)."""
    out = list(itertools.islice(iter(iterable), limit + 1))
    if len(out) > limit:
        raise RuntimeError(f"harness: more than {limit} elements (infinite?)")
    return out


def take(it: Any, n: int) -> list[Any]:
    return list(itertools.islice(it, n))


def state_shape(s: Any) -> Any:
    """The nested structure of an iterator state: keys and value types, not values."""
    if isinstance(s, Mapping):
        return {str(k): state_shape(v) for k, v in sorted(s.items(), key=lambda kv: str(kv[0]))}
    if isinstance(s, list | tuple):
        return [state_shape(v) for v in s]
    return type_name(s)


def type_name(x: Any) -> str:
    t = type(x)
    if t.__module__ in ("builtins", "numpy"):
        return t.__name__
    return t.__name__


def types_of(x: Any) -> Any:
    """Like `state_shape` but says dtype and shape for arrays: for batch results."""
    import numpy as np

    if isinstance(x, np.ndarray):
        return f"ndarray[{x.dtype}]{list(x.shape)}"
    if isinstance(x, np.generic):
        return f"np.{type(x).__name__}"
    if isinstance(x, Mapping):
        return {str(k): types_of(v) for k, v in x.items()}
    if isinstance(x, tuple):
        return ["tuple", *[types_of(v) for v in x]]
    if isinstance(x, list):
        return ["list", *[types_of(v) for v in x]]
    return type(x).__name__


_TMPDIRS: list[str] = []


def tmpdir() -> str:
    d = tempfile.mkdtemp(prefix="graindiff-")
    _TMPDIRS.append(d)
    return d


def cleanup_tmpdirs() -> None:
    while _TMPDIRS:
        shutil.rmtree(_TMPDIRS.pop(), ignore_errors=True)


def write_array_record(records: list[bytes], name: str = "data.array_record") -> str:
    """Write `records` with array_record's own writer into a fresh temp dir."""
    from array_record.python.array_record_module import ArrayRecordWriter

    path = os.path.join(tmpdir(), name)
    w = ArrayRecordWriter(path, "group_size:1")
    for r in records:
        w.write(r)
    w.close()
    return path


def sampler(num_records: Any, **kw: Any) -> Any:
    """grain.samplers.IndexSampler with shard_options=NoSharding() passed explicitly.

    Upstream defaults shard_options to NoSharding(); passing it explicitly keeps the
    cases that are about something else independent of whether an implementation
    has that default (case smp.index.defaults checks the default itself).
    """
    import grain

    kw.setdefault("shard_options", grain.sharding.NoSharding())
    return grain.samplers.IndexSampler(num_records, **kw)


def logged_or_warned(fn: Callable[[], Any]) -> dict[str, Any]:
    """Run `fn`; say whether the user was warned, by warnings.warn or by a log record
    at WARNING or above (upstream logs through absl, ours may use warnings)."""
    import logging

    records: list[logging.LogRecord] = []

    class _H(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if record.levelno >= logging.WARNING:
                records.append(record)

    h = _H()
    root = logging.getLogger()
    root.addHandler(h)
    try:
        with warnings.catch_warnings(record=True) as got:
            warnings.simplefilter("always")
            value = fn()
    finally:
        root.removeHandler(h)
    return {"value": value, "warned": bool(got) or bool(records)}


def outcome(fn: Callable[[], Any]) -> dict[str, Any]:
    """Run `fn` and say what happened, for cases that check several calls in a row."""
    try:
        return {"ok": fn()}
    except Exception as e:
        return {"raised": type(e).__name__, "mro": exc_mro(e)}


def exc_mro(e: BaseException) -> list[str]:
    return [c.__name__ for c in type(e).__mro__ if c not in (object, BaseException)]


def warns(fn: Callable[[], Any]) -> dict[str, Any]:
    """Run `fn`, returning its value and the categories of warnings it raised."""
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        value = fn()
    cats = sorted({w.category.__name__ for w in got})
    return {"value": value, "warnings": cats}


def sig(obj: Any) -> Any:
    """A comparable signature: [name, kind, default] per parameter."""
    if inspect.ismodule(obj):
        return {"module": True}
    kind = kind_of(obj)
    if kind == "typing-alias":
        return {"kind": kind}  # a Union/alias: its "signature" is typing's, not the API's
    try:
        s = inspect.signature(obj)
    except (TypeError, ValueError) as e:
        s = _doc_signature(obj)
        if s is None:
            return {"nosig": type(e).__name__, "kind": kind}
    params = []
    for p in s.parameters.values():
        d = "<required>" if p.default is inspect.Parameter.empty else default_repr(p.default)
        params.append([p.name, p.kind.name, d])
    return {"kind": kind_of(obj), "params": params}


def _doc_signature(obj: Any) -> inspect.Signature | None:
    """The signature a compiled function states on its docstring's first line
    ("name(a: int, b: int) -> int"), as pybind11 and C extensions write it."""
    doc = (getattr(obj, "__doc__", None) or "").strip().splitlines()
    name = getattr(obj, "__name__", None)
    if not doc or not name or not doc[0].startswith(name + "("):
        return None
    text = doc[0][len(name) :]
    ns: dict[str, Any] = {}
    try:
        exec(f"def _f{text}: pass", {"Any": Any}, ns)  # annotations are not evaluated
    except Exception:
        try:
            bare = text.split("->")[0].strip()
            exec(f"def _f{bare}: pass", {}, ns)
        except Exception:
            return None
    return inspect.signature(ns["_f"])


def kind_of(obj: Any) -> str:
    if inspect.isclass(obj):
        return "class"
    if inspect.ismodule(obj):
        return "module"
    if inspect.isroutine(obj):
        return "function"
    mod = type(obj).__module__
    if mod in ("typing", "types"):
        return "typing-alias"
    if callable(obj):
        return "callable"
    return "value"


def default_repr(d: Any) -> str:
    if d is None or isinstance(d, bool | int | float | str | bytes):
        return repr(d)
    if isinstance(d, enum.Enum):
        return f"{type(d).__name__}.{d.name}"
    if "Default" in type(d).__name__:
        # A marker meaning "left at its default" (so options can merge); the
        # effective value is compared by behaviour cases, not here.
        return "<default-marker>"
    if isinstance(d, tuple | list | frozenset | set):
        inner = ", ".join(default_repr(x) for x in d)
        return {tuple: f"({inner})", list: f"[{inner}]"}.get(type(d), f"{{{inner}}}")
    if inspect.isclass(d):
        return f"class {d.__name__}"
    if dataclasses.is_dataclass(d):
        fields = ", ".join(
            f"{f.name}={default_repr(getattr(d, f.name))}"
            for f in dataclasses.fields(d)
            if not f.name.startswith("_")
        )
        return f"{type(d).__name__}({fields})"
    return f"<{type(d).__name__}>"


def public_names(obj: Any) -> list[str]:
    return sorted(n for n in dir(obj) if not n.startswith("_"))


def obj_type(x: Any) -> str:
    return type(x).__name__


def is_close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)


HELPERS: dict[str, Any] = {
    "L": L,
    "first": first,
    "take": take,
    "use": use,
    "staged": staged,
    "state_shape": state_shape,
    "types_of": types_of,
    "tmpdir": tmpdir,
    "write_array_record": write_array_record,
    "outcome": outcome,
    "sampler": sampler,
    "logged_or_warned": logged_or_warned,
    "warns": warns,
    "sig": sig,
    "public_names": public_names,
    "obj_type": obj_type,
}
