"""Extractor plugins installed on an executor, and the capabilities they give it.

A plugin is a Python function ``extract(page) -> Iterable[dict]`` in a package installed on the
executor and registered under the entry-point group :data:`ENTRY_POINT_GROUP`
(``gridcrawl.extractors``), e.g. in the package's ``pyproject.toml``::

    [project.entry-points."gridcrawl.extractors"]
    shop = "myshop.extract:extract"

No code travels over the grid: an executor runs only the plugins installed on it. It declares
them when it registers, as the capabilities ``"plugin:NAME"`` and ``"plugin:NAME@VERSION"``
(VERSION: the installed distribution's version), and the manager dispatches a thread whose item
spec names a plugin only to executors that have it (capability-based dispatch,
:mod:`gridcrawl.manager.core`).
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import re
import threading
from dataclasses import dataclass
from typing import Callable

ENTRY_POINT_GROUP = "gridcrawl.extractors"
PREFIX = "plugin:"
#: How an item spec names a plugin, ``NAME`` or ``NAME@VERSION``: an installed plugin whose entry
#: point's name or distribution's version does not fit is not offered (the manager refuses an
#: executor declaring a capability with a space in it, and no spec could name it).
PLUGIN_REFERENCE = re.compile(r"^[A-Za-z0-9_.-]{1,64}(@[A-Za-z0-9_.+!-]{1,32})?$")
#: Seconds a plugin's import may take when an executor (or ``gridcrawl run``, ``fetch``) loads it:
#: one whose module waits for ever at import (a server it connects to, a lock) is not offered,
#: instead of the executor never registering.
IMPORT_DEADLINE = 60.0


@dataclass(frozen=True)
class Plugin:
    """One installed extractor plugin: its ``name`` (the entry point's), the ``version`` of the
    distribution that provides it (``"0"`` when unknown) and the entry point to load;
    ``shadowed``: the other installed distributions that register a plugin of the same name,
    passed over (``"myshop2 2.0 (myshop2.extract:extract)"``; :func:`shadowing` says so)."""

    name: str
    version: str
    entry_point: importlib.metadata.EntryPoint
    shadowed: tuple[str, ...] = ()

    def load(self) -> Callable:
        """The plugin's ``extract`` function (imports its module; raises what the import raises)."""
        return self.entry_point.load()


def installed_plugins() -> dict[str, Plugin]:
    """Every plugin registered under :data:`ENTRY_POINT_GROUP` in this Python environment (and
    in entry-point metadata directories on ``sys.path``), by name. Nothing is imported. When two
    distributions register one name, the first on ``sys.path`` is the plugin and the other is in
    its ``shadowed`` (:func:`shadowing`)."""
    found: dict[str, Plugin] = {}
    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        dist = getattr(ep, "dist", None)
        version = (dist.version if dist is not None else None) or "0"
        if ep.name in found:
            other = f"{dist.name if dist is not None else '?'} {version} ({ep.value})"
            found[ep.name] = dataclasses.replace(found[ep.name], shadowed=found[ep.name].shadowed + (other,))
            continue
        found[ep.name] = Plugin(ep.name, version, ep)
    return found


def shadowing(plugins: dict[str, Plugin]) -> list[str]:
    """One line for each plugin of ``plugins`` whose name another installed distribution
    registers too (``Plugin.shadowed``): which one runs and which are ignored, e.g. ``plugin shop
    is registered by 2 installed packages: myshop 1.2 (myshop.extract:extract) runs, myshop2 2.0
    (myshop2.extract:extract) is ignored (uninstall one, or rename its entry point)``."""
    lines = []
    for plugin in sorted(plugins.values(), key=lambda p: p.name):
        if plugin.shadowed:
            dist = getattr(plugin.entry_point, "dist", None)
            first = f"{dist.name if dist is not None else '?'} {plugin.version} ({plugin.entry_point.value})"
            lines.append(f"plugin {plugin.name} is registered by {len(plugin.shadowed) + 1} installed packages: "
                         f"{first} runs, {', '.join(plugin.shadowed)} "
                         f"{'is' if len(plugin.shadowed) == 1 else 'are'} ignored "
                         f"(uninstall one, or rename its entry point)")
    return lines


def _load(plugin: Plugin, deadline: float):
    """``plugin.load()`` on a helper thread, waited for ``deadline`` seconds (Python cannot stop
    an import: one past its deadline is left running, as a daemon thread). Raises
    ``TimeoutError`` then, else what the import raised."""
    box: dict = {}

    def work() -> None:
        try:
            box["function"] = plugin.load()
        except BaseException as exc:  # noqa: BLE001 - a plugin's import may raise anything, SystemExit too
            box["error"] = exc

    worker = threading.Thread(target=work, name=f"import plugin {plugin.name}", daemon=True)
    worker.start()
    worker.join(deadline)
    if worker.is_alive():
        raise TimeoutError(f"its import did not finish within {deadline:g} s")
    if "error" in box:
        raise box["error"]
    return box["function"]


def loadable(plugins: dict[str, Plugin], deadline: float | None = None) -> tuple[dict[str, Plugin], list[str]]:
    """Of ``plugins``, those whose entry point imports and names something callable, and one
    line for each other (``plugin NAME cannot load: ImportError: ...``): an executor offers
    only the first as capabilities (one whose install is broken took the threads a working one
    would have run, and failed every page's items). Imports every plugin's module, on a helper
    thread, each within ``deadline`` seconds (default :data:`IMPORT_DEADLINE`; past it:
    ``plugin NAME cannot load: TimeoutError: its import did not finish within 60 s``). One
    whose name and version are no :data:`PLUGIN_REFERENCE` (a space in its entry point's name)
    is not imported: no spec can name it, and the manager would refuse the executor offering it."""
    deadline = IMPORT_DEADLINE if deadline is None else deadline
    ok: dict[str, Plugin] = {}
    problems: list[str] = []
    for name, plugin in plugins.items():
        if not PLUGIN_REFERENCE.match(f"{name}@{plugin.version}"):
            problems.append(f"plugin {name!r} ({plugin.entry_point.value}, version {plugin.version!r}) cannot be "
                            f"offered: a plugin's entry-point name is 1 to 64 letters, digits, _ . - and its "
                            f"version 1 to 32 of those or + !; rename it in its package's entry points"[:500])
            continue
        try:
            function = _load(plugin, deadline)
        except BaseException as exc:  # noqa: BLE001 - a plugin's import may raise anything, SystemExit too
            problems.append(f"plugin {name} cannot load: {type(exc).__name__}: {exc}"[:500])
            continue
        if not callable(function):
            kind = type(function).__name__
            problems.append(f"plugin {name} cannot load: its entry point names {'an' if kind[:1] in 'aeiou' else 'a'} "
                            f"{kind}, not a function")
            continue
        ok[name] = plugin
    return ok, problems


def capabilities(plugins: dict[str, Plugin]) -> list[str]:
    """The capabilities ``plugins`` give an executor: ``plugin:NAME`` and ``plugin:NAME@VERSION``
    for each, sorted."""
    return sorted(c for plugin in plugins.values()
                  for c in (f"{PREFIX}{plugin.name}", f"{PREFIX}{plugin.name}@{plugin.version}"))


def need(reference: str) -> str:
    """The capability a thread needs to run plugin ``reference`` (``NAME`` or ``NAME@VERSION``)."""
    return PREFIX + reference


def missing(reference: str, plugins: dict[str, Plugin], where: str = "") -> str | None:
    """None when ``plugins`` (:func:`installed_plugins`) provide plugin ``reference`` (``NAME``
    or ``NAME@VERSION``); else why not, in words naming what is installed, ``where`` after "not
    installed": ``"plugin 'shop@2.0' is not installed here (shop 1.2 is)"``."""
    name, version = split_reference(reference)
    plugin = plugins.get(name)
    if plugin is not None and (version is None or plugin.version == version):
        return None
    if plugin is not None:
        return f"plugin {reference!r} is not installed{where} ({plugin.name} {plugin.version} is)"
    others = ", ".join(f"{p.name} {p.version}" for p in sorted(plugins.values(), key=lambda p: p.name))
    return f"plugin {reference!r} is not installed{where} (installed: {others or 'none'})"


def how_to_provide(need: str) -> str:
    """What gives an executor capability ``need`` (``render`` or ``plugin:REFERENCE``), in words
    for a user whose grid threads wait for one."""
    if need == "render":
        return "start gridcrawl-executor --render (pip install 'gridcrawl[render]' and Chromium)"
    if need.startswith(PREFIX):
        name, version = split_reference(need[len(PREFIX):])
        return (f"install the package of extractor plugin {name!r}{f' version {version}' if version else ''} "
                f"where gridcrawl-executor runs, then restart it")
    return f"start an executor that has {need!r}"


def split_reference(reference: str) -> tuple[str, str | None]:
    """``"NAME@VERSION"`` -> ``("NAME", "VERSION")``; ``"NAME"`` -> ``("NAME", None)``."""
    name, _, version = reference.partition("@")
    return name, version or None
