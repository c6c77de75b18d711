"""The ``slolab`` command line.

Commands: ``simulate`` (a trace under a scheduler), ``instance build`` (write an instance
file), ``instances`` (list shipped instances), ``presets`` (list timing presets), ``solve``
(an exact model), ``compare`` (heuristics vs optimum), ``capacity`` (largest rate meeting an
attainment target), ``sweep`` (a grid of tasks from a TOML spec, on Dask: see
:mod:`slolab.harness.sweep`), ``plan`` (fewest servers meeting a target per scheduler: see
:mod:`slolab.harness.plan`). Bad input gives a one-line error and exit status 2.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

_EPILOG = "Run 'slolab COMMAND --help' for the options of a command."


def _json_default(value: Any) -> Any:
    if hasattr(value, "item"):
        return value.item()
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def _clean(value: Any) -> Any:
    """NaN and infinities become null so the JSON is standard."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_clean(v) for v in value]
    if hasattr(value, "item") and not isinstance(value, str | bytes):
        return _clean(value.item())
    return value


def _print_json(obj: Any) -> None:
    print(json.dumps(_clean(obj), default=_json_default, indent=None))


def _load_instance(ref: str):
    from slolab.instances import load_instance, load_shipped

    if Path(ref).exists():
        return load_instance(ref)
    return load_shipped(ref)


def _add_serving_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "trace",
        help="trace file, or the name of a vendored trace (azure_conv_2023, azure_code_2023, arxiv_summarization, mooncake_conversation)",
    )
    p.add_argument(
        "--format",
        default=None,
        help="trace format: azure, mooncake, lengths, generic (default: detected)",
    )
    p.add_argument(
        "--servers",
        "--replicas",
        dest="servers",
        type=int,
        default=1,
        help="number of servers (model replicas) (default: 1)",
    )
    p.add_argument(
        "--timing",
        default="llama2-7b-h100",
        help="timing preset (see 'slolab presets') (default: llama2-7b-h100)",
    )
    p.add_argument(
        "--slos",
        default=None,
        help="SLO scheme: polyserve, proserve, slos-serve, sa, hyperflexis, none "
        "(default: slos-serve with --scenario, else polyserve)",
    )
    p.add_argument(
        "--token-budget",
        default="auto",
        help="sarathi/edf tokens per iteration: an integer, or auto = the largest batch that "
        "fits the tightest TPOT SLO under the timing model, as Sarathi-Serve configures it "
        "(default: auto)",
    )
    p.add_argument(
        "--limit", type=int, default=None, help="use only the first N requests of the trace"
    )
    p.add_argument(
        "--seed",
        type=int,
        default=0,
        help="seed of every random choice (SLO draws, random routing) (default: 0)",
    )
    p.add_argument(
        "--mode",
        default="colocated",
        choices=["colocated", "static", "disaggregated"],
        help="serving mode (default: colocated)",
    )
    p.add_argument(
        "--prefill-servers", type=int, default=0, help="disaggregated: servers in the prefill pool"
    )
    p.add_argument(
        "--kv-capacity",
        type=int,
        default=200_000,
        help="KV-cache capacity per server in tokens (default: 200000)",
    )
    p.add_argument(
        "--max-batch-tokens",
        type=int,
        default=2048,
        help="token budget per iteration (default: 2048)",
    )
    p.add_argument(
        "--max-batch-size",
        type=int,
        default=256,
        help="most sequences per iteration (default: 256)",
    )
    p.add_argument(
        "--router",
        default="least-loaded",
        help="router: round-robin, random, least-loaded (default: least-loaded)",
    )
    p.add_argument(
        "--policy",
        default="sarathi",
        help="scheduler: vllm, sarathi, edf, slos-serve (default: sarathi)",
    )
    p.add_argument(
        "--scenario",
        default=None,
        help="with --slos slos-serve: chatbot, coder, summarizer or mixed (its Table 1)",
    )
    p.add_argument(
        "--slack",
        default=None,
        choices=["tight", "loose"],
        help="with --slos slos-serve: tight (TTFT 3x zero-load, TPOT 50 ms) or loose (5x, 100 ms)",
    )


def cmd_simulate(a: argparse.Namespace) -> int:
    from slolab.harness.serving import ServingSetup, simulate_summary

    s = simulate_summary(
        ServingSetup.from_namespace(a), a.rate, progress=not a.json and not a.quiet
    )
    if a.json:
        _print_json(s)
    else:
        keys = [
            "instance",
            "policy",
            "servers",
            "requests",
            "finished",
            "attainment",
            "attainment_ttft+mean-tpot",
            "ttft_p50",
            "ttft_p99",
            "tpot_p50",
            "tpot_p99",
            "e2e_mean",
            "tdg_ratio",
            "tokens_simulated",
            "iterations",
            "preemptions",
            "utilization",
            "simulate_s",
            "wall_s",
        ]
        width = max(len(k) for k in keys)
        for k in keys:
            v = s[k]
            print(f"{k:<{width}}  {v:.4g}" if isinstance(v, float) else f"{k:<{width}}  {v}")
    return 0


