"""No module of the package uses another module's underscore name.

A name another module needs is public: ``from slolab.x import _name`` and ``module._name`` (or
``ImportedClass._name``) in package code fail here. Tests may reach into internals; package
code may not, and no exception is listed.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _module_name(path: Path, root: Path) -> tuple[str, bool]:
    """``(dotted module name, is a package's __init__)`` of a file below ``root``."""
    parts = ["slolab", *path.relative_to(root).with_suffix("").parts]
    if parts[-1] == "__init__":
        return ".".join(parts[:-1]), True
    return ".".join(parts), False


def _source_module(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    """The absolute module an ``import from`` reads (relative imports resolved)."""
    if not node.level:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def cross_module_private_uses(root: Path) -> list[str]:
    """Every use in package code below ``root`` (tests left out) of an underscore name of
    another slolab module: imported by name, or read as an attribute of an imported module
    or of a name imported from one. One line per use, ``path:line what``."""
    found = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        if rel.parts[0] == "tests" or any(p.startswith(".") for p in rel.parts):
            continue
        module, is_package = _module_name(path, root)
        tree = ast.parse(path.read_text(), filename=str(path))
        imported: dict[str, str] = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                source = _source_module(node, module, is_package)
                if source.split(".")[0] != "slolab" or source == module:
                    continue
                for alias in node.names:
                    if _private(alias.name):
                        found.append(f"{rel}:{node.lineno} from {source} import {alias.name}")
                    imported[alias.asname or alias.name] = f"{source}.{alias.name}"
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.split(".")[0] == "slolab":
                        bound = alias.asname or alias.name.split(".")[0]
                        imported[bound] = alias.name if alias.asname else "slolab"
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and _private(node.attr)
                and isinstance(node.value, ast.Name)
                and node.value.id in imported
            ):
                found.append(f"{rel}:{node.lineno} {imported[node.value.id]}.{node.attr}")
    return sorted(found)


def test_package_code_uses_no_other_modules_underscore_names():
    """No package module imports or reads another module's underscore name."""
    uses = cross_module_private_uses(ROOT)
    assert uses == [], "\n".join(uses)


def test_the_scan_finds_each_kind_of_use(tmp_path):
    """The scan reports a private import (absolute and relative), a private attribute of an
    imported module and of an imported class, and nothing for public names, same-module
    names, dunders or tests."""
    (tmp_path / "pkg").mkdir()
    (tmp_path / "tests").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "a.py").write_text(
        "class Model:\n    _hook = 1\n\ndef _helper():\n    return Model._hook\n"
    )
    (tmp_path / "pkg" / "b.py").write_text(
        "from slolab.pkg.a import _helper, Model\n"
        "from . import a\n"
        "from .a import _helper as h\n"
        "import slolab.pkg.a as mod\n"
        "x = Model._hook + a._helper() + mod._helper() + Model.__name__.count('')\n"
    )
    (tmp_path / "tests" / "test_x.py").write_text("from slolab.pkg.a import _helper\n")
    uses = cross_module_private_uses(tmp_path)
    # b.py: line 1 imports _helper, line 3 imports it relatively; line 5 reads Model._hook,
    # a._helper and mod._helper; a.py's own use of Model._hook and the test file do not count
    assert uses == [
        "pkg/b.py:1 from slolab.pkg.a import _helper",
        "pkg/b.py:3 from slolab.pkg.a import _helper",
        "pkg/b.py:5 slolab.pkg.a.Model._hook",
        "pkg/b.py:5 slolab.pkg.a._helper",
        "pkg/b.py:5 slolab.pkg.a._helper",
    ]
