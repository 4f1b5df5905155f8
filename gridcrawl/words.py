"""Counts as a person writes them (``"1 page"``, ``"2 pages"``), for the messages and log lines
of every program: no dependency, so the manager's core, its recorder and the executor use it as
the command-line programs do."""

from __future__ import annotations


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """``n`` and ``noun`` as a person writes them: ``"1 page"``, ``"2 pages"``, ``"1,024 URLs"``
    (``plural``: the plural when it is not ``noun + "s"``)."""
    return f"{n:,} {noun if n == 1 else plural or noun + 's'}"
