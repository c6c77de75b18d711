"""PolyServe's tier problems, as bounds: the per-request optimum, the tier partition and the
windowed autoscale plan.

- :func:`request_optimum` (Sec. 3.4-3.5): each request alone at the largest batch its TPOT,
  TTFT and the KV memory allow, prefill/decode disaggregated (PD) or co-located (CO); its cost
  in server-seconds. :func:`fluid_rate` is the paper's "optimal throughput":
  ``N / mean cost``.
- ``tier-partition`` (:class:`TierPartition`): integer servers per TPOT tier (and prefill
  servers when disaggregated) and the flow of each tier's requests into its own or a tighter
  tier (promotion, never the reverse), each tier's servers loaded within their steady-state
  capacity; maximize the served arrival rate on ``N`` servers. ``tier-partition-fluid`` is its
  relaxation with continuous servers. :func:`min_servers` solves the same model for the fewest
  servers serving a given rate.
- ``tier-autoscale`` (:class:`TierAutoscale`): the same capacity in every window of a trace
  whose tier mix changes; servers per tier per window, switching on (start-up cost) and
  draining (a drained server stays busy for its requests' remaining decode time); minimize
  server-seconds.

All three are **bounds of a steady-state fluid model** (every iteration within the tightest
TPOT of its batch, requests spread evenly over their lifetimes, no queueing): they produce no
schedule, and their solver Results carry no Schedule. Every formula and derivation (the
paper's Sec. 3.4-3.5 formulas were lost in extraction) is in ``docs/polyserve.md``.

Capacity model. The timing model is a maximum of affine lines ``T = max_l (b_l + c_l . x)``
(:func:`timing_lines`: a linear or roofline model). A tier-``j`` server whose iterations last
``t <= tau_j`` and which serves requests at rates ``y_r`` carries, by Little's law,
``y_r (d_r - 1) t`` decoding requests of each. With ``u_l = sum_r y_r w_lr`` (the line's slope
work per second, :func:`request_work`), ``t >= b_l / (1 - u_l)`` for every line, so the load is
feasible iff for every line

- time: ``u_l <= 1 - b_l / tau_j``;
- KV memory ``M``: ``b_l V + M u_l <= M`` with ``V = sum_r y_r (d_r - 1)(p_r + d_r / 2)``
  (``p_r - k_r`` with a given prefix cache of ``k_r`` tokens, held outside ``M``; the work
  then charges the uncached prompt and the decode steps the whole context,
  :func:`request_work`);
- sequences ``B_max`` and tokens ``T_max`` per iteration: the same form with the decode
  sequences (or tokens) per second in place of ``V``.

Each is linear in the rates, so a class's coefficients are the mean of its requests' and a
tier's servers add up (the constraints hold for ``n_j`` servers iff they hold for one server
carrying ``1 / n_j`` of the flow).

References
----------
PolyServe, Sec. 3.3 (cost as GPU time), 3.4 (batch size limits), 3.5 (optimal cost), 4.3
(autoscaling, draining), 4.4 (lazy promotion), 5.2 (optimal throughput).
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from slolab.instances.records import CACHED_COLUMN, Instance, cached_prompt_tokens
from slolab.solvers.backend import Backend, RawSolve
from slolab.solvers.base import CpFormulation, ExactModel, MilpFormulation, Result
from slolab.solvers.registry import register_model
from slolab.timing.base import (
    F_DECODE_KV,
    F_DECODE_TOKENS,
    F_NUM_DECODE,
    F_NUM_PREFILL,
    F_PREFILL_ATTN,
    F_PREFILL_TOKENS,
    prefill_attention_work,
)
from slolab.timing.forms import timing_lines

__all__ = [
    "AUTOSCALE_PROBLEM",
    "MODES",
    "PARTITION_PROBLEM",
    "PartitionData",
    "PlanData",
    "TierAutoscale",
    "TierPartition",
    "TierPartitionFluid",
    "fluid_rate",
    "min_servers",
    "request_optimum",
    "request_work",
    "timing_lines",
]

#: ``Instance.problem`` of the two problems.
PARTITION_PROBLEM = "tier-partition"
AUTOSCALE_PROBLEM = "tier-autoscale"
#: Serving modes the models know.
MODES = ("colocated", "disaggregated")
#: Prompt tokens per prefill iteration of a disaggregated prefill server (PolyServe Sec. 3.4:
#: "the prefill batch size can easily reach 2048, nearly saturating the hardware").
PREFILL_BATCH_TOKENS = 2048
#: CP-SAT grids: flow units per class demand, rate units over the rate's upper bound, and the
#: precision of the integer capacity coefficients (each constraint is scaled so that its
#: smallest positive coefficient is this integer, so rounding moves it by at most 1e-6).
CP_FLOW_UNITS = 1000
CP_RATE_UNITS = 20000
CP_PRECISION = 10**6
#: CP-SAT objective of the plan in integer milliseconds of server time.
CP_COST_UNITS_PER_S = 1000


# -- timing -------------------------------------------------------------------------------------


# -- requests in tier terms ---------------------------------------------------------------------


@dataclass(frozen=True)
class TierRequests:
    """The requests of a workload in the tier models' terms.

    ``tiers_s``: the distinct TPOT SLOs (s), tightest first; ``cls``: each request's class (the
    index of its TPOT in ``tiers_s``; a request without a TPOT SLO, best effort, joins the
    loosest class); ``cached``: its prompt tokens in the snapshot's given prefix cache (the
    workload's ``cached_tokens``, zeros without it); ``servable``: the request fits a server's
    KV memory (``p + d - k <= M``, the cached ``k`` held outside it; the engine rejects the
    others on arrival).
    """

    prompt: np.ndarray
    output: np.ndarray
    cached: np.ndarray
    ttft_s: np.ndarray
    tpot_s: np.ndarray
    cls: np.ndarray
    tiers_s: np.ndarray
    servable: np.ndarray

    @classmethod
    def of(cls, instance: Instance) -> TierRequests:
        wl = instance.workload
        tpot = np.asarray(wl["tpot_slo_s"], dtype=float)
        finite = np.isfinite(tpot)
        if not finite.any():
            raise ValueError(
                f"instance {instance.name!r}: no request has a TPOT SLO; the tier models need "
                "SLO tiers (for example --slos polyserve)"
            )
        tiers = np.unique(tpot[finite])
        klass = np.where(
            finite, np.searchsorted(tiers, np.where(finite, tpot, 0.0)), len(tiers) - 1
        )
        prompt = wl.prompt_tokens.astype(float)
        output = wl.output_tokens.astype(float)
        cached = cached_prompt_tokens(wl).astype(float)
        kv = _pool_limits(instance)[0]
        return cls(
            prompt=prompt,
            output=output,
            cached=cached,
            ttft_s=np.nan_to_num(np.asarray(wl["ttft_slo_s"], dtype=float), nan=np.inf),
            tpot_s=np.where(finite, tpot, tiers[-1]),
            cls=klass.astype(np.int64),
            tiers_s=tiers,
            servable=prompt + output - cached <= kv,
        )


def _pool_limits(instance: Instance) -> tuple[int, int, int]:
    """``(kv_capacity_tokens, max_batch_size, max_batch_tokens)`` of the serving servers (the
    decode pool when disaggregated, else the first pool)."""
    pools = instance.cluster.resolved_pools()
    serving = [p for p in pools if p.role in ("decode", "mixed")] or list(pools)
    p = serving[0]
    return int(p.kv_capacity_tokens), int(p.max_batch_size), int(p.max_batch_tokens)  # type: ignore[arg-type]


def request_work(
    prompt: np.ndarray,
    output: np.ndarray,
    intercepts: np.ndarray,
    coefficients: np.ndarray,
    mode: str,
    prefill_batch_tokens: int = PREFILL_BATCH_TOKENS,
    cached: np.ndarray | None = None,
) -> dict[str, np.ndarray]:
    """Per request, what it costs a server in the fluid model.

    A request of ``p`` prompt and ``d`` output tokens decodes ``d - 1`` times (its prefill
    emits the first token); decode step ``i`` reads ``p + i`` KV tokens, ``(d - 1)(p + d/2)``
    in all. Its prompt costs ``p`` prefill tokens, ``p (p + 1) / 2`` attention work however
    it is chunked, and at least one prefill sequence.

    With a given prefix cache (``cached``: ``k`` of the ``p`` prompt tokens cached,
    co-located only) the prompt costs its ``p - k`` uncached tokens and their attention over
    the cached prefix, ``(p - k)(k + (p - k + 1) / 2)`` however it is chunked; the decode steps
    still read the whole context, and the KV held against the capacity is what the request
    computed and generated, ``(d - 1)(p - k + d/2)`` token-iterations.

    Returns
    -------
    dict
        ``work`` (L, n): slope work on a tier server, per line (s): decode work
        ``(d - 1)(c_dt + c_nd) + c_kv (d - 1)(p + d/2)``, plus, co-located, the prompt's
        ``c_pt (p - k) + c_pa (p - k)(k + (p - k + 1) / 2) + c_np``;
        ``kv`` (n,): decode KV token-iterations held, ``(d - 1)(p - k + d/2)``;
        ``seqs`` (n,): decode sequence-iterations ``d - 1``;
        ``tokens`` (n,): token-iterations (``d - 1`` disaggregated, ``p - k + d - 1``
        co-located);
        ``prefill`` (L, n): disaggregated, the prefill server-seconds per line: the prompt's work
        plus its share ``b p / P`` of the intercepts of iterations of ``P`` tokens (zeros
        co-located).
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    p = np.asarray(prompt, dtype=float)
    d = np.asarray(output, dtype=float)
    k = np.zeros_like(p) if cached is None else np.asarray(cached, dtype=float)
    if mode != "colocated" and k.any():
        raise ValueError(_DISAGGREGATED_CACHE)
    c = np.asarray(coefficients, dtype=float)
    steps = d - 1.0
    computed = p - k
    kv = steps * (p + d / 2.0)
    decode = (
        steps[None, :] * (c[:, F_DECODE_TOKENS] + c[:, F_NUM_DECODE])[:, None]
        + c[:, F_DECODE_KV][:, None] * kv[None, :]
    )
    prompt_work = (
        c[:, F_PREFILL_TOKENS][:, None] * computed[None, :]
        + c[:, F_PREFILL_ATTN][:, None] * prefill_attention_work(computed, k)[None, :]
        + c[:, F_NUM_PREFILL][:, None]
    )
    if mode == "colocated":
        return {
            "work": decode + prompt_work,
            "kv": steps * (computed + d / 2.0),
            "seqs": steps,
            "tokens": computed + steps,
            "prefill": np.zeros_like(decode),
        }
    if prefill_batch_tokens < 1:
        raise ValueError(f"prefill_batch_tokens must be >= 1, got {prefill_batch_tokens}")
    share = np.asarray(intercepts, dtype=float)[:, None] * p[None, :] / prefill_batch_tokens
    return {
        "work": decode,
        "kv": kv,
        "seqs": steps,
        "tokens": steps.copy(),
        "prefill": prompt_work + share,
    }


