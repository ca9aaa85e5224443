"""The layer tables of the docs say what each package's pyproject.toml requires.

docs/contributing.md ("builds on") and docs/concepts.md ("depends on") each hold
a table of the workspace's packages. Every such table must have one row per
package under packages/ (by its distribution name), and the dependency cell of
a row must name exactly the requirements of that package's `dependencies`
(names only: versions and extras dropped). Text in parentheses is a note (an
extra, a reason) and is not read. test_layering.py checks that the imports of
each package's code match its pyproject.toml, so the docs, the declarations and
the imports agree. README's "Install a layer" table must name every package.
"""

import re
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
# The docs whose layer tables are checked, and the header of the dependency column.
TABLES = {"docs/contributing.md": "builds on", "docs/concepts.md": "depends on"}
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def _requirement_name(requirement):
    name = re.split(r"[\s<>=!~;\[(]", requirement.strip(), maxsplit=1)[0]
    return name.lower().replace("_", "-")


def declared_dependencies(root=ROOT):
    """{distribution: the names its pyproject.toml requires}, for every workspace package."""
    found = {}
    for path in sorted((root / "packages").glob("*/pyproject.toml")):
        project = tomllib.loads(path.read_text())["project"]
        found[project["name"]] = {_requirement_name(r) for r in project.get("dependencies", [])}
    return found


def _cells(line):
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def layer_tables(text, column):
    """Each markdown table in `text` with a header cell `column`: {package: its cell}."""
    tables = []
    lines = text.splitlines()
    for number, line in enumerate(lines):
        if not line.lstrip().startswith("|"):
            continue
        header = [cell.lower() for cell in _cells(line)]
        if column not in header or number + 1 >= len(lines):
            continue
        if not set(lines[number + 1].replace("|", "").strip()) <= set("-: "):
            continue  # not a header row: no separator row under it
        at = header.index(column)
        rows = {}
        for row in lines[number + 2 :]:
            if not row.lstrip().startswith("|"):
                break
            cells = _cells(row)
            package = cells[0].replace("`", "").split()[0] if cells[0] else ""
            rows[package] = cells[at] if at < len(cells) else ""
        tables.append(rows)
    return tables


def names_in_cell(cell):
    """The dependency names a cell lists: comma-separated, notes in parentheses dropped."""
    text = cell.replace("`", "")
    while re.search(r"\([^()]*\)", text):
        text = re.sub(r"\([^()]*\)", "", text)
    names = set()
    for part in text.split(","):
        part = part.strip()
        if part:
            match = _NAME.fullmatch(part)
            names.add(match[0].lower() if match else f"<unreadable: {part!r}>")
    return names


def table_problems(rows, declared):
    """Every way one table differs from the declared dependencies (empty when it agrees)."""
    problems = []
    for missing in sorted(set(declared) - set(rows)):
        problems.append(f"no row for {missing}")
    for package, cell in rows.items():
        if package not in declared:
            problems.append(f"a row for {package!r}, which is no package under packages/")
            continue
        listed = names_in_cell(cell)
        if listed != declared[package]:
            problems.append(
                f"{package}: the table lists {sorted(listed)}, its pyproject.toml requires "
                f"{sorted(declared[package])}"
            )
    return problems


def test_the_workspace_has_the_packages_the_layering_test_knows():
    # Guards the scan: a glob that found nothing would make every table "agree".
    assert {"grain-index", "grain-convert", "grainline"} <= set(declared_dependencies())


@pytest.mark.parametrize("doc", sorted(TABLES))
def test_the_layer_table_matches_each_pyproject(doc):
    tables = layer_tables((ROOT / doc).read_text(), TABLES[doc])
    assert len(tables) == 1, f"{doc}: expected one layer table ('{TABLES[doc]}' column)"
    problems = table_problems(tables[0], declared_dependencies())
    assert not problems, (
        f"{doc}'s layer table disagrees with packages/*/pyproject.toml; fix the table "
        "(or the requirements):\n" + "\n".join(problems)
    )


def test_the_install_table_of_the_readme_names_every_package():
    text = (ROOT / "README.md").read_text()
    section = text.split("## Install a layer", 1)[1].split("\n## ", 1)[0]
    installed = {
        _requirement_name(match)
        for match in re.findall(r"pip install --find-links dist \"?([^`\"]+)", section)
    }
    assert set(declared_dependencies()) <= installed, (
        f"README's 'Install a layer' table has no row for "
        f"{sorted(set(declared_dependencies()) - installed)}"
    )


# The checker on planted tables: each kind of error is caught.

_PLANTED = """
| package | holds | builds on |
|---|---|---|
| `a` | x | numpy |
| b | y | a, numpy (zstd: the `z` extra) |
"""


def test_a_table_that_agrees_passes():
    (rows,) = layer_tables(_PLANTED, "builds on")
    assert rows == {"a": "numpy", "b": "a, numpy (zstd: the `z` extra)"}
    assert table_problems(rows, {"a": {"numpy"}, "b": {"a", "numpy"}}) == []


@pytest.mark.parametrize(
    ("declared", "expected"),
    [
        ({"a": {"numpy"}, "b": {"a"}}, "b: the table lists ['a', 'numpy']"),  # one too many
        ({"a": {"numpy"}, "b": {"a", "numpy", "c"}}, "requires ['a', 'c', 'numpy']"),  # one missing
        ({"a": {"numpy"}, "b": {"a", "numpy"}, "c": set()}, "no row for c"),
        ({"a": {"numpy"}}, "a row for 'b'"),
    ],
)
def test_a_table_that_disagrees_is_caught(declared, expected):
    (rows,) = layer_tables(_PLANTED, "builds on")
    problems = table_problems(rows, declared)
    assert any(expected in problem for problem in problems), problems


def test_prose_in_a_cell_is_not_taken_for_a_list():
    assert names_in_cell("the two above") == {"<unreadable: 'the two above'>"}
    assert names_in_cell("grain-index, `grain-sources` (its `x` extra (nested))") == {
        "grain-index",
        "grain-sources",
    }
