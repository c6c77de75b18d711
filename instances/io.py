"""Instances to one JSON file and back, exactly; the manifest of shipped instances.

File layout (``format = "slolab-instance"``, ``version = 1``)::

    {"format": "slolab-instance", "version": 1,
     "name": ..., "problem": ..., "settings": {...},
     "cluster": {Cluster fields, "pools": [{Pool fields}, ...]},
     "timing": timing.to_dict(),
     "request_dtypes": {column: numpy dtype string},
     "requests": {column: [one value per request]}}

plus ``"max_request_tokens"`` when the workload's token bound is not the default
(:data:`~slolab.instances.records.MAX_REQUEST_TOKENS`).

Floats are written with Python's shortest round-trip repr, so they load bit for bit. A float
``nan`` is written as ``null`` and ``inf``/``-inf`` as the strings ``"Infinity"`` /
``"-Infinity"`` (the file is strict JSON); ``request_dtypes`` restores every column's dtype.
Object columns (such as Mooncake ``hash_ids``) hold JSON values, lists as lists.

Shipped instances are listed in ``instances/data/manifest.json``::

    {"instances": [{"name", "file", "source", "cut", "seed", "requests", "problem",
                    "known": {...}}]}

where ``file`` is relative to the manifest and ``known`` records optima or bounds and how they
were obtained.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import slolab.timing.forms  # noqa: F401  (registers the timing forms for from_dict)
from slolab.instances.records import (
    MAX_REQUEST_TOKENS,
    Cluster,
    Instance,
    Pool,
    Workload,
    check_max_request_tokens,
)
from slolab.timing.base import TimingModel

FORMAT_NAME = "slolab-instance"
FORMAT_VERSION = 1
MANIFEST_PATH = Path(__file__).resolve().parent / "data" / "manifest.json"
MANIFEST_FIELDS = ("name", "file", "source", "cut", "seed", "requests", "problem", "known")

_POS_INF, _NEG_INF = "Infinity", "-Infinity"


class InstanceFileError(ValueError):
    """An instance or manifest file that cannot be read, naming the file and the field."""

    def __init__(self, path: str | Path, field: str | None, problem: str) -> None:
        where = f"{path}" if field is None else f"{path}: field {field!r}"
        super().__init__(f"{where}: {problem}")
        self.path = str(path)
        self.field = field


# -- column encoding ----------------------------------------------------------------------------


def _encode_float(x: float) -> float | str | None:
    if math.isnan(x):
        return None
    if math.isinf(x):
        return _POS_INF if x > 0 else _NEG_INF
    return x


def _decode_float(x: Any) -> float:
    if x is None:
        return math.nan
    if x == _POS_INF:
        return math.inf
    if x == _NEG_INF:
        return -math.inf
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        raise TypeError(f"expected a number, null or +-Infinity, got {x!r}")
    return float(x)


def _encode_nested(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return [_encode_nested(v) for v in value.tolist()]
    if isinstance(value, (list, tuple)):
        return [_encode_nested(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float):
        return _encode_float(value)
    if value is None or isinstance(value, (bool, int, str)):
        return value
    raise TypeError(f"cannot store a {type(value).__name__} in JSON: {value!r}")


def _decode_nested_floats(value: Any) -> Any:
    if isinstance(value, list):
        return [_decode_nested_floats(v) for v in value]
    return _decode_float(value)


def _encode_column(arr: np.ndarray) -> list[Any]:
    kind = arr.dtype.kind
    if kind == "f":
        if arr.ndim == 1:
            values = arr.tolist()
            if not np.isfinite(arr).all():
                values = [_encode_float(v) for v in values]
            return values
        return [_encode_nested(row) for row in arr]
    if kind in "iub" or kind == "U":
        return arr.tolist()
    if kind == "O":
        return [_encode_nested(v) for v in arr]
    raise TypeError(f"unsupported column dtype {arr.dtype}")


def _decode_column(values: list[Any], dtype: str) -> np.ndarray:
    kind = np.dtype(dtype).kind
    if kind == "f":
        return np.array(_decode_nested_floats(values), dtype=dtype)
    if kind == "O":
        out = np.empty(len(values), dtype=object)
        for i, v in enumerate(values):
            out[i] = v
        return out
    if kind in "iub" or kind == "U":
        return np.array(values, dtype=dtype)
    raise TypeError(f"unsupported column dtype {dtype}")


# -- instance <-> dict --------------------------------------------------------------------------


def _json_settings(settings: Mapping[str, Any]) -> dict[str, Any]:
    plain = dict(settings)
    try:
        json.dumps(plain, allow_nan=False)
    except (TypeError, ValueError) as exc:
        for key, value in plain.items():
            try:
                json.dumps(value, allow_nan=False)
            except (TypeError, ValueError):
                raise ValueError(
                    f"settings[{key!r}] must be JSON-serialisable without nan/inf, got {value!r}"
                ) from None
        raise ValueError(f"settings must be JSON-serialisable: {exc}") from None
    return plain


def instance_to_dict(instance: Instance) -> dict[str, Any]:
    """The JSON document of an instance (see the module docstring)."""
    if not hasattr(instance.timing, "to_dict"):
        raise TypeError(f"timing must be a TimingModel, got {type(instance.timing).__name__}")
    workload = instance.workload
    dtypes: dict[str, str] = {}
    requests: dict[str, list[Any]] = {}
    for name in workload.columns:
        arr = workload[name]
        try:
            requests[name] = _encode_column(arr)
        except TypeError as exc:
            raise ValueError(f"column {name!r} cannot be saved: {exc}") from None
        dtypes[name] = arr.dtype.str
    document = {
        "format": FORMAT_NAME,
        "version": FORMAT_VERSION,
        "name": instance.name,
        "problem": instance.problem,
        "settings": _json_settings(instance.settings),
        "cluster": instance.cluster.to_dict(),
        "timing": instance.timing.to_dict(),
        "request_dtypes": dtypes,
        "requests": requests,
    }
    if workload.max_request_tokens != MAX_REQUEST_TOKENS:
        document["max_request_tokens"] = workload.max_request_tokens
    return document


def _field(data: Mapping[str, Any], key: str, kind: type | tuple[type, ...], path: str) -> Any:
    if key not in data:
        raise InstanceFileError(path, key, "missing")
    value = data[key]
    if not isinstance(value, kind):
        names = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise InstanceFileError(path, key, f"must be a {names}, got {type(value).__name__}")
    return value


def _cluster_from_dict(fields: Mapping[str, Any], source: str) -> Cluster:
    """The Cluster of an instance file's ``cluster`` object (``pools`` a list of objects)."""
    known = set(Cluster.__dataclass_fields__)
    unknown = sorted(set(fields) - known)
    if unknown:
        raise InstanceFileError(
            source, f"cluster.{unknown[0]}", f"unknown field; known: {', '.join(sorted(known))}"
        )
    fields = dict(fields)
    raw_pools = fields.pop("pools", [])
    if not isinstance(raw_pools, list):
        raise InstanceFileError(
            source, "cluster.pools", f"must be a list, got {type(raw_pools).__name__}"
        )
    pool_known = set(Pool.__dataclass_fields__)
    pools = []
    for i, raw in enumerate(raw_pools):
        where = f"cluster.pools[{i}]"
        if not isinstance(raw, dict):
            raise InstanceFileError(source, where, f"must be an object, got {type(raw).__name__}")
        extra = sorted(set(raw) - pool_known)
        if extra:
            raise InstanceFileError(
                source,
                f"{where}.{extra[0]}",
                f"unknown field; known: {', '.join(sorted(pool_known))}",
            )
        try:
            pools.append(Pool(**raw))
        except (TypeError, ValueError) as exc:
            raise InstanceFileError(source, where, str(exc)) from None
    try:
        return Cluster(**fields, pools=tuple(pools))
    except (TypeError, ValueError) as exc:
        raise InstanceFileError(source, "cluster", str(exc)) from None


