"""What the three programs' command lines share: logging set-up, user errors, signals.

A user error (bad URL, unreachable manager, invalid database URL) is printed as one line on
stderr and exits with status 2 — never a traceback.

Logging goes through the standard :mod:`logging` module: ``--log-level``, ``--log-file`` and,
with ``--log-json``, one JSON object per line (:class:`JsonFormatter`) whose fields include the
grid thread's ``application_id``, ``thread_id`` and ``url`` when a line is about one. Signals:
SIGINT and SIGTERM everywhere, and SIGBREAK (Ctrl-Break) on Windows, where SIGTERM cannot be
sent to a console program.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import functools
import inspect
import json
import logging
import os
import signal
import subprocess
import sys
from contextlib import suppress
from pathlib import Path
import threading
import time
from typing import NoReturn

import typer

from gridcrawl.entry import exit_by_signal
from gridcrawl.settings import Settings

USER_ERROR = 2


def _tidy_help() -> None:
    """Help screens that fit 80 columns: typer (0.2x) labels every flag ``<bool>`` in the type
    column of ``--help``, which says nothing (a flag takes no value) and costs every option's
    help text width. Flags get no type label; other options keep theirs (``<int>``, ``<path>``).
    Guarded: a typer without ``display_type_rich`` is left alone."""
    from typer.core import TyperOption
    original = getattr(TyperOption, "display_type_rich", None)
    if original is None or getattr(original, "_gridcrawl", False):
        return

    def display_type_rich(self, ctx):
        return None if self.is_flag and self.metavar is None else original(self, ctx)

    display_type_rich._gridcrawl = True
    TyperOption.display_type_rich = display_type_rich


_tidy_help()


# ----------------------------------------------------------------------------------------------
# Options generated from the Settings fields (gridcrawl.settings: metadata["cli"])

#: The default of a command's ``given: dict`` parameter: the options of the Settings fields tagged
#: for the program go there (see :func:`setting_options`).
SETTING_OPTIONS: dict = {}


def setting_fields(program: str) -> list[tuple[dataclasses.Field, object]]:
    """``(field, CliOption)`` of every Settings field that ``program`` shows as an option, in
    declaration order."""
    return [(f, f.metadata["cli"]) for f in dataclasses.fields(Settings)
            if "cli" in f.metadata and program in f.metadata["cli"].programs]


#: Characters of a text default beyond which ``--help`` does not show it (the option's help says it).
LONG_DEFAULT = 32
#: The types of the Settings fields that are options (their annotations are text).
_TYPES = {"int": int, "float": float, "str": str, "bool": bool}


def _option_parameter(f: dataclasses.Field, cli, program: str, panels: dict[str, str]) -> inspect.Parameter:
    """The typer option of Settings field ``f`` for ``program``: named ``--name`` (or
    ``cli.flag``; a bool setting whose default is False is a flag ``--name``), its default the
    field's, its help text and ``--help`` section as the metadata and ``panels`` say."""
    hint = _TYPES[f.type] if isinstance(f.type, str) else f.type
    name, default = (cli.inverse, not f.default) if cli.inverse else (f.name, f.default)
    # a long text default (the User-Agent) would be cut in a narrow help column: its help names it
    long_text = isinstance(default, str) and len(default) > LONG_DEFAULT
    option = typer.Option(default, cli.flag or "--" + name.replace("_", "-"), help=cli.help_of(program),
                          rich_help_panel=panels.get(cli.group) if cli.group else None, show_default=not long_text)
    return inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=option, annotation=hint)


