"""Core problem records: Request, Workload, Cluster, Instance.

A :class:`Workload` is columnar (one numpy array per field, validated once), cheap for 100k+
requests. :class:`Request` is the row view: immutable and self-validating. An
:class:`Instance` bundles a workload with the cluster it runs on, the timing model and the
objective settings; :mod:`slolab.instances.io` saves it to one file and loads it back exactly.

Units: seconds for every time (``*_s``), tokens for every length.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import numpy as np
import pandas as pd

#: Columns every workload has, with their dtype and the default used when a reader does not
#: provide them. ``nan`` for an SLO means "no such objective for this request".
STANDARD_COLUMNS: dict[str, tuple[str, float]] = {
    "arrival_s": ("float64", math.nan),
    "prompt_tokens": ("int64", math.nan),
    "output_tokens": ("int64", math.nan),
    "ttft_slo_s": ("float64", math.nan),
    "tpot_slo_s": ("float64", math.nan),
    "e2e_slo_s": ("float64", math.nan),
    "priority": ("float64", 1.0),
    "tier": ("int64", 0),
    "value": ("float64", 1.0),
}
REQUIRED_COLUMNS = ("arrival_s", "prompt_tokens", "output_tokens")

#: Default bound on a request's prompt tokens and on its output tokens (2**20 = 1,048,576), far
#: above any model's context window. The engine keeps one time per output token, so a bound is
#: what keeps a mistyped length (1e9) from claiming gigabytes before the run starts. Readers and
#: :class:`Workload` take ``max_request_tokens=`` to raise it.
MAX_REQUEST_TOKENS = 2**20

#: The optional column of a snapshot's given prefix cache: the prompt tokens of each request
#: already in the KV cache when the instance begins (0 to ``prompt_tokens - 1``; see
#: :func:`cached_prompt_tokens` and :mod:`slolab.instances.prefix_state`).
CACHED_COLUMN = "cached_tokens"


def _check_finite_nonneg(name: str, value: float, row: int | None = None) -> None:
    where = "" if row is None else f" (row {row})"
    if math.isnan(value):
        return
    if value < 0 or math.isinf(value):
        raise ValueError(f"{name} must be a finite number >= 0, got {value}{where}")


@dataclass(frozen=True, slots=True)
class Request:
    """One LLM request with its latency objectives.

    Parameters
    ----------
    id : int
        Request identifier, unique within a workload.
    arrival_s : float
        Arrival time in seconds.
    prompt_tokens, output_tokens : int
        Prompt length and number of tokens to generate (both >= 1).
    ttft_slo_s, tpot_slo_s, e2e_slo_s : float
        Time-to-first-token, time-per-output-token and end-to-end objectives in seconds;
        ``nan`` when the request has no such objective.
    priority : float
        Priority weight (> 0).
    tier : int
        Service tier index (>= 0), meaning given by the scheduler (TPOT tier, class).
    value : float
        Value earned when the request is served within its SLO (>= 0).
    """

    id: int
    arrival_s: float
    prompt_tokens: int
    output_tokens: int
    ttft_slo_s: float = math.nan
    tpot_slo_s: float = math.nan
    e2e_slo_s: float = math.nan
    priority: float = 1.0
    tier: int = 0
    value: float = 1.0

    def __post_init__(self) -> None:
        row = self.id
        if math.isnan(self.arrival_s) or math.isinf(self.arrival_s):
            raise ValueError(f"arrival_s must be finite, got {self.arrival_s} (row {row})")
        if self.arrival_s < 0:
            raise ValueError(f"arrival_s must be >= 0, got {self.arrival_s} (row {row})")
        for name in ("prompt_tokens", "output_tokens"):
            v = getattr(self, name)
            if int(v) != v or v < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {v} (row {row})")
        for name in ("ttft_slo_s", "tpot_slo_s", "e2e_slo_s"):
            _check_finite_nonneg(name, getattr(self, name), row)
        if not self.priority > 0 or math.isinf(self.priority):
            raise ValueError(
                f"priority must be a finite number > 0, got {self.priority} (row {row})"
            )
        if self.tier < 0:
            raise ValueError(f"tier must be >= 0, got {self.tier} (row {row})")
        if not self.value >= 0 or math.isinf(self.value):
            raise ValueError(f"value must be a finite number >= 0, got {self.value} (row {row})")


def check_max_request_tokens(value: Any) -> int:
    """``value`` as a token bound: an integer >= 1 (ValueError naming it otherwise)."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"max_request_tokens must be an integer >= 1, got {value!r}")
    return int(value)


