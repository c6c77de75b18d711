"""Exact formulations, one module (or package) per paper problem (importing registers them)."""

from slolab.models import (
    deployment,
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