def setting_options(program: str, panels: dict[str, str] | None = None):
    """Decorator of a typer command: give it one option per Settings field tagged ``program``
    (``metadata["cli"]``, :class:`gridcrawl.settings.CliOption`), so that a setting's option
    is declared once, in :mod:`gridcrawl.settings`.

    The command declares ``given: dict = SETTING_OPTIONS`` where the options go (their place in
    ``--help``); it is called with ``given`` = ``{field name: value}`` of those options (an
    ``inverse`` option, ``--ignore-robots``, negated back: ``obey_robots``), ready for
    :func:`gridcrawl.config.settings`. ``panels`` maps an option's group (``connection``,
    ``fetching`` ...) to the section of ``--help`` it is listed in (unmapped: the common
    options). Runs at import, building the typer.Option objects that hand-written options
    built too, and little else (no annotation is evaluated).
    """
    def decorate(func):
        fields = setting_fields(program)
        signature = inspect.signature(func)
        params, generated = [], {}
        for param in signature.parameters.values():
            if param.name != "given":
                params.append(param)
                continue
            for f, cli in fields:
                option = _option_parameter(f, cli, program, panels or {})
                generated[option.name] = (f.name, bool(cli.inverse))
                params.append(option)
        if not generated:
            raise TypeError(f"{func.__name__} has no 'given' parameter for the options of {program}")

        @functools.wraps(func)
        def command(*args, **kwargs):
            given = {}
            for option, (field_name, inverse) in generated.items():
                value = kwargs.pop(option)
                given[field_name] = not value if inverse else value
            return func(*args, given=given, **kwargs)

        # typer reads the parameters from __signature__ and resolves the annotations, text under
        # ``from __future__ import annotations``, in the wrapped function's module (__wrapped__)
        command.__signature__ = signature.replace(parameters=params)
        command.__annotations__ = {p.name: p.annotation for p in params
                                   if p.annotation is not inspect.Parameter.empty}
        return command
    return decorate


def setting_argv(settings: Settings, program: str, parent: str = "run", only: set[str] | None = None) -> list[str]:
    """The options ``parent`` (``gridcrawl run``) passes to a ``program`` it starts: every
    setting both show as an option (of ``only``, field names, when given), with its value in
    ``settings`` (``["--threads", "8", "--ignore-robots"]``). A flag is passed when set (``--no-x``
    of a ``--x/--no-x`` pair when unset); a flag that is unset and has no negative form is left
    out. Secret settings are not passed here (a command line is readable by other users): see
    :func:`secret_environment`."""
    argv: list[str] = []
    for f, cli in setting_fields(program):
        if parent not in cli.programs or f.metadata["secret"] or (only is not None and f.name not in only):
            continue
        value = getattr(settings, f.name)
        name = cli.inverse or f.name
        if cli.inverse:
            value = not value
        flags = (cli.flag or "--" + name.replace("_", "-")).split("/")
        if isinstance(value, bool):
            if value or len(flags) > 1:
                argv.append(flags[0] if value else flags[1])
        else:
            argv += [flags[0], str(value)]
    return argv


def set_for(ctx, program: str) -> set[str]:
    """The settings the running command ``program`` (``run``, a subcommand of ``gridcrawl``) was
    given on its command line or in its own section of the configuration file (``[run]``):
    those it hands the programs it starts. The others they resolve as it did — defaults, the
    file's global part, the environment — but with their own section (``[executor]``) over
    them: passed on, ``gridcrawl run``'s default ``--threads 8`` overrode ``[executor] threads``."""
    obj = getattr(ctx, "obj", None)
    res = obj.get(program) if isinstance(obj, dict) else obj
    names = set()
    for f, cli in setting_fields(program):
        source = getattr(ctx.get_parameter_source(cli.inverse or f.name), "name", "")
        if source == "COMMANDLINE":
            names.add(f.name)
        elif source == "DEFAULT_MAP" and res is not None:
            value = res.settings.get(f.name)
            if value is not None and value.source.endswith(f" [{program}]"):
                names.add(f.name)
    return names


def secret_environment(settings: Settings, program: str, parent: str = "run") -> dict[str, str]:
    """The environment variables (``GRIDCRAWL_PROXY``...) through which ``parent`` hands a
    ``program`` it starts the secret settings both show as options (those :func:`setting_argv`
    leaves out), each with its value in ``settings``, empty included (the parent's value wins
    over any the child would read)."""
    from gridcrawl.config import ENV_PREFIX
    return {ENV_PREFIX + f.name.upper(): str(getattr(settings, f.name)) for f, cli in setting_fields(program)
            if parent in cli.programs and f.metadata["secret"]}


def fail(message: str) -> NoReturn:
    """Print ``error: message`` on stderr and exit with status 2; a program logging to a file
    (``--log-file``) logs it there too, so that its log ends with why it stopped."""
    typer.echo(f"error: {message}", err=True)
    if any(isinstance(h, logging.FileHandler) for h in logging.getLogger().handlers):
        logging.getLogger("gridcrawl").error("stopping: %s", message)
    raise typer.Exit(USER_ERROR)


