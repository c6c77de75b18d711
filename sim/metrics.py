"""Metrics from an Outcome: the one evaluator every method is judged by.

Token ``k`` (1-based) of request ``r`` has deadline ``d(r, k) = arrival + TTFT + (k - 1) TPOT``
(PolyServe, ProServe). A token is *on time* when ``t(r, k) <= d(r, k) + 1e-9`` s (the same
tolerance everywhere, so exact models written with ``<=`` agree with the replay).

Attainment definitions (a NaN SLO component constrains nothing; an e2e SLO, when a request
has one, is always enforced; a request that is rejected or unfinished never meets its SLO):

``deadline``        every token by its deadline;
``ttft+mean-tpot``  TTFT <= SLO and mean TPOT <= SLO;
``ttft+max-tpot``   TTFT <= SLO and the largest gap between consecutive tokens <= TPOT SLO;
``e2e``             end-to-end latency <= e2e SLO, over the requests that have one.

Latencies are relative to arrival: TTFT = first token - arrival, e2e = last token - arrival,
mean TPOT = (last - first) / (output_tokens - 1) (undefined, so met, for one-token outputs).
Tokens a warm-started request emitted before the run (NaN times, see
:func:`slolab.sim.engine.warm_start_state`) count as on time, and TTFT/TPOT bounds that depend on
them count as met.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
from slolab.sim.outcome import pool_seconds, server_lives
from slolab.sim.prefix_cache import cache_log

if TYPE_CHECKING:
    from slolab.instances.records import Instance, Workload
    from slolab.sim.outcome import Outcome

ON_TIME_TOLERANCE_S = 1e-9
DEFINITIONS = ("deadline", "ttft+mean-tpot", "ttft+max-tpot", "e2e")


def check_definition(definition: str) -> None:
    """ValueError naming the known attainment definitions unless ``definition`` is one."""
    if definition not in DEFINITIONS:
        raise ValueError(
            f"unknown attainment definition {definition!r}; known: {', '.join(DEFINITIONS)}"
        )


def _le(value: np.ndarray, bound: np.ndarray) -> np.ndarray:
    """value <= bound + tol, with a NaN bound meaning no constraint."""
    return np.isnan(bound) | (value <= bound + ON_TIME_TOLERANCE_S)


def deadline_slos(workload: Workload) -> tuple[np.ndarray, np.ndarray]:
    """``(ttft_s, tpot_s)`` per request as :func:`token_deadline_s` takes them: a missing
    (NaN) TTFT is inf (no deadline), a missing TPOT is 0."""
    return (
        np.nan_to_num(workload["ttft_slo_s"], nan=np.inf),
        np.nan_to_num(workload["tpot_slo_s"], nan=0.0),
    )


def token_deadline_s(arrival_s: Any, ttft_s: Any, tpot_s: Any, token: Any) -> Any:
    """Deadline of token ``token`` (1-based): ``d(r, k) = arrival + TTFT + (k - 1) TPOT``.

    The one place this formula lives: the metrics, the engine's server view and the
    heuristics all call it. Takes floats or numpy arrays (elementwise); ``ttft_s`` and
    ``tpot_s`` as :func:`deadline_slos` gives them.

    References
    ----------
    PolyServe, Sec. 3 (deadline-based SLOs); ProServe, Sec. 3 (token-level deadlines).
    """
    return arrival_s + ttft_s + (token - 1) * tpot_s


def token_deadlines(instance: Instance, outcome: Outcome) -> np.ndarray:
    """Deadline of every output token (inf where the request has no TTFT SLO)."""
    return _token_deadlines_at(instance, outcome.token_offsets)


def _token_deadlines_at(instance: Instance, token_offsets: np.ndarray) -> np.ndarray:
    wl = instance.workload
    out = wl.output_tokens
    req = np.repeat(np.arange(len(out)), out)
    k = np.arange(len(req)) - token_offsets[req]  # 0-based token index
    ttft, tpot = deadline_slos(wl)
    return token_deadline_s(wl.arrival_s[req], ttft[req], tpot[req], k + 1)


def request_table(instance: Instance, outcome: Outcome) -> pd.DataFrame:
    """Per-request metrics: latencies and SLO attainment under every definition."""
    return request_table_from_times(
        instance, outcome.token_times, outcome.token_offsets, outcome.rejected, outcome.server
    )


def request_table_from_times(
    instance: Instance,
    token_times: np.ndarray,
    token_offsets: np.ndarray,
    rejected: np.ndarray,
    server: np.ndarray | None = None,
) -> pd.DataFrame:
    """:func:`request_table` from token times alone (as an Outcome holds them: ``inf`` for a
    token never emitted, NaN for one emitted before the run), for schedules that are not
    engine runs, such as :func:`slolab.sim.idle.idle_schedule`; ``server`` defaults to -1."""
    wl = instance.workload
    n = len(wl)
    out = wl.output_tokens
    arrival = wl.arrival_s
    times = token_times
    offs = token_offsets
    first = times[offs[:-1]]
    last = times[offs[1:] - 1]
    finished = np.isfinite(last) & ~rejected
    with np.errstate(invalid="ignore"):
        ttft = first - arrival
        e2e = last - arrival
        tpot_mean = np.where(out > 1, (last - first) / np.maximum(out - 1, 1), np.nan)
        gaps = np.diff(times)
    # largest gap within each request (requests with one token have none)
    max_gap = np.full(n, np.nan)
    multi = out > 1
    if multi.any() and len(gaps):
        # gaps[offs[r] : offs[r + 1] - 1] belong to request r; the gap across a boundary
        # between two requests is masked out
        # NaN gaps touch a token emitted before the run (warm start): no constraint
        g = np.where(np.isnan(gaps), -np.inf, gaps)
        g[offs[1:-1] - 1] = -np.inf
        starts = offs[:-1][multi]
        seg = np.maximum.reduceat(g, starts)
        max_gap[multi] = seg
    deadlines = _token_deadlines_at(instance, offs)
    # NaN: emitted before the run began (warm-started requests), counted as on time
    on_time = np.isnan(times) | (times <= deadlines + ON_TIME_TOLERANCE_S)
    late_tokens = np.bincount(np.repeat(np.arange(n), out), weights=~on_time, minlength=n)
    e2e_ok = _le(e2e, wl["e2e_slo_s"])
    ttft_ok = np.isnan(first) | _le(ttft, wl["ttft_slo_s"])
    tpot_bound = wl["tpot_slo_s"]
    mean_ok = np.where(out > 1, _le(np.nan_to_num(tpot_mean, nan=0.0), tpot_bound), True)
    max_ok = np.where(out > 1, _le(np.nan_to_num(max_gap, nan=0.0), tpot_bound), True)
    has_e2e = ~np.isnan(wl["e2e_slo_s"])
    return pd.DataFrame(
        {
            "arrival_s": arrival,
            "prompt_tokens": wl.prompt_tokens,
            "output_tokens": out,
            "server": np.full(n, -1) if server is None else server,
            "rejected": rejected,
            "finished": finished,
            "ttft_s": ttft,
            "tpot_mean_s": tpot_mean,
            "max_gap_s": max_gap,
            "e2e_s": e2e,
            "tokens_on_time": out - late_tokens.astype(np.int64),
            "met_deadline": finished & (late_tokens == 0) & e2e_ok,
            "met_ttft+mean-tpot": finished & ttft_ok & mean_ok & e2e_ok,
            "met_ttft+max-tpot": finished & ttft_ok & max_ok & e2e_ok,
            "met_e2e": np.where(has_e2e, finished & e2e_ok, False),
            "has_e2e_slo": has_e2e,
        }
    )


def met(instance: Instance, outcome: Outcome, definition: str = "deadline") -> np.ndarray:
    """Boolean per request: did it meet its SLO under ``definition``."""
    check_definition(definition)
    return request_table(instance, outcome)[f"met_{definition}"].to_numpy()


def check_attainable(instance: Instance, definition: str) -> None:
    """ValueError, in one line, when ``definition`` judges no request of ``instance``: ``e2e``
    on SLOs with no end-to-end deadline (its attainment would be NaN)."""
    check_definition(definition)
    if definition != "e2e":
        return
    wl = instance.workload
    deadlines = np.asarray(wl["e2e_slo_s"], dtype=float) if "e2e_slo_s" in wl.columns else ()
    if not np.isfinite(deadlines).any():
        slos = instance.settings.get("slos", "given")
        raise ValueError(
            f"--definition e2e: the SLOs ({slos}) give no request an end-to-end deadline; use "
            "deadline, ttft+mean-tpot or ttft+max-tpot, or SLOs with one"
        )


def attainment(instance: Instance, outcome: Outcome, definition: str = "deadline") -> float:
    """Fraction of requests meeting their SLO (for ``e2e``: of those that have an e2e SLO)."""
    return attainment_from_table(request_table(instance, outcome), definition)


def attainment_from_table(table: pd.DataFrame, definition: str = "deadline") -> float:
    """:func:`attainment` from a :func:`request_table` already computed."""
    check_definition(definition)
    ok = table[f"met_{definition}"].to_numpy()
    if definition == "e2e":
        has = table["has_e2e_slo"].to_numpy()
        return float(ok[has].mean()) if has.any() else float("nan")
    return float(ok.mean())


def tdg_request_weights(
    instance: Instance, w_prefill: float | None = None, w_decode: float | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Per request, the TDG gain of its first token and of each later token.

    ``(w_prefill * w_p(r), w_decode * w_p(r))`` with ``w_p`` the workload's ``priority``
    column. The first-token and decode-token weights come, in order of precedence, from the
    arguments, from per-request columns ``w_prefill`` / ``w_decode`` in the workload, from
    ``instance.settings``, or default to 1.

    References
    ----------
    ProServe, Sec. 2, Eq. 3 (``w_r(i)``).
    """
    wl = instance.workload
    n = len(wl)

    def weight(name: str, given: float | None) -> np.ndarray:
        if given is not None:
            return np.full(n, float(given))
        if name in wl:
            return np.asarray(wl[name], dtype=float)
        return np.full(n, float(instance.settings.get(name, 1.0)))

    priority = np.asarray(wl["priority"], dtype=float)
    return weight("w_prefill", w_prefill) * priority, weight("w_decode", w_decode) * priority


