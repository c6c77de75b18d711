"""Tests for the results store: run keys, atomic puts, resume after SIGKILL, temp cleanup."""

import hashlib
import importlib.util
import math
import os
import random
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pandas as pd
import pytest
from slolab.harness.store import (
    KEY_COLUMN,
    ResultsStore,
    RunAllTally,
    StoreReadError,
    run_all,
    run_key,
)

#: A sweep of 60 tasks whose row function sleeps 4 ms. Run as a script it takes the store
#: directory and an optional "crash-before-rename N" mode that SIGKILLs itself at the N-th
#: os.replace (after the temp file is written and fsync-ed, before it gets its final name).
SWEEP_SCRIPT = textwrap.dedent(
    """
    import math
    import os
    import signal
    import sys
    import time

    from slolab.harness import store as store_module
    from slolab.harness.store import ResultsStore, run_all, run_key

    N_TASKS = 60


    def row_of(index):
        time.sleep(0.004)
        return {
            "task": index,
            "value": math.sin(index) * 1000.0,
            "label": f"task-{index:03d}",
            "even": index % 2 == 0,
            "note": None if index % 7 == 0 else "ok",
        }


    def tasks():
        return [(run_key(f"toy-{i}", "toy", {"i": i}, 0), i) for i in range(N_TASKS)]


    def crash_at_replace(call_number):
        real_replace = os.replace
        calls = []

        def replace(source, destination):
            calls.append(source)
            if len(calls) == call_number:
                os.kill(os.getpid(), signal.SIGKILL)
            real_replace(source, destination)

        store_module.os.replace = replace


    def main(directory, argv=()):
        if len(argv) == 2 and argv[0] == "crash-before-rename":
            crash_at_replace(int(argv[1]))
        store = ResultsStore(directory)
        print("ready", flush=True)
        run_all(store, tasks(), row_of, progress=False)


    if __name__ == "__main__":
        main(sys.argv[1], sys.argv[2:])
    """
)


@pytest.fixture()
def sweep_script(tmp_path):
    """Path of the sweep script, written into the test's temporary directory."""
    path = tmp_path / "sweep.py"
    path.write_text(SWEEP_SCRIPT)
    return path


