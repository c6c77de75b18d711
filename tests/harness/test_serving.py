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


def test_summary_counts_what_an_idle_server_could_meet():
    """simulate --idle-oracle's count is the oracle's on the instance simulated, with the
    default prefix cache and with caching off."""
    from slolab.sim.idle import idle_met

    setup = ServingSetup("mooncake_conversation", servers=8, limit=200)
    summary = simulate_summary(setup, rate=0.01, idle_oracle=True)
    # caching on by default (Mooncake has block ids): of 200 requests, 3 are too long to
    # meet their SLOs even alone with the prefix their server caches; Sarathi meets 174
    assert summary["prefix_cache"]["block_tokens"] == 512
    assert summary["idle_met"] == int(idle_met(setup.instance(0.01)).sum()) == 197
    assert summary["attainment"] * 200 == pytest.approx(174)
    assert "idle_met" not in simulate_summary(setup, rate=0.01)
    off = dataclasses.replace(setup, prefix_cache="off")
    summary = simulate_summary(off, rate=0.01, idle_oracle=True)
    # caching off: 7 are too long even alone; Sarathi meets 173
    assert "prefix_cache" not in summary
    assert summary["idle_met"] == int(idle_met(off.instance(0.01)).sum()) == 193
    assert summary["attainment"] * 200 == pytest.approx(173)


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


def test_a_million_servers_ran_110_s_without_a_word():
    """--servers 1000000 for 200 requests is announced: ~110 s of routing and 0.75 GiB."""
    from slolab.harness.serving import warn_large_fleet

    message = warn_large_fleet(1_000_000, 200)
    assert message is not None
    # 0.55 us x 1e6 servers x 200 requests = 110 s; 800 B x 1e6 = 8e8 B = 0.745 GiB
    assert "about 110 s of routing" in message
    assert "0.75 GiB" in message
    assert "at most 200 servers ever hold a request" in message
    # the whole conv trace (19,366 requests) on 32 servers: 0.34 s of routing, no warning
    assert warn_large_fleet(32, 19_366) is None


def test_large_fleet_warning_comes_before_the_run(monkeypatch, caplog):
    """simulate logs the fleet warning once, before the engine runs (threshold lowered to 0 s)."""
    from slolab.harness import serving

    monkeypatch.setattr(serving, "LARGE_FLEET_S", 0.0)
    monkeypatch.setattr(serving, "_announced", set())
    setup = ServingSetup(trace="azure_conv_2023", servers=3, limit=20)
    with caplog.at_level("WARNING", logger="slolab"):
        setup.simulate()
        setup.simulate()
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    # 0.55 us x 3 servers x 20 requests = 33 us, rounded to 0 s; announced once for both runs
    assert warnings == [
        "3 servers for 20 requests: about 0 s of routing (the least-loaded router looks at "
        "every server for each request) and 2.2e-06 GiB of server state"
    ]
