"""What-if capacity planning: the fewest servers that meet an attainment target, per scheduler.

For a trace (rescaled to a traffic level), SLOs and a timing preset (the GPU and model), and
each scheduler, :func:`plan` finds the smallest server count whose simulated attainment meets
the target (:func:`slolab.solvers.capacity.smallest_count`: doubling and bisection over the
integers, every probe a simulation; with ``early`` a probe certain to miss the target stops
there), and reports the cost of the fleet: server-seconds
(servers x the time the last request finishes) and server-seconds per request that met its
SLO, optionally priced per server-hour. ``slolab plan`` is its command line;
``notebooks/capacity_planning.ipynb`` its what-if notebook (traffic x1/x2/x4, SLO tightness,
timing preset).

References
----------
PolyServe, Sec. 5.2 (goodput at 90% attainment; cost as servers kept on); HyperFlexis
(attainment vs cost of active workers).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from slolab.harness.output import add_output_flags, wants_progress
from slolab.harness.serving import ServingSetup, warn_large_fleet
from slolab.problems.flags import SCALING_OPTIONS
from slolab.sim.verdict import RampedStop
from slolab.solvers.capacity import CountSearchResult, ProbeVerdict, smallest_count

#: The flags plan does not take: a plan counts a fixed fleet, no scaler runs.
FIXED_FLEET = tuple(o.name for o in SCALING_OPTIONS)

if TYPE_CHECKING:
    from slolab.sim.verdict import AttainmentWatch


@dataclasses.dataclass(frozen=True, slots=True)
class PlanProbe:
    """One simulation of the plan: a server count and what it achieved.

    A simulation stopped as soon as it was certain to miss the target (``early``) knows only
    a bound: ``attainment`` is then the most the full run can reach (below the target), and
    the numbers only a full run gives (``met_requests``, ``end_s``, ``server_s``) are None.

    Attributes
    ----------
    servers : int
        Servers simulated.
    attainment : float
        Attainment under the plan's definition; when ``early``, an upper bound on it.
    requests : int
        Requests simulated.
    met_requests : int or None
        Requests that met their SLO (under the definition); None when ``early``.
    end_s : float or None
        When the last request finished (s); None when ``early``.
    server_s : float or None
        Server-seconds of the run (:func:`slolab.sim.metrics.server_seconds`): ``servers *
        end_s`` for a fixed fleet, less when a policy's own scaler switches servers off; None
        when ``early``.
    early : bool, default False
        The run stopped once more than ``(1 - target)`` of its requests had missed their SLO
        for good (:class:`slolab.sim.verdict.AttainmentWatch`).
    stopped_at_s : float or None
        Simulated time at which an ``early`` run stopped (s); None otherwise.
    stalled : int, default 0
        Requests the run rejected because it stalled (the policy left them waiting with
        nothing left to run); a stalled probe's attainment is no valid attainment: the search
        stops there and chooses no count.
    """

    servers: int
    attainment: float
    requests: int
    met_requests: int | None
    end_s: float | None
    server_s: float | None
    early: bool = False
    stopped_at_s: float | None = None
    stalled: int = 0

    def __post_init__(self) -> None:
        if self.stalled < 0:
            raise ValueError(f"stalled must be >= 0, got {self.stalled}")
        if self.servers < 1:
            raise ValueError(f"servers must be >= 1, got {self.servers}")
        if not 0.0 <= self.attainment <= 1.0:
            raise ValueError(f"attainment must be in [0, 1], got {self.attainment}")
        full = (self.met_requests, self.end_s, self.server_s)
        if self.early:
            if any(value is not None for value in full) or self.stopped_at_s is None:
                raise ValueError(
                    "a probe stopped early has stopped_at_s and no met_requests, end_s or "
                    f"server_s, got {full} and stopped_at_s={self.stopped_at_s}"
                )
            return
        if self.met_requests is None or self.end_s is None or self.server_s is None:
            raise ValueError(f"a full probe needs met_requests, end_s and server_s, got {full}")
        if self.stopped_at_s is not None:
            raise ValueError(f"stopped_at_s is for early probes only, got {self.stopped_at_s}")
        if not 0 <= self.met_requests <= self.requests:
            raise ValueError(
                f"met_requests must be in [0, requests={self.requests}], got {self.met_requests}"
            )
        if self.server_s < 0:
            raise ValueError(f"server_s must be >= 0, got {self.server_s}")

    @property
    def cost_per_met_request_s(self) -> float:
        """Server-seconds per request that met its SLO (inf when none did, NaN when
        ``early``: not measured)."""
        if self.met_requests is None or self.server_s is None:
            return math.nan
        return self.server_s / self.met_requests if self.met_requests else math.inf

    def to_dict(self, price_per_server_hour: float | None = None) -> dict[str, Any]:
        record = dataclasses.asdict(self)
        record["cost_per_met_request_s"] = self.cost_per_met_request_s
        if price_per_server_hour is not None:
            record["cost"] = (
                None if self.server_s is None else self.server_s / 3600.0 * price_per_server_hour
            )
            record["cost_per_met_request"] = (
                record["cost_per_met_request_s"] / 3600.0 * (price_per_server_hour)
            )
        return record

    def attainment_text(self, digits: int = 3) -> str:
        """The attainment as printed: ``0.420``, ``0.420 or less`` when ``early``, or
        ``stalled (n requests)`` when the run stalled."""
        if self.stalled:
            return f"stalled ({self.stalled} requests)"
        return f"{self.attainment:.{digits}f}" + (" or less" if self.early else "")


@dataclasses.dataclass(frozen=True, slots=True)
class PolicyPlan:
    """The plan for one scheduler.

    Attributes
    ----------
    policy : str
        The scheduler.
    definition : str
        Attainment definition (:data:`slolab.sim.metrics.DEFINITIONS`).
    rate : float
        Arrival rate simulated (req/s).
    trace_rate : float
        The cut trace's own mean rate (req/s); ``rate / trace_rate`` is the traffic level.
    search : CountSearchResult
        The server-count search (target, range, probes, monotone).
    probes : tuple of PlanProbe
        Every simulation, in the order made.
    price_per_server_hour : float or None
        Price used for ``cost`` figures (None: costs in server-seconds only).
    early : bool, default False
        Whether a simulation certain to miss the target stopped there (early verdicts).
    """

    policy: str
    definition: str
    rate: float
    trace_rate: float
    search: CountSearchResult
    probes: tuple[PlanProbe, ...]
    price_per_server_hour: float | None = None
    early: bool = False

    def __post_init__(self) -> None:
        if [p.servers for p in self.probes] != [count for count, _ in self.search.probes]:
            raise ValueError("probes must be the search's probes, in order")
        if self.search.early and [p.early for p in self.probes] != list(self.search.early):
            raise ValueError("probes stopped early must be the search's")
        if any(p.early for p in self.probes) and not self.early:
            raise ValueError("a probe stopped early in a plan without early verdicts")
        if self.price_per_server_hour is not None and not self.price_per_server_hour >= 0:
            raise ValueError(
                f"price_per_server_hour must be >= 0, got {self.price_per_server_hour}"
            )

    @property
    def servers(self) -> int | None:
        """Smallest server count found meeting the target (None: not within the range)."""
        return self.search.count

    @property
    def chosen(self) -> PlanProbe | None:
        """The probe at :attr:`servers`."""
        return next((p for p in self.probes if p.servers == self.servers), None)

    @property
    def curve(self) -> tuple[tuple[int, float], ...]:
        """``(servers, attainment)`` of every probe, by server count (an upper bound for the
        counts in :attr:`stopped_early`)."""
        return self.search.curve

    @property
    def stopped_early(self) -> tuple[int, ...]:
        """The server counts whose simulation stopped early, ascending."""
        return tuple(sorted(p.servers for p in self.probes if p.early))

    def to_dict(self) -> dict[str, Any]:
        """What ``slolab plan --json`` prints for the policy (strict JSON but for inf/nan)."""
        chosen = self.chosen
        at = chosen.to_dict(self.price_per_server_hour) if chosen is not None else {}
        record: dict[str, Any] = {
            "policy": self.policy,
            "servers": self.servers,
            "target": self.search.target,
            "definition": self.definition,
            "attainment": at.get("attainment"),
            "server_s": at.get("server_s"),
            "cost_per_met_request_s": at.get("cost_per_met_request_s"),
        }
        if self.price_per_server_hour is not None:
            record["price_per_server_hour"] = self.price_per_server_hour
            record["cost"] = at.get("cost")
            record["cost_per_met_request"] = at.get("cost_per_met_request")
        record.update(
            {
                "rate": self.rate,
                "trace_rate": self.trace_rate,
                "traffic": self.rate / self.trace_rate,
                "range": list(self.search.bounds),
                "curve": [list(point) for point in self.curve],
                "stopped_early": list(self.stopped_early),
                "monotone": self.search.monotone,
                "scan": self.search.scan,
                "early_verdicts": self.early,
                "n_probes": len(self.probes),
                "n_early": len(self.stopped_early),
                "stop_reason": self.search.stop_reason,
                "probes": [p.to_dict(self.price_per_server_hour) for p in self.probes],
            }
        )
        return record


class _MissWatch(RampedStop):
    """Stops a run once it is certain to miss the target; a run certain to meet it goes on.

    A plan reports the full numbers of the count it chooses (attainment, server-seconds, cost
    per met request), and a count is chosen only if it meets the target, so only a run that
    misses may stop: it then knows an upper bound on its attainment
    (:attr:`slolab.sim.verdict.AttainmentWatch.bound`). Once the watch has found the run
    certain to meet the target it is not asked again (the run goes to its end anyway).

    The gaps between checks double from ``every = max(100, watch.every // 16)`` server events
    up to the watch's own ``watch.every`` (then stay there), as
    :class:`slolab.sim.verdict.RampedStop` says: a count far below what the trace needs is
    certain to miss early in its run, and a run that may meet the target is asked at the
    watch's pace (a check costs O(tokens)).
    """

    def __init__(self, watch: AttainmentWatch) -> None:
        super().__init__(watch, stop_on=("misses",))


def plan(
    setup: ServingSetup,
    policies: Sequence[str],
    *,
    servers: tuple[int, int] = (1, 32),
    target: float = 0.9,
    definition: str = "deadline",
    rate: float | None = None,
    traffic: float = 1.0,
    scan: bool = False,
    monotone_tol: float = 0.0,
    price_per_server_hour: float | None = None,
    progress: bool = False,
    early: bool = False,
) -> list[PolicyPlan]:
    """The smallest server count meeting ``target`` attainment, for each scheduler.

    The trace is cut and given SLOs as ``setup`` says (``setup.policy`` and ``setup.servers``
    are ignored), rescaled to ``rate`` req/s or to ``traffic`` times its own rate (with
    ``setup.arrivals``, arrivals drawn at that rate instead of its own times rescaled), and
    simulated with each policy at the server counts :func:`smallest_count` probes in
    ``servers = (lo, hi)``.

    With ``early`` a simulation stops as soon as more than ``(1 - target)`` of its requests
    have missed their SLO for good (:class:`slolab.sim.verdict.AttainmentWatch`): the count
    certainly misses the target, and its probe records the upper bound on its attainment
    (``PlanProbe.early``). A simulation that meets the target always runs to its end, so the
    search probes the same counts and chooses the same one as without ``early``, and the
    chosen count's attainment, server-seconds and cost are the full run's.

    Parameters
    ----------
    setup : ServingSetup
        Trace, SLOs, timing preset, cluster settings, router, seed.
    policies : sequence of str
        Schedulers to plan for (:data:`slolab.heuristics.POLICIES`).
    servers : (int, int), default (1, 32)
        Range of server counts, both ends included.
    target : float, default 0.9
        Attainment to meet.
    definition : str, default "deadline"
        Attainment definition.
    rate : float, optional
        Arrival rate (req/s); exclusive with ``traffic``.
    traffic : float, default 1.0
        Multiple of the trace's own rate (x2: twice the requests per second).
    scan : bool, default False
        Probe counts one by one from ``lo`` (exact even when attainment is not monotone).
    monotone_tol : float, default 0.0
        Attainment fall with more servers tolerated before the curve is flagged non-monotone.
    price_per_server_hour : float, optional
        Adds ``cost`` and ``cost_per_met_request`` in that currency.
    progress : bool, default False
        Show a progress bar of the simulations.
    early : bool, default False
        Stop a simulation as soon as it is certain to miss the target (``slolab plan`` does
        unless ``--full-probes``; off by default here, where every probe's cost is full).

    Returns
    -------
    list of PolicyPlan
        One per policy, in the order given.
    """
    from slolab.heuristics.policies import policy_entry
    from slolab.instances import mean_rate
    from slolab.sim import metrics
    from slolab.sim.metrics import DEFINITIONS
    from slolab.sim.verdict import AttainmentWatch
    from tqdm.auto import tqdm

    if not policies:
        raise ValueError("give at least one policy")
    for policy in policies:
        if policies.count(policy) > 1:
            raise ValueError(f"policy {policy!r} is listed twice")
        policy_entry(policy)
    if definition not in DEFINITIONS:
        raise ValueError(f"unknown definition {definition!r}; known: {', '.join(DEFINITIONS)}")
    if not (math.isfinite(traffic) and traffic > 0):
        raise ValueError(f"traffic must be a number > 0, got {traffic!r}")
    if rate is not None and traffic != 1.0:
        raise ValueError("give rate or traffic, not both")
    lo, hi = servers
    # the trace's own mean rate, also when each simulation draws its arrivals at ``rate``
    trace_rate = mean_rate(dataclasses.replace(setup, arrivals=None, cv=None).instance().workload)
    rate = rate if rate is not None else traffic * trace_rate
    base = setup.instance(rate)
    metrics.check_attainable(base, definition)
    plans = []
    bar = tqdm(desc="plan", unit="simulation", disable=None if progress else True)
    try:
        for policy in policies:
            chosen = dataclasses.replace(setup, policy=policy)
            probes: list[PlanProbe] = []

            def probe(
                count: int, chosen: ServingSetup = chosen, probes: list = probes
            ) -> ProbeVerdict:
                policy = chosen.policy
                cluster = dataclasses.replace(base.cluster, servers=count)
                instance = dataclasses.replace(base, cluster=cluster)
                instance, sched = chosen.prepare(instance)
                warn_large_fleet(instance.cluster.servers, instance.n_requests)
                # the range's top count runs to its end: a miss there ends the search, and
                # only a full run tells a miss from a stall (a policy that runs nothing)
                watch = (
                    AttainmentWatch(instance, definition, target) if early and count < hi else None
                )
                outcome = sched.run(
                    instance,
                    seed=setup.seed,
                    record_iterations=False,
                    stop=None if watch is None else _MissWatch(watch),
                )
                stopped = outcome.info.get("stopped_early")
                if stopped and watch is not None and watch.bound is not None:
                    found = PlanProbe(
                        servers=count,
                        attainment=watch.bound,
                        requests=instance.n_requests,
                        met_requests=None,
                        end_s=None,
                        server_s=None,
                        early=True,
                        stopped_at_s=watch.stopped_at_s,
                    )
                else:
                    table = metrics.request_table(instance, outcome)
                    met = table[f"met_{definition}"].to_numpy(dtype=bool)
                    if definition == "e2e":
                        met = met & table["has_e2e_slo"].to_numpy(dtype=bool)
                    found = PlanProbe(
                        servers=count,
                        attainment=metrics.attainment_from_table(table, definition),
                        requests=instance.n_requests,
                        met_requests=int(met.sum()),
                        end_s=outcome.end_s,
                        server_s=metrics.server_seconds(instance, outcome),
                        stalled=int(outcome.info.get("stalled", 0)),
                    )
                probes.append(found)
                bar.update(1)
                bar.set_postfix(policy=policy, servers=count, attainment=found.attainment_text())
                return ProbeVerdict(found.attainment, early=found.early, stalled=found.stalled)

            search = smallest_count(
                probe, target=target, lo=lo, hi=hi, scan=scan, monotone_tol=monotone_tol
            )
            plans.append(
                PolicyPlan(
                    policy=policy,
                    definition=definition,
                    rate=rate,
                    trace_rate=trace_rate,
                    search=search,
                    probes=tuple(probes),
                    price_per_server_hour=price_per_server_hour,
                    early=early,
                )
            )
    finally:
        bar.close()
    return plans


def add_parser(
    sub: Any, add_serving_args: Callable[[argparse.ArgumentParser], None]
) -> argparse.ArgumentParser:
    """Add the ``plan`` command to the ``slolab`` subcommands; ``add_serving_args`` adds the
    flags it shares with ``simulate`` (the command line's, handed in so that this module does
    not import it back)."""
    p = sub.add_parser(
        "plan",
        help="fewest servers meeting an attainment target, per scheduler",
        description="For each scheduler, find the smallest server count (in --servers LO..HI) "
        "whose simulated attainment meets --target, by doubling and bisection over the counts "
        "(--scan: one by one); report the attainment curve probed and the cost (server-seconds "
        "= servers x end of the run, and per request that met its SLO). A simulation stops as "
        "soon as it is certain to miss the target (early verdicts: more than 1 - target of "
        "its requests already missed their SLO for good); its attainment is then printed as a "
        "bound ('0.420 or less'). A count that meets the target always runs to its end, so "
        "the chosen count and its attainment and cost are those of full simulations "
        "(--full-probes runs every simulation to its end). Measured on 4,000 Mooncake "
        "requests at 3 req/s, servers 1..32: 21.4 -> 10.8 CPU s for sarathi, 144.9 -> 35.3 for "
        "slos-serve, the same 8 simulations and answer. See docs/planning.md.",
        conflict_handler="resolve",
    )
    add_serving_args(p)
    p.add_argument(
        "--servers",
        "--replicas",
        dest="servers",
        default="1..32",
        help="range of server counts LO..HI searched (default: 1..32)",
    )
    p.add_argument(
        "--policies",
        "--policy",
        dest="policies",
        default=None,
        help="comma-separated schedulers (default: sarathi,slos-serve; with --model one "
        "scheduler, default sarathi)",
    )
    deploy = p.add_argument_group(
        "deployment (with --model)",
        "which (GPU, TP) configurations and how many servers of each, at the least cost per "
        "hour: capacities per request class measured by simulation, the mixed fleet by a "
        "MILP, every fleet printed simulated on the trace (docs/deployment.md)",
    )
    deploy.add_argument(
        "--model", default=None, help="model of the generated presets, e.g. llama2-70b"
    )
    deploy.add_argument(
        "--gpus", default="a100,h100,a40", help="comma-separated GPU types (default: a100,h100,a40)"
    )
    deploy.add_argument(
        "--tp", default="1,2,4,8", help="comma-separated tensor-parallel degrees (default: 1,2,4,8)"
    )
    deploy.add_argument(
        "--uncalibrated",
        action="store_true",
        help="the generated presets as profiled (MODEL/GPU/tpN), without the serving terms "
        "measured on real serving that the default MODEL/GPU/tpN/calibrated adds "
        "(docs/timing.md)",
    )
    deploy.add_argument(
        "--prices",
        default=None,
        help="CSV file with the columns gpu,usd_per_gpu_hour (default: the profiles' dated prices)",
    )
    deploy.add_argument(
        "--max-rounds",
        type=int,
        default=8,
        help="simulate-and-tighten rounds before giving up on a fleet (default: 8)",
    )
    deploy.add_argument(
        "--mode",
        default="colocated",
        help="with --model: co (co-located fleets, the default), pd (disaggregated: prefill "
        "and decode pools sized apart) or both, side by side; without: the serving mode "
        "(colocated, static, disaggregated)",
    )
    deploy.add_argument(
        "--kv-link",
        default="infiniband-ndr",
        help="with --mode pd or both: the KV link per GPU between the pools: nvlink, "
        "infiniband-ndr, infiniband-hdr, ethernet-100g, ethernet-25g, or GB/s "
        "(default: infiniband-ndr)",
    )
    deploy.add_argument(
        "--co-probe-arrivals",
        default="poisson",
        choices=("poisson", "trace"),
        help="with --mode co or both: arrivals of the co-located capacity probes: poisson "
        "(the default) or trace (the class's own arrival pattern, thinned to one server's "
        "share below the class's rate and time-compressed above, as the disaggregated "
        "probes always draw them: a burst in the trace lowers the capacity measured)",
    )
    deploy.add_argument(
        "--capacity-cache",
        default=None,
        metavar="DIR",
        help="directory keeping the capacity searches measured: a search already there with "
        "the same inputs is read, not run (default: none)",
    )
    p.add_argument(
        "--target", type=float, default=0.9, help="attainment target in (0, 1] (default: 0.9)"
    )
    p.add_argument(
        "--definition", default="deadline", help="attainment definition (default: deadline)"
    )
    traffic = p.add_mutually_exclusive_group()
    traffic.add_argument(
        "--traffic",
        type=float,
        default=1.0,
        help="multiple of the trace's own arrival rate, e.g. 2 for twice the traffic (default: 1)",
    )
    traffic.add_argument(
        "--rate", type=float, default=None, help="arrival rate in req/s (instead of --traffic)"
    )
    p.add_argument(
        "--scan",
        action="store_true",
        help="probe server counts one by one from LO (exact even on a non-monotone curve)",
    )
    p.add_argument(
        "--full-probes",
        action="store_true",
        help="run every simulation to its end (default: one certain to miss the target stops "
        "there and its attainment is the bound it proved; the chosen count is the same)",
    )
    p.add_argument(
        "--price-per-server-hour",
        type=float,
        default=None,
        help="also report cost in this currency per server-hour",
    )
    add_output_flags(p, "print one JSON object per policy")
    p.set_defaults(func=cmd_plan)
    p.set_defaults(plan_defaults={a.dest: a.default for a in p._actions})
    return p


#: The flags ``plan --model`` does not use, and why.
DEPLOY_IGNORES = {
    "timing": "each configuration runs its own preset MODEL/GPU/tpN",
    "kv_capacity": "each configuration runs at its own preset's KV capacity",
    "prefill_servers": "the planner sizes the prefill pool itself (--mode pd or both)",
    "servers": "the planner chooses the servers of each configuration",
    "scan": "the planner searches no server count",
    "full_probes": "the capacity searches always stop a probe once its verdict is certain",
    "price_per_server_hour": "the prices are per GPU-hour, from --prices or the presets",
    "router": "the plan routes each request class (PlanRouter)",
    "decode_router": "a disaggregated plan routes decodes by its own fractions",
    "token_budget": "each pool's budget is the largest batch within the tightest TPOT there",
    "max_batch_size": "each pool runs the preset's cluster defaults",
    "prefix_cache": "the capacity probes and the verified fleets run without prefix caching",
}
#: The flags ``plan`` uses only with ``--model``.
DEPLOY_ONLY = (
    "gpus",
    "tp",
    "uncalibrated",
    "kv_link",
    "prices",
    "max_rounds",
    "capacity_cache",
    "co_probe_arrivals",
)


def refuse_unused(args: argparse.Namespace) -> None:
    """One line naming the first flag given that this kind of plan does not use (as
    ``instance build`` refuses a flag its problem does not take)."""
    defaults = getattr(args, "plan_defaults", {})
    with_model = getattr(args, "model", None) is not None
    for dest in DEPLOY_IGNORES if with_model else DEPLOY_ONLY:
        if dest in defaults and getattr(args, dest) != defaults[dest]:
            flag = "--" + dest.replace("_", "-")
            if with_model:
                raise ValueError(
                    f"{flag} does not apply to plan --model ({DEPLOY_IGNORES[dest]}); drop it"
                )
            raise ValueError(f"{flag} applies to plan --model only (the deployment planner)")


def _json_value(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: _json_value(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_json_value(item) for item in value]
    return value


def cmd_plan(args: argparse.Namespace) -> int:
    """``slolab plan``: print the plan of every policy (with ``--model``: the deployment)."""
    from slolab.harness.sweep_spec import parse_range

    refuse_unused(args)
    if getattr(args, "model", None) is not None:
        return cmd_deploy(args)
    if args.mode not in ("colocated", "static", "disaggregated"):
        raise ValueError(
            f"--mode {args.mode} needs --model (deployment modes co, pd, both); without it the "
            "serving mode is colocated, static or disaggregated"
        )
    if args.policies is None:
        args.policies = "sarathi,slos-serve"
    try:
        counts = parse_range(args.servers, minimum=1)
    except ValueError as error:
        raise ValueError(f"--servers {error}") from None
    policies = [name.strip() for name in args.policies.split(",") if name.strip()]
    if not policies:
        raise ValueError(
            f"--policies names no scheduler (got {args.policies!r}); give one or more, comma-separated"
        )
    for name in policies:
        if policies.count(name) > 1:
            raise ValueError(f"--policies lists {name!r} twice")
    setup = ServingSetup.from_namespace(
        argparse.Namespace(**{**vars(args), "servers": counts.start, "policy": policies[0]}),
        absent=FIXED_FLEET,
    )
    plans = plan(
        setup,
        policies,
        servers=(counts.start, counts.stop - 1),
        target=args.target,
        definition=args.definition,
        rate=args.rate,
        traffic=args.traffic,
        scan=args.scan,
        price_per_server_hour=args.price_per_server_hour,
        progress=wants_progress(args),
        early=not args.full_probes,
    )
    kv_tokens, kv_source = setup.kv_capacity_used()
    if args.json:
        for found in plans:
            record = {**found.to_dict(), "kv_capacity": kv_tokens, "kv_capacity_source": kv_source}
            print(json.dumps(_json_value(record)))
        return 0
    first = plans[0]
    print(
        f"plan for {args.trace}: {first.probes[0].requests} requests at {first.rate:.4g} req/s "
        f"(x{first.rate / first.trace_rate:.3g} the trace's own rate), target {args.target:.0%} "
        f"{args.definition} attainment, servers {counts.start}..{counts.stop - 1}, KV "
        f"{kv_tokens} tokens per server from {kv_source}"
    )
    width = max(12, *(len(found.policy) for found in plans))
    print(
        f"{'policy':<{width}} {'servers':>7} {'attainment':>10} {'server-s':>10} {'per met req':>12}"
    )
    for found in plans:
        chosen = found.chosen
        if chosen is None and found.search.stop_reason == "stalled":
            print(
                f"{found.policy:<{width}} {'none':>7}   (stalled at {found.probes[-1].servers} "
                "servers: requests left waiting with nothing to run; no valid attainment)"
            )
        elif chosen is None:
            print(
                f"{found.policy:<{width}} {'none':>7}   (target missed at {counts.stop - 1} servers)"
            )
        else:
            print(
                f"{found.policy:<{width}} {chosen.servers:>7} {chosen.attainment:>10.4f} "
                f"{chosen.server_s:>10.1f} {chosen.cost_per_met_request_s:>12.3f}"
            )
    for found in plans:
        by_count = sorted(found.probes, key=lambda probe: probe.servers)
        curve = ", ".join(f"{p.servers}: {p.attainment_text()}" for p in by_count)
        note = "" if found.search.monotone else " (not monotone: consider --scan)"
        print(f"  {found.policy} curve (servers: attainment): {curve}{note}")
    if any(found.stopped_early for found in plans):
        counted = ", ".join(
            f"{found.policy} {len(found.stopped_early)} of {len(found.probes)}" for found in plans
        )
        print(
            f"  stopped early (certain to miss the target, attainment 'or less'): {counted} "
            "simulations; --full-probes runs them to their end"
        )
    return 0


def _parse_list(flag: str, text: str) -> list[str]:
    items = [item.strip() for item in text.split(",") if item.strip()]
    if not items:
        raise ValueError(f"{flag} names nothing (got {text!r}); give a comma-separated list")
    for item in items:
        if items.count(item) > 1:
            raise ValueError(f"{flag} lists {item!r} twice")
    return items


def cmd_deploy(args: argparse.Namespace) -> int:
    """``slolab plan TRACE --model MODEL``: print (or ``--json``) the deployment plan
    (:mod:`slolab.harness.deploy`)."""
    from slolab.harness.deploy import (
        CapacityCache,
        configuration_names,
        plan_deployment,
        read_prices,
        request_classes,
        trace_instance,
    )
    from slolab.heuristics.policies import policy_entry
    from slolab.sim.metrics import check_attainable

    gpus = _parse_list("--gpus", args.gpus)
    tps = []
    for item in _parse_list("--tp", args.tp):
        if not item.isdigit() or int(item) < 1:
            raise ValueError(f"--tp must list integers >= 1, got {item!r}")
        tps.append(int(item))
    policies = _parse_list("--policy", args.policies or "sarathi")
    if len(policies) != 1:
        raise ValueError(f"--policy with --model takes one scheduler, got {', '.join(policies)}")
    policy_entry(policies[0])
    if policy_entry(policies[0]).setup is not None:
        raise ValueError(
            f"--policy {policies[0]} lays out its own cluster; the deployment planner needs a "
            "per-server scheduler (sarathi, vllm, edf, ...)"
        )
    if not 0 < args.target <= 1:
        raise ValueError(f"--target must be an attainment in (0, 1], got {args.target}")
    if args.max_rounds < 1:
        raise ValueError(f"--max-rounds must be >= 1, got {args.max_rounds}")
    mode = {"colocated": "co", "disaggregated": "pd"}.get(args.mode, args.mode)
    if mode not in ("co", "pd", "both"):
        raise ValueError(f"--mode with --model must be co, pd or both, got {args.mode!r}")
    if mode == "pd" and args.co_probe_arrivals != "poisson":
        raise ValueError(
            "--co-probe-arrivals applies to the co-located planner (--mode co or both); the "
            "disaggregated probes always draw the class's own arrival pattern: drop it"
        )
    if mode != "co":
        from slolab.harness.deploy_pd import check_link

        check_link(args.kv_link, gpus)
    configurations, refused = configuration_names(
        args.model, gpus, tps, calibrated=not args.uncalibrated
    )
    prices = read_prices(args.prices, gpus) if args.prices else None
    setup = ServingSetup.from_namespace(
        argparse.Namespace(
            **{**vars(args), "servers": 1, "policy": policies[0], "mode": "colocated"}
        ),
        absent=FIXED_FLEET,
    )
    slos = setup.slo_scheme() or "none"
    instance = trace_instance(
        setup.trace,
        configurations,
        seed=setup.seed,
        limit=setup.limit,
        slos=slos,
        rate=args.rate,
        traffic=1.0 if args.rate is not None else args.traffic,
        max_batch_tokens=setup.max_batch_tokens,
        **setup.reading(),
    )
    check_attainable(instance, args.definition)
    classes = request_classes(instance)
    if mode != "co":
        return _deploy_modes(
            args, instance, classes, configurations, refused, prices, mode, setup.seed
        )
    report = plan_deployment(
        instance,
        configurations,
        target=args.target,
        definition=args.definition,
        policy=policies[0],
        seed=setup.seed,
        prices=prices,
        refused=refused,
        classes=classes,
        max_rounds=args.max_rounds,
        progress=wants_progress(args),
        cache=None if args.capacity_cache is None else CapacityCache(args.capacity_cache),
        arrivals=args.co_probe_arrivals,
    )
    if args.json:
        record = report.to_dict()
        for entry, count in zip(record["classes"], classes.counts, strict=True):
            entry["requests"] = count
        print(json.dumps(_json_value(record)))
        return 0
    _print_report(args, instance, classes, report)
    return 0


def _deploy_modes(
    args: argparse.Namespace,
    instance: Any,
    classes: Any,
    configurations: list[str],
    refused: dict[str, str],
    prices: dict[str, float] | None,
    mode: str,
    seed: int,
) -> int:
    """``--mode pd`` or ``both``: :func:`slolab.harness.deploy_pd.plan_modes`, printed."""
    from slolab.harness.deploy import CapacityCache
    from slolab.harness.deploy_pd import modes_dict, plan_modes, print_modes
    from slolab.instances import mean_rate

    answer = plan_modes(
        instance,
        configurations,
        mode=mode,
        target=args.target,
        link=args.kv_link,
        definition=args.definition,
        policy=(args.policies or "sarathi").split(",")[0].strip(),
        seed=seed,
        prices=prices,
        refused=refused,
        max_rounds=args.max_rounds,
        progress=wants_progress(args),
        cache=None if args.capacity_cache is None else CapacityCache(args.capacity_cache),
        co_arrivals=args.co_probe_arrivals,
    )
    if args.json:
        print(json.dumps(_json_value(modes_dict(answer, classes))))
        return 0
    print_modes(
        answer,
        classes,
        f"deployment plan ({mode}) for {args.trace}: {instance.n_requests} requests at "
        f"{mean_rate(instance.workload):.4g} req/s, model {args.model}, target "
        f"{args.target:.0%} {args.definition} attainment",
    )
    return 0


def _print_report(args: argparse.Namespace, instance: Any, classes: Any, report: Any) -> None:
    from slolab.instances import mean_rate

    data = report.data
    print(
        f"deployment plan for {args.trace}: {instance.n_requests} requests at "
        f"{mean_rate(instance.workload):.4g} req/s, model {args.model}, target "
        f"{args.target:.0%} {args.definition} attainment"
    )
    targets = report.capacities.class_targets
    for k, name in enumerate(classes.names):
        print(
            f"  class {name}: {classes.counts[k]} requests, {classes.rates[k]:.4g} req/s, "
            f"held to {targets[k]:.3f}"
        )
    width = max(24, *(len(name) for name in data.configurations))
    print(
        f"{'configuration':<{width}} {'$/h each':>9} {'servers':>7} {'$/h':>9}  (all traffic, from capacities)"
    )
    for name, price in zip(data.configurations, data.prices, strict=True):
        count = report.single.get(name)
        if count is None:
            print(f"{name:<{width}} {price:>9.2f} {'-':>7} {'-':>9}  (cannot serve every class)")
        else:
            print(f"{name:<{width}} {price:>9.2f} {count:>7} {count * price:>9.2f}")
    for why in report.refused.values():
        print(f"  refused: {why}")
    table = report.capacities
    read = (
        f", {table.reused} searches read from the cache ({table.saved} simulations saved)"
        if table.reused or table.saved
        else ""
    )
    print(
        f"capacities: {len(data.configurations) * len(data.classes)} searches, {table.probes} "
        f"simulations ({table.early} stopped early){read} in {table.wall_s:.1f} s"
    )
    single = report.best_single_cost
    print(
        f"on the measured capacities: mixed optimum ${report.optimum_cost:.2f}/h (MILP, "
        f"{report.optimum_status}), greedy ${report.greedy_cost:.2f}/h, best single "
        + ("none" if math.isinf(single) else f"${single:.2f}/h")
    )
    for label, loop in (("mixed fleet", report.mixed), ("best single", report.best_single)):
        if loop is None and report.single:
            print(
                f"{label}: not met: none of the {report.single_verified} configuration(s) "
                f"simulated alone met the target within {args.max_rounds} round(s) "
                "(--max-rounds)"
            )
            continue
        if loop is None:
            print(f"{label}: no single configuration serves every class")
            continue
        last = loop.final
        cost = f"${last.result.cost:.2f}/h" if last.result.plan is not None else "-"
        print(f"{label}: {loop.fleet_text()} {cost}, simulated: {loop.summary()}")
        for number, found in enumerate(loop.rounds[:-1], start=1):
            if found.run is not None:
                how = "solved" if found.how == "solved" else "last plan + 1 server"
                print(
                    f"  round {number} ({how}): {found.result.cost:.2f} $/h, attainment "
                    f"{found.run.attainment:.3f} ({loop.target - found.run.attainment:.3f} "
                    "short): one more server where the misses concentrate"
                )
        if len(loop.rounds) > 1 and last.how == "added":
            print(f"  round {len(loop.rounds)}: the last plan + 1 server, its fractions kept")
    from slolab.harness.deploy import fleet_text

    for label, loop, trimmed in (
        ("mixed fleet", report.mixed, report.mixed_loop_trimmed),
        ("best single", report.best_single, report.single_trimmed),
    ):
        if loop is not None and trimmed is not None:
            replicas, found = trimmed
            cost = sum(n * p for n, p in zip(replicas, loop.prices, strict=True))
            print(
                f"{label} trimmed (servers removed while the simulation meets the target): "
                f"{fleet_text(loop.configurations, replicas)} ${cost:.2f}/h, attainment "
                f"{found.attainment:.3f}"
            )
    if report.mixed_from == "single" and report.mixed_trimmed is not None:
        print(
            "mixed answer: the best single fleet, "
            f"{fleet_text(data.configurations, report.mixed_trimmed[0])} "
            f"${report.mixed_cost:.2f}/h (verified, cheaper than the mixed loop's)"
        )
    if math.isnan(report.saving):
        print("saving over the best single configuration: not measured (a fleet missed the target)")
    else:
        print(
            "saving of the trimmed mixed fleet over the trimmed best single configuration: "
            f"{report.saving:.1%}"
        )
    print(f"wall time {report.wall_s:.1f} s")