def load_sweep_module(path):
    """Import the sweep script as a module (for the uninterrupted reference run)."""
    spec = importlib.util.spec_from_file_location("sweep_for_test", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def reference_frame(sweep_script, directory):
    """Frame of an uninterrupted sweep in ``directory``, run in this process."""
    module = load_sweep_module(sweep_script)
    module.main(str(directory))
    return ResultsStore(directory).frame()


def start_sweep(sweep_script, directory, *extra):
    """Start the sweep in a subprocess and wait until it has opened the store."""
    process = subprocess.Popen(
        [sys.executable, str(sweep_script), str(directory), *extra],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout.readline().strip() == "ready"
    process.stdout.close()
    return process


def temp_files(directory):
    """Names of the store's temporary files in ``directory``."""
    return sorted(name for name in os.listdir(directory) if name.endswith(".tmp"))


def test_run_key_matches_hand_written_canonical_json():
    """run_key is sha256 of the canonical JSON written out by hand."""
    key = run_key("sa-n10-s3", "sa", {"name": "x", "moves": (1, 2), "beta": 0.95}, 7)
    # Keys sorted at every level, no spaces, tuple as list, 0.95 by repr.
    canonical = (
        b'{"instance_id":"sa-n10-s3","method":"sa",'
        b'"params":{"beta":0.95,"moves":[1,2],"name":"x"},"seed":7}'
    )
    assert key == hashlib.sha256(canonical).hexdigest()
    assert len(key) == 64


def test_run_key_distinguishes_types_and_ignores_mapping_order():
    """Insertion order does not matter; 1 vs 1.0 vs True and nested values do."""
    base = run_key("i", "m", {"a": 1, "b": {"y": 0.1, "x": None}}, 0)
    assert base == run_key("i", "m", {"b": {"x": None, "y": 0.1}, "a": 1}, 0)
    assert base == run_key("i", "m", {"a": np.int64(1), "b": {"y": 0.1, "x": None}}, 0)
    others = {
        run_key("i", "m", {"a": 1.0, "b": {"y": 0.1, "x": None}}, 0),
        run_key("i", "m", {"a": True, "b": {"y": 0.1, "x": None}}, 0),
        run_key("i", "m", {"a": 1, "b": {"y": 0.1, "x": None}}, 1),
        run_key("i", "m2", {"a": 1, "b": {"y": 0.1, "x": None}}, 0),
    }
    # Four different runs, none equal to base: 4 distinct keys + base = 5.
    assert len(others | {base}) == 5
    # Non-finite floats are written by repr: nan, inf.
    canonical = b'{"instance_id":"i","method":"m","params":{"t":inf,"u":nan},"seed":0}'
    assert (
        run_key("i", "m", {"u": math.nan, "t": math.inf}, 0)
        == hashlib.sha256(canonical).hexdigest()
    )


def test_run_key_stable_across_processes():
    """A fresh interpreter with a different PYTHONHASHSEED computes the same key."""
    code = (
        "from slolab.harness.store import run_key;"
        "print(run_key('inst', 'm', {'b': [0.1, 2], 'a': 'z', 'c': {'k': True}}, 5))"
    )
    other_process = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "PYTHONHASHSEED": "977"},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    this_process = run_key("inst", "m", {"c": {"k": True}, "a": "z", "b": (0.1, 2)}, 5)
    # Canonical text: {"instance_id":"inst","method":"m",
    # "params":{"a":"z","b":[0.1,2],"c":{"k":true}},"seed":5}
    canonical = (
        b'{"instance_id":"inst","method":"m",'
        b'"params":{"a":"z","b":[0.1,2],"c":{"k":true}},"seed":5}'
    )
    assert other_process == this_process == hashlib.sha256(canonical).hexdigest()


def test_run_key_rejects_unsupported_values():
    """A set in params and a non-str mapping key are rejected with their path."""
    with pytest.raises(TypeError, match=r"run\['params'\]\['s'\] has a value of type set"):
        run_key("i", "m", {"s": {1, 2}}, 0)
    with pytest.raises(TypeError, match="non-string key 3"):
        run_key("i", "m", {"d": {3: "x"}}, 0)
    with pytest.raises(TypeError, match="seed must be int"):
        run_key("i", "m", {}, 1.5)


def test_put_get_round_trips_values(tmp_path):
    """Every scalar type comes back as put; NumPy scalars come back as Python values."""
    store = ResultsStore(tmp_path / "store")
    row = {
        "count": 3,
        "ratio": 0.1,
        "missing": None,
        "name": "sa",
        "ok": True,
        "nan": math.nan,
        "inf": -math.inf,
        "np_int": np.int32(-4),
    }
    store.put("k1", row)
    got = store.get("k1")
    # nan != nan, so compare it separately.
    assert math.isnan(got.pop("nan"))
    assert got == {
        "count": 3,
        "ratio": 0.1,
        "missing": None,
        "name": "sa",
        "ok": True,
        "inf": -math.inf,
        "np_int": -4,
    }
    assert type(got["np_int"]) is int
    assert store.has("k1") and "k1" in store and not store.has("k2")
    assert store.keys() == ["k1"]
    # The file is <key>.parquet in the directory, and no temp file remains.
    assert sorted(os.listdir(tmp_path / "store")) == ["k1.parquet"]


def test_put_replaces_existing_row(tmp_path):
    """A second put of a key replaces its row: one row, the new values."""
    store = ResultsStore(tmp_path)
    store.put("k", {"v": 1})
    store.put("k", {"v": 2})
    frame = store.frame()
    assert frame[KEY_COLUMN].tolist() == ["k"]
    assert frame["v"].tolist() == [2]


def test_bad_rows_and_keys_are_rejected(tmp_path):
    """Non-scalar values, reserved names, empty rows and bad keys raise."""
    store = ResultsStore(tmp_path)
    with pytest.raises(TypeError, match=r"column 'xs': value \[1, 2\] of type list"):
        store.put("k", {"xs": [1, 2]})
    with pytest.raises(ValueError, match="reserved column name 'run_key'"):
        store.put("k", {KEY_COLUMN: "x"})
    with pytest.raises(ValueError, match="is empty"):
        store.put("k", {})
    with pytest.raises(ValueError, match=r"key must be .* got '\.\./escape'"):
        store.put("../escape", {"v": 1})
    with pytest.raises(KeyError, match="no row stored under key 'absent'"):
        store.get("absent")
    # Nothing was written by the failed puts.
    assert os.listdir(tmp_path) == []


def test_unreadable_file_raises_naming_it(tmp_path):
    """A damaged <key>.parquet raises StoreReadError naming the file, from get and frame."""
    store = ResultsStore(tmp_path)
    store.put("good", {"v": 1})
    (tmp_path / "bad.parquet").write_bytes(b"not parquet at all")
    with pytest.raises(StoreReadError, match=r"bad\.parquet"):
        store.get("bad")
    with pytest.raises(StoreReadError, match=r"bad\.parquet"):
        store.frame()


def test_file_with_wrong_key_metadata_raises(tmp_path):
    """A row file renamed to another key is detected by its key metadata."""
    store = ResultsStore(tmp_path)
    store.put("a", {"v": 1})
    os.rename(tmp_path / "a.parquet", tmp_path / "b.parquet")
    with pytest.raises(StoreReadError, match=r"b\.parquet was not written .* for key 'b'"):
        store.get("b")


def test_frame_order_and_columns(tmp_path):
    """frame is sorted by key with the union of columns in order of first appearance."""
    store = ResultsStore(tmp_path)
    store.put("k2", {"x": 2, "y": "b"})
    store.put("k1", {"x": 1})
    store.put("k3", {"z": True, "x": 3})
    frame = store.frame()
    # Rows in key order: k1 {x}, k2 {x, y}, k3 {z, x} -> columns x, y, z after the key.
    assert frame.columns.tolist() == [KEY_COLUMN, "x", "y", "z"]
    # Sorted keys k1, k2, k3; x holds 1, 2, 3.
    assert frame[KEY_COLUMN].tolist() == ["k1", "k2", "k3"]
    assert frame["x"].tolist() == [1, 2, 3]
    assert ResultsStore(tmp_path / "empty").frame().columns.tolist() == [KEY_COLUMN]


def test_run_all_skips_stored_tasks(tmp_path):
    """A rerun calls fn only for missing keys; duplicated keys are computed once."""
    store = ResultsStore(tmp_path)
    calls = []

    def square(payload):
        calls.append(payload)
        return {"square": payload * payload}

    tasks = [(f"t{i}", i) for i in range(5)]
    first = run_all(store, tasks[:3] + [tasks[0]], square, progress=False)
    # Keys t0, t1, t2 (t0 listed twice): 3 computed.
    assert first == RunAllTally(computed=3, skipped=0)
    second = run_all(store, tasks, square, progress=False)
    # t0..t2 stored, t3 and t4 computed: fn called 3 + 2 = 5 times in all.
    assert second == RunAllTally(computed=2, skipped=3)
    assert calls == [0, 1, 2, 3, 4]
    assert run_all(store, tasks, square, progress=False) == RunAllTally(computed=0, skipped=5)
    # Squares 0, 1, 4, 9, 16 in key order t0..t4.
    assert store.frame()["square"].tolist() == [0, 1, 4, 9, 16]


def test_stale_temp_files_cleaned_on_open(tmp_path, sweep_script):
    """A writer killed between fsync and rename leaves a temp file that the next open deletes."""
    directory = tmp_path / "crashed"
    process = start_sweep(sweep_script, directory, "crash-before-rename", "5")
    assert process.wait(timeout=60) == -signal.SIGKILL
    # Four rows were renamed into place; the fifth is a complete temp file, never renamed.
    assert len(os.listdir(directory)) == 5
    assert len(temp_files(directory)) == 1
    assert len([name for name in os.listdir(directory) if name.endswith(".parquet")]) == 4
    # A temp file of a live process (this one) must survive the clean-up.
    store = ResultsStore(directory)
    live_name = f".{'0' * 64}.{store._host}.{os.getpid()}.{'f' * 16}.tmp"
    (directory / live_name).write_bytes(b"in progress")
    reopened = ResultsStore(directory)
    assert temp_files(directory) == [live_name]
    assert len(reopened.keys()) == 4
    (directory / live_name).unlink()


def test_sigkill_at_random_points_resumes_to_uninterrupted_rows(tmp_path, sweep_script):
    """Four SIGKILLs at seeded random instants, then a resume: rows equal an uninterrupted run."""
    reference = reference_frame(sweep_script, tmp_path / "reference")
    reference_store = ResultsStore(tmp_path / "reference")
    # 60 tasks, one row each, keys unique.
    assert len(reference) == 60 and reference[KEY_COLUMN].is_unique

    directory = tmp_path / "interrupted"
    rng = random.Random(20240611)
    counts = []
    for _ in range(4):
        process = start_sweep(sweep_script, directory)
        delay_s = rng.uniform(0.02, 0.15)
        try:
            process.wait(timeout=delay_s)
        except subprocess.TimeoutExpired:
            process.kill()
        process.wait(timeout=60)
        store = ResultsStore(directory)
        assert temp_files(directory) == []
        counts.append(len(store.keys()))
        # Every visible row is complete and equal to the reference row of its key.
        for key in store.keys():
            assert store.get(key) == reference_store.get(key)
    # Each killed process had at most 0.15 s of work while 60 rows need >= 60 * 4 ms = 0.24 s,
    # so the first kill left the sweep unfinished; counts never decrease across resumes.
    assert counts[0] < 60
    assert counts == sorted(counts)

    final = start_sweep(sweep_script, directory)
    assert final.wait(timeout=60) == 0
    resumed = ResultsStore(directory).frame()
    pd.testing.assert_frame_equal(resumed, reference)
    assert resumed[KEY_COLUMN].is_unique
