"""SLOs-Serve's evaluation scenarios built from the vendored traces, and their capacity.

Scenarios (SLOs-Serve Table 2, as far as the vendored data allows):

==============  ================================  =========================================
scenario        arrivals                          lengths
==============  ================================  =========================================
``chatbot``     Azure conversation 2023           Azure conversation 2023
``coder``       Azure code 2023                   Azure code 2023
``summarizer``  Azure conversation 2023           arXiv summarization (seeded sample)
``mixed``       Azure conversation 2023           the three above, a seeded balanced mix
==============  ================================  =========================================

Every scenario keeps only requests that fit OPT's 2048-token context (``prompt + output <=
2048``): the paper serves OPT models, and with that cut the vendored lengths reproduce its
Table 4 (summarizer prompt mean 1333, P99 1947, output mean 203; coder prompt mean 831,
output mean 26). Arrival times are those of the first ``n`` trace rows (all of them, so a
bursty trace stays as bursty); the lengths are those of the first ``n`` rows that fit (a
seeded sample for the arXiv lengths, which carry no arrival times).

SLOs come from :func:`slolab.instances.assign_slos` with scheme ``"slos-serve"``: the TTFT is
a multiple (3x tight, 5x loose) of the zero-load prefill time of the prompt and the TPOT is
50 ms (tight) or 100 ms (loose), each stage's level from the scenario's Table 1 row, with
``slack`` overriding the prefill level as in :func:`assign_slos`.

:func:`slolab.harness.scenarios.capacity_of` measures a scheduler's serving capacity on a
scenario.

References
----------
Chen et al., "SLOs-Serve: Optimized Serving of Multi-SLO LLMs", 2025: Table 1 (per-stage
slack of each application), Table 2 (scenarios), Table 3 (SLO values), Table 4 (datasets).
"""

from __future__ import annotations

import functools
import logging
from typing import Any

import numpy as np
from slolab.instances.readers import read_trace, trace_path
from slolab.instances.records import Cluster, Instance, Workload
from slolab.instances.slos import assign_slos
from slolab.instances.transform import scale_rate
from slolab.timing import TimingModel, preset

__all__ = [
    "CONTEXT_TOKENS",
    "KV_CAPACITY_TOKENS",
    "MAX_BATCH_TOKENS",
    "SCENARIOS",
    "TIMING_PRESET",
    "scenario_instance",
    "scenario_workload",
]

logger = logging.getLogger("slolab")

#: Scenario names, in the paper's order.
SCENARIOS = ("chatbot", "coder", "summarizer", "mixed")
#: Scheduler names accepted by :func:`make_policy` and :func:`capacity_of`.
POLICIES = ("slos-serve", "sarathi", "vllm")
#: Default timing preset (OPT-13B on an H100, SLOs-Serve's roofline).
TIMING_PRESET = "opt-13b-h100-slos"
#: OPT's context window: requests with more prompt plus output tokens are left out.
CONTEXT_TOKENS = 2048
#: KV-cache tokens per replica.
KV_CAPACITY_TOKENS = 200_000
#: Largest iteration (tokens) a replica runs.
MAX_BATCH_TOKENS = 2048

_CONV, _CODE, _ARXIV = "azure_conv_2023", "azure_code_2023", "arxiv_summarization"
#: Where each single-task scenario takes its arrivals and its lengths.
_SOURCES = {"chatbot": (_CONV, _CONV), "coder": (_CODE, _CODE), "summarizer": (_CONV, _ARXIV)}


def check_name(name: str, known: tuple[str, ...], what: str) -> None:
    """Refuse a ``name`` not in ``known``, listing the known ones (``what``: the kind)."""
    if name not in known:
        raise ValueError(f"unknown {what} {name!r}; known: {', '.join(known)}")


def _check_seed(seed: Any) -> int:
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise TypeError(f"seed must be an int, got {seed!r}")
    return int(seed)


