"""SA-ordering test cases shared by the model and heuristic tests: hand timings and instances."""

from __future__ import annotations

import itertools
import math

import numpy as np
import slolab.models.sa_ordering as sa_model
from slolab.instances.records import Instance
from slolab.timing import LinearTiming

NAN = math.nan

# Every iteration costs 1 s plus 0.25 s per sequence, so a member of a batch of size s has
# first token P(s) = 1 + 0.25 s and execution time e(s) = (1 + 0.25 s) * output_tokens:
# s = 1: P = 1.25, e = 1.25 o; s = 2: P = 1.5, e = 1.5 o; its mean TPOT is 1 + 0.25 s.
QUARTER = LinearTiming(1.0, {"num_prefill_seqs": 0.25, "num_decode_seqs": 0.25}, name="quarter")
# Random-battery timing: prompt- and context-dependent, sizes 1..3.
RANDOM_TIMING = LinearTiming(
    0.01, {"prefill_tokens": 1e-4, "num_decode_seqs": 2e-3, "decode_kv_tokens": 1e-6}, name="rnd"
)


def ordering_instance(*args, timing=QUARTER, **kwargs) -> Instance:
    """An SA-ordering instance on one static server (QUARTER timing unless given)."""
    return sa_model.ordering_instance(*args, timing=timing, name="sa-test", **kwargs)


def split_or_batch() -> Instance:
    """Chat request 0 (2 tokens, TTFT 1.4 s, TPOT 1.3 s) and code request 1 (1 token, e2e 1.3 s),
    B = 2: batching slows both past their SLOs; only 1 then 0 in separate batches meets an SLO
    (G = 1 / 5)."""
    return ordering_instance([2, 1], [1.4, NAN], [1.3, NAN], [NAN, 1.3], batch_size=2)


def random_ordering_instance(seed: int, n: int, b: int, arrivals: bool = False) -> Instance:
    """The model module's seeded random instance with RANDOM_TIMING."""
    return sa_model.random_ordering_instance(seed, n, b, timing=RANDOM_TIMING, arrivals=arrivals)


def tight_ordering_instance(seed: int, n: int, b: int) -> Instance:
    """A seeded random snapshot with RANDOM_TIMING whose SLOs bind (chat TTFT 0.1-0.6 s, TPOT
    30 ms; code e2e 0.3-1.2 s): only the first batches can meet, so claim-capacity cuts exist."""
    rng = np.random.default_rng(seed)
    chat = rng.integers(0, 2, n) == 1
    return ordering_instance(
        rng.integers(1, 60, n).tolist(),
        np.where(chat, rng.uniform(0.1, 0.6, n), np.nan).tolist(),
        np.where(chat, 0.03, np.nan).tolist(),
        np.where(chat, np.nan, rng.uniform(0.3, 1.2, n)).tolist(),
        b,
        prompt_tokens=rng.integers(1, 400, n).tolist(),
        timing=RANDOM_TIMING,
    )


def listed_paths(master, q=0, tick=0):
    """Every path of a time-indexed master from node ``(q, tick)``: each sequence of batches
    whose sizes add up to N, repeats allowed."""
    n, b = master.n, master.b
    if q == n:
        yield ()
        return
    for s in range(1, min(b, n - q) + 1):
        for members in itertools.combinations(range(n), s):
            col = master.column(members, q, tick)
            for rest in listed_paths(master, q + s, col.end_tick):
                yield (col, *rest)
