"""Running the real gridcrawl programs as separate processes, for end-to-end tests.

:class:`Grid` starts ``python -m gridcrawl.manager`` / ``.executor`` / ``.client`` with logs in a
temporary folder, and stops every process it started at teardown (SIGTERM, then SIGKILL).
Smaller parts, in this process: an executor agent driven by a raw manager socket
(:func:`agent_with_router`, :func:`collect_results`) and one fetch as an executor makes it
(:func:`fetch_once`).
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

FAST = ["--heartbeat-interval", "0.25", "--heartbeat-liveness", "3"]
#: The folder of the test-only executor crash hook (a ``sitecustomize`` module).
CRASH_HOOK = Path(__file__).resolve().parent / "crashhook"


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Grid:
    """Processes of one test grid. ``workdir`` holds databases and logs."""

    def __init__(self, workdir: Path, manager_db: str | None = None, crawl_db: str | None = None) -> None:
        self.workdir = Path(workdir)
        self.port = free_port()
        self.endpoint = f"tcp://127.0.0.1:{self.port}"
        self.manager_db = manager_db or f"sqlite:///{self.workdir / 'manager.db'}"
        self.crawl_db = crawl_db or f"sqlite:///{self.workdir / 'crawl.db'}"
        self.processes: list[subprocess.Popen] = []
        self.manager: subprocess.Popen | None = None
        self.executors: list[subprocess.Popen] = []

    def _spawn(self, module: str, args: list[str], log: str, env: dict | None = None) -> subprocess.Popen:
        out = open(self.workdir / log, "ab")
        env = {**os.environ, **(env or {})}
        if env.get("GRIDCRAWL_TEST_CRASH_ON") or env.get("GRIDCRAWL_TEST_PAUSE") or env.get("GRIDCRAWL_TEST_CONSTANTS"):
            env = with_test_hooks(env)
        proc = subprocess.Popen([sys.executable, "-m", module, *args], stdout=out, stderr=subprocess.STDOUT,
                                env=env)
        out.close()
        self.processes.append(proc)
        return proc

    def start_manager(self, *extra: str, env: dict | None = None) -> subprocess.Popen:
        """Start the manager on :attr:`endpoint` with :attr:`manager_db` and fast heartbeats
        (``env``: more environment, e.g. ``GRIDCRAWL_START_WINDOW`` for a setting without an option)."""
        journal = [] if "--journal" in extra else ["--journal", str(self.workdir / "manager.journal")]
        self.manager = self._spawn("gridcrawl.manager", ["--bind", self.endpoint, "--db", self.manager_db,
                                                         *FAST, *journal, *extra], "manager.log", env)
        return self.manager

    def wait_listening(self, timeout: float = 60.0) -> None:
        """Wait until the manager started by :meth:`start_manager` logs that it listens (for a
        test whose programs must find it there from their first try)."""
        wait_for(lambda: "manager listening on" in self.log("manager.log"), timeout, 0.02, "the manager listening")

    def start_executor(self, name: str, *extra: str, env: dict | None = None,
                       manager: str | None = None, allow_private: str | None = "127.0.0.0/8") -> subprocess.Popen:
        """Start an executor called ``name`` (log ``name.log``), connected to ``manager``
        (default: :attr:`endpoint`). Its SSRF guard lets it fetch the loopback test sites
        (``--allow-private 127.0.0.0/8``; ``allow_private=None`` leaves the option out)."""
        allow = ["--allow-private", allow_private] if allow_private else []
        proc = self._spawn("gridcrawl.executor", ["--manager", manager or self.endpoint, "--name", name,
                                                  *allow, *FAST, *extra], f"{name}.log", self._patient(env, manager))
        self.executors.append(proc)
        return proc

    def start_client(self, *args: str, env: dict | None = None) -> subprocess.Popen:
        """Start the client with ``args`` (seeds and options) on :attr:`crawl_db`, with ``env``
        added to its environment (e.g. ``GRIDCRAWL_*`` settings)."""
        self.client_args = ["--manager", self.endpoint, "--db", self.crawl_db, "--no-progress", *FAST, *args]
        return self._spawn("gridcrawl.client", self.client_args, "client.log", self._patient(env))

    def _patient(self, env: dict | None, manager: str | None = None) -> dict | None:
        """``env`` for a program connecting to ``manager`` (None: :attr:`endpoint`): while the
        manager this grid started there runs, the program waits up to 60 s for its first answer
        (``GRIDCRAWL_CONNECT_TIMEOUT``; a ``--connect-timeout`` given, or ``env``'s own, wins).
        Programs start beside the manager without waiting for its "listening" line, and on a
        loaded machine a manager took over the default 10 s to answer: both executors gave up."""
        if manager not in (None, self.endpoint) or self.manager is None or self.manager.poll() is not None:
            return env
        return {"GRIDCRAWL_CONNECT_TIMEOUT": "60", **(env or {})}

    def client_command(self) -> str:
        """The command line of the last client started, as the client's summary shows it
        (``gridcrawl-client`` and its arguments, e.g. in "the same command resumes the crawl")."""
        return shlex.join(["gridcrawl-client", *self.client_args])

    def log(self, name: str) -> str:
        """The text of log ``name`` (e.g. ``"manager.log"``)."""
        path = self.workdir / name
        return path.read_text(errors="replace") if path.exists() else ""

    def stop(self, timeout: float = 5.0) -> None:
        """SIGTERM every live process, then SIGKILL those still alive after ``timeout``."""
        for proc in self.processes:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for proc in self.processes:
            try:
                proc.wait(max(0.05, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def query(self, which: str, sql: str, *params) -> list[tuple]:
        """Rows of ``sql`` on the ``"manager"`` or ``"crawl"`` database (``?`` parameters on
        SQLite; other back ends through SQLAlchemy, without parameters)."""
        url = self.manager_db if which == "manager" else self.crawl_db
        if url.startswith("sqlite:///"):
            # closed here: sqlite3's context manager only commits, and connections left to the
            # collector piled up to 1,000+ open files in a whole test session (netcut's select() fails)
            with contextlib.closing(sqlite3.connect(url[len("sqlite:///"):], timeout=30)) as conn:
                return conn.execute(sql, params).fetchall()
        import sqlalchemy as sa
        engine = sa.create_engine(url)
        try:
            with engine.connect() as conn:
                return [tuple(row) for row in conn.exec_driver_sql(sql)]
        finally:
            engine.dispose()


def run_at_once(*commands, timeout: float = 60, **popen) -> list[subprocess.CompletedProcess]:
    """Each of ``commands`` — an argument list, started here as a process of its own with
    ``popen``'s keywords (text output unless ``text=False``), or a ``Popen`` already started with
    its stdout and stderr piped — waited for (``timeout`` s at most each): their exit statuses
    and output, in the order given. Programs that share no file they write run side by side
    rather than one after another; those still running when one fails are killed."""
    popen = {"text": True, **popen}
    running = [args if isinstance(args, subprocess.Popen)
               else subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, **popen)
               for args in commands]
    done = []
    try:
        for proc in running:
            out, err = proc.communicate(timeout=timeout)
            done.append(subprocess.CompletedProcess(proc.args, proc.returncode, out, err))
    finally:
        for proc in running:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return done


def with_test_hooks(env: dict) -> dict:
    """``env`` with tests/crashhook first on ``PYTHONPATH``: a program started with it runs the
    test hooks its ``GRIDCRAWL_TEST_*`` variables ask for (tests/crashhook/sitecustomize.py)."""
    return {**env, "PYTHONPATH": os.pathsep.join(filter(None, [str(CRASH_HOOK), env.get("PYTHONPATH")]))}


def wait_for(predicate, timeout: float, interval: float = 0.1, message: str = "condition"):
    """Poll ``predicate()`` until true and return what it returned; raise ``AssertionError``
    naming ``message`` after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout} s waiting for {message}")


