"""Inputs that used to hurt: huge lengths, mixed time zones, binary files, hints in Python words."""

import tracemalloc
from pathlib import Path

import numpy as np
import pytest
from slolab.instances import (
    MAX_REQUEST_TOKENS,
    InstanceFileError,
    TraceError,
    Workload,
    assign_slos,
    load_instance,
    read_azure,
    read_generic,
    read_trace,
    save_instance,
    scale_rate,
    trace_path,
    window,
)
from slolab.instances.hints import SuggestingError, Suggestion, cli_message, worded

AZURE_HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens"


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def conv_copy(tmp_path: Path, line: int, prompt: object, output: object) -> Path:
    """The Azure conv trace with new lengths on one 1-based line (its timestamp kept)."""
    lines = trace_path("azure_conv_2023").read_text().splitlines()
    stamp = lines[line - 1].split(",")[0]
    lines[line - 1] = f"{stamp},{prompt},{output}"
    return write(tmp_path, "azure_conv_2023.csv", "\n".join(lines) + "\n")


# -- token bound ---------------------------------------------------------------------------------


def test_row_with_a_billion_output_tokens_is_refused_naming_file_and_line(tmp_path):
    """GeneratedTokens = 1e9 on line 17 raises at read time, naming the bound and how to raise it."""
    path = conv_copy(tmp_path, 17, 12, 1_000_000_000)
    tracemalloc.start()
    with pytest.raises(TraceError) as info:
        read_azure(path)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    err = info.value
    assert (err.line, err.field, err.value) == (17, "GeneratedTokens", "1000000000")
    assert str(err).startswith(
        "azure_conv_2023.csv line 17: GeneratedTokens must be an integer in [1, 1048576], "
        "got '1000000000'"
    )
    assert "raise the bound with max_request_tokens=" in str(err)
    assert "raise the bound with --max-request-tokens" in err.cli_message
    # refused while parsing: the read of 19,366 rows peaks at a few MB, nothing per token
    assert peak < 50e6


def test_token_bound_is_configurable_per_read(tmp_path):
    """max_request_tokens=2**30 admits the 1e9 row; the workload keeps the raised bound."""
    path = conv_copy(tmp_path, 17, 12, 1_000_000_000)
    w = read_azure(path, max_request_tokens=2**30)
    # line 17 is request 15 (line 2 is request 0; the trace is in time order)
    assert int(w.output_tokens[15]) == 1_000_000_000
    assert w.max_request_tokens == 2**30
    prompt = conv_copy(tmp_path, 5, 2**20 + 1, 3)
    with pytest.raises(
        TraceError, match=r"line 5: ContextTokens must be an integer in \[1, 1048576\]"
    ):
        read_trace(prompt)
    with pytest.raises(ValueError, match="max_request_tokens must be an integer >= 1, got 0"):
        read_azure(path, max_request_tokens=0)


def test_workload_refuses_lengths_above_its_bound():
    """Workload checks the bound itself; derived workloads and instance files keep it."""
    cols = {"arrival_s": [0.0, 1.0], "prompt_tokens": [5, 7], "output_tokens": [3, 2**20 + 1]}
    assert MAX_REQUEST_TOKENS == 2**20
    with pytest.raises(
        ValueError,
        match=r"output_tokens must be at most max_request_tokens = 1048576, got 1048577 \(row 1\)",
    ):
        Workload(cols)
    w = Workload(cols, max_request_tokens=2**21)
    derived = assign_slos(scale_rate(window(w, 0.0, 2.0), 4.0), "sa", seed=0, task="chat")
    assert derived.max_request_tokens == 2**21
    assert w.take(np.array([1])).max_request_tokens == 2**21


def test_instance_file_keeps_a_raised_token_bound(tmp_path):
    """A raised bound is written to the file and read back; the default is not written."""
    from slolab.instances import Cluster, Instance, instance_to_dict
    from slolab.timing import preset

    cols = {"arrival_s": [0.0], "prompt_tokens": [5], "output_tokens": [2**20 + 1]}
    inst = Instance(
        "big", Workload(cols, max_request_tokens=2**21), Cluster(), preset("llama2-7b-h100")
    )
    path = save_instance(inst, tmp_path / "big.json")
    assert load_instance(path).workload.max_request_tokens == 2**21
    small = Instance("small", Workload({**cols, "output_tokens": [3]}), Cluster(), inst.timing)
    assert "max_request_tokens" not in instance_to_dict(small)


# -- time zones ----------------------------------------------------------------------------------


