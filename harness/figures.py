"""Which standard figure is drawn from which data, and the ``slolab plot`` command.

Three kinds of source give the tables of :mod:`slolab.harness.plots`:

- the results command's JSON (``python -m slolab.benchmarks.results``: ``results-*.json``,
  ``docs/results/full.json``): each :class:`ResultFigure` of :data:`RESULT_FIGURES` reads one
  paper's ``figures`` and ``series`` and draws one file (:func:`draw_results`);
- a sweep store (``slolab sweep ... --store DIR``): its simulate, capacity, compare and deploy
  rows;
- the ``--json`` output of ``slolab capacity``, ``simulate``, ``compare`` and ``pareto``
  (several files are read as one table).

A figure of a new benchmark joins :data:`RESULT_FIGURES` with the function that reads its
paper's data (for example the fidelity benchmark's predicted and measured iteration times,
drawn by :func:`slolab.harness.plots.predicted_vs_measured`); a new kind of fleet joins the
deployment figure as rows of its ``traffic`` series with their own ``fleet`` name.

Every figure drawn from the results JSON carries, in its file's metadata, the paper, the run
(date and commit) and a SHA-256 of the paper's ``figures`` and ``series``
(:func:`provenance`): the docs test checks each figure a page shows against the JSON of the
same run.
"""

from __future__ import annotations

import argparse
import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
from slolab.harness import plots
from slolab.harness.output import add_output_flags

#: The figures ``slolab plot --figure`` draws, and the plot function of each.
KINDS: dict[str, Callable[..., Any]] = {
    "attainment-vs-rate": plots.attainment_vs_rate,
    "latency-cdf": plots.latency_cdfs,
    "gaps": plots.gap_intervals,
    "cost-vs-traffic": plots.cost_vs_traffic,
    "pareto": plots.pareto_front,
    "fidelity": plots.predicted_vs_measured,
}


# -- the results command's JSON -----------------------------------------------------------------


def _slos_serve_attainment(p: dict[str, Any]) -> dict[str, Any] | None:
    s, f = p.get("series", {}), p["figures"]
    if not s.get("probes"):
        return None
    table = pd.DataFrame(s["probes"])
    table["panel"] = [f"{r} replica{'s' if r != 1 else ''}" for r in table["replicas"]]
    caps = [
        {
            "policy": policy,
            "capacity": cap,
            "panel": f"{e['replicas']} replica" + ("s" if e["replicas"] != 1 else ""),
        }
        for e in f["capacity"]
        for policy, cap in e["capacity"].items()
    ]
    return {
        "table": table,
        "target": s["target"],
        "capacities": caps,
        "title": f"SLOs-Serve ChatBot scenario, first {f['requests']} Azure conversation requests",
    }


def _polyserve_attainment(p: dict[str, Any]) -> dict[str, Any] | None:
    s, f = p.get("series", {}), p["figures"]
    if not s.get("mooncake_probes"):
        return None
    long = f["mooncake_conversation"]
    return {
        "table": pd.DataFrame(s["mooncake_probes"]),
        "target": s["target"],
        "capacities": [{"policy": k, "capacity": v["capacity"]} for k, v in long.items()],
        "title": f"Long prompts: first {f['long_requests']:,} Mooncake conversation requests, "
        "8 servers",
    }


def _prefix_cache_attainment(p: dict[str, Any]) -> dict[str, Any] | None:
    s, f = p.get("series", {}), p["figures"]
    if not s.get("probes"):
        return None
    table = pd.DataFrame(s["probes"])
    return {
        "table": table,
        "target": s["target"],
        "capacities": [
            {"policy": f"caching {label}", "capacity": c[label]["capacity"], "panel": policy}
            for policy, c in f["capacity"].items()
            for label in ("off", "on")
        ],
        "title": f"Prefix caching: first {f['capacity_requests']:,} Mooncake conversation "
        f"requests, {f['servers']} servers, Poisson arrivals",
    }


def _colocated_latency(p: dict[str, Any]) -> dict[str, Any] | None:
    latency = p.get("series", {}).get("latency")
    if not latency or not latency["runs"]:
        return None
    rows = [
        {
            "policy": run["policy"],
            "tier": run["tier"],
            "metric": run["metric"],
            "level": level,
            "value_s": value,
            "slo_lo_s": run["slo_s"][0],
            "slo_hi_s": run["slo_s"][1],
        }
        for run in latency["runs"]
        for level, value in zip(latency["levels"], run["values_s"], strict=True)
    ]
    return {
        "table": pd.DataFrame(rows),
        "title": f"First {p['figures']['requests']:,} Azure conversation requests at "
        f"{latency['rate']:g} req/s, 2 servers, PolyServe's SLO tiers",
    }


