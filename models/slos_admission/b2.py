"""B2: admission with dynamic batch sizing (time-indexed 0-1 MILP over batch arcs, brute force)."""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from slolab.instances.records import Instance
from slolab.models.slos_admission.b2_grid import b2_grid
from slolab.models.slos_admission.base import AdmissionModel
from slolab.models.slos_admission.plans import AdmissionPlan, fill_prefill, plan_schedule
from slolab.models.slos_admission.problem import AdmissionProblem, served_rows
from slolab.sim.schedule import Schedule
from slolab.solvers.base import MilpFormulation
from slolab.solvers.registry import register_model

__all__ = ["DEFAULT_CELLS_PER_BATCH", "AdmissionB2"]

logger = logging.getLogger("slolab")

#: Default grid cells per ``t0`` in B2.
DEFAULT_CELLS_PER_BATCH = 2


@register_model("slos-b2")
class AdmissionB2(AdmissionModel):
    """B2: admission with dynamic batch sizing (time-indexed 0-1 MILP over batch arcs).

    Time is cut into cells of ``delta = t0 / cells_per_batch``; a batch is an arc ``(s, e)``
    of cells with capacity ``time2bs((e - s) delta)``, and the chosen arcs form a path from 0
    to the horizon (``z_a``). A prefilling request picks a *decode start* cell ``sigma`` no
    later than its deadline cell: its prefill (``P_a`` tokens per arc, cumulative deadlines)
    is done in arcs ending by ``sigma`` and it decodes the releases of Algorithm 2's cadence
    from ``sigma delta`` on, each served by the arc holding it. An arc may not carry a request
    whose TPOT is shorter than the arc, and its iteration (from the arc's start, taking the
    time of its tokens) must end by the deadline ``d + m TPOT`` of every decode token it serves
    (the ``m``-th after the prefill). Only the latest start whose first release is at or before
    ``d`` and the deadline cell itself matter (docs/slos_serve.md, "B2").
    After the horizon the schedule goes on in batches of ``t0`` on the same cadence; they stay
    on time when one batch decoding every served request takes no longer than ``t0`` and than
    the time from a served start's releases to its token deadlines. B1's batches are the path
    of arcs of ``cells_per_batch`` cells, so the optimum is at least B1's when every TPOT is a
    multiple of ``t0``.

    Parameters
    ----------
    instance : Instance or AdmissionProblem
        An ``"slos-admission"`` instance, or the problem itself.
    cells_per_batch : int, optional
        Grid cells per ``t0`` (default: setting ``b2_cells_per_batch`` of the instance, else 2).

    References
    ----------
    SLOs-Serve, Sec. 3.2.2 (batch formation with dynamic size tuning) and Fig. 5c.
    """

    def __init__(
        self, instance: Instance | AdmissionProblem, cells_per_batch: int | None = None
    ) -> None:
        super().__init__(instance)
        if cells_per_batch is None:
            settings = instance.settings if isinstance(instance, Instance) else {}
            cells_per_batch = int(settings.get("b2_cells_per_batch", DEFAULT_CELLS_PER_BATCH))
        if (
            isinstance(cells_per_batch, bool)
            or int(cells_per_batch) != cells_per_batch
            or cells_per_batch < 1
        ):
            raise ValueError(f"cells_per_batch must be an integer >= 1, got {cells_per_batch!r}")
        self.cells_per_batch = int(cells_per_batch)
        self.grid = b2_grid(self.problem, self.process, self.cells_per_batch)

    def milp(self) -> MilpFormulation:
        import pulp

        g = self.grid
        prob = pulp.LpProblem("slos_b2", pulp.LpMaximize)
        x, keep = self._admission_variables(prob)
        z = {a: prob.add_variable(f"z_{a[0]}_{a[1]}", cat="Binary") for a in g.arcs}
        tokens = {a: prob.add_variable(f"P_{a[0]}_{a[1]}", lowBound=0) for a in g.arcs}
        self._objective(prob, x, pulp)
        self._memory(prob, x, keep, pulp)
        start = self._start_variables(prob, x, keep, pulp)
        self._path(prob, z, pulp)
        self._arc_capacity(prob, start, z, tokens, pulp)
        self._arc_token_deadlines(prob, start, z, tokens, pulp)
        self._arc_too_long(prob, start, z, pulp)
        self._prefill_deadlines(prob, start, tokens, pulp)
        self._after_horizon(prob, x, keep, start, pulp)
        self.variables = {"x": x, "keep_running": keep, "z": z, "P": tokens, "start": start}
        logger.debug(
            "slos-b2: %d new requests, %d decode starts, %d cells of %.4g s, %d arcs, "
            "%d constraints",
            len(x),
            g.n_starts,
            g.n_cells,
            g.cell_s,
            len(g.arcs),
            prob.numConstraints(),
        )
        return MilpFormulation(prob, to_schedule=lambda: plan_schedule(self.problem, self._plan()))

    def _start_variables(self, prob: Any, x: Mapping[int, Any], keep: Any, pulp: Any) -> list[Any]:
        """Per decode start ``v`` of row ``r``, its decision ``u_v``: ``sum_v u_v = x_r``.

        A row with one start uses ``x_r`` itself; a row with none cannot be served."""
        g = self.grid
        start: list[Any] = [None] * g.n_starts
        for r in range(self.problem.n_requests):
            chosen = self._coef(r, x, keep)
            options = g.starts_of(r)
            if options.size == 1:
                start[int(options[0])] = chosen
                continue
            for v in options.tolist():
                start[v] = prob.add_variable(f"u_{r}_{int(g.start_cell[v])}", cat="Binary")
            prob += pulp.lpSum(start[v] for v in options.tolist()) == chosen, f"start_{r}"
        return start

    def _path(self, prob: Any, z: Mapping[tuple[int, int], Any], pulp: Any) -> None:
        """Arcs form one path from cell 0 to cell ``H``: out(0) = 1, in(g) = out(g), in(H) = 1."""
        out_of: dict[int, list[Any]] = {}
        into: dict[int, list[Any]] = {}
        for (s, e), var in z.items():
            out_of.setdefault(s, []).append(var)
            into.setdefault(e, []).append(var)
        end = self.grid.n_cells
        prob += pulp.lpSum(out_of.get(0, [])) == 1, "path_start"
        prob += pulp.lpSum(into.get(end, [])) == 1, "path_end"
        for c in range(1, end):
            prob += pulp.lpSum(into.get(c, [])) == pulp.lpSum(out_of.get(c, [])), f"path_{c}"

    def _arc_capacity(
        self,
        prob: Any,
        start: Sequence[Any],
        z: Mapping[Any, Any],
        tokens: Mapping[Any, Any],
        pulp: Any,
    ) -> None:
        """``P_a <= cap_a z_a`` and ``P_a + sum_v rho_v(a) u_v <= cap_a + U_a (1 - z_a)``, with
        ``rho_v(a)`` the decode releases of start ``v`` in the arc and ``U_a`` the largest
        decode load the arc can get (per row, its largest ``rho_v(a)``)."""
        g = self.grid
        for a in g.arcs:
            cap = g.capacity[a[1] - a[0]]
            prob += tokens[a] <= cap * z[a], f"cap_{a[0]}_{a[1]}"
            if g.releases(a):
                carried, big = self._arc_tokens(a, start, tokens, pulp)
                prob += carried <= cap + big * (1 - z[a]), f"load_{a[0]}_{a[1]}"

    def _arc_tokens(
        self, a: tuple[int, int], start: Sequence[Any], tokens: Mapping[Any, Any], pulp: Any
    ) -> tuple[Any, int]:
        """``P_a + sum_v rho_v(a) u_v`` and ``U_a``, the largest decode load it can hold."""
        g = self.grid
        load = g.releases(a)
        per_row: dict[int, int] = {}
        for v, count in load.items():
            row = int(g.start_row[v])
            per_row[row] = max(per_row.get(row, 0), count)
        carried = tokens[a] + pulp.lpSum(count * start[v] for v, count in load.items())
        return carried, sum(per_row.values())

    def _arc_token_deadlines(
        self,
        prob: Any,
        start: Sequence[Any],
        z: Mapping[Any, Any],
        tokens: Mapping[Any, Any],
        pulp: Any,
    ) -> None:
        """Where arc ``a`` ends after the deadline ``D`` of a token it gives start ``v``, its
        iteration must end by ``D``: with ``c_{a,v} = time2bs(D - s_a delta) < cap_a``,
        ``P_a + sum_w rho_w(a) u_w <= c_{a,v} + (cap_a - c_{a,v})(1 - u_v) + U_a (1 - z_a)``.
        """
        g = self.grid
        for a in g.arcs:
            cap = int(g.capacity[a[1] - a[0]])
            limits = {v: c for v, c in g.token_limits(a).items() if 0 <= c < cap}
            if not limits:
                continue
            carried, big = self._arc_tokens(a, start, tokens, pulp)
            for v, most in limits.items():
                prob += (
                    carried <= most + (cap - most) * (1 - start[v]) + big * (1 - z[a]),
                    f"due_{a[0]}_{a[1]}_{int(g.start_row[v])}_{int(g.start_cell[v])}",
                )

    def _arc_too_long(
        self, prob: Any, start: Sequence[Any], z: Mapping[Any, Any], pulp: Any
    ) -> None:
        """For an arc that may not serve some decode starts (longer than their TPOT while they
        decode, or unable to end by the deadline of a token it gives them):
        ``sum_{v barred} u_v <= n_a (1 - z_a)``, ``n_a`` the rows of those starts."""
        g = self.grid
        for a in g.arcs:
            starts = np.array([v for v, c in g.token_limits(a).items() if c < 0], dtype="int64")
            if starts.size == 0:
                continue
            rows = len(set(g.start_row[starts].tolist()))
            prob += (
                pulp.lpSum(start[int(v)] for v in starts) <= rows * (1 - z[a]),
                f"long_{a[0]}_{a[1]}",
            )

    def _prefill_deadlines(
        self, prob: Any, start: Sequence[Any], tokens: Mapping[Any, Any], pulp: Any
    ) -> None:
        """At each distinct start cell ``c`` of a prefilling row:
        ``sum_{a: e_a <= c} P_a >= sum_{v: sigma_v <= c} p_{r_v} u_v``."""
        g, p = self.grid, self.problem
        prefill = p.remaining_prefill_tokens[g.start_row]
        prefilling = np.flatnonzero(prefill > 0)
        for cell in np.unique(g.start_cell[prefilling]):
            due = prefilling[g.start_cell[prefilling] <= cell]
            prob += (
                pulp.lpSum(tokens[a] for a in g.arcs if a[1] <= cell)
                >= pulp.lpSum(int(prefill[v]) * start[int(v)] for v in due),
                f"prefill_c{int(cell)}",
            )

    def _after_horizon(
        self, prob: Any, x: Mapping[int, Any], keep: Any, start: Sequence[Any], pulp: Any
    ) -> None:
        """For each decode start ``v`` whose after-horizon batch limit ``n_v`` is below the
        number of rows ``n``: ``sum_r x_r <= n_v + (n - n_v)(1 - u_v)`` (``x_r = 1`` for
        running rows), with ``n_v = time2bs(min(t0, w_v))`` and ``w_v`` the time from each
        release of ``v`` to its token's deadline."""
        g, p = self.grid, self.problem
        n = p.n_requests
        served = pulp.lpSum(self._coef(r, x, keep) for r in range(n))
        for v in np.flatnonzero(g.start_tail_requests < n).tolist():
            limit = int(g.start_tail_requests[v])
            prob += (
                served <= limit + (n - limit) * (1 - start[v]),
                f"tail_{int(g.start_row[v])}_{int(g.start_cell[v])}",
            )

    def _plan(self) -> AdmissionPlan:
        """The plan of the last solved :meth:`milp` (admitted set, arcs and decode starts)."""
        var = self.variables
        admitted = self._admitted(var["x"])
        path = sorted(a for a, z in var["z"].items() if (z.value() or 0.0) > 0.5)
        chosen = {}
        for v, u in enumerate(var["start"]):
            if (u.value() or 0.0) > 0.5:
                chosen[int(self.grid.start_row[v])] = int(self.grid.start_cell[v])
        plan = self.plan(admitted, path, chosen)
        if plan is None:
            raise RuntimeError(
                f"the B2 solution admitting {admitted} on arcs {path} with decode starts "
                f"{chosen} is infeasible"
            )
        return plan

    def solution_plan(self) -> AdmissionPlan:
        """The plan read off the last solved :meth:`milp` (its arcs and decode starts).

        Raises
        ------
        RuntimeError
            No solved MILP, or its solution fails the batch process (a model bug).
        """
        if not self.variables:
            raise RuntimeError("solve the B2 MILP first (slolab.solvers.solve)")
        return self._plan()

    def plan(
        self,
        admitted: Sequence[int],
        path: Sequence[tuple[int, int]],
        decode_start_cell: Mapping[int, int] | None = None,
    ) -> AdmissionPlan | None:
        """The plan of ``admitted`` on the batch arcs ``path``; None if it fails.

        ``decode_start_cell`` maps a served row to one of its decode starts (default: its
        latest). Decode tokens follow the releases from each row's start; prefill goes earliest
        start first. The plan fails when memory is exceeded, an arc carries more tokens than
        its capacity or than lets its iteration end by the deadline of a token it serves, an
        arc is longer than the TPOT of a request it decodes, a prefill misses its start, or
        more rows are served than a batch after the horizon may decode for a picked start.

        Raises
        ------
        ValueError
            A given start cell is not a decode start of its row.
        """
        g, p = self.grid, self.problem
        rows = served_rows(p, admitted)
        if int(p.kv_tokens[rows].sum()) > p.kv_capacity_tokens:
            return None
        picked = []
        for r in rows.tolist():
            options = g.starts_of(r)
            if options.size == 0:
                return None
            if decode_start_cell is None or r not in decode_start_cell:
                picked.append(int(options[-1]))
                continue
            match = options[g.start_cell[options] == decode_start_cell[r]]
            if match.size == 0:
                raise ValueError(
                    f"cell {decode_start_cell[r]} is not a decode start of row {r}; its starts "
                    f"are {g.start_cell[options].tolist()}"
                )
            picked.append(int(match[0]))
        return self._plan_of_starts(admitted, path, np.array(picked, dtype="int64"))

    def _plan_of_starts(
        self, admitted: Sequence[int], path: Sequence[tuple[int, int]], picked: np.ndarray
    ) -> AdmissionPlan | None:
        """:meth:`plan` with the decode starts ``picked`` (one per served row, in row order)."""
        g, p = self.grid, self.problem
        rows = g.start_row[picked]
        if len(rows) > g.start_tail_requests[picked].min(initial=p.n_requests):
            return None
        index = {int(v): k for k, v in enumerate(picked.tolist())}
        decode = np.zeros((len(rows), len(path)), dtype=bool)
        capacity = g.capacity[[e - s for s, e in path]]
        for i, arc in enumerate(path):
            for v, most in g.token_limits(arc).items():
                if v in index:
                    capacity[i] = min(capacity[i], most)
            for v in g.releases(arc):
                if v in index:
                    decode[index[v], i] = True
        load = decode.sum(axis=0)
        if (capacity < 0).any() or (load > capacity).any():
            return None
        ends = np.array([e for _, e in path], dtype="int64")
        deadline = np.zeros(p.n_requests, dtype="int64")
        deadline[rows] = g.start_cell[picked]
        prefill = fill_prefill(deadline, rows, p, capacity - load, ends)
        if prefill is None:
            return None
        starts = np.array([s for s, _ in path], dtype=float) * g.cell_s
        used = decode.any(axis=1)
        return AdmissionPlan(
            tuple(sorted(int(r) for r in admitted)),
            starts,
            ends * g.cell_s,
            prefill,
            rows[used],
            decode[used],
        )

    def brute_force(self, time_limit: float) -> tuple[float, Schedule] | None:
        """Every subset of new requests by decreasing value and every choice of decode starts;
        for each, the best path by dynamic programming over cells. The first feasible subset is
        optimal.

        For fixed decode starts an arc is usable when its decode load fits the least of its
        capacity and the token limits the served starts set on it (:meth:`B2Grid.token_limits`);
        a path is feasible when, at each of its cells ``c`` followed
        by the arc ``(c, e)``, the prefill capacity left on the arcs before ``c`` covers the
        prefills due by cell ``e - 1``, and at ``H`` those due by ``H``. The largest left
        capacity at a cell dominates, so one value per cell suffices.
        """
        deadline = time.perf_counter() + time_limit
        g, p = self.grid, self.problem
        new = [int(r) for r in p.new_rows]
        values = p.value[new] if new else np.zeros(0)
        subsets = list(itertools.product((0, 1), repeat=len(new)))
        totals = np.array([float(np.dot(s, values)) for s in subsets]) if new else np.zeros(1)
        releases, limit = g.arc_tables()
        arc_capacity = g.capacity[[e - s for s, e in g.arcs]]
        tried = 0
        for k in np.argsort(-totals, kind="stable"):
            chosen = [r for r, pick in zip(new, subsets[k], strict=True) if pick]
            rows = served_rows(p, chosen)
            if int(p.kv_tokens[rows].sum()) > p.kv_capacity_tokens:
                continue
            for picked in itertools.product(*(g.starts_of(r).tolist() for r in rows.tolist())):
                tried += 1
                if tried % 256 == 0 and time.perf_counter() > deadline:
                    raise TimeoutError(
                        f"brute force over 2^{len(new)} subsets passed {time_limit} s"
                    )
                sel = np.array(picked, dtype="int64")
                if len(rows) > g.start_tail_requests[sel].min(initial=p.n_requests):
                    continue
                most = np.minimum(arc_capacity, limit[sel].min(axis=0, initial=arc_capacity.max()))
                path = self._best_path(sel, releases[sel].sum(axis=0), most)
                if path is None:
                    continue
                plan = self._plan_of_starts(chosen, path, sel)
                if plan is None:
                    raise RuntimeError(f"the path {path} found for {chosen} fails its plan")
                return float(totals[k]), plan_schedule(p, plan)
        return None

    def _best_path(
        self, picked: np.ndarray, load: np.ndarray, limit: np.ndarray
    ) -> list[tuple[int, int]] | None:
        """A feasible path for the decode starts ``picked`` (see :meth:`brute_force`)."""
        g, p = self.grid, self.problem
        prefill = p.remaining_prefill_tokens[g.start_row[picked]]
        due = np.zeros(g.n_cells + 1, dtype="int64")
        np.add.at(due, g.start_cell[picked], prefill)
        due = np.cumsum(due)
        left = np.full(g.n_cells + 1, -1, dtype="int64")
        came_from = np.full(g.n_cells + 1, -1, dtype="int64")
        left[0] = 0
        for i, (s, e) in enumerate(g.arcs):
            residual = int(limit[i]) - int(load[i])
            if residual < 0 or left[s] < 0 or left[s] < due[e - 1]:
                continue
            if left[s] + residual > left[e]:
                left[e] = left[s] + residual
                came_from[e] = s
        if left[g.n_cells] < due[g.n_cells]:
            return None
        path = []
        cell = g.n_cells
        while cell > 0:
            path.append((int(came_from[cell]), cell))
            cell = int(came_from[cell])
        return path[::-1]
