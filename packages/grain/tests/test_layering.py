"""The layer rules of DESIGN.md, checked twice: at run time and in the source.

At run time, each test starts a new Python process, imports one package of the
workspace and reports the top-level names in `sys.modules` before and after
that import. Nothing in this process's own `sys.modules` (pytest, hypothesis,
other tests) can hide or fake a violation. Rules checked:
  * a layer never loads a module of a layer above it, nor any `grain*` module
    that it does not depend on (DESIGN.md's table);
  * each distribution declares exactly the dependencies of that table, and
    `grain` declares grain-jax in its `jax` extra only; array-record and
    orbax-checkpoint are extras (no free-threaded wheel);
  * `grain_index` adds nothing but the standard library and numpy;
  * jax, orbax (and, for `grain`, tensorflow and torch) are imported lazily,
    never at package import time.

In the source (the seams), every .py file of the repository is parsed with
`ast`, so that lazy imports, imports inside tests and code run in child
interpreters count too. Rules checked:
  (a) no file imports a private module or name of another grain package
      (``from grain_x._y import z``, ``import grain_x._y``, ``from grain_x import
      _y``), nor reaches one as an attribute (``grain_x._y.z``); a package
      offers what others need under public names (`grain_index.checks`,
      `grain_dataset.extension`, ...);
  (b) no string names one either: an argument of importlib.import_module,
      __import__, find_spec or pytest.importorskip, a mock.patch or
      monkeypatch target, a sys.modules key, or code handed to a child
      interpreter (``python -c "import grain_x._y"``);
  (c) the library code of a package imports only layers below it, with one
      exception, grain_dataset's lazy import of grain_mp inside
      `IterDataset.mp_prefetch`; the packages form no cycle; and each
      package's pyproject.toml declares exactly the grain packages its library
      code imports (besides that lazy one);
  (d) inside grain_dataset, each room (private subpackage) imports only the rooms
      declared below it (ROOMS, and each room's README.md), no room imports the
      public modules, and no private module lives outside a room.
Tests, integration tests and benchmarks may import any layer (they run in the
whole workspace), through public names only. `grain._src` is exempt from (a):
it re-exports public names under Grain's private paths for clients that import
those (Keras), so importing it from outside is its purpose.
"""

import ast
import graphlib
import importlib
import importlib.metadata
import json
import re
import subprocess
import sys
import textwrap
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest

# DESIGN.md's layer table: each distribution and what it declares, lowest first.
# array-record and orbax-checkpoint are extras (`arrayrecord`, `orbax`), not in the table:
# they have no free-threaded wheel (docs/freethreaded.md; checked below).
DEPENDENCIES = {
    "grain-index": {"numpy"},
    "grain-sources": {"numpy"},
    "grain-dataset": {"grain-index", "grain-sources"},
    # cloudpickle: workers that do not fork (ArrayRecord pipelines) get lambdas too.
    "grain-mp": {"grain-dataset", "grain-index", "cloudpickle"},
    # The conversion engine: grain-sources' readers and writer, grain-mp's worker_env.
    "grain-convert": {"grain-sources", "grain-mp", "cloudpickle", "numpy"},
    # grain-jax sits above grain-mp but does not use it.
    "grain-jax": {"grain-dataset", "grain-index", "jax"},
    "grain": {"grain-index", "grain-sources", "grain-dataset", "grain-mp", "grain-convert"},
}
LAYERS = tuple(name.replace("-", "_") for name in DEPENDENCIES)
# The face is published as `grainline` (Google's Grain owns `grain` on the registry);
# its import name and its directory under packages/ stay `grain`.
PUBLISHED = {"grain": "grainline"}
# Extras that add a layer: `pip install "grainline[jax]"`. The names grain takes from an
# optional layer are imported lazily (grain._jax_extra), so `import grain` works without it.
# `arrayrecord-pure` names grain-sources (a dependency anyway) to turn on its extra of the
# same name.
OPTIONAL_LAYERS = {
    "grain": {
        "jax": {"grain-jax"},
        "arrayrecord-pure": {"grain-sources"},
        # `grainline[ray]` is grain-convert's `ray` extra.
        "ray": {"grain-convert"},
    }
}
# Compiled dependencies without a free-threaded wheel, each behind an extra.
NO_FREE_THREADED_WHEEL = {
    "grain-sources": {"arrayrecord": "array-record"},
    "grain-jax": {"orbax": "orbax-checkpoint"},
}


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
    "grain_convert": {"ray", "pyarrow", "jax"},
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
    published = PUBLISHED.get(distribution, distribution)
    requirements = importlib.metadata.requires(published) or []
    # Optional extras ("; extra == ...") are not part of the layer's contract.
    required = {
        re.split(r"[\s<>=!~;\[]", requirement, maxsplit=1)[0].lower()
        for requirement in requirements
        if "extra ==" not in requirement
    }
    assert required == DEPENDENCIES[distribution]
    extras = {}
    for requirement in requirements:
        if match := re.search(r"extra == ['\"]([\w-]+)['\"]", requirement):
            name = re.split(r"[\s<>=!~;\[]", requirement, maxsplit=1)[0].lower()
            extras.setdefault(match[1], set()).add(name)
    grain_extras = {
        extra: names & set(DEPENDENCIES)
        for extra, names in extras.items()
        if names & set(DEPENDENCIES)
    }
    assert grain_extras == OPTIONAL_LAYERS.get(distribution, {})
    for extra, name in NO_FREE_THREADED_WHEEL.get(distribution, {}).items():
        assert name in extras.get(extra, set()), f"{name} belongs in the {extra!r} extra"
    assert importlib.metadata.version(published) == "0.1.0"
    module = importlib.import_module(distribution.replace("-", "_"))
    assert "Layout:" in (module.__doc__ or ""), "each package opens with a layout docstring"


