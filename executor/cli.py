"""``gridcrawl-executor``: lend this desktop to the grid (fetch and parse the pages it is given)."""

from __future__ import annotations

import typer

from gridcrawl.cli_common import fail, setup_logging, stop_on_signals
from gridcrawl.settings import Settings
from gridcrawl.transport import check_endpoint

app = typer.Typer(add_completion=False, help="A gridcrawl executor: registers with the manager and "
                  "runs grid threads (fetch, parse, extract links) on worker threads.")


@app.command()
def run(
    manager: str = typer.Option(..., help="the manager's endpoint, e.g. tcp://HOST:9000"),
    threads: int = typer.Option(Settings.threads, help="worker threads (grid threads run at once)"),
    name: str = typer.Option(None, help="a name for this executor (default host:pid)"),
    heartbeat_interval: float = typer.Option(Settings.heartbeat_interval, help="seconds between heartbeats"),
    heartbeat_liveness: int = typer.Option(Settings.heartbeat_liveness, help="missed heartbeats before the manager counts as lost"),
    connect_timeout: float = typer.Option(Settings.connect_timeout, help="seconds to wait for the manager's first answer"),
    download_timeout: float = typer.Option(Settings.download_timeout, help="wall-clock deadline of one fetch, seconds"),
    max_body_bytes: int = typer.Option(Settings.max_body_bytes, help="largest body kept, bytes"),
    user_agent: str = typer.Option(Settings.user_agent, help="User-Agent header of every fetch"),
    keep_non_html: bool = typer.Option(False, help="also download bodies of non-HTML responses"),
    log_level: str = typer.Option("INFO", help="DEBUG, INFO, WARNING or ERROR"),
    log_file: str = typer.Option(None, help="write the log to this file instead of stderr"),
) -> None:
    """Run the executor until SIGINT/SIGTERM."""
    setup_logging(log_level, log_file)
    try:
        check_endpoint(manager)
        settings = Settings(threads=threads, heartbeat_interval=heartbeat_interval,
                            heartbeat_liveness=heartbeat_liveness, connect_timeout=connect_timeout,
                            download_timeout=download_timeout, max_body_bytes=max_body_bytes,
                            user_agent=user_agent, keep_non_html=keep_non_html).validate()
    except ValueError as exc:
        fail(str(exc))
    from gridcrawl.executor.agent import ExecutorAgent, ManagerUnreachable, Refused
    agent = ExecutorAgent(settings, manager, name=name)
    try:
        agent.run(stop_on_signals())
    except ManagerUnreachable as exc:
        fail(str(exc))
    except Refused as exc:
        fail(f"the manager refused this executor: {exc}")


def main() -> None:
    """Entry point of the ``gridcrawl-executor`` script."""
    app()


if __name__ == "__main__":  # pragma: no cover
    main()
