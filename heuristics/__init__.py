"""Online heuristics, one module per paper, and the baselines they are compared with.

Policies and routers are registered by name (:mod:`slolab.heuristics.policies`): build one
with :func:`make_policy` / :func:`make_router`, or, for a policy that brings its own routers
and scaler (PolyServe), :func:`make_scheduler`.
"""

from slolab.heuristics.baselines import (
    EDFTokens,
    LeastLoaded,
    PrefillFirstFCFS,
    RandomRouter,
    RoundRobin,
    SarathiFCFS,
    StaticFCFS,
)
from slolab.heuristics.cache_routing import CacheAwareParams, CacheAwareRouter
from slolab.heuristics.hyperflexis import (
    DispatcherParams,
    HoldRouter,
    HyperFlexisDispatcher,
    HyperFlexisScaler,
    PriorityMapper,
    ScalerParams,
)
from slolab.heuristics.policies import (
    Scheduler,
    make_policy,
    make_router,
    make_scheduler,
    policy_names,
    router_names,
    sarathi_token_budget,
)
from slolab.heuristics.polyserve import (
    MinimalCycleRouter,
    PolyServeController,
    PolyServeParams,
    PolyServePolicy,
)
from slolab.heuristics.proserve import (
    FairBatching,
    GoRouting,
    GoRoutingParams,
    MostFreeKV,
    SarathiPriority,
    SlideBatching,
    SlideBatchingParams,
    WeightedVTC,
)
from slolab.heuristics.sa_online import SAOrderingPolicy
from slolab.heuristics.scalers import SCALERS, FixedScaler, ThresholdParams, ThresholdScaler
from slolab.heuristics.scorpio import ScorpioPolicy
from slolab.heuristics.slos_serve import SLOsServeParams, SLOsServePolicy
from slolab.heuristics.slos_serve_dp import DPDecision, algorithm2, pb_star, slos_dp

__all__ = [
    "CacheAwareParams",
    "CacheAwareRouter",
    "DPDecision",
    "DispatcherParams",
    "HoldRouter",
    "HyperFlexisDispatcher",
    "HyperFlexisScaler",
    "PriorityMapper",
    "SAOrderingPolicy",
    "ScalerParams",
    "ScorpioPolicy",
    "EDFTokens",
    "FairBatching",
    "GoRouting",
    "GoRoutingParams",
    "SCALERS",
    "FixedScaler",
    "LeastLoaded",
    "MinimalCycleRouter",
    "MostFreeKV",
    "PolyServeController",
    "PolyServeParams",
    "PolyServePolicy",
    "PrefillFirstFCFS",
    "RandomRouter",
    "RoundRobin",
    "SLOsServeParams",
    "SLOsServePolicy",
    "SarathiFCFS",
    "SarathiPriority",
    "Scheduler",
    "SlideBatching",
    "SlideBatchingParams",
    "StaticFCFS",
    "WeightedVTC",
    "ThresholdParams",
    "ThresholdScaler",
    "algorithm2",
    "make_policy",
    "make_router",
    "make_scheduler",
    "pb_star",
    "policy_names",
    "router_names",
    "sarathi_token_budget",
    "slos_dp",
]
