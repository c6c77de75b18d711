"""The DP's fast dominance sort decides exactly as the lexsort it replaces."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from slolab.harness.serving import ServingSetup
from slolab.heuristics import slos_serve_dp
from slolab.heuristics.slos_serve_dp import _dominance_order, _group_keys, _keep_breakpoints, _Layer
from slolab.sim import check, run


def reference_keep_breakpoints(layer: _Layer) -> _Layer:
    """The pruning as written before the single-key sort: a three-key lexsort."""
    if len(layer) < 2:
        return layer
    key = _group_keys([layer.mem, *layer.cnt.T])
    order = np.lexsort((-layer.pb, -layer.val, key))
    sorted_key = key[order]
    new_group = np.ones(len(order), dtype=bool)
    new_group[1:] = sorted_key[1:] != sorted_key[:-1]
    group = np.cumsum(new_group) - 1
    lifted = layer.pb[order] + group * (int(layer.pb.max()) + 1)
    best_before = np.empty_like(lifted)
    best_before[0] = -1
    best_before[1:] = np.maximum.accumulate(lifted)[:-1]
    keep = np.sort(order[lifted > best_before])
    fields = (layer.mem, layer.pb, layer.cnt, layer.val, layer.pred_node, layer.pred_idx)
    return _Layer(*(f[keep] for f in fields))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_order_equals_lexsort_on_ties(seed: int) -> None:
    """Random keys with many ties (values in 0.5 steps, -0.0 among them): same permutation."""
    rng = np.random.default_rng(seed)
    n = 5_000
    key = rng.integers(0, 40, n)
    val = rng.integers(-3, 20, n) * 0.5 * rng.choice([1.0, -1.0], n)
    pb = rng.integers(0, 50, n)
    order = _dominance_order(key, val, pb)
    np.testing.assert_array_equal(order, np.lexsort((-pb, -val, key)))
    # 5,000 rows over 40 x 45 x 50 cells: ties are certain, so row order decides some of them
    assert len(np.unique(np.column_stack([key, val, pb]), axis=0)) < n


def test_order_falls_back_when_the_key_overflows() -> None:
    """A key span near 2**62 takes the lexsort path: same permutation still."""
    key = np.array([2**61, 0, 2**61, 5])
    val = np.array([1.0, 2.0, 3.0, 2.0])
    pb = np.array([4, 4, 9, 1])
    # key 0 (row 1), key 5 (row 3), then key 2**61 with val 3.0 (row 2) before val 1.0 (row 0)
    np.testing.assert_array_equal(_dominance_order(key, val, pb), [1, 3, 2, 0])


def test_keep_breakpoints_equals_reference() -> None:
    """Random layers: every kept array equal to the reference pruning's."""
    rng = np.random.default_rng(7)
    n = 3_000
    layer = _Layer(
        rng.integers(0, 6, n),
        rng.integers(0, 30, n),
        rng.integers(0, 3, (n, 2)),
        rng.integers(0, 10, n) * 0.25,
        rng.integers(0, 5, n),
        np.arange(n),
    )
    fast, slow = _keep_breakpoints(layer), reference_keep_breakpoints(layer)
    assert 0 < len(fast) < n
    for name in _Layer.__slots__:
        np.testing.assert_array_equal(getattr(fast, name), getattr(slow, name))


def token_times(
    workload: str, n: int, rate: float, monkeypatch: pytest.MonkeyPatch, prune: Any
) -> tuple[np.ndarray, int]:
    """Token times of a seeded one-server run with ``prune`` as the DP's pruning, rows pruned."""
    pruned = [0]

    def counted(layer: _Layer) -> _Layer:
        kept = prune(layer)
        pruned[0] += len(layer) - len(kept)
        return kept

    monkeypatch.setattr(slos_serve_dp, "_keep_breakpoints", counted)
    setup = ServingSetup(workload, policy="slos-serve", router=None, servers=1, limit=n)
    instance, sched = setup.prepare(setup.instance(rate=rate))
    out = run(instance, sched.policy, sched.router, seed=0)
    monkeypatch.undo()
    assert check(instance, out) == []
    return out.token_times.copy(), pruned[0]


@pytest.mark.parametrize(
    ("workload", "n", "rate"),
    [("azure_conv_2023", 300, 400.0), ("mooncake_conversation", 200, 1e4)],
)
def test_online_runs_identical(
    workload: str, n: int, rate: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Seeded online runs (300 Azure at 400/s, a 200-request Mooncake burst): same token times."""
    fast, fast_pruned = token_times(workload, n, rate, monkeypatch, _keep_breakpoints)
    slow, slow_pruned = token_times(workload, n, rate, monkeypatch, reference_keep_breakpoints)
    np.testing.assert_array_equal(fast, slow)
    # the pruning ran and dropped the same number of dominated states in both runs
    assert fast_pruned == slow_pruned > 0
    print(workload, "pruned", fast_pruned, "tokens", int(np.isfinite(fast).sum()))
