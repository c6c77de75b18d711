"""Integral iteration counts in the column master, by branch-and-price on SCIP.

:class:`TdgHorizonBranchPrice` (model ``tdg-horizon-columns-bp``) adds to the column master of
:mod:`slolab.models.tdg_columns` (``columns``) an integer ``C_j`` per bucket: the iterations
*completed* by ``b_j`` (``C_0 = 0``, non-decreasing, at most ``N_max``), with the rows::

    C_j <= N_j <= C_j + 1                                          (one iteration in progress)
    sum_(p of r) K_pj lam_p <= C_j - C_(f(r)-1)                     (completed iterations, dual nu_rj)

next to the fluid rows of the column master (bucket time, ``K <= N_j - N_(f(r)-1)``,
convexity). With ``chain=True`` the master also holds the ``chain`` family's leader columns
and rows (L1)-(L3) and the interval rows (L4) the root column generation separated, each (L4)
row twice: on ``N`` as in ``columns-chain`` and on ``C`` (``C_e - C_s >= sum x_qq``).

``lam`` and ``x`` stay continuous (the master is a relaxation per request); only ``C`` is
integer, and SCIP branches on it as on any integer variable, so the pricing is the column
master's dynamic programme at every node with ``mu + nu`` in place of ``mu`` (a column's
coefficient in the ``nu`` row is its ``K_pj``, as in the iteration row). The root starts from
the columns of HiGHS's column generation (:meth:`TdgHorizonColumns.generate`, a share of the
time). At every pricing call the pricer also evaluates the Lagrangian bound at SCIP's duals
(every row relaxed but the convexity rows, each non-column variable at its best within its
node-local bounds) and hands it to SCIP as the node's ``lowerbound`` (SCIP minimises ``-gain``):
SCIP uses a node's LP value as a bound only once its pricing converged, and keeps the pricer's
bound otherwise.

The bound reported is the least of the root column generation's bound, the Lagrangian bounds
at the root and SCIP's dual bound; OPTIMAL only when SCIP proves the integral master optimal.
It is an upper bound on the TDG optimum, never a schedule (docs/proserve.md, "Integral
iteration counts by branch-and-price": the proof).

References
----------
Barnhart, Johnson, Nemhauser, Savelsbergh and Vance (1998), "Branch-and-price: column
generation for solving huge integer programs", Sec. 2-3; Vanderbeck (2000) for the Lagrangian
bound at a node; SCIP's pricer interface (``SCIP_DECL_PRICERREDCOST``: ``lowerbound``,
``SCIP_DIDNOTRUN``).
"""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np
from slolab.instances.records import Instance
from slolab.models.tdg_bound import (
    DEFAULT_MAX_PAIRS,
    LP_MARGIN_ABS,
    LP_MARGIN_REL,
    bound_result,
    ideal_gain,
)
from slolab.models.tdg_columns import (
    COLUMNS_PER_ROUND,
    PRICE_TOL,
    ChainRows,
    Column,
    TdgHorizonColumns,
)
from slolab.solvers.backend import run_interruptibly
from slolab.solvers.base import ExactModel, Result, Status
from slolab.solvers.registry import register_model
from slolab.solvers.scip_price import price_model

__all__ = [
    "BP_MODEL",
    "PRICER_GRACE",
    "PRICER_GRACE_S",
    "ROOT_SHARE",
    "SEED_MIN",
    "IntegralMaster",
    "TdgHorizonBranchPrice",
]

#: Registry name of the branch-and-price bound.
BP_MODEL = "tdg-horizon-columns-bp"
#: Share of the time limit for HiGHS's root column generation (the rest is SCIP's).
ROOT_SHARE = 0.3
#: A root column with at least this value in the root master's last solution seeds SCIP.
SEED_MIN = 1e-9
#: The pricer gives up a call (DIDNOTRUN) this share of the time limit plus
#: :data:`PRICER_GRACE_S` seconds after it; SCIP's own limit stops it first otherwise.
PRICER_GRACE = 0.02
PRICER_GRACE_S = 1.0