def check_wait_for(value: str | None, rendering: bool = True) -> None:
    """Exit with status 2 (one line) when ``--wait-for VALUE`` cannot be a selector for the
    browser (:func:`gridcrawl.rules.wait_for_error`) or, ``rendering`` false, no page is
    rendered to wait in; None passes."""
    if value is not None:
        from gridcrawl.rules import WAIT_FOR_UNUSED, wait_for_error
        why = wait_for_error(value)
        if why is not None:
            fail(f"--{why.replace('_', '-')}")
        if not rendering:
            fail(WAIT_FOR_UNUSED)


def manager_endpoints(values: str | list[str]) -> list[str]:
    """The manager endpoints of a ``--manager`` option (:func:`gridcrawl.link.split_endpoints`:
    repeated or comma-separated, duplicates dropped), each checked
    (:func:`gridcrawl.transport.check_endpoint`). Raises ``ValueError`` with a one-line reason.
    (Imported here, when a command runs: ``--help`` and the commands without a manager do not
    load ZeroMQ.)"""
    from gridcrawl.link import split_endpoints
    from gridcrawl.transport import check_endpoint
    return [check_endpoint(endpoint) for endpoint in split_endpoints(values)]


def domain(value: object) -> str:
    """The value of an ``--allow-domain`` option (typer's ``parser``): ``value`` as text when it
    is one domain name. Raises ``typer.BadParameter`` for a URL (``https://www.python.org/``,
    naming its host: a domain brings all its pages and subdomains) and for several
    comma-separated domains (naming the repeated option): either was kept as a "domain" no
    host is, and widened the scope by nothing, silently."""
    text = str(value).strip()
    if "/" in text:
        from gridcrawl.urls import url_host
        host = url_host(text if "://" in text else f"http://{text}")
        raise typer.BadParameter(f"{text!r} is a URL: --allow-domain takes a domain, all of whose pages and "
                                 "subdomains are in scope" + (f" (--allow-domain {host})" if host else ""))
    parts = [part.strip() for part in text.split(",")]
    if len(parts) > 1:
        raise typer.BadParameter(f"{text!r} is several domains: give each its own --allow-domain ("
                                 + " ".join(f"--allow-domain {part}" for part in parts if part) + ")")
    return text


def cidr(value: object) -> str:
    """The value of an ``--allow-private`` option (typer's ``parser``): ``value`` as text when it
    is an IP network (``127.0.0.0/8``, ``10.1.2.3`` = /32, host bits allowed), so that a bad one
    is refused like other options' bad values — on the command line by click (exit status 2),
    in a configuration file or the environment by :mod:`gridcrawl.config`, naming where it came
    from — before the program starts. Raises ``typer.BadParameter`` saying why
    (:func:`gridcrawl.executor.ssrf.parse_networks`; a ValueError would be reported as the bare
    value)."""
    from gridcrawl.executor.ssrf import parse_networks  # the standard library only
    text = str(value).strip()
    try:
        parse_networks([text])
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    return text


#: Environment variable the programs read a password from (never a command-line argument).
PASSWORD_ENV = "GRIDCRAWL_PASSWORD"


def ask_password(prompt: str) -> str:
    """A password typed on the terminal without echo (``getpass``). Raises ``EOFError`` when
    there is no terminal to ask on (a service, a pipe, cron), rather than reading it from
    standard input with echo, as ``getpass`` falls back to doing with a warning."""
    import getpass
    import os
    import sys
    if os.name == "nt":
        terminal = sys.stdin is not None and sys.stdin.isatty()
    else:
        try:
            with open("/dev/tty"):
                terminal = True
        except OSError:
            terminal = False
    if not terminal:
        raise EOFError("no terminal")
    return getpass.getpass(prompt)


def login_password(user: str | None) -> str | None:
    """The password an executor or client logs in with: ``$GRIDCRAWL_PASSWORD`` if set, else,
    when ``user`` was given, asked on the terminal without echo; else None (no login).
    Raises ``EOFError`` when it must be asked but there is no terminal."""
    import os
    password = os.environ.get(PASSWORD_ENV)
    if password is not None or user is None:
        return password
    return ask_password(f"password for {user}: ")


