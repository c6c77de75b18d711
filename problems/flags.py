"""The serving and scaling flags, declared once.

``slolab simulate``, ``capacity`` and ``plan`` build their parsers from these records
(:func:`slolab.harness.cli.add_options`), :class:`slolab.harness.serving.ServingSetup` takes its
defaults from them and refuses a namespace that lacks one of them, and the serving problem's
builder options (``slolab instance build --problem serving``) are the same records. A flag
therefore has one name, one type, one default and one help text wherever it appears.

The lists the help of ``--policy``, ``--router`` and ``--autoscale`` ends with (installed
plugins, registered scalers) are read when the parser is built, by the command line.
"""

from __future__ import annotations

from slolab.problems.registry import RATE_HELP, TRACE_OPTIONS, Option
from slolab.solvers.backend import MAX_SEED

#: Serving modes of a cluster.
MODES = ("colocated", "static", "disaggregated")

TRACE = Option(
    "trace",
    str,
    None,
    "trace file, or the name of a vendored trace (azure_conv_2023, azure_code_2023, "
    "arxiv_summarization, mooncake_conversation)",
)
SERVERS = Option("servers", int, 1, "number of servers (model replicas)", aliases=("--replicas",))
TIMING = Option("timing", str, "llama2-7b-h100", "timing preset (see 'slolab presets')")
SLOS = Option(
    "slos",
    str,
    None,
    "SLO scheme: polyserve, proserve, slos-serve, sa, hyperflexis, none, or schemes joined by + "
    "applied in order (polyserve+proserve: PolyServe SLOs, ProServe priorities) (default: "
    "slos-serve with --scenario, else polyserve)",
)
LIMIT = Option(
    "limit", int, None, "use only the first N requests of the trace", minimum=1, aliases=("--n",)
)
RATE = Option("rate", float, None, RATE_HELP)
SEED = Option(
    "seed",
    int,
    0,
    "seed of every random choice (SLO draws, arrival draws, random routing)",
    minimum=0,
    maximum=MAX_SEED,
)

#: The cluster a trace is served on and how its SLOs are drawn.
CLUSTER_OPTIONS: tuple[Option, ...] = (
    SERVERS,
    TIMING,
    SLOS,
    Option(
        "token_budget",
        str,
        "auto",
        "sarathi/edf tokens per iteration: an integer, or auto = the largest batch that fits the "
        "tightest TPOT SLO under the timing model, as Sarathi-Serve configures it",
    ),
    LIMIT,
    SEED,
    Option("mode", str, "colocated", "serving mode", choices=MODES),
    Option("prefill_servers", int, 0, "disaggregated: servers in the prefill pool", minimum=0),
    Option(
        "kv_capacity",
        int,
        None,
        "KV-cache capacity per server in tokens (default: the timing preset's, e.g. 50790 for "
        "llama2-70b/a100/tp2; 200000 for a preset that declares none)",
        minimum=1,
    ),
    Option(
        "max_batch_tokens",
        int,
        2048,
        "the servers' cap on tokens per iteration, 0 for no cap; budgeted policies (sarathi, "
        "edf) run at --token-budget, whose auto value is the batch that fits the tightest TPOT "
        "SLO, at most this cap (2048 with no cap); simulate prints the budget used",
    ),
    Option("max_batch_size", int, 256, "most sequences per iteration", minimum=1),
    Option(
        "prefix_cache",
        str,
        "auto",
        "prefix caching in every server: auto (the default: 512-token blocks when the trace "
        "carries prompt block ids, as Mooncake's hash_ids; off otherwise), off, or the block "
        "size in tokens (a divisor of 512, e.g. 16 as vLLM)",
    ),
)

#: The scheduler and its routers.
SCHEDULER_OPTIONS: tuple[Option, ...] = (
    Option(
        "router",
        str,
        None,
        "router, a registered router: round-robin, random, least-loaded, go-routing, hold, ... "
        "(an unknown name lists them all; the router 'random' is not the policy 'random') "
        "(default: the policy's own, hold for the hyperflexis dispatcher, else least-loaded; "
        "policies that route themselves, such as polyserve, take none); or "
        "package.module:Name of a Router class",
    ),
    Option(
        "decode_router",
        str,
        None,
        "disaggregated mode: router of the decode pool when a KV transfer completes (default: "
        "the policy's own, hold for hyperflexis, else the decode server with the fewest "
        "requests)",
    ),
    Option(
        "policy",
        str,
        "sarathi",
        "scheduler, a registered policy: vllm, sarathi, edf, slos-serve, slide-batching, "
        "polyserve (with its baselines random, minimal, chunk: they route themselves, on "
        "--servers in --mode), ... (an unknown name lists them all); or package.module:Name of "
        "a Policy class, e.g. my_policy:LeastSlack",
    ),
    Option(
        "scenario",
        str,
        None,
        "with --slos slos-serve: chatbot, coder, summarizer or mixed (its Table 1)",
    ),
    Option(
        "slack",
        str,
        None,
        "with --slos slos-serve: the TTFT level, tight (3x the zero-load prefill) or loose (5x); "
        "without --scenario the TPOT follows it (tight 50 ms, loose 100 ms), with --scenario "
        "the TPOT stays the scenario's (SLOs-Serve Tables 1 and 3)",
        choices=("tight", "loose"),
    ),
)

#: What ``slolab simulate``, ``capacity`` and ``plan`` take besides the trace: how it is read,
#: the cluster and the scheduler.
SERVING_OPTIONS: tuple[Option, ...] = (*TRACE_OPTIONS, *CLUSTER_OPTIONS, *SCHEDULER_OPTIONS)

#: An elastic run: a scaler and where switched-on servers load their weights from.
SCALING_OPTIONS: tuple[Option, ...] = (
    Option(
        "autoscale",
        str,
        None,
        "scale the cluster while it runs with a registered scaler, or package.module:Name of a "
        "Scaler class (default: no scaler)",
    ),
    Option("min_servers", int, 1, "with --autoscale: fewest servers", minimum=1),
    Option("max_servers", int, 16, "with --autoscale: most servers", minimum=1),
    Option(
        "scale_metric",
        str,
        None,
        "with --autoscale threshold: requests waiting per server, requests queued or running "
        "per server, or busy fraction (default: load; utilization stays near 1 under "
        "continuous batching)",
        choices=("queue", "load", "utilization"),
    ),
    Option(
        "scale_upper",
        float,
        None,
        "with --autoscale threshold: add a server above this (default: 8)",
    ),
    Option(
        "scale_lower",
        float,
        None,
        "with --autoscale threshold: drain a server below this (default: 2)",
    ),
    Option(
        "startup",
        str,
        None,
        "where a switched-on server loads its weights from; the delay is the --timing preset's "
        "start-up preset, 0 for instant (default: disk with --autoscale; instant for a policy "
        "that scales itself, such as polyserve, as the paper assumes)",
        choices=("instant", "disk", "host", "d2d"),
    ),
)


def slo_scheme_of(slos: str | None, scenario: str | None = None) -> str | None:
    """The SLO scheme ``--slos`` asks for: its default (``slos-serve`` with a scenario, else
    ``polyserve``) when not given, None for ``"none"``."""
    scheme = slos or ("slos-serve" if scenario else "polyserve")
    return None if scheme == "none" else scheme
