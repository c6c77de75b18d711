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
from types import TracebackType
from typing import Any

__all__ = [
    "GROUPS",
    "PluginFailure",
    "PluginWarning",
    "TRACEBACK_ENV",
    "accepted_keywords",
    "description_of",
    "import_reference",
    "is_reference",
    "load_plugins",
    "lookup",
    "plugin_failure",
    "registered_plugins",
    "traceback_wanted",
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


class PluginFailure(Exception):
    """An exception raised inside a plugin's code (a policy, router or scaler from outside
    slolab, during a simulation), re-labelled: its message names the plugin, the exception, the file and
    line of the plugin's frame and, in a simulation, the simulated time and server. The
    original exception is its ``__cause__`` (its traceback is the one to read:
    ``slolab --traceback`` or ``SLOLAB_TRACEBACK=1`` prints it)."""


#: Environment variable that makes the command line print a plugin failure's whole traceback
#: (as ``slolab --traceback``) when set to anything but ``""`` or ``0``.
TRACEBACK_ENV = "SLOLAB_TRACEBACK"

_PACKAGE_DIR = os.path.realpath(os.path.dirname(__file__)) + os.sep


def traceback_wanted() -> bool:
    """True when :data:`TRACEBACK_ENV` asks for whole tracebacks of plugin failures."""
    return os.environ.get(TRACEBACK_ENV, "") not in ("", "0")


@functools.cache
def _in_package(filename: str) -> bool:
    """True for a module of slolab itself: a top-level module of the package, or one inside
    a subpackage (a folder beside them without ``__init__.py``, tests/ or examples/, is not
    slolab's)."""
    path = os.path.realpath(filename)
    if not path.startswith(_PACKAGE_DIR):
        return False
    top, sep, _ = path[len(_PACKAGE_DIR) :].partition(os.sep)
    return not sep or os.path.isfile(os.path.join(_PACKAGE_DIR, top, "__init__.py"))


def _is_own_exception(exc: BaseException) -> bool:
    return any(t.__module__.partition(".")[0] == "slolab" for t in type(exc).__mro__)


def plugin_failure(
    exc: Exception, plugins: Mapping[str, Any], where: str = ""
) -> PluginFailure | None:
    """``exc`` re-labelled as a :class:`PluginFailure` when it came from a plugin, else None.

    ``exc``'s traceback must start in slolab (it is read where slolab caught it). The plugin's
    frame is the first frame of the traceback outside the slolab package; ``exc`` is a plugin's
    when its type is not slolab's own (a :class:`slolab.sim.PolicyError` keeps its form) and
    that frame is a method of one of ``plugins`` (``kind -> object``, e.g.
    ``{"policy": policy}``) or one of them if it is a function (an SLO scheme). An error of a library that slolab's own code called (NumPy's,
    say) is not re-labelled. ``where`` (say ``"t=1.5 s on server 0"``) ends the message.
    """
    if _is_own_exception(exc):
        return None
    tb: TracebackType | None = exc.__traceback__
    while tb is not None and _in_package(tb.tb_frame.f_code.co_filename):
        tb = tb.tb_next
    if tb is None:
        return None
    frame = tb.tb_frame
    owner = frame.f_locals.get("self")
    found = (
        (k, obj)
        for k, obj in plugins.items()
        if obj is not None and (obj is owner or getattr(obj, "__code__", None) is frame.f_code)
    )
    kind, obj = next(found, (None, None))
    if kind is None or obj is None:
        return None
    made: Any = obj if obj is not owner else type(owner)
    name = f"{kind} {made.__module__}:{made.__qualname__}"
    origin = tb
    while origin.tb_next is not None:
        origin = origin.tb_next
    at = f"{frame.f_code.co_filename}:{tb.tb_lineno} in {frame.f_code.co_name}"
    if origin is not tb and not _in_package(origin.tb_frame.f_code.co_filename):
        at += f" (raised at {origin.tb_frame.f_code.co_filename}:{origin.tb_lineno})"
    text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    where = f", {where}" if where else ""
    return PluginFailure(f"{name} raised {text} at {at}{where}")


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