def _first_bad(mask: np.ndarray) -> int:
    return int(np.flatnonzero(mask)[0])


class Workload:
    """A columnar table of requests, validated once on construction.

    Columns are numpy arrays; the standard ones are listed in :data:`STANDARD_COLUMNS` (missing
    optional ones get their defaults). Extra columns (for example ``hash_ids`` from Mooncake or
    ``task``) are kept as given. Requests are sorted by arrival (stable): readers sort before
    building, and the constructor refuses unsorted arrivals so that row ``i`` is request ``i``.

    Parameters
    ----------
    columns : mapping of str to array-like
        At least ``arrival_s``, ``prompt_tokens`` and ``output_tokens``.
    source : str
        Where the data came from (file path or description), used in error messages.
    max_request_tokens : int
        Most prompt tokens, and most output tokens, one request may have (default
        :data:`MAX_REQUEST_TOKENS`); kept by every workload derived from this one.
    """

    __slots__ = ("_cols", "max_request_tokens", "source")

    def __init__(
        self,
        columns: Mapping[str, Any],
        source: str = "<memory>",
        max_request_tokens: int = MAX_REQUEST_TOKENS,
    ) -> None:
        self.source = source
        self.max_request_tokens = check_max_request_tokens(max_request_tokens)
        missing = [c for c in REQUIRED_COLUMNS if c not in columns]
        if missing:
            raise ValueError(f"{source}: workload is missing column(s) {', '.join(missing)}")
        n = len(np.asarray(columns["arrival_s"]))
        cols: dict[str, np.ndarray] = {}
        for name, (dtype, default) in STANDARD_COLUMNS.items():
            if name in columns:
                raw = np.asarray(columns[name])
                if raw.shape != (n,):
                    raise ValueError(
                        f"{source}: column {name} has shape {raw.shape}, expected ({n},)"
                    )
                if dtype == "int64":
                    as_float = raw.astype("float64")
                    bad = ~np.isfinite(as_float) | (as_float != np.round(as_float))
                    if bad.any():
                        i = _first_bad(bad)
                        raise ValueError(
                            f"{source}: {name} must be an integer, got {raw[i]!r} (row {i})"
                        )
                    arr = as_float.astype("int64")
                else:
                    arr = raw.astype("float64")
            else:
                arr = np.full(n, default, dtype=dtype)
            arr.setflags(write=False)
            cols[name] = arr
        for name, values in columns.items():
            if name not in cols:
                arr = np.asarray(values)
                if arr.shape[:1] != (n,):
                    raise ValueError(f"{source}: column {name} has length {len(arr)}, expected {n}")
                arr.setflags(write=False)
                cols[name] = arr
        self._cols = cols
        self._validate()

    def _validate(self) -> None:
        src = self.source
        c = self._cols
        checks = [
            (
                "arrival_s",
                ~np.isfinite(c["arrival_s"]) | (c["arrival_s"] < 0),
                "a finite number >= 0",
            ),
            ("prompt_tokens", c["prompt_tokens"] < 1, "an integer >= 1"),
            ("output_tokens", c["output_tokens"] < 1, "an integer >= 1"),
            (
                "prompt_tokens",
                c["prompt_tokens"] > self.max_request_tokens,
                f"at most max_request_tokens = {self.max_request_tokens}",
            ),
            (
                "output_tokens",
                c["output_tokens"] > self.max_request_tokens,
                f"at most max_request_tokens = {self.max_request_tokens}",
            ),
            ("priority", ~(c["priority"] > 0) | ~np.isfinite(c["priority"]), "a finite number > 0"),
            ("tier", c["tier"] < 0, "an integer >= 0"),
            ("value", ~(c["value"] >= 0) | ~np.isfinite(c["value"]), "a finite number >= 0"),
        ]
        for name in ("ttft_slo_s", "tpot_slo_s", "e2e_slo_s"):
            v = c[name]
            checks.append((name, (v < 0) | np.isinf(v), "nan (none) or a finite number >= 0"))
        for name, bad, what in checks:
            if bad.any():
                i = _first_bad(bad)
                value = c[name][i].item()
                raise ValueError(f"{src}: {name} must be {what}, got {value!r} (row {i})")
        if CACHED_COLUMN in c:
            self._validate_cached(c[CACHED_COLUMN])
        arr = c["arrival_s"]
        if len(arr) > 1:
            down = np.diff(arr) < 0
            if down.any():
                i = _first_bad(down) + 1
                raise ValueError(
                    f"{src}: arrival_s must be non-decreasing, got {arr[i]!r} after "
                    f"{arr[i - 1]!r} (row {i})"
                )

    def _validate_cached(self, raw: np.ndarray) -> None:
        """The given cache's column: integers from 0 to ``prompt_tokens - 1`` (at least one
        prompt token is computed, for the first output token's logits)."""
        name = CACHED_COLUMN
        if raw.ndim != 1 or raw.dtype == object or raw.dtype.kind not in "iuf":
            raise ValueError(f"{self.source}: {name} must be integers, got dtype {raw.dtype}")
        as_float = raw.astype("float64")
        checks = [
            (~np.isfinite(as_float) | (as_float != np.round(as_float)), "an integer"),
            (as_float < 0, "an integer >= 0"),
            (
                as_float > self._cols["prompt_tokens"] - 1,
                "at most prompt_tokens - 1 (one prompt token is always computed)",
            ),
        ]
        for bad, what in checks:
            if bad.any():
                i = _first_bad(bad)
                raise ValueError(
                    f"{self.source}: {name} must be {what}, got {raw[i].item()!r} (row {i})"
                )
        if raw.dtype.kind != "i":
            arr = as_float.astype("int64")
            arr.setflags(write=False)
            self._cols[name] = arr

    # -- access ---------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._cols["arrival_s"])

    def __getitem__(self, name: str) -> np.ndarray:
        return self._cols[name]

    def __contains__(self, name: object) -> bool:
        return name in self._cols

    @property
    def columns(self) -> list[str]:
        """Column names, standard ones first."""
        return list(self._cols)

    @property
    def arrival_s(self) -> np.ndarray:
        return self._cols["arrival_s"]

    @property
    def prompt_tokens(self) -> np.ndarray:
        return self._cols["prompt_tokens"]

    @property
    def output_tokens(self) -> np.ndarray:
        return self._cols["output_tokens"]

    def request(self, i: int) -> Request:
        """Row ``i`` as a validated :class:`Request` (its id is the row index)."""
        c = self._cols
        return Request(
            id=int(i),
            arrival_s=float(c["arrival_s"][i]),
            prompt_tokens=int(c["prompt_tokens"][i]),
            output_tokens=int(c["output_tokens"][i]),
            ttft_slo_s=float(c["ttft_slo_s"][i]),
            tpot_slo_s=float(c["tpot_slo_s"][i]),
            e2e_slo_s=float(c["e2e_slo_s"][i]),
            priority=float(c["priority"][i]),
            tier=int(c["tier"][i]),
            value=float(c["value"][i]),
        )

    def to_frame(self) -> pd.DataFrame:
        """The workload as a DataFrame (a copy)."""
        return pd.DataFrame(
            {
                k: (list(v) if v.ndim > 1 or v.dtype == object else v.copy())
                for k, v in self._cols.items()
            }
        )

    @classmethod
    def from_frame(cls, frame: pd.DataFrame, source: str = "<frame>") -> Workload:
        """Build from a DataFrame with (at least) the required columns."""
        return cls({c: frame[c].to_numpy() for c in frame.columns}, source=source)

    @classmethod
    def from_requests(cls, requests: list[Request], source: str = "<requests>") -> Workload:
        """Build from Request records (their ids are dropped: the row index is the id)."""
        names = list(STANDARD_COLUMNS)
        return cls({n: np.array([getattr(r, n) for r in requests]) for n in names}, source=source)

    def with_columns(self, **columns: Any) -> Workload:
        """A new workload with the given columns replaced or added."""
        cols: dict[str, Any] = dict(self._cols)
        cols.update(columns)
        return self.derived(cols)

    def take(self, index: np.ndarray | slice) -> Workload:
        """A new workload holding the selected rows (kept in arrival order)."""
        idx = np.arange(len(self))[index] if isinstance(index, slice) else np.asarray(index)
        idx = np.sort(idx)
        return self.derived({k: v[idx] for k, v in self._cols.items()})

    def derived(self, columns: Mapping[str, Any], source: str | None = None) -> Workload:
        """A new workload of ``columns`` with this one's token bound (and source, by default)."""
        return Workload(
            columns,
            source=self.source if source is None else source,
            max_request_tokens=self.max_request_tokens,
        )

    def equals(self, other: Workload) -> bool:
        """Exact equality of every column (nan equal to nan)."""
        if self.columns != other.columns or len(self) != len(other):
            return False
        for k in self.columns:
            a, b = self._cols[k], other._cols[k]
            if a.dtype.kind == "f":
                if not np.array_equal(a, b, equal_nan=True):
                    return False
            elif a.dtype == object or b.dtype == object:
                if [
                    list(x) if hasattr(x, "__len__") and not isinstance(x, str) else x for x in a
                ] != [
                    list(x) if hasattr(x, "__len__") and not isinstance(x, str) else x for x in b
                ]:
                    return False
            elif not np.array_equal(a, b):
                return False
        return True

    def __repr__(self) -> str:
        return f"Workload({len(self)} requests from {self.source})"


