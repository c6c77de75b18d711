"""PolyServe's central scheduler, :class:`PolyServeController`: its admission, routing and
scaling parts joined into the one object the engine sees as router, decode router and scaler.

References
----------
PolyServe, Sec. 4.2-4.7.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from slolab.heuristics.polyserve.routing import DecodeSide
from slolab.heuristics.polyserve.scaling import ControllerScaling

if TYPE_CHECKING:
    from slolab.heuristics.polyserve.tiers import PolyServeParams
    from slolab.instances.records import Instance


class PolyServeController(ControllerScaling):
    """PolyServe's central scheduler: entry router, decode router (:attr:`decode_router`) and
    scaler in one object.

    Co-located, a request is placed on a server of its tier (prefill and decode there). Disag-
    gregated, the prefill side is one shared pool scheduled by earliest first-token deadline
    (Sec. 4.2); after the KV transfer the request is placed on a decode server of its tier.

    Why one object of about 1,100 lines with its parts: routing, admission and scaling share
    one state, as PolyServe's central scheduler does. A placement asks the admission and
    records what it refused (the refusal memory a retry reads); a tick's scaling reads the held
    queues and the tier lists routing keeps, and the ticks the engine may pass over depend on
    the last dispatch's refusals. The parts live in their own modules and are joined here as a
    chain of base classes, each the state it starts and the methods on it:

    - :class:`~slolab.heuristics.polyserve.tiers.ControllerBase` (``tiers.py``): the
      parameters, tiers, pools, limits, profile and per-request arrays;
    - :class:`~slolab.heuristics.polyserve.admission.ControllerAdmission`
      (``admission.py``): :meth:`admit_colocated`, :meth:`admit_decode` and the memory of
      refusals (Sec. 4.5-4.7);
    - :class:`~slolab.heuristics.polyserve.routing.ControllerRouting` (``routing.py``):
      :meth:`route`, :meth:`route_decode`, :meth:`dispatch`, the held queues, the load
      gradient and lazy promotion (Sec. 4.2-4.4);
    - :class:`~slolab.heuristics.polyserve.scaling.ControllerScaling` (``scaling.py``):
      :meth:`decide` and the ticks the engine may skip (Sec. 4.3-4.4).

    Parameters
    ----------
    params : PolyServeParams, optional
    """

    name = "polyserve"

    def __init__(self, params: PolyServeParams | None = None) -> None:
        super().__init__(params)
        self.interval_s = self.params.tick_s
        self.decode_router = DecodeSide(self)
        self.skip_held_ticks = False

    def start(self, instance: Instance, seed: int) -> None:
        """Read the instance (tiers, pools, the profile, the mean output length) and start
        every part afresh."""
        self.read_instance(instance)
        self.start_admission(instance)
        self.start_routing()
        self.start_scaling(instance)

    def summary(self) -> dict[str, float]:
        """Routing decisions made (arrivals and retries of held requests), their mean latency,
        and the latency of each request's first decision at each router it meets (mean, p99),
        in seconds."""
        lat = np.asarray(self.latencies_s) if self.latencies_s else np.zeros(1)
        return {
            "decisions": float(self.decisions),
            "decision_mean_s": self.decision_s / self.decisions if self.decisions else 0.0,
            "arrival_decision_mean_s": float(lat.mean()),
            "arrival_decision_p99_s": float(np.percentile(lat, 99)),
        }
