"""The layers of DESIGN.md, written as import-linter contracts in pyproject.toml, are kept, and
an import that runs up the layers (even inside a function) breaks them."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: What the package copy leaves out: no module of the package lives there.
NOT_PACKAGE = ("tests", "notebooks", "docs", "benchmarks", "examples", "data", ".*", "*.egg-info")
LINT = (
    "import sys; from importlinter.cli import lint_imports; "
    "sys.exit(lint_imports(config_filename=sys.argv[1], no_cache=True, no_logo=True))"
)


def _lint(config: Path, pythonpath: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run the contracts of ``config`` in a fresh interpreter (``pythonpath`` first on its
    path, so that ``slolab`` is the copy there)."""
    env = dict(os.environ)
    if pythonpath is not None:
        env["PYTHONPATH"] = os.pathsep.join([pythonpath, env.get("PYTHONPATH", "")])
    return subprocess.run(
        [sys.executable, "-c", LINT, str(config)],
        cwd=config.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_import_contracts_are_kept():
    """Both contracts (the layers, no cycles inside a package) are kept on the package."""
    run = _lint(ROOT / "pyproject.toml")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "Contracts: 2 kept, 0 broken." in run.stdout


def test_an_upward_import_inside_a_function_breaks_the_layers(tmp_path):
    """A copy of the package whose timing layer imports the command line inside a function
    fails both contracts (the layers, and a cycle among slolab's packages: the command line
    imports timing), and the report names that import (module and line)."""
    package = tmp_path / "site" / "slolab"
    shutil.copytree(ROOT, package, ignore=shutil.ignore_patterns(*NOT_PACKAGE))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    base = package / "timing" / "base.py"
    text = base.read_text()
    line = text.count("\n") + 4  # the import's line: two blank lines, the def, then it
    base.write_text(text + "\n\ndef _upward():\n    from slolab.harness import cli\n")
    run = _lint(tmp_path / "pyproject.toml", pythonpath=str(package.parent))
    assert run.returncode == 1, run.stdout + run.stderr
    assert "Contracts: 0 kept, 2 broken." in run.stdout
    assert "slolab.timing is not allowed to import slolab.harness" in run.stdout
    assert f"slolab.timing.base -> slolab.harness.cli (l.{line})" in run.stdout


#: The layers from the top, as pyproject.toml's contract writes them.
LAYERS = ("harness", "problems", "heuristics", "models", "solvers", "sim", "instances", "timing")


def lazy_references(value, seen=None):
    """Every ``"slolab.module:attribute"`` string reachable from ``value`` (records, tuples,
    mappings), the lazy references import-linter cannot see."""
    seen = set() if seen is None else seen
    if id(value) in seen:
        return
    seen.add(id(value))
    if isinstance(value, str):
        if value.startswith("slolab.") and value.count(":") == 1:
            yield value
    elif isinstance(value, dict) or hasattr(value, "items"):
        for item in value.values():
            yield from lazy_references(item, seen)
    elif isinstance(value, (tuple, list)):
        for item in value:
            yield from lazy_references(item, seen)
    elif hasattr(value, "__dataclass_fields__"):
        for name in value.__dataclass_fields__:
            yield from lazy_references(getattr(value, name), seen)


def layer_of(module: str) -> int | None:
    parts = module.split(".")
    return LAYERS.index(parts[1]) if len(parts) > 1 and parts[1] in LAYERS else None


def test_problem_records_name_no_module_above_the_problems():
    """A problem's lazy references (builder, heuristics, front, ...) point at or below the
    problems layer: a string names a module as surely as an import does."""
    from slolab.problems.registry import problems

    up = [
        (problem.name, ref)
        for problem in problems()
        for ref in lazy_references(problem)
        if (layer := layer_of(ref.partition(":")[0])) is not None
        and layer < LAYERS.index("problems")
    ]
    assert up == []


def test_the_reference_check_sees_an_upward_string():
    """The check above finds a builder named in the harness."""
    refs = list(lazy_references({"builder": "slolab.harness.deploy:plan_deployment"}))
    assert [layer_of(r.partition(":")[0]) for r in refs] == [LAYERS.index("harness")]
