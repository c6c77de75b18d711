"""The command line on inputs a new user tries: one-line errors naming flags, new trace layouts."""

import json
import re
import time
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
from slolab import __version__
from slolab.harness.cli import build_parser, known_summary, main
from slolab.harness.progress import elapsed_bar
from slolab.instances import load_instance, zero_load_prefill_s
from slolab.problems import READ_OPTIONS
from slolab.problems.serving import serving_instance


def one_error_line(capsys) -> str:
    """The single stderr line of a failed command, without its 'slolab: error: ' prefix."""
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0].startswith("slolab: error: ")
    return err[0].removeprefix("slolab: error: ")


def vidur_trace(tmp_path: Path, n: int = 40) -> Path:
    """n requests in the Vidur layout, 0.25 s apart, prompts 100..(100 + n - 1), outputs 2..9."""
    rows = [f"{0.25 * i},{100 + i},{2 + i % 8}" for i in range(n)]
    path = tmp_path / "requests.csv"
    path.write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n" + "\n".join(rows) + "\n")
    return path


# -- length-only and request traces ------------------------------------------------------------


def test_simulate_length_only_trace_names_the_arrival_flags(capsys):
    """The shipped arXiv trace used to end in a read_lengths TypeError; now one line with flags."""
    code = main(["simulate", "arxiv_summarization", "--limit", "20", "--quiet"])
    message = one_error_line(capsys)
    assert code == 2
    assert "a length-only trace has no arrival times" in message
    assert "pass --arrivals poisson or gamma or uniform and --rate" in message
    assert "arrivals=" not in message


def test_simulate_length_only_trace_with_poisson_arrivals(capsys):
    """--arrivals poisson --rate 2 simulates the first 50 arXiv requests."""
    code = main(
        [
            "simulate",
            "arxiv_summarization",
            "--limit",
            "50",
            "--arrivals",
            "poisson",
            "--rate",
            "2",
            "--json",
        ]
    )
    assert code == 0
    rec = json.loads(capsys.readouterr().out)
    assert (rec["requests"], rec["finished"]) == (50, 50)


def test_simulate_vidur_request_trace(tmp_path, capsys):
    """A CSV with arrived_at, num_prefill_tokens, num_decode_tokens (a TypeError before) simulates."""
    path = vidur_trace(tmp_path)
    assert main(["simulate", str(path), "--json"]) == 0
    rec = json.loads(capsys.readouterr().out)
    # outputs 2..9 repeating over 40 rows: 5 cycles of 2 + ... + 9 = 44 tokens
    assert (rec["requests"], rec["tokens_simulated"]) == (40, 5 * 44)


def test_instance_build_slos_admission_on_a_vidur_trace(tmp_path, capsys):
    """instance build --problem slos-admission reads the same layout (it too ended in a TypeError)."""
    out = tmp_path / "call.json"
    args = [
        "instance",
        "build",
        "--problem",
        "slos-admission",
        "--trace",
        str(vidur_trace(tmp_path)),
    ]
    assert main([*args, "--new", "4", "--running", "6", "-o", str(out)]) == 0
    inst = load_instance(out)
    # 4 new + 6 running requests, all with prompts from the file (100..139)
    assert (inst.problem, inst.n_requests) == ("slos-admission", 10)
    assert set(inst.workload.prompt_tokens.tolist()) <= set(range(100, 140))


def test_instance_build_serving_with_gamma_arrivals(tmp_path, capsys):
    """Trace options reach the builder: gamma arrivals at 3 req/s with CV 2 on 2,000 arXiv rows."""
    out = tmp_path / "s.json"
    code = main(
        [
            "instance",
            "build",
            "--problem",
            "serving",
            "--trace",
            "arxiv_summarization",
            "--n",
            "2000",
            "--arrivals",
            "gamma",
            "--rate",
            "3",
            "--cv",
            "2",
            "-o",
            str(out),
        ]
    )
    assert code == 0
    gaps = np.diff(load_instance(out).workload.arrival_s)
    # 1,999 gamma gaps of mean 1/3 s and CV 2: the sample mean is within 4 standard errors
    assert abs(gaps.mean() - 1 / 3) < 4 * (2 / 3) / np.sqrt(len(gaps))


def test_sa_ordering_snapshot_from_a_length_only_trace(tmp_path, capsys):
    """A snapshot uses only the order of the trace: no arrival process is needed."""
    out = tmp_path / "sa.json"
    args = ["instance", "build", "--problem", "sa-ordering", "--task", "code"]
    args += ["--trace", "arxiv_summarization", "--n", "6", "--batch", "2", "-o", str(out)]
    assert main(args) == 0
    assert load_instance(out).n_requests == 6