def cached_prompt_tokens(workload: Workload) -> np.ndarray:
    """Each request's prompt tokens in the snapshot's given prefix cache (the
    :data:`CACHED_COLUMN` column; zeros without it), as int64.

    A given cache is the cache state a snapshot starts from, held fixed: request ``r``'s first
    ``cached_tokens[r]`` prompt tokens are in the KV cache whenever it starts (or restarts
    after a preemption) its prefill, so it computes only the rest, with their attention over
    the cached prefix. The cached blocks stay resident for the whole run, outside the server's
    KV capacity (a builder that wants them inside gives a capacity less their size,
    :func:`slolab.instances.prefix_state.given_cache`); the KV a request holds against the
    capacity is what it computed and generated, while its decode steps read its whole context.
    """
    if CACHED_COLUMN in workload:
        return np.asarray(workload[CACHED_COLUMN], dtype=np.int64)
    return np.zeros(len(workload), dtype=np.int64)


def given_cache_error(workload: Workload, cluster: Cluster) -> str:
    """Why ``cluster`` cannot serve ``workload``'s given prefix cache ("" if it can)."""
    if CACHED_COLUMN not in workload:
        return ""
    if cluster.prefix_block_tokens:
        return (
            f"the workload's {CACHED_COLUMN} column (a given cache) and the cluster's prefix "
            f"cache (prefix_block_tokens={cluster.prefix_block_tokens}) exclude each other: "
            "drop the column or set prefix_block_tokens=0"
        )
    if cluster.mode not in ("colocated", "static"):
        return (
            f"the workload's {CACHED_COLUMN} column (a given cache) is served in colocated "
            f"mode only, or in static batches; got mode {cluster.mode!r}"
        )
    return ""


