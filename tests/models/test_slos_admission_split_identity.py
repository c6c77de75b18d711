"""The SLOs-Serve admission models decide as they did when ``models/slos_admission.py`` was one
module, before it became the package ``models/slos_admission/``.

On a battery of seeded calls (two TPOT tier sets, B2 with one and two cells per batch, and two
built instances), each case records: B1's batch process (``t0``, ``C``, ``K``, deadline
batches); B1's and B2's brute-force optimum and admitted set, the size of the plan and schedule
of that set (batches, iterations, prefill and decode tokens, the planned start of the last
iteration) and the plan checker's verdict; the size of both MILPs (variables, constraints, B2's
decode starts, cells and arcs) and their HiGHS objectives; and the multi-SLO DP's admitted set
and value. Objectives and times are compared rounded to 9 significant digits; every other field
is an integer or a set.

After a deliberate change of these decisions, re-record the JSON beside this file with
``python tests/models/test_slos_admission_split_identity.py`` and name the move in the commit.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import slolab.models.slos_admission as slos_model
from slolab.heuristics.slos_serve_dp import slos_dp
from slolab.models.slos_admission import (
    AdmissionB1,
    AdmissionB2,
    AdmissionProblem,
    batch_process,
    plan_b1,
    plan_schedule,
    plan_violations,
)
from slolab.problems import get_problem
from slolab.solvers import Status, solve
from slolab.timing import LinearTiming

# 0.01 s per iteration + 0.4 ms per token: time2bs(0.05) = (0.05 - 0.01) / 4e-4 = 100 tokens.
TIMING = LinearTiming(0.01, {"prefill_tokens": 4e-4, "decode_tokens": 4e-4}, name="round")
#: TPOT tiers of the random calls: one not a multiple of t0 = 0.05 s, and all multiples.
TIERS = {"mixed": (0.05, 0.1, 0.075), "multiples": (0.05, 0.1, 0.2)}
SEEDS = range(8)
#: Built ``slos-admission`` instances: (seed, new, running).
BUILT = ((3, 5, 6), (9, 6, 16))


def _sig(x: float) -> float:
    """``x`` rounded to 9 significant digits."""
    return float(f"{x:.9g}")


def _problem(case: str) -> AdmissionProblem:
    kind, _, rest = case.partition("/")
    if kind == "built":
        seed, new, running = (int(v) for v in rest.split("-"))
        instance = get_problem("slos-admission").builder(seed=seed, new=new, running=running)
        return AdmissionProblem.from_instance(instance)
    tiers, seed = rest.split("-")
    return slos_model.random_problem(
        int(seed), timing=TIMING, new_range=(1, 7), running_range=(0, 4), tiers=TIERS[tiers]
    )


def _schedule_size(schedule) -> tuple:
    """(iterations, prefill tokens, decode tokens, latest planned start rounded, rejected)."""
    its = schedule.iterations[0]
    prefill = sum(t for it in its for _, phase, t in it.entries if phase == "prefill")
    decode = sum(t for it in its for _, phase, t in it.entries if phase == "decode")
    last = _sig(max((it.not_before_s for it in its), default=0.0))
    return (len(its), prefill, decode, last, sorted(schedule.rejected))


def _plan_size(problem: AdmissionProblem, plan) -> tuple:
    """(batches, prefill tokens, decode tokens, checker violations with token deadlines)."""
    prefill = sum(t for chunks in plan.prefill for _, t in chunks)
    violations = len(plan_violations(problem, plan, token_deadlines=True))
    return (plan.n_batches, prefill, int(plan.decode.sum()), violations)


def _brute(model) -> tuple | None:
    found = model.brute_force(60.0)
    if found is None:
        return None
    value, schedule = found
    return (_sig(value), _schedule_size(schedule))


def _milp(model) -> tuple:
    prob = model.milp().problem
    size = (prob.numVariables(), prob.numConstraints())
    result = solve(model, solver="highs", time_limit=60)
    objective = _sig(result.objective) if result.status == Status.OPTIMAL else None
    return (*size, result.status.name, objective)


def record(case: str, cells_per_batch: int) -> dict:
    """What the models decide on one case (see the module docstring)."""
    problem = _problem(case)
    proc = batch_process(problem)
    out: dict = {
        "process": (
            _sig(proc.batch_duration_s),
            proc.batch_tokens,
            proc.n_batches,
            proc.deadline_batch.tolist(),
        )
    }
    b1 = AdmissionB1(problem)
    out["b1_brute"] = _brute(b1)
    if out["b1_brute"] is not None:
        admitted = [int(r) for r in problem.new_rows if int(r) not in out["b1_brute"][1][4]]
        plan = plan_b1(problem, admitted)
        out["b1_plan"] = _plan_size(problem, plan)
        out["b1_schedule"] = _schedule_size(plan_schedule(problem, plan, complete=False))
    out["b1_milp"] = _milp(b1)
    b2 = AdmissionB2(problem, cells_per_batch=cells_per_batch)
    out["b2_grid"] = (b2.grid.n_starts, b2.grid.n_cells, len(b2.grid.arcs))
    out["b2_brute"] = _brute(b2)
    out["b2_milp"] = _milp(b2)
    if out["b2_milp"][2] == "OPTIMAL":
        plan = b2.solution_plan()
        out["b2_plan_violations"] = len(plan_violations(problem, plan, token_deadlines=True))
    dp = slos_dp(problem)
    out["dp"] = (list(dp.admitted), _sig(dp.value), dp.feasible)
    return out


CASES = [
    *((f"random/{tiers}-{seed}", 1 + seed % 2) for tiers in TIERS for seed in SEEDS),
    *((f"built/{s}-{n}-{r}", 2) for s, n, r in BUILT),
]

#: Recorded from the single-module code, in a JSON file beside this one (tuples as lists).
RECORDS = Path(__file__).with_suffix(".json")
FORMER: dict[str, dict] = json.loads(RECORDS.read_text())


def _plain(record_: dict) -> dict:
    """``record_`` as its JSON reads back (tuples as lists)."""
    return json.loads(json.dumps(record_))


@pytest.mark.parametrize(("case", "cells_per_batch"), CASES, ids=[c for c, _ in CASES])
def test_admission_models_decide_as_the_single_module_did(case, cells_per_batch):
    """B1, B2 and the DP decide as recorded from the single module (see the module docstring)."""
    got = _plain(record(case, cells_per_batch))
    # the recorded dict holds the same fields, integers and 9-digit floats exactly
    assert got == FORMER[case]


if __name__ == "__main__":
    RECORDS.write_text(
        json.dumps({case: _plain(record(case, cells)) for case, cells in CASES}, indent=1) + "\n"
    )
