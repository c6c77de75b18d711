"""The registered deployment-pd problem: compare runs the MILP, the enumeration and both
heuristics as disaggregated fleets, with the objective recomputed from the pools that ran."""

from __future__ import annotations

import numpy as np
import pytest
from slolab.harness.compare import compare
from slolab.models.deployment_pd import PDData
from slolab.problems import build_instance, get_problem

METHODS = ["highs", "enumeration-pd", "best-pair", "greedy-pd"]


@pytest.fixture(scope="module")
def built():
    """40 Azure conversation requests at 4 times their rate; Llama-2-7B on one H100 or one
    A100, either pool; probes of 40 requests."""
    return build_instance(
        "deployment-pd",
        trace="azure_conv_2023",
        configurations="llama2-7b/h100/tp1,llama2-7b/a100/tp1",
        limit=40,
        traffic=4.0,
        stream_requests=40,
    )


def test_problem_is_registered_with_its_methods():
    """The model, the enumeration alias and both heuristics are declared."""
    problem = get_problem("deployment-pd")
    assert problem.models == ("deployment-pd",)
    assert problem.aliases["enumeration-pd"] == "deployment-pd:brute"
    assert [h.name for h in problem.heuristics] == ["best-pair", "greedy-pd"]


def test_compare_shows_exact_and_heuristic_answers_with_attainment(built):
    """Both exact formulations prove one optimum, recomputed from the fleet that ran; the
    heuristics cost no less; every run passes the checker."""
    table = compare(built, METHODS, details=True).set_index("method")
    assert table.loc["highs", "status"] == "OPTIMAL"
    assert table.loc["enumeration-pd", "status"] == "OPTIMAL"
    optimum = table.loc["highs", "objective"]
    assert table.loc["enumeration-pd", "objective"] == pytest.approx(optimum)
    assert table.loc["highs", "solver_objective"] == pytest.approx(optimum, rel=1e-9)
    # at least one server per pool: the cheaper GPU (A100, $2.21/h) twice at least
    assert optimum >= 2 * 2.21 - 1e-9
    for method in METHODS:
        assert table.loc[method, "violations"] == 0, method
        assert 0.0 <= table.loc[method, "attainment"] <= 1.0
        assert table.loc[method, "objective"] >= optimum - 1e-9


def test_the_instance_stores_both_sides(built):
    """The settings hold both capacity tables, the link of each prefill configuration and each
    class's KV bytes."""
    data = PDData.from_dict(built.settings["deployment_pd"])
    assert data.prefill.classes == data.decode.classes
    # one 50 GB/s NDR port per GPU, TP 1
    assert set(data.link_bandwidth) == {50e9}
    # Llama-2-7B: 32 layers x 2 (K, V) x 4096 x 2 bytes = 524,288 B per token, so a class
    # sends the mean of (prompt + 1) over its requests times 524,288 bytes
    prompt = np.asarray(built.workload.prompt_tokens, dtype=float)
    class_of = np.asarray(built.settings["class_of"])
    for k, sent in enumerate(data.kv_bytes):
        assert sent == pytest.approx((prompt[class_of == k] + 1).mean() * 524_288, rel=1e-12)