def peer_credentials(user: str | None, curve_secret, curve_server_key, managers: list[str] = ()):
    """``(curve, password)`` of an executor or client: its CURVE keys (or None) from the two key
    files, which go together, and the password of ``user`` from $GRIDCRAWL_PASSWORD or a prompt.
    ``managers``: the endpoints it will connect to; a password without CURVE for one that is not
    on this machine is a WARNING on stderr (it crosses the network in clear, for anyone on the
    path to read; the manager's operator was warned, the password's owner was not).
    Exits with status 2 (one line) on unusable key files or no password to be had."""
    from gridcrawl.keys import KeyFileError, client_keys
    from gridcrawl.transport import is_loopback_endpoint
    if (curve_secret is None) != (curve_server_key is None):
        fail("--curve-secret and --curve-server-key go together")
    try:
        curve = client_keys(curve_secret, curve_server_key) if curve_secret is not None else None
        password = login_password(user)
    except KeyFileError as exc:
        fail(str(exc))
    except EOFError:
        fail(f"no password for {user}: set GRIDCRAWL_PASSWORD or run on a terminal")
    remote = [endpoint for endpoint in managers if not is_loopback_endpoint(endpoint)]
    if password is not None and curve is None and remote:
        typer.echo(f"WARNING: the password of {user or 'this user'} goes to the manager at {', '.join(remote)} "
                   "unencrypted, for anyone on the network between to read: give --curve-secret and "
                   "--curve-server-key (docs/security.md)", err=True)
    return curve, password


