"""Pools in a Cluster: derived pools, validation, limits, round trips through instance files."""

import json

import pytest
from slolab.instances import (
    Cluster,
    Instance,
    InstanceFileError,
    Pool,
    Workload,
    load_instance,
    save_instance,
)
from slolab.timing.base import LinearTiming

TIMING = LinearTiming(0.01, {"prefill_tokens": 1e-4}, name="round")


def test_fixed_clusters_resolve_to_the_pools_their_mode_implies():
    """Cluster(servers=4) is one pool 'main'; disaggregated is prefill then decode."""
    (main,) = Cluster(servers=4, kv_capacity_tokens=900, max_batch_tokens=64).resolved_pools()
    assert (main.name, main.role, main.servers) == ("main", "mixed", 4)
    # limits the pool leaves unset come from the cluster
    assert (main.kv_capacity_tokens, main.max_batch_tokens, main.max_batch_size) == (900, 64, 256)
    assert main.startup_s == 0.0
    pre, dec = Cluster(servers=5, mode="disaggregated", prefill_servers=2).resolved_pools()
    assert (pre.name, pre.role, pre.servers) == ("prefill", "prefill", 2)
    assert (dec.name, dec.role, dec.servers) == ("decode", "decode", 3)
    (static,) = Cluster(servers=2, mode="static").resolved_pools()
    assert static.role == "static"


def test_from_pools_counts_servers_and_infers_the_mode():
    """from_pools: servers = 2 + 3 + 0 = 5, prefill_servers = 2, mode disaggregated."""
    cl = Cluster.from_pools(
        [
            Pool("prefill", "prefill", 2, max_batch_tokens=4096),
            Pool("decode", "decode", 3, kv_capacity_tokens=10_000),
            Pool("decode-spare", "decode", 0, startup_s=4.0),
        ],
        startup_s=30.0,
        move_s=1.5,
    )
    assert (cl.servers, cl.prefill_servers, cl.mode) == (5, 2, "disaggregated")
    pre, dec, spare = cl.resolved_pools()
    assert pre.max_batch_tokens == 4096 and dec.max_batch_tokens == 0
    assert dec.kv_capacity_tokens == 10_000 and pre.kv_capacity_tokens == 2**20
    # a pool's own start-up delay wins over the cluster's
    assert (pre.startup_s, spare.startup_s) == (30.0, 4.0)
    colo = Cluster.from_pools([Pool("tier-20ms", servers=1), Pool("tier-40ms", servers=2)])
    assert (colo.servers, colo.mode) == (3, "colocated")


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: Pool(""), "pool name must be a non-empty string"),
        (lambda: Pool("a", role="gpu"), "pool 'a': role must be one of mixed, prefill"),
        (lambda: Pool("a", servers=-1), "pool 'a': servers must be an integer >= 0, got -1"),
        (lambda: Pool("a", kv_capacity_tokens=0), "pool 'a': kv_capacity_tokens must be None"),
        (lambda: Pool("a", startup_s=-2.0), "pool 'a': startup_s must be a finite number"),
        (lambda: Pool("a", timing="h100"), "pool 'a': unknown timing preset 'h100'; known:"),
        (
            lambda: Cluster.from_pools([Pool("a", servers=1), Pool("a", servers=1)]),
            "pool names must be unique, got 'a' twice",
        ),
        (
            lambda: Cluster(servers=1, pools=(Pool("a", servers=2),)),
            r"servers must equal the pools' initial servers \(2\), got 1",
        ),
        (
            lambda: Cluster(servers=1, mode="static", pools=(Pool("a", servers=1),)),
            "mode 'static' takes pools of role static; pool 'a' has role 'mixed'",
        ),
        (
            lambda: Cluster.from_pools([Pool("p", "prefill", 1)]),
            "a disaggregated cluster needs a prefill pool and a decode pool",
        ),
        (lambda: Cluster(move_s=float("inf")), "cluster: move_s must be a finite number"),
    ],
)
def test_bad_pools_are_clear_errors(make, message):
    """Each invalid pool or cluster raises a ValueError naming the pool and the field."""
    with pytest.raises(ValueError, match=message):
        make()


def _elastic_instance():
    cl = Cluster.from_pools(
        [
            Pool("tier-20ms", servers=1, max_batch_size=48, timing="llama2-7b-h100"),
            Pool("best-effort", servers=0, kv_capacity_tokens=70_000, startup_s=1.25),
        ],
        startup_s=30.0,
        move_s=0.5,
    )
    wl = Workload({"arrival_s": [0.0], "prompt_tokens": [4], "output_tokens": [2]})
    return Instance("pools", wl, cl, TIMING)


def test_pools_round_trip_exactly(tmp_path):
    """A cluster with pools, start-up and move delays loads back equal, field for field."""
    inst = _elastic_instance()
    back = load_instance(save_instance(inst, tmp_path / "pools.json"))
    assert back.cluster == inst.cluster
    assert back.cluster.pools[1] == Pool(
        "best-effort", servers=0, kv_capacity_tokens=70_000, startup_s=1.25
    )
    assert (back.cluster.startup_s, back.cluster.move_s) == (30.0, 0.5)


def test_bad_pool_in_a_file_names_the_field(tmp_path):
    """An unknown pool field or an invalid pool value names cluster.pools[i] in the error."""
    path = save_instance(_elastic_instance(), tmp_path / "pools.json")
    data = json.loads(path.read_text())
    data["cluster"]["pools"][1]["gpus"] = 8
    path.write_text(json.dumps(data))
    with pytest.raises(InstanceFileError, match=r"field 'cluster.pools\[1\].gpus': unknown field"):
        load_instance(path)
    del data["cluster"]["pools"][1]["gpus"]
    data["cluster"]["pools"][0]["role"] = "gpu"
    path.write_text(json.dumps(data))
    with pytest.raises(
        InstanceFileError, match=r"field 'cluster.pools\[0\]': pool 'tier-20ms': role"
    ):
        load_instance(path)


def test_files_without_pools_still_load(tmp_path):
    """An instance file written before pools existed (no pools, startup_s, move_s) loads."""
    path = save_instance(_elastic_instance(), tmp_path / "pools.json")
    data = json.loads(path.read_text())
    data["cluster"] = {
        k: v for k, v in data["cluster"].items() if k not in ("pools", "startup_s", "move_s")
    }
    data["cluster"]["servers"] = 2
    path.write_text(json.dumps(data))
    back = load_instance(path)
    assert back.cluster == Cluster(servers=2, kv_capacity_tokens=2**20)