def _sa_gaps(p: dict[str, Any]) -> dict[str, Any] | None:
    gaps = p.get("series", {}).get("gaps")
    if not gaps:
        return None
    table = pd.DataFrame(gaps)
    table["panel"] = [f"batch size B = {b}" for b in table["b"]]
    return {
        "table": table,
        "size": "n",
        "size_label": "queued requests N",
        "title": "SA ordering: gap of G to the optimum (HiGHS), mean over snapshots and seeds",
    }


def _proserve_gaps(p: dict[str, Any]) -> dict[str, Any] | None:
    rows = [w for w in p["figures"]["horizon"] if w["kind"] == "gap"]
    exact = {
        (w["load"], w["seed"]): w["objective"]
        for w in rows
        if w["method"] == "highs" and w["status"] == "OPTIMAL" and w["objective"]
    }
    table = [
        {"method": w["method"], "load": w["load"], "gap_lo": gap, "gap_hi": gap}
        for w in rows
        if w["method"] != "highs" and (w["load"], w["seed"]) in exact
        for gap in [1.0 - w["objective"] / exact[w["load"], w["seed"]]]
    ]
    if not table:
        return None
    sizes = sorted({w["n"] for w in rows})
    seeds = len({w["seed"] for w in rows})
    return {
        "table": pd.DataFrame(table),
        "size": "load",
        "size_label": f"load ({'/'.join(map(str, sizes))}-request windows, {seeds} seeds)",
        "title": "ProServe tdg-horizon: gap of the TDG to the proved optimum",
    }


def _fidelity(p: dict[str, Any]) -> dict[str, Any] | None:
    rows = p.get("series", {}).get("samples")
    if not rows:
        return None
    return {"table": pd.DataFrame(rows), "title": "iteration times: slolab against real serving"}


def _hyperflexis_pareto(p: dict[str, Any]) -> dict[str, Any] | None:
    rows = p.get("series", {}).get("front")
    if not rows:
        return None
    table = pd.DataFrame(rows)
    table["panel"] = [f"window {w}" for w in table["window"]]
    return {
        "front": table[table["method"] == "front"],
        "points": table[table["method"] != "front"],
        "title": "dispatch-scale windows of 4 requests: the exact front (HiGHS) and the heuristics",
    }


def _deployment_cost(p: dict[str, Any]) -> dict[str, Any] | None:
    rows = p.get("series", {}).get("traffic")
    if not rows:
        return None
    table = pd.DataFrame(rows)
    table["panel"] = [c.replace("/", ", ") for c in table["case"]]
    return {
        "table": table,
        "title": "The planner's fleets against traffic (first 200 requests, target 0.9)",
    }


@dataclass(frozen=True, slots=True)
class ResultFigure:
    """One figure drawn from one paper's part of the results JSON.

    ``name`` is the file's stem (``docs/results/NAME.svg``), ``kind`` a key of :data:`KINDS`,
    ``caption`` the text the pages show with it, and ``tables(paper)`` the plot function's
    arguments from the paper's data, or None when that data lacks what the figure needs (a
    JSON written before the figure's series existed).
    """

    name: str
    paper: str
    kind: str
    caption: str
    tables: Callable[[dict[str, Any]], dict[str, Any] | None]

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"kind must be one of {', '.join(KINDS)}, got {self.kind!r}")

    def available(self, data: dict[str, Any]) -> bool:
        """Whether ``data`` (the results JSON) has what this figure is drawn from."""
        paper = data["papers"].get(self.paper)
        return paper is not None and self.tables(paper) is not None

    def draw(self, data: dict[str, Any]) -> Any:
        """The figure (a matplotlib Figure) from ``data``."""
        args = self.tables(data["papers"][self.paper])
        if args is None:
            raise ValueError(f"the results data has no series for figure {self.name!r}")
        return KINDS[self.kind](**args)


