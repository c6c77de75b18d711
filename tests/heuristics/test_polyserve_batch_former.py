"""Co-located PolyServe's batch former reads each line of the timing model with its
coefficients unpacked once per model: the chunk it allows is the former search's, to the
token, on every line form (the run-level identity is test_polyserve_colocated_identity.py's)."""

import math

from hypothesis import given, settings
from hypothesis import strategies as st
from slolab.heuristics.polyserve import PolyServePolicy
from slolab.timing import base
from slolab.timing.base import LinearTiming
from slolab.timing.forms import timing_lines
from slolab.timing.presets import preset

TIMINGS = {
    "roofline preset": preset("llama3.1-8b-h200"),
    "linear": LinearTiming(
        0.005,
        {
            "prefill_tokens": 2e-5,
            "decode_tokens": 1e-4,
            "decode_kv_tokens": 1e-7,
            "prefill_attention_work": 1e-9,
        },
    ),
    "linear, every term": LinearTiming(
        0.004,
        {
            "prefill_tokens": 3e-5,
            "decode_tokens": 7e-5,
            "num_decode_seqs": 2e-5,
            "decode_kv_tokens": 3e-8,
            "prefill_attention_work": 2e-9,
            "num_prefill_seqs": 1e-3,
        },
    ),
}


def former_chunk_within(timing, tau_s, shape, prefix, most):
    """The chunk search as the former code ran it (each coefficient read from its row)."""
    intercepts, coefs = timing_lines(timing)
    decode, decode_kv, tokens, work, seqs = shape
    best = most
    for b, row in zip(intercepts.tolist(), coefs.tolist(), strict=True):
        shape_s = (
            b
            + row[base.F_DECODE_TOKENS] * decode
            + row[base.F_NUM_DECODE] * decode
            + row[base.F_DECODE_KV] * decode_kv
            + row[base.F_PREFILL_TOKENS] * tokens
            + row[base.F_PREFILL_ATTN] * work
            + row[base.F_NUM_PREFILL] * (seqs + 1)
        )
        room = tau_s - shape_s
        if room < 0:
            return 0
        lin = row[base.F_PREFILL_TOKENS] + row[base.F_PREFILL_ATTN] * (prefix + 0.5)
        quad = row[base.F_PREFILL_ATTN] / 2.0
        if quad > 0:
            root = 2.0 * room / (lin + math.sqrt(lin * lin + 4.0 * quad * room))
        elif lin > 0:
            root = room / lin
        else:
            continue
        best = min(best, int(math.floor(root)))
    return max(best, 0)


@settings(max_examples=400, deadline=None, derandomize=True)
@given(
    name=st.sampled_from(sorted(TIMINGS)),
    tau_s=st.sampled_from([0.02, 0.03, 0.05, 0.1, 0.25]),
    decode=st.integers(0, 400),
    decode_kv=st.integers(0, 3_000_000),
    tokens=st.integers(0, 8_000),
    work=st.floats(0.0, 1e9),
    seqs=st.integers(0, 6),
    prefix=st.integers(0, 60_000),
    most=st.integers(1, 30_000),
)
def test_chunk_within_is_the_former_search(
    name, tau_s, decode, decode_kv, tokens, work, seqs, prefix, most
):
    """Random iteration shapes, on a roofline preset and two linear models (one with a
    coefficient on every term the search reads), asked twice (the lines converted, then
    reused): the former search's chunk every time."""
    timing = TIMINGS[name]
    shape = (decode, decode_kv, tokens, work, seqs)
    policy = PolyServePolicy(controller=None)  # type: ignore[arg-type]
    expected = former_chunk_within(timing, tau_s, shape, prefix, most)
    for _ in range(2):
        assert policy._chunk_within(timing, tau_s, shape, prefix, most) == expected


def test_chunk_within_answers_a_hand_case():
    """Linear model, empty batch, no prefix, 50 ms: a chunk of c tokens takes
    0.005 + 2e-5 c + 1e-9 c (c + 1) / 2 s, at c = 2,135 that is 0.005 + 0.0427 + 0.00228018 =
    0.04998018 s (within), at 2,136 it is 0.050002316 s (over): the chunk is 2,135."""
    policy = PolyServePolicy(controller=None)  # type: ignore[arg-type]
    assert policy._chunk_within(TIMINGS["linear"], 0.05, (0, 0, 0, 0.0, 0), 0, 10_000) == 2_135
