"""Capacity planning: fewest servers meeting a target, its curve and cost, and the CLI."""

import json

import pytest
from slolab.harness.cli import main
from slolab.harness.plan import plan
from slolab.harness.serving import ServingSetup, simulate_summary
from slolab.instances import mean_rate

SETUP = ServingSetup("azure_code_2023", limit=100)


@pytest.fixture(scope="module")
def plans():
    """Plans for sarathi and vllm at 16 times the cut trace's own rate, servers 1..16."""
    return plan(SETUP, ["sarathi", "vllm"], servers=(1, 16), traffic=16.0)


def test_plan_is_the_smallest_probed_count_meeting_the_target(plans):
    """Each plan's count met 0.9 and the count below it was probed and missed."""
    for found in plans:
        attainment = dict(found.curve)
        servers = found.servers
        assert servers is not None and attainment[servers] >= 0.9
        assert servers == 1 or attainment[servers - 1] < 0.9
        # The curve holds every probe, by count; the search probed 1 first.
        assert [count for count, _ in found.curve] == sorted({p.servers for p in found.probes})
        assert found.probes[0].servers == 1


def test_plan_probe_equals_an_independent_simulation(plans):
    """Re-simulating the chosen count gives the probe's attainment and end of run."""
    base_rate = mean_rate(SETUP.instance().workload)
    for found in plans:
        chosen = found.chosen
        again = simulate_summary(
            ServingSetup("azure_code_2023", limit=100, servers=chosen.servers, policy=found.policy),
            rate=16.0 * base_rate,
        )
        assert found.rate == pytest.approx(16.0 * base_rate, rel=1e-12)
        assert again["attainment"] == chosen.attainment
        assert again["end_s"] == chosen.end_s
        # Cost: servers x end of run; per met request: that over attainment x 100 requests.
        assert chosen.server_s == chosen.servers * chosen.end_s
        assert chosen.met_requests == round(chosen.attainment * 100)
        assert chosen.cost_per_met_request_s == chosen.server_s / chosen.met_requests


def plan_cli(*options):
    """``slolab plan`` on the first 100 code-trace requests at 16x their rate."""
    return main(["plan", "azure_code_2023", "--limit", "100", "--traffic", "16", *options])


def test_plan_json_prints_one_object_per_policy(capsys):
    """slolab plan --json: one JSON line per policy with policy, servers and the curve."""
    code = plan_cli(
        "--policies",
        "sarathi,vllm",
        "--servers",
        "1..16",
        "--price-per-server-hour",
        "3.6",
        "--json",
    )
    assert code == 0
    lines = capsys.readouterr().out.strip().splitlines()
    records = [json.loads(line) for line in lines]
    assert [record["policy"] for record in records] == ["sarathi", "vllm"]
    for record in records:
        curve = dict((count, value) for count, value in record["curve"])
        assert curve[record["servers"]] == record["attainment"] >= 0.9
        # 3.6 per server-hour = 0.001 per server-second.
        assert record["cost"] == pytest.approx(record["server_s"] * 0.001, rel=1e-12)
        assert record["traffic"] == pytest.approx(16.0, rel=1e-12)


def test_plan_reports_none_when_the_range_is_too_small(capsys):
    """With servers 1..1 at 16x traffic the target is missed: servers is null."""
    assert plan_cli("--policies", "vllm", "--servers", "1..1", "--json") == 0
    record = json.loads(capsys.readouterr().out)
    assert record["servers"] is None and record["attainment"] is None
    assert len(record["curve"]) == 1 and record["curve"][0][1] < 0.9


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--servers", "0..3"], "slolab: error: --servers needs 1 <= A <= B, got '0..3'"),
        (["--servers", "a..b"], "slolab: error: --servers must read"),
        (["--policies", "fifo"], "slolab: error: unknown policy 'fifo'; known:"),
        (["--traffic", "0"], "slolab: error: traffic must be a number > 0, got 0.0"),
    ],
)
def test_plan_bad_input_is_one_line(args, message, capsys):
    """Bad ranges, policies and traffic exit 2 with one line."""
    assert main(["plan", "azure_code_2023", "--limit", "20", *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(message)


def test_plan_table_misaligned_on_a_long_module_name(capsys):
    """The text table widens its policy column to the longest name given (module:Name)."""
    long_name = "slolab.heuristics.baselines:SarathiFCFS"
    assert plan_cli("--policies", f"vllm,{long_name}", "--servers", "1..2") == 0
    lines = capsys.readouterr().out.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("policy "))
    rows = lines[header : header + 3]
    # policy column 39 characters wide (the long name), a space, then the 7-wide servers
    # column: "servers", a count or "none" right-aligned to character 47 in every line
    width = len(long_name)
    assert rows[0][width : width + 8] == " servers"
    for row in rows[1:]:
        assert row[width] == " " and row[width + 1 : width + 8].strip() in {"1", "2", "none"}
    assert rows[2].startswith(long_name + " ")


def test_plan_with_drawn_arrivals_ended_in_a_rate_error(capsys):
    """`plan --arrivals poisson --rate 3` draws arrivals at 3 req/s, not "pass --rate"."""
    code = main(
        [
            "plan",
            "mooncake_conversation",
            "--limit",
            "50",
            "--slos",
            "polyserve",
            "--arrivals",
            "poisson",
            "--rate",
            "3",
            "--policies",
            "sarathi",
            "--servers",
            "1..16",
            "--json",
        ]
    )
    assert code == 0
    record = json.loads(capsys.readouterr().out)
    # the first 50 Mooncake requests arrive at 3.2667 req/s on their own times: 3 / 3.2667
    assert record["rate"] == 3.0 and record["traffic"] == pytest.approx(3.0 / 3.2667, rel=1e-4)
    # 1, 2, 4 miss and 8 meets; bisection: 6 misses, 7 meets (0.90, 45 of 50 met)
    assert [probe["servers"] for probe in record["probes"]] == [1, 2, 4, 8, 6, 7]
    assert record["servers"] == 7 and record["attainment"] == 0.9
