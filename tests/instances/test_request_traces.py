"""BurstGPT and Vidur request traces, and read_workload: arrival processes, rates, column maps."""

from pathlib import Path

import numpy as np
import pytest
from slolab.instances import (
    TraceError,
    detect_format,
    mean_rate,
    parse_columns,
    read_burstgpt,
    read_trace,
    read_vidur,
    read_workload,
    trace_path,
)

# The published BurstGPT header (HPMLL/BurstGPT README, "Schema"); the rows are made up.
BURSTGPT = (
    "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
    "10,ChatGPT,200,40,240,Conversation log\n"
    "12,GPT-4,1000,0,1000,API log\n"
    "12.5,ChatGPT,30,7,37,Conversation log\n"
    "20,GPT-4,400,100,500,API log\n"
)
# Vidur's trace-replay layout: arrived_at in seconds, then the two lengths.
VIDUR = (
    "arrived_at,num_prefill_tokens,num_decode_tokens,request_id\n"
    "3.5,591,140,0\n"
    "3.625,547,248,1\n"
    "4.0,12,1,2\n"
)


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


# -- BurstGPT ------------------------------------------------------------------------------------


def test_burstgpt_failed_rows_follow_the_zero_output_policy(tmp_path):
    """The failed request (Response tokens 0, line 3) raises by default, is dropped or clamped."""
    path = write(tmp_path, "BurstGPT_1.csv", BURSTGPT)
    assert detect_format(path) == "burstgpt"
    with pytest.raises(
        TraceError, match="line 3: Response tokens must be an integer >= 1, got '0'"
    ):
        read_trace(path)
    dropped = read_trace(path, zero_output="drop")
    # times 10, 12.5, 20 re-zeroed to the first: 0, 2.5, 10
    assert dropped.arrival_s.tolist() == [0.0, 2.5, 10.0]
    assert dropped.prompt_tokens.tolist() == [200, 30, 400]
    assert dropped.output_tokens.tolist() == [40, 7, 100]
    clamped = read_burstgpt(path, zero_output="clamp")
    assert clamped.output_tokens.tolist() == [40, 1, 7, 100]


def test_burstgpt_keeps_model_and_log_type_on_request(tmp_path):
    """keep_labels adds model and log_type columns, row by row."""
    w = read_burstgpt(write(tmp_path, "b.csv", BURSTGPT), zero_output="drop", keep_labels=True)
    assert w["model"].tolist() == ["ChatGPT", "ChatGPT", "GPT-4"]
    assert w["log_type"].tolist() == ["Conversation log", "Conversation log", "API log"]
    assert "model" not in read_burstgpt(write(tmp_path, "c.csv", BURSTGPT), zero_output="drop")


def test_burstgpt_bad_timestamp_names_line(tmp_path):
    """A timestamp that is not a number is reported with its line."""
    text = BURSTGPT.replace("12.5,ChatGPT", "soon,ChatGPT")
    with pytest.raises(
        TraceError, match="b.csv line 4: Timestamp must be a finite number, got 'soon'"
    ):
        read_burstgpt(write(tmp_path, "b.csv", text), zero_output="drop")


# -- Vidur ---------------------------------------------------------------------------------------


def test_vidur_request_trace_is_detected_and_read(tmp_path):
    """arrived_at with the two length columns is a 'vidur' trace with its own arrival times."""
    path = write(tmp_path, "requests.csv", VIDUR)
    assert detect_format(path) == "vidur"
    w = read_trace(path)
    # 3.5, 3.625, 4.0 s re-zeroed to the first request
    assert w.arrival_s.tolist() == [0.0, 0.125, 0.5]
    assert w.prompt_tokens.tolist() == [591, 547, 12]
    assert w.output_tokens.tolist() == [140, 248, 1]
    assert read_vidur(path, limit=2).output_tokens.tolist() == [140, 248]


def test_vidur_unsorted_rows_and_bad_lengths(tmp_path):
    """Rows out of order are sorted (or refused); a negative length names its line."""
    path = write(
        tmp_path, "r.csv", "arrived_at,num_prefill_tokens,num_decode_tokens\n2,5,5\n1,6,6\n"
    )
    assert read_vidur(path).prompt_tokens.tolist() == [6, 5]
    with pytest.raises(TraceError, match="line 3: arrived_at must be non-decreasing"):
        read_vidur(path, unsorted="error")
    bad = write(tmp_path, "s.csv", "arrived_at,num_prefill_tokens,num_decode_tokens\n0,-5,5\n")
    with pytest.raises(
        TraceError, match="s.csv line 2: num_prefill_tokens must be an integer >= 1"
    ):
        read_vidur(bad)


# -- read_workload -------------------------------------------------------------------------------


