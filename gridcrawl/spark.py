"""Crawling on Apache Spark: ParaCA's layers over gridcrawl's crawl tables (``gridcrawl spark``).

This module owns the Spark crawl: the driver's loop over crawl layers and the three stages each
layer runs as Spark tasks. It follows ParaCA (Li, Zhang, Liu: "ParaCA: A Speculative Parallel
Crawling Approach on Apache Spark", section III.A, steps 1–7): URLs are partitioned by the hash of
their host so that one task owns a site, and every layer runs download, parse and "optimise"
(drop what was already crawled, remove duplicates) until the frontier is empty or the depth
limit is reached. What differs from the paper: the frontier and the results live in gridcrawl's
crawl tables (:class:`~gridcrawl.client.store.CrawlStore`), not in HDFS folders, so a Spark
crawl and a grid crawl continue each other; and nothing is ``collect()``-ed but a few figures.

One layer (all ``to_visit_url`` rows at the lowest depth, at most ``spark_layer_urls``):

1. **Frontier.** The driver claims the layer's rows (``CrawlStore.claim``: marked in flight, as
   a grid client does) and partitions them by :func:`host_partition` — a stable CRC-32 of the
   host, so one task owns a host for the layer.
2. **Download + parse** (one task per partition, ``threads`` worker threads): every URL goes
   through the executor's own :func:`gridcrawl.executor.page.visit` — robots.txt
   (:class:`~gridcrawl.executor.robots.RobotsCache`), :class:`~gridcrawl.executor.fetch.Fetcher`,
   the SSRF guard, the parser and canonical URLs — so pages, links and fingerprints are those an
   executor produces. Politeness per host is the manager's own
   :class:`~gridcrawl.manager.queue.ReadyQueue` run inside the task (concurrency per host,
   ``download_delay``/``Crawl-delay`` measured from the previous fetch's end, 429/503 back-off),
   with the manager's retries (:func:`~gridcrawl.manager.core.retry_wait`). Documents (the bodies) are
   written from the task in batches of ``apply_batch`` (insert-if-absent on the fingerprint);
   the task passes on only small records: the visited rows and the link rows.
3. **Optimise**: the link rows keyed by fingerprint, ``reduceByKey`` (distinct; the best
   relevance kept) and ``subtractByKey`` against the fingerprints already visited or queued (a
   persisted RDD read from the tables at start and grown by each layer); each partition of what
   is left is queued with :meth:`CrawlStore.queue_links` (which checks ``visited_url`` again, so
   a grid client on the same database is respected).
4. **Commit**: the visited rows are written and the layer's ``to_visit_url`` rows deleted, from
   the tasks. Only now: a driver that dies before this leaves the layer in ``to_visit_url``, and
   the next run does it again — documents and links are stored once (their unique keys), and
   no page is marked visited before its links are queued.

A failed task is retried by Spark (``local[N]`` masters get ``local[N,4]``: four attempts, as
``spark.task.maxFailures`` on a cluster); its writes are idempotent. Cross-layer politeness: each
task reports when it last fetched each host that has a delay, and the next layer's owner of the
host waits out the rest of the delay.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import importlib.util
import logging
import os
import queue as queue_mod
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import zlib
from dataclasses import dataclass, field
from urllib.parse import urlsplit
from typing import Callable, Iterable, Iterator

import sqlalchemy as sa

from gridcrawl import models
from gridcrawl.protocol import DISALLOWED
from gridcrawl.settings import Settings
from gridcrawl.errors import SparkUnavailable  # noqa: F401 (re-exported)

log = logging.getLogger("gridcrawl.spark")

#: What to install when pyspark or Java is missing.
INSTALL_HINT = "pip install 'gridcrawl[spark]' (pyspark) and a Java 17 runtime (e.g. apt-get install openjdk-17-jre-headless)"

#: What to install when pyspark is there and Java is not.
JAVA_HINT = "install a Java 17 runtime (e.g. apt-get install openjdk-17-jre-headless)"

#: Attempts of a task in local mode (``local[N]`` becomes ``local[N,4]``), as Spark's cluster default.
LOCAL_TASK_ATTEMPTS = 4


def spark_unavailable() -> str | None:
    """Why a Spark crawl cannot run here (one sentence naming what to install), or None.

    Checks that the ``pyspark`` module is installed and that ``java -version`` runs (``java``
    from ``$JAVA_HOME/bin`` or ``PATH``)."""
    if importlib.util.find_spec("pyspark") is None:
        return f"pyspark is not installed: {INSTALL_HINT}"
    home = os.environ.get("JAVA_HOME")
    java = os.path.join(home, "bin", "java") if home else shutil.which("java")
    if home and not os.path.exists(java):  # pyspark runs $JAVA_HOME/bin/java, not the one on PATH
        return (f"JAVA_HOME={home} has no bin/java: set it to a Java 17 runtime's folder, or unset it to use "
                f"the java on PATH ({JAVA_HINT})")
    if not java or not os.path.exists(java):
        return f"no Java runtime (java not on PATH, JAVA_HOME unset): {JAVA_HINT}"
    try:
        subprocess.run([java, "-version"], capture_output=True, timeout=30, check=True)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"java -version failed ({exc}): {JAVA_HINT}"
    return None


def spark_error(exc: BaseException, limit: int = 300) -> str:
    """One line saying why Spark failed, at most ``limit`` characters. For an error raised in
    the JVM (py4j's ``Py4JJavaError``, whose first line is only ``An error occurred while
    calling None.org.apache.spark.api.java.JavaSparkContext.``), the Java exception's simple
    class name and the first line of its message (``SparkIllegalArgumentException:
    [INVALID_DRIVER_MEMORY.SYSTEM_MEMORY] Insufficient driver memory: ...``); for any other
    exception its own first line (its class name when it has no text)."""
    try:
        text = str(exc).strip()
    except Exception:  # noqa: BLE001 - a Py4JJavaError asks the JVM for its text, and the JVM may be gone
        text = ""
    lines = text.splitlines()
    if hasattr(exc, "java_exception"):
        at = next((i for i, line in enumerate(lines) if i and line.startswith(": ")), None)
        if at is not None:
            name, sep, message = lines[at][2:].strip().partition(": ")
            cause = f"{name.rsplit('.', 1)[-1]}{sep}{message}"
            traceback = "Traceback (most recent call last):"
            if cause.endswith(traceback):  # a task's Python error: its last line is what it says
                error = next((line.strip() for line in lines[at + 1:] if line.strip() and not line[0].isspace()), "")
                cause = f"{cause[:-len(traceback)].rstrip()} {error}".rstrip()
            lines = [cause]
    return (lines[0] if lines else type(exc).__name__)[:limit]


def host_partition(host: str) -> int:
    """A stable hash of ``host`` (CRC-32 of its UTF-8 bytes, 0 ... 2^32-1): equal in every
    process and on every machine, unlike Python's ``hash``. Spark takes it modulo the number of
    partitions, so one partition owns a host."""
    return zlib.crc32(host.encode("utf-8"))


def local_master(master: str) -> str:
    """``master`` with task retries in local mode: ``local``/``local[N]``/``local[*]`` become
    ``local[N,4]`` (:data:`LOCAL_TASK_ATTEMPTS`; local mode otherwise never retries a task).
    Other masters (``local[N,F]``, ``spark://``, ``yarn``, ``k8s://``) are returned as they are."""
    m = re.fullmatch(r"local(?:\[(\*|\d+)\])?", master.strip())
    if m is None:
        return master
    return f"local[{m.group(1) or 1},{LOCAL_TASK_ATTEMPTS}]"


#: The Spark masters ``SparkContext`` accepts (Spark's ``SparkSubmit`` and ``SparkContext.createTaskScheduler``).
_MASTER_FORMS = re.compile(r"local(\[(\*|\d+)(\s*,\s*\d+)?\])?|local-cluster\[\s*\d+\s*,\s*\d+\s*,\s*\d+\s*\]"
                           r"|yarn|spark://\S+|k8s://\S+")


def check_master(master: str) -> str:
    """``master`` stripped, when it is one of the forms a SparkContext accepts: ``local``,
    ``local[N]``, ``local[*]``, ``local[N,F]``, ``local-cluster[N,C,M]``, ``yarn``,
    ``spark://HOST:PORT[,HOST:PORT...]`` or ``k8s://HOST:PORT``.

    Raises ``ValueError`` (one line naming the forms) for anything else, so that it is refused
    before a JVM starts: Spark itself answers it with a Java stack trace and, in Python, a line
    that does not name the cause (``Java gateway process exited before sending its port
    number``)."""
    value = master.strip()
    if not _MASTER_FORMS.fullmatch(value):
        raise ValueError(f"--master {master!r} is not a Spark master: local[*], local[N], local[N,F] (F attempts "
                         "per task), spark://HOST:7077, yarn or k8s://HOST:PORT")
    return value


def is_local(master: str) -> bool:
    """True for a ``local...`` master (the driver and the tasks on this machine)."""
    return master.strip().startswith("local")


#: Prefix of the folder (in the system's temporary folder) that holds a local-mode run's Spark
#: files (``spark.local.dir``: shuffle files, checkpoints, block manager): ``gridcrawl-spark-PID-``.
LOCAL_DIR_PREFIX = "gridcrawl-spark-"

_LOCAL_DIRS: dict[int, tuple] = {}  # id(SparkContext) -> (its spark.local.dir, the open lock file in it)

#: The file in a run's Spark folder that its driver holds locked (``flock``) while it runs.
LOCAL_DIR_LOCK = ".gridcrawl-driver.lock"


def _make_local_dir():
    """A new ``gridcrawl-spark-PID-*`` folder in the temporary folder with its lock file open and
    locked by this process (kept locked until :func:`stop_spark`, or this process ends):
    ``(path, lock file)``; ``(None, None)`` where ``flock`` does not exist (Windows)."""
    try:
        import fcntl
    except ImportError:
        return None, None
    path = tempfile.mkdtemp(prefix=f"{LOCAL_DIR_PREFIX}{os.getpid()}-")
    lock = open(os.path.join(path, LOCAL_DIR_LOCK), "w")
    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    return path, lock


def sweep_local_dirs(parent: str | None = None) -> list[str]:
    """Remove the Spark folders that earlier local-mode runs left behind when their driver was
    killed with its JVM (``kill -9`` of the process group, the OOM killer): the
    ``gridcrawl-spark-PID-*`` folders in ``parent`` (default: the system's temporary folder)
    whose lock file no process holds (a running driver holds its own: ``flock``, which holds
    across PID namespaces and ends with the process, ``kill -9`` included). Returns the paths
    removed; a folder without a lock file, or that cannot be removed, is left as it is."""
    try:
        import fcntl
    except ImportError:
        return []
    parent = parent or tempfile.gettempdir()
    removed = []
    try:
        names = os.listdir(parent)
    except OSError:
        return removed
    for name in names:
        if not re.fullmatch(re.escape(LOCAL_DIR_PREFIX) + r"\d+-\w+", name):
            continue
        path = os.path.join(parent, name)
        try:
            with open(os.path.join(path, LOCAL_DIR_LOCK), "a") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)  # OSError: its driver runs
                shutil.rmtree(path, ignore_errors=True)
        except OSError:
            continue
        if not os.path.exists(path):
            removed.append(path)
    return removed


