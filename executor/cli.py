"""``gridcrawl-executor``: lend this desktop to the grid (fetch and parse the pages it is given)."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import List

import typer

from gridcrawl.cli_common import (SETTING_OPTIONS, cidr, fail, manager_endpoints, peer_credentials, setting_options,
                                  setup_logging, stop_on_signals)
from gridcrawl.config import run_program, settings as configured_settings

app = typer.Typer(add_completion=False, rich_markup_mode="markdown",
                  help="A gridcrawl executor: registers with the manager and "
                  "runs grid threads (fetch, parse, extract links) on worker threads.")


#: The sections of ``--help`` the options generated from Settings go to (by their group).
PANELS = {"connection": "Connection and login", "fetching": "Fetching", "politeness": "Fetching",
          "rendering": "Rendering (pages that need JavaScript)", "idle": "Idle desktop (with --idle-only)"}


@app.command()
@setting_options("executor", PANELS)
def run(
    ctx: typer.Context,
    manager: List[str] = typer.Option(..., help="the manager's endpoint, e.g. tcp://HOST:9000; repeat it "
                                      "(or separate with commas) for hot-standby managers, tried in order"),
    given: dict = SETTING_OPTIONS,
    name: str = typer.Option(None, help="a name for this executor (default host:pid)"),
    user: str = typer.Option(None, help="log in as this user (password from $GRIDCRAWL_PASSWORD or a prompt)",
                                   rich_help_panel="Connection and login"),
    curve_secret: Path = typer.Option(None, help="this executor's CURVE secret key file (gridcrawl keys new); "
                                      "needs --curve-server-key", rich_help_panel="Connection and login"),
    curve_server_key: Path = typer.Option(None, help="the manager's CURVE public key file",
                                       rich_help_panel="Connection and login"),
    allow_private: List[str] = typer.Option(None, parser=cidr, help="fetch addresses in this CIDR even though they are "
                                            "private/loopback/link-local (repeatable, or comma-separated; default: none)", metavar="CIDR"),
    capability: List[str] = typer.Option(None, help="declare this capability too (repeatable), besides the "
                                         "installed extractor plugins' plugin:NAME ones", metavar="NAME"),
    log_level: str = typer.Option("INFO", help="DEBUG, INFO, WARNING or ERROR", rich_help_panel="Logs"),
    log_file: str = typer.Option(None, help="write the log to this file instead of stderr", rich_help_panel="Logs"),
    log_json: bool = typer.Option(False, "--log-json", help="log one JSON object per line", rich_help_panel="Logs"),
    idle_only: bool = typer.Option(False, "--idle-only/--dedicated", help="a non-dedicated desktop: take grid "
                                   "threads only while other programs leave the CPU idle (and within --hours); "
                                   "--dedicated: whenever it runs, whatever the configuration file says"),
    hours: str = typer.Option(None, help="with --idle-only: local hours to work, HH:MM-HH:MM (may wrap "
                              "midnight, e.g. 18:00-08:00)", rich_help_panel="Idle desktop (with --idle-only)"),
    render: bool = typer.Option(False, "--render", help="start a headless browser (Playwright driving an installed "
                                "Chromium) and offer the render capability: this executor runs the grid "
                                "threads that need JavaScript; pip install 'gridcrawl[render]'",
                                rich_help_panel="Rendering (pages that need JavaScript)"),
    config: Path = typer.Option(None, help="TOML configuration file (then GRIDCRAWL_* variables, then these "
                                "options; see docs/operations.md)"),
) -> None:
    """Run the executor until SIGINT/SIGTERM."""
    setup_logging(log_level, log_file, log_json)
    idle = None
    if idle_only:
        from gridcrawl.executor.idle import IdleMonitor, IdlePolicy, parse_hours
        try:
            window = parse_hours(hours) if hours else None
        except ValueError as exc:
            fail(f"{exc} ({given_where(ctx, 'hours', '--hours')})")
        try:
            idle = IdleMonitor(IdlePolicy(given["cpu_threshold"], window, idle_seconds=given["idle_seconds"]))
        except ValueError as exc:
            key = "cpu_threshold" if "threshold" in str(exc) else "idle_seconds"
            fail(f"{exc} ({given_where(ctx, key, '--' + key.replace('_', '-'))})")
    else:
        unused = idle_settings_unused(ctx)
        if unused is not None:
            fail(unused)
    try:
        manager = manager_endpoints(manager)
        settings = configured_settings(ctx, **given)
    except ValueError as exc:
        fail(str(exc))
    for warning in settings.warnings(os.environ):
        logging.getLogger("gridcrawl.executor").warning("%s", warning)
    from gridcrawl.executor.memory import disable_fastbins, limit_malloc_arenas
    limit_malloc_arenas()  # before the worker threads start
    disable_fastbins()
    from gridcrawl.executor.agent import ExecutorAgent, ManagerUnreachable, Refused
    from gridcrawl.errors import RenderUnavailable
    if "render" in (capability or []) and not render:
        fail("--capability render needs a browser: use --render instead")
    from gridcrawl.protocol import CAPABILITY_LENGTH
    from gridcrawl.plugins import PREFIX
    for claimed in capability or []:
        if claimed.startswith(PREFIX):  # threads needing it would come here and fail their items
            fail(f"--capability {claimed}: an executor declares the {PREFIX}NAME capabilities of the extractor "
                 "plugins installed in its Python environment by itself: install the plugin's package here instead")
        if not claimed or " " in claimed or not claimed.isprintable() or len(claimed) > CAPABILITY_LENGTH:  # the manager refuses it
            fail(f"--capability {claimed!r}: a capability is 1 to {CAPABILITY_LENGTH} printable characters without spaces")
    curve, password = peer_credentials(user, curve_secret, curve_server_key, manager)
    try:
        agent = ExecutorAgent(settings, manager, name=name, user=user, password=password, curve=curve,
                              allow_private=allow_private or [], dedicated=not idle_only, idle=idle,
                              capabilities=capability or [], render=render)
    except (ValueError, RenderUnavailable) as exc:
        fail(str(exc))
    try:
        agent.run(stop_on_signals())
    except ManagerUnreachable as exc:
        fail(str(exc))
    except Refused as exc:
        fail(f"the manager refused this executor: {exc}")
    if agent.failure:
        fail(agent.failure)


#: The settings and options only an idle-only executor reads, with their command-line flags.
IDLE_ONLY_KEYS = (("hours", "--hours"), ("cpu_threshold", "--cpu-threshold"), ("idle_seconds", "--idle-seconds"))


def given_where(ctx: typer.Context, key: str, flag: str) -> str:
    """Where the running command's ``key`` was given: ``flag`` when typed, else its source in the
    configuration file or the environment (``file gridcrawl.toml [executor]``, ``env
    GRIDCRAWL_HOURS``), as a refusal names it."""
    from gridcrawl.config import Resolution
    if getattr(ctx.get_parameter_source(key), "name", "") == "COMMANDLINE":
        return flag
    resolution = ctx.obj if isinstance(ctx.obj, Resolution) else None
    found = resolution and (resolution.options.get(key) or resolution.settings.get(key))
    return found.source if found else flag


def idle_settings_unused(ctx: typer.Context) -> str | None:
    """Why a dedicated executor's ``hours``, ``cpu_threshold`` or ``idle_seconds`` would do
    nothing, in one line, or None. A desktop's file that says ``hours = "18:00-08:00"`` without
    ``idle_only = true`` made an executor that took grid threads at any hour, its owner's working
    day included, without a word. ``--dedicated`` typed on the command line keeps a shared file's
    idle settings unused on purpose (:func:`run`'s help; ``gridcrawl run``'s own executors), so
    it is never refused; nor are values at their defaults. ``ctx``: the running command's (its
    ``obj`` the :class:`gridcrawl.config.Resolution` that names a file's or variable's place)."""
    from gridcrawl.config import Resolution
    if getattr(ctx.get_parameter_source("idle_only"), "name", "") == "COMMANDLINE":
        return None
    resolution = ctx.obj if isinstance(ctx.obj, Resolution) else None
    for key, flag in IDLE_ONLY_KEYS:
        source = getattr(ctx.get_parameter_source(key), "name", "")
        if source == "COMMANDLINE":
            return f"{flag} needs --idle-only"
        found = resolution and (resolution.options.get(key) or resolution.settings.get(key))
        if source == "DEFAULT_MAP" and found:
            return (f"{key} = {found.value!r} ({found.source}) is read only by an idle-only executor, and this one "
                    "would take grid threads at any hour: add idle_only = true (or --idle-only), or give "
                    "--dedicated to run it at any hour")
    return None


def main() -> None:
    """Entry point of the ``gridcrawl-executor`` script (reads ``--config`` and ``GRIDCRAWL_*`` first)."""
    run_program(app, "executor")


if __name__ == "__main__":  # pragma: no cover
    main()
