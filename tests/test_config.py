"""One configuration for every program: TOML file < GRIDCRAWL_* environment < command line,
``gridcrawl config show`` with sources, and JSON log lines naming grid threads."""

from __future__ import annotations

import io
import itertools
import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
import typer

from gridcrawl import protocol as p
from gridcrawl.cli_common import JsonFormatter
from gridcrawl.config import (ConfigError, convert_setting, resolve, run_program, settings as configured_settings,
                              show_rows, take_config_argument)
from gridcrawl.manager.core import ManagerCore
from gridcrawl.settings import Settings, used_by
from grid import free_port, run_at_once

CLEAN_ENV = {k: v for k, v in os.environ.items() if not k.startswith("GRIDCRAWL_")}


def write(tmp_path, text: str):
    path = tmp_path / "gridcrawl.toml"
    path.write_text(text, encoding="utf-8")
    return path


# ------------------------------------------------------------------------------ resolution


def test_file_then_environment_with_sections_and_sources(tmp_path):
    path = write(tmp_path, """
heartbeat-interval = 0.5     # flat: every program
max_redirects = 4
[logging]
log_level = "DEBUG"
[executor]
threads = 3
idle_only = true
manager = "tcp://10.9.8.7:9000"
[client]
threads = 99                 # another program's section does not apply to the executor
""")
    res = resolve("executor", {"threads", "idle_only", "manager", "log_level"}, path,
                  {"GRIDCRAWL_MAX_REDIRECTS": "7", "GRIDCRAWL_IDLE_ONLY": "no"})
    assert res.settings["heartbeat_interval"].value == 0.5
    assert res.settings["heartbeat_interval"].source == f"file {path}"
    assert res.settings["threads"].value == 3 and res.settings["threads"].source == f"file {path} [executor]"
    assert res.settings["max_redirects"].value == 7 and res.settings["max_redirects"].source == "env GRIDCRAWL_MAX_REDIRECTS"
    assert res.options["idle_only"].value is False and res.options["idle_only"].source == "env GRIDCRAWL_IDLE_ONLY"
    assert res.options["manager"].value == "tcp://10.9.8.7:9000"
    assert res.options["log_level"].source == f"file {path} [logging]"
    dm = res.default_map({"threads", "idle_only", "manager", "no_content"})
    assert dm == {"threads": 3, "idle_only": False, "manager": "tcp://10.9.8.7:9000"}
    # the negated option of a Settings field
    assert resolve("client", {"no_content"}, None, {"GRIDCRAWL_STORE_CONTENT": "false"}).default_map({"no_content"}) \
        == {"no_content": True}


def test_config_path_from_the_environment(tmp_path):
    path = write(tmp_path, "prefetch = 6\n")
    res = resolve("manager", set(), None, {"GRIDCRAWL_CONFIG": str(path)})
    assert res.path == path and res.settings["prefetch"].value == 6


def test_a_dedicated_executor_and_gridcrawl_runs_own_from_a_file_made_for_idle_desktops(tmp_path, site_server):
    """A configuration file shared by a building's desktops says idle_only and hours; an executor
    started with --dedicated, and the executors gridcrawl run starts, take work whenever they run
    (before: "--hours needs --idle-only" for an option never typed, and gridcrawl run's executors
    waited for an idle desktop)."""
    from sites import generate_site
    path = write(tmp_path, '[executor]\nidle_only = true\nhours = "00:00-00:01"\nidle_seconds = 600\n')
    server = site_server(generate_site(5, links_per_page=2, seed=3))
    done, typed, run = _programs(
        (["gridcrawl.executor", "--config", str(path), "--dedicated", "--manager", f"tcp://127.0.0.1:{free_port()}",
          "--connect-timeout", "0.3"], None),
        (["gridcrawl.executor", "--hours", "18:00-08:00", "--manager", "tcp://127.0.0.1:1"], None),
        (["gridcrawl", "--config", str(path), "run", server.url("/"), "--executors", "1", "--workdir",
          str(tmp_path / "w"), "--no-progress"], None), timeout=120)
    assert done.returncode == 2 and "no answer from the manager" in done.stderr, done.stderr
    assert typed.returncode == 2 and "--hours needs --idle-only" in typed.stderr
    assert run.returncode == 0 and "pages this run" in run.stderr, run.stderr[-2000:]


@pytest.mark.parametrize("text, env, args, said", [
    # a desktop's file with the hours but not idle_only: it took grid threads at any hour, silently
    ('[executor]\nhours = "18:00-08:00"\n', {}, [],
     "hours = '18:00-08:00' (file {path} [executor]) is read only by an idle-only executor"),
    ("cpu_threshold = 30\n", {}, [], "cpu_threshold = 30.0 (file {path}) is read only by an idle-only executor"),
    ("[executor]\nidle_only = false\nidle_seconds = 5\n", {}, [], "idle_seconds = 5.0 (file {path} [executor])"),
    ("", {"GRIDCRAWL_HOURS": "18:00-08:00"}, [], "hours = '18:00-08:00' (env GRIDCRAWL_HOURS)"),
    ("", {}, ["--cpu-threshold", "10"], "--cpu-threshold needs --idle-only"),
])
def test_an_executor_not_idle_only_refuses_the_idle_settings_it_would_not_read(tmp_path, text, env, args, said):
    """``hours``, ``cpu_threshold`` and ``idle_seconds`` are read only by an idle-only executor:
    given without ``idle_only`` (in the file, the environment or on the command line), the
    executor stops with one line before it connects, naming where each was given and the two
    ways out, instead of working through its owner's day."""
    path = write(tmp_path, text)
    done, dedicated = _executors(
        (["--config", str(path), "--manager", f"tcp://127.0.0.1:{free_port()}", "--connect-timeout", "0.3", *args], env),
        # --dedicated typed keeps a shared file's idle settings unused on purpose: it runs (no manager here)
        (["--config", str(path), "--dedicated", "--manager", f"tcp://127.0.0.1:{free_port()}",
          "--connect-timeout", "0.3"], env))
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    assert lines[0].startswith("error: " + said.format(path=path)), lines[0]
    if not args:
        assert lines[0].endswith("add idle_only = true (or --idle-only), or give --dedicated to run it at any hour")
    assert dedicated.returncode == 2 and "no answer from the manager" in dedicated.stderr, dedicated.stderr


