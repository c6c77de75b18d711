"""Token-level discrete-event engine.

Each server runs iterations back to back. An iteration's duration is its server's timing model
applied to its shape; its tokens are emitted at its end (a prefill emits the request's next
token when its last chunk completes). Three modes (``instance.cluster.mode``):

- ``colocated``: continuous batching with chunked prefill (prefill chunks and decode tokens in
  one iteration);
- ``static``: a static batch runs to completion before the next starts; member timelines come
  from :mod:`slolab.sim.static`;
- ``disaggregated``: prefill servers run prefill only, decode servers decode only; a finished
  prefill emits the first token, then the KV cache moves to a decode server
  (``cluster.kv_transfer_s(prompt + 1)`` seconds) and the request waits there.

Pools and elasticity: every server belongs to a pool (:class:`slolab.instances.Pool`; a fixed
cluster has the pools its mode implies) with its own limits and timing. Servers are switched
on, drained and moved between pools by a scaler, by a policy (``Batch.scale``) or by a plan
(:mod:`slolab.sim.scaling`): a switched-on server pays from then and serves after its start-up
delay; a drained one takes no new work and departs when its last request finishes. Routers see
only servers that accept new work (starting or ready).

Event order at equal times: scaling actions first, then KV transfers and arrivals, then server
decisions, so a decision at time t sees every request that arrived by t and a router at t sees
the cluster as the actions at t left it.

KV accounting per server, in tokens: a request holds ``prefilled + generated`` tokens (its
processed prompt tokens and the output tokens emitted so far, counted from the iteration that
produces them); memory is allocated at an iteration's start and released when the request
finishes, is preempted, or (disaggregated prefill servers) leaves for its decode server. A
request its server could never hold (``prompt + output`` tokens, ``prompt + 1`` on a prefill
server, above the server's capacity) is rejected on arrival and counted in
``Outcome.rejected_kv``, with a warning.

Speed: a decode-only batch the policy marks ``repeat=True`` is fast-forwarded in one vectorised
window until the first of its requests finishes or memory runs out, or (with ``wake_at_s``)
until the first iteration ending at or after that time; a request routed to the server (or a
KV transfer reaching it), a request held in the central queue of its side under a central
router, and a request another server takes from that queue, cut the window after the
iteration in progress. The result is
identical to asking the policy at every iteration, bit for bit: the window's iteration ends are
its durations accumulated from its start left to right (``np.cumsum``), the floats that
stepping ``end = start + duration`` one iteration at a time gives, and every timing form times
a row the same way whatever rows are beside it.

Layout: :mod:`~slolab.sim.engine.servers` (a server's state and the read-only
:class:`Server` view), :mod:`~slolab.sim.engine.state` (the run's state and the moves every
part shares), :mod:`~slolab.sim.engine.routing` (arrivals, KV transfers, held requests and
central queues), :mod:`~slolab.sim.engine.ticks` (plan actions, scaler ticks, tick skipping,
scaling actions), :mod:`~slolab.sim.engine.iterations` (decisions, iteration starts, decode
windows, commits) and :mod:`~slolab.sim.engine.loop` (:class:`Engine`, its core loop and
outcome, and :func:`run`).
"""

# the names other modules import from the engine; its constants are read (a module reads its
# own: to change one in a test, set it on the module that defines it)
from slolab.sim.engine.iterations import SMALL_DECODE, WINDOW_CHUNK
from slolab.sim.engine.loop import Engine, UnsettledRunError, require_settled, run
from slolab.sim.engine.servers import Server
from slolab.sim.engine.state import warm_start_state
from slolab.sim.engine.ticks import SKIP_BLOCK, STALLED_TICKS

__all__ = [
    "SKIP_BLOCK",
    "SMALL_DECODE",
    "STALLED_TICKS",
    "WINDOW_CHUNK",
    "Engine",
    "Server",
    "UnsettledRunError",
    "require_settled",
    "run",
    "warm_start_state",
]
