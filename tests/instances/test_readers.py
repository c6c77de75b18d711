"""Trace readers on the vendored real traces and on broken copies of them."""

import json
import math
import tracemalloc
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from slolab.instances import (
    FORMATS,
    TRACES,
    TraceError,
    detect_format,
    read_azure,
    read_generic,
    read_lengths,
    read_mooncake,
    read_trace,
    readers,
    trace_path,
)

AZURE_HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens"


def copy_with(
    tmp_path: Path, name: str, edits: dict[int, str], file_name: str | None = None
) -> Path:
    """A copy of a vendored trace with some 1-based lines replaced."""
    lines = trace_path(name).read_text().splitlines()
    for number, text in edits.items():
        lines[number - 1] = text
    out = tmp_path / (file_name or trace_path(name).name)
    out.write_text("\n".join(lines) + "\n")
    return out


# -- vendored traces ----------------------------------------------------------------------------


def test_vendored_traces_live_in_the_package():
    """trace_path points inside slolab/instances/data/traces, never at a shared folder."""
    import slolab.instances

    package = Path(slolab.instances.__file__).resolve().parent
    for name in TRACES:
        path = trace_path(name)
        assert path.is_file()
        assert path.parent == package / "data" / "traces"


def test_trace_path_unknown_name_lists_known():
    """An unknown trace name raises and lists the four vendored names."""
    with pytest.raises(ValueError, match="known: azure_conv_2023, azure_code_2023"):
        trace_path("azure_conv_2024")


def test_azure_conv_2023_rows_first_last_and_rate():
    """Azure conv 2023: 19,366 rows; first and last rows; mean rate from the timestamps."""
    w = read_trace(trace_path("azure_conv_2023"))
    assert len(w) == 19_366
    # line 2: 2023-11-16 18:15:46.6805900,374,44 ; line 3: 18:15:50.9951690,396,109
    assert (w.arrival_s[0], w.prompt_tokens[0], w.output_tokens[0]) == (0.0, 374, 44)
    # 50.9951690 - 46.6805900 = 4.3145790 s
    assert w.arrival_s[1] == 4.314579
    # last line: 2023-11-16 19:14:08.4025270,197,183 -> 58 min 21.7219370 s = 3501.721937 s
    assert (w.arrival_s[-1], w.prompt_tokens[-1], w.output_tokens[-1]) == (3501.721937, 197, 183)
    # 19,365 gaps over 3501.721937 s = 5.53014 requests per second
    rate = (len(w) - 1) / w.arrival_s[-1]
    assert rate == pytest.approx(19_365 / 3501.721937, rel=1e-15)
    assert round(rate, 4) == 5.5301


def test_azure_code_2023_rows_first_last():
    """Azure code 2023: 8,819 rows; the last arrives 3435.948056 s after the first."""
    w = read_azure(trace_path("azure_code_2023"))
    assert len(w) == 8_819
    # 2023-11-16 18:17:03.9799600,4808,10 then 18:17:04.0319600,3180,8 (0.052 s later)
    assert (w.prompt_tokens[0], w.output_tokens[0], w.arrival_s[1]) == (4808, 10, 0.052)
    # last line 2023-11-16 19:14:19.9280160,549,173:
    # 19:14:19.9280160 - 18:17:03.9799600 = 57 min 15.948056 s = 3435.948056 s
    assert (w.arrival_s[-1], w.prompt_tokens[-1], w.output_tokens[-1]) == (3435.948056, 549, 173)


def test_mooncake_conversation_rows_and_ms_timestamps():
    """Mooncake conversation: 12,031 records, last at 3,536,999 ms = 3536.999 s."""
    w = read_trace(trace_path("mooncake_conversation"))
    assert len(w) == 12_031
    assert (w.prompt_tokens[0], w.output_tokens[0], w.arrival_s[0]) == (6758, 500, 0.0)
    assert (w.prompt_tokens[-1], w.output_tokens[-1], w.arrival_s[-1]) == (20774, 508, 3536.999)
    assert "hash_ids" not in w


