"""The executor process: registers with the manager, runs grid threads on N worker threads, and
keeps the connection alive (heartbeats, reconnect with exponential back-off).

Threads of the process:

* the **main loop** owns the DEALER socket to the manager. It receives ``assign``/``cancel``,
  puts jobs on a local queue (the manager sends up to ``threads + prefetch``, MCMTCrawler's local
  buffer, so no worker waits on the manager between two pages), sends heartbeats with the CPU
  figures, and forwards what the workers produce;
* **worker threads** take jobs from the queue, run :func:`gridcrawl.executor.page.visit`, and
  push the encoded ``started``/``result`` messages to the main loop over an inproc PUSH socket
  (ZeroMQ sockets are not shared between threads).
"""

from __future__ import annotations

import getpass
import logging
import os
import platform
import queue
import socket
import threading
import time

import psutil
import zmq

from gridcrawl import protocol as p
from gridcrawl.settings import Settings
from gridcrawl.transport import make_socket, send
from gridcrawl.executor.fetch import Fetcher
from gridcrawl.executor.page import visit

log = logging.getLogger("gridcrawl.executor")


class ManagerUnreachable(RuntimeError):
    """The manager did not answer the first registration within ``connect_timeout`` seconds."""


class Refused(RuntimeError):
    """The manager refused this executor (bad credentials, permissions)."""


class Figures:
    """Alchemi's executor figures from psutil: CPU %, available CPU %, CPU-seconds, memory."""

    def __init__(self) -> None:
        self.process = psutil.Process()
        self.process.cpu_percent(None)
        psutil.cpu_percent(None)
        self.pages = 0
        self._last_pages = 0
        self._last_time = time.monotonic()

    @staticmethod
    def static() -> dict:
        """Fixed figures for registration: cpu_max (MHz × cores), num_cpus, mem_max (bytes)."""
        cpus = psutil.cpu_count() or 1
        try:
            freq = psutil.cpu_freq()
            mhz = (freq.max or freq.current) if freq else 0.0
        except Exception:  # not available on every platform
            mhz = 0.0
        return {"cpu_max": float(mhz * cpus), "num_cpus": cpus, "mem_max": psutil.virtual_memory().total}

    def sample(self, running: int) -> dict:
        """Figures for a heartbeat: cpu_usage (% of one machine, this process), cpu_avail (% of
        the machine idle), cpu_totalusage (CPU-seconds), mem_usage (bytes RSS), running,
        pages_per_second (since the previous sample)."""
        now = time.monotonic()
        times = self.process.cpu_times()
        elapsed = max(1e-6, now - self._last_time)
        rate = (self.pages - self._last_pages) / elapsed
        self._last_pages, self._last_time = self.pages, now
        cpus = psutil.cpu_count() or 1
        return {"cpu_usage": self.process.cpu_percent(None) / cpus,
                "cpu_avail": max(0.0, 100.0 - psutil.cpu_percent(None)),
                "cpu_totalusage": times.user + times.system,
                "mem_usage": self.process.memory_info().rss,
                "running": running, "pages_per_second": rate}


