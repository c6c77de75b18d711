"""Outcome: what happened when a workload ran, down to every token's time.

Per request: server, admission/rejection, prefill completion, and the time of every output
token (flat array with offsets: the tokens of request ``r`` are
``token_times[token_offsets[r]:token_offsets[r + 1]]``; ``inf`` marks a token never emitted).
Per server: busy time. The iteration log (one row per iteration: server, start, end, the seven
shape features, and its entries) is what :func:`slolab.sim.check` verifies.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

PHASE_PREFILL, PHASE_DECODE, PHASE_STATIC = 0, 1, 2


@dataclass(frozen=True, eq=False)
class Outcome:
    """Result of :func:`slolab.sim.run` or :func:`slolab.sim.replay`.

    Attributes
    ----------
    server : int array (n,)
        Server that served each request (the decode server when disaggregated); -1 if none.
    prefill_server : int array (n,)
        Server that ran the prefill (equal to ``server`` unless disaggregated); -1 if none.
    rejected : bool array (n,)
        Requests declined by the scheduler (never served).
    first_scheduled_s : float array (n,)
        Start of the first iteration that included the request (inf if never).
    prefill_done_s : float array (n,)
        End of the iteration that completed the prompt (inf if never).
    token_offsets : int array (n + 1,), token_times : float array (sum of output_tokens,)
        Time of every output token (inf if never emitted).
    preemptions : int array (n,)
        Times each request was preempted (its KV dropped, to be recomputed).
    busy_s : float array (servers,)
        Sum of iteration durations per server.
    it_server, it_start, it_end : arrays (iterations,)
        The iteration log; ``it_features`` is ``(iterations, 7)`` in the order of
        :data:`slolab.timing.FEATURES`; ``it_kv_tokens`` is the KV tokens resident on the
        server during the iteration (after its allocations).
    entry_offsets : int array (iterations + 1,)
        Entries of iteration ``i`` are ``entry_request[a:b]`` etc. with
        ``a, b = entry_offsets[i], entry_offsets[i + 1]``; ``entry_phase`` is 0 prefill /
        1 decode, 2 static-batch member, ``entry_tokens`` the tokens processed (static
        members: output tokens). Empty when the run did not record iterations.
    preempt_request, preempt_server, preempt_s : arrays (preemptions,)
        Every preemption: which request, on which server, at what time (its KV is dropped).
    transfer_done_s : float array (n,)
        Disaggregated mode: when the request's KV reached its decode server (inf otherwise).
    end_s : float
        Time the last iteration ended.
    wall_s : float
        Wall-clock time of the simulation.
    """

    server: np.ndarray
    prefill_server: np.ndarray
    rejected: np.ndarray
    first_scheduled_s: np.ndarray
    prefill_done_s: np.ndarray
    token_offsets: np.ndarray
    token_times: np.ndarray
    preemptions: np.ndarray
    busy_s: np.ndarray
    it_server: np.ndarray
    it_start: np.ndarray
    it_end: np.ndarray
    it_features: np.ndarray
    it_kv_tokens: np.ndarray
    entry_offsets: np.ndarray
    entry_request: np.ndarray
    entry_phase: np.ndarray
    entry_tokens: np.ndarray
    preempt_request: np.ndarray
    preempt_server: np.ndarray
    preempt_s: np.ndarray
    transfer_done_s: np.ndarray
    end_s: float
    wall_s: float
    recorded_iterations: bool = True
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def n_requests(self) -> int:
        return len(self.server)

    @property
    def n_iterations(self) -> int:
        return len(self.it_start)

    def tokens_of(self, r: int) -> np.ndarray:
        """Output-token times of request ``r`` (inf where never emitted)."""
        return self.token_times[self.token_offsets[r] : self.token_offsets[r + 1]]

    @property
    def first_token_s(self) -> np.ndarray:
        """Time of each request's first output token (inf if never)."""
        return self.token_times[self.token_offsets[:-1]]

    @property
    def last_token_s(self) -> np.ndarray:
        """Time of each request's last output token (inf if unfinished)."""
        return self.token_times[self.token_offsets[1:] - 1]

    @property
    def finished(self) -> np.ndarray:
        return np.isfinite(self.last_token_s)

    @property
    def tokens_emitted(self) -> int:
        return int(np.isfinite(self.token_times).sum())
