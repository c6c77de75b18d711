"""The problem registry: every problem is one declaration the harness, CLI and docs read."""

import inspect
import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
from slolab.harness import methods as M
from slolab.harness.cli import main
from slolab.harness.compare import compare
from slolab.heuristics.policies import make_policy, sarathi_token_budget
from slolab.instances import load_instance, read_workload, trace_path
from slolab.problems import (
    Heuristic,
    Objective,
    Option,
    Problem,
    build_instance,
    get_problem,
    problems,
)
from slolab.problems.registry import resolve
from slolab.problems.serving import serving_instance
from slolab.sim import metrics, run
from slolab.solvers import get_model

DOCS = Path(__file__).resolve().parents[2] / "docs"


@pytest.mark.parametrize("problem", problems(), ids=lambda p: p.name)
def test_declaration_is_complete(problem):
    """Models are registered, aliases and heuristics resolve, options match the builder, docs exist."""
    for model in problem.models:
        assert get_model(model).name == model
    for alias, target in problem.aliases.items():
        method = M.get_method(alias, _fake_instance(problem.name))
        # a model without a schedule (a steady-state bound) is labelled a bound
        assert method.kind == ("bound" if get_model(target.split(":")[0]).bound_only else "exact")
    for h in problem.heuristics:
        assert callable(resolve(h.schedule if h.schedule is not None else h.policy))
    params = inspect.signature(resolve(problem.builder)).parameters
    forwarded = any(p.kind is p.VAR_KEYWORD for p in params.values())
    reading = inspect.signature(read_workload).parameters
    for option in problem.options:
        # a named parameter, or a trace option the builder forwards to read_workload
        assert option.name in params or (forwarded and option.name in reading), option.name
    assert callable(resolve(problem.objective.evaluate))
    assert (DOCS / problem.docs).is_file()


def test_docs_index_lists_every_problem():
    """docs/index.md names every registered problem and links its page."""
    index = (DOCS / "index.md").read_text()
    for problem in problems():
        assert f"`{problem.name}`" in index, problem.name
        assert f"({problem.docs})" in index, problem.docs


def _fake_instance(problem: str):
    """A stand-in carrying only ``problem`` (method resolution reads nothing else)."""

    class Stub:
        pass

    stub = Stub()
    stub.problem = problem  # type: ignore[attr-defined]
    return stub


def test_build_instance_rejects_an_unknown_option():
    """An option the problem does not declare is named, with the problem's options."""
    with pytest.raises(
        ValueError, match=r"problem 'slos-admission' has no option 'batch_size'.*new"
    ):
        build_instance("slos-admission", batch_size=4)


def test_build_instance_checks_choices():
    """A value outside an option's choices is refused."""
    with pytest.raises(ValueError, match="task.*must be one of mixed, chat, code, got 'poem'"):
        build_instance("sa-ordering", task="poem")


def test_problem_validates_its_declaration():
    """An alias to a model the problem lacks, or a heuristic with two kinds, is refused."""
    objective = Objective("x", "max", "slolab.sim.metrics:g_objective", "x")
    with pytest.raises(ValueError, match="alias 'a' must name 'model:solver'"):
        Problem("p", "t", objective, "m:f", models=("m1",), aliases={"a": "m2:highs"})
    with pytest.raises(ValueError, match="exactly one of schedule and policy"):
        Heuristic("h", "d", schedule="m:f", policy="m:g")
    with pytest.raises(ValueError, match="default 'z' is not among"):
        Option("o", str, "z", "h", choices=("a", "b"))


def test_sa_ordering_numbers_unchanged_through_the_registry():
    """The registry's builder gives the shipped 6-request snapshot, request for request."""
    from slolab.instances import load_shipped

    shipped = load_shipped("sa-azure-n6-b2")
    built = build_instance("sa-ordering", n=6, batch_size=2, seed=11)
    assert built.name == "sa-mixed-n6-b2-s11"
    assert np.array_equal(built.workload.prompt_tokens, shipped.workload.prompt_tokens)
    assert np.array_equal(built.workload.output_tokens, shipped.workload.output_tokens)