def token_weights(
    instance: Instance, w_prefill: float | None = None, w_decode: float | None = None
) -> np.ndarray:
    """TDG weight of every token: ``w_prefill * w_p(r)`` for the first, ``w_decode * w_p(r)`` else.

    The weights per request come from :func:`tdg_request_weights`.
    """
    out = instance.workload.output_tokens
    wp, wd = tdg_request_weights(instance, w_prefill, w_decode)
    req = np.repeat(np.arange(len(out)), out)
    w = wd[req]
    w[np.concatenate([[0], np.cumsum(out)[:-1]])] = wp
    return w


def on_time_tokens(instance: Instance, outcome: Outcome) -> np.ndarray:
    """Per token: emitted by its deadline (NaN, emitted before the run, counts) and not rejected."""
    t = outcome.token_times
    on_time = np.isnan(t) | (t <= token_deadlines(instance, outcome) + ON_TIME_TOLERANCE_S)
    return on_time & ~np.repeat(outcome.rejected, instance.workload.output_tokens)


#: The former private name, kept for code written against it.
_on_time_tokens = on_time_tokens


def tdg(
    instance: Instance,
    outcome: Outcome,
    w_prefill: float | None = None,
    w_decode: float | None = None,
) -> float:
    """Token-level Deadline-aware Gain (ProServe Eq. 3): sum of weights of on-time tokens.

    Tokens a warm-started request emitted before the run (NaN times) count as on time.
    """
    w = token_weights(instance, w_prefill, w_decode)
    return float(w[on_time_tokens(instance, outcome)].sum())