def test_length_only_trace_needs_an_arrival_process():
    """Without arrivals the arXiv trace is a TraceError naming arrivals= and rate= (no TypeError)."""
    with pytest.raises(TraceError) as info:
        read_workload("arxiv_summarization")
    message = str(info.value)
    assert message.startswith("arxiv_summarization_lengths_llama2.csv: a length-only trace")
    assert "pass arrivals='poisson' or 'gamma' or 'uniform' and rate=" in message
    assert "pass --arrivals poisson or gamma or uniform and --rate" in info.value.cli_message
    with pytest.raises(TraceError, match="length-only trace"):
        read_trace(trace_path("arxiv_summarization"))


def test_poisson_arrivals_on_a_length_only_trace():
    """arrivals='poisson', rate=2 on 20,000 rows: mean gap 0.5 s within 4 standard errors."""
    w = read_workload("arxiv_summarization", arrivals="poisson", rate=2.0, seed=3, limit=20_000)
    gaps = np.diff(w.arrival_s)
    # exponential gaps have sd = mean = 0.5 s; the mean of 19,999 has sd 0.5 / sqrt(19999)
    assert abs(gaps.mean() - 0.5) < 4 * 0.5 / np.sqrt(len(gaps))
    again = read_workload("arxiv_summarization", arrivals="poisson", rate=2.0, seed=3, limit=20_000)
    assert np.array_equal(again.arrival_s, w.arrival_s)


def test_arrivals_replace_a_traces_own_times_and_rate_alone_rescales():
    """arrivals= retimes a timed trace (rows keep their order); rate= alone time-scales it."""
    own = read_workload("azure_conv_2023", limit=200)
    uniform = read_workload("azure_conv_2023", limit=200, arrivals="uniform", rate=4.0)
    # uniform at 4/s: request i at i / 4 s, prompts in file order
    assert uniform.arrival_s[:3].tolist() == [0.0, 0.25, 0.5]
    assert np.array_equal(uniform.prompt_tokens, own.prompt_tokens)
    scaled = read_workload("azure_conv_2023", limit=200, rate=10.0)
    # (n - 1) / span is exactly the asked rate after time scaling
    assert mean_rate(scaled) == pytest.approx(10.0, rel=1e-12)


def test_gamma_arrivals_with_cv_and_options_that_do_not_apply():
    """cv needs gamma; arrivals need a rate; columns need the generic format."""
    w = read_workload("arxiv_summarization", arrivals="gamma", rate=5.0, cv=2.0, seed=1)
    gaps = np.diff(w.arrival_s)
    # 28,256 gamma gaps with CV 2: the sample CV is 2 within 10%
    assert gaps.std() / gaps.mean() == pytest.approx(2.0, rel=0.1)
    with pytest.raises(ValueError, match="cv= applies to gamma arrivals only"):
        read_workload("arxiv_summarization", arrivals="poisson", rate=5.0, cv=2.0, seed=1)
    with pytest.raises(ValueError, match="poisson arrivals need their mean rate: pass rate="):
        read_workload("arxiv_summarization", arrivals="poisson", seed=1)
    with pytest.raises(ValueError, match="columns= applies to the generic format only"):
        read_workload("azure_conv_2023", format="azure", columns="arrival_s=TIMESTAMP")


def test_generic_format_through_a_column_string(tmp_path):
    """'arrival_s=ts,prompt_tokens=in,output_tokens=out' maps a CSV with its own names."""
    path = write(tmp_path, "mine.csv", "ts,in,out\n1500,10,3\n2000,20,4\n")
    w = read_workload(
        path, columns="arrival_s=ts, prompt_tokens=in, output_tokens=out", time_unit="ms"
    )
    # 1500 ms and 2000 ms -> 0 and 0.5 s
    assert w.arrival_s.tolist() == [0.0, 0.5]
    assert w.output_tokens.tolist() == [3, 4]
    with pytest.raises(ValueError, match="generic format needs a column mapping: pass columns="):
        read_workload(path, format="generic")
    with pytest.raises(ValueError, match="columns= takes WORKLOAD=FILE pairs"):
        parse_columns("arrival_s:ts")
    with pytest.raises(ValueError, match="maps the workload column 'arrival_s' twice"):
        parse_columns("arrival_s=a,arrival_s=b")


def test_snapshot_reads_a_length_only_trace_in_file_order():
    """order_only: a length-only trace without arrivals keeps its order (1 s apart)."""
    w = read_workload("arxiv_summarization", order_only=True, limit=3)
    # the first three lines of the file: 3772/54, then the next two rows
    assert w.prompt_tokens[0] == 3772
    assert w.arrival_s.tolist() == [0.0, 1.0, 2.0]
