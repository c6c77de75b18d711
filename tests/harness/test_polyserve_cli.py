"""PolyServe from the command line: simulate, capacity with its bound, instance build, solve and
compare on tier-partition instances."""

import json

from slolab.harness.cli import main

H200 = ["--timing", "llama3.1-8b-h200", "--kv-capacity", "845642", "--max-batch-tokens", "0"]


def test_simulate_polyserve_prints_tiers_and_cost(capsys):
    """simulate --policy polyserve: attainment per tier, cost and routing decisions in the JSON."""
    code = main(
        ["simulate", "azure_conv_2023", "--slos", "polyserve", "--policy", "polyserve"]
        + ["--servers", "4", "--limit", "80", "--rate", "10", "--json", *H200]
    )
    assert code == 0
    rec = json.loads(capsys.readouterr().out)
    assert rec["requests"] == 80
    assert set(rec["attainment_by_tier"]) >= {"0", "1", "2", "3"}
    assert sum(rec["requests_by_tier"].values()) == 80
    assert rec["cost_server_s"] > 0
    assert rec["router_decisions"] >= 80
    # every one of the 80 arrivals was timed: a mean and a 99th percentile, both positive
    assert rec["router_arrival_decision_mean_s"] > 0 and rec["router_arrival_decision_p99_s"] > 0
    assert rec["servers_max"] <= 4  # the fleet caps the tiers


def test_simulate_polyserve_disaggregated_with_startup_delays(capsys):
    """--mode disaggregated --startup disk: servers joining a tier wait the preset's disk load
    (2.04 s for Llama-3.1-8B on an H200): the earliest requests wait about that long for their
    first token, which they do not with the paper's instant joins."""
    base = ["simulate", "azure_conv_2023", "--policy", "polyserve", "--mode", "disaggregated"]
    base += ["--servers", "4", "--limit", "40", "--rate", "10", "--json", *H200]
    assert main([*base, "--startup", "disk"]) == 0
    disk = json.loads(capsys.readouterr().out)
    assert main(base) == 0
    instant = json.loads(capsys.readouterr().out)
    assert disk["startup_s"] > 2.0 and instant["startup_s"] == 0.0
    # the first request (at 0) gets a prefill server at the first tick (5 ms), ready at 2.04 s
    assert disk["ttft_p99"] > 1.9
    assert instant["ttft_p99"] < 1.0
    assert disk["mode"] == "disaggregated"


def test_self_routing_policy_refuses_router_and_autoscale_flags(capsys):
    """polyserve routes and scales itself: --router and --autoscale are one-line errors."""
    base = ["simulate", "azure_conv_2023", "--policy", "polyserve", "--limit", "5", "--quiet"]
    assert main([*base, "--router", "random"]) == 2
    assert "routes requests itself: drop --router" in capsys.readouterr().err
    assert main([*base, "--autoscale", "threshold"]) == 2
    assert "scales the cluster itself: drop --autoscale" in capsys.readouterr().err


def test_capacity_prints_the_bound_and_the_fraction(capsys):
    """capacity --policy polyserve adds the tier-partition bound and capacity / bound."""
    code = main(
        ["capacity", "azure_conv_2023", "--policy", "polyserve", "--servers", "2"]
        + ["--limit", "60", "--target", "0.9", "--rel-tol", "0.25", "--json", *H200]
    )
    assert code == 0
    rec = json.loads(capsys.readouterr().out)
    assert rec["bound"] > 0
    assert rec["fraction_of_bound"] == rec["capacity"] / rec["bound"]
    assert "upper bound" in rec["bound_kind"]
    # 60 requests end before queues build up: above the steady-state bound it says so
    assert ("bound_note" in rec) == (rec["capacity"] > rec["bound"])


def test_instance_build_and_solve_tier_partition(tmp_path, capsys):
    """instance build --problem tier-partition, then solve: a bound with servers per tier."""
    path = tmp_path / "tp.json"
    code = main(
        ["instance", "build", "--problem", "tier-partition", "--trace", "azure_conv_2023"]
        + ["--servers", "6", "--n", "200", "-o", str(path)]
    )
    assert code == 0
    capsys.readouterr()
    assert main(["solve", str(path), "--json"]) == 0
    rec = json.loads(capsys.readouterr().out)
    assert rec["status"] == "OPTIMAL"
    assert rec["kind"] == "bound"
    assert sum(rec["servers_per_tier"].values()) == 6  # every server is used at the optimum
    assert rec["objective"] == rec["bound"]
    assert "replayed_objective" not in rec  # a bound has no schedule to replay


def test_instance_build_and_solve_tier_autoscale(tmp_path, capsys):
    """The shift instance's plan: servers per tier per window, a lower bound on server-seconds."""
    path = tmp_path / "ta.json"
    code = main(
        ["instance", "build", "--problem", "tier-autoscale", "--n", "300", "--rate", "10"]
        + ["--window-s", "10", "-o", str(path)]
    )
    assert code == 0
    capsys.readouterr()
    assert main(["solve", str(path), "--solver", "cpsat", "--json"]) == 0
    rec = json.loads(capsys.readouterr().out)
    assert rec["status"] == "OPTIMAL"
    assert rec["kind"] == "bound"
    windows = rec["windows"]
    assert all(len(plan) == windows for plan in rec["servers_per_tier"].values())
    # cost = 10 s per server-window (no start-up delay) and no drained server before the end
    assert rec["objective"] >= 10 * windows


def test_compare_labels_the_bound_rows(tmp_path, capsys):
    """compare on a tier-partition instance: heuristic rows scored by goodput, bound rows
    labelled bound with their value, the optimum interval closed above by the bound."""
    path = tmp_path / "tp.json"
    main(
        ["instance", "build", "--problem", "tier-partition", "--trace", "azure_conv_2023"]
        + ["--servers", "2", "--n", "60", "--rate", "8", "-o", str(path)]
    )
    capsys.readouterr()
    code = main(["compare", str(path), "--methods", "polyserve,chunk,highs,fluid", "--json"])
    assert code == 0
    rows = {r["method"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["highs"]["kind"] == rows["fluid"]["kind"] == "bound"
    assert rows["polyserve"]["kind"] == "heuristic"
    assert rows["polyserve"]["violations"] == 0
    # goodput = attainment x the stream's mean arrival rate, never above the bound here
    assert rows["polyserve"]["objective"] <= rows["highs"]["bound"]
    assert rows["polyserve"]["optimum_hi"] == min(rows["highs"]["bound"], rows["fluid"]["bound"])