#: Spark's log configuration for the driver's JVM (:func:`quiet_spark_log`): errors only, one line each.
SPARK_LOG_CONFIG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "spark-log4j2.properties")


def quiet_spark_log(environ=os.environ) -> str | None:
    """Point the JVM that pyspark starts next at :data:`SPARK_LOG_CONFIG` (log4j2 reads
    ``LOG4J_CONFIGURATION_FILE`` from ``environ``): Spark's own log on the terminal is its
    errors only, one line each without Java stack traces, instead of its start-up banner
    ("Using Spark's default log4j profile", "Setting default log level", warnings about native
    Hadoop and ``spark.local.dir``) and, on a failure, a Java stack trace before gridcrawl's own
    line. A configuration of the user's own wins: ``LOG4J_CONFIGURATION_FILE`` already set, or a
    ``log4j2.*`` file in ``$SPARK_CONF_DIR`` (default ``$SPARK_HOME/conf``, pyspark's folder when
    ``SPARK_HOME`` is unset), or a ``-Dlog4j2.configurationFile`` in ``spark.driver.extraJavaOptions``
    (a system property, which log4j2 reads first). Returns the file now
    set, or None when the user's is kept. A JVM already running keeps the log it has."""
    if environ.get("LOG4J_CONFIGURATION_FILE"):
        return None
    home = environ.get("SPARK_HOME") or next(iter(getattr(importlib.util.find_spec("pyspark"),
                                                          "submodule_search_locations", None) or []), None)
    conf_dir = environ.get("SPARK_CONF_DIR") or (os.path.join(home, "conf") if home else None)
    if conf_dir and any(os.path.exists(os.path.join(conf_dir, f"log4j2.{ext}"))
                        for ext in ("properties", "xml", "json", "jsn", "yaml", "yml")):
        return None
    environ["LOG4J_CONFIGURATION_FILE"] = SPARK_LOG_CONFIG
    return SPARK_LOG_CONFIG


