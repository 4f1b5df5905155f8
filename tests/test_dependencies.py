"""Every third-party module the programs import is a declared dependency of pyproject.toml.

The test extras install more than a user gets with ``pip install gridcrawl``, so a module that
only the test extras bring (msgpack was one: the manager's journal imported it and a plain
install could not start a manager) would pass every other test. This reads every ``import`` of
the shipped packages (``gridcrawl``, ``manager``, ``executor``, ``client``) with :mod:`ast` and
maps each top-level module to the distribution that provides it (the installed metadata):

* an import at module level must come from ``[project] dependencies`` or what they require
  (urllib3 comes with requests, jmespath with parsel);
* an import inside a function may also come from an optional extra (``render``, ``spark``,
  ``report``, the database drivers), which the code imports only where it is used.
"""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("gridcrawl", "manager", "executor", "client")
OWN = {"gridcrawl", "manager", "executor", "client"}


def _name(requirement: str) -> str:
    """The normalised distribution name of a requirement string (``"psycopg[binary]>=3.1"`` → ``psycopg``)."""
    return re.split(r"[\[<>=!~;\s]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def _with_requirements(names: set[str]) -> set[str]:
    """``names`` and every distribution they require, transitively (what ``pip install`` brings;
    requirements of an extra left out)."""
    todo, seen = list(names), set(names)
    while todo:
        try:
            requires = metadata.requires(todo.pop()) or []
        except metadata.PackageNotFoundError:
            continue
        for requirement in requires:
            name = _name(requirement)
            if "extra ==" not in requirement and name not in seen:
                seen.add(name)
                todo.append(name)
    return seen


def _declared() -> tuple[set[str], set[str]]:
    """(what a plain install brings, what the optional extras other than ``test`` add)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    runtime = _with_requirements({_name(r) for r in project["dependencies"]})
    extras = _with_requirements({_name(r) for name, reqs in project["optional-dependencies"].items()
                                 if name != "test" for r in reqs})
    return runtime, extras


def _imports() -> list[tuple[str, str, bool]]:
    """(file, top-level module, at module level?) for every absolute import of the packages."""
    found = []
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
            nested = {id(n) for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
                      for n in ast.walk(f)}
            guarded = {id(n) for t in ast.walk(tree) if isinstance(t, ast.If) and "TYPE_CHECKING" in ast.unparse(t.test)
                       for n in ast.walk(t)}
            for node in ast.walk(tree):
                if id(node) in guarded:
                    continue
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                else:
                    continue
                for name in names:
                    found.append((str(path.relative_to(ROOT)), name.split(".")[0], id(node) not in nested))
    return found


def test_every_imported_module_is_a_declared_dependency():
    runtime, extras = _declared()
    providers = metadata.packages_distributions()
    problems = []
    for where, module, top_level in _imports():
        if module in OWN or module in sys.stdlib_module_names or module == "__future__":
            continue
        dists = {d.lower().replace("_", "-") for d in providers.get(module, [])}
        if not dists:
            problems.append(f"{where}: {module} is not installed here (no distribution provides it)")
        elif not dists & runtime and (top_level or not dists & extras):
            kind = "a runtime dependency" if top_level else "a runtime dependency or an optional extra"
            problems.append(f"{where}: {module} (from {', '.join(sorted(dists))}) is not {kind}")
    assert not problems, "\n".join(sorted(set(problems)))


def test_the_check_sees_the_imports_it_judges():
    # the scan finds module-level and function-level imports alike (else the test above passes vacuously)
    seen = {(m, top) for _, m, top in _imports()}
    assert ("zmq", True) in seen and ("sqlalchemy", True) in seen and ("msgpack", True) in seen
    assert any(m == "playwright" and not top for m, top in seen)  # imported only where it renders
