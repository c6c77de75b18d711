"""Deployment planning: classes, the mixed fleet, the closed loop, ``slolab plan --model``."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from slolab.harness import deploy
from slolab.harness.cli import main
from slolab.heuristics.deployment import PlanRouter
from slolab.instances import Instance, Workload
from slolab.models.deployment import DeploymentData, DeploymentPlan, plan_violations
from slolab.timing.generated import generated_preset

H100 = "llama2-7b/h100/tp1"
A100_TP2 = "llama2-7b/a100/tp2"


@pytest.fixture(scope="module")
def azure() -> Instance:
    return deploy.trace_instance("azure_conv_2023", [H100, A100_TP2], limit=40, seed=0)


def _workload(prompts: list[int], tiers: list[int]) -> Instance:
    n = len(prompts)
    workload = Workload(
        {
            "arrival_s": np.arange(n, dtype=float),
            "prompt_tokens": np.array(prompts),
            "output_tokens": np.full(n, 10),
            "ttft_slo_s": np.full(n, 1.0),
            "tpot_slo_s": np.full(n, 0.1),
            "tier": np.array(tiers),
        }
    )
    return Instance("hand", workload, timing=deploy.timing_of(H100))


def test_classes_split_by_size_and_tier_group() -> None:
    """Edges at 100 tokens and tier groups (0, 1) / (2, 3, 4) make four classes."""
    # sizes are prompt + 10 output tokens: 60, 70, 80, 90 <= 100 < 110, 120, 130, 140
    instance = _workload([50, 60, 70, 80, 100, 110, 120, 130] * 2, [0] * 8 + [3] * 8)
    classes = deploy.request_classes(instance, size_edges=[100], min_requests=4)
    assert classes.names == (
        "tokens<=100/tiers0-1",
        "tokens>=101/tiers0-1",
        "tokens<=100/tiers2-3-4",
        "tokens>=101/tiers2-3-4",
    )
    assert classes.counts == (4, 4, 4, 4)
    # 16 requests one second apart: mean rate 15 / 15 s = 1 req/s, a quarter each
    assert classes.rates == pytest.approx((0.25, 0.25, 0.25, 0.25))


def test_small_class_merges_into_its_tier_group() -> None:
    """A class below min_requests joins the largest class of its tier group."""
    # tier 0: three small (<= 100 tokens) and one large; tier 3: four small
    instance = _workload([50, 60, 70, 200, 50, 60, 70, 80], [0, 0, 0, 0, 3, 3, 3, 3])
    classes = deploy.request_classes(instance, size_edges=[100], min_requests=2)
    # the lone large tier-0 request merges with the three small ones: buckets 0..1
    assert classes.names == ("tokens:all/tiers0-1", "tokens<=100/tiers2-3-4")
    assert classes.counts == (4, 4)
    assert classes.class_of.tolist() == [0, 0, 0, 0, 1, 1, 1, 1]


def test_fleet_instance_pools_carry_their_own_hardware(azure: Instance) -> None:
    """One pool per configuration with servers, each with its preset's timing and KV."""
    fleet = deploy.fleet_instance(azure, [H100, A100_TP2, "llama2-7b/a40/tp1"], [2, 1, 0])
    pools = fleet.cluster.resolved_pools()
    assert [(p.name, p.servers, p.timing) for p in pools] == [
        (H100, 2, H100),
        (A100_TP2, 1, A100_TP2),
    ]
    assert pools[0].kv_capacity_tokens == generated_preset(H100).kv_capacity_tokens
    assert pools[1].kv_capacity_tokens == generated_preset(A100_TP2).kv_capacity_tokens
    assert fleet.cluster.servers == 3


def test_plan_router_sends_each_class_to_its_pool(azure: Instance) -> None:
    """Class 0 wholly to one pool, class 1 wholly to the other: every request lands there."""
    classes = deploy.RequestClasses(("a", "b"), np.arange(azure.n_requests) % 2, (1.0, 1.0))
    data = DeploymentData((H100, A100_TP2), (1.0, 1.0), ("a", "b"), (1.0, 1.0), ((1, 1), (1, 1)))
    plan = DeploymentPlan((1, 1), ((1.0, 0.0), (0.0, 1.0)))
    run = deploy.simulate_plan(azure, classes, data, plan, seed=3)
    # 40 requests alternate between the classes: 20 each
    assert run.pool_requests == {H100: 20, A100_TP2: 20}
    assert 0.0 <= run.attainment <= 1.0
    assert run.violations is None  # not asked


