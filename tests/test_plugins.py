"""Plugins: the example package's entry points seen by every command, module:Name references,
broken plugins, the policy contract check, and the example package's own tests."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from plugin_site import PLUGIN, example_site
from plugin_site import dist_info as _dist_info


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """A site folder holding the example plugin's distribution metadata."""
    return example_site(tmp_path_factory.mktemp("site"))


def _env(*paths: Path) -> dict[str, str]:
    parts = [*map(str, paths), os.environ.get("PYTHONPATH", "")]
    return dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in parts if p))


def _slolab(args, env, cwd=None):
    return subprocess.run(
        [sys.executable, "-m", "slolab.harness.cli", *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_installed_plugin_is_listed_by_problems_and_help(site):
    """Every entry point of the example package is listed by `slolab problems`; the policy and
    router plugins by `simulate --help`; the preset by `slolab presets`."""
    env = _env(site, PLUGIN)
    res = _slolab(["problems"], env)
    assert res.returncode == 0, res.stderr
    listed = " ".join(res.stdout.split())
    for text in (
        "slolab.policies least-slack (slolab_lsf.least_slack:LeastSlackFirst)",
        "slolab.routers fewest-waiting (slolab_lsf.extras:FewestWaiting)",
        "slolab.scalers queue-step (slolab_lsf.extras:QueueStepScaler)",
        "slolab.slo_schemes flat (slolab_lsf.extras:flat_slos)",
        "slolab.presets lsf-toy (slolab_lsf.extras:toy_timing)",
    ):
        assert text in listed
    helped = _slolab(["simulate", "--help"], env).stdout
    assert "(plugins: least-slack)" in " ".join(helped.split())
    assert "(plugins: fewest-waiting)" in " ".join(helped.split())
    assert "lsf-toy" in _slolab(["presets"], env).stdout
    unknown = _slolab(["check-policy", "no-such-policy"], env)
    assert unknown.returncode == 2 and "least-slack" in unknown.stderr


def test_every_plugin_group_runs_in_one_simulation(site):
    """Policy, router, scaler, SLO scheme and preset of the plugin in one run: 50 requests, all
    with the flat scheme's 2 s TTFT, timed by the toy preset, every one finished."""
    env = _env(site, PLUGIN)
    args = ["simulate", "azure_conv_2023", "--limit", "50", "--policy", "least-slack"]
    args += ["--router", "fewest-waiting", "--autoscale", "queue-step", "--max-servers", "3"]
    args += ["--startup", "instant"]
    args += ["--slos", "flat", "--timing", "lsf-toy", "--servers", "1", "--json", "--quiet"]
    res = _slolab(args, env)
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert (out["policy"], out["router"], out["autoscale"]) == (
        "least-slack",
        "fewest-waiting",
        "queue-step",
    )
    assert out["timing"] == "lsf-toy"
    # 50 requests, none rejected: all finish
    assert out["requests"] == 50 and out["finished"] == 50
    assert 1 <= out["servers_max"] <= 3


def test_plan_takes_a_plugin_policy(site):
    """`slolab plan` with the installed least-slack: 100 requests at 4x the trace's rate are
    all served on one server (attainment 1.0, so 1 server meets the 90% target)."""
    args = ["plan", "azure_conv_2023", "--target", "0.9", "--policies", "least-slack"]
    args += ["--servers", "1..2", "--limit", "100", "--traffic", "4", "--json"]
    res = _slolab(args, _env(site, PLUGIN))
    assert res.returncode == 0, res.stderr
    found = json.loads(res.stdout)
    assert (found["policy"], found["servers"], found["attainment"]) == ("least-slack", 1, 1.0)


def test_module_reference_from_the_working_directory(tmp_path):
    """--policy least_slack:LeastSlackFirst imports the file from the working directory (no
    install), --router and --autoscale take module:Name of an importable class; an unknown
    module is one error line naming the reference (exit 2)."""
    shutil.copy(PLUGIN / "slolab_lsf" / "least_slack.py", tmp_path / "least_slack.py")
    env = _env()
    args = ["simulate", "azure_conv_2023", "--limit", "40", "--servers", "2", "--json"]
    res = _slolab([*args, "--quiet", "--policy", "least_slack:LeastSlackFirst"], env, tmp_path)
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert out["policy"] == "least_slack:LeastSlackFirst" and out["requests"] == 40
    extras = ["--router", "slolab_lsf.extras:FewestWaiting", "--startup", "instant"]
    extras += ["--autoscale", "slolab_lsf.extras:QueueStepScaler", "--max-servers", "3"]
    routed = _slolab([*args, "--quiet", *extras], _env(PLUGIN), tmp_path)
    assert routed.returncode == 0, routed.stderr
    out = json.loads(routed.stdout)
    assert out["router"] == "slolab_lsf.extras:FewestWaiting"
    assert out["autoscale"] == "slolab_lsf.extras:QueueStepScaler"
    assert out["finished"] == 40 and 2 <= out["servers_max"] <= 3
    bad = _slolab([*args, "--policy", "no_such_file:Policy"], env, tmp_path)
    assert bad.returncode == 2
    assert bad.stderr.strip() == (
        "slolab: error: policy 'no_such_file:Policy': No module named 'no_such_file'"
    )
    other = _slolab([*args, "--policy", "collections:OrderedDict"], env, tmp_path)
    assert (other.returncode, other.stderr.strip()) == (
        2,
        "slolab: error: policy 'collections:OrderedDict' made a OrderedDict, which lacks the "
        "Policy methods start(instance, seed) and next_batch(server)",
    )


def test_broken_plugin_is_one_warning_and_nothing_else_fails(tmp_path, site):
    """A plugin whose module does not import: `slolab presets` still lists the presets (exit 0)
    and stderr is one line naming the plugin, its target and the error."""
    broken = tmp_path / "broken"
    _dist_info(broken, "broken-plugin", {"slolab.presets": {"gone": "no_such_module:build"}})
    res = _slolab(["presets"], _env(broken, site, PLUGIN))
    assert res.returncode == 0
    assert "llama2-7b-h100" in res.stdout and "lsf-toy" in res.stdout
    assert res.stderr.splitlines() == [
        "slolab: warning: plugin 'gone' (slolab.presets = no_such_module:build) is skipped: "
        "ModuleNotFoundError: No module named 'no_such_module'"
    ]


def _budget_breaker(folder: Path) -> None:
    (folder / "breaker.py").write_text(
        "from slolab.sim import Batch\n\n\n"
        "class WholePrompts:\n"
        '    """Declares 64 tokens per iteration, prefills whole prompts (at most 500)."""\n\n'
        "    token_budget = 64\n\n"
        "    def start(self, instance, seed):\n"
        "        pass\n\n"
        "    def next_batch(self, server):\n"
        "        todo = [*server.prefilling, *server.waiting][:1]\n"
        "        chunk = [(r, min(server.remaining_prefill(r), 500)) for r in todo]\n"
        "        return Batch(prefill=chunk, decode=list(server.decoding))\n"
    )


def test_check_policy_reports_rule_request_and_time(tmp_path):
    """A policy declaring 64 tokens but prefilling up to 500 at once: check-policy exits 1 and
    names the budget rule, the request and the time; a built-in policy passes (exit 0)."""
    _budget_breaker(tmp_path)
    env = _env()
    res = _slolab(
        ["check-policy", "breaker:WholePrompts", "--seeds", "1", "--requests", "5", "--json"],
        env,
        tmp_path,
    )
    assert res.returncode == 1, res.stderr
    found = json.loads(res.stdout)["violations"]
    budget = [v for v in found if v["rule"] == "budget"]
    assert budget, found
    first = budget[0]
    # request 0 (666 prompt tokens) arrives first, at 0.0339966 s, and is prefilled at once:
    # min(666, 500) = 500 tokens against a budget of 64; then its last 666 - 500 = 166
    assert (first["seed"], first["request"]) == (0, 0)
    assert first["time_s"] == pytest.approx(0.0339966, abs=1e-7)
    assert first["message"] == (
        "server 0: an iteration carries 500 tokens, the policy declares a budget of 64"
    )
    assert budget[1]["message"].startswith("server 0: an iteration carries 166 tokens")
    text = _slolab(
        ["check-policy", "breaker:WholePrompts", "--seeds", "1", "--requests", "5", "--show", "1"],
        env,
        tmp_path,
    )
    assert text.stdout.splitlines()[1].startswith(
        f"  budget (seed 0, request {first['request']}, t="
    )
    ok = _slolab(["check-policy", "sarathi", "--seeds", "2"], env)
    assert ok.returncode == 0 and "keeps the contract" in ok.stdout
    none = _slolab(["check-policy", "sarathi", "--seeds", "0"], env)
    assert (none.returncode, none.stderr) == (2, "slolab: error: --seeds must be >= 1, got 0\n")


#: Policies that form static batches (the engine's static mode).
STATIC = {"static-fcfs"}


def test_check_policy_on_every_builtin_policy():
    """Every registered policy keeps the contract on two random instances of 30 requests (the
    static-batching ones in static mode)."""
    from slolab.heuristics.policies import policy_names
    from slolab.testing import check_policy

    broken = {
        name: check_policy(
            name, seeds=(0, 1), n_requests=30, mode="static" if name in STATIC else "colocated"
        )
        for name in policy_names()
    }
    assert {name: list(map(str, v)) for name, v in broken.items() if v} == {}


def test_slos_serve_finishes_best_effort_requests_when_memory_is_full():
    """Regression (found by the contract check): on seed 1 (40 requests, 8,192 KV tokens)
    slos-serve filled server 0's memory with 10 decoding best-effort requests, none of which
    could grow, and formed no batch again: 11 requests were never finished. Now the latest
    started is preempted and the others go on."""
    from slolab.testing import check_policy

    assert check_policy("slos-serve", seeds=(0, 1, 2), n_requests=40) == []


def test_sa_online_prefill_batch_within_max_batch_tokens():
    """Regression (found by the contract check): sa-online prefilled its plan's whole first
    batch in one iteration, 3,848 tokens on seed 0 of 30 requests above the 2,048-token cap,
    which the engine refused; now it stops at the cap and keeps the contract."""
    from slolab.testing import check_policy

    assert check_policy("sa-online", seeds=(0, 1, 2), n_requests=30) == []


def test_problem_plugin_is_built_solved_and_compared_through_the_cli(site, tmp_path):
    """The example package's one-queue problem: listed by `slolab problems`, an instance of 6
    requests built, the assignment MILP proved optimal by HiGHS and CBC alike, shortest job
    first equal to it (optimal for total latency on one server), FCFS no better."""
    env = _env(site, PLUGIN)
    listed = _slolab(["problems"], env).stdout
    assert "one-queue: order one queue served one request at a time" in listed
    queue = tmp_path / "q.json"
    built = _slolab(
        [
            "instance",
            "build",
            "--problem",
            "one-queue",
            "--n",
            "6",
            "--seed",
            "1",
            "-o",
            str(queue),
        ],
        env,
    )
    assert built.returncode == 0, built.stderr
    res = _slolab(["compare", str(queue), "--methods", "highs,cbc,fcfs,sjf", "--json"], env)
    assert res.returncode == 0, res.stderr
    rows = {r["method"]: r for r in json.loads(res.stdout)}
    assert rows["highs"]["status"] == rows["cbc"]["status"] == "OPTIMAL"
    assert all(r["violations"] == 0 for r in rows.values())
    optimum = rows["highs"]["objective"]
    assert rows["cbc"]["objective"] == pytest.approx(optimum, rel=1e-9)
    # SJF minimizes the sum of completion times on one machine (Smith's rule, unit weights)
    assert rows["sjf"]["objective"] == pytest.approx(optimum, rel=1e-9)
    assert rows["fcfs"]["objective"] >= optimum - 1e-9


def test_sweep_resolves_plugin_and_module_names_on_dask_workers(site, tmp_path):
    """A sweep on two local Dask worker processes runs the plugin by name and the file in the
    working directory by module:Name: 4 simulate rows (2 policies x 2 rates) and, on a
    tdg-horizon window, 3 compare rows; no error."""
    import pandas as pd

    shutil.copy(PLUGIN / "slolab_lsf" / "least_slack.py", tmp_path / "least_slack.py")
    (tmp_path / "spec.toml").write_text(
        "[[simulate]]\n"
        'traces = ["azure_conv_2023"]\n'
        'policies = ["least-slack", "least_slack:LeastSlackFirst"]\n'
        "rates = [2.0, 4.0]\n"
        "limit = 40\n"
        "[[compare]]\n"
        'builds = [{ problem = "tdg-horizon", n = 3, seeds = [1] }]\n'
        'methods = ["slide-batching", "least-slack", "least_slack:LeastSlackFirst"]\n'
    )
    env = _env(site, PLUGIN)
    res = _slolab(
        ["sweep", "spec.toml", "--store", "out", "--workers", "2", "--quiet"], env, tmp_path
    )
    assert res.returncode == 0, res.stdout + res.stderr
    rows = pd.read_parquet(tmp_path / "out")
    assert "error" not in rows.columns or rows["error"].isna().all()
    simulated = rows[rows["task_kind"] == "simulate"]
    assert len(simulated) == 4
    assert sorted(set(simulated["policy"])) == ["least-slack", "least_slack:LeastSlackFirst"]
    compared = rows[rows["task_kind"] == "compare"].set_index("method")
    assert sorted(compared.index) == [
        "least-slack",
        "least_slack:LeastSlackFirst",
        "slide-batching",
    ]
    # the installed plugin and the file are the same policy: the same replay, the same TDG
    assert (
        compared.loc["least-slack", "objective"]
        == compared.loc["least_slack:LeastSlackFirst", "objective"]
    )


def test_example_package_tests_pass_with_its_entry_points(site):
    """The example package's own tests (contract check through slolab.testing) pass."""
    res = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:nbmake", "-o", "addopts=", "tests"],
        cwd=PLUGIN,
        env=_env(site, PLUGIN),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]
    assert "3 passed" in res.stdout


def test_example_package_installed_by_pip_is_found_through_its_entry_points(tmp_path):
    """pip installs examples/plugin (build isolation, into a folder of its own): slolab then
    lists its policy and runs a simulation with it by its entry-point name."""
    target = tmp_path / "installed"
    built = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--target",
            str(target),
            PLUGIN,
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stderr[-2000:]
    assert (target / "slolab_lsf" / "least_slack.py").is_file()
    env = _env(target)
    listed = " ".join(_slolab(["problems"], env).stdout.split())
    assert "slolab.policies least-slack (slolab_lsf.least_slack:LeastSlackFirst)" in listed
    ran = _slolab(
        ["simulate", "azure_conv_2023", "--policy", "least-slack", "--limit", "50", "--json"],
        env,
        cwd=tmp_path,
    )
    assert ran.returncode == 0, ran.stderr[-2000:]
    summary = json.loads(ran.stdout)
    # every one of the 50 requests is finished or rejected under the plugin policy
    assert summary["policy"] == "least-slack"
    assert summary["finished"] + summary["rejected"] == 50
