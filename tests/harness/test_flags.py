"""The serving, scaling and output flags are declared once and read the same everywhere."""

from __future__ import annotations

import argparse
import dataclasses

import numpy as np
import pytest
from slolab.harness.cli import build_parser, main
from slolab.harness.output import wants_progress
from slolab.harness.serving import ServingSetup
from slolab.problems import get_problem
from slolab.problems.flags import (
    LIMIT,
    SCALING_OPTIONS,
    SERVING_OPTIONS,
    SLOS,
    TRACE,
    slo_scheme_of,
)

DECLARED = {o.name: o for o in (*SERVING_OPTIONS, *SCALING_OPTIONS)}


def subcommands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(sub.choices)


def flags_of(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    return {s: a for a in parser._actions for s in a.option_strings}


def test_every_setup_field_is_one_declared_flag_with_its_default():
    fields = {f.name: f for f in dataclasses.fields(ServingSetup) if f.name != "trace"}
    assert sorted(fields) == sorted(DECLARED)
    for name, field in fields.items():
        assert field.default == DECLARED[name].default, name


@pytest.mark.parametrize("command", ["simulate", "capacity"])
def test_a_command_with_only_a_trace_is_the_default_setup(command):
    args = build_parser().parse_args([command, "azure_conv_2023"])
    assert ServingSetup.from_namespace(args) == ServingSetup("azure_conv_2023")


@pytest.mark.parametrize("command", ["simulate", "capacity"])
def test_each_declared_flag_reaches_its_field(command):
    """Every flag, given a value unlike its default, lands in the field of the same name."""
    parser = build_parser()
    values = {
        "servers": "3",
        "timing": "llama2-7b-a100",
        "slos": "proserve",
        "token_budget": "512",
        "limit": "7",
        "seed": "5",
        "mode": "disaggregated",
        "prefill_servers": "1",
        "kv_capacity": "1000",
        "prefix_cache": "16",
        "max_batch_tokens": "4096",
        "max_batch_size": "8",
        "router": "random",
        "decode_router": "hold",
        "policy": "edf",
        "scenario": "coder",
        "slack": "loose",
        "format": "azure",
        "columns": "a=b",
        "time_unit": "ms",
        "zero_output": "drop",
        "max_request_tokens": "9000",
        "arrivals": "gamma",
        "cv": "2.5",
        "autoscale": "threshold",
        "min_servers": "2",
        "max_servers": "9",
        "scale_metric": "queue",
        "scale_upper": "4.5",
        "scale_lower": "0.5",
        "startup": "host",
    }
    assert sorted(values) == sorted(DECLARED)
    argv = [command, "azure_conv_2023"]
    for name, value in values.items():
        argv += [DECLARED[name].cli_flag, value]
    setup = ServingSetup.from_namespace(parser.parse_args(argv))
    for name, value in values.items():
        got = getattr(setup, name)
        assert str(got) == value, (name, got, value)


def test_a_flag_missing_from_the_namespace_is_an_error_not_a_default():
    """A renamed flag used to fall back to its default silently (``hasattr``)."""
    args = build_parser().parse_args(["simulate", "azure_conv_2023", "--servers", "4"])
    del args.max_batch_size
    with pytest.raises(TypeError, match="lack max_batch_size"):
        ServingSetup.from_namespace(args)
    # a command that does not take a flag says so
    setup = ServingSetup.from_namespace(args, absent=["max_batch_size"])
    assert (setup.servers, setup.max_batch_size) == (4, DECLARED["max_batch_size"].default)


def test_the_serving_problem_takes_the_same_declarations():
    options = {o.name: o for o in get_problem("serving").options}
    assert options["trace"] is TRACE
    assert options["slos"] is SLOS
    assert options["limit"] is LIMIT
    for name in ("servers", "timing", "seed"):
        assert options[name] is DECLARED[name]


def test_the_problem_and_simulate_read_slos_alike(tmp_path):
    """Without --slos both give PolyServe's SLOs (the problem used to declare its own default)."""
    out = tmp_path / "s.json"
    argv = ["instance", "build", "--problem", "serving", "--trace", "azure_conv_2023"]
    assert main([*argv, "--limit", "20", "-o", str(out)]) == 0
    from slolab.problems import load_instance

    built = load_instance(out)
    made = ServingSetup("azure_conv_2023", limit=20).instance()
    assert built.settings["slos"] == made.settings["slos"] == "polyserve"
    np.testing.assert_array_equal(built.workload["ttft_slo_s"], made.workload["ttft_slo_s"])
    np.testing.assert_array_equal(built.workload["tpot_slo_s"], made.workload["tpot_slo_s"])
    # --n, the flag every problem's request count has, is the same option
    alias = tmp_path / "n.json"
    assert main([*argv, "--n", "20", "-o", str(alias)]) == 0
    assert alias.read_bytes() == out.read_bytes()


def test_slo_scheme_defaults():
    assert slo_scheme_of(None) == "polyserve"
    assert slo_scheme_of(None, "coder") == "slos-serve"
    assert slo_scheme_of("none") is None
    assert slo_scheme_of("sa") == "sa"


def test_every_command_takes_json_and_quiet_silences_only_progress():
    for name, parser in subcommands().items():
        if name == "instance":
            continue  # its action 'build' takes them
        flags = flags_of(parser)
        assert "--json" in flags, name
    for json_flag, quiet, drawn in (
        (False, False, True),
        (True, False, False),
        (False, True, False),
    ):
        assert wants_progress(argparse.Namespace(json=json_flag, quiet=quiet)) is drawn


@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [
        ("--seed", "-1", "--seed: must be an integer in [0, 2147483646], got -1"),
        ("--max-batch-size", "0", "--max-batch-size: must be an integer >= 1, got 0"),
        ("--kv-capacity", "lots", "--kv-capacity: must be an integer, got 'lots'"),
    ],
)
def test_a_declared_range_is_checked_by_the_parser(flag, value, message, capsys):
    with pytest.raises(SystemExit) as stop:
        main(["simulate", "azure_conv_2023", flag, value])
    assert stop.value.code == 2
    assert message in capsys.readouterr().err