# -- the seams, read from the source -----------------------------------------------------------

ROOT = Path(__file__).resolve().parents[3]
RANK = {name: rank for rank, name in enumerate(LAYERS)}  # an import may only point down
# The one upward edge DESIGN.md allows: `IterDataset.mp_prefetch` imports grain-mp
# lazily, inside the method, by grain-mp's public name.
LAZY_UPWARD = {("grain_dataset", "grain_mp")}
# Meant to be imported from outside: see the module docstring.
COMPAT_ALIASES = ("grain._src",)
# Calls whose first (string) argument names a module to import or look up.
_IMPORTING_CALLS = {"import_module", "__import__", "find_spec", "importorskip"}
_DOTTED = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)+")


@dataclass(frozen=True)
class Reference:
    """One place where a file names a grain module: an import, a string, an attribute."""

    line: int
    path: str  # the dotted path named, e.g. "grain_dataset._stage.MapStage"
    how: str  # "import", "string" or "attribute"
    in_function: bool = False

    @property
    def package(self):
        return self.path.partition(".")[0]


def _is_private(part):
    return part.startswith("_") and not (part.startswith("__") and part.endswith("__"))


def references(source, line_offset=0):
    """Every grain module path that `source` imports or names, with where and how."""
    found = []

    def visit(node, in_function):
        line = line_offset + getattr(node, "lineno", 0)
        if isinstance(node, ast.Import):
            found.extend(Reference(line, a.name, "import", in_function) for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            # `from grain_x import _y`: _y is a module or a name, private either way.
            found.append(Reference(line, node.module, "import", in_function))
            found.extend(
                Reference(line, f"{node.module}.{a.name}", "import", in_function)
                for a in node.names
                if a.name != "*"
            )
        elif isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            first = node.args[0] if node.args else None
            if (
                name in _IMPORTING_CALLS
                and isinstance(first, ast.Constant)
                and isinstance(first.value, str)
            ):
                found.append(Reference(line, first.value, "import", in_function))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            text = node.value
            if _DOTTED.fullmatch(text) and text.partition(".")[0] in RANK:
                # mock.patch / monkeypatch targets, sys.modules keys, lazy-import tables.
                found.append(Reference(line, text, "string", in_function))
            elif "import" in text:
                # Code handed to a child interpreter (`python -c ...`), if it parses.
                try:
                    tree = ast.parse(textwrap.dedent(text))
                except (SyntaxError, ValueError):
                    tree = None
                if tree is not None:
                    found.extend(references(ast.unparse(tree), line - 1))
        elif isinstance(node, ast.Attribute):
            parts = []
            base = node
            while isinstance(base, ast.Attribute):
                parts.append(base.attr)
                base = base.value
            if isinstance(base, ast.Name) and base.id in RANK:
                path = ".".join([base.id, *reversed(parts)])
                found.append(Reference(line, path, "attribute", in_function))
                return  # the inner attributes are prefixes of this path
        # An `if TYPE_CHECKING:` block never runs: its imports are as lazy as a function's.
        inside = (
            in_function
            or isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
            or (isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test))
        )
        for child in ast.iter_child_nodes(node):
            visit(child, inside)

    visit(ast.parse(source), False)
    return found