# Attributes every LogRecord has; anything else on a record came from ``extra=`` and is logged.
_RECORD_FIELDS = set(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime", "taskName"}


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ``time`` (UTC, ISO 8601), ``level``, ``logger``, ``message``,
    ``process``, ``thread_name``, every ``extra=`` field of the call (for a grid thread:
    ``application_id``, ``thread_id``, ``url``), and ``exception`` with the traceback text."""

    def format(self, record: logging.LogRecord) -> str:
        """The record as one line of JSON (non-JSON values are written as their ``str``)."""
        out = {"time": _dt.datetime.fromtimestamp(record.created, _dt.timezone.utc).isoformat(timespec="milliseconds"),
               "level": record.levelname, "logger": record.name, "message": record.getMessage(),
               "process": record.process, "thread_name": record.threadName}
        for key, value in vars(record).items():
            if key not in _RECORD_FIELDS and not key.startswith("_"):
                out[key] = value
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str, ensure_ascii=False)


class _LogFileErrors:
    """What :func:`log_file_handler`'s handler adds to the standard one: a failed write does not turn
    into Python's "--- Logging error ---" and a traceback on stderr for every record (a log on a
    full disk): the first failure is one line on stderr naming the file and the cause, later ones
    are silent until a write succeeds again."""

    def __init__(self, filename: str) -> None:
        super().__init__(filename, encoding="utf-8")  # type: ignore[call-arg]
        self.failing = False  # the last write failed (said once on stderr)
        self._failed = False  # the write under way failed

    def emit(self, record: logging.LogRecord) -> None:
        self._failed = False
        try:
            super().emit(record)  # type: ignore[misc]
        except OSError:  # opening the file again after a rotation failed (outside FileHandler's own handling)
            self.handleError(record)
        if not self._failed:
            self.failing = False

    def handleError(self, record: logging.LogRecord) -> None:  # noqa: N802 (logging's name)
        exc = sys.exc_info()[1]
        if not isinstance(exc, OSError):
            return super().handleError(record)  # type: ignore[misc]
        self._failed = True
        if not self.failing:
            self.failing = True
            why = exc.strerror or str(exc)
            try:
                sys.stderr.write(f"{Path(sys.argv[0]).name}: cannot write the log {self.baseFilename}: {why} "  # type: ignore[attr-defined]
                                 "(its lines are lost until it can)\n")
            except (OSError, ValueError):
                pass


@functools.cache
def _log_file_class() -> type:
    import logging.handlers  # (only with --log-file: 7 ms of every program's start-up otherwise)
    # outside Windows a WatchedFileHandler, which opens the file again when it has been moved or
    # deleted (logrotate's default create mode): a program running for days has its log rotated
    # without a restart (a plain FileHandler kept writing to the rotated file); on Windows an open
    # file cannot be renamed
    base = logging.FileHandler if os.name == "nt" else logging.handlers.WatchedFileHandler
    return type("LogFile", (_LogFileErrors, base), {})


def log_file_handler(filename: str) -> logging.FileHandler:
    """The handler of ``--log-file``: appended, UTF-8, opened again after a rotation (outside
    Windows), a failed write said once on stderr (:class:`_LogFileErrors`). Raises OSError if
    the file cannot be opened."""
    return _log_file_class()(filename)


def setup_logging(level: str = "INFO", log_file: str | None = None, json_lines: bool = False) -> None:
    """Configure the standard logging module: ``level`` name, to stderr or ``log_file``
    (appended, UTF-8, opened again when rotated away: :func:`log_file_handler`); ``json_lines``: one
    JSON object per line (:class:`JsonFormatter`)."""
    numeric = logging.getLevelName(level.upper())
    if not isinstance(numeric, int):
        fail(f"unknown log level {level!r} (use DEBUG, INFO, WARNING or ERROR)")
    try:
        handler = log_file_handler(log_file) if log_file else logging.StreamHandler(sys.stderr)
    except OSError as exc:
        fail(f"cannot write the log file {log_file}: {exc.strerror}")
    handler.setFormatter(JsonFormatter() if json_lines
                         else logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(numeric)
    # Alembic's INFO lines (its plugins, each migration step) only at DEBUG: gridcrawl says
    # itself that it upgraded a database (gridcrawl.db.init_schema)
    logging.getLogger("alembic").setLevel(numeric if numeric <= logging.DEBUG else max(numeric, logging.WARNING))
    # rdflib warns, with a traceback, at every ill-typed literal ("2026-13-45"^^xsd:date) and odd
    # IRI a document holds, which a semantic crawl stores as written: a hostile document of 20,000
    # wrote 14 MB to an executor's log (and took 3.5 times as long), 50 of them 450 lines on
    # ``gridcrawl fetch``'s terminal. Only at DEBUG.
    logging.getLogger("rdflib.term").setLevel(numeric if numeric <= logging.DEBUG else max(numeric, logging.ERROR))


PARENT_PIPE_ENV = "GRIDCRAWL_PARENT_PIPE"


class ChildWatch:
    """Children that die with their parent (``gridcrawl run``'s manager and executors): however
    the parent ends — even ``kill -9`` — its children stop gracefully.

    Each child's standard input is a pipe whose write end only the parent holds; the operating
    system closes it when the parent ends, however it ends, and the child, which watches its
    standard input (:func:`stop_on_signals`), reads end-of-file and stops. That works alike on
    Linux, macOS and Windows (no job object needed). On Linux each child also asks the kernel
    for SIGTERM when its parent dies (``prctl(PR_SET_PDEATHSIG)``, run between fork and exec).

    :meth:`start` starts a program: on Linux it forks this process (the program's modules,
    imported here once beforehand, are shared copy-on-write: no interpreter start and no imports
    per child, about 0.4–0.7 CPU-seconds each); elsewhere it runs a fresh interpreter
    (:meth:`popen_options`).
    """

    def __init__(self) -> None:
        self._pipe: tuple[int, int] | None = None  # the forked children's standard input

    def popen_options(self) -> dict:
        """Keyword arguments for :class:`subprocess.Popen` of one child."""
        options = {"stdin": subprocess.PIPE, "env": {**os.environ, PARENT_PIPE_ENV: "stdin"}}
        if sys.platform.startswith("linux"):
            options["preexec_fn"] = _die_with_parent
        return options

    def start(self, module: str, args: list[str]):
        """Start ``python -m module args`` (``module``: ``gridcrawl.manager`` or
        ``gridcrawl.executor``, whose ``cli.main`` is run) as a child that dies with this process.

        Returns a :class:`subprocess.Popen`, or on Linux a :class:`ForkedChild` (the same
        ``pid``, ``args``, ``returncode``, ``poll``, ``wait``, ``send_signal``, ``kill``). Fork
        only before this process has threads, ZeroMQ contexts or database connections: a
        child gets a copy of them.
        """
        if not FORK:
            return subprocess.Popen([sys.executable, "-m", module, *args], **self.popen_options())
        import importlib
        import multiprocessing
        main = importlib.import_module(f"{module}.cli").main
        if self._pipe is None:
            self._pipe = os.pipe()
            os.set_inheritable(self._pipe[0], False)
        for stream in (sys.stdout, sys.stderr):  # else the child would write what is buffered again
            if stream is not None:
                stream.flush()
        process = multiprocessing.get_context("fork").Process(
            target=_forked_main, args=(main, module, args, self._pipe), name=module, daemon=False)
        process.start()
        return ForkedChild(process, [sys.executable, "-m", module, *args])


FORK = sys.platform.startswith("linux")
#: The signals that stop a program (:func:`stop_on_signals`).
STOP_SIGNALS = {signal.SIGINT, signal.SIGTERM}
"""Whether :meth:`ChildWatch.start` forks (Linux) rather than starting a fresh interpreter."""


class ForkedChild:
    """A program forked by :meth:`ChildWatch.start`, with the part of :class:`subprocess.Popen`'s
    interface ``gridcrawl run`` uses. ``returncode``: None while it runs, else its exit status
    (negative: the signal that ended it)."""

    def __init__(self, process, args: list[str]) -> None:
        self.process, self.args, self.pid = process, args, process.pid

    @property
    def returncode(self) -> int | None:
        """The exit status, or None while the child runs."""
        return self.process.exitcode

    def poll(self) -> int | None:
        """The exit status if the child has ended (it is reaped), else None; does not block."""
        return self.process.exitcode

    def wait(self, timeout: float | None = None) -> int:
        """Wait for the child to end (at most ``timeout`` seconds: then raises
        :class:`subprocess.TimeoutExpired`) and return its exit status."""
        self.process.join(timeout)
        if self.process.exitcode is None:
            raise subprocess.TimeoutExpired(self.args, timeout)
        return self.process.exitcode

    def send_signal(self, signum: int) -> None:
        """Send signal ``signum`` to the child unless it has ended."""
        if self.process.exitcode is None:
            os.kill(self.pid, signum)

    def kill(self) -> None:
        """SIGKILL the child unless it has ended."""
        if self.process.exitcode is None:
            self.process.kill()


def _forked_main(main, module: str, args: list[str], pipe: tuple[int, int]) -> None:  # pragma: no cover - child
    """The forked child of :meth:`ChildWatch.start`: watch the parent pipe on standard input,
    then run the program's ``main`` on ``args`` (multiprocessing turns its SystemExit into the
    exit status)."""
    read_end, write_end = pipe
    os.close(write_end)  # only the parent may hold it: its end is this child's signal to stop
    os.dup2(read_end, 0)
    os.close(read_end)
    sys.stdin = open(0, closefd=False)
    # Ctrl-C at a terminal signals the whole process group: the parent alone takes it, stops its
    # own work first (a client stores what it holds while its manager still answers), then stops
    # this child with SIGTERM (stop_on_signals keeps an ignored SIGINT ignored)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)  # the parent held them while it forked
    _die_with_parent()
    role = args[args.index("--name") + 1] if "--name" in args else module.rsplit(".", 1)[-1]
    name_process(f"gc-{role}")  # what ps, top and psutil's name() show: its command line is the parent's
    os.environ[PARENT_PIPE_ENV] = "stdin"
    sys.argv = [module, *args]
    main()


def name_process(name: str) -> None:  # pragma: no cover - runs in a forked child
    """Set this process's name (Linux ``comm``, at most 15 bytes; ``prctl(PR_SET_NAME)``)."""
    import ctypes
    ctypes.CDLL(None, use_errno=True).prctl(15, name.encode()[:15])  # 15: PR_SET_NAME


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    import ctypes
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # 1: PR_SET_PDEATHSIG


