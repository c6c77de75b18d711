"""ServingSetup builds what simulate, capacity, plan and sweeps run, the one way the CLI does."""

import dataclasses

import pytest
from slolab.harness.cli import build_parser
from slolab.harness.serving import ServingSetup, simulate_summary
from slolab.heuristics.baselines import LeastLoaded, SarathiFCFS
from slolab.sim import metrics, run


def test_setup_defaults_are_the_simulate_command_defaults():
    """Parsing 'simulate TRACE' gives the dataclass defaults, field by field."""
    args = build_parser().parse_args(["simulate", "azure_conv_2023"])
    assert ServingSetup.from_namespace(args) == ServingSetup("azure_conv_2023")


def test_summary_matches_a_direct_run_and_counts_cost():
    """simulate_summary's attainment is a direct run's; its cost = servers x end of the run."""
    setup = ServingSetup("azure_conv_2023", servers=2, limit=120, token_budget=512)
    summary = simulate_summary(setup, rate=4.0)
    instance = setup.instance(4.0)
    outcome = run(instance, SarathiFCFS(token_budget=512), LeastLoaded(), seed=0)
    assert summary["attainment"] == metrics.attainment(instance, outcome)
    # 2 servers kept on from 0 to the last token.
    assert summary["cost_server_s"] == pytest.approx(2 * outcome.end_s, rel=1e-12)
    assert summary["requests"] == 120 and summary["servers"] == 2


def test_bad_policy_router_and_budget_raise():
    """Unknown names list the known ones; a token budget must be an integer or auto."""
    instance = ServingSetup("azure_code_2023", limit=20).instance()
    with pytest.raises(ValueError, match=r"unknown policy 'nope'; known: .*sarathi"):
        ServingSetup("azure_code_2023", policy="nope").scheduler(instance)
    with pytest.raises(ValueError, match=r"unknown router 'x'; known: .*least-loaded"):
        ServingSetup("azure_code_2023", router="x").scheduler(instance)
    with pytest.raises(ValueError, match="--token-budget must be an integer or auto"):
        ServingSetup("azure_code_2023", token_budget="many").scheduler(instance)
    with pytest.raises(ValueError, match="servers must be >= 1, got 0"):
        dataclasses.replace(ServingSetup("azure_code_2023"), servers=0)
