"""No module of the package uses another module's underscore name.

A name another module needs is public: ``from slolab.x import _name``, ``module._name`` (or
``ImportedClass._name``) and ``obj._name`` of a member only other modules define, in package
code, fail here. Tests may reach into internals; package code may not, and no exception is
listed.
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


def _package_files(root: Path) -> list[tuple[Path, ast.Module]]:
    out = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        if rel.parts[0] == "tests" or any(p.startswith(".") for p in rel.parts):
            continue
        out.append((rel, ast.parse(path.read_text(), filename=str(path))))
    return out


def cross_module_private_uses(root: Path) -> list[str]:
    """Every use in package code below ``root`` (tests left out) of an underscore name of
    another slolab module: imported by name, or read as an attribute of an imported module
    or of a name imported from one. One line per use, ``path:line what``."""
    found = []
    for rel, tree in _package_files(root):
        module, is_package = _module_name(root / rel, root)
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


def _defined_private_names(tree: ast.Module) -> set[str]:
    """Underscore names a module defines: functions, classes, assigned names and attributes,
    ``__slots__`` entries."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__slots__" for t in node.targets
        ):
            names.update(
                e.value
                for e in ast.walk(node.value)
                if isinstance(e, ast.Constant) and isinstance(e.value, str)
            )
    return {n for n in names if _private(n)}


def foreign_private_attributes(root: Path) -> list[str]:
    """Every read ``obj._name`` in package code below ``root`` (``obj`` not ``self`` or
    ``cls``) of an underscore name that some package module defines and the reading module
    does not: another module's member read through an object. One line per read."""
    files = _package_files(root)
    defined = {rel: _defined_private_names(tree) for rel, tree in files}
    anywhere = set().union(*defined.values()) if defined else set()
    found = []
    for rel, tree in files:
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.ctx, ast.Load)
                and _private(node.attr)
                and node.attr in anywhere
                and node.attr not in defined[rel]
                and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))
            ):
                found.append(f"{rel}:{node.lineno} {ast.unparse(node)}")
    return sorted(found)


def test_package_code_uses_no_other_modules_underscore_names():
    """No package module imports or reads another module's underscore name."""
    uses = cross_module_private_uses(ROOT)
    assert uses == [], "\n".join(uses)


def test_package_code_reads_no_other_modules_private_members():
    """No package module reads, through an object, an underscore member only other modules
    define."""
    reads = foreign_private_attributes(ROOT)
    assert reads == [], "\n".join(reads)


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


def test_the_member_scan_finds_a_read_of_another_modules_member(tmp_path):
    """A read ``obj._state`` of a slot another module defines is reported; the defining
    module's own reads, ``self`` reads, names defined nowhere in the package (``os._exit``)
    and tests are not."""
    (tmp_path / "pkg").mkdir()
    (tmp_path / "tests").mkdir()
    (tmp_path / "pkg" / "view.py").write_text(
        "class View:\n    __slots__ = ('_state',)\n\ndef state_of(view):\n    return view._state\n"
    )
    (tmp_path / "pkg" / "user.py").write_text(
        "import os\n\nclass User:\n    def __init__(self, view):\n"
        "        self._mine = view._state\n        os._exit\n        self._mine\n"
    )
    (tmp_path / "tests" / "test_x.py").write_text("def f(view):\n    return view._state\n")
    # user.py line 5 reads view._state, a slot of view.py's View; view.py's own read at line
    # 5, the self read, os._exit (defined nowhere here) and the test do not count
    assert foreign_private_attributes(tmp_path) == ["pkg/user.py:5 view._state"]