def instance_from_dict(
    data: Mapping[str, Any],
    source: str = "<dict>",
    check_label: Callable[[str, dict[str, Any]], str | None] | None = None,
) -> Instance:
    """Inverse of :func:`instance_to_dict`; errors name ``source`` and the field.

    ``check_label(problem, settings)`` says why a file's ``problem`` label does not fit its
    settings (a file relabelled to another problem), or None; it runs before the other fields
    are read (:func:`slolab.problems.load_instance` passes the problems' own check).
    """
    if not isinstance(data, Mapping):
        raise InstanceFileError(source, None, "not a slolab instance (top level is not an object)")
    fmt = data.get("format")
    if fmt != FORMAT_NAME:
        raise InstanceFileError(source, "format", f"must be {FORMAT_NAME!r}, got {fmt!r}")
    version = data.get("version")
    if version != FORMAT_VERSION:
        raise InstanceFileError(
            source,
            "version",
            f"unsupported version {version!r} (this slolab reads {FORMAT_VERSION})",
        )
    name = _field(data, "name", str, source)
    problem = _field(data, "problem", str, source)
    settings = _field(data, "settings", dict, source)
    mismatch = None if check_label is None else check_label(problem, settings)
    if mismatch is not None:
        raise InstanceFileError(source, "problem", mismatch)
    cluster_fields = _field(data, "cluster", dict, source)
    timing_data = _field(data, "timing", dict, source)
    dtypes = _field(data, "request_dtypes", dict, source)
    requests = _field(data, "requests", dict, source)
    try:
        max_request_tokens = check_max_request_tokens(
            data.get("max_request_tokens", MAX_REQUEST_TOKENS)
        )
    except ValueError as exc:
        raise InstanceFileError(source, "max_request_tokens", str(exc)) from None

    cluster = _cluster_from_dict(cluster_fields, source)
    try:
        timing = TimingModel.from_dict(timing_data)
    except (KeyError, TypeError, ValueError) as exc:
        raise InstanceFileError(
            source, "timing", f"cannot rebuild the timing model: {exc}"
        ) from None

    if list(dtypes) != list(requests):
        raise InstanceFileError(
            source, "request_dtypes", "must name the same columns, in order, as 'requests'"
        )
    columns: dict[str, np.ndarray] = {}
    for column, values in requests.items():
        if not isinstance(values, list):
            raise InstanceFileError(source, f"requests.{column}", "must be a list")
        try:
            columns[column] = _decode_column(values, dtypes[column])
        except (TypeError, ValueError, OverflowError) as exc:
            raise InstanceFileError(source, f"requests.{column}", str(exc)) from None
    try:
        workload = Workload(columns, source=source, max_request_tokens=max_request_tokens)
    except ValueError as exc:
        problem = str(exc).removeprefix(f"{source}: ")
        raise InstanceFileError(source, "requests", problem) from None
    try:
        return Instance(
            name=name,
            workload=workload,
            cluster=cluster,
            timing=timing,
            problem=problem,
            settings=settings,
        )
    except (TypeError, ValueError) as exc:
        raise InstanceFileError(source, None, str(exc)) from None