def cmd_instance_build(a: argparse.Namespace) -> int:
    import numpy as np
    from slolab.harness.build import (
        sa_snapshot,
        serving_instance,
        slos_snapshot,
        slos_snapshots_from_simulation,
    )
    from slolab.instances import save_instance

    if a.problem == "sa-ordering":
        chat: str | None = "azure_conv_2023"
        code: str | None = "azure_code_2023"
        if a.trace:
            stem = Path(a.trace).stem.lower()
            chat, code = (None, a.trace) if "code" in stem else (a.trace, None)
            if a.task == "mixed":
                raise ValueError(
                    "--task mixed needs the two default traces; drop --trace or give --task chat|code"
                )
        if a.task == "chat":
            code = None
        elif a.task == "code":
            chat = None
        inst = sa_snapshot(
            a.n,
            a.batch,
            seed=a.seed,
            chat_trace=chat,
            code_trace=code,
            timing=a.timing or "sa-qwen2.5-7b-v100",
        )
    elif a.problem == "slos-admission" and a.from_simulation:
        calls = slos_snapshots_from_simulation(
            a.scenario,
            seed=a.seed,
            n=a.n,
            rate=a.rate,
            timing=a.timing or "opt-13b-h100-slos",
            slack=a.slack,
        )
        if not calls:
            raise ValueError(
                "the simulation made no scheduler call with new requests; raise --n or --rate"
            )

        def distance(c):
            running = int(np.asarray(c.workload["running"]).sum())
            return abs(c.n_requests - running - a.new) + abs(running - a.running)

        inst = min(calls, key=distance)
    elif a.problem == "slos-admission":
        inst = slos_snapshot(
            a.trace or "azure_conv_2023",
            new=a.new,
            running=a.running,
            seed=a.seed,
            format=a.format,
            timing=a.timing or "opt-13b-h100-slos",
            scenario=a.scenario,
            slack=a.slack,
        )
    elif a.problem == "serving":
        if not a.trace:
            raise ValueError("--trace is required for --problem serving")
        inst = serving_instance(
            a.trace,
            seed=a.seed,
            format=a.format,
            servers=a.servers,
            timing=a.timing or "llama2-7b-h100",
            slos=a.slos,
            limit=a.n,
            rate=a.rate,
        )
    else:
        raise ValueError(
            f"unknown problem {a.problem!r}; known: serving, sa-ordering, slos-admission"
        )
    path = save_instance(inst, a.output)
    if a.json:
        _print_json(
            {
                "instance": inst.name,
                "problem": inst.problem,
                "requests": inst.n_requests,
                "path": str(path),
            }
        )
    else:
        print(f"wrote {path} ({inst.problem}, {inst.n_requests} requests, name {inst.name})")
    return 0


def cmd_instances(a: argparse.Namespace) -> int:
    from slolab.instances import load_manifest

    rows = load_manifest()
    if a.json:
        _print_json(rows)
        return 0
    for r in rows:
        known = r.get("known", {})
        opt = known.get("optimum", known.get("objective", ""))
        print(
            f"{r['name']:<36} {r.get('problem', ''):<15} {r.get('requests', ''):>6}  optimum={opt}  {r.get('source', '')}"
        )
    return 0


def cmd_presets(a: argparse.Namespace) -> int:
    from slolab.timing import available_presets, preset_source

    rows = [{"name": n, "source": preset_source(n)} for n in available_presets()]
    if a.json:
        _print_json(rows)
    else:
        for r in rows:
            print(f"{r['name']:<26} {r['source']}")
    return 0


def cmd_solve(a: argparse.Namespace) -> int:
    from slolab.harness.compare import objective
    from slolab.harness.methods import DEFAULT_MODEL
    from slolab.sim import check, replay
    from slolab.solvers import build_model, solve

    inst = _load_instance(a.instance)
    model_name = a.model or DEFAULT_MODEL.get(inst.problem)
    if model_name is None:
        raise ValueError(f"instance problem {inst.problem!r} has no default model; give --model")
    res = solve(
        build_model(model_name, inst),
        solver=a.solver,
        time_limit=a.time_limit,
        threads=a.threads,
        seed=a.seed,
    )
    rec = res.to_record()
    rec["instance"] = inst.name
    rec["runtime_s"] = res.runtime_s
    if res.schedule is not None:
        out = replay(inst, res.schedule)
        rec["replayed_objective"] = objective(inst, out)
        rec["violations"] = len(check(inst, out))
    if a.json:
        _print_json(rec)
    else:
        width = max(len(k) for k in rec)
        for k, v in rec.items():
            print(f"{k:<{width}}  {v:.6g}" if isinstance(v, float) else f"{k:<{width}}  {v}")
    return 0


