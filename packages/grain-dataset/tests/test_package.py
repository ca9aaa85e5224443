"""grain-dataset declares exactly the dependencies of DESIGN.md's layer table."""

import importlib
import importlib.metadata
import re

DISTRIBUTION = "grain-dataset"
EXPECTED_DEPENDENCIES = {"grain-index", "grain-sources"}


def test_declared_dependencies_match_the_layer_table():
    requirements = importlib.metadata.requires(DISTRIBUTION) or []
    # Optional extras ("; extra == ...") are not part of the layer's contract.
    required = {
        re.split(r"[\s<>=!~;\[]", requirement, maxsplit=1)[0].lower()
        for requirement in requirements
        if "extra ==" not in requirement
    }
    assert required == EXPECTED_DEPENDENCIES


def test_package_imports_and_has_a_layout_docstring():
    module = importlib.import_module("grain_dataset")
    assert "Layout:" in (module.__doc__ or "")
    assert importlib.metadata.version(DISTRIBUTION) == "0.1.0"
