"""Early verdicts in plan: a simulation certain to miss the target stops there, and the plan
chooses the same count, with the same full numbers, as with every simulation run to its end."""

import functools
import json

import numpy as np
import pandas as pd
import pytest
from slolab.harness.cli import main
from slolab.harness.plan import PlanProbe, plan
from slolab.harness.serving import ServingSetup
from slolab.solvers.capacity import ProbeVerdict, smallest_count
from verdict_stubs import ListedVerdicts

E2E_COLUMNS = ("arrival_s", "prompt_tokens", "output_tokens", "ttft_slo_s", "tpot_slo_s")


@functools.cache
def _e2e_trace(directory: str) -> str:
    """The first 100 conversation requests with PolyServe's SLOs, every other one also with an
    end-to-end SLO of 0.5 s plus 20 ms per output token, as a generic CSV trace."""
    wl = ServingSetup("azure_conv_2023", limit=100, seed=1).instance().workload
    frame = pd.DataFrame({name: wl[name] for name in E2E_COLUMNS})
    frame["e2e_slo_s"] = np.where(
        np.arange(len(wl)) % 2 == 0, 0.5 + 0.02 * wl.output_tokens, np.nan
    )
    path = f"{directory}/e2e.csv"
    frame.to_csv(path, index=False)
    return path


def _setup(trace: str, directory: str) -> ServingSetup:
    if trace != "e2e":
        return ServingSetup(trace, limit=100, seed=1)
    columns = ",".join(f"{name}={name}" for name in (*E2E_COLUMNS, "e2e_slo_s"))
    return ServingSetup(
        _e2e_trace(directory), format="generic", columns=columns, slos="none", limit=100, seed=1
    )


#: (policy, trace, target, definition, traffic, scan): 100 requests each, servers 1..16.
BATTERY = [
    ("sarathi", "azure_code_2023", 0.9, "deadline", 16.0, False),
    ("vllm", "azure_code_2023", 0.8, "ttft+mean-tpot", 16.0, False),
    ("edf", "azure_code_2023", 0.95, "ttft+max-tpot", 16.0, False),
    ("slos-serve", "azure_conv_2023", 0.9, "deadline", 16.0, False),
    ("polyserve", "azure_conv_2023", 0.9, "deadline", 16.0, False),
    ("hyperflexis", "azure_conv_2023", 0.9, "ttft+mean-tpot", 16.0, False),
    ("sarathi", "e2e", 0.8, "e2e", 64.0, False),
    ("vllm", "azure_code_2023", 0.9, "deadline", 16.0, True),
    ("sarathi", "azure_code_2023", 0.99, "deadline", 32.0, True),
]


@functools.cache
def _plans(case: tuple, directory: str):
    """The plan of ``case`` with early verdicts and with every simulation run to its end."""
    policy, trace, target, definition, traffic, scan = case
    setup = _setup(trace, directory)
    return tuple(
        plan(
            setup,
            [policy],
            servers=(1, 16),
            target=target,
            definition=definition,
            traffic=traffic,
            scan=scan,
            early=early,
        )[0]
        for early in (True, False)
    )


@pytest.fixture(scope="module")
def directory(tmp_path_factory) -> str:
    return str(tmp_path_factory.mktemp("plan_early"))


@pytest.mark.parametrize("case", BATTERY, ids=lambda case: f"{case[0]}-{case[3]}-{case[2]}")
def test_early_plan_is_the_full_plan(case, directory):
    """Same probes and count; every full number equal; every stopped probe's bound brackets it."""
    early, full = _plans(case, directory)
    target = case[2]
    assert [p.servers for p in early.probes] == [p.servers for p in full.probes]
    assert (early.servers, early.search.stop_reason) == (full.servers, full.search.stop_reason)
    assert early.chosen == full.chosen and (early.chosen is None or not early.chosen.early)
    for stopped, ran in zip(early.probes, full.probes, strict=True):
        if stopped.early:
            # the run missed for good: the full attainment is at most the bound, below target
            assert ran.attainment <= stopped.attainment < target
            assert stopped.met_requests is None and stopped.server_s is None
            assert 0.0 < stopped.stopped_at_s < ran.end_s
        else:
            assert stopped == ran
    printed = ("servers", "attainment", "server_s", "cost_per_met_request_s")
    assert {k: early.to_dict()[k] for k in printed} == {k: full.to_dict()[k] for k in printed}
    # monotone counts a fall only when the bounds prove it: never flagged where full is not
    assert early.search.monotone or not full.search.monotone
    assert early.search.early == tuple(p.early for p in early.probes)
    assert not any(full.search.early)


def test_the_battery_stops_most_missed_simulations_early(directory):
    """Across the battery, simulations that miss the target mostly stop early."""
    pairs = [_plans(case, directory) for case in BATTERY]
    missed = sum(
        not p.attainment >= case[2]
        for (early, _), case in zip(pairs, BATTERY, strict=True)
        for p in early.probes
    )
    stopped = sum(len(e.stopped_early) for e, _ in pairs)
    # measured: 25 of the 28 simulations (of 38) that miss the target stopped early; the three
    # that ran through settled only near their end (sarathi at 32x with 0.99: 7 servers, 0.98;
    # edf at 0.95: 12 servers, 0.94; the e2e case: 1 server, 0.6)
    assert (stopped, missed, sum(len(e.probes) for e, _ in pairs)) == (25, 28, 38)