def private_reach(source, owner):
    """Rules (a) and (b): where `source`, a file of package `owner` (None: of no
    package), names a private module or name of another grain package."""
    problems = set()
    for ref in references(source):
        if ref.package not in RANK or ref.package == owner:
            continue
        if any(ref.path == alias or ref.path.startswith(alias + ".") for alias in COMPAT_ALIASES):
            continue
        parts = ref.path.split(".")
        private = [i for i, part in enumerate(parts) if i and _is_private(part)]
        if private:
            # Up to the first private part: one report per statement, not one per name.
            reached = ".".join(parts[: private[0] + 1])
            problems.add((ref.line, f"line {ref.line}: {ref.how} of {reached}"))
    return [text for _, text in sorted(problems)]


def package_edges(source, owner):
    """The other grain packages that `source`, library code of `owner`, imports: for
    each, whether every import of it sits inside a function (is lazy)."""
    edges = {}
    for ref in references(source):
        if ref.how == "import" and ref.package in RANK and ref.package != owner:
            edges[ref.package] = edges.get(ref.package, True) and ref.in_function
    return edges


def layering_problems(edges):
    """Rule (c) over {package: {imported package: lazy?}}: every edge points down the
    layers but LAZY_UPWARD taken lazily, and the packages form no cycle."""
    problems = []
    for owner, targets in sorted(edges.items()):
        for target, lazy in sorted(targets.items()):
            if RANK[target] < RANK[owner] or ((owner, target) in LAZY_UPWARD and lazy):
                continue
            when = "lazily" if lazy else "at import time"
            problems.append(f"{owner} imports {target} {when}, a layer not below its own")
    graph = {
        owner: {target for target in targets if (owner, target) not in LAZY_UPWARD}
        for owner, targets in edges.items()
    }
    try:
        graphlib.TopologicalSorter(graph).prepare()
    except graphlib.CycleError as error:
        problems.append(f"the packages import each other in a cycle: {error.args[1]}")
    return problems


def _owner(path):
    """(the package `path` belongs to, or None; whether it is library code)."""
    parts = path.relative_to(ROOT).parts
    if len(parts) > 3 and parts[0] == "packages" and parts[2] == "src":
        return parts[3], True
    if len(parts) > 2 and parts[0] == "packages":
        return parts[1].replace("-", "_"), False
    return None, False


def _python_files():
    skip = {"__pycache__", "build", "dist", "node_modules"}
    return sorted(
        path
        for path in ROOT.rglob("*.py")
        if not any(part.startswith(".") or part in skip for part in path.relative_to(ROOT).parts)
    )


def _library_edges():
    edges = {name: {} for name in LAYERS}
    for path in _python_files():
        owner, is_library = _owner(path)
        if is_library:
            for target, lazy in package_edges(path.read_text(), owner).items():
                edges[owner][target] = edges[owner].get(target, True) and lazy
    return edges


def test_the_source_scan_sees_every_package():
    owners = {_owner(path) for path in _python_files()}
    for package in LAYERS:
        assert (package, True) in owners, f"no library code of {package} under {ROOT}"
        assert (package, False) in owners, f"no tests of {package} under {ROOT}"
    assert any(path.parts[-2] == "integration_tests" for path in _python_files())
    assert any(path.parts[-2] == "benchmarks" for path in _python_files())


def test_no_file_reaches_into_another_packages_private_modules():
    problems = []
    for path in _python_files():
        if path == Path(__file__).resolve():
            continue  # its planted sources below break the rules on purpose
        owner, _ = _owner(path)
        problems += [
            f"{path.relative_to(ROOT)} {problem}"
            for problem in private_reach(path.read_text(), owner)
        ]
    assert not problems, (
        "these files use private modules of another grain package; import the public "
        "names instead (grain_index.checks, grain_dataset.extension, a package's own "
        "namespace), or make what they need public there:\n" + "\n".join(problems)
    )


def test_library_imports_point_down_the_layers_without_cycles():
    assert layering_problems(_library_edges()) == []


def test_each_package_declares_exactly_the_grain_packages_it_imports():
    edges = _library_edges()
    for package in LAYERS:
        distribution = "grain" if package == "grain" else package.replace("_", "-")
        project = tomllib.loads((ROOT / "packages" / distribution / "pyproject.toml").read_text())
        optional = project["project"].get("optional-dependencies", {})
        declared, in_extras = (
            {
                re.split(r"[\s<>=!~;\[]", requirement, maxsplit=1)[0].replace("-", "_")
                for requirement in requirements
            }
            & set(RANK)
            for requirements in (
                project["project"]["dependencies"],
                [r for extra in optional.values() for r in extra],
            )
        )
        imported = {t for t in edges[package] if (package, t) not in LAZY_UPWARD}
        assert declared | in_extras == imported, (
            f"{distribution}'s pyproject.toml declares the grain packages "
            f"{sorted(declared | in_extras)} but its library code imports {sorted(imported)}"
        )
        # A layer only in an extra may be missing: it is imported only inside functions.
        eager = sorted(t for t in in_extras - declared if not edges[package][t])
        assert not eager, f"{package} imports the optional {eager} at import time"


