"""SLOs-Serve scheduler calls cut from a real trace: DP vs B1 vs B2 through the harness."""

import numpy as np
import pytest
from slolab.harness.compare import compare
from slolab.problems.slos_admission import slos_snapshot
from slolab.sim import check, metrics, replay
from slolab.solvers import build_model, solve


@pytest.mark.parametrize(("new", "running", "seed"), [(6, 10, 1), (8, 20, 5), (10, 40, 7)])
def test_dp_b1_b2_agree_with_their_replays(new, running, seed):
    """Every row is replayed cleanly; DP <= B1 <= B2 and B1 == DP at exact units."""
    inst = slos_snapshot(new=new, running=running, seed=seed)
    frame = compare(inst, ["dp", "b1", "b2"], time_limit=60).set_index("method")
    assert (frame["violations"] == 0).all()
    assert (frame.loc[["b1", "b2"], "status"] == "OPTIMAL").all()
    dp, b1, b2 = (float(frame.loc[m, "objective"]) for m in ("dp", "b1", "b2"))
    # the DP solves B1 exactly at unit discretization; B2 may only add dynamic batch sizes
    assert dp == b1
    assert b1 <= b2


def test_snapshot_objective_counts_new_requests_only():
    """The admitted value of a B1 replay is the value of the new requests served on time."""
    inst = slos_snapshot(new=8, running=20, seed=3)
    res = solve(build_model("slos-b1", inst), "highs", time_limit=60)
    out = replay(inst, res.schedule)
    assert check(inst, out) == []
    new = ~np.asarray(inst.workload["running"], dtype=bool)
    met = metrics.met(inst, out, "deadline")
    # 8 new requests of value 1 each: the served-on-time ones are exactly the admitted ones
    assert float(inst.workload["value"][new & met].sum()) == res.objective
    assert int((new & ~out.rejected).sum()) == res.objective


def test_calls_captured_from_simulation_replay_cleanly():
    """Scheduler calls cut from an online SLOs-Serve run: DP == B1 <= B2, replays clean."""
    from slolab.problems.slos_admission import slos_snapshots_from_simulation

    snaps = slos_snapshots_from_simulation(
        "chatbot", seed=0, n=150, rate=7.0, min_new=2, min_running=5
    )
    assert len(snaps) >= 3
    for inst in snaps[:3]:
        running = np.asarray(inst.workload["running"], dtype=bool)
        assert running.sum() >= 5 and (~running).sum() >= 2
        frame = compare(inst, ["dp", "b1", "b2"], time_limit=60).set_index("method")
        assert (frame["violations"] == 0).all()
        assert (
            frame.loc["dp", "objective"]
            == frame.loc["b1", "objective"]
            <= frame.loc["b2", "objective"]
        )
