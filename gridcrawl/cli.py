"""``gridcrawl``: the whole grid on one machine (``run``), the crawl on Apache Spark (``spark``),
thread timings (``report``),
database set-up (``db init``), CURVE key pairs (``keys new``), exports of a crawl (``export``)
and the effective configuration (``config show``)."""

from __future__ import annotations

import logging
import os
import shlex
import signal
import socket
import subprocess
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import List

import typer

from gridcrawl.cli_common import (FORK, SETTING_OPTIONS, STOP_SIGNALS, ChildWatch, StopEvent, check_wait_for, cidr,
                                  domain, fail, secret_environment, set_for, setting_argv, setting_options,
                                  setup_logging, stop_on_signals, take_lock)
from gridcrawl.config import CONFIG_ENV, run_program, settings as configured_settings
from gridcrawl.entry import exit_by_signal, how_it_ended
from gridcrawl.errors import DatabaseUnavailable
from gridcrawl.settings import Settings
from gridcrawl.words import counted
from gridcrawl.client.cli import RETRY_HELP, SEEDS_FILE_HELP

app = typer.Typer(add_completion=False, rich_markup_mode="markdown", no_args_is_help=True,
                  help="gridcrawl: a grid web crawler (manager, executors, client).")
db_app = typer.Typer(add_completion=False, rich_markup_mode="markdown", no_args_is_help=True,
                     help="Database set-up.")
app.add_typer(db_app, name="db")
keys_app = typer.Typer(add_completion=False, rich_markup_mode="markdown", no_args_is_help=True,
                       help="CURVE key pairs for encrypted connections (docs/security.md).")
app.add_typer(keys_app, name="keys")
config_app = typer.Typer(add_completion=False, rich_markup_mode="markdown", no_args_is_help=True,
                         help="The configuration: TOML file (--config), GRIDCRAWL_* "
                         "variables, command-line options (docs/operations.md).")
app.add_typer(config_app, name="config")


#: Under the options of the commands that take settings: ``--config`` is read from anywhere on
#: the command line, but declared only on ``gridcrawl`` itself.
SETTINGS_EPILOG = ("Settings also come from a TOML file: --config FILE, before or after the command, or "
                   "$GRIDCRAWL_CONFIG; then GRIDCRAWL_* variables; then these options (docs/operations.md).")


@app.callback()
def _options(
    config_file: Path = typer.Option(None, "--config", show_default=False,
                                     help="TOML configuration file for every command (also $GRIDCRAWL_CONFIG; "
                                     "then GRIDCRAWL_* variables, then options; docs/operations.md)"),
) -> None:
    """gridcrawl: a grid web crawler (manager, executors, client)."""
    # --config is read (and taken out of the command line) by gridcrawl.config.run_program before
    # typer runs; it is declared here so that `gridcrawl --help` lists it


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _stop(processes: list, timeout: float = 5.0) -> None:
    """SIGTERM every process (:class:`subprocess.Popen` or :class:`ForkedChild`), the last
    started first (the executors say goodbye to a manager that still listens, rather than
    hearing it leave), wait up to ``timeout`` seconds for their exit, then SIGKILL what is left."""
    for proc in reversed(processes):
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + timeout
    for proc in processes:
        try:
            proc.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


#: The sections of ``gridcrawl run --help`` and ``gridcrawl spark --help`` the options generated
#: from Settings go to (by their group).
RUN_PANELS = {"scope": "Scope and politeness", "politeness": "Scope and politeness", "strategy": "Strategy",
              "recrawl": "Recrawl"}


@app.command(short_help="Crawl SEEDS with a manager, executors and a client on this machine.", epilog=SETTINGS_EPILOG)
@setting_options("run", RUN_PANELS)
def run(
    ctx: typer.Context,
    seeds: List[str] = typer.Argument(None, help="seed URLs (none: the --rules base URLs, or resume WORKDIR's crawl)"),
    executors: int = typer.Option(2, help="executor processes to start"),
    given: dict = SETTING_OPTIONS,
    allow_domain: List[str] = typer.Option(None, parser=domain, help="also crawl this domain and its subdomains "
                                           "(repeatable)", metavar="DOMAIN"),
    workdir: Path = typer.Option(Path("gridcrawl-run"), help="folder for the SQLite databases and logs"),
    rules: str = typer.Option(None, help="keep/follow rules file (.toml or .csv, docs/strategies.md); "
                              "its base URLs are seeds", rich_help_panel="Strategy"),
    focus: str = typer.Option(None, help='focused crawl: keywords, e.g. "crawler politeness" (frontier by relevance)',
                                                     rich_help_panel="Strategy"),
    min_relevance: float = typer.Option(None, help="focused crawl: links scoring below this (0..1) are not followed [0]",
                                                     rich_help_panel="Strategy"),
    order: str = typer.Option(None, help="frontier order: bfs, dfs or priority [bfs; priority with --focus]",
                                    rich_help_panel="Strategy"),
    structured_data: bool = typer.Option(False, "--structured-data", help="semantic crawl: read RDF documents and "
                                         "the JSON-LD, microdata, RDFa and Open Graph of pages into the triple table",
                                         rich_help_panel="Strategy"),
    focus_ontology: Path = typer.Option(None, help="focused crawl guided by an ontology (Turtle, RDF/XML, OWL); "
                                        "implies --structured-data", rich_help_panel="Strategy"),
    extract: str = typer.Option(None, help="item spec file (TOML, docs/items.md): items extracted from the pages "
                                "on the executors, into the crawl database's item table", rich_help_panel="Strategy"),
    allow_private: List[str] = typer.Option(None, parser=cidr, help="let the executors fetch this private CIDR too "
                                            "(repeatable, or comma-separated; the seeds' own private or loopback "
                                            "addresses are always allowed)",
                              metavar="CIDR"),
    seeds_file: str = typer.Option(None, help=SEEDS_FILE_HELP, metavar="FILE"),
    retry_failed: str = typer.Option(None, metavar="all|KIND,...", help=RETRY_HELP),
    render: bool = typer.Option(False, "--render", help="render every page in a headless browser: the executors "
                                "start one each (pip install 'gridcrawl[render]' and Chromium)",
                                rich_help_panel="Strategy"),
    wait_for: str = typer.Option(None, help="with --render: a CSS selector the browser waits for before taking "
                                 "the DOM (default: until the network is idle)", rich_help_panel="Strategy"),
    recrawl: bool = typer.Option(False, "--recrawl", help="visit again WORKDIR's stored documents whose next "
                                 "visit is due (conditional requests; docs/recrawl.md)", rich_help_panel="Recrawl"),
    recrawl_all: bool = typer.Option(False, "--recrawl-all", help="like --recrawl, but every stored document",
                                     rich_help_panel="Recrawl"),
    watch: bool = typer.Option(False, "--watch", help="with --recrawl: stay open and visit documents as they "
                               "come due, until stopped (SIGINT/SIGTERM)", rich_help_panel="Recrawl"),
    progress: bool = typer.Option(True, help="show a progress bar", rich_help_panel="Output"),
    log_level: str = typer.Option("WARNING", help="log level of this process (the others log to WORKDIR)",
                                        rich_help_panel="Output"),
    http: str = typer.Option(None, help="serve the manager's live dashboard on HOST:PORT, e.g. 127.0.0.1:9080"),
) -> None:
    """Run a manager, EXECUTORS executor processes and a client on this machine and crawl SEEDS.

    Databases: WORKDIR/manager.db (thread timings) and WORKDIR/crawl.db (documents); logs:
    WORKDIR/*.log. Running it again with the same WORKDIR resumes the crawl; seeds of another
    site are refused in the default WORKDIR's crawl, added to a given WORKDIR's.
    """
    from gridcrawl.db import open_database, utcnow
    setup_logging(log_level)
    workdir = workdir.expanduser()  # --workdir=~/crawl-1: no shell expands a ~ after "=" (it made a folder "~")
    if executors < 1:
        fail("--executors must be at least 1")
    from gridcrawl.client.cli import recrawl_mode
    mode = recrawl_mode(recrawl, recrawl_all, watch)
    try:
        settings = configured_settings(ctx, **given)
        _check_fetching(settings)
    except ValueError as exc:
        fail(str(exc))
    if os.environ.get(CONFIG_ENV):  # the sections of the programs this command starts, before they start
        from gridcrawl.config import ConfigError, check_program
        for module, program in (("gridcrawl.manager.cli", "manager"), ("gridcrawl.executor.cli", "executor"),
                                ("gridcrawl.client.cli", "client")):
            try:
                check_program(module, program)
            except ConfigError as exc:
                fail(str(exc))
    passed = set_for(ctx, "run")  # what the programs it starts are given; the rest they resolve themselves
    if settings.connect_timeout == Settings.connect_timeout:
        # the manager is this command's own child: on a loaded machine it may need longer to start
        settings = settings.replace(connect_timeout=60.0)
        passed.add("connect_timeout")
    from gridcrawl.client.cli import exit_status, parse_retry_kinds, rerun_command, run_crawl, seed_list
    seeds = seed_list(seeds or [], seeds_file)
    crawl_db = f"sqlite:///{(workdir / 'crawl.db').resolve()}"
    resumed = (workdir / "crawl.db").exists()  # (a new crawl need not load the database layer here)
    if resumed:  # before the crawl database's first transaction: it waits silently while an extract writes
        _refuse_locked_crawl(workdir)
    rendering = render or (resumed and _stored_render(crawl_db))
    if rules is not None:  # refuse bad rules before any process starts
        from gridcrawl.rules import RuleError, load_page_types, load_rules
        try:
            rule_list = load_rules(rules)
            rendering = rendering or any(t.render for t in load_page_types(rules, rule_list).values())
        except RuleError as exc:
            fail(f"invalid rules: {exc}")
    specs = []
    if extract is not None:  # refuse a bad item spec before any process starts
        from gridcrawl.client.cli import check_item_spec, refuse_unknown_page_types
        specs = check_item_spec(extract)
        if rules is not None or not resumed:  # a resumed crawl's stored rules are checked by the client
            refuse_unknown_page_types(extract, specs, rule_list if rules is not None else [])
    elif resumed:
        specs = _stored_specs(crawl_db)
    rendering = any(spec.render for spec in specs) or rendering
    _refuse_missing_plugins(specs)
    check_wait_for(wait_for, rendering)
    if not rendering and (unused := _on_command_line(ctx, "render_timeout", "render_pages", "browser_path")):
        fail(f"{' and '.join(unused)} {'go' if len(unused) > 1 else 'goes'} with --render (or a page type or item "
             "spec with render = true): no page is rendered")
    if not resumed and mode is not None:  # before any process starts or any file is made
        fail(f"nothing to recrawl: {workdir} holds no crawl yet; crawl first, then recrawl (gridcrawl run "
             f"{shlex.join(seeds) if seeds else 'URL'} --workdir {shlex.quote(str(workdir))})")
    if not resumed and mode is None and _on_command_line(ctx, "keep_versions"):
        fail(f"--keep-versions keeps the bodies a recrawl replaces, and {workdir} holds no crawl yet: a first crawl "
             f"replaces nothing, and the option is not stored with the crawl; give it to the recrawls "
             f"(gridcrawl run --recrawl --keep-versions --workdir {workdir})")
    if rendering:  # refuse --render before any process starts when this machine cannot render
        from gridcrawl.executor.render import RenderUnavailable, Renderer
        try:
            Renderer.check_installed(settings.browser_path or None)
        except RenderUnavailable as exc:
            fail(str(exc))
    if order is not None and order not in ("bfs", "dfs", "priority"):
        fail(f"--order must be one of bfs, dfs, priority, not {order!r}")
    if not resumed:  # before WORKDIR and its crawl database are made (the client checks a resumed crawl's)
        from gridcrawl.client.cli import check_new_strategy
        check_new_strategy(focus=focus, focus_ontology=focus_ontology, min_relevance=min_relevance, order=order,
                           retry_failed=parse_retry_kinds(retry_failed))
    if http:  # before any process starts: an address the run's manager cannot serve
        from gridcrawl.manager.dashboard import DashboardError, is_loopback, parse_address
        try:
            host, _ = parse_address(http)
        except DashboardError as exc:
            fail(str(exc))
        if not is_loopback(host):
            fail(f"--http {http}: gridcrawl run's dashboard serves on loopback only (127.0.0.1:PORT): its "
                 "manager has no users to log in with. For a dashboard other hosts reach, run "
                 "gridcrawl-manager with users and --http (docs/operations.md), or reach this one "
                 "through an SSH tunnel")
    if not seeds and rules is None and not resumed:
        fail(f"no seed URLs given and no crawl to resume in {workdir} (give a seed: gridcrawl run URL)")
    if seeds and resumed and getattr(ctx.get_parameter_source("workdir"), "name", "") == "DEFAULT":
        other, stored = _another_crawl(crawl_db, seeds)
        if other:
            fail(f"{workdir} (the default --workdir) holds another crawl (of {other}), which none of the seeds "
                 f"is part of: give --workdir DIR for a crawl of their own, or --workdir {workdir} to add "
                 f"them to that one" + ("" if stored else f", or remove {workdir} (it stored no page) to "
                                                          f"start over"))
    if workdir.exists() and not workdir.is_dir():
        fail(f"--workdir {workdir} is a file, not a directory")
    try:
        workdir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        fail(f"cannot use --workdir {workdir}: {exc.strerror or exc}")
    lock = _lock_workdir(workdir)  # held, by this process and the children it forks, until they end
    hosts = [*seeds, *(allow_domain or []), *(_stored_hosts(crawl_db) if resumed else [])]
    if rules is not None:
        hosts += [r.base_url for r in load_rules(rules)]
    _warn_anonymous(settings, hosts)
    try:
        private = _private_networks(hosts, allow_private or [])
    except ValueError as exc:
        fail(str(exc))
    endpoint = f"tcp://127.0.0.1:{_free_port()}"
    manager_db = f"sqlite:///{(workdir / 'manager.db').resolve()}"
    children = ChildWatch()  # they stop when this process dies, even by kill -9
    os.environ.update(secret_environment(settings, "executor"))  # the proxy's password: not on a command line
    if settings.threads > settings.max_threads_per_executor:
        # its executors are its own: a manager believes no more than this cap of any executor's
        # threads, so --threads 100 ran 64 of them, said only in manager.log
        os.environ["GRIDCRAWL_MAX_THREADS_PER_EXECUTOR"] = str(settings.threads)
    _prefork("manager.cli", "manager.server")
    # a Ctrl-C during the forks waits for stop_on_signals below: as a KeyboardInterrupt inside
    # os.fork's after-fork hook it was swallowed ("Exception ignored"), leaving the logging lock
    # held, and the run hung after its summary
    held = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS) if FORK else None
    processes: list = []
    watch_children = None
    try:
        processes.append(children.start("gridcrawl.manager", [
            "--bind", endpoint, "--db", manager_db, "--log-file", str(workdir / "manager.log"),
            *setting_argv(settings, "manager", only=passed), *(["--http", http] if http else [])]))
        # the manager starts (database, lease, bind) while this process imports the executors' modules
        _prefork("executor.cli", "executor.agent")
        for i in range(executors):
            processes.append(children.start("gridcrawl.executor", [
                "--manager", endpoint, *setting_argv(settings, "executor", only=passed),
                "--name", f"executor-{i + 1}", "--log-file", str(workdir / f"executor-{i + 1}.log"),
                "--dedicated",  # this machine's crawl: not an [executor] idle_only of the configuration file
                *(arg for cidr in private for arg in ("--allow-private", cidr)),
                *(["--render"] if rendering else [])]))
        stop = stop_on_signals()  # after the forks: the children set up their own
        if held is not None:
            signal.pthread_sigmask(signal.SIG_SETMASK, held)  # a signal held meanwhile reaches the handler now
            held = None
        rerun = rerun_command("gridcrawl")
        watch_children = _ChildrenWatch(processes, stop, workdir, rerun)

        run_started: list = []  # when this run's first thread is about to go: its table counts the threads
        # finished from there (a resumed crawl's application, and its threads left running, live on)

        def before_crawl() -> None:  # the database and seeds are ready: wait for the whole grid
            _wait_for_executors(processes, manager_db, executors, settings.connect_timeout, workdir)
            watch_children.start()
            run_started.append(utcnow())
            if http:  # the manager serves it by now (a port taken has ended the manager, and the wait)
                from gridcrawl.manager.dashboard import parse_address  # valid: the manager serves it
                host, port = parse_address(http)
                typer.echo(f"dashboard: http://{f'[{host}]' if ':' in host else host}:{port}/ (while the crawl runs)",
                           err=True)

        counts = run_crawl(settings, endpoint, crawl_db, seeds,
                           allow_domain or [], name="gridcrawl run", show_progress=progress,
                           rules=rules, focus=focus, min_relevance=min_relevance, order=order,
                           render=render or None, wait_for=wait_for,
                           recrawl=mode, watch=watch, extract=extract,
                           structured_data=structured_data, focus_ontology=focus_ontology, stop=stop,
                           before_crawl=before_crawl, command="gridcrawl run",
                           retry_failed=parse_retry_kinds(retry_failed), manager_db=manager_db,
                           rerun=rerun,
                           files=[("manager database", manager_db),
                                  ("logs", str(workdir / "manager.log") + ", " + str(workdir / "executor-*.log"))])
    finally:
        if held is not None:
            signal.pthread_sigmask(signal.SIG_SETMASK, held)
        if watch_children is not None:
            watch_children.close()
        _stop(processes)
        if lock is not None:
            lock.close()
    if watch_children.failure:
        fail(watch_children.failure + (_pages_in_flight(manager_db, counts.get("application_id"))
                                       if watch_children.executors_gone else ""))
    from gridcrawl.report import executor_timings
    # this run's threads: the summary's "pages this run" and its sitemap files read (an application
    # lives on when resumed)
    timings = executor_timings(open_database(manager_db), counts.get("application_id"),
                               since=run_started[0] if run_started else None)
    if timings:
        _print_timings(timings)
    exit_status(counts)


