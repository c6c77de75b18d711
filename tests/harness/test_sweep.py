"""Sweeps: spec validation, task expansion and keys, rows, a LocalCluster run, kills and Ctrl-C."""

import json
import logging
import os
import random
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pandas as pd
import pytest
from slolab.harness.cli import main
from slolab.harness.compare import compare
from slolab.harness.serving import ServingSetup, simulate_summary
from slolab.harness.store import canonical_json, task_key
from slolab.harness.sweep import (
    SWEEP_COLUMNS,
    Backend,
    jobqueue_cluster,
    local_workers,
    open_store,
    run_sweep,
    run_task,
)
from slolab.harness.sweep_spec import JobqueueOptions, SpecError, load_spec
from slolab.instances import load_shipped

#: The sweeps page; its first toml block is the laptop example, its second the SLURM spec.
SWEEPS_DOC = Path(__file__).resolve().parents[2] / "docs" / "sweeps.md"

#: Columns that change from run to run (timings, host, time of day, tracebacks' paths).
VOLATILE = ["wall_s", "runtime_s", "finished_utc", "simulate_s", "host", "error_traceback"]


def write_spec(tmp_path, text, name="spec.toml"):
    """Write a spec file into the test's directory and return its path."""
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def stable(frame):
    """The frame without its volatile columns."""
    return frame.drop(columns=VOLATILE).reset_index(drop=True)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ('colour = "red"\n', r"colour = 'red': unknown key; known keys: name, store"),
        (
            '[[compare]]\ninstances = ["sa-azure-n6-b2"]\nmethods = ["sa", "nope"]\n',
            r"compare\[0\]\.methods\[1\] = 'nope': unknown method for problem 'sa-ordering'",
        ),
        (
            '[[compare]]\ninstances = ["no-such-instance"]\nmethods = ["sa"]\n',
            r"compare\[0\]\.instances\[0\] = 'no-such-instance': no instance file",
        ),
        (
            '[[compare]]\nbuilds = [{ problem = "sa-ordering", task = "poem" }]\nmethods = ["sa"]\n',
            r"compare\[0\]\.builds\[0\]\.task = 'poem': known: mixed, chat, code",
        ),
        (
            '[[compare]]\nbuilds = [{ problem = "sa-ordering", n = "8", batch_size = 4 }]\n'
            'methods = ["sa"]\n',
            r"compare\[0\]\.builds\[0\]\.n = '8': must be int",
        ),
        (
            '[[compare]]\nbuilds = [{ problem = "sa-ordering", n = 8, batch_size = 4, '
            'colour = 1 }]\nmethods = ["sa"]\n',
            r"compare\[0\]\.builds\[0\]\.colour = 1: unknown key",
        ),
        (
            '[[simulate]]\ntraces = ["azure_conv_2023"]\npolicies = ["fifo"]\n',
            r"simulate\[0\]\.policies\[0\] = 'fifo': known: .*vllm",
        ),
        (
            '[[simulate]]\ntraces = ["nowhere.csv"]\npolicies = ["sarathi"]\n',
            r"simulate\[0\]\.traces\[0\] = 'nowhere.csv': no trace file",
        ),
        (
            '[[simulate]]\ntraces = ["azure_conv_2023"]\npolicies = ["sarathi"]\nlimit = 2.5\n',
            r"simulate\[0\]\.limit = 2.5: must be int",
        ),
        (
            '[[simulate]]\ntraces = ["azure_conv_2023"]\npolicies = ["sarathi"]\n'
            'servers = "4..2"\n',
            r"simulate\[0\]\.servers = '4..2': needs 0 <= A <= B",
        ),
        (
            '[[capacity]]\ntraces = ["azure_conv_2023"]\npolicies = ["sarathi"]\ntarget = 1.5\n',
            r"capacity\[0\]\.target = 1.5: must be in \(0, 1\]",
        ),
        (
            '[run]\nthreads = 0\n[[compare]]\ninstances = ["sa-azure-n6-b2"]\nmethods = ["sa"]\n',
            r"run\.threads = 0: must be >= 1",
        ),
        ("[[compare]\n", r"not valid TOML"),
        ('name = "empty"\n', r"no tasks: add \[\[compare\]\]"),
    ],
)
def test_bad_specs_fail_in_one_line_naming_file_key_and_value(tmp_path, body, message):
    """Each mistake is one SpecError line naming the file, the key and the value."""
    path = write_spec(tmp_path, body)
    with pytest.raises(SpecError, match=message) as error:
        load_spec(path)
    text = str(error.value)
    assert text.startswith(f"{path}: ") and "\n" not in text


