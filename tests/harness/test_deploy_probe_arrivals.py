"""The co-located capacity probes' arrivals: Poisson (the default) or the class's own pattern."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
from slolab.harness import deploy
from slolab.harness.cli import main
from slolab.harness.deploy_pd import plan_modes
from slolab.heuristics.deployment import PlanRouter, PoolPolicies
from slolab.instances import Instance
from slolab.models.deployment import plan_violations
from slolab.sim import check, metrics, run

H100 = "llama2-7b/h100/tp1"
A100_TP2 = "llama2-7b/a100/tp2"


@pytest.fixture(scope="module")
def azure() -> Instance:
    return deploy.trace_instance("azure_conv_2023", [H100, A100_TP2], limit=40, seed=0)


def _retimed(instance: Instance, arrival_s: np.ndarray) -> Instance:
    columns = {name: np.asarray(instance.workload[name]) for name in instance.workload.columns}
    columns["arrival_s"] = arrival_s
    return dataclasses.replace(instance, workload=instance.workload.derived(columns))


def test_a_burst_lowers_the_trace_probed_capacity_and_poisson_probes_miss_it() -> None:
    """60 Azure requests as one class, over the same span at the same mean rate: evenly spaced,
    or in three bursts of 20 simultaneous arrivals. Poisson probes redraw every arrival, so
    both measure one capacity, to the bit; trace-shaped probes keep the bursts, and one server
    taking 20 requests at once holds the target only at a small fraction of the even stream's
    rate (measured: 1.89 against 33.2 req/s)."""
    cut = deploy.trace_instance("azure_conv_2023", [H100], limit=60, seed=0)
    times = np.asarray(cut.workload.arrival_s, dtype=float)
    even = np.linspace(times[0], times[-1], len(times))
    burst = np.repeat(even[::20], 20)[: len(times)]
    burst[-1] = times[-1]  # the same span, so the same mean rate
    smooth, bursty = _retimed(cut, even), _retimed(cut, burst)
    classes = deploy.request_classes(smooth, buckets=1, tier_groups=((0, 1, 2, 3, 4),))
    assert (
        classes.rates
        == deploy.request_classes(bursty, buckets=1, tier_groups=((0, 1, 2, 3, 4),)).rates
    )

    def measured(instance: Instance, arrivals: str) -> float:
        table = deploy.measure_capacities(
            instance, classes, [H100], target=0.9, seed=0, arrivals=arrivals, stream_requests=200
        )
        return table.capacity[0][0]

    assert measured(smooth, "poisson") == measured(bursty, "poisson") > 0
    on_even, on_bursts = measured(smooth, "trace"), measured(bursty, "trace")
    assert 0 < on_bursts < 0.25 * on_even


def test_default_is_poisson_and_plans_as_before(azure: Instance) -> None:
    """Without ``arrivals`` (and with ``"poisson"``) the plan is the one measured before the
    choice existed: the same capacities (4 significant digits), decisions and costs."""
    before = {
        "mixed_loop_fleet": "1 x llama2-7b/h100/tp1",
        "mixed_rounds": 1,
        "mixed_fleet": "1 x llama2-7b/h100/tp1",
        "mixed_cost": 4.25,
        "single_fleet": "1 x llama2-7b/h100/tp1",
        "single_rounds": 1,
        "optimum_cost": 4.25,
        "capacity_probes": 84,
        "capacity_early": 47,
    }
    capacities = [[122.8, 33.92, 203.5, 16.96], [61.38, 18.02, 79.5, 8.745]]
    for kwargs in ({}, {"arrivals": "poisson"}):
        report = deploy.plan_deployment(
            azure, [H100, A100_TP2], target=0.9, seed=0, max_rounds=4, **kwargs
        )
        record = report.to_record()
        assert {key: record[key] for key in before} == before
        assert [[float(f"{v:.4g}") for v in row] for row in report.capacities.capacity] == (
            capacities
        )
        assert report.capacities.class_targets == (0.9, 0.9, 0.9, 0.9)


def test_trace_probed_first_fleet_is_simulated_and_checked(azure: Instance) -> None:
    """A plan on trace-shaped probes: other capacities than Poisson's, and its first fleet,
    simulated again with the plan's router and pools, passes the independent checker with the
    attainment the loop reported, recomputed by the shared metrics."""
    grid = [H100, A100_TP2]
    report = deploy.plan_deployment(azure, grid, target=0.9, seed=0, max_rounds=4, arrivals="trace")
    poisson = deploy.measure_capacities(
        azure, deploy.request_classes(azure), grid, target=0.9, seed=0
    )
    assert report.capacities.capacity != poisson.capacity
    first = report.mixed.rounds[0]
    plan = first.result.plan
    assert plan is not None and first.run is not None
    assert plan_violations(report.data, plan) == []
    classes = deploy.request_classes(azure)
    present = [c for c, n in enumerate(plan.replicas) if n > 0]
    names = [report.data.configurations[c] for c in present]
    fleet = deploy.fleet_instance(azure, names, [plan.replicas[c] for c in present])
    shares = np.array([[row[c] for c in present] for row in plan.fractions], dtype=float)
    router = PlanRouter(classes.class_of, names, shares / shares.sum(axis=1, keepdims=True))
    policies = PoolPolicies.build(names, lambda name: deploy.pool_policy(azure, name, "sarathi"))
    outcome = run(fleet, policies, router, seed=0, record_iterations=True)
    assert list(check(fleet, outcome)) == []
    assert metrics.attainment(fleet, outcome, "deadline") == first.run.attainment
    assert report.mixed.met and report.mixed.final.run is not None
    assert report.mixed.final.run.attainment >= 0.9


def test_capacity_cache_keeps_trace_and_poisson_searches_apart(azure: Instance, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A trace-probed search in the cache is never read for a Poisson plan (nor the reverse);
    the solo runs, which draw no arrivals, are shared."""
    classes = deploy.request_classes(azure)
    n = len(classes.names)
    fresh = deploy.measure_capacities(azure, classes, [H100], target=0.9, seed=0)
    cache = deploy.CapacityCache(tmp_path)
    traced = deploy.measure_capacities(
        azure, classes, [H100], target=0.9, seed=0, cache=cache, arrivals="trace"
    )
    assert traced.reused == 0 and traced.probes > 0
    poisson = deploy.measure_capacities(azure, classes, [H100], target=0.9, seed=0, cache=cache)
    assert poisson.reused == 0 and poisson.saved == n  # only the solo runs read
    assert poisson.capacity == fresh.capacity != traced.capacity
    again = deploy.measure_capacities(
        azure, classes, [H100], target=0.9, seed=0, cache=cache, arrivals="trace"
    )
    assert again.reused == n and again.probes == 0 and again.capacity == traced.capacity


