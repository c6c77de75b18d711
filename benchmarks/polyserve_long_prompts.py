"""PolyServe on long prompts: where its misses come from on the Mooncake trace.

Co-located (``--section predict``): for each request the admission places before its
first-token deadline, the first-token time it predicted against the replayed one; the requests
no server admits on time (placed once lost), and whether an idle server of their tier could
meet their TTFT, by the admission's prediction (the chunk kept to the end of the prompt) and by
the batch former's own chunks (each iteration's chunk at its prefix, nothing decoding).

Disaggregated (``--section pd``): the missed requests split into TTFT misses and later-token
misses, the first late token, and the KV transfer against the time from the end of the prompt
to the second token's deadline; the same run with the transfer made instant.

The first ``--requests`` requests of the Mooncake conversation trace, PolyServe's SLOs, Poisson
arrivals at each rate (seed 0), 8 servers, the ``slolab capacity`` defaults otherwise. Prints
one row per run with its CPU seconds and the 1-minute load average, and writes
``benchmarks/out/polyserve_long_prompts.csv``. Asserts only that every run is checker-clean.

Usage: ``python benchmarks/polyserve_long_prompts.py [--section predict] [--section pd]
[--requests 1000] [--rates 1.0 1.5]``
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import time
from pathlib import Path

import numpy as np
import pandas as pd
from slolab.harness.serving import ServingSetup
from slolab.heuristics.polyserve import chunk_attention_work, kv_peak
from slolab.sim import check, metrics
from slolab.timing.base import prefill_chunk_attention
from slolab.timing.inverse import time_to_tokens

OUT = Path(__file__).parent / "out"


def setup_of(n: int, mode: str) -> ServingSetup:
    return ServingSetup(
        "mooncake_conversation",
        policy="polyserve",
        servers=8,
        limit=n,
        slos="polyserve",
        arrivals="poisson",
        mode=mode,
    )


def simulate(setup: ServingSetup, rate: float):
    """``setup`` run at ``rate`` (seed 0), checked clean: the instance, scheduler, outcome, CPU
    seconds of the run and the 1-minute load average when it started."""
    inst, sched = setup.prepare(setup.instance(rate))
    load = os.getloadavg()[0]
    cpu = time.process_time()
    out = sched.run(inst, seed=0)
    cpu = time.process_time() - cpu
    assert check(inst, out) == []
    return inst, sched, out, cpu, load


def idle_former_s(timing, tau: float, prompt: int, most: int) -> float:
    """A lone prompt's prefill time on an idle server whose batch former takes, each
    iteration, the largest chunk within ``tau`` at its prefix (at least 32 tokens)."""
    done, spent = 0, 0.0
    while done < prompt:
        left = min(prompt - done, most)
        c = time_to_tokens(timing, tau, 0, 0, done, max_tokens=left) or min(left, 32)
        work = prefill_chunk_attention(c, done)
        spent += timing.time_of(prefill_tokens=c, num_prefill_seqs=1, prefill_attention_work=work)
        done += c
    return spent


def predict(n: int, rate: float) -> dict:
    """The co-located admission's predictions against the replay at ``rate``."""
    setup = setup_of(n, "colocated")
    inst, sched, out, cpu, load = simulate(setup, rate)
    ctl = sched.router
    wl = inst.workload
    deadline = wl.arrival_s + np.asarray(wl["ttft_slo_s"], dtype=float)
    late_first = out.first_token_s > deadline + 1e-9
    on_time = np.array(sorted(ctl.predicted_prefill_end_s), dtype=np.int64)
    error = out.first_token_s[on_time] - np.array([ctl.predicted_prefill_end_s[r] for r in on_time])
    lost = np.setdiff1d(np.nonzero(np.isfinite(out.routed_s))[0], on_time)
    # could an idle server of their tier meet them? by the admission's prediction, by the
    # batch former's chunks
    unattainable, former_meets = 0, 0
    for r in lost:
        p, tau = int(ctl.req.prompt[r]), float(ctl.req.tpot[r])
        peak = kv_peak(np.array([float(p)]), np.array([max(ctl.d_hat, 1.0)]))
        c = ctl.profile.max_chunk(peak, tau, 1, ctl.attention_s, p)
        if ctl.max_tokens:
            c = min(c, ctl.max_tokens - 1)
        predicted = math.ceil(p / c) * ctl.profile.time(1 + c, peak) if c >= 1 else math.inf
        predicted += ctl.attention_s * chunk_attention_work(p, p)
        if predicted > ctl.req.ttft[r]:
            unattainable += 1
            most = ctl.max_tokens or p
            former_meets += idle_former_s(inst.timing, tau, p, most) <= ctl.req.ttft[r]
    return {
        "section": "predict",
        "rate": rate,
        "requests": n,
        "attainment": metrics.attainment(inst, out),
        "missed_ttft": int(late_first.sum()),
        "placed_on_time": len(on_time),
        "on_time_missed_ttft": int(late_first[on_time].sum()),
        "error_p10_s": float(np.quantile(error, 0.1)),
        "error_p50_s": float(np.quantile(error, 0.5)),
        "error_p90_s": float(np.quantile(error, 0.9)),
        "error_max_s": float(error.max()),
        "placed_lost": len(lost),
        "unattainable_idle_predicted": unattainable,
        "of_which_idle_former_meets": former_meets,
        "cpu_s": cpu,
        "load_1min": load,
    }


