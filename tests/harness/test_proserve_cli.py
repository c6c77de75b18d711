"""The ProServe command lines: simulate with SlideBatching and GoRouting, instance build and
compare for tdg-horizon and tdg-batch."""

import json

from slolab.harness.cli import main

METHODS = (
    "highs,cpsat,bound,slide-batching,vllm-fcfs,sarathi-fcfs,sarathi-priority,fairbatching,"
    "weighted-vtc"
)


def test_simulate_slide_batching_go_routing_json(capsys):
    """simulate --policy slide-batching --router go-routing prints requests, attainment, TDG."""
    code = main(
        [
            "simulate",
            "azure_conv_2023",
            "--slos",
            "slos-serve+proserve",
            "--slack",
            "tight",
            "--policy",
            "slide-batching",
            "--servers",
            "4",
            "--router",
            "go-routing",
            "--limit",
            "40",
            "--rate",
            "20",
            "--json",
        ]
    )
    assert code == 0
    row = json.loads(capsys.readouterr().out)
    assert row["requests"] == 40
    assert 0.0 <= row["attainment"] <= 1.0
    assert 0.0 < row["tdg_ratio"] <= 1.0
    assert row["miss_tdg_ratio"] == 1.0 - row["tdg_ratio"]


def test_decode_router_needs_disaggregated_mode(capsys):
    """--decode-router outside disaggregated mode is a clear error (exit status 2)."""
    code = main(
        ["simulate", "azure_conv_2023", "--limit", "5", "--decode-router", "most-free-kv", "--json"]
    )
    assert code == 2
    assert "--decode-router applies to --mode disaggregated" in capsys.readouterr().err


def test_tdg_horizon_build_and_compare(tmp_path, capsys):
    """A 2-request window: every method's TDG is recomputed; the MILP is optimal and no method
    exceeds it; the bound is at least the optimum and its row's details name its families."""
    path = tmp_path / "h.json"
    assert (
        main(
            [
                "instance",
                "build",
                "--problem",
                "tdg-horizon",
                "--trace",
                "azure_conv_2023",
                "--n",
                "2",
                "--max-output-tokens",
                "2",
                "--seed",
                "1",
                "-o",
                str(path),
            ]
        )
        == 0
    )
    capsys.readouterr()
    assert main(["compare", str(path), "--methods", METHODS, "--time-limit", "20", "--json"]) == 0
    rows = {r["method"]: r for r in json.loads(capsys.readouterr().out)}
    assert set(rows) == set(METHODS.split(","))
    assert rows["highs"]["status"] == "OPTIMAL" and rows["highs"]["kind"] == "exact"
    best = rows["highs"]["objective"]
    schedules = [r for m, r in rows.items() if m != "bound"]
    assert all(r["objective"] <= best + 1e-9 for r in schedules)
    assert all(r["violations"] == 0 for r in schedules)
    assert rows["bound"]["objective"] is None and rows["bound"]["violations"] is None
    assert rows["highs"]["gap_lo"] == 0.0 and "runtime_s" in rows["slide-batching"]
    bound = rows["bound"]
    assert bound["kind"] == "bound" and bound["bound"] >= best - 1e-6
    families = bound["details"]["families"]
    assert bound["details"]["tightest"] in families
    assert min(families.values()) == bound["bound"]
    assert bound["details"]["ideal"] >= bound["bound"]
    assert rows["highs"]["details"]["time_limit_s"] == 20


def test_tdg_batch_build_and_compare(tmp_path, capsys):
    """A captured scheduling point: MILP and CP-SAT agree; SlideBatching's row has a gap."""
    path = tmp_path / "b.json"
    args = ["instance", "build", "--problem", "tdg-batch", "--n", "60", "--queue", "6"]
    assert main([*args, "--seed", "0", "-o", str(path)]) == 0
    capsys.readouterr()
    methods = "highs,cpsat,slide-batching"
    assert main(["compare", str(path), "--methods", methods, "--time-limit", "20", "--json"]) == 0
    rows = {r["method"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["highs"]["status"] == rows["cpsat"]["status"] == "OPTIMAL"
    assert abs(rows["highs"]["objective"] - rows["cpsat"]["objective"]) < 1e-9
    assert rows["slide-batching"]["gap_lo"] >= 0.0
