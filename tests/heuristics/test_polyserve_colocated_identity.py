"""Co-located PolyServe's admission reads the profile's chunk and the KV peak with fewer Python
calls (:meth:`Profile.max_chunk`, :func:`chunk_attention_work`, :func:`kv_peak`): the same
floats, so every token time and decision of seeded runs is the former one."""

import numpy as np
from slolab.heuristics.policies import make_scheduler
from slolab.heuristics.polyserve import chunk_attention_work, kv_peak
from slolab.models import tier_partition as tp
from slolab.problems.tier_partition import stream_instance
from slolab.sim import check
from test_polyserve_held_index import digest

#: Outcome digest (every recorded array, token times included, and the scaling events) and
#: routing decisions of the code before these changes on the Azure conversation stream (2,000
#: requests at 60 % of the fluid rate of 16 co-located servers, PolyServe's scaler on); the
#: Mooncake runs at 1 and 2 req/s on 8 servers are test_polyserve_held_retries.py's.
FORMER = ("33c5b28d2b84abd938ba5edbdc17a126431e9ef94ea8bab83787d8512b98c44c", 2012)


def former_chunk_attention_work(chunk: int, longest: int) -> float:
    """:func:`chunk_attention_work` as the former code computed it (divmod on every call)."""
    if chunk <= 0:
        return 0.0
    whole, rest = divmod(int(chunk), int(longest))
    return whole * longest * (longest + 1) / 2.0 + rest * (2 * longest - rest + 1) / 2.0


def former_kv_peak(contexts: np.ndarray, remaining: np.ndarray) -> float:
    """:func:`kv_peak` as the former code computed it (through NumPy's function wrappers)."""
    n = len(contexts)
    if n == 0:
        return 0.0
    order = np.argsort(remaining, kind="stable")
    suffix = np.cumsum(contexts[order][::-1])[::-1]
    return float(np.max(suffix + (n - np.arange(n)) * (remaining[order] - 1.0)))


def test_chunk_work_and_kv_peak_equal_the_former_floats():
    """2,000 random (chunk, longest) pairs and 300 random request sets (seeded): the same
    floats as the former computations, ties in the remaining steps included."""
    rng = np.random.default_rng(6)
    for chunk, longest in rng.integers(-3, 5_000, size=(2_000, 2)):
        longest = max(int(longest), 1)
        assert chunk_attention_work(int(chunk), longest) == former_chunk_attention_work(
            int(chunk), longest
        )
    for _ in range(300):
        n = int(rng.integers(1, 60))
        contexts = rng.integers(1, 9_000, n).astype(float)
        remaining = np.maximum(rng.choice([3.5, 17.25, 200.0], n) - rng.integers(0, 20, n), 1.0)
        assert kv_peak(contexts, remaining) == former_kv_peak(contexts, remaining)


def azure_run():
    """The Azure conversation stream on 16 co-located servers at 60 % of the fluid rate."""
    probe = stream_instance("azure_conv_2023", 2000, 1.0, seed=0, servers=16, mode="colocated")
    rate = 0.6 * tp.fluid_rate(probe, "colocated", 16)
    inst = stream_instance("azure_conv_2023", 2000, rate, seed=0, servers=16, mode="colocated")
    sched = make_scheduler("polyserve", inst, mode="colocated", servers=16)
    return sched.instance, sched.router, sched.run(sched.instance, seed=0)


def test_azure_colocated_run_keeps_the_former_outcome():
    """Azure conversation near 60 % of the fluid rate on 16 co-located servers: the same
    outcome (token times to the bit) and routing decisions as before."""
    instance, controller, out = azure_run()
    assert check(instance, out) == []
    assert (digest(out), controller.decisions) == FORMER