@dataclasses.dataclass(frozen=True)
class _InstantTransfer(ServingSetup):
    """The set-up with the KV transfer between servers made (practically) instant."""

    def instance(self, rate=None):
        inst = super().instance(rate)
        cluster = dataclasses.replace(inst.cluster, kv_transfer_bandwidth_bytes_per_s=1e18)
        return dataclasses.replace(inst, cluster=cluster)


def pd_misses(n: int, rate: float, instant: bool) -> dict:
    """Disaggregated PolyServe's missed requests at ``rate`` and what the second token met."""
    setup = setup_of(n, "disaggregated")
    if instant:
        setup = _InstantTransfer(**dataclasses.asdict(setup))
    inst, sched, out, cpu, load = simulate(setup, rate)
    wl = inst.workload
    table = metrics.request_table(inst, out)
    missed = ~table["met_deadline"].to_numpy()
    ttft = np.asarray(wl["ttft_slo_s"], dtype=float)
    tpot = np.asarray(wl["tpot_slo_s"], dtype=float)
    first_late = ~(out.first_token_s <= wl.arrival_s + np.nan_to_num(ttft, nan=np.inf) + 1e-9)
    later = np.nonzero(missed & ~first_late)[0]
    second = [r for r in later if out.tokens_of(r)[1] > wl.arrival_s[r] + ttft[r] + tpot[r] + 1e-9]
    transfer = out.transfer_done_s[later] - out.prefill_done_s[later]
    slack = wl.arrival_s[later] + ttft[later] + tpot[later] - out.prefill_done_s[later]
    return {
        "section": "pd-instant" if instant else "pd",
        "rate": rate,
        "requests": n,
        "attainment": metrics.attainment(inst, out),
        "missed": int(missed.sum()),
        "missed_ttft": int((missed & first_late).sum()),
        "missed_later": len(later),
        "second_token_first_late": len(second),
        "transfer_p50_s": float(np.median(transfer)) if len(later) else math.nan,
        "slack_p50_s": float(np.median(slack)) if len(later) else math.nan,
        "transfer_over_slack": int((transfer > slack).sum()),
        "cpu_s": cpu,
        "load_1min": load,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--section", action="append", choices=["predict", "pd"])
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--rates", type=float, nargs="+", default=[1.0, 1.5])
    parser.add_argument("--pd-rates", type=float, nargs="+", default=[0.05, 1.0])
    args = parser.parse_args()
    sections = args.section or ["predict", "pd"]
    rows = []
    if "predict" in sections:
        rows += [predict(args.requests, rate) for rate in args.rates]
    if "pd" in sections:
        for rate in args.pd_rates:
            rows += [pd_misses(args.requests, rate, instant) for instant in (False, True)]
    OUT.mkdir(exist_ok=True)
    table = pd.DataFrame(rows)
    table.to_csv(OUT / "polyserve_long_prompts.csv", index=False)
    with pd.option_context("display.width", 250, "display.max_columns", 30):
        print(table.to_string(index=False, float_format=lambda v: f"{v:.4g}"))


if __name__ == "__main__":
    main()