MODES = ("colocated", "static", "disaggregated")
#: Roles a pool's servers can play: ``mixed`` (co-located continuous batching), ``static``
#: (static batches), ``prefill`` / ``decode`` (the two sides of a disaggregated cluster).
POOL_ROLES = ("mixed", "prefill", "decode", "static")
_MODE_ROLES = {
    "colocated": ("mixed",),
    "static": ("static",),
    "disaggregated": ("prefill", "decode"),
}


def _check_optional_int(owner: str, name: str, value: int | None, low: int) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < low:
        raise ValueError(f"{owner}: {name} must be None or an integer >= {low}, got {value!r}")


def _check_delay(owner: str, name: str, value: float | None) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < math.inf:
        raise ValueError(f"{owner}: {name} must be a finite number of seconds >= 0, got {value!r}")


@dataclass(frozen=True, slots=True)
class Pool:
    """A named group of servers that play one role (a TPOT tier, a prefill or decode side, a
    best-effort pool, a worker group).

    Every server belongs to one pool. Settings left ``None`` take the cluster's value; a pool
    may run on other hardware than the instance's timing model by naming a timing preset.

    Parameters
    ----------
    name : str
        Unique within the cluster.
    role : str
        One of :data:`POOL_ROLES`.
    servers : int
        Servers switched on (and ready) when the run begins, >= 0.
    max_batch_size, max_batch_tokens, kv_capacity_tokens : int, optional
        This pool's limits (default: the cluster's).
    timing : str, optional
        Name of a timing preset (``slolab.timing.available_presets``) the pool's servers run
        at; default the instance's timing model.
    startup_s : float, optional
        Seconds from switching a server on into this pool until it serves (weights loaded);
        default the cluster's ``startup_s``.
    kv_link_bandwidth_bytes_per_s : float, optional
        A prefill pool's servers: bandwidth of each one's link to the decode side (bytes/s);
        default the cluster's ``kv_transfer_bandwidth_bytes_per_s``.
    """

    name: str
    role: str = "mixed"
    servers: int = 0
    max_batch_size: int | None = None
    max_batch_tokens: int | None = None
    kv_capacity_tokens: int | None = None
    timing: str | None = None
    startup_s: float | None = None
    kv_link_bandwidth_bytes_per_s: float | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"pool name must be a non-empty string, got {self.name!r}")
        owner = f"pool {self.name!r}"
        if self.role not in POOL_ROLES:
            raise ValueError(
                f"{owner}: role must be one of {', '.join(POOL_ROLES)}, got {self.role!r}"
            )
        if isinstance(self.servers, bool) or not isinstance(self.servers, int | np.integer):
            raise ValueError(f"{owner}: servers must be an integer >= 0, got {self.servers!r}")
        if self.servers < 0:
            raise ValueError(f"{owner}: servers must be an integer >= 0, got {self.servers}")
        _check_optional_int(owner, "max_batch_size", self.max_batch_size, 1)
        _check_optional_int(owner, "max_batch_tokens", self.max_batch_tokens, 0)
        _check_optional_int(owner, "kv_capacity_tokens", self.kv_capacity_tokens, 1)
        _check_delay(owner, "startup_s", self.startup_s)
        link = self.kv_link_bandwidth_bytes_per_s
        if link is not None and not (
            isinstance(link, int | float) and link > 0 and math.isfinite(link)
        ):
            raise ValueError(f"{owner}: kv_link_bandwidth_bytes_per_s must be > 0, got {link!r}")
        if self.timing is not None:
            from slolab.timing.presets import available_presets

            if self.timing not in available_presets():
                raise ValueError(
                    f"{owner}: unknown timing preset {self.timing!r}; known: "
                    f"{', '.join(available_presets())}"
                )

    def to_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__dataclass_fields__}


