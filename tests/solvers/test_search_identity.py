"""The two searches decide as they did before they shared the search driver: for seeded small
windows of dispatch-scale and tdg-horizon, under an iteration cap (never the clock), the
incumbent's hash, objective and counters equal the ones recorded on the code before; the rest
of each report (stop reasons, the slice counts) equals the one recorded before the reports
became the driver's."""

from __future__ import annotations

import hashlib

import pytest
from slolab.heuristics import tdg_search
from slolab.models.dispatch_lns import lns
from slolab.problems import build_instance
from slolab.problems.dispatch_scale import LNS_STARTS
from slolab.problems.tdg_horizon import horizon_window
from slolab.sim import replay

#: A time limit no case reaches: the caps end every search.
NEVER_S = 1e6


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


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


def dispatch_fingerprint(name: str) -> tuple[tuple, tuple]:
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
    return (
        _digest(repr((d.routing, d.on_slot, d.iterations))),
        repr(found.objective),
        found.start_policy,
        repr(found.start_objective),
        found.moves_tried,
        found.moves_kept,
        found.exact_tried,
        found.exact_kept,
        found.interrupted,
    ), (found.stop_reason,)


def _schedule_digest(schedule) -> str:
    return _digest(repr((schedule.iterations, sorted(schedule.rejected), schedule.plan)))


def tdg_fingerprint(name: str) -> tuple[tuple, tuple]:
    trace, n, load, seed, steps = TDG_CASES[name]
    inst = horizon_window(trace, n=n, seed=seed, load=load, max_output_tokens=0)
    schedule, report = tdg_search.steered_search(
        inst, seed=seed, time_limit=NEVER_S, max_steps=steps, quiet=True
    )
    return (
        _schedule_digest(schedule),
        report.start_policy,
        repr(report.start_tdg),
        repr(report.tdg),
        report.steps,
        report.improvements,
        report.interrupted,
    ), (
        repr(report.steered_tdg),
        report.slices,
        report.slices_optimal,
        report.slice_improvements,
        report.stop_reason,
    )


def slice_fingerprint(name: str) -> tuple[tuple, tuple]:
    trace, n, load, seed, steps, slices = SLICE_CASES[name]
    inst = horizon_window(trace, n=n, seed=seed, load=load, max_output_tokens=0)
    schedule, _ = tdg_search.steered_search(
        inst, seed=seed, time_limit=NEVER_S, max_steps=steps, quiet=True
    )
    out, report = tdg_search.slice_search(
        inst, replay(inst, schedule), seed=seed, time_limit=NEVER_S, max_slices=slices
    )
    from slolab.sim.schedule import Schedule

    return (
        _schedule_digest(Schedule.from_outcome(out)),
        repr(report.start_tdg),
        repr(report.tdg),
        report.slices,
        report.optimal,
        report.improvements,
    ), (report.interrupted,)


#: Recorded on the code before the searches shared the driver.
DISPATCH_EXPECTED: dict[str, tuple] = {
    "code-n16-s0-medium": (
        "a98943e2c34a841c",
        "-1.0069880080276512",
        "pooled-lazy-lookahead-0s",
        "-1.0366662567683533",
        225,
        6,
        75,
        5,
        False,
    ),
    "code-n24-s1": (
        "206084d5fc86a5e2",
        "0.8879421021256764",
        "greedy-insertion",
        "0.8873389863504659",
        225,
        4,
        75,
        2,
        False,
    ),
    "conv-n30-s3": (
        "b3f479e9723ff290",
        "0.9512660659922146",
        "greedy-insertion",
        "0.9503693982854455",
        225,
        6,
        75,
        0,
        False,
    ),
    "mix-n10-s5-disk": (
        "9f82aa9e4190ef7d",
        "0.9343417567189527",
        "greedy-one-worker",
        "0.9343417567189527",
        225,
        0,
        75,
        0,
        False,
    ),
    "mix-n12-s1": (
        "71115fcd6567bcd4",
        "0.8370384232911666",
        "greedy-insertion",
        "0.6702229667993292",
        225,
        8,
        75,
        5,
        False,
    ),
    "mix-n12-s3-real": (
        "47fb9f09b03db2e5",
        "-0.020666403095523034",
        "pooled-lazy-lookahead-0s",
        "-0.023141770969000053",
        225,
        1,
        75,
        1,
        False,
    ),
    "mix-n16-s2": (
        "1762fe55d7864958",
        "0.6590834432605166",
        "greedy-one-worker",
        "0.6590834432605166",
        225,
        0,
        75,
        0,
        False,
    ),
    "mix-n16-s4-2task": (
        "d026f3dac93bc700",
        "0.5585204640473692",
        "greedy-one-worker",
        "0.5501368067351149",
        225,
        2,
        75,
        2,
        False,
    ),
    "mix-n20-s2-real": (
        "2e17e07c769914cb",
        "-0.5459720959970609",
        "pooled-lazy-lookahead-0s",
        "-0.545991792418",
        225,
        1,
        75,
        1,
        False,
    ),
    "mix-n8-s0": (
        "a42f1947e3afc707",
        "0.8455830810878333",
        "greedy-insertion",
        "0.6150541658355015",
        150,
        8,
        50,
        4,
        False,
    ),
}
TDG_EXPECTED: dict[str, tuple] = {
    "code-high-s0": (
        "5e9191566ca53702",
        "deadline-packing-lookahead/2048",
        "1803.4659937534566",
        "1803.4659937534566",
        40,
        0,
        False,
    ),
    "code-high-s1": (
        "5ffa54450b0730c7",
        "deadline-lookahead/2048",
        "1581.5748365162506",
        "1599.5748365162506",
        40,
        3,
        False,
    ),
    "code-high-s2": (
        "1ce8c6c29f85cb6e",
        "deadline-packing/2048",
        "2082.6938868464717",
        "2085.6938868464717",
        40,
        1,
        False,
    ),
    "code-high-s3": (
        "e6047ba872d85325",
        "deadline-packing/1024",
        "1939.3571509906624",
        "2012.8027296092655",
        40,
        1,
        False,
    ),
    "code-low-s1": (
        "426e914f429f90f5",
        "deadline-admission/1024",
        "1672.0204151348535",
        "1762.4659937534566",
        40,
        3,
        False,
    ),
    "code-medium-s0": (
        "adc1d263417102ff",
        "deadline-lookahead/1024",
        "1809.4659937534566",
        "1809.4659937534566",
        40,
        0,
        False,
    ),
    "code-medium-s1": (
        "8429b83da5600fd9",
        "deadline-packing-lookahead/1024",
        "1587.5748365162508",
        "1674.0204151348535",
        40,
        5,
        False,
    ),
    "code-medium-s3": (
        "e4ffb25a24f8c59b",
        "deadline-packing/1024",
        "2089.2483082278686",
        "2090.2483082278686",
        40,
        1,
        False,
    ),
    "code-medium-s4": (
        "1df7ab166a02951b",
        "deadline-admission/512",
        "3178.5850440836775",
        "3178.5850440836775",
        0,
        0,
        False,
    ),
    "conv-high-s0": (
        "9a3ab075be1769d9",
        "deadline-admission/1024",
        "3888.323171499744",
        "3888.323171499744",
        0,
        0,
        False,
    ),
}
SLICE_EXPECTED: dict[str, tuple] = {
    "code-high-s0": ("f6bd5b1e160c66e5", "1803.4659937534566", "1808.4659937534566", 3, 3, 2),
    "code-medium-s0": ("afcb47e464afb371", "1809.4659937534566", "1810.4659937534566", 3, 3, 1),
}

