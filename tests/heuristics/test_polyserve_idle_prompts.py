"""Co-located PolyServe on an idle cluster: a prompt alone on a server is chunked as the server
allows (no request decodes, so no TPOT bounds its iterations, Sec. 3.4), so PolyServe meets
every request plain chunked prefill meets alone, and the first-token time its admission
predicts is the engine's; the former rule, every iteration within the TPOT, is the variant
``polyserve-always-tpot``."""

import numpy as np
import pytest
from slolab.harness.serving import ServingSetup
from slolab.heuristics import polyserve as ps
from slolab.sim import check, metrics

#: Mooncake conversation requests of the idle-cluster runs (0.01 req/s: about 100 s apart,
#: every request finds the cluster empty or nearly so)
IDLE = 300


class Recording(ps.PolyServeController):
    """Remembers, per request, whether its last admission on time was an empty server's."""

    def start(self, instance, seed):
        super().start(instance, seed)
        self.alone: dict[int, bool] = {}

    def _admit_idle(self, s, r, tau_s, late):
        code = super()._admit_idle(s, r, tau_s, late)
        if code == ps.ADMIT:
            self.alone[r] = True
        return code

    def _admit_queued(self, s, r, tau_s, late):
        code = super()._admit_queued(s, r, tau_s, late)
        if code == ps.ADMIT and s.load:
            self.alone[r] = False
        return code


def run(trace: str, policy: str, n: int, rate: float, cache: str = "auto"):
    """The first ``n`` requests of ``trace``, PolyServe's SLOs, Poisson arrivals at ``rate``
    (seed 0) on 8 co-located servers, prefix caching ``cache``: (instance, scheduler, checked
    outcome)."""
    setup = ServingSetup(
        trace,
        policy=policy,
        servers=8,
        limit=n,
        slos="polyserve",
        arrivals="poisson",
        prefix_cache=cache,
    )
    inst, sched = setup.prepare(setup.instance(rate))
    out = sched.run(inst, seed=0)
    assert check(inst, out) == []
    return inst, sched, out


def met(policy: str, cache: str) -> np.ndarray:
    """Which of the idle-cluster run's requests meet every deadline under ``policy``."""
    inst, _, out = run("mooncake_conversation", policy, IDLE, 0.01, cache)
    return metrics.request_table(inst, out)["met_deadline"].to_numpy()


@pytest.mark.parametrize(
    ("cache", "counts", "former"),
    [
        # measured with caching off: Sarathi and random meet 282 of 300, PolyServe 292 (its
        # 2,048-token chunks against Sarathi's budget: fewer iterations); the former rule 270,
        # missing 12 of Sarathi's
        ("off", (282, 282, 292), (270, 12)),
        # the default caches 512-token blocks: Sarathi and random meet 285 (a cached prefix
        # skips part of a long prompt's prefill), PolyServe the same 292; the former rule 270,
        # missing 15 of Sarathi's
        ("auto", (285, 285, 292), (270, 15)),
    ],
)
def test_a_request_alone_on_an_idle_server_is_met_whenever_chunked_prefill_meets_it(
    cache, counts, former
):
    """300 Mooncake requests at 0.01 req/s on 8 servers: every request Sarathi's chunked
    prefill (and random routing) meets alone, PolyServe meets too, and more; under the former
    rule (every iteration within the TPOT, ``polyserve-always-tpot``) PolyServe missed some of
    them (long prompts whose TTFT needs more than a TPOT-sized chunk per iteration)."""
    sarathi, random, poly, always = (
        met(p, cache) for p in ("sarathi", "random", "polyserve", "polyserve-always-tpot")
    )
    assert not (sarathi & ~poly).any() and not (random & ~poly).any()
    assert (int(sarathi.sum()), int(random.sum()), int(poly.sum())) == counts
    assert (int(always.sum()), int((sarathi & ~always).sum())) == former


