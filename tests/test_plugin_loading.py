"""Plugin loading in process: entry points read once per group, a broken one skipped with one
warning, module:Name references imported from the working directory."""

import sys
import warnings
from importlib import metadata

import pytest
from slolab import plugin_loading as plugins


def _fake(monkeypatch, entries):
    """Make the entry points of every group ``entries`` and forget which groups were read."""
    monkeypatch.setattr(plugins, "_loaded", set())
    monkeypatch.setattr(plugins, "_registered", {})
    monkeypatch.setattr(plugins, "_entry_points", lambda group: entries)


def test_entry_points_are_read_once_and_a_broken_one_warns_once(monkeypatch):
    """Two entry points, one naming a missing module: the good one is registered, the broken
    one is one PluginWarning naming it; a second load reads nothing again."""
    good = metadata.EntryPoint("good", "math:sqrt", "slolab.policies")
    broken = metadata.EntryPoint("broken", "no_such_module_here:thing", "slolab.policies")
    _fake(monkeypatch, [broken, good])
    registered = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        plugins.load_plugins("policies", lambda name, obj: registered.append((name, obj)))
        plugins.load_plugins("policies", lambda name, obj: registered.append((name, obj)))
    import math

    assert registered == [("good", math.sqrt)]
    assert [str(w.message) for w in caught] == [
        "plugin 'broken' (slolab.policies = no_such_module_here:thing) is skipped: "
        "ModuleNotFoundError: No module named 'no_such_module_here'"
    ]
    assert caught[0].category is plugins.PluginWarning
    assert plugins._registered == {"slolab.policies": {"good": "math:sqrt"}}


def test_a_plugin_refused_by_its_registry_is_skipped_with_a_warning(monkeypatch):
    """A registration that raises (a name already taken, say) is a warning, not an error."""
    _fake(monkeypatch, [metadata.EntryPoint("taken", "math:pi", "slolab.presets")])

    def refuse(name, obj):
        raise ValueError(f"timing preset {name!r} is already registered")

    with pytest.warns(plugins.PluginWarning, match="'taken' .* already registered"):
        plugins.load_plugins("presets", refuse)


def test_references_import_from_the_working_directory(monkeypatch, tmp_path):
    """pkg:Name imports a module of the working directory (not on sys.path before); unknown
    names list the registry; a missing attribute names the module."""
    (tmp_path / "my_sched_mod.py").write_text("class Mine:\n    pass\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", ".")])
    cache: dict = {}
    found = plugins.lookup("my_sched_mod:Mine", {}, cache, lambda name, obj: obj, "policy")
    assert found.__name__ == "Mine" and cache == {"my_sched_mod:Mine": found}
    with pytest.raises(ValueError, match=r"unknown policy 'x'; known: a, b \(or package"):
        plugins.lookup("x", {"b": 1, "a": 2}, {}, lambda n, o: o, "policy")
    with pytest.raises(ValueError, match="module my_sched_mod has no 'Other'"):
        plugins.lookup("my_sched_mod:Other", {}, {}, lambda n, o: o, "policy")


def test_reference_spelling_and_accepted_keywords():
    """module:Name (dots allowed in both parts) is a reference; a plain name or 'a:' is not;
    a factory's keywords are read from its signature (None with **kwargs)."""
    assert plugins.is_reference("pkg.mod:Name") and plugins.is_reference("m:Outer.Inner")
    assert not plugins.is_reference("sarathi") and not plugins.is_reference("mod:")
    assert not plugins.is_reference(":Name")

    def factory(token_budget=1, *, seed=0):
        return None

    assert plugins.accepted_keywords(factory) == {"token_budget", "seed"}
    assert plugins.accepted_keywords(lambda **kw: None) is None
