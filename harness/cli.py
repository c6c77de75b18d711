"""The ``slolab`` command line.

Commands: ``simulate`` (a trace under a scheduler), ``check-policy`` (a policy against the
policy contract), ``instance build`` (write an instance
file), ``instances`` (list shipped instances), ``presets`` (list timing presets), ``solve``
(an exact model), ``compare`` (heuristics vs optimum), ``pareto`` (the exact cost-attainment
front), ``capacity`` (largest rate meeting an
attainment target), ``sweep`` (a grid of tasks from a TOML spec, on Dask: see
:mod:`slolab.harness.sweep`), ``plan`` (fewest servers meeting a target per scheduler: see
:mod:`slolab.harness.plan`). Bad input gives a one-line error (options it suggests are named as
flags) and exit status 2; Ctrl-C stops any command with one line and exit status 130; a solver
objective unlike its replayed schedule's (a model/engine disagreement) gives one line and exit
status 1.
"""

from __future__ import annotations

import argparse
import atexit
import json
import logging
import math
import os
import signal
import sys
import threading
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from slolab.harness.output import add_output_flags, wants_progress

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
    from slolab.instances import load_shipped
    from slolab.problems import load_instance

    if Path(ref).exists():
        return load_instance(ref)
    return load_shipped(ref)


def _add_serving_args(p: argparse.ArgumentParser) -> None:
    """The trace and the serving flags (:data:`slolab.problems.flags.SERVING_OPTIONS`)."""
    from slolab.problems.flags import SERVING_OPTIONS, TRACE

    p.add_argument("trace", help=TRACE.help)
    add_options(p, SERVING_OPTIONS)


def _help_suffix(name: str) -> str:
    """What the help of a flag ends with that is read when the parser is built: the installed
    plugins of ``--policy`` and ``--router``, the registered scalers of ``--autoscale``."""
    if name == "policy":
        return _plugin_help("slolab.policies")
    if name == "router":
        return _plugin_help("slolab.routers")
    if name == "autoscale":
        from slolab.heuristics.scalers import SCALERS, scaler_names

        return (
            " (scalers: "
            + "; ".join(f"{n}: {SCALERS[n].description}" for n in scaler_names())
            + ")"
        )
    return ""


