"""The DP's fast pruning and its one-pass transitions decide exactly as the former code."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from slolab.harness.serving import ServingSetup
from slolab.heuristics import slos_serve, slos_serve_dp
from slolab.heuristics.slos_serve_dp import (
    _dominance_order,
    _dp_layers,
    _front_by_table,
    _group_keys,
    _keep_breakpoints,
    _Layer,
    _slot_patterns,
)
from slolab.models.slos_admission import AdmissionProblem, batch_process
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


def test_keep_breakpoints_many_values_sorts() -> None:
    """Distinct float values (too many cells for the table): the sort path, same states."""
    rng = np.random.default_rng(11)
    n = 2_000
    layer = _Layer(
        rng.integers(0, 50, n),
        rng.integers(0, 30, n),
        rng.integers(0, 4, (n, 2)),
        rng.random(n),
        rng.integers(0, 5, n),
        np.arange(n),
    )
    key = _group_keys([layer.mem, *layer.cnt.T])
    # about 50 x 16 = 800 groups x 2,000 values > 4 x 2,000 + 1,024 cells: no table
    assert _front_by_table(key, layer.val, layer.pb) is None
    fast, slow = _keep_breakpoints(layer), reference_keep_breakpoints(layer)
    assert 0 < len(fast) < n
    for name in _Layer.__slots__:
        np.testing.assert_array_equal(getattr(fast, name), getattr(slow, name))


def test_keep_breakpoints_signed_zero_values() -> None:
    """Values 0.0 and -0.0 are one value (as the sort ranks them): the first row is kept."""
    layer = _Layer(
        np.zeros(4, dtype="int64"),
        np.array([3, 3, 1, 3]),
        np.zeros((4, 1), dtype="int64"),
        np.array([-0.0, 0.0, 0.5, 0.0]),
        np.zeros(4, dtype="int64"),
        np.arange(4),
    )
    kept = _front_by_table(np.zeros(4, dtype="int64"), layer.val, layer.pb)
    # one group: value 0.5 (row 2, budget 1) ranks first; rows 0, 1, 3 tie at value 0 and
    # budget 3 > 1, so the first of them (row 0) is kept as well
    np.testing.assert_array_equal(kept, [0, 2])
    np.testing.assert_array_equal(reference_keep_breakpoints(layer).pred_idx, [0, 2])
    np.testing.assert_array_equal(_keep_breakpoints(layer).pred_idx, [0, 2])


def reference_layers(
    problem: AdmissionProblem, u_mem: int, u_pb: int
) -> tuple[list[_Layer | None], int, int]:
    """The DP's layers as computed before the one-pass window: each predecessor in turn, the
    parts concatenated and pruned by the lexsort (states explored and kept as reported)."""
    proc = batch_process(problem)
    cap_tokens, n_batches, slots = proc.batch_tokens, proc.n_batches, proc.tier_slots
    n_tiers, tier = slots.shape[0], problem.tier
    prefill = problem.remaining_prefill_tokens
    mem_units = np.where(problem.running, 0, -(-problem.kv_tokens // u_mem))
    mem_cap = (problem.kv_capacity_tokens - int(problem.kv_tokens[problem.running].sum())) // u_mem
    mask_bits, next_occurrence = _slot_patterns(proc)
    load_can_exceed = problem.n_requests > cap_tokens
    rows = np.flatnonzero(prefill > 0)
    order = np.lexsort((rows, ~problem.running[rows], proc.deadline_batch[rows]))
    node_row = np.concatenate([[-1], rows[order], [-1]])
    node_batch = np.concatenate([[0], proc.deadline_batch[node_row[1:-1]], [n_batches]])
    node_forced = np.concatenate([[True], problem.running[node_row[1:-1]], [True]])
    layers: list[_Layer | None] = [None] * len(node_row)
    if mem_cap >= 0:
        init_cnt = np.bincount(tier[problem.decoding], minlength=n_tiers)[None, :]
        one = np.zeros(1, dtype="int64")
        layers[0] = _Layer(one, one, init_cnt.astype("int64"), np.zeros(1), one - 1, one - 1)
    explored, kept, last_forced = 0, 1, 0
    for i in range(1, len(node_row)):
        r = int(node_row[i])
        p_i = 0 if r < 0 else int(prefill[r])
        m_i = 0 if r < 0 else int(mem_units[r])
        v_i = 0.0 if r < 0 or problem.running[r] else float(problem.value[r])
        step = np.zeros(n_tiers, dtype="int64")
        if r >= 0:
            step[tier[r]] = 1
        parts: list[_Layer] = []
        for j in range(last_forced, i):
            pred = layers[j]
            if pred is None:
                continue
            explored += len(pred)
            a, c = int(node_batch[j]), int(node_batch[i])
            budget = (
                pred.pb * u_pb
                + ((c - a) * cap_tokens - p_i)
                - pred.cnt @ (slots[:, c] - slots[:, a])
            )
            ok = budget >= 0
            if m_i:
                ok &= pred.mem <= mem_cap - m_i
            occurring = next_occurrence[:, a] < c
            if load_can_exceed and occurring.any():
                ok &= (pred.cnt @ mask_bits[:, occurring] <= cap_tokens).all(axis=1)
            idx = np.flatnonzero(ok)
            if idx.size:
                parts.append(
                    _Layer(
                        pred.mem[idx] + m_i,
                        budget[idx] // u_pb,
                        pred.cnt[idx] + step,
                        pred.val[idx] + v_i,
                        np.full(idx.size, j),
                        idx,
                    )
                )
        if len(parts) > 1:
            joined = (np.concatenate([getattr(p, f) for p in parts]) for f in _Layer.__slots__)
            layers[i] = reference_keep_breakpoints(_Layer(*joined))
        elif parts:
            layers[i] = parts[0]
        kept += 0 if layers[i] is None else len(layers[i])
        if node_forced[i]:
            last_forced = i
    return layers, explored, kept


class _Captured(Exception):
    """Raised with the first admission problem of a burst, to stop the run there."""


def burst_problem(n: int, monkeypatch: pytest.MonkeyPatch) -> AdmissionProblem:
    """The admission problem of the first call that sees at least n / 2 of a burst of the first
    n Mooncake requests (one server, 10^6 req/s)."""

    def capture(problem: AdmissionProblem, *units: int) -> Any:
        if problem.n_requests >= n // 2:
            raise _Captured(problem)
        return slos_serve_dp.slos_dp(problem, *units)

    monkeypatch.setattr(slos_serve, "slos_dp", capture)
    # caching off, as the counts below were recorded (with the default prefix cache the
    # burst's problem is another one, and its 1,024-request DP outgrows 5 GB)
    setup = ServingSetup(
        "mooncake_conversation", policy="slos-serve", servers=1, limit=n, prefix_cache="off"
    )
    instance, sched = setup.prepare(setup.instance(rate=1e6))
    with pytest.raises(_Captured) as caught:
        run(instance, sched.policy, sched.router, seed=0, record_iterations=False)
    monkeypatch.undo()
    problem: AdmissionProblem = caught.value.args[0]
    return problem


@pytest.mark.parametrize(("n", "memory_unit", "budget_unit"), [(1024, 64, 1), (256, 64, 16)])
def test_burst_layers_identical(
    n: int, memory_unit: int, budget_unit: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Mooncake burst's first DP (1,024 queued; 256 at coarser budget): every state identical."""
    problem = burst_problem(n, monkeypatch)
    # running requests still prefilling are forced nodes inside the chain: the window restarts
    assert (problem.running & (problem.remaining_prefill_tokens > 0)).any()
    layers, node_row, explored, kept = _dp_layers(
        problem, batch_process(problem), memory_unit, budget_unit
    )
    expected, expected_explored, expected_kept = reference_layers(problem, memory_unit, budget_unit)
    assert len(layers) == len(expected) == len(node_row)
    for layer, reference in zip(layers, expected, strict=True):
        assert (layer is None) == (reference is None)
        if layer is not None and reference is not None:
            for name in _Layer.__slots__:
                np.testing.assert_array_equal(getattr(layer, name), getattr(reference, name))
    # 1,024 queued at the policy's units: 139,477,066 states explored, 1,627,788 kept
    assert (explored, kept) == (expected_explored, expected_kept)
    print(n, memory_unit, budget_unit, "explored", explored, "kept", kept)