def test_generic_format_with_a_columns_flag(tmp_path, capsys):
    """--format generic --columns maps a CSV with its own names; without --columns, one line."""
    path = tmp_path / "mine.csv"
    path.write_text("ts,in,out\n0,10,3\n0.5,20,4\n1.0,30,2\n")
    columns = "arrival_s=ts,prompt_tokens=in,output_tokens=out"
    code = main(["simulate", str(path), "--format", "generic", "--columns", columns, "--json"])
    assert code == 0
    assert json.loads(capsys.readouterr().out)["tokens_simulated"] == 3 + 4 + 2
    assert main(["simulate", str(path), "--format", "generic"]) == 2
    message = one_error_line(capsys)
    assert message == (
        "the generic format needs a column mapping: pass --columns such as "
        "arrival_s=ts,prompt_tokens=in,output_tokens=out"
    )


def test_trace_flags_agree_with_the_readers():
    """--format lists exactly the readers; choices and the default bound are the readers' own."""
    from slolab.instances import ARRIVAL_PROCESSES, FORMATS, MAX_REQUEST_TOKENS
    from slolab.instances.readers import ZERO_OUTPUT_POLICIES
    from slolab.problems import TRACE_OPTIONS

    options = {o.name: o for o in TRACE_OPTIONS}
    listed = re.search(r"trace format: ([a-z, ]+) \(", options["format"].help).group(1)
    assert tuple(listed.split(", ")) == FORMATS
    assert options["zero_output"].choices == ZERO_OUTPUT_POLICIES
    assert options["arrivals"].choices == ARRIVAL_PROCESSES
    assert f"(default: {MAX_REQUEST_TOKENS} = 2**20)" in options["max_request_tokens"].help
    assert READ_OPTIONS == TRACE_OPTIONS[: len(READ_OPTIONS)]


# -- bad files and values ------------------------------------------------------------------------


def test_billion_token_row_is_refused_before_memory_grows(tmp_path, capsys):
    """1e7 output tokens on one row (664 MB when simulated) is refused with one line, in kilobytes."""
    path = tmp_path / "big.csv"
    path.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2023-11-16 18:17:03.1,10,5\n"
        "2023-11-16 18:17:04.1,10,10000000\n"
    )
    tracemalloc.start()
    code = main(["simulate", str(path), "--quiet"])
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert code == 2
    assert one_error_line(capsys) == (
        "big.csv line 3: GeneratedTokens must be an integer in [1, 1048576], got '10000000' (a "
        "request may have at most 1048576 tokens; if the trace really has longer ones, raise the "
        "bound with --max-request-tokens)"
    )
    # the engine would hold 8 bytes per output token: 80 MB for this row alone
    assert peak < 40e6
    assert main(["simulate", str(path), "--quiet", "--max-request-tokens", "100"]) == 2
    assert "must be an integer in [1, 100], got '10000000'" in one_error_line(capsys)


def test_mixed_time_zones_are_one_line_naming_the_line(tmp_path, capsys):
    """A '+05:00' stamp among naive ones moved the end from 39 s to 18,036 s; now it is refused."""
    path = tmp_path / "tz.csv"
    path.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2023-11-16 18:17:03.1,10,5\n"
        "2023-11-16 18:17:05.1+05:00,10,5\n"
        "2023-11-16 18:17:42.1,10,5\n"
    )
    assert main(["simulate", str(path), "--quiet"]) == 2
    assert one_error_line(capsys).startswith("tz.csv line 3: TIMESTAMP has a UTC offset")


