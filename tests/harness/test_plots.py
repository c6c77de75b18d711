"""The standard figures draw what their tables hold, in one style, and write reproducible files.

No image is compared with a stored one: glyphs and anti-aliasing differ between machines, so
the tests read the artists (lines, their data, labels) and the files' metadata instead.
"""

import numpy as np
import pandas as pd
import pytest
from slolab.harness import plots
from slolab.heuristics.baselines import LeastLoaded, SarathiFCFS
from slolab.problems.serving import serving_instance
from slolab.sim import run

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _labelled(ax):
    """The lines of ``ax`` that carry a legend label, by label."""
    return {ln.get_label(): ln for ln in ax.get_lines() if not ln.get_label().startswith("_")}


def _legend_labels(fig):
    return [t.get_text() for ax in fig.axes if ax.get_legend() for t in ax.get_legend().texts]


PROBES = pd.DataFrame(
    {
        "policy": ["sarathi"] * 3 + ["slos-serve"] * 3,
        "rate": [4.0, 2.0, 3.0, 2.0, 4.0, 8.0],
        "attainment": [0.8, 0.95, 0.9, 1.0, 0.97, 0.5],
        "bound": [False, False, False, False, False, True],
    }
)


def test_attainment_vs_rate_one_line_per_policy_with_target_and_capacities():
    """One line per policy in rate order, the target dashed, each capacity a dotted drop line."""
    fig = plots.attainment_vs_rate(
        PROBES,
        target=0.9,
        capacities=[
            {"policy": "sarathi", "capacity": 3.0},
            {"policy": "slos-serve", "capacity": 4.0},
        ],
    )
    ax = fig.axes[0]
    lines = _labelled(ax)
    assert sorted(lines) == ["sarathi", "slos-serve", "stopped early (a bound)", "target 0.9"]
    np.testing.assert_allclose(lines["sarathi"].get_xdata(), [2.0, 3.0, 4.0])
    np.testing.assert_allclose(lines["sarathi"].get_ydata(), [0.95, 0.9, 0.8])
    (target,) = [ln for ln in ax.get_lines() if ln.get_gid() == "target"]
    assert target.get_linestyle() == "--" and list(target.get_ydata()) == [0.9, 0.9]
    caps = {ln.get_gid(): ln for ln in ax.get_lines() if str(ln.get_gid()).startswith("capacity:")}
    # the drop line stands at the capacity, from the axis up to the target
    assert list(caps["capacity:slos-serve"].get_xdata()) == [4.0, 4.0]
    assert list(caps["capacity:slos-serve"].get_ydata()) == [0.0, 0.9]
    assert caps["capacity:slos-serve"].get_color() == lines["slos-serve"].get_color()
    assert ax.get_xlabel() == "arrival rate (req/s)" and ax.get_ylabel() == "SLO attainment"
    # the legend sits outside the axes (anchored right of them): the policies, then the marks
    assert _legend_labels(fig) == ["sarathi", "slos-serve", "stopped early (a bound)", "target 0.9"]
    assert ax.get_legend()._loc == 2 and ax.get_legend().get_bbox_to_anchor().x0 > ax.bbox.x1


def test_attainment_vs_rate_draws_a_bound_hollow():
    """A probe stopped early is drawn again hollow (its attainment is a bound)."""
    fig = plots.attainment_vs_rate(PROBES, target=0.9)
    hollow = [ln for ln in fig.axes[0].get_lines() if ln.get_label() == "_bound"]
    assert len(hollow) == 1
    assert list(hollow[0].get_xdata()) == [8.0] and hollow[0].get_markerfacecolor() == "white"


def test_attainment_vs_rate_one_panel_per_value():
    """A ``panel`` column gives one subplot per value, titled with it."""
    table = pd.concat([PROBES.assign(panel="1 replica"), PROBES.assign(panel="2 replicas")])
    fig = plots.attainment_vs_rate(table, target=0.9)
    assert [ax.get_title() for ax in fig.axes[:2]] == ["1 replica", "2 replicas"]
    assert {"sarathi", "slos-serve", "target 0.9"} <= set(_labelled(fig.axes[1]))


def test_a_policy_keeps_its_style_across_figures():
    """The same policy has the same colour and marker whatever else the figure holds."""
    alone = plots.styles(["slos-serve"])["slos-serve"]
    among = plots.styles(["vllm", "my-policy", "slos-serve"])["slos-serve"]
    assert alone == among
    # unknown names: the same style each time, and distinct from the others of the figure
    a = plots.styles(["x-one", "x-two", "sarathi"])
    b = plots.styles(["x-one", "x-two", "sarathi"])
    assert a == b
    assert len({(s.color, s.marker) for s in a.values()}) == 3


