"""Every command of docs/extending.md runs, in a fresh folder holding the page's files.

The page's one install command (``python -m pip install ./examples/plugin``) is not run: the
suite does not install into the shared environment. In its place the example package's entry
points are made visible the way an install would (a ``*.dist-info`` folder on the path, see
tests/plugin_site.py), so the commands after it see the same names an install gives. That pip
really installs the package and slolab finds it is tested in tests/test_plugins.py (an install
into a folder of its own).
"""

import os
import re
import subprocess
import sys

from plugin_site import PLUGIN, ROOT, example_site

PAGE = ROOT / "docs" / "extending.md"
INSTALL = "python -m pip install ./examples/plugin"


def _files(text: str) -> dict[str, str]:
    """The page's files: a fenced block right after ``<!-- file: NAME -->``."""
    return dict(re.findall(r"<!-- file: (\S+) -->\n```\w*\n(.*?)```", text, re.S))


def _commands(text: str) -> list[str]:
    """Every line of every bash block."""
    blocks = re.findall(r"```bash\n(.*?)```", text, re.S)
    return [line for block in blocks for line in block.splitlines() if line.strip()]


def test_page_policy_is_the_example_package_policy():
    """The page's least_slack.py is the example package's file, byte for byte."""
    files = _files(PAGE.read_text())
    assert set(files) == {"least_slack.py", "sweep.toml"}
    assert files["least_slack.py"] == (PLUGIN / "slolab_lsf" / "least_slack.py").read_text()


def test_every_command_of_the_page_runs(tmp_path):
    """Each command exits 0 in order; the contract check passes, the compares prove their
    optimum, the sweep stores 6 rows, the installed plugin's names are listed."""
    text = PAGE.read_text()
    for name, body in _files(text).items():
        (tmp_path / name).write_text(body)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, target in (("slolab", "-m slolab.harness.cli"), ("python", "")):
        script = bin_dir / name
        script.write_text(f'#!/bin/sh\nexec "{sys.executable}" {target} "$@"\n')
        script.chmod(0o755)
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    commands = _commands(text)
    assert INSTALL in commands
    outputs: dict[str, str] = {}
    for command in commands:
        if command == INSTALL:
            site = example_site(tmp_path / "site")
            paths = [str(site), str(PLUGIN), env.get("PYTHONPATH", "")]
            env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
            continue
        res = subprocess.run(
            ["bash", "-o", "pipefail", "-c", command],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert res.returncode == 0, f"{command}\n{res.stdout[-2000:]}\n{res.stderr[-2000:]}"
        outputs[command] = res.stdout
    joined = "\n".join(outputs.values())
    assert "least_slack:LeastSlackFirst: keeps the contract" in joined
    assert "least-slack: keeps the contract" in joined
    # three capacity lines, one per policy
    assert len(re.findall(r"^capacity .* req/s at 90% deadline attainment", joined, re.M)) == 3
    # the tdg-horizon window and the one-queue instance: each compare proves its optimum
    assert joined.count("OPTIMAL") >= 3
    assert "least-slack (slolab_lsf.least_slack:LeastSlackFirst)" in joined
    # the sweep's table: a header and 2 policies x 3 rates
    (table,) = [out for command, out in outputs.items() if "read_parquet" in command]
    assert len(table.splitlines()) == 1 + 6
