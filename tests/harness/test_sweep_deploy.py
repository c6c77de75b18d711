"""Deploy sweeps: the [[deploy]] grid, its checks, its rows on the local backend, resuming."""

import json
import math
import re
import textwrap
from pathlib import Path

import pandas as pd
import pytest
from slolab.harness import deploy
from slolab.harness.cli import main
from slolab.harness.sweep import SWEEP_COLUMNS, Backend, open_store, run_sweep
from slolab.harness.sweep_spec import SpecError, load_spec

SWEEPS_DOC = Path(__file__).resolve().parents[2] / "docs" / "sweeps.md"


def deploy_blocks() -> list[str]:
    """The ```toml blocks of docs/sweeps.md that hold a [[deploy]] table, in order."""
    blocks = re.findall(r"```toml\n(.*?)```", SWEEPS_DOC.read_text(), flags=re.S)
    return [block for block in blocks if "[[deploy]]" in block]


def write_spec(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "spec.toml"
    path.write_text(textwrap.dedent(text))
    return path


def test_docs_grid_expands_over_models_gpu_sets_and_traffic(tmp_path: Path) -> None:
    """The models x GPUs spec of docs/sweeps.md: one task per grid point, keys by content."""
    spec = load_spec(write_spec(tmp_path, deploy_blocks()[1]))
    # 2 models x 2 GPU sets x 1 TP set x 2 traffic levels = 8 tasks
    assert len(spec.tasks) == 8 and {t.kind for t in spec.tasks} == {"deploy"}
    assert len({t.key for t in spec.tasks}) == 8
    points = {
        (t.payload["model"], tuple(t.payload["gpus"]), t.payload["traffic"]) for t in spec.tasks
    }
    assert ("llama2-70b", ("h100",), 2.0) in points
    first = json.loads(spec.tasks[0].description)
    assert first["tps"] == [1, 2, 4, 8] and first["limit"] == 4000 and first["target"] == 0.9


def test_calibrated_presets_are_the_default_and_false_plans_on_the_profile_ones(
    tmp_path: Path,
) -> None:
    """Without the key a task plans on the calibrated presets; ``calibrated = false`` is
    another task (another key) on the profile-only presets."""
    body = '[[deploy]]\ntraces = ["azure_conv_2023"]\nmodels = ["llama2-7b"]\n'
    default = load_spec(write_spec(tmp_path, body)).tasks[0]
    profile = load_spec(write_spec(tmp_path, body + "calibrated = false\n")).tasks[0]
    assert default.payload["calibrated"] is True and profile.payload["calibrated"] is False
    assert default.key != profile.key


def test_prices_file_enters_the_key_by_name_and_content(tmp_path: Path) -> None:
    """The same prices file in two folders gives one key; other prices, another key."""
    body = (
        '[[deploy]]\ntraces = ["azure_conv_2023"]\nmodels = ["llama2-7b"]\ngpus = [["h100"]]\n'
        'prices = "p.csv"\n'
    )
    keys = []
    for folder, price in (("a", 1.5), ("b", 1.5), ("c", 2.5)):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "p.csv").write_text(f"gpu,usd_per_gpu_hour\nh100,{price}\n")
        keys.append(load_spec(write_spec(tmp_path / folder, body)).tasks[0].key)
    assert keys[0] == keys[1] != keys[2]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ('models = ["gpt-9"]\n', r"deploy\[0\]\.models\[0\] = 'gpt-9': unknown model 'gpt-9'"),
        (
            'models = ["llama2-7b"]\ngpus = [["h100", "tpu"]]\n',
            r"deploy\[0\]\.models\[0\] = 'llama2-7b': unknown GPU 'tpu'",
        ),
        (
            'models = ["llama2-7b"]\ngpus = ["h100"]\n',
            r"deploy\[0\]\.gpus\[0\] = 'h100': must be a non-empty list of str",
        ),
        ('models = ["llama2-7b"]\ntps = [[0, 2]]\n', r"deploy\[0\]\.tps\[0\] = \[0, 2\]: degrees"),
        ('models = ["llama2-7b"]\ntargets = [1.2]\n', r"deploy\[0\]\.targets\[0\] = 1.2"),
        ('models = ["llama2-7b"]\npolicy = "polyserve"\n', r"deploy\[0\]\.policy = 'polyserve'"),
        ('models = ["llama2-7b"]\nprices = "none.csv"\n', r"deploy\[0\]\.prices = 'none.csv'"),
        ('models = ["llama2-7b"]\nreplicas = 2\n', r"deploy\[0\]\.replicas = 2: unknown key"),
        (
            'models = ["llama2-7b"]\ncalibrated = "yes"\n',
            r"deploy\[0\]\.calibrated = 'yes': must be bool",
        ),
    ],
)
def test_bad_deploy_specs_fail_in_one_line(tmp_path: Path, body: str, message: str) -> None:
    """Each mistake in a [[deploy]] table is one SpecError line, before anything runs."""
    path = write_spec(tmp_path, '[[deploy]]\ntraces = ["azure_conv_2023"]\n' + body)
    with pytest.raises(SpecError, match=message) as error:
        load_spec(path)
    assert str(error.value).startswith(f"{path}: ") and "\n" not in str(error.value)


