"""The layer rules of DESIGN.md, checked on what a fresh interpreter really imports.

Each test starts a new Python process, imports one package of the workspace and
reports the top-level names in `sys.modules` before and after that import.
Nothing in this process's own `sys.modules` (pytest, hypothesis, other tests)
can hide or fake a violation.

Rules checked:
  * a layer never loads a module of a layer above it, nor any `grain*` module
    that it does not depend on (DESIGN.md's table);
  * each distribution declares exactly the dependencies of that table;
  * `grain_index` adds nothing but the standard library and numpy;
  * jax, orbax (and, for `grain`, tensorflow and torch) are imported lazily,
    never at package import time.
"""

import importlib
import importlib.metadata
import json
import re
import subprocess
import sys

import pytest

# DESIGN.md's layer table: each distribution and what it declares, lowest first.
DEPENDENCIES = {
    "grain-index": {"numpy"},
    "grain-sources": {"numpy", "array-record"},
    "grain-dataset": {"grain-index", "grain-sources"},
    # cloudpickle: workers that do not fork (ArrayRecord pipelines) get lambdas too.
    "grain-mp": {"grain-dataset", "cloudpickle"},
    "grain-jax": {"grain-dataset", "grain-mp", "jax", "orbax-checkpoint"},
    "grain": {"grain-index", "grain-sources", "grain-dataset", "grain-mp", "grain-jax"},
}
LAYERS = tuple(name.replace("-", "_") for name in DEPENDENCIES)


def _grain_closure(distribution):
    """Import names of the grain packages `distribution` depends on, directly or not."""
    found = set()
    for dependency in DEPENDENCIES[distribution]:
        if dependency in DEPENDENCIES:
            found |= {dependency.replace("-", "_")} | _grain_closure(dependency)
    return found


# A package may load only itself and the grain packages it depends on. grain_sources
# sits above grain_index but does not depend on it, so it may not load it either.
ALLOWED_GRAIN = {name.replace("-", "_"): _grain_closure(name) for name in DEPENDENCIES}

# Heavy frameworks that must not be imported just by importing a package.
EAGER_FORBIDDEN = {
    "grain_jax": {"jax", "jaxlib", "orbax"},
    "grain": {"jax", "jaxlib", "orbax", "tensorflow", "torch"},
}

# Third-party top-level modules a package may add besides the standard library
# and itself. Only grain_index is held to this rule here: numpy is its sole dependency.
THIRD_PARTY_ALLOWED = {
    "grain_index": {"numpy"},
}

# The package name arrives as argv[1]; importlib is loaded at start-up anyway.
_CHILD = """
import importlib, json, sys
def top():
    return sorted({name.partition(".")[0] for name in sys.modules})
before = top()
importlib.import_module(sys.argv[1])
print(json.dumps({"before": before, "after": top()}))
"""


def _import_in_fresh_interpreter(package, cwd):
    """Returns (names present before the import, names present after it)."""
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD, package],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=cwd,  # not the repository root, so only installed packages are importable
        check=False,
    )
    assert proc.returncode == 0, (
        f"`import {package}` failed in a fresh interpreter (rc={proc.returncode}).\n"
        f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    )
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    return set(report["before"]), set(report["after"])


def _is_stdlib(name):
    # `_sysconfigdata_<abi>_<platform>` ships with the interpreter but, being named
    # per platform, is missing from `sys.stdlib_module_names`.
    return name in sys.stdlib_module_names or name.startswith("_sysconfigdata_")


def _is_grain_module(name):
    return name == "grain" or name.startswith("grain_")


@pytest.mark.timeout(120)
@pytest.mark.parametrize("package", LAYERS)
def test_import_respects_layers(package, tmp_path):
    before, after = _import_in_fresh_interpreter(package, tmp_path)
    loaded = after - before

    assert package in after

    # 1. Layering: only the grain packages this one depends on.
    allowed_grain = ALLOWED_GRAIN[package] | {package}
    bad_grain = sorted(n for n in after if _is_grain_module(n) and n not in allowed_grain)
    assert not bad_grain, (
        f"`import {package}` loaded higher-layer or unknown grain modules {bad_grain}; "
        f"it may only load {sorted(allowed_grain)}."
    )

    # 2. Third-party modules: judged on what the import added, so that site
    #    hooks the interpreter runs at start-up (e.g. `.pth` files) do not count.
    if package in THIRD_PARTY_ALLOWED:
        ok = THIRD_PARTY_ALLOWED[package] | {package}
        bad_third_party = sorted(n for n in loaded if not _is_stdlib(n) and n not in ok)
        assert not bad_third_party, (
            f"`import {package}` loaded modules outside the standard library and "
            f"{sorted(THIRD_PARTY_ALLOWED[package])}: {bad_third_party}"
        )

    # 3. Lazy imports of heavy frameworks.
    eager = sorted(EAGER_FORBIDDEN.get(package, set()) & after)
    assert not eager, (
        f"`import {package}` eagerly imported {eager}; import them inside the "
        "functions that need them."
    )


@pytest.mark.parametrize("distribution", sorted(DEPENDENCIES))
def test_declared_dependencies_match_the_layer_table(distribution):
    requirements = importlib.metadata.requires(distribution) or []
    # Optional extras ("; extra == ...") are not part of the layer's contract.
    required = {
        re.split(r"[\s<>=!~;\[]", requirement, maxsplit=1)[0].lower()
        for requirement in requirements
        if "extra ==" not in requirement
    }
    assert required == DEPENDENCIES[distribution]
    assert importlib.metadata.version(distribution) == "0.1.0"
    module = importlib.import_module(distribution.replace("-", "_"))
    assert "Layout:" in (module.__doc__ or ""), "each package opens with a layout docstring"
