"""Deploy sweeps with mode = "pd" or "both": their checks, their keys, one row."""

import json
import textwrap
from pathlib import Path

import pytest
from slolab.harness.sweep import Backend, open_store, run_sweep
from slolab.harness.sweep_spec import SpecError, load_spec

BASE = '[[deploy]]\ntraces = ["azure_conv_2023"]\nmodels = ["llama2-7b"]\n'


def write_spec(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "spec.toml"
    path.write_text(textwrap.dedent(text))
    return path


def test_a_spec_without_mode_keeps_its_key(tmp_path: Path) -> None:
    """mode and link enter a task's description only when given: mode = "co" (the default
    planner) is a new key, no mode the former one."""
    plain = load_spec(write_spec(tmp_path, BASE)).tasks[0]
    assert "mode" not in json.loads(plain.description)
    both = load_spec(write_spec(tmp_path, BASE + 'mode = "both"\nlink = "ethernet-100g"\n')).tasks[
        0
    ]
    described = json.loads(both.description)
    assert (described["mode"], described["link"]) == ("both", "ethernet-100g")
    assert both.key != plain.key


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ('mode = "split"\n', r"deploy\[0\]\.mode = 'split': known: co, pd, both"),
        ('link = "0"\n', r"deploy\[0\]\.link = '0': the KV link bandwidth must be > 0"),
        ("link = -2.5\n", r"deploy\[0\]\.link = '-2.5': the KV link bandwidth must be > 0"),
        ('link = "nvlink"\ngpus = [["a100", "h100"]]\n', r"joins the GPUs of one node"),
    ],
)
def test_bad_pd_options_fail_in_one_line(tmp_path: Path, body: str, message: str) -> None:
    """A bad mode or link is one SpecError line, before anything runs."""
    with pytest.raises(SpecError, match=message) as error:
        load_spec(write_spec(tmp_path, BASE + body))
    assert "\n" not in str(error.value)


def test_a_pd_sweep_row_holds_both_pools(tmp_path: Path) -> None:
    """One disaggregated grid point (30 requests, one H100 at TP 1) stores a met, verified
    fleet of at least one prefill and one decode server."""
    spec = load_spec(
        write_spec(
            tmp_path,
            BASE + 'gpus = [["h100"]]\ntps = [[1]]\nlimit = 30\nmax_rounds = 2\nmode = "pd"\n',
        )
    )
    tally = run_sweep(spec, tmp_path / "store", Backend("local", workers=1), progress=False)
    assert (tally.tasks, tally.ran, tally.failed) == (1, 1, 0)
    row = open_store(tmp_path / "store").frame().iloc[0]
    assert row["mode"] == "pd" and row["pd_met"]
    assert row["pd_fleet"].startswith("prefill ") and " | decode " in row["pd_fleet"]
    # one H100 at TP 1 costs $4.25/h: at least one per pool
    assert row["pd_cost"] >= 2 * 4.25 and row["pd_attainment"] >= 0.9
    assert row["answer"] == "disaggregate"  # the only answer asked for