class ExecutorAgent:
    """One executor: ``ExecutorAgent(settings, "tcp://host:9000").run(stop)``.

    ``name`` defaults to ``host:pid``. :meth:`run` raises :class:`ManagerUnreachable` if the
    first registration gets no answer within ``settings.connect_timeout`` seconds and
    :class:`Refused` if the manager refuses it; afterwards a lost manager is reconnected with
    back-off from ``reconnect_initial`` to ``reconnect_max`` seconds, forever.
    """

    def __init__(self, settings: Settings, manager: str, *, name: str | None = None,
                 dedicated: bool = True, password: str | None = None) -> None:
        self.settings = settings
        self.manager = manager
        self.name = name or f"{socket.gethostname()}:{os.getpid()}"
        self.dedicated = dedicated
        self.password = password
        self.context = zmq.Context()
        self.jobs: queue.Queue = queue.Queue()
        self.cancelled: set[int] = set()
        self.running = 0
        self._running_lock = threading.Lock()
        self.executor_id: str | None = None
        self.figures = Figures()
        self.fetcher = Fetcher(user_agent=settings.user_agent, connect_timeout=settings.fetch_connect_timeout,
                               read_timeout=settings.fetch_read_timeout, deadline=settings.download_timeout,
                               max_body_bytes=settings.max_body_bytes, max_redirects=settings.max_redirects,
                               keep_non_html=settings.keep_non_html)
        self._results_endpoint = f"inproc://results-{id(self)}"
        self.results = self.context.socket(zmq.PULL)
        self.results.bind(self._results_endpoint)
        self.dealer: zmq.Socket | None = None
        self.workers: list[threading.Thread] = []

    # ------------------------------------------------------------------ workers

    def _worker(self) -> None:
        push = self.context.socket(zmq.PUSH)
        push.setsockopt(zmq.LINGER, 0)
        push.connect(self._results_endpoint)
        try:
            while True:
                job = self.jobs.get()
                if job is None:
                    return
                if job.attempt_id in self.cancelled:
                    self.cancelled.discard(job.attempt_id)
                    continue
                with self._running_lock:
                    self.running += 1
                try:
                    push.send_multipart(p.encode(p.Started(job.attempt_id)))
                    try:
                        page = visit(self.fetcher, job.url, store_content=self.settings.store_content,
                                     instruction=job.instruction)
                    except Exception as exc:  # a bug must cost one page, not the executor
                        log.exception("thread %d (%s) crashed", job.thread_id, job.url)
                        page = p.PageResult(url=job.url, error_kind="crash", error=f"{type(exc).__name__}: {exc}")
                    push.send_multipart(p.encode(p.Result(job.attempt_id, page)))
                    self.figures.pages += 1
                finally:
                    with self._running_lock:
                        self.running -= 1
        finally:
            push.close()

    # ------------------------------------------------------------------ connection

    def _connect(self) -> None:
        if self.dealer is not None:
            self.dealer.close(linger=0)
        self.dealer = make_socket(self.context, zmq.DEALER, self.settings)
        self.dealer.connect(self.manager)
        static = Figures.static()
        send(self.dealer, p.Register(
            name=self.name, host=socket.gethostname(), user=getpass.getuser(), threads=self.settings.threads,
            dedicated=self.dedicated, cpu_max=static["cpu_max"], num_cpus=static["num_cpus"],
            mem_max=static["mem_max"], os=platform.system(), arch=platform.machine(),
            executor_id=self.executor_id, password=self.password))

    def _drop_queued_jobs(self) -> None:
        """Forget jobs not yet started: the manager takes them back when we re-register."""
        while True:
            try:
                job = self.jobs.get_nowait()
            except queue.Empty:
                return
            if job is None:
                self.jobs.put(None)
                return

    # ------------------------------------------------------------------ main loop

    def run(self, stop: threading.Event) -> None:
        """Serve the manager until ``stop`` is set (then say goodbye and hand back the work)."""
        s = self.settings
        for i in range(s.threads):
            t = threading.Thread(target=self._worker, name=f"worker-{i}", daemon=True)
            t.start()
            self.workers.append(t)
        self._connect()
        welcomed = False
        started = connected_at = last_heard = time.monotonic()
        last_beat = 0.0
        backoff = s.reconnect_initial
        reconnect_at: float | None = None
        poller = zmq.Poller()
        poller.register(self.results, zmq.POLLIN)
        poller.register(self.dealer, zmq.POLLIN)
        try:
            while not stop.is_set():
                events = dict(poller.poll(min(100, s.heartbeat_interval * 250)))
                now = time.monotonic()
                if self.results in events:
                    self._forward_results()
                if self.dealer in events:
                    for message in self._receive():
                        last_heard = now
                        if isinstance(message, p.Welcome):
                            welcomed, backoff = True, s.reconnect_initial
                            self.executor_id = message.executor_id
                            log.info("registered as executor %s with %s", message.executor_id[:8], self.manager)
                        elif isinstance(message, p.Assign):
                            self.jobs.put(message)
                        elif isinstance(message, p.Cancel):
                            self.cancelled.add(message.attempt_id)
                        elif isinstance(message, p.Refuse):
                            if self.executor_id is None:
                                raise Refused(message.reason)
                            log.warning("manager says: %s; registering again", message.reason)
                            reconnect_at = now
                        elif isinstance(message, p.Bye):
                            log.warning("manager left (%s); reconnecting in %.1f s", message.reason, backoff)
                            reconnect_at = now + backoff
                if self.executor_id is None and now - started > s.connect_timeout:
                    raise ManagerUnreachable(f"no answer from the manager at {self.manager} "
                                             f"within {s.connect_timeout:.0f} s")
                silent = now - (last_heard if welcomed else connected_at)
                if reconnect_at is None and self.executor_id is not None and silent > s.peer_timeout:
                    log.warning("manager silent for %.1f s; reconnecting in %.1f s", silent, backoff)
                    reconnect_at = now + backoff
                if reconnect_at is not None and now >= reconnect_at:
                    reconnect_at, welcomed = None, False
                    self._drop_queued_jobs()
                    poller.unregister(self.dealer)
                    self._connect()
                    poller.register(self.dealer, zmq.POLLIN)
                    connected_at = now
                    backoff = min(s.reconnect_max, backoff * 2)
                if welcomed and now - last_beat >= s.heartbeat_interval:
                    last_beat = now
                    send(self.dealer, p.Heartbeat(self.figures.sample(self.running)))
        finally:
            self._shutdown()

    def _receive(self):
        while True:
            try:
                frames = self.dealer.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            try:
                yield p.decode(frames)
            except p.ProtocolError as exc:
                log.warning("dropped a malformed message from the manager: %s", exc)

    def _forward_results(self) -> None:
        while True:
            try:
                frames = self.results.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            try:
                self.dealer.send_multipart(frames, zmq.NOBLOCK)
            except zmq.Again:
                log.warning("manager queue full; a message was dropped (the manager will reassign)")

    def _shutdown(self) -> None:
        self._drop_queued_jobs()
        for _ in self.workers:
            self.jobs.put(None)
        if self.dealer is not None:
            send(self.dealer, p.Bye("executor stopping"))
            self.dealer.close(linger=500)
        self.results.close(linger=0)
        self.fetcher.close()
        log.info("executor stopped")
