"""Trace readers: real request traces to a :class:`~slolab.instances.records.Workload`.

Every reader returns a workload whose ``arrival_s`` is in seconds from the earliest request
(so the first row arrives at 0), sorted by arrival (stable: rows with equal times keep their
file order), with ``prompt_tokens`` and ``output_tokens`` as integers in
``[1, max_request_tokens]`` (2**20 by default). Bad input raises a :class:`TraceError` that
names the file, the 1-based line (the header is line 1), the field and the offending value; a
reader never returns a partial workload.

Formats (see ``docs/instances.md``):

``"azure"``
    Azure LLM inference traces, 2023 and 2024 (week-long) releases: CSV with ``TIMESTAMP``
    (wall-clock date-time strings, any number of sub-second digits, optional UTC offset),
    ``ContextTokens`` and ``GeneratedTokens``. Read in chunks, so the 17M-row 2024 files stream
    with bounded memory.
``"mooncake"``
    Mooncake JSONL: ``timestamp`` (milliseconds), ``input_length``, ``output_length``,
    ``hash_ids`` (512-token prefix-block ids; kept only with ``keep_hash_ids=True``).
``"burstgpt"``
    BurstGPT CSV as published: ``Timestamp`` (s), ``Model``, ``Request tokens``,
    ``Response tokens``, ``Total tokens``, ``Log Type``.
``"vidur"``
    Request traces in the Vidur layout: ``arrived_at`` (s), ``num_prefill_tokens``,
    ``num_decode_tokens``.
``"lengths"``
    Length-only CSV (``num_prefill_tokens``, ``num_decode_tokens``, as in the vidur processed
    traces) with arrivals drawn from a named process.
``"generic"``
    Any CSV or Parquet file with a column mapping.
"""

from __future__ import annotations

import inspect
import json
import logging
import re
import warnings
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from slolab.instances.hints import SuggestingError, Suggestion, worded
from slolab.instances.records import (
    HASH_ID_TOKENS,
    MAX_REQUEST_TOKENS,
    STANDARD_COLUMNS,
    Workload,
    check_max_request_tokens,
)
from slolab.instances.transform import ARRIVAL_PROCESSES, draw_arrivals

logger = logging.getLogger("slolab")

#: Vendored traces (in ``instances/data/traces``) by name.
TRACES: dict[str, str] = {
    "azure_conv_2023": "azure_conv_2023.csv",
    "azure_code_2023": "azure_code_2023.csv",
    "arxiv_summarization": "arxiv_summarization_lengths_llama2.csv",
    "mooncake_conversation": "mooncake_conversation.jsonl",
}

FORMATS = ("azure", "mooncake", "burstgpt", "vidur", "lengths", "generic")
ZERO_OUTPUT_POLICIES = ("error", "drop", "clamp")
UNSORTED_POLICIES = ("sort", "error")
#: Divisor from a numeric time column's unit to seconds; ``"datetime"`` parses date-time strings.
TIME_UNITS: dict[str, float] = {"s": 1.0, "ms": 1e3, "us": 1e6, "ns": 1e9}

AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
MOONCAKE_FIELDS = ("timestamp", "input_length", "output_length")
LENGTHS_COLUMNS = ("num_prefill_tokens", "num_decode_tokens")
VIDUR_COLUMNS = ("arrived_at", "num_prefill_tokens", "num_decode_tokens")
BURSTGPT_COLUMNS = ("Timestamp", "Request tokens", "Response tokens")
#: BurstGPT columns kept as labels with ``keep_labels=True``: workload column -> file column.
BURSTGPT_LABELS = (("model", "Model"), ("log_type", "Log Type"))

_TRACE_DIR = Path(__file__).resolve().parent / "data" / "traces"
_DEFAULT_CHUNK_ROWS = 1_000_000
_DATETIME_EXAMPLE = "2023-11-16 18:17:03.9799600"


class TraceError(ValueError):
    """Bad trace input, with where it is.

    Attributes
    ----------
    path : str
        The file.
    line : int or None
        1-based file line (header = line 1), or 1-based row for Parquet files.
    field : str or None
        The column or JSON field.
    value : object
        The offending value as read.
    cli_message : str
        The message with the options it suggests worded as command-line flags
        (``--zero-output`` rather than ``zero_output=``; see :mod:`slolab.instances.hints`).
    """

    def __init__(
        self,
        message: str,
        *,
        path: str | Path,
        line: int | None = None,
        field: str | None = None,
        value: object = None,
        cli_message: str | None = None,
    ) -> None:
        super().__init__(message)
        self.path = str(path)
        self.line = line
        self.field = field
        self.value = value
        self.cli_message = message if cli_message is None else cli_message


#: A message as parts: text, and options to suggest (worded for Python or the command line).
_Message = str | tuple[str | Suggestion, ...]


def _error(
    path: str | Path,
    line: int | None,
    problem: _Message,
    *,
    field: str | None = None,
    value: object = None,
    unit: str = "line",
) -> TraceError:
    where = Path(path).name if line is None else f"{Path(path).name} {unit} {line}"
    parts = (problem,) if isinstance(problem, str) else problem
    python, cli = worded(f"{where}: ", *parts)
    return TraceError(python, path=path, line=line, field=field, value=value, cli_message=cli)


def _field_error(
    path: str | Path,
    line: int,
    field: str,
    must_be: str,
    value: object,
    *,
    hint: _Message = "",
    unit: str = "line",
) -> TraceError:
    hint_parts = (hint,) if isinstance(hint, str) else hint
    problem = (f"{field} must be {must_be}, got {value!r}", *hint_parts)
    return _error(path, line, problem, field=field, value=value, unit=unit)


def trace_path(name: str) -> Path:
    """Path of a vendored trace by name.

    Parameters
    ----------
    name : str
        One of :data:`TRACES`: ``"azure_conv_2023"``, ``"azure_code_2023"``,
        ``"arxiv_summarization"``, ``"mooncake_conversation"``.

    Returns
    -------
    pathlib.Path
        The file inside the installed package (``instances/data/traces``).
    """
    if name not in TRACES:
        raise ValueError(f"unknown trace {name!r}; known: {', '.join(TRACES)}")
    return _TRACE_DIR / TRACES[name]