def test_cli_reports_spec_errors_before_running(tmp_path, capsys):
    """slolab sweep on a bad spec exits 2 with one line and creates no store."""
    path = write_spec(tmp_path, '[[compare]]\ninstances = ["sa-azure-n6-b2"]\nmethods = ["x"]\n')
    assert main(["sweep", str(path), "--store", str(tmp_path / "store")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"slolab: error: {path}: compare[0].methods[0]")
    assert not (tmp_path / "store").exists()


def test_cli_refuses_a_store_another_sweep_is_writing(tmp_path, capsys):
    """While another writer holds the store, slolab sweep exits 2 with one line."""
    path = write_spec(tmp_path, '[[compare]]\ninstances = ["sa-azure-n6-b2"]\nmethods = ["sa"]\n')
    with open_store(tmp_path / "store").writer():
        assert main(["sweep", str(path), "--store", str(tmp_path / "store"), "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is being written by another process" in err[0]


def test_grid_expands_and_keys_describe_what_runs(tmp_path):
    """Counts multiply along the axes; duplicates collapse; threads stay out of the key."""
    path = write_spec(
        tmp_path,
        """
        name = "grid"
        [run]
        threads = 2
        [[compare]]
        instances = ["sa-azure-n6-b2", "sa-azure-n6-b2"]
        builds = [{ problem = "sa-ordering", n = 6, batch_size = 2, seeds = "1..3" }]
        methods = ["sa", "fcfs"]
        seeds = [0, 1]
        time_limits = [5, 10]
        [[simulate]]
        traces = ["azure_conv_2023"]
        policies = ["sarathi", "vllm"]
        servers = "1..3"
        rates = [2.0, 4]
        limit = 50
        """,
    )
    spec = load_spec(path)
    kinds = [task.kind for task in spec.tasks]
    # compare: (1 shipped, listed twice + 3 builds) x 2 seeds x 2 limits = 4 * 4 = 16;
    # simulate: 1 trace x 2 policies x 3 servers x 1 seed x 2 rates = 12.
    assert kinds.count("compare") == 16 and kinds.count("simulate") == 12
    first = spec.tasks[0]
    # The key is the hash of the canonical description; time limits are floats (5 -> 5.0).
    described = {
        "kind": "compare",
        "instance": {"shipped": "sa-azure-n6-b2"},
        "methods": ["sa", "fcfs"],
        "seed": 0,
        "time_limit_s": 5.0,
    }
    assert first.description == canonical_json(described)
    assert first.key == task_key(described) and first.threads == 2
    assert spec.name == "grid" and spec.threads == 2
    # --threads overrides the file but leaves every key as it was.
    assert [task.key for task in load_spec(path, threads=1).tasks] == [
        task.key for task in spec.tasks
    ]


def test_instance_files_are_keyed_by_content_not_folder(tmp_path):
    """The same instance file in two folders gives one key; other bytes give another."""
    from slolab.instances import save_instance

    instance = load_shipped("sa-azure-n6-b2")
    keys = []
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
        save_instance(instance, tmp_path / folder / "inst.json")
        path = write_spec(
            tmp_path / folder, '[[compare]]\ninstances = ["inst.json"]\nmethods = ["sa"]\n'
        )
        keys.append(load_spec(path).tasks[0].key)
    assert keys[0] == keys[1]
    (tmp_path / "b" / "inst.json").write_text(
        (tmp_path / "b" / "inst.json").read_text().replace('"sa-azure-n6-b2"', '"renamed"')
    )
    assert load_spec(tmp_path / "b" / "spec.toml").tasks[0].key != keys[0]


def test_compare_task_rows_equal_compare_and_failures_become_rows(tmp_path):
    """A compare task's rows are compare()'s; an unbuildable instance gives error rows."""
    path = write_spec(
        tmp_path,
        """
        [[compare]]
        instances = ["sa-azure-n6-b2"]
        builds = [{ problem = "sa-ordering", n = 50000, batch_size = 4 }]
        methods = ["brute", "sa", "fcfs"]
        seeds = [3]
        time_limits = [20]
        """,
    )
    good, bad = load_spec(path).tasks
    rows = run_task(good)
    expected = compare(load_shipped("sa-azure-n6-b2"), ["brute", "sa", "fcfs"], seed=3)
    frame = pd.DataFrame(rows)
    assert frame["method"].tolist() == ["brute", "sa", "fcfs"]
    for column in ("objective", "gap_lo", "gap_hi", "optimum_lo", "optimum_hi", "status"):
        assert frame[column].tolist() == expected[column].tolist()
    assert frame["error"].isna().all() and (frame["violations"] == 0).all()
    assert (frame["task_key"] == good.key).all() and (frame["threads"] == 1).all()
    assert set(json.loads(rows[0]["versions"])) >= {"python", "numpy", "highspy", "dask"}
    failed = run_task(bad)
    # The chat half, 50000 - 50000 // 2 = 25000 requests within 2048 tokens, is more than the
    # conversation trace has.
    assert [row["method"] for row in failed] == ["brute", "sa", "fcfs"]
    assert all(row["error_type"] == "ValueError" for row in failed)
    assert "need 25000" in failed[0]["error"] and failed[0]["objective"] is None


def test_simulate_task_row_is_the_simulate_summary(tmp_path):
    """A simulate task's row carries simulate_summary's numbers and the set-up."""
    path = write_spec(
        tmp_path,
        """
        [[simulate]]
        traces = ["azure_code_2023"]
        policies = ["sarathi"]
        servers = [2]
        seeds = [4]
        limit = 60
        rates = [3.0]
        """,
    )
    (task,) = load_spec(path).tasks
    (row,) = run_task(task)
    summary = simulate_summary(
        ServingSetup("azure_code_2023", seed=4, servers=2, limit=60), rate=3.0
    )
    for column in ("attainment", "ttft_p99", "tokens_simulated", "cost_server_s", "end_s"):
        assert row[column] == summary[column]
    assert (row["trace"], row["policy"], row["servers"], row["rate"]) == (
        "azure_code_2023",
        "sarathi",
        2,
        3.0,
    )
    assert set(row) <= set(SWEEP_COLUMNS)
    # Every key simulate_summary reports has a column (wall_s is the task's own wall time).
    assert set(summary) - {"instance"} <= set(SWEEP_COLUMNS) | {"instance"}


def test_simulate_row_keeps_a_self_reporting_routers_figures(tmp_path):
    """A PolyServe simulate task stores its controller's router_* figures in router_report."""
    path = write_spec(
        tmp_path,
        """
        [[simulate]]
        traces = ["azure_code_2023"]
        policies = ["polyserve"]
        servers = [4]
        seeds = [0]
        limit = 40
        rates = [3.0]
        """,
    )
    (task,) = load_spec(path).tasks
    (row,) = run_task(task)
    assert row["error"] is None
    report = json.loads(row["router_report"])
    # one first routing decision per arriving request, each timed
    assert report["decisions"] >= 40
    assert report["arrival_decision_mean_s"] > 0


def test_local_workers_rule(caplog):
    """Workers default to cores // threads; oversubscribing is allowed but warned about."""
    # 8 cores: 1 thread -> 8 workers, 3 threads -> 2 (2 x 3 = 6 <= 8), 16 threads -> 1.
    assert [local_workers(None, t, cores=8) for t in (1, 3, 16)] == [8, 2, 1]
    with caplog.at_level(logging.WARNING, logger="slolab"):
        assert local_workers(4, 2, cores=4) == 4
    assert "4 workers x 2 threads = 8 exceeds the 4 cores" in caplog.text


def test_jobqueue_scripts_run_one_task_per_worker():
    """SLURM/PBS job scripts: cores // threads workers per job, each with cpus = threads."""
    options = JobqueueOptions(
        queue="normal",
        account="proj",
        cores=8,
        memory="32GB",
        walltime="02:00:00",
        job_extra_directives=("--constraint=cpu",),
        job_script_prologue=("module load python",),
    )
    cluster = jobqueue_cluster("slurm", options, threads=2)
    try:
        script = cluster.job_script()
    finally:
        cluster.close()
    for line in ("#SBATCH -p normal", "#SBATCH -A proj", "#SBATCH --cpus-per-task=8"):
        assert line in script
    assert "#SBATCH -t 02:00:00" in script and "#SBATCH --constraint=cpu" in script
    assert "module load python" in script
    # 8 cores / 2 threads = 4 workers, each declaring 2 cpus that every task asks for.
    assert "--nworkers 4" in script and "--resources cpus=2" in script
    pbs = jobqueue_cluster("pbs", options, threads=8)
    try:
        script = pbs.job_script()
    finally:
        pbs.close()
    # 8 cores / 8 threads = 1 worker per job (no --nworkers), running one 8-thread task.
    assert "#PBS -q normal" in script and "--nworkers" not in script
    assert "--nthreads 8" in script and "--resources cpus=8" in script
    with pytest.raises(ValueError, match="--jobqueue slurm needs memory, walltime"):
        jobqueue_cluster("slurm", JobqueueOptions(cores=4), threads=1)


SMALL_SWEEP = """
    name = "small"
    [run]
    batch_rows = 4
    batch_seconds = 0.2
    [[compare]]
    instances = ["sa-azure-n6-b2"]
    builds = [{ problem = "sa-ordering", n = 50000, batch_size = 4 }]
    methods = ["brute", "sa", "fcfs"]
    time_limits = [20]
    [[simulate]]
    traces = ["azure_code_2023"]
    policies = ["sarathi", "vllm"]
    servers = [1, 2]
    limit = 40
"""


def test_local_cluster_sweep_stores_every_row_once(tmp_path):
    """A 6-task sweep on a 2-worker LocalCluster: every row once, a failed task, a no-op rerun."""
    spec = load_spec(write_spec(tmp_path, SMALL_SWEEP))
    store_dir = tmp_path / "store"
    messages = []
    tally = run_sweep(
        spec, store_dir, Backend("local", workers=2), progress=False, echo=messages.append
    )
    # 2 compare tasks (3 rows each) + 4 simulate tasks (1 row each) = 10 rows; the
    # unbuildable snapshot is the one failed task.
    assert (tally.tasks, tally.ran, tally.failed, tally.rows, tally.not_run) == (6, 6, 1, 10, 0)
    frame = open_store(store_dir).frame()
    assert len(frame) == 10 and frame["task_key"].nunique() == 6
    assert sorted(frame["task_kind"].unique()) == ["compare", "simulate"]
    # pandas reads the directory as it is: the same rows.
    read = pd.read_parquet(store_dir).sort_values("task_key", kind="stable", ignore_index=True)
    pd.testing.assert_frame_equal(read, frame)
    # Rows computed on the workers equal rows computed here (stored the same way).
    with open_store(tmp_path / "here").writer() as writer:
        for task in spec.tasks:
            writer.append(run_task(task))
    pd.testing.assert_frame_equal(stable(open_store(tmp_path / "here").frame()), stable(frame))
    again = run_sweep(spec, store_dir, Backend("local", workers=2), progress=False)
    assert (again.stored_before, again.ran, again.rows) == (6, 0, 0)
    assert len(open_store(store_dir).frame()) == 10


def test_dask_backend_runs_on_a_scheduler_by_address(tmp_path):
    """--dask ADDRESS: the same rows on an already running LocalCluster; its dashboard is named."""
    from dask.distributed import LocalCluster

    spec = load_spec(
        write_spec(
            tmp_path,
            '[[compare]]\ninstances = ["sa-azure-n6-b2"]\nmethods = ["sa", "fcfs"]\nseeds = [0, 1]\n',
        )
    )
    messages = []
    with LocalCluster(
        n_workers=1, threads_per_worker=1, processes=True, dashboard_address=":0"
    ) as cluster:
        tally = run_sweep(
            spec,
            tmp_path / "store",
            Backend("dask", address=cluster.scheduler_address),
            progress=False,
            echo=messages.append,
        )
    # 2 seeds x 2 methods = 4 rows of 2 tasks, equal to rows computed here.
    assert (tally.ran, tally.rows, tally.failed) == (2, 4, 0)
    assert messages[0].startswith(f"dask scheduler {cluster.scheduler_address}; dashboard: ")
    with open_store(tmp_path / "here").writer() as writer:
        for task in spec.tasks:
            writer.append(run_task(task))
    pd.testing.assert_frame_equal(
        stable(open_store(tmp_path / "store").frame()),
        stable(open_store(tmp_path / "here").frame()),
    )


KILL_SWEEP = """
    name = "kills"
    [run]
    batch_rows = 6
    batch_seconds = 0.3
    [[compare]]
    instances = ["sa-azure-n6-b2"]
    methods = ["sa", "fcfs", "sjf"]
    seeds = "0..35"
"""


def start_cli_sweep(spec_path, store_dir, *extra):
    """Start `slolab sweep` in its own session (so a signal reaches it and its workers)."""
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "slolab.harness.cli",
            "sweep",
            str(spec_path),
            "--store",
            str(store_dir),
            "--workers",
            "1",
            "--quiet",
            *extra,
        ],
        start_new_session=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_for_batches(store_dir, process, count=1, timeout_s=120.0):
    """Wait until the store holds ``count`` batch files (or the sweep ended)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and process.poll() is None:
        if store_dir.is_dir() and len(list(store_dir.glob("part-*.parquet"))) >= count:
            return
        time.sleep(0.02)


def test_sweep_killed_at_random_instants_resumes_to_uninterrupted_rows(tmp_path):
    """Three SIGKILLs of the whole sweep (client and workers), a resume: rows equal a clean run."""
    spec_path = write_spec(tmp_path, KILL_SWEEP)
    # The uninterrupted rows, computed here task by task and stored the same way.
    with open_store(tmp_path / "clean").writer() as writer:
        for task in load_spec(spec_path).tasks:
            writer.append(run_task(task))
    reference = stable(open_store(tmp_path / "clean").frame())
    # 36 seeds x 3 methods = 108 rows of 36 tasks.
    assert len(reference) == 108 and reference["task_key"].nunique() == 36
    by_key = {key: rows for key, rows in reference.groupby("task_key", sort=False)}

    store_dir = tmp_path / "killed"
    rng = random.Random(1407)
    counts = []
    for _ in range(3):
        process = start_cli_sweep(spec_path, store_dir)
        wait_for_batches(store_dir, process, count=len(counts) + 1)
        time.sleep(rng.uniform(0.0, 0.4))
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=60)
        frame = stable(open_store(store_dir).frame())
        assert not [name for name in os.listdir(store_dir) if name.endswith(".tmp")]
        counts.append(frame["task_key"].nunique())
        for key, rows in frame.groupby("task_key", sort=False):
            pd.testing.assert_frame_equal(
                rows.reset_index(drop=True), by_key[key].reset_index(drop=True)
            )
    # The first kill came after the first batch (>= 2 tasks of 3 rows) and before the end.
    assert 0 < counts[0] < 36 and counts == sorted(counts)
    final = start_cli_sweep(spec_path, store_dir)
    out, err = final.communicate(timeout=300)
    assert final.returncode == 0, err
    assert f"{counts[-1]} already stored" in out
    pd.testing.assert_frame_equal(stable(open_store(store_dir).frame()), reference)


def test_ctrl_c_stops_with_one_line_and_keeps_the_store(tmp_path):
    """SIGINT to the sweep's process group (a terminal's Ctrl-C): exit 130, one line, store whole."""
    spec_path = write_spec(tmp_path, KILL_SWEEP)
    store_dir = tmp_path / "store"
    process = start_cli_sweep(spec_path, store_dir)
    wait_for_batches(store_dir, process)
    os.killpg(process.pid, signal.SIGINT)
    out, err = process.communicate(timeout=60)
    assert process.returncode == 130, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("slolab: interrupted: ")
    assert lines[0].endswith("run the same command to resume")
    stored = open_store(store_dir).frame()
    # Whole tasks only (3 rows each), at least the first batch's, and the lock is free again.
    assert len(stored) == 3 * stored["task_key"].nunique() > 0
    assert not [name for name in os.listdir(store_dir) if name.endswith(".tmp")]
    with open_store(store_dir).writer() as writer:
        assert writer.keys == set(stored["task_key"])


def doc_toml_blocks():
    """The ```toml blocks of docs/sweeps.md, in order."""
    return re.findall(r"```toml\n(.*?)```", SWEEPS_DOC.read_text(), flags=re.S)


def test_docs_example_runs_and_a_rerun_adds_nothing(tmp_path, capsys):
    """The example that opens docs/sweeps.md runs; the same command again adds no rows."""
    spec_path = tmp_path / "spec.toml"
    spec_path.write_text(doc_toml_blocks()[0])
    store_dir = tmp_path / "demo"
    assert main(["sweep", str(spec_path), "--store", str(store_dir), "--quiet"]) == 0
    # 4 SA snapshots x 3 methods + 2 admission calls x 2 methods + 2 policies x 2 server
    # counts = 12 + 4 + 4 = 20 rows of 4 + 2 + 4 = 10 tasks.
    assert capsys.readouterr().out.startswith(
        f"sweep laptop-demo: 10 tasks; 0 already stored, 10 run (0 failed); 20 rows added to "
        f"{store_dir} in "
    )
    rows = pd.read_parquet(store_dir)
    assert len(rows) == 20 and rows["error"].isna().all()
    exact = rows[rows["kind"] == "exact"]
    assert (exact["status"] == "OPTIMAL").all() and (exact["gap_hi"] == 0).all()
    assert main(["sweep", str(spec_path), "--store", str(store_dir), "--quiet"]) == 0
    assert capsys.readouterr().out.strip() == (
        f"sweep laptop-demo: all 10 tasks already stored in {store_dir}; no rows added"
    )


def test_docs_slurm_spec_loads_and_makes_its_job_script(tmp_path):
    """The SLURM spec of docs/sweeps.md is valid and gives the job script it describes."""
    spec = load_spec(write_spec(tmp_path, doc_toml_blocks()[1]))
    # 500 snapshots x 2 time limits = 1000 tasks of 6 methods, 4 threads each.
    assert len(spec.tasks) == 1000 and spec.threads == 4 and spec.jobqueue.jobs == 8
    cluster = jobqueue_cluster("slurm", spec.jobqueue, spec.threads)
    try:
        script = cluster.job_script()
    finally:
        cluster.close()
    # 32 cores // 4 threads = 8 workers per job, each running one 4-thread task.
    assert "#SBATCH -p compute" in script and "#SBATCH -A my-project" in script
    assert "--nworkers 8" in script and "--resources cpus=4" in script
    assert "module load python/3.11" in script


def test_jobqueue_import_keeps_ctrl_c_a_keyboard_interrupt(monkeypatch):
    """dask-jobqueue's import sets SIGINT to sys.exit; the sweep puts the previous handler back."""
    import signal
    import sys

    from slolab.harness.sweep import _jobqueue_classes

    for name in [m for m in sys.modules if m == "dask_jobqueue" or m.startswith("dask_jobqueue.")]:
        monkeypatch.delitem(sys.modules, name)
    before = signal.getsignal(signal.SIGINT)
    pbs, slurm = _jobqueue_classes()
    assert (pbs.__name__, slurm.__name__) == ("PBSCluster", "SLURMCluster")
    # the module was imported afresh (its runner ran), and SIGINT is still what it was
    assert "dask_jobqueue.runner" in sys.modules
    assert signal.getsignal(signal.SIGINT) is before