def _bounded(option) -> Callable[[str], Any]:
    """argparse type of an int or float flag with a minimum or maximum: the value parsed and
    checked, with the range in the message."""
    kind = "an integer" if option.type is int else "a number"
    lo, hi = option.minimum, option.maximum

    def parse(text: str) -> Any:
        try:
            value = option.type(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be {kind}, got {text!r}") from None
        if (lo is not None and value < lo) or (hi is not None and value > hi):
            span = (
                f"in [{lo}, {hi}]"
                if lo is not None and hi is not None
                else (f">= {lo}" if lo is not None else f"<= {hi}")
            )
            raise argparse.ArgumentTypeError(f"must be {kind} {span}, got {value}")
        return value

    parse.__name__ = option.type.__name__
    return parse


def _seed_type() -> Callable[[str], Any]:
    """The parser of every ``--seed``: the declared seed's range (:data:`slolab.problems.flags.SEED`,
    an integer every solver backend and random generator accepts)."""
    from slolab.problems.flags import SEED

    return _bounded(SEED)


def add_options(p: argparse.ArgumentParser, options) -> None:
    """One flag per declared option (:class:`slolab.problems.Option`): its flag and aliases,
    type, range, choices, default and help, the default shown when there is one."""
    for option in options:
        text = option.help + _help_suffix(option.name)
        if _shown(option.default) and "(default:" not in text:
            text += f" (default: {option.default})"
        kwargs = _flag_kwargs(option, text, option.default)
        if option.type is not bool and (option.minimum is not None or option.maximum is not None):
            kwargs["type"] = _bounded(option)
        p.add_argument(option.cli_flag, *option.aliases, dest=option.name, **kwargs)


def _plugin_help(group: str) -> str:
    """`` (plugins: a, b)`` naming the installed plugins of ``group`` (empty without any)."""
    from slolab.harness.plugins import installed_plugins

    names = sorted(installed_plugins()[group])
    return f" (plugins: {', '.join(names)})" if names else ""


def _trace_options(a: argparse.Namespace) -> dict[str, Any]:
    from slolab.problems import TRACE_OPTIONS

    return {o.name: getattr(a, o.name) for o in TRACE_OPTIONS}


def _flag_kwargs(option, help_text: str, default: Any, with_choices: bool = True) -> dict[str, Any]:
    """argparse keywords of an Option's flag (its choices checked by argparse if asked)."""
    kwargs: dict[str, Any] = {"default": default, "help": help_text.replace("%", "%%")}
    if option.type is bool:
        kwargs["action"] = "store_true"
    elif with_choices and option.choices is not None:
        kwargs.update(type=option.type, choices=option.choices)
    else:
        kwargs.update(type=option.type, metavar=option.name.upper())
    return kwargs


def _add_scaling_args(p: argparse.ArgumentParser) -> None:
    """Flags of an elastic run (:data:`slolab.problems.flags.SCALING_OPTIONS`)."""
    from slolab.problems.flags import SCALING_OPTIONS

    add_options(p, SCALING_OPTIONS)


def cmd_simulate(a: argparse.Namespace) -> int:
    from slolab.harness.failures import stall_status
    from slolab.harness.serving import ServingSetup, simulate_summary

    s = simulate_summary(
        ServingSetup.from_namespace(a),
        a.rate,
        progress=wants_progress(a),
        token_budget=True,
        idle_oracle=a.idle_oracle,
    )
    if a.json:
        _print_json(s)
    else:
        keys = [
            "instance",
            "policy",
            "token_budget",
            "kv_capacity",
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
            "rejected",
            "stalled",
            "cost_server_s",
            "servers_max",
            "scale_events",
            "simulate_s",
            "wall_s",
        ]
        width = max(len(k) for k in keys)
        for k in keys:
            v = s[k] if k != "kv_capacity" else f"{s[k]} ({s['kv_capacity_source']})"
            print(f"{k:<{width}}  {v:.4g}" if isinstance(v, float) else f"{k:<{width}}  {v}")
        if "prefix_cache" in s:
            cache = s["prefix_cache"]
            print(
                f"{'prefix_cache':<{width}}  hit rate {cache['hit_rate']:.4g}, "
                f"{cache['prefill_tokens_saved']:,} prefill tokens saved (--prefix-cache off: none)"
            )
        if a.idle_oracle:
            print(f"an idle server could meet {s['idle_met']} of {s['requests']}")
    return stall_status(s, a.allow_stall)


def cmd_instance_build(a: argparse.Namespace) -> int:
    from slolab.instances import save_instance
    from slolab.problems import get_problem

    problem = get_problem(a.problem)
    given = {dest: value for dest, value in vars(a).items() if dest.startswith("opt_")}
    # an option is given by its flag or by any of its aliases
    accepted = {
        _option_dest(o, flag): o for o in problem.options for flag in (o.cli_flag, *o.aliases)
    }
    options = {}
    for dest, value in given.items():
        if dest not in accepted:
            flag = "--" + dest[len("opt_") :].replace("_", "-")
            raise ValueError(
                f"{flag} does not apply to problem {problem.name!r}; its options: "
                f"{', '.join(o.cli_flag for o in problem.options) or 'none'}"
            )
        options[accepted[dest].name] = value
    inst = problem.build(**options)
    _stop_if_interrupted()
    path = save_instance(inst, a.output)
    _committed()
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


def _option_dest(option, flag: str | None = None) -> str:
    """The argparse destination of ``flag`` (default: the option's own flag) in 'instance
    build', where the problems share one parser."""
    return "opt_" + (flag or option.cli_flag)[2:].replace("-", "_")


def _shown(default: Any) -> bool:
    """A default worth printing in help (not None, not a flag's False)."""
    return default is not None and default is not False


def _add_problem_options(b: argparse.ArgumentParser) -> None:
    """One flag per builder option of any problem (a flag shared by problems means one thing)."""
    from slolab.problems import problems

    flags: dict[str, list] = {}
    for p in problems():
        for o in p.options:
            for flag in (o.cli_flag, *o.aliases):
                flags.setdefault(flag, []).append((p, o))
    for flag, uses in sorted(flags.items()):
        types = {o.type for _, o in uses}
        if len(types) != 1:
            raise TypeError(f"option {flag} has different types in different problems: {types}")
        first = uses[0][1]
        by_help: dict[str, list] = {}
        for p, o in uses:
            by_help.setdefault(o.help, []).append((p, o))
        help_parts = []
        for text, group in by_help.items():
            defaults = {str(o.default) for _, o in group if _shown(o.default)}
            default = ""
            if len(defaults) == 1:
                default = f" (default: {defaults.pop()})"
            elif defaults:
                default = (
                    " (default: "
                    + ", ".join(f"{p.name} {o.default}" for p, o in group if _shown(o.default))
                    + ")"
                )
            help_parts.append(f"{', '.join(p.name for p, _ in group)}: {text}{default}")
        # each problem checks its own choices (a shared flag may have different ones)
        kwargs = _flag_kwargs(first, "; ".join(help_parts), argparse.SUPPRESS, with_choices=False)
        b.add_argument(flag, dest=_option_dest(first, flag), **kwargs)


def cmd_problems(a: argparse.Namespace) -> int:
    from slolab.harness.methods import method_help
    from slolab.harness.plugins import installed_plugins
    from slolab.problems import problems

    rows = [
        {
            "problem": p.name,
            "title": p.title,
            "objective": p.objective.name,
            "sense": p.objective.sense,
            "models": list(p.models),
            "aliases": dict(p.aliases),
            "heuristics": [h.name for h in p.heuristics if not h.baseline],
            "baselines": [h.name for h in p.heuristics if h.baseline],
            "methods": method_help(p.name),
            "options": [o.cli_flag for o in p.options],
            "docs": f"docs/{p.docs}" if p.docs else "",
        }
        for p in problems()
    ]
    if a.json:
        _print_json(rows)
        return 0
    for r in rows:
        print(f"{r['problem']}: {r['title']}")
        print(
            f"  objective   {r['objective']} ({'higher' if r['sense'] == 'max' else 'lower'} is better)"
        )
        print(f"  methods     {r['methods']}")
        print(
            f"  build with  slolab instance build --problem {r['problem']} {' '.join(r['options'])}"
        )
        if r["docs"]:
            print(f"  docs        {r['docs']}")
    plugins = {group: found for group, found in installed_plugins().items() if found}
    if plugins:
        print("plugins (installed packages' entry points):")
        for group, found in plugins.items():
            listed = ", ".join(f"{name} ({target})" for name, target in sorted(found.items()))
            print(f"  {group:<18}  {listed}")
    return 0


def cmd_check_policy(a: argparse.Namespace) -> int:
    from slolab.heuristics.policies import policy_entry
    from slolab.testing import CONTRACT_RULES, check_policy

    for flag, value in (("--seeds", a.seeds), ("--requests", a.requests), ("--servers", a.servers)):
        if value < 1:
            raise ValueError(f"{flag} must be >= 1, got {value}")
    policy_entry(a.policy)
    seeds = list(range(a.seed, a.seed + a.seeds))
    found = check_policy(
        a.policy, seeds=seeds, n_requests=a.requests, servers=a.servers, mode=a.mode
    )
    if a.json:
        _print_json(
            {
                "policy": a.policy,
                "seeds": seeds,
                "requests": a.requests,
                "servers": a.servers,
                "violations": [
                    {
                        "seed": v.seed,
                        "rule": v.rule,
                        "request": v.request,
                        "time_s": v.time_s,
                        "message": v.message,
                    }
                    for v in found
                ],
            }
        )
    else:
        runs = f"{len(seeds)} random instance{'s' if len(seeds) != 1 else ''}"
        if not found:
            print(
                f"policy {a.policy}: keeps the contract ({', '.join(CONTRACT_RULES)}) on {runs} "
                f"of {a.requests} requests, {a.servers} server{'s' if a.servers != 1 else ''} "
                f"(seeds {seeds[0]}..{seeds[-1]})"
            )
        else:
            print(f"policy {a.policy}: {len(found)} violation(s) on {runs}")
            for v in found[: a.show]:
                print(f"  {v}")
            if len(found) > a.show:
                print(f"  ... {len(found) - a.show} more (--show N, or --json for all)")
    return 1 if found else 0


def cmd_instances(a: argparse.Namespace) -> int:
    from slolab.instances import load_manifest

    rows = load_manifest()
    if a.json:
        _print_json(rows)
        return 0
    table = [("name", "problem", "requests", "optimum", "how it is known")]
    for r in rows:
        optimum, how = known_summary(r["known"])
        table.append((r["name"], r["problem"], str(r["requests"]), optimum, how))
    widths = [max(len(row[i]) for row in table) for i in range(4)]
    for row in table:
        cells = [
            row[0].ljust(widths[0]),
            row[1].ljust(widths[1]),
            row[2].rjust(widths[2]),
            row[3].ljust(widths[3]),
        ]
        print("  ".join([*cells, row[4]]).rstrip())
    return 0


def known_summary(known: dict[str, Any]) -> tuple[str, str]:
    """``(optimum, how)`` of a manifest entry's ``known`` record, as text for a table.

    The optimum is printed only when proved (status OPTIMAL); a time-limited run shows its
    incumbent and bound instead, and an entry without a solver run shows its note.
    """
    status = known.get("status")
    solver = known.get("solver", "a solver")
    if "how" in known:
        optimum = known.get("optimum")
        return (f"{optimum:.6g}" if isinstance(optimum, int | float) else "-"), str(known["how"])
    if status == "OPTIMAL" and "optimum" in known:
        runtime = known.get("runtime_s")
        took = f" in {runtime:g} s" if isinstance(runtime, int | float) else ""
        return f"{known['optimum']:.6g}", f"proved optimal by {solver}{took}"
    if status is not None:
        limit = known.get("time_limit_s")
        cut = f" at its {limit:g} s limit" if isinstance(limit, int | float) else ""
        parts = [f"{solver} stopped{cut} ({status})"]
        if "incumbent" in known:
            parts.append(f"best found {known['incumbent']:.6g}")
        if "bound" in known:
            parts.append(f"bound {known['bound']:.6g}")
        return "-", ", ".join(parts)
    return "-", str(known.get("note") or "nothing known")


def cmd_presets(a: argparse.Namespace) -> int:
    from slolab.timing.presets import preset_table

    rows = preset_table()
    if a.json:
        _print_json(rows)
        return 0
    print(
        f"{'name':<34} {'$/h':>6} {'KV tokens':>10} {'fit err med/max':>15} "
        f"{'real err med':>12}  source"
    )
    for r in rows:
        if r["gpu"] is None:
            print(f"{r['name']:<34} {'':>6} {'':>10} {'':>15} {'':>12}  {r['source']}")
            continue
        error = f"{r['fit_median_rel_error']:.1%}/{r['fit_max_rel_error']:.1%}"
        real = r["real_median_abs_rel_error"]
        real_text = "not measured" if real is None else f"{real:.1%}"
        price = f"{r['price_usd_per_hour']:.2f}"
        print(
            f"{r['name']:<34} {price:>6} {r['kv_capacity_tokens']:>10} {error:>15} "
            f"{real_text:>12}  {r['source']}"
        )
    return 0


def cmd_solve(a: argparse.Namespace) -> int:
    from slolab.harness.compare import objective
    from slolab.harness.progress import elapsed_bar
    from slolab.problems import build_model, get_problem
    from slolab.sim import check, replay
    from slolab.solvers import solve

    inst = _load_instance(a.instance)
    problem = get_problem(inst.problem)
    model_name = a.model or problem.default_model
    if model_name is None:
        raise ValueError(f"problem {inst.problem!r} has no exact model")
    if model_name not in problem.models:
        raise ValueError(
            f"problem {inst.problem!r} has no model {model_name!r}; its models: "
            f"{', '.join(problem.models)}"
        )
    model = build_model(model_name, inst)
    model.quiet = not wants_progress(a)
    # a model whose search draws its own bar gets no second one around it
    show = not model.quiet and not type(model).draws_progress
    with elapsed_bar(f"solve {a.solver}", a.time_limit, enabled=show):
        res = solve(
            model,
            solver=a.solver,
            time_limit=a.time_limit,
            threads=a.threads,
            seed=a.seed,
        )
    rec = res.to_record()
    rec["instance"] = inst.name
    rec["runtime_s"] = res.runtime_s
    rec["kind"] = "bound" if type(model).bound_only else "exact"
    rec.update(res.details.get("solution", {}))
    if res.details.get("stopped_in") == "build":
        rec["note"] = (
            "the time limit ran out while the model was built (no solver call): give a smaller instance or a longer --time-limit"
        )
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
        progress=wants_progress(a),
        details=a.json,
    )
    if a.json:
        _print_json(frame.to_dict(orient="records"))
        return 0
    cols = [
        "method",
        "kind",
        "status",
        "objective",
        "bound",
        "gap_lo",
        "gap_hi",
        "attainment",
        "mean_latency_s",
        "runtime_s",
        "violations",
    ]
    objective_name = frame["objective_name"].iloc[0]
    better = "higher" if frame["sense"].iloc[0] == "max" else "lower"
    print(
        f"instance {inst.name} ({inst.problem}, {inst.n_requests} requests); objective "
        f"{objective_name} ({better} is better), recomputed from each method's replay; optimum in "
        f"[{frame['optimum_lo'].iloc[0]:.6g}, {frame['optimum_hi'].iloc[0]:.6g}]"
    )
    print(
        frame[[c for c in cols if c in frame.columns]].to_string(
            index=False, float_format=lambda v: f"{v:.6g}"
        )
    )
    print(
        "gap_lo, gap_hi: the relative distance to the optimum lies in [gap_lo, gap_hi] "
        "(0 = optimal; one value once an exact method proves the optimum)"
    )
    return 0


