"""SLOs-Serve admission at one scheduler call: the problem record and the exact models B1, B2.

At a scheduler call (time 0 below; ``call_time_s`` on the instance clock) the scheduler holds
*running* requests, which must keep their SLOs, and *new* requests, which it may admit or
decline. Each request has a prefill still to run (``remaining_prefill_tokens``, 0 when it is
decoding) that must be complete by its prefill deadline, a decode TPOT tier, a KV memory need
and (new requests) a value. The models choose the admitted set of largest total value such
that a batch process on one server keeps every admitted and running request within its SLOs.

- **B1** (:class:`AdmissionB1`, ``"slos-b1"``): the paper's batch process. Batches of fixed
  duration ``t0`` (the tightest TPOT in play) each carry ``C = time2bs(t0)`` tokens; decode
  tokens follow Algorithm 2's cadence; prefill budget is allocated earliest deadline first. A
  0-1 MILP with one cumulative token-budget constraint per distinct deadline and one
  per-batch decode-load constraint per (segment, slot pattern); plus brute force.
- **B2** (:class:`AdmissionB2`, ``"slos-b2"``): dynamic batch sizing. Batches are arcs on a
  time grid of step ``t0 / cells_per_batch``, each with its own duration (bounded by the
  tightest TPOT of the requests decoding during it) and token capacity ``time2bs(duration)``;
  each request picks when it starts decoding, and every decode token is emitted by its
  deadline, within the horizon and after it. B1's batches are one feasible choice when every
  TPOT is a multiple of ``t0``, so B2 >= B1 then. A 0-1 MILP; plus brute force.

The math, the reading of Algorithm 2 and the proofs are in ``docs/slos_serve.md``.

Instance encoding (``instance.problem == "slos-admission"``): one workload row per request.
Standard columns used: ``arrival_s``, ``prompt_tokens``, ``output_tokens``, ``ttft_slo_s``,
``tpot_slo_s`` (the decode tier), ``value``. Extra columns: ``running`` (bool),
``remaining_prefill_tokens`` (int; a new request's is its prompt), ``kv_tokens`` (int, KV
memory reserved for the request's whole life, prompt plus expected output), optional
``prefill_deadline_s`` (absolute; default ``arrival_s + ttft_slo_s``), optional
``generated_tokens`` (output tokens already emitted; default 1 for decoding running requests,
0 otherwise) and optional ``cached_tokens`` (a new request's prompt tokens in the snapshot's
given cache: the models charge ``remaining_prefill_tokens - cached_tokens`` of prefill and
``kv_tokens - cached_tokens`` of memory; docs/slos_serve.md). Settings: ``call_time_s``
(default the latest arrival), optional ``kv_capacity_tokens`` (default
``cluster.kv_capacity_tokens``), ``batch_duration_s`` (``t0``), ``horizon_s`` (relative to the
call) and ``b2_cells_per_batch``.

Where each part lives (each module imports only those above it):

- ``problem.py``: :class:`AdmissionProblem`, the instance encoding, :func:`snapshot_instance`,
  :func:`random_problem`;
- ``process.py``: B1's batch process (:func:`batch_process`, :func:`tier_releases_before`);
- ``plans.py``: :class:`AdmissionPlan`, B1's plan of an admitted set (:func:`plan_b1`) and the
  schedule of a plan (:func:`plan_schedule`);
- ``check.py``: the admission rules checked on a plan (:func:`plan_violations`);
- ``base.py``: what both exact models share (admission variables, memory, objective);
- ``b1.py``: :class:`AdmissionB1`;
- ``b2_grid.py``: B2's cells, arcs and decode starts (``B2Grid``);
- ``b2.py``: :class:`AdmissionB2`.
"""

from slolab.models.slos_admission.b1 import AdmissionB1
from slolab.models.slos_admission.b2 import DEFAULT_CELLS_PER_BATCH, AdmissionB2
from slolab.models.slos_admission.check import plan_violations
from slolab.models.slos_admission.plans import AdmissionPlan, Entry, plan_b1, plan_schedule
from slolab.models.slos_admission.problem import (
    PROBLEM,
    TIME_TOL,
    AdmissionProblem,
    random_problem,
    snapshot_instance,
)
from slolab.models.slos_admission.process import (
    BatchProcess,
    batch_process,
    tier_releases_before,
)

__all__ = [
    "DEFAULT_CELLS_PER_BATCH",
    "PROBLEM",
    "TIME_TOL",
    "AdmissionB1",
    "AdmissionB2",
    "AdmissionPlan",
    "AdmissionProblem",
    "BatchProcess",
    "Entry",
    "batch_process",
    "plan_b1",
    "plan_schedule",
    "plan_violations",
    "random_problem",
    "snapshot_instance",
    "tier_releases_before",
]
