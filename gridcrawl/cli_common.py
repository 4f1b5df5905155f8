"""What the three programs' command lines share: logging set-up, user errors, signals.

A user error (bad URL, unreachable manager, invalid database URL) is printed as one line on
stderr and exits with status 2 — never a traceback.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from typing import NoReturn

import typer

USER_ERROR = 2


def fail(message: str) -> NoReturn:
    """Print ``error: message`` on stderr and exit with status 2."""
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(USER_ERROR)


def setup_logging(level: str = "INFO", log_file: str | None = None) -> None:
    """Configure the standard logging module: ``level`` name, to stderr or ``log_file``."""
    numeric = logging.getLevelName(level.upper())
    if not isinstance(numeric, int):
        fail(f"unknown log level {level!r} (use DEBUG, INFO, WARNING or ERROR)")
    handler = logging.FileHandler(log_file) if log_file else logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(numeric)


def stop_on_signals() -> threading.Event:
    """An event set by the first SIGINT/SIGTERM (graceful stop); a second signal exits at once."""
    stop = threading.Event()

    def handler(signum, _frame):
        if stop.is_set():
            os._exit(130)
        logging.getLogger("gridcrawl").info("signal %d: stopping (again to exit at once)", signum)
        stop.set()

    signal.signal(signal.SIGINT, handler)
    if hasattr(signal, "SIGTERM"):
        signal.signal(signal.SIGTERM, handler)
    return stop