def cmd_pareto(a: argparse.Namespace) -> int:
    from slolab.harness.pareto import pareto

    inst = _load_instance(a.instance)
    rows = pareto(inst, solver=a.solver, time_limit=a.time_limit, threads=a.threads, seed=a.seed)
    if a.json:
        _print_json(rows)
        return 0
    print(
        f"instance {inst.name} ({inst.problem}, {inst.n_requests} requests): least "
        f"server-seconds for each attainment ({a.solver}, {a.time_limit:g} s per level)"
    )
    for r in rows:
        interval = (
            f"{r['cost_server_s']:.6g}"
            if r["status"] == "OPTIMAL"
            else f"in [{r['cost_bound'] if r['cost_bound'] is not None else '-inf'}, "
            f"{r['cost_server_s']:.6g}]"
        )
        print(f"  attainment {r['attainment']:.4f}  cost {interval}  {r['status']}")
    return 0


def cmd_capacity(a: argparse.Namespace) -> int:
    from slolab.harness.serving import ServingSetup, capacity_notes, capacity_search

    show = wants_progress(a)
    setup = ServingSetup.from_namespace(a)
    res, trace_rate = capacity_search(
        setup,
        rate=a.rate,
        target=a.target,
        definition=a.definition,
        start_rate=a.start_rate,
        rel_tol=a.rel_tol,
        max_probes=a.max_probes,
        progress=show,
        early=not a.full_probes,
        workers=a.workers,
    )
    rec = res.to_dict()
    rec["notes"] = capacity_notes(setup, res, a.definition)
    rec["probes"] = [{"rate": rate, "attainment": att} for rate, att in res.probes]
    rec.update(
        {
            "policy": a.policy,
            "servers": a.servers,
            "mode": a.mode,
            "trace_rate": trace_rate,
            "definition": a.definition,
            "kv_capacity": setup.kv_capacity_used()[0],
            "kv_capacity_source": setup.kv_capacity_used()[1],
        }
    )
    rec.update(_capacity_bound(setup, trace_rate, rec["capacity"]))
    if a.json:
        _print_json(rec)
    else:
        print(
            f"capacity {'>= ' if res.capped_high else ''}{rec['capacity']:.4g} req/s at "
            f"{a.target:.0%} {a.definition} attainment ({a.policy}, {a.servers} "
            f"server{'s' if a.servers != 1 else ''}; {len(rec['probes'])} probes, "
            f"{res.n_early} stopped early; KV {rec['kv_capacity']} tokens per server from "
            f"{rec['kv_capacity_source']})"
        )
        for note in rec["notes"]:
            print(f"  note: {note}")
        if "bound" in rec:
            print(
                f"  bound {rec['bound']:.4g} req/s ({rec['bound_kind']}); capacity / bound "
                f"{rec['fraction_of_bound']:.3f}"
            )
            if "bound_note" in rec:
                print(f"  note: {rec['bound_note']}")
        for k, (p, early) in enumerate(zip(rec["probes"], res.early, strict=True)):
            att = p["attainment"]
            bound = ("" if not early else (" or more" if att >= a.target else " or less")) + (
                " (stopped early)" if early else ""
            )
            if res.stalled and res.stalled[k]:
                bound = f" (stalled: {res.stalled[k]} requests; no valid attainment)"
            print(f"  rate {p['rate']:.4g} req/s -> attainment {att:.4f}{bound}")
    return 0