def test_zero_output_hint_names_the_flag_that_fixes_it(tmp_path, capsys):
    """The hint says --zero-output drop or clamp, and that flag reads the file."""
    path = tmp_path / "z.csv"
    path.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2023-11-16 18:17:03.1,10,0\n"
        "2023-11-16 18:17:04.1,10,6\n"
    )
    assert main(["simulate", str(path), "--quiet"]) == 2
    message = one_error_line(capsys)
    assert message.endswith("(zero-length outputs: pass --zero-output drop or clamp)")
    assert main(["simulate", str(path), "--zero-output", "drop", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["requests"] == 1


def test_unknown_header_names_the_format_flags(tmp_path, capsys):
    """A CSV of unknown layout suggests --format and --columns, not format= and columns=."""
    path = tmp_path / "odd.csv"
    path.write_text("a,b\n1,2\n")
    assert main(["simulate", str(path)]) == 2
    message = one_error_line(capsys)
    assert "pass --format one of azure, mooncake, burstgpt, vidur, lengths, generic" in message
    assert "(generic needs --columns)" in message


def test_output_naming_a_directory_is_one_line(tmp_path, capsys):
    """-o DIR used to end in an IsADirectoryError traceback."""
    args = ["instance", "build", "--problem", "sa-ordering", "--n", "6", "--batch", "2"]
    assert main([*args, "-o", str(tmp_path)]) == 2
    assert one_error_line(capsys) == (
        f"{tmp_path} is a directory; give a file name, such as {tmp_path / 'name.json'}"
    )
    assert list(tmp_path.iterdir()) == []


def test_solve_a_directory_is_one_line(tmp_path, capsys):
    """solve DIR used to end in an IsADirectoryError traceback."""
    assert main(["solve", str(tmp_path)]) == 2
    assert one_error_line(capsys) == f"{tmp_path}: is a directory, not an instance file"


def test_binary_files_are_named(tmp_path, capsys):
    """A binary instance file and a binary trace: the decode error names the file."""
    junk = tmp_path / "junk.json"
    junk.write_bytes(bytes(range(128, 256)))
    assert main(["solve", str(junk)]) == 2
    assert one_error_line(capsys).startswith(f"{junk}: not a slolab instance file (not UTF-8")
    trace = tmp_path / "junk.csv"
    trace.write_bytes(bytes(range(128, 256)))
    assert main(["simulate", str(trace)]) == 2
    assert one_error_line(capsys).startswith("junk.csv: not a text file")


def test_compare_checks_every_method_before_running_one(capsys):
    """cpsat,foo on the 40-request snapshot fails at once instead of after CP-SAT's time limit."""
    start = time.perf_counter()
    code = main(["compare", "sa-azure-n40-b4", "--methods", "cpsat,foo", "--time-limit", "60"])
    took = time.perf_counter() - start
    message = one_error_line(capsys)
    assert code == 2
    assert message.startswith("unknown method 'foo' for problem 'sa-ordering'; known: sa, fcfs")
    assert took < 30  # CP-SAT alone would run its 60 s


def test_compare_highs_on_a_serving_instance_is_not_listed_as_known(capsys):
    """highs on a serving stream: the problem has no exact model, and highs is not offered."""
    assert main(["compare", "azure-conv-500-2srv", "--methods", "highs"]) == 2
    message = one_error_line(capsys)
    assert "problem 'serving' has no exact model" in message
    known = message.split("known: ")[1]
    assert "highs" not in known and "sarathi" in known


def test_capacity_with_poisson_arrivals_starts_at_the_drawn_rate(capsys):
    """capacity on a length-only trace: --arrivals poisson --rate 2 is the first probe."""
    args = ["capacity", "arxiv_summarization", "--limit", "100", "--arrivals", "poisson"]
    assert main([*args, "--rate", "2", "--max-probes", "2", "--json"]) == 0
    rec = json.loads(capsys.readouterr().out)
    assert rec["probes"][0]["rate"] == 2.0
    assert rec["probes"][1]["rate"] in (1.0, 4.0)  # halved or doubled from 2
    assert main(["capacity", "azure_conv_2023", "--rate", "2"]) == 2
    assert one_error_line(capsys).startswith("--rate applies to capacity with --arrivals only")


# -- readable output -----------------------------------------------------------------------------


def test_version_prints_the_package_version(capsys):
    """slolab --version prints 'slolab' and the package's version."""
    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0
    assert capsys.readouterr().out.strip() == f"slolab {__version__}"


def test_instances_has_a_header_and_how_each_optimum_is_known(capsys):
    """The table starts with a header; proved optima say by what, time-limited runs show bounds."""
    assert main(["instances"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == [
        "name",
        "problem",
        "requests",
        "optimum",
        "how",
        "it",
        "is",
        "known",
    ]
    by_name = {line.split()[0]: line for line in lines[1:]}
    assert "0.267629  proved optimal by highs in 0.128 s" in by_name["sa-azure-n6-b2"]
    n40 = by_name["sa-azure-n40-b4"]
    assert "highs stopped at its 300 s limit (TIME_LIMIT), best found 0.0696436" in n40
    assert "serving stream: no exact model" in by_name["azure-conv-500-2srv"]


def test_known_summary_prints_an_optimum_only_when_proved():
    """A FEASIBLE record shows no optimum; an OPTIMAL one does."""
    assert known_summary({"status": "FEASIBLE", "solver": "cbc", "incumbent": 1.5})[0] == "-"
    assert known_summary({"status": "OPTIMAL", "solver": "cbc", "optimum": 2.0})[0] == "2"
    assert known_summary({"optimum": 0.95, "how": "highs, proved optimal in 3.1 s"}) == (
        "0.95",
        "highs, proved optimal in 3.1 s",
    )


def test_help_lists_method_model_and_solver_names(capsys):
    """compare --help lists each problem's methods; solve --help its models and the solvers."""
    sub = build_parser()._subparsers._group_actions[0].choices
    # argparse wraps at hyphens: "slos- serve" is joined back before matching
    compare_help = " ".join(sub["compare"].format_help().split()).replace("- ", "-")
    assert (
        "sa-ordering [sa, fcfs, edf, sjf, bp, columns, columns-cbc, highs, cbc, cpsat, brute;"
        in (compare_help)
    )
    assert "serving [vllm, sarathi, edf, slos-serve]" in compare_help
    solve_help = " ".join(sub["solve"].format_help().split()).replace("- ", "-")
    assert "slos-admission: slos-b1, slos-b2" in solve_help
    assert "highs, cbc, cpsat, brute (default: highs)" in solve_help


def test_slack_help_says_what_it_sets_with_a_scenario():
    """--slack with --scenario sets the TTFT only: coder + loose is 5x zero-load TTFT, TPOT 50 ms."""
    inst = serving_instance(
        "azure_conv_2023",
        seed=0,
        limit=20,
        timing="opt-13b-h100-slos",
        slos="slos-serve",
        slo_params={"scenario": "coder", "slack": "loose"},
    )
    wl = inst.workload
    # coder's decode is tight (Table 1): TPOT stays 50 ms; loose prefill: TTFT = 5 x P0(prompt)
    assert set(wl["tpot_slo_s"].tolist()) == {0.05}
    p0 = zero_load_prefill_s(inst.timing, wl.prompt_tokens)
    assert np.allclose(wl["ttft_slo_s"], 5 * p0)
    sub = build_parser()._subparsers._group_actions[0].choices
    help_text = " ".join(sub["simulate"].format_help().split())
    assert "with --scenario the TPOT stays the scenario's" in help_text


def test_elapsed_bar_ticks_on_a_terminal_and_is_silent_otherwise():
    """On a terminal the bar shows seconds against the limit; disabled, it writes nothing."""
    import io

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    screen = Terminal()
    with elapsed_bar("solve highs", 10.0, enabled=True, file=screen):
        time.sleep(0.7)
    # one tick after 0.5 s shows "0 of 10 s" (or 1 on a slow machine)
    assert re.search(r"solve highs: [01] of 10 s", screen.getvalue())
    quiet = Terminal()
    with elapsed_bar("solve highs", 10.0, enabled=False, file=quiet):
        time.sleep(0.6)
    assert quiet.getvalue() == ""


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (
            ["arxiv_summarization", "--arrivals", "gamma", "--rate", "2"],
            "gamma arrivals need the coefficient of variation of their gaps: pass --cv",
        ),
        (
            ["arxiv_summarization", "--arrivals", "poisson", "--rate", "-2"],
            "--rate must be a finite number > 0 (requests per second), got -2.0",
        ),
        (["arxiv_summarization", "--cv", "2"], "--cv applies to gamma arrivals only"),
        (
            ["azure_conv_2023", "--slos", "slos-serve"],
            "scheme 'slos-serve' needs --scenario chatbot or coder or summarizer or mixed, "
            "or --slack tight or loose",
        ),
        (
            ["azure_conv_2023", "--format", "lengths"],
            "azure_conv_2023.csv line 1: missing column num_prefill_tokens",
        ),
    ],
)
def test_option_errors_name_flags(args, expected, capsys):
    """Bad or missing trace and SLO options are one line that names the flag to pass."""
    assert main(["simulate", *args, "--quiet"]) == 2
    assert one_error_line(capsys).startswith(expected)


def test_trace_that_is_a_directory_is_one_line(tmp_path, capsys):
    """A directory given as the trace is named as such."""
    assert main(["simulate", str(tmp_path)]) == 2
    assert one_error_line(capsys) == f"{tmp_path} is a directory, not a trace file"


def test_simulate_a_continuous_policy_on_a_static_cluster_is_one_line(capsys):
    """Sarathi forms continuous batches: a static cluster is refused before the run (it used
    to run, and the checker rejected every batch)."""
    code = main(
        ["simulate", "azure_conv_2023", "--limit", "20", "--policy", "sarathi"]
        + ["--mode", "static", "--quiet"]
    )
    assert code == 2
    assert one_error_line(capsys) == (
        "policy 'sarathi' does not run on a static cluster (it runs colocated or disaggregated)"
    )