RESULT_FIGURES: tuple[ResultFigure, ...] = (
    ResultFigure(
        "sa-ordering-gaps",
        "sa-ordering",
        "gaps",
        "Gap to the proved optimum per method and queue size (a bar where the optimum is not "
        "proved, a point where it is)",
        _sa_gaps,
    ),
    ResultFigure(
        "slos-serve-attainment",
        "slos-serve",
        "attainment-vs-rate",
        "Attainment against arrival rate, the capacity searches' probes; dotted: each "
        "capacity at the 90% target",
        _slos_serve_attainment,
    ),
    ResultFigure(
        "proserve-gaps",
        "proserve",
        "gaps",
        "Gap of each policy's TDG to the proved tdg-horizon optimum, by load",
        _proserve_gaps,
    ),
    ResultFigure(
        "polyserve-attainment",
        "polyserve",
        "attainment-vs-rate",
        "Long prompts: attainment against arrival rate, PolyServe against random routing",
        _polyserve_attainment,
    ),
    ResultFigure(
        "prefix-cache-attainment",
        "prefix_cache",
        "attainment-vs-rate",
        "Attainment against arrival rate with prefix caching off and on, Sarathi (least-loaded "
        "routing) and PolyServe; dotted: each capacity at the 90% target",
        _prefix_cache_attainment,
    ),
    ResultFigure(
        "hyperflexis-pareto",
        "hyperflexis",
        "pareto",
        "The exact cost-attainment front of dispatch-scale windows and where each heuristic lands",
        _hyperflexis_pareto,
    ),
    ResultFigure(
        "colocated-latency-cdf",
        "colocated",
        "latency-cdf",
        "TTFT and mean-TPOT distributions per SLO tier (dashed: the tier's TPOT SLO; grey: its "
        "TTFT SLO range)",
        _colocated_latency,
    ),
    ResultFigure(
        "fidelity",
        "fidelity",
        "fidelity",
        "Iteration times predicted against measured on real vLLM serving (log-log): the "
        "generated presets before calibration and the calibrated terms held out",
        _fidelity,
    ),
    ResultFigure(
        "deployment-cost",
        "deployment",
        "cost-vs-traffic",
        "Cost of the verified fleets against traffic (co-located mixed and single, and "
        "disaggregated where the full run planned it), and the MILP's optimum on the measured "
        "capacities",
        _deployment_cost,
    ),
)


def result_figures(data: dict[str, Any], paper: str | None = None) -> list[ResultFigure]:
    """The figures ``data`` can draw (of paper ``paper`` only, if given)."""
    return [f for f in RESULT_FIGURES if (paper in (None, f.paper)) and f.available(data)]


