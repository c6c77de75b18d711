"""Exact formulations, one module (or package) per paper problem (importing registers them)."""

from slolab.models import (
    deployment,
    deployment_pd,
    dispatch_bounds,
    dispatch_lns,
    dispatch_scale,
    proserve,
    sa_bp,
    sa_columns,
    sa_ordering,
    slos_admission,
    tdg_bound,
    tdg_bp,
    tdg_columns,
    tier_partition,
)

__all__ = [
    "deployment",
    "deployment_pd",
    "dispatch_bounds",
    "dispatch_lns",
    "dispatch_scale",
    "proserve",
    "sa_bp",
    "sa_columns",
    "sa_ordering",
    "slos_admission",
    "tdg_bound",
    "tdg_bp",
    "tdg_columns",
    "tier_partition",
]
