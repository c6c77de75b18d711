"""An exact re-plan of a slice of a tdg-horizon schedule, the rest of the schedule fixed.

:class:`TdgSlice` takes a one-server schedule that the engine ran (its iteration log) and a
slice of consecutive iterations ``[first, stop)``. It keeps every iteration before the slice and
every iteration from ``stop`` on as they ran, and re-plans the slice: the same work (each
request's prefill tokens and decode tokens of the slice) in at most ``K`` iterations with any
compositions and chunk sizes, ending by the logged start of iteration ``stop``. The state at the
slice's end is then the one the tail ran from, and the tail starts at its logged times, so every
token outside the slice keeps its time and its gain: the schedule's TDG is the fixed gain plus
the slice's, and the model maximizes the slice's gain exactly (iteration-indexed MILP, the
``tdg-horizon`` model's rows with a start state). The method ``lns`` uses it as a move
(:func:`slolab.heuristics.tdg_search.slice_search`); it is not a registered problem model.
See docs/proserve.md ("An exact slice move").
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from slolab.models.proserve import (
    MILP_DEADLINE_SLACK_S,
    Composition,
    TdgHorizon,
    certified_result,
    require_affine,
)
from slolab.sim.schedule import Schedule
from slolab.solvers.base import ExactModel, MilpFormulation
from slolab.timing.base import (
    F_DECODE_KV,
    F_DECODE_TOKENS,
    F_NUM_DECODE,
    F_NUM_PREFILL,
    F_PREFILL_TOKENS,
)

if TYPE_CHECKING:
    from slolab.instances.records import Instance
    from slolab.sim.outcome import Outcome
    from slolab.solvers.backend import Backend
    from slolab.solvers.base import Result


class TdgSlice(ExactModel):
    """Iterations ``[first, stop)`` of a one-server run re-planned for the most TDG, the rest
    of the run fixed.

    Slice requests ``r`` (those with an entry in the slice), slots ``k = 1..K``. Start state:
    ``q_r`` prompt tokens done and ``h_r`` tokens emitted before the slice; the slice's work:
    ``C_r`` prompt tokens and ``X_r`` decode tokens (as in the run). Times are seconds after
    the end ``t_0`` of the iteration before the slice. Variables as in ``tdg-horizon``
    (:class:`slolab.models.proserve.TdgHorizon`): ``u_k``, ``c_rk``, ``v_rk``, ``f_rk``,
    ``x_rk``, ``w_rk``, ``S_k``, ``E_k``, ``g_rk``, ``y_rk``; with ``P_rk = q_r + sum_{j<=k}
    c_rj``, ``D_rk = sum_{j<=k} x_rj`` and ``b_r = h_r + [q_r < p_r = q_r + C_r]``:

    - the slice's work: ``sum_k c_rk = C_r``, ``D_rK = X_r``;
    - prompts: ``p_r f_rk <= P_rk <= p_r - 1 + f_rk`` (``f`` a constant when the prompt is
      done before the slice or not completed in it); decode after the prompt:
      ``x_rk <= f_r(k-1)``;
    - times: ``S_1 >= 0``, ``S_k >= E_(k-1)``, ``S_k >= (a_r - t_0)(v_rk + x_rk)``,
      ``E_k >= S_k + t_c u_k + sum_r (a_tok c_rk + a_seq v_rk + a_dec x_rk + a_kv w_rk)``,
      ``w_rk >= p_r + b_r + D_r(k-1) - M (1 - x_rk)``; the tail's start:
      ``E_K <= s_stop - t_0``;
    - first token: ``g_rk <= f_rk - f_r(k-1)``, ``E_k <= d_r1 - t_0 + M (1 - g_rk)``; decode
      token ``b_r + D_rk``: ``y_rk <= x_rk``, ``E_k <= d_r1 - t_0 + TPOT_r (b_r + D_rk - 1)
      + M (1 - y_rk)``;
    - caps per slot; maximize ``sum w1_r g_rk + wd_r y_rk``.

    With a snapshot's given cache (``cached_tokens``, ``k_r``), ``p_r`` is the uncached prompt
    ``p_r - k_r`` (what the chunks cover) and a decode token's context adds ``k_r``.

    Deadlines are relaxed by :data:`~slolab.models.proserve.MILP_DEADLINE_SLACK_S` and the
    incumbent is evaluated by replaying the whole schedule in the engine (OPTIMAL only when
    the replay reaches the bound), as for ``tdg-horizon``.

    Parameters
    ----------
    instance : Instance
        A ``tdg-horizon`` window (one server; memory must hold the whole window).
    outcome : Outcome
        A run on it with its iteration log and no preemptions.
    first, stop : int
        The slice: iterations ``first .. stop - 1`` of the log, in start order.
    max_iterations : int, optional
        Slots ``K`` (default: the slice's own iteration count).
    """

    sense = "max"

    def __init__(
        self,
        instance: Instance,
        outcome: Outcome,
        first: int,
        stop: int,
        max_iterations: int | None = None,
    ) -> None:
        from slolab.sim import metrics

        super().__init__(instance)
        self.horizon = TdgHorizon(instance, max_iterations=1)
        self.data = self.horizon.data
        self.t_c, self.coef = require_affine(instance.timing, "the slice model")
        self.run = Schedule.from_outcome(outcome)
        its = self.run.iterations[0]
        if not 0 <= first < stop <= len(its):
            raise ValueError(f"slice [{first}, {stop}) is not within the {len(its)} iterations")
        self.first, self.stop = first, stop
        self.max_iterations = stop - first if max_iterations is None else int(max_iterations)
        if self.max_iterations < 1:
            raise ValueError(f"max_iterations must be >= 1, got {self.max_iterations}")
        ends = np.asarray(outcome.it_end)[np.argsort(outcome.it_start, kind="stable")]
        self.start_s = float(ends[first - 1]) if first else 0.0
        self.end_by_s = its[stop].not_before_s if stop < len(its) else math.inf
        d = self.data
        done = np.zeros(d.n, dtype=np.int64)
        emitted = np.zeros(d.n, dtype=np.int64)
        for it in its[:first]:
            for r, phase, tokens in it.entries:
                if phase == "prefill":
                    done[r] += tokens
                    emitted[r] += int(done[r] == d.uncached[r])
                else:
                    emitted[r] += 1
        chunk = np.zeros(d.n, dtype=np.int64)
        decodes = np.zeros(d.n, dtype=np.int64)
        for it in its[first:stop]:
            for r, phase, tokens in it.entries:
                if phase == "prefill":
                    chunk[r] += tokens
                else:
                    decodes[r] += 1
        self.requests = sorted(set(np.flatnonzero(chunk + decodes).tolist()))
        self.done, self.emitted = done, emitted
        self.chunk, self.decodes = chunk, decodes
        # the gain outside the slice: tokens emitted before t_0 or after the slice's last end
        weights = metrics.token_weights(instance)
        on_time = metrics.on_time_tokens(instance, outcome)
        times = np.asarray(outcome.token_times)
        inside = (times > self.start_s) & (times <= float(ends[stop - 1]))
        self.fixed_gain = float(weights[on_time & ~inside].sum())
        self.run_gain = float(weights[on_time & inside].sum())
        self.slice_weight = float(weights[inside].sum())

    def evaluate(self, schedule: Schedule) -> float:
        """The slice's gain in ``schedule`` (a :meth:`splice` of this run), with the engine's
        arithmetic: the slice's iterations from the state at ``t_0``, each started as early as
        the engine starts it; when the last ends after the tail's logged start (the tail
        would move), the whole schedule's replayed TDG less the fixed gain."""
        from slolab.sim import metrics, replay

        its = schedule.iterations[0]
        tail = len(self.run.iterations[0]) - self.stop
        prefilled, generated = self.done.copy(), self.emitted.copy()
        end, gain = self.start_s, 0.0
        for it in its[self.first : len(its) - tail]:
            chunks = tuple((r, t) for r, ph, t in it.entries if ph == "prefill")
            decodes = tuple(r for r, ph, _ in it.entries if ph == "decode")
            end, earned = self.horizon.step((chunks, decodes), end, prefilled, generated)
            gain += earned
        if end <= self.end_by_s:
            return gain
        return metrics.tdg(self.instance, replay(self.instance, schedule)) - self.fixed_gain

    def splice(self, comps: Sequence[Composition]) -> Schedule:
        """The run with the slice replaced by the compositions ``comps`` (chunks, decodes),
        each started as early as the engine starts it."""
        its = self.run.iterations[0]
        new = TdgHorizon.schedule_of(comps).iterations[0]
        return Schedule((its[: self.first] + new + its[self.stop :],))

    def solve_with(self, backend: Backend, time_limit: float, **params: Any) -> Result | None:
        return certified_result(self, backend.solve_model(self, time_limit), self.evaluate)

    def horizon_s(self) -> float:
        """An upper bound on every slot's end (s after ``t_0``): the slice's work back to back
        from its last arrival."""
        d, rs = self.data, self.requests
        a_dec = float(self.coef[F_DECODE_TOKENS] + self.coef[F_NUM_DECODE])
        context = d.prompt[rs] + self.emitted[rs] + self.decodes[rs] + 1
        work = (
            self.max_iterations * (self.t_c + float(self.coef[F_NUM_PREFILL]) * len(rs))
            + float(self.coef[F_PREFILL_TOKENS]) * float(self.chunk[rs].sum())
            + float((self.decodes[rs] * (a_dec + self.coef[F_DECODE_KV] * context)).sum())
        )
        latest = max(0.0, float(d.arrival_s[rs].max()) - self.start_s)
        return latest + work + 1e-3

    def milp(self) -> MilpFormulation:
        import pulp

        d, K, H = self.data, self.max_iterations, self.horizon_s()
        prob = pulp.LpProblem("tdg_slice", pulp.LpMaximize)
        V = prob.add_variable
        slots = range(K)
        u = [V(f"u_{k}", cat="Binary") for k in slots]
        S = [V(f"S_{k}", 0, H) for k in slots]
        E = [V(f"E_{k}", 0, H) for k in slots]
        a_tok = float(self.coef[F_PREFILL_TOKENS])
        a_seq = float(self.coef[F_NUM_PREFILL])
        a_dec = float(self.coef[F_DECODE_TOKENS] + self.coef[F_NUM_DECODE])
        a_kv = float(self.coef[F_DECODE_KV])
        c: dict[tuple[int, int], Any] = {}
        v: dict[tuple[int, int], Any] = {}
        x: dict[tuple[int, int], Any] = {}
        w: dict[tuple[int, int], Any] = {}
        gains = []
        for r in self.requests:
            # p: the prompt tokens prefilled (less a given cached prefix); a decode token
            # reads the whole context, the cached prefix included
            p, q, C, X = (
                int(d.uncached[r]),
                int(self.done[r]),
                int(self.chunk[r]),
                int(self.decodes[r]),
            )
            cached = int(d.cached[r])
            completes = q < p == q + C
            base = int(self.emitted[r]) + int(completes)
            d1 = float(d.first_deadline_s[r]) - self.start_s + MILP_DEADLINE_SLACK_S
            big_t = H + max(0.0, -d1)  # no slot ends after H
            f: list[Any] = [int(q == p)] * (K + 1)  # f[k + 1]: prompt done after slot k
            if C:
                for k in slots:
                    c[r, k] = V(f"c_{r}_{k}", 0, C, cat="Integer")
                    v[r, k] = V(f"v_{r}_{k}", cat="Binary")
                    prob += c[r, k] <= C * v[r, k], f"chunk_{r}_{k}"
                    prob += v[r, k] <= c[r, k], f"chunk_nonempty_{r}_{k}"
                prob += pulp.lpSum(c[r, k] for k in slots) == C, f"slice_prefill_{r}"
            if completes:
                for k in slots:
                    f[k + 1] = V(f"f_{r}_{k}", cat="Binary")
                    done = q + pulp.lpSum(c[r, j] for j in range(k + 1))
                    prob += done >= p * f[k + 1], f"complete_{r}_{k}"
                    prob += done <= p - 1 + f[k + 1], f"incomplete_{r}_{k}"
                    g = V(f"g_{r}_{k}", cat="Binary")
                    prob += g <= f[k + 1] - f[k], f"first_at_{r}_{k}"
                    if math.isfinite(d1):
                        prob += E[k] <= d1 + big_t * (1 - g), f"first_on_time_{r}_{k}"
                    gains.append(float(d.first_gain[r]) * g)
            if X:
                big = cached + p + base + X
                for k in slots:
                    x[r, k] = V(f"x_{r}_{k}", cat="Binary")
                    w[r, k] = V(f"w_{r}_{k}", 0, big)
                    prob += x[r, k] <= f[k], f"decode_after_prompt_{r}_{k}"
                    before = pulp.lpSum(x[r, j] for j in range(k))
                    context = cached + p + base + before
                    prob += w[r, k] >= context - big * (1 - x[r, k]), f"context_{r}_{k}"
                    y = V(f"y_{r}_{k}", cat="Binary")
                    prob += y <= x[r, k], f"earn_decode_{r}_{k}"
                    if math.isfinite(d1):
                        due = d1 + float(d.tpot_s[r]) * (base + before + x[r, k] - 1)
                        prob += E[k] <= due + big_t * (1 - y), f"decode_on_time_{r}_{k}"
                    gains.append(float(d.decode_gain[r]) * y)
                prob += pulp.lpSum(x[r, k] for k in slots) == X, f"slice_decodes_{r}"
        prob += pulp.lpSum(gains)
        for k in slots:
            present = [v[r, k] for r in self.requests if (r, k) in v]
            present += [x[r, k] for r in self.requests if (r, k) in x]
            if k + 1 < K:
                prob += u[k] >= u[k + 1], f"used_first_{k}"
            prob += pulp.lpSum(present) >= u[k], f"nonempty_{k}"
            prob += pulp.lpSum(present) <= d.max_batch_size * u[k], f"seqs_{k}"
            if d.max_batch_tokens:
                tokens = [c[r, k] for r in self.requests if (r, k) in c]
                tokens += [x[r, k] for r in self.requests if (r, k) in x]
                prob += pulp.lpSum(tokens) <= d.max_batch_tokens, f"tokens_{k}"
            if k:
                prob += S[k] >= E[k - 1], f"after_{k}"
            tau = self.t_c * u[k] + pulp.lpSum(
                a_tok * c[r, k] + a_seq * v[r, k] for r in self.requests if (r, k) in c
            )
            tau += pulp.lpSum(
                a_dec * x[r, k] + a_kv * w[r, k] for r in self.requests if (r, k) in x
            )
            prob += E[k] >= S[k] + tau, f"duration_{k}"
            for r in self.requests:
                late = float(d.arrival_s[r]) - self.start_s
                if late > 0:
                    here = [m[r, k] for m in (v, x) if (r, k) in m]
                    prob += S[k] >= late * pulp.lpSum(here), f"arrived_{r}_{k}"
        if math.isfinite(self.end_by_s):
            prob += E[K - 1] <= self.end_by_s - self.start_s, "tail_start"

        def to_schedule() -> Schedule:
            comps: list[Composition] = []
            for k in slots:
                chunks = tuple(
                    (r, round(c[r, k].value() or 0))
                    for r in self.requests
                    if (r, k) in c and (c[r, k].value() or 0) > 0.5
                )
                decodes = tuple(
                    r for r in self.requests if (r, k) in x and (x[r, k].value() or 0) > 0.5
                )
                comps.append((chunks, decodes))
            return self.splice(comps)

        return MilpFormulation(prob, to_schedule=to_schedule)
