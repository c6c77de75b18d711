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