def test_unknown_arrivals_are_one_line_naming_field_and_value(azure: Instance) -> None:
    classes = deploy.request_classes(azure)
    with pytest.raises(ValueError) as found:
        deploy.measure_capacities(azure, classes, [H100], arrivals="gamma")
    assert str(found.value) == "arrivals must be one of trace, poisson, got 'gamma'"
    with pytest.raises(ValueError) as found:
        deploy.plan_deployment(azure, [H100], arrivals="Trace")
    assert str(found.value) == "arrivals must be one of trace, poisson, got 'Trace'"
    for field in ("co_arrivals", "pd_arrivals"):
        with pytest.raises(ValueError) as found:
            plan_modes(azure, [H100], mode="co", **{field: "bursty"})
        assert str(found.value) == f"{field} must be one of trace, poisson, got 'bursty'"


def test_cli_flag_is_in_help(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["plan", "--help"])
    assert exc.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "--co-probe-arrivals {poisson,trace}" in text
    assert "arrivals of the co-located capacity probes: poisson (the default) or trace" in text


def _error_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0].removeprefix("slolab: error: ")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["--co-probe-arrivals", "trace"],
            "--co-probe-arrivals applies to plan --model only (the deployment planner)",
        ),
        (
            ["--model", "llama2-7b", "--mode", "pd", "--co-probe-arrivals", "trace"],
            "--co-probe-arrivals applies to the co-located planner (--mode co or both); the "
            "disaggregated probes always draw the class's own arrival pattern: drop it",
        ),
    ],
)
def test_cli_flag_is_refused_where_unused(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    assert main(["plan", "azure_conv_2023", "--limit", "24", "--quiet", *argv]) == 2
    assert _error_line(capsys) == message


def test_cli_bad_flag_value_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["plan", "azure_conv_2023", "--model", "llama2-7b", "--co-probe-arrivals", "gamma"]
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    assert "argument --co-probe-arrivals: invalid choice: 'gamma'" in capsys.readouterr().err


def test_cli_trace_probes_plan(capsys: pytest.CaptureFixture[str]) -> None:
    """``--co-probe-arrivals trace`` plans (one configuration, 24 requests) and prints a
    verified fleet."""
    argv = ["plan", "azure_conv_2023", "--limit", "24", "--quiet", "--model", "llama2-7b"]
    argv += ["--gpus", "h100", "--tp", "1", "--co-probe-arrivals", "trace", "--json"]
    assert main(argv) == 0

    record = json.loads(capsys.readouterr().out)
    assert record["mixed"]["met"] and record["mixed_trimmed"]["attainment"] >= 0.9
