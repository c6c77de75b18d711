"""A trace as a request stream: read it, then set its arrival process or its rate.

:func:`read_workload` is what the problem builders and the command line call to turn a trace
(a file or a vendored name) into a workload: it picks the reader, passes the reading options,
and then either draws arrival times from a named process (``arrivals=``, which a length-only
trace needs) or time-scales the trace's own arrivals to a mean rate (``rate=`` alone).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from pathlib import Path

from slolab.instances.hints import SuggestingError, Suggestion
from slolab.instances.readers import (
    ZERO_OUTPUT_POLICIES,
    detect_format,
    read_trace,
    resolve_trace,
)
from slolab.instances.records import MAX_REQUEST_TOKENS, Workload
from slolab.instances.transform import ARRIVAL_PROCESSES, retime, scale_rate


def parse_columns(columns: str | Mapping[str, str]) -> dict[str, str]:
    """A column mapping from ``"arrival_s=ts,prompt_tokens=in,output_tokens=out"`` (or a mapping).

    Keys are workload columns, values file columns; spaces around names are dropped.
    """
    if isinstance(columns, Mapping):
        return {str(k): str(v) for k, v in columns.items()}
    mapping: dict[str, str] = {}
    for pair in str(columns).split(","):
        target, sep, source = (part.strip() for part in pair.partition("="))
        if not sep or not target or not source:
            raise SuggestingError(
                Suggestion("columns"),
                " takes WORKLOAD=FILE pairs separated by commas, such as "
                f"arrival_s=ts,prompt_tokens=in,output_tokens=out; got {pair.strip()!r}",
            )
        if target in mapping:
            raise SuggestingError(
                Suggestion("columns"), f" maps the workload column {target!r} twice"
            )
        mapping[target] = source
    return mapping


def read_workload(
    trace: str | Path,
    *,
    format: str | None = None,
    columns: str | Mapping[str, str] | None = None,
    time_unit: str | None = None,
    arrivals: str | None = None,
    rate: float | None = None,
    cv: float | None = None,
    seed: int | None = None,
    zero_output: str = "error",
    max_request_tokens: int | None = None,
    limit: int | None = None,
    order_only: bool = False,
    keep_hash_ids: bool = False,
) -> Workload:
    """Read a trace and give it its arrival process or rate.

    Parameters
    ----------
    trace : str or Path
        A trace file, or the name of a vendored trace (see
        :func:`slolab.instances.resolve_trace`).
    format : str, optional
        Reader by name (default: detected; a column mapping implies ``"generic"``).
    columns : mapping or str, optional
        ``generic``: workload column -> file column, or ``"arrival_s=ts,prompt_tokens=in,..."``.
    time_unit : str, optional
        ``generic``: unit of the arrival column (``"s"`` when omitted).
    arrivals : {"poisson", "gamma", "uniform"}, optional
        Draw arrival times from this process at ``rate`` (rows keep their file order). A
        length-only trace needs it; for a trace with times it replaces them.
    rate : float, optional
        Mean arrival rate (requests per second): of the process with ``arrivals``, else the
        trace's own arrivals are time-scaled to it (burstiness kept,
        :func:`slolab.instances.scale_rate`).
    cv : float, optional
        With ``arrivals="gamma"``: coefficient of variation of the gaps.
    seed : int, optional
        Seed of the arrival process (required for ``"poisson"`` and ``"gamma"``).
    zero_output : {"error", "drop", "clamp"}
        Rows with 0 output tokens (see :func:`slolab.instances.read_azure`).
    max_request_tokens : int, optional
        Bound on a request's prompt and output tokens (default
        :data:`~slolab.instances.records.MAX_REQUEST_TOKENS`).
    limit : int, optional
        Read only the first ``limit`` requests of the file.
    order_only : bool
        The caller uses only the order of the requests (a snapshot queues them all at one
        time): a length-only trace read without ``arrivals`` keeps its file order, with
        arrivals 1 s apart, instead of raising.
    keep_hash_ids : bool
        A trace with prompt block ids (Mooncake) keeps them as the ``hash_ids`` column (prefix
        caching reads it); other formats have none and ignore this.

    Returns
    -------
    Workload

    Raises
    ------
    TraceError
        Bad input in the file (names file, line, field, value), or a length-only trace without
        ``arrivals`` and ``rate``.
    ValueError
        An option that does not apply (``columns`` without ``generic``, ``cv`` without gamma
        arrivals, ``arrivals`` without ``rate``) or a bad value; the message names the option.
    """
    path = resolve_trace(trace)
    mapping = parse_columns(columns) if columns is not None else None
    name = format or ("generic" if mapping is not None else detect_format(path))
    _check_arrival_options(arrivals, rate, cv)
    opts: dict[str, object] = {
        "zero_output": zero_output,
        "max_request_tokens": MAX_REQUEST_TOKENS
        if max_request_tokens is None
        else max_request_tokens,
        "limit": limit,
    }
    if zero_output not in ZERO_OUTPUT_POLICIES:
        raise SuggestingError(
            Suggestion("zero_output"),
            f" must be one of {', '.join(ZERO_OUTPUT_POLICIES)}, got {zero_output!r}",
        )
    if name == "generic":
        if mapping is None:
            raise SuggestingError(
                "the generic format needs a column mapping: pass ",
                Suggestion("columns"),
                " such as arrival_s=ts,prompt_tokens=in,output_tokens=out",
            )
        opts["columns"] = mapping
        if time_unit is not None:
            opts["time_unit"] = time_unit
    else:
        for option, value in (("columns", mapping), ("time_unit", time_unit)):
            if value is not None:
                raise SuggestingError(
                    Suggestion(option),
                    f" applies to the generic format only (this trace is read as {name!r}; pass ",
                    Suggestion("format", ("generic",)),
                    " to map its columns)",
                )
    if name == "lengths":
        if arrivals is None and order_only:
            arrivals, rate = "uniform", 1.0
        return read_trace(path, name, arrivals=arrivals, rate=rate, seed=seed, cv=cv, **opts)
    if keep_hash_ids and name == "mooncake":
        opts["keep_hash_ids"] = True
    workload = read_trace(path, name, **opts)
    if arrivals is not None:
        assert rate is not None
        return retime(workload, arrivals, rate, seed=seed, cv=cv)
    if rate is not None:
        return scale_rate(workload, rate)
    return workload


def _positive(value: object) -> bool:
    """A finite real number > 0 (not a bool)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return False
    number = float(value)
    return math.isfinite(number) and number > 0


