"""The standard figures, drawn from tables, in one style.

Each function takes a tidy table (a DataFrame, or records that make one; the columns are in
its docstring) and returns a matplotlib Figure; with ``path`` it also writes it (``.svg`` or
``.png``, :func:`save`). The tables come from the results command's JSON, a sweep store or
the ``--json`` output of a command (:mod:`slolab.harness.figures`), or from a notebook's own
frames.

- :func:`attainment_vs_rate` -- attainment against arrival rate, one line per policy, with the
  target and each policy's capacity marked;
- :func:`latency_cdfs` -- TTFT and mean-TPOT CDFs per SLO tier, one line per policy, each
  tier's SLO marked (from quantiles: :func:`latency_quantiles`);
- :func:`gap_intervals` -- gaps to the optimum per method and instance size: a point where the
  optimum is proved, the ``[lower, upper]`` bar where it is not;
- :func:`cost_vs_traffic` -- a deployment plan's cost against traffic, one line per kind of
  fleet;
- :func:`pareto_front` -- the exact cost-attainment front and where each heuristic lands;
- :func:`predicted_vs_measured` -- predicted against measured iteration times.

One style for all (:data:`RC`): a colour, marker and line style per policy or method, the
same in every figure (:func:`styles`; the Okabe-Ito palette, with markers and dashes so that
a greyscale print still tells the lines apart), axes labelled with their units, legends
outside the data. matplotlib is imported when a figure is drawn (the ``dev`` and ``notebooks``
extras install it). SVGs are written deterministically (no date, a fixed hash salt, text kept
as text), so a figure drawn again from the same data is the same file.
"""

from __future__ import annotations

import contextlib
import functools
import math
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import pandas as pd

if TYPE_CHECKING:
    from slolab.instances.records import Instance
    from slolab.sim.outcome import Outcome

#: matplotlib settings of every figure (applied while it is drawn and saved).
RC: dict[str, Any] = {
    "font.size": 9,
    "axes.titlesize": 9,
    "figure.titlesize": 9,
    "axes.labelsize": 9,
    "legend.fontsize": 8,
    "xtick.labelsize": 8,
    "ytick.labelsize": 8,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "grid.color": "#dddddd",
    "grid.linewidth": 0.6,
    "lines.linewidth": 1.4,
    "lines.markersize": 5,
    "svg.fonttype": "none",
    "svg.hashsalt": "slolab",
    "path.simplify": True,
}

#: The Okabe-Ito colours (safe for colour-blind readers), black last.
PALETTE = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#999999", "#000000")
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
DASHES = ("-", "--", "-.", ":")

#: Fixed (colour, marker, dash) indices of the policies, methods and fleets the published
#: figures name, so each looks the same in every figure; other names get a style from their
#: name's checksum (:func:`styles`).
FIXED: dict[str, tuple[int, int, int]] = {
    "slos-serve": (1, 0, 0),
    "sarathi": (0, 1, 1),
    "vllm": (2, 2, 2),
    "polyserve": (3, 3, 2),
    "random": (6, 4, 3),
    "chunk": (4, 5, 1),
    "minimal": (5, 6, 2),
    "hyperflexis": (5, 6, 3),
    "hyperflexis-scaling": (5, 7, 1),
    "hyperflexis-pm": (5, 4, 2),
    "round-robin": (6, 1, 3),
    "scorpio-rr": (4, 2, 1),
    "sa-rr": (1, 3, 2),
    "sa": (1, 0, 0),
    "sjf": (0, 1, 1),
    "fcfs": (2, 2, 2),
    "edf": (4, 3, 3),
    "slide-batching": (1, 0, 0),
    "vllm-fcfs": (2, 2, 2),
    "sarathi-fcfs": (0, 1, 1),
    "sarathi-priority": (5, 5, 3),
    "fairbatching": (3, 3, 2),
    "weighted-vtc": (4, 6, 1),
    "mixed": (1, 0, 0),
    "single": (0, 1, 1),
    "optimum on capacities": (6, 2, 3),
    "disaggregated": (2, 3, 2),
    "front": (7, 0, 0),
}

#: Legend labels of marks rather than data (listed after the policies).
MARKS = ("stopped early (a bound)", "SLO", "SLO range", "predicted = measured")

#: Quantile levels of the latency CDFs: every 2.5 %, and 99 %.
LEVELS: tuple[float, ...] = tuple(sorted({round(k / 40, 3) for k in range(41)} | {0.99}))