@pytest.mark.parametrize("text, env, args, said", [
    ("[executor]\nidle_only = true\nhours = '25:00-08:00'\n", {}, [],
     "hours '25:00-08:00': 25:00 is not a time of day (file {path} [executor])"),
    ("[executor]\nidle_only = true\ncpu_threshold = 150\n", {}, [],
     "cpu threshold must be in (0, 100] percent, not 150.0 (file {path} [executor])"),
    ("", {"GRIDCRAWL_HOURS": "8:00-25:00"}, ["--idle-only"],
     "hours '8:00-25:00': 25:00 is not a time of day (env GRIDCRAWL_HOURS)"),
    ("", {}, ["--idle-only", "--hours", "9-17"], "hours '9-17': use HH:MM-HH:MM, e.g. 18:00-08:00 (--hours)"),
])
def test_an_idle_setting_that_cannot_work_is_named_with_where_it_was_given(tmp_path, text, env, args, said):
    """A desktop's file with ``hours = "25:00-08:00"`` was refused with "25:00 is not a time of
    day" and no word of which file (or variable) said so; the line now names it, as the other
    refusals of a configuration do."""
    path = write(tmp_path, text)
    done = _executor(["--config", str(path), "--manager", f"tcp://127.0.0.1:{free_port()}", *args], env=env)
    assert done.returncode == 2 and done.stderr.strip() == "error: " + said.format(path=path), done.stderr


def test_gridcrawl_run_gives_its_executors_their_own_section_unless_told_otherwise(tmp_path, site_server):
    """``gridcrawl run`` passed every setting it shares with the executors on their command
    line, its defaults included: ``[executor] threads = 3`` was read by them, then overridden by
    run's default ``--threads 8``. Only what run was given (its command line, its ``[run]``
    section) is passed on now. (Three runs side by side, each with its file and workdir.)"""
    from sites import generate_site
    cases = [("[executor]\nthreads = 3\n", [], 3),                      # the executors' own section
             ("[executor]\nthreads = 3\n[run]\nthreads = 5\n", [], 5),  # run's section: for what it starts
             ("[executor]\nthreads = 3\n", ["--threads", "2"], 2)]      # run's command line wins
    server = site_server(generate_site(3, links_per_page=1, seed=3))
    for n, (text, _, _) in enumerate(cases):
        (tmp_path / str(n)).mkdir()
        write(tmp_path / str(n), text)
    runs = _programs(*((["gridcrawl", "run", "--config", str(tmp_path / str(n) / "gridcrawl.toml"), server.url("/"),
                         *args, "--executors", "1", "--workdir", str(tmp_path / str(n) / "w"), "--no-progress"], None)
                       for n, (_, args, _) in enumerate(cases)), timeout=120)
    for n, ((text, args, workers), run) in enumerate(zip(cases, runs)):
        assert run.returncode == 0, (text, args, run.stderr[-2000:])
        log = (tmp_path / str(n) / "w" / "manager.log").read_text()
        assert "registered: " in log and f", {workers} threads" in log, (text, args, log[-2000:])


@pytest.mark.parametrize("text, needle", [
    ("[executor]\nthread = 8\n", "[executor]: unknown setting 'thread' (did you mean 'threads'?)"),
    ("[manager]\nlease_second = 3\n", "[manager]: unknown setting 'lease_second'"),
    ("[client]\nmax_in_flight = 'many'\n", "max_in_flight must be int"),
    ("[executor]\ndownload_timeout = -5\n", "download_timeout"),  # the right type, out of its range
    ("[client]\ndownload_delay = 5\n", "[client]: download_delay is not used by gridcrawl-client"),
])
def test_gridcrawl_run_checks_the_sections_of_the_programs_it_starts_before_it_starts_them(tmp_path, text, needle):
    """A bad ``[executor]`` key used to pass ``gridcrawl run``'s own check: a manager started,
    then each executor refused the file (one line per executor) and the run said "see its log
    in WORKDIR", where no log was. It is one line now, before any process starts."""
    path = write(tmp_path, text)
    run = subprocess.run([sys.executable, "-m", "gridcrawl", "run", "--config", str(path), "http://127.0.0.1:9/",
                          "--executors", "3", "--workdir", str(tmp_path / "w"), "--no-progress"],
                         capture_output=True, text=True, timeout=120, env=CLEAN_ENV)
    lines = run.stderr.strip().splitlines()
    assert run.returncode == 2 and len(lines) == 1 and lines[0].startswith(f"error: {path}") and needle in lines[0], \
        run.stderr
    assert not (tmp_path / "w").exists()


@pytest.mark.parametrize("text, message", [
    ("nosuch = 1\n", "unknown setting 'nosuch'$"),
    ("max_pagez = 5\n", "unknown setting 'max_pagez' (did you mean 'max_pages'?)"),
    ("threads = 'four'\n", "threads must be int"),
    ("threads = true\n", "threads must be int"),
    ("heartbeat_interval = 'fast'\n", "heartbeat_interval must be float"),
    ("[exeutor]\nthreads = 2\n", "unknown section [exeutor]"),
    ("[executor]\nbind = 'tcp://*:1'\n", "unknown setting 'bind'"),
    ("[logging]\nlevel = 'INFO'\n", "unknown setting 'level'"),
    ("threads = \n", "not valid TOML"),
])
def test_bad_files_are_refused_naming_the_file_and_key(tmp_path, text, message):
    path = write(tmp_path, text)
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("]", r"\]").replace("(", r"\(")
                       .replace(")", r"\)").replace("?", r"\?")) as info:
        resolve("executor", {"threads", "manager"}, path, {})
    assert str(path) in str(info.value)