def test_a_mixed_fleet_run_passes_the_checker(azure: Instance) -> None:
    """Both pools serve (split fractions), and the independent checker finds nothing wrong."""
    classes = deploy.RequestClasses(("a", "b"), np.arange(azure.n_requests) % 2, (1.0, 1.0))
    data = DeploymentData((H100, A100_TP2), (1.0, 1.0), ("a", "b"), (1.0, 1.0), ((1, 1), (1, 1)))
    plan = DeploymentPlan((2, 1), ((0.5, 0.5), (0.25, 0.75)))
    run = deploy.simulate_plan(azure, classes, data, plan, seed=1, checked=True)
    assert sum(run.pool_requests.values()) == azure.n_requests
    assert min(run.pool_requests.values()) > 0
    assert run.violations == ()


def test_plan_router_draws_are_seeded() -> None:
    """Same seed, same pools; the draws follow the fractions."""
    classes = np.zeros(2000, dtype=np.int64)
    instance = _workload([50] * 2000, [0] * 2000)
    picks = []
    for _ in range(2):
        router = PlanRouter(classes, ["x", "y"], [[0.25, 0.75]])
        router.start(instance, seed=7)
        picks.append([router.pool_for(r) for r in range(2000)])
    assert picks[0] == picks[1]
    # 2000 draws at 0.25: the share of "x" is within 4 standard deviations (0.0097 each)
    share = picks[0].count("x") / 2000
    assert abs(share - 0.25) < 0.04


