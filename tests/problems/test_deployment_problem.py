"""The registered deployment problem: compare on the shipped instance, the objective
recomputed from the fleet the engine ran, MILP and enumeration through the problem interface."""

from __future__ import annotations

import dataclasses
import math

import pytest
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st
from slolab.harness.compare import compare
from slolab.instances import Instance, load_instance, load_shipped
from slolab.models.deployment import DeploymentData, DeploymentPlan
from slolab.problems import get_problem
from slolab.problems.deployment import fleet_cost, plan_scheduler
from slolab.problems.deployment_capacity import deployment_instance
from slolab.sim import metrics
from test_deployment import tables

SHIPPED = "deploy-azure-conv-200-3cfg"
METHODS = ["highs", "enumeration", "best-single", "greedy"]


@pytest.fixture(scope="module")
def shipped() -> Instance:
    return load_shipped(SHIPPED)


@pytest.fixture(scope="module")
def table(shipped: Instance):
    return compare(shipped, METHODS, details=True).set_index("method")


def test_problem_is_registered_with_its_methods() -> None:
    """Models, the enumeration alias and both heuristics are declared."""
    problem = get_problem("deployment")
    assert problem.models == ("deployment",)
    assert problem.aliases["enumeration"] == "deployment:brute"
    assert [h.name for h in problem.heuristics] == ["best-single", "greedy"]
    assert problem.objective.sense == "min"


def test_compare_proves_the_optimum_and_the_heuristics_gaps(table) -> None:
    """Both exact formulations are OPTIMAL at the same cost, the objective recomputed from
    the fleet the engine ran equals the solver's, every run passes the checker, and the
    heuristics cost at least the optimum (here 8.50 $/h against 6.46: a gap of 0.316)."""
    assert table.loc["highs", "status"] == "OPTIMAL"
    assert table.loc["enumeration", "status"] == "OPTIMAL"
    optimum = table.loc["highs", "objective"]
    assert optimum == pytest.approx(6.46)
    assert table.loc["enumeration", "objective"] == pytest.approx(optimum)
    for method in ("highs", "enumeration"):
        assert table.loc[method, "solver_objective"] == pytest.approx(
            table.loc[method, "objective"], rel=1e-9
        )
    for method in METHODS:
        assert table.loc[method, "violations"] == 0, method
        assert 0.0 <= table.loc[method, "attainment"] <= 1.0
        assert table.loc[method, "objective"] >= optimum - 1e-9
        assert table.loc[method, "gap_lo"] == table.loc[method, "gap_hi"]
    for method in ("best-single", "greedy"):
        assert table.loc[method, "objective"] == pytest.approx(8.50)
        assert table.loc[method, "gap"] == pytest.approx(8.50 / 6.46 - 1)


def test_objective_is_the_price_of_the_fleet_that_ran(shipped: Instance, table) -> None:
    """The MILP's plan, run as a fleet: its pools times the prices make the row's objective."""
    plan = DeploymentPlan.from_dict(table.loc["highs", "details"]["plan"])
    made = plan_scheduler(shipped, plan)
    fleet = made.on(shipped)
    data = DeploymentData.from_dict(shipped.settings["deployment"])
    price = dict(zip(data.configurations, data.prices, strict=True))
    expected = sum(price[p.name] * p.servers for p in fleet.cluster.resolved_pools())
    outcome = made.run(shipped, seed=0)
    cost = fleet_cost(fleet, outcome, metrics.request_table(fleet, outcome))
    assert cost == pytest.approx(expected)
    assert cost == pytest.approx(table.loc["highs", "objective"])


def test_a_plan_beyond_the_capacities_costs_inf(shipped: Instance) -> None:
    """One server carrying every class where the table says it needs more is infeasible."""
    data = DeploymentData.from_dict(shipped.settings["deployment"])
    n_conf = len(data.configurations)
    plan = DeploymentPlan(
        tuple(1 if c == 0 else 0 for c in range(n_conf)),
        tuple(tuple(1.0 if c == 0 else 0.0 for c in range(n_conf)) for _ in data.classes),
    )
    assert sum(data.servers_needed(0, k) for k in range(len(data.classes))) > 1
    made = plan_scheduler(shipped, plan)
    fleet = made.on(shipped)
    outcome = made.run(shipped, seed=0)
    assert fleet_cost(fleet, outcome, metrics.request_table(fleet, outcome)) == math.inf