def stop_spark(sc) -> None:
    """Stop ``sc`` and remove the ``spark.local.dir`` folder :func:`spark_context` made for it
    (Spark removes its own files in it when its JVM ends normally; the folder is this run's)."""
    try:
        sc.stop()
    finally:
        path, lock = _LOCAL_DIRS.pop(id(sc), (None, None))
        if path:
            shutil.rmtree(path, ignore_errors=True)
            lock.close()


def spark_context(master: str = "local[*]", *, ui: bool = False, app_name: str = "gridcrawl"):
    """Start (or get) the SparkContext for ``master``.

    Local masters keep all of Spark's network on loopback: ``SPARK_LOCAL_IP``,
    ``spark.driver.host`` and ``spark.driver.bindAddress`` are 127.0.0.1 (the web UI, when
    ``ui`` is true, binds there too); the Python workers run this interpreter. Cluster masters
    take their addresses from the cluster's ``spark-defaults.conf``. No ``--packages``: nothing
    is downloaded. In local mode Spark's files (``spark.local.dir``) go to a folder of this run,
    ``gridcrawl-spark-PID-*`` in the temporary folder (unless ``SPARK_LOCAL_DIRS`` is set), that
    :func:`stop_spark` removes, and those of earlier runs killed with their JVM are removed first
    (:func:`sweep_local_dirs`). Spark's own log on the terminal is its errors, one line each
    (:func:`quiet_spark_log`), and the JVM's notice of Java's incubator module is not passed on
    (:func:`_launch_gateway`). Raises :class:`SparkUnavailable` (with what to install) when
    pyspark or Java is missing."""
    reason = spark_unavailable()
    if reason:
        raise SparkUnavailable(reason)
    from pyspark import SparkConf, SparkContext
    quiet_spark_log()
    conf = (SparkConf().setMaster(local_master(master)).setAppName(app_name)
            .set("spark.ui.enabled", "true" if ui else "false")
            .set("spark.ui.showConsoleProgress", "false")
            .set("spark.python.worker.reuse", "true"))
    local_dir = lock = None
    if is_local(master):
        if not os.environ.get("SPARK_LOCAL_DIRS"):  # the user's own setting wins (it overrides spark.local.dir)
            sweep_local_dirs()
            local_dir, lock = _make_local_dir()
            if local_dir:
                conf.set("spark.local.dir", local_dir)
        os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
        conf.set("spark.driver.host", "127.0.0.1").set("spark.driver.bindAddress", "127.0.0.1")
    try:
        if SparkContext._gateway is None and "PYSPARK_GATEWAY_PORT" not in os.environ:  # no JVM yet: start it
            sc = SparkContext(conf=conf, gateway=_launch_gateway(conf))
        else:
            sc = SparkContext.getOrCreate(conf)
    except BaseException:
        if local_dir:
            shutil.rmtree(local_dir, ignore_errors=True)
            lock.close()
        raise
    if local_dir and sc.getConf().get("spark.local.dir") == local_dir:
        _LOCAL_DIRS[id(sc)] = (local_dir, lock)
    elif local_dir:  # a SparkContext already running in this process keeps its own
        shutil.rmtree(local_dir, ignore_errors=True)
        lock.close()
    sc.setLogLevel("ERROR")  # WARN repeats that checkpointed lineages are truncated, every layer
    return sc


