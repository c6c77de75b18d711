"""Model and backend registries."""

from __future__ import annotations

import pytest
from slolab.solvers import (
    ExactModel,
    Status,
    available_models,
    build_model,
    get_model,
    register_backend,
    register_model,
    registry,
    solve,
)
from slolab.solvers.brute import BruteForceBackend
from solver_models import Knapsack, KnapsackData


@pytest.fixture
def models(monkeypatch):
    """A private copy of the model registry (after slolab.models has registered its own)."""
    import slolab.models  # noqa: F401

    monkeypatch.setattr(registry, "_MODELS", dict(registry._MODELS))
    return registry._MODELS


def test_available_models_lists_registered_names_sorted(models):
    """available_models() lists slolab.models' names and new registrations, sorted."""
    assert "sa-ordering" in available_models()

    @register_model("zz-test-last")
    class Last(ExactModel):
        pass

    @register_model("aa-test-first")
    class First(ExactModel):
        pass

    names = available_models()
    assert names == sorted(names)
    assert names.index("aa-test-first") < names.index("zz-test-last")


def test_register_then_build(models):
    """A registered class gets its name and build_model constructs it with options."""

    @register_model("test-registered-knapsack")
    class Registered(Knapsack):
        name = ""

        def __init__(self, instance, scale=1):
            super().__init__(instance)
            self.scale = scale

    data = KnapsackData((3,), ((1,),), (1,))
    model = build_model("test-registered-knapsack", data, scale=2)
    assert Registered.name == "test-registered-knapsack"
    assert get_model("test-registered-knapsack") is Registered
    assert isinstance(model, Registered)
    assert (model.instance, model.scale) == (data, 2)
    result = solve(model, solver="brute")
    # One item of value 3 and weight 1 fits capacity 1.
    assert result.objective == 3.0
    assert result.model == "test-registered-knapsack"


def test_unknown_model_lists_known_ones(models):
    """get_model on an unknown name raises ValueError listing the registered names."""
    models.clear()

    @register_model("only-model")
    class Only(ExactModel):
        pass

    with pytest.raises(ValueError, match=r"unknown model 'nope'; known models: only-model"):
        build_model("nope", None)


def test_taken_name_is_rejected(models):
    """Registering a second, different class under a taken name raises ValueError."""

    @register_model("test-taken")
    class One(ExactModel):
        pass

    class Two(ExactModel):
        pass

    with pytest.raises(ValueError, match="model name 'test-taken' is taken by"):
        register_model("test-taken")(Two)


def test_reloaded_class_replaces_itself(models):
    """A class with the same module and qualified name (a reloaded module) re-registers."""

    def make():
        class Reloaded(ExactModel):
            pass

        return Reloaded

    first, second = make(), make()
    register_model("test-reloaded")(first)
    register_model("test-reloaded")(second)
    assert get_model("test-reloaded") is second


def test_registration_checks_class_and_name(models):
    """Non-models, mismatched class names and empty names are rejected."""
    with pytest.raises(TypeError, match="needs an ExactModel subclass"):
        register_model("test-not-a-model")(dict)

    class Named(ExactModel):
        name = "given-name"

    with pytest.raises(ValueError, match="is named 'given-name', cannot register it as 'other'"):
        register_model("other")(Named)
    with pytest.raises(ValueError, match="a model name must be a non-empty string"):
        register_model("")


class CountingBackend(BruteForceBackend):
    """Brute force under another name, counting its calls."""

    name = "counting-brute"
    calls = 0

    def solve_brute(self, model, time_limit):
        CountingBackend.calls += 1
        return super().solve_brute(model, time_limit)


def test_registered_backend_is_solvable(monkeypatch):
    """A backend added with register_backend is listed, used by solve() and named in Results."""
    monkeypatch.setattr(registry, "_BACKENDS", dict(registry._BACKENDS))
    monkeypatch.setattr(registry, "_UNAVAILABLE", dict(registry._UNAVAILABLE))
    register_backend("counting-brute", CountingBackend)
    assert "counting-brute" in registry.available_solvers()
    model = Knapsack(KnapsackData((4, 5), ((2, 3),), (4,)))
    result = solve(model, solver="counting-brute")
    # Items weigh 2 and 3, capacity 4: only one fits; the better is item 1 with value 5.
    assert result.status == Status.OPTIMAL
    assert result.objective == 5.0
    assert result.backend == "counting-brute"
    assert CountingBackend.calls == 1


def test_lazy_backend_path_must_be_module_colon_class(monkeypatch):
    """register_backend rejects paths without one colon and objects that are not Backends."""
    monkeypatch.setattr(registry, "_BACKENDS", dict(registry._BACKENDS))
    with pytest.raises(ValueError, match="reads 'module:ClassName'"):
        register_backend("x", "slolab.solvers.brute.BruteForceBackend")
    with pytest.raises(TypeError, match="must be a Backend subclass"):
        register_backend("x", dict)