def test_deploy_sweep_rows_are_the_plans_and_a_rerun_adds_nothing(tmp_path: Path) -> None:
    """The 2-task example of docs/sweeps.md on two local workers: each row is the planner's
    report for its grid point; the same sweep again runs nothing."""
    spec = load_spec(write_spec(tmp_path, deploy_blocks()[0]))
    store_dir = tmp_path / "store"
    tally = run_sweep(spec, store_dir, Backend("local", workers=2), progress=False)
    assert (tally.tasks, tally.ran, tally.failed, tally.rows) == (2, 2, 0, 2)
    frame = open_store(store_dir).frame()
    assert list(frame.columns) == list(SWEEP_COLUMNS)
    assert (frame["task_kind"] == "deploy").all() and frame["error"].isna().all()
    for row in frame.to_dict("records"):
        gpus = row["gpus"].split(",")
        configurations, refused = deploy.configuration_names("llama2-7b", gpus, [1])
        instance = deploy.trace_instance("azure_conv_2023", configurations, limit=40, seed=0)
        expected = deploy.plan_deployment(
            instance, configurations, target=0.9, seed=0, refused=refused
        ).to_record()
        assert row["requests"] == 40 and row["configurations"] == len(gpus)
        assert json.loads(row["refused"]) == expected.pop("refused")
        # the two grid points share no capacity search (the second one's H100 searches start
        # from the A100's capacities); a solo run the other task measured first may be read
        assert row["capacity_reused"] == 0 and row["capacity_saved"] <= row["classes"]
        del expected["capacity_reused"], expected["capacity_saved"]
        for name, value in expected.items():
            assert row[name] == value or (math.isnan(row[name]) and math.isnan(value)), name
        # the verified fleets met the target in simulation
        assert row["mixed_met"] and row["mixed_attainment"] >= 0.9
        assert row["mixed_cost"] <= row["single_cost"]
    again = run_sweep(spec, store_dir, Backend("local", workers=2), progress=False)
    assert (again.stored_before, again.ran, again.rows) == (2, 0, 0)
    pd.testing.assert_frame_equal(open_store(store_dir).frame(), frame)


def test_unsupported_grid_point_is_an_error_row(tmp_path: Path, capsys) -> None:
    """A 70B model on A40s only: the data supports no configuration; the task is an error row
    naming why, and the sweep still exits 0."""
    path = write_spec(
        tmp_path,
        '[[deploy]]\ntraces = ["azure_conv_2023"]\nmodels = ["llama2-70b"]\n'
        'gpus = [["a40"]]\ntps = [[1]]\nlimit = 10\n',
    )
    store_dir = tmp_path / "store"
    assert main(["sweep", str(path), "--store", str(store_dir), "--workers", "1", "--quiet"]) == 0
    assert "1 run (1 failed)" in capsys.readouterr().out
    row = open_store(store_dir).frame().iloc[0]
    assert row["error_type"] == "ValueError"
    assert row["error"].startswith("the data supports no configuration of the grid")
    assert (row["model"], row["gpus"], row["tps"]) == ("llama2-70b", "a40", "1")


def test_grid_points_differing_in_prices_share_their_capacities(tmp_path: Path) -> None:
    """Two [[deploy]] tables that differ only in their prices file: the second task reads every
    capacity search and solo run of the first from the store's capacity cache, runs no
    capacity probe, and finds the same capacities (the same fleets; its costs in its prices)."""
    for name, price in (("a.csv", 1.0), ("b.csv", 3.0)):
        (tmp_path / name).write_text(f"gpu,usd_per_gpu_hour\nh100,{price}\n")
    table = 'traces = ["azure_conv_2023"]\nmodels = ["llama2-7b"]\ngpus = [["h100"]]\n'
    table += "tps = [[1]]\nlimit = 40\n"
    body = f'[[deploy]]\n{table}prices = "a.csv"\n\n[[deploy]]\n{table}prices = "b.csv"\n'
    spec = load_spec(write_spec(tmp_path, body))
    store_dir = tmp_path / "store"
    tally = run_sweep(spec, store_dir, Backend("local", workers=1), progress=False)
    assert (tally.ran, tally.failed) == (2, 0)
    frame = open_store(store_dir).frame().sort_values("single_cost")
    first, second = frame.to_dict("records")
    assert first["capacity_reused"] == 0 and first["capacity_saved"] == 0
    assert first["capacity_probes"] > 0
    # one configuration x the classes: every search read, with its probes and solo run saved
    assert second["capacity_reused"] == second["classes"] and second["capacity_probes"] == 0
    assert second["capacity_saved"] == first["capacity_probes"] + first["classes"]
    assert second["optimum_cost"] == pytest.approx(3.0 * first["optimum_cost"])
    assert second["mixed_fleet"] == first["mixed_fleet"]
    assert any((store_dir / "capacity-cache").iterdir())