# The checkers themselves, on planted sources: each rule catches what it is for.


@pytest.mark.parametrize(
    "source",
    [
        "from grain_dataset._stage import MapStage",
        "import grain_dataset._state",
        "import grain_dataset._state as state",
        "from grain_index import _validate",
        "from grain_dataset.extension import _private_helper",
        "def f():\n    from grain_mp._prefetch import mp_prefetch",
        "import importlib\nimportlib.import_module('grain_mp._prefetch')",
        "__import__('grain_index._validate')",
        "import pytest\npytest.importorskip('grain_dataset._window_shuffle')",
        "import sys\nsys.modules['grain_dataset._guard']",
        "def t(monkeypatch):\n    monkeypatch.setattr('grain_dataset._prefetch.X', 1)",
        "import grain_dataset\ngrain_dataset._base.register",
        "CHILD = '''\nimport json\nfrom grain_dataset._guard import POLL_S\n'''",
    ],
)
def test_a_planted_private_import_is_caught(source):
    assert private_reach(source, owner="grain_jax"), source
    assert private_reach(source, owner=None), source


@pytest.mark.parametrize(
    ("source", "owner"),
    [
        ("from grain_dataset.extension import MapStage, check_state", "grain_mp"),
        ("from grain_index import checks\nchecks.int_in_range(1, 'x', 0)", "grain_dataset"),
        ("from grain_dataset._stage import MapStage", "grain_dataset"),  # its own
        ("import importlib\nimportlib.import_module('grain_mp')", "grain_dataset"),
        ("from grain_jax import __version__", "grain"),  # dunders are public
        ("from grain._src.python.shared_memory_array import SharedMemoryArray", None),
        ("MESSAGE = 'call grain_mp._sweep later'", None),  # prose, not a path
        ("import numpy._core", None),  # not a grain package
    ],
)
def test_public_and_own_imports_pass(source, owner):
    assert private_reach(source, owner) == []


def test_a_planted_upward_import_or_cycle_is_caught():
    assert layering_problems({"grain_index": package_edges("import grain_dataset", "grain_index")})
    # The allowed edge, only lazily:
    lazy = package_edges("def f():\n    import grain_mp", "grain_dataset")
    eager = package_edges("import grain_mp\ndef f():\n    import grain_mp", "grain_dataset")
    assert lazy == {"grain_mp": True}
    assert eager == {"grain_mp": False}
    # Type-checking imports never run; anything else at module level does.
    typing_only = "if TYPE_CHECKING:\n    import grain_jax\nelse:\n    pass"
    assert package_edges(typing_only, "grain") == {"grain_jax": True}
    assert package_edges("if True:\n    import grain_jax", "grain") == {"grain_jax": False}
    assert layering_problems({"grain_dataset": lazy, "grain_mp": {"grain_dataset": False}}) == []
    assert layering_problems({"grain_dataset": eager})
    # grain_jax lazily importing grain (a layer above) is not the allowed edge.
    assert layering_problems({"grain_jax": {"grain": True}})
    # A cycle, on its own (with RANK reordered it would pass the direction check).
    assert any(
        "cycle" in problem
        for problem in layering_problems(
            {"grain_index": {"grain_sources": False}, "grain_sources": {"grain_index": False}}
        )
    )


# Rooms inside grain_dataset: its private modules live in subpackages, each importing
# only the rooms listed for it here (its README.md says the same; checked below). The
# public modules (grain_dataset itself, .extension, .stages, .monitoring) may import any
# room; no room imports them, and no private module lives outside a room.
DATASET = ROOT / "packages/grain-dataset/src/grain_dataset"
ROOMS = {
    "_common": set(),
    "_runtime": {"_common"},
    "_core": {"_common", "_runtime"},
    "_threads": {"_common", "_runtime", "_core"},
    "_map_stages": {"_common", "_runtime", "_core"},
    "_iter_stages": {"_common", "_runtime", "_core", "_threads", "_map_stages"},
    "_sequences": {"_common", "_runtime", "_core", "_threads", "_map_stages", "_iter_stages"},
}
PUBLIC = "the public modules"
# Edges against those rules, each with why. A listed edge that no longer occurs fails too,
# so the list only shrinks.
ROOM_EXCEPTIONS = {
    # Inside a function: a batch-size change on restore needs `is_infinite`.
    ("_runtime._fingerprint", "_core"),
    # Another lane edits this module now; its imports can name the rooms after that merge.
    ("_sequences._token_budget", PUBLIC),
}
_MAY_IMPORT = re.compile(r"^\*\*May import:\*\*(.*)$", re.M)


