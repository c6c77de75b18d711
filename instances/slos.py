"""SLO and priority assignment by named scheme, as each paper describes it.

None of the public traces carries SLOs or priorities; each paper assigns them in its
evaluation. :func:`assign_slos` reproduces those assignments by name, seeded, and returns a new
workload. The derivations (and the choices the papers leave open) are in ``docs/instances.md``.

==============  ===========================================================================
scheme          columns set
==============  ===========================================================================
``polyserve``   ``ttft_slo_s``, ``tpot_slo_s``, ``e2e_slo_s`` (nan), ``tier``
``proserve``    ``priority`` (and ``ttft_slo_s`` / ``tpot_slo_s`` when given)
``slos-serve``  ``ttft_slo_s``, ``tpot_slo_s``, ``e2e_slo_s`` (nan), ``tier``
``sa``          ``ttft_slo_s``, ``tpot_slo_s``, ``e2e_slo_s``, ``tier``, ``task``
``hyperflexis`` ``ttft_slo_s``, ``tpot_slo_s``, ``e2e_slo_s`` (nan), ``tier``, ``task``
``table``       the columns of the given table
==============  ===========================================================================

Other columns are kept, so schemes compose (for example ``proserve`` priorities on top of
``polyserve`` SLOs).
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from slolab.instances.hints import SuggestingError, Suggestion
from slolab.instances.records import Workload
from slolab.timing.base import (
    TimingModel,
    padded_decode_features,
    padded_prefill_features,
)

# -- timing helpers -----------------------------------------------------------------------------


def zero_load_prefill_s(timing: TimingModel, prompt_tokens: np.ndarray) -> np.ndarray:
    """Time (s) of one prefill iteration of each prompt alone on an idle server.

    The iteration holds one sequence of ``p`` prompt tokens:
    ``T(prefill_tokens = p, num_prefill_seqs = 1, prefill_attention_work = p (p + 1) / 2)``.
    """
    return np.asarray(timing.times(padded_prefill_features(1, prompt_tokens)), dtype=float)


def idle_decode_s(
    timing: TimingModel, prompt_tokens: np.ndarray, output_tokens: np.ndarray
) -> np.ndarray:
    """Time (s) of a request's last decode iteration alone on an idle server (0 if none).

    A request with ``o`` output tokens has ``o - 1`` decode steps; step ``j`` reads
    ``p + j`` KV tokens (as in :mod:`slolab.sim.static`), so the last and longest reads
    ``p + o - 1``: ``T(decode_tokens = 1, num_decode_seqs = 1, decode_kv_tokens = p + o - 1)``.
    """
    p = np.asarray(prompt_tokens, dtype=float)
    o = np.asarray(output_tokens, dtype=float)
    times = np.asarray(timing.times(padded_decode_features(1, p + o - 1.0)), dtype=float)
    return np.where(o > 1, times, 0.0)


def tdg_token_weights(workload: Workload, how: str = "ratio-of-means") -> dict[str, float]:
    """First-token and decode-token weights of ProServe's TDG from the input/output lengths.

    ProServe sets "the ratio between the first-token weight and the decode-token weight ...
    based on the average ratio of input to output length from the dataset". With
    ``w_decode = 1``:

    - ``"ratio-of-means"`` (default): ``w_prefill = mean(prompt_tokens) / mean(output_tokens)``;
    - ``"mean-of-ratios"``: ``w_prefill = mean(prompt_tokens / output_tokens)``.

    Returns
    -------
    dict
        ``{"w_prefill": ..., "w_decode": 1.0}``, ready for ``Instance.settings`` and
        ``slolab.sim.metrics.tdg``.

    References
    ----------
    ProServe, Sec. 2 (Eq. 3, TDG weights ``w_p``, ``w_d``) and Sec. 5.1 ("Details").
    """
    p = workload.prompt_tokens.astype(float)
    o = workload.output_tokens.astype(float)
    if how == "ratio-of-means":
        ratio = float(p.mean() / o.mean())
    elif how == "mean-of-ratios":
        ratio = float(np.mean(p / o))
    else:
        raise ValueError(f"how must be 'ratio-of-means' or 'mean-of-ratios', got {how!r}")
    return {"w_prefill": ratio, "w_decode": 1.0}


# -- shared checks ------------------------------------------------------------------------------


def _need_timing(scheme: str, timing: TimingModel | None) -> TimingModel:
    if timing is None:
        raise ValueError(f"scheme {scheme!r} needs a timing model (timing=...)")
    if not isinstance(timing, TimingModel):
        raise TypeError(f"timing must be a TimingModel, got {type(timing).__name__}")
    return timing


def _positive_sorted(name: str, values: Sequence[float]) -> np.ndarray:
    arr = np.asarray(values, dtype=float)
    if arr.ndim != 1 or len(arr) == 0:
        raise ValueError(f"{name} must be a non-empty list of seconds, got {values!r}")
    if not (np.all(np.isfinite(arr)) and np.all(arr > 0) and np.all(np.diff(arr) > 0)):
        raise ValueError(f"{name} must be increasing positive seconds, got {list(values)}")
    return arr


def _probabilities(name: str, values: Sequence[float], size: int) -> np.ndarray:
    arr = np.asarray(values, dtype=float)
    if arr.shape != (size,) or np.any(arr < 0) or not math.isclose(arr.sum(), 1.0, abs_tol=1e-9):
        raise ValueError(
            f"{name} must be {size} non-negative probabilities summing to 1, got {list(values)}"
        )
    return arr / arr.sum()


def _task_labels(
    workload: Workload,
    scheme: str,
    task: str | None,
    known: Sequence[str],
    mixes: Mapping[str, Sequence[str]],
    rng: np.random.Generator,
) -> np.ndarray:
    """Per-row task names: a ``task`` column, one task for all rows, or a balanced mix."""
    n = len(workload)
    if task is None:
        if "task" not in workload:
            raise ValueError(
                f"scheme {scheme!r} needs a task column or task= one of "
                f"{', '.join([*known, *mixes])}"
            )
        labels = np.asarray(workload["task"]).astype(str)
    elif task in mixes:
        members = list(mixes[task])
        labels = np.array([members[i % len(members)] for i in range(n)])
        labels = labels[rng.permutation(n)]
    elif task in known:
        labels = np.full(n, task)
    else:
        raise ValueError(
            f"unknown task {task!r} for scheme {scheme!r}; known: {', '.join([*known, *mixes])}"
        )
    unknown = sorted(set(labels.tolist()) - set(known))
    if unknown:
        row = int(np.flatnonzero(labels == unknown[0])[0])
        raise ValueError(
            f"{workload.source}: task must be one of {', '.join(known)}, got {unknown[0]!r} "
            f"(row {row})"
        )
    return labels


# -- schemes ------------------------------------------------------------------------------------

POLYSERVE_TPOT_TIERS_S = (0.020, 0.030, 0.050, 0.100)
POLYSERVE_TIER_PROBABILITIES = (0.1, 0.2, 0.3, 0.4)
POLYSERVE_TTFT_CHOICES_S = (0.3, 0.5, 1.0)


def _polyserve(
    workload: Workload,
    rng: np.random.Generator,
    timing: TimingModel | None,
    *,
    tpot_tiers_s: Sequence[float] = POLYSERVE_TPOT_TIERS_S,
    tier_probabilities: Sequence[float] = POLYSERVE_TIER_PROBABILITIES,
    ttft_choices_s: Sequence[float] = POLYSERVE_TTFT_CHOICES_S,
) -> dict[str, np.ndarray]:
    timing = _need_timing("polyserve", timing)
    tiers = _positive_sorted("tpot_tiers_s", tpot_tiers_s)
    probs = _probabilities("tier_probabilities", tier_probabilities, len(tiers))
    ttfts = _positive_sorted("ttft_choices_s", ttft_choices_s)
    n = len(workload)
    drawn_tier = rng.choice(len(tiers), size=n, p=probs)
    drawn_ttft = rng.integers(len(ttfts), size=n)
    decode_s = idle_decode_s(timing, workload.prompt_tokens, workload.output_tokens)
    prefill_s = zero_load_prefill_s(timing, workload.prompt_tokens)
    tier = np.maximum(drawn_tier, np.searchsorted(tiers, decode_s, side="left"))
    ttft_index = np.maximum(drawn_ttft, np.searchsorted(ttfts, prefill_s, side="left"))
    best_effort = (tier >= len(tiers)) | (ttft_index >= len(ttfts))
    tpot = np.where(best_effort, np.nan, tiers[np.minimum(tier, len(tiers) - 1)])
    ttft = np.where(best_effort, np.nan, ttfts[np.minimum(ttft_index, len(ttfts) - 1)])
    return {
        "ttft_slo_s": ttft,
        "tpot_slo_s": tpot,
        "e2e_slo_s": np.full(n, np.nan),
        "tier": np.where(best_effort, len(tiers), tier),
    }


def _proserve(
    workload: Workload,
    rng: np.random.Generator,
    timing: TimingModel | None,
    *,
    high_fraction: float = 0.5,
    high_weight: float = 2.0,
    low_weight: float = 1.0,
    ttft_slo_s: float | None = None,
    tpot_slo_s: float | None = None,
) -> dict[str, np.ndarray]:
    if not 0.0 <= high_fraction <= 1.0:
        raise ValueError(f"high_fraction must be in [0, 1], got {high_fraction}")
    for name, weight in (("high_weight", high_weight), ("low_weight", low_weight)):
        if not (math.isfinite(weight) and weight > 0):
            raise ValueError(f"{name} must be a finite number > 0, got {weight}")
    n = len(workload)
    high = rng.random(n) < high_fraction
    out = {"priority": np.where(high, float(high_weight), float(low_weight))}
    for name, value in (("ttft_slo_s", ttft_slo_s), ("tpot_slo_s", tpot_slo_s)):
        if value is not None:
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"{name} must be a finite number > 0 (s), got {value}")
            out[name] = np.full(n, float(value))
    return out


#: SLOs-Serve Table 3: (max TTFT slowdown over zero-load prefill, max TPOT in s) per slack.
SLOS_SERVE_SLACK = {"tight": (3.0, 0.050), "loose": (5.0, 0.100)}
#: SLOs-Serve Table 1: (prefill slack, decode slack) of each prefill-decode scenario.
SLOS_SERVE_SCENARIOS = {
    "chatbot": ("loose", "loose"),
    "coder": ("loose", "tight"),
    "summarizer": ("tight", "loose"),
}


def _slos_serve(
    workload: Workload,
    rng: np.random.Generator,
    timing: TimingModel | None,
    *,
    scenario: str | None = None,
    slack: str | None = None,
    decode_slack: str | None = None,
) -> dict[str, np.ndarray]:
    timing = _need_timing("slos-serve", timing)
    n = len(workload)
    for name, value in (("slack", slack), ("decode_slack", decode_slack)):
        if value is not None and value not in SLOS_SERVE_SLACK:
            raise ValueError(f"{name} must be 'tight' or 'loose', got {value!r}")
    if scenario is None:
        if slack is None:
            raise SuggestingError(
                "scheme 'slos-serve' needs ",
                Suggestion("scenario", (*SLOS_SERVE_SCENARIOS, "mixed")),
                ", or ",
                Suggestion("slack", tuple(SLOS_SERVE_SLACK)),
            )
        prefill = np.full(n, slack)
        decode = np.full(n, decode_slack or slack)
    else:
        if scenario == "mixed":
            labels = _task_labels(workload, "slos-serve", None, list(SLOS_SERVE_SCENARIOS), {}, rng)
        elif scenario in SLOS_SERVE_SCENARIOS:
            labels = np.full(n, scenario)
        else:
            raise ValueError(
                f"unknown slos-serve scenario {scenario!r}; known: "
                f"{', '.join([*SLOS_SERVE_SCENARIOS, 'mixed'])}"
            )
        prefill = np.array([SLOS_SERVE_SCENARIOS[t][0] for t in labels])
        decode = np.array([SLOS_SERVE_SCENARIOS[t][1] for t in labels])
        if slack is not None:
            prefill = np.full(n, slack)
        if decode_slack is not None:
            decode = np.full(n, decode_slack)
    slowdown = np.where(
        prefill == "tight", SLOS_SERVE_SLACK["tight"][0], SLOS_SERVE_SLACK["loose"][0]
    )
    tight_decode = decode == "tight"
    tpot = np.where(tight_decode, SLOS_SERVE_SLACK["tight"][1], SLOS_SERVE_SLACK["loose"][1])
    return {
        "ttft_slo_s": slowdown * zero_load_prefill_s(timing, workload.prompt_tokens),
        "tpot_slo_s": tpot,
        "e2e_slo_s": np.full(n, np.nan),
        "tier": np.where(tight_decode, 0, 1),
    }


#: SA-ordering Sec. 5.1: chat requests have TTFT and TPOT SLOs, code requests an e2e SLO (s).
SA_TASKS = ("chat", "code")


def _sa(
    workload: Workload,
    rng: np.random.Generator,
    timing: TimingModel | None,
    *,
    task: str | None = None,
    chat_ttft_s: float = 10.0,
    chat_tpot_s: float = 0.050,
    code_e2e_s: float = 30.0,
) -> dict[str, np.ndarray]:
    labels = _task_labels(workload, "sa", task, SA_TASKS, {"mixed": SA_TASKS}, rng)
    chat = labels == "chat"
    return {
        "ttft_slo_s": np.where(chat, chat_ttft_s, np.nan),
        "tpot_slo_s": np.where(chat, chat_tpot_s, np.nan),
        "e2e_slo_s": np.where(chat, np.nan, code_e2e_s),
        "tier": np.where(chat, 0, 1),
        "task": labels,
    }


#: HyperFlexis Table 1 (Sec. 7.3): per-task (TTFT, TPOT) SLOs in seconds.
HYPERFLEXIS_TASKS: dict[str, tuple[float, float]] = {
    "medical_qa": (0.7, 0.5),
    "tldr_content_gen": (1.0, 0.7),
    "tldr_headline_gen": (2.0, 0.9),
    "wikisql": (20.0, 1.0),
    "gsm8k": (0.7, 0.2),
    "sharegpt": (2.0, 0.5),
}
#: HyperFlexis Sec. 7.3 task sets (equal numbers of requests per task).
HYPERFLEXIS_TASK_SETS: dict[str, tuple[str, ...]] = {
    "4-task": ("medical_qa", "tldr_content_gen", "tldr_headline_gen", "wikisql"),
    "2-task": ("gsm8k", "sharegpt"),
}


def _hyperflexis(
    workload: Workload,
    rng: np.random.Generator,
    timing: TimingModel | None,
    *,
    task: str | None = None,
) -> dict[str, np.ndarray]:
    if task is None and "task" not in workload:
        task = "4-task"  # the paper's main benchmark (Sec. 7.3)
    labels = _task_labels(
        workload, "hyperflexis", task, list(HYPERFLEXIS_TASKS), HYPERFLEXIS_TASK_SETS, rng
    )
    ttft = np.array([HYPERFLEXIS_TASKS[t][0] for t in labels])
    tpot = np.array([HYPERFLEXIS_TASKS[t][1] for t in labels])
    position = {t: i for members in HYPERFLEXIS_TASK_SETS.values() for i, t in enumerate(members)}
    return {
        "ttft_slo_s": ttft,
        "tpot_slo_s": tpot,
        "e2e_slo_s": np.full(len(workload), np.nan),
        "tier": np.array([position[t] for t in labels], dtype=np.int64),
        "task": labels,
    }


TABLE_COLUMNS = ("ttft_slo_s", "tpot_slo_s", "e2e_slo_s", "priority", "tier", "value", "task")


def _table(
    workload: Workload,
    rng: np.random.Generator,
    timing: TimingModel | None,
    *,
    table: pd.DataFrame | Mapping[str, Any] | str | Path,
) -> dict[str, np.ndarray]:
    if isinstance(table, (str, Path)):
        frame = pd.read_csv(table)
        where = str(table)
    else:
        frame = pd.DataFrame(table)
        where = "table"
    unknown = [c for c in frame.columns if c not in TABLE_COLUMNS]
    if unknown:
        raise ValueError(
            f"{where}: unknown column(s) {', '.join(map(str, unknown))}; allowed: "
            f"{', '.join(TABLE_COLUMNS)}"
        )
    if len(frame.columns) == 0:
        raise ValueError(f"{where}: no columns; allowed: {', '.join(TABLE_COLUMNS)}")
    if len(frame) != len(workload):
        raise ValueError(f"{where} has {len(frame)} rows, the workload has {len(workload)}")
    out: dict[str, np.ndarray] = {}
    for name in frame.columns:
        column = frame[name]
        if name == "task":
            out[name] = column.astype(str).to_numpy(dtype=str)
            continue
        values = pd.to_numeric(column, errors="coerce").to_numpy(dtype="float64", na_value=np.nan)
        unparsed = np.isnan(values) & column.notna().to_numpy()
        if unparsed.any():
            row = int(np.flatnonzero(unparsed)[0])
            raise ValueError(
                f"{where}: {name} must be a number, got {column.iloc[row]!r} (row {row})"
            )
        out[name] = values
    return out


Scheme = Callable[..., dict[str, np.ndarray]]

#: Registered schemes by name.
SCHEMES: dict[str, Scheme] = {
    "polyserve": _polyserve,
    "proserve": _proserve,
    "slos-serve": _slos_serve,
    "sa": _sa,
    "hyperflexis": _hyperflexis,
    "table": _table,
}


def register_scheme(name: str, scheme: Scheme) -> None:
    """Make ``scheme(workload, rng, timing, **params) -> {column: array}`` available as
    ``name`` (``--slos NAME``): it returns columns of :data:`TABLE_COLUMNS`, one value per
    request, drawing only from ``rng``; its keyword-only parameters are the scheme's."""
    if not name or "+" in name or name == "none":
        raise ValueError(
            f"SLO scheme name must be non-empty, without '+', not 'none'; got {name!r}"
        )
    if not callable(scheme):
        raise TypeError(f"SLO scheme {name!r} must be callable, got {type(scheme).__name__}")
    existing = SCHEMES.get(name)
    if existing is not None and existing is not scheme:
        raise ValueError(f"SLO scheme {name!r} is already registered")
    SCHEMES[name] = scheme