def tdg_emitted(
    instance: Instance,
    outcome: Outcome,
    w_prefill: float | None = None,
    w_decode: float | None = None,
) -> float:
    """TDG of the tokens emitted during the run (finite times) by their deadlines.

    On a snapshot (warm-started requests) this is the gain the run itself earned; tokens emitted
    before it (NaN times) earn nothing here, unlike :func:`tdg`.
    """
    w = token_weights(instance, w_prefill, w_decode)
    emitted = np.isfinite(outcome.token_times)
    return float(w[on_time_tokens(instance, outcome) & emitted].sum())


def tdg_ratio(
    instance: Instance,
    outcome: Outcome,
    w_prefill: float | None = None,
    w_decode: float | None = None,
) -> float:
    """TDG over the ideal TDG (every token on time): ProServe's TDG_Ratio (Sec. 5.1)."""
    return tdg(instance, outcome, w_prefill, w_decode) / float(
        token_weights(instance, w_prefill, w_decode).sum()
    )


def miss_tdg_ratio(
    instance: Instance,
    outcome: Outcome,
    w_prefill: float | None = None,
    w_decode: float | None = None,
) -> float:
    """Lost gain over the ideal gain, ``1 - TDG_Ratio``: ProServe's Miss_TDG_Ratio (Sec. 5.1)."""
    return 1.0 - tdg_ratio(instance, outcome, w_prefill, w_decode)