@contextlib.contextmanager
def agent_with_router(settings, name: str = "ex"):
    """An :class:`~gridcrawl.executor.agent.ExecutorAgent` run in a thread of this process,
    registered with a ROUTER socket on 127.0.0.1 that the test drives as its manager (it may
    fetch loopback sites). Yields ``(router, peer)`` once the agent's ``register`` has been
    answered with ``welcome``; stops the agent and closes the socket at the end."""
    import threading
    import zmq
    from gridcrawl import protocol as p
    from gridcrawl.executor.agent import ExecutorAgent
    context = zmq.Context()
    router = context.socket(zmq.ROUTER)
    router.setsockopt(zmq.LINGER, 0)
    port = router.bind_to_random_port("tcp://127.0.0.1")
    agent = ExecutorAgent(settings, f"tcp://127.0.0.1:{port}", name=name, allow_private=["127.0.0.0/8"])
    stop = threading.Event()
    runner = threading.Thread(target=agent.run, args=(stop,), daemon=True)
    runner.start()
    try:
        assert router.poll(20_000), "no registration"
        peer, *frames = router.recv_multipart()
        assert isinstance(p.decode(frames), p.Register)
        router.send_multipart([peer, *p.encode(p.Welcome("e1", 1.0, 3))])
        yield router, peer
    finally:
        stop.set()
        runner.join(20)
        router.close()
        context.term()