def _watch_parent(stop: threading.Event) -> None:
    """If this program was started by a :class:`ChildWatch`, set ``stop`` when the parent dies
    (its standard input reaches end-of-file)."""
    if os.environ.pop(PARENT_PIPE_ENV, None) != "stdin" or sys.stdin is None:
        return
    fd = sys.stdin.fileno()  # read the file descriptor itself: a thread blocked in the buffered
    # reader would hold its lock when the interpreter shuts down (a fatal error at exit)

    def watch() -> None:
        try:
            while os.read(fd, 1):
                pass
        except (OSError, ValueError):
            pass
        logging.getLogger("gridcrawl").warning("the parent process is gone: stopping")
        stop.set("the parent process is gone")

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


class StopEvent(threading.Event):
    """A :class:`threading.Event` that a poller can wait on with the sockets it serves:
    :meth:`fileno` is a socket that becomes readable when the event is set, so that a loop
    polling ZeroMQ sockets (``zmq.Poller().register(stop, zmq.POLLIN)``) wakes at once on a
    stop instead of at its next timeout. :attr:`reason` says why it was set (the first reason
    given: ``"Ctrl-C"``, ``"SIGTERM"``, ``"the parent process is gone"`` ...; empty when none was)
    and :attr:`signum` which signal set it, when one did first (else None)."""

    def __init__(self) -> None:
        import socket
        super().__init__()
        self.reason = ""
        self.signum: int | None = None
        self._reader, self._writer = socket.socketpair()
        self._writer.setblocking(False)

    def set(self, reason: str = "", signum: int | None = None) -> None:
        """Set the event (``reason``: why, and ``signum``: the signal that set it, if any; both
        kept only if this is the first time) and make :meth:`fileno` readable."""
        if not self.is_set():
            self.reason, self.signum = self.reason or reason, signum
        super().set()
        try:
            self._writer.send(b"x")
        except OSError:  # full: readable already
            pass

    def fileno(self) -> int:
        """The file descriptor (a socket) that is readable once the event is set."""
        return self._reader.fileno()