def test_missing_file_and_bad_environment_values():
    with pytest.raises(ConfigError, match="does not exist"):
        resolve("executor", set(), "/nonexistent/gridcrawl.toml", {})
    with pytest.raises(ConfigError, match="GRIDCRAWL_PREFETCH: prefetch must be int"):
        resolve("executor", set(), None, {"GRIDCRAWL_PREFETCH": "many"})
    assert convert_setting("keep_non_html", "ON", "x") is True
    assert convert_setting("download_delay", 2, "x") == 2.0


def test_take_config_argument():
    assert take_config_argument(["--config", "a.toml", "run", "x"]) == ("a.toml", ["run", "x"])
    assert take_config_argument(["run", "--config=b.toml"]) == ("b.toml", ["run"])
    assert take_config_argument(["run", "--", "--config", "c"]) == (None, ["run", "--", "--config", "c"])


# ------------------------------------------------------------------------------ a real typer program


def test_run_program_applies_file_environment_and_command_line_in_order(tmp_path, monkeypatch, capsys):
    seen = {}
    app = typer.Typer(add_completion=False)

    @app.command()
    def main(ctx: typer.Context, threads: int = typer.Option(Settings.threads),
             prefetch: int = typer.Option(Settings.prefetch), config: str = typer.Option(None)) -> None:
        seen["settings"] = configured_settings(ctx, threads=threads, prefetch=prefetch)

    path = write(tmp_path, "threads = 2\nprefetch = 3\nmax_redirects = 1\n[executor]\nparse_threads = 4\n")
    # run_program exports GRIDCRAWL_CONFIG for the programs it starts: monkeypatch takes it away again
    monkeypatch.setenv("GRIDCRAWL_CONFIG", "")
    for key in [k for k in os.environ if k.startswith("GRIDCRAWL_")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("GRIDCRAWL_PREFETCH", "5")
    monkeypatch.setenv("GRIDCRAWL_MAX_REDIRECTS", "6")
    with pytest.raises(SystemExit) as done:
        run_program(app, "executor", ["--config", str(path), "--threads", "9"])
    assert done.value.code in (0, None)
    s = seen["settings"]
    assert s.threads == 9                  # command line over file
    assert s.prefetch == 5                 # environment over file
    assert s.max_redirects == 6            # a field with no option: environment over file
    assert s.parse_threads == 4            # the program's section
    assert s.heartbeat_interval == Settings.heartbeat_interval
    assert os.environ["GRIDCRAWL_CONFIG"] == str(path.resolve())   # programs it starts read it too
    bad = write(tmp_path, "threads = 'x'\n")
    with pytest.raises(SystemExit) as failed:
        run_program(app, "executor", ["--config", str(bad)])
    assert failed.value.code == 2 and "threads must be int" in capsys.readouterr().err


def test_the_previous_test_left_no_configuration_behind():
    assert "GRIDCRAWL_CONFIG" not in os.environ


def _executor(args, env=None, timeout=60):
    return subprocess.run([sys.executable, "-m", "gridcrawl.executor", *args], capture_output=True, text=True,
                          timeout=timeout, env={**CLEAN_ENV, **(env or {})})


def _executors(*runs, timeout=60) -> list[subprocess.CompletedProcess]:
    """Executor programs run side by side, one per ``(args, env)`` of ``runs``, and what each
    did, in that order (as :func:`_executor`'s; each waits its connect timeout and its exit on its
    own, so together they take the time of one)."""
    return _programs(*((["gridcrawl.executor", *args], env) for args, env in runs), timeout=timeout)


def _programs(*runs, timeout=60) -> list[subprocess.CompletedProcess]:
    """Programs run side by side, ``python -m ARGS`` for each ``(ARGS, env)`` of ``runs`` (``env``
    added to the environment without GRIDCRAWL_ variables), and what each did, in that order."""
    return run_at_once(*(subprocess.Popen([sys.executable, "-m", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                          text=True, env={**CLEAN_ENV, **(env or {})}) for args, env in runs),
                       timeout=timeout)


def test_the_executor_program_takes_its_manager_from_file_env_or_command_line(tmp_path):
    ports = [free_port() for _ in range(3)]  # nobody listens: the error names the endpoint used
    path = write(tmp_path, f'connect_timeout = 0.3\n[executor]\nmanager = "tcp://127.0.0.1:{ports[0]}"\n')
    broken_toml = tmp_path / "broken.toml"
    broken_toml.write_text("[executor]\nthreads = -\n")
    from_file, from_env, from_cli, broken = _executors(
        (["--config", str(path)], None),
        (["--config", str(path)], {"GRIDCRAWL_MANAGER": f"tcp://127.0.0.1:{ports[1]}"}),
        (["--config", str(path), "--manager", f"tcp://127.0.0.1:{ports[2]}"],
         {"GRIDCRAWL_MANAGER": f"tcp://127.0.0.1:{ports[1]}"}),
        (["--config", str(broken_toml)], None))
    assert from_file.returncode == 2 and f"127.0.0.1:{ports[0]}" in from_file.stderr
    assert from_env.returncode == 2 and f"127.0.0.1:{ports[1]}" in from_env.stderr
    assert from_cli.returncode == 2 and f"127.0.0.1:{ports[2]}" in from_cli.stderr
    assert broken.returncode == 2 and broken.stderr.startswith("error: ") and "not valid TOML" in broken.stderr


def test_a_program_section_holds_the_options_of_every_command_that_reads_it(tmp_path):
    """[manager] holds gridcrawl-manager's options (bind, db, http) and is read by its users
    commands too; [run] holds gridcrawl run's (workdir, executors) and is read by gridcrawl's
    other commands: each key is checked against every command that reads the section, not the
    one running. Before, the documented example stopped every such program with "unknown setting"."""
    path = write(tmp_path, f'[manager]\nbind = "tcp://127.0.0.1:{free_port()}"\ndb = "sqlite:///{tmp_path}/m.db"\n'
                           f'http = "127.0.0.1:{free_port()}"\n[run]\nworkdir = "{tmp_path}/w"\nexecutors = 3\n')
    # a key no command of the section has is still refused, by every program that reads it
    typo = tmp_path / "typo.toml"
    typo.write_text('[manager]\nbnd = "tcp://127.0.0.1:1"\n')
    users, users_env, report, shown, *typos = _programs(
        (["gridcrawl.manager", "--config", str(path), "users", "list"], None),  # its --db from [manager]
        (["gridcrawl.manager", "users", "list"], {"GRIDCRAWL_DB": f"sqlite:///{tmp_path}/e.db"}),
        (["gridcrawl", "report", "--db", f"sqlite:///{tmp_path}/none.db"], {"GRIDCRAWL_CONFIG": str(path)}),
        (["gridcrawl", "--config", str(path), "config", "show", "--program", "manager"], {"COLUMNS": "200"}),
        (["gridcrawl.manager", "--config", str(typo), "users", "list"], None),
        (["gridcrawl.manager", "--config", str(typo)], None))
    assert users.returncode == 2 and users.stderr.strip() == f"error: no database file {tmp_path}/m.db " \
                                                             f"(from sqlite:///{tmp_path}/m.db)", users.stderr
    assert users_env.returncode == 2 and f"no database file {tmp_path}/e.db" in users_env.stderr, users_env.stderr
    assert report.returncode == 2 and "no database file" in report.stderr and "unknown" not in report.stderr
    assert shown.returncode == 0 and "manager.bind" in shown.stdout, shown.stderr
    for done in typos:
        assert done.returncode == 2 and "[manager]: unknown setting 'bnd' (did you mean 'bind'?)" in done.stderr


@pytest.mark.parametrize("text, message", [
    ("[executor]\nmanager = 8400\n", "[executor]: manager must be text or a list of texts, not 8400"),
    ("[executor]\nidle_only = 'maybe'\n", "[executor]: idle_only: 'maybe' is not a valid boolean"),
    ("[executor]\nallow_private = 5\n", "[executor]: allow_private must be text or a list of texts, not 5"),
    # a bad CIDR was refused by the executor without naming the file
    ("[executor]\nallow_private = '127.0.0.1/33'\n",
     "[executor]: allow_private: '127.0.0.1/33' is not an IP network (expected CIDR such as 127.0.0.0/8)"),
])
def test_a_wrong_value_of_a_program_option_in_the_file_is_one_line_naming_the_file_and_key(tmp_path, text, message):
    """Options that are not settings (an executor's --manager, --idle-only) are checked as the
    command line checks them, naming the file: before, a traceback (an integer for a repeatable
    option) or click's error about an option the user never typed."""
    path = write(tmp_path, text)
    done = subprocess.run([sys.executable, "-m", "gridcrawl.executor", "--config", str(path), "--manager",
                           "tcp://127.0.0.1:1"] if "manager =" not in text else
                          [sys.executable, "-m", "gridcrawl.executor", "--config", str(path)],
                          capture_output=True, text=True, timeout=60, env=CLEAN_ENV)
    assert done.returncode == 2 and done.stderr.startswith(f"error: {path} {message}"), done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_config_show_prints_every_setting_with_its_source(tmp_path):
    path = write(tmp_path, "heartbeat_interval = 0.5\n[executor]\nthreads = 3\n")
    done = subprocess.run([sys.executable, "-m", "gridcrawl", "--config", str(path), "config", "show",
                           "--program", "executor", "--", "--max-body-bytes", "1000"],
                          capture_output=True, text=True, timeout=60,
                          env={**CLEAN_ENV, "GRIDCRAWL_PARSE_THREADS": "4", "GRIDCRAWL_PREFETCH": "4",
                               "COLUMNS": "200"})
    assert done.returncode == 0, done.stderr
    rows = {}
    for line in done.stdout.splitlines():
        cells = [c.strip() for c in line.strip("│ ").split("│")]
        if len(cells) == 3 and cells[0]:
            rows[cells[0]] = (cells[1], cells[2])
    assert rows["heartbeat_interval"] == ("0.5", f"file {path}")
    assert rows["threads"] == ("3", f"file {path} [executor]")
    assert rows["parse_threads"] == ("4", "env GRIDCRAWL_PARSE_THREADS")
    assert "prefetch" not in rows  # the manager's: not in force in the executor, whatever the environment says
    assert rows["max_body_bytes"] == ("1000", "command line")
    assert rows["max_redirects"] == (repr(Settings.max_redirects), "default")
    assert rows["executor.idle_only"] == ("False", "default")
    # a repeatable option the file gives as text (comma-separated) shows as the program takes it
    text = write(tmp_path, '[executor]\nmanager = "tcp://127.0.0.1:8400,tcp://127.0.0.1:8401"\n')
    done = subprocess.run([sys.executable, "-m", "gridcrawl", "--config", str(text), "config", "show",
                           "--program", "executor"], capture_output=True, text=True, timeout=60,
                          env={**CLEAN_ENV, "COLUMNS": "200"})
    assert "('tcp://127.0.0.1:8400', 'tcp://127.0.0.1:8401')" in done.stdout, done.stdout + done.stderr
    assert len([name for name in rows if "." not in name and name != "setting"]) == \
        len([name for name, _, _ in Settings.documented() if "executor" in used_by(name)])


def config_show(path, program: str, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """``gridcrawl --config PATH config show --program PROGRAM ARGS`` (400 columns: a table row
    with a pytest-xdist temporary path did not fit in 200)."""
    return subprocess.run([sys.executable, "-m", "gridcrawl", "--config", str(path), "config", "show",
                           "--program", program, *args], capture_output=True, text=True, timeout=60,
                          env={**CLEAN_ENV, "COLUMNS": "400", **(env or {})})


def config_show_start(path, program: str, *args: str, env: dict | None = None) -> subprocess.Popen:
    """:func:`config_show` started, its output captured, to run beside another program (``env``
    whole, as there)."""
    return subprocess.Popen([sys.executable, "-m", "gridcrawl", "--config", str(path), "config", "show",
                             "--program", program, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**CLEAN_ENV, "COLUMNS": "400", **(env or {})})


def shown_rows(stdout: str) -> dict[str, tuple[str, str]]:
    """The rows of ``gridcrawl config show``'s table: name -> (value, source)."""
    rows = {}
    for line in stdout.splitlines():
        cells = [c.strip() for c in line.strip("│ ").split("│")]
        if len(cells) == 3 and cells[0]:
            rows[cells[0]] = (cells[1], cells[2])
    return rows


@pytest.mark.parametrize("text, program, message", [
    ('[executor]\nallow_private = "127.0.0.1/33"\n', "executor",
     "[executor]: allow_private: '127.0.0.1/33' is not an IP network (expected CIDR such as 127.0.0.0/8)"),
    ("[executor]\nthreads = 0\n", "executor", "[executor]: setting threads (--threads) must be >= 1, not 0"),
    ("[run]\nexecutors = 'two'\n", "run", "[run]: executors: 'two' is not a valid int."),
])
def test_config_show_refuses_what_the_program_would(tmp_path, text, program, message):
    """``config show`` accepted ``allow_private = "127.0.0.1/33"`` (exit 0) and values out of
    their range, which the program itself then refused: it checks them as the program does."""
    path = write(tmp_path, text)
    done = config_show(path, program)
    assert done.returncode == 2 and done.stderr.strip() == f"error: {path} {message}", done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("program, args, message", [
    ("executor", ["--threads", "x"], "gridcrawl-executor's command line: Invalid value for '--threads': 'x' is not "
                                     "a valid int."),
    ("executor", ["--bogus"], "gridcrawl-executor's command line: No such option: --bogus"),
    ("executor", ["--threads", "0"], "setting threads (--threads) must be >= 1, not 0"),  # as the program says it
    ("run", ["--max-pages", "abc"], "gridcrawl run's command line: Invalid value for '--max-pages': 'abc' is not a "
                                    "valid int."),
])
def test_config_show_refuses_a_command_line_the_program_would(tmp_path, program, args, message):
    """``config show --program executor -- --threads x`` showed ``threads None`` from the
    "command line" (exit 0), ``--threads 0`` as 0, and an option the program does not have not
    at all, where the program refuses them: it says the program's error, exit 2. A required option nobody
    gave (``--manager``) is still no error, and a good command line is shown."""
    path = write(tmp_path, "[executor]\nparse_threads = 1\n")
    shown_proc = config_show_start(path, "executor", "--", "--threads", "4")
    done = config_show(path, program, "--", *args)
    assert done.returncode == 2 and done.stderr.startswith(f"error: {message}"), done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and not done.stdout
    out, err = shown_proc.communicate(timeout=60)
    shown = subprocess.CompletedProcess(shown_proc.args, shown_proc.returncode, out, err)
    assert shown.returncode == 0 and shown_rows(shown.stdout)["threads"] == ("4", "command line"), shown.stderr


def test_a_value_out_of_its_range_is_named_with_where_it_was_given(tmp_path):
    """The program refused ``[executor] threads = 0`` with ``setting threads (--threads) must be
    >= 1``, naming an option nobody typed and no file, where ``config show`` named the file: it
    now says the same line, names a variable's value by the variable, and a command-line value
    by its option alone; the command line still wins over a bad file value."""
    path = write(tmp_path, "[executor]\nthreads = 0\nparse_threads = 1\n")
    nobody = f"tcp://127.0.0.1:{free_port()}"
    cases = ((["--config", str(path)], {"GRIDCRAWL_RETRY_TIMES": "1"},
              f"error: {path} [executor]: setting threads (--threads) must be >= 1, not 0"),
             ([], {"GRIDCRAWL_THREADS": "0"}, "error: env GRIDCRAWL_THREADS: setting threads (--threads) must be >= 1"),
             (["--threads", "0"], {}, "error: setting threads (--threads) must be >= 1, not 0"))
    *refused, overridden = _executors(
        *(([*args, "--manager", nobody], env) for args, env, _ in cases),
        (["--config", str(path), "--threads", "2", "--manager", nobody, "--connect-timeout", "0.3"], None))
    for (_, _, said), done in zip(cases, refused):
        assert done.returncode == 2 and done.stderr.strip().startswith(said), done.stderr
        assert "Traceback" not in done.stderr
    assert overridden.returncode == 2 and "no answer from the manager" in overridden.stderr, overridden.stderr


def test_config_show_of_gridcrawl_run_reads_its_section(tmp_path):
    """``config show --program run`` was refused ("--program must be manager, executor or
    client") though ``[run]`` is a section of gridcrawl run's (and fetch's and spark's)."""
    path = write(tmp_path, '[run]\nthreads = 3\nexecutors = 4\nallow_private = "10.0.0.0/8"\n'
                           'spark_partitions = 6\n[executor]\nthreads = 9\n')
    done, refused = _programs(
        (["gridcrawl", "--config", str(path), "config", "show", "--program", "run", "--", "--workdir",
          str(tmp_path / "w")], {"COLUMNS": "400"}),  # (config_show's)
        (["gridcrawl", "config", "show", "--program", "spark"], None))
    assert done.returncode == 0, done.stderr
    rows = shown_rows(done.stdout)
    assert "effective settings of gridcrawl run" in done.stdout
    assert rows["threads"] == ("3", f"file {path} [run]")              # [run], not [executor]
    assert "spark_partitions" not in rows   # gridcrawl spark's, which reads [run] too: not gridcrawl run's
    assert rows["run.executors"] == ("4", f"file {path} [run]")
    assert rows["run.allow_private"] == ("('10.0.0.0/8',)", f"file {path} [run]")
    assert rows["run.workdir"] == (repr(str(tmp_path / "w")), "command line")
    assert rows["run.order"] == ("None", "default")
    assert refused.returncode == 2 and refused.stderr.strip() == \
        "error: --program must be manager, executor, client or run"


def test_a_bad_cidr_on_the_command_line_is_refused_before_anything_starts(tmp_path):
    commands = (["gridcrawl.executor", "--manager", "tcp://127.0.0.1:1"],
                ["gridcrawl", "run", "--workdir", str(tmp_path / "w"), "http://127.0.0.1:1/"],
                ["gridcrawl", "fetch", "http://127.0.0.1:1/"])
    for command, done in zip(commands, _programs(*(([*command, "--allow-private", "10.0.0.0/33"], {"COLUMNS": "200"})
                                                   for command in commands))):
        assert done.returncode == 2 and "Invalid value for '--allow-private': '10.0.0.0/33' is not an IP network " \
            "(expected CIDR such as 127.0.0.0/8)" in done.stderr, (command, done.stderr)
    assert not (tmp_path / "w").exists()


@pytest.mark.parametrize("text, program, message", [
    ("[client]\ndownload_delay = 5\n", "client",
     "[client]: download_delay is not used by gridcrawl-client: it is a setting of gridcrawl-manager, gridcrawl run, "
     "gridcrawl spark and gridcrawl fetch (put it in [manager] or [run], or before any section for every program)"),
    ("[executor]\nmax_pages = 3\n", "executor",
     "[executor]: max_pages is not used by gridcrawl-executor: it is a setting of gridcrawl-client, gridcrawl run "
     "and gridcrawl spark (put it in [client] or [run], or before any section for every program)"),
    ("[executor]\ndispatch = 'host-hash'\n", "executor",
     "[executor]: dispatch is not used by gridcrawl-executor: it is a setting of gridcrawl-manager and gridcrawl "
     "run (put it in [manager] or [run], or before any section for every program)"),
    ("[client]\nthreads = 4\n", "client", "[client]: threads is not used by gridcrawl-client: it is a setting of "
     "gridcrawl-executor, gridcrawl run and gridcrawl spark (put it in [executor] or [run], or before any section "
     "for every program)"),
    ("[manager]\nthreads = 4\n", "manager", "[manager]: threads is not used by gridcrawl-manager"),
    ("[run]\npeer_rate = 10\n", "manager", "[run]: peer_rate is not used by gridcrawl run, gridcrawl spark, "
     "gridcrawl fetch or gridcrawl extract: it is a setting of gridcrawl-manager (put it in [manager], or before "
     "any section for every program)"),
    ("[export]\nthreads = 2\n", "manager", "[export]: threads is not used by gridcrawl export"),
])
def test_a_setting_in_the_section_of_a_program_that_does_not_use_it_is_refused(tmp_path, text, program, message):
    """``[client] download_delay = 5`` was accepted without a word and ``config show --program
    client`` listed it as in force, while the client fetched 15 pages in 0.53 s: only the manager
    spaces fetches. Such a key is one line now, naming the programs that use it."""
    path = write(tmp_path, text)
    done = config_show(path, program)
    line = done.stderr.strip()
    assert done.returncode == 2 and len(line.splitlines()) == 1 and line.startswith(f"error: {path} {message}"), \
        done.stderr


def test_the_client_refuses_a_delay_it_does_not_enforce_before_it_crawls(tmp_path):
    path = write(tmp_path, "[client]\ndownload_delay = 5\n")
    # a flat key is for every program: the manager takes it, the others leave it (and config show says so)
    flat = tmp_path / "flat.toml"
    flat.write_text("download_delay = 5\n[client]\nmax_in_flight = 4\n")
    done, client_shown, manager_shown = _programs(
        (["gridcrawl.client", "--config", str(path), "--manager", "tcp://127.0.0.1:1", "--db",
          f"sqlite:///{tmp_path}/c.db", "http://127.0.0.1:1/"], None),
        *((["gridcrawl", "--config", str(flat), "config", "show", "--program", program], {"COLUMNS": "400"})
          for program in ("client", "manager")))  # (config_show's)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    assert lines[0].startswith(f"error: {path} [client]: download_delay is not used by gridcrawl-client: it is a "
                               "setting of gridcrawl-manager")
    assert not (tmp_path / "c.db").exists()
    client = shown_rows(client_shown.stdout)
    assert "download_delay" not in client and client["max_in_flight"] == ("4", f"file {flat} [client]")
    assert shown_rows(manager_shown.stdout)["download_delay"] == ("5.0", f"file {flat}")


@pytest.mark.parametrize("args, message", [
    (["gridcrawl.client", "--download-delay", "1"], "gridcrawl-client has no option --download-delay: it is an option "
     "of gridcrawl-manager, gridcrawl run and gridcrawl spark (the setting download_delay, which gridcrawl-client "
     "does not use)"),
    (["gridcrawl.executor", "--manager", "tcp://127.0.0.1:1", "--max-pages=3"], "gridcrawl-executor has no option "
     "--max-pages: it is an option of gridcrawl-client, gridcrawl run and gridcrawl spark (the setting max_pages, "
     "which gridcrawl-executor does not use)"),
    (["gridcrawl.manager", "--peer-rate", "3"], "gridcrawl-manager has no option --peer-rate: it takes the setting "
     "peer_rate from the configuration file ([manager] peer_rate) or GRIDCRAWL_PEER_RATE"),
    (["gridcrawl", "run", "--parse-threads", "2", "http://127.0.0.1:1/"], "gridcrawl run has no option "
     "--parse-threads: parse_threads is a setting of gridcrawl-executor, which has no option for it either: set it "
     "in the configuration file ([executor] parse_threads) or GRIDCRAWL_PARSE_THREADS"),
    # an option of no setting: the README tells executors to take it, and a client was told "No such option"
    (["gridcrawl.client", "--manager", "tcp://127.0.0.1:1", "--allow-private", "10.0.0.0/8", "http://127.0.0.1:1/"],
     "gridcrawl-client has no option --allow-private: it is an option of gridcrawl-executor, gridcrawl run, "
     "gridcrawl fetch and gridcrawl spark"),
    (["gridcrawl.executor", "--manager", "tcp://127.0.0.1:1", "--bind", "tcp://*:1"], "gridcrawl-executor has no "
     "option --bind: it is an option of gridcrawl-manager"),
])
def test_another_programs_option_is_named_as_such(args, message):
    """``gridcrawl-client --download-delay 1`` said only "No such option"."""
    done, other = _programs((args, None), (["gridcrawl.client", "--no-such-thing"], {"COLUMNS": "200"}))
    assert done.returncode == 2 and done.stderr.strip() == f"error: {message}", done.stderr
    assert other.returncode == 2 and "No such option: --no-such-thing" in other.stderr  # click's, as before


def test_a_misspelt_variable_is_warned_of_once_naming_the_setting(tmp_path, site_server):
    """``GRIDCRAWL_THRADS=4`` was ignored without a word. A variable close to no setting (a test
    suite's GRIDCRAWL_TEST_...) and another program's option (GRIDCRAWL_BIND) are left alone;
    the programs ``gridcrawl run`` starts do not warn again."""
    env = {**CLEAN_ENV, "GRIDCRAWL_THRADS": "4", "GRIDCRAWL_TEST_SOMETHING": "1", "GRIDCRAWL_BIND": "tcp://*:1",
           "COLUMNS": "200"}
    from sites import generate_site
    server = site_server(generate_site(3, links_per_page=1, seed=3))
    shown = config_show_start(write(tmp_path, ""), "executor", env=env)
    run = subprocess.run([sys.executable, "-m", "gridcrawl", "run", server.url("/"), "--executors", "2",
                          "--workdir", str(tmp_path / "w"), "--no-progress"],
                         capture_output=True, text=True, timeout=120, env=env)
    out, err = shown.communicate(timeout=60)
    assert shown.returncode == 0 and err.strip() == "warning: GRIDCRAWL_THRADS is no setting or option of " \
        "gridcrawl (did you mean GRIDCRAWL_THREADS?): ignored", err
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stderr.count("GRIDCRAWL_THRADS") == 1, run.stderr


def test_show_rows_with_the_real_manager_command(tmp_path):
    from gridcrawl.manager.cli import app
    path = write(tmp_path, '[manager]\nhttp = "127.0.0.1:9999"\n')
    rows = {name: (value, source) for name, value, source in
            show_rows("manager", typer.main.get_command(app), ["--prefetch", "7"], str(path), {})}
    assert rows["manager.http"] == ("'127.0.0.1:9999'", f"file {path} [manager]")
    assert rows["prefetch"] == ("7", "command line")
    # a program option's password (the database's) shows as *** (only proxy's was hidden)
    secret = write(tmp_path, '[manager]\ndb = "postgresql+psycopg://grid:DbSecret-4455@db.corp/grid"\n')
    rows = {name: value for name, value, _ in show_rows("manager", typer.main.get_command(app), [], str(secret), {})}
    assert rows["manager.db"] == "'postgresql+psycopg://grid:***@db.corp/grid'"
    # and so does one in a setting of the wrong type
    wrong = write(tmp_path, '[executor]\nproxy = ["http://crawler:ProxySecret-991@proxy.corp:3128"]\n')
    done = subprocess.run([sys.executable, "-m", "gridcrawl", "--config", str(wrong), "config", "show",
                           "--program", "executor"], capture_output=True, text=True, timeout=60, env=CLEAN_ENV)
    assert done.returncode == 2 and "ProxySecret" not in done.stderr and "crawler:***@proxy.corp" in done.stderr, \
        done.stderr


# ------------------------------------------------------------------------------ logs


def test_json_log_lines_name_the_grid_thread_and_its_url():
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger("gridcrawl.manager")
    logger.addHandler(handler)
    old_level = logger.level
    logger.setLevel(logging.INFO)
    try:
        ids = (f"id{i}" for i in itertools.count(1))
        core = ManagerCore(Settings(thread_timeout=5.0, prefetch=0, max_attempts=5), new_id=lambda: next(ids))
        core.handle(b"ex", p.Register(name="ex", host="h", user="u", threads=1), 0.0)
        opened = [a for a in core.handle(b"cl", p.OpenApplication("c", "u"), 0.0)
                  if getattr(a, "message", None).__class__ is p.ApplicationOpened][0]
        app = opened.message.application_id
        core.handle(b"cl", p.Submit(app, [p.ThreadSpec(42, "http://slow.test/page")]), 0.0)
        core.handle(b"ex", p.Heartbeat(), 6.0)
        core.handle(b"cl", p.Heartbeat(), 6.0)
        core.tick(6.0)                          # ran over thread_timeout: taken back, logged
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old_level)
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    timeout = [r for r in lines if "ran over" in r["message"]]
    assert len(timeout) == 1
    record = timeout[0]
    assert record["thread_id"] == 42 and record["url"] == "http://slow.test/page" and record["application_id"] == app
    assert record["level"] == "WARNING" and record["logger"] == "gridcrawl.manager" and record["time"].endswith("+00:00")


def test_log_json_option_writes_json_lines_to_the_log_file(tmp_path):
    log_file = tmp_path / "ex.log"
    done = _executor(["--manager", f"tcp://127.0.0.1:{free_port()}", "--connect-timeout", "0.3", "--log-json",
                      "--log-file", str(log_file), "--log-level", "DEBUG"])
    assert done.returncode == 2
    lines = [json.loads(line) for line in log_file.read_text(encoding="utf-8").splitlines()]
    assert lines and all({"time", "level", "logger", "message"} <= set(r) for r in lines)


def test_programs_run_the_garbage_collector_less_often(tmp_path):
    """Every program starts at an entry point (gridcrawl.entry), which turns the collector off
    while the program's modules are imported, and runs through run_program, whose tune_gc turns
    it back on: a young-generation pass every 50,000 allocations, start-up objects frozen
    (checked in a real program's process)."""
    (tmp_path / "probe.py").write_text(
        "import gc, typer\n"
        "from gridcrawl.config import run_program\n"
        "print('importing', gc.isenabled())\n"
        "app = typer.Typer()\n"
        "@app.command()\n"
        "def show():\n"
        "    print('running', gc.isenabled(), gc.get_threshold()[0], gc.get_freeze_count() > 1000)\n"
        "def main():\n"
        "    run_program(app, 'client', [])\n", encoding="utf-8")
    code = "from gridcrawl.entry import _run; _run('probe')"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=tmp_path,
                         env={**os.environ, "PYTHONPATH": str(tmp_path)})
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["importing", "False", "running", "True", "50000", "True"]