def _capacity_bound(setup, trace_rate: float, capacity: float) -> dict[str, Any]:
    """``bound`` (req/s) and ``fraction_of_bound`` when the policy registers a capacity bound
    (an exact model's upper bound on the rate the instance's mix can be served at)."""
    from slolab.heuristics.policies import policy_entry

    bound_of = policy_entry(setup.policy).capacity_bound
    if bound_of is None:
        return {}
    inst = setup.instance(trace_rate if setup.arrivals is not None else None)
    bound = float(bound_of(inst, mode=setup.mode, servers=setup.servers))
    rec = {
        "bound": bound,
        "bound_kind": "steady-state upper bound of the policy family's exact model",
        "fraction_of_bound": capacity / bound if bound > 0 else float("nan"),
    }
    if capacity > bound:
        # the bound holds in steady state only; a short run at a high rate ends before queues
        # build up
        rec["bound_note"] = (
            "capacity above the steady-state bound: the run is too short to reach a steady "
            "state (give more requests, --limit)"
        )
    return rec


def _methods_help() -> str:
    from slolab.problems import problems

    return "; ".join(f"{p.name} [{p.method_help()}]" for p in problems())


def _models_help() -> str:
    from slolab.problems import problems

    return "; ".join(f"{p.name}: {', '.join(p.models)}" for p in problems() if p.models)