def _load() -> None:
    from slolab.plugin_loading import load_plugins

    load_plugins("slo_schemes", register_scheme)


def scheme_names() -> list[str]:
    """Names of the SLO schemes (the built-in ones, then the plugins')."""
    _load()
    return list(SCHEMES)


def _known_scheme(scheme: str) -> None:
    if scheme not in scheme_names():
        raise ValueError(f"unknown SLO scheme {scheme!r}; known: {', '.join(SCHEMES)}")


def scheme_params(scheme: str) -> list[str]:
    """Names of the parameters a scheme accepts (besides workload, seed and timing)."""
    _known_scheme(scheme)
    signature = inspect.signature(SCHEMES[scheme])
    return [
        name for name, p in signature.parameters.items() if p.kind is inspect.Parameter.KEYWORD_ONLY
    ]


def assign_slos(
    workload: Workload,
    scheme: str,
    seed: int,
    timing: TimingModel | None = None,
    **params: Any,
) -> Workload:
    """Assign SLOs and priorities to every request by a named scheme.

    Parameters
    ----------
    workload : Workload
        The requests (lengths and arrivals are not changed).
    scheme : {"polyserve", "proserve", "slos-serve", "sa", "hyperflexis", "table"} or a plugin's
        The assignment, as the paper's evaluation describes it (a plugin's: its own,
        :func:`register_scheme`):

        - ``"polyserve"``: TPOT tier drawn from ``tpot_tiers_s`` (20/30/50/100 ms) with
          ``tier_probabilities`` (10/20/30/40 %), TTFT uniform over ``ttft_choices_s``
          (300/500/1000 ms); a tier (a TTFT) that an idle server cannot attain under ``timing``
          is bumped to the next looser one that it can; a request with no attainable tier or
          TTFT is best-effort (``tier = len(tpot_tiers_s)``, nan SLOs). ``tier`` is the tier
          index. Needs ``timing``.
        - ``"proserve"``: each request high priority with probability ``high_fraction`` (0.5),
          ``priority = high_weight`` (2) or ``low_weight`` (1); optional uniform
          ``ttft_slo_s`` / ``tpot_slo_s``. The TDG token weights come from
          :func:`tdg_token_weights`.
        - ``"slos-serve"``: ``ttft_slo_s = k x`` zero-load prefill time with ``k = 3`` (tight)
          or ``5`` (loose); ``tpot_slo_s = 50 ms`` (tight) or ``100 ms`` (loose). Give
          ``scenario=`` (``"chatbot"``, ``"coder"``, ``"summarizer"`` per Table 1, or
          ``"mixed"`` from a ``task`` column of those names) or ``slack=`` (prefill; the
          decode slack follows unless ``decode_slack=`` is given). ``tier`` 0 = 50 ms, 1 =
          100 ms. Needs ``timing``.
        - ``"sa"``: ``"chat"`` requests TTFT 10 s and TPOT 50 ms, ``"code"`` requests e2e
          30 s; the task comes from a ``task`` column or ``task=`` (``"chat"``, ``"code"``, or
          ``"mixed"``: half each, shuffled). ``tier`` 0 = chat, 1 = code.
        - ``"hyperflexis"``: per-task TTFT/TPOT from Table 1; ``task=`` a task name, a task
          set (``"4-task"``, ``"2-task"``: equal counts, shuffled) or a ``task`` column;
          without either, the 4-task set.
          ``tier`` = the task's position in its set (Table 1 order).
        - ``"table"``: ``table=`` a DataFrame, mapping or CSV path with any of
          ``ttft_slo_s, tpot_slo_s, e2e_slo_s, priority, tier, value, task``, one row per
          request (empty cells: no objective).
    seed : int
        Seed of every random draw (required even by deterministic schemes, so a call always
        states it).
    timing : TimingModel, optional
        Needed by ``"polyserve"`` and ``"slos-serve"``.
    **params
        Scheme parameters (see :func:`scheme_params`); unknown names raise.

    Returns
    -------
    Workload
        A new workload with the scheme's columns replaced, validated.

    References
    ----------
    PolyServe Sec. 5.1 ("SLO Tiers"); ProServe Sec. 2 and 5.1; SLOs-Serve Tables 1 and 3 and
    Sec. 6; SA-ordering Sec. 5.1 ("SLOs"); HyperFlexis Sec. 7.3, Table 1.
    """
    _known_scheme(scheme)
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise ValueError(f"seed must be an integer, got {seed!r}")
    accepted = scheme_params(scheme)
    unknown = sorted(set(params) - set(accepted))
    if unknown:
        raise ValueError(
            f"unknown parameter(s) {', '.join(unknown)} for SLO scheme {scheme!r}; "
            f"accepted: {', '.join(accepted) or 'none'}"
        )
    rng = np.random.default_rng(int(seed))
    make = SCHEMES[scheme]
    try:
        columns = make(workload, rng, timing, **params)
    except Exception as exc:
        from slolab.plugin_loading import plugin_failure

        failure = plugin_failure(exc, {"SLO scheme": make}, f"assigning SLOs (--slos {scheme})")
        if failure is None:
            raise
        raise failure from exc
    merged = {name: workload[name] for name in workload.columns}
    merged.update(columns)
    try:
        return workload.derived(merged)
    except ValueError as exc:
        raise ValueError(f"SLO scheme {scheme!r} produced invalid columns: {exc}") from None


__all__ = [
    "HYPERFLEXIS_TASKS",
    "HYPERFLEXIS_TASK_SETS",
    "POLYSERVE_TIER_PROBABILITIES",
    "POLYSERVE_TPOT_TIERS_S",
    "POLYSERVE_TTFT_CHOICES_S",
    "SA_TASKS",
    "SCHEMES",
    "SLOS_SERVE_SCENARIOS",
    "SLOS_SERVE_SLACK",
    "TABLE_COLUMNS",
    "assign_slos",
    "idle_decode_s",
    "register_scheme",
    "scheme_names",
    "scheme_params",
    "tdg_token_weights",
    "zero_load_prefill_s",
]
