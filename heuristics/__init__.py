"""Online heuristics, one module per paper, and the baselines they are compared with."""

from slolab.heuristics.baselines import (
    POLICIES,
    ROUTERS,
    EDFTokens,
    LeastLoaded,
    PrefillFirstFCFS,
    RandomRouter,
    RoundRobin,
    SarathiFCFS,
    StaticFCFS,
)
from slolab.heuristics.slos_serve_dp import DPDecision, algorithm2, pb_star, slos_dp

__all__ = [
    "POLICIES",
    "ROUTERS",
    "DPDecision",
    "EDFTokens",
    "LeastLoaded",
    "PrefillFirstFCFS",
    "RandomRouter",
    "RoundRobin",
    "SarathiFCFS",
    "StaticFCFS",
    "algorithm2",
    "pb_star",
    "slos_dp",
]