def _solver_names() -> tuple[str, ...]:
    from slolab.problems import SOLVER_NAMES

    return SOLVER_NAMES


def _version() -> str:
    from slolab import __version__

    return __version__


def _problem_names() -> list[str]:
    from slolab.problems import problem_names

    return problem_names()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="slolab",
        description="Exact models, faithful heuristics and one token-level engine for multi-SLO LLM serving.",
        epilog=_EPILOG,
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress details")
    parser.add_argument(
        "--traceback",
        action="store_true",
        help="print the whole traceback of an exception a plugin raised (also: SLOLAB_TRACEBACK=1)",
    )
    parser.add_argument(
        "--version", action="version", version=f"%(prog)s {_version()}", help="print the version"
    )
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
        help="mean arrival rate (req/s): of the process with --arrivals, else the trace is "
        "time-scaled to it, keeping its burstiness",
    )
    _add_scaling_args(p)
    p.add_argument(
        "--idle-oracle",
        action="store_true",
        help="also count the requests an idle server could meet: each alone on an empty "
        "server in its fastest chunking (co-located mode)",
    )
    add_output_flags(p)
    p.add_argument(
        "--allow-stall",
        action="store_true",
        help="exit 0 when the policy left requests waiting with nothing to run (they are "
        "rejected and counted as stalled); without it such a run exits 1",
    )
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
        choices=_problem_names(),
        help="decision problem (see 'slolab problems')",
    )
    _add_problem_options(b)
    b.add_argument("-o", "--output", required=True, help="instance file to write (.json)")
    add_output_flags(b, quiet=False)
    b.set_defaults(func=cmd_instance_build)

    p = sub.add_parser(
        "instances",
        help="list the shipped instances",
        description="List the instances shipped with slolab and what is known about them.",
    )
    add_output_flags(p, "print JSON", quiet=False)
    p.set_defaults(func=cmd_instances)

    p = sub.add_parser(
        "problems",
        help="list the decision problems",
        description="List the decision problems: objective, exact models, heuristics, baselines, how to build an instance, docs page.",
    )
    add_output_flags(p, "print JSON", quiet=False)
    p.set_defaults(func=cmd_problems)

    p = sub.add_parser(
        "presets",
        help="list timing presets",
        description="List the timing-model presets and their sources; for the presets generated "
        "from the GPU profiles (MODEL/GPU/tpN) also the server's price ($/h), its KV capacity "
        "(tokens) and the median/max relative error of the fit against the profile.",
    )
    add_output_flags(p, "print JSON", quiet=False)
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
        "--model",
        default=None,
        help="model name (default: the problem's first); by problem: " + _models_help(),
    )
    p.add_argument(
        "--solver",
        default="highs",
        help=f"{', '.join(_solver_names())} (default: highs)",
    )
    p.add_argument("--time-limit", type=float, default=60.0, help="seconds (default: 60)")
    p.add_argument("--threads", type=int, default=1, help="solver threads (default: 1)")
    p.add_argument("--seed", type=_seed_type(), default=0, help="solver seed (default: 0)")
    add_output_flags(p)
    p.set_defaults(func=cmd_solve)

    p = sub.add_parser(
        "compare",
        help="heuristics vs optimum on one instance",
        description="Run methods on an instance and print one row per method; every objective is recomputed from the engine's replay, gaps are intervals.",
    )
    p.add_argument("instance", help="instance file or shipped instance name")
    p.add_argument(
        "--methods",
        required=True,
        help="comma-separated methods: the problem's heuristics and baselines, exact aliases, "
        "solver names (the default model) or MODEL:SOLVER. By problem: " + _methods_help(),
    )
    p.add_argument(
        "--time-limit",
        type=float,
        default=60.0,
        help="seconds per exact method, building its model included; heuristics simulate the "
        "whole instance (a progress bar shows how far) (default: 60)",
    )
    p.add_argument("--threads", type=int, default=1, help="solver threads (default: 1)")
    p.add_argument(
        "--seed",
        type=_seed_type(),
        default=0,
        help="seed of stochastic methods and solvers (default: 0)",
    )
    add_output_flags(
        p,
        "print a JSON list of rows, each with the method's details (a bound's families, a search's steps)",
    )
    p.set_defaults(func=cmd_compare)

    p = sub.add_parser(
        "pareto",
        help="exact cost-attainment Pareto front of an instance",
        description="For every attainment level, the least server-seconds (the epsilon-constraint method over the problem's exact model); each point is replayed, its cost and attainment recomputed, dominated points dropped.",
    )
    p.add_argument("instance", help="instance file or shipped instance name")
    p.add_argument(
        "--solver",
        default="highs",
        help=f"{', '.join(_solver_names())} (default: highs)",
    )
    p.add_argument("--time-limit", type=float, default=60.0, help="seconds per level (default: 60)")
    p.add_argument("--threads", type=int, default=1, help="solver threads (default: 1)")
    p.add_argument("--seed", type=_seed_type(), default=0, help="solver seed (default: 0)")
    add_output_flags(
        p,
        "print a JSON list of {cost_server_s, attainment, status, cost_bound, gap, level, ...}",
    )
    p.set_defaults(func=cmd_pareto)

    p = sub.add_parser(
        "capacity",
        help="largest arrival rate meeting an attainment target",
        description="Bracket and bisect the arrival rate of a trace (time compression) until attainment crosses the target; each probe is a full simulation.",
    )
    _add_serving_args(p)
    p.add_argument(
        "--rate",
        type=float,
        default=None,
        help="with --arrivals: the rate (req/s) the arrivals are drawn at, and the first rate "
        "probed unless --start-rate; each probe draws the same process at its own rate",
    )
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
    p.add_argument(
        "--workers",
        type=int,
        default=1,
        help="probes simulated at once, each in its own process: the next rungs of the "
        "doubling ladder, then the next bisection levels (k-section); same capacity as one at "
        "a time (default: 1)",
    )
    p.add_argument(
        "--full-probes",
        action="store_true",
        help="run every probe to its end (default: a probe stops as soon as its verdict is "
        "certain, and its attainment is then the bound it proved)",
    )
    add_output_flags(p)
    _add_scaling_args(p)
    p.set_defaults(func=cmd_capacity)

    p = sub.add_parser(
        "check-policy",
        help="check a policy against the policy contract",
        description="Run a policy (built-in, a plugin's, or package.module:Name) on seeded "
        "random instances and print every broken rule of the contract with its request and "
        "time: the engine accepts its batches, the checker finds nothing, every request is "
        "finished or rejected, no iteration exceeds the policy's declared token_budget. Exit "
        "status 1 when it breaks a rule.",
    )
    p.add_argument("policy", help="policy name, or package.module:Name of a Policy class")
    p.add_argument("--seeds", type=int, default=3, help="random instances (default: 3)")
    p.add_argument("--seed", type=_seed_type(), default=0, help="first seed (default: 0)")
    p.add_argument("--requests", type=int, default=40, help="requests per instance (default: 40)")
    p.add_argument("--servers", type=int, default=2, help="servers (default: 2)")
    p.add_argument(
        "--mode",
        default="colocated",
        choices=["colocated", "static", "disaggregated"],
        help="serving mode (disaggregated: one prefill server) (default: colocated)",
    )
    p.add_argument("--show", type=int, default=20, help="violations printed (default: 20)")
    add_output_flags(p, quiet=False)
    p.set_defaults(func=cmd_check_policy)

    from slolab.harness import figures, plan, sweep

    sweep.add_parser(sub)
    plan.add_parser(sub, _add_serving_args)
    figures.add_parser(sub)
    _traceback_after_command(parser)
    return parser