def test_every_fixed_style_pair_is_distinct_within_a_published_figure():
    """The policies of one published figure never share a colour and marker."""
    for names in (
        ["slos-serve", "sarathi", "vllm"],
        ["polyserve", "random"],
        ["sa", "sjf", "fcfs", "edf"],
        ["slide-batching", "vllm-fcfs", "sarathi-fcfs", "sarathi-priority", "fairbatching"],
        ["hyperflexis", "hyperflexis-scaling", "hyperflexis-pm", "round-robin", "scorpio-rr"],
        ["mixed", "single", "optimum on capacities", "disaggregated"],
    ):
        found = plots.styles(names)
        assert len({(s.color, s.marker) for s in found.values()}) == len(names), names


def test_gap_intervals_point_where_proved_bar_where_not():
    """A proved gap is a marker with no bar; an unproved one a bar from lo to hi (in %)."""
    table = pd.DataFrame(
        {
            "method": ["sa", "sa", "fcfs", "fcfs"],
            "n": [6, 8, 6, 8],
            "gap_lo": [0.0, 0.1, 0.2, 0.3],
            "gap_hi": [0.0, 0.1, 0.2, 0.5],
        }
    )
    fig = plots.gap_intervals(table, size="n")
    ax = fig.axes[0]
    methods = {c.get_label(): c for c in ax.containers}
    assert sorted(methods) == ["fcfs", "sa"]
    lines = {name: c.lines[0] for name, c in methods.items()}
    # fcfs at N=8: interval [30, 50] %, drawn around its middle 40 with half-width 10
    np.testing.assert_allclose(lines["fcfs"].get_ydata(), [20.0, 40.0])
    assert lines["fcfs"].get_markevery() == [0]  # marker only where proved (N = 6)
    assert lines["sa"].get_markevery() == [0, 1]
    segments = methods["fcfs"].lines[2][0].get_segments()
    np.testing.assert_allclose([s[:, 1] for s in segments], [[20.0, 20.0], [30.0, 50.0]])
    assert [t.get_text() for t in ax.get_xticklabels()] == ["6", "8"]
    assert ax.get_ylabel() == "gap to the optimum (%)"


def test_gap_intervals_reads_a_compare_table():
    """A compare table keeps its heuristic rows; the exact method is not drawn."""
    frame = pd.DataFrame(
        {
            "method": ["sa", "highs"],
            "kind": ["heuristic", "exact"],
            "requests": [6, 6],
            "gap_lo": [0.1, 0.0],
            "gap_hi": [0.1, 0.0],
        }
    )
    fig = plots.gap_intervals(frame)
    assert [c.get_label() for c in fig.axes[0].containers] == ["sa"]


def test_missing_columns_name_the_table_and_the_columns():
    """A table without the figure's columns is refused with the missing ones named."""
    with pytest.raises(ValueError, match=r"the gap table lacks column\(s\) \['gap_lo'\]"):
        plots.gap_intervals(pd.DataFrame({"method": ["sa"], "requests": [6], "gap_hi": [0.1]}))


def test_latency_cdfs_one_line_per_policy_per_tier_with_the_slo():
    """Each tier's panel has a step curve per policy and its SLO marked."""
    inst = serving_instance("azure_conv_2023", seed=0, servers=1, limit=120)
    out = run(inst, SarathiFCFS(), LeastLoaded(), seed=0)
    table = pd.concat(
        [
            plots.latency_quantiles(inst, out, policy="sarathi"),
            plots.latency_quantiles(inst, out, policy="copy"),
        ]
    )
    tiers = sorted(set(np.asarray(inst.workload["tier"]).tolist()))
    fig = plots.latency_cdfs(table)
    panels = [ax for ax in fig.axes if ax.get_xlabel()]
    assert len(panels) == 2 * len(tiers)
    for ax in panels:
        curves = _labelled(ax)
        assert {"sarathi", "copy"} <= set(curves)
        # every request finished: each CDF reaches 1
        assert curves["sarathi"].get_ydata()[-1] == 1.0
    assert panels[0].get_xlabel() == "TTFT (ms)" and panels[-1].get_xlabel() == "mean TPOT (ms)"
    tpot_slo = [a for a in panels[-1].get_children() if a.get_gid() == "slo"]
    assert len(tpot_slo) == 1


