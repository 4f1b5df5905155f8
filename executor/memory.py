"""The executor's memory: glibc malloc settings that keep a many-threaded crawler's RSS bounded.

Parsing a large page builds a large lxml tree in C memory (the 2.5 MB ``contents.html`` of the
Python documentation takes about 28 MB). Freed, that memory stays in the process: glibc keeps it
in the arena of the thread that used it, and with one arena per thread (glibc's default, up to 8
per core) an executor with 16 threads ends up holding a peak's worth of memory per thread. Both
functions are no-ops away from glibc.
"""

from __future__ import annotations

import ctypes
import os

import psutil

#: Bodies at least this large (bytes) are followed by :func:`release_free_memory`.
TRIM_AFTER_BYTES = 256 * 1024
#: Resident memory (bytes) above which the executor gives free memory back after such a page.
TRIM_ABOVE_RSS = 96 * 1024 * 1024

_M_MXFAST = 1  # glibc malloc.h
_M_ARENA_MAX = -8

try:
    _libc = ctypes.CDLL("libc.so.6")
    _libc.malloc_trim  # noqa: B018 - glibc only
except (OSError, AttributeError):
    _libc = None


def limit_malloc_arenas(arenas: int = 2) -> bool:
    """Cap glibc's malloc arenas at ``arenas``; call before the worker threads start.

    This is ``M_ARENA_MAX`` (``mallopt(3)``, the ``MALLOC_ARENA_MAX`` environment variable) set
    from inside the process; an explicit ``MALLOC_ARENA_MAX`` in the environment wins. Measured
    on the Python documentation with 16 threads: 253 MB peak RSS with glibc's default, 153 MB
    with 2 arenas. Returns True when the cap was set (False off glibc).
    """
    if _libc is None or os.environ.get("MALLOC_ARENA_MAX"):
        return False
    return _libc.mallopt(_M_ARENA_MAX, arenas) == 1


def disable_fastbins() -> bool:
    """Turn glibc's fastbins off (``mallopt(M_MXFAST, 0)``); call before the worker threads start.

    An lxml tree is thousands of small blocks, which glibc parks in its fastbins when they are
    freed; every later request or free of a large block (a 64 KiB read, a page body, its
    decoded text) then merges them first (``malloc_consolidate``, 4 % of an executor's CPU in
    ``perf``). Without fastbins small blocks are merged as they are freed (the per-thread
    tcache still serves most small requests). ``glibc.malloc.mxfast`` in ``GLIBC_TUNABLES``
    wins. Returns True when fastbins were turned off (False off glibc)."""
    if _libc is None or "mxfast" in os.environ.get("GLIBC_TUNABLES", ""):
        return False
    return _libc.mallopt(_M_MXFAST, 0) == 1


def release_free_memory(above: int = 0) -> bool:
    """Give the free memory of glibc's heaps back to the system (``malloc_trim(0)``) when this
    process's resident memory is above ``above`` bytes (0: always).

    The executor calls it after a page of :data:`TRIM_AFTER_BYTES` or more, whose tree and
    copies were just freed, with ``above=TRIM_ABOVE_RSS``. The call itself is cheap, but the
    pages it gives back are faulted in again (and zeroed by the kernel) when the next large page
    is parsed: trimming after every large page cost the executors about 0.5 ms per Python docs
    page (some 6 ms per large page, 4 times the page faults), while the bound keeps their peak
    RSS where it was (82-105 MB). Returns True when memory was released (False when there was
    none, when the process holds no more than ``above``, or off glibc).
    """
    if _libc is None or (above and psutil.Process().memory_info().rss <= above):
        return False
    return _libc.malloc_trim(0) == 1
