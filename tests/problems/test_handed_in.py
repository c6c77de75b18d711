"""What the problems hand the lower layers: the models' starts and warm starts, and the check
that refuses an instance file relabelled to another problem."""

import json

import pytest
from slolab import problems
from slolab.instances import InstanceFileError, save_instance
from slolab.instances import load_instance as load_file
from slolab.problems.dispatch_scale import LNS_STARTS
from slolab.problems.sa_ordering import _sa_anneal
from slolab.solvers import build_model as build_bare


def test_problems_build_model_hands_dispatch_lns_the_online_starts():
    """dispatch-lns built through the problems starts from the three online policies' runs;
    built bare it has none."""
    inst = problems.build_instance("dispatch-scale", n=6, seed=0)
    model = problems.build_model("dispatch-lns", inst)
    assert model.starts is LNS_STARTS
    assert list(model.starts) == ["hyperflexis", "round-robin", "hyperflexis-scaling"]
    assert dict(build_bare("dispatch-lns", inst).starts) == {}


def test_problems_build_model_hands_sa_bp_the_annealing_and_a_keyword_overrides_it():
    """sa-ordering-bp built through the problems anneals for its warm start; a keyword given
    to build_model wins over the declared one."""
    pytest.importorskip("pyscipopt")
    inst = problems.build_instance("sa-ordering", n=4, seed=0)
    assert problems.build_model("sa-ordering-bp", inst).anneal is _sa_anneal
    assert problems.build_model("sa-ordering-bp", inst, anneal=None).anneal is None
    assert build_bare("sa-ordering-bp", inst).anneal is None


def test_a_relabelled_file_is_refused_by_the_problems_and_read_by_instances(tmp_path):
    """An sa-ordering file relabelled dispatch-scale: instances reads it as labelled, the
    problems' load refuses it on field 'problem' naming the problem it was built for."""
    path = save_instance(problems.build_instance("sa-ordering", n=4, seed=0), tmp_path / "a.json")
    data = json.loads(path.read_text())
    data["problem"] = "dispatch-scale"
    path.write_text(json.dumps(data))
    assert load_file(path).problem == "dispatch-scale"
    with pytest.raises(InstanceFileError) as caught:
        problems.load_instance(path)
    assert caught.value.field == "problem"
    assert "its settings are those of 'sa-ordering'" in str(caught.value)
