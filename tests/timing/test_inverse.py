"""time_to_tokens and time2bs: hand-computed answers and exactness as a property."""

from hypothesis import given, settings
from hypothesis import strategies as st
from slolab.timing import (
    LinearTiming,
    MeanLengthTiming,
    PhaseSumTiming,
    ProfiledTiming,
    RooflineTiming,
    ThresholdTiming,
    available_presets,
    preset,
    time2bs,
    time_to_tokens,
)


def _chunk_time(model, n, decode_seqs, decode_kv_tokens, prefix):
    return model.time_of(
        prefill_tokens=n,
        num_prefill_seqs=1.0 if n > 0 else 0.0,
        prefill_attention_work=n * (prefix + (n + 1) / 2),
        decode_tokens=decode_seqs,
        num_decode_seqs=decode_seqs,
        decode_kv_tokens=decode_kv_tokens,
    )


QUADRATIC = LinearTiming(
    0.01,
    {
        "prefill_tokens": 1e-5,
        "prefill_attention_work": 1e-8,
        "decode_kv_tokens": 1e-7,
        "num_decode_seqs": 1e-4,
    },
)


def test_time_to_tokens_solves_the_attention_quadratic():
    """With a prefill-attention term the chunk solves a quadratic, rounded down."""
    # C = 0.01 + 10 * 1e-4 + 10,000 * 1e-7 = 0.012, room = 0.008;
    # T(n) - C = 1e-5 n + 1e-8 n (n + 1) / 2 = 5e-9 n^2 + 1.0005e-5 n;
    # n = (-1.0005e-5 + sqrt(1.00100025e-10 + 1.6e-10)) / 1e-8 = 612.26 -> 612
    # check: T(612) - C = 0.00612 + 187,578e-8 = 0.00799578 <= 0.008,
    #        T(613) - C = 0.00613 + 188,191e-8 = 0.00801191 > 0.008
    assert time_to_tokens(QUADRATIC, 0.020, decode_seqs=10, decode_kv_tokens=10_000) == 612


def test_time_to_tokens_with_a_prefix():
    """A cached prefix makes every chunk token attend to more keys."""
    model = LinearTiming(0.0, {"prefill_attention_work": 1e-6})
    # work(n) = n (1000 + (n + 1) / 2); budget 0.1 s -> work <= 100,000:
    # n = 95: 95 * 1048 = 99,560 <= 100,000; n = 96: 96 * 1048.5 = 100,656 > 100,000
    assert time_to_tokens(model, 0.1, prefill_prefix=1000) == 95


def test_time_to_tokens_is_zero_when_the_decode_part_is_over_budget():
    """If the decode sequences alone exceed the budget no chunk fits."""
    # decode part: 0.012 s > 0.011 s
    assert time_to_tokens(QUADRATIC, 0.011, decode_seqs=10, decode_kv_tokens=10_000) == 0


def test_time_to_tokens_caps_at_max_tokens():
    """A model whose time does not grow with tokens returns the cap."""
    flat = LinearTiming(0.01, {"num_decode_seqs": 1e-4})
    # time is 0.01 for every chunk, under 0.02
    assert time_to_tokens(flat, 0.02, max_tokens=5000) == 5000
    flat_table = ProfiledTiming(
        [1, 2], [0, 1], [[0.01, 0.01], [0.01, 0.01]], batch_axis="sequences"
    )
    assert time_to_tokens(flat_table, 0.02, max_tokens=777) == 777


def test_time2bs_on_slos_serve_presets():
    """SLOs-Serve's time2bs for its published rooflines."""
    # OPT-13B/H100: (0.05 - 0.02743) / 4.177e-5 = 540.34 -> 540
    assert time2bs(preset("opt-13b-h100-slos"), 0.05) == 540
    # OPT-6.7B/A100: line 1 (0.05 - 0.0248) / 6.878e-5 = 366.39, line 2 (0.05 - 0.003033) /
    # 7.523e-5 = 624.31 -> min 366
    assert time2bs(preset("opt-6.7b-a100-slos"), 0.05) == 366
    # OPT-30B with 2 spec steps: (0.1 - 0.03788 - 2 * 0.002797) / 9.314e-5 = 606.89 -> 606
    assert time2bs(preset("opt-30b-4gpu-slos"), 0.1, spec_steps=2) == 606


