"""compare() recomputes every objective; the CLI prints tables/JSON and fails cleanly."""

import json

import numpy as np
import pytest
from slolab.harness import methods as M
from slolab.harness.cli import main
from slolab.harness.compare import ObjectiveMismatchError, compare
from slolab.heuristics.baselines import SarathiFCFS
from slolab.instances import save_instance
from slolab.problems.serving import serving_instance
from slolab.sim import metrics, run
from slolab.solvers import Result, Status


@pytest.fixture(scope="module")
def small_serving():
    return serving_instance("azure_conv_2023", seed=3, servers=2, limit=150, rate=4.0)


def test_compare_recomputes_heuristic_objectives(small_serving):
    """Each row's objective is the deadline attainment of a fresh simulation of that method."""
    frame = compare(small_serving, ["vllm", "sarathi", "edf"], seed=0)
    assert list(frame["method"]) == ["vllm", "sarathi", "edf"]
    assert (frame["violations"] == 0).all()
    from slolab.heuristics.baselines import LeastLoaded
    from slolab.heuristics.policies import make_policy

    out = run(small_serving, make_policy("sarathi", small_serving), LeastLoaded(), seed=0)
    expected = metrics.attainment(small_serving, out, "deadline")
    got = float(frame.loc[frame["method"] == "sarathi", "objective"].iloc[0])
    assert got == expected
    # no exact row: the optimum is only known to be at least the best heuristic
    assert frame["optimum_lo"].iloc[0] == frame["objective"].max()
    assert (
        np.isinf(frame["optimum_hi"].iloc[0])
        or frame["optimum_hi"].iloc[0] >= frame["optimum_lo"].iloc[0]
    )


def register_lying_solver() -> None:
    """An exact method ``lying-solver`` (serving) claiming 1.5 for a Sarathi-FCFS run."""
    from slolab.heuristics.baselines import LeastLoaded

    def lying(instance, *, seed, **_):
        out = run(instance, SarathiFCFS(), LeastLoaded(), seed=seed)
        res = Result(Status.OPTIMAL, 1.5, 1.5, 0.0, "fake", "fake")
        return M.MethodRun(out, 0.0, "OPTIMAL", result=res)

    M.register_method(M.Method("lying-solver", "exact", ("serving",), lying))


def test_solver_objective_mismatch_fails_loudly(small_serving):
    """An exact method whose claimed objective differs from its replay raises."""
    register_lying_solver()
    with pytest.raises(
        ObjectiveMismatchError, match="solver objective 1.5 but its replayed schedule scores"
    ):
        compare(small_serving, ["lying-solver"], seed=0)


def test_cli_objective_mismatch_is_one_line_error(small_serving, tmp_path, capsys):
    """slolab compare with a solver unlike its replay: one line naming it, exit status 1."""
    register_lying_solver()
    path = save_instance(small_serving, tmp_path / "serve.json")
    code = main(["compare", str(path), "--methods", "lying-solver", "--quiet"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1
    # attainment is at most 1, so the claimed 1.5 cannot be the replay's
    assert len(err) == 1
    assert err[0].startswith("slolab: error: lying-solver on ")
    assert "solver objective 1.5 but its replayed schedule scores" in err[0]
    assert err[0].endswith("(a model/engine disagreement: please report it)")


def test_unknown_method_lists_known(small_serving):
    """An unknown method name raises and lists the known ones."""
    with pytest.raises(
        ValueError, match=r"unknown method 'nope' for problem 'serving'; known: .*sarathi"
    ):
        compare(small_serving, ["nope"])


def test_cli_simulate_json(capsys):
    """slolab simulate --json prints the documented keys with sane values."""
    code = main(
        ["simulate", "azure_conv_2023", "--servers", "2", "--limit", "300", "--json", "--seed", "1"]
    )
    assert code == 0
    rec = json.loads(capsys.readouterr().out)
    for key in (
        "requests",
        "attainment",
        "ttft_p50",
        "ttft_p99",
        "tpot_p50",
        "tpot_p99",
        "tokens_simulated",
        "wall_s",
    ):
        assert key in rec
    assert rec["requests"] == 300
    assert 0.0 <= rec["attainment"] <= 1.0
    # every output token of the first 300 conv requests is simulated
    from slolab.instances import read_trace, trace_path

    wl = read_trace(trace_path("azure_conv_2023"), limit=300)
    assert rec["tokens_simulated"] == int(wl.output_tokens.sum())


def test_cli_bad_trace_is_one_line_error(capsys):
    """A missing trace file gives exit status 2 and a one-line error."""
    code = main(["simulate", "/nonexistent/trace.csv"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert len(err) == 1 and err[0].startswith(
        "slolab: error: no trace file '/nonexistent/trace.csv'"
    )


def test_cli_instance_build_serving_roundtrip(tmp_path, capsys):
    """instance build writes a file that loads back with the same requests."""
    path = tmp_path / "serve.json"
    code = main(
        [
            "instance",
            "build",
            "--problem",
            "serving",
            "--trace",
            "azure_code_2023",
            "--n",
            "50",
            "-o",
            str(path),
            "--json",
        ]
    )
    assert code == 0
    rec = json.loads(capsys.readouterr().out)
    assert rec["requests"] == 50
    from slolab.instances import load_instance

    inst = load_instance(path)
    assert inst.n_requests == 50 and inst.problem == "serving"


@pytest.mark.parametrize(
    "command",
    [
        "simulate",
        "instance",
        "solve",
        "compare",
        "capacity",
        "instances",
        "presets",
        "sweep",
        "plan",
    ],
)
def test_every_command_has_help(command, capsys):
    """--help of every command exits 0 and explains its options."""
    with pytest.raises(SystemExit) as exc:
        main([command, "--help"])
    assert exc.value.code == 0
    assert "usage: slolab" in capsys.readouterr().out


def test_compare_simulating_a_heuristic_ran_without_a_word(small_serving, capsys):
    """compare with progress draws the simulation's bar of arrivals (150 requests) on stderr."""
    compare(small_serving, ["sarathi"], seed=0, progress=True)
    err = capsys.readouterr().err
    # the engine's bar: "simulate" and its total, the 150 requests of the instance
    assert "simulate" in err
    assert "/150" in err


def test_run_details_keep_plain_data_and_drop_the_rest():
    """A row's details: numpy scalars and small arrays become plain numbers and lists; objects
    with no plain form and arrays past the size limit are left out; the runner's own keys win."""
    from slolab.harness.compare import DETAILS_MAX_ITEMS, run_details

    res = Result(
        Status.OPTIMAL,
        1.0,
        1.0,
        0.0,
        "fake",
        "fake",
        details={
            "families": {"bucket": np.float64(2.5), "chain": 2.0},
            "levels": [{"pairs": np.int64(7), "handle": object()}],
            "small": np.arange(3),
            "big": np.zeros(DETAILS_MAX_ITEMS + 1),
            "schedule": object(),
            "steps": 4,
        },
    )
    mr = M.MethodRun(None, 0.0, "OPTIMAL", result=res, details={"steps": 5})
    got = run_details(mr)
    assert got == {
        "families": {"bucket": 2.5, "chain": 2.0},
        "levels": [{"pairs": 7}],
        "small": [0, 1, 2],
        "steps": 5,
    }
    assert json.loads(json.dumps(got)) == got
