"""Prefix caching against real serving: the vLLM runs replayed with the engine's prefix cache.

The four vLLM 0.11 runs of inference-sim vendored in ``slolab/timing/data/measured/`` (one
H100, prefix caching on in every run) go through the engine twice, as
:func:`slolab.benchmarks.fidelity.replay` builds them (one server with the run's KV capacity,
``max_num_seqs`` and ``max_num_batched_tokens``, Sarathi FCFS, the calibrated timing ``fit`` on
every run or ``held-out`` without this run):

- ``static``: the fidelity benchmark's replay, every request after the first prefilling its
  prompt less the shared prefix rounded down to 16-token blocks (no cache);
- ``cache``: the whole prompts with the engine's prefix cache (``prefix_block_tokens=16``, as
  vLLM), each request's ``hash_ids`` naming what is known of its content: guidellm's shared
  prefix of ``prefix_tokens`` tokens, the same for every request of the run, then text of its
  own (:func:`prefix_workload`).

Per run and timing variant: vLLM's last logged prefix-cache hit rate (``vllm_hit_rate``), the
engine's (``engine_hit_rate``: tokens skipped over tokens queried, every admission counted, a
request resumed after a preemption again, as vLLM counted them before its PR #25787) and the
same over first admissions only (``first_admission_hit_rate``), the hit rate the workload's
structure implies when nothing is evicted and nothing preempted (every request after the first
skips ``floor(prefix / 16) * 16`` tokens, at most ``prompt - 1``), evictions of prefix blocks,
preemptions in both replays, and the signed error of the TTFT and end-to-end p50 and p90 of both
replays against the measured ones. Prints the table and writes
``benchmarks/out/prefix_validation.csv``. Asserts only that the cached replays pass the checker
(:func:`slolab.sim.check.check`, with its replay of the caches).

What the data can and cannot tell: the vendored runs record lengths, not content, so the only
reuse the replay can describe is guidellm's shared prefix; a prefix that is not a whole number
of 512-token ids shares only its whole ids (both vendored prefixes are 1,024 tokens, two ids).

Usage: ``python -m slolab.benchmarks.prefix_validation``.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd
from slolab.benchmarks.fidelity import replay_instance
from slolab.heuristics.baselines import SarathiFCFS
from slolab.instances import Instance, Workload
from slolab.instances.records import HASH_ID_TOKENS
from slolab.instances.shared_prefix import shared_prefix_workload
from slolab.sim import metrics, run
from slolab.sim.check import check
from slolab.sim.outcome import Outcome
from slolab.sim.prefix_cache import block_keys, cache_log
from slolab.timing.measured import MeasuredRun, read_inference_sim_runs
from slolab.timing.overheads import ServingOverheads, calibration_samples, fit_calibration

OUT = Path(__file__).parent / "out"
#: vLLM's KV block (tokens): the cache's block size in the replay.
VLLM_BLOCK = 16
METRICS = ("ttft", "e2e")
QUANTILES = (50, 90)


def prefix_workload(run_: MeasuredRun) -> Workload:
    """The run's requests (arrivals, whole prompts, outputs) with ``hash_ids``: the first
    ``prefix_tokens // 512`` ids the same in every request (guidellm's shared prefix), every
    other id its own (built by :func:`~slolab.instances.shared_prefix.shared_prefix_workload`
    with every request starting with the prefix and none a follow-up turn)."""
    req = run_.requests
    prompt = req["prompt_tokens"].astype(np.int64)
    if np.any(prompt <= run_.prefix_tokens):
        raise ValueError(f"{run_.name}: a prompt is not longer than the shared prefix")
    own = Workload(
        {
            "arrival_s": req["arrival_s"],
            "prompt_tokens": prompt - run_.prefix_tokens,
            "output_tokens": req["output_tokens"].astype(np.int64),
        },
        source=run_.name,
    )
    out = shared_prefix_workload(
        own,
        seed=0,
        system_prompt_tokens=run_.prefix_tokens,
        system_fraction=1.0,
        conversation_fraction=0.0,
        max_prompt_tokens=int(prompt.max()) + run_.prefix_tokens,
    )
    assert np.array_equal(out.prompt_tokens, prompt)
    return out


def structural_hit_rate(run_: MeasuredRun) -> float:
    """Tokens skipped over tokens queried when every request after the first finds the shared
    prefix cached (whole 16-token blocks within its first ``prompt - 1`` tokens) and nothing
    else: no eviction, no preemption."""
    prompt = run_.requests["prompt_tokens"].astype(np.int64)
    prefix = VLLM_BLOCK * (run_.prefix_tokens // VLLM_BLOCK)
    skipped = np.minimum(prefix, VLLM_BLOCK * ((prompt[1:] - 1) // VLLM_BLOCK))
    return float(skipped.sum() / prompt.sum())


def cached_replay(
    run_: MeasuredRun, overheads: ServingOverheads | None
) -> tuple[Instance, Outcome]:
    """The run through the engine with its prefix cache (16-token blocks)."""
    instance = replay_instance(run_, overheads, prefix_workload(run_), VLLM_BLOCK)
    return instance, run(instance, SarathiFCFS(), seed=0)


def first_admission_hit_rate(outcome: Outcome) -> float:
    """Tokens skipped over tokens queried at each request's first admission (a request
    resumed after a preemption not counted again)."""
    log = cache_log(outcome)
    assert log is not None
    _, first = np.unique(log.hit_request, return_index=True)
    queried = int(log.queried_tokens[first].sum())
    return int(log.hit_tokens[first].sum()) / queried if queried else 0.0


def shared_ids(workload: Workload) -> list[int]:
    """The ids every prompt of ``workload`` starts with (its shared prefix's whole blocks)."""
    ids = list(workload["hash_ids"])
    common = list(ids[0])
    for other in ids[1:]:
        k = 0
        while k < min(len(common), len(other)) and other[k] == common[k]:
            k += 1
        common = common[:k]
    return [int(h) for h in common]


def prefix_evictions(instance: Instance, outcome: Outcome) -> int:
    """Blocks of the shared prefix evicted during the run."""
    log = cache_log(outcome)
    assert log is not None
    common = shared_ids(instance.workload)
    b = int(instance.cluster.prefix_block_tokens)
    keys = set(block_keys(common, len(common) * HASH_ID_TOKENS, b))
    return sum(1 for k in log.evict_block.tolist() if k in keys)


def _errors(truth: dict[str, np.ndarray], table: pd.DataFrame) -> dict[str, float]:
    predicted = {"ttft": table["ttft_s"].to_numpy(), "e2e": table["e2e_s"].to_numpy()}
    return {
        f"{m}_p{q}": float(np.nanpercentile(predicted[m], q) / np.nanpercentile(truth[m], q) - 1)
        for m in METRICS
        for q in QUANTILES
    }


def validation_table(runs: Sequence[MeasuredRun] | None = None) -> pd.DataFrame:
    """One row per run and timing variant (``fit``, ``held-out``): hit rates, evictions,
    preemptions, and the signed errors of both replays."""
    runs = read_inference_sim_runs() if runs is None else runs
    pool = calibration_samples("vllm-0.11")
    full = fit_calibration("vllm-0.11", pool)
    rows = []
    for run_ in runs:
        held = fit_calibration("vllm-0.11", [s for s in pool if s.source != run_.name])
        truth = {"ttft": run_.requests["ttft_s"], "e2e": run_.requests["e2e_s"]}
        for variant, overheads in (("fit", full), ("held-out", held)):
            static_instance = replay_instance(run_, overheads)
            static_outcome = run(static_instance, SarathiFCFS(), seed=0)
            instance, outcome = cached_replay(run_, overheads)
            violations = check(instance, outcome)
            cache = metrics.summary(instance, outcome)["prefix_cache"]
            row: dict[str, object] = {
                "run": run_.name,
                "variant": variant,
                "requests": len(truth["e2e"]),
                "prefix_tokens": run_.prefix_tokens,
                "vllm_hit_rate": run_.prefix_cache_hit_rate,
                "engine_hit_rate": cache["hit_rate"],
                "first_admission_hit_rate": first_admission_hit_rate(outcome),
                "structural_hit_rate": structural_hit_rate(run_),
                "evictions": cache["evictions"],
                "prefix_evictions": prefix_evictions(instance, outcome),
                "preemptions_static": int(static_outcome.preemptions.sum()),
                "preemptions_cache": int(outcome.preemptions.sum()),
                "violations": len(violations),
            }
            static = _errors(truth, metrics.request_table(static_instance, static_outcome))
            cached = _errors(truth, metrics.request_table(instance, outcome))
            for key in static:
                row[f"{key}_error_static"] = static[key]
                row[f"{key}_error_cache"] = cached[key]
            rows.append(row)
    return pd.DataFrame(rows)


def main(argv: Sequence[str] | None = None) -> None:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.parse_args(argv)
    OUT.mkdir(exist_ok=True)
    table = validation_table()
    table.to_csv(OUT / "prefix_validation.csv", index=False)
    shown = table.copy()
    for column in shown.columns:
        if column.endswith("_rate"):
            shown[column] = shown[column].map(lambda v: f"{100 * v:.1f}%")
        elif "_error_" in column:
            shown[column] = shown[column].map(lambda v: f"{100 * v:+.1f}%")
    with pd.option_context("display.width", 250, "display.max_columns", None):
        print(shown.to_string(index=False))
    assert (table["violations"] == 0).all(), "a cached replay fails the checker"
    print(f"\nwrote {OUT / 'prefix_validation.csv'}")


if __name__ == "__main__":
    main()