def test_latency_quantiles_stop_short_for_requests_never_served():
    """A request that never got its first token has no TTFT: the top quantiles are None."""
    inst = serving_instance("azure_conv_2023", seed=0, servers=1, limit=40)
    out = run(inst, SarathiFCFS(), LeastLoaded(), seed=0)
    out.token_times[out.token_offsets[0] :] = np.inf  # pretend nothing was emitted
    table = plots.latency_quantiles(inst, out, policy="p")
    ttft = table[table["metric"] == "ttft"]
    assert ttft["value_s"].isna().all()


def test_cost_vs_traffic_one_line_per_fleet_skipping_unmet():
    """One line per fleet kind; a fleet that met no target (inf or None) has no point there."""
    table = pd.DataFrame(
        {
            "traffic": [1, 2, 4, 1, 2, 4],
            "fleet": ["mixed"] * 3 + ["single"] * 3,
            "cost_per_hour": [4.25, 4.25, 8.5, 4.25, float("inf"), None],
        }
    )
    fig = plots.cost_vs_traffic(table)
    lines = _labelled(fig.axes[0])
    assert sorted(lines) == ["mixed", "single"]
    np.testing.assert_allclose(lines["single"].get_xdata(), [1.0])
    np.testing.assert_allclose(lines["mixed"].get_ydata(), [4.25, 4.25, 8.5])
    assert fig.axes[0].get_ylabel() == "cost ($/h)"


def test_pareto_front_steps_and_places_each_heuristic():
    """The front is a post-step through its points by cost; each heuristic one marker set."""
    front = pd.DataFrame({"cost_server_s": [0.8, 0.16, 0.25], "attainment": [1.0, 0.0, 0.75]})
    points = pd.DataFrame(
        {
            "method": ["hyperflexis", "round-robin"],
            "cost_server_s": [2.0, 1.9],
            "attainment": [1.0, 1.0],
        }
    )
    fig = plots.pareto_front(front, points)
    lines = _labelled(fig.axes[0])
    assert sorted(lines) == ["exact front", "hyperflexis", "round-robin"]
    assert lines["exact front"].get_drawstyle() == "steps-post"
    np.testing.assert_allclose(lines["exact front"].get_xdata(), [0.16, 0.25, 0.8])
    # past its dearest point (0.8) the front holds attainment 1.0 out to the dearest heuristic
    (reach,) = [ln for ln in fig.axes[0].get_lines() if ln.get_gid() == "front-reach"]
    np.testing.assert_allclose(reach.get_xdata(), [0.8, 2.0])
    np.testing.assert_allclose(reach.get_ydata(), [1.0, 1.0])
    assert fig.axes[0].get_xlabel() == "cost (server-seconds)"


def test_predicted_vs_measured_has_the_diagonal():
    """One marker set per label and the diagonal where prediction equals measurement."""
    table = pd.DataFrame(
        {
            "measured_s": [0.01, 0.02, 0.04],
            "predicted_s": [0.011, 0.019, 0.05],
            "label": ["a", "a", "b"],
        }
    )
    fig = plots.predicted_vs_measured(table)
    lines = _labelled(fig.axes[0])
    assert sorted(lines) == ["a", "b", "predicted = measured"]
    np.testing.assert_allclose(lines["predicted = measured"].get_xdata(), [10.0, 50.0])


def test_svg_is_reproducible_and_keeps_its_text(tmp_path):
    """The same figure saved twice is the same file: no date, fixed ids, text as text."""
    first, second = tmp_path / "a.svg", tmp_path / "b.svg"
    plots.save(plots.attainment_vs_rate(PROBES, target=0.9), first, description="from x")
    plots.save(plots.attainment_vs_rate(PROBES, target=0.9), second, description="from x")
    text = first.read_text()
    assert text == second.read_text()
    assert "<dc:description>from x</dc:description>" in text and "<dc:date>" not in text
    assert ">arrival rate (req/s)</text>" in text


def test_png_on_request_and_other_formats_refused(tmp_path):
    """``.png`` writes a PNG; another suffix is refused before anything is written."""
    fig = plots.attainment_vs_rate(PROBES, path=tmp_path / "a.png")
    assert (tmp_path / "a.png").read_bytes()[:8] == PNG_MAGIC
    with pytest.raises(ValueError, match=r"\.svg or \.png, got 'a.pdf'"):
        plots.save(fig, tmp_path / "a.pdf")
    assert not (tmp_path / "a.pdf").exists()
