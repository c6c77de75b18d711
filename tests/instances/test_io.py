"""Instance files: exact round trips, clear errors, atomic writes, the shipped-instance manifest."""

import json
import math
import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from slolab.instances import (
    Cluster,
    Instance,
    InstanceFileError,
    Workload,
    add_shipped,
    assign_slos,
    load_instance,
    load_manifest,
    load_shipped,
    read_mooncake,
    save_instance,
    trace_path,
)
from slolab.timing.base import LinearTiming
from slolab.timing.forms import RooflineTiming

TIMING = LinearTiming(0.01, {"prefill_tokens": 1e-4, "decode_kv_tokens": 1e-6}, name="round")


def mooncake_instance() -> Instance:
    """200 Mooncake requests with hash_ids, PolyServe SLOs (some nan) and a task column."""
    w = read_mooncake(trace_path("mooncake_conversation"), keep_hash_ids=True, limit=200)
    w = assign_slos(w, "polyserve", seed=1, timing=TIMING)
    w = w.with_columns(task=np.array(["chat", "code"] * 100), score=np.linspace(0.1, 0.3, 200))
    return Instance(
        name="mooncake-200",
        workload=w,
        cluster=Cluster(
            servers=3, kv_capacity_tokens=50_000, mode="disaggregated", prefill_servers=1
        ),
        timing=TIMING,
        problem="serving",
        settings={"w_prefill": 1.0 / 3.0, "batch_size": 4, "tiers": [0.02, 0.03]},
    )


def test_round_trip_is_exact(tmp_path):
    """Every column (nan SLOs, hash_ids lists, strings), cluster, timing and settings survive."""
    inst = mooncake_instance()
    # prompts above 9,900 tokens take > 1 s to prefill here, so some requests are best effort
    assert np.isnan(inst.workload["ttft_slo_s"]).any()
    path = save_instance(inst, tmp_path / "inst.json")
    back = load_instance(path)
    assert back.workload.equals(inst.workload)
    assert back.workload.columns == inst.workload.columns
    for name in inst.workload.columns:
        assert back.workload[name].dtype == inst.workload[name].dtype
    assert list(back.workload["hash_ids"][1]) == list(inst.workload["hash_ids"][1])
    assert back.cluster == inst.cluster
    assert back.timing == inst.timing
    assert dict(back.settings) == {"w_prefill": 1.0 / 3.0, "batch_size": 4, "tiers": [0.02, 0.03]}
    assert (back.name, back.problem) == ("mooncake-200", "serving")


def test_nan_is_null_and_infinity_a_string_in_strict_json(tmp_path):
    """nan SLOs are stored as null, an inf extra value as "Infinity"; both load back."""
    w = Workload(
        {
            "arrival_s": [0.0, 0.5],
            "prompt_tokens": [3, 4],
            "output_tokens": [1, 2],
            "tpot_slo_s": [0.05, math.nan],
            "slack_s": [math.inf, -math.inf],
        }
    )
    inst = Instance("tiny", w, timing=TIMING)
    path = save_instance(inst, tmp_path / "tiny.json")
    raw = json.loads(path.read_text())
    assert raw["requests"]["tpot_slo_s"] == [0.05, None]
    assert raw["requests"]["slack_s"] == ["Infinity", "-Infinity"]
    assert "NaN" not in path.read_text()
    back = load_instance(path)
    assert back.workload.equals(w)
    assert back.workload["slack_s"].tolist() == [math.inf, -math.inf]


def test_other_timing_forms_round_trip(tmp_path):
    """A roofline timing model is rebuilt through TimingModel.from_dict."""
    roofline = RooflineTiming.from_token_lines([(1e-4, 0.0, 0.01), (2e-5, 0.0, 0.03)])
    w = Workload({"arrival_s": [0.0], "prompt_tokens": [5], "output_tokens": [2]})
    back = load_instance(save_instance(Instance("r", w, timing=roofline), tmp_path / "r.json"))
    assert back.timing == roofline
    assert isinstance(back.timing, RooflineTiming)


@settings(max_examples=30, deadline=None, derandomize=True)
@given(
    arrivals=st.lists(
        st.floats(0.0, 1e6, allow_nan=False, allow_subnormal=True), min_size=1, max_size=20
    ),
    slo=st.floats(0.0, 1e3) | st.just(math.nan),
)
def test_round_trip_of_arbitrary_floats(tmp_path_factory, arrivals, slo):
    """Any arrival floats and a nan-or-finite SLO come back bit for bit."""
    n = len(arrivals)
    w = Workload(
        {
            "arrival_s": sorted(arrivals),
            "prompt_tokens": [1] * n,
            "output_tokens": [1] * n,
            "e2e_slo_s": [slo] * n,
        }
    )
    path = tmp_path_factory.mktemp("rt") / "x.json"
    back = load_instance(save_instance(Instance("x", w, timing=TIMING), path))
    assert back.workload["arrival_s"].tobytes() == w["arrival_s"].tobytes()
    assert back.workload.equals(w)


