"""Reference scalers: the threshold rule on hand-made cluster states, and in the engine."""

import json
from dataclasses import dataclass

import pytest
from slolab.harness.cli import main
from slolab.heuristics.baselines import LeastLoaded, SarathiFCFS
from slolab.heuristics.scalers import ThresholdParams, ThresholdScaler, elastic_setup
from slolab.instances.records import Cluster, Instance, Workload
from slolab.sim import ClusterView, ScaleAction, check, metrics, run
from slolab.timing import preset, startup_delay_s
from slolab.timing.base import LinearTiming

ROUND = LinearTiming(0.010, {"prefill_tokens": 0.001, "decode_tokens": 0.002})


@dataclass
class FakeServer:
    """The attributes a scaler reads from a server view."""

    id: int
    load: int = 0
    waiting: tuple = ()
    ready: bool = True
    accepting: bool = True
    busy_s: float = 0.0
    pool: str = "main"


def started(params):
    scaler = ThresholdScaler(params)
    wl = Workload({"arrival_s": [0.0], "prompt_tokens": [1], "output_tokens": [1]})
    scaler.start(Instance("x", wl, Cluster(), ROUND), seed=0)
    return scaler


def view(now, servers):
    return ClusterView(now, Cluster().resolved_pools(), tuple(servers))


def test_load_above_upper_switches_on_and_cooldown_holds_the_next_action():
    """Load 14 over 2 servers = 7 > 5: one on; 1 s later (cool-down 10 s) nothing."""
    scaler = started(ThresholdParams(metric="load", upper=5, lower=1, max_servers=4))
    busy = [FakeServer(0, load=8), FakeServer(1, load=6)]
    assert scaler.decide(view(100.0, busy)) == [ScaleAction.on("main")]
    assert scaler.decide(view(101.0, busy)) == ()
    # 10 s after the action the rule may act again; 3 servers on, step 2 is cut to 1 by max 4
    scaler = started(ThresholdParams(metric="load", upper=5, lower=1, max_servers=3, step=2))
    assert scaler.decide(view(0.0, busy)) == [ScaleAction.on("main")]
    full = [*busy, FakeServer(2, load=7, ready=False)]
    assert scaler.decide(view(10.0, full)) == ()  # 3 servers on = max_servers


def test_low_queue_drains_a_starting_server_first_then_the_least_loaded_newest():
    """Queue 0 < lower: a starting server is drained before ready ones; ties: newest first."""
    scaler = started(ThresholdParams(metric="queue", upper=4, lower=0.5, min_servers=1))
    servers = [FakeServer(0, load=3), FakeServer(1, load=1), FakeServer(2, ready=False)]
    assert scaler.decide(view(50.0, servers)) == [ScaleAction.drain(2)]
    scaler = started(ThresholdParams(metric="queue", upper=4, lower=0.5, min_servers=1))
    servers = [FakeServer(0, load=1), FakeServer(1, load=3), FakeServer(3, load=1)]
    assert scaler.decide(view(50.0, servers)) == [ScaleAction.drain(3)]
    # never below min_servers: one accepting server (the draining one does not count)
    scaler = started(ThresholdParams(metric="queue", upper=4, lower=0.5, min_servers=1))
    servers = [FakeServer(0), FakeServer(1, accepting=False)]
    assert scaler.decide(view(50.0, servers)) == ()


def test_min_servers_is_restored_at_once():
    """With 1 accepting server and min_servers 3, two are switched on, cool-down or not."""
    scaler = started(ThresholdParams(metric="queue", upper=4, lower=0.5, min_servers=3))
    assert scaler.decide(view(0.0, [FakeServer(0)])) == [ScaleAction.on("main")] * 2


def test_utilization_is_the_busy_fraction_since_the_last_look():
    """Busy 0.95 s of 1 s and 0.85 s of 1 s: mean 0.9, not above 0.9; then 1.0 -> on."""
    scaler = started(ThresholdParams(metric="utilization", upper=0.9, lower=0.5))
    first = [FakeServer(0, busy_s=10.0), FakeServer(1, busy_s=20.0)]
    assert scaler.decide(view(100.0, first)) == ()  # no earlier sample yet
    second = [FakeServer(0, busy_s=10.95), FakeServer(1, busy_s=20.85)]
    assert scaler.measure(view(101.0, second)) == pytest.approx(0.9)
    third = [FakeServer(0, busy_s=11.95), FakeServer(1, busy_s=21.85)]
    assert scaler.decide(view(102.0, third)) == [ScaleAction.on("main")]


def test_bad_threshold_params_are_clear_errors():
    """lower >= upper and min > max raise, naming the fields."""
    with pytest.raises(ValueError, match="0 <= lower < upper, got lower=2, upper=1"):
        ThresholdParams(upper=1, lower=2)
    with pytest.raises(ValueError, match="min_servers must be <= max_servers, got 5 > 2"):
        ThresholdParams(min_servers=5, max_servers=2)
    with pytest.raises(ValueError, match="metric must be one of queue, load, utilization"):
        ThresholdParams(metric="gpu")


