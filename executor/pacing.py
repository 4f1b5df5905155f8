"""Politeness inside one grid thread: the executor's spacing of its own requests to one host.

The manager spaces grid threads of a host (``concurrent_requests_per_host``, ``download_delay``,
the robots.txt ``Crawl-delay``, measured from the end of one thread to the start of the next:
:mod:`gridcrawl.manager.queue`). But one grid thread may make several requests to its host: the
robots.txt fetch before the page, and every hop of a redirect chain. :class:`HostPacer` spaces
those: before each request to a host it waits until the host's delay has passed since this
executor's previous request to that host *ended*, and the manager keeps the host's one slot for
the thread while it waits (a host with a delay has one grid thread in flight at a time). A
redirect hop *into* a host from another host's thread holds none of that host's slots, so the
pacer also lets one request at a time of this executor be in flight to a host with a delay
(:meth:`HostPacer.wait` to :meth:`HostPacer.done`): a page's own request and another thread's
hop into its host went out together, 0.002 s apart, to a host asking for 1 s. Together: no two
requests of an executor to a host closer than its delay, redirect hops and robots.txt fetches
included (across executors, a hop into a host is not spaced against that host's own threads).

Why wait here rather than send each redirect hop back to the manager as a new grid thread (as
Scrapy and Heritrix re-queue redirects): the robots.txt fetch before a page is made by the
executor anyway and can only be spaced here; a redirected URL keeps its page under the URL the
application asked for (one grid thread, one ``visited_url`` row, the chain in
``PageResult.redirects``) with the hop checks (scope, robots.txt, private addresses) in one place;
and a redirect costs no round trip through the manager and the application's database. The price
is a worker thread that sleeps through the delays of its chain (bounded: see ``max_wait`` of
:class:`gridcrawl.executor.fetch.Fetcher`).
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from typing import Callable

from gridcrawl.urls import url_host

__all__ = ["HostPacer"]


class HostPacer:
    """Per-host spacing of one executor's requests; thread-safe.

    Args:
        clock: monotonic time source, seconds.
        sleep: how to wait, seconds (tests pass a fake clock and sleep).
        max_hosts: hosts remembered; the least recently used is forgotten beyond that (memory
            stays bounded on a crawl of many hosts).
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep,
                 max_hosts: int = 10_000) -> None:
        self.clock = clock
        self.sleep = sleep
        self.max_hosts = int(max_hosts)
        self._lock = threading.Lock()
        # host -> [delay, last request end, requests in flight]
        self._hosts: OrderedDict[str, list[float]] = OrderedDict()

    def _entry(self, host: str) -> list[float]:
        entry = self._hosts.get(host)
        if entry is None:
            entry = self._hosts[host] = [0.0, float("-inf"), 0]
            while len(self._hosts) > self.max_hosts:
                self._hosts.popitem(last=False)
        else:
            self._hosts.move_to_end(host)
        return entry

    def set_delay(self, url: str, seconds: float | None) -> None:
        """The delay of ``url``'s host from now on: ``seconds`` between the end of one request
        and the start of the next (``None`` or <= 0: none)."""
        with self._lock:
            self._entry(url_host(url))[0] = max(0.0, float(seconds or 0.0))

    def delay(self, url: str) -> float:
        """The delay of ``url``'s host in seconds (0.0 when none was set)."""
        with self._lock:
            entry = self._hosts.get(url_host(url))
            return entry[0] if entry is not None else 0.0

    def pending(self, url: str) -> float:
        """Seconds until a request to ``url``'s host may start as far as is known now (0.0:
        now); while another request of this executor to a host with a delay is in flight, at
        least the delay."""
        with self._lock:
            delay, last, busy = self._entry(url_host(url))
            if delay > 0 and busy:
                return delay
            return max(0.0, last + delay - self.clock())

    def wait(self, url: str, limit: float = float("inf")) -> float:
        """Sleep until a request to ``url``'s host may start: its delay has passed since the
        last one ended and, for a host with a delay, none is in flight. The request counts as
        in flight until :meth:`done`, which every call that returns must be followed by.
        Returns the seconds slept; raises :class:`TimeoutError` (nothing in flight) when more
        than ``limit`` seconds would be slept."""
        host = url_host(url)
        slept = 0.0
        while True:
            with self._lock:
                entry = self._entry(host)
                delay, last, busy = entry
                now = self.clock()
                if delay <= 0 or (not busy and now >= last + delay):
                    entry[2] = busy + 1
                    return slept
                # another request in flight: look again soon (it ends within its deadline)
                pause = min(delay, 0.05) if busy else last + delay - now
            if slept + pause > limit + 1e-9:
                raise TimeoutError(f"{host} stays busy past {limit:g} s")
            self.sleep(pause)
            slept += pause

    def done(self, url: str) -> None:
        """A request to ``url``'s host has ended (response read, or failed): the host's delay
        counts from now, and the next request to it may go."""
        with self._lock:
            entry = self._entry(url_host(url))
            entry[1] = self.clock()
            entry[2] = max(0, entry[2] - 1)
