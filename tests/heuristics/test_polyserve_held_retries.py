"""Co-located PolyServe's held requests that no server can take on time are asked again at
every retry: the shortcuts that make those retries cheaper keep every decision, to the bit."""

import dataclasses

import pytest
from slolab.harness.serving import ServingSetup
from slolab.sim import check
from test_polyserve_held_index import load_former, outcome_fingerprint

#: Outcome digests (every recorded array, token times included, and the scaling events) and
#: routing decisions of the code before the admission remembered the profile's answers, on the
#: first 300 requests of the Mooncake conversation trace with Poisson arrivals, co-located on
#: 8 servers under PolyServe's scaler: (rate req/s, promotion) -> (digest, decisions), kept
#: as fingerprints in ``test_polyserve_held_retries.json`` (decisions exactly, times within
#: 1e-10: tests/fingerprint.py), recorded where the digests still held.
FORMER = {
    (float(rate), promotion): former
    for key, former in load_former(__file__).items()
    for rate, promotion in [key.split("/")]
}


def mooncake_run(rate, promotion):
    """300 Mooncake requests at ``rate`` req/s on 8 co-located servers under PolyServe's
    scaler, with the promotion rule ``promotion``, every iteration within the TPOT
    (``tpot_bound="always"``: the rule these runs were recorded under, which holds a tenth of
    the requests; a prompt alone is not held since it is prefilled as the server allows):
    (instance, controller, outcome)."""
    setup = ServingSetup(
        "mooncake_conversation",
        policy="polyserve",
        servers=8,
        limit=300,
        slos="polyserve",
        mode="colocated",
        arrivals="poisson",
        # recorded before PolyServe's pools kept the prefix cache: caching off, as then
        prefix_cache="off",
    )
    instance, sched = setup.prepare(setup.instance(rate))
    controller = sched.router
    controller.params = dataclasses.replace(
        controller.params, promotion=promotion, tpot_bound="always"
    )
    return instance, controller, sched.run(instance, seed=0)


@pytest.mark.parametrize(("rate", "promotion"), sorted(FORMER))
def test_held_mooncake_requests_keep_the_former_decisions(rate, promotion):
    """300 Mooncake requests at 1 and 2 req/s on 8 co-located servers (a tenth of them no
    server can take on time, held and retried until their deadline passes): the same outcome
    and the same number of routing decisions as before, with each promotion rule."""
    instance, controller, out = mooncake_run(rate, promotion)
    assert check(instance, out) == []
    assert (outcome_fingerprint(out), controller.decisions) == FORMER[(rate, promotion)]