def test_mooncake_keeps_hash_ids_on_request():
    """keep_hash_ids=True keeps the first record's 14 block ids 0..13 as a list."""
    w = read_mooncake(trace_path("mooncake_conversation"), keep_hash_ids=True, limit=2)
    assert w["hash_ids"].dtype == object
    assert list(w["hash_ids"][0]) == list(range(14))
    # second record: 0 then 14..27 (15 blocks)
    assert list(w["hash_ids"][1]) == [0, *range(14, 28)]


def test_arxiv_lengths_with_poisson_arrivals():
    """arXiv summarization lengths: 28,257 rows; Poisson gaps average 1/rate within 4 sd."""
    w = read_trace(trace_path("arxiv_summarization"), arrivals="poisson", rate=2.0, seed=7)
    assert len(w) == 28_257
    # first line 3772,54,... ; last line 3178,313,...
    assert (w.prompt_tokens[0], w.output_tokens[0]) == (3772, 54)
    assert (w.prompt_tokens[-1], w.output_tokens[-1]) == (3178, 313)
    gaps = np.diff(w.arrival_s)
    # exponential gaps: mean 0.5 s, sd 0.5 s; the mean of 28,256 has sd 0.5 / sqrt(28256)
    assert abs(gaps.mean() - 0.5) < 4 * 0.5 / math.sqrt(len(gaps))
    again = read_lengths(trace_path("arxiv_summarization"), arrivals="poisson", rate=2.0, seed=7)
    assert np.array_equal(again.arrival_s, w.arrival_s)


def test_lengths_gamma_and_uniform_arrivals():
    """Gamma gaps keep the mean 1/rate with the asked CV; uniform gaps are exactly 1/rate."""
    path = trace_path("arxiv_summarization")
    w = read_lengths(path, arrivals="gamma", rate=4.0, cv=3.0, seed=1)
    gaps = np.diff(w.arrival_s)
    # gamma with mean 0.25 s and sd 3 * 0.25 = 0.75 s; the sample mean has sd 0.75 / sqrt(n)
    assert abs(gaps.mean() - 0.25) < 4 * 0.75 / math.sqrt(len(gaps))
    assert gaps.std() / gaps.mean() == pytest.approx(3.0, rel=0.1)
    u = read_lengths(path, arrivals="uniform", rate=4.0, limit=5)
    # 0, 1/4, 2/4, 3/4, 4/4
    assert u.arrival_s.tolist() == [0.0, 0.25, 0.5, 0.75, 1.0]


def test_lengths_arrival_options_are_checked():
    """Poisson without a seed, gamma without cv and an unknown process raise."""
    path = trace_path("arxiv_summarization")
    with pytest.raises(ValueError, match="needs an integer seed"):
        read_lengths(path, arrivals="poisson", rate=1.0, limit=3)
    with pytest.raises(ValueError, match="needs cv > 0"):
        read_lengths(path, arrivals="gamma", rate=1.0, seed=0, limit=3)
    with pytest.raises(ValueError, match="arrivals must be one of poisson, gamma, uniform"):
        read_lengths(path, arrivals="bursty", rate=1.0, seed=0, limit=3)


def test_limit_reads_only_the_first_rows():
    """limit=100 keeps data lines 2..101 of the Azure conv trace."""
    w = read_azure(trace_path("azure_conv_2023"), limit=100)
    lines = trace_path("azure_conv_2023").read_text().splitlines()
    last = lines[100].split(",")
    assert len(w) == 100
    assert (w.prompt_tokens[-1], w.output_tokens[-1]) == (int(last[1]), int(last[2]))


