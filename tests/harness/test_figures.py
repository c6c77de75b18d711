"""slolab plot and the results figures: the right tables from each source, files with provenance."""

import json

import pytest
from slolab.harness import figures
from slolab.harness.cli import main
from slolab.harness.sweep import open_store

CAPACITY = {
    "capacity": 3.0,
    "target": 0.9,
    "policy": "sarathi",
    "servers": 2,
    "probes": [{"rate": 2.0, "attainment": 0.95}, {"rate": 4.0, "attainment": 0.5}],
    "early": [False, True],
}


def _write(path, value):
    path.write_text(json.dumps(value))
    return path


def test_capacity_json_gives_probes_target_and_capacity(tmp_path):
    """A ``capacity --json`` record: its probes (the early one a bound), target and capacity."""
    rows = figures.read_rows([_write(tmp_path / "c.json", CAPACITY)])
    assert rows["task_kind"].tolist() == ["capacity"]
    args = figures.tables_from_rows(rows, "attainment-vs-rate")
    assert args["table"][["rate", "attainment", "bound"]].values.tolist() == [
        [2.0, 0.95, False],
        [4.0, 0.5, True],
    ]
    assert args["target"] == 0.9 and args["capacities"][0]["capacity"] == 3.0


def test_plot_command_draws_from_several_json_files(tmp_path, capsys):
    """``slolab plot a.json b.json --figure attainment-vs-rate`` writes one SVG of both."""
    a = _write(tmp_path / "a.json", CAPACITY)
    b = _write(tmp_path / "b.json", CAPACITY | {"policy": "slos-serve", "capacity": 4.0})
    code = main(["plot", str(a), str(b), "--figure", "attainment-vs-rate", "-o", str(tmp_path)])
    assert code == 0
    out = tmp_path / "attainment-vs-rate.svg"
    assert capsys.readouterr().out.strip() == str(out)
    text = out.read_text()
    assert ">sarathi</text>" in text and ">slos-serve</text>" in text


def test_compare_and_pareto_json_draw_gaps_and_the_front(tmp_path):
    """Compare rows draw the gaps; a pareto front with compare rows draws the front figure."""
    compare_rows = [
        {"method": "highs", "kind": "exact", "requests": 4, "gap_lo": 0.0, "gap_hi": 0.0,
         "cost_server_s": 0.8, "attainment": 1.0},
        {"method": "round-robin", "kind": "heuristic", "requests": 4, "gap_lo": 0.2,
         "gap_hi": 0.3, "cost_server_s": 1.9, "attainment": 1.0},
    ]  # fmt: skip
    front = [
        {"level": 1.0, "cost_server_s": 0.8, "attainment": 1.0, "status": "OPTIMAL"},
        {"level": 0.5, "cost_server_s": 0.2, "attainment": 0.5, "status": "OPTIMAL"},
    ]
    rows = figures.read_rows(
        [_write(tmp_path / "cmp.json", compare_rows), _write(tmp_path / "front.json", front)]
    )
    assert figures.drawable(rows) == ["gaps", "pareto"]
    args = figures.tables_from_rows(rows, "pareto")
    assert args["points"]["method"].tolist() == ["round-robin"]


def test_a_sweep_store_draws_cost_against_traffic(tmp_path):
    """Deploy rows of a store: one point per traffic level for each kind of fleet."""
    store = open_store(tmp_path / "store")
    with store.writer() as writer:
        writer.append(
            [
                {"task_key": f"t{k}", "task_kind": "deploy", "trace": "azure_conv_2023",
                 "model": "llama2-7b", "gpus": "h100", "traffic": traffic,
                 "mixed_cost": cost, "single_cost": cost, "optimum_cost": cost / 2}
                for k, (traffic, cost) in enumerate([(1.0, 4.25), (2.0, 8.5)])
            ]
        )  # fmt: skip
    rows = figures.read_rows([tmp_path / "store"])
    args = figures.tables_from_rows(rows, "cost-vs-traffic")
    mixed = args["table"][args["table"]["fleet"] == "mixed"]
    assert mixed[["traffic", "cost_per_hour"]].values.tolist() == [[1.0, 4.25], [2.0, 8.5]]
    assert main(["plot", str(tmp_path / "store"), "-o", str(tmp_path / "f")]) == 0
    assert (tmp_path / "f" / "cost-vs-traffic.svg").exists()