def _pages_in_flight(manager_db: str, application_id: str | None) -> str:
    """The end of the line of a crawl whose executors all exited: the pages they had (one that
    ends its executor, as an extractor plugin calling os._exit or a crash in a native library
    does, ends every executor it is retried on), or "" when none is known."""
    import sqlalchemy as sa
    from gridcrawl.db import open_database
    from gridcrawl.report import threads_in_flight
    if not application_id:
        return ""
    try:
        urls, total = threads_in_flight(open_database(manager_db), application_id)
    except (sa.exc.SQLAlchemyError, DatabaseUnavailable):
        return ""
    if not urls:
        return ""
    return (f"; the {counted(total, 'page')} they had then: {', '.join(urls)}{' ...' if total > len(urls) else ''} "
            "(a page that ends its executor, as an extractor plugin calling os._exit or a crash in a native "
            "library does, ends every executor it is tried on: gridcrawl fetch URL, with the crawl's --extract, "
            "shows which)")


class _ChildrenWatch(threading.Thread):
    """Ends ``gridcrawl run``'s crawl when its own manager exits, or every executor has, while the
    crawl runs: logs why, sets ``stop`` and keeps the one-line reason in :attr:`failure` (the
    command then exits with status 2). Once ``stop`` is set otherwise (Ctrl-C, SIGTERM), it
    watches no more: the children are being stopped on purpose. A standalone client waits for a
    manager that is gone to come back (it may be failing over); the manager ``gridcrawl run``
    forked will not, and without executors no thread would ever run. One executor that exits is only logged: the crawl goes on
    with the others (its threads are run again elsewhere, after its liveness).

    ``processes``: the manager, then the executors (:meth:`gridcrawl.cli_common.ChildWatch.start`'s
    objects); looked at every ``interval`` seconds from :meth:`start` until :meth:`close`.
    ``rerun``: the command that resumes the crawl, for the reason.
    """

    def __init__(self, processes: list, stop: StopEvent, workdir: Path, rerun: str, interval: float = 0.2) -> None:
        super().__init__(name="children-watch", daemon=True)
        self.processes, self.stop, self.workdir, self.interval = processes, stop, workdir, interval
        self.rerun = rerun
        self.failure = ""
        self.executors_gone = False  # the failure: every executor exited
        self._closed = threading.Event()

    def run(self) -> None:
        log = logging.getLogger("gridcrawl.run")
        manager, *executors = self.processes
        gone: set[int] = set()
        while not self._closed.wait(self.interval):
            if self.stop.is_set():  # stopping on purpose (a SIGTERM to the group reaches the children too)
                return
            if manager.poll() is not None:
                self.failure = (f"the manager {how_it_ended(manager.returncode)} during the crawl; "
                                f"see {self.workdir / 'manager.log'}; {self.rerun} resumes the crawl")
            for i, proc in enumerate(executors, 1):
                if i not in gone and proc.poll() is not None:
                    gone.add(i)
                    log.warning("executor-%d %s; see %s", i, how_it_ended(proc.returncode),
                                self.workdir / f"executor-{i}.log")
            if not self.failure and len(gone) == len(executors):
                self.failure = f"every executor exited during the crawl; see {self.workdir}/executor-*.log"
                self.executors_gone = True
            if self.failure:
                log.error("%s: stopping the crawl", self.failure)
                self.stop.set(self.failure)
                return

    def close(self) -> None:
        """Stop watching (before the children are stopped on purpose); waits for the thread."""
        self._closed.set()
        if self.is_alive():
            self.join()


#: Seconds ``gridcrawl run`` waits for the children of a killed run to release its WORKDIR.
LOCK_WAIT = 10.0


def _lock_workdir(workdir: Path):
    """Take ``WORKDIR/run.lock`` for this run: an exclusive ``flock`` that the kernel releases when
    the run and the children it forked have all ended (``kill -9`` included). A second
    ``gridcrawl run`` on the same WORKDIR exits with status 2 before it touches the crawl, naming
    the running one's pid and start (rather than meeting its manager's database lease after its
    client has opened the crawl database, and writing its executors' lines into the same logs).
    When the run that holds the lock no longer runs (killed: its children are ending), waits up to
    ``LOCK_WAIT`` seconds for them. Returns the open lock file, to keep open; None where ``fcntl``
    does not exist (Windows: the manager's lease still refuses a second manager on the database)."""
    try:
        import fcntl  # noqa: F401 - take_lock's: POSIX only
    except ImportError:
        return None
    try:
        lock = open(workdir / "run.lock", "a+", encoding="utf-8")
    except OSError as exc:
        fail(f"cannot use --workdir {workdir}: {exc.strerror or exc}")
    deadline = None
    while True:
        holder = take_lock(lock, f"cannot use --workdir {workdir}")
        if holder is None:
            break
        if deadline is None:
            deadline = time.monotonic() + (0.0 if _holder_runs(holder) else LOCK_WAIT)
        if time.monotonic() >= deadline:
            lock.close()
            fail(f"another gridcrawl run is crawling in {workdir} ({holder}): wait for it "
                 f"to end, or give another --workdir")
        time.sleep(0.05)
    return lock


def _refuse_locked_crawl(workdir: Path) -> None:
    """Exit with status 2 (one line naming the holder, :func:`~gridcrawl.client.cli.crawl_refusal`)
    when ``gridcrawl extract``, a ``gridcrawl-client`` or a ``gridcrawl spark`` holds the crawler
    lock of ``WORKDIR/crawl.db``: checked on its ``flock``, before the run reads the database
    (its first transaction waited silently for as long as an extract wrote the items). Another
    ``gridcrawl run``'s, or a holder that names no program, is left to :func:`_lock_workdir`
    and the crawl's own lock, as before."""
    from gridcrawl.client.cli import crawl_refusal
    from gridcrawl.db import sqlite_lock_holder
    path = (workdir / "crawl.db").resolve()
    holder = sqlite_lock_holder(str(path))
    if holder is None or holder.startswith(("gridcrawl run,", "pid ", "a crawler starting")):
        return
    fail(crawl_refusal(str(path), holder, "--workdir"))


def _holder_runs(holder: str) -> bool:
    """Whether the process named by a ``run.lock``'s text (``pid N, since ...``) still runs (a
    zombie does not); True when the text names none (a run that is starting)."""
    import psutil
    try:
        pid = int(holder.split()[1].rstrip(","))
    except (IndexError, ValueError):
        return True
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _check_fetching(settings: Settings) -> None:
    """Before any process starts: raise ``ValueError`` (one line) when ``--ca-bundle`` names no
    readable file (each executor would refuse to start on it); log each of
    :meth:`Settings.warnings <gridcrawl.settings.Settings.warnings>` as a WARNING."""
    if settings.ca_bundle and settings.tls_verify:
        from gridcrawl.executor.fetch import tls_verify
        tls_verify(settings.tls_verify, settings.ca_bundle)
    for warning in settings.warnings(os.environ):
        logging.getLogger("gridcrawl.run").warning("%s", warning)