#: The rest of each report, recorded before the reports became the driver's.
DISPATCH_REPORT_EXPECTED: dict[str, tuple] = {
    "code-n16-s0-medium": ("iterations",),
    "code-n24-s1": ("iterations",),
    "conv-n30-s3": ("iterations",),
    "mix-n10-s5-disk": ("iterations",),
    "mix-n12-s1": ("iterations",),
    "mix-n12-s3-real": ("iterations",),
    "mix-n16-s2": ("iterations",),
    "mix-n16-s4-2task": ("iterations",),
    "mix-n20-s2-real": ("iterations",),
    "mix-n8-s0": ("iterations",),
}
TDG_REPORT_EXPECTED: dict[str, tuple] = {
    "code-high-s0": ("1803.4659937534566", 0, 0, 0, "iterations"),
    "code-high-s1": ("1599.5748365162506", 0, 0, 0, "iterations"),
    "code-high-s2": ("2085.6938868464717", 0, 0, 0, "iterations"),
    "code-high-s3": ("2012.8027296092655", 0, 0, 0, "iterations"),
    "code-low-s1": ("1762.4659937534566", 0, 0, 0, "iterations"),
    "code-medium-s0": ("1809.4659937534566", 0, 0, 0, "iterations"),
    "code-medium-s1": ("1674.0204151348535", 0, 0, 0, "iterations"),
    "code-medium-s3": ("2090.2483082278686", 0, 0, 0, "iterations"),
    "code-medium-s4": ("3178.5850440836775", 0, 0, 0, "exhausted"),
    "conv-high-s0": ("3888.323171499744", 0, 0, 0, "exhausted"),
}
SLICE_REPORT_EXPECTED: dict[str, tuple] = {
    "code-high-s0": (False,),
    "code-medium-s0": (False,),
}


@pytest.mark.parametrize("name", sorted(DISPATCH_CASES))
def test_dispatch_lns_decides_as_before(name):
    """dispatch-lns under a move cap: the same decision, objective and move counts."""
    decided, report = dispatch_fingerprint(name)
    assert decided == DISPATCH_EXPECTED[name]
    assert report == DISPATCH_REPORT_EXPECTED[name]


@pytest.mark.parametrize("name", sorted(TDG_CASES))
def test_tdg_steered_search_decides_as_before(name):
    """tdg-horizon lns under a step cap: the same schedule, TDG and step counts."""
    decided, report = tdg_fingerprint(name)
    assert decided == TDG_EXPECTED[name]
    assert report == TDG_REPORT_EXPECTED[name]


@pytest.mark.parametrize("name", sorted(SLICE_CASES))
def test_tdg_slice_search_decides_as_before(name):
    """The exact slice moves under a slice cap: the same schedule, TDG and slice counts."""
    decided, report = slice_fingerprint(name)
    assert decided == SLICE_EXPECTED[name]
    assert report == SLICE_REPORT_EXPECTED[name]
