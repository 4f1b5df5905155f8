"""The executor process: registers with the manager, runs grid threads on N worker threads, and
keeps the connection alive through :class:`gridcrawl.link.ManagerLink` (heartbeats, silence,
reconnect with exponential back-off, hot-standby managers: the link every peer shares).

Threads of the process:

* the **main loop** owns the link (its DEALER socket) to the manager. It receives ``assign``/``cancel``,
  puts jobs on a local queue (the manager sends up to ``threads + prefetch``, MCMTCrawler's local
  buffer, so no worker waits on the manager between two pages), sends heartbeats with the CPU
  figures, and forwards what the workers produce;
* **worker threads** take jobs from the queue, note when each starts (a shared table the main
  loop reads: a start wakes nobody), run :func:`gridcrawl.executor.page.visit`, and push their
  encoded pages to the main loop over an inproc PUSH socket (ZeroMQ sockets are not shared
  between threads). The main loop reports to the manager (``started``) the attempts that have
  run :data:`START_REPORT_AFTER` seconds; a page done sooner (most are) is reported by its
  result alone, whose ``ran`` says when it started. Each worker measures how long it waits on
  the local queue between finishing one page and starting the next; the heartbeat figures carry
  the sum (``worker_idle_seconds``, ``worker_waits``) and the log has each worker's at shutdown.
"""

from __future__ import annotations

import collections
import getpass
import logging
import os
import platform
import queue
import socket
import threading
import time

import msgspec
import psutil
import zmq

from gridcrawl import protocol as p
from gridcrawl.link import ManagerLink
from gridcrawl.plugins import capabilities as plugin_capabilities, installed_plugins, loadable, shadowing
from gridcrawl.redact import hide_passwords
from gridcrawl.settings import Settings
from gridcrawl.executor.memory import TRIM_ABOVE_RSS, TRIM_AFTER_BYTES, release_free_memory
from gridcrawl.executor.fetch import Fetcher
from gridcrawl.executor.idle import own_cpu_seconds
from gridcrawl.executor.pacing import HostPacer
from gridcrawl.executor.sitemap import MAX_SITEMAP_BYTES
from gridcrawl.executor.page import visit
from gridcrawl.semantic import Limits
from gridcrawl.executor.robots import RobotsCache
from gridcrawl.errors import ManagerUnreachable, Refused  # noqa: F401 (re-exported)
from gridcrawl.words import counted

log = logging.getLogger("gridcrawl.executor")

#: Seconds an attempt runs before the main loop reports its start (``started``) to the manager.
#: Sooner, its result says when it started (``ran``): one message to the manager and one wake-up
#: of the main loop less per page (gridcrawl run on the Python docs: 3.70 -> 3.58 CPU-s, issue 23,
#: benchmarks/results/2026-11-27-start-reports.md).
#: The loop passes at least every 0.1 s, so a longer attempt is reported 0.1-0.2 s after its
#: start, with the seconds it has run (the manager's records keep its true start).
START_REPORT_AFTER = 0.1

#: Bytes of a ``results`` message besides its one page (the envelope, the attempt id, ``ran``).
RESULT_OVERHEAD = 1024

#: Applications whose instruction an executor keeps (Job.application_instruction): more than
#: one desktop ever serves at once.
APPLICATION_INSTRUCTIONS = 1000


def login_name() -> str:
    """This process's login name, on POSIX and Windows alike ("unknown" if none can be found:
    ``getpass.getuser`` raises where no variable names the user and there is no ``pwd``)."""
    try:
        return getpass.getuser()
    except Exception:
        return os.environ.get("USERNAME") or os.environ.get("USER") or "unknown"


