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

After a deliberate change of these decisions, re-record with
``python tests/models/test_slos_admission_split_identity.py`` and name the move in the commit.
"""

from __future__ import annotations

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

#: Recorded from the single-module code.
FORMER: dict[str, dict] = {
    "random/mixed-0": {
        "process": (0.05, 100, 14, [0, 0, 11, 8, 8, 8, 5, 2]),
        "b1_brute": (11.0, (21, 303, 38, 1.1, [3, 4, 6, 7])),
        "b1_plan": (14, 303, 25, 0),
        "b1_schedule": (13, 303, 24, 0.65, [3, 4, 6, 7]),
        "b1_milp": (7, 10, "OPTIMAL", 11.0),
        "b2_grid": (10, 14, 14),
        "b2_brute": (11.0, (21, 303, 38, 1.1, [3, 4, 6, 7])),
        "b2_milp": (39, 51, "OPTIMAL", 11.0),
        "b2_plan_violations": 0,
        "dp": ([2, 5], 11.0, True),
    },
    "random/mixed-1": {
        "process": (0.05, 100, 14, [11, 0, 3, 3, 9]),
        "b1_brute": None,
        "b1_milp": (4, 8, "INFEASIBLE", None),
        "b2_grid": (7, 28, 55),
        "b2_brute": None,
        "b2_milp": (118, 133, "INFEASIBLE", None),
        "dp": ([], 0.0, False),
    },
    "random/mixed-2": {
        "process": (0.05, 100, 14, [0, 9, 4, 11, 6, 8, 2]),
        "b1_brute": (16.0, (24, 632, 32, 1.5, [1, 2, 4])),
        "b1_plan": (14, 632, 20, 0),
        "b1_schedule": (13, 632, 17, 0.65, [1, 2, 4]),
        "b1_milp": (7, 14, "OPTIMAL", 16.0),
        "b2_grid": (8, 14, 27),
        "b2_brute": (16.0, (21, 632, 32, 1.5, [1, 2, 4])),
        "b2_milp": (63, 85, "OPTIMAL", 16.0),
        "b2_plan_violations": 0,
        "dp": ([2, 5], 16.0, True),
    },
    "random/mixed-3": {
        "process": (0.05, 100, 11, [4, 8, 8, 4, 1]),
        "b1_brute": (15.0, (14, 400, 13, 0.65, [2, 4])),
        "b1_plan": (11, 400, 16, 0),
        "b1_schedule": (11, 400, 9, 0.5, [2, 4]),
        "b1_milp": (5, 7, "OPTIMAL", 15.0),
        "b2_grid": (7, 22, 63),
        "b2_brute": (15.0, (12, 400, 13, 0.6, [2, 4])),
        "b2_milp": (135, 170, "OPTIMAL", 15.0),
        "b2_plan_violations": 0,
        "dp": ([0, 1, 3], 15.0, True),
    },
    "random/mixed-4": {
        "process": (0.05, 100, 14, [0, 7, 0, 4, 3, 6, 8, 11]),
        "b1_brute": None,
        "b1_milp": (6, 14, "INFEASIBLE", None),
        "b2_grid": (10, 14, 14),
        "b2_brute": None,
        "b2_milp": (38, 53, "INFEASIBLE", None),
        "dp": ([], 0.0, False),
    },
    "random/mixed-5": {
        "process": (0.05, 100, 13, [10, 0, 0, 10, 1, 8, 1, 6]),
        "b1_brute": (11.0, (18, 405, 27, 1.3, [3, 4, 6])),
        "b1_plan": (13, 405, 28, 0),
        "b1_schedule": (11, 405, 18, 0.6, [3, 4, 6]),
        "b1_milp": (6, 11, "OPTIMAL", 11.0),
        "b2_grid": (12, 26, 75),
        "b2_brute": (11.0, (17, 405, 27, 1.3, [3, 4, 6])),
        "b2_milp": (164, 228, "OPTIMAL", 11.0),
        "b2_plan_violations": 0,
        "dp": ([5, 7], 11.0, True),
    },
    "random/mixed-6": {
        "process": (0.05, 100, 13, [0, 0, 10, 5, 7]),
        "b1_brute": (0.0, (18, 0, 20, 0.85, [2, 3, 4])),
        "b1_plan": (13, 0, 22, 0),
        "b1_schedule": (13, 0, 15, 0.6, [2, 3, 4]),
        "b1_milp": (4, 9, "OPTIMAL", 0.0),
        "b2_grid": (7, 13, 13),
        "b2_brute": (0.0, (18, 0, 20, 0.85, [2, 3, 4])),
        "b2_milp": (34, 48, "OPTIMAL", 0.0),
        "b2_plan_violations": 0,
        "dp": ([], 0.0, True),
    },
    "random/mixed-7": {
        "process": (0.05, 100, 16, [13, 12, 11, 7, 6, 6, 3, 1]),
        "b1_brute": (29.0, (26, 740, 42, 1.25, [2, 7])),
        "b1_plan": (16, 740, 39, 0),
        "b1_schedule": (16, 740, 28, 0.75, [2, 7]),
        "b1_milp": (7, 16, "OPTIMAL", 29.0),
        "b2_grid": (12, 32, 122),
        "b2_brute": (29.0, (24, 740, 42, 1.25, [2, 7])),
        "b2_milp": (259, 388, "OPTIMAL", 29.0),
        "b2_plan_violations": 0,
        "dp": ([3, 4, 5, 6], 29.0, True),
    },
    "random/multiples-0": {
        "process": (0.05, 100, 16, [0, 0, 11, 8, 8, 8, 5, 2]),
        "b1_brute": (11.0, (28, 303, 38, 3.0, [3, 4, 6, 7])),
        "b1_plan": (16, 303, 21, 0),
        "b1_schedule": (14, 303, 19, 0.75, [3, 4, 6, 7]),
        "b1_milp": (7, 10, "OPTIMAL", 11.0),
        "b2_grid": (10, 16, 31),
        "b2_brute": (11.0, (26, 303, 38, 3.0, [3, 4, 6, 7])),
        "b2_milp": (73, 96, "OPTIMAL", 11.0),
        "b2_plan_violations": 0,
        "dp": ([2, 5], 11.0, True),
    },
    "random/multiples-1": {
        "process": (0.05, 100, 14, [11, 0, 3, 3, 9]),
        "b1_brute": None,
        "b1_milp": (4, 8, "INFEASIBLE", None),
        "b2_grid": (7, 28, 55),
        "b2_brute": None,
        "b2_milp": (118, 133, "INFEASIBLE", None),
        "dp": ([], 0.0, False),
    },
    "random/multiples-2": {
        "process": (0.05, 100, 16, [0, 9, 4, 11, 6, 8, 2]),
        "b1_brute": (16.0, (23, 632, 32, 1.5, [1, 2, 4])),
        "b1_plan": (16, 632, 22, 0),
        "b1_schedule": (14, 632, 21, 0.75, [1, 2, 4]),
        "b1_milp": (7, 14, "OPTIMAL", 16.0),
        "b2_grid": (7, 16, 31),
        "b2_brute": (16.0, (20, 632, 32, 1.5, [1, 2, 4])),
        "b2_milp": (69, 89, "OPTIMAL", 16.0),
        "b2_plan_violations": 0,
        "dp": ([2, 5], 16.0, True),
    },
    "random/multiples-3": {
        "process": (0.05, 100, 13, [4, 8, 8, 4, 1]),
        "b1_brute": (15.0, (15, 400, 13, 1.0, [2, 4])),
        "b1_plan": (13, 400, 20, 0),
        "b1_schedule": (13, 400, 11, 0.6, [2, 4]),
        "b1_milp": (5, 7, "OPTIMAL", 15.0),
        "b2_grid": (6, 26, 180),
        "b2_brute": (15.0, (12, 400, 13, 1.0, [2, 4])),
        "b2_milp": (367, 514, "OPTIMAL", 15.0),
        "b2_plan_violations": 0,
        "dp": ([0, 1, 3], 15.0, True),
    },
    "random/multiples-4": {
        "process": (0.05, 100, 16, [0, 7, 0, 4, 3, 6, 8, 11]),
        "b1_brute": None,
        "b1_milp": (6, 14, "INFEASIBLE", None),
        "b2_grid": (11, 16, 16),
        "b2_brute": None,
        "b2_milp": (44, 60, "INFEASIBLE", None),
        "dp": ([], 0.0, False),
    },
    "random/multiples-5": {
        "process": (0.05, 100, 15, [10, 0, 0, 10, 1, 8, 1, 6]),
        "b1_brute": (11.0, (18, 405, 27, 1.3, [3, 4, 6])),
        "b1_plan": (15, 405, 24, 0),
        "b1_schedule": (12, 405, 19, 0.7, [3, 4, 6]),
        "b1_milp": (6, 10, "OPTIMAL", 11.0),
        "b2_grid": (12, 30, 114),
        "b2_brute": (11.0, (16, 405, 27, 1.3, [3, 4, 6])),
        "b2_milp": (242, 348, "OPTIMAL", 11.0),
        "b2_plan_violations": 0,
        "dp": ([5, 7], 11.0, True),
    },
    "random/multiples-6": {
        "process": (0.05, 100, 15, [0, 0, 10, 5, 7]),
        "b1_brute": (0.0, (18, 0, 20, 0.85, [2, 3, 4])),
        "b1_plan": (15, 0, 19, 0),
        "b1_schedule": (15, 0, 17, 0.7, [2, 3, 4]),
        "b1_milp": (4, 8, "OPTIMAL", 0.0),
        "b2_grid": (7, 15, 15),
        "b2_brute": (0.0, (18, 0, 20, 0.85, [2, 3, 4])),
        "b2_milp": (38, 54, "OPTIMAL", 0.0),
        "b2_plan_violations": 0,
        "dp": ([], 0.0, True),
    },
    "random/multiples-7": {
        "process": (0.05, 100, 18, [13, 12, 11, 7, 6, 6, 3, 1]),
        "b1_brute": (29.0, (33, 740, 42, 2.6, [2, 7])),
        "b1_plan": (18, 740, 33, 0),
        "b1_schedule": (18, 740, 24, 0.85, [2, 7]),
        "b1_milp": (7, 15, "OPTIMAL", 29.0),
        "b2_grid": (12, 36, 260),
        "b2_brute": (29.0, (29, 740, 42, 2.6, [2, 7])),
        "b2_milp": (535, 757, "OPTIMAL", 29.0),
        "b2_plan_violations": 0,
        "dp": ([3, 4, 5, 6], 29.0, True),
    },
    "built/3-5-6": {
        "process": (0.1, 1737, 9, [0, 0, 0, 0, 0, 0, 1, 4, 2, 3, 7]),
        "b1_brute": (3.0, (376, 7299, 1337, 39.161713, [7, 9])),
        "b1_plan": (9, 7299, 71, 0),
        "b1_schedule": (9, 7299, 71, 2.461713, [7, 9]),
        "b1_milp": (6, 12, "OPTIMAL", 3.0),
        "b2_grid": (15, 18, 35),
        "b2_brute": (3.0, (376, 7221, 1401, 39.161713, [6, 10])),
        "b2_milp": (84, 110, "OPTIMAL", 3.0),
        "b2_plan_violations": 0,
        "dp": ([6, 8, 9], 3.0, True),
    },
    "built/9-6-16": {
        "process": (
            0.1,
            1737,
            7,
            [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 3, 1, 2, 5, 2, 2],
        ),
        "b1_brute": (3.0, (379, 6496, 1255, 42.993963, [16, 17, 20])),
        "b1_plan": (7, 6496, 124, 0),
        "b1_schedule": (7, 6496, 117, 5.793963, [16, 17, 20]),
        "b1_milp": (7, 10, "OPTIMAL", 3.0),
        "b2_grid": (25, 14, 27),
        "b2_brute": (4.0, (429, 5669, 2014, 47.993963, [18, 19])),
        "b2_milp": (67, 82, "OPTIMAL", 4.0),
        "b2_plan_violations": 0,
        "dp": ([17, 18, 20], 3.0, True),
    },
}


@pytest.mark.parametrize(("case", "cells_per_batch"), CASES, ids=[c for c, _ in CASES])
def test_admission_models_decide_as_the_single_module_did(case, cells_per_batch):
    """B1, B2 and the DP decide as recorded from the single module (see the module docstring)."""
    got = record(case, cells_per_batch)
    # the recorded dict holds the same fields, integers and 9-digit floats exactly
    assert got == FORMER[case]


if __name__ == "__main__":
    import pprint

    pprint.pprint({case: record(case, cells) for case, cells in CASES}, width=100, sort_dicts=False)
