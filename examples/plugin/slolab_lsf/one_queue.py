"""A problem as a plugin: one queue of requests served one at a time, in the order that
minimizes their total latency.

N requests, all queued at time 0, run one after another on one server (static batches of one);
request i takes ``exec_s[i]`` (prefill plus every decode step at batch size 1, from the timing
model). Decide the order; minimize the sum of end-to-end latencies. Exact: an assignment MILP
(x[i, k] = 1 when request i runs k-th: the request at position k delays the N - k requests from
k on, so the total latency is linear in x). Heuristics: FCFS (trace order) and shortest job
first (optimal for this problem, which the MILP confirms).
"""

import numpy as np
import pulp
from slolab.instances import read_workload, sample
from slolab.instances.records import Cluster, Instance
from slolab.problems import Heuristic, Objective, Option, Problem, register_problem
from slolab.sim import Schedule
from slolab.sim.static import member_times
from slolab.solvers import register_model
from slolab.solvers.base import ExactModel, MilpFormulation
from slolab.timing import preset


def build(n: int = 5, seed: int = 0, trace: str = "azure_conv_2023") -> Instance:
    """``n`` requests sampled (seeded) from ``trace``, all arriving at 0, on one server."""
    workload = sample(read_workload(trace), n, seed=seed)
    columns = {name: workload[name] for name in workload.columns}
    columns["arrival_s"] = np.zeros(n)
    cluster = Cluster(servers=1, mode="static", max_batch_size=1)
    name = f"one-queue-n{n}-s{seed}"
    return Instance(name, workload.derived(columns), cluster, preset("llama2-7b-h100"), "one-queue")


def exec_times(instance: Instance) -> np.ndarray:
    """Seconds each request takes alone (its static batch of one, by the engine's rule)."""
    wl = instance.workload
    return np.array(
        [
            member_times(instance.timing, 1, int(p), int(o))[1]
            for p, o in zip(wl.prompt_tokens, wl.output_tokens, strict=True)
        ]
    )


def in_order(order) -> Schedule:
    """Requests run one by one in ``order``."""
    return Schedule.static_batches([[int(r)] for r in order])


@register_model("one-queue-assign")
class OneQueueAssignment(ExactModel):
    """min sum_i sum_k (N - k) exec_i x[i, k]; each request one position, each position one
    request."""

    sense = "min"

    def milp(self) -> MilpFormulation:
        times = exec_times(self.instance)
        n = len(times)
        prob = pulp.LpProblem("one_queue", pulp.LpMinimize)
        x = pulp.LpVariable.dicts("x", (range(n), range(n)), cat="Binary")
        prob += pulp.lpSum((n - k) * times[i] * x[i][k] for i in range(n) for k in range(n))
        for i in range(n):
            prob += pulp.lpSum(x[i][k] for k in range(n)) == 1
        for k in range(n):
            prob += pulp.lpSum(x[i][k] for i in range(n)) == 1

        def to_schedule() -> Schedule:
            position = {k: i for i in range(n) for k in range(n) if x[i][k].value() > 0.5}
            return in_order(position[k] for k in range(n))

        return MilpFormulation(prob, to_schedule)


def fcfs(instance: Instance, *, seed: int) -> Schedule:
    """In trace order."""
    return in_order(range(instance.n_requests))


def shortest_first(instance: Instance, *, seed: int) -> Schedule:
    """Shortest execution time first."""
    return in_order(np.argsort(exec_times(instance), kind="stable"))


def total_latency(instance: Instance, outcome, table) -> float:
    """Sum of end-to-end latencies (s)."""
    return float(table["e2e_s"].sum())


PROBLEM = register_problem(
    Problem(
        name="one-queue",
        title="order one queue served one request at a time; minimize total latency",
        objective=Objective("total_latency_s", "min", total_latency, "sum of e2e latencies (s)"),
        builder=build,
        options=(
            Option("n", int, 5, "requests in the queue"),
            Option("seed", int, 0, "seed of the sample"),
            Option("trace", str, "azure_conv_2023", "trace file or vendored trace name"),
        ),
        models=("one-queue-assign",),
        heuristics=(
            Heuristic("fcfs", "trace order", schedule=fcfs, baseline=True),
            Heuristic("sjf", "shortest execution time first", schedule=shortest_first),
        ),
    )
)
