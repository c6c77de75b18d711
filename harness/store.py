"""Results store: a Parquet data set appended batch by batch, one atomic file per batch.

A sweep produces rows (one per task and method) that all share one set of typed columns. The
store keeps them as a directory of Parquet files with that one schema, so the directory is a
Parquet data set that ``pandas.read_parquet(directory)`` and ``pyarrow.dataset`` read as they
are. Each row carries a *key* (the task it belongs to); all rows of a key are written in one
batch, so a key is either wholly stored or absent.

Layout of a store directory::

    <directory>/part-<time_ns>-<nonce>.parquet          one batch of complete rows
    <directory>/.part-<time_ns>-<nonce>.<host>.<pid>.tmp a batch being written (never read)
    <directory>/.lock                                   the writers' lock file

Guarantees
----------
- A batch is visible only once it is complete: it is written to a temporary file in the same
  directory, flushed and ``fsync``-ed, then renamed to its final name with :func:`os.replace`
  (atomic on POSIX file systems), and the directory is ``fsync``-ed. A process killed at any
  instant (SIGKILL included) leaves either no file for the batch or the whole batch; a
  half-written batch can only exist under a temporary name, which every reader (this module,
  pandas and pyarrow: names starting with ``.`` are skipped) ignores.
- Temporary files left by a dead writer on this host are deleted when the store is next
  opened; those of a live process or of another host are left alone (and still ignored).
- A key is stored once. Writers hold an exclusive lock (:func:`fcntl.flock` on ``.lock``,
  released by the kernel when the process dies, even by SIGKILL), read the stored keys, and
  refuse a batch holding a key already stored. A sweep killed at any moment and restarted
  therefore loses no stored row (batches are never rewritten) and duplicates none.
- Every batch file records the format version and its own name in its Parquet metadata. A
  file that cannot be read, does not have the store's columns, or was renamed raises
  :class:`StoreReadError` naming the file; the store never returns a partial batch.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import secrets
import socket
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from hashlib import sha256
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

logger = logging.getLogger("slolab")

#: Column types a store accepts, by name.
COLUMN_TYPES: dict[str, pa.DataType] = {
    "bool": pa.bool_(),
    "int64": pa.int64(),
    "float64": pa.float64(),
    "string": pa.string(),
}

_PREFIX = "part-"
_SUFFIX = ".parquet"
_TEMP_SUFFIX = ".tmp"
_LOCK_NAME = ".lock"
_BATCH_NAME = re.compile(r"part-[0-9]{20}-[0-9a-f]{8}")
_METADATA_FORMAT = b"slolab.store.format"
_METADATA_BATCH = b"slolab.store.batch"
_FORMAT_VERSION = b"2"


class StoreReadError(RuntimeError):
    """A batch file of a :class:`ResultsStore` could not be read; the message names the file."""


class StoreLockedError(RuntimeError):
    """Another process holds the store's writer lock."""


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


def canonical_json(value: Any) -> str:
    """Canonical JSON text of a description (the text :func:`task_key` hashes).

    Keys sorted at every level, separators ``,`` and ``:`` without spaces, strings escaped
    to ASCII, ints in decimal, floats by :func:`repr` (``nan``, ``inf`` as ``repr`` writes
    them), tuples as lists, NumPy scalars as their Python value.
    """
    return _canonical_json(value, "description")


def task_key(description: Mapping[str, Any]) -> str:
    """Stable key of a task: the SHA-256 hex digest of its canonical JSON description.

    The digest depends only on the values, never on the process (``PYTHONHASHSEED``), the
    insertion order of mappings or the Python version. Values that compare equal in Python
    but differ in type give different keys (``1`` and ``1.0``; ``True`` and ``1``).

    Parameters
    ----------
    description : Mapping[str, Any]
        What the task computes (str keys; values None, bool, int, float, str, or lists,
        tuples and mappings of these).

    Returns
    -------
    str
        64 lowercase hexadecimal digits.
    """
    if not isinstance(description, Mapping):
        raise TypeError(f"a task description must be a mapping, got {type(description).__name__}")
    return sha256(_canonical_json(description, "task").encode("utf-8")).hexdigest()


def _schema(columns: Mapping[str, str], key: str) -> pa.Schema:
    if not isinstance(columns, Mapping) or not columns:
        raise ValueError("a store needs at least one column: give a mapping name -> type")
    fields = []
    for name, type_name in columns.items():
        if not isinstance(name, str) or not name or name.startswith("__"):
            raise ValueError(f"column name {name!r} must be a non-empty str not starting with __")
        if type_name not in COLUMN_TYPES:
            raise ValueError(
                f"column {name!r} has type {type_name!r}; known types: {', '.join(COLUMN_TYPES)}"
            )
        fields.append(pa.field(name, COLUMN_TYPES[type_name]))
    if columns.get(key) != "string":
        raise ValueError(f"the key column {key!r} must be one of the columns, of type string")
    return pa.schema(fields)


