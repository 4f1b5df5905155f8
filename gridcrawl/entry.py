"""The programs' entry points: ``[project.scripts]`` in pyproject.toml and the ``__main__``
modules (``python -m gridcrawl``, ``python -m gridcrawl.manager`` ...).

Each turns Python's cyclic garbage collector off, imports its program and runs it; the program
turns the collector back on, tuned, once its modules are imported
(:func:`gridcrawl.config.tune_gc`). Importing allocates a great many objects and almost no
garbage cycles, so the collections it triggers find nothing: with the collector on, importing
what ``gridcrawl run`` needs cost about 270 ms of CPU instead of 230 (issue 23). This module
imports nothing else (but the interpreter's built-in ``os``, ``signal`` and ``sys``), so that
nothing is imported before the collector is off.

It also owns how a program ends on a signal (:func:`exit_by_signal`).
"""

import gc
import os
import signal
import sys
from importlib import import_module


def how_it_ended(returncode: int) -> str:
    """How a child process ended, in words, from its ``subprocess`` return code (negative: the
    signal that ended it): ``"exited with status 2"``, ``"was killed by signal 9 (SIGKILL)"``."""
    if returncode >= 0:
        return f"exited with status {returncode}"
    try:
        name = f" ({signal.Signals(-returncode).name})"
    except ValueError:
        name = ""
    return f"was killed by signal {-returncode}{name}"


def exit_by_signal(signum: int, *, flush: bool = True) -> None:
    """End this process by signal ``signum`` (``signal.SIGINT``, ``signal.SIGTERM`` ...) with the
    signal's default action, after flushing standard output, standard error and the log handlers
    (unless ``flush`` is False: inside a signal handler, where the interrupted code may be
    writing to them). Does not return.

    A program that takes a signal to stop gracefully and then exits normally tells its caller
    that it finished: bash, running a script, then goes on to the script's next command
    (bash(1), "SIGNALS": a command that handles SIGINT and exits normally is taken to have used
    it for itself). Ending by the signal itself gives the shell status 128 + ``signum`` (130
    for Ctrl-C, 143 for SIGTERM; ``subprocess`` reports ``-signum``) and stops a script's loop
    too — what CPython itself does for an unhandled ``KeyboardInterrupt`` since 3.8, and the
    convention described in "Proper handling of SIGINT/SIGQUIT" (M. Cracauer). Where the signal
    does not end the process (Windows), exits with status 128 + ``signum``.
    """
    if flush:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError, AttributeError):  # closed, a broken pipe, or none
                pass
        if "logging" in sys.modules:
            sys.modules["logging"].shutdown()
    try:
        signal.signal(signum, signal.SIG_DFL)
        signal.raise_signal(signum)  # to this thread: taken before it returns
    except (OSError, ValueError):  # not the main thread, or no such signal here
        pass
    os._exit(128 + signum)


def _run(module: str) -> None:
    gc.disable()  # back on in gridcrawl.config.tune_gc
    try:
        import_module(module).main()
    except KeyboardInterrupt:
        # Ctrl-C while the program's modules load, before its command line is read and the
        # programs take SIGINT themselves: ended by it, without a traceback
        exit_by_signal(signal.SIGINT)
    except SystemExit as exc:
        if exc.code == 128 + signal.SIGINT:
            # typer turns a KeyboardInterrupt inside a command (before a crawl takes SIGINT
            # itself: gridcrawl fetch, export ...) into exit status 130, which a shell's loop
            # reads as a normal end: ended by the signal instead
            exit_by_signal(signal.SIGINT)
        raise


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