def _umask() -> int:
    """The process's umask (read by setting it and putting it back)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


# -- files --------------------------------------------------------------------------------------


def _write_atomic(path: Path, text: str) -> None:
    """Write via a temporary file in the same directory and ``os.replace``.

    The file gets the permissions ``open()`` would give a new file (0666 less the umask);
    the temporary file is created 0600.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, 0o666 & ~_umask())
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def save_instance(instance: Instance, path: str | Path) -> Path:
    """Save an instance to one JSON file, atomically.

    Parameters
    ----------
    instance : Instance
        Its settings must be JSON-serialisable (no nan/inf); its timing model must provide
        ``to_dict``.
    path : str or Path
        Destination; written through a temporary file and ``os.replace``, so a reader never
        sees a half-written file.

    Returns
    -------
    pathlib.Path
        The path written.
    """
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"{path} is a directory; give a file name, such as {path / 'name.json'}")
    text = json.dumps(instance_to_dict(instance), allow_nan=False, separators=(",", ":"))
    _write_atomic(path, text + "\n")
    return path


def load_instance(
    path: str | Path,
    check_label: Callable[[str, dict[str, Any]], str | None] | None = None,
) -> Instance:
    """Load an instance saved by :func:`save_instance` (``check_label`` as in
    :func:`instance_from_dict`; :func:`slolab.problems.load_instance` refuses relabelled files).

    Raises
    ------
    InstanceFileError
        The file is not JSON, not a slolab instance, of another version, or a field is missing
        or invalid; the message names the file and the field.
    FileNotFoundError
        No file at ``path``.
    """
    path = Path(path)
    if path.is_dir():
        raise InstanceFileError(path, None, "is a directory, not an instance file")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise InstanceFileError(
            path,
            None,
            f"not a slolab instance file (not UTF-8 text: {exc.reason} at byte {exc.start})",
        ) from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InstanceFileError(
            path, None, f"not a slolab instance file (invalid JSON at line {exc.lineno}: {exc.msg})"
        ) from None
    return instance_from_dict(data, source=str(path), check_label=check_label)


# -- manifest -----------------------------------------------------------------------------------