def _prefill_batch(instance: Instance) -> int:
    """Prefill tokens per iteration ``P``: the setting ``prefill_batch_tokens`` (default 2048),
    capped by the prefill pool's token budget."""
    size = int(instance.settings.get("prefill_batch_tokens", PREFILL_BATCH_TOKENS))
    caps = [
        int(p.max_batch_tokens)  # type: ignore[arg-type]
        for p in instance.cluster.resolved_pools()
        if p.role in ("prefill", "mixed") and p.max_batch_tokens
    ]
    return min([size, *caps])


def _setting_rate(instance: Instance) -> float:
    """The instance's ``rate`` setting (req/s), or its mean arrival rate when the setting is
    absent or not a number (a trace kept at its own rate)."""
    rate = instance.settings.get("rate")
    if isinstance(rate, int | float) and rate > 0:
        return float(rate)
    from slolab.instances import mean_rate

    return float(mean_rate(instance.workload)) if len(instance.workload) > 1 else 0.0


#: The tier models' refusal of a given cache when disaggregated.
_DISAGGREGATED_CACHE = (
    f"the tier models take the workload's {CACHED_COLUMN} column (a given cache) co-located "
    "only, as the engine serves it; got mode 'disaggregated'"
)


def _mode(instance: Instance, mode: str | None) -> str:
    mode = mode or str(instance.settings.get("mode", instance.cluster.mode))
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    if mode != "colocated" and cached_prompt_tokens(instance.workload).any():
        raise ValueError(f"instance {instance.name!r}: {_DISAGGREGATED_CACHE}")
    return mode


# -- the paper's per-request optimum (Sec. 3.4-3.5) ---------------------------------------------


