"""Test-only fault injection: a crashing executor (tests/test_faults.py), a manager pausing
itself at a chosen point (tests/test_failover.py, below), and a program's built-in waits made
shorter (``GRIDCRAWL_TEST_CONSTANTS``, at the end).

Python imports ``sitecustomize`` at start-up when it is on ``sys.path``; :class:`tests.grid.Grid`
puts this folder on ``PYTHONPATH`` of the processes it starts with ``GRIDCRAWL_TEST_CRASH_ON`` in
their environment. Then :func:`gridcrawl.executor.page.visit` is wrapped: a process visiting a
URL containing that value dies at once (``os._exit(70)``, no clean-up), as an executor crashing
on a page would. Production code knows nothing of it.
"""

import os

CRASH_ENV = "GRIDCRAWL_TEST_CRASH_ON"

if os.environ.get(CRASH_ENV):
    import functools

    from gridcrawl.executor import page

    _visit = page.visit

    @functools.wraps(_visit)
    def _crashing_visit(fetcher, url, *args, **kwargs):
        if os.environ[CRASH_ENV] in url:
            os._exit(70)
        return _visit(fetcher, url, *args, **kwargs)

    page.visit = _crashing_visit

# A manager pausing itself (SIGSTOP, as an operator's or a debugger's pause) at a chosen point, for
# tests/test_failover.py. ``GRIDCRAWL_TEST_PAUSE`` names a flag file; once the test writes into it
# ``in-flush`` (inside the recorder's fenced transaction, right after the lease renewal that locks
# the lease row; that transaction is the record writer process's, which stops its manager too)
# or ``between-transactions`` (at the top of a pass of the main loop, while neither the recorder
# nor the lease thread is inside a transaction; the main loop's own reads, e.g. of users, are
# between passes), the manager deletes it and stops itself there, once.
PAUSE_ENV = "GRIDCRAWL_TEST_PAUSE"

if os.environ.get(PAUSE_ENV):
    import functools
    import signal
    import threading
    from pathlib import Path

    from gridcrawl.manager import lease, recorder, server

    _flag = Path(os.environ[PAUSE_ENV])
    _manager_pid = os.getpid()  # its record writer process (forked) inherits this
    _transaction = threading.RLock()  # held by whoever is inside one of the manager's transactions

    def _pause_if(where):
        try:
            wanted = _flag.read_text().strip()
        except FileNotFoundError:
            return
        if wanted == where:
            _flag.unlink()
            if os.getpid() != _manager_pid:  # the manager's record writer process, in its transaction:
                os.kill(_manager_pid, signal.SIGSTOP)  # the whole manager stops, as Ctrl-Z stops a process group
            # to this thread: it stops at once (os.kill may hand the signal to another thread,
            # and this one would run on for a few statements before the whole process stops)
            signal.pthread_kill(threading.get_ident(), signal.SIGSTOP)

    _renew = lease.Lease.renew

    @functools.wraps(_renew)
    def _renew_then_maybe_pause(self, conn=None, *args, **kwargs):
        with _transaction:
            _renew(self, conn, *args, **kwargs)
            if conn is not None:  # the recorder's fence: its transaction stays open
                _pause_if("in-flush")

    lease.Lease.renew = _renew_then_maybe_pause

    _flush = recorder.Recorder.flush

    @functools.wraps(_flush)
    def _flush_in_transaction(self, *args, **kwargs):
        with _transaction:
            return _flush(self, *args, **kwargs)

    recorder.Recorder.flush = _flush_in_transaction

    _pass_starts = server.ManagerServer._pass_starts

    @functools.wraps(_pass_starts)
    def _maybe_pause_then_pass_starts(self, *args, **kwargs):
        if _flag.exists():  # (the lock only then: the loop never waits for a flush otherwise)
            with _transaction:
                _pause_if("between-transactions")
        return _pass_starts(self, *args, **kwargs)

    server.ManagerServer._pass_starts = _maybe_pause_then_pass_starts

# A program's built-in waits that no setting changes (the seconds before a peer says it is still
# waiting for its manager, a database server's connect timeout ...), made shorter so that a test
# of what happens at their end does not wait them out. ``GRIDCRAWL_TEST_CONSTANTS`` holds
# ``module.NAME=value`` pairs separated by ``;`` (values as Python literals); each constant must
# exist and be a number already, so a renamed one fails the test instead of changing nothing (the
# program exits at once, status 71).
CONSTANTS_ENV = "GRIDCRAWL_TEST_CONSTANTS"

if os.environ.get(CONSTANTS_ENV):
    import ast
    import importlib

    try:
        for _pair in filter(None, os.environ[CONSTANTS_ENV].split(";")):
            _target, _, _value = _pair.partition("=")
            _module, _, _name = _target.strip().rpartition(".")
            _mod = importlib.import_module(_module)
            _old = getattr(_mod, _name)  # (AttributeError: no such constant)
            if not isinstance(_old, (int, float)):
                raise TypeError(f"{_target} is {_old!r}, not a number")
            setattr(_mod, _name, ast.literal_eval(_value.strip()))
    except Exception as _exc:  # (Python would only print that sitecustomize failed, and go on)
        import sys
        print(f"{CONSTANTS_ENV}: {_exc!r}", file=sys.stderr)
        os._exit(71)