def collect_results(router, count: int, timeout: float = 20.0) -> dict:
    """Read ``results`` messages on ``router`` (from :func:`agent_with_router`) until ``count``
    attempts have come back; return attempt id -> :class:`~gridcrawl.protocol.PageResult`.
    Fails the test after ``timeout`` seconds."""
    from gridcrawl import protocol as p
    pages: dict = {}
    deadline = time.monotonic() + timeout
    while len(pages) < count:
        assert time.monotonic() < deadline, f"only {sorted(pages)} of {count} results within {timeout} s"
        if router.poll(200):
            message = p.decode(router.recv_multipart()[1:])
            if isinstance(message, p.Results):
                pages.update((r.attempt_id, r.page) for r in message.results)
    return pages


def fetch_once(url: str, **kwargs):
    """``url`` fetched by a new :class:`~gridcrawl.executor.fetch.Fetcher` (user agent
    ``gridcrawl-test``, a 10 s deadline, ``kwargs`` for the rest), closed afterwards; returns
    its result."""
    from gridcrawl.executor.fetch import Fetcher
    fetcher = Fetcher(user_agent="gridcrawl-test", deadline=10, **kwargs)
    try:
        return fetcher.fetch(url)
    finally:
        fetcher.close()


def on_a_terminal(argv: list[str], answers: list[str] = (), env: dict | None = None,
                  timeout: float = 60) -> tuple[int, str]:
    """Run ``argv`` on a pseudo-terminal of its own (its controlling terminal, as a user's shell
    gives it: ``/dev/tty`` is that terminal), typing each of ``answers`` at the next prompt ending
    in ':'. Returns (exit status, everything it wrote to the terminal); killed after ``timeout``."""
    import pty
    import select
    pid, fd = pty.fork()
    if pid == 0:  # the child: exec at once (no Python code of the test runs here)
        os.execve(argv[0], argv, env if env is not None else dict(os.environ))
    output, answered, deadline = b"", 0, time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            if select.select([fd], [], [], 0.5)[0]:
                try:
                    chunk = os.read(fd, 4096)
                except OSError:  # EIO: the program closed the terminal
                    break
                if not chunk:
                    break
                output += chunk
                if answered < len(answers) and output.rstrip(b" ").endswith(b":"):
                    os.write(fd, answers[answered].encode() + b"\n")
                    answered += 1
        else:
            os.kill(pid, signal.SIGKILL)
    finally:
        os.close(fd)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), output.decode(errors="replace")