def test_azure_timestamps_exact_below_a_microsecond(tmp_path):
    """Seven sub-second digits: 100 ns steps survive; 2024 rows with +00:00 and no fraction."""
    path = tmp_path / "fine.csv"
    path.write_text(
        f"{AZURE_HEADER}\n"
        "2023-11-16 18:17:03.0000001,5,1\n"
        "2023-11-16 18:17:03.0000003,5,1\n"
        "2023-11-16 18:17:04.9999999,5,1\n"
    )
    w = read_azure(path)
    # 300 ns - 100 ns = 200 ns; 4.9999999 - 3.0000001 = 1.9999998 s
    assert w.arrival_s.tolist() == [0.0, 2e-7, 1.9999998]
    path24 = tmp_path / "week.csv"
    path24.write_text(
        f"{AZURE_HEADER}\n"
        "2024-05-12 00:00:00+00:00,1452,3\n"
        "2024-05-12 00:00:00.001163+00:00,584,3\n"
        "2024-05-12 00:00:00.157988+00:00,862,38\n"
    )
    w24 = read_trace(path24)
    # 1163 us and 157988 us after midnight
    assert w24.arrival_s.tolist() == [0.0, 0.001163, 0.157988]


def test_chunked_read_equals_one_pass():
    """Reading in chunks of 777 rows gives exactly the one-chunk workload."""
    path = trace_path("azure_conv_2023")
    assert read_azure(path, chunk_rows=777).equals(read_azure(path))


def test_chunked_read_holds_one_chunk_of_strings(tmp_path, monkeypatch):
    """Traced memory while streaming 20,000 rows (before the workload is built) falls with the chunk."""
    rng = np.random.default_rng(0)
    n = 20_000
    start = pd.Timestamp("2024-05-10 00:00:00")
    stamps = (start + pd.to_timedelta(np.arange(n) * 0.0123457, unit="s")).astype(str)
    frame = pd.DataFrame(
        {
            "TIMESTAMP": stamps,
            "ContextTokens": rng.integers(1, 8000, n),
            "GeneratedTokens": rng.integers(1, 500, n),
        }
    )
    path = tmp_path / "week.csv"
    frame.to_csv(path, index=False)
    build = readers._build
    peaks: list[int] = []

    def measured_build(*args, **kwargs):
        peaks.append(tracemalloc.get_traced_memory()[1])
        return build(*args, **kwargs)

    monkeypatch.setattr(readers, "_build", measured_build)
    for chunk_rows in (n, 1_000):
        tracemalloc.start()
        read_azure(path, chunk_rows=chunk_rows)
        tracemalloc.stop()
    one_pass, chunked = peaks
    # one pass holds 20,000 timestamp strings (~80 B each) and their parse temporaries at once
    # (~3 MB); chunks of 1,000 hold 1/20 of that plus the 20,000 x 24 B numeric result
    assert chunked < 0.4 * one_pass


# -- broken copies ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "field", "value"),
    [
        ("2023-11-16 18:15:59.0000000,-3,44", "ContextTokens", "-3"),
        ("2023-11-16 18:15:59.0000000,1.5,44", "ContextTokens", "1.5"),
        ("2023-11-16 18:15:59.0000000,12,abc", "GeneratedTokens", "abc"),
        ("2023-11-16 18:15:59.0000000,12,", "GeneratedTokens", ""),
        ("yesterday,12,5", "TIMESTAMP", "yesterday"),
    ],
)
def test_azure_bad_value_names_file_line_field_value(tmp_path, line, field, value):
    """A bad value on line 17 is reported with file, line 17, field and the raw value."""
    path = copy_with(tmp_path, "azure_conv_2023", {17: line})
    with pytest.raises(TraceError) as info:
        read_azure(path)
    err = info.value
    assert (err.line, err.field, err.value) == (17, field, value)
    assert str(err).startswith(f"azure_conv_2023.csv line 17: {field} must be ")
    assert str(err).endswith(f"got {value!r}")


def test_azure_error_message_matches_the_documented_example(tmp_path):
    """The exact message for ContextTokens = -3 on line 17."""
    path = copy_with(tmp_path, "azure_conv_2023", {17: "2023-11-16 18:15:59.0000000,-3,44"})
    with pytest.raises(TraceError) as info:
        read_trace(path)
    assert str(info.value) == (
        "azure_conv_2023.csv line 17: ContextTokens must be an integer >= 1, got '-3'"
    )


