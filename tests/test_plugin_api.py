"""The public plugin API (slolab.plugins.PUBLIC_API) is versioned: a name removed or a signature
changed without raising PLUGIN_API_VERSION fails here.

After a deliberate change: raise PLUGIN_API_VERSION if a name went away or a signature changed
(a class's member gone or changed included; a member added to a class is an addition, as a new
name is), then rewrite the snapshot with ``python tests/test_plugin_api.py``.
"""

import dataclasses
import importlib
import inspect
import json
import sys
from pathlib import Path

SNAPSHOT = Path(__file__).resolve().parent / "plugin_api_snapshot.json"


def _signature(obj) -> str:
    try:
        return str(inspect.signature(obj))
    except (TypeError, ValueError):
        return "(...)"


def _describe(obj) -> object:
    """What a plugin relies on: a function's signature; a class's constructor, fields and
    public members (methods with signatures, properties, attributes by type)."""
    if inspect.isclass(obj):
        members: dict[str, str] = {}
        if dataclasses.is_dataclass(obj):
            for f in dataclasses.fields(obj):
                members[f.name] = f"field: {f.type}"
        for name, value in sorted(vars(obj).items()):
            if name.startswith("_") or name in members:
                continue
            if isinstance(value, property):
                members[name] = "property"
            elif isinstance(value, classmethod | staticmethod):
                members[name] = f"method{_signature(value.__func__)}"
            elif inspect.isfunction(value):
                members[name] = f"method{_signature(value)}"
            else:
                members[name] = f"attribute: {type(value).__name__}"
        init = "(...)" if obj.__init__ is object.__init__ else _signature(obj)
        return {"class": init, "members": members}
    if callable(obj):
        return f"function{_signature(obj)}"
    return f"constant: {type(obj).__name__}"


def current_api() -> dict[str, dict[str, object]]:
    """``module -> name -> description`` of every name of PUBLIC_API."""
    from slolab.plugins import PUBLIC_API

    return {
        module: {name: _describe(getattr(importlib.import_module(module), name)) for name in names}
        for module, names in sorted(PUBLIC_API.items())
    }


def _flatten(api):
    return {f"{m}.{n}": d for m, names in api.items() for n, d in names.items()}


def _breaks(was, now) -> bool:
    """Whether description ``now`` breaks a plugin written against ``was``: a different
    function signature or constructor, or a class member gone or different. A member added
    to a class breaks nothing (a plugin cannot have used it)."""
    if isinstance(was, dict) and isinstance(now, dict):
        members = now["members"]
        return was["class"] != now["class"] or any(
            members.get(name) != description for name, description in was["members"].items()
        )
    return was != now


def _differences(stored, now_api=None):
    """(removed, changed, added): names gone; names whose description breaks a plugin
    (:func:`_breaks`); names new, and members new to a class as ``module.Class.member``."""
    before, now = _flatten(stored["api"]), _flatten(now_api or current_api())
    removed = sorted(set(before) - set(now))
    common = set(before) & set(now)
    changed = sorted(k for k in common if _breaks(before[k], now[k]))
    added = set(now) - set(before)
    for k in common:
        if isinstance(before[k], dict) and isinstance(now[k], dict):
            added |= {f"{k}.{m}" for m in set(now[k]["members"]) - set(before[k]["members"])}
    return removed, changed, sorted(added)


def test_public_api_matches_its_versioned_snapshot():
    """Every public name of the snapshot still exists with the same signature and every
    public name is in it, at the snapshot's PLUGIN_API_VERSION (the rewrite refuses a
    removal or a change without a version bump)."""
    from slolab.plugins import PLUGIN_API_VERSION

    stored = json.loads(SNAPSHOT.read_text())
    removed, changed, added = _differences(stored)
    assert not (removed or changed), (
        f"public API broken: removed {removed}, changed {changed}; raise PLUGIN_API_VERSION "
        "(slolab/plugins.py) and run python tests/test_plugin_api.py"
    )
    assert not added, f"new public names {added}: run python tests/test_plugin_api.py"
    assert stored["version"] == PLUGIN_API_VERSION, "run python tests/test_plugin_api.py"


def test_a_member_added_to_a_class_is_an_addition_and_one_gone_or_changed_a_break():
    """``Server.kv_freed_by_preempting`` was added without a version bump: an addition breaks
    no plugin. A member removed, or its signature changed, is a break."""
    stored = json.loads(SNAPSHOT.read_text())
    now = current_api()
    server = now["slolab.sim"]["Server"]["members"]
    assert server["kv_freed_by_preempting"].startswith("method(self, victims")
    without = json.loads(json.dumps(stored))
    del without["api"]["slolab.sim"]["Server"]["members"]["kv_freed_by_preempting"]
    assert _differences(without, now) == ([], [], ["slolab.sim.Server.kv_freed_by_preempting"])
    gone = json.loads(json.dumps(now))
    del gone["slolab.sim"]["Server"]["members"]["kv_held"]
    assert _differences(stored, gone)[1] == ["slolab.sim.Server"]
    renamed = json.loads(json.dumps(now))
    renamed["slolab.sim"]["Server"]["members"]["kv_held"] = "method(self, request: 'int') -> 'int'"
    assert _differences(stored, renamed)[1] == ["slolab.sim.Server"]


def test_snapshot_covers_the_protocols_a_policy_implements():
    """The snapshot holds the Policy protocol's two methods and the Server view a policy
    reads (its queues and deadlines), so a change to either is caught."""
    api = json.loads(SNAPSHOT.read_text())["api"]["slolab.sim"]
    policy = api["Policy"]["members"]
    assert set(policy) == {"next_batch", "start"}
    assert policy["next_batch"] == "method(self, server: 'Server') -> 'Batch'"
    server = api["Server"]["members"]
    for name in ("waiting", "decoding", "prefilling", "kv_free_tokens", "now"):
        assert server[name] == "property"
    assert server["next_token_deadline"] == "method(self, r: 'int') -> 'float'"
    assert api["Batch"]["members"]["repeat"] == "field: bool"


if __name__ == "__main__":
    from slolab.plugins import PLUGIN_API_VERSION

    if SNAPSHOT.exists():
        stored = json.loads(SNAPSHOT.read_text())
        removed, changed, _ = _differences(stored)
        if (removed or changed) and PLUGIN_API_VERSION <= stored["version"]:
            sys.exit(
                f"removed {removed}, changed {changed}: raise PLUGIN_API_VERSION above "
                f"{stored['version']} first"
            )
    SNAPSHOT.write_text(
        json.dumps({"version": PLUGIN_API_VERSION, "api": current_api()}, indent=1) + "\n"
    )
    print(f"wrote {SNAPSHOT} (version {PLUGIN_API_VERSION})", file=sys.stderr)
