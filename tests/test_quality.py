"""Lint, format and type checks run as part of the suite."""

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _run(cmd, cwd=ROOT, env=None):
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


def test_ruff_lint_is_clean():
    """ruff check reports nothing on the repository."""
    res = _run([sys.executable, "-m", "ruff", "check", "."])
    assert res.returncode == 0, res.stdout + res.stderr


def test_ruff_format_is_clean():
    """Every Python file is formatted as ruff format would write it."""
    res = _run([sys.executable, "-m", "ruff", "format", "--check", "."])
    assert res.returncode == 0, res.stdout + res.stderr


def test_mypy_is_clean(tmp_path):
    """mypy finds no error in the package (checked through a 'slolab' link to the root)."""
    import os

    (tmp_path / "slolab").symlink_to(ROOT, target_is_directory=True)
    cache = tmp_path / "mypy-cache"
    env = dict(os.environ, MYPYPATH=str(tmp_path))
    res = _run(
        [
            sys.executable,
            "-m",
            "mypy",
            "-p",
            "slolab",
            "--config-file",
            str(ROOT / "pyproject.toml"),
            "--cache-dir",
            str(cache),
        ],
        cwd=tmp_path,
        env=env,
    )
    assert res.returncode == 0, res.stdout[-5000:] + res.stderr[-2000:]
    shutil.rmtree(cache, ignore_errors=True)