def test_bad_value_found_in_a_later_chunk(tmp_path):
    """With 1,000-row chunks, a bad length on line 16,001 still names line 16,001."""
    path = copy_with(tmp_path, "azure_conv_2023", {16_001: "2023-11-16 19:00:00.0000000,-12,5"})
    with pytest.raises(TraceError, match="line 16001: ContextTokens must be an integer >= 1"):
        read_azure(path, chunk_rows=1_000)


def test_first_problem_in_file_order_wins(tmp_path):
    """Two bad lines in one chunk: the earlier line (9) is reported, not line 12."""
    path = copy_with(
        tmp_path,
        "azure_conv_2023",
        {9: "2023-11-16 18:15:52.0000000,12,-1", 12: "not a time,5,5"},
    )
    with pytest.raises(TraceError) as info:
        read_azure(path)
    assert (info.value.line, info.value.field) == (9, "GeneratedTokens")


def test_zero_output_tokens_error_drop_clamp(tmp_path):
    """GeneratedTokens = 0 on line 17: error by default, dropped or clamped to 1 on request."""
    line17 = trace_path("azure_conv_2023").read_text().splitlines()[16]
    stamp, prompt, _ = line17.split(",")
    path = copy_with(tmp_path, "azure_conv_2023", {17: f"{stamp},{prompt},0"})
    with pytest.raises(TraceError, match="line 17: GeneratedTokens .* got '0' .*zero_output="):
        read_azure(path)
    dropped = read_azure(path, zero_output="drop")
    clamped = read_azure(path, zero_output="clamp")
    original = read_azure(trace_path("azure_conv_2023"))
    # 19,366 rows minus the zero one; line 17 is request 15 (line 2 is request 0)
    assert len(dropped) == 19_365
    assert dropped.prompt_tokens[15] == original.prompt_tokens[16]
    assert (len(clamped), clamped.prompt_tokens[15], clamped.output_tokens[15]) == (
        19_366,
        int(prompt),
        1,
    )


def test_zero_prompt_is_always_an_error(tmp_path):
    """ContextTokens = 0 is an error even with zero_output='drop'."""
    path = copy_with(tmp_path, "azure_conv_2023", {5: "2023-11-16 18:15:51.0000000,0,10"})
    with pytest.raises(TraceError, match="line 5: ContextTokens must be an integer >= 1, got '0'"):
        read_azure(path, zero_output="drop")


def test_unsorted_rows_sorted_stably_or_refused(tmp_path):
    """Lines 4 and 5 swapped: sorted back by default; unsorted='error' names line 5."""
    lines = trace_path("azure_conv_2023").read_text().splitlines()
    path = copy_with(tmp_path, "azure_conv_2023", {4: lines[4], 5: lines[3]})
    w = read_azure(path)
    assert w.equals(read_azure(trace_path("azure_conv_2023")))
    with pytest.raises(TraceError) as info:
        read_azure(path, unsorted="error")
    # line 5 now holds 18:15:51.222467, earlier than line 4's 18:15:51.391017
    assert info.value.line == 5
    assert "got '2023-11-16 18:15:51.222467' after '2023-11-16 18:15:51.391017' (line 4)" in str(
        info.value
    )


def test_equal_times_keep_file_order(tmp_path):
    """Rows with equal timestamps keep their file order after sorting."""
    path = tmp_path / "ties.csv"
    path.write_text(
        f"{AZURE_HEADER}\n"
        "2023-11-16 18:00:01.0,30,1\n"
        "2023-11-16 18:00:00.0,10,1\n"
        "2023-11-16 18:00:01.0,31,1\n"
        "2023-11-16 18:00:00.0,11,1\n"
    )
    w = read_azure(path)
    assert w.prompt_tokens.tolist() == [10, 11, 30, 31]
    assert w.arrival_s.tolist() == [0.0, 0.0, 1.0, 1.0]