#: Lines the JVM prints on standard error that :func:`_launch_gateway` does not pass on: Java's
#: own notice of the incubator module Spark 4 loads (``--add-modules=jdk.incubator.vector``), which
#: no option of Java 17 turns off.
JVM_NOISE = (b"WARNING: Using incubator modules:",)


def _launch_gateway(conf):
    """Start pyspark's JVM (``pyspark.java_gateway.launch_gateway``) with its standard error
    relayed to this process's (file descriptor 2) by a daemon thread, less the lines of
    :data:`JVM_NOISE`. Returns the gateway; raises what ``launch_gateway`` raises, once what the
    JVM printed before it exited is relayed."""
    from pyspark.java_gateway import launch_gateway
    read, write = os.pipe()

    def relay() -> None:
        with os.fdopen(read, "rb") as source:
            for line in source:
                if not line.startswith(JVM_NOISE):
                    with contextlib.suppress(OSError):
                        while line:
                            line = line[os.write(2, line):]
    relaying = threading.Thread(target=relay, name="spark-jvm-stderr", daemon=True)
    relaying.start()
    try:
        return launch_gateway(conf, popen_kwargs={"stderr": write})
    except BaseException:
        os.close(write)
        write = None
        relaying.join(5)  # the JVM has exited: what it said comes before the caller's line
        raise
    finally:
        if write is not None:
            os.close(write)  # the JVM holds its own end


# ---------------------------------------------------------------------------------- the tasks


@dataclass
class TaskConfig:
    """Everything a task needs, shipped with it (pickled): the crawl database URL, the
    settings, the scope, the strategy, the private networks the SSRF guard lets through, and a
    token naming this crawl (tasks keep one database engine and store per token and process).

    ``fail_first_attempt_on`` is a test hook: the first attempt of a download task fails
    right after writing the batch holding a URL that contains this text."""

    db: str
    settings: Settings
    scope: object          # gridcrawl.client.frontier.Scope
    strategy: object       # gridcrawl.client.frontier.Strategy
    allow_private: list[str] = field(default_factory=list)
    token: str = ""
    fail_first_attempt_on: str | None = None


_STORES: dict = {}  # crawl token -> CrawlStore, in each Python worker process
_STORES_LOCK = threading.Lock()


def _task_store(config: TaskConfig):
    """The CrawlStore of ``config``'s crawl in this Python worker process (Spark reuses its
    workers: one engine per crawl and process, not one per task)."""
    from gridcrawl.client.store import CrawlStore
    from gridcrawl.db import open_database
    with _STORES_LOCK:
        store = _STORES.get(config.token)
        if store is None:
            if len(_STORES) >= 4:
                _STORES.pop(next(iter(_STORES))).engine.dispose()
            store = _STORES[config.token] = CrawlStore(open_database(config.db, check=False), config.strategy)
        return store


class _Job:
    """One URL of a download task inside the manager's ReadyQueue (it needs ``host``,
    ``priority``, ``needs``, ``application_id`` and ``queue_seq``; a task runs every URL it
    owns, so ``needs`` is empty: an item spec's plugin missing here is the page's item error, as
    on an executor; and all of them are of one crawl, one application)."""

    __slots__ = ("pending", "host", "priority", "queue_seq", "retries", "needs", "application_id")

    def __init__(self, pending, host: str, priority: int) -> None:
        self.pending, self.host, self.priority = pending, host, priority
        self.queue_seq = None
        self.retries = 0
        self.needs: tuple = ()
        self.application_id = ""


class _InjectedFailure(RuntimeError):
    """The test hook's failure of a task's first attempt."""