def test_corrupt_files_name_path_and_field(tmp_path):
    """Not JSON, wrong format, wrong version, missing and invalid fields are named."""
    good = json.loads(save_instance(mooncake_instance(), tmp_path / "good.json").read_text())

    def write(data, name="bad.json"):
        path = tmp_path / name
        path.write_text(data if isinstance(data, str) else json.dumps(data))
        return path

    path = write('{"format": "slolab-instance", ')
    with pytest.raises(InstanceFileError, match=r"bad.json: not a slolab instance file \(invalid"):
        load_instance(path)
    with pytest.raises(InstanceFileError, match="field 'format': must be 'slolab-instance'"):
        load_instance(write({**good, "format": "other"}))
    with pytest.raises(InstanceFileError, match="field 'version': unsupported version 2"):
        load_instance(write({**good, "version": 2}))
    missing = {k: v for k, v in good.items() if k != "timing"}
    with pytest.raises(InstanceFileError, match="bad.json: field 'timing': missing"):
        load_instance(write(missing))
    with pytest.raises(InstanceFileError, match="field 'cluster.gpus': unknown field"):
        load_instance(write({**good, "cluster": {**good["cluster"], "gpus": 8}}))
    with pytest.raises(InstanceFileError, match="field 'cluster': servers must be >= 1, got 0"):
        load_instance(write({**good, "cluster": {**good["cluster"], "servers": 0}}))
    with pytest.raises(InstanceFileError, match="field 'timing': .*unknown timing form 'cubic'"):
        load_instance(write({**good, "timing": {"form": "cubic"}}))
    requests = {**good["requests"], "prompt_tokens": [None] * 200}
    with pytest.raises(InstanceFileError, match="field 'requests.prompt_tokens'"):
        load_instance(write({**good, "requests": requests}))
    requests = {**good["requests"], "output_tokens": [0] * 200}
    with pytest.raises(InstanceFileError, match="field 'requests': .*output_tokens must be"):
        load_instance(write({**good, "requests": requests}))


def test_save_is_atomic(tmp_path, monkeypatch):
    """A failing replace leaves the old file intact and no temporary file behind."""
    path = save_instance(mooncake_instance(), tmp_path / "inst.json")
    before = path.read_bytes()
    small = Instance(
        "small",
        Workload({"arrival_s": [0.0], "prompt_tokens": [1], "output_tokens": [1]}),
        timing=TIMING,
    )

    def fail(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", fail)
    with pytest.raises(OSError, match="disk full"):
        save_instance(small, path)
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["inst.json"]


def test_unserialisable_settings_are_refused_before_writing(tmp_path):
    """A nan setting names the key and writes nothing."""
    w = Workload({"arrival_s": [0.0], "prompt_tokens": [1], "output_tokens": [1]})
    inst = Instance("s", w, timing=TIMING, settings={"eta_s": math.nan})
    with pytest.raises(ValueError, match=r"settings\['eta_s'\] must be JSON-serialisable"):
        save_instance(inst, tmp_path / "s.json")
    assert list(tmp_path.iterdir()) == []


def test_manifest_add_load_and_unknown_names(tmp_path):
    """add_shipped writes file + entry; load_shipped loads it; unknown names list the known."""
    manifest = tmp_path / "manifest.json"
    inst = mooncake_instance()
    entry = add_shipped(
        inst,
        source="mooncake_conversation",
        cut="first 200, polyserve SLOs (seed 1)",
        seed=1,
        known={"optimum": 12.5, "how": "hand-made for the test"},
        manifest=manifest,
    )
    assert entry["file"] == "mooncake-200.json" and entry["requests"] == 200
    entries = load_manifest(manifest)
    assert [e["name"] for e in entries] == ["mooncake-200"]
    assert entries[0]["known"] == {"optimum": 12.5, "how": "hand-made for the test"}
    back = load_shipped("mooncake-200", manifest=manifest)
    assert back.workload.equals(inst.workload)
    with pytest.raises(ValueError, match="unknown shipped instance 'tiny'; known: mooncake-200"):
        load_shipped("tiny", manifest=manifest)
    # adding again replaces the entry rather than duplicating it
    add_shipped(inst, source="s", cut="c", seed=None, known={}, manifest=manifest)
    assert [e["seed"] for e in load_manifest(manifest)] == [None]


def test_manifest_validation_and_mismatch(tmp_path):
    """A missing key, a duplicate name and a manifest out of sync with its file are named."""
    manifest = tmp_path / "manifest.json"
    add_shipped(mooncake_instance(), source="s", cut="c", seed=0, known={}, manifest=manifest)
    data = json.loads(manifest.read_text())
    entry = data["instances"][0]
    manifest.write_text(json.dumps({"instances": [{k: v for k, v in entry.items() if k != "cut"}]}))
    with pytest.raises(InstanceFileError, match=r"field 'instances\[0\].cut': missing"):
        load_manifest(manifest)
    manifest.write_text(json.dumps({"instances": [entry, entry]}))
    with pytest.raises(InstanceFileError, match="duplicate name 'mooncake-200'"):
        load_manifest(manifest)
    manifest.write_text(json.dumps({"instances": [{**entry, "requests": 199}]}))
    with pytest.raises(
        InstanceFileError, match="manifest says 199, the file mooncake-200.json has 200"
    ):
        load_shipped("mooncake-200", manifest=manifest)


def test_every_shipped_instance_loads_and_matches_its_entry():
    """Each entry of the package manifest loads with the name and request count it records."""
    entries = load_manifest()
    loaded = [load_shipped(e["name"]) for e in entries]
    assert [(i.name, i.n_requests) for i in loaded] == [(e["name"], e["requests"]) for e in entries]
