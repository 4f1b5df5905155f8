"""``gridcrawl-manager``: run the grid's manager (a ZeroMQ broker recording into SQL), and manage
its users (``gridcrawl-manager users add|list|remove|passwd``)."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import typer

from gridcrawl.cli_common import (PASSWORD_ENV, SETTING_OPTIONS, ask_password, fail, setting_options, setup_logging,
                                   stop_on_signals)
from gridcrawl.config import run_program, settings as configured_settings
from gridcrawl.errors import DatabaseUnavailable

DEFAULT_DB = "sqlite:///gridcrawl-manager.db"

app = typer.Typer(add_completion=False, rich_markup_mode="markdown",
                  help="The gridcrawl manager: executors register with it, "
                  "applications submit grid threads to it, and it records both in SQL.")
users_app = typer.Typer(add_completion=False, rich_markup_mode="markdown", no_args_is_help=True,
                        help="Users who may join the grid (groups Administrators, "
                        "Executors, Users). Once one user exists, every executor and client must log in.")
app.add_typer(users_app, name="users")


#: The sections of ``--help`` the options generated from Settings go to (by their group).
PANELS = {"connection": "Connections and security", "scheduling": "Scheduling and politeness",
          "politeness": "Scheduling and politeness"}


@app.callback(invoke_without_command=True)
@setting_options("manager", PANELS)
def serve(
    ctx: typer.Context,
    bind: str = typer.Option("tcp://*:9000", help="ZeroMQ endpoint to listen on"),
    db: str = typer.Option(DEFAULT_DB, help="SQLAlchemy URL of the manager database"),
    given: dict = SETTING_OPTIONS,
    curve_secret: Path = typer.Option(None, help="the manager's CURVE secret key file (gridcrawl keys new): "
                                      "encrypt every connection; needs --curve-allow",
                                                     rich_help_panel="Connections and security"),
    curve_allow: Path = typer.Option(None, help="directory of the public keys (*.key) of executors and clients "
                                     "allowed to connect (read again at every new connection)",
                                         rich_help_panel="Connections and security"),
    require_login: bool = typer.Option(False, "--require-login", help="refuse every executor and client that "
                                       "does not log in, even while no user exists (by default logins are "
                                       "required as soon as one user exists)",
                                          rich_help_panel="Connections and security"),
    standby: bool = typer.Option(False, "--standby", help="hot standby: when another manager holds the database's "
                                 "lease, wait (refusing peers, naming the active manager) and take over when it "
                                 "expires; several managers share one database (docs/operations.md)",
                                 rich_help_panel="Connections and security"),
    advertise: str = typer.Option(None, help="the endpoint executors and clients reach this manager at, named by "
                                  "standbys in their refusals [--bind, with * replaced by this host's name]",
                                  rich_help_panel="Connections and security"),
    log_level: str = typer.Option("INFO", help="DEBUG, INFO, WARNING or ERROR", rich_help_panel="Logs"),
    log_file: str = typer.Option(None, help="write the log to this file instead of stderr", rich_help_panel="Logs"),
    log_json: bool = typer.Option(False, "--log-json", help="log one JSON object per line", rich_help_panel="Logs"),
    journal: Path = typer.Option(None, help="write-ahead journal of the manager's records, replayed when the "
                                 "database answers again or at the next start [next to --log-file, else "
                                 "next to an SQLite database, else ./gridcrawl-manager-HASH.journal, HASH of the database URL]",
                                 rich_help_panel="Logs"),
    http: str = typer.Option(None, help="serve the live dashboard and its JSON API on HOST:PORT, e.g. "
                             "127.0.0.1:9080 (off loopback it requires a login with the manager's users)"),
    config: Path = typer.Option(None, help="TOML configuration file (then GRIDCRAWL_* variables, then these "
                                "options; see docs/operations.md)"),
) -> None:
    """Run the manager until SIGINT/SIGTERM."""
    if ctx.invoked_subcommand is not None:
        return
    import sqlalchemy as sa
    import zmq
    from gridcrawl.db import open_database
    from gridcrawl.transport import check_endpoint, listen_problem
    setup_logging(log_level, log_file, log_json)
    raise_descriptor_limit()
    try:
        check_endpoint(bind, bind=True)
        settings = configured_settings(ctx, **given)
        if why := listen_problem(bind):  # before the database is created or touched
            fail(f"cannot listen on {bind}: {why}")
        engine = open_database(db)
    except (ValueError, DatabaseUnavailable) as exc:
        fail(str(exc))
    from gridcrawl.keys import KeyFileError, server_keys
    from gridcrawl.manager.lease import LeaseHeld
    from gridcrawl.manager.server import ManagerServer, is_loopback_endpoint
    if (curve_secret is None) != (curve_allow is None):
        fail("--curve-secret and --curve-allow go together")
    try:
        curve = server_keys(curve_secret, curve_allow) if curve_secret is not None else None
    except KeyFileError as exc:
        fail(str(exc))
    if curve is None and not is_loopback_endpoint(bind) and log_file:  # else the server's log says it on stderr
        typer.secho(f"WARNING: listening on {bind} without CURVE: connections are unencrypted (passwords too) and "
                    "anyone who reaches the port can connect. Use --curve-secret and --curve-allow "
                    "(see docs/security.md).", err=True, fg="red", bold=True)
    try:
        if journal is None:
            journal = default_journal(log_file, engine)
            old = Path("gridcrawl-manager.journal")  # the default before it was named after the database
            if journal.name != old.name and old.exists() and old.stat().st_size:
                typer.secho(f"WARNING: {old.resolve()} holds records an earlier gridcrawl's manager journaled; this "
                            f"manager journals to {journal}. If they are this database's, start it once with "
                            f"--journal {old} to write them; else delete that file.", err=True, fg="red", bold=True)
        if advertise:
            check_endpoint(advertise)
        server = ManagerServer(settings, bind, engine, curve=curve, require_login=require_login, journal=journal,
                               standby=standby, advertise=advertise, record_process=True)
    except zmq.ZMQError as exc:
        fail(f"cannot listen on {bind}: {listen_problem(bind) or str(exc).split(' (addr=')[0]}")
    except LeaseHeld as exc:  # a hot standby forgotten, or the database of another grid
        fail(f"{exc}; --standby waits as its hot standby and takes over when it stops")
    except (DatabaseUnavailable, ValueError) as exc:
        fail(str(exc))
    except sa.exc.DBAPIError as exc:  # read-only, full: one line, not a traceback
        from gridcrawl.db import describe_error
        fail(f"the manager database failed: {describe_error(exc, engine)}")
    except OSError as exc:
        fail(f"cannot use the journal {journal}: {exc.strerror}")
    dashboard = None
    if http:
        from gridcrawl.manager.dashboard import Dashboard, DashboardError, parse_address
        try:
            host, port = parse_address(http)
            dashboard = Dashboard(server, host, port, users=server.users).start()
        except (DashboardError, OSError) as exc:
            server.socket.close(linger=0)
            server.context.term()
            why = (str(exc) if not isinstance(exc, OSError) or not exc.strerror else
                   "another program listens there; give another --http port" if exc.errno == errno.EADDRINUSE
                   else exc.strerror[0].lower() + exc.strerror[1:])
            fail(f"cannot serve the dashboard on {http}: {why}")
    try:
        server.serve(stop_on_signals())
    finally:
        if dashboard is not None:
            dashboard.stop()


def raise_descriptor_limit() -> None:
    """Raise this process's soft limit of open descriptors to its hard limit (logged at INFO), as
    servers do: a manager holds one per connected executor and client. With a desktop's default
    soft limit of 1,024 a manager took about 1,000 peers and the next could not connect, with
    nothing said; a peer that opened 1,000 idle TCP connections kept every new executor out for
    up to 30 s at a time (ZeroMQ's handshake interval), again and again. Does nothing where the
    limit cannot be read or raised (not POSIX, or already at the hard limit)."""
    try:
        import resource
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft == hard or soft == resource.RLIM_INFINITY:
            return
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (ImportError, OSError, ValueError):
        return
    import logging
    logging.getLogger("gridcrawl.manager").info("open descriptors: at most %s (the soft limit was %d)",
                                                "unlimited" if hard == resource.RLIM_INFINITY else hard, soft)


def default_journal(log_file: str | None, engine) -> Path:
    """Where the manager's journal goes without ``--journal``: ``LOG.journal`` next to the log
    file, else ``DB.journal`` next to an SQLite database file, else
    ``gridcrawl-manager-HASH.journal`` in the current folder, ``HASH`` 8 hex digits of the
    database URL (its password left out). Without the hash, two managers of two server
    databases started in one folder shared one journal: one database's records went into the
    other, or were dropped."""
    if log_file:
        return Path(log_file).with_suffix(".journal")
    database = engine.url.database
    if engine.dialect.name == "sqlite" and database and database != ":memory:":
        return Path(database).with_suffix(".journal")
    import hashlib
    from gridcrawl.db import shown_url
    return Path(f"gridcrawl-manager-{hashlib.sha256(shown_url(engine.url).encode()).hexdigest()[:8]}.journal")


def _users(db: str, existing: bool = True):
    """The users of the manager database at URL ``db``; ``existing``: it must exist already
    (listing, changing or removing users of a SQLite file that is not there creates nothing).
    Exits with status 2 (one line) when it cannot be opened."""
    from gridcrawl.db import open_database
    from gridcrawl.auth import UserStore
    try:
        return UserStore(open_database(db, existing=existing))
    except DatabaseUnavailable as exc:
        fail(str(exc))


def _new_password(name: str) -> str:
    """The password from $GRIDCRAWL_PASSWORD, else asked twice on the terminal (never an argument,
    which other users could read in the process list and the shell history)."""
    password = os.environ.get(PASSWORD_ENV)
    if password is not None:
        return password
    try:
        password = ask_password(f"password for {name}: ")
        if ask_password("the same password again: ") != password:
            fail("the two passwords differ; nothing changed")
    except (EOFError, KeyboardInterrupt):
        fail(f"no password for {name}: set {PASSWORD_ENV} or run on a terminal")
    return password


USERS_DB_HELP = f"SQLAlchemy URL of the manager database [the --db given before users, else {DEFAULT_DB}]"


def _users_db(ctx: typer.Context, db: str | None) -> str:
    """The manager database of a ``users`` command: its own ``--db``, else the one given before
    ``users`` (``gridcrawl-manager --db X users add ...``: it went to the default database,
    leaving the manager on X without users, open to anyone), else ``--config``'s or the default."""
    return db or (ctx.find_root().params.get("db") if ctx.find_root() is not ctx else None) or DEFAULT_DB


def _shown_users_db(url: str) -> str:
    """``url`` of a ``users`` command's database for its line, password hidden, saying so when it
    is the default one (users added to or looked for in ./gridcrawl-manager.db while the manager
    ran on another database: no --db given)."""
    from gridcrawl.redact import shown_url
    return shown_url(url) + (" (the default database: give the manager's --db, or --config with its [manager] db)"
                             if url == DEFAULT_DB else "")


@users_app.command("add")
def users_add(
    ctx: typer.Context,
    name: str = typer.Argument(..., help="the user's name"),
    group: str = typer.Option(..., help="Administrators, Executors (may run executors) or Users (may crawl)"),
    db: str = typer.Option(None, help=USERS_DB_HELP),
) -> None:
    """Create a user. The password comes from $GRIDCRAWL_PASSWORD or a hidden prompt."""
    from gridcrawl.auth import AuthError
    url = _users_db(ctx, db)
    store = _users(url, existing=False)  # users may be added before the manager first starts
    try:
        store.add(name, _new_password(name), group)
    except AuthError as exc:
        fail(str(exc))
    # the database named: users added to ./gridcrawl-manager.db while the manager ran on another
    # one (no --db given) left that grid open, and nothing here said where they went
    typer.echo(f"user {name} added to group {store.get(name).group} in {_shown_users_db(url)}")


@users_app.command("passwd")
def users_passwd(
    ctx: typer.Context,
    name: str = typer.Argument(..., help="the user's name"),
    db: str = typer.Option(None, help=USERS_DB_HELP),
) -> None:
    """Set a user's password ($GRIDCRAWL_PASSWORD or a hidden prompt)."""
    from gridcrawl.auth import AuthError
    db = _users_db(ctx, db)
    store = _users(db)
    if store.get(name) is None:  # before asking twice for a password it cannot take
        fail(f"no user {name!r} in {_shown_users_db(db)} (gridcrawl-manager users list --db ... lists them)")
    try:
        store.set_password(name, _new_password(name))
    except AuthError as exc:
        fail(str(exc))
    typer.echo(f"password of {name} changed")


@users_app.command("remove")
def users_remove(
    ctx: typer.Context,
    name: str = typer.Argument(..., help="the user's name"),
    db: str = typer.Option(None, help=USERS_DB_HELP),
) -> None:
    """Delete a user."""
    db = _users_db(ctx, db)
    if not _users(db).remove(name):
        fail(f"no user {name!r} in {_shown_users_db(db)} (gridcrawl-manager users list --db ... lists them)")
    typer.echo(f"user {name} removed")


@users_app.command("list")
def users_list(ctx: typer.Context, db: str = typer.Option(None, help=USERS_DB_HELP)) -> None:
    """List users with their group and permissions."""
    users = _users(_users_db(ctx, db)).list()
    if not users:
        typer.echo("no users: the grid is open to anyone who can connect (see docs/security.md)")
    for user in users:
        created = user.created.strftime("%Y-%m-%d %H:%M") if user.created else "-"
        typer.echo(f"{user.name}\t{user.group}\t{','.join(sorted(user.permissions))}\t{created}")


def main() -> None:
    """Entry point of the ``gridcrawl-manager`` script (reads ``--config`` and ``GRIDCRAWL_*`` first)."""
    run_program(app, "manager")


if __name__ == "__main__":  # pragma: no cover
    main()