@dataclass(frozen=True, slots=True)
class Cluster:
    """The servers a workload runs on.

    Without ``pools`` the cluster is one fixed set of identical servers, grouped as the mode
    implies (:meth:`resolved_pools`): one pool ``"main"`` (colocated or static), or the pools
    ``"prefill"`` (servers ``[0, prefill_servers)``) and ``"decode"`` (disaggregated). With
    ``pools`` the servers are those pools' initial servers, in pool order; build such a cluster
    with :meth:`from_pools`.

    Parameters
    ----------
    servers : int
        Number of servers (model replicas) switched on when the run begins, >= 1 (0 allowed
        for a cluster of pools that its scaler fills).
    kv_capacity_tokens : int
        KV-cache capacity of one server in tokens (prompt + generated tokens resident).
    mode : str
        ``"colocated"`` (continuous batching with chunked prefill), ``"static"`` (a batch runs to
        completion before the next starts) or ``"disaggregated"`` (prefill pool + decode pool).
    prefill_servers : int
        With ``"disaggregated"``: how many of ``servers`` form the prefill pool (the rest decode).
    max_batch_size : int
        Most sequences (prefill + decode) in one iteration or static batch.
    max_batch_tokens : int
        Most tokens in one iteration (the chunked-prefill budget); 0 means unlimited.
    kv_bytes_per_token : float
        Bytes of KV cache per token (for the disaggregated transfer time).
    kv_transfer_bandwidth_bytes_per_s : float
        Bandwidth of one prefill server's link to the decode servers (bytes/s; figures per
        link kind in :data:`slolab.timing.links.KV_LINKS`).
    kv_transfer_queued : bool
        The KV transfers leaving one prefill server share its link: each starts when its
        prefill is done and the server's previous transfer has landed, first done first sent
        (default). False: every transfer at the full bandwidth at once, however many leave a
        server together (the engine's former model, kept for comparison).
    pools : tuple of Pool
        Named pools (empty: derived from the mode, see above).
    startup_s : float
        Seconds from switching a server on until it serves (loading its weights; see
        :mod:`slolab.timing.startup` for figures by weight source), unless its pool sets its
        own. Servers on when the run begins are ready at once.
    move_s : float
        Seconds a server moved to another pool needs, once drained, before it serves there
        (reconfiguration; its weights stay loaded).
    prefix_block_tokens : int
        Prefix caching (:mod:`slolab.sim.prefix_cache`): tokens per KV block of each server's
        prefix cache, a divisor of 512 (the tokens per id of the workload's ``hash_ids``
        column: 512 as Mooncake's ids, 16 as vLLM's blocks); 0 (the default) turns caching off
        and every prompt is prefilled in full.
    """

    servers: int = 1
    kv_capacity_tokens: int = 2**20
    mode: str = "colocated"
    prefill_servers: int = 0
    max_batch_size: int = 256
    max_batch_tokens: int = 0
    kv_bytes_per_token: float = 524288.0
    kv_transfer_bandwidth_bytes_per_s: float = 25e9
    kv_transfer_queued: bool = True
    pools: tuple[Pool, ...] = ()
    startup_s: float = 0.0
    move_s: float = 0.0
    prefix_block_tokens: int = 0

    def __post_init__(self) -> None:
        if self.servers < 1 and not (self.pools and self.servers == 0):
            # a cluster of pools may start empty (an elastic cluster whose scaler or router
            # switches its first servers on)
            raise ValueError(f"servers must be >= 1, got {self.servers}")
        if self.kv_capacity_tokens < 1:
            raise ValueError(f"kv_capacity_tokens must be >= 1, got {self.kv_capacity_tokens}")
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}, got {self.mode!r}")
        if self.mode == "disaggregated":
            if not 1 <= self.prefill_servers < self.servers and not self.pools:
                raise ValueError(
                    "prefill_servers must be between 1 and servers - 1 when disaggregated, "
                    f"got {self.prefill_servers} of {self.servers}"
                )
        elif self.prefill_servers != 0:
            raise ValueError(
                f"prefill_servers must be 0 unless disaggregated, got {self.prefill_servers}"
            )
        if self.max_batch_size < 1:
            raise ValueError(f"max_batch_size must be >= 1, got {self.max_batch_size}")
        if self.max_batch_tokens < 0:
            raise ValueError(f"max_batch_tokens must be >= 0, got {self.max_batch_tokens}")
        if not self.kv_bytes_per_token > 0:
            raise ValueError(f"kv_bytes_per_token must be > 0, got {self.kv_bytes_per_token}")
        if not self.kv_transfer_bandwidth_bytes_per_s > 0:
            raise ValueError(
                "kv_transfer_bandwidth_bytes_per_s must be > 0, "
                f"got {self.kv_transfer_bandwidth_bytes_per_s}"
            )
        _check_delay("cluster", "startup_s", self.startup_s)
        _check_delay("cluster", "move_s", self.move_s)
        _check_prefix_block_tokens(self.prefix_block_tokens)
        if not isinstance(self.pools, tuple):
            object.__setattr__(self, "pools", tuple(self.pools))
        if self.pools:
            self._check_pools()

    def _check_pools(self) -> None:
        names: set[str] = set()
        for i, pool in enumerate(self.pools):
            if not isinstance(pool, Pool):
                raise TypeError(f"pools[{i}] must be a Pool, got {type(pool).__name__}")
            if pool.name in names:
                raise ValueError(f"pool names must be unique, got {pool.name!r} twice")
            names.add(pool.name)
            if pool.role not in _MODE_ROLES[self.mode]:
                raise ValueError(
                    f"mode {self.mode!r} takes pools of role "
                    f"{' or '.join(_MODE_ROLES[self.mode])}; pool {pool.name!r} has role "
                    f"{pool.role!r}"
                )
        total = sum(p.servers for p in self.pools)
        if self.servers != total:
            raise ValueError(
                f"servers must equal the pools' initial servers ({total}), got {self.servers} "
                "(Cluster.from_pools counts them)"
            )
        if self.mode == "disaggregated":
            roles = {p.role for p in self.pools}
            if roles != {"prefill", "decode"}:
                raise ValueError("a disaggregated cluster needs a prefill pool and a decode pool")
            prefill = sum(p.servers for p in self.pools if p.role == "prefill")
            if self.prefill_servers != prefill:
                raise ValueError(
                    f"prefill_servers must equal the prefill pools' initial servers ({prefill}), "
                    f"got {self.prefill_servers}"
                )

    @classmethod
    def from_pools(cls, pools: Sequence[Pool], **fields: Any) -> Cluster:
        """A cluster of ``pools``: ``servers`` (and ``prefill_servers``) are counted from them
        and the mode follows from their roles (prefill/decode: disaggregated, static: static,
        else colocated); ``fields`` sets the other Cluster fields."""
        pools = tuple(pools)
        roles = {p.role for p in pools}
        if roles & {"prefill", "decode"}:
            mode = "disaggregated"
        elif roles == {"static"}:
            mode = "static"
        else:
            mode = "colocated"
        prefill = sum(p.servers for p in pools if p.role == "prefill")
        return cls(
            servers=sum(p.servers for p in pools),
            mode=fields.pop("mode", mode),
            prefill_servers=fields.pop("prefill_servers", prefill),
            pools=pools,
            **fields,
        )

    @property
    def decode_servers(self) -> int:
        """Servers in the decode pool (all servers unless disaggregated)."""
        return self.servers - self.prefill_servers

    def resolved_pools(self) -> tuple[Pool, ...]:
        """The pools with every limit filled in (the cluster's where a pool sets none).

        Without explicit pools: ``("main",)`` of role ``mixed`` or ``static``, or
        ``("prefill", "decode")`` when disaggregated. ``timing`` stays None where the pool runs
        at the instance's timing model.
        """
        if self.pools:
            pools = self.pools
        elif self.mode == "disaggregated":
            pools = (
                Pool("prefill", "prefill", self.prefill_servers),
                Pool("decode", "decode", self.decode_servers),
            )
        else:
            pools = (Pool("main", "static" if self.mode == "static" else "mixed", self.servers),)
        return tuple(
            Pool(
                p.name,
                p.role,
                p.servers,
                max_batch_size=self.max_batch_size
                if p.max_batch_size is None
                else p.max_batch_size,
                max_batch_tokens=(
                    self.max_batch_tokens if p.max_batch_tokens is None else p.max_batch_tokens
                ),
                kv_capacity_tokens=(
                    self.kv_capacity_tokens
                    if p.kv_capacity_tokens is None
                    else p.kv_capacity_tokens
                ),
                timing=p.timing,
                startup_s=self.startup_s if p.startup_s is None else p.startup_s,
                kv_link_bandwidth_bytes_per_s=(
                    self.kv_transfer_bandwidth_bytes_per_s
                    if p.kv_link_bandwidth_bytes_per_s is None
                    else p.kv_link_bandwidth_bytes_per_s
                ),
            )
            for p in pools
        )

    def kv_transfer_s(
        self, tokens: int | np.ndarray, bandwidth_bytes_per_s: float | None = None
    ) -> float | np.ndarray:
        """Time to move the KV cache of ``tokens`` tokens from a prefill to a decode server,
        over a link of ``bandwidth_bytes_per_s`` (default the cluster's)."""
        bandwidth = (
            self.kv_transfer_bandwidth_bytes_per_s
            if bandwidth_bytes_per_s is None
            else bandwidth_bytes_per_s
        )
        return tokens * self.kv_bytes_per_token / bandwidth

    def to_dict(self) -> dict[str, Any]:
        out = {name: getattr(self, name) for name in self.__dataclass_fields__}
        out["pools"] = [p.to_dict() for p in self.pools]
        if not self.prefix_block_tokens:
            # caching off: the file reads as it did before the field existed
            del out["prefix_block_tokens"]
        return out