def test_trace_role_comes_from_the_task_flag_not_the_file_name(tmp_path, capsys):
    """A code trace under a neutral name builds code requests with --task code (e2e SLO)."""
    neutral = tmp_path / "requests.csv"
    shutil.copy(trace_path("azure_code_2023"), neutral)
    out = tmp_path / "snap.json"
    args = ["instance", "build", "--problem", "sa-ordering", "--trace", str(neutral)]
    code = main([*args, "--task", "code", "--n", "6", "--seed", "2", "-o", str(out)])
    assert code == 0
    wl = load_instance(out).workload
    # the SA paper's code requests carry an e2e SLO and no TTFT/TPOT
    assert np.isfinite(wl["e2e_slo_s"]).all() and np.isnan(wl["ttft_slo_s"]).all()
    code = main([*args, "--task", "chat", "--n", "6", "--seed", "2", "-o", str(out)])
    assert code == 0
    wl = load_instance(out).workload
    assert np.isnan(wl["e2e_slo_s"]).all() and np.isfinite(wl["ttft_slo_s"]).all()
    capsys.readouterr()


def test_cli_refuses_an_option_of_another_problem(tmp_path, capsys):
    """--batch on an slos-admission build is a one-line error naming the flag."""
    code = main(
        [
            "instance",
            "build",
            "--problem",
            "slos-admission",
            "--batch",
            "4",
            "-o",
            str(tmp_path / "x.json"),
        ]
    )
    assert code == 2
    err = capsys.readouterr().err
    assert "--batch does not apply to problem 'slos-admission'" in err
    assert not (tmp_path / "x.json").exists()


def test_unknown_method_lists_aliases():
    """An unknown method on an SA instance lists the heuristics, the aliases and the solvers."""
    inst = build_instance("sa-ordering", n=4, batch_size=2, seed=0)
    with pytest.raises(ValueError) as err:
        compare(inst, ["nope"])
    message = str(err.value)
    for name in ("sa", "fcfs", "columns", "columns-cbc", "highs", "cpsat", "sa-ordering-columns"):
        assert re.search(rf"\b{re.escape(name)}\b", message), name


def test_every_method_name_is_checked_before_any_runs():
    """compare stops at an unknown name before running the known ones listed before it."""
    inst = build_instance("sa-ordering", n=4, batch_size=2, seed=0)
    ran = []

    def probe(instance, *, seed, **_):
        ran.append(seed)
        raise AssertionError("must not run")

    M.register_method(M.Method("probe-method", "heuristic", ("sa-ordering",), probe))
    with pytest.raises(ValueError, match="unknown method 'foo'"):
        compare(inst, ["probe-method", "foo"])
    assert ran == []


def test_solver_name_on_a_problem_without_model_says_so():
    """highs on a serving instance: the problem has no exact model, and highs is not listed."""
    inst = serving_instance("azure_conv_2023", seed=0, limit=20)
    with pytest.raises(ValueError) as err:
        compare(inst, ["highs"])
    message = str(err.value)
    assert "problem 'serving' has no exact model" in message
    assert "highs" not in message.split("known:")[1]


def test_compare_and_simulate_run_the_same_sarathi(capsys):
    """compare's sarathi row and simulate --policy sarathi give one attainment (one budget rule)."""
    inst = serving_instance("azure_conv_2023", seed=1, servers=2, limit=300)
    # the rule: min(time2bs(timing, tightest TPOT = 20 ms), 2048) = 820 tokens, not the cap
    assert sarathi_token_budget(inst) == 820
    assert make_policy("sarathi", inst).token_budget == 820
    frame = compare(inst, ["sarathi"], seed=1)
    code = main(
        ["simulate", "azure_conv_2023", "--servers", "2", "--limit", "300", "--seed", "1", "--json"]
    )
    assert code == 0
    simulated = json.loads(capsys.readouterr().out)
    assert frame["objective"].iloc[0] == simulated["attainment"]


def test_policy_heuristic_runs_in_the_engine():
    """A policy heuristic's row equals a fresh run of that policy with least-loaded routing."""
    from slolab.heuristics.baselines import LeastLoaded

    inst = serving_instance("azure_code_2023", seed=0, servers=2, limit=80)
    frame = compare(inst, ["edf"], seed=0)
    out = run(inst, make_policy("edf", inst), LeastLoaded(), seed=0)
    assert frame["objective"].iloc[0] == metrics.attainment(inst, out)
    assert frame["objective_name"].iloc[0] == "attainment" and frame["sense"].iloc[0] == "max"


def test_problems_command_lists_every_problem(capsys):
    """slolab problems --json has one row per registered problem with its methods."""
    assert main(["problems", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["problem"] for r in rows] == [p.name for p in problems()]
    sa = next(r for r in rows if r["problem"] == "sa-ordering")
    assert sa["objective"] == "G" and "columns" in sa["aliases"]
    assert get_problem("serving").default_model is None
