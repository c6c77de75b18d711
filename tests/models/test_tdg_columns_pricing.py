"""The column pricing's pruned programme (``completion_values``) against the programme over
every completion bucket at once that it replaced: on trace windows and random duals, the
``most`` best completion buckets and their values are the same floats, every bucket it leaves
out is worth no more than the last of them, and ``price`` returns the same columns."""

from __future__ import annotations

import numpy as np
import pytest
from slolab.models.tdg_columns import TdgHorizonColumns, completion_values, profile_terms
from slolab.problems.tdg_horizon import KEEP_OUTPUTS, horizon_window


def every_completion(
    t: dict, rho: np.ndarray, mu: np.ndarray, extra: np.ndarray | None
) -> np.ndarray:
    """The former programme: ``V_j`` for every completion bucket at once (one row each),
    ``O(n^2 k)``."""
    n, k_max = t["n"], t["k_max"]
    ks = np.arange(k_max + 1)
    value = np.full((n, k_max + 1), -np.inf)
    for j in range(n):
        F = t["decode_gain"] * t["on_time"][j] - rho[j] * t["need"]
        own = F - mu[j] * ks
        live = np.arange(n) < j
        if live.any():
            carried = np.maximum.accumulate(value[live] - F[None, :], axis=1)
            value[live] = own[None, :] + carried
        if t["allowed"][j]:
            row = np.full(k_max + 1, -np.inf)
            row[1:] = own[1:]
            value[j] = row
        over = ks[None, :] > t["cap"][: j + 1, j][:, None]
        value[: j + 1][over] = -np.inf
    best = np.max(value, axis=1) + t["first_gain"]
    return best if extra is None else best + extra


def former_column(model: TdgHorizonColumns, r: int, c: int, pi, mu, rho):
    """The former single-bucket programme with its choices kept: ``(tokens, work)``."""
    t = model.tables[r]
    n, k_max = t["n"], t["k_max"]
    ks = np.arange(k_max + 1)
    value = np.full(k_max + 1, -np.inf)
    choice = np.zeros((n, k_max + 1), dtype=np.int64)
    for j in range(c, n):
        F = t["decode_gain"] * t["on_time"][j] - rho[j] * t["need"]
        own = F - mu[j] * ks
        if j == c:
            value = np.full(k_max + 1, -np.inf)
            value[1:] = own[1:]
        else:
            shifted = value - F
            top = np.maximum.accumulate(shifted)
            arg = np.maximum.accumulate(np.where(shifted >= top, ks, 0))
            choice[j] = arg
            value = own + shifted[arg]
        value[ks > t["cap"][c, j]] = -np.inf
    tokens = np.zeros(n, dtype=np.int64)
    k = int(np.argmax(value))
    for j in range(n - 1, c - 1, -1):
        tokens[j] = k
        if j > c:
            k = int(choice[j, k])
    need = t["need"][tokens]
    work = np.zeros(n)
    cheapest = 0
    for j in range(n):
        if pi[j] < pi[cheapest]:
            cheapest = j
        if j >= c:
            work[cheapest] += need[j] - (need[j - 1] if j > 0 else 0.0)
    return tokens, work


@pytest.fixture(scope="module")
def windows() -> list[TdgHorizonColumns]:
    return [
        TdgHorizonColumns(
            horizon_window(
                "azure_code_2023", n=n, seed=0, load=load, max_output_tokens=KEEP_OUTPUTS
            )
        )
        for n, load in ((25, "high"), (40, "low"))
    ]


@pytest.mark.parametrize("seed", range(3))
def test_pruned_programme_keeps_the_best_buckets_and_their_values(windows, seed):
    """Random duals at four scales (0 to large, so that the best completion buckets move from
    the last to the first), with and without a per-bucket constant, ``most`` 1 and 3: the same
    ``most`` best buckets in the same order with the same values; every other bucket it computed has the
    former value; the ones it skipped are worth at most the last kept."""
    rng = np.random.default_rng(seed)
    compared = skipped = 0
    for model in windows:
        for r in model.requests:
            t = model.tables[r]
            n = t["n"]
            if not t["allowed"].any():
                continue
            scale = [0.0, 0.5, 5.0, 50.0][(r + seed) % 4]
            pi = np.maximum(rng.normal(scale, scale + 1e-3, n), 0.0)
            rho = np.minimum.accumulate(pi)
            mu = rng.exponential(0.05 * scale + 1e-3, n)
            extra = rng.normal(0.0, 1.0, n) if r % 2 else None
            former = every_completion(t, rho, mu, extra)
            for most in (1, 3):
                now = completion_values(t, profile_terms(t, rho, mu), most, extra)
                top_former = np.argsort(-former, kind="stable")[:most]
                top_now = np.argsort(-now, kind="stable")[:most]
                assert top_now.tolist() == top_former.tolist()
                assert now[top_now].tolist() == former[top_former].tolist()
                kept = np.isfinite(now)
                assert (now[kept] == former[kept]).all()
                last = former[top_former[-1]]
                assert (former[~kept] <= last).all()
                compared += int(kept.sum())
                skipped += int((~kept & np.isfinite(former)).sum())
    # the pruning acts: most of the buckets are never run through the programme
    assert compared > 0 and skipped > compared


def test_price_returns_the_former_columns(windows):
    """``price`` with ``most`` = 3: the columns and values the former programme's best three
    buckets give, each column's token profile, work and gain those of the former
    single-bucket programme (duals with ties, so that the cheapest bucket's tie rule acts)."""
    model = windows[0]
    rng = np.random.default_rng(7)
    for r in model.requests:
        t = model.tables[r]
        n = t["n"]
        pi = np.round(rng.exponential(2.0, n), 0)
        mu = rng.exponential(0.1, n)
        got = model.price(r, pi, mu, most=3)
        rho = np.minimum.accumulate(np.maximum(pi, 0.0))
        former = every_completion(t, rho, mu, None)
        order = [int(c) for c in np.argsort(-former, kind="stable")[:3] if former[c] > -np.inf]
        assert [col.complete for _, col in got] == order
        assert [v for v, _ in got] == [float(former[c]) for c in order]
        for _, col in got:
            tokens, work = former_column(model, r, col.complete, np.maximum(pi, 0.0), mu, rho)
            assert col.tokens.tolist() == tokens.tolist()
            assert col.work.tolist() == work.tolist()
            assert col.gain == model.column_gain(r, col.complete, tokens)
