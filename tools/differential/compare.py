"""Comparison of one case's outcomes (ours vs upstream) and its classification.

An *outcome* is the worker's result record: status "ok" with a normalized
value, "raised" with an exception record (type, MRO names, message, stage),
or "timeout" / "hang" / "crash" / "harness-error" / "not-run".

Rules:
- both ok: values equal (floats to 1e-9 relative; top-level lists as multisets
  where the case is marked shuffled). Signature cases ("sig") compare exactly;
  a compatible superset is handed to the by-design table. Namespace listings
  ("names") compare as sets.
- both raised: agree when ours is in upstream's exception family, that is when
  our MRO contains upstream's exception type name or the nearest built-in
  exception class of upstream's MRO (so our ValueError subclass agrees with a
  ValueError; an IndexError does not agree with a KeyError). The stage
  ("construct" vs "use") must match too; where it does not, the difference is
  reported as such ("stage-earlier", "stage-later").
- messages, when both raised in the same family: clients match them with
  `assertRaisesRegex`, so ours must contain upstream's message (ours may add
  its explanation after it). Both are normalized first for what legitimately
  varies between the implementations and runs (`normalize_message`: object
  addresses, module paths of classes, numpy array contents, the arguments inside
  an object's repr, the quoted repr of an iterator, the harness's temporary
  directories, whitespace, an embedded traceback). A message that is not
  contained is tagged "message"; with a stage difference too, the tag is
  "stage-earlier+message" (each part must be explained in bydesign.py). A
  message upstream truncated (the worker keeps 600 characters) is compared on
  its first 300 normalized characters.
- anything else differs.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

BUILTIN_EXCEPTIONS = {
    name
    for name, obj in __import__("builtins").__dict__.items()
    if isinstance(obj, type) and issubclass(obj, BaseException)
}
_TOO_GENERIC = {"Exception", "BaseException"}


def values_equal(a: Any, b: Any) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        if isinstance(a, bool) or isinstance(b, bool):
            return a == b
        if isinstance(a, int | float) and isinstance(b, int | float):
            return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)
        return False
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(values_equal(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(values_equal(x, y) for x, y in zip(a, b, strict=True))
    return a == b


def _multiset(x: list[Any]) -> list[str]:
    return sorted(json.dumps(v, sort_keys=True) for v in x)


def shuffled_equal(a: Any, b: Any) -> bool:
    if isinstance(a, list) and isinstance(b, list):
        return _multiset(a) == _multiset(b)
    if isinstance(a, dict) and isinstance(b, dict) and a.keys() == b.keys():
        return all(shuffled_equal(a[k], b[k]) for k in a)
    return values_equal(a, b)


def exception_family(exc: dict[str, Any]) -> list[str]:
    """Names any of which our exception must carry to agree with `exc` (upstream's)."""
    names = [exc["type"]]
    for n in exc.get("mro", [])[1:]:
        if n in BUILTIN_EXCEPTIONS and n not in _TOO_GENERIC:
            names.append(n)
            break
    return names


def same_family(ours: dict[str, Any], up: dict[str, Any]) -> bool:
    fam = exception_family(up)
    if up["type"] in _TOO_GENERIC:
        return True
    return any(n in ours.get("mro", []) for n in fam)


_ADDRESS = re.compile(r"\b0x[0-9a-fA-F]+\b")
# `grain._src.python.dataset.transformations.map.MapMapDataset` (upstream) and
# `grain_dataset._map_stages._map.MapMapDataset` (ours) are the same public class.
_CLASS_PATH = re.compile(r"\b(?:grain|grain_\w+|__main__)(?:\.\w+)*\.(\w+)")
# numpy reprs print their data (and wrap it differently by width): keep the word.
_ARRAY = re.compile(r"\barray\((?:[^()]|\([^()]*\))*\)")
# `Name(arg=..., ...)` reprs of objects: the class name is part of the message,
# the arguments each implementation prints are not (one nesting level).
_REPR_ARGS = re.compile(r"\b([A-Z]\w*)\((?:[^()]|\([^()]*\))*\)")
# The quoted repr of an iterator names its class, one per stage in each
# implementation (`'PrefetchDatasetIterator(...)'` upstream, ours per stage).
_ITERATOR_REPR = re.compile(r"'[^'\n]*Iterator[^'\n]*'")
# Each run of the harness writes its files under a fresh temporary directory.
_TMP_DIR = re.compile(r"/tmp/graindiff-\w+")
_TRACEBACK = re.compile(r"Traceback \(most recent call last\).*", re.S)
_TRUNCATED_AT = 600  # worker.py keeps this many characters of a message


def normalize_message(msg: str) -> str:
    """What of an exception message must agree: see the module docstring."""
    msg = _TRACEBACK.sub("", msg)
    msg = _ITERATOR_REPR.sub("'<iterator>'", msg)
    msg = _TMP_DIR.sub("/tmp/graindiff-?", msg)
    msg = _ADDRESS.sub("0x?", msg)
    msg = _CLASS_PATH.sub(r"\1", msg)
    msg = _ARRAY.sub("array(...)", msg)
    msg = _REPR_ARGS.sub(r"\1(...)", msg)
    return " ".join(msg.split())


def message_agrees(ours: str, up: str) -> bool:
    """Whether our message contains upstream's, after normalization."""
    u, o = normalize_message(up), normalize_message(ours)
    if len(up) >= _TRUNCATED_AT:
        u = u[:300]
    return u in o


MISSING_TYPES = {"AttributeError", "ImportError", "ModuleNotFoundError", "NameError"}


_MISSING_OBJ = re.compile(r"'(\w+)' object has no attribute")


def is_missing(o: dict[str, Any]) -> bool:
    """Our side failed because a public name is absent (not because of bad input)."""
    if o.get("status") != "raised":
        return False
    exc = o["exc"]
    if exc["type"] not in MISSING_TYPES:
        return False
    msg = exc.get("msg", "")
    if "module 'grain" in msg or "type object '" in msg or "cannot import name" in msg:
        return True
    if "No module named 'grain" in msg:
        return True
    m = _MISSING_OBJ.search(msg)
    return bool(m) and m.group(1).endswith(
        ("Dataset", "Iterator", "DataLoader", "Meta", "Sampler", "Config", "Options")
    )


def _positional_by_position(ours: Any, up: Any) -> tuple[bool, list[str]]:
    """For dunder methods (called by syntax, never by keyword): compare positionally."""
    pos = ("POSITIONAL_ONLY", "POSITIONAL_OR_KEYWORD")
    up_pos = [p for p in up["params"] if p[1] in pos]
    our_pos = [p for p in ours["params"] if p[1] in pos]
    our_var = any(p[1] == "VAR_POSITIONAL" for p in ours["params"])
    up_var = any(p[1] == "VAR_POSITIONAL" for p in up["params"])
    notes = []
    ok = True
    if len(our_pos) < len(up_pos) and not our_var:
        ok = False
        notes.append(f"takes {len(our_pos)} positional arguments, upstream {len(up_pos)}")
    if up_var and not our_var:
        ok = False
        notes.append("no *args")
    for p in our_pos[len(up_pos) :]:
        if p[2] == "<required>" and not up_var:
            ok = False
            notes.append(f"extra required parameter {p[0]!r}")
    names_u = [p[0] for p in up_pos]
    names_o = [p[0] for p in our_pos]
    if names_u != names_o[: len(names_u)]:
        notes.append(f"positional names {names_u} -> {names_o} (dunder: names not part of the API)")
    return ok, notes


def sig_compatible(ours: Any, up: Any, by_position: bool = False) -> tuple[bool, list[str]]:
    """Whether every call valid against upstream's signature is valid against ours.

    Returns (compatible, notes). Parameters are [name, kind, default].
    """
    notes: list[str] = []
    if not (isinstance(ours, dict) and isinstance(up, dict)):
        return False, ["not signatures"]
    if by_position and "params" in up and "params" in ours:
        return _positional_by_position(ours, up)
    if "params" not in up or "params" not in ours:
        return ours == up, ([] if ours == up else ["kind differs"])
    if ours.get("kind") != up.get("kind"):
        notes.append(f"kind {up.get('kind')} -> {ours.get('kind')}")
    up_p = up["params"]
    our_p = ours["params"]
    ok = True
    our_by_name = {p[0]: (i, p) for i, p in enumerate(our_p)}
    our_var_pos = any(p[1] == "VAR_POSITIONAL" for p in our_p)
    our_var_kw = any(p[1] == "VAR_KEYWORD" for p in our_p)
    positional = ("POSITIONAL_ONLY", "POSITIONAL_OR_KEYWORD")
    for i, (name, kind, default) in enumerate(up_p):
        if kind in ("VAR_POSITIONAL", "VAR_KEYWORD"):
            if not any(p[1] == kind for p in our_p):
                ok = False
                notes.append(
                    f"missing *{name}" if kind == "VAR_POSITIONAL" else f"missing **{name}"
                )
            continue
        if name not in our_by_name:
            if kind == "KEYWORD_ONLY" and our_var_kw:
                notes.append(f"{name} only via **kwargs")
                continue
            if kind == "POSITIONAL_ONLY" and our_var_pos:
                continue
            ok = False
            notes.append(f"missing parameter {name!r}")
            continue
        j, (_, okind, odefault) = our_by_name[name]
        if kind in positional and (j != i or okind not in positional):
            ok = False
            notes.append(f"{name!r} not at position {i} ({okind} at {j})")
        if kind == "POSITIONAL_OR_KEYWORD" and okind == "POSITIONAL_ONLY":
            ok = False
            notes.append(f"{name!r} is positional-only in ours")
        if kind == "KEYWORD_ONLY" and okind not in ("KEYWORD_ONLY", "POSITIONAL_OR_KEYWORD"):
            ok = False
            notes.append(f"{name!r} not accepted by keyword")
        if default != "<required>" and odefault != default:
            if odefault == "<required>":
                ok = False
                notes.append(f"{name!r} required in ours (upstream default {default})")
            else:
                ok = False
                notes.append(f"{name!r} default {default} -> {odefault}")
        if default == "<required>" and odefault != "<required>":
            notes.append(f"{name!r} optional in ours")
        if kind == "KEYWORD_ONLY" and okind == "POSITIONAL_OR_KEYWORD":
            notes.append(f"{name!r} also positional in ours")
    up_names = {p[0] for p in up_p}
    for name, kind, default in our_p:
        if name in up_names or kind in ("VAR_POSITIONAL", "VAR_KEYWORD"):
            continue
        if default == "<required>":
            ok = False
            notes.append(f"extra required parameter {name!r}")
        else:
            notes.append(f"extra optional parameter {name!r}")
    return ok, notes


def compare(meta: dict[str, Any], ours: dict[str, Any], up: dict[str, Any]) -> dict[str, Any]:
    """Classify without the by-design table: returns {"verdict", "why", "detail"}.

    verdict is "agree" or "differ"; `why` is a short machine tag used by the
    by-design table (e.g. "sig-superset", "names-extra", "stage-earlier").
    """
    so, su = ours.get("status"), up.get("status")
    kind = meta.get("kind", "value")
    if su == "ok" and so == "ok":
        a, b = ours.get("value"), up.get("value")
        if kind == "sig":
            if values_equal(a, b):
                return {"verdict": "agree"}
            member = meta["case"].rsplit(".", 1)[-1]
            ok, notes = sig_compatible(a, b, by_position=member.startswith("__"))
            return {
                "verdict": "differ",
                "why": "sig-superset" if ok else "sig-incompatible",
                "detail": "; ".join(notes),
            }
        if kind == "names":
            missing = sorted(set(b) - set(a))
            extra = sorted(set(a) - set(b))
            if not missing and not extra:
                return {"verdict": "agree"}
            return {
                "verdict": "differ",
                "why": "names-extra" if not missing else "names-missing",
                "detail": f"missing: {missing}; extra: {extra}",
                "extra": extra,
                "missing": missing,
            }
        eq = shuffled_equal(a, b) if meta.get("shuffled") else values_equal(a, b)
        if eq:
            return {"verdict": "agree"}
        if meta.get("shuffled") is False and shuffled_equal(a, b):
            return {
                "verdict": "differ",
                "why": "order-only",
                "detail": "same elements, other order",
            }
        return {"verdict": "differ", "why": "value"}
    if su == "raised" and so == "raised":
        eu, eo = up["exc"], ours["exc"]
        if not same_family(eo, eu):
            if is_missing(ours):
                return {"verdict": "differ", "why": "missing", "detail": eo.get("msg", "")}
            return {
                "verdict": "differ",
                "why": "exception-type",
                "detail": f"{eu['type']} vs {eo['type']}",
            }
        same_message = message_agrees(eo.get("msg", ""), eu.get("msg", ""))
        plus = "" if same_message else "+message"
        lacks = "" if same_message else "; ours' message lacks upstream's wording"
        st_u, st_o = eu.get("stage"), eo.get("stage")
        if st_u != st_o:
            if st_o == "construct" and st_u == "use":
                return {
                    "verdict": "differ",
                    "why": "stage-earlier" + plus,
                    "detail": "ours raises at construction, upstream on use" + lacks,
                }
            return {
                "verdict": "differ",
                "why": "stage-later" + plus,
                "detail": f"upstream raises at {st_u}, ours at {st_o}" + lacks,
            }
        if not same_message:
            return {
                "verdict": "differ",
                "why": "message",
                "detail": "ours' message lacks upstream's wording",
            }
        return {"verdict": "agree"}
    if su == so and su in ("timeout", "hang", "crash"):
        return {"verdict": "agree"}  # both sides fail the same way (recorded as such)
    if su == "ok" and so == "raised":
        if is_missing(ours):
            return {"verdict": "differ", "why": "missing", "detail": ours["exc"].get("msg", "")}
        return {"verdict": "differ", "why": "ours-raises"}
    if su == "raised" and so == "ok":
        return {"verdict": "differ", "why": "ours-accepts"}
    return {"verdict": "differ", "why": f"status {su} vs {so}"}
