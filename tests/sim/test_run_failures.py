"""A policy of the user's own file that raises or never schedules: the run names the plugin's
file, line, time and server, or ends stalled with every request rejected; and a run's requests
always add up (finished + rejected == requests)."""

import dataclasses
import math

import numpy as np
import pytest
from plugin_policies import BOOM_LINE, ROUTER_LINE, SCALER_LINE, write_policies
from sim_cases import random_instance
from slolab.heuristics.baselines import SarathiFCFS
from slolab.plugins import PluginFailure
from slolab.sim import PolicyError, run
from slolab.sim.engine import UnsettledRunError, require_settled


def test_policy_exception_names_plugin_file_line_time_and_server(tmp_path, monkeypatch):
    """A ValueError in next_batch is re-labelled: plugin, exception, file:line, t, server."""
    mine = write_policies(tmp_path, monkeypatch, "boom_sim")
    inst = random_instance(0, n=5, servers=2)
    with pytest.raises(PluginFailure) as info:
        run(inst, mine.Boom(), seed=0)
    first = float(inst.workload.arrival_s[0])
    # the first arrival goes to server 0 (round robin), which asks the policy at once
    assert str(info.value) == (
        f"policy boom_sim:Boom raised ValueError: my bug at {tmp_path / 'boom_sim.py'}:"
        f"{BOOM_LINE} in next_batch, t={first:.6g} s on server 0"
    )
    assert isinstance(info.value.__cause__, ValueError)
    assert str(info.value.__cause__) == "my bug"


def test_router_and_scaler_exceptions_name_their_plugin_line_and_time(tmp_path, monkeypatch):
    """A router's KeyError names the routed request; a scaler's error its tick's time."""
    mine = write_policies(tmp_path, monkeypatch, "parts_sim")
    inst = random_instance(0, n=5, servers=2)
    with pytest.raises(PluginFailure) as info:
        run(inst, SarathiFCFS(token_budget=256), mine.BadRouter(), seed=0)
    third = float(inst.workload.arrival_s[2])
    assert str(info.value) == (
        f"router parts_sim:BadRouter raised KeyError: 'no such tier' at "
        f"{tmp_path / 'parts_sim.py'}:{ROUTER_LINE} in route, t={third:.6g} s routing request 2"
    )
    with pytest.raises(PluginFailure) as info:
        run(
            random_instance(0, n=40), SarathiFCFS(token_budget=256), seed=0, scaler=mine.BadScaler()
        )
    # ticks at 0, 0.5, 1.0: the third one raises (the 40 requests arrive over 2 s)
    assert str(info.value) == (
        f"scaler parts_sim:BadScaler raised ZeroDivisionError: division by zero at "
        f"{tmp_path / 'parts_sim.py'}:{SCALER_LINE} in decide, t=1 s"
    )


def test_keyboard_interrupt_in_a_policy_still_stops_the_run(tmp_path, monkeypatch):
    """KeyboardInterrupt from a plugin passes through unchanged."""
    mine = write_policies(tmp_path, monkeypatch, "interrupt_sim")
    with pytest.raises(KeyboardInterrupt):
        run(random_instance(0, n=5), mine.Interrupted(), seed=0)


def test_slolab_own_errors_keep_their_form(tmp_path, monkeypatch):
    """A plugin returning a non-Batch gets slolab's PolicyError, not a plugin failure."""
    mine = write_policies(tmp_path, monkeypatch, "notbatch_sim")
    with pytest.raises(
        PolicyError,
        match=r"^policy notbatch_sim:NotABatch returned int on server 0 at t=\S+, expected a Batch$",
    ):
        run(random_instance(0, n=5), mine.NotABatch(), seed=0)


def test_empty_batch_forever_is_a_stall_and_every_request_is_rejected(tmp_path, monkeypatch):
    """An empty-batch policy ends stalled: all 5 requests rejected at the last arrival."""
    mine = write_policies(tmp_path, monkeypatch, "empty_sim")
    inst = random_instance(0, n=5, servers=1)
    out = run(inst, mine.Empty(), seed=0)
    last = float(inst.workload.arrival_s[-1])
    # the last event is the decision at the last arrival; nothing runs after it
    assert out.info["stalled"] == 5
    assert out.rejected.sum() == 5 and out.finished.sum() == 0
    assert out.rejected_s.tolist() == [last] * 5
    assert out.info["stall"] == (
        f"policy empty_sim:Empty stalled at t={last:.6g} s: 5 request(s) waiting with no "
        "arrival, iteration or scaling action left (first: request 0 on server 0); they are "
        "rejected"
    )


class _IdleScaler:
    """Ticks every 0.5 s and never acts."""

    interval_s = 0.5

    def start(self, instance, seed):
        pass

    def decide(self, cluster):
        return ()


def test_stall_under_a_ticking_scaler_ends_the_run_at_its_first_quiet_tick(tmp_path, monkeypatch):
    """With a scaler ticking, the stall time is the first tick after the last arrival."""
    mine = write_policies(tmp_path, monkeypatch, "empty_tick")
    inst = random_instance(1, n=4, servers=1)
    out = run(inst, mine.Empty(), seed=0, scaler=_IdleScaler())
    last = float(inst.workload.arrival_s[-1])
    # ticks at 0, 0.5, 1.0, ...: the first one after the last arrival is stuck
    first_stuck = (math.floor(last / 0.5) + 1) * 0.5
    assert out.info["stalled"] == 4
    assert out.rejected_s.tolist() == [first_stuck] * 4
    assert f"stalled at t={first_stuck:.6g} s" in out.info["stall"]


def test_a_run_that_does_not_stall_records_no_stall():
    """Sarathi finishes all 40 requests: stalled 0, stall '' and the invariant holds."""
    out = run(random_instance(2), SarathiFCFS(token_budget=256), seed=0)
    assert out.info["stalled"] == 0 and out.info["stall"] == ""
    assert int(out.finished.sum()) + int(out.rejected.sum()) == 40


def test_unsettled_outcome_is_an_error_never_a_silent_row():
    """finished + rejected != requests raises, naming the counts and the first request."""
    out = run(random_instance(2, n=10), SarathiFCFS(token_budget=256), seed=0)
    require_settled(out)
    assert out.finished.all()
    lost = dataclasses.replace(
        out,
        token_times=np.where(
            np.arange(len(out.token_times)) == out.token_offsets[4] - 1, np.inf, out.token_times
        ),
    )
    # request 3's last token erased: 9 finished + 0 rejected != 10
    with pytest.raises(
        UnsettledRunError,
        match=r"finished 9 \+ rejected 0 != requests 10 "
        r"\(first request neither or both: 3\)",
    ):
        require_settled(lost)
    both = dataclasses.replace(out, rejected=np.arange(10) == 7)
    # request 7 both finished and rejected: 10 + 1 != 10
    with pytest.raises(
        UnsettledRunError,
        match=r"finished 10 \+ rejected 1 != requests 10 "
        r"\(first request neither or both: 7\)",
    ):
        require_settled(both)