def audit(trace: str, n: int, rate: float):
    """PolyServe (a :class:`Recording` controller) on ``run``'s set-up: for every request
    admitted on time (with a prediction), its predicted and replayed first-token times, whether
    it was admitted on an empty server, and whether a request placed on its server after it
    with an earlier first-token deadline went ahead of it before its first token (the admission
    then checked only that its deadline still holds, not that its prediction does)."""
    setup = ServingSetup(
        trace, policy="polyserve", servers=8, limit=n, slos="polyserve", arrivals="poisson"
    )
    inst = ps.polyserve_cluster(setup.instance(rate), "colocated", 8)
    ctl = Recording()
    ctl.skip_held_ticks = True
    sched = ps.Scheduler(ps.PolyServePolicy(ctl), ctl, None, ctl, instance=inst)
    out = sched.run(inst, seed=0)
    assert check(inst, out) == []
    wl = inst.workload
    ttft = np.nan_to_num(np.asarray(wl["ttft_slo_s"], dtype=float), nan=np.inf)  # best effort
    deadline = wl.arrival_s + ttft
    on = np.array(sorted(ctl.predicted_prefill_end_s), dtype=np.int64)
    predicted = np.array([ctl.predicted_prefill_end_s[r] for r in on])
    alone = np.array([ctl.alone[r] for r in on], dtype=bool)
    overtaken = np.array(
        [
            (
                (out.server == out.server[r])
                & (out.routed_s > out.routed_s[r])
                & (out.routed_s < out.first_token_s[r])
                & (deadline < deadline[r])
            ).any()
            for r in on
        ],
        dtype=bool,
    )
    tau = np.nan_to_num(np.asarray(wl["tpot_slo_s"], dtype=float), nan=np.inf)[on]
    return out.first_token_s[on], predicted, alone, overtaken, tau


def test_first_token_predicted_on_an_empty_server_is_the_engines_on_mooncake():
    """300 Mooncake requests at 0.01 req/s: the first-token time predicted for a request
    admitted on an empty server is the replay's, to the bit, unless a later placement with an
    earlier deadline went ahead of it; admissions on busy servers predict no earlier than the
    replay (their chunks are sized at the predicted KV peak, the replay's at the KV then)."""
    actual, predicted, alone, overtaken, _ = audit("mooncake_conversation", IDLE, 0.01)
    exact = alone & ~overtaken
    assert (actual[exact] == predicted[exact]).all()
    assert (actual[~alone] <= predicted[~alone]).all()
    # measured: 292 admitted on time, 283 of them alone and not overtaken (every one exact),
    # 8 on busy servers
    assert (len(actual), int(exact.sum()), int((~alone).sum())) == (292, 283, 8)


def test_first_token_predicted_on_busy_servers_is_late_by_less_than_a_tpot_on_azure():
    """500 Azure conversation requests at 20 req/s on 8 servers (busy servers): a prediction
    the replay does not honour, for a request no later placement overtook, is late by less than
    one TPOT of its tier. The reason: the admission charges each predicted iteration the
    profile's time of the predicted chunk plus the attention work done, while the batch former
    fills each iteration up to the TPOT (the number of iterations is no more than predicted, so
    the gap is the predicted iterations' unused TPOT)."""
    actual, predicted, alone, overtaken, tau = audit("azure_conv_2023", 500, 20.0)
    late = (actual > predicted) & ~overtaken
    assert ((actual - predicted)[late] < tau[late]).all()
    # measured: 500 admitted on time, 28 late so, by at most 6.2 ms (59 overtaken)
    assert (len(actual), int(late.sum()), int(overtaken.sum())) == (500, 28, 59)
    assert (actual - predicted)[late].max() == pytest.approx(0.00622, abs=5e-5)


def test_the_former_rule_is_the_policy_polyserve_always_tpot():
    """``polyserve-always-tpot`` is PolyServe with ``tpot_bound="always"`` (the default is
    ``"decoding"``), and an unknown rule is refused by name."""
    inst, sched, _ = run("mooncake_conversation", "polyserve-always-tpot", 5, 0.01)
    assert sched.router.params.tpot_bound == "always"
    assert ps.PolyServeParams().tpot_bound == "decoding"
    with pytest.raises(ValueError, match="tpot_bound must be decoding or always"):
        ps.PolyServeParams(tpot_bound="never")
