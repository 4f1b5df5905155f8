"""``gridcrawl``: the whole grid on one machine (``run``), thread timings (``report``), and
database set-up (``db init``)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import List

import typer

from gridcrawl.cli_common import fail, setup_logging
from gridcrawl.db import DatabaseUnavailable, open_database, init_schema
from gridcrawl.settings import Settings

app = typer.Typer(add_completion=False, help="gridcrawl: a grid web crawler (manager, executors, client).")
db_app = typer.Typer(add_completion=False, help="Database set-up.")
app.add_typer(db_app, name="db")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _stop(processes: list[subprocess.Popen], timeout: float = 5.0) -> None:
    """SIGTERM every process, wait up to ``timeout`` seconds, then SIGKILL what is left."""
    for proc in processes:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + timeout
    for proc in processes:
        try:
            proc.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@app.command()
def run(
    seeds: List[str] = typer.Argument(..., help="seed URLs"),
    executors: int = typer.Option(2, help="executor processes to start"),
    threads: int = typer.Option(Settings.threads, help="worker threads per executor"),
    max_pages: int = typer.Option(0, help="stop after this many pages (0: no limit)"),
    max_depth: int = typer.Option(-1, help="largest link depth from a seed (-1: no limit)"),
    allow_domain: List[str] = typer.Option(None, help="also crawl this domain and its subdomains"),
    workdir: Path = typer.Option(Path("gridcrawl-run"), help="folder for the SQLite databases and logs"),
    no_content: bool = typer.Option(False, "--no-content", help="do not store page bodies"),
    progress: bool = typer.Option(True, help="show a progress bar"),
    log_level: str = typer.Option("WARNING", help="log level of this process (the others log to WORKDIR)"),
) -> None:
    """Run a manager, EXECUTORS executor processes and a client on this machine and crawl SEEDS.

    Databases: WORKDIR/manager.db (thread timings) and WORKDIR/crawl.db (documents); logs:
    WORKDIR/*.log. Running it again with the same WORKDIR resumes the crawl.
    """
    setup_logging(log_level)
    if executors < 1:
        fail("--executors must be at least 1")
    try:
        settings = Settings(threads=threads, max_pages=max_pages, max_depth=max_depth,
                            store_content=not no_content).validate()
    except ValueError as exc:
        fail(str(exc))
    from gridcrawl.client.cli import run_crawl
    from gridcrawl.client.store import check_seed
    from gridcrawl.urls import InvalidURL
    try:
        for seed in seeds:
            check_seed(seed)
    except InvalidURL as exc:
        fail(f"invalid seed URL: {exc}")
    workdir.mkdir(parents=True, exist_ok=True)
    endpoint = f"tcp://127.0.0.1:{_free_port()}"
    manager_db = f"sqlite:///{(workdir / 'manager.db').resolve()}"
    python = [sys.executable, "-m"]
    processes = [subprocess.Popen(python + ["gridcrawl.manager", "--bind", endpoint, "--db", manager_db,
                                            "--log-file", str(workdir / "manager.log")])]
    try:
        for i in range(executors):
            processes.append(subprocess.Popen(python + [
                "gridcrawl.executor", "--manager", endpoint, "--threads", str(threads),
                "--name", f"executor-{i + 1}", "--log-file", str(workdir / f"executor-{i + 1}.log")]))
        counts = run_crawl(settings, endpoint, f"sqlite:///{(workdir / 'crawl.db').resolve()}", seeds,
                           allow_domain or [], name="gridcrawl run", show_progress=progress)
    finally:
        _stop(processes)
    from gridcrawl.report import executor_timings
    _print_timings(executor_timings(open_database(manager_db), counts.get("application_id")))


def _print_timings(rows) -> None:
    from rich.console import Console
    from rich.table import Table
    table = Table(title="threads per executor")
    for column in ("executor", "host", "threads", "mean s", "min s", "max s", "mean wait s", "pages/s"):
        table.add_column(column, justify="left" if column in ("executor", "host") else "right")
    for r in rows:
        table.add_row(r.name, r.host, str(r.threads), f"{r.mean_seconds:.3f}", f"{r.min_seconds:.3f}",
                      f"{r.max_seconds:.3f}", f"{r.mean_wait_seconds:.3f}", f"{r.pages_per_second:.1f}")
    Console().print(table)


@app.command()
def report(
    db: str = typer.Option(..., help="SQLAlchemy URL of the manager database"),
    application: str = typer.Option(None, help="only this application id"),
) -> None:
    """Print thread timings per executor (count, mean/min/max seconds, pages/s) from SQL."""
    try:
        engine = open_database(db)
    except DatabaseUnavailable as exc:
        fail(str(exc))
    from gridcrawl.report import executor_timings
    import sqlalchemy as sa
    try:
        rows = executor_timings(engine, application)
    except sa.exc.DBAPIError as exc:
        fail(f"{db} is not a gridcrawl manager database: {str(exc.orig).splitlines()[0]}")
    _print_timings(rows)


@db_app.command("init")
def db_init(
    db: str = typer.Option(..., help="SQLAlchemy URL of the database"),
    kind: str = typer.Option("both", help="manager, crawl or both: which tables to create"),
) -> None:
    """Create gridcrawl's tables in DB if they are missing (idempotent)."""
    from gridcrawl import models
    if kind not in ("manager", "crawl", "both"):
        fail("--kind must be manager, crawl or both")
    try:
        engine = open_database(db)
        if kind in ("manager", "both"):
            init_schema(engine, models.manager_metadata, models.manager_meta)
        if kind in ("crawl", "both"):
            init_schema(engine, models.crawl_metadata, models.crawl_meta)
    except DatabaseUnavailable as exc:
        fail(str(exc))
    typer.echo(f"schema ready in {engine.url.render_as_string(hide_password=True)}")


def main() -> None:
    """Entry point of the ``gridcrawl`` script."""
    app()


if __name__ == "__main__":  # pragma: no cover
    main()
