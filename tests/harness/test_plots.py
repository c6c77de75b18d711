"""The harness plots draw what they are given and write PNG files."""

import numpy as np
import pandas as pd
import pytest
from slolab.harness.plots import attainment_vs_load, gap_vs_size, latency_cdfs
from slolab.heuristics.baselines import LeastLoaded, SarathiFCFS
from slolab.problems.serving import serving_instance
from slolab.sim import run

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_gap_vs_size_plots_mean_gap_per_method(tmp_path):
    """One line per heuristic; the y values are the mean upper gap in percent."""
    frame = pd.DataFrame(
        {
            "method": ["sa", "sa", "fcfs", "fcfs", "highs", "highs"],
            "kind": ["heuristic", "heuristic", "heuristic", "heuristic", "exact", "exact"],
            "requests": [6, 8, 6, 8, 6, 8],
            "gap_lo": [0.0, 0.1, 0.2, 0.4, 0.0, 0.0],
            "gap_hi": [0.0, 0.1, 0.2, 0.4, 0.0, 0.0],
        }
    )
    fig = gap_vs_size(frame, path=tmp_path / "gap.png")
    lines = {ln.get_label(): ln for ln in fig.axes[0].get_lines()}
    assert sorted(lines) == ["fcfs", "sa"]
    # fcfs: 100 * [0.2, 0.4] at sizes [6, 8]
    np.testing.assert_allclose(lines["fcfs"].get_ydata(), [20.0, 40.0])
    assert (tmp_path / "gap.png").read_bytes()[:8] == PNG_MAGIC


def test_attainment_vs_load_sorts_probes(tmp_path):
    """Probes are drawn in rate order, with the target as a dashed line."""
    fig = attainment_vs_load(
        {"sarathi": [(4.0, 0.8), (2.0, 0.95), (3.0, 0.9)]}, target=0.9, path=tmp_path / "a.png"
    )
    ln = fig.axes[0].get_lines()[0]
    np.testing.assert_allclose(ln.get_xdata(), [2.0, 3.0, 4.0])
    np.testing.assert_allclose(ln.get_ydata(), [0.95, 0.9, 0.8])
    assert (tmp_path / "a.png").read_bytes()[:8] == PNG_MAGIC


def test_latency_cdfs_one_curve_per_tier(tmp_path):
    """TTFT and TPOT CDFs have one step curve per tier, ending at 1."""
    inst = serving_instance("azure_conv_2023", seed=0, servers=1, limit=120)
    out = run(inst, SarathiFCFS(), LeastLoaded(), seed=0)
    fig = latency_cdfs(inst, out, by="tier", path=tmp_path / "cdf.png")
    tiers = sorted(set(np.asarray(inst.workload["tier"]).tolist()))
    for ax in fig.axes:
        curves = ax.get_lines()
        assert len(curves) == len(tiers)
        assert all(c.get_ydata()[-1] == 1.0 for c in curves)
    assert (tmp_path / "cdf.png").read_bytes()[:8] == PNG_MAGIC


def test_unknown_group_column_is_an_error():
    """Grouping by a missing column raises and lists the columns."""
    inst = serving_instance("azure_conv_2023", seed=0, servers=1, limit=20)
    out = run(inst, SarathiFCFS(), LeastLoaded(), seed=0)
    with pytest.raises(ValueError, match="no column 'nope'"):
        latency_cdfs(inst, out, by="nope")