def request_optimum(instance: Instance, mode: str | None = None) -> pd.DataFrame:
    """Each request alone at its largest feasible batch and its cost (PolyServe Sec. 3.4-3.5).

    Disaggregated (PD): decode batches of ``B`` such requests, spread over their decode steps
    (mean context ``p + d/2``): ``t(B) = max_l (b_l + B g_l)`` with
    ``g_l = c_dt + c_nd + c_kv (p + d/2)``; ``B*`` is the largest integer with ``t(B) <= TPOT``,
    ``B (p + d/2) <= M`` and within the batch limits. Cost: decode ``(d - 1) t(B*) / B*`` plus
    prefill ``max_l (b_l p / P + c_pt p + c_pa p (p + 1)/2 + c_np)`` at ``P`` prompt tokens per
    prefill iteration.

    Co-located (CO): iterations of ``T`` tokens split ``p : (d - 1)`` between prefill and
    decode tokens (the paper's ratio), so ``t(T) = max_l (b_l + c_np + T q_l)`` with
    ``q_l = (p c_pt + (d - 1)(c_dt + c_nd + c_kv (p + d/2)) + p c_pa (p + 1)/2) / (p + d - 1)``;
    a prefill takes ``N = ceil((p + d - 1) / T)`` iterations. ``T*`` is the largest integer with
    ``t(T) <= TPOT``, ``N t(T) <= TTFT``, KV ``B_d (p + d/2) + p <= M`` (``B_d`` the decode tokens
    per iteration) and the batch limits. Cost ``(p + d - 1) t(T*) / T*``.

    Returns
    -------
    DataFrame
        One row per request: ``tier_s`` (its TPOT, best effort at the loosest), ``batch``
        (``B*`` or ``T*``; 0 when infeasible), ``iteration_s`` (``t`` at it), ``decode_cost_s``,
        ``prefill_cost_s``, ``cost_s`` (inf when infeasible), ``feasible``.

    References
    ----------
    PolyServe, Sec. 3.3 (per-request cost ``g t / B``), 3.4, 3.5.
    """
    mode = _mode(instance, mode)
    req = TierRequests.of(instance)
    b, c = timing_lines(instance.timing)
    kv_cap, max_seqs, max_tokens = _pool_limits(instance)
    p, d, tau, ttft = req.prompt, req.output, req.tpot_s, req.ttft_s
    k = req.cached
    steps = d - 1.0
    big = np.float64(2**40)
    if mode == "disaggregated":
        g = (c[:, F_DECODE_TOKENS] + c[:, F_NUM_DECODE])[:, None] + c[:, F_DECODE_KV][:, None] * (
            p + d / 2.0
        )[None, :]
        with np.errstate(divide="ignore", invalid="ignore"):
            per_line = np.where(
                g > 0,
                np.floor((tau[None, :] - b[:, None]) / g),
                np.where(b[:, None] <= tau, big, -1),
            )
        batch = np.min(per_line, axis=0)
        batch = np.minimum(batch, np.floor(kv_cap / (p + d / 2.0)))
        batch = np.minimum(batch, max_seqs)
        if max_tokens:
            batch = np.minimum(batch, max_tokens)
        batch = np.where(steps > 0, batch, np.maximum(batch, 1))
        feasible = (batch >= 1) & req.servable
        batch = np.where(feasible, batch, 0.0)
        it = np.max(b[:, None] + np.maximum(batch, 1)[None, :] * g, axis=0)
        decode_cost = np.where(steps > 0, steps * it / np.maximum(batch, 1), 0.0)
        work = request_work(p, d, b, c, mode, _prefill_batch(instance))
        prefill_cost = np.max(work["prefill"], axis=0)
    else:
        # the prompt's uncached tokens, their attention over the cached prefix (k = 0: the
        # whole prompt)
        computed = p - k
        total = computed + steps
        q = (
            computed[None, :] * c[:, F_PREFILL_TOKENS][:, None]
            + steps[None, :]
            * (
                (c[:, F_DECODE_TOKENS] + c[:, F_NUM_DECODE])[:, None]
                + c[:, F_DECODE_KV][:, None] * (p + d / 2.0)[None, :]
            )
            + prefill_attention_work(computed, k)[None, :] * c[:, F_PREFILL_ATTN][:, None]
        ) / total[None, :]
        base = b[:, None] + c[:, F_NUM_PREFILL][:, None]
        with np.errstate(divide="ignore", invalid="ignore"):
            per_line = np.where(
                q > 0, np.floor((tau[None, :] - base) / q), np.where(base <= tau, big, -1)
            )
            t_time = np.min(per_line, axis=0)
            caps = np.full(len(p), big)
            if max_tokens:
                caps = np.minimum(caps, max_tokens)
            decode_share = np.where(total > 0, steps / total, 0.0)
            # sequences: B_d + 1 <= max_seqs
            caps = np.where(
                decode_share > 0,
                np.minimum(caps, np.floor((max_seqs - 1) / decode_share)),
                caps,
            )
            # KV held: B_d (p - k + d/2) + p - k <= M
            caps = np.where(
                decode_share > 0,
                np.minimum(
                    caps, np.floor((kv_cap - computed) / (decode_share * (computed + d / 2.0)))
                ),
                caps,
            )
            batch = np.minimum(t_time, caps)
            n_iter = np.ceil(total / np.maximum(batch, 1))
            per_line_ttft = np.where(
                q > 0, np.floor((ttft[None, :] / n_iter[None, :] - base) / q), big
            )
            t_ttft = np.min(per_line_ttft, axis=0)
        batch = np.minimum(batch, t_ttft)
        feasible = (batch >= np.ceil(total / n_iter)) & (batch >= 1) & req.servable
        batch = np.where(feasible, batch, 0.0)
        it = np.max(base + np.maximum(batch, 1)[None, :] * q, axis=0)
        cost = total * it / np.maximum(batch, 1)
        decode_cost = cost * decode_share
        prefill_cost = cost - decode_cost
    cost = np.where(feasible, decode_cost + prefill_cost, np.inf)
    return pd.DataFrame(
        {
            "tier_s": tau,
            "batch": batch.astype(np.int64),
            "iteration_s": np.where(feasible, it, np.nan),
            "decode_cost_s": np.where(feasible, decode_cost, np.nan),
            "prefill_cost_s": np.where(feasible, prefill_cost, np.nan),
            "cost_s": cost,
            "feasible": feasible,
        }
    )


def fluid_rate(instance: Instance, mode: str | None = None, servers: int | None = None) -> float:
    """The paper's optimal throughput (req/s): every request at its own optimum
    (:func:`request_optimum`), ``N / mean cost`` over the requests some batch serves, divided by
    their share so that it is an arrival rate of the whole mix (the others are never served).

    References
    ----------
    PolyServe, Sec. 3.5 and 5.2 ("optimal throughput").
    """
    opt = request_optimum(instance, mode)
    n = _servers(instance, servers)
    feasible = opt["feasible"].to_numpy()
    if not feasible.any():
        return 0.0
    return float(n / opt["cost_s"].to_numpy()[feasible].mean() / feasible.mean())


def _servers(instance: Instance, servers: int | None) -> int:
    """``N``: ``servers`` if given, else the instance's ``servers`` setting, else its cluster's."""
    n = int(
        servers
        if servers is not None
        else instance.settings.get("servers", instance.cluster.servers)
    )
    if n < 1:
        raise ValueError(f"servers must be >= 1, got {n}")
    return n


# -- partition data -----------------------------------------------------------------------------