def _traceback_after_command(parser: argparse.ArgumentParser) -> None:
    """``--traceback`` accepted after the command too (``slolab simulate ... --traceback``):
    every subcommand takes it, and leaves the top-level value alone unless given."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in set(action.choices.values()):
                if "--traceback" not in child._option_string_actions:
                    child.add_argument(
                        "--traceback",
                        action="store_true",
                        default=argparse.SUPPRESS,
                        help="print the whole traceback of an exception a plugin raised",
                    )
                _traceback_after_command(child)


#: Exit status of a command stopped by Ctrl-C (128 + SIGINT, as shells report it).
EXIT_INTERRUPTED = 130
#: Exit status when a solver's objective differs from its replayed schedule's.
EXIT_MISMATCH = 1


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``slolab`` command.

    Bad input exits with status 2 and one line on stderr; Ctrl-C (KeyboardInterrupt, which
    every solver backend re-raises after stopping its search) exits with status 130 and one
    line, at any point of any command; a solver objective that differs from its replayed
    schedule's (:class:`slolab.harness.compare.ObjectiveMismatchError`) exits with status 1
    and one line.

    A command that has committed its work (``instance build`` once its file is in place)
    ignores Ctrl-C from then on and ends with status 0, and so does the interpreter's exit
    after any command: a late Ctrl-C neither reports "interrupted" for a file that was written
    nor kills the process by the signal. A Ctrl-C whose KeyboardInterrupt the interpreter
    dropped (raised inside a ``__del__`` or a garbage-collector callback, where it is printed
    and ignored) or turned into another error (a C extension's failed argument conversion)
    still ends the command with status 130, before it writes its file. Called as
    the program (``argv`` None) and interrupted, it ends the process itself with status 130
    (see :func:`_exit_now`).
    """
    _ignore_sigint_at_exit()
    _interrupt.update(seen=False, committed=False, command=None)
    handler = signal.getsignal(signal.SIGINT) if _on_main_thread() else None
    if handler is signal.default_int_handler:
        signal.signal(signal.SIGINT, _raise_interrupt)
    try:
        try:
            code = _run(argv)
        except Exception:
            # Ctrl-C inside a C extension's call can surface as another error: a
            # KeyboardInterrupt raised while pybind11 converts a call's arguments (HiGHS's
            # addRow, as PuLP builds a model) is reported as a TypeError
            if _interrupt["seen"] and not _interrupt["committed"]:
                raise KeyboardInterrupt from None
            raise
        if _interrupt["seen"] and not _interrupt["committed"]:
            raise KeyboardInterrupt
        return code
    except KeyboardInterrupt:
        print("slolab: interrupted", file=sys.stderr)
        _exit_now_if_solver_stopping()
        if argv is None and _interrupt["command"] != "sweep":
            _exit_now()
        return EXIT_INTERRUPTED
    except AssertionError as exc:
        # imported here: the harness loads pandas and the engine, too slow for every command
        from slolab.harness.compare import ObjectiveMismatchError

        if not isinstance(exc, ObjectiveMismatchError):
            raise
        print(
            f"slolab: error: {exc} (a model/engine disagreement: please report it)",
            file=sys.stderr,
        )
        return EXIT_MISMATCH
    finally:
        if handler is not None and argv is not None:
            signal.signal(signal.SIGINT, handler)
        elif handler is not None:
            # the program ends now: threading's shutdown (which stops executor threads) runs
            # before the atexit hook, so Ctrl-C stays ignored from here on
            signal.signal(signal.SIGINT, signal.SIG_IGN)