@functools.cache
def _trace_columns(trace: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(arrival_s, prompt_tokens, output_tokens)`` of a vendored trace (read once).

    The arXiv file has lengths only; its arrival column (uniform, 1 req/s) is never used.
    """
    opts: dict[str, Any] = {"arrivals": "uniform", "rate": 1.0} if trace == _ARXIV else {}
    wl = read_trace(trace_path(trace), **opts)
    columns = (wl.arrival_s.copy(), wl.prompt_tokens.copy(), wl.output_tokens.copy())
    for column in columns:
        column.setflags(write=False)
    return columns


def _fitting_lengths(trace: str) -> tuple[np.ndarray, np.ndarray]:
    """Prompt and output lengths of the trace rows within :data:`CONTEXT_TOKENS`, in order."""
    _, prompt, output = _trace_columns(trace)
    fits = (prompt + output) <= CONTEXT_TOKENS
    return prompt[fits], output[fits]


def _available(name: str) -> int:
    """How many requests scenario ``name`` can have."""
    if name == "mixed":
        return len(_trace_columns(_CONV)[0])
    arrivals, lengths = _SOURCES[name]
    return min(len(_trace_columns(arrivals)[0]), len(_fitting_lengths(lengths)[0]))


def _lengths(task: str, k: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """``k`` (prompt, output) pairs of ``task``: the first ``k`` that fit, or a sample (arXiv)."""
    prompt, output = _fitting_lengths(_SOURCES[task][1])
    if k > len(prompt):
        raise ValueError(f"scenario {task!r} has {len(prompt)} requests that fit, asked for {k}")
    if task == "summarizer":
        rows = np.sort(rng.choice(len(prompt), size=k, replace=False))
    else:
        rows = np.arange(k)
    return prompt[rows], output[rows]


def scenario_workload(
    name: str,
    *,
    seed: int,
    n: int | None = None,
    slack: str | None = "tight",
    decode_slack: str | None = None,
    timing: str | TimingModel = TIMING_PRESET,
) -> Workload:
    """The requests of an SLOs-Serve scenario with their SLOs.

    Parameters
    ----------
    name : {"chatbot", "coder", "summarizer", "mixed"}
        Scenario (see the module docstring for its arrivals and lengths).
    seed : int
        Seeds the arXiv length sample, the task mix and the SLO assignment.
    n : int, optional
        Number of requests (default: as many as the scenario's data allows).
    slack : {"tight", "loose"} or None, default "tight"
        Prefill level for every request (TTFT = 3x or 5x the zero-load prefill time); None
        keeps each task's Table 1 level.
    decode_slack : {"tight", "loose"} or None
        Decode level for every request (TPOT 50 or 100 ms); None keeps each task's Table 1
        level.
    timing : preset name or TimingModel, default "opt-13b-h100-slos"
        Timing model of the zero-load prefill times.

    Returns
    -------
    Workload
        Columns ``arrival_s``, ``prompt_tokens``, ``output_tokens``, ``ttft_slo_s``,
        ``tpot_slo_s``, ``e2e_slo_s`` (nan), ``tier`` and ``task`` (the scenario name per
        request; for ``"mixed"`` one of the other three).

    References
    ----------
    SLOs-Serve, Tables 1-4 and Sec. 6 ("Workloads", "SLOs").
    """
    check_name(name, SCENARIOS, "scenario")
    rng = np.random.default_rng(_check_seed(seed))
    model = preset(timing) if isinstance(timing, str) else timing
    available = _available(name)
    if n is None:
        n = available
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or not 1 <= n <= available:
        raise ValueError(f"n must be an integer in [1, {available}] for {name!r}, got {n!r}")
    arrival_trace = _CONV if name == "mixed" else _SOURCES[name][0]
    arrival_s = _trace_columns(arrival_trace)[0][:n]
    if name == "mixed":
        singles = SCENARIOS[:3]
        labels = np.array([singles[i % 3] for i in range(n)])[rng.permutation(n)]
        prompt = np.empty(n, dtype=np.int64)
        output = np.empty(n, dtype=np.int64)
        for task in singles:
            rows = np.flatnonzero(labels == task)
            prompt[rows], output[rows] = _lengths(task, len(rows), rng)
    else:
        labels = np.full(n, name)
        prompt, output = _lengths(name, n, rng)
    wl = Workload(
        {
            "arrival_s": arrival_s - arrival_s[0],
            "prompt_tokens": prompt,
            "output_tokens": output,
            "task": labels,
        },
        source=f"slos-serve {name} ({n} requests, seed {seed})",
    )
    return assign_slos(
        wl,
        "slos-serve",
        seed=seed,
        timing=model,
        scenario="mixed",
        slack=slack,
        decode_slack=decode_slack,
    )


def scenario_instance(
    name: str,
    *,
    seed: int,
    replicas: int,
    n: int,
    slack: str | None = "tight",
    rate: float | None = None,
    timing: str | TimingModel = TIMING_PRESET,
) -> Instance:
    """A serving instance of a scenario on ``replicas`` colocated replicas.

    Each replica holds :data:`KV_CAPACITY_TOKENS` KV tokens and runs iterations of at most
    :data:`MAX_BATCH_TOKENS` tokens. ``rate`` (req/s) rescales the arrival times
    (:func:`slolab.instances.scale_rate`); None keeps the trace's own.
    """
    model = preset(timing) if isinstance(timing, str) else timing
    wl = scenario_workload(name, seed=seed, n=n, slack=slack, timing=model)
    if rate is not None:
        wl = scale_rate(wl, rate)
    cluster = Cluster(
        servers=replicas, kv_capacity_tokens=KV_CAPACITY_TOKENS, max_batch_tokens=MAX_BATCH_TOKENS
    )
    settings = {"seed": seed, "slack": slack or "table1", "rate": rate or "trace"}
    return Instance(
        f"{name}-{n}x{replicas}", wl, cluster, model, problem="serving", settings=settings
    )