def download_partition(config: TaskConfig, politeness: dict, index: int, rows: Iterable,
                       traps: dict | None = None) -> Iterator[tuple]:
    """The download + parse stage of one partition (a Spark ``mapPartitionsWithIndex`` function).

    ``rows``: ``(host, (thread_id, url, fingerprint, depth, priority, page_type, relevance))``
    pairs, every host of which this partition owns; ``politeness``: ``{host: (last_finish,
    crawl_delay)}`` from the previous layer (POSIX seconds, seconds or None); ``traps``: what the
    crawl knows of its hosts' URL shapes (the template-trap rule, :mod:`gridcrawl.client.traps`:
    ``{shape: family}`` of :meth:`TrapDetector.families`), which the task's detector starts from.

    Fetches with ``settings.threads`` worker threads under the per-host politeness of
    :class:`~gridcrawl.manager.queue.ReadyQueue`, retries like the manager, writes each batch of
    ``apply_batch`` documents, and yields small records: ``("v", visited_rows, thread_ids,
    trap_rows)`` per batch (``trap_rows``: the ``visited_url`` rows of links into template
    traps), ``("l", fingerprint, to_visit_row)`` per link, and one ``("s", figures)`` at the end (pages, errors, pages robots.txt disallowed, summed fetch/parse/write seconds, wall
    seconds, the worker's peak RSS in bytes, ``hosts``: ``{host: (last_finish,
    crawl_delay)}`` of the hosts with a delay, and ``traps``: ``{shape: family}`` of the shapes
    of this task's hosts, for the driver to hand to the next layer's tasks)."""
    from gridcrawl.client.store import Outcome, Pending
    from gridcrawl.client.traps import TrapDetector
    from gridcrawl.executor.fetch import Fetcher
    from gridcrawl.executor.pacing import HostPacer
    from gridcrawl.executor.page import visit
    from gridcrawl.executor.robots import RobotsCache
    from gridcrawl.manager.core import retry_wait
    from gridcrawl.manager.queue import ReadyQueue
    from gridcrawl.protocol import PageResult
    from gridcrawl.client.app import base_instruction, thread_instruction
    from gridcrawl.plugins import installed_plugins
    from gridcrawl.semantic import Limits

    started = time.monotonic()
    s: Settings = config.settings
    strategy = config.strategy
    try:
        from pyspark import TaskContext
        context = TaskContext.get()
        attempt = context.attemptNumber() if context is not None else 0
    except ImportError:  # called without Spark (a unit test of the stage)
        attempt = 0
    fail_on = config.fail_first_attempt_on if attempt == 0 else None

    ready = ReadyQueue(s.concurrent_requests_per_host, s.download_delay, s.max_crawl_delay)
    total = 0
    netlocs: set = set()
    for host, row in rows:
        pending = Pending(*row)
        ready.push(_Job(pending, host, pending.priority if strategy.order == "priority" else 5))
        netlocs.add(urlsplit(pending.url).netloc.lower())
        total += 1
    for host, (last_finish, crawl_delay) in politeness.items():
        if host in ready.hosts:  # the previous layer's last fetch of the host: wait out its delay
            ready.release(_Job(None, host, 5), last_finish, crawl_delay=crawl_delay)
    if total == 0:
        yield ("s", {"partition": index, "pages": 0, "errors": 0, "disallowed": 0, "fetch_seconds": 0.0, "parse_seconds": 0.0,
                     "write_seconds": 0.0, "wall_seconds": 0.0, "peak_rss": _peak_rss(), "hosts": {}, "traps": {}})
        return

    # as an executor's (executor/agent.py): robots.txt and redirect hops spaced by the host's delay
    fetcher = Fetcher.from_settings(s, config.allow_private, pacer=HostPacer(), max_wait=s.thread_timeout / 2)
    robots = RobotsCache.for_fetcher(fetcher, retry_after=s.robots_retry) if s.obey_robots else None
    instruction = base_instruction(config.scope, s, strategy)
    # as an executor (executor/agent.py): the semantic parse's bounds, the extractor plugins installed here
    limits = Limits(max_bytes=s.rdf_max_bytes, max_triples=s.max_triples, deadline=s.rdf_parse_deadline)
    plugins = installed_plugins()
    lock = threading.Condition()
    done = [0]
    results: queue_mod.Queue = queue_mod.Queue()
    stopped = [False]  # set when the task ends (normally or not): idle workers return
    broken: list[BaseException] = []  # a worker's own failure (not a page's): the task fails, never waits

    def worker() -> None:
        try:
            work()
        except BaseException as exc:  # the task raises it, chained (not threading's excepthook: once)
            broken.append(exc)
            results.put(None)

    def work() -> None:
        while True:
            with lock:
                while True:
                    if done[0] >= total or stopped[0]:
                        return
                    now = time.time()
                    job = ready.pop(now)
                    if job is not None:
                        delay = ready.delay_of(job.host)  # as a grid thread's job carries it
                        break
                    wake = ready.next_wakeup()
                    lock.wait(timeout=max(0.01, min(0.5, wake - now)) if wake is not None else 0.5)
            pend = job.pending
            mine, _ = thread_instruction(instruction, strategy, pend, seeds=True)  # plugin needs: the task's own
            try:
                page = visit(fetcher, pend.url, instruction=mine, robots=robots, semantic_limits=limits,
                             plugins=plugins, plugin_timeout=s.plugin_timeout, max_links=s.max_links_per_page,
                             delay=delay, max_crawl_delay=s.max_crawl_delay)
            except Exception as exc:  # visit never raises for what the web sends; keep the task alive
                page = PageResult(url=pend.url, final_url=pend.url, error_kind="crash", error=repr(exc)[:1000])
            with lock:
                now = time.time()
                ready.release(job, now, status=page.status, retry_after=page.retry_after,
                              crawl_delay=page.crawl_delay, answered=True)  # the host may have its concurrency
                wait = retry_wait(page, job.retries, s)
                if wait is not None:
                    job.retries += 1
                    ready.push(job, not_before=now + wait)
                else:
                    done[0] += 1
                    results.put(Outcome(pend, page, None, job.retries + 1, False))
                lock.notify_all()

    workers = [threading.Thread(target=worker, name=f"spark-fetch-{index}-{i}", daemon=True)
               for i in range(min(s.threads, total))]
    for w in workers:
        w.start()
    store = _task_store(config)
    # the template-trap rule counts a family's pages over the whole crawl, as the grid's client does:
    # this task starts from what the earlier layers' tasks (any process, any machine) learnt of its hosts
    detector = store.traps = (TrapDetector(config.scope.trap_near_duplicates, config.scope.trap_distance)
                              if config.scope.trap_near_duplicates > 0 else None)
    if detector is not None:
        detector.learn(traps or {})
    figures = {"partition": index, "pages": 0, "errors": 0, "disallowed": 0, "fetch_seconds": 0.0,
               "parse_seconds": 0.0, "write_seconds": 0.0}
    batch: list = []
    received = 0
    try:
        while received < total:
            item = results.get()
            if item is None:
                raise RuntimeError(f"a download worker of partition {index} failed: {broken[0]!r}") from broken[0]
            received += 1
            batch.append(item)
            host = config.scope.redirected_seed(item.pending, item.page)  # this task's copy: its links follow
            if host is not None:
                figures.setdefault("scope_hosts", []).append(host)
            if len(batch) >= s.apply_batch or received == total:
                yield from _write_batch(store, config, batch, figures)
                if fail_on and any(fail_on in o.pending.url for o in batch):
                    raise _InjectedFailure(f"test hook: the first attempt fails after writing {fail_on}")
                batch = []
    finally:
        with lock:
            stopped[0] = True
            lock.notify_all()
        for w in workers:
            w.join(timeout=s.download_timeout + 5)
        fetcher.close()
        if robots is not None:
            robots.fetcher.close()
    hosts = {name: (h.last_finish, h.crawl_delay) for name, h in ready.hosts.items()
             if h.delay > 0 and h.last_finish > float("-inf")}
    figures.update(wall_seconds=time.monotonic() - started, peak_rss=_peak_rss(), hosts=hosts,
                   traps=detector.families(netlocs) if detector is not None else {})
    yield ("s", figures)


