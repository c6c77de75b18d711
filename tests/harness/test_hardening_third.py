"""Odd inputs over simulate, capacity, plan (with and without --model), compare, solve, problems
and instance build: each exits with its status and one stderr line naming the flag, file,
value or plugin, or does what it says (the KV capacity a run uses, the methods that run)."""

from __future__ import annotations

import dataclasses
import importlib
import json
import logging
import math
import sys
import textwrap

import pytest
from slolab.harness.cli import main
from slolab.heuristics.deployment import best_single, greedy_cost_per_capacity
from slolab.instances import load_shipped, save_instance
from slolab.models.deployment import (
    DeploymentData,
    plan_cost,
    plan_violations,
    solve_brute_force,
    solve_milp,
)
from slolab.problems.deployment_capacity import CapacityCache, read_prices
from slolab.solvers.base import Status

PLUGINS = textwrap.dedent(
    '''
    """Routers and policies that break the contract, for the hardening battery."""
    from slolab.sim import HOLD, Batch


    class HoldAll:
        def start(self, instance, seed):
            pass

        def route(self, request, servers, now):
            return HOLD


    class Half:
        def start(self, instance, seed):
            pass

        def route(self, request, servers, now):
            return 0.5


    class Word:
        def start(self, instance, seed):
            pass

        def route(self, request, servers, now):
            return "zero"


    class Empty:
        def start(self, instance, seed):
            pass

        def next_batch(self, server):
            return Batch()


    class Nothing:
        def start(self, instance, seed):
            pass

        def next_batch(self, server):
            return None


    class Twice:
        def start(self, instance, seed):
            pass

        def next_batch(self, server):
            waiting = list(server.waiting)
            if not waiting:
                return Batch()
            return Batch(prefill=[(waiting[0], 1), (waiting[0], 1)])
    '''
)


@pytest.fixture
def plugins(tmp_path, monkeypatch):
    """The plugin module ``odd`` in the working directory."""
    (tmp_path / "odd.py").write_text(PLUGINS)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "odd", raising=False)
    importlib.invalidate_caches()
    return tmp_path


def last_error_line(capsys) -> str:
    """The last stderr line of a failed command, without its 'slolab: error: ' prefix (a log
    warning may come before it)."""
    err = capsys.readouterr().err.strip().splitlines()
    assert err, "no stderr"
    assert err[-1].startswith("slolab: error: "), err
    return err[-1].removeprefix("slolab: error: ")


def one_error_line(capsys) -> str:
    """The single stderr line of a failed command, without its prefix."""
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0].startswith("slolab: error: "), err
    return err[0].removeprefix("slolab: error: ")


SIM = ["simulate", "azure_conv_2023", "--limit", "20", "--quiet"]

# -- item 1: the KV capacity of a generated preset ---------------------------------------------


def test_generated_preset_ran_at_the_default_200000_kv_tokens(capsys):
    """llama2-70b/a100/tp2 runs at its preset's 50,790 tokens and says so: 7 preemptions, end
    152.6 s on 200 requests (at 200,000 tokens: 0 preemptions, 145.7 s)."""
    args = ["simulate", "azure_conv_2023", "--timing", "llama2-70b/a100/tp2", "--limit", "200"]
    assert main([*args, "--quiet", "--json"]) == 0
    own = json.loads(capsys.readouterr().out)
    assert main([*args, "--quiet", "--json", "--kv-capacity", "50790"]) == 0
    flag = json.loads(capsys.readouterr().out)
    assert (own["kv_capacity"], own["kv_capacity_source"]) == (50790, "preset llama2-70b/a100/tp2")
    assert flag["kv_capacity_source"] == "--kv-capacity"
    # the same cluster either way: the same run
    assert (own["preemptions"], round(own["end_s"], 1)) == (7, 152.6)
    assert (flag["preemptions"], flag["end_s"]) == (own["preemptions"], own["end_s"])


