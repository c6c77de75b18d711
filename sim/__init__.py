"""Token-level discrete-event engine, Outcome, metrics and the independent checker."""

from slolab.sim import metrics
from slolab.sim.check import check
from slolab.sim.engine import Server, run
from slolab.sim.outcome import Outcome
from slolab.sim.policy import HOLD, Batch, Policy, PolicyError, Router
from slolab.sim.replay import replay
from slolab.sim.scaling import ClusterView, ScaleAction, ScaleEvent, ScalePlan, Scaler
from slolab.sim.schedule import PlannedIteration, Schedule

__all__ = [
    "HOLD",
    "Batch",
    "ClusterView",
    "Outcome",
    "PlannedIteration",
    "Policy",
    "PolicyError",
    "Router",
    "ScaleAction",
    "ScaleEvent",
    "ScalePlan",
    "Scaler",
    "Schedule",
    "Server",
    "check",
    "metrics",
    "replay",
    "run",
]