def test_missing_column_empty_file_and_header_only(tmp_path):
    """Missing column, empty file and header-only file name the file and line 1."""
    missing = tmp_path / "missing.csv"
    missing.write_text("TIMESTAMP,GeneratedTokens\n2023-11-16 18:00:00.0,1\n")
    with pytest.raises(TraceError) as info:
        read_azure(missing)
    assert (info.value.line, info.value.field) == (1, "ContextTokens")
    assert str(info.value) == (
        "missing.csv line 1: missing column ContextTokens (header has TIMESTAMP, GeneratedTokens)"
    )
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    with pytest.raises(TraceError, match="empty.csv line 1: file is empty"):
        read_azure(empty)
    header = tmp_path / "header.csv"
    header.write_text(AZURE_HEADER + "\n")
    with pytest.raises(TraceError, match="header.csv line 1: no requests in the file"):
        read_azure(header)


def test_extra_field_is_a_malformed_row(tmp_path):
    """A row with four fields under a three-column header names its line."""
    path = copy_with(tmp_path, "azure_conv_2023", {40: "2023-11-16 18:16:30.0,12,5,7"})
    with pytest.raises(TraceError, match="line 40: malformed CSV row .*Expected 3 fields"):
        read_azure(path)


def test_mooncake_broken_records(tmp_path):
    """Bad JSON, a missing field and a negative length name their 1-based line."""
    lines = trace_path("mooncake_conversation").read_text().splitlines()

    def broken(number: int, text: str) -> Path:
        edited = list(lines)
        edited[number - 1] = text
        path = tmp_path / "mooncake_conversation.jsonl"
        path.write_text("\n".join(edited) + "\n")
        return path

    with pytest.raises(TraceError, match="line 3: not a JSON object"):
        read_mooncake(broken(3, '{"timestamp": 0, "input_length": '))
    with pytest.raises(TraceError, match="line 4: missing field output_length"):
        read_mooncake(broken(4, '{"timestamp": 0, "input_length": 5}'))
    bad = '{"timestamp": 10, "input_length": 5, "output_length": -2, "hash_ids": []}'
    with pytest.raises(TraceError) as info:
        read_mooncake(broken(6, bad))
    assert (
        str(info.value)
        == "mooncake_conversation.jsonl line 6: output_length must be an integer >= 1, got -2"
    )
    text = '{"timestamp": "soon", "input_length": 5, "output_length": 2, "hash_ids": []}'
    with pytest.raises(TraceError, match="line 7: timestamp must be a finite number, got 'soon'"):
        read_mooncake(broken(7, text))


def test_lengths_broken_value(tmp_path):
    """A negative decode length in the lengths CSV names its line and field."""
    path = copy_with(tmp_path, "arxiv_summarization", {10: "100,-5,95,0.0"})
    with pytest.raises(TraceError) as info:
        read_lengths(path, arrivals="uniform", rate=1.0)
    assert (info.value.line, info.value.field, info.value.value) == (10, "num_decode_tokens", "-5")


# -- generic and dispatch -----------------------------------------------------------------------


def test_generic_csv_in_milliseconds_with_slos_and_extra(tmp_path):
    """Generic CSV: ms times re-zeroed, SLO column with an empty cell, a kept string column."""
    path = tmp_path / "mine.csv"
    path.write_text(
        "t_ms,in,out,ttft,kind\n1500,10,2,0.5,chat\n1000,20,3,,code\n2500,30,4,1,chat\n"
    )
    columns = {
        "arrival_s": "t_ms",
        "prompt_tokens": "in",
        "output_tokens": "out",
        "ttft_slo_s": "ttft",
        "task": "kind",
    }
    w = read_trace(path, columns=columns, time_unit="ms")
    # sorted: 1000 ms (20 in), 1500 ms (10 in), 2500 ms (30 in); seconds from 1000 ms
    assert w.arrival_s.tolist() == [0.0, 0.5, 1.5]
    assert w.prompt_tokens.tolist() == [20, 10, 30]
    assert np.isnan(w["ttft_slo_s"][0]) and w["ttft_slo_s"][1:].tolist() == [0.5, 1.0]
    assert w["task"].tolist() == ["code", "chat", "chat"]


