"""Existence and signatures of every public name, and the namespace listings.

sig.<namespace>.<Name>      signature (or kind) of each public name of 0.2.18
member.<Class>.<member>     signature of each method of the main classes
names.<namespace>           the public names a namespace offers (extras show up here)
const.<namespace>.<NAME>    the value of each constant
"""

from __future__ import annotations

import importlib
from typing import Any

import grain
from _registry import Case, _register, public_names, sig
from api_names import MEMBERS, NAMESPACES


def resolve(path: str) -> Any:
    """`grain.a.b.C` by attribute access from the `grain` package."""

    parts = path.split(".")
    assert parts[0] == "grain"
    obj: Any = grain
    for p in parts[1:]:
        obj = getattr(obj, p)
    return obj


def _sig_case(path: str) -> None:
    def fn() -> Any:
        return sig(resolve(path))

    _register(Case(f"sig.{path}", fn, f"sig({path})", kind="sig"))


def _member_case(owner: str, member: str) -> None:
    path = f"grain.{owner}.{member}"

    def fn() -> Any:
        import inspect

        cls = resolve(f"grain.{owner}")
        static = inspect.getattr_static(cls, member, None)
        if static is None:
            # Metaclass methods (MapDataset.range ...) are not in the class dict.
            getattr(cls, member)  # raises AttributeError if truly missing
            return sig(getattr(cls, member))
        if isinstance(static, property):
            return {"kind": "property"}
        return sig(getattr(cls, member))

    _register(Case(f"member.{owner}.{member}", fn, f"sig({path})", kind="sig"))


def _names_case(ns: str) -> None:
    def fn() -> Any:
        return public_names(resolve(ns))

    _register(Case(f"names.{ns}", fn, f"public names of {ns}", kind="names"))


for _ns, _names in NAMESPACES.items():
    _names_case(_ns)
    for _n in _names:
        _sig_case(f"{_ns}.{_n}")

for _owner, _members in MEMBERS.items():
    for _m in _members:
        _member_case(_owner, _m)


def _import_case(mod: str) -> None:
    def fn() -> Any:
        m = importlib.import_module(mod)
        return {"module": m.__name__}

    _register(Case(f"import.{mod}", fn, f"import {mod}"))


for _mod in [
    "grain",
    "grain.python",
    "grain.experimental",
    "grain.transforms",
    "grain.sources",
    "grain.samplers",
    "grain.sharding",
    "grain.checkpoint",
    "grain.multiprocessing",
    "grain.constants",
    "grain.python.experimental",
]:
    _import_case(_mod)


def _const_case(path: str) -> None:
    def fn() -> Any:
        v = resolve(path)
        return {"type": type(v).__name__, "value": v}

    _register(Case(f"const.{path}", fn, path))


for _ns in ("grain.constants", "grain.python"):
    for _c in ("DATASET_INDEX", "EPOCH", "INDEX", "META_FEATURES", "RECORD", "RECORD_KEY", "SEED"):
        _const_case(f"{_ns}.{_c}")