def test_mixed_time_zones_are_refused_naming_the_line(tmp_path):
    """A '+05:00' stamp among naive ones (read as UTC it moves by 5 h) raises naming both lines."""
    path = write(
        tmp_path,
        "tz.csv",
        f"{AZURE_HEADER}\n"
        "2023-11-16 18:17:03.1,10,5\n"
        "2023-11-16 18:17:05.1+05:00,10,5\n"
        "2023-11-16 18:17:42.1,10,5\n",
    )
    expected = (
        "tz.csv line 3: TIMESTAMP has a UTC offset ('2023-11-16 18:17:05.1+05:00') but line 2 "
        "('2023-11-16 18:17:03.1') has none: time zones must not be mixed"
    )
    for chunk_rows in (1_000, 1):  # within one chunk, and across chunks
        with pytest.raises(TraceError) as info:
            read_azure(path, chunk_rows=chunk_rows)
        assert str(info.value).startswith(expected)
        assert (info.value.line, info.value.field) == (3, "TIMESTAMP")


def test_naive_stamp_after_offset_ones_is_refused(tmp_path):
    """The other way round: stamps with offsets, then one without."""
    path = write(
        tmp_path,
        "tz.csv",
        f"{AZURE_HEADER}\n"
        "2024-05-10 00:00:00.009930+00:00,10,5\n"
        "2024-05-10 00:00:01+00:00,10,5\n"
        "2024-05-10 00:00:02.5,10,5\n",
    )
    with pytest.raises(
        TraceError, match=r"line 4: TIMESTAMP has no UTC offset .* line 2 .* has one"
    ):
        read_azure(path)


def test_different_offsets_are_converted_to_utc(tmp_path):
    """Every stamp with an offset is fine: 23:17:05.1+05:00 is 18:17:05.1 UTC, 2 s after the first."""
    path = write(
        tmp_path,
        "tz.csv",
        f"{AZURE_HEADER}\n2023-11-16 18:17:03.1+00:00,10,5\n2023-11-16 23:17:05.1+05:00,10,5\n",
    )
    assert read_azure(path).arrival_s.tolist() == [0.0, 2.0]


def test_generic_datetimes_refuse_mixed_time_zones_too(tmp_path):
    """time_unit='datetime' applies the same rule."""
    path = write(tmp_path, "g.csv", "t,p,o\n2023-01-01T00:00:00Z,3,2\n2023-01-01T00:00:01,3,2\n")
    with pytest.raises(TraceError, match="g.csv line 3: t has no UTC offset"):
        read_generic(
            path,
            columns={"arrival_s": "t", "prompt_tokens": "p", "output_tokens": "o"},
            time_unit="datetime",
        )


# -- files that are not traces ---------------------------------------------------------------------


@pytest.mark.parametrize("name", ["junk.csv", "junk.jsonl"])
def test_binary_file_is_a_trace_error_naming_the_file(tmp_path, name):
    """Bytes that are not UTF-8 text give a TraceError naming the file, not a bare decode error."""
    path = tmp_path / name
    path.write_bytes(bytes(range(128, 256)) * 4)
    with pytest.raises(TraceError, match=rf"^{name}: not a text file"):
        read_trace(path)


def test_binary_instance_file_names_the_file(tmp_path):
    """load_instance on binary bytes names the path; on a directory it says so."""
    path = tmp_path / "junk.json"
    path.write_bytes(b"\x85\x00\xff" * 10)
    with pytest.raises(InstanceFileError, match=rf"{path}: not a slolab instance file \(not UTF-8"):
        load_instance(path)
    with pytest.raises(InstanceFileError, match="is a directory, not an instance file"):
        load_instance(tmp_path)


# -- hints ---------------------------------------------------------------------------------------


def test_hints_name_keywords_in_python_and_flags_on_the_command_line(tmp_path):
    """A zero-output row suggests zero_output='drop' or 'clamp', or --zero-output drop or clamp."""
    path = conv_copy(tmp_path, 17, 12, 0)
    with pytest.raises(TraceError) as info:
        read_azure(path)
    assert str(info.value).endswith("(zero-length outputs: pass zero_output='drop' or 'clamp')")
    assert info.value.cli_message.endswith(
        "(zero-length outputs: pass --zero-output drop or clamp)"
    )
    odd = write(tmp_path, "odd.csv", "a,b\n1,2\n")
    with pytest.raises(TraceError) as info:
        read_trace(odd)
    assert "pass --format one of azure, mooncake, burstgpt, vidur, lengths, generic" in cli_message(
        info.value
    )
    assert "(generic needs --columns)" in cli_message(info.value)
    assert "format=" not in cli_message(info.value)


def test_suggestion_wording():
    """Keywords get = and quoted values; flags get dashes and bare values."""
    python, cli = worded(
        "pass ",
        Suggestion("max_request_tokens"),
        " or ",
        Suggestion("arrivals", ("poisson", "gamma")),
    )
    assert python == "pass max_request_tokens= or arrivals='poisson' or 'gamma'"
    assert cli == "pass --max-request-tokens or --arrivals poisson or gamma"
    err = SuggestingError(Suggestion("cv"), " applies to gamma arrivals only")
    assert (str(err), cli_message(err)) == (
        "cv= applies to gamma arrivals only",
        "--cv applies to gamma arrivals only",
    )
