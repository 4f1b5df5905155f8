"""``gridcrawl-manager``: run the grid's manager (a ZeroMQ broker recording into SQL)."""

from __future__ import annotations

import typer
import zmq

from gridcrawl.cli_common import fail, setup_logging, stop_on_signals
from gridcrawl.db import DatabaseUnavailable, open_database
from gridcrawl.settings import Settings
from gridcrawl.transport import check_endpoint

DEFAULT_DB = "sqlite:///gridcrawl-manager.db"

app = typer.Typer(add_completion=False, help="The gridcrawl manager: executors register with it, "
                  "applications submit grid threads to it, and it records both in SQL.")


@app.callback(invoke_without_command=True)
def serve(
    ctx: typer.Context,
    bind: str = typer.Option("tcp://*:9000", help="ZeroMQ endpoint to listen on"),
    db: str = typer.Option(DEFAULT_DB, help="SQLAlchemy URL of the manager database"),
    heartbeat_interval: float = typer.Option(Settings.heartbeat_interval, help="seconds between heartbeats"),
    heartbeat_liveness: int = typer.Option(Settings.heartbeat_liveness, help="missed heartbeats before a peer is dead"),
    thread_timeout: float = typer.Option(Settings.thread_timeout, help="seconds before a running thread is taken back"),
    max_attempts: int = typer.Option(Settings.max_attempts, help="lost attempts before a thread fails (poison)"),
    prefetch: int = typer.Option(Settings.prefetch, help="threads an executor may buffer beyond its workers"),
    log_level: str = typer.Option("INFO", help="DEBUG, INFO, WARNING or ERROR"),
    log_file: str = typer.Option(None, help="write the log to this file instead of stderr"),
) -> None:
    """Run the manager until SIGINT/SIGTERM."""
    if ctx.invoked_subcommand is not None:
        return
    setup_logging(log_level, log_file)
    try:
        check_endpoint(bind)
        settings = Settings(heartbeat_interval=heartbeat_interval, heartbeat_liveness=heartbeat_liveness,
                            thread_timeout=thread_timeout, max_attempts=max_attempts, prefetch=prefetch).validate()
        engine = open_database(db)
    except (ValueError, DatabaseUnavailable) as exc:
        fail(str(exc))
    from gridcrawl.manager.server import ManagerServer
    try:
        server = ManagerServer(settings, bind, engine)
    except zmq.ZMQError as exc:
        fail(f"cannot listen on {bind}: {exc}")
    except DatabaseUnavailable as exc:
        fail(str(exc))
    server.serve(stop_on_signals())


def main() -> None:
    """Entry point of the ``gridcrawl-manager`` script."""
    app()


if __name__ == "__main__":  # pragma: no cover
    main()