def _resources(
    work: np.ndarray,
    kv: np.ndarray,
    seqs: np.ndarray,
    tokens: np.ndarray,
    intercepts: np.ndarray,
    tiers_s: np.ndarray,
    kv_capacity: int,
    max_seqs: int,
    max_tokens: int,
) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Per-request resource use ``a (R, n)`` and per-server capacity ``cap (R, tiers)``.

    For each line ``l``: time ``a = w_l``, ``cap_j = 1 - b_l / tau_j``; KV ``a = w_l + b_l v / M``,
    sequences ``a = w_l + b_l s / B_max``, tokens ``a = w_l + b_l k / T_max`` (each divided by
    its limit, so ``cap = 1``).
    """
    rows: list[np.ndarray] = []
    caps: list[np.ndarray] = []
    names: list[str] = []
    for line, b in enumerate(intercepts.tolist()):
        w = work[line]
        rows.append(w)
        caps.append(1.0 - b / tiers_s)
        names.append(f"time[{line}]")
        for what, use, limit in (
            ("kv", kv, kv_capacity),
            ("seqs", seqs, max_seqs),
            ("tokens", tokens, max_tokens),
        ):
            if limit and b > 0:
                rows.append(w + b * use / limit)
                caps.append(np.ones(len(tiers_s)))
                names.append(f"{what}[{line}]")
    return np.array(rows), np.array(caps), names


@dataclass(frozen=True)
class PartitionData:
    """A tier-partition instance as the models see it.

    Attributes
    ----------
    mode : str
        ``"colocated"`` or ``"disaggregated"``.
    tiers_s : array (m,)
        TPOT of each tier (s), tightest first; class ``k`` is the requests of TPOT ``tiers_s[k]``
        (best-effort requests in the loosest).
    share : array (m,)
        Fraction of the servable requests in each class.
    use : array (R, m)
        Mean resource use per request of each class (server-seconds per request).
    cap : array (R, m)
        Capacity of one server of each tier, per resource (per second).
    prefill : array (L, m)
        Disaggregated: mean prefill server-seconds per request of each class, per line.
    servers : int
        ``N``: servers to partition.
    rate : float
        The instance's arrival rate (req/s), the demand of :func:`min_servers`.
    servable_fraction : float
        Share of requests that fit a server (the rest can never be served).
    resource_names : list of str
    """

    mode: str
    tiers_s: np.ndarray
    share: np.ndarray
    use: np.ndarray
    cap: np.ndarray
    prefill: np.ndarray
    servers: int
    rate: float
    servable_fraction: float
    resource_names: list[str] = field(default_factory=list)

    @classmethod
    def of(
        cls, instance: Instance, mode: str | None = None, servers: int | None = None
    ) -> PartitionData:
        mode = _mode(instance, mode)
        req = TierRequests.of(instance)
        b, c = timing_lines(instance.timing)
        kv_cap, max_seqs, max_tokens = _pool_limits(instance)
        keep = req.servable
        if not keep.any():
            raise ValueError(f"instance {instance.name!r}: no request fits a server's KV memory")
        work = request_work(
            req.prompt[keep],
            req.output[keep],
            b,
            c,
            mode,
            _prefill_batch(instance),
            cached=req.cached[keep],
        )
        use, cap, names = _resources(
            work["work"],
            work["kv"],
            work["seqs"],
            work["tokens"],
            b,
            req.tiers_s,
            kv_cap,
            max_seqs,
            max_tokens,
        )
        m = len(req.tiers_s)
        klass = req.cls[keep]
        counts = np.bincount(klass, minlength=m).astype(float)
        mean_use = np.zeros((len(use), m))
        mean_prefill = np.zeros((len(b), m))
        for k in range(m):
            if counts[k]:
                mean_use[:, k] = use[:, klass == k].mean(axis=1)
                mean_prefill[:, k] = work["prefill"][:, klass == k].mean(axis=1)
        n = _servers(instance, servers)
        return cls(
            mode=mode,
            tiers_s=req.tiers_s,
            share=counts / counts.sum(),
            use=mean_use,
            cap=cap,
            prefill=mean_prefill,
            servers=n,
            rate=_setting_rate(instance),
            servable_fraction=float(keep.mean()),
            resource_names=names,
        )

    @property
    def tiers(self) -> int:
        return len(self.tiers_s)

    def pairs(self) -> list[tuple[int, int]]:
        """``(class, tier)`` pairs a flow may take: its own tier or a tighter one."""
        return [(k, j) for k in range(self.tiers) if self.share[k] > 0 for j in range(k + 1)]

    def rate_upper_bound(self) -> float:
        """A rate (servable req/s) no solution exceeds: for any resource ``r`` and prefill line
        ``l``, ``N >= rate * sum_k share_k (min_{j <= k} use_rk / cap_rj + prefill_lk)``."""
        best = math.inf
        pre = self.prefill @ self.share if self.mode == "disaggregated" else np.zeros(1)
        for r in range(len(self.use)):
            per = 0.0
            for k in range(self.tiers):
                if not self.share[k]:
                    continue
                costs = [
                    self.use[r, k] / self.cap[r, j] for j in range(k + 1) if self.cap[r, j] > 0
                ]
                if not costs:
                    if self.use[r, k] > 0:
                        return 0.0
                    continue
                per += self.share[k] * min(costs)
            for extra in pre.tolist():
                if per + extra > 0:
                    best = min(best, self.servers / (per + extra))
        if not math.isfinite(best):
            raise ValueError("the demand uses no resource: the served rate is unbounded")
        return best

    def label(self, j: int) -> str:
        """Name of tier ``j``: its TPOT in ms (``"20ms"``)."""
        return f"{self.tiers_s[j] * 1e3:g}ms"


# -- the partition MILP -------------------------------------------------------------------------


def partition_pulp(
    data: PartitionData, rate: float | None, integral: bool
) -> tuple[Any, dict[str, Any]]:
    """PuLP model: maximize the served rate on ``N`` servers (``rate`` None) or minimize the
    servers serving ``rate`` servable req/s.

    Variables: ``n_j`` servers of tier ``j`` (integer unless ``integral`` is False), ``n_P``
    prefill servers (disaggregated), ``y_kj >= 0`` the flow of class ``k`` into tier ``j <= k``,
    ``alpha`` the served rate. Constraints: :func:`_demand`, :func:`_capacity`,
    :func:`_prefill_capacity`, :func:`_server_count`.
    """
    import pulp

    cat = "Integer" if integral else "Continuous"
    sense = pulp.LpMaximize if rate is None else pulp.LpMinimize
    prob = pulp.LpProblem("tier_partition", sense)
    n = {j: prob.add_variable(f"n_{j}", lowBound=0, cat=cat) for j in range(data.tiers)}
    n_p = (
        prob.add_variable("n_prefill", lowBound=0, cat=cat)
        if data.mode == "disaggregated"
        else None
    )
    y = {(k, j): prob.add_variable(f"y_{k}_{j}", lowBound=0) for k, j in data.pairs()}
    alpha: Any = prob.add_variable("alpha", lowBound=0) if rate is None else float(rate)
    servers = pulp.lpSum(n.values()) + (n_p if n_p is not None else 0)
    prob += alpha if rate is None else servers
    _demand(prob, data, y, alpha)
    _capacity(prob, data, y, n)
    if n_p is not None:
        _prefill_capacity(prob, data, alpha, n_p)
    if rate is None:
        _server_count(prob, data, servers)
    return prob, {"n": n, "n_prefill": n_p, "y": y, "alpha": alpha}


def _demand(prob: Any, data: PartitionData, y: dict, alpha: Any) -> None:
    """Every class is served: ``sum_{j <= k} y_kj = alpha share_k``."""
    import pulp

    for k in range(data.tiers):
        if data.share[k] > 0:
            prob += (
                pulp.lpSum(y[k, j] for j in range(k + 1)) == alpha * float(data.share[k]),
                f"demand_{k}",
            )


def _capacity(prob: Any, data: PartitionData, y: dict, n: dict) -> None:
    """Each tier within its servers' capacity, per resource:
    ``sum_k use_rk y_kj <= cap_rj n_j``."""
    import pulp

    for r in range(len(data.use)):
        for j in range(data.tiers):
            terms = [(float(data.use[r, k]), y[k, j]) for k in range(j, data.tiers) if (k, j) in y]
            if not terms:
                continue
            prob += (
                pulp.lpSum(a * v for a, v in terms) <= float(data.cap[r, j]) * n[j],
                f"cap_{r}_{j}",
            )


def _prefill_capacity(prob: Any, data: PartitionData, alpha: Any, n_p: Any) -> None:
    """Disaggregated prefill: ``alpha sum_k share_k prefill_lk <= n_P`` for every line."""
    for line, per_request in enumerate((data.prefill @ data.share).tolist()):
        prob += alpha * per_request <= n_p, f"prefill_{line}"


def _server_count(prob: Any, data: PartitionData, servers: Any) -> None:
    """At most ``N`` servers: ``sum_j n_j + n_P <= N``."""
    prob += servers <= data.servers, "servers"


def _partition_solution(
    data: PartitionData, values: Callable[[Any], float], v: dict[str, Any]
) -> dict[str, Any]:
    per_tier = {data.label(j): values(v["n"][j]) for j in range(data.tiers)}
    if v["n_prefill"] is not None:
        per_tier["prefill"] = values(v["n_prefill"])
    flows = {
        f"{data.label(k)}->{data.label(j)}": values(var)
        for (k, j), var in v["y"].items()
        if values(var) > 1e-9
    }
    return {"servers_per_tier": per_tier, "flows_req_s": flows}


def pulp_value(var: Any) -> float:
    """A solved PuLP variable's value; an integer variable's rounded off the solver's
    tolerance."""
    value = var.varValue
    if value is None:
        return float("nan")
    if var.cat == "Integer":
        return float(round(value)) + 0.0  # + 0.0: no -0.0
    return float(value)


def _partition_lp_for(data: PartitionData, servers: Sequence[float]) -> float:
    """Largest served rate (servable req/s) with the given servers per tier (and prefill
    servers last, disaggregated): the LP over flows and the rate, by ``scipy.optimize.linprog``
    (HiGHS). 0 when only the empty flow fits."""
    from scipy.optimize import linprog

    pairs = data.pairs()
    index = {pair: i for i, pair in enumerate(pairs)}
    nv = len(pairs) + 1  # flows, then alpha
    obj = np.zeros(nv)
    obj[-1] = -1.0
    a_ub: list[np.ndarray] = []
    b_ub: list[float] = []
    for r in range(len(data.use)):
        for j in range(data.tiers):
            row = np.zeros(nv)
            for k in range(j, data.tiers):
                if (k, j) in index:
                    row[index[k, j]] = data.use[r, k]
            if row.any():
                a_ub.append(row)
                b_ub.append(float(data.cap[r, j] * servers[j]))
    if data.mode == "disaggregated":
        for per_request in (data.prefill @ data.share).tolist():
            row = np.zeros(nv)
            row[-1] = per_request
            a_ub.append(row)
            b_ub.append(float(servers[data.tiers]))
    a_eq = []
    b_eq = []
    for k in range(data.tiers):
        if data.share[k] > 0:
            row = np.zeros(nv)
            for j in range(k + 1):
                row[index[k, j]] = 1.0
            row[-1] = -data.share[k]
            a_eq.append(row)
            b_eq.append(0.0)
    res = linprog(
        obj,
        A_ub=np.array(a_ub) if a_ub else None,
        b_ub=np.array(b_ub) if b_ub else None,
        A_eq=np.array(a_eq),
        b_eq=np.array(b_eq),
        bounds=[(0, None)] * nv,
        method="highs",
    )
    if res.status != 0:
        raise RuntimeError(f"the partition LP failed: {res.message}")
    return float(-res.fun)


# -- CP-SAT on a grid ---------------------------------------------------------------------------


def _row_scale(coefficients: Sequence[float]) -> float:
    """Scale of one CP-SAT constraint: its smallest positive coefficient becomes
    :data:`CP_PRECISION`."""
    positive = [c for c in coefficients if c > 0]
    return CP_PRECISION / min(positive) if positive else 1.0


def _scaled(value: float, scale: float, up: bool) -> int:
    x = value * scale
    return int(math.ceil(x - 1e-9)) if up else int(math.floor(x + 1e-9))


def _partition_cpsat(
    data: PartitionData, relax: bool
) -> tuple[Any, Any, Any, float, dict[str, Any]]:
    """CP-SAT model of the partition on integer grids (see docs/polyserve.md).

    The rate is ``A g`` (``g`` = the rate's upper bound / :data:`CP_RATE_UNITS`) and class
    ``k``'s flow into tier ``j`` is ``x_kj g share_k / U`` with ``sum_j x_kj = U A``
    (``U`` = :data:`CP_FLOW_UNITS`); each constraint is scaled to integers (its smallest
    coefficient becomes :data:`CP_PRECISION`) and rounded.
    With ``relax`` (the registered formulation) coefficients are rounded in the constraints'
    favour and every capacity gets the slack that rounding the fluid optimum onto the grid
    needs, so its optimum is an upper bound of the MILP's; without, rounding goes against the
    constraints and there is no slack, so every solution is feasible for the MILP (a lower
    bound). Returns ``(model, A, variables, g, extra)``.
    """
    from ortools.sat.python import cp_model

    units = CP_FLOW_UNITS
    g = data.rate_upper_bound() / CP_RATE_UNITS
    m = cp_model.CpModel()
    A = m.new_int_var(0, CP_RATE_UNITS, "rate_units")
    n = {j: m.new_int_var(0, data.servers, f"n_{j}") for j in range(data.tiers)}
    n_p = m.new_int_var(0, data.servers, "n_prefill") if data.mode == "disaggregated" else None
    x = {(k, j): m.new_int_var(0, units * CP_RATE_UNITS, f"x_{k}_{j}") for k, j in data.pairs()}
    for k in range(data.tiers):
        if data.share[k] > 0:
            m.add(sum(x[k, j] for j in range(k + 1)) == units * A)
    flow_unit = g * data.share / units  # req/s per flow unit of each class
    for r in range(len(data.use)):
        slack = float(np.sum(data.use[r] * (g * data.share + flow_unit))) if relax else 0.0
        for j in range(data.tiers):
            terms = [(k, j) for k in range(j, data.tiers) if (k, j) in x]
            if not terms:
                continue
            coef = [float(data.use[r, k] * flow_unit[k]) for k, _ in terms]
            scale = _row_scale(coef)
            lhs = sum(
                _scaled(c, scale, up=not relax) * x[k, j]
                for c, (k, _) in zip(coef, terms, strict=True)
            )
            m.add(
                lhs
                <= _scaled(float(data.cap[r, j]), scale, up=relax) * n[j]
                + _scaled(slack, scale, up=True)
            )
    if n_p is not None:
        for per_request in (data.prefill @ data.share).tolist():
            scale = _row_scale([per_request * g])
            slack = per_request * g if relax else 0.0
            m.add(
                _scaled(per_request * g, scale, up=not relax) * A
                <= _scaled(1.0, scale, up=relax) * n_p + _scaled(slack, scale, up=True)
            )
    m.add(sum(n.values()) + (n_p if n_p is not None else 0) <= data.servers)
    m.maximize(A)
    return m, A, {"n": n, "n_prefill": n_p, "y": x}, g, {"flow_unit": flow_unit}


# -- exact models -------------------------------------------------------------------------------


class _BoundModel(ExactModel):
    """Shared solve loop of the bound models: one formulation, the solution summary in the
    Result's details (no schedule)."""

    bound_only = True

    def _summary(self, form: Any, solver: Any) -> dict[str, Any]:
        raise NotImplementedError

    def solve_with(self, backend: Backend, time_limit: float, **params: Any) -> Result | None:
        start = time.perf_counter()
        if backend.formulation == "brute":
            raw = backend.solve_brute(self, time_limit)
            solution = (
                dict(getattr(self, "_brute_solution", {})) if raw.objective is not None else {}
            )
        else:
            form = backend.build_formulation(self)
            raw = backend.solve_formulation(form, time_limit)
            solution = self._summary(form, raw.native) if raw.objective is not None else {}
        return raw.to_result(self, runtime_s=time.perf_counter() - start, solution=solution)


@register_model(PARTITION_PROBLEM)
class TierPartition(_BoundModel):
    """Servers per TPOT tier and promoted flows; maximize the served arrival rate on ``N``
    servers (req/s, an upper bound of the steady-state fluid model).

    Formulations: MILP (HiGHS, CBC), CP-SAT on integer grids (an upper bound within the grid's
    width of the MILP's), brute force (every partition of the servers, an LP each). The
    instance's settings give ``mode`` (default: the cluster's) and ``servers`` (default: the
    cluster's). The reported objective is in arrival req/s of the whole mix (servable rate over
    the servable fraction).
    """

    sense = "max"
    integral = True

    def __init__(self, instance: Instance, **options: Any) -> None:
        super().__init__(instance)
        self.data = PartitionData.of(instance, **options)
        self._brute_solution: dict[str, Any] = {}

    def _to_arrivals(self, servable_rate: float) -> float:
        return servable_rate / self.data.servable_fraction

    def milp(self) -> MilpFormulation:
        prob, v = partition_pulp(self.data, None, self.integral)
        self._vars = v
        return MilpFormulation(prob, to_schedule=lambda: None, objective_of=self._to_arrivals)

    def cpsat(self) -> CpFormulation:
        m, _, v, g, _ = _partition_cpsat(self.data, relax=True)
        self._vars = v
        return CpFormulation(
            m, to_schedule=lambda solver: None, objective_of=lambda a: self._to_arrivals(a * g)
        )

    def _summary(self, form: Any, solver: Any) -> dict[str, Any]:
        if isinstance(form, MilpFormulation):
            return _partition_solution(self.data, pulp_value, self._vars)
        per_tier = {
            self.data.label(j): float(solver.value(var)) for j, var in self._vars["n"].items()
        }
        if self._vars["n_prefill"] is not None:
            per_tier["prefill"] = float(solver.value(self._vars["n_prefill"]))
        return {"servers_per_tier": per_tier}

    def brute_force(self, time_limit: float) -> tuple[float, Any] | None:
        """Every split of the ``N`` servers among the tiers (and the prefill pool), the rate of
        each by an LP; the best."""
        stop = time.perf_counter() + time_limit
        parts = self.data.tiers + (1 if self.data.mode == "disaggregated" else 0)
        best, best_split = -1.0, None
        for split in _compositions(self.data.servers, parts):
            if time.perf_counter() > stop:
                raise TimeoutError(f"brute force over {PARTITION_PROBLEM} passed {time_limit} s")
            value = _partition_lp_for(self.data, split)
            if value > best + 1e-12:
                best, best_split = value, split
        assert best_split is not None
        per_tier = {self.data.label(j): float(best_split[j]) for j in range(self.data.tiers)}
        if self.data.mode == "disaggregated":
            per_tier["prefill"] = float(best_split[-1])
        self._brute_solution = {"servers_per_tier": per_tier}
        return self._to_arrivals(best), None


@register_model("tier-partition-fluid")
class TierPartitionFluid(TierPartition):
    """:class:`TierPartition` with continuous servers: the fluid bound of the same capacity
    model (an LP; promotion never helps it)."""

    name = ""  # set by the registration (the parent's name is not inherited)
    integral = False

    def cpsat(self) -> CpFormulation:
        raise NotImplementedError("tier-partition-fluid has continuous servers: solve it as an LP")

    def brute_force(self, time_limit: float) -> tuple[float, Any] | None:
        raise NotImplementedError("tier-partition-fluid has continuous servers: solve it as an LP")


def _compositions(total: int, parts: int):
    """Every tuple of ``parts`` non-negative integers summing to ``total``."""
    for bars in itertools.combinations(range(total + parts - 1), parts - 1):
        prev = -1
        split = []
        for b in bars:
            split.append(b - prev - 1)
            prev = b
        split.append(total + parts - 1 - prev - 1)
        yield tuple(split)


def min_servers(
    instance: Instance,
    rate: float | None = None,
    *,
    mode: str | None = None,
    integral: bool = True,
    time_limit: float = 60.0,
) -> dict[str, Any]:
    """Fewest servers (and their split) serving ``rate`` arrival req/s (default: the instance's
    ``rate`` setting) in the fluid model, by HiGHS: ``{"status", "servers", "servers_per_tier",
    "runtime_s"}``. With ``integral=False`` the servers are continuous (the fluid count)."""
    from slolab.solvers import get_backend

    data = PartitionData.of(instance, mode=mode, servers=max(int(instance.cluster.servers), 1))
    rate = float(rate if rate is not None else data.rate)
    if not rate > 0:
        raise ValueError(f"rate must be > 0 req/s, got {rate}")
    prob, v = partition_pulp(data, rate * data.servable_fraction, integral)
    backend = get_backend("highs")()
    form = MilpFormulation(prob, to_schedule=lambda: None)
    raw = backend.solve_formulation(form, time_limit)
    out: dict[str, Any] = {"status": raw.status.value, "runtime_s": raw.runtime_s}
    if raw.objective is not None:
        out["servers"] = float(raw.objective)
        out.update(_partition_solution(data, pulp_value, v))
    return out


# -- the windowed autoscale plan ----------------------------------------------------------------


@dataclass(frozen=True)
class PlanData:
    """A tier-autoscale instance as the plan sees it: windows of ``window_s`` seconds; per
    window, each class's arrival rate and mean resource use."""

    mode: str
    tiers_s: np.ndarray
    window_s: float
    demand: np.ndarray  # (W, m) servable req/s
    use: np.ndarray  # (W, R, m)
    cap: np.ndarray  # (R, m)
    prefill: np.ndarray  # (W, L, m)
    servers: int
    drain_s: np.ndarray  # (m,)
    startup_s: float

    @classmethod
    def of(cls, instance: Instance, windows: int | None = None) -> PlanData:
        mode = _mode(instance, None)
        req = TierRequests.of(instance)
        b, c = timing_lines(instance.timing)
        kv_cap, max_seqs, max_tokens = _pool_limits(instance)
        window_s = float(instance.settings.get("window_s", 60.0))
        if not window_s > 0:
            raise ValueError(f"window_s must be > 0, got {window_s}")
        arrival = instance.workload.arrival_s
        count = int(math.floor(float(arrival.max()) / window_s)) + 1
        if windows is not None:
            count = min(count, int(windows))
        keep = req.servable & (arrival < count * window_s)
        work = request_work(
            req.prompt[keep],
            req.output[keep],
            b,
            c,
            mode,
            _prefill_batch(instance),
            cached=req.cached[keep],
        )
        use, cap, _ = _resources(
            work["work"],
            work["kv"],
            work["seqs"],
            work["tokens"],
            b,
            req.tiers_s,
            kv_cap,
            max_seqs,
            max_tokens,
        )
        m = len(req.tiers_s)
        which = np.floor(arrival[keep] / window_s).astype(np.int64)
        klass = req.cls[keep]
        demand = np.zeros((count, m))
        mean_use = np.zeros((count, len(use), m))
        mean_pre = np.zeros((count, len(b), m))
        for w in range(count):
            for k in range(m):
                sel = (which == w) & (klass == k)
                if sel.any():
                    demand[w, k] = sel.sum() / window_s
                    mean_use[w, :, k] = use[:, sel].mean(axis=1)
                    mean_pre[w, :, k] = work["prefill"][:, sel].mean(axis=1)
        mean_output = float(req.output[req.servable].mean())
        return cls(
            mode=mode,
            tiers_s=req.tiers_s,
            window_s=window_s,
            demand=demand,
            use=mean_use,
            cap=cap,
            prefill=mean_pre,
            servers=int(instance.settings.get("servers", instance.cluster.servers)),
            drain_s=(mean_output - 1.0) * req.tiers_s,
            startup_s=float(instance.cluster.startup_s),
        )

    @property
    def windows(self) -> int:
        return len(self.demand)

    @property
    def tiers(self) -> int:
        return len(self.tiers_s)

    def label(self, j: int) -> str:
        return f"{self.tiers_s[j] * 1e3:g}ms"


def _plan_pulp(data: PlanData) -> tuple[Any, dict[str, Any]]:
    """PuLP model of the windowed plan (see :class:`TierAutoscale`)."""
    import pulp

    W, m = data.windows, data.tiers
    prob = pulp.LpProblem("tier_autoscale", pulp.LpMinimize)
    n = {
        (j, w): prob.add_variable(f"n_{j}_{w}", lowBound=0, cat="Integer")
        for j in range(m)
        for w in range(W)
    }
    up = {
        (j, w): prob.add_variable(f"up_{j}_{w}", lowBound=0, cat="Integer")
        for j in range(m)
        for w in range(W)
    }
    down = {
        (j, w): prob.add_variable(f"down_{j}_{w}", lowBound=0, cat="Integer")
        for j in range(m)
        for w in range(W)
    }
    pd_mode = data.mode == "disaggregated"
    n_p = (
        {w: prob.add_variable(f"np_{w}", lowBound=0, cat="Integer") for w in range(W)}
        if pd_mode
        else {}
    )
    up_p = (
        {w: prob.add_variable(f"upp_{w}", lowBound=0, cat="Integer") for w in range(W)}
        if pd_mode
        else {}
    )
    y = {
        (k, j, w): prob.add_variable(f"y_{k}_{j}_{w}", lowBound=0)
        for w in range(W)
        for k in range(m)
        if data.demand[w, k] > 0
        for j in range(k + 1)
    }
    cost = (
        data.window_s * (pulp.lpSum(n.values()) + pulp.lpSum(n_p.values()))
        + pulp.lpSum(float(data.drain_s[j]) * down[j, w] for j in range(m) for w in range(W))
        + data.startup_s * (pulp.lpSum(up.values()) + pulp.lpSum(up_p.values()))
    )
    prob += cost
    for w in range(W):
        for j in range(m):
            before = n[j, w - 1] if w else 0
            prob += n[j, w] == before + up[j, w] - down[j, w], f"balance_{j}_{w}"
        if pd_mode:
            prob += n_p[w] <= (n_p[w - 1] if w else 0) + up_p[w], f"prefill_on_{w}"
        for k in range(m):
            if data.demand[w, k] > 0:
                prob += (
                    pulp.lpSum(y[k, j, w] for j in range(k + 1)) == float(data.demand[w, k]),
                    f"demand_{k}_{w}",
                )
        for r in range(data.use.shape[1]):
            for j in range(m):
                terms = [
                    (float(data.use[w, r, k]), y[k, j, w]) for k in range(j, m) if (k, j, w) in y
                ]
                if terms:
                    prob += (
                        pulp.lpSum(a * v for a, v in terms) <= float(data.cap[r, j]) * n[j, w],
                        f"cap_{r}_{j}_{w}",
                    )
        if pd_mode:
            for line, per in enumerate((data.prefill[w] @ data.demand[w]).tolist()):
                prob += n_p[w] >= per, f"prefill_{line}_{w}"
        draining = pulp.lpSum(down[j, w] for j in range(m) if data.drain_s[j] > 0)
        prob += (
            pulp.lpSum(n[j, w] for j in range(m)) + draining + (n_p[w] if pd_mode else 0)
            <= data.servers,
            f"servers_{w}",
        )
    return prob, {"n": n, "n_prefill": n_p, "up": up, "down": down}


def _plan_cpsat(data: PlanData, relax: bool) -> tuple[Any, dict[str, Any]]:
    """CP-SAT model of the plan on integer grids: flows in units of 1 / :data:`CP_FLOW_UNITS` of
    each class's window demand, each constraint scaled to integers, cost in integer
    milliseconds. With ``relax``, rounding favours the constraints, capacities get the grid's
    slack and cost coefficients round down: its optimum is a lower bound of the MILP's; without,
    the opposite (every solution is feasible for the MILP, the cost rounds up)."""
    from ortools.sat.python import cp_model

    W, m = data.windows, data.tiers
    units = CP_FLOW_UNITS
    model = cp_model.CpModel()
    N = data.servers
    n = {(j, w): model.new_int_var(0, N, f"n_{j}_{w}") for j in range(m) for w in range(W)}
    up = {(j, w): model.new_int_var(0, N, f"up_{j}_{w}") for j in range(m) for w in range(W)}
    down = {(j, w): model.new_int_var(0, N, f"down_{j}_{w}") for j in range(m) for w in range(W)}
    pd_mode = data.mode == "disaggregated"
    n_p = {w: model.new_int_var(0, N, f"np_{w}") for w in range(W)} if pd_mode else {}
    up_p = {w: model.new_int_var(0, N, f"upp_{w}") for w in range(W)} if pd_mode else {}
    x = {
        (k, j, w): model.new_int_var(0, units, f"x_{k}_{j}_{w}")
        for w in range(W)
        for k in range(m)
        if data.demand[w, k] > 0
        for j in range(k + 1)
    }

    def ms(value: float) -> int:
        v = value * CP_COST_UNITS_PER_S
        return int(math.floor(v + 1e-9)) if relax else int(math.ceil(v - 1e-9))

    model.minimize(
        ms(data.window_s) * (sum(n.values()) + sum(n_p.values()))
        + sum(ms(float(data.drain_s[j])) * down[j, w] for j in range(m) for w in range(W))
        + ms(data.startup_s) * (sum(up.values()) + sum(up_p.values()))
    )
    for w in range(W):
        for j in range(m):
            before = n[j, w - 1] if w else 0
            model.add(n[j, w] == before + up[j, w] - down[j, w])
        if pd_mode:
            model.add(n_p[w] <= (n_p[w - 1] if w else 0) + up_p[w])
        unit = data.demand[w] / units
        for k in range(m):
            if data.demand[w, k] > 0:
                model.add(sum(x[k, j, w] for j in range(k + 1)) == units)
        for r in range(data.use.shape[1]):
            slack = float(np.sum(data.use[w, r] * unit)) if relax else 0.0
            for j in range(m):
                terms = [k for k in range(j, m) if (k, j, w) in x]
                if terms:
                    coef = [float(data.use[w, r, k] * unit[k]) for k in terms]
                    scale = _row_scale(coef)
                    lhs = sum(
                        _scaled(c, scale, up=not relax) * x[k, j, w]
                        for c, k in zip(coef, terms, strict=True)
                    )
                    model.add(
                        lhs
                        <= _scaled(float(data.cap[r, j]), scale, up=relax) * n[j, w]
                        + _scaled(slack, scale, up=True)
                    )
        if pd_mode:
            for per in (data.prefill[w] @ data.demand[w]).tolist():
                scale = _row_scale([per])
                model.add(
                    _scaled(1.0, scale, up=relax) * n_p[w] >= _scaled(per, scale, up=not relax)
                )
        draining = sum(down[j, w] for j in range(m) if data.drain_s[j] > 0)
        model.add(sum(n[j, w] for j in range(m)) + draining + (n_p[w] if pd_mode else 0) <= N)
    return model, {"n": n, "n_prefill": n_p}


@register_model(AUTOSCALE_PROBLEM)
class TierAutoscale(_BoundModel):
    """Servers per tier per window of a trace; minimize server-seconds (a lower bound of the
    windowed fluid model).

    Per window ``w`` of ``window_s`` seconds: integer servers ``n_jw`` per tier with
    ``n_jw = n_j,w-1 + up_jw - down_jw`` (all start in the best-effort pool), promoted flows
    serving each class's rate in that window within the tiers' capacity (as
    :class:`TierPartition`), prefill servers ``n_Pw`` disaggregated. A server switched on pays
    the cluster's start-up delay; a drained one stays busy ``(mean output - 1) tau_j`` seconds
    (its last requests' decode) and counts against ``N`` in the window it drains. Cost:
    ``window_s sum n + sum drain_j down_jw + startup sum up``.

    Formulations: MILP (HiGHS, CBC) and CP-SAT on integer grids (a lower bound of the MILP's
    optimum, equal to it unless the grid's slack saves a server).
    """

    sense = "min"

    def __init__(self, instance: Instance, windows: int | None = None) -> None:
        super().__init__(instance)
        self.data = PlanData.of(instance, windows=windows)

    def milp(self) -> MilpFormulation:
        prob, v = _plan_pulp(self.data)
        self._vars = v
        return MilpFormulation(prob, to_schedule=lambda: None)

    def cpsat(self) -> CpFormulation:
        model, v = _plan_cpsat(self.data, relax=True)
        self._vars = v
        return CpFormulation(
            model, to_schedule=lambda solver: None, objective_of=lambda c: c / CP_COST_UNITS_PER_S
        )

    def _summary(self, form: Any, solver: Any) -> dict[str, Any]:
        d = self.data
        if isinstance(form, MilpFormulation):
            value: Callable[[Any], float] = pulp_value
        else:
            value = lambda var: float(solver.value(var))  # noqa: E731
        plan = {
            d.label(j): [value(self._vars["n"][j, w]) for w in range(d.windows)]
            for j in range(d.tiers)
        }
        if self._vars["n_prefill"]:
            plan["prefill"] = [value(self._vars["n_prefill"][w]) for w in range(d.windows)]
        return {"servers_per_tier": plan, "window_s": d.window_s, "windows": d.windows}


def solve_raw(formulation: Any, backend_name: str, time_limit: float) -> RawSolve:
    """Solve a formulation with a named backend (tests and benchmarks compare backends on one
    model this way)."""
    from slolab.solvers import get_backend

    return get_backend(backend_name)().solve_formulation(formulation, time_limit)


def partition_cpsat(data: PartitionData, relax: bool) -> CpFormulation:
    """The CP-SAT partition model (``relax``: the upper-bound grid; else the feasible grid), its
    objective in servable req/s."""
    m, _, _, g, _ = _partition_cpsat(data, relax)
    return CpFormulation(m, to_schedule=lambda solver: None, objective_of=lambda a: a * g)


def plan_cpsat(data: PlanData, relax: bool) -> CpFormulation:
    """The CP-SAT plan model (``relax``: the lower-bound grid; else the feasible grid), its
    objective in server-seconds."""
    model, _ = _plan_cpsat(data, relax)
    return CpFormulation(
        model, to_schedule=lambda solver: None, objective_of=lambda c: c / CP_COST_UNITS_PER_S
    )


def partition_milp(data: PartitionData, integral: bool = True) -> MilpFormulation:
    """The partition MILP (objective in servable req/s)."""
    prob, _ = partition_pulp(data, None, integral)
    return MilpFormulation(prob, to_schedule=lambda: None)


def plan_milp(data: PlanData) -> MilpFormulation:
    """The plan MILP (objective in server-seconds)."""
    prob, _ = _plan_pulp(data)
    return MilpFormulation(prob, to_schedule=lambda: None)