def test_every_program_starts_at_its_entry_point():
    """The console scripts and ``python -m`` modules all start through gridcrawl.entry."""
    import tomllib
    root = Path(__file__).resolve().parent.parent
    scripts = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))["project"]["scripts"]
    assert scripts == {"gridcrawl": "gridcrawl.entry:gridcrawl", "gridcrawl-manager": "gridcrawl.entry:manager",
                       "gridcrawl-executor": "gridcrawl.entry:executor", "gridcrawl-client": "gridcrawl.entry:client"}
    for folder, name in (("gridcrawl", "gridcrawl"), ("manager", "manager"), ("executor", "executor"),
                         ("client", "client")):
        assert f"from gridcrawl.entry import {name}\n" in (root / folder / "__main__.py").read_text(encoding="utf-8")


# ------------------------------------------------------------------------------ options from Settings


def _commands():
    """program tag -> its click command (gridcrawl-manager, -executor, -client, gridcrawl run/spark/extract/fetch)."""
    from gridcrawl import cli
    from gridcrawl.client import cli as client_cli
    from gridcrawl.executor import cli as executor_cli
    from gridcrawl.manager import cli as manager_cli
    top = typer.main.get_command(cli.app)
    return {"manager": typer.main.get_command(manager_cli.app), "executor": typer.main.get_command(executor_cli.app),
            "client": typer.main.get_command(client_cli.app), "run": top.commands["run"],
            "spark": top.commands["spark"], "extract": top.commands["extract"], "fetch": top.commands["fetch"]}


