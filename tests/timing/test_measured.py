"""Readers of the vendored serving measurements and the iteration shapes they give."""

from __future__ import annotations

import numpy as np
import pytest
from slolab.timing.measured import (
    MeasuredRun,
    read_distserve_fits,
    read_inference_sim_runs,
    request_run_samples,
)


def test_distserve_fits_read_with_their_coefficients():
    """Seven (model, TP) fits; OPT-13B at TP 1 prices a 1000-token prefill from its line."""
    fits = read_distserve_fits()
    assert [(f.model, f.tp) for f in fits] == [
        ("opt-13b", 1),
        ("opt-13b", 2),
        ("opt-13b", 4),
        ("opt-66b", 2),
        ("opt-66b", 3),
        ("opt-66b", 4),
        ("opt-66b", 8),
    ]
    # 22.0522 + 0.1405092 * 1000 + 8.07658e-6 * 1000^2 = 22.0522 + 140.5092 + 8.0766 = 170.638 ms
    assert fits[0].prefill_s(np.array([1000.0])) == pytest.approx(0.170638, rel=1e-5)
    # batch 1 at context 100 (below the threshold of 95): 23.47504 + 0.0592934 + 0.0607269
    assert fits[0].decode_s(1, 100) == pytest.approx(0.0235951, rel=1e-5)


def test_malformed_distserve_value_names_file_line_field_and_value(tmp_path):
    """A coefficient that is not a number is reported with its file, line, field and value."""
    path = tmp_path / "fits.json"
    path.write_text(
        '{\n "facebook/opt-13b": {\n  "1": {\n   "decoding_large_small_bs_threshold": 95,\n'
        '   "prefill": [1.0, "x", 2.0],\n   "decoding_smallbs": [1, 2, 3],\n'
        '   "decoding_largebs": [1, 2, 3]\n  }\n }\n}\n'
    )
    with pytest.raises(ValueError) as error:
        read_distserve_fits(path)
    message = str(error.value)
    # "prefill" is on line 5 of the file
    assert message.startswith(
        f"{path}: line 5: field facebook/opt-13b/1/prefill, value [1.0, 'x', 2.0]"
    )
    assert "\n" not in message


def test_malformed_request_row_names_file_line_field_and_value(tmp_path):
    """A negative TTFT on the second data row is reported as line 3 of the CSV."""
    manifest = tmp_path / "runs.json"
    manifest.write_text(
        '{"runs": [{"run": "r", "csv": "r.csv", "model": "llama2-7b", "gpu": "h100",'
        ' "vllm_version": "0.11.0", "tensor_parallel": 1, "max_num_seqs": 8,'
        ' "max_num_batched_tokens": 64, "kv_cache_tokens": 1000, "prefix_tokens": 0}]}'
    )
    (tmp_path / "r.csv").write_text(
        "arrival_s,ttft_s,e2e_s,queue_s,prefill_s,decode_s,prompt_tokens,output_tokens\n"
        "0,0.1,0.5,0,0.1,0.4,10,5\n"
        "1,-0.2,0.5,0,0.1,0.4,10,5\n"
    )
    with pytest.raises(ValueError, match=r"r\.csv: line 3: field ttft_s, value '-0\.2'"):
        read_inference_sim_runs(manifest)


def test_inference_sim_runs_say_what_was_served():
    """Four vLLM 0.11 runs on an H100; the run named after Llama-7B served CodeLlama-34B."""
    runs = {r.name: r for r in read_inference_sim_runs()}
    assert sorted(runs) == [
        "jan20-codellama-prefill-1",
        "jan20-codellama-train-1",
        "jan20-prefill-llama7b-tp1-1",
        "jan21-llama7b-train-1",
    ]
    assert {r.gpu for r in runs.values()} == {"h100"}
    assert {r.engine for r in runs.values()} == {"vllm-0.11.0"}
    misnamed = runs["jan20-prefill-llama7b-tp1-1"]
    assert (misnamed.model, len(misnamed.requests["arrival_s"])) == ("codellama-34b", 197)
    assert runs["jan20-codellama-prefill-1"].max_num_batched_tokens == 64


def _run(prefix: int) -> MeasuredRun:
    """Two requests that do not overlap; the second has 150 prompt and 3 output tokens."""
    requests = {
        "arrival_s": np.array([0.0, 10.0]),
        "ttft_s": np.array([0.1, 0.2]),
        "e2e_s": np.array([0.5, 0.3]),
        "queue_s": np.array([0.0, 0.0]),
        "prefill_s": np.array([0.1, 0.18]),
        "decode_s": np.array([0.4, 0.1]),
        "prompt_tokens": np.array([100.0, 150.0]),
        "output_tokens": np.array([5.0, 3.0]),
    }
    return MeasuredRun("r", "llama2-7b", "h100", 1, "vllm", 8, 64, 1000, prefix, 0.0, "", requests)


def test_request_samples_chunk_the_uncached_prompt():
    """With a 32-token cached prefix, 118 prompt tokens run as chunks of 64 and 54."""
    prefill, decode = request_run_samples(_run(prefix=32))
    # chunk 1: 64 tokens after 32: work 64 * (32 + 65/2) = 4128; chunk 2: 54 after 96:
    # 54 * (96 + 55/2) = 6669
    assert prefill.features[:, 0].tolist() == [64.0, 54.0]
    assert prefill.features[:, 4].tolist() == [4128.0, 6669.0]
    # 0.18 s over 2 iterations
    assert prefill.measured_s == 0.18 and prefill.iterations == 2
    # decode steps at contexts 151 and 152 (3 output tokens: 2 steps after the first)
    assert decode.features[:, 3].tolist() == [151.0, 152.0]


def test_first_request_of_a_run_is_left_out_as_warm_up():
    """Only the second request gives samples: the first pays the engine's warm-up."""
    samples = request_run_samples(_run(prefix=0))
    # one prefill and one decode sample, both of the 150-token request: 150 = 64 + 64 + 22
    assert [s.phase for s in samples] == ["prefill", "decode"]
    assert samples[0].features[:, 0].tolist() == [64.0, 64.0, 22.0]
