"""Odd inputs a new user tries: each is one line naming the flag or file, or does what it says."""

from __future__ import annotations

import json
import os
import stat
import warnings

import pytest
from slolab.harness.cli import main
from slolab.instances import save_instance
from slolab.problems import build_instance


def one_error_line(capsys) -> str:
    """The single stderr line of a failed command, without its 'slolab: error: ' prefix."""
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0].startswith("slolab: error: ")
    return err[0].removeprefix("slolab: error: ")


@pytest.mark.parametrize("policies", ["", ",", " , "])
def test_plan_with_empty_policies_ended_in_index_error(policies, capsys):
    """`plan --policies ""` (or ",") is one line naming the flag, not an IndexError."""
    assert main(["plan", "azure_conv_2023", "--servers", "1..4", "--policies", policies]) == 2
    assert one_error_line(capsys) == (
        f"--policies names no scheduler (got {policies!r}); give one or more, comma-separated"
    )


def test_plan_with_a_repeated_policy_printed_its_row_twice(capsys):
    """`plan --policies sarathi,sarathi` is refused, as compare refuses a repeated method."""
    assert main(["plan", "azure_conv_2023", "--policies", "sarathi,sarathi"]) == 2
    assert one_error_line(capsys) == "--policies lists 'sarathi' twice"


@pytest.mark.parametrize(
    ("problem", "least"),
    [
        ("sa-ordering", 1),
        ("tier-partition", 1),
        ("tdg-batch", 1),
        ("tier-autoscale", 2),
        ("slos-admission", 1),
        ("dispatch-scale", 1),
    ],
)
def test_n_0_reported_limit_an_internal_name(problem, least, tmp_path, capsys):
    """`instance build --n 0` names --n and its least value (tier-partition said "limit")."""
    out = tmp_path / "x.json"
    assert main(["instance", "build", "--problem", problem, "--n", "0", "-o", str(out)]) == 2
    assert one_error_line(capsys) == f"--n must be >= {least}, got 0"
    assert not out.exists()


def test_slos_admission_n_0_silently_built_the_default_instance(tmp_path, capsys):
    """slos-admission's --n without --from-simulation is refused: a trace cut ignores it."""
    out = tmp_path / "x.json"
    args = ["instance", "build", "--problem", "slos-admission", "--n", "50", "-o", str(out)]
    assert main(args) == 2
    assert one_error_line(capsys) == (
        "--n applies with --from-simulation only (the requests simulated); a cut of the trace "
        "takes --new and --running"
    )
    assert not out.exists()


def test_seed_minus_one_did_not_name_the_flag(tmp_path, capsys):
    """--seed -1 names --seed on instance build (one line) and on solve (argparse's line)."""
    out = tmp_path / "x.json"
    assert main(["instance", "build", "--problem", "sa-ordering", "--seed", "-1", "-o", str(out)])
    assert one_error_line(capsys) == "--seed must be >= 0, got -1"
    with pytest.raises(SystemExit) as stop:
        main(["solve", "sa-azure-n10-b4", "--seed", "-1"])
    assert stop.value.code == 2
    assert (
        "argument --seed: must be an integer in [0, 2147483646], got -1" in capsys.readouterr().err
    )


def test_max_batch_tokens_0_meant_no_limit_without_saying_so(capsys):
    """--max-batch-tokens 0 is no cap, and simulate prints the budget sarathi runs at (auto)."""
    args = ["simulate", "azure_conv_2023", "--limit", "50", "--quiet", "--json"]
    assert main([*args, "--max-batch-tokens", "0"]) == 0
    uncapped = json.loads(capsys.readouterr().out)
    assert main([*args, "--max-batch-tokens", "512"]) == 0
    capped = json.loads(capsys.readouterr().out)
    # auto budget = time2bs(tightest TPOT) = 820 tokens on llama2-7b-h100; the 512 cap wins
    assert (uncapped["token_budget"], capped["token_budget"]) == (820, 512)
    assert main([*args, "--max-batch-tokens", "-1"]) == 2
    assert one_error_line(capsys).startswith("--max-batch-tokens must be >= 0")


def test_token_budget_above_the_cap_failed_mid_run(capsys):
    """--token-budget above --max-batch-tokens is refused before the run, naming both flags."""
    args = ["simulate", "azure_conv_2023", "--limit", "50", "--quiet"]
    assert main([*args, "--max-batch-tokens", "100", "--token-budget", "4096"]) == 2
    assert one_error_line(capsys) == (
        "--token-budget 4096 exceeds --max-batch-tokens 100 (the servers' cap on tokens per "
        "iteration)"
    )


def test_inf_token_count_printed_pandas_runtime_warnings(tmp_path, capsys):
    """A length of inf is one line naming its line, with no RuntimeWarning before it."""
    trace = tmp_path / "requests.csv"
    trace.write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n0.0,100,5\n0.5,inf,5\n")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a warning would fail the command
        assert main(["simulate", str(trace), "--quiet"]) == 2
    assert one_error_line(capsys) == (
        "requests.csv line 3: num_prefill_tokens must be an integer >= 1, got 'inf'"
    )


def test_binary_sweep_spec_did_not_name_the_file(tmp_path, capsys):
    """A sweep spec that is not text names the file."""
    spec = tmp_path / "spec.toml"
    spec.write_bytes(b"\x83\x00\xff binary")
    assert main(["sweep", str(spec), "--store", str(tmp_path / "store")]) == 2
    assert one_error_line(capsys) == (
        f"{spec}: not a sweep spec (not UTF-8 text: invalid start byte at byte 0)"
    )


def test_store_that_is_a_file_did_not_name_it(tmp_path, capsys):
    """--store naming a file says the store is a directory and names the file."""
    spec = tmp_path / "spec.toml"
    spec.write_text(
        '[[simulate]]\ntraces = ["azure_conv_2023"]\npolicies = ["sarathi"]\nservers = [1]\n'
        "limit = 10\n"
    )
    store = tmp_path / "results"
    store.write_text("not a directory\n")
    assert main(["sweep", str(spec), "--store", str(store), "--quiet"]) == 2
    assert one_error_line(capsys) == (
        f"results store {store} is a file; a store is a directory of Parquet files "
        "(give another path)"
    )


def test_relabelled_instance_reported_an_inner_field(tmp_path, capsys):
    """An sa-ordering file relabelled dispatch-scale reports the mismatch, not a cluster field."""
    path = save_instance(build_instance("sa-ordering", n=4, seed=0), tmp_path / "sa.json")
    data = json.loads(path.read_text())
    data["problem"] = "dispatch-scale"
    path.write_text(json.dumps(data))
    assert main(["solve", str(path), "--quiet"]) == 2
    assert one_error_line(capsys) == (
        f"{path}: field 'problem': labelled 'dispatch-scale' but it lacks the settings every "
        "dispatch-scale instance carries (task_set, slot_s, max_servers, "
        "cost_weight_per_server_s); its settings are those of 'sa-ordering': rebuild it with "
        "'slolab instance build --problem dispatch-scale' instead of relabelling it"
    )


def test_instance_files_were_written_0600_whatever_the_umask(tmp_path):
    """An instance file gets 0666 less the umask: 0644 under umask 022, 0640 under 027."""
    inst = build_instance("sa-ordering", n=4, seed=0)
    modes = []
    for mask in (0o022, 0o027):
        previous = os.umask(mask)
        try:
            path = save_instance(inst, tmp_path / f"u{mask:o}.json")
        finally:
            os.umask(previous)
        modes.append(stat.S_IMODE(path.stat().st_mode))
    assert modes == [0o644, 0o640]