class IntegralMaster:
    """The column master with the integer completed-iteration counts ``C`` as a SCIP model.

    Variables: ``N_j`` in [0, N_max], ``C_j`` integer in [0, N_max], the leader columns ``x``
    in [0, 1] (``chain``), one ``lam`` per column (cost ``-gain``, minimised). Every row is
    one-sided; ``sides`` and ``signs`` (+1 for ``>=``, -1 for ``<=``) give the Lagrangian its
    constants and the sign of each multiplier, ``terms`` the rows' coefficients in the
    non-column variables ``[N, C, x]`` (the convexity rows are kept out: each request's
    columns are priced as a whole)."""

    def __init__(
        self,
        cols: TdgHorizonColumns,
        chain: ChainRows | None,
        columns: list[Column],
        seed: int,
    ) -> None:

        self.cols = cols
        self.chain = chain
        B = cols.grid.buckets
        self.buckets = B
        self.n_max = float((cols.data.uncached + cols.data.output).sum())
        # best bound first, never diving: the node of the least bound is always next
        model = price_model("tdg_bp", seed)
        # the most fractional C first (strong branching would solve LPs without pricing)
        model.setParam("branching/mostinf/priority", 10_000_000)
        self.model = model
        self.zero = model.addVar("zero", lb=0.0, ub=0.0)
        self.n_vars = [model.addVar(f"N_{j}", lb=0.0, ub=self.n_max) for j in range(B)]
        self.c_vars = [model.addVar(f"C_{j}", vtype="I", lb=0.0, ub=self.n_max) for j in range(B)]
        nx = int(cols.leaders["count"]) if chain is not None and cols.leaders else 0
        self.x_vars = [model.addVar(f"x_{i}", lb=0.0, ub=1.0) for i in range(nx)]
        self.others = self.n_vars + self.c_vars + self.x_vars
        self.lower = np.zeros(len(self.others))
        self.upper = np.concatenate([np.full(2 * B, self.n_max), np.ones(nx)])
        self.rows: list[Any] = []
        self.sides: list[float] = []
        self.signs: list[float] = []
        self.terms: list[tuple[int, int, float]] = []
        self._build_rows()
        self.lam: list[Any] = []
        self.columns: list[Column] = []
        self.known: set[tuple[int, int, bytes, bytes]] = set()
        for col in columns:
            self.add_column(col, priced=False)
        self.root_bounds: list[float] = []
        self.calls = 0
        #: the pricer stops a call past this (``time.perf_counter``) and answers DIDNOTRUN
        self.deadline = math.inf
        self.aborted = False

    # -- rows -------------------------------------------------------------------------------------
    def _row(
        self,
        terms: list[tuple[int, float]],
        sign: float,
        side: float,
        name: str,
        modifiable: bool,
    ) -> int:
        """A row ``sum terms >= side`` (``sign`` +1) or ``<= side`` (-1) over ``[N, C, x]``
        (indices into :attr:`others`); its index."""
        import pyscipopt

        expr = self.zero + pyscipopt.quicksum(v * self.others[i] for i, v in terms)
        cons = self.model.addCons(
            expr >= side if sign > 0 else expr <= side, name, modifiable=modifiable
        )
        index = len(self.rows)
        self.rows.append(cons)
        self.sides.append(float(side))
        self.signs.append(float(sign))
        self.terms.extend((index, int(i), float(v)) for i, v in terms)
        return index

    def _build_rows(self) -> None:
        cols, B = self.cols, self.buckets
        N, C = 0, B  # offsets of N and C in ``others``
        lengths = np.diff(cols.grid.bounds)
        t_c = cols.t_c
        self.time_rows = np.array(
            [
                self._row(
                    [(N + j, t_c)] + ([(N + j - 1, -t_c)] if j else []),
                    -1,
                    float(lengths[j]),
                    f"time_{j}",
                    True,
                )
                for j in range(B)
            ]
        )
        for j in range(B):
            if j:
                self._row([(N + j, 1.0), (N + j - 1, -1.0)], 1, 0.0, f"n_mono_{j}", False)
                self._row([(C + j, 1.0), (C + j - 1, -1.0)], 1, 0.0, f"c_mono_{j}", False)
            self._row([(N + j, 1.0), (C + j, -1.0)], 1, 0.0, f"n_low_{j}", False)
            self._row([(N + j, 1.0), (C + j, -1.0)], -1, 1.0, f"n_high_{j}", False)
        self.iteration_rows: dict[int, np.ndarray] = {}
        self.count_rows: dict[int, np.ndarray] = {}
        self.convexity: dict[int, Any] = {}
        for r in cols.requests:
            f = cols.tables[r]["first"]
            its, counts = [], []
            for j in cols.bucket_range(r):
                release = [(f - 2, 1.0)] if f >= 2 else []
                its.append(
                    self._row(
                        [(N + int(j), -1.0)] + [(N + i, v) for i, v in release],
                        -1,
                        0.0,
                        f"it_{r}_{j}",
                        True,
                    )
                )
                counts.append(
                    self._row(
                        [(C + int(j), -1.0)] + [(C + i, v) for i, v in release],
                        -1,
                        0.0,
                        f"done_{r}_{j}",
                        True,
                    )
                )
            self.iteration_rows[r] = np.asarray(its, dtype=np.int64)
            self.count_rows[r] = np.asarray(counts, dtype=np.int64)
            self.convexity[r] = self.model.addCons(self.zero == 1.0, f"conv_{r}", modifiable=True)
        self.chain_index: list[int] = []
        if self.chain is not None:
            self._chain_rows(self.chain, N, C)

    def _chain_rows(self, chain: ChainRows, N: int, C: int) -> None:
        """The chain rows (all ``<= 0``; (L1) and (L3) get column terms), and for each (L4)
        row (one with terms in ``N``) its twin on ``C``."""
        X = 2 * self.buckets
        x_terms: list[list[tuple[int, float]]] = [[] for _ in range(chain.count)]
        n_terms: list[list[tuple[int, float]]] = [[] for _ in range(chain.count)]
        for row, i, v in chain.x_terms:
            x_terms[row].append((X + i, v))
        for row, j, v in chain.n_terms:
            n_terms[row].append((j, v))
        lam_rows = set(chain.first.values())
        for _, own in chain.upto.values():
            lam_rows.update(int(i) for i in own)
        for i in range(chain.count):
            terms = x_terms[i] + [(N + j, v) for j, v in n_terms[i]]
            self.chain_index.append(self._row(terms, -1, 0.0, f"chain_{i}", i in lam_rows))
            if n_terms[i]:
                twin = x_terms[i] + [(C + j, v) for j, v in n_terms[i]]
                self._row(twin, -1, 0.0, f"chain_c_{i}", False)

    # -- columns ----------------------------------------------------------------------------------
    def entries(self, col: Column) -> list[tuple[Any, float]]:
        """``(row, coefficient)`` of ``col``: its work in the bucket-time rows, its token
        counts in the iteration and completed-iteration rows, the chain rows' terms (1 in
        (L1) when on time, -1 in each (L3) row whose bucket it completes by) and 1 in its
        convexity row."""
        cols = self.cols
        buckets = cols.bucket_range(col.request)
        out: list[tuple[Any, float]] = []
        placed = col.work > 0
        out += [
            (self.rows[int(i)], float(v))
            for i, v in zip(self.time_rows[buckets[placed]], col.work[placed], strict=True)
        ]
        tokens = col.tokens > 0
        for rows in (self.iteration_rows[col.request], self.count_rows[col.request]):
            out += [
                (self.rows[int(i)], float(k))
                for i, k in zip(rows[tokens], col.tokens[tokens], strict=True)
            ]
        chain = self.chain
        if chain is not None and col.complete >= 0 and col.request in chain.first:
            t = cols.tables[col.request]
            js, own = chain.upto[col.request]
            for i in own[js >= t["first"] + col.complete]:
                out.append((self.rows[self.chain_index[int(i)]], -1.0))
            if t["first_ok"][col.complete]:
                out.append((self.rows[self.chain_index[chain.first[col.request]]], 1.0))
        out.append((self.convexity[col.request], 1.0))
        return out

    def add_column(self, col: Column, priced: bool) -> bool:
        """Add ``col`` (False when it is in the master already)."""
        key = (col.request, col.complete, col.tokens.tobytes(), col.work.tobytes())
        if key in self.known:
            return False
        self.known.add(key)
        var = self.model.addVar(
            f"lam_{len(self.lam)}", lb=0.0, ub=None, obj=-col.gain, pricedVar=priced
        )
        for row, coef in self.entries(col):
            self.model.addConsCoeff(row, var, coef)
        self.lam.append(var)
        self.columns.append(col)
        return True

    def transform(self) -> None:
        """Swap the stored constraints and variables for SCIP's transformed ones."""
        model = self.model
        self.rows = [model.getTransformedCons(c) for c in self.rows]
        self.convexity = {r: model.getTransformedCons(c) for r, c in self.convexity.items()}
        self.others = [model.getTransformedVar(v) for v in self.others]
        self._matrix()

    def _matrix(self) -> None:
        from scipy.sparse import csr_matrix

        rows, idx, val = (np.asarray(a) for a in zip(*self.terms, strict=True))
        self.matrix = csr_matrix(
            (val.astype(float), (rows.astype(np.int64), idx.astype(np.int64))),
            shape=(len(self.rows), len(self.others)),
        )

    # -- pricing ----------------------------------------------------------------------------------
    def multipliers(self) -> np.ndarray:
        """SCIP's row duals with the sign each row allows (``>=``: at least 0, ``<=``: at
        most 0, SCIP minimising); any such vector gives a valid Lagrangian bound."""
        y = np.array([self.model.getDualsolLinear(c) for c in self.rows])
        signs = np.asarray(self.signs)
        return np.where(signs > 0, np.maximum(y, 0.0), np.minimum(y, 0.0))

    def price(self) -> tuple[int, float | None]:
        """Add the improving columns at SCIP's duals (the DP with ``mu + nu``, the chain
        terms per completion bucket); return how many entered and the Lagrangian lower bound
        on the node's value (SCIP's sense: ``-gain`` minimised, without the fixed gain), None
        when the clock passed :attr:`deadline` before every request was priced."""
        cols = self.cols
        self.calls += 1
        y = self.multipliers()
        pi = -y[self.time_rows]
        chain_y = None
        if self.chain is not None and self.chain_index:
            chain_y = -y[np.asarray(self.chain_index, dtype=np.int64)]
        value = float(y @ np.asarray(self.sides))
        added = 0
        for r in cols.requests:
            buckets = cols.bucket_range(r)
            weight = -y[self.iteration_rows[r]] - y[self.count_rows[r]]
            extra = None
            if chain_y is not None and self.chain is not None:
                t = cols.tables[r]
                extra = self.chain.column_terms(r, chain_y, t["first_ok"], t["first"])
            got = cols.price(r, pi[buckets], weight, most=COLUMNS_PER_ROUND, extra=extra)
            if not got:
                continue
            value -= max(0.0, got[0][0])
            sigma = float(self.model.getDualsolLinear(self.convexity[r]))
            for reduced, col in got:
                if reduced + sigma > PRICE_TOL and self.add_column(col, priced=True):
                    added += 1
            if time.perf_counter() > self.deadline:
                self.aborted = True
                return added, None
        reduced_others = -(self.matrix.T @ y)
        lo, hi = self.local_bounds()
        value += float(np.minimum(reduced_others * lo, reduced_others * hi).sum())
        node = self.model.getCurrentNode()
        if node is not None and node.getDepth() == 0:
            self.root_bounds.append(value)
        return added, value

    def local_bounds(self) -> tuple[np.ndarray, np.ndarray]:
        """Node-local bounds of ``[N, C, x]`` (the branching moves those of ``C``)."""
        lo = np.array([v.getLbLocal() for v in self.others])
        hi = np.array([v.getUbLocal() for v in self.others])
        return lo, hi


