"""The two searches decide as they did before they shared the search driver: for seeded small
windows of dispatch-scale and tdg-horizon, under an iteration cap (never the clock), the
incumbent's decisions and counters equal, and its objectives match (tests/fingerprint.py), the
ones recorded on the code before; the rest of each report (stop reasons, the slice counts)
equals the one recorded before the reports became the driver's. The records are in
``test_search_identity.json``; ``PYTHONPATH=tests python tests/solvers/test_search_identity.py``
re-records them after a deliberate change."""

from __future__ import annotations

import pytest
from fingerprint import (
    Fingerprint,
    assert_matches,
    fingerprint,
    load_recording,
    schedule_parts,
    write_recording,
)
from slolab.heuristics import tdg_search
from slolab.models.dispatch_lns import lns
from slolab.problems import build_instance
from slolab.problems.dispatch_scale import LNS_STARTS
from slolab.problems.tdg_horizon import horizon_window
from slolab.sim import replay

#: A time limit no case reaches: the caps end every search, and no solve inside one is cut
#: short by the clock (a loaded machine would otherwise decide differently).
NEVER_S = 1e6


def trace_cut(trace: str, n: int, **options) -> dict:
    """Build options of ``n`` requests of ``trace`` at high load with their real outputs,
    0.002 attainment per worker-second."""
    return dict(trace=trace, n=n, load="high", max_output_tokens=0, cost_weight=0.002, **options)


#: dispatch-scale windows: build options, moves, pooled runs.
DISPATCH_CASES = {
    "mix-n8-s0": (dict(n=8, seed=0), 200, 10),
    "mix-n12-s1": (dict(n=12, seed=1), 300, 20),
    "mix-n16-s2": (dict(n=16, seed=2, max_servers=3), 300, 20),
    "mix-n12-s3-real": (dict(n=12, seed=3, max_output_tokens=0), 300, 20),
    "mix-n20-s2-real": (dict(n=20, seed=2, max_output_tokens=0), 300, 20),
    "mix-n16-s4-2task": (dict(n=16, seed=4, task_set="2-task", servers=2, max_servers=3), 300, 20),
    "mix-n10-s5-disk": (dict(n=10, seed=5, startup="disk", cost_weight=0.05), 300, 20),
    "conv-n30-s3": (trace_cut("azure_conv_2023", 30, servers=2, max_servers=4, seed=3), 300, 20),
    "code-n24-s1": (trace_cut("azure_code_2023", 24, servers=1, max_servers=3, seed=1), 300, 20),
    "code-n16-s0-medium": (
        dict(trace="azure_code_2023", n=16, load="medium", max_output_tokens=0, seed=0),
        300,
        20,
    ),
}

#: tdg-horizon windows: trace, requests, load, seed, steering steps.
TDG_CASES = {
    f"{trace.split('_')[1]}-{load}-s{seed}": (trace, 16, load, seed, 40)
    for trace, load, seed in [
        ("azure_code_2023", "high", 0),
        ("azure_code_2023", "high", 1),
        ("azure_code_2023", "high", 2),
        ("azure_code_2023", "high", 3),
        ("azure_code_2023", "medium", 0),
        ("azure_code_2023", "medium", 1),
        ("azure_code_2023", "medium", 3),
        ("azure_code_2023", "medium", 4),
        ("azure_conv_2023", "high", 0),
        ("azure_code_2023", "low", 1),
    ]
}

#: tdg-horizon windows whose steered incumbent the exact slice moves improve: trace, requests,
#: load, seed, steering steps, slices.
SLICE_CASES = {
    "code-high-s0": ("azure_code_2023", 16, "high", 0, 40, 3),
    "code-medium-s0": ("azure_code_2023", 16, "medium", 0, 40, 3),
}