def load_manifest(path: str | Path | None = None) -> list[dict[str, Any]]:
    """Entries of a manifest of shipped instances, validated.

    Parameters
    ----------
    path : str or Path, optional
        A manifest file; default the package's ``instances/data/manifest.json`` (an absent
        package manifest means no shipped instances yet and gives an empty list).

    Returns
    -------
    list of dict
        One entry per instance with the keys of :data:`MANIFEST_FIELDS`.
    """
    if path is None:
        if not MANIFEST_PATH.is_file():
            return []
        path = MANIFEST_PATH
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise InstanceFileError(
            path, None, f"not a manifest (invalid JSON at line {exc.lineno}: {exc.msg})"
        ) from None
    if not isinstance(data, dict):
        raise InstanceFileError(path, None, "not a manifest (top level is not an object)")
    entries = _field(data, "instances", list, str(path))
    seen: set[str] = set()
    for i, entry in enumerate(entries):
        where = f"instances[{i}]"
        if not isinstance(entry, dict):
            raise InstanceFileError(path, where, "must be an object")
        for key in MANIFEST_FIELDS:
            if key not in entry:
                raise InstanceFileError(path, f"{where}.{key}", "missing")
        for key in ("name", "file", "source", "problem"):
            if not isinstance(entry[key], str) or not entry[key]:
                raise InstanceFileError(path, f"{where}.{key}", "must be a non-empty string")
        if not isinstance(entry["requests"], int) or entry["requests"] < 1:
            raise InstanceFileError(path, f"{where}.requests", "must be an integer >= 1")
        if not isinstance(entry["known"], dict):
            raise InstanceFileError(path, f"{where}.known", "must be an object")
        if entry["name"] in seen:
            raise InstanceFileError(path, f"{where}.name", f"duplicate name {entry['name']!r}")
        seen.add(entry["name"])
    return entries


def load_shipped(name: str, manifest: str | Path | None = None) -> Instance:
    """Load a shipped instance by name.

    Parameters
    ----------
    name : str
        An entry of the manifest (unknown names raise and list the known ones).
    manifest : str or Path, optional
        Manifest file; default the package's.

    Returns
    -------
    Instance
        Checked against its manifest entry (name, problem and number of requests).
    """
    manifest_path = MANIFEST_PATH if manifest is None else Path(manifest)
    entries = load_manifest(manifest)
    by_name = {e["name"]: e for e in entries}
    if name not in by_name:
        known = ", ".join(sorted(by_name)) or "none"
        raise ValueError(f"unknown shipped instance {name!r}; known: {known}")
    entry = by_name[name]
    instance = load_instance(manifest_path.parent / entry["file"])
    for key, actual in (
        ("name", instance.name),
        ("problem", instance.problem),
        ("requests", instance.n_requests),
    ):
        if entry[key] != actual:
            raise InstanceFileError(
                manifest_path,
                f"{name}.{key}",
                f"manifest says {entry[key]!r}, the file {entry['file']} has {actual!r}",
            )
    return instance


def add_shipped(
    instance: Instance,
    *,
    source: str,
    cut: str,
    seed: int | None,
    known: Mapping[str, Any],
    manifest: str | Path | None = None,
    file: str | None = None,
) -> dict[str, Any]:
    """Save an instance next to a manifest and add (or replace) its entry.

    Parameters
    ----------
    instance : Instance
        Saved to ``<manifest dir>/<file>`` (default ``<name>.json``).
    source : str
        The trace it was cut from.
    cut : str
        How it was cut (window, first N, rate scaling, SLO scheme...).
    seed : int or None
        Seed of the random steps (None if none).
    known : mapping
        Optimum and/or bounds with how they were obtained, for example
        ``{"optimum": 0.42, "how": "highs, proved optimal in 3.1 s"}``.
    manifest : str or Path, optional
        Manifest file; default the package's.
    file : str, optional
        File name relative to the manifest.

    Returns
    -------
    dict
        The manifest entry written.
    """
    manifest_path = MANIFEST_PATH if manifest is None else Path(manifest)
    entries = load_manifest(manifest_path) if manifest_path.is_file() else []
    entry = {
        "name": instance.name,
        "file": file or f"{instance.name}.json",
        "source": source,
        "cut": cut,
        "seed": seed,
        "requests": instance.n_requests,
        "problem": instance.problem,
        "known": dict(known),
    }
    save_instance(instance, manifest_path.parent / str(entry["file"]))
    entries = [e for e in entries if e["name"] != instance.name] + [entry]
    text = json.dumps({"instances": entries}, indent=2, allow_nan=False)
    _write_atomic(manifest_path, text + "\n")
    return entry
