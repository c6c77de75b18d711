"""Tests for the results store: task keys, typed batches, resume after SIGKILL, temp cleanup."""

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
    ResultsStore,
    StoreLockedError,
    StoreReadError,
    canonical_json,
    task_key,
)

COLUMNS = {
    "task_key": "string",
    "value": "float64",
    "count": "int64",
    "ok": "bool",
    "name": "string",
}

#: A sweep of 60 tasks of 1-3 rows each, written in batches of 1-3 tasks; each task sleeps
#: 4 ms. Run as a script it takes the store directory and an optional "crash-before-rename N"
#: mode that SIGKILLs itself at the N-th os.replace (after the batch is written and fsync-ed,
#: before it gets its final name).
SWEEP_SCRIPT = textwrap.dedent(
    """
    import math
    import os
    import signal
    import sys
    import time

    from slolab.harness import store as store_module
    from slolab.harness.store import ResultsStore, task_key

    N_TASKS = 60
    COLUMNS = {
        "task_key": "string", "value": "float64", "count": "int64", "ok": "bool", "name": "string"
    }


    def rows_of(index):
        time.sleep(0.004)
        key = task_key({"toy": index})
        return [
            {
                "task_key": key,
                "value": math.sin(index + part) * 1000.0,
                "count": index * 10 + part,
                "ok": (index + part) % 2 == 0,
                "name": None if index % 7 == 0 else f"task-{index:03d}-{part}",
            }
            for part in range(1 + index % 3)
        ]


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
        store = ResultsStore(directory, COLUMNS)
        with store.writer() as writer:
            print("ready", flush=True)
            batch = []
            for index in range(N_TASKS):
                if task_key({"toy": index}) in writer.keys:
                    continue
                batch.extend(rows_of(index))
                if index % 3 == 2:
                    writer.append(batch)
                    batch = []
            writer.append(batch)


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


def reference_frame(sweep_script, directory):
    """Frame of an uninterrupted sweep in ``directory``, run in this process."""
    spec = importlib.util.spec_from_file_location("sweep_for_test", sweep_script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.main(str(directory))
    return ResultsStore(directory, COLUMNS).frame()


def start_sweep(sweep_script, directory, *extra):
    """Start the sweep in a subprocess and wait until it holds the writer lock."""
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


def test_task_key_matches_hand_written_canonical_json():
    """task_key is sha256 of the canonical JSON written out by hand."""
    description = {"kind": "compare", "methods": ("sa", "highs"), "time_limit_s": 0.5, "seed": 7}
    # Keys sorted, no spaces, tuple as list, 0.5 by repr.
    canonical = b'{"kind":"compare","methods":["sa","highs"],"seed":7,"time_limit_s":0.5}'
    assert canonical_json(description).encode() == canonical
    assert task_key(description) == hashlib.sha256(canonical).hexdigest()
    assert len(task_key(description)) == 64


def test_task_key_distinguishes_types_and_ignores_mapping_order():
    """Insertion order does not matter; 1 vs 1.0 vs True and nested values do."""
    base = task_key({"a": 1, "b": {"y": 0.1, "x": None}})
    assert base == task_key({"b": {"x": None, "y": 0.1}, "a": 1})
    assert base == task_key({"a": np.int64(1), "b": {"y": 0.1, "x": None}})
    others = {
        task_key({"a": 1.0, "b": {"y": 0.1, "x": None}}),
        task_key({"a": True, "b": {"y": 0.1, "x": None}}),
        task_key({"a": 1, "b": {"y": 0.2, "x": None}}),
    }
    # Three different descriptions, none equal to base: 3 distinct keys + base = 4.
    assert len(others | {base}) == 4
    # Non-finite floats are written by repr: nan, inf.
    assert canonical_json({"u": math.nan, "t": math.inf}) == '{"t":inf,"u":nan}'


def test_task_key_stable_across_processes():
    """A fresh interpreter with a different PYTHONHASHSEED computes the same key."""
    code = (
        "from slolab.harness.store import task_key;"
        "print(task_key({'b': [0.1, 2], 'a': 'z', 'c': {'k': True}}))"
    )
    other_process = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "PYTHONHASHSEED": "977"},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    this_process = task_key({"c": {"k": True}, "a": "z", "b": (0.1, 2)})
    canonical = b'{"a":"z","b":[0.1,2],"c":{"k":true}}'
    assert other_process == this_process == hashlib.sha256(canonical).hexdigest()


def test_task_key_rejects_unsupported_values():
    """A set and a non-str mapping key are rejected with their path."""
    with pytest.raises(TypeError, match=r"task\['s'\] has a value of type set"):
        task_key({"s": {1, 2}})
    with pytest.raises(TypeError, match="non-string key 3"):
        task_key({"d": {3: "x"}})


def test_append_round_trips_typed_values(tmp_path):
    """Values come back as appended; missing columns are null; NumPy scalars are accepted."""
    store = ResultsStore(tmp_path / "store", COLUMNS)
    with store.writer() as writer:
        writer.append(
            [
                {"task_key": "k1", "value": 0.1, "count": np.int32(-4), "ok": True, "name": "sa"},
                {"task_key": "k1", "value": math.nan, "count": None, "ok": np.bool_(False)},
            ]
        )
        writer.append([{"task_key": "k0", "value": 3, "name": "int into float"}])
    rows = store.table().to_pylist()
    # Batches in the order written: k1's two rows, then k0's; 3 (int) is stored as 3.0.
    assert rows[0] == {"task_key": "k1", "value": 0.1, "count": -4, "ok": True, "name": "sa"}
    assert math.isnan(rows[1]["value"]) and rows[1]["count"] is None and rows[1]["name"] is None
    assert rows[2] == {
        "task_key": "k0",
        "value": 3.0,
        "count": None,
        "ok": None,
        "name": "int into float",
    }
    assert store.keys() == {"k0", "k1"}
    # Sorted by key, stable within a key: k0, then k1's rows in their appended order.
    assert store.frame()["task_key"].tolist() == ["k0", "k1", "k1"]
    assert store.frame()["count"].tolist()[1] == -4
    # Two batch files and the lock; no temp file remains.
    names = sorted(os.listdir(tmp_path / "store"))
    assert names[0] == ".lock" and len(names) == 3
    assert all(name.startswith("part-") and name.endswith(".parquet") for name in names[1:])


def test_pandas_reads_the_store_directory(tmp_path):
    """pandas.read_parquet(DIR) reads every stored row with the store's columns."""
    store = ResultsStore(tmp_path, COLUMNS)
    with store.writer() as writer:
        writer.append([{"task_key": "b", "value": 2.0}, {"task_key": "b", "count": 5}])
        writer.append(pd.DataFrame({"task_key": ["a"], "value": [1.5], "ok": [True]}))
    read = pd.read_parquet(tmp_path)
    assert read.columns.tolist() == list(COLUMNS)
    # 2 + 1 rows; batches in written order b, b, a.
    assert read["task_key"].tolist() == ["b", "b", "a"]
    pd.testing.assert_frame_equal(read, store.frame(sort=False))


def test_frame_reads_chosen_columns(tmp_path):
    """frame(columns=...) reads the key and those columns only; unknown names raise."""
    store = ResultsStore(tmp_path, COLUMNS)
    with store.writer() as writer:
        writer.append([{"task_key": "b", "count": 2, "name": "x"}])
        writer.append([{"task_key": "a", "count": 1}])
    frame = store.frame(columns=["count"])
    assert frame.columns.tolist() == ["task_key", "count"]
    assert frame["count"].tolist() == [1, 2]
    with pytest.raises(ValueError, match="unknown column\\(s\\) 'size'"):
        store.frame(columns=["size"])


def test_bad_rows_are_rejected_naming_row_and_column(tmp_path):
    """Wrong types, unknown columns, missing keys and stored keys raise; nothing is written."""
    store = ResultsStore(tmp_path, COLUMNS)
    with store.writer() as writer:
        writer.append([{"task_key": "a", "count": 1}])
        with pytest.raises(TypeError, match=r"row 1 \(key 'b'\), column 'count': value 1.5"):
            writer.append([{"task_key": "b", "count": 2}, {"task_key": "b", "count": 1.5}])
        with pytest.raises(TypeError, match=r"column 'count': value True of type bool"):
            writer.append([{"task_key": "b", "count": True}])
        with pytest.raises(TypeError, match=r"column 'name': value 3 of type int"):
            writer.append([{"task_key": "b", "name": 3}])
        with pytest.raises(TypeError, match=r"value 18446744073709551616 .* int64"):
            writer.append([{"task_key": "b", "count": 2**64}])
        with pytest.raises(ValueError, match=r"column\(s\) 'xs' that the store does not have"):
            writer.append([{"task_key": "b", "xs": 1}])
        with pytest.raises(ValueError, match="every row needs a key"):
            writer.append([{"value": 1.0}])
        with pytest.raises(ValueError, match="key 'a' is already stored"):
            writer.append([{"task_key": "a", "count": 2}])
        with pytest.raises(TypeError, match="column 'count' has type double"):
            writer.append(pd.DataFrame({"task_key": ["c"], "count": [1.5]}))
        assert writer.append([]) is None
    # Only the first append wrote a batch.
    assert len(store.files()) == 1 and store.keys() == {"a"}


def test_bad_columns_are_rejected():
    """Unknown column types and a missing or non-string key column raise."""
    with pytest.raises(ValueError, match="column 'x' has type 'int'; known types"):
        ResultsStore("unused", {"task_key": "string", "x": "int"})
    with pytest.raises(ValueError, match="key column 'task_key' must be one of the columns"):
        ResultsStore("unused", {"id": "string"})


def test_second_writer_is_refused(tmp_path):
    """While one writer holds the lock, another writer of the store is refused."""
    store = ResultsStore(tmp_path, COLUMNS)
    with store.writer():
        with pytest.raises(StoreLockedError, match="being written by another process"):
            with ResultsStore(tmp_path, COLUMNS).writer():
                pass
    with store.writer() as writer:
        assert writer.keys == set()


def test_unreadable_file_raises_naming_it(tmp_path):
    """A damaged batch file raises StoreReadError naming it, from keys and frame."""
    store = ResultsStore(tmp_path, COLUMNS)
    with store.writer() as writer:
        writer.append([{"task_key": "a", "count": 1}])
    bad = tmp_path / "part-00000000000000000001-0000beef.parquet"
    bad.write_bytes(b"not parquet at all")
    with pytest.raises(StoreReadError, match=bad.name):
        store.keys()
    with pytest.raises(StoreReadError, match=bad.name):
        store.frame()


def test_renamed_or_foreign_files_raise(tmp_path):
    """A renamed batch, one with other columns, and a key in two files are detected."""
    store = ResultsStore(tmp_path, COLUMNS)
    with store.writer() as writer:
        first = writer.append([{"task_key": "a", "count": 1}])
    renamed = tmp_path / "part-00000000000000000002-0000beef.parquet"
    os.link(first, renamed)
    # The copy's metadata names the original batch, not its new name.
    with pytest.raises(StoreReadError, match=f"{renamed.name} was not written .* under that name"):
        store.frame()
    renamed.unlink()
    with pytest.raises(StoreReadError, match=r"does not have the store's columns \(extra: absent"):
        ResultsStore(tmp_path, {**COLUMNS, "extra": "float64"})
    other = tmp_path / "other"
    with ResultsStore(other, COLUMNS).writer() as writer:
        copied = writer.append([{"task_key": "a", "count": 2}])
    os.replace(copied, tmp_path / copied.name)
    with pytest.raises(StoreReadError, match="key 'a' is stored in two results files"):
        store.keys()


def test_stale_temp_files_cleaned_on_open(tmp_path, sweep_script):
    """A writer killed between fsync and rename leaves a temp file that the next open deletes."""
    directory = tmp_path / "crashed"
    process = start_sweep(sweep_script, directory, "crash-before-rename", "3")
    assert process.wait(timeout=60) == -signal.SIGKILL
    # Two batches were renamed into place; the third is a complete temp file, never renamed.
    assert len(temp_files(directory)) == 1
    assert len([name for name in os.listdir(directory) if name.endswith(".parquet")]) == 2
    # A temp file of a live process (this one) must survive the clean-up.
    store = ResultsStore(directory, COLUMNS)
    live_name = f".part-{'0' * 20}-{'f' * 8}.{store._host}.{os.getpid()}.tmp"
    (directory / live_name).write_bytes(b"in progress")
    reopened = ResultsStore(directory, COLUMNS)
    assert temp_files(directory) == [live_name]
    # Tasks 0-2 and 3-5 (batches of three tasks), each with 1 + index % 3 rows: 6 keys.
    assert len(reopened.keys()) == 6
    (directory / live_name).unlink()


def test_sigkill_at_random_points_resumes_to_uninterrupted_rows(tmp_path, sweep_script):
    """Four SIGKILLs at seeded random instants, then a resume: rows equal an uninterrupted run."""
    reference = reference_frame(sweep_script, tmp_path / "reference")
    # 60 tasks with 1 + i % 3 rows: 20 * (1 + 2 + 3) = 120 rows, 60 keys.
    assert len(reference) == 120 and reference["task_key"].nunique() == 60
    by_key = {key: rows for key, rows in reference.groupby("task_key", sort=False)}

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
        store = ResultsStore(directory, COLUMNS)
        assert temp_files(directory) == []
        frame = store.frame()
        counts.append(frame["task_key"].nunique())
        # Every stored task has all its rows, equal to the reference rows of its key.
        for key, rows in frame.groupby("task_key", sort=False):
            pd.testing.assert_frame_equal(
                rows.reset_index(drop=True), by_key[key].reset_index(drop=True)
            )
    # Each killed process had at most 0.15 s of work while 60 tasks need >= 60 * 4 ms = 0.24 s,
    # so the first kill left the sweep unfinished; counts never decrease across resumes.
    assert counts[0] < 60
    assert counts == sorted(counts)

    final = start_sweep(sweep_script, directory)
    assert final.wait(timeout=60) == 0
    resumed = ResultsStore(directory, COLUMNS).frame()
    pd.testing.assert_frame_equal(resumed, reference)
    # pandas reads the same rows from the directory (in batch order; sort to compare).
    read = pd.read_parquet(directory).sort_values("task_key", kind="stable", ignore_index=True)
    pd.testing.assert_frame_equal(read, reference)
