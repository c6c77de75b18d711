"""PolyServe's online scheduler and the baselines of its evaluation.

PolyServe (Sec. 4) bins requests by TPOT tier and gives each tier its own servers (one engine
pool per tier, named ``tpot-20ms`` and so on); every tier grows from, and returns servers to, a
best-effort pool (servers switched off in the engine: they cost nothing).

- :class:`PolyServeController` is the router (and, disaggregated, the decode router) and the
  scaler at once, as PolyServe's central scheduler is. It keeps the requests it cannot place in
  its own queues (the engine's held requests, :data:`slolab.sim.HOLD`), routes each request to
  the *highest-load* server of its tier that can still meet its deadlines (a load gradient,
  Sec. 4.3), with profile-based admission (Sec. 4.5: the server's future iterations predicted
  from a (batch, KV) table and the mean output length) and wait-time-aware admission (Sec.
  4.6), promotes a request to a tighter tier only when its own is full (lazy promotion, Sec.
  4.4), moves a *pending* server (its last own-tier request gone) into the tier of the requests
  it runs when that tier needs a server, and autoscales: a tier with requests it cannot place
  takes a server from the best-effort pool; the last server of a tier returns to it once empty
  (Sec. 4.3-4.4).
- :class:`PolyServePolicy` forms each server's batches: co-located, decode every running request
  and fill the tier's TPOT with prefill chunks (continuous chunked-prefill prediction, Sec.
  4.7); disaggregated prefill servers, dynamic chunking (Sec. 4.7); decode servers decode
  everything the router admitted.
- Baselines (Sec. 5.1): ``random`` (a random server), ``minimal`` (the server with the lowest
  predicted cycle time) and ``chunk`` (least-loaded routing and a static token budget, swept
  by the studies), co-located or disaggregated as ``--mode`` says (``chunk`` is co-located
  only, as in the paper). These are *policies*; the router registry's ``random`` (a random
  server for any policy) is a different thing.

Every parameter the paper leaves open is a field of :class:`PolyServeParams`, with the value
chosen and why in ``docs/polyserve.md``.

Where each part lives (each module imports only those above it):

- ``profile.py``: the (batch, KV) profile and its searches, the chunk attention bound, the
  KV peak (:class:`Profile`, :func:`chunk_attention_work`, :func:`kv_peak`);
- ``tiers.py``: tiers and pools, :class:`PolyServeParams`, what every controller part reads
  of an instance;
- ``admission.py``: the admission checks and the memory of refusals;
- ``routing.py``: placement, the held queues and their dispatch, the decode router;
- ``scaling.py``: the scaler's ticks;
- ``controller.py``: :class:`PolyServeController`, the three parts joined;
- ``batch_former.py``: :class:`PolyServePolicy`;
- ``schedulers.py``: the registered schedulers (PolyServe and its baselines,
  :class:`MinimalCycleRouter`) and the capacity bound.

References
----------
PolyServe: Efficient Multi-SLO Serving at Scale, Sec. 3.4 (batch limits), 4.2-4.7 (design),
5.1 (setup, baselines).
"""

from slolab.heuristics.policies import Scheduler
from slolab.heuristics.polyserve.admission import (
    ADMIT,
    FULL,
    TOO_LATE,
    ControllerAdmission,
    QueuedPrompts,
)
from slolab.heuristics.polyserve.batch_former import PolyServePolicy
from slolab.heuristics.polyserve.controller import PolyServeController
from slolab.heuristics.polyserve.profile import (
    MEMO_ENTRIES,
    KvPeakBase,
    Profile,
    chunk_attention_work,
    kv_peak,
    last_fitting,
    last_fitting_near,
    prefill_attention_s,
)
from slolab.heuristics.polyserve.routing import ControllerRouting, DecodeSide, TierRanking
from slolab.heuristics.polyserve.scaling import ControllerScaling
from slolab.heuristics.polyserve.schedulers import (
    MinimalCycleRouter,
    bound_prefill_split,
    capacity_bound,
    polyserve_scheduler,
)
from slolab.heuristics.polyserve.tiers import (
    H200_LLAMA31_8B_KV_BYTES_PER_TOKEN,
    H200_LLAMA31_8B_KV_TOKENS,
    PREFILL_POOL,
    ControllerBase,
    PolyServeParams,
    RequestArrays,
    polyserve_cluster,
    tier_pool,
    tiers_of,
)
from slolab.sim.policy import HOLD

__all__ = [
    "ADMIT",
    "FULL",
    "H200_LLAMA31_8B_KV_BYTES_PER_TOKEN",
    "H200_LLAMA31_8B_KV_TOKENS",
    "HOLD",
    "MEMO_ENTRIES",
    "PREFILL_POOL",
    "TOO_LATE",
    "ControllerAdmission",
    "ControllerBase",
    "ControllerRouting",
    "ControllerScaling",
    "DecodeSide",
    "KvPeakBase",
    "MinimalCycleRouter",
    "PolyServeController",
    "PolyServeParams",
    "PolyServePolicy",
    "Profile",
    "QueuedPrompts",
    "RequestArrays",
    "Scheduler",
    "TierRanking",
    "bound_prefill_split",
    "capacity_bound",
    "chunk_attention_work",
    "kv_peak",
    "last_fitting",
    "last_fitting_near",
    "polyserve_cluster",
    "polyserve_scheduler",
    "prefill_attention_s",
    "tier_pool",
    "tiers_of",
]
