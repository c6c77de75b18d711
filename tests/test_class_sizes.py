"""No class of the package over about 600 lines without a reason written in its docstring.

A class longer than :data:`MAX_CLASS_LINES` says why in its docstring, with its size as
``about N lines``; a class that has grown more than a quarter past the size its reason was
written for fails too (the reason is to be read again). Tests, benchmarks, docs and
notebooks are not package code.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: Lines a class may hold without a written reason.
MAX_CLASS_LINES = 600
#: How far past its stated size a class may grow before its reason must be read again.
GROWTH = 1.25
#: Top-level folders of the repository that hold no package code.
NOT_PACKAGE = {"tests", "benchmarks", "docs", "notebooks", "examples", "data"}
STATED = re.compile(r"about ([\d,]+) lines")


def oversized_classes(root: Path) -> list[str]:
    """Every class below ``root`` (package code) over :data:`MAX_CLASS_LINES` lines whose
    docstring gives no ``about N lines`` reason, or that grew past ``GROWTH`` x N; one line
    each, ``path:line Class (lines)``."""
    found = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        if rel.parts[0] in NOT_PACKAGE or any(p.startswith(".") for p in rel.parts):
            continue
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if not isinstance(node, ast.ClassDef):
                continue
            assert node.end_lineno is not None
            lines = node.end_lineno - node.lineno + 1
            if lines <= MAX_CLASS_LINES:
                continue
            stated = STATED.search(" ".join((ast.get_docstring(node) or "").split()))
            if stated is None:
                found.append(f"{rel}:{node.lineno} {node.name} ({lines} lines, no reason)")
            elif lines > GROWTH * int(stated.group(1).replace(",", "")):
                found.append(
                    f"{rel}:{node.lineno} {node.name} ({lines} lines, its reason says "
                    f"about {stated.group(1)})"
                )
    return found


def test_no_class_over_600_lines_without_a_reason():
    assert oversized_classes(ROOT) == []


def test_an_oversized_class_without_a_reason_is_found(tmp_path):
    """A 700-line class fails without a reason, passes with one, fails again past 1.25 x the
    size its reason states."""
    body = "\n".join(f"    x{i} = {i}" for i in range(700))
    (tmp_path / "big.py").write_text(f'class Big:\n    """A class."""\n{body}\n')
    assert oversized_classes(tmp_path) == ["big.py:1 Big (702 lines, no reason)"]
    (tmp_path / "big.py").write_text(
        f'class Big:\n    """One class of about 700 lines, because ..."""\n{body}\n'
    )
    assert oversized_classes(tmp_path) == []
    (tmp_path / "big.py").write_text(
        f'class Big:\n    """One class of about 500 lines, because ..."""\n{body}\n'
    )
    assert oversized_classes(tmp_path) == ["big.py:1 Big (702 lines, its reason says about 500)"]