def test_time2bs_is_zero_below_the_intercept():
    """A batch shorter than the fixed cost carries no tokens."""
    # 0.02 < 0.02743
    assert time2bs(preset("opt-13b-h100-slos"), 0.02) == 0


def test_time_to_tokens_on_a_phase_sum_pays_the_prefill_intercept():
    """A phase-sum model charges the prefill part's intercept once a chunk joins."""
    model = PhaseSumTiming(
        LinearTiming(0.02, {"prefill_tokens": 1e-4}),
        LinearTiming(0.01, {"num_decode_seqs": 1e-3}),
    )
    # decode part 0.01 + 5e-3 = 0.015; left 0.04505 - 0.015 = 0.03005 = 0.02 + n * 1e-4
    # -> n = 100.5 -> 100
    assert time_to_tokens(model, 0.04505, decode_seqs=5) == 100
    # without decode sequences the decode intercept is not paid: (0.04505 - 0.02) / 1e-4 = 250.5
    assert time_to_tokens(model, 0.04505) == 250


def _linear_models():
    coef = st.floats(0.0, 1e-3, allow_subnormal=False)
    return st.builds(
        lambda b, pt, pw, kv, nd, nps: LinearTiming(
            b,
            {
                "prefill_tokens": pt,
                "decode_tokens": pt,
                "prefill_attention_work": pw * 1e-3,
                "decode_kv_tokens": kv * 1e-3,
                "num_decode_seqs": nd,
                "num_prefill_seqs": nps,
            },
        ),
        st.floats(0.0, 0.05),
        coef,
        coef,
        coef,
        coef,
        coef,
    )


def _rooflines():
    return st.lists(_linear_models(), min_size=1, max_size=3).map(RooflineTiming)


def _profiled():
    return st.builds(
        lambda base, per_token, per_kv: ProfiledTiming.from_model(
            LinearTiming(base, {"decode_tokens": per_token, "decode_kv_tokens": per_kv}),
            [1, 8, 64, 512, 4096],
            [0, 1_000, 50_000, 500_000],
        ),
        st.floats(0.001, 0.05),
        st.floats(1e-6, 1e-3),
        st.floats(1e-9, 1e-6),
    )


def _composites():
    return st.builds(
        lambda prefill, small, large, threshold, mean_coef: PhaseSumTiming(
            MeanLengthTiming(prefill, prefill_length_coef_s=mean_coef),
            ThresholdTiming("num_decode_seqs", threshold, small, large),
        ),
        _linear_models(),
        _linear_models(),
        _linear_models(),
        st.integers(1, 200),
        st.floats(0.0, 1e-4),
    )


MODELS = st.one_of(
    _linear_models(),
    _rooflines(),
    _profiled(),
    _composites(),
    st.sampled_from(available_presets()).map(preset),
)


@settings(max_examples=150, deadline=None, derandomize=True)
@given(
    model=MODELS,
    budget=st.floats(0.001, 0.5),
    decode_seqs=st.integers(0, 256),
    context=st.integers(0, 4096),
    prefix=st.integers(0, 8192),
)
def test_time_to_tokens_is_exact(model, budget, decode_seqs, context, prefix):
    """n fits the budget and n + 1 does not (0 when the decode part alone is over it)."""
    kv = decode_seqs * context
    n = time_to_tokens(model, budget, decode_seqs, kv, prefix, max_tokens=1 << 22)
    if _chunk_time(model, 0, decode_seqs, kv, prefix) > budget:
        assert n == 0
        return
    assert _chunk_time(model, n, decode_seqs, kv, prefix) <= budget
    assert n == 1 << 22 or _chunk_time(model, n + 1, decode_seqs, kv, prefix) > budget


@settings(max_examples=80, deadline=None, derandomize=True)
@given(model=MODELS, budget=st.floats(0.001, 0.5), spec_steps=st.integers(0, 4))
def test_time2bs_is_exact(model, budget, spec_steps):
    """time2bs(t0) tokens fit in t0 and one more token does not."""
    n = time2bs(model, budget, spec_steps=spec_steps, max_tokens=1 << 22)
    if n == 0:
        assert model.time_of(prefill_tokens=1, spec_steps=spec_steps) > budget
        return
    assert model.time_of(prefill_tokens=n, spec_steps=spec_steps) <= budget
    assert n == 1 << 22 or model.time_of(prefill_tokens=n + 1, spec_steps=spec_steps) > budget
