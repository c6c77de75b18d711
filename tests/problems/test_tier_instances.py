"""PolyServe's evaluation stream (stream_instance): the synthetic and sampled lengths, Poisson
arrivals that scale with the rate alone, the H200 cluster and the settings."""

from __future__ import annotations

import numpy as np
import pytest
from slolab.instances import read_workload, uniform_lengths
from slolab.problems.tier_partition import stream_instance

# PolyServe's TPOT tiers (Sec. 5.1): tier j has TPOT (20, 30, 50, 100 ms)[j]
TIER_TPOT_S = (0.02, 0.03, 0.05, 0.1)


def test_uniform_stream_is_the_synthetic_trace_with_polyserve_slos():
    """The uniform stream draws [1, 8192] x [1, 2048] lengths and tiered SLOs on H200 servers."""
    inst = stream_instance("uniform", 50, 2.0, seed=3, servers=4)
    wl = inst.workload
    # the same draw as the synthetic trace's own builder (lengths depend on the seed only)
    ref = uniform_lengths(50, 8192, 2048, rate=1.0, seed=3)
    assert np.array_equal(wl.prompt_tokens, ref.prompt_tokens)
    assert np.array_equal(wl.output_tokens, ref.output_tokens)
    assert wl.prompt_tokens.min() >= 1 and wl.prompt_tokens.max() <= 8192
    assert wl.output_tokens.min() >= 1 and wl.output_tokens.max() <= 2048
    # every servable request carries its tier's TPOT
    tier = np.asarray(wl["tier"])
    tpot = np.asarray(wl["tpot_slo_s"])
    for j, tpot_s in enumerate(TIER_TPOT_S):
        assert np.all(tpot[tier == j] == tpot_s)
    # Llama-3.1-8B on one H200: 845,642 KV tokens; vLLM's sequence cap raised to 4,096
    assert inst.cluster.kv_capacity_tokens == 845_642 and inst.cluster.max_batch_size == 4096
    assert inst.cluster.servers == 4
    # Llama-3.1-8B's KV: 32 layers x 8 KV heads x 128 x (K, V) x 2 B = 131,072 B per token;
    # a 1,000-token cache over the default 25 GB/s moves in 1000 * 131072 / 25e9 = 5.24 ms
    assert inst.cluster.kv_bytes_per_token == 131_072
    assert inst.cluster.kv_transfer_s(1000) == pytest.approx(5.24288e-3, rel=1e-12)
    assert inst.settings == {"seed": 3, "rate": 2.0, "servers": 4, "mode": "colocated"}
    assert inst.name == "uniform-50-co-4srv" and inst.problem == "tier-partition"


def test_arrivals_scale_with_the_rate_and_nothing_else_changes():
    """Doubling the rate halves every arrival time; lengths and SLOs stay the same."""
    slow = stream_instance("uniform", 40, 2.0, seed=5)
    fast = stream_instance("uniform", 40, 4.0, seed=5)
    # Poisson gaps are exponential of mean 1/rate from one seed: 1/4 = (1/2) / 2
    assert slow.workload.arrival_s[0] == 0.0
    assert np.allclose(fast.workload.arrival_s, slow.workload.arrival_s / 2, rtol=1e-12)
    for column in ("prompt_tokens", "output_tokens", "ttft_slo_s", "tpot_slo_s", "tier"):
        assert np.array_equal(np.asarray(fast.workload[column]), np.asarray(slow.workload[column]))


def test_trace_stream_samples_the_trace_rows():
    """A trace stream draws (prompt, output) pairs of the trace, the same ones for one seed."""
    trace = read_workload("azure_conv_2023", order_only=True)
    pairs = set(zip(trace.prompt_tokens.tolist(), trace.output_tokens.tolist(), strict=True))
    inst = stream_instance("azure_conv_2023", 30, 1.0, seed=7, mode="disaggregated")
    wl = inst.workload
    drawn = list(zip(wl.prompt_tokens.tolist(), wl.output_tokens.tolist(), strict=True))
    assert len(drawn) == 30 and all(pair in pairs for pair in drawn)
    again = stream_instance("azure_conv_2023", 30, 1.0, seed=7, mode="disaggregated")
    assert np.array_equal(again.workload.prompt_tokens, inst.workload.prompt_tokens)
    assert inst.settings["mode"] == "disaggregated" and inst.name.endswith("-di-20srv")


def test_stream_instance_refuses_bad_input():
    """Unknown modes, empty streams and empty fleets are refused with the value named."""
    with pytest.raises(ValueError, match="mode must be one of colocated, disaggregated"):
        stream_instance("uniform", 10, 1.0, seed=0, mode="static")
    with pytest.raises(ValueError, match="n must be >= 1, got 0"):
        stream_instance("uniform", 0, 1.0, seed=0)
    with pytest.raises(ValueError, match="servers must be >= 1, got 0"):
        stream_instance("uniform", 10, 1.0, seed=0, servers=0)
