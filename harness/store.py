"""Results store: one Parquet file per finished run, keyed by a stable hash of the run.

A sweep (every method on every instance under every seed) is a list of *tasks*, each a
``(key, payload)`` pair. :func:`run_all` computes the missing ones and writes each result row
to a :class:`ResultsStore` as soon as it is known, so a sweep killed at any instant resumes
where it stopped and ends with exactly the rows an uninterrupted sweep would have written.

Layout of a store directory::

    <directory>/<key>.parquet                       one finished row (one-row Parquet table)
    <directory>/.<key>.<host>.<pid>.<nonce>.tmp     a row being written (never read)

Guarantees
----------
- A row is visible (``has``, ``get``, ``keys``, ``frame``) only once it is complete: it is
  written to a temporary file in the same directory, flushed and ``fsync``-ed, then renamed to
  ``<key>.parquet`` with :func:`os.replace`, which is atomic on POSIX file systems. A process
  killed at any instant (SIGKILL included) leaves either no file for the row or the whole row;
  a half-written row can only exist under a temporary name, which every read ignores.
- Temporary files left by a dead writer on this host are deleted when the store is next
  opened; those of a live process or of another host are left alone (and still ignored).
- Each key is stored once: writing a key again replaces its row, atomically. With a
  deterministic row function, a resumed sweep therefore has exactly the rows of an
  uninterrupted one: none lost (a task without its file is recomputed) and none duplicated
  (one file per key).
- A ``<key>.parquet`` that cannot be read (damaged by something outside the store) raises
  :class:`StoreReadError` naming the file; the store never returns a partial row.

Several processes may write to one store at once (for example sweep workers on a shared file
system): each put is atomic, and two writers of one key leave one of the two complete rows.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import re
import secrets
import socket
from collections.abc import Callable, Iterable, Mapping
from hashlib import sha256
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from tqdm.auto import tqdm

logger = logging.getLogger("slolab")

#: Column of :meth:`ResultsStore.frame` holding each row's key (reserved: rows cannot use it).
KEY_COLUMN = "run_key"
#: Allowed keys: letters, digits, ``_`` and ``-`` (a :func:`run_key` is 64 hex digits).
KEY_PATTERN = re.compile(r"[A-Za-z0-9_-]{1,200}")

_SUFFIX = ".parquet"
_TEMP_SUFFIX = ".tmp"
_METADATA_KEY = b"slolab.run_key"
_METADATA_FORMAT = b"slolab.store.format"
_FORMAT_VERSION = b"1"

Scalar = bool | int | float | str | None


class StoreReadError(RuntimeError):
    """A row file of a :class:`ResultsStore` could not be read; the message names the file."""


def _canonical_json(value: Any, where: str) -> str:
    """Canonical JSON text of ``value``: sorted keys, no spaces, floats by ``repr``."""
    if isinstance(value, np.generic):
        value = value.item()
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=True)
    if isinstance(value, list | tuple):
        items = (_canonical_json(item, f"{where}[{i}]") for i, item in enumerate(value))
        return "[" + ",".join(items) + "]"
    if isinstance(value, Mapping):
        for name in value:
            if not isinstance(name, str):
                raise TypeError(f"{where} has a non-string key {name!r}; keys must be str")
        fields = (
            json.dumps(name, ensure_ascii=True)
            + ":"
            + _canonical_json(value[name], f"{where}[{name!r}]")
            for name in sorted(value)
        )
        return "{" + ",".join(fields) + "}"
    raise TypeError(
        f"{where} has a value of type {type(value).__name__} ({value!r}); run keys take None, "
        "bool, int, float, str, lists/tuples and str-keyed mappings of these"
    )


def run_key(instance_id: str, method: str, params: Mapping[str, Any], seed: int) -> str:
    """Stable key of one run: the SHA-256 hex digest of its canonical JSON description.

    The description is the object ``{"instance_id": ..., "method": ..., "params": ...,
    "seed": ...}`` written as canonical JSON: keys sorted at every level, separators ``,`` and
    ``:`` without spaces, strings escaped to ASCII, ints in decimal, floats by :func:`repr`
    (the shortest text that round-trips, e.g. ``0.1``; ``nan``, ``inf``, ``-inf`` as written
    by ``repr``), tuples as lists, NumPy scalars as their Python value. The digest of its UTF-8
    bytes depends only on these values, never on the process (``PYTHONHASHSEED``), the
    insertion order of mappings or the Python version (``repr`` of floats is the shortest
    round-trip form on every Python 3 release this package supports).

    Values that compare equal in Python but differ in type give different keys: ``1`` and
    ``1.0``, ``True`` and ``1``, ``0.0`` and ``-0.0``.

    Parameters
    ----------
    instance_id : str
        Identifier of the instance the run solves.
    method : str
        Name of the solver or heuristic.
    params : Mapping[str, Any]
        Method parameters (str keys; values None, bool, int, float, str, or lists, tuples and
        mappings of these).
    seed : int
        Seed of the run.

    Returns
    -------
    str
        64 lowercase hexadecimal digits.
    """
    if not isinstance(instance_id, str):
        raise TypeError(f"instance_id must be str, got {type(instance_id).__name__}")
    if not isinstance(method, str):
        raise TypeError(f"method must be str, got {type(method).__name__}")
    if not isinstance(params, Mapping):
        raise TypeError(f"params must be a mapping, got {type(params).__name__}")
    if isinstance(seed, np.integer):
        seed = int(seed)
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TypeError(f"seed must be int, got {seed!r}")
    document = {"instance_id": instance_id, "method": method, "params": params, "seed": seed}
    return sha256(_canonical_json(document, "run").encode("utf-8")).hexdigest()


def _check_key(key: str) -> None:
    if not isinstance(key, str) or KEY_PATTERN.fullmatch(key) is None:
        raise ValueError(f"key must be 1-200 characters from [A-Za-z0-9_-], got {key!r}")


def _check_row(key: str, row: Mapping[str, Any]) -> dict[str, Scalar]:
    if not isinstance(row, Mapping):
        raise TypeError(f"row for key {key} must be a mapping, got {type(row).__name__}")
    if not row:
        raise ValueError(f"row for key {key} is empty; a row needs at least one column")
    clean: dict[str, Scalar] = {}
    for name, value in row.items():
        if not isinstance(name, str) or not name:
            raise TypeError(f"row for key {key} has a column name {name!r}; names must be str")
        if name == KEY_COLUMN:
            raise ValueError(f"row for key {key} uses the reserved column name {KEY_COLUMN!r}")
        if isinstance(value, np.generic):
            value = value.item()
        if value is not None and not isinstance(value, bool | int | float | str):
            raise TypeError(
                f"row for key {key}, column {name!r}: value {value!r} of type "
                f"{type(value).__name__} is not a scalar (None, bool, int, float, str)"
            )
        if (
            isinstance(value, int)
            and not isinstance(value, bool)
            and not (-(2**63) <= value < 2**63)
        ):
            raise ValueError(f"row for key {key}, column {name!r}: int {value} exceeds int64")
        clean[name] = value
    return clean


def _host_tag() -> str:
    return re.sub(r"[^A-Za-z0-9-]", "-", socket.gethostname()) or "host"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _fsync_directory(directory: Path) -> None:
    if os.name != "posix":
        return
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@dataclasses.dataclass(frozen=True, slots=True)
class RunAllTally:
    """What :func:`run_all` did: rows computed now and tasks skipped as already stored."""

    computed: int
    skipped: int

    def __post_init__(self) -> None:
        if self.computed < 0:
            raise ValueError(f"computed must be >= 0, got {self.computed}")
        if self.skipped < 0:
            raise ValueError(f"skipped must be >= 0, got {self.skipped}")


class ResultsStore:
    """A directory of result rows, one atomic Parquet file per key.

    A row is a mapping from column names (str) to scalars (None, bool, int, float, str;
    NumPy scalars are converted). Opening a store creates the directory if needed and deletes
    temporary files left by dead writers on this host (see the module docstring for the
    guarantees).

    Parameters
    ----------
    directory : str or os.PathLike
        Where the row files live.

    Examples
    --------
    >>> store = ResultsStore(tmp_dir)  # doctest: +SKIP
    >>> key = run_key("sa-n10", "sa", {"cooling": 0.95}, seed=0)  # doctest: +SKIP
    >>> store.put(key, {"objective": 0.31, "runtime_s": 0.02})  # doctest: +SKIP
    >>> store.frame()  # doctest: +SKIP
    """

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self._host = _host_tag()
        removed = self.clean_temp_files()
        if removed:
            logger.info(
                "results store %s: removed %d stale temporary files", self.directory, removed
            )

    def __repr__(self) -> str:
        return f"ResultsStore({str(self.directory)!r})"

    def path_of(self, key: str) -> Path:
        """Final file of ``key``: ``<directory>/<key>.parquet``."""
        _check_key(key)
        return self.directory / f"{key}{_SUFFIX}"

    def clean_temp_files(self) -> int:
        """Delete temporary files whose writer (this host, by process id) is no longer alive.

        Returns
        -------
        int
            Number of files deleted.
        """
        removed = 0
        for entry in self.directory.iterdir():
            name = entry.name
            if not (name.startswith(".") and name.endswith(_TEMP_SUFFIX)):
                continue
            parts = name[1 : -len(_TEMP_SUFFIX)].split(".")
            if len(parts) != 4 or parts[1] != self._host or not parts[2].isdigit():
                continue
            if _pid_alive(int(parts[2])):
                continue
            entry.unlink(missing_ok=True)
            removed += 1
        return removed

    def has(self, key: str) -> bool:
        """Whether a complete row is stored under ``key``."""
        return self.path_of(key).is_file()

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and self.has(key)

    def keys(self) -> list[str]:
        """Keys of all complete rows, sorted."""
        found = []
        for entry in self.directory.iterdir():
            name = entry.name
            if name.endswith(_SUFFIX) and KEY_PATTERN.fullmatch(name[: -len(_SUFFIX)]):
                found.append(name[: -len(_SUFFIX)])
        return sorted(found)

    def __len__(self) -> int:
        return len(self.keys())

    def put(self, key: str, row: Mapping[str, Any]) -> None:
        """Store ``row`` under ``key`` atomically (replacing any row already there).

        The row is written to ``.<key>.<host>.<pid>.<nonce>.tmp`` in the store directory,
        flushed and fsync-ed, renamed to ``<key>.parquet`` with :func:`os.replace`, and the
        directory is fsync-ed so the rename survives a power loss.
        """
        final = self.path_of(key)
        clean = _check_row(key, row)
        table = pa.Table.from_pydict({name: [value] for name, value in clean.items()})
        table = table.replace_schema_metadata(
            {_METADATA_KEY: key.encode("ascii"), _METADATA_FORMAT: _FORMAT_VERSION}
        )
        temp = self.directory / (
            f".{key}.{self._host}.{os.getpid()}.{secrets.token_hex(8)}{_TEMP_SUFFIX}"
        )
        try:
            with open(temp, "xb") as handle:
                pq.write_table(table, handle)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(temp, final)
        except BaseException:
            temp.unlink(missing_ok=True)
            raise
        _fsync_directory(self.directory)

    def get(self, key: str) -> dict[str, Scalar]:
        """The row stored under ``key``, with the values it was put with.

        Raises
        ------
        KeyError
            When no row is stored under ``key``.
        StoreReadError
            When the file exists but is not a one-row table written for ``key``.
        """
        path = self.path_of(key)
        if not path.is_file():
            raise KeyError(f"no row stored under key {key!r} in {self.directory}")
        try:
            with pq.ParquetFile(path) as parquet_file:
                table = parquet_file.read(use_threads=False)
        except (OSError, pa.ArrowException) as error:
            raise StoreReadError(f"cannot read results file {path}: {error}") from error
        stored_key = (table.schema.metadata or {}).get(_METADATA_KEY)
        if stored_key != key.encode("ascii"):
            raise StoreReadError(
                f"results file {path} was not written by a results store for key {key!r} "
                f"(its key metadata is {stored_key!r})"
            )
        if table.num_rows != 1:
            raise StoreReadError(f"results file {path} holds {table.num_rows} rows, expected 1")
        return dict(table.to_pylist()[0])

    def frame(self) -> pd.DataFrame:
        """All rows as a DataFrame: one row per key, sorted by key, key in column ``run_key``.

        Columns are ``run_key`` followed by the union of the rows' columns in order of first
        appearance (rows without a column get a missing value, with pandas' usual dtype
        rules: an int column with a missing value becomes float64).
        """
        keys = self.keys()
        records = [{KEY_COLUMN: key, **self.get(key)} for key in keys]
        if not records:
            return pd.DataFrame({KEY_COLUMN: pd.Series([], dtype=object)})
        return pd.DataFrame.from_records(records)


def run_all(
    store: ResultsStore,
    tasks: Iterable[tuple[str, Any]],
    fn: Callable[[Any], Mapping[str, Any]],
    progress: bool = True,
) -> RunAllTally:
    """Compute and store the row of every task not yet in ``store``.

    Tasks are processed in the given order; each row is stored (atomically) as soon as
    ``fn`` returns it, so an interrupted call loses at most the rows in progress, and calling
    again with the same tasks computes only what is missing. A key listed twice is computed
    once. An exception from ``fn`` propagates; the rows stored before it stay.

    For a resumed sweep to equal an uninterrupted one, ``fn(payload)`` must be deterministic
    (stochastic methods take their seed from the payload).

    Parameters
    ----------
    store : ResultsStore
        Where rows go.
    tasks : iterable of (key, payload)
        ``key`` names the row (typically :func:`run_key` of the run); ``payload`` is passed
        to ``fn``.
    fn : callable
        ``fn(payload) -> row``, a mapping of column names to scalars.
    progress : bool, default True
        Show a tqdm progress bar (shown only on a terminal; ``False`` silences it).

    Returns
    -------
    RunAllTally
        Number of rows computed by this call and of tasks skipped because already stored.
    """
    task_list = list(tasks)
    for key, _ in task_list:
        _check_key(key)
    pending: list[tuple[str, Any]] = []
    seen: set[str] = set()
    for key, payload in task_list:
        if key in seen:
            continue
        seen.add(key)
        if not store.has(key):
            pending.append((key, payload))
    skipped = len(seen) - len(pending)
    logger.info(
        "run_all on %s: %d tasks, %d already stored, %d to compute",
        store.directory,
        len(seen),
        skipped,
        len(pending),
    )
    bar = tqdm(
        total=len(seen),
        initial=skipped,
        desc="runs",
        unit="run",
        disable=None if progress else True,
    )
    try:
        for key, payload in pending:
            store.put(key, fn(payload))
            bar.update(1)
    finally:
        bar.close()
    return RunAllTally(computed=len(pending), skipped=skipped)