def test_a_figure_the_rows_cannot_draw_says_what_it_needs(tmp_path, capsys):
    """Asking for a figure the rows lack is one line naming the rows it is drawn from."""
    src = _write(tmp_path / "c.json", CAPACITY)
    assert main(["plot", str(src), "--figure", "gaps", "-o", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "figure 'gaps' is drawn from compare rows; the sources hold capacity" in err


def test_latency_cdf_needs_the_results_json(tmp_path):
    """Store and --json rows carry percentiles only: the CDF figure says where it comes from."""
    rows = figures.read_rows([_write(tmp_path / "c.json", CAPACITY)])
    with pytest.raises(ValueError, match="only the results command's JSON"):
        figures.tables_from_rows(rows, "latency-cdf")


def _results_data():
    """A results JSON of one paper with a tiny series (what the results command writes)."""
    return {
        "header": {"profile": "quick", "date_utc": "2026-01-02 03:04", "commit": "abc", "dirty": False},
        "papers": {
            "slos-serve": {
                "figures": {
                    "requests": 10,
                    "capacity": [{"replicas": 1, "capacity": {"slos-serve": 3.0, "vllm": 1.0}}],
                },
                "verdicts": {},
                "series": {
                    "target": 0.9,
                    "probes": [
                        {"replicas": 1, "policy": p, "rate": r, "attainment": a}
                        for p, r, a in [("slos-serve", 2.0, 1.0), ("slos-serve", 4.0, 0.5),
                                        ("vllm", 1.0, 0.95), ("vllm", 2.0, 0.4)]
                    ],
                },
            }
        },
    }  # fmt: skip


def test_results_json_draws_its_figures_with_their_provenance(tmp_path):
    """The results JSON draws each figure it has data for; the SVG names the run and data."""
    data = _results_data()
    assert [f.name for f in figures.result_figures(data)] == ["slos-serve-attainment"]
    (path,) = figures.draw_results(data, tmp_path, source="r.json")
    figure = figures.RESULT_FIGURES[[f.name for f in figures.RESULT_FIGURES].index(path.stem)]
    text = path.read_text()
    assert f"<dc:description>{figures.provenance(data, figure, 'r.json')}</dc:description>" in text
    assert "run 2026-01-02 03:04 UTC at commit abc" in text
    # another datum is another digest
    moved = json.loads(json.dumps(data))
    moved["papers"]["slos-serve"]["series"]["probes"][0]["attainment"] = 0.99
    assert figures.data_digest(moved["papers"]["slos-serve"]) != figures.data_digest(
        data["papers"]["slos-serve"]
    )


def test_results_json_without_series_draws_nothing_for_that_paper():
    """A JSON written before the series existed has no figure for the paper (none is faked)."""
    data = _results_data()
    del data["papers"]["slos-serve"]["series"]
    assert figures.result_figures(data) == []


def test_plot_command_on_results_json(tmp_path, capsys):
    """``slolab plot results.json --format png`` draws its figures as PNG."""
    src = _write(tmp_path / "results-quick.json", _results_data())
    assert main(["plot", str(src), "--format", "png", "-o", str(tmp_path / "out")]) == 0
    assert capsys.readouterr().out.split() == [str(tmp_path / "out" / "slos-serve-attainment.png")]


def test_every_result_figure_has_a_known_kind_and_a_unique_name():
    """Names are file stems (unique); kinds are figures slolab plot knows."""
    names = [f.name for f in figures.RESULT_FIGURES]
    assert len(names) == len(set(names))
    assert {f.kind for f in figures.RESULT_FIGURES} <= set(figures.KINDS)
    with pytest.raises(ValueError, match="kind must be one of"):
        figures.ResultFigure("x", "p", "histogram", "c", lambda p: None)


def test_rows_without_a_kind_are_inferred():
    """A command's records get the task kind they come from."""
    assert figures._kind_of({"level": 1.0, "cost_server_s": 1.0}) == "front"
    assert figures._kind_of({"policy": "x", "attainment": 1.0}) == "simulate"
    assert figures._kind_of({"mixed_cost": 1.0}) == "deploy"
    assert figures._kind_of({}) == "unknown"


def test_plot_json_prints_the_files_as_one_object(tmp_path, capsys):
    """``--json`` prints ``{"figures": [paths]}`` and nothing else."""
    src = _write(tmp_path / "c.json", CAPACITY)
    assert main(["plot", str(src), "--json", "-o", str(tmp_path)]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed == {"figures": [str(tmp_path / "attainment-vs-rate.svg")]}


def test_simulate_json_at_set_rates_draws_attainment_against_rate(tmp_path, capsys):
    """``simulate --rate R --json`` records the rate: runs at two rates make one curve."""
    files = []
    for rate in (2.0, 8.0):
        argv = ["simulate", "azure_conv_2023", "--limit", "30", "--rate", str(rate), "--json"]
        assert main(argv) in (0, 1)
        record = json.loads(capsys.readouterr().out)
        assert record["rate"] == rate
        files.append(_write(tmp_path / f"sim-{rate:g}.json", record))
    args = figures.tables_from_rows(figures.read_rows(files), "attainment-vs-rate")
    assert args["table"]["rate"].tolist() == [2.0, 8.0]
    assert args["table"]["policy"].unique().tolist() == ["sarathi"]