def g_ratio(instance: Instance, outcome: Outcome) -> float:
    """The SA paper's objective G = (#requests meeting their SLO) / (sum of latencies, s).

    A request's SLO is its type's (e2e for requests with an e2e SLO; TTFT and mean TPOT
    otherwise), i.e. the ``ttft+mean-tpot`` definition with e2e enforced. Latency is e2e
    latency; G is 0 if any request is unfinished (infinite latency).
    """
    return g_ratio_from_table(request_table(instance, outcome))


def g_ratio_from_table(table: pd.DataFrame) -> float:
    """:func:`g_ratio` from a :func:`request_table` already computed."""
    total = float(table["e2e_s"].sum())
    if not np.isfinite(total):
        return 0.0
    return float(table["met_ttft+mean-tpot"].sum()) / total


def admitted_value(instance: Instance, outcome: Outcome, definition: str = "deadline") -> float:
    """Value of the new requests (not ``running`` at a scheduler call) served within their SLO.

    Requests marked ``running`` in the workload (admitted before the call, see
    :func:`slolab.sim.engine.warm_start_state`) earn nothing: the call decides only the new ones.
    """
    check_definition(definition)
    return admitted_value_from_table(instance, request_table(instance, outcome), definition)


def admitted_value_from_table(
    instance: Instance, table: pd.DataFrame, definition: str = "deadline"
) -> float:
    """:func:`admitted_value` from a :func:`request_table` already computed."""
    wl = instance.workload
    ok = table[f"met_{definition}"].to_numpy()
    if "running" in wl:
        ok = ok & ~np.asarray(wl["running"], dtype=bool)
    return float(wl["value"][ok].sum())


# -- objectives of the problems (slolab.problems): (instance, outcome, request table) -> float --


def _definition(instance: Instance) -> str:
    definition = str(instance.settings.get("definition", "deadline"))
    check_definition(definition)
    return definition


def attainment_objective(instance: Instance, outcome: Outcome, table: pd.DataFrame) -> float:
    """Attainment under the instance's ``definition`` setting (default ``deadline``)."""
    return attainment_from_table(table, _definition(instance))


def goodput_objective(instance: Instance, outcome: Outcome, table: pd.DataFrame) -> float:
    """Requests meeting their SLO per second: attainment (the instance's definition) times the
    workload's mean arrival rate (:func:`slolab.instances.mean_rate`).

    References
    ----------
    PolyServe, Sec. 5.2 (goodput).
    """
    from slolab.instances.transform import mean_rate

    return attainment_from_table(table, _definition(instance)) * mean_rate(instance.workload)


def cost_objective(instance: Instance, outcome: Outcome, table: pd.DataFrame) -> float:
    """Server-seconds of the run (see :func:`server_seconds`)."""
    return server_seconds(instance, outcome)