def test_objective_refuses_an_instance_that_ran_no_plan(shipped: Instance) -> None:
    """The instance itself (no fleet, no plan) is not scored."""
    with pytest.raises(ValueError, match="ran no deployment plan"):
        fleet_cost(shipped, None, None)  # type: ignore[arg-type]


def test_compare_command_prints_the_gaps(capsys) -> None:
    """``slolab compare`` on the shipped instance names the proved optimum and each gap."""
    from slolab.harness.cli import main

    main(["compare", SHIPPED, "--methods", ",".join(METHODS), "--quiet"])
    out = capsys.readouterr().out
    assert "optimum in [6.46, 6.46]" in out
    rows = {line.split()[0]: line.split() for line in out.splitlines() if line.strip()}
    assert rows["highs"][2] == "OPTIMAL" and rows["enumeration"][2] == "OPTIMAL"
    assert rows["greedy"][5] == rows["greedy"][6] == "0.315789"


def test_builder_stores_the_measured_table() -> None:
    """A small build holds the data, each request's class and the class targets."""
    inst = deployment_instance(
        configurations="llama2-7b/h100/tp1,llama2-7b/a100/tp2", limit=40, stream_requests=50
    )
    assert inst.problem == "deployment"
    data = DeploymentData.from_dict(inst.settings["deployment"])
    assert data.configurations == ("llama2-7b/h100/tp1", "llama2-7b/a100/tp2")
    assert len(inst.settings["class_of"]) == inst.n_requests == 40
    assert len(inst.settings["class_targets"]) == len(data.classes)
    assert all(v >= 0 for row in data.capacity for v in row)
    assert get_problem("deployment").check_instance(inst.settings) is None


def test_builder_reads_a_prices_file(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """``--prices FILE``: the stored prices are tp x the file's GPU-hour price; a bad file is
    an error naming its line and value."""
    from slolab.harness.cli import main

    prices = tmp_path / "prices.csv"
    prices.write_text("gpu,usd_per_gpu_hour\nh100,3.00\na100,1.25\n")
    out = tmp_path / "deploy.json"
    argv = ["instance", "build", "--problem", "deployment", "--configurations"]
    argv += ["llama2-7b/h100/tp1,llama2-7b/a100/tp2", "--n", "40", "--stream-requests", "50"]
    assert main([*argv, "--prices", str(prices), "--out", str(out)]) == 0
    data = DeploymentData.from_dict(load_instance(out).settings["deployment"])
    assert data.prices == (3.0, 2.5)
    prices.write_text("gpu,usd_per_gpu_hour\nh100,cheap\n")
    with pytest.raises(ValueError, match=r"prices.csv line 2.*cheap"):
        deployment_instance(
            configurations="llama2-7b/h100/tp1", limit=40, stream_requests=50, prices=prices
        )


@seed(33)
@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_milp_and_enumeration_agree_through_compare(shipped: Instance, data) -> None:
    """Random capacity tables on the shipped trace: HiGHS and the enumeration are OPTIMAL at
    one cost, each recomputed from its fleet's run and each run passing the checker."""
    stored = DeploymentData.from_dict(shipped.settings["deployment"])
    drawn = data.draw(tables(len(stored.configurations), len(stored.classes)))
    table = dataclasses.replace(drawn, configurations=stored.configurations, classes=stored.classes)
    inst = dataclasses.replace(
        shipped, settings={**shipped.settings, "deployment": table.to_dict()}
    )
    frame = compare(inst, ["highs", "enumeration"]).set_index("method")
    assert list(frame["status"]) == ["OPTIMAL", "OPTIMAL"]
    assert frame.loc["highs", "objective"] == pytest.approx(frame.loc["enumeration", "objective"])
    assert list(frame["violations"]) == [0, 0]
    for method in ("highs", "enumeration"):
        assert frame.loc[method, "objective"] == pytest.approx(
            frame.loc[method, "solver_objective"]
        )