class Figures:
    """Alchemi's executor figures from psutil: CPU %, available CPU %, CPU-seconds, memory."""

    def __init__(self) -> None:
        self.process = psutil.Process()
        psutil.cpu_percent(None)
        self.pages = 0
        self._last_pages = 0
        self._last_time = time.monotonic()
        self._last_cpu = own_cpu_seconds(self.process)
        # MCMTCrawler's local buffer, measured: per worker thread, [seconds, waits] spent waiting
        # on the local job queue between finishing one page and starting the next
        self.idle: dict[str, list] = {}

    def add_idle(self, worker: str, seconds: float) -> None:
        """Count ``seconds`` that worker thread ``worker`` waited for its next page (called by
        that worker only, so no lock is needed)."""
        entry = self.idle.setdefault(worker, [0.0, 0])
        entry[0] += seconds
        entry[1] += 1

    def idle_summary(self) -> str | None:
        """One line: total and mean idle seconds between pages, and each worker's seconds/waits;
        None when no worker waited between two pages (an executor that ran none, or one)."""
        entries = sorted(self.idle.items())
        total = sum(e[0] for _, e in entries)
        waits = sum(e[1] for _, e in entries)
        if not waits:
            return None
        per = ", ".join(f"{name} {e[0]:.3f} s/{e[1]}" for name, e in entries)
        return (f"worker idle between pages: {total:.3f} s over {counted(waits, 'wait')} "
                f"(mean {total / waits:.4f} s); per worker: {per}")

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
        """Figures for a heartbeat: cpu_usage (% of the machine: this process and its children,
        a browser included, since the previous sample), cpu_avail (% of
        the machine idle), cpu_totalusage (CPU-seconds), mem_usage (bytes RSS), running,
        pages_per_second (since the previous sample), worker_idle_seconds (seconds the worker
        threads waited on the local queue between two pages, summed over threads, since start)
        and worker_waits (how many such waits)."""
        now = time.monotonic()
        cpu = own_cpu_seconds(self.process)  # its browser and driver included (--render)
        elapsed = max(1e-6, now - self._last_time)
        rate = (self.pages - self._last_pages) / elapsed
        usage = max(0.0, cpu - self._last_cpu) / elapsed * 100.0
        self._last_pages, self._last_time, self._last_cpu = self.pages, now, cpu
        cpus = psutil.cpu_count() or 1
        return {"cpu_usage": usage / cpus,
                "cpu_avail": max(0.0, 100.0 - psutil.cpu_percent(None)),
                "cpu_totalusage": cpu,
                "mem_usage": self.process.memory_info().rss,
                "running": running, "pages_per_second": rate,
                "worker_idle_seconds": sum(e[0] for e in list(self.idle.values())),
                "worker_waits": sum(e[1] for e in list(self.idle.values()))}