def _warn_anonymous(settings: Settings, urls_or_hosts: list[str]) -> None:
    """Log a WARNING when a crawl would fetch a host other than this machine (one of
    ``urls_or_hosts``, URLs or bare host names, not ``localhost`` or a loopback address) with
    the default ``user_agent``, which names no one: site operators tell crawlers apart, and
    robots.txt rules address them, by that header, and a crawler they cannot identify or reach
    is one they block (Heritrix will not start without an operator's contact URL in it)."""
    if settings.user_agent != Settings.user_agent:
        return
    import ipaddress
    for host in filter(None, map(_host_of, urls_or_hosts)):
        if host == "localhost" or host.endswith(".localhost"):
            continue
        try:
            if ipaddress.ip_address(host).is_loopback:
                continue
        except ValueError:
            pass
        logging.getLogger("gridcrawl.run").warning(
            "%s is fetched with the default User-Agent (%s), which names neither your crawler nor a way to "
            "reach you: give it yours, --user-agent 'NAME/1.0 (+https://your.site/about-this-crawler)' "
            "(or user_agent in the configuration file)", host, settings.user_agent)
        return


def _prefork(*modules: str) -> None:
    """Where :data:`FORK`: import the ``gridcrawl.<module>`` ``modules`` a child about to be forked
    runs, so that each is imported once, in this process, and shared copy-on-write; then
    ``gc.freeze()`` (the objects imported so far stay shared: the collector never writes to them).
    Elsewhere nothing (each child is a fresh interpreter)."""
    if FORK:
        import gc
        import importlib
        gc.disable()  # imports make no garbage cycles worth a collection (gridcrawl.entry)
        try:
            for module in modules:
                importlib.import_module(f"gridcrawl.{module}")
        finally:
            gc.freeze()
            gc.enable()


def _wait_for_executors(processes: list[subprocess.Popen], manager_db: str, wanted: int,
                        timeout: float, workdir: Path) -> None:
    """Wait until ``wanted`` executors are registered (connected rows in the executor table of
    the manager database at URL ``manager_db``), so that the crawl starts on the whole grid, as
    when an application is submitted to a running Alchemi grid, rather than on the first
    executor to finish starting up.

    ``processes`` are the manager then the executors: one that exits meanwhile ends the wait with
    an error (its log is in ``workdir``). Polls every 0.02 s for at most ``timeout`` seconds,
    then goes on with the executors that have registered (a warning says how many).
    """
    from gridcrawl.db import open_database
    import sqlalchemy as sa
    from gridcrawl.report import connected_executors
    deadline = time.monotonic() + timeout
    registered = 0
    engine = None
    try:
        while time.monotonic() < deadline:
            for i, proc in enumerate(processes):
                if proc.poll() is not None:
                    role = "the manager" if i == 0 else f"executor-{i}"
                    fail(f"{role} {how_it_ended(proc.returncode)} before the crawl started; "
                         f"see its log in {workdir}")
            try:
                engine = engine or open_database(manager_db, existing=True)
                registered = connected_executors(engine)
            except (DatabaseUnavailable, sa.exc.DBAPIError):  # not created yet, or no tables yet
                registered = 0
            if registered >= wanted:
                return
            time.sleep(0.02)
    finally:
        if engine is not None:
            engine.dispose()
    logging.getLogger("gridcrawl.run").warning(
        "%d of %d executors registered within %.0f s; crawling with those", registered, wanted, timeout)


def _stored_meta(crawl_db: str) -> dict[str, str]:
    """The ``crawl_meta`` rows (name -> value) of the crawl database at URL ``crawl_db``: what a
    resumed crawl stored; empty when there is no such database or table."""
    from gridcrawl.db import open_database
    import sqlalchemy as sa
    from gridcrawl import models
    try:
        engine = open_database(crawl_db, existing=True)
    except DatabaseUnavailable:
        return {}
    try:
        with engine.connect() as conn:
            return {row.name: row.value for row in conn.execute(sa.select(models.crawl_meta))}
    except sa.exc.DBAPIError:
        return {}
    finally:
        engine.dispose()


def _another_crawl(crawl_db: str, seeds: list[str]) -> tuple[str, int]:
    """What the crawl database at URL ``crawl_db`` holds (``"127.0.0.1, first
    http://127.0.0.1:8000/: 5 URLs visited, 109 left to visit"``: its allowed domains and its
    first URL, whose port tells two sites of one host apart) when it holds a crawl and none of
    ``seeds`` (valid seed URLs) is a URL of it,
    visited or to visit, and the documents it stored; else ``("", 0)``. A user who runs
    ``gridcrawl run OTHER-SITE`` in the folder of an earlier crawl without ``--workdir`` means a
    new crawl, not to add a site to that one."""
    from gridcrawl.db import chunks, open_database
    import sqlalchemy as sa
    from gridcrawl import models
    from gridcrawl.urls import canonical_url, fingerprint
    keys = [fingerprint(canonical_url(seed)) for seed in seeds]
    try:
        engine = open_database(crawl_db, existing=True)
    except DatabaseUnavailable:
        return "", 0
    try:
        with engine.connect() as conn:
            counts = []
            for table in (models.visited_url, models.to_visit_url):
                for part in chunks(keys, 500):  # (a seeds file of 100,000 sites: under SQLite's 32,766 variables)
                    if conn.execute(sa.select(table.c.fingerprint).where(table.c.fingerprint.in_(part)).limit(1)).first():
                        return "", 0
                counts.append(conn.execute(sa.select(sa.func.count()).select_from(table)).scalar())
            first = next(filter(None, (conn.execute(sa.select(t.c.url).order_by(t.c.id).limit(1)).scalar()
                                       for t in (models.visited_url, models.to_visit_url))), None)
            stored = conn.execute(sa.select(sa.func.count()).select_from(models.document)).scalar()
    except sa.exc.DBAPIError:
        return "", 0
    finally:
        engine.dispose()
    if not any(counts):
        return "", 0
    hosts = _stored_hosts(crawl_db)
    shown = ", ".join(hosts[:3]) + (f" and {len(hosts) - 3} more" if len(hosts) > 3 else "")
    shown = ", ".join(filter(None, [shown, first and f"first {first}"]))
    return f"{shown or 'its seeds'}: {counted(counts[0], 'URL')} visited, {counts[1]:,} left to visit", stored


def _stored_hosts(crawl_db: str) -> list[str]:
    """The allowed domains a resumed crawl stored in its crawl database (URL ``crawl_db``; none
    if there is none)."""
    import json
    try:
        return [str(h) for h in json.loads(_stored_meta(crawl_db).get("allowed_domains") or "[]")]
    except (ValueError, TypeError):
        return []


def _on_command_line(ctx, *names: str) -> list[str]:
    """The options (``--render-timeout`` ...) of the settings ``names`` that ``ctx``'s command line
    gave (not a configuration file, the environment or a default)."""
    return [f"--{name.replace('_', '-')}" for name in names
            if getattr(ctx.get_parameter_source(name), "name", "") == "COMMANDLINE"]


def _stored_render(crawl_db: str) -> bool:
    """True when a resumed crawl's database (URL ``crawl_db``) says some of its pages are
    rendered (``--render`` or a page type with ``render = true`` stored in ``crawl_meta``)."""
    import json
    meta = _stored_meta(crawl_db)
    try:
        return bool(meta) and (meta.get("render") == "1" or any(
            bool(v.get("render")) for v in json.loads(meta.get("page_types") or "{}").values()))
    except (ValueError, TypeError, AttributeError):
        return False


def _stored_specs(crawl_db: str) -> list:
    """The item specs a resumed crawl's database (URL ``crawl_db``) stored (``item_spec``);
    empty when it has none or they cannot be read (the client says why when it reads them)."""
    from gridcrawl.db import open_database
    import sqlalchemy as sa
    from gridcrawl.client.items import stored_spec
    from gridcrawl.items import ItemSpecError
    try:
        engine = open_database(crawl_db, existing=True)
    except DatabaseUnavailable:
        return []
    try:
        return stored_spec(engine)
    except (sa.exc.DBAPIError, ItemSpecError):
        return []
    finally:
        engine.dispose()


def _refuse_missing_plugins(specs: list, remedy: str = "the executors gridcrawl run starts could not run it "
                           "(install the plugin's package here, or crawl with gridcrawl-manager and executors "
                           "that have it)") -> None:
    """Exit with status 2 when an item spec of ``specs`` names an extractor plugin that this
    Python environment does not provide, with ``remedy`` after the reason, or one that does not
    load here (its import fails, or its entry point names no function), saying so: ``gridcrawl run``'s
    executors are forked here and only they take its grid threads, which would otherwise wait
    for ever; ``gridcrawl fetch`` runs the plugins itself."""
    from gridcrawl.plugins import installed_plugins, loadable, missing, shadowing, split_reference
    references = sorted({spec.plugin for spec in specs if spec.plugin is not None})
    if not references:
        return
    plugins = installed_plugins()
    for line in shadowing({name: plugins[name] for name in {split_reference(ref)[0] for ref in references}
                           if name in plugins}):
        logging.getLogger("gridcrawl").warning("%s", line)
    whys = [why for ref in references if (why := missing(ref, plugins, " in this Python environment"))]
    if whys:
        fail(f"{'; '.join(whys)}: {remedy}")
    # installed: each must also import (an executor does not offer one that does not)
    _, whys = loadable({name: plugins[name] for name in {split_reference(ref)[0] for ref in references}})
    if whys:  # (not "install the plugin's package here": it is installed)
        fail(f"{'; '.join(whys)}: its package is installed here, but the plugin does not load: fix the package (a "
             "dependency it imports, the function its entry point names) or the spec's plugin name")


def _host_of(url_or_host: str) -> str | None:
    """The host name of a URL, or a bare host name, lower-cased, without a trailing dot; None
    for a URL that cannot be split."""
    from urllib.parse import urlsplit
    try:
        host = urlsplit(url_or_host).hostname if "://" in url_or_host else url_or_host.strip().lower()
    except ValueError:
        return None
    return (host or "").strip(".") or None


def _private_networks(urls_or_hosts: list[str], extra: list[str]) -> list[str]:
    """The ``--allow-private`` values for the executors of ``gridcrawl run``: every address of
    the seeds' hosts (URLs or bare host names) that the SSRF guard would refuse (loopback,
    private ...), adjacent ones merged into one CIDR (``ipaddress.collapse_addresses``: no
    address that is not a seed's joins them), plus ``extra`` CIDRs. A local crawl of
    ``http://127.0.0.1:8088/`` thus works while links to other private addresses stay refused.
    Each host is resolved once, up to 16 at a time (a seed list of many hosts). Raises
    ``ValueError`` on a bad CIDR in ``extra``."""
    import ipaddress
    from concurrent.futures import ThreadPoolExecutor
    from gridcrawl.executor.ssrf import classify, parse_networks, parse_host, system_resolver
    networks = [str(n) for n in parse_networks(extra)]
    hosts = [host for host in map(_host_of, urls_or_hosts) if host]

    def addresses(host: str) -> list:
        literal = parse_host(host)
        try:
            found = [literal] if literal is not None else [parse_host(a) for a in system_resolver(host, 80)]
        except (OSError, UnicodeError):
            return []
        return [a for a in found if a is not None and classify(a) is not None]
    unique = list(dict.fromkeys(hosts))
    with ThreadPoolExecutor(min(16, max(1, len(unique)))) as pool:
        refused = {a for found in pool.map(addresses, unique) for a in found}
    for version in (4, 6):
        for net in ipaddress.collapse_addresses(sorted(a for a in refused if a.version == version)):
            if str(net) not in networks:
                networks.append(str(net))
    return networks


def _table(title: str, columns: list[tuple[str, bool]]):
    """A rich table titled ``title`` with ``columns`` (name, numeric): text columns fold long
    values onto more lines rather than cut them, numbers stay whole and right-aligned."""
    from rich.table import Table
    table = Table(title=title)
    for name, numeric in columns:
        if numeric:
            table.add_column(name, justify="right", no_wrap=True)
        else:
            table.add_column(name, overflow="fold")
    return table