def _pricer(master: IntegralMaster) -> Any:
    import pyscipopt

    result = pyscipopt.SCIP_RESULT

    class Pricer(pyscipopt.Pricer):  # type: ignore[misc]
        def pricerinit(self) -> None:
            master.transform()

        def pricerredcost(self) -> dict[str, Any]:
            _, lower = master.price()
            if lower is None:
                # not every request priced: SCIP must not take this node's LP value as a
                # bound (DIDNOTRUN), and stops (it refuses to keep a node whose pricing was
                # cut short when it can neither branch nor is stopped)
                self.model.interruptSolve()
                return {"result": result.DIDNOTRUN}
            return {"result": result.SUCCESS, "lowerbound": lower}

        def pricerfarkas(self) -> dict[str, Any]:
            # the empty columns and x = 0 meet every row whatever N and C are, so a node's LP
            # is infeasible from its bounds on C alone: no column can repair it
            return {"result": result.SUCCESS}

    return Pricer()


@register_model(BP_MODEL)
class TdgHorizonBranchPrice(ExactModel):
    """Upper bound on the optimal TDG of a tdg-horizon window: the column master with integer
    completed-iteration counts, by branch-and-price on SCIP (module docstring;
    docs/proserve.md, "Integral iteration counts by branch-and-price").

    Parameters
    ----------
    instance : Instance
        A ``tdg-horizon`` instance.
    spacing_s, max_pairs : optional
        The grid, as :class:`~slolab.models.tdg_columns.TdgHorizonColumns`'s.
    chain : bool
        Add the ``chain`` family's leader columns and rows, the (L4) rows separated by the root
        column generation on ``N`` and on ``C``.
    root_share : float
        Share of the time limit for HiGHS's root column generation (at most: it stops when no
        column prices out, and SCIP gets the rest).
    """

    sense = "max"
    bound_only = True

    def __init__(
        self,
        instance: Instance,
        spacing_s: float | None = None,
        max_pairs: int = DEFAULT_MAX_PAIRS,
        chain: bool = False,
        root_share: float = ROOT_SHARE,
    ) -> None:
        super().__init__(instance)
        if not 0.0 < root_share < 1.0:
            raise ValueError(f"root_share must be in (0, 1), got {root_share}")
        self.columns = TdgHorizonColumns(
            instance, spacing_s=spacing_s, max_pairs=max_pairs, chain=chain
        )
        self.chain = chain
        self.root_share = float(root_share)

    backends = ("highs",)

    def supports(self) -> frozenset[str]:
        """HiGHS for the root, SCIP for the tree: solved as ``"highs"``."""
        return frozenset({"milp"})

    def solve_with(self, backend: Any, time_limit: float, **params: Any) -> Result | None:
        """Root column generation on HiGHS (``root_share`` of the time), then branch-and-price
        on SCIP from its columns with the rest; the least valid bound, OPTIMAL only when SCIP
        proves the integral master optimal."""
        cols = self.columns
        start = time.perf_counter()
        got = cols.generate(backend, self.root_share * time_limit)
        ideal = ideal_gain(cols.data)

        def settle(value: float) -> float:
            return min(value + LP_MARGIN_REL * abs(value) + LP_MARGIN_ABS, ideal)

        bound = got.bound
        # the root master's columns in use (its empty columns always): seeding every column
        # made SCIP's first LPs far slower (7 pricing calls in 60 s, against 120 in 210 s)
        seed_columns = [cols.empty_column(int(r)) for r in cols.requests]
        nx = int(cols.leaders["count"]) if cols.leaders is not None else 0
        if got.rounds:
            lam = np.asarray(got.highs.getSolution().col_value)[cols.grid.buckets + nx :]
            used = [c for c, v in zip(got.master["columns"], lam, strict=True) if v > SEED_MIN]
            seed_columns += used
        master = IntegralMaster(
            cols, got.master.get("chain"), seed_columns, int(getattr(backend, "seed", 0))
        )
        model = master.model
        model.includePricer(
            _pricer(master), "columns", "per-request DP with mu + nu", priority=1, delay=True
        )
        left = start + time_limit - time.perf_counter()
        # SCIP's own limit ends first and stops its pricing loop cleanly (the LP value of a
        # node whose loop it stopped is not used); the pricer's deadline is a backstop for a
        # single call that runs long
        master.deadline = start + time_limit * (1.0 + PRICER_GRACE) + PRICER_GRACE_S
        model.setParam("limits/time", max(left, 1e-3))
        run_interruptibly(model.optimize, model.interruptSolve)
        scip_status = model.getStatus()
        if scip_status == "userinterrupt" and not master.aborted:
            raise KeyboardInterrupt
        dual = float(model.getDualbound())
        # SCIP's infinity (1e20) stands for no bound: the root's pricing never converged
        scip_bound = cols.fixed_gain - dual if abs(dual) < model.infinity() else math.inf
        if master.aborted:
            # a node whose pricing the pricer cut short could be closed on its LP solution:
            # SCIP's dual bound is then not trusted (the root's bounds still hold)
            scip_bound = math.inf
        root = cols.fixed_gain - max(master.root_bounds) if master.root_bounds else math.inf
        value = min(bound, settle(root), settle(scip_bound))
        if scip_status == "optimal" and not master.aborted:
            status = Status.OPTIMAL
        elif got.status != Status.TIME_LIMIT or math.isfinite(min(root, scip_bound)):
            status = Status.FEASIBLE
        else:
            status = Status.TIME_LIMIT
        primal = cols.fixed_gain - float(model.getPrimalbound()) if model.getNSols() > 0 else None
        return bound_result(
            BP_MODEL,
            status,
            value,
            start,
            cols.grid,
            ideal,
            columns_bound=got.bound,
            columns_status=got.status.value,
            rounds=len(got.rounds),
            root_lagrangian=root,
            scip_bound=scip_bound,
            scip_status=scip_status,
            nodes=int(model.getNNodes()),
            columns=len(master.columns),
            pricing_calls=master.calls,
            pricing_aborted=master.aborted,
            master_primal=primal,
            chain=self.chain,
        )
