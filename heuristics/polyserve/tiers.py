"""PolyServe's TPOT tiers and their pools, its parameters, and what every part of the
controller reads of an instance (:class:`ControllerBase`).

References
----------
PolyServe, Sec. 4.2-4.4 (tiers, pools, the best-effort pool), 5.1 (the H200 setup).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from slolab.heuristics.polyserve.profile import Profile, prefill_attention_s
from slolab.instances.records import cached_prompt_tokens
from slolab.timing.presets import LLAMA31_8B

if TYPE_CHECKING:
    from slolab.instances.records import Instance

#: KV tokens of one H200 serving Llama-3.1-8B: vLLM's 90 % of 141 GB less the 16.06 GB of FP16
#: weights, over 131,072 B of KV per token (32 layers, 8 KV heads of 128, K and V in FP16).
H200_LLAMA31_8B_KV_TOKENS = 845_642
#: KV bytes per token of Llama-3.1-8B (the KV cache moved from a prefill to a decode server).
H200_LLAMA31_8B_KV_BYTES_PER_TOKEN = LLAMA31_8B.kv_bytes_per_token  # 2 x 32 x 8 x 128 x 2 B
#: Name of the disaggregated prefill pool.
PREFILL_POOL = "prefill"


def tier_pool(tpot_s: float) -> str:
    """Name of the pool of the tier of TPOT ``tpot_s``: ``"tpot-20ms"``."""
    return f"tpot-{tpot_s * 1e3:g}ms"


def tiers_of(instance: Instance) -> np.ndarray:
    """The instance's TPOT tiers (s), tightest first: its requests' distinct TPOT SLOs."""
    tpot = np.asarray(instance.workload["tpot_slo_s"], dtype=float)
    tiers = np.unique(tpot[np.isfinite(tpot)])
    if not len(tiers):
        raise ValueError(
            f"instance {instance.name!r}: no request has a TPOT SLO; PolyServe bins requests by "
            "TPOT tier (use --slos polyserve)"
        )
    return tiers


def polyserve_cluster(instance: Instance, mode: str, servers: int) -> Instance:
    """``instance`` on PolyServe's pools: one empty pool per TPOT tier (mixed co-located,
    decode disaggregated, plus an empty ``prefill`` pool), with the instance's limits; the
    fleet size ``servers`` goes to the settings (the controller's cap). The servers keep the
    instance's prefix caching (``prefix_block_tokens``)."""
    from slolab.instances.records import Cluster, Pool

    if mode not in ("colocated", "disaggregated"):
        raise ValueError(f"PolyServe runs colocated or disaggregated, got mode {mode!r}")
    cl = instance.cluster
    role = "mixed" if mode == "colocated" else "decode"
    pools = [Pool(tier_pool(t), role) for t in tiers_of(instance)]
    if mode == "disaggregated":
        pools.insert(0, Pool(PREFILL_POOL, "prefill"))
    cluster = Cluster.from_pools(
        pools,
        kv_capacity_tokens=cl.kv_capacity_tokens,
        max_batch_size=cl.max_batch_size,
        max_batch_tokens=cl.max_batch_tokens,
        kv_bytes_per_token=cl.kv_bytes_per_token,
        kv_transfer_bandwidth_bytes_per_s=cl.kv_transfer_bandwidth_bytes_per_s,
        kv_transfer_queued=cl.kv_transfer_queued,
        startup_s=cl.startup_s,
        move_s=cl.move_s,
        prefix_block_tokens=cl.prefix_block_tokens,
    )
    settings = {**instance.settings, "servers": int(servers), "mode": mode}
    return dataclasses.replace(instance, cluster=cluster, settings=settings)


@dataclass(frozen=True, slots=True)
class PolyServeParams:
    """PolyServe's settings (the paper gives the mechanisms; the values are ours, see
    docs/polyserve.md).

    Parameters
    ----------
    prefill_chunk_tokens : int
        Disaggregated prefill token budget ``C`` of dynamic chunking (Sec. 4.7's example: 1024).
    min_chunk_tokens : int
        Co-located: prefill tokens an iteration carries even when the decodes fill the TPOT (so
        a prefill never starves).
    dispatch_lookahead : int
        Held requests of one queue tried in a row without placing one before the queue waits
        for the next retry (a request no server can take does not block those behind it).
    prefill_slack_tpots : float
        Disaggregated: a prefill server is chosen only if the prompt is predicted done this many
        of the request's TPOTs before its TTFT deadline, so that its second token (due one TPOT
        after it) can still find a decode server (Sec. 4.6's worst case).
    tick_s : float
        How often the controller looks at the cluster (scale-ups, retries).
    scale_down_s : float
        How often it checks each tier's last server ("periodically", Sec. 4.3).
    promotion : {"lazy", "eager", "none"}
        Lazy (Sec. 4.4): a tighter tier only when the own tier is full; eager: tighter tiers
        first; none: own tier only (ablations).
    chunk_timing : {"model", "profile"}
        How a co-located server sizes its prefill chunks within the tier's TPOT: with its
        iteration-time model, prefill attention included (``"model"``), or with the (batch, KV)
        profile alone, prefill attention ignored as the paper's router does (``"profile"``).
    tpot_bound : {"decoding", "always"}
        When a co-located iteration must stay within the tier's TPOT. ``"decoding"`` (the
        default): when a request decodes on the server (Sec. 3.4 bounds the iteration "from
        the decode perspective"); with none decoding, the first prompt in deadline order is
        chunked as the server allows (its token cap), and the admission predicts that prefill
        on an empty server. ``"always"``: every iteration, prompts alone too (Sec. 4.7 read
        literally: "to attain TPOT, the prefill is chunked into more pieces"), the former rule.
    kv_reserve : float
        Share of a server's KV memory admission keeps free (outputs longer than the mean use
        it; a disaggregated decode server cannot recompute a prompt to make room).
    mean_output_tokens : float, optional
        The output length every prediction assumes (Sec. 4.5: the average decode length);
        default the instance's mean.
    """

    prefill_chunk_tokens: int = 1024
    min_chunk_tokens: int = 32
    dispatch_lookahead: int = 16
    prefill_slack_tpots: float = 1.0
    tick_s: float = 0.005
    scale_down_s: float = 1.0
    promotion: str = "lazy"
    chunk_timing: str = "model"
    tpot_bound: str = "decoding"
    kv_reserve: float = 0.05
    mean_output_tokens: float | None = None

    def __post_init__(self) -> None:
        for name in ("prefill_chunk_tokens", "min_chunk_tokens", "dispatch_lookahead"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {v!r}")
        for name in ("tick_s", "scale_down_s"):
            v = getattr(self, name)
            if not (math.isfinite(v) and v > 0):
                raise ValueError(f"{name} must be a finite number > 0 (s), got {v!r}")
        if not (math.isfinite(self.prefill_slack_tpots) and self.prefill_slack_tpots >= 0):
            raise ValueError(f"prefill_slack_tpots must be >= 0, got {self.prefill_slack_tpots!r}")
        if self.promotion not in ("lazy", "eager", "none"):
            raise ValueError(f"promotion must be lazy, eager or none, got {self.promotion!r}")
        if not 0 <= self.kv_reserve < 1:
            raise ValueError(f"kv_reserve must be in [0, 1), got {self.kv_reserve!r}")
        if self.chunk_timing not in ("model", "profile"):
            raise ValueError(f"chunk_timing must be model or profile, got {self.chunk_timing!r}")
        if self.tpot_bound not in ("decoding", "always"):
            raise ValueError(f"tpot_bound must be decoding or always, got {self.tpot_bound!r}")
        if self.mean_output_tokens is not None and not self.mean_output_tokens >= 1:
            raise ValueError(f"mean_output_tokens must be >= 1, got {self.mean_output_tokens}")


@dataclass(frozen=True)
class RequestArrays:
    """Per-request arrays the controller and the policy read once."""

    arrival: np.ndarray
    prompt: np.ndarray
    # prompt tokens in the snapshot's given prefix cache (the workload's cached_tokens; zeros
    # without it): a prefill computes the rest, their attention over these
    cached: np.ndarray
    ttft: np.ndarray  # inf without a TTFT SLO
    tpot: np.ndarray  # the tier's TPOT (best effort: the loosest)
    tier: np.ndarray  # class index, tightest 0 (best effort: the loosest)
    best_effort: np.ndarray

    @classmethod
    def of(cls, instance: Instance, tiers: np.ndarray) -> RequestArrays:
        wl = instance.workload
        tpot = np.asarray(wl["tpot_slo_s"], dtype=float)
        finite = np.isfinite(tpot)
        tier = np.where(finite, np.searchsorted(tiers, np.where(finite, tpot, 0.0)), len(tiers) - 1)
        return cls(
            arrival=wl.arrival_s.astype(float),
            prompt=wl.prompt_tokens.astype(np.int64),
            cached=cached_prompt_tokens(wl),
            ttft=np.nan_to_num(np.asarray(wl["ttft_slo_s"], dtype=float), nan=np.inf),
            tpot=tiers[tier],
            tier=tier.astype(np.int64),
            best_effort=~finite,
        )


class ControllerBase:
    """What every part of :class:`~slolab.heuristics.polyserve.PolyServeController` reads: its
    parameters and, once :meth:`read_instance` has run, the instance's tiers and pools, the
    servers' limits, the profile and the per-request arrays, fixed for the run."""

    def __init__(self, params: PolyServeParams | None = None) -> None:
        self.params = params or PolyServeParams()

    def read_instance(self, instance: Instance) -> None:
        """Read the instance: tiers, pools, limits, the profile, the mean output length."""
        self.tiers = tiers_of(instance)
        self.req = RequestArrays.of(instance, self.tiers)
        self.mode = instance.cluster.mode
        self.pools = [tier_pool(t) for t in self.tiers]
        self.tier_of_pool = {p: j for j, p in enumerate(self.pools)}
        known = {p.name for p in instance.cluster.resolved_pools()}
        missing = [p for p in self.pools if p not in known]
        if missing:
            raise ValueError(
                f"PolyServe needs one pool per TPOT tier ({', '.join(self.pools)}); the cluster "
                f"lacks {', '.join(missing)} (build it with polyserve_cluster)"
            )
        pool = instance.cluster.resolved_pools()[-1]
        self.kv_capacity = int(pool.kv_capacity_tokens)  # type: ignore[arg-type]
        self.kv_admit = self.kv_capacity * (1.0 - self.params.kv_reserve)
        self.max_seqs = int(pool.max_batch_size)  # type: ignore[arg-type]
        self.max_tokens = int(pool.max_batch_tokens)  # type: ignore[arg-type]
        self.profile = Profile(instance.timing, self.kv_capacity)
        self._read_time = self.profile.table.scalar_time  # Profile.time on floats
        self.attention_s = (
            prefill_attention_s(instance.timing) if self.params.chunk_timing == "model" else 0.0
        )
        mean = self.params.mean_output_tokens
        self.d_hat = float(mean if mean is not None else instance.workload.output_tokens.mean())
        # read at every placement: each tier's TPOT as a float, each request's first-token
        # deadline (the same float sums as arrival + TTFT read one at a time) and class
        self.tier_taus = [float(t) for t in self.tiers]
        self.first_deadline: list[float] = (self.req.arrival + self.req.ttft).tolist()
        self._tier_list: list[int] = self.req.tier.tolist()  # each request's class, as a list