@dataclass(frozen=True, slots=True)
class Style:
    """How one policy, method or fleet is drawn."""

    color: str
    marker: str
    linestyle: str

    def line(self) -> dict[str, Any]:
        """Keyword arguments of ``Axes.plot``."""
        return {"color": self.color, "marker": self.marker, "linestyle": self.linestyle}


def _style(index: tuple[int, int, int]) -> Style:
    c, m, d = index
    return Style(PALETTE[c % len(PALETTE)], MARKERS[m % len(MARKERS)], DASHES[d % len(DASHES)])


def styles(names: Iterable[str]) -> dict[str, Style]:
    """The style of each name: its fixed one (:data:`FIXED`), else one from its name's CRC-32
    (the same in every figure), moved on to the next free colour and marker when another name
    of the same figure holds it."""
    out: dict[str, Style] = {}
    ordered = list(dict.fromkeys(str(n) for n in names))
    taken = {FIXED[n][:2] for n in ordered if n in FIXED}
    for name in ordered:
        if name in FIXED:
            out[name] = _style(FIXED[name])
            continue
        k = zlib.crc32(name.encode())
        cells = len(PALETTE) * len(MARKERS)
        for step in range(cells):
            cell = (k + step) % cells
            pair = (cell % len(PALETTE), cell // len(PALETTE))
            if pair not in taken or step == cells - 1:
                taken.add(pair)
                out[name] = _style((*pair, k % len(DASHES)))
                break
    return out


# -- drawing and saving -------------------------------------------------------------------------


def _styled(draw: Callable[..., Any]) -> Callable[..., Any]:
    """Run a figure function under :data:`RC`, and save its figure when given ``path``."""

    @functools.wraps(draw)
    def wrapper(*args: Any, path: str | Path | None = None, **kwargs: Any) -> Any:
        import matplotlib

        with matplotlib.rc_context(cast(Any, RC)):
            fig = draw(*args, **kwargs)
        if path is not None:
            save(fig, path)
        return fig

    return wrapper


def save(fig: Any, path: str | Path, *, description: str | None = None) -> Path:
    """Write ``fig`` to ``path`` (``.svg`` or ``.png``), reproducibly: no date and a fixed
    creator in the metadata, the SVG's ids from a fixed salt, its text kept as text.
    ``description`` goes into the file's metadata (the data the figure was drawn from)."""
    import matplotlib

    path = Path(path)
    kind = path.suffix.lower().lstrip(".")
    if kind not in ("svg", "png"):
        raise ValueError(f"a figure is written as .svg or .png, got {path.name!r}")
    meta: dict[str, Any] = (
        {"Date": None, "Creator": "slolab"} if kind == "svg" else {"Software": "slolab"}
    )
    if description is not None:
        meta["Description"] = description
    path.parent.mkdir(parents=True, exist_ok=True)
    with matplotlib.rc_context(cast(Any, RC)):
        fig.savefig(path, format=kind, dpi=150, bbox_inches="tight", metadata=meta)
    return path


def _frame(table: pd.DataFrame | Iterable[Mapping[str, Any]], columns: Sequence[str], what: str):
    frame = table if isinstance(table, pd.DataFrame) else pd.DataFrame(list(table))
    if frame.empty:
        raise ValueError(f"the {what} table is empty")
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise ValueError(
            f"the {what} table lacks column(s) {missing}; it has {', '.join(map(str, frame))}"
        )
    return frame


def _panels(frame: pd.DataFrame, panel: str | None) -> list[tuple[str | None, pd.DataFrame]]:
    if panel is None or panel not in frame.columns:
        return [(None, frame)]
    return [(str(k), g) for k, g in frame.groupby(panel, sort=False)]


def _figure(ncols: int, nrows: int = 1, width: float | None = None, height: float = 2.8, **kw: Any):
    """A Figure of ``nrows`` x ``ncols`` panels (inches each; one panel alone is wider)."""
    from matplotlib.figure import Figure

    width = width or (4.4 if ncols == 1 else 3.3)
    fig = Figure(figsize=(width * ncols, height * nrows), layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False, **kw)
    return fig, axes


def _finish(fig: Any, axes: Any, ylabel: str | None, title: str | None) -> Any:
    """The common end of every figure: the first panel's y label, the title above all panels
    and one legend outside the data."""
    if ylabel is not None:
        axes[0, 0].set_ylabel(ylabel)
    if title:
        fig.suptitle(title)
    _legend(fig, axes)
    return fig


def _legend(fig: Any, axes: Any, title: str | None = None) -> None:
    """One legend for the figure, outside the data (right of the top-right panel)."""
    seen: dict[str, Any] = {}
    for ax in np.ravel(axes):
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            seen.setdefault(label, handle)
    # the policies first, then the marks (target, SLOs, bounds, diagonal)
    seen = dict(
        sorted(seen.items(), key=lambda item: item[0] in MARKS or item[0].startswith("target"))
    )
    if seen:
        top_right = np.atleast_2d(axes)[0, -1]
        top_right.legend(
            list(seen.values()),
            list(seen),
            title=title,
            loc="upper left",
            bbox_to_anchor=(1.02, 1.0),
            borderaxespad=0.0,
            frameon=False,
        )


def _plain_log(axis: Any) -> None:
    """Log scale with its ticks written as plain numbers (0.5, 2, 100), not powers."""
    from matplotlib.ticker import FuncFormatter, NullFormatter

    axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    axis.set_minor_formatter(NullFormatter())


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    with np.errstate(invalid="ignore", divide="ignore"):
        yield


# -- the figures --------------------------------------------------------------------------------


@_styled
def attainment_vs_rate(
    table: pd.DataFrame | Iterable[Mapping[str, Any]],
    *,
    target: float | None = None,
    capacities: pd.DataFrame | Iterable[Mapping[str, Any]] | None = None,
    panel: str | None = "panel",
    title: str | None = None,
) -> Any:
    """Attainment against arrival rate (req/s), one line per policy.

    ``table``: ``policy``, ``rate`` (req/s), ``attainment`` (fraction of requests meeting
    their SLOs); optionally ``bound`` (True for a probe stopped early: its attainment is the
    bound it proved, drawn hollow) and ``panel`` (one subplot per value). ``target``: a dashed
    line; ``capacities``: ``policy``, ``capacity`` (req/s) and optionally ``panel``, each a
    dotted drop line in its policy's style from the target to the axis.
    """
    frame = _frame(table, ("policy", "rate", "attainment"), "attainment")
    caps = None if capacities is None else _frame(capacities, ("policy", "capacity"), "capacity")
    panels = _panels(frame, panel)
    fig, axes = _figure(len(panels), sharey=True)
    style = styles(frame["policy"])
    for ax, (name, g) in zip(axes[0], panels, strict=True):
        for policy, gp in g.groupby("policy", sort=False):
            gp = gp.sort_values("rate")
            s = style[str(policy)]
            ax.plot(gp["rate"], gp["attainment"], label=str(policy), **s.line())
            if "bound" in gp and gp["bound"].fillna(False).astype(bool).any():
                b = gp[gp["bound"].fillna(False).astype(bool)]
                ax.plot(
                    b["rate"],
                    b["attainment"],
                    linestyle="none",
                    marker=s.marker,
                    markerfacecolor="white",
                    color=s.color,
                    label="_bound",
                )
                # one legend entry for every hollow marker
                ax.plot(
                    [],
                    [],
                    linestyle="none",
                    marker="o",
                    markerfacecolor="white",
                    color="#555555",
                    label="stopped early (a bound)",
                )
        if caps is not None:
            mine = (
                caps if name is None or panel not in caps else caps[caps[panel].astype(str) == name]
            )
            for _, c in mine.iterrows():
                s = style.get(str(c["policy"])) or styles([str(c["policy"])])[str(c["policy"])]
                top = target if target is not None else 1.0
                ax.plot(
                    [c["capacity"]] * 2,
                    [0.0, top],
                    color=s.color,
                    linestyle=":",
                    linewidth=1.0,
                    gid=f"capacity:{c['policy']}",
                    label="_capacity",
                )
        if target is not None:
            ax.axhline(
                target,
                color="#555555",
                linestyle="--",
                linewidth=1.0,
                label=f"target {target:g}",
                gid="target",
            )
        rates = g["rate"].to_numpy(dtype=float)
        if len(rates) and rates.min() > 0 and rates.max() / rates.min() > 8:
            ax.set_xscale("log")
            _plain_log(ax.xaxis)
        ax.set_xlabel("arrival rate (req/s)")
        ax.set_ylim(0.0, 1.02)
        if name is not None:
            ax.set_title(name)
    return _finish(fig, axes, "SLO attainment", title)


def latency_quantiles(
    instance: Instance,
    outcome: Outcome,
    *,
    policy: str,
    by: str = "tier",
    levels: Sequence[float] = LEVELS,
) -> pd.DataFrame:
    """The quantiles of TTFT and mean TPOT (s) per value of the workload column ``by``, the
    input of :func:`latency_cdfs`: ``policy``, ``tier``, ``metric`` (``ttft`` or ``tpot``),
    ``level``, ``value_s`` (None for a request that never got there: the CDF stops short of 1)
    and the tier's SLO range ``slo_lo_s``, ``slo_hi_s``. A request of one output token has no
    TPOT."""
    from slolab.sim import metrics

    wl = instance.workload
    if by not in wl:
        raise ValueError(f"the workload has no column {by!r}; columns: {', '.join(wl.columns)}")
    table = metrics.request_table(instance, outcome)
    groups = np.asarray(wl[by])
    out = np.asarray(wl["output_tokens"])
    finished = np.asarray(table["finished"], dtype=bool)
    ttft = np.where(np.isnan(table["ttft_s"]), np.inf, table["ttft_s"])
    tpot = np.where(finished, table["tpot_mean_s"], np.inf)
    rows = []
    for tier in sorted(set(groups.tolist())):
        mine = groups == tier
        for metric, values, slo in (
            ("ttft", ttft[mine], np.asarray(wl["ttft_slo_s"])[mine]),
            ("tpot", tpot[mine & (out > 1)], np.asarray(wl["tpot_slo_s"])[mine & (out > 1)]),
        ):
            if not len(values):
                continue
            with _quiet():
                q = np.quantile(values, levels, method="inverted_cdf")
            finite = slo[np.isfinite(slo)]
            for level, v in zip(levels, q, strict=True):
                rows.append(
                    {
                        "policy": policy,
                        "tier": tier,
                        "metric": metric,
                        "level": float(level),
                        "value_s": float(v) if math.isfinite(v) else None,
                        "slo_lo_s": float(finite.min()) if len(finite) else None,
                        "slo_hi_s": float(finite.max()) if len(finite) else None,
                    }
                )
    return pd.DataFrame(rows)


METRICS = {"ttft": "TTFT (ms)", "tpot": "mean TPOT (ms)"}


@_styled
def latency_cdfs(
    table: pd.DataFrame | Iterable[Mapping[str, Any]], *, title: str | None = None
) -> Any:
    """CDFs of TTFT (top row) and mean TPOT (bottom row), one column per SLO tier, one line
    per policy, from quantiles (``policy``, ``tier``, ``metric``, ``level``, ``value_s``;
    :func:`latency_quantiles`). With ``slo_lo_s``/``slo_hi_s``, each tier's SLO is marked: a
    dashed line when the tier has one value, a shaded band over its range otherwise."""
    frame = _frame(table, ("policy", "tier", "metric", "level", "value_s"), "latency")
    tiers = sorted(frame["tier"].unique().tolist(), key=lambda t: (str(type(t)), t))
    metrics_ = [m for m in METRICS if m in set(frame["metric"])]
    fig, axes = _figure(len(tiers), len(metrics_), width=2.6, height=2.3, sharey=True)
    style = styles(frame["policy"])
    for row, metric in enumerate(metrics_):
        for col, tier in enumerate(tiers):
            ax = axes[row, col]
            g = frame[(frame["metric"] == metric) & (frame["tier"] == tier)]
            for policy, gp in g.groupby("policy", sort=False):
                gp = gp[gp["value_s"].notna()].sort_values("level")
                s = style[str(policy)]
                ax.step(
                    1e3 * gp["value_s"].astype(float),
                    gp["level"],
                    where="post",
                    color=s.color,
                    linestyle=s.linestyle,
                    label=str(policy),
                )
            if {"slo_lo_s", "slo_hi_s"} <= set(g.columns) and g["slo_lo_s"].notna().any():
                lo, hi = 1e3 * float(g["slo_lo_s"].min()), 1e3 * float(g["slo_hi_s"].max())
                if hi > lo * (1 + 1e-9):
                    ax.axvspan(
                        lo,
                        hi,
                        color="#bbbbbb",
                        alpha=0.35,
                        linewidth=0,
                        label="SLO range",
                        gid="slo",
                    )
                else:
                    ax.axvline(
                        lo, color="#555555", linestyle="--", linewidth=1.0, label="SLO", gid="slo"
                    )
            if metric == "ttft":
                ax.set_xscale("log")
                _plain_log(ax.xaxis)
            ax.set_ylim(0.0, 1.02)
            ax.set_xlabel(METRICS[metric])
            if row == 0:
                ax.set_title(f"tier {tier}")
        axes[row, 0].set_ylabel("fraction of requests")
    return _finish(fig, axes, None, title)


@_styled
def gap_intervals(
    table: pd.DataFrame | Iterable[Mapping[str, Any]],
    *,
    size: str = "requests",
    size_label: str | None = None,
    panel: str | None = "panel",
    title: str | None = None,
) -> Any:
    """Gap to the optimum (%) per method and instance size: the mean over the table's rows of
    each (method, size), a point where the interval is one (the optimum proved), the
    ``[gap_lo, gap_hi]`` bar where it is not.

    ``table``: ``method``, ``gap_lo``, ``gap_hi`` (fractions) and the ``size`` column (numbers
    or labels, drawn as categories); optionally ``panel``. A compare table (with ``kind``)
    keeps its heuristics' rows.
    """
    frame = _frame(table, ("method", "gap_lo", "gap_hi", size), "gap")
    if "kind" in frame.columns:
        frame = frame[frame["kind"] == "heuristic"]
        if frame.empty:
            raise ValueError("the compare table has no heuristic rows")
    panels = _panels(frame, panel)
    fig, axes = _figure(len(panels), sharey=True)
    style = styles(frame["method"])
    methods = list(dict.fromkeys(frame["method"].astype(str)))
    for ax, (name, g) in zip(axes[0], panels, strict=True):
        sizes = sorted(g[size].unique().tolist(), key=lambda v: (str(type(v)), v))
        if all(isinstance(v, str) for v in sizes):
            sizes = list(dict.fromkeys(g[size]))
        width = 0.8 / max(len(methods), 1)
        for k, method in enumerate(methods):
            gm = g[g["method"].astype(str) == method]
            if gm.empty:
                continue
            agg = gm.groupby(size, sort=False)[["gap_lo", "gap_hi"]].mean()
            at = [s for s in sizes if s in agg.index]
            x = np.array([sizes.index(s) for s in at]) + (k - (len(methods) - 1) / 2) * width
            lo = 100 * agg.loc[at, "gap_lo"].to_numpy(dtype=float)
            hi = 100 * agg.loc[at, "gap_hi"].to_numpy(dtype=float)
            proved = np.isclose(lo, hi, rtol=0.0, atol=1e-7)
            s = style[method]
            ax.errorbar(
                x,
                np.where(proved, hi, (lo + hi) / 2),
                yerr=[(hi - lo) / 2, (hi - lo) / 2],
                color=s.color,
                marker=s.marker,
                linestyle="none",
                capsize=2.5,
                markevery=[int(i) for i in np.flatnonzero(proved)],
                label=method,
            )
        ax.axhline(0.0, color="#555555", linewidth=0.8)
        ax.set_xticks(range(len(sizes)), [str(v) for v in sizes])
        ax.set_xlabel(size_label or size)
        ax.grid(axis="x", visible=False)
        if name is not None:
            ax.set_title(name)
    return _finish(fig, axes, "gap to the optimum (%)", title)


@_styled
def cost_vs_traffic(
    table: pd.DataFrame | Iterable[Mapping[str, Any]],
    *,
    panel: str | None = "panel",
    title: str | None = None,
) -> Any:
    """A deployment's cost ($/h) against traffic (multiples of the trace's own rate), one line
    per kind of fleet (``fleet``: ``mixed``, ``single``, ``optimum on capacities``,
    ``disaggregated``, ...). ``table``: ``traffic``, ``fleet``, ``cost_per_hour`` (None or
    inf when no fleet met the target: no point); optionally ``panel``."""
    frame = _frame(table, ("traffic", "fleet", "cost_per_hour"), "cost")
    panels = _panels(frame, panel)
    fig, axes = _figure(len(panels))
    style = styles(frame["fleet"])
    for ax, (name, g) in zip(axes[0], panels, strict=True):
        for k, (fleet, gf) in enumerate(g.groupby("fleet", sort=False)):
            cost = pd.to_numeric(gf["cost_per_hour"], errors="coerce")
            gf = gf[np.isfinite(cost)].assign(cost_per_hour=cost).sort_values("traffic")
            # each later line's markers smaller, so equal costs stay visible one behind another
            ax.plot(
                gf["traffic"],
                gf["cost_per_hour"],
                label=str(fleet),
                markersize=max(8.0 - 1.8 * k, 3.0),
                **style[str(fleet)].line(),
            )
        levels = sorted(set(g["traffic"].astype(float)))
        ax.set_xticks(levels, [f"x{v:g}" for v in levels])
        ax.set_xlabel("traffic (multiple of the trace's own rate)")
        ax.set_ylim(bottom=0.0)
        if name is not None:
            ax.set_title(name)
    return _finish(fig, axes, "cost ($/h)", title)


@_styled
def pareto_front(
    front: pd.DataFrame | Iterable[Mapping[str, Any]],
    points: pd.DataFrame | Iterable[Mapping[str, Any]] | None = None,
    *,
    panel: str | None = "panel",
    title: str | None = None,
) -> Any:
    """The exact cost-attainment front (a step: the best attainment reachable at each cost)
    and, from ``points`` (``method``, ``cost_server_s``, ``attainment``), where each
    heuristic lands. ``front``: ``cost_server_s`` (server-seconds), ``attainment``;
    optionally ``panel`` (one window per subplot) in both."""
    frame = _frame(front, ("cost_server_s", "attainment"), "front")
    pts = (
        None
        if points is None
        else _frame(points, ("method", "cost_server_s", "attainment"), "point")
    )
    panels = _panels(frame, panel)
    fig, axes = _figure(len(panels), sharey=True)
    style = styles(["front", *([] if pts is None else pts["method"].astype(str))])
    for ax, (name, g) in zip(axes[0], panels, strict=True):
        g = g.sort_values("cost_server_s")
        ax.step(
            g["cost_server_s"],
            g["attainment"],
            where="post",
            label="exact front",
            **style["front"].line(),
        )
        if pts is not None:
            mine = pts if name is None or panel not in pts else pts[pts[panel].astype(str) == name]
            for method, gp in mine.groupby("method", sort=False):
                s = style[str(method)]
                ax.plot(
                    gp["cost_server_s"],
                    gp["attainment"],
                    linestyle="none",
                    marker=s.marker,
                    color=s.color,
                    label=str(method),
                )
            # past its dearest point the front stays at its best attainment
            right = float(mine["cost_server_s"].max()) if len(mine) else -math.inf
            last = g.iloc[-1]
            if right > float(last["cost_server_s"]):
                ax.plot(
                    [last["cost_server_s"], right],
                    [last["attainment"]] * 2,
                    color="#000000",
                    linestyle="-",
                    linewidth=1.0,
                    label="_front reach",
                    gid="front-reach",
                )
        ax.set_xlabel("cost (server-seconds)")
        ax.set_ylim(-0.02, 1.02)
        if name is not None:
            ax.set_title(name)
    return _finish(fig, axes, "SLO attainment", title)


@_styled
def predicted_vs_measured(
    table: pd.DataFrame | Iterable[Mapping[str, Any]],
    *,
    label: str = "label",
    title: str | None = None,
) -> Any:
    """Predicted against measured iteration times (ms, log-log), one marker set per value of
    ``label`` (a timing model, a GPU), with the diagonal where they agree. ``table``:
    ``measured_s``, ``predicted_s``, optionally ``label``."""
    frame = _frame(table, ("measured_s", "predicted_s"), "fidelity")
    groups = frame.groupby(label, sort=False) if label in frame.columns else [("", frame)]
    fig, axes = _figure(1, width=3.8, height=3.4)
    ax = axes[0, 0]
    names = [str(k) for k, _ in groups]
    style = styles(names)
    for name, g in groups:
        s = style[str(name)]
        ax.plot(
            1e3 * g["measured_s"],
            1e3 * g["predicted_s"],
            linestyle="none",
            marker=s.marker,
            color=s.color,
            markersize=3.5,
            alpha=0.8,
            label=str(name) or "_all",
        )
    both = 1e3 * pd.concat([frame["measured_s"], frame["predicted_s"]]).astype(float)
    lo, hi = float(both[both > 0].min()), float(both.max())
    ax.plot(
        [lo, hi],
        [lo, hi],
        color="#555555",
        linestyle="--",
        linewidth=1.0,
        label="predicted = measured",
        gid="diagonal",
    )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("measured iteration time (ms)")
    ax.set_ylabel("predicted iteration time (ms)")
    return _finish(fig, axes, None, title)
