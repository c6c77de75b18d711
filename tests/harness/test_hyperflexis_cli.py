"""HyperFlexis from the command line: instance build, compare (with cost), the Pareto front, and
an elastic simulation with the dispatcher and its scaler."""

import json

import pytest
from slolab.harness.cli import main
from slolab.harness.compare import compare
from slolab.harness.pareto import pareto
from slolab.instances import load_instance
from slolab.problems import build_instance


@pytest.fixture(scope="module")
def window_file(tmp_path_factory):
    """A 3-request dispatch-scale window with tight SLOs (a tenth of Table 1's), 2 workers."""
    path = tmp_path_factory.mktemp("ds") / "w.json"
    code = main(
        ["instance", "build", "--problem", "dispatch-scale", "--n", "3", "--seed", "3"]
        + ["--slo-scale", "0.1", "--rate", "20", "--max-output-tokens", "2", "-o", str(path)]
    )
    assert code == 0
    return path


def test_compare_rows_carry_cost_status_and_gap(window_file, capsys):
    """compare --json: exact rows proved and equal; every row has its cost; heuristic gaps are
    points (the optimum is proved) at least 0."""
    capsys.readouterr()
    code = main(
        ["compare", str(window_file), "--methods", "highs,cpsat,hyperflexis,round-robin"]
        + ["--time-limit", "30", "--json"]
    )
    assert code == 0
    rows = {r["method"]: r for r in json.loads(capsys.readouterr().out)}
    for r in rows.values():
        for key in ("kind", "objective", "attainment", "cost_server_s", "status", "gap"):
            assert key in r
        assert r["violations"] == 0
    assert rows["highs"]["status"] == rows["cpsat"]["status"] == "OPTIMAL"
    assert rows["highs"]["objective"] == pytest.approx(rows["cpsat"]["objective"], abs=1e-9)
    for name in ("hyperflexis", "round-robin"):
        assert rows[name]["kind"] == "heuristic"
        assert rows[name]["gap"] >= 0
        # utility = attainment - 0.25 * cost (the window's price of a worker-second)
        assert rows[name]["objective"] == pytest.approx(
            rows[name]["attainment"] - 0.25 * rows[name]["cost_server_s"], abs=1e-12
        )


def test_pareto_prints_the_front(window_file, capsys):
    """pareto --json: points by attainment from high to low with falling cost, all proved,
    equal to the harness's; a problem without a front is a one-line error."""
    capsys.readouterr()
    assert main(["pareto", str(window_file), "--solver", "brute", "--json"]) == 0
    points = json.loads(capsys.readouterr().out)
    assert points and all(p["status"] == "OPTIMAL" and p["violations"] == 0 for p in points)
    attainment = [p["attainment"] for p in points]
    cost = [p["cost_server_s"] for p in points]
    assert attainment == sorted(attainment, reverse=True)
    assert all(a > b for a, b in zip(cost, cost[1:], strict=False))
    inst = load_instance(window_file)
    again = pareto(inst, solver="highs", time_limit=30)
    assert [p["cost_server_s"] for p in again] == pytest.approx(cost, abs=1e-9)
    other = build_instance("sa-ordering", n=3, batch_size=2, seed=0)
    with pytest.raises(ValueError, match="declares no Pareto front"):
        pareto(other)


def test_cost_column_is_generic():
    """Every problem's compare rows carry cost_server_s (one server of SA ordering: its end)."""
    inst = build_instance("sa-ordering", n=3, batch_size=2, seed=0)
    frame = compare(inst, ["fcfs"])
    row = frame.iloc[0]
    assert row.cost_server_s > 0


def test_simulate_with_the_dispatcher_and_its_scaler(capsys):
    """The issue's command line on 200 requests prints requests, attainment, e2e_mean and
    cost_server_s; the dispatcher runs with its central queue (router hold)."""
    code = main(
        ["simulate", "azure_conv_2023", "--limit", "200", "--slos", "hyperflexis"]
        + ["--policy", "hyperflexis", "--servers", "4", "--autoscale", "hyperflexis"]
        + ["--max-servers", "8", "--startup", "d2d", "--json"]
    )
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    assert out["requests"] == 200 and out["router"] == "hold"
    for key in ("attainment", "e2e_mean", "cost_server_s"):
        assert out[key] > 0
    assert out["servers_max"] <= 8
