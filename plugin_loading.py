"""Loading plugins (entry points and ``package.module:Name`` references) into the registries
of every layer; the public face, with what plugins may rely on, is :mod:`slolab.plugins`.

This module sits below every layer (the timing presets' registry uses it), so it imports none
of them: each registry hands :func:`load_plugins` its own ``register`` function.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import logging
import os
import sys
import warnings
from collections.abc import Callable, Mapping
from importlib import metadata
from typing import Any

__all__ = [
    "GROUPS",
    "PluginWarning",
    "accepted_keywords",
    "description_of",
    "import_reference",
    "is_reference",
    "load_plugins",
    "lookup",
    "registered_plugins",
]

#: The entry-point groups, by what they register.
GROUPS: dict[str, str] = {
    "policies": "slolab.policies",
    "routers": "slolab.routers",
    "scalers": "slolab.scalers",
    "slo_schemes": "slolab.slo_schemes",
    "presets": "slolab.presets",
    "problems": "slolab.problems",
}

_log = logging.getLogger("slolab")
_loaded: set[str] = set()
#: Plugins registered so far: ``group -> {name: entry point value}``.
_registered: dict[str, dict[str, str]] = {}


class PluginWarning(UserWarning):
    """A plugin could not be loaded (it is skipped; the message names it and says why)."""


def description_of(obj: Any, fallback: str = "") -> str:
    """A one-line description: ``obj.description``, else its docstring's first line."""
    text = getattr(obj, "description", None)
    if isinstance(text, str) and text:
        return text
    doc = inspect.getdoc(obj) or ""
    return doc.strip().splitlines()[0] if doc.strip() else fallback


def accepted_keywords(make: Callable[..., Any]) -> set[str] | None:
    """Keyword names ``make`` accepts (None: any, it takes ``**kwargs``)."""
    try:
        params = inspect.signature(make).parameters
    except (TypeError, ValueError):
        return None
    if any(p.kind is p.VAR_KEYWORD for p in params.values()):
        return None
    return {n for n, p in params.items() if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}


def is_reference(name: str) -> bool:
    """True when ``name`` reads ``package.module:Name`` (a class to import, not a registered
    name)."""
    module, sep, attribute = name.partition(":")
    dotted = (*module.split("."), *attribute.split("."))
    return bool(sep) and all(part.isidentifier() for part in dotted)


def import_reference(reference: str, what: str) -> Any:
    """The object ``package.module:Name`` names, imported; ValueError naming ``what`` (the
    flag or field) when it cannot be.

    The module is looked up on ``sys.path``; when it is not found there, the working directory
    is added at the end of ``sys.path`` and the import tried again (a console script does not
    put it on the path, ``python -m`` does).
    """
    module_name, _, attribute = reference.partition(":")
    try:
        module = _import(module_name)
    except ModuleNotFoundError as exc:
        raise ValueError(f"{what} {reference!r}: {exc}") from None
    except Exception as exc:
        raise ValueError(
            f"{what} {reference!r}: importing {module_name} failed: {type(exc).__name__}: {exc}"
        ) from None
    found: Any = module
    for part in attribute.split("."):
        if not hasattr(found, part):
            raise ValueError(f"{what} {reference!r}: module {module_name} has no {attribute!r}")
        found = getattr(found, part)
    return found


def lookup(
    name: str,
    registry: Mapping[str, Any],
    referenced: dict[str, Any],
    convert: Callable[[str, Any], Any],
    what: str,
) -> Any:
    """``registry[name]``, else for ``package.module:Name`` the imported object converted by
    ``convert(name, obj)`` (cached in ``referenced``); ValueError listing the known names of
    ``what`` (``"policy"``, ``"router"``, ``"scaler"``) otherwise."""
    if name in registry:
        return registry[name]
    if is_reference(name):
        if name not in referenced:
            referenced[name] = convert(name, import_reference(name, what))
        return referenced[name]
    raise ValueError(
        f"unknown {what} {name!r}; known: {', '.join(sorted(registry))} "
        f"(or package.module:Name of a {what.capitalize()} class)"
    )


def _import(module_name: str) -> Any:
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        top = module_name.partition(".")[0]
        cwd = os.getcwd()
        if exc.name != top or cwd in sys.path or "" in sys.path:
            raise
        sys.path.append(cwd)
        return importlib.import_module(module_name)


@functools.cache
def _installed() -> Any:
    """Every installed entry point, read once (one scan of the installed distributions)."""
    return metadata.entry_points()


def _entry_points(group: str) -> list[metadata.EntryPoint]:
    found = _installed().select(group=group)
    seen: dict[str, metadata.EntryPoint] = {}
    for ep in found:
        # one entry per name: an editable install can show a distribution twice
        seen.setdefault(ep.name, ep)
    return [seen[n] for n in sorted(seen)]


def load_plugins(kind: str, register: Callable[[str, Any], None]) -> None:
    """Register every entry point of the group of ``kind`` (a key of :data:`GROUPS`) with
    ``register(name, loaded_object)``, once per process.

    A plugin whose import or registration raises is skipped with one :class:`PluginWarning`
    naming it, its group, its target and the error.
    """
    group = GROUPS[kind]
    if group in _loaded:
        return
    _loaded.add(group)
    for ep in _entry_points(group):
        try:
            register(ep.name, ep.load())
        except Exception as exc:
            warnings.warn(
                f"plugin {ep.name!r} ({group} = {ep.value}) is skipped: "
                f"{type(exc).__name__}: {exc}",
                PluginWarning,
                stacklevel=2,
            )
        else:
            _registered.setdefault(group, {})[ep.name] = ep.value
            _log.info("plugin %s loaded from %s (%s)", ep.name, ep.value, group)


def registered_plugins() -> dict[str, dict[str, str]]:
    """The plugins loaded so far: ``group -> {name: "module:attribute"}``, every group listed."""
    return {group: dict(_registered.get(group, {})) for group in GROUPS.values()}
