"""One configuration for every program: a TOML file, then ``GRIDCRAWL_…`` environment variables,
then command-line options — each overriding the one before.

This module owns that precedence and the provenance of every value.

**The file** (``--config gridcrawl.toml``, or the path in ``GRIDCRAWL_CONFIG``), TOML (read with
the standard library's :mod:`tomllib`):

.. code-block:: toml

    heartbeat_interval = 0.5          # flat keys: any Settings field, or log_level/log_file/log_json
    [logging]
    log_level = "INFO"
    [manager]                         # a program's section: its options and Settings fields
    bind = "tcp://*:9000"
    http = "127.0.0.1:9080"
    [executor]
    threads = 4
    idle_only = true
    [client]
    max_in_flight = 128

Keys may be written with ``-`` or ``_``. Sections: ``settings`` (the same as flat keys),
``logging``, and one per program or command: ``manager``, ``executor``, ``client``, ``run``,
``export``, ``report``. Within a file a program's section wins over flat keys. An unknown key or
section, a value of the wrong type, or a setting in the section of a program that does not read
it (:func:`gridcrawl.settings.used_by`; :data:`SECTION_READERS`) is an error naming the file and
the key (exit status 2).

**The environment**: ``GRIDCRAWL_<NAME>`` for every Settings field and every option of the
program being run (``GRIDCRAWL_THREADS=4``, ``GRIDCRAWL_DB=sqlite:///x.db``); booleans are
``1/0``, ``true/false``, ``yes/no`` or ``on/off``.

**The command line** wins over both. Options reach click/typer through its ``default_map`` (so
``--help`` still shows the built-in defaults, and the option's own type check applies), and
:func:`settings` fills the Settings fields a program has no option for.

``gridcrawl config show`` prints every effective value a program reads and where it came from
(:func:`show_rows`). An option of a setting that the running program does not have is named as
another program's (:func:`misplaced_option`), and a ``GRIDCRAWL_`` variable that looks like a
misspelt setting is warned of (:func:`unknown_variables`).
"""

from __future__ import annotations

import dataclasses
import os
import sys
import tomllib
import typing
from dataclasses import dataclass, field
from pathlib import Path

from gridcrawl.settings import Settings, _named, used_by
from gridcrawl.errors import ConfigError  # noqa: F401 (re-exported)

ENV_PREFIX = "GRIDCRAWL_"
CONFIG_ENV = "GRIDCRAWL_CONFIG"
PROGRAM_SECTIONS = ("manager", "executor", "client", "run", "export", "report")
GLOBAL_SECTIONS = ("settings", "logging")
LOGGING_KEYS = ("log_level", "log_file", "log_json")
#: Options that are the negation of a Settings field (``--no-content``): option name -> field
#: name, from the fields' metadata (:class:`gridcrawl.settings.CliOption`).
INVERSE_OPTIONS = {f.metadata["cli"].inverse: f.name for f in dataclasses.fields(Settings)
                   if "cli" in f.metadata and f.metadata["cli"].inverse}
#: The programs (:data:`gridcrawl.settings.PROGRAMS`) that read each program section: a setting
#: in a section none of them reads (:func:`gridcrawl.settings.used_by`) is refused.
SECTION_READERS = {"manager": ("manager",), "executor": ("executor",), "client": ("client",),
                   "run": ("run", "spark", "fetch", "extract"), "export": (), "report": ()}
#: How messages name a program, and the section a setting for it goes in.
PROGRAM_NAMES = {"manager": "gridcrawl-manager", "executor": "gridcrawl-executor", "client": "gridcrawl-client",
                 "run": "gridcrawl run", "spark": "gridcrawl spark", "fetch": "gridcrawl fetch",
                 "extract": "gridcrawl extract"}
_SECTION_OF = {"manager": "manager", "executor": "executor", "client": "client", "run": "run", "spark": "run",
               "fetch": "run", "extract": "run"}
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


@dataclass
class Value:
    """One configured value and its source: ``"default"``, ``"file PATH [section]"``,
    ``"env GRIDCRAWL_NAME"`` or ``"command line"``."""

    value: object
    source: str