def _accepts(column_type: pa.DataType, value_type: pa.DataType) -> bool:
    """Whether values inferred as ``value_type`` go into a column of ``column_type`` exactly."""
    if pa.types.is_null(value_type):
        return True
    if column_type == pa.int64():
        return pa.types.is_integer(value_type)
    if column_type == pa.float64():
        return pa.types.is_integer(value_type) or pa.types.is_floating(value_type)
    if column_type == pa.bool_():
        return pa.types.is_boolean(value_type)
    return pa.types.is_string(value_type) or pa.types.is_large_string(value_type)


def _value_fits(column_type: pa.DataType, value: Any) -> bool:
    if value is None:
        return True
    if isinstance(value, np.generic):
        value = value.item()
    if column_type == pa.bool_():
        return isinstance(value, bool)
    if column_type == pa.string():
        return isinstance(value, str)
    if isinstance(value, bool):
        return False
    if column_type == pa.int64():
        return isinstance(value, int) and -(2**63) <= value < 2**63
    return isinstance(value, int | float)


def _column_error(
    name: str, column_type: pa.DataType, values: list[Any], keys: list[Any]
) -> Exception:
    for row, value in enumerate(values):
        if not _value_fits(column_type, value):
            return TypeError(
                f"row {row} (key {keys[row]!r}), column {name!r}: value {value!r} of type "
                f"{type(value).__name__} does not fit the column type {column_type}"
            )
    return TypeError(f"column {name!r} has values that do not fit its type {column_type}")


def _rows_to_table(schema: pa.Schema, key: str, rows: list[Mapping[str, Any]]) -> pa.Table:
    """Rows (mappings) as a table of ``schema``; missing columns are null, types are exact."""
    names: set[str] = set()
    for index, row in enumerate(rows):
        if not isinstance(row, Mapping):
            raise TypeError(f"row {index} must be a mapping, got {type(row).__name__}")
        names.update(row)
    unknown = sorted(names - set(schema.names), key=str)
    if unknown:
        raise ValueError(
            f"rows have column(s) {', '.join(map(repr, unknown))} that the store does not have; "
            f"its columns: {', '.join(schema.names)}"
        )
    keys = [row.get(key) for row in rows]
    arrays = []
    for field in schema:
        values = keys if field.name == key else [row.get(field.name) for row in rows]
        try:
            inferred = pa.array(values)
        except (pa.ArrowException, TypeError, OverflowError, ValueError):
            raise _column_error(field.name, field.type, values, keys) from None
        if not _accepts(field.type, inferred.type):
            raise _column_error(field.name, field.type, values, keys)
        try:
            arrays.append(inferred.cast(field.type, safe=True))
        except (pa.ArrowException, OverflowError):
            raise _column_error(field.name, field.type, values, keys) from None
    return pa.Table.from_arrays(arrays, schema=schema)


def _frame_to_table(schema: pa.Schema, frame: pd.DataFrame | pa.Table) -> pa.Table:
    """A DataFrame or Table as a table of ``schema`` (columns by name, types exact)."""
    table = (
        frame if isinstance(frame, pa.Table) else pa.Table.from_pandas(frame, preserve_index=False)
    )
    unknown = sorted(set(table.column_names) - set(schema.names))
    if unknown:
        raise ValueError(
            f"the table has column(s) {', '.join(map(repr, unknown))} that the store does not "
            f"have; its columns: {', '.join(schema.names)}"
        )
    arrays = []
    for field in schema:
        if field.name not in table.column_names:
            arrays.append(pa.nulls(table.num_rows, field.type))
            continue
        column = table.column(field.name)
        if not _accepts(field.type, column.type):
            raise TypeError(
                f"column {field.name!r} has type {column.type}, which does not fit the column "
                f"type {field.type}"
            )
        try:
            arrays.append(column.cast(field.type, safe=True))
        except pa.ArrowException as error:
            raise TypeError(f"column {field.name!r}: {error}") from None
    return pa.Table.from_arrays(arrays, schema=schema)


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


