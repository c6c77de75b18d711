"""Online heuristics, one module per paper, and the baselines they are compared with."""

from slolab.heuristics.baselines import (
    POLICIES as BASELINE_POLICIES,
)
from slolab.heuristics.baselines import (
    ROUTERS,
    EDFTokens,
    LeastLoaded,
    PrefillFirstFCFS,
    RandomRouter,
    RoundRobin,
    SarathiFCFS,
    StaticFCFS,
)
from slolab.heuristics.scalers import SCALERS, FixedScaler, ThresholdParams, ThresholdScaler
from slolab.heuristics.slos_serve import SLOsServeParams, SLOsServePolicy
from slolab.heuristics.slos_serve_dp import DPDecision, algorithm2, pb_star, slos_dp

#: Every online policy by name (baselines and the papers' schedulers).
POLICIES: dict[str, type] = {**BASELINE_POLICIES, "slos-serve": SLOsServePolicy}

__all__ = [
    "POLICIES",
    "ROUTERS",
    "SCALERS",
    "DPDecision",
    "EDFTokens",
    "FixedScaler",
    "LeastLoaded",
    "PrefillFirstFCFS",
    "RandomRouter",
    "RoundRobin",
    "SLOsServeParams",
    "SLOsServePolicy",
    "SarathiFCFS",
    "StaticFCFS",
    "ThresholdParams",
    "ThresholdScaler",
    "algorithm2",
    "pb_star",
    "slos_dp",
]
