"""The exact cost-attainment front of an instance, replayed and checked.

A problem that trades cost against attainment declares ``front`` on its
:class:`slolab.problems.Problem` (for example HyperFlexis's ``dispatch-scale``: the
epsilon-constraint method over its exact model). :func:`pareto` calls it, replays every
point's schedule in the engine, recomputes its cost and attainment with the shared metrics and
raises :class:`~slolab.harness.compare.ObjectiveMismatchError` when they differ from the
point's.
"""

from __future__ import annotations

from typing import Any

from slolab.harness.compare import OBJECTIVE_TOLERANCE, ObjectiveMismatchError
from slolab.instances.records import Instance
from slolab.problems import get_problem
from slolab.problems.registry import resolve
from slolab.sim import check, metrics, replay


def pareto(
    instance: Instance,
    *,
    solver: str = "highs",
    time_limit: float = 60.0,
    threads: int = 1,
    seed: int = 0,
    run_checks: bool = True,
) -> list[dict[str, Any]]:
    """The Pareto front of ``instance`` as records, best attainment first.

    Each record: ``cost_server_s``, ``attainment`` (recomputed from the replay), ``status``
    (OPTIMAL when the least cost at that attainment is proved), ``cost_bound``, ``gap``,
    ``level`` (the attainment the point was asked for), ``runtime_s``, ``backend`` and
    ``violations`` (the checker's, when ``run_checks``).

    Raises
    ------
    ValueError
        The instance's problem has no front.
    ObjectiveMismatchError
        A point's cost or attainment differs from its replay.
    """
    spec = get_problem(instance.problem)
    if spec.front is None:
        raise ValueError(f"problem {spec.name!r} declares no Pareto front (it has one objective)")
    definition = str(instance.settings.get("definition", "deadline"))
    points = resolve(spec.front)(
        instance, solver=solver, time_limit=time_limit, threads=threads, seed=seed
    )
    rows = []
    for point in points:
        record = point.to_record()
        if point.schedule is not None:
            out = replay(instance, point.schedule)
            cost = metrics.server_seconds(instance, out)
            attainment = metrics.attainment(instance, out, definition)
            for name, claimed, replayed in (
                ("cost", point.cost_server_s, cost),
                ("attainment", point.attainment, attainment),
            ):
                if abs(claimed - replayed) > OBJECTIVE_TOLERANCE * max(1.0, abs(claimed)):
                    raise ObjectiveMismatchError(
                        f"front point at level {point.level:g} on {instance.name}: {name} "
                        f"{claimed!r} but its replayed schedule gives {replayed!r}"
                    )
            if run_checks:
                record["violations"] = len(check(instance, out))
        rows.append(record)
    return rows