class ResultsStore:
    """A directory of result rows with fixed typed columns, one atomic Parquet file per batch.

    Opening a store creates the directory if needed, deletes temporary files left by dead
    writers on this host, and checks that stored batches have the given columns. Reading
    needs no lock; writing goes through :meth:`writer` (see the module docstring for the
    guarantees).

    Parameters
    ----------
    directory : str or os.PathLike
        Where the batch files live.
    columns : Mapping[str, str]
        Column name -> type, one of :data:`COLUMN_TYPES` (``"bool"``, ``"int64"``,
        ``"float64"``, ``"string"``), in the order of the stored schema.
    key : str, default "task_key"
        The column naming the task a row belongs to (type ``"string"``).

    Examples
    --------
    >>> store = ResultsStore(tmp_dir, {"task_key": "string", "gap": "float64"})  # doctest: +SKIP
    >>> with store.writer() as writer:  # doctest: +SKIP
    ...     writer.append([{"task_key": "t1", "gap": 0.02}])
    >>> store.frame()  # doctest: +SKIP
    """

    def __init__(
        self, directory: str | os.PathLike[str], columns: Mapping[str, str], key: str = "task_key"
    ) -> None:
        self.directory = Path(directory)
        self.key = key
        self.schema = _schema(columns, key)
        if self.directory.exists() and not self.directory.is_dir():
            raise NotADirectoryError(
                f"results store {self.directory} is a file; a store is a directory of Parquet "
                "files (give another path)"
            )
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise OSError(
                f"results store {self.directory}: cannot create the directory: {error.strerror}"
                + (
                    f" ({error.filename})"
                    if error.filename not in (None, str(self.directory))
                    else ""
                )
            ) from None
        self._host = _host_tag()
        removed = self.clean_temp_files()
        if removed:
            logger.info(
                "results store %s: removed %d stale temporary files", self.directory, removed
            )
        files = self.files()
        if files:
            self._check_schema(files[0], pq.read_schema(files[0]))

    def __repr__(self) -> str:
        return f"ResultsStore({str(self.directory)!r})"

    def files(self) -> list[Path]:
        """Batch files, in the order they were written."""
        return sorted(
            entry
            for entry in self.directory.iterdir()
            if entry.name.startswith(_PREFIX) and entry.name.endswith(_SUFFIX)
        )

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
            if not (name.startswith(f".{_PREFIX}") and name.endswith(_TEMP_SUFFIX)):
                continue
            parts = name[1 : -len(_TEMP_SUFFIX)].split(".")
            if len(parts) != 3 or parts[1] != self._host or not parts[2].isdigit():
                continue
            if _pid_alive(int(parts[2])):
                continue
            entry.unlink(missing_ok=True)
            removed += 1
        return removed

    def _check_schema(self, path: Path, schema: pa.Schema) -> None:
        if not schema.equals(self.schema, check_metadata=False):
            theirs = {field.name: str(field.type) for field in schema}
            ours = {field.name: str(field.type) for field in self.schema}
            differ = [
                f"{name}: {theirs.get(name, 'absent')} in the file, {ours.get(name, 'absent')} "
                "expected"
                for name in dict.fromkeys([*ours, *theirs])
                if theirs.get(name) != ours.get(name)
            ]
            detail = "; ".join(differ[:5]) if differ else "column order differs"
            raise StoreReadError(
                f"results file {path} does not have the store's columns ({detail})"
            )
        metadata = schema.metadata or {}
        if metadata.get(_METADATA_FORMAT) != _FORMAT_VERSION or metadata.get(
            _METADATA_BATCH
        ) != path.stem.encode("ascii"):
            raise StoreReadError(
                f"results file {path} was not written by a results store under that name "
                f"(its batch metadata is {metadata.get(_METADATA_BATCH)!r})"
            )

    def _read(self, path: Path, columns: list[str] | None = None) -> pa.Table:
        try:
            with pq.ParquetFile(path) as parquet_file:
                self._check_schema(path, parquet_file.schema_arrow)
                return parquet_file.read(columns=columns, use_threads=True)
        except StoreReadError:
            raise
        except (OSError, pa.ArrowException) as error:
            raise StoreReadError(f"cannot read results file {path}: {error}") from error

    def _check_unique(self, files: list[Path], key_columns: list[pa.ChunkedArray]) -> None:
        """Raise when a key is in two batch files (only possible by copying files in)."""
        if not files:
            return
        uniques = [pc.unique(column) for column in key_columns]
        stacked = pa.chunked_array(uniques, type=pa.string())
        if len(pc.unique(stacked)) == len(stacked):
            return
        seen: dict[str, Path] = {}
        for path, keys in zip(files, uniques, strict=True):
            for stored in keys.to_pylist():
                if stored in seen:
                    raise StoreReadError(
                        f"key {stored!r} is stored in two results files: {seen[stored]} and {path}"
                    )
                seen[stored] = path

    def keys(self) -> set[str]:
        """Keys of all stored rows."""
        files = self.files()
        columns = [self._read(path, [self.key]).column(0) for path in files]
        self._check_unique(files, columns)
        found: set[str] = set()
        for column in columns:
            found.update(pc.unique(column).to_pylist())
        return found

    def table(self, columns: Sequence[str] | None = None) -> pa.Table:
        """Every stored row as one Arrow table, batches in the order written.

        ``columns`` reads only those columns (and the key), which Parquet makes much cheaper
        than reading every column of a large store.
        """
        names = None
        if columns is not None:
            unknown = [name for name in columns if name not in self.schema.names]
            if unknown:
                raise ValueError(
                    f"unknown column(s) {', '.join(map(repr, unknown))}; the store's columns: "
                    f"{', '.join(self.schema.names)}"
                )
            names = [self.key, *(name for name in columns if name != self.key)]
        files = self.files()
        tables = [self._read(path, names) for path in files]
        self._check_unique(files, [table.column(self.key) for table in tables])
        if not tables:
            empty = self.schema.empty_table()
            return empty if names is None else empty.select(names)
        return pa.concat_tables(tables).replace_schema_metadata(None)

    def frame(self, sort: bool = True, columns: Sequence[str] | None = None) -> pd.DataFrame:
        """Every stored row as a DataFrame, with the store's columns in order.

        With ``sort`` the rows are ordered by key, and the rows of one key in the order they
        were appended (a stable sort); otherwise batches come in the order written. Missing
        values follow pandas' rules (an int column with a missing value becomes float64).
        ``columns`` reads only those columns (the key first).
        """
        frame = self.table(columns).to_pandas()
        if sort:
            # pandas permutes the (Arrow-backed) columns far faster than Table.take copies them.
            frame = frame.sort_values(self.key, kind="stable", ignore_index=True)
        return frame

    @contextlib.contextmanager
    def writer(self) -> Iterator[StoreWriter]:
        """Hold the writer lock and yield a :class:`StoreWriter`; release it on exit.

        Raises
        ------
        StoreLockedError
            When another process is writing to this store.
        """
        import fcntl

        handle = open(self.directory / _LOCK_NAME, "a+b")  # noqa: SIM115 - held until exit
        try:
            try:
                fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise StoreLockedError(
                    f"results store {self.directory} is being written by another process "
                    f"(it holds {self.directory / _LOCK_NAME}); wait for it or use another store"
                ) from None
            yield StoreWriter(self, self.keys())
        finally:
            handle.close()