def g_objective(instance: Instance, outcome: Outcome, table: pd.DataFrame) -> float:
    """The SA paper's G (see :func:`g_ratio`)."""
    return g_ratio_from_table(table)


def admitted_value_objective(instance: Instance, outcome: Outcome, table: pd.DataFrame) -> float:
    """Admitted value under the instance's ``definition`` setting (see :func:`admitted_value`)."""
    return admitted_value_from_table(instance, table, _definition(instance))


def tdg_objective(instance: Instance, outcome: Outcome, table: pd.DataFrame) -> float:
    """TDG of every token of the instance (see :func:`tdg`)."""
    return tdg(instance, outcome)


def tdg_emitted_objective(instance: Instance, outcome: Outcome, table: pd.DataFrame) -> float:
    """TDG the run itself earned (see :func:`tdg_emitted`): one iteration's on a snapshot."""
    return tdg_emitted(instance, outcome)


#: Settings key of the price of one server-second, in attainment units (HyperFlexis's joint
#: objective, :func:`attainment_minus_cost_objective`).
COST_WEIGHT_KEY = "cost_weight_per_server_s"


def attainment_minus_cost_objective(
    instance: Instance, outcome: Outcome, table: pd.DataFrame
) -> float:
    """Attainment minus the price of the servers: ``A - lambda * server_seconds``.

    ``A`` is the attainment under the instance's ``definition`` setting (default
    ``deadline``), ``lambda`` the setting ``cost_weight_per_server_s`` (attainment given up
    per server-second; 0 when absent), and the server-seconds :func:`server_seconds`.

    References
    ----------
    HyperFlexis, Sec. 3 (Eq. 3 cost in worker-seconds, Eq. 4 satisfaction; the decision trades
    the two); the weighted sum is one scalarisation of that trade (docs/hyperflexis.md).
    """
    weight = float(instance.settings.get(COST_WEIGHT_KEY, 0.0))
    return attainment_objective(instance, outcome, table) - weight * server_seconds(
        instance, outcome
    )


def server_seconds(instance: Instance, outcome: Outcome) -> float:
    """Cost: server-seconds from each server's switch-on to its departure (or the run's end),
    summed; a fixed cluster costs ``servers x end_s``.

    References
    ----------
    HyperFlexis, Sec. 3 (cost: NPU usage time); PolyServe, Sec. 5 (cost as server time).
    """
    return math.fsum(_lifetimes(instance, outcome).tolist())


def cost_by_pool(instance: Instance, outcome: Outcome) -> dict[str, float]:
    """:func:`server_seconds` split by pool (a server assigned to another pool counts for each
    pool while it belongs to it)."""
    return pool_seconds(server_lives(instance.cluster, outcome), outcome.scale_events)


def _lifetimes(instance: Instance, outcome: Outcome) -> np.ndarray:
    lives = server_lives(instance.cluster, outcome)
    return np.where(np.isfinite(lives.on_s), lives.off_s - lives.on_s, 0.0)


def servers_max(instance: Instance, outcome: Outcome) -> int:
    """Most servers switched on at the same time (a server departing at t no longer counts
    at t)."""
    lives = server_lives(instance.cluster, outcome)
    on = np.isfinite(lives.on_s)
    times = np.concatenate([lives.on_s[on], lives.off_s[on]])
    steps = np.concatenate([np.ones(on.sum()), -np.ones(on.sum())])
    order = np.lexsort((steps, times))  # departures before arrivals at equal times
    return int(np.cumsum(steps[order]).max()) if len(order) else 0


def attainment_by_tier(
    instance: Instance, outcome: Outcome, table: pd.DataFrame | None = None
) -> dict[str, float]:
    """Deadline attainment of each tier of the workload's ``tier`` column, keyed by the tier
    (as a string); empty when the workload has no ``tier`` column.

    References
    ----------
    PolyServe, Sec. 5.2 (attainment broken down by TPOT tier).
    """
    wl = instance.workload
    if "tier" not in wl:
        return {}
    if table is None:
        table = request_table(instance, outcome)
    tier = np.asarray(wl["tier"])
    met = table["met_deadline"].to_numpy()
    return {str(t): float(met[tier == t].mean()) for t in np.unique(tier).tolist()}