def _room_named(path):
    """The room a dotted path names inside grain_dataset (PUBLIC, a room, or a private
    module outside any room); None for a path outside grain_dataset."""
    parts = path.split(".")
    if parts[0] != "grain_dataset":
        return None
    if len(parts) == 1 or (parts[1].startswith("__") and parts[1].endswith("__")):
        return None  # the package itself (its directory, say), loaded before any room
    if not _is_private(parts[1]):
        return PUBLIC
    return parts[1]


def room_problems(modules):
    """{module: source}, modules named relative to grain_dataset ("_core._base",
    "extension"): every reference from a room to a room it may not import, and every
    private module outside a room. Returns (problems, exceptions that were used)."""
    problems, used = set(), set()
    for module, source in sorted(modules.items()):
        parts = module.split(".")
        if not _is_private(parts[0]):
            continue  # a public module: may import any room
        if parts[0] not in ROOMS:
            problems.add(f"grain_dataset.{module} is a private module outside the rooms")
            continue
        room = parts[0]
        for ref in references(source):
            target = _room_named(ref.path)
            if target is None or target == room:
                continue
            if target in ROOMS[room]:
                continue
            if (module, target) in ROOM_EXCEPTIONS:
                used.add((module, target))
                continue
            what = target if target == PUBLIC else f"room {target}"
            if target != PUBLIC and target not in ROOMS:
                what = f"grain_dataset.{target}, a private module outside the rooms"
            problems.add(f"grain_dataset.{module} line {ref.line}: {ref.how} of {what}")
    return sorted(problems), used


def _dataset_modules():
    modules = {}
    for path in sorted(DATASET.rglob("*.py")):
        parts = path.relative_to(DATASET).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        if parts:
            modules[".".join(parts)] = path.read_text()
    return modules


def test_grain_dataset_rooms_import_only_the_rooms_below_them():
    problems, used = room_problems(_dataset_modules())
    assert not problems, (
        "grain_dataset's rooms import against their order (ROOMS here, the README.md of "
        "each room): move the module to the room it belongs in, or the shared code to a "
        "lower room:\n" + "\n".join(problems)
    )
    assert used == ROOM_EXCEPTIONS, f"stale ROOM_EXCEPTIONS: {sorted(ROOM_EXCEPTIONS - used)}"


def test_grain_dataset_rooms_form_no_cycle_and_match_their_readmes():
    graphlib.TopologicalSorter(ROOMS).prepare()
    on_disk = {p.name for p in DATASET.iterdir() if p.is_dir() and _is_private(p.name)}
    assert on_disk == set(ROOMS)
    for room, allowed in ROOMS.items():
        readme = (DATASET / room / "README.md").read_text()
        declared = _MAY_IMPORT.search(readme)
        assert declared, f"{room}/README.md has no '**May import:**' line"
        assert set(re.findall(r"`(_\w+)`", declared.group(1))) == allowed, room


@pytest.mark.parametrize(
    ("module", "source"),
    [
        ("_common._errors", "from grain_dataset._core._base import MapDataset"),
        ("_runtime._guard", "def f():\n    from grain_dataset._core import _base"),
        ("_core._base", "from grain_dataset._threads import _read_ahead"),
        ("_map_stages._map", "import grain_dataset._iter_stages._iter_map"),
        ("_threads._read_ahead", "from grain_dataset._map_stages._batch import batch"),
        ("_iter_stages._limit", "from grain_dataset.extension import IterStage"),
        ("_iter_stages._limit", "import grain_dataset\ngrain_dataset._sequences._packing"),
        ("_core._stage", "from grain_dataset import _flat_module"),
        ("_flat_module", "import numpy"),
    ],
)
def test_a_planted_import_against_the_rooms_is_caught(module, source):
    problems, _ = room_problems({module: source})
    assert problems, (module, source)


@pytest.mark.parametrize(
    ("module", "source"),
    [
        ("_sequences._packing", "from grain_dataset._core._base import IterDataset"),
        ("_iter_stages._iter_mix", "from grain_dataset._map_stages import _combine"),
        ("_core._base", "def f():\n    from grain_dataset._core._stats import collect"),
        ("extension", "from grain_dataset._iter_stages._positional import split"),
        ("_common._config", "import grain_index\nimport numpy"),
    ],
)
def test_imports_that_follow_the_rooms_pass(module, source):
    assert room_problems({module: source})[0] == []