def cmd_compare(a: argparse.Namespace) -> int:
    from slolab.harness.compare import compare

    inst = _load_instance(a.instance)
    methods = [m.strip() for m in a.methods.split(",") if m.strip()]
    frame = compare(
        inst,
        methods,
        seed=a.seed,
        time_limit=a.time_limit,
        threads=a.threads,
        progress=not a.json and not a.quiet,
    )
    if a.json:
        _print_json(frame.to_dict(orient="records"))
        return 0
    cols = [
        "method",
        "kind",
        "status",
        "objective",
        "gap_lo",
        "gap_hi",
        "attainment",
        "mean_latency_s",
        "runtime_s",
        "violations",
    ]
    print(
        f"instance {inst.name} ({inst.problem}, {inst.n_requests} requests); optimum in "
        f"[{frame['optimum_lo'].iloc[0]:.6g}, {frame['optimum_hi'].iloc[0]:.6g}]"
    )
    print(
        frame[[c for c in cols if c in frame.columns]].to_string(
            index=False, float_format=lambda v: f"{v:.6g}"
        )
    )
    return 0


def cmd_capacity(a: argparse.Namespace) -> int:
    from slolab.harness.serving import ServingSetup, capacity_search

    res, trace_rate = capacity_search(
        ServingSetup.from_namespace(a),
        target=a.target,
        definition=a.definition,
        start_rate=a.start_rate,
        rel_tol=a.rel_tol,
        max_probes=a.max_probes,
        progress=not a.json and not a.quiet,
    )
    rec = res.to_dict()
    rec["probes"] = [{"rate": rate, "attainment": att} for rate, att in res.probes]
    rec.update(
        {
            "policy": a.policy,
            "servers": a.servers,
            "trace_rate": trace_rate,
            "definition": a.definition,
        }
    )
    if a.json:
        _print_json(rec)
    else:
        print(
            f"capacity {rec['capacity']:.4g} req/s at {a.target:.0%} {a.definition} attainment "
            f"({a.policy}, {a.servers} server{'s' if a.servers != 1 else ''}; {len(rec['probes'])} probes)"
        )
        for p in rec["probes"]:
            print(f"  rate {p['rate']:.4g} req/s -> attainment {p['attainment']:.4f}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="slolab",
        description="Exact models, faithful heuristics and one token-level engine for multi-SLO LLM serving.",
        epilog=_EPILOG,
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress details")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser(
        "simulate",
        help="simulate a trace under a scheduler and print metrics",
        description="Simulate a real trace on a cluster under a baseline scheduler; prints attainment, TTFT/TPOT percentiles and engine speed.",
    )
    _add_serving_args(p)
    p.add_argument(
        "--rate",
        type=float,
        default=None,
        help="rescale the trace to this mean arrival rate (req/s), keeping its burstiness",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_simulate)

    p = sub.add_parser(
        "instance",
        help="build instance files",
        description="Build instance files from real traces.",
    )
    isub = p.add_subparsers(dest="instance_command", metavar="ACTION")
    b = isub.add_parser(
        "build",
        help="write an instance file",
        description="Cut an instance for one problem from a real trace and write it to one JSON file.",
    )
    b.add_argument(
        "--problem",
        required=True,
        choices=["serving", "sa-ordering", "slos-admission"],
        help="decision problem",
    )
    b.add_argument(
        "--trace",
        default=None,
        help="trace file or vendored trace name (sa-ordering default: Azure conv (chat) + Azure code (code))",
    )
    b.add_argument("--format", default=None, help="trace format (default: detected)")
    b.add_argument(
        "--n",
        type=int,
        default=10,
        help="sa-ordering: queued requests; serving: first N requests (default: 10)",
    )
    b.add_argument(
        "--batch", type=int, default=4, help="sa-ordering: largest batch size B (default: 4)"
    )
    b.add_argument(
        "--task",
        default="mixed",
        choices=["mixed", "chat", "code"],
        help="sa-ordering: request types (default: mixed)",
    )
    b.add_argument(
        "--new", type=int, default=10, help="slos-admission: new requests at the call (default: 10)"
    )
    b.add_argument(
        "--running",
        type=int,
        default=20,
        help="slos-admission: running requests at the call (default: 20)",
    )
    b.add_argument(
        "--from-simulation",
        action="store_true",
        help="slos-admission: capture the call from an online SLOs-Serve run of the scenario "
        "(--n requests, --rate req/s) closest to --new/--running, instead of cutting the trace",
    )
    b.add_argument(
        "--scenario",
        default="chatbot",
        help="slos-admission: SLOs-Serve scenario (default: chatbot)",
    )
    b.add_argument(
        "--slack",
        default="tight",
        choices=["tight", "loose"],
        help="slos-admission: SLO slack (default: tight)",
    )
    b.add_argument("--servers", type=int, default=1, help="serving: servers (default: 1)")
    b.add_argument("--slos", default="polyserve", help="serving: SLO scheme (default: polyserve)")
    b.add_argument("--rate", type=float, default=None, help="serving: target arrival rate (req/s)")
    b.add_argument("--timing", default=None, help="timing preset (default per problem)")
    b.add_argument(
        "--seed", type=int, default=0, help="seed of the cut and the SLO draws (default: 0)"
    )
    b.add_argument("-o", "--output", required=True, help="instance file to write (.json)")
    b.add_argument("--json", action="store_true", help="print one JSON object")
    b.set_defaults(func=cmd_instance_build)

    p = sub.add_parser(
        "instances",
        help="list the shipped instances",
        description="List the instances shipped with slolab and what is known about them.",
    )
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_instances)

    p = sub.add_parser(
        "presets",
        help="list timing presets",
        description="List the timing-model presets and their sources.",
    )
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_presets)

    p = sub.add_parser(
        "solve",
        help="solve an instance's exact model",
        description="Solve the exact model of an instance with one backend; the schedule is replayed and its objective recomputed.",
    )
    p.add_argument(
        "instance", help="instance file or shipped instance name (see 'slolab instances')"
    )
    p.add_argument(
        "--model", default=None, help="model name (default: the problem's default model)"
    )
    p.add_argument("--solver", default="highs", help="highs, cbc, cpsat or brute (default: highs)")
    p.add_argument("--time-limit", type=float, default=60.0, help="seconds (default: 60)")
    p.add_argument("--threads", type=int, default=1, help="solver threads (default: 1)")
    p.add_argument("--seed", type=int, default=0, help="solver seed (default: 0)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=cmd_solve)

    p = sub.add_parser(
        "compare",
        help="heuristics vs optimum on one instance",
        description="Run methods on an instance and print one row per method; every objective is recomputed from the engine's replay, gaps are intervals.",
    )
    p.add_argument("instance", help="instance file or shipped instance name")
    p.add_argument(
        "--methods", required=True, help="comma-separated methods, e.g. brute,highs,cpsat,sa,fcfs"
    )
    p.add_argument(
        "--time-limit", type=float, default=60.0, help="seconds per exact method (default: 60)"
    )
    p.add_argument("--threads", type=int, default=1, help="solver threads (default: 1)")
    p.add_argument(
        "--seed", type=int, default=0, help="seed of stochastic methods and solvers (default: 0)"
    )
    p.add_argument("--json", action="store_true", help="print a JSON list of rows")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_compare)

    p = sub.add_parser(
        "capacity",
        help="largest arrival rate meeting an attainment target",
        description="Bracket and bisect the arrival rate of a trace (time compression) until attainment crosses the target; each probe is a full simulation.",
    )
    _add_serving_args(p)
    p.add_argument(
        "--target", type=float, default=0.9, help="attainment target in (0, 1] (default: 0.9)"
    )
    p.add_argument(
        "--definition", default="deadline", help="attainment definition (default: deadline)"
    )
    p.add_argument(
        "--start-rate",
        type=float,
        default=None,
        help="first rate probed (default: the trace's own rate)",
    )
    p.add_argument(
        "--rel-tol",
        type=float,
        default=0.02,
        help="relative width of the final bracket (default: 0.02)",
    )
    p.add_argument("--max-probes", type=int, default=30, help="most simulations (default: 30)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_capacity)

    from slolab.harness import plan, sweep

    sweep.add_parser(sub)
    plan.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``slolab`` command."""
    try:
        return _main(argv)
    except KeyboardInterrupt:
        print("slolab: interrupted", file=sys.stderr)
        return 130


def _main(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(message)s"
    )
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    from slolab.instances import InstanceFileError, TraceError
    from slolab.sim import PolicyError

    try:
        return int(args.func(args))
    except BrokenPipeError:
        # the reader of our output went away (e.g. `| head`): stop quietly
        sys.stderr.close()
        return 0
    except (
        ValueError,
        FileNotFoundError,
        KeyError,
        TraceError,
        InstanceFileError,
        PolicyError,
    ) as exc:
        msg = exc.args[0] if isinstance(exc, KeyError) and exc.args else str(exc)
        print(f"slolab: error: {msg}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
