"""The command line on a policy of the user's own file that raises (one line naming the
plugin, the exception, file:line, time and server; --traceback prints it all) or never
schedules (simulate exits 1 naming the stall; capacity, plan and sweep rows record it and take
no attainment from it)."""

import json
import re
import textwrap

import pytest
from plugin_policies import BOOM_LINE, write_policies
from slolab.harness.cli import main
from slolab.harness.sweep import STALLED_RUN, run_task
from slolab.harness.sweep_spec import load_spec
from slolab.solvers.capacity import ProbeVerdict, capacity, smallest_count

SIMULATE = ["simulate", "azure_conv_2023", "--servers", "1", "--limit", "50", "--quiet"]


def test_boom_policy_is_one_line_naming_plugin_file_line_time_and_server(
    tmp_path, monkeypatch, capsys
):
    """`--policy mine:Boom` exits 1 with one line: plugin, ValueError, file:line, t, server."""
    write_policies(tmp_path, monkeypatch, "boom_cli")
    monkeypatch.delenv("SLOLAB_TRACEBACK", raising=False)
    assert main([*SIMULATE, "--policy", "boom_cli:Boom"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    # the first request arrives at 0 in the cut trace and goes to the only server
    assert err[0] == (
        f"slolab: error: policy boom_cli:Boom raised ValueError: my bug at "
        f"{tmp_path / 'boom_cli.py'}:{BOOM_LINE} in next_batch, t=0 s on server 0 "
        "(--traceback shows the whole traceback)"
    )


@pytest.mark.parametrize("ask", ["flag", "environment"])
def test_traceback_flag_or_variable_prints_the_plugin_traceback(tmp_path, monkeypatch, capsys, ask):
    """--traceback (or SLOLAB_TRACEBACK=1) prints the traceback down to the raising line."""
    write_policies(tmp_path, monkeypatch, f"boom_tb_{ask}")
    flags = ["--traceback"] if ask == "flag" else []
    if ask == "environment":
        monkeypatch.setenv("SLOLAB_TRACEBACK", "1")
    assert main([*flags, *SIMULATE, "--policy", f"boom_tb_{ask}:Boom"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("Traceback (most recent call last):")
    assert f'File "{tmp_path / f"boom_tb_{ask}.py"}", line {BOOM_LINE}, in next_batch' in err
    assert 'raise ValueError("my bug")' in err
    assert err.strip().splitlines()[-1].startswith(f"slolab: error: policy boom_tb_{ask}:Boom")


def test_empty_policy_simulate_exits_1_with_one_line_naming_the_stall(
    tmp_path, monkeypatch, capsys
):
    """`--policy mine:Empty` exits 1; stderr is one line naming the policy and the stall."""
    write_policies(tmp_path, monkeypatch, "empty_cli")
    assert main([*SIMULATE, "--policy", "empty_cli:Empty"]) == 1
    captured = capsys.readouterr()
    err = captured.err.strip().splitlines()
    assert len(err) == 1, err
    assert re.fullmatch(
        r"slolab: error: policy empty_cli:Empty stalled at t=[0-9.]+ s: 50 request\(s\) "
        r"waiting with no arrival, iteration or scaling action left \(first: request 0 on "
        r"server 0\); they are rejected \(--allow-stall keeps such a run, exit status 0\)",
        err[0],
    )
    rows = dict(line.split(maxsplit=1) for line in captured.out.strip().splitlines())
    assert (rows["finished"], rows["rejected"], rows["stalled"]) == ("0", "50", "50")


def test_allow_stall_exits_0_and_reports_the_stalled_count(tmp_path, monkeypatch, capsys):
    """--allow-stall exits 0; the JSON counts 50 stalled of 50 requests, all rejected."""
    write_policies(tmp_path, monkeypatch, "empty_allow")
    assert main([*SIMULATE, "--policy", "empty_allow:Empty", "--allow-stall", "--json"]) == 0
    s = json.loads(capsys.readouterr().out)
    assert (s["requests"], s["finished"], s["rejected"], s["stalled"]) == (50, 0, 50, 50)
    assert s["stall"].startswith("policy empty_allow:Empty stalled at t=")


def test_capacity_stops_at_a_stalled_probe_and_records_it(tmp_path, monkeypatch, capsys):
    """capacity on Empty: one probe, stop_reason 'stalled', 50 stalled, capacity 0."""
    write_policies(tmp_path, monkeypatch, "empty_cap")
    argv = ["capacity", "azure_conv_2023", "--servers", "1", "--limit", "50", "--quiet"]
    assert main([*argv, "--policy", "empty_cap:Empty", "--json"]) == 0
    rec = json.loads(capsys.readouterr().out)
    assert (rec["stop_reason"], rec["n_probes"], rec["stalled"]) == ("stalled", 1, [50])
    assert rec["capacity"] == 0.0 and rec["bracket"] == [0.0, None]
    assert any("stalled" in note and "no valid attainment" in note for note in rec["notes"])


def test_plan_chooses_no_count_from_a_stalled_probe(tmp_path, monkeypatch, capsys):
    """plan on Empty: the first count's probe stalls, no server count is chosen."""
    write_policies(tmp_path, monkeypatch, "empty_plan")
    argv = ["plan", "azure_conv_2023", "--servers", "1..4", "--limit", "50", "--quiet"]
    assert main([*argv, "--policies", "empty_plan:Empty", "--json"]) == 0
    rec = json.loads(capsys.readouterr().out)
    assert rec["servers"] is None and rec["stop_reason"] == "stalled"
    assert [(p["servers"], p["stalled"]) for p in rec["probes"]] == [(1, 50)]


def test_sweep_rows_of_a_stalled_run_carry_the_stall_and_no_attainment(tmp_path, monkeypatch):
    """A sweep's simulate and capacity rows of Empty have error_type StalledRun."""
    write_policies(tmp_path, monkeypatch, "empty_sweep")
    spec = tmp_path / "spec.toml"
    spec.write_text(
        textwrap.dedent(
            """
            [[simulate]]
            traces = ["azure_conv_2023"]
            policies = ["empty_sweep:Empty"]
            servers = [1]
            limit = 50
            [[capacity]]
            traces = ["azure_conv_2023"]
            policies = ["empty_sweep:Empty"]
            servers = [1]
            limit = 50
            """
        )
    )
    simulate, cap = load_spec(spec).tasks
    (row,) = run_task(simulate)
    assert row["error_type"] == STALLED_RUN and row["error"].startswith(
        "policy empty_sweep:Empty stalled at t="
    )
    assert row["attainment_deadline"] is None and row["rejected"] == row["stalled"] == 50
    (row,) = run_task(cap)
    assert row["error_type"] == STALLED_RUN and row["stop_reason"] == "stalled"
    assert row["capacity"] == 0.0 and row["n_probes"] == row["n_stalled"] == 1


def test_capacity_search_takes_no_attainment_from_a_stalled_probe():
    """Rate 1 meets (0.95), rate 2 stalls: capacity 1, bracket (1, inf), monotone kept."""
    answers = {1.0: ProbeVerdict(0.95), 2.0: ProbeVerdict(0.0, stalled=3)}
    found = capacity(answers.__getitem__, start_rate=1.0, target=0.9)
    assert found.stop_reason == "stalled" and found.capacity == 1.0
    assert found.bracket == (1.0, float("inf")) and found.stalled == (0, 3)
    # the stalled 0.0 at rate 2 would not break monotony anyway; both probes are recorded
    assert found.probes == ((1.0, 0.95), (2.0, 0.0)) and found.monotone


def test_count_search_chooses_no_count_after_a_stalled_probe():
    """Count 1 misses (0.5), count 2 stalls: no count, stop_reason 'stalled'."""
    answers = {1: ProbeVerdict(0.5), 2: ProbeVerdict(0.0, stalled=7)}
    found = smallest_count(answers.__getitem__, target=0.9, lo=1, hi=8)
    assert found.count is None and found.stop_reason == "stalled"
    assert found.probes == ((1, 0.5), (2, 0.0)) and found.stalled == (0, 7)


def test_check_policy_still_finds_the_stalled_requests(tmp_path, monkeypatch, capsys):
    """check-policy on Empty: 3 seeds x 40 requests = 120 'finished' violations, exit 1."""
    write_policies(tmp_path, monkeypatch, "empty_check")
    assert main(["check-policy", "empty_check:Empty", "--json"]) == 1
    found = json.loads(capsys.readouterr().out)["violations"]
    assert len(found) == 120 and {v["rule"] for v in found} == {"finished"}
    assert all("the run stalled" in v["message"] for v in found)