@dataclass
class Resolution:
    """The file and environment values for one program (before its command line).

    ``settings``: Settings field → :class:`Value`; ``options``: the program's option name →
    :class:`Value` (options that are not Settings fields); ``path``: the file read, or None.
    """

    program: str
    path: Path | None = None
    settings: dict[str, Value] = field(default_factory=dict)
    options: dict[str, Value] = field(default_factory=dict)

    def settings_values(self) -> dict[str, object]:
        """Settings field → value, for the fields the file or environment set."""
        return {name: v.value for name, v in self.settings.items()}

    def default_map(self, option_names: set[str]) -> dict[str, object]:
        """click ``default_map`` for a command whose options are ``option_names``: the values
        of those options from the file and environment (negated for ``--no-content`` style)."""
        out: dict[str, object] = {}
        for name in option_names:
            if name in self.options:
                out[name] = self.options[name].value
            elif name in self.settings:
                out[name] = self.settings[name].value
            elif name in INVERSE_OPTIONS and INVERSE_OPTIONS[name] in self.settings:
                out[name] = not self.settings[INVERSE_OPTIONS[name]].value
        return out


_FIELDS = {f.name: f for f in dataclasses.fields(Settings)}
_HINTS = typing.get_type_hints(Settings)


def _norm(key: str) -> str:
    return key.strip().replace("-", "_").lower()


def convert_setting(name: str, value: object, where: str) -> object:
    """``value`` checked (and, from a string, converted) for Settings field ``name``.

    ``where`` names the source for the error. Raises :class:`ConfigError` on a wrong type.
    """
    hint = _HINTS[name]
    if isinstance(value, str) and hint is not str:
        text = value.strip()
        try:
            if hint is bool:
                if text.lower() in _TRUE:
                    return True
                if text.lower() in _FALSE:
                    return False
                raise ValueError
            return hint(text)
        except ValueError:
            raise ConfigError(f"{where}: {name} must be {hint.__name__}, not {_shown(value)}") from None
    if hint is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if not isinstance(value, hint) or (hint is int and isinstance(value, bool)):
        raise ConfigError(f"{where}: {name} must be {hint.__name__}, not {_shown(value)}")
    return value


def _shown(value: object) -> str:
    """``repr(value)`` with the passwords of URLs in it as ``***`` (a database URL, a proxy):
    what an error or ``gridcrawl config show`` prints of a setting."""
    from gridcrawl.redact import hide_passwords
    return hide_passwords(repr(value))


def _convert_option(value: object) -> object:
    """An environment string for a program option: booleans as Python bools, else the text
    (click converts it with the option's type)."""
    if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
        return value.strip().lower() in _TRUE
    return value