def test_every_tagged_setting_is_an_option_of_its_programs_with_the_settings_default():
    """Declared once: a Settings field tagged for a program is that program's option, its
    default the field's (negated for --ignore-robots / --no-content), its help the metadata's."""
    import dataclasses
    from gridcrawl.settings import PROGRAMS
    commands = _commands()
    assert set(commands) == set(PROGRAMS)
    seen = 0
    for f in dataclasses.fields(Settings):
        cli = f.metadata.get("cli")
        for program, command in commands.items():
            params = {p.name: p for p in command.params}
            name = (cli.inverse or f.name) if cli else f.name
            if cli is None or program not in cli.programs:
                assert name not in params, (program, name)  # an option of a setting is declared nowhere else
                continue
            param = params[name]
            assert param.default == ((not f.default) if cli.inverse else f.default), (program, name)
            assert param.help == cli.help_of(program)
            seen += 1
    assert seen >= 50


def test_run_passes_its_settings_to_its_children_as_their_own_options():
    """``gridcrawl run``'s argv for its manager and executors (setting_argv) parses, in the
    children's own command lines, back to the values of its settings."""
    from gridcrawl.cli_common import secret_environment, setting_argv, setting_fields
    chosen = Settings(threads=3, obey_robots=False, dispatch="host-hash", download_delay=0.25,
                      concurrent_requests_per_host=2)
    agent = ["--user-agent", Settings.user_agent]
    unset = ["--ca-bundle", "", "--no-proxy", "", "--netrc", ""]
    render = ["--render-pages", str(Settings.render_pages), "--render-timeout", str(Settings.render_timeout),
              "--browser-path", ""]
    assert setting_argv(chosen, "executor") == ["--threads", "3", *agent, *unset, "--ignore-robots", *render]
    assert setting_argv(Settings(), "executor") == ["--threads", str(Settings.threads), *agent, *unset, *render]
    assert setting_argv(Settings(tls_verify=False, ca_bundle="/etc/ca.pem", proxy="http://proxy:3128",
                                 no_proxy="corp.example", user_agent="bot/2 (+https://b.example/)"), "executor") == [
        "--threads", str(Settings.threads), "--user-agent", "bot/2 (+https://b.example/)", "--ca-bundle",
        "/etc/ca.pem", "--no-tls-verify", "--no-proxy", "corp.example", "--netrc", "", *render]
    # a secret setting goes to the children in their environment instead, empty included
    assert secret_environment(Settings(proxy="http://u:pw@proxy:3128"), "executor") == {
        "GRIDCRAWL_PROXY": "http://u:pw@proxy:3128"}
    assert secret_environment(Settings(), "executor") == {"GRIDCRAWL_PROXY": ""}
    assert secret_environment(Settings(proxy="http://u:pw@proxy:3128"), "manager") == {}
    commands = _commands()
    for program, required in (("manager", []), ("executor", ["--manager", "tcp://127.0.0.1:1"])):
        argv = setting_argv(chosen, program)
        ctx = commands[program].make_context(program, required + argv, resilient_parsing=True)
        shared = [(f, cli) for f, cli in setting_fields(program) if "run" in cli.programs]
        assert shared
        for f, cli in shared:
            value = ctx.params[cli.inverse or f.name]
            assert (not value if cli.inverse else value) == getattr(chosen, f.name), (program, f.name)


@pytest.mark.skipif(os.name == "nt", reason="an open file cannot be renamed on Windows")
def test_a_log_file_rotated_away_is_opened_again(tmp_path):
    """--log-file of a program running for days: logrotate renames the file (its default
    ``create`` mode) and the next line goes to a new file at the same path, not to the renamed
    one for ever."""
    from gridcrawl.cli_common import setup_logging
    root = logging.getLogger()
    saved, level = root.handlers[:], root.level
    log_file = tmp_path / "manager.log"
    try:
        setup_logging("INFO", str(log_file))
        logging.getLogger("gridcrawl.test").info("before the rotation")
        os.rename(log_file, tmp_path / "manager.log.1")
        logging.getLogger("gridcrawl.test").info("after the rotation")
    finally:
        for handler in root.handlers:
            handler.close()
        root.handlers[:] = saved
        root.setLevel(level)
    assert "before the rotation" in (tmp_path / "manager.log.1").read_text(encoding="utf-8")
    assert "after the rotation" not in (tmp_path / "manager.log.1").read_text(encoding="utf-8")
    assert "after the rotation" in log_file.read_text(encoding="utf-8")