def dispatch_fingerprint(name: str) -> tuple[Fingerprint, tuple]:
    options, moves, pooled = DISPATCH_CASES[name]
    inst = build_instance("dispatch-scale", **options)
    found = lns(
        inst,
        seed=7,
        time_limit=NEVER_S,
        starts=LNS_STARTS,
        quiet=True,
        max_moves=moves,
        pooled_runs=pooled,
    )
    d = found.decision
    return fingerprint(
        (d.routing, d.on_slot, d.iterations), found.objective, found.start_objective
    ), (
        found.start_policy,
        found.moves_tried,
        found.moves_kept,
        found.exact_tried,
        found.exact_kept,
        found.interrupted,
        found.stop_reason,
    )


def tdg_fingerprint(name: str) -> tuple[Fingerprint, tuple]:
    trace, n, load, seed, steps = TDG_CASES[name]
    inst = horizon_window(trace, n=n, seed=seed, load=load, max_output_tokens=0)
    schedule, report = tdg_search.steered_search(
        inst, seed=seed, time_limit=NEVER_S, max_steps=steps, quiet=True
    )
    return fingerprint(
        schedule_parts(schedule), report.start_tdg, report.tdg, report.steered_tdg
    ), (
        report.start_policy,
        report.steps,
        report.improvements,
        report.interrupted,
        report.slices,
        report.slices_optimal,
        report.slice_improvements,
        report.stop_reason,
    )


def slice_fingerprint(name: str) -> tuple[Fingerprint, tuple]:
    trace, n, load, seed, steps, slices = SLICE_CASES[name]
    inst = horizon_window(trace, n=n, seed=seed, load=load, max_output_tokens=0)
    schedule, _ = tdg_search.steered_search(
        inst, seed=seed, time_limit=NEVER_S, max_steps=steps, quiet=True
    )
    out, report = tdg_search.slice_search(
        inst,
        replay(inst, schedule),
        seed=seed,
        time_limit=NEVER_S,
        max_slices=slices,
        # no slice MILP may be cut short by the clock on a loaded machine: each proves OPTIMAL
        call_limit_s=NEVER_S,
    )
    from slolab.sim.schedule import Schedule

    return fingerprint(schedule_parts(Schedule.from_outcome(out)), report.start_tdg, report.tdg), (
        report.slices,
        report.optimal,
        report.improvements,
        report.interrupted,
    )


#: Recorded on the code before the searches shared the driver (its hashes, checked first):
#: per search, per case, the fingerprint's record and the exact counters and stop reasons.
RECORDED = load_recording(__file__)
SEARCHES = {"dispatch": dispatch_fingerprint, "tdg": tdg_fingerprint, "slice": slice_fingerprint}


def assert_decides_as_before(search: str, name: str) -> None:
    found, exact = SEARCHES[search](name)
    recorded = RECORDED[search][name]
    assert_matches(found, recorded["fingerprint"], f"{search} {name}")
    assert list(exact) == recorded["exact"]


@pytest.mark.parametrize("name", sorted(DISPATCH_CASES))
def test_dispatch_lns_decides_as_before(name):
    """dispatch-lns under a move cap: the same decision, objective and move counts."""
    assert_decides_as_before("dispatch", name)


@pytest.mark.parametrize("name", sorted(TDG_CASES))
def test_tdg_steered_search_decides_as_before(name):
    """tdg-horizon lns under a step cap: the same schedule, TDG and step counts."""
    assert_decides_as_before("tdg", name)


@pytest.mark.parametrize("name", sorted(SLICE_CASES))
def test_tdg_slice_search_decides_as_before(name):
    """The exact slice moves under a slice cap: the same schedule, TDG and slice counts."""
    assert_decides_as_before("slice", name)


if __name__ == "__main__":
    cases = {"dispatch": DISPATCH_CASES, "tdg": TDG_CASES, "slice": SLICE_CASES}
    records: dict = {}
    for search, names in cases.items():
        records[search] = {}
        for name in sorted(names):
            found, exact = SEARCHES[search](name)
            records[search][name] = {"fingerprint": found.record(), "exact": list(exact)}
            print(search, name, flush=True)
    write_recording(__file__, records)