def test_generic_datetime_and_epoch_nanoseconds(tmp_path):
    """Date-time strings and integer epoch nanoseconds both give exact seconds."""
    path = tmp_path / "times.csv"
    path.write_text(
        "when,ns,p,o\n"
        "2024-05-10 00:00:01.5,1715299201500000123,3,1\n"
        "2024-05-10 00:00:00,1715299200000000000,4,1\n"
    )
    by_text = read_generic(
        path,
        columns={"arrival_s": "when", "prompt_tokens": "p", "output_tokens": "o"},
        time_unit="datetime",
    )
    by_ns = read_generic(
        path,
        columns={"arrival_s": "ns", "prompt_tokens": "p", "output_tokens": "o"},
        time_unit="ns",
    )
    # 1.5 s apart; 1,500,000,123 ns apart, subtracted as integers before dividing by 1e9
    assert by_text.arrival_s.tolist() == [0.0, 1.5]
    assert by_ns.arrival_s.tolist() == [0.0, 1.500000123]
    assert by_ns.prompt_tokens.tolist() == [4, 3]


def test_generic_parquet_rows_and_errors(tmp_path):
    """Generic Parquet: seconds as given; a bad length names its 1-based row."""
    path = tmp_path / "mine.parquet"
    frame = pd.DataFrame({"when": [0.25, 1.0, 2.0], "p": [5, 6, 7], "o": [1, 2, 3]})
    frame.to_parquet(path)
    columns = {"arrival_s": "when", "prompt_tokens": "p", "output_tokens": "o"}
    assert detect_format(path) == "generic"
    w = read_generic(path, columns=columns)
    # 0.25 s is the origin
    assert w.arrival_s.tolist() == [0.0, 0.75, 1.75]
    frame.assign(o=[1, 0, 3]).to_parquet(path)
    with pytest.raises(TraceError) as info:
        read_generic(path, columns=columns)
    assert str(info.value).startswith("mine.parquet row 2: o must be an integer >= 1, got 0")


def test_generic_mapping_must_name_the_required_columns(tmp_path):
    """A mapping without output_tokens raises; a mapped column absent from the file too."""
    path = tmp_path / "mine.csv"
    path.write_text("t,in,out\n0,1,1\n")
    with pytest.raises(ValueError, match="columns= must map output_tokens"):
        read_generic(path, columns={"arrival_s": "t", "prompt_tokens": "in"})
    with pytest.raises(TraceError, match="line 1: missing column gen"):
        read_generic(
            path, columns={"arrival_s": "t", "prompt_tokens": "in", "output_tokens": "gen"}
        )


def test_dispatcher_detects_and_rejects_formats(tmp_path):
    """Detection by header and extension; unknown names and headers list the known formats."""
    assert detect_format(trace_path("azure_code_2023")) == "azure"
    assert detect_format(trace_path("mooncake_conversation")) == "mooncake"
    assert detect_format(trace_path("arxiv_summarization")) == "lengths"
    with pytest.raises(ValueError, match="unknown trace format 'sharegpt'; known: azure, mooncake"):
        read_trace(trace_path("azure_code_2023"), format="sharegpt")
    with pytest.raises(
        ValueError, match="unknown option.* seed for trace format 'azure'; accepted"
    ):
        read_trace(trace_path("azure_code_2023"), seed=1)
    odd = tmp_path / "odd.csv"
    odd.write_text("a,b\n1,2\n")
    with pytest.raises(TraceError, match="cannot tell the trace format .*generic needs columns"):
        read_trace(odd)
    assert FORMATS == ("azure", "mooncake", "burstgpt", "vidur", "lengths", "generic")


def test_json_lines_written_by_pandas_read_as_mooncake(tmp_path):
    """A JSONL file with the Mooncake fields is detected and read; blank lines are skipped."""
    path = tmp_path / "small.jsonl"
    records = [
        {"timestamp": 2000, "input_length": 8, "output_length": 2},
        {"timestamp": 500, "input_length": 9, "output_length": 3},
    ]
    path.write_text(json.dumps(records[0]) + "\n\n" + json.dumps(records[1]) + "\n")
    w = read_trace(path)
    # sorted: 500 ms then 2000 ms -> 0 and 1.5 s
    assert w.arrival_s.tolist() == [0.0, 1.5]
    assert w.prompt_tokens.tolist() == [9, 8]