def test_a_dip_below_the_target_is_flagged_through_a_bound(directory):
    """Sarathi at 32x, target 0.99, scanned: 7 servers 0.98 (full), 8 at most 0.97: not monotone."""
    early, full = _plans(BATTERY[-1], directory)
    seen = {p.servers: (p.attainment, p.early) for p in early.probes}
    # 7 servers missed 0.99 by one request and ran to its end; 8 stopped at most 0.97 < 0.98
    assert seen[7] == (0.98, False) and seen[8][1] and seen[8][0] < 0.98
    # the full run: 0.96 at 8 servers; both flag the fall, both choose 9 servers (0.99)
    assert dict(full.curve)[8] == 0.96
    assert (early.search.monotone, full.search.monotone) == (False, False)
    assert early.servers == full.servers == 9


def test_plan_probe_stopped_early_holds_a_bound_only():
    """A stopped probe has stopped_at_s and no full numbers; its cost is not measured (NaN)."""
    probe = PlanProbe(1, 0.42, 100, None, None, None, early=True, stopped_at_s=3.5)
    assert probe.attainment_text() == "0.420 or less"
    assert np.isnan(probe.cost_per_met_request_s)
    with pytest.raises(ValueError, match="a probe stopped early has stopped_at_s"):
        PlanProbe(1, 0.42, 100, 42, None, None, early=True, stopped_at_s=3.5)
    with pytest.raises(ValueError, match="a full probe needs met_requests, end_s and server_s"):
        PlanProbe(1, 0.42, 100, None, 3.0, 3.0)


def test_smallest_count_compares_stopped_probes_by_their_bounds():
    """A fall is flagged only when the bounds prove it; the verdicts decide the search."""
    answers = {1: 0.6, 2: ProbeVerdict(0.5, early=True), 4: 0.95, 3: ProbeVerdict(0.7, early=True)}
    found = smallest_count(lambda count: answers[count], lo=1, hi=4)
    # 1 misses (0.6), 2 misses (at most 0.5), 4 meets, 3 misses (at most 0.7): count 4
    assert found.count == 4 and found.early == (False, True, False, True) and found.n_early == 2
    # 2 is at most 0.5 < 1's 0.6: attainment certainly fell from 1 to 2 servers
    assert found.monotone is False
    answers[1] = ProbeVerdict(0.6, early=True)
    # 1 at most 0.6 and 2 at most 0.5: either may be the larger, no fall is proven
    assert smallest_count(lambda count: answers[count], lo=1, hi=4).monotone is True
    answers[1], answers[2] = 0.4, ProbeVerdict(0.5, early=True)
    # 2 is at most 0.5, at or above 1's 0.4 possible: no fall proven
    assert smallest_count(lambda count: answers[count], lo=1, hi=4).monotone is True


def plan_cli(*options):
    """``slolab plan`` on the first 100 code-trace requests at 16x their rate."""
    return main(
        ["plan", "azure_code_2023", "--limit", "100", "--traffic", "16", "--seed", "1", *options]
    )


def test_plan_cli_prints_bounds_and_full_probes_turns_them_off(capsys):
    """Text: stopped counts read 'or less'; --json flags them; --full-probes stops none."""
    assert plan_cli("--policies", "sarathi", "--servers", "1..16", "--quiet") == 0
    text = capsys.readouterr().out
    # sarathi at 16x: 1, 2 and 3 servers miss and stop early, 4 meets (the battery's first case)
    assert "  sarathi curve (servers: attainment): 1: 0.580 or less, 2: 0.640 or less, " in text
    assert (
        "stopped early (certain to miss the target, attainment 'or less'): sarathi 3 of 4" in text
    )
    assert plan_cli("--policies", "sarathi", "--servers", "1..16", "--json") == 0
    early = json.loads(capsys.readouterr().out)
    assert plan_cli("--policies", "sarathi", "--servers", "1..16", "--json", "--full-probes") == 0
    full = json.loads(capsys.readouterr().out)
    assert early["stopped_early"] == [1, 2, 3] and early["early_verdicts"] is True
    assert early["n_early"] == 3 and full["n_early"] == 0 and full["stopped_early"] == []
    stopped = [probe for probe in early["probes"] if probe["early"]]
    assert [probe["servers"] for probe in stopped] == [1, 2, 3]
    assert all(p["met_requests"] is None and p["cost_per_met_request_s"] is None for p in stopped)
    for key in ("servers", "attainment", "server_s", "cost_per_met_request_s", "n_probes"):
        assert early[key] == full[key]


def test_miss_watch_checks_early_then_at_the_watchs_pace():
    """Gaps of 200, 400, 800, 1600, 3200 events, then 3200; a meets verdict is not re-asked."""
    from slolab.harness.plan import _MissWatch

    watch = ListedVerdicts(3200, [None] * 6 + ["misses"])
    stop = _MissWatch(watch)
    # the engine calls the stop every 3200 // 16 = 200 events; the watch is asked at calls
    # 1, 3, 7, 15, 31, 47, 63 (gaps 1, 2, 4, 8, 16, 16, 16 calls)
    assert stop.every == 200
    said = [stop(call) for call in range(1, 64)]
    assert watch.asked == [1, 3, 7, 15, 31, 47, 63] and said.index(True) == 62
    meets = ListedVerdicts(3200, ["meets"])
    stop = _MissWatch(meets)
    # asked once (call 1), certain to meet: the run goes on and the watch is not asked again
    assert not any(stop(call) for call in range(1, 100)) and meets.asked == [1]
    # a small run's watch (every 100 events) is asked at every one of its calls
    small = _MissWatch(ListedVerdicts(150, [None] * 5))
    assert (small.every, small.max_gap) == (100, 1)