def take_lock(lock, what: str, command: str | None = None) -> str | None:
    """Take an exclusive ``flock`` on the open file ``lock`` (POSIX) without waiting, and write
    who holds it into it: ``pid N, since YYYY-MM-DD HH:MM:SS``, after ``command`` and a comma
    when given (``gridcrawl extract, pid N, since ...``: what a refused program names). Returns
    None once taken. When another process holds it: what that one wrote there, or
    ``starting``. The kernel lets go when every process holding the file open (this one and the
    children it forks) has ended, ``kill -9`` included. When the line cannot be written (a full
    disk): closes ``lock`` and exits with the one line ``what: the reason`` (:func:`fail`)."""
    import fcntl
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        lock.seek(0)
        return lock.read().strip() or "starting"
    try:
        lock.truncate(0)
        lock.write(f"{f'{command}, ' if command else ''}pid {os.getpid()}, since {time.strftime('%Y-%m-%d %H:%M:%S')}")
        lock.flush()
    except OSError as exc:
        with suppress(OSError):  # closing flushes the line again
            lock.close()
        fail(f"{what}: {exc.strerror or exc}")
    return None


def stop_on_signals() -> StopEvent:
    """An event set by the first SIGINT/SIGTERM (graceful stop), or when the parent that started
    this program with a :class:`ChildWatch` dies; a second signal ends the program at once, by
    that signal (:func:`gridcrawl.entry.exit_by_signal`). Loops that poll may register it with
    their poller (:class:`StopEvent`).

    A SIGINT that is ignored when this is called stays ignored, as the Unix convention for
    programs started so (a non-interactive shell's background job; a child of ``gridcrawl run``,
    whose parent takes Ctrl-C and stops it with SIGTERM once its own work is stopped)."""
    stop = StopEvent()
    _watch_parent(stop)

    def handler(signum, _frame):
        if stop.is_set():
            exit_by_signal(signum, flush=False)  # the interrupted code may be writing to them
        logging.getLogger("gridcrawl").info("signal %d: stopping (again to exit at once)", signum)
        stop.set({signal.SIGINT: "Ctrl-C", signal.SIGTERM: "SIGTERM"}.get(signum, f"signal {signum}"), signum)

    if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
        signal.signal(signal.SIGINT, handler)
    for name in ("SIGTERM", "SIGBREAK"):  # SIGBREAK: Ctrl-Break, Windows only
        if hasattr(signal, name):
            signal.signal(getattr(signal, name), handler)
    return stop
