"""The programs' entry points: ``[project.scripts]`` in pyproject.toml and the ``__main__``
modules (``python -m gridcrawl``, ``python -m gridcrawl.manager`` ...).

Each turns Python's cyclic garbage collector off, imports its program and runs it; the program
turns the collector back on, tuned, once its modules are imported
(:func:`gridcrawl.config.tune_gc`). Importing allocates a great many objects and almost no
garbage cycles, so the collections it triggers find nothing: with the collector on, importing
what ``gridcrawl run`` needs cost about 270 ms of CPU instead of 230 (issue 23). This module
imports nothing else (but the interpreter's built-in ``os``, ``signal`` and ``sys``), so that
nothing is imported before the collector is off.

It also owns how a program ends on a signal (:func:`exit_by_signal`), and on a closed pipe
(:func:`end_by_sigpipe`: ``gridcrawl fetch URL | head -1``).
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


def end_by_sigpipe() -> None:
    """End this process as a Unix tool ends when what reads its output has gone
    (``gridcrawl run … | head -3``): by SIGPIPE, silently (the shell's status 141), its standard
    output left unflushed; standard error and the log handlers are flushed when they still can
    be. Where SIGPIPE does not exist (Windows), exits with status 141. Does not return.

    Python ignores SIGPIPE (the programs' sockets need that: a peer's closed connection is an
    error, not the end of the process), so a write to a closed pipe raises ``BrokenPipeError``;
    typer then exited with status 1, which the README gives to "every page of the run failed",
    and said nothing (:func:`_output_gone`)."""
    for flush in (lambda: sys.stderr.flush(),
                  lambda: "logging" in sys.modules and sys.modules["logging"].shutdown()):
        try:
            flush()
        except (OSError, ValueError, AttributeError):  # stderr is the closed pipe too, or none
            pass
    signum = getattr(signal, "SIGPIPE", None)
    if signum is None:
        os._exit(141)
    exit_by_signal(signum, flush=False)


def _file_of(fd: int) -> tuple | None:
    """What file descriptor ``fd`` is open on, as ``(st_dev, st_ino)`` (None: not open)."""
    try:
        st = os.fstat(fd)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _output_gone(stdout_was: tuple | None) -> bool:
    """True when a write to standard output (or error) met a closed pipe inside a command and
    the command exited with status 1 for it: typer (as click) then put a ``PacifyFlushWrapper``
    in place of both; rich (every table and help page) put ``os.devnull`` on file descriptor 1,
    which was open on ``stdout_was`` before."""
    if any("PacifyFlushWrapper" in type(stream).__name__ for stream in (sys.stdout, sys.stderr)):
        return True
    try:
        null = os.stat(os.devnull)
    except OSError:
        return False
    return stdout_was != (null.st_dev, null.st_ino) == _file_of(1)


def _run(module: str) -> None:
    gc.disable()  # back on in gridcrawl.config.tune_gc
    stdout_was = _file_of(1)
    try:
        import_module(module).main()
    except KeyboardInterrupt:
        # Ctrl-C while the program's modules load, before its command line is read and the
        # programs take SIGINT themselves: ended by it, without a traceback
        exit_by_signal(signal.SIGINT)
    except BrokenPipeError:  # a closed pipe met outside typer's own handling
        end_by_sigpipe()
    except SystemExit as exc:
        if exc.code == 128 + signal.SIGINT:
            # typer turns a KeyboardInterrupt inside a command (before a crawl takes SIGINT
            # itself: gridcrawl fetch, export ...) into exit status 130, which a shell's loop
            # reads as a normal end: ended by the signal instead
            exit_by_signal(signal.SIGINT)
        if exc.code == 1 and _output_gone(stdout_was):
            end_by_sigpipe()
        try:  # what is still buffered: a closed pipe found now, not at exit ("Exception ignored", status 120)
            sys.stdout.flush()
        except BrokenPipeError:
            end_by_sigpipe()
        except (OSError, ValueError, AttributeError):
            pass
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