def _print_timings(rows, wide: bool = False) -> None:
    """The threads per executor of one application (:func:`gridcrawl.report.executor_timings`);
    ``wide``: also the host and the shortest run."""
    table = _table("threads per executor", [("executor", False)] + [("host", False)] * wide + [
        ("threads", True), ("mean s", True)] + [("min s", True)] * wide + [
        ("max s", True), ("mean wait s", True), ("pages/s", True)])
    for r in rows:
        table.add_row(r.name, *[r.host] * wide, f"{r.threads:,}", f"{r.mean_seconds:.3f}",
                      *[f"{r.min_seconds:.3f}"] * wide, f"{r.max_seconds:.3f}", f"{r.mean_wait_seconds:.3f}",
                      f"{r.pages_per_second:.1f}")
    _console().print(table)


def _seconds(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _console():
    """A rich console for report tables: the terminal's width (or $COLUMNS), else 200 columns
    when the output is a file or a pipe (rich would assume 80 and fold every row)."""
    from rich.console import Console
    console = Console()
    return console if console.is_terminal or os.environ.get("COLUMNS") else Console(width=200)


def _print_executor_summary(rows, wide: bool = False, manager_down: bool = False) -> None:
    """The rows of the ``executor_summary`` view; ``wide``: every column (host, run seconds
    min/max, queue wait, CPU figures), else the ones that fit 80 columns. ``manager_down``: the
    database's manager is not running (its lease expired or released), so no executor is
    connected to it, whatever ``is_connected`` a manager killed before it could clear it left:
    every one is shown "no", and a note says how many the rows still call connected."""
    extra = [("host", False), ("min s", True), ("max s", True), ("mean wait s", True), ("CPUs", True),
             ("CPU MHz", True), ("CPU use %", True), ("CPU s", True)]
    table = _table("executors (view executor_summary)", [
        ("executor", False), ("up", False), ("threads", True), ("pages", True), ("failed", True),
        ("mean s", True), ("pages/s", True)] + extra * wide)
    for r in rows:
        more = [r.host, _seconds(r.min_run_seconds), _seconds(r.max_run_seconds), _seconds(r.mean_queue_wait_seconds),
                str(r.num_cpus), f"{r.cpu_max:.0f}", f"{r.cpu_usage:.0f}", f"{r.cpu_totalusage:.1f}"]
        up = ("yes" if r.accepting else "waiting") if r.is_connected and not manager_down else "no"
        table.add_row(r.executor_name, up, f"{r.threads:,}", f"{r.pages:,}",
                      f"{r.failed:,}", _seconds(r.mean_run_seconds), _seconds(r.pages_per_second, 2), *more * wide)
    console = _console()
    console.print(table)
    if manager_down and (stale := sum(r.is_connected for r in rows)):
        console.print(f"up: no, as no manager is running on this database; the manager's last records call "
                      f"{counted(stale, 'executor')} connected (it stopped without saying they left: killed, or "
                      "its host lost); those still running reconnect once it is started again", highlight=False)
    elif any(r.is_connected and not r.accepting for r in rows):
        console.print("waiting: an --idle-only executor, connected, that takes no grid thread until its "
                      "desktop is idle (its log says since when)")


def _print_application_summary(rows, wide: bool = False) -> None:
    """The rows of the ``application_summary`` view; ``wide``: whole ids and every column (the
    user who opened each application too: on a grid of several users, whose crawl it is), else
    8-character ids (``--application`` takes them) and the columns that fit 80 columns."""
    from gridcrawl.states import ApplicationState
    if not rows:  # (an empty table and its notes said nothing of why)
        _console().print("applications: none recorded here (none has been opened yet, or gridcrawl db prune "
                         "deleted those that ended)", highlight=False)
        return
    table = _table("applications (view application_summary)", [
        ("application", False), ("name", False)] + [("user", False)] * wide + [("state", False)] + \
        [("threads", True)] * wide + [
        ("pages", True), ("failed", True)] + [("executors", True)] * wide + [
        ("crawl s", True), ("pages/s", True)])
    for r in rows:
        try:
            state = ApplicationState(r.state).name.lower()
        except ValueError:
            state = str(r.state)
        table.add_row(r.application_id if wide else r.application_id[:8], r.application_name, *[r.usr_name] * wide,
                      state,
                      *[f"{r.threads:,}"] * wide, f"{r.pages:,}", f"{r.failed:,}", *[f"{r.executors:,}"] * wide,
                      _seconds(r.elapsed_seconds, 1), _seconds(r.pages_per_second, 2))
    console = _console()
    console.print(table)
    console.print("failed: grid threads given up as poison (--max-attempts); a page that failed (404, blocked) "
                  "is a thread that finished: gridcrawl report --crawl-db counts those. crawl s: from the first "
                  "thread submitted to the last finished, the pauses between runs of a resumed crawl included.",
                  highlight=False)


def _print_semantic(crawl_db: str) -> None:
    """``gridcrawl report --crawl-db``: the semantic crawl's section, when the crawl was one
    (``--structured-data``) or holds triples; exit 2 when it is no crawl database."""
    from gridcrawl.db import open_database, shown_url
    import sqlalchemy as sa
    from gridcrawl import models
    from gridcrawl.report import semantic_summary
    try:
        engine = open_database(crawl_db)
        with engine.connect() as conn:
            flag = conn.execute(sa.select(models.crawl_meta.c.value)
                                .where(models.crawl_meta.c.name == "structured_data")).scalar()
        summary = semantic_summary(engine)
    except DatabaseUnavailable as exc:
        fail(str(exc))
    except sa.exc.DBAPIError as exc:
        fail(f"{shown_url(crawl_db)} is not a gridcrawl crawl database with a triple table: {str(exc.orig).splitlines()[0]}")
    if flag == "1" or summary.triples:
        _print_semantic_summary(summary)


def _print_semantic_summary(s) -> None:
    from rich.table import Table
    table = Table(title="semantic crawl (crawl database: triple, document, visited_url)", show_header=False)
    table.add_row("triples stored", f"{s.triples:,}")
    table.add_row("pages with triples", f"{s.pages_with_triples:,}")
    table.add_row("RDF documents", f"{s.rdf_documents:,}")
    table.add_row("HTML pages with structured data", f"{s.structured_pages:,}")
    table.add_row("objects: uri / literal / bnode",
                  " / ".join(f"{s.by_kind.get(k, 0):,}" for k in ("uri", "literal", "bnode")))
    table.add_row("RDF errors: rdf_parse / rdf_limit",
                  f"{s.rdf_errors.get('rdf_parse', 0):,} / {s.rdf_errors.get('rdf_limit', 0):,}")
    table.add_row("HTML pages with structured-data errors", f"{s.structured_errors:,}" + (
        f", e.g. {s.structured_error_example[0]}: {s.structured_error_example[1]}" if s.structured_error_example else ""))
    table.add_row("triples per parse second (executors)", _seconds(s.triples_per_second, 0))
    if s.relevance is not None:
        table.add_row("focused: pages scored / mean score / scoring >= 0.5",
                      f"{s.relevance[0]:,} / {s.relevance[1]:.3f} / {s.relevance[2]:,}")
    _console().print(table)
    if s.top_predicates:
        top = Table(title="top predicates")
        top.add_column("predicate")
        top.add_column("triples", justify="right")
        for predicate, n in s.top_predicates:
            top.add_row(predicate, f"{n:,}")
        _console().print(top)


@app.command(short_help="Print the grid's records (--db) or a crawl's figures (--crawl-db).")
def report(
    db: str = typer.Option(None, help="SQLAlchemy URL of the manager database"),
    application: str = typer.Option(None, help="only this application id"),
    plot: Path = typer.Option(None, help="also draw the per-executor timeline of threads to this image file "
                              "(PNG; .svg, .pdf, .jpg ... by its name's ending)"),
    wide: bool = typer.Option(False, "--wide", help="every column (hosts, CPU figures, whole ids); "
                              "by default the tables fit 80 columns"),
    crawl_db: str = typer.Option(None, help="SQLAlchemy URL of a crawl database: print its tables' counts "
                                 "and errors by kind, its recrawl runs "
                                 "(due, fetched, 304, unchanged, changed, gone, revived, disallowed, errors, new) "
                                 "and its items (per type; misses of each required field), and its semantic "
                                 "crawl (triples, RDF documents, top predicates, RDF errors, triples/s)"),
) -> None:
    """Print the executor and application summaries (the views executor_summary and
    application_summary; with --application, that application's threads per executor), the
    threads that wait because no connected executor has a capability they need, and, with
    --plot, draw the per-executor timeline of threads (needs gridcrawl[report]); with
    --crawl-db, that crawl's counts (documents, visited URLs, errors, set aside, left to visit)
    and errors by kind with one example each, the counts of its recrawl runs (if any), its
    items (per type; per field: items with a value, misses of a required value, fields that
    never matched) and its semantic crawl (when it was one: --structured-data).

    Figures (README, "Figures"): crawl s = first grid thread submitted to last finished;
    pages/s = pages / crawl s (an executor's too, so they add up)."""
    from gridcrawl.db import newer_schema, older_schema, open_database, shown_url, wrong_kind
    if db is None and crawl_db is None:
        fail("give --db (the manager database), --crawl-db (a crawl database), or both")
    if plot is not None and not plot.parent.is_dir():  # before the report, not after it
        fail(f"cannot draw the timeline to {plot}: no folder {plot.parent}")
    from gridcrawl import report as rep
    if plot is not None:
        try:  # before the report too: it printed the whole report (seconds of it), then this error
            rep.plot_format(plot)
            rep.require_matplotlib()
        except rep.ReportError as exc:
            fail(str(exc))
    import sqlalchemy as sa
    if db is not None:
        try:
            engine = open_database(db, existing=True, read_only=True)
        except DatabaseUnavailable as exc:
            fail(str(exc))
        if old := older_schema(engine, "manager"):  # before reading: its views lack columns (a traceback)
            fail(old)
        if new := newer_schema(engine, "manager"):  # its views are a newer release's: say so, read on
            typer.echo(f"warning: {new}; the figures below may be incomplete", err=True)
        console = _console()  # lines wrapped at the terminal's width (or $COLUMNS), as the tables
        try:
            lease = rep.active_manager(engine)
            manager_down = lease is not None and not lease.live
            if lease is not None:
                console.print(lease.describe(), markup=False, highlight=False)
            if application:
                application = rep.resolve_application(engine, application)
                _print_timings(rep.executor_timings(engine, application), wide)
            else:
                _print_executor_summary(rep.executor_summary(engine), wide, manager_down)
            _print_application_summary(rep.application_summary(engine, application), wide)
            for _needs, count, why in rep.waiting_for_capabilities(engine, manager_down):
                console.print(f"{counted(count, 'thread')} {'waits' if count == 1 else 'wait'}: {why}", markup=False,
                              highlight=False)
            if plot is not None:
                drawn = rep.plot_timeline(rep.thread_timings(engine, application), plot)
                console.print(f"timeline of {counted(drawn, 'thread')} drawn to {plot}", markup=False, highlight=False)
        except sa.exc.DBAPIError as exc:
            if other := wrong_kind(engine, "manager"):
                fail(f"{other}: give it with --crawl-db")
            if old := older_schema(engine, "manager") or newer_schema(engine, "manager"):
                fail(old)
            fail(f"{shown_url(db)} is not a gridcrawl manager database, or its views are missing "
                 f"(gridcrawl db init --kind manager --db URL creates them): {str(exc.orig).splitlines()[0]}")
        except rep.ReportError as exc:
            fail(str(exc))
        except OSError as exc:  # the PNG could not be written (a folder we may not write, a full disk)
            fail(f"cannot draw the timeline to {plot}: {exc.strerror or exc}")
    if crawl_db is not None:
        from gridcrawl.client.store import crawl_counts, error_groups
        try:
            crawl_engine = open_database(crawl_db, existing=True, read_only=True)
            if old := older_schema(crawl_engine, "crawl"):
                fail(old)
            if new := newer_schema(crawl_engine, "crawl"):
                typer.echo(f"warning: {new}; the figures below may be incomplete", err=True)
            counts, groups = crawl_counts(crawl_engine), error_groups(crawl_engine)
            rows = rep.recrawl_runs(crawl_engine)
        except DatabaseUnavailable as exc:
            fail(str(exc))
        except sa.exc.DBAPIError as exc:
            if other := wrong_kind(crawl_engine, "crawl"):
                fail(f"{other}: give it with --db")
            if old := older_schema(crawl_engine, "crawl") or newer_schema(crawl_engine, "crawl"):
                fail(old)
            fail(f"{shown_url(crawl_db)} is not a gridcrawl crawl database: {str(exc.orig).splitlines()[0]}")
        _print_crawl(counts, groups)
        if rows:
            _print_recrawl_runs(rows, wide)
        _print_items(crawl_db)
        _print_semantic(crawl_db)


def _print_crawl(counts: dict, groups) -> None:
    """``gridcrawl report --crawl-db``: the crawl's tables (documents, visited URLs, errors, set
    aside, left to visit; URLs robots.txt disallowed, gone documents, old versions and triples
    when there are any), then its errors, set-aside and disallowed URLs by kind with one example
    each (as the client's summary, which gives the disallowed ones a row)."""
    from rich.table import Table
    from gridcrawl.client.progress import documents_label, print_error_groups, visited_label
    table = Table(title="gridcrawl: crawl", show_header=False, title_justify="left")
    table.add_column(no_wrap=True)
    table.add_column(justify="right")
    for label, key in (("documents stored", "documents"), ("URLs visited", "visited"), ("errors", "errors"),
                       ("disallowed by robots.txt (not errors)", "disallowed"),
                       ("set aside (duplicates, traps, noindex)", "set_aside"), ("left to visit", "to_visit"),
                       ("links kept by the rules (kept_link)", "kept"),
                       ("documents gone", "gone"), ("old versions", "versions"), ("triples", "triples")):
        if counts[key] or key in ("documents", "visited", "errors", "to_visit"):
            table.add_row(label, visited_label(counts) if key == "visited" else documents_label(counts)
                          if key == "documents" else f"{counts[key]:,}")
    console = _console()
    console.print(table)
    print_error_groups(console, groups, disallowed=True)


def _print_recrawl_runs(rows, wide: bool = False) -> None:
    """The recrawl runs as a table with one column per run (the last three; every run with
    ``wide``) and one row per count, so that it fits 80 columns."""
    from rich.table import Table
    from gridcrawl.report import RECRAWL_COLUMNS, RECRAWL_LABELS
    shown = rows if wide else rows[-3:]
    table = Table(title="recrawls (table recrawl)" + ("" if len(shown) == len(rows) else
                                                      f", the last {len(shown)} of {len(rows)} (--wide: all)"))
    table.add_column("")
    for r in shown:
        table.add_column(f"run {r.recrawl_id}", justify="right")
    labels = {**RECRAWL_LABELS, "new": "new"}
    table.add_row("mode", *(r.mode for r in shown))
    table.add_row("started (UTC)", *(f"{r.started_at:%Y-%m-%d %H:%M:%S}" for r in shown))
    table.add_row("seconds", *(_seconds(r.seconds, 1) for r in shown))
    for column in RECRAWL_COLUMNS:
        table.add_row(labels.get(column, column), *(f"{getattr(r, column):,}" for r in shown))
    _console().print(table)


def _print_items(crawl_db: str) -> None:
    """``gridcrawl report --crawl-db``: the items section, when the crawl has an item spec or
    items (exit 2 when it is no crawl database)."""
    from gridcrawl.db import open_database, shown_url
    import sqlalchemy as sa
    from gridcrawl.client.items import item_summary, stored_spec
    from gridcrawl.client.progress import ProgressView
    from gridcrawl.items import ItemSpecError
    try:
        engine = open_database(crawl_db, existing=True)
        if not sa.inspect(engine).has_table("item"):
            fail(f"{shown_url(crawl_db)} has no item table: not a gridcrawl crawl database")
        try:
            specs = stored_spec(engine)
        except ItemSpecError:
            specs = []
        figures = item_summary(engine, specs)
        if not figures:
            return  # a crawl without --extract
    except DatabaseUnavailable as exc:
        fail(str(exc))
    except sa.exc.DBAPIError as exc:
        fail(f"{shown_url(crawl_db)}: {str(exc.orig).splitlines()[0]}")
    view = ProgressView(enabled=False)
    view.console = _console()
    view.item_summary(figures)


def _schemas() -> dict:
    """gridcrawl's two kinds of tables: ``{"manager": (metadata, meta table), "crawl": (...)}``."""
    from gridcrawl import models
    return {"manager": (models.manager_metadata, models.manager_meta),
            "crawl": (models.crawl_metadata, models.crawl_meta)}


def _held_kinds(engine) -> tuple[dict, list[str]]:
    """The schema revision of each kind of tables in ``engine``'s database (None: none recorded)
    and the kinds it holds (a revision recorded, or any of that kind's tables)."""
    from sqlalchemy import inspect as sa_inspect
    from gridcrawl import migrations
    with engine.connect() as conn:
        before = {name: migrations.current(conn, name) for name in _schemas()}
        inspector = sa_inspect(conn)
        held = [name for name, (tables, _) in _schemas().items()
                if before[name] is not None or any(inspector.has_table(t.name) for t in tables.sorted_tables)]
    return before, held


@db_app.command("init")
def db_init(
    db: str = typer.Option(..., help="SQLAlchemy URL of the database"),
    kind: str = typer.Option(None, help="manager, crawl or both: which tables to create [the kinds DB holds; "
                             "both in a database that holds none]"),
) -> None:
    """Create gridcrawl's tables and views in DB if they are missing, and record the schema
    version (idempotent; several programs may run it at once). Without --kind, a database that
    holds one kind of tables (a crawl's, or the manager's) is not given the other kind."""
    from gridcrawl.db import init_schema, open_database, shown_url
    if kind not in (None, "manager", "crawl", "both"):
        fail("--kind must be manager, crawl or both")
    try:
        engine = open_database(db)
        kinds = (_held_kinds(engine)[1] or ["manager", "crawl"]) if kind is None else \
            [name for name in _schemas() if kind in (name, "both")]
        for name in kinds:
            init_schema(engine, *_schemas()[name])
    except DatabaseUnavailable as exc:
        fail(str(exc))
    typer.echo(f"{' and '.join(kinds)} schema ready in {shown_url(engine.url)}")


@db_app.command("upgrade")
def db_upgrade(
    db: str = typer.Option(..., help="SQLAlchemy URL of the database"),
    kind: str = typer.Option(None, help="manager, crawl or both: which tables to upgrade, or create "
                             "[the kinds DB holds]"),
) -> None:
    """Upgrade gridcrawl's tables in DB to this release's schema (Alembic migrations in
    gridcrawl/migrations; programs do it by themselves when they open an older database) and
    print each schema's revision before and after. Without --kind, the kinds of tables DB
    holds (a crawl database is not given the manager's tables); a database that holds none is
    refused unless --kind says what to create."""
    from gridcrawl.db import init_schema, open_database, shown_url
    from gridcrawl import migrations
    if kind not in (None, "manager", "crawl", "both"):
        fail("--kind must be manager, crawl or both")
    try:
        engine = open_database(db, existing=kind is None)
        before, held = _held_kinds(engine)
        if kind is None and not held:
            fail(f"{shown_url(engine.url)} holds no gridcrawl tables: give --kind "
                 "manager, crawl or both to create them")
        for name in held if kind is None else [k for k in _schemas() if kind in (k, "both")]:
            init_schema(engine, *_schemas()[name])
            typer.echo(f"{name} schema: revision {before[name] or '(none)'} -> {migrations.head(name)}")
    except DatabaseUnavailable as exc:
        fail(str(exc))


@db_app.command("prune")
def db_prune(
    db: str = typer.Option(..., help="SQLAlchemy URL of the manager database"),
    older_than: float = typer.Option(..., "--older-than", metavar="DAYS",
                                     help="delete the records of crawls that ended more than DAYS days ago "
                                     "(0.5: twelve hours)"),
    dry_run: bool = typer.Option(False, "--dry-run", help="count what would be deleted; delete nothing"),
) -> None:
    """Delete the grid's records of applications (crawls) that ended more than DAYS days ago:
    their grid threads and attempts, and the executors gone since that no record left names.
    Safe while the manager runs. The crawls' own databases are not touched."""
    import datetime as dt
    import math
    import sqlalchemy as sa
    from gridcrawl.db import open_database, shown_url
    from gridcrawl.prune import prune_records
    now = dt.datetime.now(dt.timezone.utc).replace(tzinfo=None)
    most = (now - dt.datetime.min).days  # further back than year 1: a traceback (OverflowError)
    if not math.isfinite(older_than) or older_than < 0 or older_than > most:
        fail(f"--older-than must be a number of days, 0 or more (at most {most:,}: back to the year 1; "
             f"got {older_than:g})")
    before = now - dt.timedelta(days=older_than)
    try:
        engine = open_database(db, existing=True)
        if not sa.inspect(engine).has_table("thread"):
            fail(f"{shown_url(engine.url)} holds no manager records (no thread table): give the manager's --db")
        pruned = prune_records(engine, before, dry_run=dry_run)
    except DatabaseUnavailable as exc:
        fail(str(exc))
    except sa.exc.DBAPIError as exc:
        fail(f"{shown_url(db)}: {str(exc.orig).splitlines()[0]} (what was deleted before stays deleted; "
             "run the command again to go on)")
    verb = "would delete" if dry_run else "deleted"
    typer.echo(f"{verb} {counted(pruned.applications, 'application')}, {counted(pruned.threads, 'grid thread')}, "
               f"{counted(pruned.attempts, 'attempt')} and {counted(pruned.executors, 'executor')} that ended "
               f"before {before:%Y-%m-%d %H:%M} UTC, from {shown_url(engine.url)}")
    if not dry_run and pruned.threads and engine.dialect.name == "sqlite":
        typer.echo("the file keeps its size: new records reuse the space freed (`sqlite3 FILE VACUUM`, with the "
                   "manager stopped, gives it back to the disk)")


@keys_app.command("new")
def keys_new(
    name: str = typer.Argument(..., help="the key's name: the manager knows the peer by it"),
    dir: Path = typer.Option(Path("."), "--dir", help="folder to write NAME.key and NAME.key_secret in"),
) -> None:
    """Write a CURVE key pair: NAME.key (public: give it to the manager's --curve-allow folder,
    or, for the manager's key, to every executor and client) and NAME.key_secret (mode 0600)."""
    from gridcrawl.keys import KeyFileError, new_key_pair
    try:
        public, secret = new_key_pair(name, dir)
    except (KeyFileError, OSError) as exc:
        fail(str(exc))
    typer.echo(f"public key: {public}\nsecret key: {secret} (mode 0600: keep it on this machine)")


class _Terminated(BaseException):
    """Raised in the main thread by SIGTERM during an export (a BaseException: no ``except
    Exception`` takes it), so that the stack unwinds as on Ctrl-C."""


@contextmanager
def _sigterm_unwinds():
    """Within the block, SIGTERM (``timeout``, systemd, ``kill``) unwinds the stack as Ctrl-C
    does, so that an export's temporary ``OUT.XXXXXXXX.part`` is deleted
    (:func:`gridcrawl.export.open_output`), then ends the process by SIGTERM (status 143). Its
    default action left the ``.part`` behind, up to the size of the crawl."""
    def terminated(signum, frame):
        raise _Terminated(signum)
    previous = signal.signal(signal.SIGTERM, terminated)
    try:
        yield
    except _Terminated as exc:
        exit_by_signal(exc.args[0])
    finally:
        signal.signal(signal.SIGTERM, previous)


@app.command("export", short_help="Export a crawl's pages (JSON lines, CSV, WARC), items or triples.")
def export_command(
    out: str = typer.Argument(..., help="output file (- for standard output); .warc.gz compresses the WARC"),
    db: str = typer.Option(..., help="SQLAlchemy URL of the crawl database, e.g. sqlite:///crawl.db"),
    format: str = typer.Option(None, "--format", help="jsonl (one document per line), csv (visited URLs) "
                               "or warc (WARC 1.1 request and response records); default: what OUT's "
                               "ending says (.warc, .warc.gz, .csv, .nt), else jsonl"),
    content: bool = typer.Option(True, help="jsonl: include page text and bodies (--no-content: the pages' JSON lines only)"),
    triples: bool = typer.Option(False, "--triples", help="export the semantic crawl's triples instead, "
                                 "--format nt (N-Triples) or jsonl"),
    items: bool = typer.Option(False, "--items", help="export the extracted items instead (jsonl: one item per "
                               "line; csv: one column per field)"),
    type: str = typer.Option(None, "--type", help="with --items: only items of this type"),
    include_gone: bool = typer.Option(False, "--include-gone", help="with --items: also the items of pages a "
                                      "recrawl found gone (404/410), left out by default"),
) -> None:
    """Export the crawl in --db to OUT as JSON lines, CSV or WARC 1.1; with --triples, its
    triples as N-Triples or JSON lines; with --items, its items as JSON lines or CSV."""
    from gridcrawl.db import open_database
    from gridcrawl.export import FORMAT_NAMES, ExportError, export, format_for
    if items and triples:
        fail("--items and --triples exclude each other")
    try:
        format = format_for(out, format, triples=triples, items=items)
    except ExportError as exc:
        fail(str(exc))
    if not content and (items or triples or format != "jsonl"):  # else a WARC kept every body asked away
        what = "items" if items else "triples" if triples else f"a {FORMAT_NAMES[format]} export"
        fail(f"--no-content goes with the pages' JSON lines, not {what}: a WARC is made of the bodies; "
             "CSV, items and triples hold none")
    if items:
        from gridcrawl.client.items import ItemExportError, export_items
        try:
            with _sigterm_unwinds():
                engine = open_database(db, existing=True, read_only=True)
                _warn_running(engine)
                done = export_items(engine, out, format, type, include_gone=include_gone)
        except (DatabaseUnavailable, ItemExportError, ExportError) as exc:
            fail(str(exc))
        gone = (f" ({done.gone} item{'' if done.gone == 1 else 's'} of {done.gone_pages} "
                f"page{'' if done.gone_pages == 1 else 's'} a recrawl found gone, 404/410, left out: "
                "--include-gone exports them)" if done.gone else "")
        if not done.items and not done.spec:
            gone = (" (this crawl ran without --extract: gridcrawl extract --db DB --extract SPEC.toml "
                    "extracts items from its stored pages, fetching nothing)")
        typer.echo(f"exported {done.items} item{'' if done.items == 1 else 's'} to {out}{gone}", err=True)
        return
    if type is not None:
        fail("--type goes with --items")
    if include_gone:
        fail("--include-gone goes with --items")
    try:
        engine = open_database(db, existing=True, read_only=True)
        _warn_running(engine)
        with _sigterm_unwinds():
            result = export(engine, format, out, content=content, triples=triples)
    except (DatabaseUnavailable, ExportError) as exc:
        fail(str(exc))
    what = "triple" if triples else {"jsonl": "document", "csv": "visited URL", "warc": "page"}[format]
    what += "" if result.records == 1 else "s"
    left_out = [f"{n} {what}" for n, what in (
        (result.duplicates, f"duplicate{'' if result.duplicates == 1 else 's'} of stored pages"),
        (result.skipped - result.duplicates, "without a stored body")) if n]
    skipped = f" ({', '.join(left_out)} left out)" if left_out else ""
    if result.bare_versions:  # (they were left out without a word: "0 earlier versions" of a crawl that has some)
        skipped += (f"; {counted(result.bare_versions, 'earlier version')} left out: replaced by recrawls without "
                    "--keep-versions, which keep no body (give it to the recrawls to keep them)")
    if result.altered:
        skipped += (f"; {result.altered} page{'s' if result.altered > 1 else ''} not byte for byte as served: the "
                    "stored text does not encode back to those bytes (malformed bytes, or characters with two "
                    "encodings in the page's charset)")
    recrawl = (f", {counted(result.revisits, 'revisit')}, {counted(result.versions, 'earlier version')}"
               if result.revisits or result.versions else "")
    if triples and not result.records:
        skipped = " (this crawl stored no triples: a crawl with --structured-data or --focus-ontology stores them)"
    typer.echo(f"exported {result.records} {what}{recrawl} to {out}{skipped}", err=True)


def _warn_running(engine) -> None:
    """Say on stderr that the export is a snapshot when a crawler is crawling into ``engine``'s
    crawl database now, or that its items are those from before ``gridcrawl extract`` when one
    is extracting them again (:func:`gridcrawl.db.running_crawler`)."""
    from gridcrawl.db import holder_is_extract, running_crawler
    holder = running_crawler(engine)
    if holder is not None and holder_is_extract(holder):
        typer.echo(f"warning: gridcrawl extract is extracting this database's items again ({holder}): the export "
                   "holds the items from before it", err=True)
    elif holder is not None:
        typer.echo(f"warning: a crawl is still running on this database ({holder}): the export is a "
                   "snapshot of what it has stored so far", err=True)


def _extract_refusal(where: str, holder: str) -> str:
    """The one-line error of ``gridcrawl extract`` when ``holder`` (the crawler lock's holder
    line, :func:`gridcrawl.db.running_crawler`) holds the crawl database's crawler lock: a
    crawl, or another extract."""
    from gridcrawl.db import holder_is_extract
    if holder_is_extract(holder):
        return (f"another gridcrawl extract is running on this database ({holder}): run this one once it has ended "
                "(the last to end leaves its items and item spec)")
    return (f"a crawl is still running on this database ({holder}): gridcrawl extract replaces the crawl's items and "
            "item spec, which would then mix with the items the crawl goes on storing; run it once the crawl has "
            "ended (or stop it: Ctrl-C)")


@app.command("extract", short_help="Extract the items again from the stored pages, fetching nothing.")
@setting_options("extract")
def extract_command(
    db: str = typer.Option(..., help="SQLAlchemy URL of the crawl database, e.g. sqlite:///crawl.db"),
    extract: str = typer.Option(..., "--extract", help="item spec file (TOML, docs/items.md)"),
    given: dict = SETTING_OPTIONS,
    progress: bool = typer.Option(True, help="show a progress bar"),
) -> None:
    """Extract every item again from the pages stored in --db, fetching nothing (the crawl must
    have stored page bodies). The item and item_issue tables are replaced; plugins named by the
    spec run here (a spec naming one not installed here is refused). The spec becomes the
    crawl's (a resumed crawl uses it). Refused while a crawl is running on --db; holds the
    crawl's crawler lock while it runs, so that a crawl started meanwhile is refused (it waited
    silently for the database, then stored items by either spec)."""
    import sqlalchemy as sa
    from gridcrawl.db import EXTRACT_HOLDER, database_kind, describe_error, open_database, shown_url, wrong_kind
    from pathlib import Path as _Path
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
    from gridcrawl.client.cli import check_item_spec
    from gridcrawl.client.items import ItemExportError, item_summary, reextract
    from gridcrawl.client.progress import ProgressView
    from gridcrawl.plugins import installed_plugins
    specs = check_item_spec(extract)
    _refuse_missing_plugins(specs, "gridcrawl extract runs the plugins of this Python environment, and would replace "
                                   "the crawl's items with none (install the plugin's package here)")
    plugin_timeout = given["plugin_timeout"]
    if plugin_timeout <= 0:
        fail("--plugin-timeout must be > 0")
    from gridcrawl.client.cli import _lock_crawl, sqlite_file
    from gridcrawl.client.store import CrawlStore
    # the crawler lock, held to the end: a crawl running goes on storing items by the spec it started with, and
    # one started meanwhile waited silently for as long as this held the database (SQLite), then stored items
    # by either spec. SQLite: taken before the first transaction (a crawl started meanwhile checks it first)
    path = sqlite_file(db)
    new_lock_file = path is not None and not os.path.exists(path + ".lock")
    lock = _lock_crawl(db, None, refusal=_extract_refusal, command=EXTRACT_HOLDER)
    try:
        engine = open_database(db, existing=True)
        kind = database_kind(engine)
    except DatabaseUnavailable as exc:
        fail(str(exc))
    if kind not in ("crawl", "both"):  # it added the crawl tables to whatever database it was given
        if lock is not None and new_lock_file:  # no lock file left beside a database that is no crawl's
            os.unlink(path + ".lock")
        fail(wrong_kind(engine, "crawl") or f"{shown_url(engine.url)} holds no crawl: gridcrawl extract takes a "
             "crawl database (WORKDIR/crawl.db)")
    lock = lock or _lock_crawl(db, CrawlStore(engine), refusal=_extract_refusal, command=EXTRACT_HOLDER)
    from gridcrawl.db import init_schema, older_schema
    if older_schema(engine, "crawl"):  # it writes, so it upgrades as the crawl's programs do (a traceback:
        from gridcrawl import models   # "no such table: crawl_rule")
        try:
            init_schema(engine, models.crawl_metadata, models.crawl_meta)
        except DatabaseUnavailable as exc:
            fail(str(exc))
    from gridcrawl.client.cli import refuse_unknown_page_types
    from gridcrawl.rules import RuleError, read_text_file, rules_from_table
    try:
        with engine.connect() as conn:
            crawl_rules = rules_from_table(conn)
    except RuleError as exc:
        fail(f"invalid rules: {exc}")
    # a page_type the crawl's pages do not have: every item of it would be replaced with none
    refuse_unknown_page_types(extract, specs, crawl_rules)
    bar = Progress(TextColumn("[bold]extract"), BarColumn(), MofNCompleteColumn(), TextColumn("pages"),
                   TimeElapsedColumn(), disable=not progress)
    with bar:
        task = bar.add_task("extract", total=None)
        try:
            done = reextract(engine, specs, plugins=installed_plugins(), plugin_timeout=plugin_timeout,
                             on_progress=lambda n, total: bar.update(task, completed=n, total=total),
                             spec=(extract, read_text_file(_Path(extract))))
        except ItemExportError as exc:
            fail(str(exc))
        except sa.exc.DBAPIError as exc:  # read-only, full, the server lost: one line, not a traceback
            fail(f"the crawl database failed: {describe_error(exc, engine)}; the crawl's items and item spec are as "
                 "they were")
        except KeyboardInterrupt:
            typer.echo("interrupted: the crawl's items and item spec are as they were", err=True)
            raise typer.Exit(130) from None
    if lock is not None:  # the items are stored: a crawl may start (an exit lets go of it too)
        lock.close()
    typer.echo(f"{counted(done.items, 'item')} from {counted(done.pages, 'page')}; "
               f"{counted(done.misses, 'miss', 'misses')} of required fields, {counted(done.errors, 'page')} whose "
               f"items failed, {counted(done.skipped, 'page')} without a stored body", err=True)
    for kind, pages in done.unrendered.items():
        typer.echo(f"note: item type {kind!r} asks for rendering (render = true), but {pages} of the stored pages it "
                   f"applies to {'was' if pages == 1 else 'were'} not rendered (document.render_seconds is NULL: the "
                   "crawl ran without --render): its items come from the HTML as served, before any script ran; a "
                   "crawl with --render, or with this spec, stores the rendered pages", err=True)
    ProgressView(enabled=False).item_summary(item_summary(engine, specs))


@app.command("fetch", short_help="Fetch and parse one URL as an executor would; store nothing.", epilog=SETTINGS_EPILOG)
@setting_options("fetch")
def fetch_command(
    ctx: typer.Context,
    url: str = typer.Argument(..., help="the URL to fetch and parse"),
    given: dict = SETTING_OPTIONS,
    allow_domain: List[str] = typer.Option(None, parser=domain, help="another domain in scope, as for gridcrawl run "
                                           "(repeatable)", metavar="DOMAIN"),
    allow_private: List[str] = typer.Option(None, parser=cidr, help="let the fetch reach this private CIDR too "
                                            "(repeatable, or comma-separated; the URL's own private or loopback "
                                            "address is always allowed)", metavar="CIDR"),
    extract: str = typer.Option(None, help="item spec file (TOML, docs/items.md): show the items its specs find "
                                "on this page", metavar="FILE"),
    rules: str = typer.Option(None, help="keep/follow rules file (.toml or .csv, docs/strategies.md): show what "
                              "they keep and follow on this page", metavar="FILE"),
    page_type: str = typer.Option(None, help="the page's type for --rules and --extract [base: a seed's]",
                                  metavar="TYPE"),
    render: bool = typer.Option(False, "--render", help="render the page in a headless browser first, as an "
                                "executor started with --render does (pip install 'gridcrawl[render]')"),
    wait_for: str = typer.Option(None, help="with --render: a CSS selector the browser waits for", metavar="CSS"),
    structured_data: bool = typer.Option(False, "--structured-data", help="show the RDF triples a semantic crawl "
                                         "reads here (RDF documents, JSON-LD, microdata, RDFa, Open Graph)"),
    body: bool = typer.Option(False, "--body", help="print the page's body as the executor parsed it (decoded; "
                              "the rendered DOM with --render) instead of the summary, as scrapy fetch does"),
    links: int = typer.Option(20, help="links of each kind to list (0: none, -1: all)"),
    json_output: bool = typer.Option(False, "--json", help="print the result as one JSON object (every link)"),
) -> None:
    """Fetch and parse one URL exactly as an executor would (robots.txt, proxy, logins, the SSRF
    guard, the crawl's scope) and show what came back and which of its links a crawl from it
    would follow. Stores nothing; needs no manager. Exit status 1 when the page failed."""
    from gridcrawl.checker import check_url
    from gridcrawl.client.cli import check_item_spec
    from gridcrawl.errors import RenderUnavailable
    from gridcrawl.urls import InvalidURL
    setup_logging("WARNING")
    check_wait_for(wait_for)
    specs = check_item_spec(extract) if extract else []
    rule_list = _load_rules(rules) if rules else []
    page_types = _load_page_types(rules, rule_list) if rules else {}
    # options that would change nothing, refused as gridcrawl run refuses them (they were ignored)
    if page_type is not None and not rules and not extract:
        fail("--page-type goes with --rules or --extract: without them a page's type changes nothing")
    if body and json_output:
        fail("--body and --json exclude each other: --body prints the page itself, --json the result of its fetch "
             "and parse")
    rendering = render or any(t.render for t in page_types.values()) or any(spec.render for spec in specs)
    if not rendering and (unused := _on_command_line(ctx, "render_timeout", "browser_path")):
        fail(f"{' and '.join(unused)} {'go' if len(unused) > 1 else 'goes'} with --render (or a page type or item "
             "spec with render = true): no page is rendered")
    if rules and page_type is not None:
        from gridcrawl.rules import unknown_page_type
        why = unknown_page_type(page_type, rule_list)
        if why is not None:
            fail(f"--page-type {why}")
    if extract:  # as gridcrawl run refuses it: without --rules, only the seeds have a page type (base)
        from gridcrawl.client.cli import refuse_unknown_page_types
        refuse_unknown_page_types(extract, specs, rule_list)
        _refuse_missing_plugins(specs, "gridcrawl fetch runs the plugins of this Python environment (install the "
                                       "plugin's package here)")
    try:
        settings = configured_settings(ctx, **given)
        _check_fetching(settings)
        private = _private_networks([url, *(allow_domain or [])], allow_private or [])
        check = check_url(url, settings, allow_domains=allow_domain or [], allow_private=private, items=specs,
                          rules=rule_list, page_type=page_type, render=render, wait_for=wait_for,
                          page_types=page_types, structured_data=structured_data, body=body)
    except InvalidURL as exc:  # "127.0.0.1:8300/": the URL it may have meant, as gridcrawl run says for a seed
        from gridcrawl.urls import address_hint
        fail(f"{exc}{address_hint(url.strip())}")
    except (ValueError, RenderUnavailable) as exc:
        fail(str(exc))
    shown = (lambda found: found) if links < 0 else (lambda found: found[:links])
    if body:
        content = check.page.content
        if isinstance(content, str):
            typer.echo(content, nl=not content.endswith("\n"))
        else:
            typer.echo(f"{check.page.error_kind or 'no body'}: {check.page.error or 'not HTML (nothing parsed)'}",
                       err=True)
    elif json_output:
        import json
        import msgspec
        shown_page = msgspec.to_builtins(check.page)
        if check.item_types is not None:  # with --extract: empty lists too (a result leaves them out)
            for key in ("items", "item_misses", "item_errors"):
                shown_page.setdefault(key, [])
        typer.echo(json.dumps({"page": shown_page, "route": check.route, "scope": check.scope,
                               "followed": check.followed, "outside": check.outside,
                               **({"item_dropped": check.item_dropped} if check.item_types is not None else {})}))
    else:
        _print_check(check, shown, settings.max_crawl_delay)
    raise typer.Exit(0 if check.ok else 1)


def _load_rules(path: str) -> list:
    """The keep/follow rules of file ``path``; exits with status 2 (one line naming the rule)
    when they are invalid."""
    from gridcrawl.rules import RuleError, load_rules
    try:
        return load_rules(path)
    except RuleError as exc:
        fail(f"invalid rules: {exc}")


def _load_page_types(path: str, rule_list: list) -> dict:
    """The page type options (``[page_type.NAME]``) of rules file ``path``; exits with status 2
    (one line) when they are invalid, as ``gridcrawl run`` does."""
    from gridcrawl.rules import RuleError, load_page_types
    try:
        return load_page_types(path, rule_list)
    except RuleError as exc:
        fail(f"invalid rules: {exc}")


def _print_check(check, shown, max_crawl_delay: float) -> None:
    """The table of ``gridcrawl fetch`` (a :class:`gridcrawl.checker.Check`), then the links
    ``shown(list)`` keeps of each kind; a robots.txt Crawl-delay over ``max_crawl_delay``
    (seconds) is shown with the delay a crawl keeps."""
    from gridcrawl.redact import terminal_text
    from rich.table import Table
    page = check.page
    table = Table(title=f"gridcrawl fetch {terminal_text(page.url)}", show_header=False)
    table.add_column(no_wrap=True)
    table.add_column(overflow="fold")
    rows = [("fetched", check.route if page.status is not None or page.error_kind is None else "-"),
            *((f"redirect {i}", target) for i, target in enumerate(page.redirects, 1)),
            ("final URL", page.final_url), ("status", str(page.status) if page.status is not None else "-"),
            ("content type", page.content_type or "-"), ("size", f"{page.size:,} bytes"),
            ("fetch / parse", f"{page.fetch_seconds:.3f} s / {page.parse_seconds:.3f} s")]
    if page.render_seconds is not None:
        rows.append(("rendered", f"{page.render_seconds:.2f} s in the browser"))
    if page.error_kind is not None:
        rows.append(("error", f"{page.error_kind}: {page.error}"))
    else:
        rows += [("title", page.title or "-"), ("encoding", page.encoding or "-"),
                 ("canonical link", page.canonical or "-"),
                 ("robots meta", ", ".join(k for k in ("noindex", "nofollow") if getattr(page, k)) or "-"),
                 ("links", f"{len(check.followed)} followed by a crawl (scope: {', '.join(check.scope)}), "
                           f"{len(check.outside)} not")]
    if page.crawl_delay:
        kept = (f"; a crawl waits {max_crawl_delay:g} s between its requests, max_crawl_delay"
                if page.crawl_delay > max_crawl_delay else "")
        rows.append(("crawl delay", f"{page.crawl_delay:g} s (robots.txt{kept})"))
    for name, value in rows:
        table.add_row(name, terminal_text(str(value)))
    console = _console()
    console.print(table)

    def heading(title: str, listed: list, found: list) -> None:  # "kept (20 of 51):" when --links cuts it
        count = f"{len(listed)} of {len(found)}" if len(listed) < len(found) else f"{len(found)}"
        console.print(f"{title} ({count}{', --links lists more' if len(listed) < len(found) else ''}):")

    for title, found in (("followed", check.followed), ("not followed", check.outside)):
        listed = shown(found)
        if listed:
            heading(title, listed, found)
            for target, anchor, *to_type in listed:
                console.print(f"  {terminal_text(target)}" + (f"  [dim]{terminal_text(anchor[:60])}[/dim]" if anchor else "")
                              + (f"  -> {terminal_text(str(to_type[0]))}" if to_type and to_type[0] else ""))
    if page.refused_requests:  # what the page's scripts asked for and did not get: why content may be missing
        heading("refused while rendering", shown(page.refused_requests), page.refused_requests)
        for target, kind, reason in shown(page.refused_requests):
            console.print(f"  {terminal_text(target)}  [dim]{terminal_text(kind)}: {terminal_text(reason)}[/dim]",
                          soft_wrap=True, highlight=False)
    if page.kept:
        heading("kept", shown(page.kept), page.kept)
        for target, number in shown(page.kept):
            console.print(f"  {terminal_text(target)}  [dim]rule {number}[/dim]")
    if page.items or page.item_misses or page.item_errors or check.item_dropped:
        import json
        console.print(f"items ({len(page.items)}):")
        for item in page.items:
            console.print(f"  {terminal_text(item['type'])} #{item['position']}: "
                          f"{terminal_text(json.dumps(item['fields'], ensure_ascii=False, default=str))}", soft_wrap=True)
        for item_type, position, name in page.item_misses:
            console.print(f"  [yellow]miss[/yellow] {terminal_text(item_type)} #{position}: required field {terminal_text(name)} is empty")
        for item_type, message in page.item_errors:
            console.print(f"  [red]error[/red] {terminal_text(item_type)}: {terminal_text(message)}")
        for item_type, position in check.item_dropped:
            console.print(f"  [dim]dropped[/dim] {terminal_text(item_type)} #{position}: its \\[item.where] "
                          "conditions left it out", highlight=False)
    elif check.item_types is not None and page.error_kind is None:
        console.print("items (0): " + (f"the specs of {', '.join(map(repr, check.item_types))} found nothing here"
                                       if check.item_types else "no item spec applies to this URL and page type"),
                      soft_wrap=True, highlight=False)
        for why in ([] if check.item_types else check.item_skipped):
            console.print(f"  {terminal_text(why)}", soft_wrap=True, highlight=False)
    if page.triples or (page.structured or {}).get("errors"):
        heading("triples", shown(page.triples), page.triples)
        for subject, predicate, value, *_ in shown(page.triples):
            console.print(f"  {terminal_text(str(subject))}  {terminal_text(str(predicate))}  {terminal_text(str(value)[:100])}")
        for error in (page.structured or {}).get("errors", []):
            console.print(f"  [red]error[/red] {terminal_text(str(error))}")


@config_app.command("show", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def config_show(
    ctx: typer.Context,
    program: str = typer.Option("manager", help="whose options to show too: manager, executor, client or run "
                                "(gridcrawl run)"),
) -> None:
    """Print every effective setting with its source (default, file, env, command line).

    The file is --config FILE or $GRIDCRAWL_CONFIG; extra arguments are parsed as PROGRAM's own
    command line, e.g. ``gridcrawl --config g.toml config show --program executor -- --threads 4``.
    """
    import importlib
    from gridcrawl.redact import terminal_text
    from rich.table import Table
    from gridcrawl.config import CONFIG_ENV, ConfigError, section_options_of, show_rows
    modules = {"manager": "gridcrawl.manager.cli", "executor": "gridcrawl.executor.cli",
               "client": "gridcrawl.client.cli", "run": "gridcrawl.cli"}
    if program not in modules:
        fail("--program must be manager, executor, client or run")
    program_app = importlib.import_module(modules[program]).app
    command = typer.main.get_command(program_app)
    if program == "run":  # gridcrawl run, which reads [run] with gridcrawl fetch and gridcrawl spark
        command = command.commands["run"]
    path = os.environ.get(CONFIG_ENV)
    try:
        rows = show_rows(program, command, [a for a in ctx.args if a != "--"], path,
                         section_options=section_options_of(program_app, program).get(program))
    except ConfigError as exc:
        fail(str(exc))
    title = "gridcrawl run" if program == "run" else f"gridcrawl-{program}"
    table = Table(title=f"effective settings of {title}" + (f" with {path}" if path else ""))
    table.add_column("setting", no_wrap=True)
    table.add_column("value", overflow="fold")
    table.add_column("source", overflow="fold")
    for name, value, source in rows:
        table.add_row(terminal_text(name), terminal_text(value), terminal_text(source), style=None if source == "default" else "bold")
    _console().print(table)


# ---------------------------------------------------------------- gridcrawl spark (issue 18)

@app.command("spark", short_help="Crawl SEEDS on Apache Spark, layer by layer (ParaCA).", epilog=SETTINGS_EPILOG)
@setting_options("spark", RUN_PANELS)
def spark_command(
    ctx: typer.Context,
    seeds: List[str] = typer.Argument(None, help="seed URLs (none: the --rules base URLs, or resume the crawl in --db)"),
    db: str = typer.Option(..., help="SQLAlchemy URL of the crawl database (SQLite only with a local master)",
                           metavar="URL"),
    master: str = typer.Option("local[*]", help="Spark master: local[*], local[N], spark://HOST:7077, yarn, k8s://...",
                               metavar="MASTER"),
    given: dict = SETTING_OPTIONS,
    ui: bool = typer.Option(False, "--ui", help="start Spark's web UI (local masters: on 127.0.0.1) and print its link"),
    log_level: str = typer.Option("WARNING", help="log level of the driver", metavar="LEVEL"),
    allow_domain: List[str] = typer.Option(None, parser=domain, help="also crawl this domain and its subdomains "
                                           "(repeatable)", metavar="DOMAIN",
                                           rich_help_panel="Scope and politeness"),
    allow_private: List[str] = typer.Option(None, parser=cidr, help="let the tasks fetch this private CIDR too "
                                            "(repeatable, or comma-separated; the seeds' own private or loopback "
                                            "addresses are always allowed)", metavar="CIDR",
                                            rich_help_panel="Scope and politeness"),
    rules: str = typer.Option(None, help="keep/follow rules file (.toml or .csv, docs/strategies.md)", metavar="FILE",
                              rich_help_panel="Strategy"),
    focus: str = typer.Option(None, help="focused crawl: keywords (links below --min-relevance not followed)",
                              metavar="KEYWORDS", rich_help_panel="Strategy"),
    min_relevance: float = typer.Option(None, help="focused crawl: links scoring below this (0..1) are not followed [0]",
                                        rich_help_panel="Strategy"),
    extract: str = typer.Option(None, help="item spec file (TOML, docs/items.md): items extracted from the pages "
                                "in the Spark tasks, into the item table", rich_help_panel="Strategy"),
    structured_data: bool = typer.Option(False, "--structured-data", help="semantic crawl: read RDF documents and "
                                         "the structured data of pages into the triple table",
                                         rich_help_panel="Strategy"),
    seeds_file: str = typer.Option(None, help=SEEDS_FILE_HELP, metavar="FILE"),
    retry_failed: str = typer.Option(None, metavar="all|KIND,...", help=RETRY_HELP),
) -> None:
    """Crawl SEEDS on Apache Spark, layer by layer (ParaCA): the frontier partitioned by host,
    download and parse in the tasks with the executor's code, optimise (distinct, anti-join on
    fingerprints), results in the crawl tables of --db. Running it again resumes; the grid
    (gridcrawl run / gridcrawl-client) continues the same tables. Needs gridcrawl[spark]."""
    setup_logging(log_level)
    from gridcrawl import spark as gs
    from gridcrawl.client.cli import seed_list
    seeds = seed_list(seeds or [], seeds_file)
    try:
        settings = configured_settings(ctx, **given)
        _check_fetching(settings)
        db = _absolute_sqlite(db)
        private = _private_networks([*seeds, *(allow_domain or [])], allow_private or [])
        _warn_anonymous(settings, [*seeds, *(allow_domain or [])])
        master = gs.check_master(master)
    except ValueError as exc:
        fail(str(exc))
    if db.startswith("sqlite") and not gs.is_local(master):
        fail(f"--master {master} runs tasks on other machines: use a database they all reach "
             "(postgresql+psycopg://, mysql+pymysql://, mssql+pyodbc://), not SQLite")
    from gridcrawl.client.cli import capped_note, exit_status, max_pages_note, open_crawl, parse_retry_kinds
    store, scope = open_crawl(settings, db, seeds, allow_domain or [], rules=rules, focus=focus,
                              min_relevance=min_relevance, retry_failed=parse_retry_kinds(retry_failed),
                              extract=extract, structured_data=structured_data, command="gridcrawl spark")
    if revisits := store.queued_revisits():
        # a Spark layer fetches without conditional requests and does not version documents
        fail(f"{revisits} recrawl visits are queued in this crawl database (gridcrawl-client --recrawl): "
             "finish them on the grid (gridcrawl run / gridcrawl-client) before running gridcrawl spark on it")
    counts = store.counts()
    if not counts["to_visit"] or max_pages_note(settings.max_pages, counts):
        # nothing for Spark to do: say so without starting a JVM (20-60 s) or asking for Java
        done_line = max_pages_note(settings.max_pages, counts) or "nothing left to visit: the crawl is finished"
        typer.echo(f"{done_line} ({counts['visited']:,} visited, {counted(counts['documents'], 'document')}, "
                   f"{counted(counts['errors'], 'error')}); Spark not started")
        raise typer.Exit(0)
    if reason := gs.spark_unavailable():
        fail(reason)
    private += [n for n in _private_networks(scope.allowed_domains, []) if n not in private]
    from gridcrawl.cli_common import stop_on_signals
    starting = stop_on_signals()  # a Ctrl-C while the JVM starts (20-60 s) waits for it, then ends the run
    _say_when_stopped(starting, "ending the run once Spark has started (nothing is fetched)")
    try:
        sc = gs.spark_context(master, ui=ui)
    except Exception as exc:  # a Java that cannot run Spark, a --master it cannot use
        fail(f"Spark did not start (--master {master}): {gs.spark_error(exc)}")
    if starting.is_set():
        gs.stop_spark(sc)
        typer.echo("interrupted while Spark started: nothing was fetched", err=True)
        raise typer.Exit(130)
    if sc.uiWebUrl:
        typer.echo(f"Spark UI: {sc.uiWebUrl}")
    partitions = settings.spark_partitions or 2 * sc.defaultParallelism
    typer.echo(f"Spark master {sc.master}, {counted(partitions, 'partition')}")

    def report_layer(f, total) -> None:
        capped = f" (and {f.capped} more left out: over the per-host cap)" if f.capped else ""
        typer.echo(f"layer {f.layer} (depth {f.depth}): {counted(f.urls, 'URL')}, {counted(f.pages, 'page')}, "
                   f"{counted(f.errors, 'error')}, "
                   + (f"{f.disallowed:,} disallowed by robots.txt, " if f.disallowed else "")
                   + f"{counted(max(0, f.queued - f.capped), 'new link')} queued{capped} | download+parse {f.download_seconds:.2f} s (fetch {f.fetch_seconds:.2f} s, "
                   f"parse {f.parse_seconds:.2f} s, write {f.write_seconds:.2f} s summed over tasks), "
                   f"optimise {f.optimise_seconds:.2f} s, commit {f.commit_seconds:.2f} s | largest Python worker "
                   f"{f.peak_worker_rss / 2**20:.0f} MB | total {counted(total.pages, 'page')}, "
                   f"{total.pages_per_second:.1f} pages/s")
    def report_wait(f, seconds, finished, tasks) -> None:  # a layer held up: say so every minute
        typer.echo(f"layer {f.layer} (depth {f.depth}): {counted(f.urls, 'URL')}, downloading for {seconds:.0f} s"
                   + (f", {finished} of {counted(tasks, 'task')} done" if tasks else "")
                   + " (a task runs a host's URLs one crawl delay apart; a host that accepts connections but "
                   "never answers holds a fetch to its deadline, download_timeout, and an unreachable robots.txt "
                   "is tried again retry_times times, robots_retry apart)")
    stop = stop_on_signals()  # again: SparkContext put its own SIGINT handler in place
    _say_when_stopped(stop, "stopping once the layer in progress is fetched and committed (a crawl delay can "
                            "make that minutes); again to end at once, and the next run fetches that layer again")
    try:
        result = gs.SparkCrawl(sc, store, db, settings, scope, allow_private=private,
                               on_layer=report_layer, on_wait=report_wait).run(stop)
    except Exception as exc:  # a job whose task failed every attempt: the tables keep what is committed
        fail(f"the Spark crawl stopped: {gs.spark_error(exc)} (run again to resume)")
    finally:
        gs.stop_spark(sc)
    counts = store.counts()
    typer.echo(f"{counted(result.pages, 'page')} in {result.seconds:.1f} s ({result.pages_per_second:.1f} pages/s), "
               f"{counted(len(result.layers), 'layer')}; tables: {counted(counts['documents'], 'document')}, "
               f"{counts['visited']:,} visited, {counts['to_visit']:,} to visit, {counted(counts['errors'], 'error')}, "
               + (f"{counts['disallowed']:,} disallowed by robots.txt (not errors), " if counts["disallowed"] else "")
               + f"{counts['set_aside']:,} set aside "
               "(duplicates, traps, noindex)" + (f", {counted(counts['kept'], 'link')} kept (kept_link)" if counts["kept"] else ""))
    if capped := sum(f.capped for f in result.layers):
        typer.echo(f"{counted(capped, 'link')} {capped_note(settings.max_pages_per_host, 'a new --db')}")
    if not counts["to_visit"]:  # a finished crawl: the keep/follow rules that matched nothing
        from gridcrawl.client.cli import idle_rule_notes
        deepest = max((f.depth for f in result.layers), default=-1)
        left_out = [why for why, on in (("--max-depth", 0 <= settings.max_depth <= deepest),
                                        ("--max-pages-per-host", capped)) if on]
        for line in idle_rule_notes(store.idle_rules(), rules, left_out):
            typer.echo(line)
    if reached := max_pages_note(settings.max_pages, counts):
        typer.echo(reached)
    elif counts["to_visit"] and stop.is_set():
        typer.echo(f"interrupted with {counted(counts['to_visit'], 'URL')} left to visit: the same command resumes "
                   "the crawl")
    if store.strategy.items or store.strategy.structured_data:  # the sections gridcrawl run's summary ends with
        from gridcrawl.client.progress import ProgressView
        from gridcrawl.db import shown_url
        view = ProgressView(enabled=False)
        if store.strategy.items:  # per type and field: a selector that never matched is flagged
            from gridcrawl.client.items import item_summary
            view.item_summary(item_summary(store.engine, store.strategy.items))
        if store.strategy.structured_data:
            view.semantic_summary(counts, f"gridcrawl report --crawl-db {shown_url(db)}")
    groups = store.error_summary() if counts["errors"] or counts["disallowed"] else []
    errors = [g for g in groups if g.failed]
    if counts["errors"] or counts["set_aside"] or counts["disallowed"]:
        from gridcrawl.db import shown_url
        typer.echo(f"errors by kind, one example each: gridcrawl report --crawl-db {shown_url(db)}")
    run_errors, disallowed = sum(f.errors for f in result.layers), sum(f.disallowed for f in result.layers)
    if result.pages and not run_errors and disallowed >= result.pages and not stop.signum:
        # robots.txt disallowed every page: no failure (exit 0), said as gridcrawl run says it
        from gridcrawl.client.cli import disallowed_note, rerun_command
        example = next((g.url for g in groups if g.disallowed), "")
        typer.echo(disallowed_note(disallowed, len(seeds), example, "gridcrawl spark", rerun_command("gridcrawl")))
    exit_status({"pages": result.pages, "run_errors": run_errors, "run_disallowed": disallowed, "signal": stop.signum,
                 "error_kinds": {g.label: g.count for g in errors}})  # exit 1 when every page of this run failed


def _say_when_stopped(stop: StopEvent, what: str) -> None:
    """Print ``REASON: what`` on standard error as soon as a signal sets ``stop`` (from a daemon
    thread that waits for it), so that a Ctrl-C whose effect waits for a layer to end is answered
    at once, not by a silence as long as the layer. Nothing is printed when the event is set
    without a signal, or never."""
    def watch() -> None:
        stop.wait()
        if stop.signum is not None:
            typer.echo(f"{stop.reason}: {what}", err=True)
    threading.Thread(target=watch, name="say-when-stopped", daemon=True).start()


def _absolute_sqlite(db: str) -> str:
    """``db`` with a relative SQLite file path made absolute (Spark's Python workers need not
    share the driver's working folder). Raises ``ValueError`` on a URL SQLAlchemy cannot read."""
    import sqlalchemy as sa
    try:
        url = sa.engine.make_url(db)
    except sa.exc.ArgumentError as exc:
        raise ValueError(f"--db {db!r} is not a database URL: {exc}") from None
    if url.get_backend_name() != "sqlite" or not url.database or url.database == ":memory:" or os.path.isabs(url.database):
        return db
    return url.set(database=os.path.abspath(url.database)).render_as_string(hide_password=False)


def main() -> None:
    """Entry point of the ``gridcrawl`` script (reads ``--config`` and ``GRIDCRAWL_*`` first)."""
    run_program(app, "run", keep_config_option=False)


if __name__ == "__main__":  # pragma: no cover
    main()