def data_digest(paper: dict[str, Any]) -> str:
    """SHA-256 (hex) of a paper's ``figures`` and ``series`` as canonical JSON."""
    part = {"figures": paper["figures"], "series": paper.get("series", {})}
    text = json.dumps(part, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def provenance(data: dict[str, Any], figure: ResultFigure, source: str) -> str:
    """The metadata line of ``figure`` drawn from ``data`` (read from ``source``): the paper,
    its run's date and commit, and :func:`data_digest` of its data."""
    header = data["header"]
    paper = json.loads(json.dumps(data["papers"][figure.paper]))
    run = paper.get("run", header)
    dirty = " (uncommitted changes)" if run.get("dirty") else ""
    return (
        f"slolab figure {figure.name} from {source}: paper {figure.paper}, "
        f"{header['profile']} profile, run {run['date_utc']} UTC at commit "
        f"{run['commit']}{dirty}; data sha256 {data_digest(paper)}"
    )


def draw_results(
    data: dict[str, Any],
    out: str | Path,
    *,
    source: str,
    formats: Sequence[str] = ("svg",),
    kinds: Sequence[str] | None = None,
) -> list[Path]:
    """Draw every figure ``data`` can draw (of ``kinds``, if given) into ``out`` as
    ``NAME.svg`` (and ``NAME.png`` with ``formats``); the files written."""
    written = []
    for figure in result_figures(data):
        if kinds is not None and figure.kind not in kinds:
            continue
        fig = figure.draw(data)
        for fmt in formats:
            written.append(
                plots.save(
                    fig,
                    Path(out) / f"{figure.name}.{fmt}",
                    description=provenance(data, figure, source),
                )
            )
    return written


# -- sweep stores and --json outputs ------------------------------------------------------------


def read_rows(sources: Sequence[str | Path]) -> pd.DataFrame:
    """The rows of sweep stores (directories) and ``--json`` outputs (files), as one table
    with ``task_kind`` set on every row (inferred for a command's own output) and ``source``
    (the file or directory's name)."""
    frames = []
    for source in sources:
        path = Path(source)
        if path.is_dir():
            from slolab.harness.sweep import open_store

            frame = open_store(path).frame()
            if "error" in frame:
                frame = frame[frame["error"].isna()]
        elif path.is_file():
            try:
                value = json.loads(path.read_text())
            except json.JSONDecodeError as error:
                raise ValueError(f"{path}: not JSON ({error.msg}, line {error.lineno})") from None
            if isinstance(value, dict) and "papers" in value and "header" in value:
                raise ValueError(
                    f"{path} is the results command's JSON; give it alone to draw its figures"
                )
            records = value if isinstance(value, list) else [value]
            if not all(isinstance(r, dict) for r in records):
                raise ValueError(f"{path}: expected a JSON object or a list of objects")
            frame = pd.DataFrame(records)
        else:
            raise ValueError(f"{path}: no such sweep store or JSON file")
        frame = frame.assign(source=path.name)
        if "task_kind" not in frame:
            frame["task_kind"] = [_kind_of(r) for r in frame.to_dict("records")]
        frames.append(frame)
    rows = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    if rows.empty:
        raise ValueError("the sources hold no rows")
    return rows


def _kind_of(row: Mapping[Any, Any]) -> str:
    """The kind of task a command's ``--json`` record comes from."""
    if "probes" in row and "capacity" in row:
        return "capacity"
    if "gap_hi" in row and "method" in row:
        return "compare"
    if "mixed_cost" in row:
        return "deploy"
    if "level" in row and "cost_server_s" in row:
        return "front"
    if "measured_s" in row and "predicted_s" in row:
        return "fidelity"
    if "attainment" in row and "policy" in row:
        return "simulate"
    return "unknown"


def _present(rows: pd.DataFrame, column: str) -> pd.Series:
    return rows[column] if column in rows else pd.Series([None] * len(rows), index=rows.index)


def _setting(rows: pd.DataFrame) -> list[str]:
    """A panel label per row: its trace and servers, when the rows hold several."""
    trace, servers = _present(rows, "trace").fillna(""), _present(rows, "servers")
    labels = [
        ", ".join(x for x in (str(t), "" if pd.isna(s) else f"{int(s)} servers") if x)
        for t, s in zip(trace, servers, strict=True)
    ]
    return labels if len(set(labels)) > 1 else [""] * len(labels)


def _probes(row: Mapping[Any, Any]) -> list[tuple[float, float, bool]]:
    probes = row["probes"]
    if isinstance(probes, str):
        probes = json.loads(probes)
    early = row.get("early")
    early = list(early) if isinstance(early, list | tuple) else [False] * len(probes)
    out = []
    for probe, bound in zip(probes, early + [False] * (len(probes) - len(early)), strict=False):
        rate, att = (probe["rate"], probe["attainment"]) if isinstance(probe, dict) else probe
        out.append((float(rate), float(att), bool(bound)))
    return out


def tables_from_rows(rows: pd.DataFrame, kind: str) -> dict[str, Any]:
    """The arguments of figure ``kind``'s plot function from store or ``--json`` rows."""
    by = rows.groupby("task_kind")
    have = set(by.groups)

    def need(*kinds: str) -> None:
        if not have & set(kinds):
            raise ValueError(
                f"figure {kind!r} is drawn from {' or '.join(kinds)} rows; the sources hold "
                f"{', '.join(sorted(map(str, have))) or 'none'}"
            )

    if kind == "attainment-vs-rate":
        need("simulate", "capacity")
        table, caps, targets = [], [], set()
        if "capacity" in have:
            cap = by.get_group("capacity")
            for row, panel in zip(cap.to_dict("records"), _setting(cap), strict=True):
                for rate, att, bound in _probes(row):
                    table.append(
                        {
                            "policy": row["policy"],
                            "rate": rate,
                            "attainment": att,
                            "bound": bound,
                            "panel": panel,
                        }
                    )
                caps.append({"policy": row["policy"], "capacity": row["capacity"], "panel": panel})
                if "target" in row and row["target"] == row["target"]:
                    targets.add(float(row["target"]))
        if "simulate" in have:
            sim = by.get_group("simulate")
            sim = sim[_present(sim, "rate").notna()]
            for row, panel in zip(sim.to_dict("records"), _setting(sim), strict=True):
                table.append(
                    {
                        "policy": row["policy"],
                        "rate": float(row["rate"]),
                        "attainment": float(row["attainment"]),
                        "panel": panel,
                    }
                )
        if not table:
            raise ValueError("no simulate row has a rate (give runs at set rates: --rate)")
        frame = pd.DataFrame(table)
        return {
            "table": frame,
            "capacities": caps or None,
            "target": targets.pop() if len(targets) == 1 else None,
            "panel": "panel" if frame["panel"].nunique() > 1 else None,
        }
    if kind == "gaps":
        need("compare")
        cmp = by.get_group("compare")
        cmp = cmp.assign(panel=_present(cmp, "problem").fillna(""))
        return {
            "table": cmp,
            "size": "requests",
            "size_label": "requests in the instance",
            "panel": "panel" if cmp["panel"].nunique() > 1 else None,
        }
    if kind == "cost-vs-traffic":
        need("deploy")
        dep = by.get_group("deploy")
        traffic = _present(dep, "traffic").fillna(1.0)
        case = [
            "/".join(str(v) for v in vals if v == v and v is not None)
            for vals in zip(
                _present(dep, "trace"), _present(dep, "model"), _present(dep, "gpus"), strict=True
            )
        ]
        table = [
            {"traffic": t, "fleet": fleet, "cost_per_hour": cost, "panel": c}
            for t, c, (_, r) in zip(traffic, case, dep.iterrows(), strict=True)
            for fleet, cost in (
                ("mixed", r.get("mixed_cost")),
                ("single", r.get("single_cost")),
                ("optimum on capacities", r.get("optimum_cost")),
            )
        ]
        frame = pd.DataFrame(table)
        return {"table": frame, "panel": "panel" if frame["panel"].nunique() > 1 else None}
    if kind == "pareto":
        need("front")
        front = by.get_group("front")
        points = None
        if "compare" in have:
            cmp = by.get_group("compare")
            points = cmp[(cmp["kind"] == "heuristic") & cmp["cost_server_s"].notna()]
        return {"front": front, "points": points, "panel": None}
    if kind == "fidelity":
        need("fidelity")
        return {"table": by.get_group("fidelity")}
    if kind == "latency-cdf":
        raise ValueError(
            "figure 'latency-cdf' is drawn from latency quantiles per tier, which only the "
            "results command's JSON records (store and --json rows carry percentiles only)"
        )
    raise ValueError(f"unknown figure {kind!r}; known: {', '.join(KINDS)}")


def drawable(rows: pd.DataFrame) -> list[str]:
    """The figures the rows can draw."""
    out = []
    for kind in KINDS:
        try:
            tables_from_rows(rows, kind)
        except ValueError:
            continue
        out.append(kind)
    return out


# -- slolab plot --------------------------------------------------------------------------------


def add_parser(sub: Any) -> argparse.ArgumentParser:
    """Register ``slolab plot`` on the CLI's subcommands."""
    p = sub.add_parser(
        "plot",
        help="draw the standard figures from a sweep store, --json outputs or results JSON",
        description="Draw the figures docs/results.md shows from your own data: a sweep store "
        "(directory), the --json output of capacity/simulate/compare/pareto (several files "
        "read as one table), or the results command's JSON (every figure it can draw).",
    )
    p.add_argument("sources", nargs="+", help="sweep store directories or JSON files")
    p.add_argument(
        "--figure",
        action="append",
        choices=list(KINDS),
        help="a figure to draw (repeatable; default: every one the data can draw)",
    )
    p.add_argument("-o", "--out", default=".", help="folder to write to (default: .)")
    p.add_argument(
        "--format",
        action="append",
        choices=["svg", "png"],
        help="file format (repeatable; default: svg)",
    )
    add_output_flags(p, json_help="print the files written as one JSON object", quiet=False)
    p.set_defaults(func=cmd_plot)
    return p


def cmd_plot(args: argparse.Namespace) -> int:
    """``slolab plot``: write each figure and print its path (``--json``: the paths as one
    object)."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise ValueError(
            "slolab plot needs matplotlib: pip install matplotlib (the dev extra has it)"
        ) from None
    written = _plot(args)
    if args.json:
        print(json.dumps({"figures": [str(path) for path in written]}))
    else:
        for path in written:
            print(path)
    return 0


def _plot(args: argparse.Namespace) -> list[Path]:
    formats = args.format or ["svg"]
    out = Path(args.out)
    if len(args.sources) == 1 and Path(args.sources[0]).is_file():
        try:
            value = json.loads(Path(args.sources[0]).read_text())
        except json.JSONDecodeError:
            value = None
        if isinstance(value, dict) and "papers" in value and "header" in value:
            source = Path(args.sources[0]).name
            written = draw_results(value, out, source=source, formats=formats, kinds=args.figure)
            if not written:
                raise ValueError(f"{args.sources[0]}: none of the figures asked for has its data")
            return written
    rows = read_rows(args.sources)
    kinds = args.figure or drawable(rows)
    if not kinds:
        raise ValueError(
            "the sources can draw no figure (kinds of rows: "
            f"{', '.join(sorted(map(str, rows['task_kind'].unique())))})"
        )
    names = ", ".join(str(s) for s in args.sources)
    written = []
    for kind in kinds:
        fig = KINDS[kind](**tables_from_rows(rows, kind))
        for fmt in formats:
            path = out / f"{kind}.{fmt}"
            written.append(plots.save(fig, path, description=f"slolab {kind} from {names}"))
    return written