@pytest.mark.parametrize(
    ("extra", "tokens", "source"),
    [
        ([], 200_000, "default"),
        (["--kv-capacity", "123456"], 123_456, "--kv-capacity"),
        (["--timing", "llama2-7b/h100/tp1"], None, "preset llama2-7b/h100/tp1"),
        (["--timing", "llama2-7b/h100/tp1", "--kv-capacity", "99999"], 99_999, "--kv-capacity"),
    ],
)
def test_kv_capacity_used_is_printed(extra, tokens, source, capsys):
    """simulate --json names the KV capacity and where it came from; the text prints both."""
    from slolab.timing.generated import generated_preset

    assert main([*SIM, *extra, "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    expected = tokens or generated_preset("llama2-7b/h100/tp1").kv_capacity_tokens
    assert (record["kv_capacity"], record["kv_capacity_source"]) == (expected, source)
    assert main([*SIM, *extra]) == 0
    assert "kv_capacity" in capsys.readouterr().out


def test_capacity_and_plan_name_the_kv_capacity(capsys):
    """capacity and plan (text and --json) print the KV tokens per server and their source."""
    preset = ["--timing", "llama2-70b/a100/tp2"]
    assert main(["capacity", "azure_conv_2023", "--limit", "20", "--quiet", "--json", *preset]) == 0
    record = json.loads(capsys.readouterr().out)
    assert (record["kv_capacity"], record["kv_capacity_source"]) == (
        50790,
        "preset llama2-70b/a100/tp2",
    )
    plan = ["plan", "azure_conv_2023", "--limit", "20", "--servers", "1..2", "--quiet"]
    assert main([*plan, *preset, "--policies", "sarathi"]) == 0
    assert "KV 50790 tokens per server from preset llama2-70b/a100/tp2" in capsys.readouterr().out
    assert main([*plan, "--policies", "sarathi", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["kv_capacity_source"] == "default"


# -- item 2: no heuristic fleet below a proved optimum -------------------------------------------


def _tiny_data() -> DeploymentData:
    """The shipped deployment instance's data with its rates cut 10^7-fold (every class far
    below one server of load)."""
    data = load_shipped("deploy-azure-conv-200-3cfg").settings["deployment"]
    return DeploymentData.from_dict({**data, "rates": [r * 1e-7 for r in data["rates"]]})


def test_greedy_rounded_a_light_class_to_zero_servers():
    """A class of 5e-9 servers of load needs one server: the greedy and best-single fleets
    cost the A100's $2.21/h, the MILP's proved optimum, not $0.00/h."""
    data = _tiny_data()
    optimum = solve_milp(data)
    greedy, single = greedy_cost_per_capacity(data), best_single(data)
    assert single is not None
    assert optimum.status == Status.OPTIMAL and optimum.plan is not None
    # the cheapest server of a configuration serving every class: one A100 at $2.21/h
    assert optimum.cost == pytest.approx(2.21)
    assert plan_cost(data, greedy) == plan_cost(data, single) == pytest.approx(2.21)
    assert sum(greedy.replicas) == sum(single.replicas) == 1
    for plan in (greedy, single, optimum.plan):
        assert plan_violations(data, plan) == []
    found = solve_brute_force(data)
    assert found.cost == pytest.approx(2.21) and found.status == Status.OPTIMAL


def test_tiny_loads_left_the_exact_fleets_without_a_server(tmp_path, capsys):
    """compare on the tiny-load instance: every method runs a fleet of one A100 ($2.21/h);
    HiGHS and the enumeration used to send traffic to 0 servers ('the fleet has no server')."""
    inst = load_shipped("deploy-azure-conv-200-3cfg")
    data = inst.settings["deployment"]
    tiny = {**data, "rates": [r * 1e-7 for r in data["rates"]]}
    path = save_instance(
        dataclasses.replace(inst, settings={**inst.settings, "deployment": tiny}),
        tmp_path / "tiny.json",
    )
    methods = "greedy,best-single,highs,enumeration"
    assert main(["compare", str(path), "--methods", methods, "--quiet", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [round(r["objective"], 2) for r in rows] == [2.21] * 4


@pytest.mark.parametrize("target", ["0", "-0.5", "1.5", "nan"])
def test_deployment_build_accepted_any_target(target, tmp_path, capsys):
    """instance build --problem deployment --target is an attainment in (0, 1], as for plan."""
    out = tmp_path / "d.json"
    args = ["instance", "build", "--problem", "deployment", "--target", target, "-o", str(out)]
    assert main(args) == 2
    assert (
        one_error_line(capsys) == f"--target must be an attainment in (0, 1], got {float(target)}"
    )
    assert not out.exists()


@pytest.mark.parametrize("target", ["0", "-0.5", "1.5"])
def test_plan_model_target_out_of_range(target, capsys):
    """plan --model --target out of (0, 1] is one line naming the flag."""
    args = ["plan", "azure_conv_2023", "--model", "llama2-7b", "--target", target]
    assert main(args) == 2
    assert (
        one_error_line(capsys) == f"--target must be an attainment in (0, 1], got {float(target)}"
    )


# -- item 3: flags a plan does not use -----------------------------------------------------------


@pytest.mark.parametrize(
    ("flag", "value", "why"),
    [
        ("--timing", "llama2-7b-h100x", "each configuration runs its own preset MODEL/GPU/tpN"),
        ("--kv-capacity", "5000", "each configuration runs at its own preset's KV capacity"),
        ("--prefill-servers", "1", "the planner sizes the prefill pool itself (--mode pd or both)"),
        ("--servers", "1..4", "the planner chooses the servers of each configuration"),
        ("--scan", None, "the planner searches no server count"),
        (
            "--full-probes",
            None,
            "the capacity searches always stop a probe once its verdict is certain",
        ),
        (
            "--price-per-server-hour",
            "2",
            "the prices are per GPU-hour, from --prices or the presets",
        ),
        ("--router", "random", "the plan routes each request class (PlanRouter)"),
        ("--decode-router", "random", "a disaggregated plan routes decodes by its own fractions"),
        (
            "--token-budget",
            "512",
            "each pool's budget is the largest batch within the tightest TPOT there",
        ),
        ("--max-batch-size", "8", "each pool runs the preset's cluster defaults"),
        (
            "--prefix-cache",
            "off",
            "the capacity probes and the verified fleets run without prefix caching",
        ),
    ],
)
def test_plan_model_ignored_flags(flag, value, why, capsys):
    """plan --model refuses, in one line, a flag the deployment planner does not use."""
    args = ["plan", "azure_conv_2023", "--model", "llama2-7b", flag]
    assert main(args + ([value] if value is not None else [])) == 2
    assert one_error_line(capsys) == f"{flag} does not apply to plan --model ({why}); drop it"


@pytest.mark.parametrize(
    ("flag", "value"),
    [
        ("--gpus", "a100"),
        ("--tp", "1"),
        ("--prices", "p.csv"),
        ("--max-rounds", "2"),
        ("--capacity-cache", "cache"),
        ("--uncalibrated", None),
    ],
)
def test_plan_without_model_ignored_deployment_flags(flag, value, capsys):
    """plan without --model refuses the deployment planner's flags."""
    assert main(["plan", "azure_conv_2023", flag] + ([value] if value else [])) == 2
    assert one_error_line(capsys) == f"{flag} applies to plan --model only (the deployment planner)"


# -- item 4: a prices file that lacks a GPU of the grid ------------------------------------------


@pytest.mark.parametrize(
    ("text", "gpus", "message"),
    [
        ("gpu,usd_per_gpu_hour\na100,2.0\n", "a100,h100", "no price for GPU h100 of the grid"),
        ("gpu,usd_per_gpu_hour\n", "a100", "no price for GPU a100 of the grid (it lists none)"),
        ("gpu,usd_per_gpu_hour\na100,0\n", "a100", "line 2: field usd_per_gpu_hour must be"),
        ("gpu,usd_per_gpu_hour\na100,-1\n", "a100", "line 2: field usd_per_gpu_hour must be"),
        ("gpu,usd_per_gpu_hour\n,2\n", "a100", "line 2: field gpu is empty"),
        ("gpu,usd_per_gpu_hour\nv100,2\n", "a100", "line 2: field gpu names an unknown GPU"),
        ("gpu,usd_per_gpu_hour\na100,2\na100,3\n", "a100", "line 3: field gpu lists 'a100'"),
        ("gpu,price\na100,2\n", "a100", "line 1: the header must name the columns"),
    ],
)
def test_prices_file_fell_back_to_dated_prices(text, gpus, message, tmp_path, capsys):
    """A bad --prices file, or one without a GPU of the grid, is one line naming the file."""
    prices = tmp_path / "prices.csv"
    prices.write_text(text)
    args = ["plan", "azure_conv_2023", "--model", "llama2-7b", "--gpus", gpus, "--tp", "1"]
    assert main([*args, "--prices", str(prices)]) == 2
    line = one_error_line(capsys)
    assert line.startswith(str(prices)) and message in line, line


def test_read_prices_names_every_missing_gpu(tmp_path):
    """read_prices with the grid's GPUs names each one it lacks."""
    prices = tmp_path / "p.csv"
    prices.write_text("gpu,usd_per_gpu_hour\nh100,4\n")
    with pytest.raises(
        ValueError, match=r"no price for GPU a100, a40 of the grid \(it lists h100\)"
    ):
        read_prices(prices, ["a100", "h100", "a40"])
    assert read_prices(prices, ["h100"]) == {"h100": 4.0}


# -- item 5: router output validated ------------------------------------------------------------


@pytest.mark.parametrize(
    ("router", "shown"),
    [("odd:Half", "0.5"), ("odd:Word", "'zero'")],
)
def test_router_returning_a_non_index_ended_in_a_traceback(router, shown, plugins, capsys):
    """A router returning 0.5 or a string is one line naming it, the value, request and time."""
    assert main([*SIM, "--router", router]) == 2
    assert one_error_line(capsys) == (
        f"router {router} returned {shown} for request 0 at t=0.0, expected a server index in "
        "0..0 or HOLD (-1)"
    )


def test_router_naming_a_policy_class_ended_in_a_traceback(plugins, capsys):
    """--router naming a policy class is one line naming the missing method."""
    assert main([*SIM, "--router", "odd:Empty"]) == 2
    assert one_error_line(capsys) == (
        "router 'odd:Empty' made a Empty, which lacks the Router method route(request, "
        "servers, now)"
    )


def test_router_holding_every_request_exited_0(plugins, capsys):
    """A router that holds every request (HOLD, -1) ends simulate as a stall (exit 1) naming
    the router; --allow-stall keeps the run."""
    assert main([*SIM, "--router", "odd:HoldAll"]) == 1
    assert last_error_line(capsys) == (
        "router odd:HoldAll held 20 request(s) in a central queue that no server took by the "
        "end of the run (t=0 s); they are rejected (--allow-stall keeps such a run, exit "
        "status 0)"
    )
    assert main([*SIM, "--router", "odd:HoldAll", "--allow-stall", "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert (record["rejected"], record["rejected_held"]) == (20, 20)


# -- item 6: a stalled probe is a stall everywhere ----------------------------------------------


def test_plan_reported_a_stalled_policy_as_a_missed_target(plugins, capsys):
    """plan --policies odd:Empty says it stalled (the top count runs to its end), in text and
    in --json (stop_reason stalled)."""
    args = ["plan", "azure_conv_2023", "--limit", "100", "--servers", "1..4", "--quiet"]
    assert main([*args, "--policies", "odd:Empty"]) == 0
    out = capsys.readouterr().out
    assert "(stalled at 4 servers: requests left waiting with nothing to run" in out
    assert "4: stalled (100 requests)" in out
    assert main([*args, "--policies", "odd:Empty", "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert (record["stop_reason"], record["servers"]) == ("stalled", None)


def test_plan_model_said_out_of_reach_for_a_stalled_policy(plugins, capsys):
    """plan --model with a policy that never schedules names the stall, not a target out of
    reach."""
    args = ["plan", "azure_conv_2023", "--limit", "40", "--model", "llama2-7b", "--gpus", "a100"]
    assert main([*args, "--tp", "1", "--policy", "odd:Empty", "--quiet"]) == 2
    line = one_error_line(capsys)
    assert line.startswith("policy odd:Empty stalled on class "), line
    # plan --model plans on the calibrated presets by default
    assert "(alone on llama2-7b/a100/tp1/calibrated)" in line and "no valid attainment" in line


def test_capacity_note_named_a_stall_as_misses(plugins, capsys):
    """capacity's note for a policy that never schedules says the run stalled."""
    # 100 requests: both probes stop early (certain to miss) before the stall shows
    args = ["capacity", "azure_conv_2023", "--limit", "100", "--quiet", "--policy", "odd:Empty"]
    assert main([*args, "--json"]) == 0
    notes = json.loads(capsys.readouterr().out)["notes"]
    assert any("the run stalled: odd:Empty left 100 request(s) waiting" in n for n in notes), notes


# -- item 7: the methods listed are the methods that run -----------------------------------------


def test_problems_listed_cbc_cpsat_and_any_policy_for_deployment(capsys):
    """slolab problems lists deployment's methods as they run."""
    assert main(["problems", "--json"]) == 0
    rows = {r["problem"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["deployment"]["methods"] == (
        "best-single, greedy, enumeration, highs, brute; or MODEL:SOLVER with MODEL in deployment"
    )


@pytest.mark.parametrize(
    ("methods", "message"),
    [
        ("cbc", "method 'cbc': model 'deployment' does not run on 'cbc'; it runs on: highs, brute"),
        (
            "cpsat",
            "method 'cpsat': model 'deployment' does not run on 'cpsat'; it runs on: highs, brute",
        ),
        (
            "greedy,cpsat",
            "method 'cpsat': model 'deployment' does not run on 'cpsat'; it runs on: highs, brute",
        ),
        (
            "deployment:cbc",
            "method 'deployment:cbc': model 'deployment' does not run on 'cbc'; it runs on: "
            "highs, brute",
        ),
        (
            "sarathi",
            "unknown method 'sarathi' for problem 'deployment'; known: best-single, greedy, "
            "enumeration, highs, brute; or MODEL:SOLVER with MODEL in deployment",
        ),
    ],
)
def test_deployment_methods_refused_after_others_ran(methods, message, capsys):
    """compare on a deployment instance checks every method before running any: one line, no
    rows."""
    assert main(["compare", "deploy-azure-conv-200-3cfg", "--methods", methods]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.strip() == f"slolab: error: {message}"


@pytest.mark.parametrize("solver", ["cbc", "cpsat"])
def test_solve_deployment_named_cbc_as_supported(solver, capsys):
    """solve --solver cbc/cpsat on a deployment instance names the solvers it runs on."""
    assert main(["solve", "deploy-azure-conv-200-3cfg", "--solver", solver]) == 2
    assert one_error_line(capsys) == (
        f"model 'deployment' does not run on {solver!r}; it runs on: highs, brute"
    )


def test_highs_only_model_accepted_cbc_until_it_ran(tmp_path, capsys):
    """A model that runs on HiGHS only (dispatch-bound) is refused on cbc before any method
    runs, naming the solvers it runs on."""
    out = tmp_path / "w.json"
    build = ["instance", "build", "--problem", "dispatch-scale", "--n", "2", "--seed", "1"]
    assert main([*build, "-o", str(out)]) == 0
    capsys.readouterr()
    args = ["compare", str(out), "--methods", "round-robin,dispatch-bound:cbc", "--quiet"]
    assert main(args) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.strip() == (
        "slolab: error: method 'dispatch-bound:cbc': model 'dispatch-bound' does not run on "
        "'cbc'; it runs on: highs"
    )


# -- item 8 and 13: the single fleet's real reason; the cache counts in --json ------------------


def test_single_fleet_missed_within_rounds_said_none_serves(tmp_path, monkeypatch, capsys):
    """A single fleet not met within --max-rounds says so, and plan --json carries the cache
    counts the text prints (a second plan reads every search from the cache)."""
    from slolab.harness import deploy

    monkeypatch.setattr(deploy, "cheapest_single", lambda *args, **kwargs: (None, None, 1))
    cache = tmp_path / "cache"
    args = ["plan", "azure_conv_2023", "--limit", "40", "--model", "llama2-7b", "--gpus", "a100"]
    args += ["--tp", "1", "--max-rounds", "1", "--capacity-cache", str(cache), "--quiet"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert (
        "best single: not met: none of the 1 configuration(s) simulated alone met the target "
        "within 1 round(s) (--max-rounds)"
    ) in out
    assert "no single configuration serves every class" not in out
    assert main([*args, "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    searches = record["capacity_searches"]
    # one configuration x the classes, every one read from the cache the first plan filled
    assert searches == len(record["classes"]) and record["capacity_reused"] == searches
    assert record["capacity_saved"] > 0 and record["capacity_probes"] == 0


# -- item 11: the capacity cache ---------------------------------------------------------------


def test_capacity_cache_that_is_a_file_was_ignored(tmp_path, capsys):
    """--capacity-cache naming a regular file is one line naming it."""
    path = tmp_path / "cache"
    path.write_text("")
    args = ["plan", "azure_conv_2023", "--limit", "20", "--model", "llama2-7b", "--gpus", "a100"]
    assert main([*args, "--tp", "1", "--capacity-cache", str(path), "--quiet"]) == 2
    assert one_error_line(capsys) == (
        f"capacity cache {path}: a file, not a directory (give a directory to keep the capacity "
        "searches in)"
    )


@pytest.mark.parametrize(
    ("text", "needs", "why"),
    [
        ("{}", ("attainment",), "has no number under 'attainment'"),
        ('{"attainment": "x"}', ("attainment",), "has no number under 'attainment'"),
        ('{"capacity": 1.0}', ("capacity", "probes"), "has no number under 'probes'"),
        ("[1, 2]", ("capacity",), "has no number under 'capacity'"),
        ("not json", ("capacity",), "is not JSON"),
    ],
)
def test_capacity_cache_entry_gave_a_bare_key_error(text, needs, why, tmp_path, caplog):
    """A broken cache entry is named in a warning and measured again (get returns None)."""
    cache = CapacityCache(tmp_path)
    (tmp_path / "k.json").write_text(text)
    with caplog.at_level(logging.WARNING, logger="slolab"):
        assert cache.get("k", needs) is None
    assert f"capacity cache entry {tmp_path / 'k.json'} {why}: measured again" in caplog.text
    (tmp_path / "k.json").write_text('{"capacity": 1.5, "probes": 3, "attainment": 0.9}')
    assert cache.get("k", needs) == {"capacity": 1.5, "probes": 3, "attainment": 0.9}


# -- item 12: policy errors name what they are about --------------------------------------------


@pytest.mark.parametrize(
    ("policy", "message"),
    [
        ("odd:Twice", "server 0 t=0.0: request 0 appears twice in one batch"),
        (
            "odd:Nothing",
            "policy odd:Nothing returned NoneType on server 0 at t=0.0, expected a Batch",
        ),
    ],
)
def test_policy_error_named_no_request_or_policy(policy, message, plugins, capsys):
    """A batch with a request twice names it; a policy returning None names itself, the server
    and the time."""
    assert main([*SIM, "--policy", policy]) == 2
    assert one_error_line(capsys) == message


# -- item 14: --definition e2e without end-to-end deadlines -------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ["plan", "azure_conv_2023", "--limit", "20"],
        ["capacity", "azure_conv_2023", "--limit", "20"],
        ["plan", "azure_conv_2023", "--limit", "20", "--model", "llama2-7b", "--gpus", "a100"],
        ["plan", "azure_conv_2023", "--limit", "20", "--slos", "slos-serve", "--scenario", "coder"],
    ],
)
def test_definition_e2e_ended_with_nan_attainment(args, capsys):
    """--definition e2e under SLOs without an end-to-end deadline says so in one line."""
    assert main([*args, "--definition", "e2e", "--quiet"]) == 2
    line = one_error_line(capsys)
    assert line.startswith("--definition e2e: the SLOs (") and "no request an end-to-end" in line


# -- item 15: --traceback after the command -----------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        [*SIM, "--traceback"],
        ["--traceback", *SIM],
        ["compare", "deploy-azure-conv-200-3cfg", "--methods", "highs", "--traceback", "--quiet"],
        ["problems", "--traceback"],
    ],
)
def test_traceback_after_the_command_was_rejected(args, capsys):
    """--traceback is accepted before or after the command."""
    assert main(args) == 0


def test_traceback_after_the_command_prints_the_traceback(tmp_path, monkeypatch, capsys):
    """--traceback after the command turns the plugin's one line into its traceback."""
    from plugin_policies import write_policies

    write_policies(tmp_path, monkeypatch, module="odd_boom")
    assert main([*SIM, "--policy", "odd_boom:Boom", "--traceback"]) == 1
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err and "(--traceback shows" not in err


# -- item 16: the enumeration's time limit -------------------------------------------------------


def test_enumeration_ignored_its_time_limit(capsys):
    """--time-limit 0.001 stops the enumeration: TIME_LIMIT with a bound, not OPTIMAL."""
    data = DeploymentData.from_dict(
        load_shipped("deploy-azure-conv-200-3cfg").settings["deployment"]
    )
    found = solve_brute_force(data, time_limit=0.0)
    # the cheapest vector (no server, $0/h) was not decided: its cost bounds the optimum
    assert (found.status, found.plan, found.bound) == (Status.TIME_LIMIT, None, 0.0)
    assert math.isinf(found.cost)
    args = ["compare", "deploy-azure-conv-200-3cfg", "--methods", "enumeration", "--json"]
    assert main([*args, "--time-limit", "0.001", "--quiet"]) == 0
    row = json.loads(capsys.readouterr().out)[0]
    assert row["status"] == "TIME_LIMIT" and 0.0 <= row["bound"] <= 6.46


# -- item 17: docs -------------------------------------------------------------------------------


def test_docs_counted_7_models_and_said_20_minutes():
    """docs/timing.md counts the 8 models it lists; the results command's help gives the times
    docs/index.md gives."""
    from pathlib import Path

    from slolab.timing.generated import generated_preset_names

    root = Path(__file__).resolve().parents[2]
    models = {name.split("/")[0] for name in generated_preset_names()}
    assert len(models) == 8
    assert "of 8 models on A100, H100 and A40" in (root / "docs" / "timing.md").read_text()
    help_text = (root / "benchmarks" / "results.py").read_text()
    assert "20 minutes" not in help_text and "370 s on 2 idle cores" in help_text
    assert "370 s on 2 idle cores" in (root / "docs" / "index.md").read_text()
    deployment = (root / "docs" / "deployment.md").read_text()
    assert "`--traffic`/`--rate` cut and time the trace\nas for `slolab simulate`" not in deployment


# -- item 9: a class target at its idle ceiling --------------------------------------------------


def test_class_target_at_the_idle_ceiling_said_capacity_0_everywhere(monkeypatch):
    """A class no configuration keeps even at 1/1024 of its rate (Mooncake's long class: 0.8775
    against 0.8824 on one A100, llama2-7b) is named with its target and the best floor probe,
    not 'capacity 0 everywhere'."""
    from slolab.problems import deployment_capacity as dc
    from slolab.solvers.capacity import CapacityResult

    def floor_only(probe, *, target, **_):
        # the search of `plan mooncake_conversation --limit 100 --model llama2-7b --gpus a100
        # --tp 1`: every probe missed down to 1/1024 of the first rate
        return CapacityResult(
            0.0,
            target,
            (0.0, 0.001),
            ((1.0, 0.5), (0.001, 0.8775)),
            2,
            True,
            False,
            True,
            0.05,
            "min_rate",
            (True, True),
            (0.0, 0.0),
            (0, 0),
        )

    instance = dc.trace_instance("azure_conv_2023", ["llama2-7b/a100/tp1"], seed=0, limit=20)
    classes = dc.request_classes(instance)
    monkeypatch.setattr(dc, "capacity", floor_only)
    targets = tuple(0.8824 for _ in classes.names)
    monkeypatch.setattr(dc, "class_targets", lambda *args, **kwargs: targets)
    with pytest.raises(ValueError) as error:
        dc.measure_capacities(instance, classes, ["llama2-7b/a100/tp1"], target=0.9)
    assert str(error.value) == (
        f"class {classes.names[0]} is held to 0.8824, at or near its ceiling (every request "
        "alone on an idle server), and no configuration of llama2-7b/a100/tp1 keeps that even "
        "at 1/1024 of its rate (at best 0.8775, an upper bound when the probe stopped early): "
        "its target sits at the idle ceiling; give a lower --target"
    )