def test_threshold_scaler_in_the_engine_stays_within_bounds():
    """A burst on 1 server grows the pool (at most 3 on), a trickle drains it back to 1."""
    n = 120
    # 120 requests in 6 s, then one short request a second from 8 s to 23 s
    wl = Workload(
        {
            "arrival_s": [i * 0.05 for i in range(n)] + [8.0 + i for i in range(16)],
            "prompt_tokens": [200] * n + [10] * 16,
            "output_tokens": [40] * n + [2] * 16,
        }
    )
    inst = Instance("burst", wl, Cluster(servers=1, max_batch_tokens=256, startup_s=0.5), ROUND)
    params = ThresholdParams(
        metric="load", upper=10, lower=2, max_servers=3, cooldown_s=0.5, interval_s=0.25
    )
    out = run(inst, SarathiFCFS(), LeastLoaded(), seed=0, scaler=ThresholdScaler(params))
    assert check(inst, out) == []
    assert out.finished.all()
    kinds = [e.action for e in out.scale_events]
    assert kinds.count("on") >= 1 and kinds.count("drain") >= 1
    assert metrics.servers_max(inst, out) == 3
    # it ends as it began: one server accepting work
    assert sum(1 for off in out.server_drain_s if off == float("inf")) == 1


def test_elastic_setup_takes_the_start_up_delay_of_the_timing_preset():
    """--startup d2d on llama2-7b-h100: 13.48 GB over NVLink 450 GB/s = 0.02995 s."""
    wl = Workload({"arrival_s": [0.0], "prompt_tokens": [1], "output_tokens": [1]})
    inst = Instance("x", wl, Cluster(servers=4), preset("llama2-7b-h100"))
    elastic, scaler = elastic_setup(inst, "threshold", min_servers=2, max_servers=8, startup="d2d")
    assert elastic.cluster.startup_s == startup_delay_s("llama2-7b-h100", "d2d")
    assert isinstance(scaler, ThresholdScaler)
    assert (scaler.params.min_servers, scaler.params.max_servers) == (2, 8)
    assert elastic_setup(inst, None) == (inst, None)
    with pytest.raises(
        ValueError, match="unknown scaler 'magic'; known: fixed, hyperflexis, threshold"
    ):
        elastic_setup(inst, "magic")


def test_scalers_are_registered_by_name():
    """A registered scaler is built by name with its bounds; a second one under a taken name,
    or a setting the scaler lacks, is an error."""
    from slolab.heuristics.hyperflexis import HyperFlexisScaler
    from slolab.heuristics.scalers import make_scaler, register_scaler

    scaler = make_scaler("hyperflexis", min_servers=2, max_servers=6, sustain=5)
    assert isinstance(scaler, HyperFlexisScaler)
    assert (scaler.params.min_servers, scaler.params.max_servers, scaler.params.sustain) == (
        2,
        6,
        5,
    )
    with pytest.raises(ValueError, match="scaler 'threshold' is already registered"):
        register_scaler("threshold", lambda **_: None, "another")
    with pytest.raises(ValueError, match="the fixed scaler takes no settings, got metric"):
        make_scaler("fixed", metric="load")


def test_cli_threshold_flags_apply_to_the_threshold_scaler_only(capsys):
    """--scale-upper with --autoscale hyperflexis is a one-line error naming the flag."""
    code = main(
        ["simulate", "azure_conv_2023", "--limit", "5", "--autoscale", "hyperflexis"]
        + ["--scale-upper", "3", "--json"]
    )
    assert code == 2
    assert "--scale-upper applies to --autoscale threshold only" in capsys.readouterr().err


def test_cli_simulate_autoscale_prints_cost_and_scaling(capsys):
    """simulate --autoscale threshold --json prints cost_server_s, servers_max, scale_events."""
    code = main(
        [
            "simulate",
            "azure_conv_2023",
            "--limit",
            "200",
            "--servers",
            "4",
            "--autoscale",
            "threshold",
            "--min-servers",
            "1",
            "--max-servers",
            "6",
            "--startup",
            "host",
            "--scale-metric",
            "load",
            "--scale-upper",
            "4",
            "--scale-lower",
            "1",
            "--json",
        ]
    )
    assert code == 0
    rec = json.loads(capsys.readouterr().out)
    assert rec["requests"] == 200
    assert 1 <= rec["servers_max"] <= 6
    assert rec["scale_events"] >= 1
    assert rec["startup_s"] == startup_delay_s("llama2-7b-h100", "host")
    assert rec["cost_server_s"] > 0 and 0 <= rec["attainment"] <= 1


def test_cli_simulate_fixed_cluster_costs_servers_times_end(capsys):
    """Without --autoscale, cost_server_s = 4 servers x the run's end time."""
    code = main(["simulate", "azure_conv_2023", "--limit", "100", "--servers", "4", "--json"])
    assert code == 0
    rec = json.loads(capsys.readouterr().out)
    assert rec["cost_server_s"] == 4 * rec["end_s"]
    assert (rec["servers_max"], rec["scale_events"]) == (4, 0)
