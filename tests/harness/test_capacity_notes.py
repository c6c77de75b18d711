"""What `slolab capacity` says beside the number: a capped search is a bound, not a capacity,
and a target no rate meets is said in one line with the requests and the SLO part missed."""

import json

from slolab.harness.cli import main
from slolab.harness.serving import ServingSetup, capacity_notes
from slolab.solvers.capacity import capacity


def mooncake_capacity(capsys, *options: str) -> dict:
    """``slolab capacity`` on the first 100 Mooncake requests with ``options``, its JSON."""
    argv = ["capacity", "mooncake_conversation", "--limit", "100", "--quiet", "--json"]
    assert main([*argv, *options]) == 0
    return json.loads(capsys.readouterr().out)


def test_capped_high_is_reported_as_a_lower_bound():
    """Met at every rate up to 1024 x the start: 'a lower bound', at 1024 req/s."""
    found = capacity(lambda rate: 1.0, start_rate=1.0, progress=False)
    # 1, 2, 4, ..., 1024 all meet: 11 probes, capacity = max_rate = 1024
    assert found.capped_high and found.capacity == 1024.0 and found.n_probes == 11
    (note,) = capacity_notes(ServingSetup("azure_conv_2023"), found)
    assert note.startswith("capacity is a lower bound")
    assert "1024 req/s" in note


def test_capped_low_settles_in_two_probes_and_says_why(capsys):
    """Sarathi on one server and the Mooncake trace: the floor probe misses, two probes in
    all, and one line names the requests missing their TTFT and their prompt lengths."""
    rec = mooncake_capacity(capsys)
    # the trace's own rate 3.0 req/s misses, then the floor 3.0 / 1024 = 0.00293 misses
    assert [p["rate"] for p in rec["probes"]] == [3.0, 3.0 / 1024]
    assert rec["capped_low"] is True and rec["capacity"] == 0.0
    (note,) = rec["notes"]
    assert note.startswith("sarathi can never meet 90% deadline attainment on 1 server")
    # 68 of the 100 requests miss at the lowest rate, 62 of them their TTFT
    assert "68 of 100 requests miss: 62 their TTFT (prompts 898 to 24,246 tokens" in note
    # the first 100 requests arrive at 12 distinct times: bursts time-scaling cannot spread
    assert "100 requests arrive at 12 distinct times" in note
    assert "try --arrivals poisson --rate R" in note


def test_text_output_marks_probes_stopped_early(capsys):
    """The text lists each probe, the early ones as bounds."""
    argv = ["capacity", "mooncake_conversation", "--limit", "100", "--quiet"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "2 probes, 2 stopped early" in out
    assert "or less (stopped early)" in out
    assert "note: sarathi can never meet" in out


def test_polyserve_never_meetable_settles_in_two_probes(capsys):
    """PolyServe (its scaler passes idle ticks) on 100 Mooncake requests, 8 servers: the floor
    is probed right after the first miss, 2 probes, and the note names the TTFT misses (it
    halved down to the floor in 11 probes while the scaler ticked through every idle span)."""
    rec = mooncake_capacity(
        capsys, "--policy", "polyserve", "--slos", "polyserve", "--servers", "8"
    )
    # first probe at the trace's own rate, then at once its 1/1024
    rates = [p["rate"] for p in rec["probes"]]
    assert len(rates) == 2 and rates[1] == rates[0] / 1024
    assert rec["capped_low"] is True and rec["capacity"] == 0.0
    (note,) = rec["notes"]
    assert note.startswith("polyserve can never meet 90% deadline attainment on 8 servers")
    assert "their TTFT" in note


def test_disaggregated_polyserve_on_drawn_arrivals_says_why_in_one_line(capsys):
    """Disaggregated PolyServe, 100 Mooncake requests drawn at 3 req/s, 8 servers: no rate
    meets 90 %; two probes (3 req/s, then its 1/1024) and one line naming the misses at the
    floor: most miss a later token (the KV transfer outlasts the second token's slack), a few
    their TTFT."""
    rec = mooncake_capacity(
        capsys,
        *("--policy", "polyserve", "--slos", "polyserve", "--servers", "8"),
        *("--mode", "disaggregated", "--arrivals", "poisson", "--rate", "3"),
    )
    assert [p["rate"] for p in rec["probes"]] == [3.0, 3.0 / 1024]
    assert rec["capped_low"] is True and rec["capacity"] == 0.0
    (note,) = rec["notes"]
    assert note.startswith("polyserve can never meet 90% deadline attainment on 8 servers")
    # 24 of the 100 miss at 0.00293 req/s: 5 their TTFT, 19 a later token (attainment 0.76)
    assert "24 of 100 requests miss: 5 their TTFT (prompts 8,974 to 24,246 tokens" in note
    assert note.endswith("19 a later token's bound")


def test_only_a_scaler_ticking_through_idle_spans_keeps_the_search_halving(capsys):
    """Sarathi on 1 server, 100 Mooncake requests: with --autoscale threshold or fixed the floor
    comes second (2 probes); with HyperFlexis's scaler (it does not pass idle ticks) the search
    halves from the first miss down to the floor: 11 probes (3.0, 1.5, ..., 3.0 / 1024)."""
    base = ["capacity", "mooncake_conversation", "--limit", "100", "--quiet", "--json"]
    counts = {}
    for scaler in ("threshold", "fixed", "hyperflexis"):
        assert main([*base, "--autoscale", scaler]) == 0
        rec = json.loads(capsys.readouterr().out)
        assert rec["capped_low"] is True
        counts[scaler] = len(rec["probes"])
    # 1024 = 2^10: the first probe and 10 halvings
    assert counts == {"threshold": 2, "fixed": 2, "hyperflexis": 11}


def test_scaler_search_with_drawn_arrivals_runs(capsys):
    """--autoscale threshold with --arrivals poisson --rate 2 (the set-up is read at the drawn
    rate to find its scaler): a search that converges, every probe at a positive rate."""
    argv = ["capacity", "azure_conv_2023", "--limit", "40", "--quiet", "--json"]
    argv += ["--autoscale", "threshold", "--arrivals", "poisson", "--rate", "2"]
    assert main(argv) == 0
    rec = json.loads(capsys.readouterr().out)
    # the first probe is the given rate, 2 req/s
    assert rec["probes"][0]["rate"] == 2.0
    assert all(p["rate"] > 0 for p in rec["probes"]) and len(rec["probes"]) >= 2
