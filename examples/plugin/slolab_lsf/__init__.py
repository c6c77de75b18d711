"""An example slolab plugin: a least-slack-first policy, a router, a scaler, an SLO scheme and
a timing preset, found by slolab through the entry points in pyproject.toml."""

from slolab_lsf.extras import FewestWaiting, QueueStepScaler, flat_slos, toy_timing
from slolab_lsf.least_slack import LeastSlackFirst

__all__ = ["FewestWaiting", "LeastSlackFirst", "QueueStepScaler", "flat_slos", "toy_timing"]