# Whether the running command saw Ctrl-C (its KeyboardInterrupt may have been dropped) and
# whether it has committed its work.
_interrupt: dict[str, Any] = {"seen": False, "committed": False, "command": None}


def _raise_interrupt(signum: int, frame: Any) -> None:
    """Python's own Ctrl-C handler, remembering that the signal came."""
    _interrupt["seen"] = True
    raise KeyboardInterrupt


def _stop_if_interrupted() -> None:
    """Raise KeyboardInterrupt if Ctrl-C came and its KeyboardInterrupt was dropped."""
    if _interrupt["seen"]:
        raise KeyboardInterrupt


def _on_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def _committed() -> None:
    """The command's work is done and kept (a file replaced): Ctrl-C is ignored until
    :func:`main` returns (its output is printed; nothing is left to stop)."""
    _interrupt["committed"] = True
    if _on_main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)


_at_exit_registered = False


def _ignore_sigint_at_exit() -> None:
    """Ignore Ctrl-C once the interpreter starts to exit (registered once per process): the
    teardown of a large run takes up to a second or two, and a Ctrl-C then would end the
    process by the signal after the command's own exit status was set."""
    global _at_exit_registered
    if _at_exit_registered:
        return
    _at_exit_registered = True

    def ignore() -> None:
        if _on_main_thread():
            signal.signal(signal.SIGINT, signal.SIG_IGN)

    atexit.register(ignore)


