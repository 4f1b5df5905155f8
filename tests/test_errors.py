"""The one error tree (:mod:`gridcrawl.errors`): every class derives from ``GridcrawlError``,
keeps the builtin base its callers catch, is re-exported where it used to live, and the tree in
the module docstring names exactly the classes there are."""

from __future__ import annotations

import importlib
import re

import pytest

from gridcrawl import errors

#: where each class lived before the tree, and its builtin base
FORMER = {
    "IllegalTransition": ("gridcrawl.states", RuntimeError), "ProtocolError": ("gridcrawl.protocol", ValueError),
    "ReportError": ("gridcrawl.report", RuntimeError), "AuthError": ("gridcrawl.auth", ValueError),
    "ConfigError": ("gridcrawl.config", ValueError), "OntologyError": ("gridcrawl.focus", ValueError),
    "SparkUnavailable": ("gridcrawl.spark", RuntimeError), "ExportError": ("gridcrawl.export", RuntimeError),
    "RuleError": ("gridcrawl.rules", ValueError), "SchemaTooNew": ("gridcrawl.migrations", RuntimeError),
    "UnsupportedDialect": ("gridcrawl.views", ValueError), "DatabaseUnavailable": ("gridcrawl.db", RuntimeError),
    "RDFError": ("gridcrawl.semantic", ValueError), "RDFLimit": ("gridcrawl.semantic", ValueError),
    "InvalidURL": ("gridcrawl.urls", ValueError), "ItemSpecError": ("gridcrawl.items", ValueError),
    "KeyFileError": ("gridcrawl.keys", ValueError), "ControlError": ("gridcrawl.manager.core", ValueError),
    "DashboardError": ("gridcrawl.manager.dashboard", ValueError),
    "LeaseHeld": ("gridcrawl.manager.lease", RuntimeError), "LeaseLost": ("gridcrawl.manager.lease", RuntimeError),
    "RenderUnavailable": ("gridcrawl.executor.render", RuntimeError),
    "SitemapError": ("gridcrawl.executor.sitemap", ValueError),
    "ManagerUnreachable": ("gridcrawl.executor.agent", RuntimeError), "Refused": ("gridcrawl.client.app", RuntimeError),
    "CrawlDatabaseError": ("gridcrawl.client.app", RuntimeError),
    "ItemExportError": ("gridcrawl.client.items", ValueError),
}


@pytest.mark.parametrize("name", sorted(FORMER))
def test_every_error_is_a_gridcrawl_error_with_its_old_builtin_base_and_old_home(name):
    module, base = FORMER[name]
    cls = getattr(errors, name)
    assert issubclass(cls, errors.GridcrawlError) and issubclass(cls, base)
    assert getattr(importlib.import_module(module), name) is cls


def test_the_manager_link_errors_are_defined_once():
    from gridcrawl.client import app
    from gridcrawl.executor import agent
    assert agent.ManagerUnreachable is app.ManagerUnreachable is errors.ManagerUnreachable
    assert agent.Refused is app.Refused is errors.Refused


def test_the_docstring_tree_names_every_class_once():
    named = re.findall(r"^\s+[*x+-] (\w+)", errors.__doc__, re.M)
    classes = {n for n in errors.__all__ if isinstance(getattr(errors, n), type)}
    assert sorted(named) == sorted(classes) == sorted(errors.__all__)
    assert len(named) == len(set(named))


def test_messages_are_unchanged():
    exc = errors.InvalidURL("ftp://x/", "scheme must be http or https")
    assert str(exc) == "invalid URL 'ftp://x/': scheme must be http or https" and exc.url == "ftp://x/"
    assert str(errors.ConfigError("bad file")) == "bad file"
