"""The programs' entry points: ``[project.scripts]`` in pyproject.toml and the ``__main__``
modules (``python -m gridcrawl``, ``python -m gridcrawl.manager`` ...).

Each turns Python's cyclic garbage collector off, imports its program and runs it; the program
turns the collector back on, tuned, once its modules are imported
(:func:`gridcrawl.config.tune_gc`). Importing allocates a great many objects and almost no
garbage cycles, so the collections it triggers find nothing: with the collector on, importing
what ``gridcrawl run`` needs cost about 270 ms of CPU instead of 230 (issue 23). This module
imports nothing else, so that nothing is imported before the collector is off.
"""

import gc
from importlib import import_module


def _run(module: str) -> None:
    gc.disable()  # back on in gridcrawl.config.tune_gc
    try:
        import_module(module).main()
    except KeyboardInterrupt:
        # Ctrl-C while the program's modules load, before its command line is read (later, typer
        # turns it into exit status 130 and the programs take SIGINT themselves): the same status,
        # without a traceback
        raise SystemExit(130) from None


def gridcrawl() -> None:
    """The ``gridcrawl`` command (``run``, ``report``, ``db`` ...): :func:`gridcrawl.cli.main`."""
    _run("gridcrawl.cli")


def manager() -> None:
    """``gridcrawl-manager``: :func:`gridcrawl.manager.cli.main`."""
    _run("gridcrawl.manager.cli")


def executor() -> None:
    """``gridcrawl-executor``: :func:`gridcrawl.executor.cli.main`."""
    _run("gridcrawl.executor.cli")


def client() -> None:
    """``gridcrawl-client``: :func:`gridcrawl.client.cli.main`."""
    _run("gridcrawl.client.cli")