def _write_batch(store, config: TaskConfig, outcomes: list, figures: dict) -> Iterator[tuple]:
    """Write a batch's documents and kept links; yield its visited rows and link rows."""
    started = time.monotonic()
    rows = store.rows(outcomes, config.scope, store_content=config.settings.store_content)
    store.write_documents(rows)
    figures["write_seconds"] += time.monotonic() - started
    figures["pages"] += len(outcomes)
    figures["errors"] += rows.errors
    maps = {o.pending.fingerprint for o in outcomes if o.pending.kind is not None}  # a sitemap file is no page
    figures["disallowed"] += sum(v["error_kind"] in DISALLOWED and v["fingerprint"] not in maps for v in rows.visits)
    for o in outcomes:
        if o.page is not None:
            figures["fetch_seconds"] += o.page.fetch_seconds or 0.0
            figures["parse_seconds"] += o.page.parse_seconds or 0.0
    yield ("v", rows.visits, rows.thread_ids, rows.traps)
    for fp, row in rows.links.items():
        yield ("l", fp, row)


def _peak_rss() -> int:
    """Peak resident memory of this process, bytes (Linux reports KiB; macOS bytes)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024


def better_link(a: dict, b: dict) -> dict:
    """Of two to_visit rows with one fingerprint, the one with the higher relevance (the first
    on a tie): the optimise stage's ``reduceByKey`` (ParaCA's ``distinct``)."""
    return b if (b.get("relevance") or 0.0) > (a.get("relevance") or 0.0) else a


def queue_partition(config: TaskConfig, capped, sites, pairs: Iterable) -> Iterator[tuple]:
    """The optimise stage's write: queue one partition's new ``(fingerprint, to_visit_row)``
    pairs in batches of 1,000 with :meth:`CrawlStore.queue_links`, adding the links the
    per-host cap left out to ``capped`` (a Spark accumulator of ints); yield ``(fingerprint,
    None)`` for every row offered (the fingerprints now known).

    ``sites`` (a broadcast of :meth:`CrawlStore.site_counts`, read by the driver before the
    stage, or None) is what the cap counts from; the pairs are partitioned by site
    (:meth:`Scope.site`), so one task owns each site's new links and the cap is exact."""
    store = _task_store(config)
    if sites is not None:
        store.start_site_counts(sites.value)
    batch: list = []
    for pair in pairs:
        batch.append(pair)
        if len(batch) >= 1000:
            yield from _queue_batch(store, config, capped, batch)
            batch = []
    if batch:
        yield from _queue_batch(store, config, capped, batch)


def _queue_batch(store, config: TaskConfig, capped, batch: list) -> Iterator[tuple]:
    left_out = store.queue_links([row for _, row in batch], config.scope)
    if left_out:
        capped.add(left_out)
    for fp, _ in batch:
        yield (fp, None)


def commit_partition(config: TaskConfig, records: Iterable) -> None:
    """The commit stage: write each ``("v", visited_rows, thread_ids, trap_rows)`` record
    (visited rows in, the layer's to_visit rows out, the links into template traps recorded as
    on the grid) in one transaction each."""
    from gridcrawl.client.store import Rows
    store = _task_store(config)
    for _, visits, thread_ids, traps in records:
        store.write_visits(Rows([], visits, {}, [], thread_ids, traps=traps))


def known_fingerprints(config: TaskConfig, part: int, parts: int) -> Iterator[str]:
    """Fingerprints of ``visited_url`` and ``to_visit_url`` rows whose id is ``part`` modulo
    ``parts``: one slice of what the crawl already knows, read by one task."""
    store = _task_store(config)
    with store.engine.connect() as conn:
        for table in (models.visited_url, models.to_visit_url):
            yield from conn.execute(sa.select(table.c.fingerprint).where(table.c.id % parts == part)).scalars()


# ---------------------------------------------------------------------------------- the driver


@dataclass
class LayerFigures:
    """What one layer did: its number and depth, URLs, pages fetched (errors and the pages
    robots.txt disallowed, ``disallowed``, included: not errors), new
    links (those the per-host cap left out included), new links the per-host cap left out
    (``capped``), seconds of each stage (wall time on the driver; ``fetch``/``parse``/``write``
    summed over the tasks), and the largest peak RSS of the Python workers that ran its
    download tasks (bytes)."""

    layer: int
    depth: int
    urls: int
    pages: int = 0
    errors: int = 0
    disallowed: int = 0
    queued: int = 0
    capped: int = 0
    download_seconds: float = 0.0
    optimise_seconds: float = 0.0
    commit_seconds: float = 0.0
    fetch_seconds: float = 0.0
    parse_seconds: float = 0.0
    write_seconds: float = 0.0
    peak_worker_rss: int = 0

    @property
    def seconds(self) -> float:
        """Wall seconds of the layer's three stages."""
        return self.download_seconds + self.optimise_seconds + self.commit_seconds