def test_closed_loop_on_a_trace_cut(azure: Instance) -> None:
    """Measured capacities, then solve-simulate-tighten: the printed fleet is simulated."""
    configurations = [H100, A100_TP2]
    classes = deploy.request_classes(azure)
    table = deploy.measure_capacities(azure, classes, configurations, target=0.9, seed=0)
    assert table.probes > 0 and all(v >= 0 for row in table.capacity for v in row)
    assert any(v > 0 for v in table.capacity[0])
    data = DeploymentData(
        tuple(configurations),
        tuple(deploy.configuration_price(c) for c in configurations),
        classes.names,
        classes.rates,
        table.capacity,
    )
    loop = deploy.close_loop(azure, classes, data, target=0.9, seed=0, max_rounds=4)
    for found in loop.rounds:
        assert found.result.plan is not None
        assert plan_violations(data, found.result.plan) == []
        assert found.run is not None
    last = loop.final.run
    assert last is not None
    assert loop.met == (last.attainment >= 0.9)
    # each round after the first holds one configuration to one more server than before
    for before, after in zip(loop.rounds, loop.rounds[1:], strict=False):
        assert before.result.plan is not None
        raised = [
            c
            for c in range(2)
            if after.lower[c] == before.result.plan.replicas[c] + 1 > before.lower[c]
        ]
        assert len(raised) == 1
    assert loop.summary().startswith("met" if loop.met else "not met")


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["plan", "azure_conv_2023", "--limit", "24", "--quiet", *argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_cli_json(capsys: pytest.CaptureFixture[str]) -> None:
    """--json prints one object: the per-configuration table (the calibrated presets by
    default), the loops, the saving."""
    code, out, _ = _cli(capsys, "--model", "llama2-7b", "--gpus", "h100", "--tp", "1", "--json")
    assert code == 0
    record = json.loads(out)
    assert [c["name"] for c in record["configurations"]] == [H100 + "/calibrated"]
    assert sum(c["requests"] for c in record["classes"]) == 24
    mixed = record["mixed"]
    assert mixed["met"] == (mixed["attainment"] >= 0.9)
    # one configuration: the mixed fleet is the single one, trimmed alike: saving 0
    assert mixed["met"]
    assert mixed["fleet"] == record["best_single"]["fleet"]
    assert record["mixed_trimmed"] == record["best_single_trimmed"]
    assert record["mixed_trimmed"]["attainment"] >= 0.9
    assert record["saving"] == 0.0
    assert record["optimum_status"] == "OPTIMAL"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--model", "gpt-9"], "unknown model 'gpt-9'; known: "),
        (["--model", "llama2-7b", "--gpus", "tpu"], "unknown GPU 'tpu'; known: "),
        (
            ["--model", "llama2-70b", "--gpus", "a40", "--tp", "1"],
            "the data supports no configuration of the grid: llama2-70b/a40/tp1/calibrated: ",
        ),
        (["--model", "llama2-7b", "--tp", "one"], "--tp must list integers >= 1, got 'one'"),
        (["--model", "llama2-7b", "--policy", "sarathi,edf"], "--policy with --model takes one"),
    ],
)
def test_cli_bad_input_is_one_line(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    """Unknown model or GPU, a grid the data refuses, a bad list: exit 2, one line."""
    code, _, err = _cli(capsys, *argv)
    assert code == 2
    assert err.count("\n") == 1 and message in err


def test_uncalibrated_grid_is_the_profile_only_presets() -> None:
    """The planner's grid: MODEL/GPU/tpN/calibrated by default, MODEL/GPU/tpN without the
    calibration, the same refusals either way."""
    calibrated, refused = deploy.configuration_names("llama2-70b", ["h100"], [1, 8])
    profile, refused_profile = deploy.configuration_names(
        "llama2-70b", ["h100"], [1, 8], calibrated=False
    )
    assert calibrated == ["llama2-70b/h100/tp8/calibrated"]
    assert profile == ["llama2-70b/h100/tp8"]
    # TP 1 refused for its weights either way, under the name asked for
    assert list(refused) == ["llama2-70b/h100/tp1/calibrated"]
    assert list(refused_profile) == ["llama2-70b/h100/tp1"]


def test_cli_bad_prices_file_names_line_field_value(
    capsys: pytest.CaptureFixture[str], tmp_path: object
) -> None:
    """A price that is not a number > 0 is named with its file, line, field and value."""
    from pathlib import Path

    path = Path(str(tmp_path)) / "prices.csv"
    path.write_text("gpu,usd_per_gpu_hour\nh100,3.1\na100,free\n")
    code, _, err = _cli(capsys, "--model", "llama2-7b", "--prices", str(path))
    assert code == 2
    assert f"{path} line 3: field usd_per_gpu_hour must be a number > 0, got 'free'" in err
    assert err.count("\n") == 1
    path.write_text("gpu,usd_per_gpu_hour\nh100,3.1\ntpu,1.0\n")
    code, _, err = _cli(capsys, "--model", "llama2-7b", "--prices", str(path))
    assert code == 2
    assert f"{path} line 3: field gpu names an unknown GPU 'tpu'; known: a100, a40, h100" in err


def test_prices_file_sets_server_prices(tmp_path: object) -> None:
    """A server of TP 2 costs twice the GPU's price from the file."""
    from pathlib import Path

    path = Path(str(tmp_path)) / "prices.csv"
    path.write_text("gpu,usd_per_gpu_hour\na100,1.5\n")
    prices = deploy.read_prices(path)
    assert prices == {"a100": 1.5}
    # 2 GPUs x 1.5 $/h
    assert deploy.configuration_price(A100_TP2, prices) == pytest.approx(3.0)
    # a GPU not in the file keeps the table's dated price
    assert deploy.configuration_price(H100, prices) == generated_preset(H100).price_usd_per_hour


def test_class_targets_spend_the_spare_misses() -> None:
    """Two classes of 4: one all meetable, one with 2 requests no server meets (TTFT 1 us)."""
    instance = _workload([100] * 8, [0] * 8)
    ttft = np.array([10.0] * 4 + [10.0, 10.0, 1e-6, 1e-6])
    workload = instance.workload.derived(
        {
            **{c: np.asarray(instance.workload[c]) for c in instance.workload.columns},
            "ttft_slo_s": ttft,
        }
    )
    instance = Instance("hand", workload, timing=deploy.timing_of(H100))
    classes = deploy.RequestClasses(("a", "b"), np.array([0] * 4 + [1] * 4), (0.5, 0.5))
    targets = deploy.class_targets(instance, classes, [H100], 0.7)
    # ceilings 1 and 0.5, A = (1 + 0.5) / 2 = 0.75: each class may miss 0.75 - 0.7 = 0.05 more
    # than its unavoidable misses: targets 0.95 and 0.45, which average to 0.7
    assert targets == pytest.approx((0.95, 0.45))
    with pytest.raises(ValueError, match="the target 0.9 is out of reach: .* 0.750 of the"):
        deploy.class_targets(instance, classes, [H100], 0.9)


def test_closed_loop_falls_back_to_the_last_plan_plus_a_server(
    monkeypatch: pytest.MonkeyPatch, azure: Instance
) -> None:
    """A re-solve that simulates worse than the last round yields to the last plan + 1."""
    data = DeploymentData(
        ("cheap", "dear"), (1.0, 3.0), ("short", "long"), (10.0, 4.0), ((4.0, 1.0), (20.0, 5.0))
    )
    # stand-in simulations: attainment by fleet; the misses of (2, 1) sit in the dear pool
    attained = {(2, 1): 0.8, (0, 2): 0.6, (2, 2): 0.95}

    def fake(instance, classes, data, plan, **options):  # type: ignore[no-untyped-def]
        missed = {"cheap": 0, "dear": 10} if plan.replicas == (2, 1) else {"cheap": 1, "dear": 1}
        return deploy.FleetRun(attained[plan.replicas], {"cheap": 50, "dear": 50}, missed, 0, 0.0)

    monkeypatch.setattr(deploy, "simulate_plan", fake)
    classes = deploy.RequestClasses(("short", "long"), np.arange(40) % 2, (10.0, 4.0))
    loop = deploy.close_loop(azure, classes, data, target=0.9, seed=0)
    # round 1: the optimum (2, 1) at 5 $/h, 0.8; dear held to 2 -> re-solve (0, 2) at 6 $/h
    # simulates 0.6 < 0.8, so (2, 1) + 1 dear = (2, 2) at 2 + 6 = 8 $/h, 0.95, is adopted
    assert [(r.result.plan.replicas, r.how) for r in loop.rounds] == [  # type: ignore[union-attr]
        ((2, 1), "solved"),
        ((2, 2), "added"),
    ]
    assert loop.met and loop.final.result.cost == pytest.approx(8.0)
    assert loop.rounds[1].lower == (0, 2)


def test_trim_removes_servers_while_the_simulation_meets_the_target(
    monkeypatch: pytest.MonkeyPatch, azure: Instance
) -> None:
    """Dearest configuration first, one server at a time, until no removal meets the target."""
    from slolab.models.deployment import DeploymentResult
    from slolab.solvers.base import Status

    def fake(instance, classes, names, replicas, fractions, **options):  # type: ignore[no-untyped-def]
        meets = replicas[0] >= 2 and replicas[1] >= 1
        return deploy.FleetRun(0.95 if meets else 0.5, {}, {}, 0, 0.0)

    monkeypatch.setattr(deploy, "simulate_fleet", fake)
    plan = DeploymentPlan((3, 2), ((0.5, 0.5),))
    result = DeploymentResult(Status.OPTIMAL, plan, 9.0, 9.0, 0.0, "highs")
    met = deploy.FleetRun(0.97, {}, {}, 0, 0.0)
    loop = deploy.ClosedLoop(
        ("cheap", "dear"), (1.0, 3.0), 0.9, (deploy.LoopRound((0, 0), result, met),), True
    )
    classes = deploy.RequestClasses(("all",), np.zeros(40, dtype=np.int64), (1.0,))
    replicas, run = deploy.trim_fleet(azure, classes, loop)
    # (3, 2) -> dear 2 -> 1 meets: (3, 1); dear keeps its last server; cheap 3 -> 2 meets:
    # (2, 1); cheap 2 -> 1 misses: stop at 2 x 1 + 1 x 3 = 5 $/h
    assert replicas == (2, 1)
    assert run.attainment == 0.95


def test_a_tie_on_the_capacities_takes_the_cheaper_verified_fleet(
    monkeypatch: pytest.MonkeyPatch, azure: Instance, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two optima on the capacities: 1 x TP 2 and 2 x TP 1 cost 8.50 $/h each. The MILP takes
    TP 2, whose simulation misses until a second TP 2 server (17 $/h); the best single
    configuration, 2 x TP 1, meets at 8.50 $/h. The mixed answer is the cheaper verified fleet:
    the TP 1 one, saving 0 (not -100 %)."""
    tp1, tp2 = "llama2-7b/h100/tp1", "llama2-7b/h100/tp2"
    classes = deploy.RequestClasses(("all",), np.zeros(azure.n_requests, dtype=np.int64), (1.0,))

    def capacities(instance, classes, configurations, **options):  # type: ignore[no-untyped-def]
        # one TP 1 server carries half the class, one TP 2 server all of it
        return deploy.CapacityTable(
            tuple(configurations), classes.names, ((0.5,), (1.0,)), (0.9,), 0, 0, 0.0
        )

    def fleet(names, replicas):  # type: ignore[no-untyped-def]
        servers = {name: n for name, n in zip(names, replicas, strict=True) if n > 0}
        meets = servers.get(tp1, 0) >= 2 or servers.get(tp2, 0) >= 2
        return deploy.FleetRun(
            0.95 if meets else 0.7, {n: 20 for n in servers}, {n: 6 for n in servers}, 0, 0.0
        )

    monkeypatch.setattr(deploy, "measure_capacities", capacities)
    monkeypatch.setattr(
        deploy,
        "simulate_plan",
        lambda instance, classes, data, plan, **o: fleet(data.configurations, plan.replicas),
    )
    monkeypatch.setattr(
        deploy,
        "simulate_fleet",
        lambda instance, classes, names, replicas, fractions, **o: fleet(names, replicas),
    )
    report = deploy.plan_deployment(azure, [tp1, tp2], target=0.9, seed=0, classes=classes)
    assert report.optimum_cost == pytest.approx(8.5) and report.best_single_cost == 8.5
    # the mixed loop: 1 x TP 2 misses, 2 x TP 2 meets and trims to itself
    assert report.mixed.fleet_text() == f"2 x {tp2}"
    # the answer: the verified single fleet, cheaper
    assert report.mixed_cost == pytest.approx(8.5) == report.single_cost
    assert report.saving == 0.0
    assert report.mixed_trimmed is not None and report.mixed_trimmed[0] == (2, 0)
    assert report.mixed_from == "single"
    assert report.mixed_loop_trimmed is not None and report.mixed_loop_trimmed[0] == (0, 2)
    # the answer's plan sends all the traffic to its one configuration
    assert report.mixed_plan == DeploymentPlan((2, 0), ((1.0, 0.0),))
    record = report.to_record()
    assert record["mixed_fleet"] == f"2 x {tp1}" and record["mixed_from"] == "single"
    assert record["mixed_cost"] <= record["single_cost"]
    # slolab plan prints the mixed loop's own fleet, then the answer taken instead
    import argparse

    from slolab.harness import plan

    args = argparse.Namespace(trace="hand", model="llama2-7b", target=0.9, definition="deadline")
    plan._print_report(args, azure, classes, report)
    out = capsys.readouterr().out
    assert (
        f"mixed fleet trimmed (servers removed while the simulation meets the target): 2 x {tp2} $17.00/h"
        in out
    )
    assert f"mixed answer: the best single fleet, 2 x {tp1} $8.50/h (verified, cheaper" in out
    assert out.rstrip().splitlines()[-2].endswith("configuration: 0.0%")


def test_capacity_cache_reads_what_a_search_would_measure(azure: Instance, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Searches already measured are read, not run, and give the capacities a fresh
    measurement gives: H100 alone first, then the grid H100 + A100 (H100 first: its searches
    start at the class rates in both) by another process sharing the cache's directory, then
    the grid again."""
    classes = deploy.request_classes(azure)
    grid = [H100, A100_TP2]
    fresh = deploy.measure_capacities(azure, classes, grid, target=0.9, seed=0)
    assert fresh.reused == 0 and fresh.saved == 0
    alone = deploy.measure_capacities(
        azure, classes, [H100], target=0.9, seed=0, cache=deploy.CapacityCache(tmp_path)
    )
    assert alone.reused == 0 and alone.saved == 0 and alone.probes > 0
    n = len(classes.names)
    shared = deploy.measure_capacities(
        azure, classes, grid, target=0.9, seed=0, cache=deploy.CapacityCache(tmp_path)
    )
    assert shared.capacity == fresh.capacity and shared.class_targets == fresh.class_targets
    # H100's searches and solo runs read: its probes saved, the A100's run
    assert shared.reused == n and shared.saved == alone.probes + n
    assert shared.probes == fresh.probes - alone.probes
    cache = deploy.CapacityCache(tmp_path)
    again = deploy.measure_capacities(azure, classes, grid, target=0.9, seed=0, cache=cache)
    assert again.capacity == fresh.capacity and again.probes == 0 == again.early
    assert again.reused == 2 * n and again.saved == fresh.probes + 2 * n
    assert (cache.searches_reused, cache.probes_saved) == (again.reused, again.saved)
    # another seed is another key: measured afresh
    other = deploy.measure_capacities(azure, classes, [H100], target=0.9, seed=1, cache=cache)
    assert other.reused == 0 and other.probes > 0


def test_the_single_answer_is_never_dearer_than_a_configuration_alone() -> None:
    """The cheapest configuration on capacities (an A100 at TP 1, $2.21/h) needs a second
    server in simulation ($4.42/h) while one H100 at TP 1 ($4.25/h) meets the target: the
    grid of both answers the H100, as the H100's grid alone does (every configuration whose
    one server costs less than the best verified fleet is verified)."""
    a100, h100 = "llama2-7b/a100/tp1", H100
    instance = deploy.trace_instance("azure_conv_2023", [a100, h100], limit=200, seed=0)
    cache = deploy.CapacityCache()
    both = deploy.plan_deployment(instance, [a100, h100], target=0.9, seed=0, cache=cache)
    alone = {
        name: deploy.plan_deployment(instance, [name], target=0.9, seed=0, cache=cache)
        for name in (a100, h100)
    }
    assert both.optimum_cost == pytest.approx(2.21)  # one A100 on the measured capacities
    assert alone[a100].mixed_cost == pytest.approx(4.42)  # two in simulation
    assert both.mixed_cost == both.single_cost == alone[h100].mixed_cost == pytest.approx(4.25)
    assert both.single_verified == 2 and both.to_record()["single_fleet"] == f"1 x {h100}"
    assert both.mixed_cost <= min(report.mixed_cost for report in alone.values())
    assert both.mixed_trimmed is not None and both.mixed_trimmed[1].attainment >= 0.9


def test_source_fingerprint_follows_the_code_a_search_runs(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """An edit to the package's code changes the fingerprint; an edit to its tests, benchmarks
    or a hidden folder does not; the same tree hashes alike."""
    from slolab.problems.deployment_capacity import source_fingerprint

    def tree(name: str, edit: str | None = None) -> str:
        root = tmp_path / name
        for file in ("sim/engine.py", "tests/test_a.py", "benchmarks/b.py", ".git/c.py"):
            (root / file).parent.mkdir(parents=True, exist_ok=True)
            (root / file).write_text("x = 2\n" if file == edit else "x = 1\n")
        return source_fingerprint(root)

    before = tree("base")
    assert tree("same") == before
    for file in ("tests/test_a.py", "benchmarks/b.py", ".git/c.py"):
        assert tree(f"edit-{Path(file).stem}", edit=file) == before, file
    assert tree("edit-engine", edit="sim/engine.py") != before


def test_capacity_cache_key_holds_the_source_fingerprint(monkeypatch: pytest.MonkeyPatch) -> None:
    """Entries written by other code are not read: the key changes with the fingerprint."""
    from slolab.problems import deployment_capacity

    key = deploy.CapacityCache.key("search", 1)
    assert deploy.CapacityCache.key("search", 1) == key
    monkeypatch.setattr(deployment_capacity, "source_fingerprint", lambda: "other code")
    assert deploy.CapacityCache.key("search", 1) != key


def test_cli_capacity_cache_reads_the_searches_of_a_run_before(
    capsys: pytest.CaptureFixture[str], tmp_path: object
) -> None:
    """--capacity-cache DIR: the second run reads every search and solo run of the first and
    prints the same plan."""
    argv = ["--model", "llama2-7b", "--gpus", "h100", "--tp", "1"]
    argv += ["--capacity-cache", str(tmp_path)]
    outputs = []
    for _ in range(2):
        code, out, _ = _cli(capsys, *argv)
        assert code == 0
        outputs.append(out.splitlines())
    first = next(line for line in outputs[0] if line.startswith("capacities: "))
    second = next(line for line in outputs[1] if line.startswith("capacities: "))
    searches = int(first.split()[1])
    probes = int(first.split()[3])
    assert "read from the cache" not in first and probes > 0
    # every search read: its probes and its class's solo run (one configuration) saved
    assert second.startswith(f"capacities: {searches} searches, 0 simulations (0 stopped early), ")
    assert (
        f"{searches} searches read from the cache ({probes + searches} simulations saved)" in second
    )

    def plan_lines(lines: list[str]) -> list[str]:
        return [line for line in lines if not line.startswith(("capacities: ", "wall time"))]

    assert plan_lines(outputs[0]) == plan_lines(outputs[1])