#: Tokens per id of a workload's ``hash_ids`` column (Mooncake's prefix blocks).
HASH_ID_TOKENS = 512


def _check_prefix_block_tokens(value: Any) -> None:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | np.integer)
        or value < 0
        or (value and HASH_ID_TOKENS % value)
    ):
        raise ValueError(
            f"prefix_block_tokens must be 0 (no prefix cache) or a divisor of {HASH_ID_TOKENS} "
            f"(16, 32, ..., 512), got {value!r}"
        )


def _freeze(mapping: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return MappingProxyType(dict(mapping or {}))


@dataclass(frozen=True)
class Instance:
    """A workload on a cluster under a timing model, with objective settings.

    Parameters
    ----------
    name : str
        Short identifier (used by the manifest and the CLI).
    workload : Workload
        The requests.
    cluster : Cluster
        Servers, memory and mode.
    timing : slolab.timing.TimingModel
        The iteration-time model shared by every method run on this instance.
    problem : str
        Which decision problem the instance is for (``"serving"`` for a plain stream,
        ``"sa-ordering"``, ``"slos-admission"``, ...).
    settings : mapping
        Objective and problem settings (JSON-serialisable), for example ``{"batch_size": 4}``
        for SA ordering or ``{"w_prefill": 1.0}`` for TDG.
    """

    name: str
    workload: Workload
    cluster: Cluster = field(default_factory=Cluster)
    timing: Any = None
    problem: str = "serving"
    settings: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("name must be a non-empty string")
        if not isinstance(self.workload, Workload):
            raise TypeError(f"workload must be a Workload, got {type(self.workload).__name__}")
        if len(self.workload) == 0:
            raise ValueError(f"instance {self.name!r} has no requests")
        if self.timing is None:
            raise ValueError(f"instance {self.name!r} needs a timing model")
        why = given_cache_error(self.workload, self.cluster)
        if why:
            raise ValueError(f"instance {self.name!r}: {why}")
        object.__setattr__(self, "settings", _freeze(self.settings))

    @property
    def n_requests(self) -> int:
        return len(self.workload)
