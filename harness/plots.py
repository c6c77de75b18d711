"""Standard plots of the harness (matplotlib), each optionally saved as PNG.

- :func:`gap_vs_size` — gap to the optimum against instance size, one line per method, from
  :func:`slolab.harness.compare.compare` tables (the interval's upper end, with the lower end
  shaded when they differ);
- :func:`attainment_vs_load` — attainment against arrival rate, from capacity-search probes;
- :func:`latency_cdfs` — empirical CDFs of TTFT and mean TPOT per tier, from one Outcome.

Every function returns the matplotlib Figure; with ``path`` it also writes a PNG there.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

if TYPE_CHECKING:
    from slolab.instances.records import Instance
    from slolab.sim.outcome import Outcome


def _figure(ncols: int = 1, width: float = 5.0, height: float = 3.5) -> tuple[Any, Any]:
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, ncols, figsize=(width * ncols, height), squeeze=False)
    return fig, axes[0]


def _save(fig: Any, path: str | Path | None) -> Any:
    if path is not None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=120, bbox_inches="tight")
    return fig


def gap_vs_size(frame: pd.DataFrame, size: str = "requests", path: str | Path | None = None) -> Any:
    """Mean gap (%) of each heuristic against ``size`` (a column of the compare table)."""
    if frame.empty:
        raise ValueError("the compare table is empty")
    missing = {"method", "kind", "gap_lo", "gap_hi", size} - set(frame.columns)
    if missing:
        raise ValueError(f"the compare table lacks column(s) {sorted(missing)}")
    heur = frame[frame["kind"] == "heuristic"]
    fig, (ax,) = _figure()
    for method, g in heur.groupby("method"):
        agg = g.groupby(size)[["gap_lo", "gap_hi"]].mean().sort_index()
        x = agg.index.to_numpy()
        ax.plot(x, 100 * agg["gap_hi"], marker="o", label=str(method))
        if not np.allclose(agg["gap_lo"], agg["gap_hi"], equal_nan=True):
            ax.fill_between(x, 100 * agg["gap_lo"], 100 * agg["gap_hi"], alpha=0.2)
    ax.set_xlabel(size)
    ax.set_ylabel("gap to optimum (%)")
    ax.legend()
    return _save(fig, path)


def attainment_vs_load(
    probes: Mapping[str, Sequence[tuple[float, float]]],
    target: float | None = None,
    path: str | Path | None = None,
) -> Any:
    """Attainment against arrival rate (req/s), one line per label, from capacity probes."""
    if not probes:
        raise ValueError("no probes to plot")
    fig, (ax,) = _figure()
    for label, pts in probes.items():
        arr = np.array(sorted(pts), dtype=float).reshape(-1, 2)
        ax.plot(arr[:, 0], arr[:, 1], marker="o", label=label)
    if target is not None:
        ax.axhline(target, color="grey", linestyle="--", linewidth=1, label=f"target {target:g}")
    ax.set_xlabel("arrival rate (req/s)")
    ax.set_ylabel("attainment")
    ax.set_ylim(0, 1.02)
    ax.legend()
    return _save(fig, path)


def latency_cdfs(
    instance: Instance, outcome: Outcome, by: str = "tier", path: str | Path | None = None
) -> Any:
    """Empirical CDFs of TTFT and mean TPOT (ms) per value of the workload column ``by``."""
    from slolab.sim import metrics

    wl = instance.workload
    if by not in wl:
        raise ValueError(f"the workload has no column {by!r}; columns: {', '.join(wl.columns)}")
    table = metrics.request_table(instance, outcome)
    groups = np.asarray(wl[by])
    fig, axes = _figure(ncols=2)
    for ax, column, label in (
        (axes[0], "ttft_s", "TTFT (ms)"),
        (axes[1], "tpot_mean_s", "mean TPOT (ms)"),
    ):
        values = table[column].to_numpy()
        for g in sorted(set(groups.tolist())):
            v = np.sort(values[(groups == g) & np.isfinite(values)]) * 1000.0
            if len(v):
                ax.step(v, np.arange(1, len(v) + 1) / len(v), where="post", label=f"{by} {g}")
        ax.set_xlabel(label)
        ax.set_ylabel("fraction of requests")
        ax.legend()
    return _save(fig, path)