class ExecutorAgent:
    """One executor: ``ExecutorAgent(settings, "tcp://host:9000").run(stop)``.

    ``name`` defaults to ``host:pid``. :meth:`run` raises :class:`ManagerUnreachable` if the
    first registration gets no answer within ``settings.connect_timeout`` seconds and
    :class:`Refused` if the manager refuses it; afterwards a lost manager is reconnected with
    back-off from ``reconnect_initial`` to ``reconnect_max`` seconds, forever.

    Security: ``user``/``password`` log in at the manager (``user`` defaults to the login name
    of this process); ``curve`` (a :class:`gridcrawl.keys.ClientKeys`) encrypts the connection;
    every fetch hop passes the SSRF guard (:mod:`gridcrawl.executor.ssrf`), which refuses
    private, loopback, link-local ... addresses except those inside ``allow_private`` CIDRs
    (raises ``ValueError`` on a bad CIDR).

    ``render``: start a headless browser (:class:`gridcrawl.executor.render.Renderer`, settings
    ``render_*`` and ``browser_path``) for threads whose instruction asks for rendering, and
    declare the ``render`` capability when registering; raises
    :class:`~gridcrawl.executor.render.RenderUnavailable` (one line saying what to install) when
    no browser starts.

    Capabilities (capability-based dispatch): the executor declares ``capabilities`` when it
    registers: those of the extractor plugins installed here
    (:func:`gridcrawl.plugins.capabilities`) plus ``capabilities`` (e.g. ``["render"]``), so it
    is given the threads that need them; raises ``ValueError`` (saying how many plugins fit)
    when they are more than a manager takes (:data:`gridcrawl.protocol.MAX_CAPABILITIES`).
    """

    def __init__(self, settings: Settings, manager: str | list[str], *, name: str | None = None,
                 dedicated: bool = True, password: str | None = None, user: str | None = None,
                 curve=None, allow_private=(), idle=None, capabilities: list[str] | None = None,
                 render: bool = False) -> None:
        self.settings = settings
        self.name = name or f"{socket.gethostname()}:{os.getpid()}"
        self.dedicated = dedicated
        self.user = user or login_name()
        # Idle-desktop executors (--idle-only): an IdleMonitor decides whether to take work.
        self.idle = idle
        self.accepting = idle is None
        self.password = password
        self.curve = curve
        self.plugins, problems = loadable(installed_plugins())
        for problem in problems:  # not offered: its threads wait for an executor where it loads
            log.warning("%s: not offered to the manager", problem)
        for problem in shadowing(self.plugins):  # offered, as the one that runs (its version)
            log.warning("%s", problem)
        self.capabilities = sorted(set(plugin_capabilities(self.plugins)) | set(capabilities or ()))
        declared = len(set(self.capabilities) | ({"render"} if render else set()))
        if declared > p.MAX_CAPABILITIES:  # the manager would refuse the registration
            given = len(self.plugins)
            others = declared - 2 * given
            raise ValueError(
                f"{given} extractor plugins are installed here: they make {2 * given} capabilities (plugin:NAME "
                f"and plugin:NAME@VERSION each){f', {declared} with --capability and --render' if others else ''}, "
                f"and a manager takes at most {p.MAX_CAPABILITIES} per executor: at most "
                f"{(p.MAX_CAPABILITIES - others) // 2} plugin{'' if (p.MAX_CAPABILITIES - others) // 2 == 1 else 's'} here. Uninstall some from this Python environment, "
                f"or run them in executors of their own")
        # two contexts: the network one holds only the link to the manager, so that terminating it
        # at shut-down waits (up to the link's linger) for the goodbye and the work handed back to
        # leave, and never for a worker still fetching; the workers' results travel in-process
        # (inproc needs no I/O thread)
        self.context = zmq.Context()
        self._local = zmq.Context(io_threads=0)
        self.jobs: queue.Queue = queue.Queue()
        self.parse_gate = threading.BoundedSemaphore(settings.parse_threads)  # page trees alive at once
        self.cancelled: set[int] = set()
        # results finished while no manager has welcomed this connection (a reconnection under
        # way): sent once one has, after the registration that names their attempts as running
        self._unsent: list[p.AttemptResult] = []
        # application id -> its instruction (Job.application_instruction), the most recently used last
        self.application_instructions: collections.OrderedDict[str, dict] = collections.OrderedDict()
        # attempts the workers run, until finished: attempt id -> (generation, monotonic start,
        # start reported to the manager); written by the workers and the main loop
        self._starts: dict[int, tuple[int, float, bool]] = {}
        self._starts_lock = threading.Lock()
        self.running = 0
        self._running_lock = threading.Lock()
        self.executor_id: str | None = None
        self.figures = Figures()
        self.semantic_limits = Limits(max_bytes=settings.rdf_max_bytes, max_triples=settings.max_triples,
                                      deadline=settings.rdf_parse_deadline)
        self.fetcher = Fetcher.from_settings(settings, allow_private,
                                             # politeness inside a grid thread: robots.txt and redirect hops
                                             # are spaced by the host's delay (executor/pacing.py); waits are bounded
                                             pacer=HostPacer(), max_wait=settings.thread_timeout / 2)
        if self.fetcher.proxy is not None:
            log.info("fetching through the proxy %s%s", self.fetcher.proxy.shown,
                     f" (directly: {settings.no_proxy})" if settings.no_proxy else "")
        if self.fetcher.verify is False:
            log.warning("HTTPS certificates are not checked (--no-tls-verify): any server may answer for a host")
        # sitemap threads: any content type (XML, gzip files), up to the sitemaps.org 50 MiB
        self.sitemap_fetcher = self.fetcher.derive(keep_non_html=True, max_body_bytes=MAX_SITEMAP_BYTES)
        # robots.txt: one cache per executor process, fetched with a copy of the page fetcher (same
        # user agent, timeouts and hop check, so the same private-address guard applies)
        self.robots: RobotsCache | None = (
            RobotsCache.for_fetcher(self.fetcher, retry_after=settings.robots_retry)
            if settings.obey_robots else None)
        self.renderer = None
        if render:
            from gridcrawl.executor.render import Renderer
            self.renderer = Renderer(
                self.fetcher, browser_path=settings.browser_path or None, max_pages=settings.render_pages,
                deadline=settings.render_timeout, idle_timeout=settings.render_idle,
                restart_after=settings.render_restart).start()
        if self.renderer is not None:
            self.capabilities = sorted(set(self.capabilities) | {"render"})
        self._results_endpoint = f"inproc://results-{id(self)}"
        self.results = self._local.socket(zmq.PULL)
        self.results.bind(self._results_endpoint)
        # the link to the manager (gridcrawl.link: several managers are hot standbys, tried in
        # order, a standby's redirect followed)
        self.link = ManagerLink(self.context, settings, manager, self._register, (p.Welcome,), curve=curve,
                                heartbeat=lambda: p.Heartbeat(self.figures.sample(self.running)),
                                on_connect=self._connected, logger=log)
        self.generation = 0
        self.workers: list[threading.Thread] = []  # every worker started (those stopped included)
        #: worker threads running, less those told to stop: the manager's grant once welcomed
        self.pool = 0
        #: the worker threads the manager grants (its welcome), None until welcomed
        self.granted: int | None = None
        #: why :meth:`run` returned on its own (one line: the browser of ``--render`` is lost), else None
        self.failure: str | None = None

    # ------------------------------------------------------------------ workers

    def _worker(self) -> None:
        push = self._local.socket(zmq.PUSH)
        push.setsockopt(zmq.LINGER, 0)
        push.connect(self._results_endpoint)
        worker = threading.current_thread().name
        finished_at: float | None = None  # when this worker finished its previous page
        try:
            while True:
                item = self.jobs.get()
                if item is None:
                    return
                generation, job = item
                if job.attempt_id in self.cancelled:
                    self.cancelled.discard(job.attempt_id)
                    continue
                if generation != self.generation:
                    # taken off the queue as a new connection handed it back: a manager that
                    # registers this executor again takes back what it had not started
                    continue
                if finished_at is not None:
                    self.figures.add_idle(worker, time.monotonic() - finished_at)
                with self._running_lock:
                    self.running += 1
                try:
                    attempt = str(job.attempt_id).encode()
                    began = time.monotonic()
                    with self._starts_lock:
                        self._starts[job.attempt_id] = (generation, began, False)
                    try:
                        page = visit(self.fetcher, job.url, store_content=self.settings.store_content,
                                     max_links=self.settings.max_links_per_page,
                                     instruction=job.instruction, robots=self.robots, parse_gate=self.parse_gate,
                                     delay=job.delay, max_crawl_delay=self.settings.max_crawl_delay,
                                     sitemap_fetcher=self.sitemap_fetcher,
                                     semantic_limits=self.semantic_limits, plugins=self.plugins,
                                     plugin_timeout=self.settings.plugin_timeout,
                                     renderer=self.renderer)
                    except Exception as exc:  # a bug must cost one page, not the executor
                        log.exception("thread %d (%s) crashed", job.thread_id, hide_passwords(job.url))
                        page = p.PageResult(url=job.url, error_kind="crash", error=f"{type(exc).__name__}: {exc}")
                    try:
                        encoded = p.encode_page(page)  # here, not in the main loop: it only batches
                    except Exception as exc:  # a value the wire cannot carry: the page fails, the worker lives
                        log.exception("thread %d (%s): its result cannot be encoded", job.thread_id,
                                      hide_passwords(job.url))
                        page = p.PageResult(url=job.url, error_kind="crash",
                                            error=f"its result cannot be encoded: {type(exc).__name__}: {exc}")
                        encoded = p.encode_page(page)
                    try:
                        push.send_multipart([attempt, repr(time.monotonic() - began).encode(), encoded])
                    except zmq.ContextTerminated:  # the executor stopped while this page ran
                        return
                    self.figures.pages += 1
                    if page.size >= TRIM_AFTER_BYTES:  # its tree and copies are freed: give them back
                        del page
                        release_free_memory(above=TRIM_ABOVE_RSS)
                finally:
                    with self._running_lock:
                        self.running -= 1
                    finished_at = time.monotonic()
        finally:
            push.close()

    # ------------------------------------------------------------------ connection

    @property
    def manager(self) -> str:
        """The endpoint of the manager this executor talks to now."""
        return self.link.managers.current

    def _register(self) -> p.Register:
        """The hello of every connection: this executor's registration."""
        static = Figures.static()
        return p.Register(
            name=self.name, host=socket.gethostname(), user=self.user, threads=self.settings.threads,
            dedicated=self.dedicated, cpu_max=static["cpu_max"], num_cpus=static["num_cpus"],
            mem_max=static["mem_max"], os=platform.system(), arch=platform.machine(),
            executor_id=self.executor_id, password=self.password, capabilities=self.capabilities,
            accepting=self.accepting, request_window=self.settings.request_window("render" in self.capabilities),
            running=self._running_attempts())

    def _running_attempts(self) -> list[int]:
        """The attempts the workers are running now, of every connection (a registration says
        them: the manager frees the politeness slots of the others it took back)."""
        with self._starts_lock:
            return sorted(self._starts)

    def _connected(self) -> None:
        # A new connection is a new generation: the jobs not started are handed back (the manager
        # takes them back); those running go on, and the registration names them (running).
        # Their results are late ones: the manager fences them (never applied, but the host's
        # politeness slot it keeps while their fetches may run is freed then, not a request
        # window later; attempt ids are random, never reused by a manager after a restart).
        self._hand_back_queued()
        self.generation += 1

    def run(self, stop: threading.Event) -> None:
        """Serve the manager until ``stop`` is set (then say goodbye and hand back the work), or
        until this executor's browser (``--render``) is lost: no new one starts
        (:attr:`Renderer.lost <gridcrawl.executor.render.Renderer.lost>`); :attr:`failure` then says so.

        Raises :class:`~gridcrawl.errors.ManagerUnreachable` or :class:`~gridcrawl.errors.Refused`
        when the link gives up before the first registration (:mod:`gridcrawl.link`)."""
        s = self.settings
        last_idle_check = 0.0
        polled: zmq.Socket | None = None
        poller = zmq.Poller()
        poller.register(self.results, zmq.POLLIN)
        if hasattr(stop, "fileno"):  # a StopEvent (gridcrawl.cli_common): a stop wakes the poll at once
            poller.register(stop, zmq.POLLIN)
        try:
            self.link.start()
            while not stop.is_set():
                if polled is not self.link.socket:  # a new connection: poll its socket
                    if polled is not None:
                        poller.unregister(polled)
                    polled = self.link.socket
                    poller.register(polled, zmq.POLLIN)
                events = dict(poller.poll(min(100, s.heartbeat_interval * 250)))
                if self.results in events:
                    self._forward_results()
                if stop.is_set():
                    break  # stopping: the manager's own goodbye, if it came too, is not news
                self._report_starts()
                if polled in events:
                    for message in self.link.receive():
                        self._handle(message)
                self.link.tick()
                if self.renderer is not None and self.renderer.lost is not None:
                    # its browser is gone for good: declaring render still, it would take (and fail)
                    # the threads of executors that can render; stopping hands them back
                    self.failure = (f"{self.renderer.lost} — this executor stops; start it again once its browser "
                                    "starts (or without --render)")
                    log.error("%s", self.failure)
                    break
                now = time.monotonic()
                if self.idle is not None and now - last_idle_check >= min(1.0, s.heartbeat_interval):
                    last_idle_check = now
                    self._check_idle(self.link.up)
        finally:
            self._shutdown()

    def _handle(self, message: p.Message) -> None:
        """A message from the manager (the link has taken its part: refusals, goodbyes)."""
        if isinstance(message, p.Welcome):
            self.executor_id = message.executor_id
            log.info("registered as executor %s with %s", message.executor_id[:8], self.manager)
            self._grant(message.threads)
            if self._unsent:
                self._forward_results()
            if not self.accepting:  # (the registration said so: the manager assigns it nothing)
                log.info("not taking grid threads yet (%s)", self.idle.reason)
        elif isinstance(message, p.Assign):
            for job in message.jobs:  # (a job handed back may bring its application's instruction too)
                job.instruction = self._instruction_of(job)
            if self.accepting:
                for job in message.jobs:
                    self.jobs.put((self.generation, job))
            else:  # assigned before the manager heard we stopped: hand them back
                self.link.send(p.Availability(False, [job.attempt_id for job in message.jobs]))
        elif isinstance(message, p.Cancel):
            self.cancelled.add(message.attempt_id)

    def _grant(self, threads: int | None) -> None:
        """Run the worker threads the manager's welcome grants: ``threads`` (None: all of
        ``settings.threads``; never more than those). A grant below ``settings.threads`` (the
        manager's ``max_threads_per_executor``) logs one WARNING naming both counts, and again
        only when a later welcome (a reconnection, another manager) grants another count.

        More workers than granted would run the jobs the manager sends beyond them (its
        ``prefetch``, meant to wait here so that no worker waits on the manager) at once, past
        what the manager believes runs."""
        asked = self.settings.threads
        granted = asked if threads is None else max(1, min(asked, threads))
        if granted < asked and granted != self.granted:
            log.warning("running %s, not the %d asked (threads, --threads): the manager grants at most %d per "
                        "executor (its max_threads_per_executor; raise it there for more)",
                        counted(granted, "worker thread"), asked, granted)
        elif self.granted is not None and granted != self.granted:
            log.info("the manager grants all %s asked: running %d", counted(asked, "worker thread"), asked)
        self.granted = granted
        self._size_pool(granted)

    def _size_pool(self, size: int) -> None:
        """Run ``size`` worker threads: start those missing, or tell the extra ones to stop (one
        sentinel each on the local queue, behind the jobs queued: each ends after a page)."""
        while self.pool < size:
            t = threading.Thread(target=self._worker, name=f"worker-{len(self.workers)}", daemon=True)
            t.start()
            self.workers.append(t)
            self.pool += 1
        for _ in range(self.pool - size):
            self.jobs.put(None)
        self.pool = min(self.pool, size)

    def _instruction_of(self, job: p.Job) -> dict | None:
        """``job``'s whole instruction: its own keys read over its application's instruction,
        which came with this job or an earlier one (the manager sends it once per executor
        registration; the last :data:`APPLICATION_INSTRUCTIONS` applications are kept)."""
        kept = self.application_instructions
        if job.application_instruction is not None:
            kept[job.application_id] = job.application_instruction
            job.application_instruction = None
            while len(kept) > APPLICATION_INSTRUCTIONS:
                kept.popitem(last=False)
        shared = kept.get(job.application_id)
        if shared is None:
            return job.instruction
        kept.move_to_end(job.application_id)
        return {**shared, **job.instruction} if job.instruction else shared

    def _check_idle(self, welcomed: bool) -> None:
        """Idle-only executors: sample the desktop; when the owner comes back, stop taking work,
        hand back the jobs not yet started and tell the manager (``availability``); when the
        desktop is idle again, tell the manager it accepts work. Running jobs finish."""
        accepting = self.idle.check()
        if accepting == self.accepting:
            if not accepting and (why := self.idle.still_waiting()) is not None:
                log.info("still not taking grid threads: %s", why)
            return
        self.accepting = accepting
        if accepting:
            log.info("taking grid threads (%s)", self.idle.reason)
            if welcomed:
                self.link.send(p.Availability(True))
            return
        handed = self._hand_back_queued()
        log.info("stopped taking grid threads (%s); %d queued handed back, %d running finish",
                 self.idle.reason, len(handed), self.running)
        if welcomed:
            self.link.send(p.Availability(False, handed))

    def _hand_back_queued(self) -> list[int]:
        """Take every job no worker has started off the local queue (shutdown sentinels stay);
        return the attempt ids of the current connection's (the manager reassigns them, not
        counted as lost). Jobs of older connections are simply dropped."""
        handed: list[int] = []
        sentinels = 0
        while True:
            try:
                item = self.jobs.get_nowait()
            except queue.Empty:
                break
            if item is None:
                sentinels += 1
                continue
            generation, job = item
            if job.attempt_id in self.cancelled:
                self.cancelled.discard(job.attempt_id)
            elif generation == self.generation:
                handed.append(job.attempt_id)
        for _ in range(sentinels):
            self.jobs.put(None)
        return handed

    def _report_starts(self) -> None:
        """Tell the manager (one ``started``) which attempts of this connection have run
        :data:`START_REPORT_AFTER` seconds or more and are not reported yet, with the seconds
        each has run (not those of older connections: taken back, they are kept until they end,
        for :meth:`_running_attempts`)."""
        now, due, running = time.monotonic(), [], []
        with self._starts_lock:
            for attempt_id, (generation, began, reported) in list(self._starts.items()):
                if generation == self.generation and not reported and now - began >= START_REPORT_AFTER:
                    self._starts[attempt_id] = (generation, began, True)
                    due.append(attempt_id)
                    running.append(now - began)
        if not due:
            return
        try:
            self.link.socket.send_multipart(p.encode(p.Started(due, running)), zmq.NOBLOCK)
        except zmq.Again:
            log.warning("manager queue full; a message was dropped (the manager will reassign)")

    def _forward_results(self) -> None:
        """Send the pages the workers finished to the manager as one ``results`` message (split
        at ``max_message_bytes // 2``). An attempt whose start was not reported carries ``ran``,
        the seconds it ran. Results of an older connection's jobs go too: the manager fences
        them (:meth:`_connected`). While no manager has welcomed the current connection they
        wait (no more than the jobs it held): before its welcome a result would reach the
        manager from a peer it does not know (a registration refused for now, while the old
        connection still looks alive to it), a strike against this executor."""
        results, self._unsent = self._unsent, []
        while True:
            try:
                frames = self.results.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                break
            attempt_id = int(frames[0])
            with self._starts_lock:
                start = self._starts.pop(attempt_id, None)
            page = msgspec.Raw(frames[2])
            if len(page) > self.settings.max_message_bytes - RESULT_OVERHEAD:
                page = self._too_large(page)
            if start is not None and start[2]:  # its start was reported
                results.append(p.AttemptResult(attempt_id, page))
            else:  # finished before its start was reported: the result says when it started
                results.append(p.AttemptResult(attempt_id, page, float(frames[1])))
        if not self.link.up:
            self._unsent = results
            return
        dealer = self.link.socket
        try:
            limit, batch, size = self.settings.max_message_bytes // 2, [], 0
            for r in results:
                if batch and size + len(r.page) > limit:
                    dealer.send_multipart(p.encode(p.Results(batch)), zmq.NOBLOCK)
                    batch, size = [], 0
                batch.append(r)
                size += len(r.page)
            if batch:
                dealer.send_multipart(p.encode(p.Results(batch)), zmq.NOBLOCK)
        except zmq.Again:
            log.warning("manager queue full; a message was dropped (the manager will reassign)")

    def _too_large(self, page: msgspec.Raw) -> msgspec.Raw:
        """A page whose result would be over ``max_message_bytes`` (``max_body_bytes`` set near
        it, or a page of very many links), which the manager would answer by dropping the
        connection, the thread then coming back for ever: the page without its items when they
        made it too large (an ``item_errors`` entry per item type saying so: a plugin's items
        fail, not its page), else the page as a ``too_large`` failure, its URL, status and size
        kept, its body and links left out."""
        whole = msgspec.msgpack.decode(page, type=p.PageResult)
        if whole.items:  # the items made it too large (a plugin's, or many big values): the page goes without them
            over = (f"left out: the page's items made its result {len(page)} bytes, over max_message_bytes "
                    f"({self.settings.max_message_bytes}); yield fewer or smaller items, or raise it on every program")
            kinds = sorted({str(item.get("type")) for item in whole.items if isinstance(item, dict)})
            lean = p.encode_page(msgspec.structs.replace(
                whole, items=[], item_errors=[*whole.item_errors, *([kind, f"items {over}"] for kind in kinds)]))
            if len(lean) <= self.settings.max_message_bytes - RESULT_OVERHEAD:
                log.warning("the items of %s %s", hide_passwords(whole.url), over)
                return lean
        log.warning("the result for %s is %d bytes, over max_message_bytes (%d): sent as too_large",
                    hide_passwords(whole.url), len(page), self.settings.max_message_bytes)
        return p.encode_page(p.PageResult(
            url=whole.url, final_url=whole.final_url, status=whole.status, content_type=whole.content_type,
            size=whole.size, fetch_seconds=whole.fetch_seconds, parse_seconds=whole.parse_seconds,
            error_kind=p.ErrorKind.TOO_LARGE.value,
            error=f"its result ({len(page)} bytes: body, links, items) is over max_message_bytes "
                  f"({self.settings.max_message_bytes}); raise it on every program, or lower max_body_bytes"))

    def _shutdown(self) -> None:
        # not started: said so before the goodbye, the manager frees their hosts' politeness slots
        # at once; the attempts running when the goodbye comes keep theirs until their fetches
        # can no longer be running (the manager's queue: ReadyQueue.hold)
        handed = self._hand_back_queued()
        if handed and self.link.up:
            self.link.send(p.Availability(False, handed))
        for _ in range(self.pool):
            self.jobs.put(None)
        self.link.close(bye="executor stopping", linger=500)
        self.context.term()  # returns once the goodbye and the hand-back have left (≤ 0.5 s)
        self.results.close(linger=0)
        # a worker still fetching ends when its page is done: terminating the in-process context
        # makes its send fail (and waits, in its own thread, for the worker to close its socket)
        threading.Thread(target=self._local.term, name="stop-workers", daemon=True).start()
        if self.renderer is not None:
            self.renderer.close()
        self.fetcher.close()
        self.sitemap_fetcher.close()
        if self.robots is not None:
            self.robots.fetcher.close()
        # an executor that never registered (manager unreachable, refused) has nothing to report:
        # its one-line error follows
        level = logging.INFO if self.executor_id is not None else logging.DEBUG
        if (idle := self.figures.idle_summary()) is not None:
            log.log(level, "%s", idle)
        log.log(level, "executor stopped")