@dataclass
class SparkResult:
    """A Spark crawl's figures: pages visited in this run, seconds, and each layer's figures."""

    pages: int = 0
    seconds: float = 0.0
    layers: list[LayerFigures] = field(default_factory=list)

    @property
    def pages_per_second(self) -> float:
        """Pages visited per second of this run."""
        return self.pages / max(self.seconds, 1e-9)


class SparkCrawl:
    """A crawl of ``store``'s tables on the Spark context ``sc``: ``SparkCrawl(...).run(stop)``.

    Args:
        sc: a ``pyspark.SparkContext`` (:func:`spark_context`).
        store: the crawl's :class:`~gridcrawl.client.store.CrawlStore` (seeds already queued).
        db: the crawl database's SQLAlchemy URL, which every task opens (a server database on a
            cluster; SQLite only in local mode).
        settings: the crawl's :class:`Settings` (politeness, fetching, ``max_pages``,
            ``apply_batch``, ``spark_partitions``, ``spark_layer_urls``).
        scope: the crawl's :class:`~gridcrawl.client.frontier.Scope`.
        allow_private: CIDRs the tasks' SSRF guard lets through (the seeds' own addresses).
        on_layer: called with each finished layer's :class:`LayerFigures` and the running
            :class:`SparkResult`.
        on_wait: called every ``wait_seconds`` while a layer's download stage runs (a host's
            crawl delay, or one that does not answer, can hold it for minutes) with the layer's
            :class:`LayerFigures` (number, depth, URLs), the seconds the stage has run, and the
            tasks of the running stages done and in all (Spark's status tracker).
        wait_seconds: seconds between two ``on_wait`` calls (> 0).
        fail_first_attempt_on: test hook (:class:`TaskConfig`).
    """

    def __init__(self, sc, store, db: str, settings: Settings, scope, *, allow_private: Iterable[str] = (),
                 on_layer: Callable[[LayerFigures, SparkResult], None] | None = None,
                 on_wait: Callable[[LayerFigures, float, int, int], None] | None = None,
                 wait_seconds: float = 60.0,
                 fail_first_attempt_on: str | None = None) -> None:
        import uuid
        self.sc = sc
        self.store = store
        self.settings = settings
        self.partitions = settings.spark_partitions or 2 * sc.defaultParallelism
        self.config = TaskConfig(db, settings, scope, store.strategy, list(allow_private), uuid.uuid4().hex,
                                 fail_first_attempt_on)
        self.on_layer = on_layer
        self.on_wait = on_wait
        self.wait_seconds = wait_seconds
        from gridcrawl.client.traps import TrapDetector
        #: the crawl's template-trap state, learnt from the tasks and handed to the next layer's
        self.traps = TrapDetector(scope.trap_near_duplicates, scope.trap_distance)

    def run(self, stop: threading.Event | None = None) -> SparkResult:
        """Crawl layer by layer until the frontier is empty, ``max_pages`` URLs were visited by
        the whole crawl (earlier runs included), or ``stop`` is set (checked between layers).
        Claimed rows of an unfinished layer are handed back (not in flight) on the way out.
        Raises what Spark raises when a task fails all its attempts (the tables keep everything
        committed; run again to resume)."""
        from pyspark import StorageLevel
        sc, config, parts = self.sc, self.config, self.partitions
        result = SparkResult()
        started = time.monotonic()
        self.store.release_all()  # rows an interrupted run (Spark or grid) had claimed
        # max_pages bounds the whole crawl, earlier runs included (as on the grid)
        visited_before = self.store.counts()["visited"] if self.settings.max_pages else 0
        known = (sc.parallelize(range(parts), parts)
                 .flatMap(functools.partial(_known_slice, config, parts))
                 .map(lambda fp: (fp, None)).partitionBy(parts))
        known.localCheckpoint()
        self._known_total = known.count()
        politeness: dict = {}
        layer = 0
        claimed: list[int] = []
        try:
            while not (stop is not None and stop.is_set()):
                budget = (self.settings.max_pages - visited_before - result.pages) if self.settings.max_pages else None
                if budget is not None and budget <= 0:
                    break
                depth = self._next_depth()
                if depth is None:
                    break
                limit = min(budget, self.settings.spark_layer_urls) if budget else self.settings.spark_layer_urls
                pendings = self.store.claim(limit, depth=depth)
                if not pendings:
                    break
                claimed = [x.thread_id for x in pendings]
                layer += 1
                figures = LayerFigures(layer, depth, len(pendings))
                known, politeness = self._layer(pendings, known, politeness, figures, StorageLevel)
                claimed = []
                result.pages += figures.pages
                result.layers.append(figures)
                result.seconds = time.monotonic() - started
                if self.on_layer is not None:
                    self.on_layer(figures, result)
        finally:
            if claimed:
                self.store.release(claimed)
            known.unpersist()
        result.seconds = time.monotonic() - started
        return result

    @contextlib.contextmanager
    def _waiting(self, figures: LayerFigures, started: float):
        """While the block runs, call ``on_wait`` every ``wait_seconds`` from a thread of its own
        (the driver's thread waits in ``collect()``)."""
        if self.on_wait is None:
            yield
            return
        done = threading.Event()

        def tell() -> None:
            while not done.wait(self.wait_seconds):
                finished = total = 0
                try:
                    tracker = self.sc.statusTracker()
                    for stage in tracker.getActiveStageIds():
                        info = tracker.getStageInfo(stage)
                        if info is not None:
                            finished, total = finished + info.numCompletedTasks, total + info.numTasks
                except Exception:  # noqa: BLE001 - the figures are a courtesy; the JVM may be stopping
                    pass
                if not done.is_set():
                    self.on_wait(figures, time.monotonic() - started, finished, total)
        teller = threading.Thread(target=tell, name="spark-layer-wait", daemon=True)
        teller.start()
        try:
            yield
        finally:
            done.set()
            teller.join(5)

    def _next_depth(self) -> int | None:
        """The lowest depth of an unclaimed to-visit row, or None when there is none."""
        to_visit = models.to_visit_url
        with self.store.engine.connect() as conn:
            return conn.execute(sa.select(sa.func.min(to_visit.c.depth))
                                .where(to_visit.c.in_flight == sa.false())).scalar()

    def _layer(self, pendings: list, known, politeness: dict, figures: LayerFigures, StorageLevel):
        """Run one layer's three stages; return the grown known-fingerprint RDD and the
        politeness state for the next layer."""
        from gridcrawl.urls import url_host
        sc, config, parts = self.sc, self.config, self.partitions
        frontier = (sc.parallelize([(url_host(x.url), dataclasses.astuple(x)) for x in pendings],
                                   min(parts, len(pendings)))
                    .partitionBy(parts, host_partition))
        hosts_state = sc.broadcast(politeness)
        traps_state = sc.broadcast(self.traps.families({urlsplit(x.url).netloc.lower() for x in pendings}))
        downloaded = frontier.mapPartitionsWithIndex(
            functools.partial(_download_with_broadcast, config, hosts_state, traps_state), preservesPartitioning=True)
        downloaded.persist(StorageLevel.MEMORY_AND_DISK)
        try:
            t = time.monotonic()
            with self._waiting(figures, t):
                stats = downloaded.filter(lambda r: r[0] == "s").map(lambda r: r[1]).collect()
            figures.download_seconds = time.monotonic() - t
            new_politeness = dict(politeness)
            for st in stats:
                figures.pages += st["pages"]
                figures.errors += st["errors"]
                figures.disallowed += st.get("disallowed", 0)
                figures.fetch_seconds += st["fetch_seconds"]
                figures.parse_seconds += st["parse_seconds"]
                figures.write_seconds += st["write_seconds"]
                figures.peak_worker_rss = max(figures.peak_worker_rss, st["peak_rss"])
                new_politeness.update(st["hosts"])
                self.traps.learn(st["traps"])  # one task owns a host, and so its shapes, in a layer
                for host in st.get("scope_hosts", ()):  # a seed redirected there: the scope takes it in
                    if config.scope.widen(host):
                        self.store.keep_scope(config.scope.allowed_domains)
                        log.info("a seed redirects to %s: it joins the crawl's scope", host)

            t = time.monotonic()
            capped, sites = sc.accumulator(0), None
            fresh = (downloaded.filter(lambda r: r[0] == "l").map(lambda r: (r[1], r[2]))
                     .reduceByKey(better_link, parts)
                     .subtractByKey(known, parts))
            if config.scope.max_pages_per_host:  # one task owns each site's links, counted from the tables
                sites = sc.broadcast(dict(self.store.site_counts(config.scope)))
                fresh = (fresh.map(functools.partial(_by_site, config.scope))
                         .partitionBy(parts, host_partition).values()
                         .mapPartitions(functools.partial(queue_partition, config, capped, sites))
                         .partitionBy(parts))
            else:
                fresh = fresh.mapPartitions(functools.partial(queue_partition, config, capped, None),
                                            preservesPartitioning=True)
            grown = known.union(fresh)
            grown.localCheckpoint()
            total = grown.count()
            figures.queued = total - self._known_total
            figures.capped = capped.value
            if sites is not None:
                sites.unpersist()
            figures.optimise_seconds = time.monotonic() - t

            t = time.monotonic()
            downloaded.filter(lambda r: r[0] == "v").foreachPartition(functools.partial(commit_partition, config))
            figures.commit_seconds = time.monotonic() - t
        finally:
            downloaded.unpersist()
            hosts_state.unpersist()
            traps_state.unpersist()
        known.unpersist()
        self._known_total = total
        return grown, new_politeness



def _by_site(scope, pair: tuple) -> tuple:
    """``(fingerprint, to_visit_row)`` keyed by the row's site for the per-host cap:
    ``(site, (fingerprint, row))``."""
    return (scope.site(pair[1]["url"]), pair)


def _known_slice(config: TaskConfig, parts: int, part: int) -> Iterator[str]:
    return known_fingerprints(config, part, parts)


def _download_with_broadcast(config: TaskConfig, politeness, traps, index: int, rows) -> Iterator[tuple]:
    return download_partition(config, politeness.value, index, rows, traps.value)


__all__ = ["INSTALL_HINT", "JAVA_HINT", "LayerFigures", "SparkCrawl", "SparkResult", "SparkUnavailable", "TaskConfig", "check_master",
           "spark_error", "stop_spark", "sweep_local_dirs",
           "better_link", "commit_partition", "download_partition", "host_partition", "known_fingerprints",
           "local_master", "queue_partition", "quiet_spark_log", "spark_context", "spark_unavailable"]