def _exit_now_if_solver_stopping() -> None:
    """End the process with :data:`EXIT_INTERRUPTED` at once when an interrupted solver is
    still returning in its thread (HiGHS inside a long LP): the interpreter's teardown would
    otherwise wait for it or pull its libraries from under it."""
    backend = sys.modules.get("slolab.solvers.backend")
    if backend is None or not backend.stopping_solvers():
        return
    _exit_now()


def _exit_now() -> None:
    """End the process with :data:`EXIT_INTERRUPTED` now, its output flushed.

    Used when :func:`main` is the program (its own command line) and was interrupted: a
    KeyboardInterrupt that passed through ``exec`` of a string (dataclasses build their
    methods so, on import) makes CPython end the process by SIGINT at exit even though
    ``main`` caught it (status -2 for its parent instead of 130). Sweeps exit normally (their
    worker processes are shut down at exit).
    """
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(EXIT_INTERRUPTED)


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """A plugin's warning as one line on stderr; any other warning as Python shows it."""
    from slolab.plugin_loading import PluginWarning

    if issubclass(category, PluginWarning):
        print(f"slolab: warning: {message}", file=sys.stderr)
    else:
        _SHOW_WARNING(message, category, filename, lineno, file, line)


_SHOW_WARNING = warnings.showwarning


def _run(argv: Sequence[str] | None) -> int:
    warnings.showwarning = _show_warning
    parser = build_parser()
    args = parser.parse_args(argv)
    _interrupt["command"] = args.command
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(message)s"
    )
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    from slolab.instances import InstanceFileError, TraceError
    from slolab.instances.hints import cli_message
    from slolab.sim import PolicyError

    try:
        return int(args.func(args))
    except BrokenPipeError:
        # the reader of our output went away (e.g. `| head`): stop quietly
        sys.stderr.close()
        return 0
    except Exception as exc:
        from slolab.harness.failures import report_failure

        code = report_failure(exc, args.traceback)
        if code is not None:
            return code
        if not isinstance(
            exc, ValueError | KeyError | TraceError | InstanceFileError | PolicyError | OSError
        ):
            raise
        print(f"slolab: error: {cli_message(exc)}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