def read_file(path: str | Path) -> dict:
    """The TOML file at ``path`` as a dict. Raises :class:`ConfigError` if it is missing or not
    TOML (the message names the file and the parser's complaint)."""
    path = Path(path)
    try:
        with path.open("rb") as fh:
            return tomllib.load(fh)
    except FileNotFoundError:
        raise ConfigError(f"configuration file {path} does not exist") from None
    except OSError as exc:
        raise ConfigError(f"cannot read configuration file {path}: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"configuration file {path} is not valid TOML: {exc}") from None


def resolve(program: str, option_names: set[str], path: str | Path | None = None,
            environ: typing.Mapping[str, str] | None = None, *, section_options: set[str] | None = None) -> Resolution:
    """File and environment values for ``program`` (one of :data:`PROGRAM_SECTIONS`), whose
    command has the options ``option_names``.

    ``path``: the TOML file (None: ``GRIDCRAWL_CONFIG`` if set, else no file); ``environ``:
    the environment (default ``os.environ``); ``section_options``: the options of every command
    that reads ``program``'s section (default ``option_names``): a key of the section that is
    one of them is no error (``[manager] bind`` for ``gridcrawl-manager users``, which reads
    the manager's section but has no ``--bind``). Raises :class:`ConfigError` for an unknown key
    or section, a value of the wrong type, or an unreadable file.
    """
    environ = os.environ if environ is None else environ
    path = path or environ.get(CONFIG_ENV) or None
    res = Resolution(program, Path(path) if path else None)
    if res.path is not None:
        data = read_file(res.path)
        known_options = set(option_names if section_options is None else section_options | option_names) \
            | set(LOGGING_KEYS)

        def take(section: str | None, items: dict, program_section: bool) -> None:
            where_section = f" [{section}]" if section else ""
            for raw_key, value in items.items():
                key = _norm(raw_key)
                where = f"{res.path}{where_section}"
                if isinstance(value, dict):
                    raise ConfigError(f"{where}: unknown section {raw_key!r}")
                if key in _FIELDS:
                    if program_section:
                        _check_used(key, raw_key, section, where)
                    res.settings[key] = Value(convert_setting(key, value, f"{where} {raw_key}"), f"file {where}")
                elif key in LOGGING_KEYS or (program_section and key in known_options):
                    res.options[key] = Value(value, f"file {where}")
                elif program_section and section != program:
                    continue  # another program's option: checked when that program reads the file
                else:
                    import difflib
                    near = difflib.get_close_matches(key, [*_FIELDS, *LOGGING_KEYS, *known_options], n=1)
                    raise ConfigError(f"{where}: unknown setting {raw_key!r}"
                                      + (f" (did you mean {near[0]!r}?)" if near else ""))

        flat = {k: v for k, v in data.items() if not isinstance(v, dict)}
        take(None, flat, False)
        for raw, items in data.items():
            if not isinstance(items, dict):
                continue
            section = _norm(raw)
            if section in GLOBAL_SECTIONS:
                if section == "logging":
                    bad = [k for k in items if _norm(k) not in LOGGING_KEYS]
                    if bad:
                        raise ConfigError(f"{res.path} [logging]: unknown setting {bad[0]!r} "
                                          f"(use {', '.join(LOGGING_KEYS)})")
                take(section, items, False)
            elif section not in PROGRAM_SECTIONS:
                raise ConfigError(f"{res.path}: unknown section [{raw}] (use {', '.join(GLOBAL_SECTIONS + PROGRAM_SECTIONS)})")
        for raw, items in data.items():  # the program's own section last: it wins within the file
            if isinstance(items, dict) and _norm(raw) == program:
                take(program, items, True)
    for name in _FIELDS:
        var = ENV_PREFIX + name.upper()
        if var in environ:
            res.settings[name] = Value(convert_setting(name, environ[var], f"environment {var}"), f"env {var}")
    for name in sorted(set(option_names) | set(LOGGING_KEYS)):
        var = ENV_PREFIX + name.upper()
        if name not in _FIELDS and var in environ and var != CONFIG_ENV:
            res.options[name] = Value(_convert_option(environ[var]), f"env {var}")
    return res


def _names(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def _check_used(key: str, raw_key: str, section: str, where: str) -> None:
    """Raise :class:`ConfigError` when setting ``key`` (written ``raw_key`` in ``where``, the file
    and section) is in program section ``section`` but no program that reads that section uses
    it: ``[client] download_delay = 5`` was taken as in force, though only the manager spaces
    fetches. The one line names the programs that use it and where it goes instead."""
    users = used_by(key)
    if set(users) & set(SECTION_READERS[section]):
        return
    readers = SECTION_READERS[section] or (section,)
    reader = "gridcrawl export" if section == "export" else "gridcrawl report" if section == "report" \
        else _names([PROGRAM_NAMES[r] for r in readers]).replace(" and ", " or ")
    sections = list(dict.fromkeys(f"[{_SECTION_OF[u]}]" for u in users))
    raise ConfigError(f"{where}: {raw_key} is not used by {reader}: it is a setting of "
                      f"{_names([PROGRAM_NAMES[u] for u in users])} (put it in {' or '.join(sections)}, "
                      f"or before any section for every program)")


# ----------------------------------------------------------------------------------------------
# Running a program with its configuration


def _params(command) -> set[str]:
    return {p.name for p in command.params if p.name}


def _option_names(command) -> dict[str, set[str]]:
    """Option names of a click/typer command: ``{"": names}`` for a plain command or a group's
    own options, plus ``{sub: names}`` for each subcommand, a group's with those of its own
    subcommands (``gridcrawl-manager users`` with ``users list``'s ``--db``)."""
    names = {"": _params(command)}
    for sub_name, sub in getattr(command, "commands", {}).items():
        names[sub_name] = _params(sub).union(*(_params(leaf) for leaf in getattr(sub, "commands", {}).values()))
    return names


def take_config_argument(argv: list[str]) -> tuple[str | None, list[str]]:
    """Find ``--config PATH`` / ``--config=PATH`` in ``argv``: ``(path or None, argv without it)``."""
    rest: list[str] = []
    path = None
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            rest.extend(argv[i:])
            break
        if arg == "--config" and i + 1 < len(argv):
            path = argv[i + 1]
            i += 2
            continue
        if arg.startswith("--config="):
            path = arg.split("=", 1)[1]
            i += 1
            continue
        rest.append(arg)
        i += 1
    return path, rest


def run_program(app, program: str, argv: list[str] | None = None, *, keep_config_option: bool = True) -> None:
    """Run typer ``app`` as ``program`` with its configuration applied (the programs' ``main``).

    Reads ``--config PATH`` (or ``GRIDCRAWL_CONFIG``) and the environment, passes the values to
    click as ``default_map`` (the command line still wins) and the :class:`Resolution` as
    ``ctx.obj`` (see :func:`settings`). ``keep_config_option``: the command declares ``--config``
    itself (else it is removed from ``argv``). The path is exported as ``GRIDCRAWL_CONFIG`` so
    that programs this one starts (``gridcrawl run``) read the same file. A configuration error
    is one line on stderr and exit status 2.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    path, stripped = take_config_argument(argv)
    if not keep_config_option:
        argv = stripped
    try:
        default_map, obj = configure(app, program, path)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    import typer
    command = typer.main.get_command(app)
    hint = misplaced_option(command, program, argv)
    if hint is not None:
        print(f"error: {hint}", file=sys.stderr)
        raise SystemExit(2)
    if PARENT_PIPE_ENV not in os.environ:  # (a program gridcrawl run started: the run warned already)
        for warning in unknown_variables(command, os.environ):
            print(f"warning: {warning}", file=sys.stderr)
    if path:
        os.environ[CONFIG_ENV] = str(Path(path).resolve())
    tune_gc()
    app(args=argv, default_map=default_map, obj=obj)


#: The environment variables of the programs that are neither settings nor options.
PARENT_PIPE_ENV = "GRIDCRAWL_PARENT_PIPE"
OTHER_VARIABLES = (CONFIG_ENV, "GRIDCRAWL_PASSWORD", PARENT_PIPE_ENV)


def _setting_flags() -> dict[str, str]:
    """Every option of a setting on any program's command line (``--download-delay``,
    ``--ignore-robots``, ``--no-sitemaps``) -> the setting's name."""
    flags = {}
    for f in dataclasses.fields(Settings):
        cli = f.metadata.get("cli")
        if cli is not None:
            for flag in (cli.flag or "--" + (cli.inverse or f.name).replace("_", "-")).split("/"):
                flags[flag] = f.name
    return flags


def misplaced_option(command, program: str, argv: list[str]) -> str | None:
    """Why ``argv`` names an option of a setting that ``command`` (a click command run as
    ``program``; for a group, the subcommand the arguments choose) does not have, in one line:
    ``gridcrawl-client --download-delay 1`` got click's bare "No such option" although
    ``--download-delay`` is gridcrawl-manager's (the manager spaces the fetches of a host).
    None when every option is the command's, or an unknown one is no setting's (click reports it)."""
    flags = _setting_flags()
    shown = ["gridcrawl"] if program == "run" else [PROGRAM_NAMES.get(program, program)]
    runner = None if program == "run" else program
    skip = False
    for arg in argv:
        if skip:
            skip = False
            continue
        if arg == "--" or getattr(command, "context_settings", {}).get("ignore_unknown_options"):
            break  # (gridcrawl config show takes another program's options)
        if arg.startswith("--") and len(arg) > 2:
            name = arg.split("=", 1)[0]
            param = next((p for p in getattr(command, "params", []) if name in p.opts or name in p.secondary_opts),
                         None)
            if param is not None:
                skip = "=" not in arg and not getattr(param, "is_flag", False) and not getattr(param, "count", False)
                continue
            field_name = flags.get(name) or (name[2:].replace("-", "_") if name[2:].replace("-", "_") in _FIELDS
                                             else None)
            if field_name is not None:
                return _option_hint(name, field_name, runner, " ".join(shown))
            owners = [p for p in _programs_with_flag(name) if p != " ".join(shown)]
            return f"{' '.join(shown)} has no option {name}: it is an option of {_names(owners)}" if owners else None
        elif arg in getattr(command, "commands", {}):
            command = command.commands[arg]
            shown.append(arg)
            if program == "run":
                runner = arg
    return None


def _programs_with_flag(flag: str) -> list[str]:
    """The programs (as typed: ``gridcrawl-executor``, ``gridcrawl run`` ...) that have the
    option ``flag`` (``--allow-private``) of no setting: ``gridcrawl-client --allow-private``
    got click's bare "No such option", although the README tells executors to take it.
    Imports every program's command line: called only for an option the running one lacks."""
    import typer
    from importlib import import_module
    found = []
    for module, shown in (("gridcrawl.manager.cli", "gridcrawl-manager"), ("gridcrawl.executor.cli",
                          "gridcrawl-executor"), ("gridcrawl.client.cli", "gridcrawl-client"), ("gridcrawl.cli", "gridcrawl")):
        command = typer.main.get_command(import_module(module).app)
        subs = getattr(command, "commands", {}) if shown == "gridcrawl" else {}
        for name, sub in [("", command), *subs.items()]:
            if any(flag in p.opts or flag in p.secondary_opts for p in getattr(sub, "params", [])):
                found.append(f"{shown} {name}".strip())
    return found


def _option_hint(name: str, field_name: str, runner: str | None, shown: str) -> str:
    """The line :func:`misplaced_option` prints for option ``name`` of setting ``field_name``,
    which ``shown`` (the program as typed; ``runner`` its :data:`PROGRAM_NAMES` key, if any)
    does not have."""
    cli = Settings.__dataclass_fields__[field_name].metadata.get("cli")
    users = used_by(field_name)
    variable = ENV_PREFIX + field_name.upper()
    if runner in users:  # it reads the setting, but has no option for it
        return (f"{shown} has no option {name}: it takes the setting {field_name} from the configuration file "
                f"([{_SECTION_OF[runner]}] {field_name}) or {variable}")
    if cli is not None:
        owners = _names([PROGRAM_NAMES[p] for p in cli.programs])
        return (f"{shown} has no option {name}: it is an option of {owners} (the setting {field_name}, which "
                f"{shown} does not use)")
    return (f"{shown} has no option {name}: {field_name} is a setting of {_names([PROGRAM_NAMES[u] for u in users])}, "
            f"which {'has' if len(users) == 1 else 'have'} no option for it either: set it in the configuration "
            f"file ([{_SECTION_OF[users[0]]}] {field_name}) or {variable}")


def unknown_variables(command, environ: typing.Mapping[str, str]) -> list[str]:
    """Warnings about ``GRIDCRAWL_…`` variables of ``environ`` that look like a misspelt setting
    or option (``GRIDCRAWL_THRADS=4`` was ignored without a word): one line each, naming the
    closest real one. A variable close to none (a test suite's own) is left alone, and so is
    another program's option (``GRIDCRAWL_BIND`` where the executor runs: the programs of a
    machine often share one environment)."""
    known = {ENV_PREFIX + name.upper() for name in [*_FIELDS, *LOGGING_KEYS]} | set(OTHER_VARIABLES)
    known |= {ENV_PREFIX + name.upper() for names in _option_names(command).values() for name in names}
    unknown = sorted(var for var in environ if var.startswith(ENV_PREFIX) and var not in known)
    if not unknown:
        return []
    import difflib
    found = []
    for var in unknown:
        # (compared without the prefix, which every name shares: GRIDCRAWL_TEST_X is close to none)
        near = difflib.get_close_matches(var.removeprefix(ENV_PREFIX),
                                         sorted(k.removeprefix(ENV_PREFIX) for k in known), n=1, cutoff=0.8)
        if near and var not in _every_program_variable():
            found.append(f"{var} is no setting or option of gridcrawl (did you mean {ENV_PREFIX}{near[0]}?): ignored")
    return found


def _every_program_variable() -> set[str]:
    """``GRIDCRAWL_<OPTION>`` of every option of every program (imports them all: only when a
    variable is unknown to the running one)."""
    import typer
    from importlib import import_module
    names = set()
    for module in ("gridcrawl.manager.cli", "gridcrawl.executor.cli", "gridcrawl.client.cli", "gridcrawl.cli"):
        for options in _option_names(typer.main.get_command(import_module(module).app)).values():
            names |= {ENV_PREFIX + name.upper() for name in options}
    return names


def configure(app, program: str, path: str | Path | None) -> tuple[dict, "Resolution | dict"]:
    """What :func:`run_program` hands typer ``app`` run as ``program`` with the configuration
    file ``path`` (None: ``GRIDCRAWL_CONFIG``, else none) and the environment: ``(default_map,
    obj)``. Raises :class:`ConfigError` for anything the file or environment gets wrong, so
    that ``gridcrawl run`` can check the sections of the programs it starts before it starts
    them (:func:`check_program`)."""
    import typer

    command = typer.main.get_command(app)
    names = _option_names(command)
    top_names = names.pop("")
    section_of, section_options = _sections(command, program)
    top = resolve(program, top_names, path, section_options=section_options[program])
    default_map: dict = top.default_map(top_names)
    obj: Resolution | dict = top
    if names:  # a group with subcommands: one resolution each, found by ctx.info_name
        obj = {"": top}
        for sub, sub_names in names.items():
            sub_res = resolve(section_of[sub], sub_names, path, section_options=section_options[section_of[sub]])
            obj[sub] = sub_res
            default_map[sub] = sub_res.default_map(_params(command.commands[sub]))
            for leaf_name, leaf in getattr(command.commands[sub], "commands", {}).items():
                default_map[sub][leaf_name] = sub_res.default_map(_params(leaf))
    _split_lists(command, default_map)
    _check_values(command, default_map, top)
    for sub, sub_command in getattr(command, "commands", {}).items():
        _check_values(sub_command, default_map[sub], obj[sub])
        for leaf_name, leaf in getattr(sub_command, "commands", {}).items():
            _check_values(leaf, default_map[sub][leaf_name], obj[sub])
    return default_map, obj


def _sections(command, program: str) -> tuple[dict[str, str], dict[str, set[str]]]:
    """Which section each subcommand of ``command`` (a click group run as ``program``, or a
    plain command) reads, and the options of every command that reads each section:
    ``({sub: section}, {section: option names})``. A subcommand with a section of its own
    reads it (``gridcrawl export``: ``[export]``); the others read the program's
    (``gridcrawl-manager users``: ``[manager]``), whose keys are any of their options."""
    names = _option_names(command)
    top_names = names.pop("")
    section_of = {sub: sub if sub in PROGRAM_SECTIONS else program for sub in names}
    section_options: dict[str, set[str]] = {program: set(top_names)}
    for sub, sub_names in names.items():
        section_options.setdefault(section_of[sub], set()).update(sub_names)
    return section_of, section_options


def section_options_of(app, program: str) -> dict[str, set[str]]:
    """The option names of every command of typer ``app`` (run as ``program``) that reads each
    section (``{"run": {...}, "export": {...}}`` for ``gridcrawl``): what a section may hold
    besides settings (:func:`resolve`'s ``section_options``)."""
    import typer
    return _sections(typer.main.get_command(app), program)[1]


def _validated(res: Resolution) -> None:
    """Check the Settings values of ``res`` (file and environment) as the program will
    (:meth:`Settings.validate`): raises :class:`ConfigError` naming their sources."""
    try:
        Settings(**res.settings_values()).validate()
    except ValueError as exc:  # a value of the right type out of its range ([executor] download_timeout = -5)
        said = f"{exc} "
        named = {v.source for name, v in res.settings.items() if f"{_named(name)} " in said}
        sources = ", ".join(sorted(s.removeprefix("file ") for s in named or {v.source for v in res.settings.values()}))
        raise ConfigError(f"{sources}: {exc}") from None


def check_program(module: str, program: str) -> None:
    """Check the configuration (``GRIDCRAWL_CONFIG`` and the environment) of ``program``, whose
    typer app is ``module.app``, as that program will read it: raises :class:`ConfigError`.
    ``gridcrawl run`` checks the programs it starts before it starts them (each refused a bad
    ``[executor]`` key itself, one line per executor, after a manager had started)."""
    from importlib import import_module
    _, obj = configure(import_module(module).app, program, None)
    _validated(obj[""] if isinstance(obj, dict) else obj)


def _split_lists(command, default_map: dict) -> None:
    """A repeatable option (``--manager A --manager B``) given one string by the file or the
    environment (``GRIDCRAWL_MANAGER=A,B``) takes its comma-separated parts (in place; the
    subcommands' maps too)."""
    for param in getattr(command, "params", []):
        value = default_map.get(param.name)
        if getattr(param, "multiple", False) and isinstance(value, str):
            default_map[param.name] = [part.strip() for part in value.split(",") if part.strip()]
    for name, sub in getattr(command, "commands", {}).items():
        if isinstance(default_map.get(name), dict):
            _split_lists(sub, default_map[name])


def _check_values(command, default_map: dict, res: Resolution) -> None:
    """Convert each value ``default_map`` gives an option of ``command`` as the command line
    would (its click type), so that a wrong one is a :class:`ConfigError` naming where it came
    from (``gridcrawl.toml [executor] manager``) rather than click's error about an option the
    user did not type, or a traceback (an integer for a repeatable option)."""
    for param in getattr(command, "params", []):
        if param.name not in default_map or isinstance(default_map[param.name], dict):
            continue
        value = default_map[param.name]
        found = res.options.get(param.name) or res.settings.get(param.name) \
            or res.settings.get(INVERSE_OPTIONS.get(param.name, ""))
        where = found.source.removeprefix("file ").removeprefix("env ") if found else "the configuration"
        if getattr(param, "multiple", False) and not isinstance(value, (list, tuple)):
            raise ConfigError(f"{where}: {param.name} must be text or a list of texts, not {_shown(value)}")
        for item in value if getattr(param, "multiple", False) else [value]:
            try:
                param.type.convert(item, param, None)
            except Exception as exc:  # click's BadParameter (typer's own copy of click), or a TypeError
                raise ConfigError(f"{where}: {param.name}: {getattr(exc, 'message', None) or exc}") from None


def tune_gc() -> None:
    """Run Python's cyclic garbage collector less often in a long-running program.

    A page's result is thousands of small objects (a list per link), so the default threshold
    (a young-generation pass every 700 allocations) runs the collector many times per page,
    and its full passes walk every live object: the manager's queued grid threads, the
    client's caches. ``gc.freeze()`` moves what exists at start-up (modules, classes) out of
    the collector's sight and a young pass runs every 50,000 allocations (the technique
    Instagram described for its Python servers). Measured on the cpu benchmark (2 executors ×
    8 threads, 2,000 pages): 12% less CPU in all; reference counting frees everything that is
    not a cycle at once, as before. Turns the collector on: the entry points
    (:mod:`gridcrawl.entry`) keep it off while the program's modules are imported.
    """
    import gc
    gc.freeze()
    gc.set_threshold(50_000, 20, 100)
    gc.enable()


def settings(ctx=None, **explicit) -> Settings:
    """A validated :class:`Settings` from the file and environment values of the running
    program (found in ``ctx.obj``, put there by :func:`run_program`), overridden by ``explicit``
    — the program's option values. Raises ``ValueError`` (:meth:`Settings.validate`) for a value
    that cannot work, naming the file and section or the variable it came from when the file's
    and environment's values alone are refused so (``gridcrawl.toml [executor]: setting threads
    (--threads) must be >= 1, not 0``), as ``gridcrawl config show`` does; a value given on the
    command line is named by its option."""
    res = None
    obj = getattr(ctx, "obj", None) if ctx is not None else None
    if isinstance(obj, Resolution):
        res = obj
    elif isinstance(obj, dict) and ctx is not None:  # a group: the top's own or a subcommand's
        res = obj.get("" if getattr(ctx, "parent", None) is None else getattr(ctx, "info_name", None))
    base = res.settings_values() if res is not None else {}
    try:
        return Settings(**{**base, **explicit}).validate()
    except ValueError as exc:
        if res is not None:
            try:
                _validated(res)
            except ConfigError as named:
                if str(named).endswith(str(exc)):  # the same refusal: the file's or the environment's value
                    raise ValueError(str(named)) from None
        raise


# ----------------------------------------------------------------------------------------------
# gridcrawl config show


def _check_arguments(program: str, command, args: list[str], default_map: dict, res) -> None:
    """Raise :class:`ConfigError` when ``program`` would refuse its command line ``args`` (an
    option it does not have, a value of the wrong type: ``--threads x``), as the program's own
    usage error says; the options nobody gave that it requires (``--manager``) are no error
    here. (The tolerant parse that :func:`show_rows` reads the values from showed such an
    option as ``None``, from the "command line", and an unknown one not at all.)"""
    try:
        from typer._click.exceptions import MissingParameter, UsageError  # typer 0.28 carries its own click
    except ImportError:
        from click.exceptions import MissingParameter, UsageError
    try:
        command.make_context(program, [a for a in args if a != "--help"], default_map=default_map, obj=res)
    except MissingParameter:
        pass
    except UsageError as exc:
        name = "gridcrawl run" if program == "run" else f"gridcrawl-{program}"
        raise ConfigError(f"{name}'s command line: {exc.format_message()}") from None


def show_rows(program: str, command, args: list[str], path: str | None = None,
              environ: typing.Mapping[str, str] | None = None, *,
              section_options: set[str] | None = None) -> list[tuple[str, str, str]]:
    """``(name, value, source)`` of every Settings field and every option of ``program``'s
    ``command`` (a click/typer command) as ``program ARGS`` would run with ``path``;
    ``section_options``: the options of every command that reads ``program``'s section (as
    :func:`resolve`; ``[run]`` is read by ``gridcrawl fetch`` and ``gridcrawl spark`` too).

    Sources: ``default``, ``file PATH [section]``, ``env GRIDCRAWL_X``, ``command line``.
    Raises :class:`ConfigError` for a bad file or environment, as the program would: an unknown
    key, a value of the wrong type or one an option refuses (``allow_private = "10.0.0.0/33"``),
    a setting out of its range; and for ``args`` the program's command line refuses (an unknown
    option, ``--threads x``).
    """
    option_names = _option_names(command)[""] - {"config", "help"}
    res = resolve(program, option_names, path, environ, section_options=section_options)
    default_map = res.default_map(option_names)
    _split_lists(command, default_map)  # (manager = "tcp://a,tcp://b": as the program takes it)
    _check_values(command, default_map, res)
    _validated(res)
    _check_arguments(program, command, args, default_map, res)
    ctx = command.make_context(program, list(args), default_map=default_map, obj=res, resilient_parsing=True)
    rows: list[tuple[str, str, str]] = []
    given = {}
    for name in sorted(option_names):
        source = ctx.get_parameter_source(name)
        source_name = getattr(source, "name", "DEFAULT")
        value = ctx.params.get(name)
        if source_name == "COMMANDLINE":
            where = "command line"
        elif source_name == "DEFAULT_MAP":
            found = res.options.get(name) or res.settings.get(name) or res.settings.get(INVERSE_OPTIONS.get(name, ""))
            where = found.source if found else "file/env"
        elif source_name == "ENVIRONMENT":
            where = "env"
        else:
            where = "default"
        given[name] = (value, where)
    effective: dict = {}
    for f in dataclasses.fields(Settings):
        if program in PROGRAM_NAMES and program not in used_by(f.name) and f.name not in given:
            continue  # the program does not read it: a value from the file or environment is not in force
        if f.name in given:
            value, where = given.pop(f.name)
        elif any(INVERSE_OPTIONS.get(opt) == f.name for opt in given):
            opt = next(opt for opt in given if INVERSE_OPTIONS.get(opt) == f.name)
            value, where = given.pop(opt)
            value = not value
        elif f.name in res.settings:
            value, where = res.settings[f.name].value, res.settings[f.name].source
        else:
            value, where = f.default, "default"
        effective[f.name] = value
        if f.metadata["secret"] and value:  # a URL whose password is never shown
            from gridcrawl.executor.proxy import masked
            value = masked(str(value))
        rows.append((f.name, _shown(value), where))
    try:  # the file's and environment's are checked above: a value out of range here was typed (--threads 0)
        Settings(**{**res.settings_values(), **effective}).validate()
    except (ValueError, TypeError) as exc:
        raise ConfigError(str(exc)) from None
    for name, (value, where) in sorted(given.items()):
        rows.append((f"{program}.{name}", _shown(value), where))
    return rows


__all__ = ["ConfigError", "Resolution", "Value", "resolve", "read_file", "run_program", "settings", "tune_gc", "show_rows",
           "section_options_of",
           "take_config_argument", "convert_setting", "ENV_PREFIX", "CONFIG_ENV"]
