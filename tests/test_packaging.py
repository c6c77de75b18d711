"""The package list in pyproject.toml names every package folder of the tree, so that a wheel
(not only an editable install) carries all of slolab."""

from __future__ import annotations

import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]


def test_every_package_folder_is_listed_in_pyproject():
    """Every folder with an __init__.py (outside tests, examples and notebooks) is a listed
    package: the engine package sim/engine was once missing from the list."""
    listed = set(
        tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    )
    found = {"slolab"}
    for init in ROOT.rglob("__init__.py"):
        parts = init.parent.relative_to(ROOT).parts
        if (
            not parts
            or parts[0] in {"tests", "examples", "notebooks", "build"}
            or parts[0][0] == "."
        ):
            continue
        found.add(".".join(("slolab", *parts)))
    assert sorted(found - listed) == []
    assert sorted(listed - found) == []