def _check_arrival_options(arrivals: str | None, rate: float | None, cv: float | None) -> None:
    if rate is not None and not _positive(rate):
        raise SuggestingError(
            Suggestion("rate"), f" must be a finite number > 0 (requests per second), got {rate!r}"
        )
    if cv is not None and not _positive(cv):
        raise SuggestingError(Suggestion("cv"), f" must be a finite number > 0, got {cv!r}")
    if arrivals == "gamma" and cv is None:
        raise SuggestingError(
            "gamma arrivals need the coefficient of variation of their gaps: pass ",
            Suggestion("cv"),
            " (1 is Poisson, larger is burstier)",
        )
    if arrivals is not None:
        if arrivals not in ARRIVAL_PROCESSES:
            raise SuggestingError(
                Suggestion("arrivals"),
                f" must be one of {', '.join(ARRIVAL_PROCESSES)}, got {arrivals!r}",
            )
        if rate is None:
            raise SuggestingError(
                f"{arrivals} arrivals need their mean rate: pass ",
                Suggestion("rate"),
                " (requests per second)",
            )
    if cv is not None and arrivals != "gamma":
        raise SuggestingError(
            Suggestion("cv"),
            " applies to gamma arrivals only: pass ",
            Suggestion("arrivals", ("gamma",)),
        )