def resolve_trace(trace: str | Path) -> Path:
    """A trace file from a path or the name of a vendored trace (see :data:`TRACES`)."""
    p = Path(trace)
    if p.is_dir():
        raise IsADirectoryError(f"{trace} is a directory, not a trace file")
    if p.exists():
        return p
    try:
        return trace_path(str(trace))
    except (KeyError, ValueError) as exc:
        raise FileNotFoundError(
            f"no trace file {str(trace)!r} (and no vendored trace by that name: {exc})"
        ) from None


# -- validation of one chunk ------------------------------------------------------------------


class _Chunk:
    """Checks on one chunk of rows; the first problem in file order wins.

    ``lines`` gives the file line (or Parquet row) of every row of the chunk.
    """

    def __init__(
        self,
        path: str | Path,
        lines: np.ndarray,
        unit: str = "line",
        text: bool = True,
        max_tokens: int = MAX_REQUEST_TOKENS,
    ) -> None:
        self.path = path
        self.lines = lines
        self.unit = unit
        self.text = text
        self.max_tokens = max_tokens
        self.problems: list[tuple[int, TraceError]] = []

    def line(self, row: int) -> int:
        return int(self.lines[row])

    def shown(self, values: pd.Series, row: int) -> object:
        """The value of ``row`` as the file has it: text for CSV, a Python scalar otherwise."""
        value = values.iloc[row]
        if isinstance(value, np.generic):
            value = value.item()
        if self.text and not isinstance(value, str):
            value = str(value)
        return value

    def flag(self, bad: np.ndarray, make: Callable[[int], TraceError]) -> None:
        if bad.any():
            row = int(np.flatnonzero(bad)[0])
            self.problems.append((row, make(row)))

    def raise_first(self) -> None:
        if self.problems:
            raise min(self.problems, key=lambda p: p[0])[1]

    def lengths(
        self, raw: pd.Series, field: str, zero_output: str | None, shown: pd.Series | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Integer lengths in ``[1, max_tokens]`` and the mask of zeros ``zero_output`` lets through.

        ``zero_output`` is None for a length that must be >= 1 whatever the policy (prompts).
        ``shown`` is what error messages quote (default ``raw``). A length above the bound is
        refused here, before anything is allocated for it.
        """
        shown = raw if shown is None else shown
        values = pd.to_numeric(raw, errors="coerce").to_numpy(dtype="float64", na_value=np.nan)
        with np.errstate(invalid="ignore"):
            integral = (np.abs(values) < 2.0**53) & (values == np.floor(values))
            zero = integral & (values == 0)
            too_long = integral & (values > self.max_tokens)
            allowed_zero = zero if zero_output in ("drop", "clamp") else np.zeros_like(zero)
            bad = ~integral | ((values < 1) & ~allowed_zero) | too_long
        zero_hint: _Message = ""
        if zero_output == "error":
            zero_hint = (
                " (zero-length outputs: pass ",
                Suggestion("zero_output", ("drop", "clamp")),
                ")",
            )
        bound_hint: _Message = (
            f" (a request may have at most {self.max_tokens} tokens; if the trace really has "
            "longer ones, raise the bound with ",
            Suggestion("max_request_tokens"),
            ")",
        )

        def make(row: int) -> TraceError:
            value = self.shown(shown, row)
            if too_long[row]:
                return _field_error(
                    self.path,
                    self.line(row),
                    field,
                    f"an integer in [1, {self.max_tokens}]",
                    value,
                    hint=bound_hint,
                    unit=self.unit,
                )
            return _field_error(
                self.path,
                self.line(row),
                field,
                "an integer >= 1",
                value,
                hint=zero_hint if zero[row] else "",
                unit=self.unit,
            )

        self.flag(bad, make)
        return np.where(integral, values, 0.0).astype("int64"), allowed_zero

    def datetimes(self, raw: pd.Series, field: str, zones: _Zones) -> np.ndarray:
        """Date-time strings to int64 nanoseconds (UTC; a time without offset is read as UTC).

        Times with a UTC offset and times without one may not be mixed in a file (the naive
        ones would silently be taken as UTC): ``zones`` holds what the first parsed time had,
        and the first time that differs is an error naming its line and the first one's.
        """
        parsed = _parse_datetimes(raw)
        if parsed is None:
            # the offsets differ within the chunk: find the times that have one
            with_offset = raw.astype(str).str.contains(_UTC_OFFSET).to_numpy()
            parsed = pd.to_datetime(raw, format="ISO8601", errors="coerce", utc=True)
        else:
            aware = getattr(parsed.dtype, "tz", None) is not None
            with_offset = np.full(len(raw), aware)
        bad = parsed.isna().to_numpy()
        zones.check(self, raw, field, with_offset, ~bad)
        self.flag(
            bad,
            lambda row: _field_error(
                self.path,
                self.line(row),
                field,
                f"a date-time like {_DATETIME_EXAMPLE!r}",
                self.shown(raw, row),
                unit=self.unit,
            ),
        )
        ns = pd.DatetimeIndex(parsed).as_unit("ns").asi8
        return np.where(bad, 0, ns)

    def numbers(self, raw: pd.Series, field: str, shown: pd.Series | None = None) -> np.ndarray:
        """Finite numbers (int64 when every value is an integer, else float64)."""
        shown = raw if shown is None else shown
        values = pd.to_numeric(raw, errors="coerce")
        as_float = values.to_numpy(dtype="float64", na_value=np.nan)
        bad = ~np.isfinite(as_float)
        self.flag(
            bad,
            lambda row: _field_error(
                self.path,
                self.line(row),
                field,
                "a finite number",
                self.shown(shown, row),
                unit=self.unit,
            ),
        )
        if values.dtype.kind in "iu":
            return values.to_numpy(dtype="int64")
        return as_float

    def standard(self, raw: pd.Series, column: str, field: str) -> np.ndarray:
        """A standard workload ``column`` (SLOs, priority, tier, value) read from ``field``."""
        values = pd.to_numeric(raw, errors="coerce").to_numpy(dtype="float64", na_value=np.nan)
        blank = raw.astype(str).str.strip().isin(["", "nan", "NaN", "None"]).to_numpy()
        with np.errstate(invalid="ignore"):
            if column.endswith("_slo_s"):
                bad = ~blank & ~(np.isfinite(values) & (values >= 0))
                must_be = "empty (no objective) or a finite number >= 0"
            elif column == "priority":
                bad = ~(np.isfinite(values) & (values > 0))
                must_be = "a finite number > 0"
            elif column == "tier":
                bad = ~(np.isfinite(values) & (values >= 0) & (values == np.floor(values)))
                must_be = "an integer >= 0"
            else:
                bad = ~(np.isfinite(values) & (values >= 0))
                must_be = "a finite number >= 0"
        self.flag(
            bad,
            lambda row: _field_error(
                self.path, self.line(row), field, must_be, self.shown(raw, row), unit=self.unit
            ),
        )
        if column == "tier":
            return np.where(bad, 0, values).astype("int64")
        return values


_UTC_OFFSET = re.compile(r"(?:[zZ]|[+-]\d\d(?::?\d\d)?)\s*$")


def _parse_datetimes(raw: pd.Series) -> pd.Series | None:
    """ISO date-times, each keeping its offset; None when the offsets differ (or some lack one)."""
    with warnings.catch_warnings():
        # older pandas warns (rather than raises) on mixed offsets and returns objects
        warnings.simplefilter("ignore", FutureWarning)
        try:
            parsed = pd.to_datetime(raw, format="ISO8601", errors="coerce")
        except (ValueError, TypeError):
            return None
    return parsed if parsed.dtype.kind == "M" else None


class _Zones:
    """Whether the date-times of one file carry a UTC offset, as its first parsed time says."""

    def __init__(self) -> None:
        self.with_offset: bool | None = None
        self.line = 0
        self.value: object = None

    def check(
        self, chunk: _Chunk, raw: pd.Series, field: str, with_offset: np.ndarray, valid: np.ndarray
    ) -> None:
        rows = np.flatnonzero(valid)
        if len(rows) == 0:
            return
        if self.with_offset is None:
            first = int(rows[0])
            self.with_offset = bool(with_offset[first])
            self.line = chunk.line(first)
            self.value = chunk.shown(raw, first)
        differs = valid & (with_offset != self.with_offset)

        def make(row: int) -> TraceError:
            value = chunk.shown(raw, row)
            has, other = ("has no", "has one") if self.with_offset else ("has a", "has none")
            problem = (
                f"{field} {has} UTC offset ({value!r}) but {chunk.unit} {self.line} "
                f"({self.value!r}) {other}: time zones must not be mixed (give every time an "
                "offset, or none)"
            )
            return _error(
                chunk.path, chunk.line(row), problem, field=field, value=value, unit=chunk.unit
            )

        chunk.flag(differs, make)


# -- assembling the workload --------------------------------------------------------------------


class _Columns:
    """Per-chunk arrays, concatenated once at the end."""

    def __init__(self) -> None:
        self.parts: dict[str, list[np.ndarray]] = {}
        self.line_parts: list[np.ndarray] = []
        self.zero_rows = 0

    def add_chunk(
        self, lines: np.ndarray, zero: np.ndarray, zero_output: str, **arrays: np.ndarray
    ) -> None:
        """Add a validated chunk, applying the zero-output policy to ``output_tokens``."""
        if zero.any():
            self.zero_rows += int(zero.sum())
            if zero_output == "clamp":
                arrays["output_tokens"] = np.where(zero, 1, arrays["output_tokens"])
            else:
                keep = ~zero
                arrays = {name: arr[keep] for name, arr in arrays.items()}
                lines = lines[keep]
        self.line_parts.append(lines)
        for name, arr in arrays.items():
            self.parts.setdefault(name, []).append(arr)

    def log_zero(self, path: str | Path, zero_output: str, field: str) -> None:
        if self.zero_rows:
            action = "dropped" if zero_output == "drop" else "set to 1"
            logger.info(
                "%s: %d rows with %s = 0 %s", Path(path).name, self.zero_rows, field, action
            )

    def __len__(self) -> int:
        return sum(len(x) for x in self.line_parts)

    def take(self, name: str) -> np.ndarray:
        """The whole column, releasing its chunks."""
        parts = self.parts.pop(name)
        if any(p.dtype == object for p in parts):
            out = np.empty(sum(len(p) for p in parts), dtype=object)
            i = 0
            for p in parts:
                out[i : i + len(p)] = p
                i += len(p)
            return out
        return np.concatenate(parts)

    def lines(self) -> np.ndarray:
        return np.concatenate(self.line_parts)


def _check_policy(name: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ValueError(f"{name} must be one of {', '.join(allowed)}, got {value!r}")


def _order(
    times: np.ndarray,
    lines_of: Callable[[], np.ndarray],
    path: str | Path,
    field: str,
    unsorted: str,
    unit: str,
    show: Callable[[Any], object],
) -> np.ndarray | None:
    """Stable sort permutation of ``times``, None when already sorted."""
    if len(times) < 2:
        return None
    down = times[1:] < times[:-1]
    if not down.any():
        return None
    i = int(np.flatnonzero(down)[0]) + 1
    if unsorted == "error":
        lines = lines_of()
        value = show(times[i])
        raise _error(
            path,
            int(lines[i]),
            f"{field} must be non-decreasing (unsorted='error'), got {value!r} after "
            f"{show(times[i - 1])!r} ({unit} {int(lines[i - 1])})",
            field=field,
            value=value,
            unit=unit,
        )
    logger.info(
        "%s: %d out-of-order times, sorted by time (stable)", Path(path).name, int(down.sum())
    )
    return np.argsort(times, kind="stable")


def _show_ns(ns: Any) -> str:
    """Integer UTC nanoseconds as a date-time string."""
    return str(pd.Timestamp(int(ns)))


def _show_number(x: Any) -> object:
    return x.item() if isinstance(x, np.generic) else x


def _seconds_from_first(times: np.ndarray, divisor: float) -> np.ndarray:
    """Times (int or float, in some unit) to float seconds from the earliest one."""
    start = times.min()
    return (times - start) / divisor


def _build(
    cols: _Columns,
    path: str | Path,
    *,
    time_field: str,
    divisor: float,
    unsorted: str,
    unit: str = "line",
    time_is_ns: bool = False,
    max_tokens: int = MAX_REQUEST_TOKENS,
) -> Workload:
    """Sort by time (or refuse to), re-zero to the earliest time, build the workload."""
    if len(cols) == 0:
        raise _error(path, 1, "no requests in the file")
    times = cols.take("time")
    show = _show_ns if time_is_ns else _show_number
    perm = _order(times, cols.lines, path, time_field, unsorted, unit, show)
    arrival_s = _seconds_from_first(times, divisor)
    del times
    arrays = {"arrival_s": arrival_s if perm is None else arrival_s[perm]}
    for name in list(cols.parts):
        column = cols.take(name)
        arrays[name] = column if perm is None else column[perm]
    return Workload(arrays, source=str(path), max_request_tokens=max_tokens)


# -- CSV streaming ------------------------------------------------------------------------------


@contextmanager
def _decoding(path: str | Path) -> Iterator[None]:
    """Turn a failure to decode the file as UTF-8 text into a TraceError naming the file."""
    try:
        yield
    except UnicodeDecodeError as exc:
        raise _error(
            path,
            None,
            f"not a text file (its bytes are not UTF-8: {exc.reason}); expected a CSV or "
            "JSON-lines trace",
        ) from None


def _csv_header(path: str | Path) -> list[str]:
    try:
        with _decoding(path):
            return list(pd.read_csv(path, nrows=0).columns)
    except pd.errors.EmptyDataError:
        raise _error(path, 1, "file is empty, expected a header line") from None
    except pd.errors.ParserError as exc:
        raise _error(path, 1, f"not a readable CSV header ({str(exc).strip()})") from None


def _require_columns(path: str | Path, header: list[str], required: tuple[str, ...]) -> None:
    for name in required:
        if name not in header:
            raise _error(
                path,
                1,
                f"missing column {name} (header has {', '.join(header) or 'nothing'})",
                field=name,
                value=",".join(header),
            )


_PARSER_LINE = re.compile(r"line (\d+)")


class _TypedParseFailed(Exception):
    """A typed (fast) CSV read met a length that is not a plain integer."""


def _csv_chunks(
    path: str | Path,
    columns: tuple[str, ...],
    limit: int | None,
    chunk_rows: int,
    int_columns: tuple[str, ...] = (),
) -> Iterator[tuple[np.ndarray, pd.DataFrame]]:
    """Chunks of the file with the line of each row (header = line 1).

    Every column is parsed (not only ``columns``) so that a row with more fields than the
    header is an error rather than silently truncated. ``int_columns`` are parsed as int64 by
    the C parser (fast); a value that is not a plain integer raises :class:`_TypedParseFailed`
    so the caller can re-read everything as text and report the exact line. The other
    ``columns`` are read as text.
    """
    dtype = {c: ("int64" if c in int_columns else object) for c in columns}
    reader = pd.read_csv(
        path,
        dtype=dtype,
        na_filter=False,
        skip_blank_lines=False,
        chunksize=chunk_rows,
        nrows=limit,
    )
    first_line = 2
    try:
        with reader, _decoding(path):
            while (chunk := _next_chunk(reader)) is not None:
                yield first_line + np.arange(len(chunk)), chunk[list(columns)]
                first_line += len(chunk)
    except pd.errors.ParserError as exc:
        found = _PARSER_LINE.search(str(exc))
        line = int(found.group(1)) if found else None
        raise _error(path, line, f"malformed CSV row ({str(exc).strip()})") from None
    except (ValueError, OverflowError) as exc:
        if int_columns:
            raise _TypedParseFailed(str(exc)) from exc
        raise


def _next_chunk(reader: Any) -> pd.DataFrame | None:
    """The reader's next chunk (None at the end), without the RuntimeWarning ("invalid value
    encountered in cast") the C parser emits for ``inf`` in an int64 column: that value fails
    the typed pass, and the text pass reports it with its line."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return next(reader, None)


def _read_csv(
    path: str | Path,
    columns: tuple[str, ...],
    int_columns: tuple[str, ...],
    limit: int | None,
    chunk_rows: int,
    on_chunk: Callable[[np.ndarray, pd.DataFrame, _Columns], None],
) -> _Columns:
    """Stream a CSV through ``on_chunk``: typed fast pass, text pass if that one fails."""
    cols = _Columns()
    try:
        for lines, chunk in _csv_chunks(path, columns, limit, chunk_rows, int_columns):
            on_chunk(lines, chunk, cols)
        return cols
    except _TypedParseFailed as exc:
        logger.debug("%s: re-reading as text to locate a bad length (%s)", Path(path).name, exc)
    cols = _Columns()
    for lines, chunk in _csv_chunks(path, columns, limit, chunk_rows):
        on_chunk(lines, chunk, cols)
    return cols


def _check_limit(limit: int | None) -> None:
    if limit is not None and (not isinstance(limit, int) or limit < 1):
        raise ValueError(f"limit must be a positive integer or None, got {limit!r}")


def _check_chunk_rows(chunk_rows: int) -> None:
    if not isinstance(chunk_rows, int) or chunk_rows < 1:
        raise ValueError(f"chunk_rows must be a positive integer, got {chunk_rows!r}")


# -- readers ------------------------------------------------------------------------------------


def read_azure(
    path: str | Path,
    *,
    limit: int | None = None,
    zero_output: str = "error",
    unsorted: str = "sort",
    chunk_rows: int = _DEFAULT_CHUNK_ROWS,
    max_request_tokens: int = MAX_REQUEST_TOKENS,
) -> Workload:
    """Read an Azure LLM inference trace (2023 or 2024 week-long release).

    Parameters
    ----------
    path : str or Path
        CSV with columns ``TIMESTAMP``, ``ContextTokens``, ``GeneratedTokens`` (others ignored).
        Timestamps are ISO date-times such as ``2023-11-16 18:17:03.9799600`` (2023) or
        ``2024-05-10 00:00:00.009930+00:00`` (2024); they are parsed to integer nanoseconds,
        so arrivals are exact to the trace's resolution.
    limit : int, optional
        Read only the first ``limit`` data rows.
    zero_output : {"error", "drop", "clamp"}
        What to do with rows whose ``GeneratedTokens`` is 0 (a request needs at least one
        output token): raise (default), drop the row, or set it to 1.
    unsorted : {"sort", "error"}
        Rows out of time order are sorted by time (stable, default) or raise.
    chunk_rows : int
        Rows parsed per chunk; memory holds one chunk of raw strings at a time.
    max_request_tokens : int
        Most prompt tokens, and most output tokens, a row may declare (default
        :data:`~slolab.instances.records.MAX_REQUEST_TOKENS` = 2**20); a longer row raises,
        naming its line. Timestamps must all carry a UTC offset or none may (a mix raises).

    Returns
    -------
    Workload
        ``arrival_s`` (s from the earliest row), ``prompt_tokens`` (``ContextTokens``),
        ``output_tokens`` (``GeneratedTokens``).

    References
    ----------
    Patel et al., "Splitwise", ISCA 2024 (2023 traces); Stojkovic et al., "DynamoLLM",
    HPCA 2025 (2024 traces). Azure/AzurePublicDataset, CC-BY 4.0.
    """
    _check_limit(limit)
    _check_chunk_rows(chunk_rows)
    _check_policy("zero_output", zero_output, ZERO_OUTPUT_POLICIES)
    _check_policy("unsorted", unsorted, UNSORTED_POLICIES)
    max_tokens = check_max_request_tokens(max_request_tokens)
    _require_columns(path, _csv_header(path), AZURE_COLUMNS)
    time_col, prompt_col, output_col = AZURE_COLUMNS
    zones = _Zones()

    def on_chunk(lines: np.ndarray, chunk: pd.DataFrame, cols: _Columns) -> None:
        check = _Chunk(path, lines, max_tokens=max_tokens)
        ns = check.datetimes(chunk[time_col], time_col, zones)
        prompt, _ = check.lengths(chunk[prompt_col], prompt_col, None)
        output, zero = check.lengths(chunk[output_col], output_col, zero_output)
        check.raise_first()
        cols.add_chunk(
            lines, zero, zero_output, time=ns, prompt_tokens=prompt, output_tokens=output
        )

    cols = _read_csv(path, AZURE_COLUMNS, (prompt_col, output_col), limit, chunk_rows, on_chunk)
    cols.log_zero(path, zero_output, output_col)
    return _build(
        cols,
        path,
        time_field=time_col,
        divisor=1e9,
        unsorted=unsorted,
        time_is_ns=True,
        max_tokens=max_tokens,
    )


def read_mooncake(
    path: str | Path,
    *,
    limit: int | None = None,
    keep_hash_ids: bool = False,
    zero_output: str = "error",
    unsorted: str = "sort",
    max_request_tokens: int = MAX_REQUEST_TOKENS,
) -> Workload:
    """Read a Mooncake JSONL trace.

    Parameters
    ----------
    path : str or Path
        One JSON object per line with ``timestamp`` (ms from the start of the trace),
        ``input_length``, ``output_length`` and ``hash_ids``. Blank lines are skipped.
    limit : int, optional
        Read only the first ``limit`` records.
    keep_hash_ids : bool
        Keep ``hash_ids`` (the prompt's 512-token prefix-block ids) as an object column of
        lists.
    zero_output, unsorted, max_request_tokens
        As in :func:`read_azure`.

    Returns
    -------
    Workload

    References
    ----------
    Qin et al., "Mooncake: A KVCache-centric Architecture for Serving LLM Chatbot", FAST 2025;
    kvcache-ai/Mooncake, Apache-2.0.
    """
    _check_limit(limit)
    _check_policy("zero_output", zero_output, ZERO_OUTPUT_POLICIES)
    _check_policy("unsorted", unsorted, UNSORTED_POLICIES)
    max_tokens = check_max_request_tokens(max_request_tokens)
    times: list[Any] = []
    prompts: list[Any] = []
    outputs: list[Any] = []
    hashes: list[Any] = []
    line_numbers: list[int] = []
    with open(path, encoding="utf-8") as handle, _decoding(path):
        for number, text in enumerate(handle, start=1):
            if limit is not None and len(times) >= limit:
                break
            if not text.strip():
                continue
            try:
                record = json.loads(text)
            except json.JSONDecodeError as exc:
                raise _error(
                    path, number, f"not a JSON object ({exc.msg})", value=text.strip()[:80]
                ) from None
            if not isinstance(record, dict):
                raise _error(path, number, "not a JSON object", value=text.strip()[:80])
            for name in MOONCAKE_FIELDS + (("hash_ids",) if keep_hash_ids else ()):
                if name not in record:
                    raise _error(path, number, f"missing field {name}", field=name)
            times.append(record["timestamp"])
            prompts.append(record["input_length"])
            outputs.append(record["output_length"])
            line_numbers.append(number)
            if keep_hash_ids:
                ids = record["hash_ids"]
                if not isinstance(ids, list) or not all(
                    isinstance(x, int) and not isinstance(x, bool) for x in ids
                ):
                    raise _field_error(path, number, "hash_ids", "a list of integers", ids)
                prompt_length = record["input_length"]
                if isinstance(prompt_length, int) and not isinstance(prompt_length, bool):
                    blocks = -(-prompt_length // HASH_ID_TOKENS)
                    if prompt_length > 0 and len(ids) != blocks:
                        raise _field_error(
                            path,
                            number,
                            "hash_ids",
                            f"one id per {HASH_ID_TOKENS}-token block of the prompt "
                            f"({blocks} for input_length {prompt_length})",
                            ids if len(ids) <= 8 else f"{len(ids)} ids",
                        )
                hashes.append(ids)
    if not times:
        raise _error(path, 1, "no requests in the file")
    lines = np.asarray(line_numbers)
    check = _Chunk(path, lines, text=False, max_tokens=max_tokens)
    time_field, prompt_field, output_field = MOONCAKE_FIELDS
    stamp_raw, stamp_shown = _json_numbers(times)
    stamp = check.numbers(stamp_raw, time_field, stamp_shown)
    prompt_raw, prompt_shown = _json_numbers(prompts)
    prompt, _ = check.lengths(prompt_raw, prompt_field, None, prompt_shown)
    output_raw, output_shown = _json_numbers(outputs)
    output, zero = check.lengths(output_raw, output_field, zero_output, output_shown)
    check.raise_first()
    arrays: dict[str, np.ndarray] = {
        "time": stamp,
        "prompt_tokens": prompt,
        "output_tokens": output,
    }
    if keep_hash_ids:
        hash_column = np.empty(len(hashes), dtype=object)
        for i, block_ids in enumerate(hashes):
            hash_column[i] = block_ids
        arrays["hash_ids"] = hash_column
    cols = _Columns()
    cols.add_chunk(lines, zero, zero_output, **arrays)
    cols.log_zero(path, zero_output, output_field)
    return _build(
        cols, path, time_field=time_field, divisor=1e3, unsorted=unsorted, max_tokens=max_tokens
    )


def _json_numbers(values: list[Any]) -> tuple[pd.Series, pd.Series]:
    """JSON values as numbers (NaN for anything but an int or float) and as read."""
    numbers = [
        v if isinstance(v, (int, float)) and not isinstance(v, bool) else np.nan for v in values
    ]
    return pd.Series(numbers, dtype=object), _shown(values)


def _shown(values: list[Any]) -> pd.Series:
    return pd.Series(values, dtype=object)


def read_lengths(
    path: str | Path,
    *,
    arrivals: str | None = None,
    rate: float | None = None,
    seed: int | None = None,
    cv: float | None = None,
    limit: int | None = None,
    zero_output: str = "error",
    chunk_rows: int = _DEFAULT_CHUNK_ROWS,
    max_request_tokens: int = MAX_REQUEST_TOKENS,
) -> Workload:
    """Read a length-only CSV and draw arrivals from a named process.

    Parameters
    ----------
    path : str or Path
        CSV with ``num_prefill_tokens`` and ``num_decode_tokens`` (others ignored). Requests
        arrive in file order.
    arrivals : {"poisson", "gamma", "uniform"}
        Arrival process (see :func:`slolab.instances.transform.draw_arrivals`). Required: the
        file has no times, and without a process a :class:`TraceError` says what to pass.
    rate : float
        Mean arrival rate in requests per second (required with ``arrivals``).
    seed : int
        Required for ``"poisson"`` and ``"gamma"``.
    cv : float
        Coefficient of variation of the inter-arrival gaps, required for ``"gamma"``
        (``cv = 1`` is Poisson; larger is burstier).
    limit, zero_output, chunk_rows, max_request_tokens
        As in :func:`read_azure`.

    Returns
    -------
    Workload
        The first request arrives at 0.
    """
    _check_limit(limit)
    _check_chunk_rows(chunk_rows)
    _check_policy("zero_output", zero_output, ZERO_OUTPUT_POLICIES)
    max_tokens = check_max_request_tokens(max_request_tokens)
    _require_columns(path, _csv_header(path), LENGTHS_COLUMNS)
    if arrivals is None or rate is None:
        raise _no_times_error(path)
    _check_policy("arrivals", arrivals, ARRIVAL_PROCESSES)
    prompt_col, output_col = LENGTHS_COLUMNS

    def on_chunk(lines: np.ndarray, chunk: pd.DataFrame, cols: _Columns) -> None:
        check = _Chunk(path, lines, max_tokens=max_tokens)
        prompt, _ = check.lengths(chunk[prompt_col], prompt_col, None)
        output, zero = check.lengths(chunk[output_col], output_col, zero_output)
        check.raise_first()
        cols.add_chunk(lines, zero, zero_output, prompt_tokens=prompt, output_tokens=output)

    cols = _read_csv(path, LENGTHS_COLUMNS, LENGTHS_COLUMNS, limit, chunk_rows, on_chunk)
    cols.log_zero(path, zero_output, output_col)
    if len(cols) == 0:
        raise _error(path, 1, "no requests in the file")
    arrival_s = draw_arrivals(len(cols), arrivals, rate, seed=seed, cv=cv)
    return Workload(
        {
            "arrival_s": arrival_s,
            "prompt_tokens": cols.take("prompt_tokens"),
            "output_tokens": cols.take("output_tokens"),
        },
        source=str(path),
        max_request_tokens=max_tokens,
    )


def _no_times_error(path: str | Path) -> TraceError:
    """A length-only trace read without an arrival process."""
    return _error(
        path,
        None,
        (
            "a length-only trace has no arrival times; draw them from a process: pass ",
            Suggestion("arrivals", ARRIVAL_PROCESSES),
            " and ",
            Suggestion("rate"),
            " (requests per second; gamma also takes ",
            Suggestion("cv"),
            ")",
        ),
    )


def _read_timed_lengths(
    path: str | Path,
    columns: tuple[str, str, str],
    *,
    labels: Mapping[str, str],
    limit: int | None,
    zero_output: str,
    unsorted: str,
    chunk_rows: int,
    max_request_tokens: int,
) -> Workload:
    """A CSV of numeric times in seconds and two lengths (``columns``: time, prompt, output).

    ``labels`` maps workload column names to file columns kept as text (or numbers).
    """
    _check_limit(limit)
    _check_chunk_rows(chunk_rows)
    _check_policy("zero_output", zero_output, ZERO_OUTPUT_POLICIES)
    _check_policy("unsorted", unsorted, UNSORTED_POLICIES)
    max_tokens = check_max_request_tokens(max_request_tokens)
    time_col, prompt_col, output_col = columns
    wanted = (*columns, *labels.values())
    _require_columns(path, _csv_header(path), wanted)

    def on_chunk(lines: np.ndarray, chunk: pd.DataFrame, cols: _Columns) -> None:
        check = _Chunk(path, lines, max_tokens=max_tokens)
        time = check.numbers(chunk[time_col], time_col)
        prompt, _ = check.lengths(chunk[prompt_col], prompt_col, None)
        output, zero = check.lengths(chunk[output_col], output_col, zero_output)
        check.raise_first()
        extra = {name: _extra_column(chunk[source]) for name, source in labels.items()}
        cols.add_chunk(
            lines, zero, zero_output, time=time, prompt_tokens=prompt, output_tokens=output, **extra
        )

    cols = _read_csv(path, wanted, (prompt_col, output_col), limit, chunk_rows, on_chunk)
    cols.log_zero(path, zero_output, output_col)
    _unify_time_parts(cols)
    return _build(
        cols, path, time_field=time_col, divisor=1.0, unsorted=unsorted, max_tokens=max_tokens
    )


def read_vidur(
    path: str | Path,
    *,
    limit: int | None = None,
    zero_output: str = "error",
    unsorted: str = "sort",
    chunk_rows: int = _DEFAULT_CHUNK_ROWS,
    max_request_tokens: int = MAX_REQUEST_TOKENS,
) -> Workload:
    """Read a request trace in the Vidur / Splitwise-simulator layout.

    Parameters
    ----------
    path : str or Path
        CSV with ``arrived_at`` (seconds), ``num_prefill_tokens`` and ``num_decode_tokens``
        (others ignored), the request-trace layout Vidur's trace-replay generator reads.
    limit, zero_output, unsorted, chunk_rows, max_request_tokens
        As in :func:`read_azure`.

    Returns
    -------
    Workload
        ``arrival_s`` (s from the earliest ``arrived_at``), ``prompt_tokens``
        (``num_prefill_tokens``), ``output_tokens`` (``num_decode_tokens``).

    References
    ----------
    Agrawal et al., "Vidur: A Large-Scale Simulation Framework for LLM Inference",
    MLSys 2024; microsoft/vidur, MIT.
    """
    return _read_timed_lengths(
        path,
        VIDUR_COLUMNS,
        labels={},
        limit=limit,
        zero_output=zero_output,
        unsorted=unsorted,
        chunk_rows=chunk_rows,
        max_request_tokens=max_request_tokens,
    )


def read_burstgpt(
    path: str | Path,
    *,
    limit: int | None = None,
    keep_labels: bool = False,
    zero_output: str = "error",
    unsorted: str = "sort",
    chunk_rows: int = _DEFAULT_CHUNK_ROWS,
    max_request_tokens: int = MAX_REQUEST_TOKENS,
) -> Workload:
    """Read a BurstGPT trace as published (``BurstGPT_1.csv`` and the other release files).

    Parameters
    ----------
    path : str or Path
        CSV with ``Timestamp`` (seconds from midnight of the trace's first day), ``Model``,
        ``Request tokens``, ``Response tokens``, ``Total tokens`` and ``Log Type``. Only
        ``Timestamp``, ``Request tokens`` and ``Response tokens`` are required.
    limit : int, optional
        Read only the first ``limit`` data rows.
    keep_labels : bool
        Keep ``Model`` (``ChatGPT``, ``GPT-4``) and ``Log Type`` (``Conversation log``,
        ``API log``) as the string columns ``model`` and ``log_type``.
    zero_output : {"error", "drop", "clamp"}
        The release files other than ``*_without_fails_*`` have failed requests with
        ``Response tokens`` = 0: they raise by default (the message names the option), or are
        dropped or set to 1 output token, as in every reader.
    unsorted, chunk_rows, max_request_tokens
        As in :func:`read_azure`.

    Returns
    -------
    Workload
        ``arrival_s`` (s from the earliest ``Timestamp``), ``prompt_tokens``
        (``Request tokens``), ``output_tokens`` (``Response tokens``).

    References
    ----------
    Wang et al., "BurstGPT: A Real-world Workload Dataset to Optimize LLM Serving Systems",
    arXiv:2401.17644; HPMLL/BurstGPT (README, "Schema").
    """
    return _read_timed_lengths(
        path,
        BURSTGPT_COLUMNS,
        labels=dict(BURSTGPT_LABELS) if keep_labels else {},
        limit=limit,
        zero_output=zero_output,
        unsorted=unsorted,
        chunk_rows=chunk_rows,
        max_request_tokens=max_request_tokens,
    )


def read_generic(
    path: str | Path,
    *,
    columns: Mapping[str, str],
    time_unit: str = "s",
    limit: int | None = None,
    zero_output: str = "error",
    unsorted: str = "sort",
    chunk_rows: int = _DEFAULT_CHUNK_ROWS,
    max_request_tokens: int = MAX_REQUEST_TOKENS,
) -> Workload:
    """Read any CSV or Parquet file through a column mapping.

    Parameters
    ----------
    path : str or Path
        ``.parquet`` files are read as Parquet (row numbers in errors are 1-based data rows),
        anything else as CSV.
    columns : mapping of workload column to file column
        Must map ``arrival_s``, ``prompt_tokens`` and ``output_tokens``. Other standard columns
        (``ttft_slo_s``, ``tpot_slo_s``, ``e2e_slo_s`` in seconds, empty for none;
        ``priority``, ``tier``, ``value``) are validated as in the records; any other name is
        kept as an extra column (numeric when every value is a number, else strings).
    time_unit : {"s", "ms", "us", "ns", "datetime"}
        Unit of the arrival column; ``"datetime"`` parses ISO date-time strings (all with a
        UTC offset or none).
    limit, zero_output, unsorted, chunk_rows, max_request_tokens
        As in :func:`read_azure`.

    Returns
    -------
    Workload
    """
    _check_limit(limit)
    _check_chunk_rows(chunk_rows)
    _check_policy("zero_output", zero_output, ZERO_OUTPUT_POLICIES)
    _check_policy("unsorted", unsorted, UNSORTED_POLICIES)
    if time_unit != "datetime" and time_unit not in TIME_UNITS:
        raise ValueError(
            f"time_unit must be one of {', '.join([*TIME_UNITS, 'datetime'])}, got {time_unit!r}"
        )
    max_tokens = check_max_request_tokens(max_request_tokens)
    missing = [c for c in ("arrival_s", "prompt_tokens", "output_tokens") if c not in columns]
    if missing:
        raise SuggestingError(
            Suggestion("columns"),
            f" must map {', '.join(missing)} to a file column",
        )
    is_parquet = Path(path).suffix.lower() == ".parquet"
    unit = "row" if is_parquet else "line"
    source_cols = tuple(dict.fromkeys(columns.values()))
    zones = _Zones()

    def on_chunk(lines: np.ndarray, chunk: pd.DataFrame, cols: _Columns) -> None:
        check = _Chunk(path, lines, unit, text=not is_parquet, max_tokens=max_tokens)
        arrays: dict[str, np.ndarray] = {}
        output_zero = np.zeros(len(chunk), dtype=bool)
        for target, source in columns.items():
            raw = chunk[source]
            if target == "arrival_s":
                if time_unit == "datetime":
                    arrays["time"] = check.datetimes(raw, source, zones)
                else:
                    arrays["time"] = check.numbers(raw, source)
            elif target == "prompt_tokens":
                arrays[target], _ = check.lengths(raw, source, None)
            elif target == "output_tokens":
                arrays[target], output_zero = check.lengths(raw, source, zero_output)
            elif target in STANDARD_COLUMNS:
                arrays[target] = check.standard(raw, target, source)
            else:
                arrays[target] = _extra_column(raw)
        check.raise_first()
        cols.add_chunk(lines, output_zero, zero_output, **arrays)

    if is_parquet:
        cols = _Columns()
        for lines, chunk in _parquet_chunks(path, source_cols, limit, chunk_rows):
            on_chunk(lines, chunk, cols)
    else:
        _require_columns(path, _csv_header(path), source_cols)
        lengths = tuple(dict.fromkeys((columns["prompt_tokens"], columns["output_tokens"])))
        cols = _read_csv(path, source_cols, lengths, limit, chunk_rows, on_chunk)
    cols.log_zero(path, zero_output, columns["output_tokens"])
    _unify_time_parts(cols)
    divisor = 1e9 if time_unit == "datetime" else TIME_UNITS[time_unit]
    return _build(
        cols,
        path,
        time_field=columns["arrival_s"],
        divisor=divisor,
        unsorted=unsorted,
        unit=unit,
        time_is_ns=time_unit == "datetime",
        max_tokens=max_tokens,
    )


def _unify_time_parts(cols: _Columns) -> None:
    """Chunks of a numeric time column may parse as int in one chunk and float in another."""
    parts = cols.parts.get("time", [])
    if len({p.dtype.kind for p in parts}) > 1:
        cols.parts["time"] = [p.astype("float64") for p in parts]


def _extra_column(raw: pd.Series) -> np.ndarray:
    numeric = pd.to_numeric(raw, errors="coerce")
    if not numeric.isna().any():
        return numeric.to_numpy()
    return raw.astype(str).to_numpy(dtype=str)


def _parquet_chunks(
    path: str | Path, columns: tuple[str, ...], limit: int | None, chunk_rows: int
) -> Iterator[tuple[np.ndarray, pd.DataFrame]]:
    """Record batches as frames with the 1-based row number of each row."""
    import pyarrow.parquet as pq

    try:
        handle = pq.ParquetFile(path)
    except Exception as exc:
        raise _error(path, None, f"not a readable Parquet file ({exc})") from None
    names = handle.schema_arrow.names
    for name in columns:
        if name not in names:
            raise _error(
                path, None, f"missing column {name} (file has {', '.join(names)})", field=name
            )
    first_row = 1
    for batch in handle.iter_batches(batch_size=chunk_rows, columns=list(columns)):
        frame = batch.to_pandas()
        if limit is not None:
            frame = frame.iloc[: max(limit - first_row + 1, 0)]
        if len(frame) == 0:
            break
        yield first_row + np.arange(len(frame)), frame.reset_index(drop=True)
        first_row += len(frame)


# -- dispatcher -------------------------------------------------------------------------------

_READERS: dict[str, Callable[..., Workload]] = {
    "azure": read_azure,
    "mooncake": read_mooncake,
    "burstgpt": read_burstgpt,
    "vidur": read_vidur,
    "lengths": read_lengths,
    "generic": read_generic,
}


def detect_format(path: str | Path) -> str:
    """Name of the trace format of ``path``, from its extension and header.

    ``.jsonl`` files whose first record has ``timestamp``, ``input_length`` and
    ``output_length`` are ``"mooncake"``; CSV files are told by their header: the Azure
    columns ``"azure"``, BurstGPT's ``"burstgpt"``, ``arrived_at`` with the two length columns
    ``"vidur"``, the length columns alone ``"lengths"``; ``.parquet`` files are ``"generic"``.
    Anything else raises a :class:`TraceError` that lists the known formats.
    """
    suffix = Path(path).suffix.lower()
    if suffix == ".parquet":
        return "generic"
    if suffix in (".jsonl", ".json"):
        with open(path, encoding="utf-8") as handle, _decoding(path):
            first = next((line for line in handle if line.strip()), "")
        try:
            record = json.loads(first) if first else None
        except json.JSONDecodeError:
            record = None
        if isinstance(record, dict) and all(k in record for k in MOONCAKE_FIELDS):
            return "mooncake"
        raise _error(
            path,
            None,
            (
                "cannot tell the trace format from the first record; pass ",
                Suggestion("format"),
                f" one of {', '.join(FORMATS)}",
            ),
        )
    header = _csv_header(path)
    for name, required in _DETECTED_BY_HEADER:
        if all(c in header for c in required):
            return name
    raise _error(
        path,
        1,
        (
            f"cannot tell the trace format from the header ({', '.join(header)}); pass ",
            Suggestion("format"),
            f" one of {', '.join(FORMATS)} (generic needs ",
            Suggestion("columns"),
            ")",
        ),
        value=",".join(header),
    )


#: CSV formats by the columns their header must have, in the order they are tried.
_DETECTED_BY_HEADER: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("azure", AZURE_COLUMNS),
    ("burstgpt", BURSTGPT_COLUMNS),
    ("vidur", VIDUR_COLUMNS),
    ("lengths", LENGTHS_COLUMNS),
)


def read_trace(path: str | Path, format: str | None = None, **opts: Any) -> Workload:
    """Read a request trace into a :class:`Workload`.

    Parameters
    ----------
    path : str or Path
        The trace file.
    format : {"azure", "mooncake", "burstgpt", "vidur", "lengths", "generic"}, optional
        The format by name; detected from the extension and header when omitted (a
        ``columns=`` mapping implies ``"generic"``).
    **opts
        Options of the format's reader: :func:`read_azure`, :func:`read_mooncake`,
        :func:`read_burstgpt`, :func:`read_vidur`, :func:`read_lengths`, :func:`read_generic`.

    Returns
    -------
    Workload

    Raises
    ------
    TraceError
        Bad input (names file, line, field and value).
    ValueError
        Unknown format name or option.
    """
    if not Path(path).is_file():
        raise FileNotFoundError(f"no trace file at {path}")
    if format is None:
        format = "generic" if "columns" in opts else detect_format(path)
    if format not in _READERS:
        raise ValueError(f"unknown trace format {format!r}; known: {', '.join(FORMATS)}")
    reader = _READERS[format]
    accepted = [
        name
        for name, p in inspect.signature(reader).parameters.items()
        if p.kind is inspect.Parameter.KEYWORD_ONLY
    ]
    unknown = sorted(set(opts) - set(accepted))
    if unknown:
        raise ValueError(
            f"unknown option(s) {', '.join(unknown)} for trace format {format!r}; "
            f"accepted: {', '.join(accepted)}"
        )
    return reader(path, **opts)