class StoreWriter:
    """Appends batches to a :class:`ResultsStore` while holding its lock.

    Made by :meth:`ResultsStore.writer`; ``keys`` holds every stored key and grows with each
    batch.
    """

    def __init__(self, store: ResultsStore, keys: set[str]) -> None:
        self.store = store
        self.keys = keys

    def append(self, rows: Iterable[Mapping[str, Any]] | pd.DataFrame | pa.Table) -> Path | None:
        """Write ``rows`` as one batch, atomically; return its file (None when empty).

        ``rows`` are mappings (a missing column is null) or a DataFrame / Arrow table. Values
        must fit their column's type exactly: an int64 column takes ints (not bools or
        floats), a float64 column ints and floats, a bool column bools, a string column str;
        None is a missing value in every column; NumPy scalars count as their Python value.

        Raises
        ------
        ValueError
            On an unknown column, a missing key, or a key already stored (all rows of a key
            belong in one batch).
        TypeError
            On a value that does not fit its column; the message names the row and column.
        """
        store = self.store
        if isinstance(rows, pd.DataFrame | pa.Table):
            table = _frame_to_table(store.schema, rows)
        else:
            row_list = list(rows)
            if not row_list:
                return None
            table = _rows_to_table(store.schema, store.key, row_list)
        if table.num_rows == 0:
            return None
        key_column = table.column(store.key)
        if key_column.null_count:
            raise ValueError(f"every row needs a key in column {store.key!r}")
        batch_keys = set(pc.unique(key_column).to_pylist())
        already = batch_keys & self.keys
        if already:
            raise ValueError(
                f"key {min(already)!r} is already stored in {store.directory}; a key's rows "
                "belong in one batch"
            )
        stem = f"{_PREFIX}{time.time_ns():020d}-{secrets.token_hex(4)}"
        table = table.replace_schema_metadata(
            {_METADATA_FORMAT: _FORMAT_VERSION, _METADATA_BATCH: stem.encode("ascii")}
        )
        final = store.directory / f"{stem}{_SUFFIX}"
        temp = store.directory / f".{stem}.{store._host}.{os.getpid()}{_TEMP_SUFFIX}"
        try:
            with open(temp, "xb") as handle:
                pq.write_table(table, handle)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(temp, final)
        except BaseException:
            temp.unlink(missing_ok=True)
            raise
        _fsync_directory(store.directory)
        self.keys |= batch_keys
        return final