def _pct(values: np.ndarray, q: float) -> float:
    v = values[np.isfinite(values)]
    return float(np.percentile(v, q)) if len(v) else float("nan")


def summary(instance: Instance, outcome: Outcome) -> dict[str, Any]:
    """Aggregate numbers of a run (JSON-able).

    Besides latencies and attainment: ``rejected`` (all rejections) and ``rejected_kv`` (those
    the engine made because a request could never fit its server's KV memory), ``stalled``
    (those it rejected because the run stalled: ``outcome.info["stall"]`` says why), and the cost:
    ``cost_server_s`` (:func:`server_seconds`), ``cost_per_request_s``,
    ``cost_per_met_request_s`` (per request meeting its deadline SLO; inf when none does),
    ``cost_by_pool``, ``servers_max`` and ``scale_events`` (scaling actions executed).
    ``utilization`` is busy time over cost. A workload with more than one tier (its ``tier``
    column) also gets ``attainment_by_tier`` and ``requests_by_tier`` (keyed by the tier).
    With prefix caching on, ``prefix_cache`` holds the caches' hits, misses, evictions, hit
    rate and prefill tokens saved (:meth:`slolab.sim.prefix_cache.PrefixCacheLog.summary`).
    """
    t = request_table(instance, outcome)
    n = len(t)
    cost = server_seconds(instance, outcome)
    met_deadline = int(t["met_deadline"].sum())
    rejected_kv = outcome.rejected_kv
    res: dict[str, Any] = {
        "requests": n,
        "finished": int(t["finished"].sum()),
        "rejected": int(t["rejected"].sum()),
        "rejected_kv": 0 if rejected_kv is None else int(rejected_kv.sum()),
        "stalled": int(outcome.info.get("stalled", 0)),
        "attainment": float(t["met_deadline"].mean()),
    }
    for d in DEFINITIONS:
        res[f"attainment_{d}"] = attainment_from_table(t, d)
    ttft = t["ttft_s"].to_numpy()
    tpot = t["tpot_mean_s"].to_numpy()
    e2e = t["e2e_s"].to_numpy()
    res.update(
        {
            "ttft_p50": _pct(ttft, 50),
            "ttft_p99": _pct(ttft, 99),
            "tpot_p50": _pct(tpot, 50),
            "tpot_p99": _pct(tpot, 99),
            "e2e_mean": float(np.mean(e2e[np.isfinite(e2e)]))
            if np.isfinite(e2e).any()
            else float("nan"),
            "tdg_ratio": tdg_ratio(instance, outcome),
            "miss_tdg_ratio": miss_tdg_ratio(instance, outcome),
            "g": g_ratio_from_table(t),
            "tokens_simulated": outcome.tokens_emitted,
            "iterations": int(outcome.info.get("iterations", outcome.n_iterations)),
            "preemptions": int(outcome.preemptions.sum()),
            "end_s": outcome.end_s,
            "utilization": float(outcome.busy_s.sum() / max(cost, 1e-12)),
            "cost_server_s": cost,
            "cost_per_request_s": cost / n,
            "cost_per_met_request_s": cost / met_deadline if met_deadline else float("inf"),
            "cost_by_pool": cost_by_pool(instance, outcome),
            "servers_max": servers_max(instance, outcome),
            "scale_events": len(outcome.scale_events),
            "wall_s": outcome.wall_s,
        }
    )
    log = cache_log(outcome)
    if log is not None:
        res["prefix_cache"] = log.summary()
    if "tier" in instance.workload and len(np.unique(instance.workload["tier"])) > 1:
        tiers, counts = np.unique(instance.workload["tier"], return_counts=True)
        res["attainment_by_tier"] = attainment_by_tier(instance, outcome, t)
        res["requests_by_tier"] = {str(k): int(c) for k, c in zip(tiers, counts, strict=True)}
    return res
