"""Every public name of Grain 0.2.18 exists here, with Grain's parameters and defaults.

`grain_0_2_18_api.json` lists Grain's public names per namespace (and the
methods of its main classes) with each callable's parameters: name, kind and
default, as `inspect.signature` shows them in the installed Grain 0.2.18. A
name missing here, a parameter missing or of another kind, or another default
fails this test, unless the tables below list it with the reason; those
reasons are the ones `docs/compatibility.md` gives.
"""

import enum
import importlib
import inspect
import json
import pathlib

import pytest

API = json.loads((pathlib.Path(__file__).parent / "grain_0_2_18_api.json").read_text())["names"]

NOTES = json.loads((pathlib.Path(__file__).parent / "grain_api_notes.json").read_text())
# Names of Grain 0.2.18 that do not exist here, on purpose, and (name, parameter) pairs whose
# kind or default differs ("*": the whole signature), with the reason.
ABSENT = NOTES["absent"]
DIFFERENT = {tuple(key.split(":")): reason for key, reason in NOTES["different"].items()}
# Parameters renamed in methods that are always called positionally.
POSITIONAL_ONLY_IN_PRACTICE = {"__getitem__"}


def resolve(name):
    parts = name.split(".")
    obj = importlib.import_module(parts[0])
    for i, part in enumerate(parts[1:], start=1):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            obj = importlib.import_module(".".join(parts[: i + 1]))
    return obj


def kind_class(kind):
    if kind == "KEYWORD_ONLY":
        return "keyword"
    if kind.startswith("VAR"):
        return kind
    return "positional"


@pytest.mark.parametrize("name", sorted(API))
def test_grain_name_exists_with_its_parameters(name):
    if name in ABSENT:
        with pytest.raises((AttributeError, ImportError)):
            resolve(name)
        return
    obj = resolve(name)
    expected = API[name]["params"]
    if expected is None or name.rsplit(".", 1)[-1] in POSITIONAL_ONLY_IN_PRACTICE:
        return
    if all(p[1].startswith("VAR") for p in expected):
        return  # Grain's protocols, unions and abstract classes show only (*args, **kwargs)
    if isinstance(obj, enum.EnumType):
        return  # an Enum's call signature is Python's: (value, names=None, ...), (*values) on 3.13
    try:
        ours = inspect.signature(obj).parameters
    except (TypeError, ValueError):
        pytest.fail(f"{name} has no signature here")
    owner = name.removesuffix(".__init__")
    if (owner, "*") in DIFFERENT:
        return
    accepts_kwargs = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in ours.values())
    for param, kind, default in expected:
        if kind.startswith("VAR") or (owner, param) in DIFFERENT or param.startswith("_"):
            continue  # (a private dataclass field of Grain's shows up as a parameter)
        if param not in ours:
            assert accepts_kwargs, f"{name} lacks parameter {param}"
            assert kind == "KEYWORD_ONLY", f"{name} lacks parameter {param}"
            continue
        mine = ours[param]
        assert kind_class(mine.kind.name) == kind_class(kind), (name, param, mine.kind, kind)
        our_default = None if mine.default is inspect.Parameter.empty else repr(mine.default)
        if default is not None:  # where Grain requires the argument, a default here is fine
            assert our_default == default, (name, param, our_default, default)
    required = [
        p.name
        for p in ours.values()
        if p.default is inspect.Parameter.empty
        and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
        and p.name not in {q[0] for q in expected}
        and p.name != "self"
    ]
    assert not required, f"{name} requires parameters Grain does not have: {required}"


def test_the_fact_file_covers_every_namespace():
    namespaces = {name.rsplit(".", 1)[0] for name in API if API[name]["kind"] != "method"}
    assert {"grain", "grain.python", "grain.experimental", "grain.transforms"} <= namespaces
    assert len(API) > 400
