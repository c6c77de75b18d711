"""A policy runs only in the cluster modes it declares (``modes``; continuous batching,
co-located or disaggregated, when it declares none): any other mode is refused before the
run starts, in one line naming the policy and the mode."""

import pytest
from sim_cases import random_instance
from slolab.heuristics.baselines import SarathiFCFS, StaticFCFS
from slolab.heuristics.policies import make_scheduler, policy_entry, policy_names
from slolab.sim import check, run
from slolab.sim.policy import policy_modes


@pytest.mark.parametrize("name", policy_names())
def test_a_policy_runs_on_a_static_cluster_only_when_it_forms_static_batches(name):
    """On a static cluster a registered policy either declares the mode, runs, and every batch
    passes the checker, or is refused with one line before anything runs (continuous
    policies used to run there, and the checker rejected every batch)."""
    inst = random_instance(0, n=12, mode="static")
    entry = policy_entry(name)
    if "static" not in policy_modes(entry.make):
        with pytest.raises(ValueError) as err:
            make_scheduler(name, inst)
        assert str(err.value) == (
            f"policy {name!r} does not run on a static cluster (it runs "
            f"{' or '.join(policy_modes(entry.make))})"
        )
        return
    scheduler = make_scheduler(name, inst)
    out = scheduler.run(inst, seed=0)
    assert check(scheduler.on(inst), out) == []


def test_the_engine_refuses_a_mode_the_policy_does_not_declare():
    """A policy object run directly (a plugin's, outside the registry) is refused by the
    engine, before its ``start``."""
    with pytest.raises(ValueError, match=r"^policy 'sarathi' does not run on a static cluster"):
        run(random_instance(0, n=4, mode="static"), SarathiFCFS(), seed=0)
    with pytest.raises(ValueError, match=r"^policy 'static-fcfs' does not run on a colocated"):
        run(random_instance(0, n=4), StaticFCFS(), seed=0)


@pytest.mark.parametrize("name", ["scorpio", "sa-online"])
def test_a_co_located_design_refuses_a_disaggregated_cluster_before_the_run(name):
    """SCORPIO and SA-online schedule whole requests on one worker: on a disaggregated
    cluster they used to fail mid-run ("decode server cannot prefill request N")."""
    inst = random_instance(0, n=12, servers=3, mode="disaggregated", prefill_servers=1)
    with pytest.raises(ValueError) as err:
        make_scheduler(name, inst)
    assert (
        str(err.value)
        == f"policy {name!r} does not run on a disaggregated cluster (it runs colocated)"
    )
    with pytest.raises(ValueError, match=f"^policy {name!r} does not run on a disaggregated"):
        run(inst, policy_entry(name).make(), seed=0)
