"""``gridcrawl-client``: crawl from seed URLs through the grid into a crawl database."""

from __future__ import annotations

from typing import List

import typer

from gridcrawl.cli_common import fail, setup_logging, stop_on_signals
from gridcrawl.db import DatabaseUnavailable, open_database
from gridcrawl.settings import Settings
from gridcrawl.transport import check_endpoint
from gridcrawl.urls import InvalidURL

app = typer.Typer(add_completion=False, help="The gridcrawl crawler application: keeps the crawl's "
                  "document / visited_url / to_visit_url tables and submits one grid thread per URL.")


@app.command()
def crawl(
    seeds: List[str] = typer.Argument(None, help="seed URLs (none: resume the crawl in --db)"),
    manager: str = typer.Option(..., help="the manager's endpoint, e.g. tcp://HOST:9000"),
    db: str = typer.Option(..., help="SQLAlchemy URL of the crawl database, e.g. sqlite:///crawl.db"),
    max_pages: int = typer.Option(0, help="stop after this many pages (0: no limit)"),
    max_depth: int = typer.Option(-1, help="largest link depth from a seed (-1: no limit)"),
    allow_domain: List[str] = typer.Option(None, help="also crawl this domain and its subdomains (repeatable)"),
    max_in_flight: int = typer.Option(Settings.max_in_flight, help="grid threads submitted at once"),
    name: str = typer.Option("gridcrawl", help="application name recorded at the manager"),
    no_content: bool = typer.Option(False, "--no-content", help="do not store page bodies"),
    heartbeat_interval: float = typer.Option(Settings.heartbeat_interval, help="seconds between heartbeats"),
    heartbeat_liveness: int = typer.Option(Settings.heartbeat_liveness, help="missed heartbeats before the manager counts as lost"),
    connect_timeout: float = typer.Option(Settings.connect_timeout, help="seconds to wait for the manager's answer"),
    progress: bool = typer.Option(True, help="show a progress bar"),
    log_level: str = typer.Option("INFO", help="DEBUG, INFO, WARNING or ERROR"),
    log_file: str = typer.Option(None, help="write the log to this file instead of stderr"),
) -> None:
    """Crawl SEEDS (or resume the crawl stored in --db) until done or --max-pages."""
    setup_logging(log_level, log_file)
    try:
        check_endpoint(manager)
        settings = Settings(max_pages=max_pages, max_depth=max_depth, max_in_flight=max_in_flight,
                            store_content=not no_content, heartbeat_interval=heartbeat_interval,
                            heartbeat_liveness=heartbeat_liveness, connect_timeout=connect_timeout).validate()
    except ValueError as exc:
        fail(str(exc))
    run_crawl(settings, manager, db, seeds or [], allow_domain or [], name=name, show_progress=progress)


def run_crawl(settings: Settings, manager: str, db: str, seeds: list[str], allow_domains: list[str], *,
              name: str = "gridcrawl", show_progress: bool = True) -> dict:
    """Open the crawl database, queue ``seeds``, crawl through the manager, print a summary.

    Shared by ``gridcrawl-client`` and ``gridcrawl run``. Exits with status 2 (one-line error)
    on an invalid seed, an unusable database, or a manager that does not answer. Returns the
    final counts of the crawl tables plus ``seconds`` and ``pages_per_second`` of this run.
    """
    from gridcrawl.client.app import CrawlApplication, ManagerUnreachable, Refused
    from gridcrawl.client.progress import ProgressView
    from gridcrawl.client.store import CrawlStore, check_seed

    try:
        for seed in seeds:
            check_seed(seed)
    except InvalidURL as exc:
        fail(f"invalid seed URL: {exc}")
    try:
        store = CrawlStore(open_database(db))
    except DatabaseUnavailable as exc:
        fail(str(exc))
    store.add_seeds(seeds)
    if not seeds and store.get_meta("allowed_domains") is None:
        fail("no seed URLs given and no crawl to resume in the database")
    scope = store.scope(seeds, allow_domains, settings.max_depth)
    view = ProgressView(enabled=show_progress, total=settings.max_pages or None)
    application = CrawlApplication(settings, manager, store, scope, name=name, on_progress=view.update)
    with view:
        try:
            final = application.run(stop_on_signals())
        except ManagerUnreachable as exc:
            fail(str(exc))
        except Refused as exc:
            fail(f"the manager refused the application: {exc}")
    counts = store.counts()
    counts.update(seconds=final.seconds, pages_per_second=final.pages_per_second, pages=final.pages,
                  application_id=final.application_id)
    view.summary(counts)
    return counts


def main() -> None:
    """Entry point of the ``gridcrawl-client`` script."""
    app()


if __name__ == "__main__":  # pragma: no cover
    main()
