"""The manager's live dashboard: a read-only web page and a JSON API under ``/api/``.

``gridcrawl-manager --http 127.0.0.1:9080`` serves, from a thread of the manager process:

* ``GET /`` — one page (HTML, CSS and JavaScript: the files of ``static/`` next to this module,
  served from here, no external assets)
  showing the executors (host, user, dedicated, connected, last heartbeat, Alchemi's CPU figures,
  threads running and finished, pages/s, capabilities), how many queued threads no connected
  executor can run (capability-based dispatch), the applications (owner, state, threads by state,
  elapsed, pages/s), the most recent grid threads (URL, executor, wait and run seconds) and the
  per-host politeness state (queued, in flight, next allowed start). It refreshes itself every
  ``refresh`` seconds with ``fetch()`` and reflows into cards on a phone's screen.
* ``GET /api/snapshot`` (all of it), ``/api/summary``, ``/api/executors``, ``/api/applications``,
  ``/api/threads``, ``/api/hosts`` — the same data as JSON; ``GET /api/`` lists them.
* ``GET /metrics`` — the same figures in Prometheus' text format (:mod:`gridcrawl.manager.metrics`).
* ``POST /api/applications/<id>/<pause|resume|cancel>`` — operator control (always
  authenticated when the manager has users; ``Content-Type: application/json`` is required, so a
  page of another origin cannot forge the request without a CORS preflight, which is refused).

**Thread safety.** The HTTP thread never touches :class:`~gridcrawl.manager.core.ManagerCore`.
The server loop stores a fresh snapshot dict every 0.5 s while it is read, builds one on demand
when the newest is older (:meth:`ManagerServer.latest_snapshot`; every answer says its ``age``
in seconds), and carries out control requests the HTTP thread queues
(:meth:`ManagerServer.request_control`).

**Login.** Bound to a loopback address (the default) the page and the read API are open. Bound
to any other address, every request needs HTTP Basic authentication (RFC 7617) with a user of
the manager database (:class:`gridcrawl.auth.UserStore`) — not of the Executors group, whose
credentials sit on every desktop (403) — and the dashboard refuses to start while no user
exists; a user without ``ManageAllApps`` sees only its own applications (:func:`for_user`).
Control needs ``ManageAllApps``, or ``ManageOwnApp`` for one's own
application, whenever users exist. Basic credentials travel in clear: off loopback, put the
dashboard behind a TLS reverse proxy or an SSH tunnel (docs/operations.md).

**Library.** Flask (routing, JSON, Basic-auth parsing through Werkzeug) served by waitress, a
production WSGI server in pure Python that runs on Linux, macOS and Windows and stops cleanly
from another thread — both are well kept (Pallets; Pylons Project).
"""

from __future__ import annotations

import heapq
import ipaddress
import logging
import time
import select
import sys
import threading
from importlib import resources
from typing import Protocol

from gridcrawl.errors import DashboardError  # noqa: F401 (re-exported)
from gridcrawl.permissions import MANAGE_ALL_APPS, MANAGE_OWN_APP, MANAGE_USERS

log = logging.getLogger("gridcrawl.manager.dashboard")

DEFAULT_PORT = 9080
#: Seconds of the GIL switch interval while the dashboard serves (see :meth:`Dashboard.start`).
SWITCH_INTERVAL = 0.001
ACTIONS = ("pause", "resume", "cancel")
#: a user needs one of these to read the dashboard when it requires a login: the Executors group
#: (ExecuteThread only), whose credentials sit on every desktop, gets none
DASHBOARD_PERMISSIONS = frozenset({MANAGE_OWN_APP, MANAGE_ALL_APPS, MANAGE_USERS})


class SnapshotSource(Protocol):
    """What the dashboard reads from: :class:`gridcrawl.manager.server.ManagerServer`."""

    def latest_snapshot(self) -> dict | None:  # pragma: no cover - protocol
        """The newest snapshot dict of the manager core (with its ``age``, seconds), or None."""

    def request_control(self, application_id: str, action: str, user: str | None = None,
                        timeout: float = 5.0, owner: str | None = None):  # pragma: no cover - protocol
        """Queue an operator action for the server loop (``owner``: only on an application of
        that user); return the request with result/error."""


def parse_address(text: str) -> tuple[str, int]:
    """``HOST:PORT``, ``[IPv6]:PORT`` or ``PORT`` (loopback) → ``(host, port)``.

    Raises :class:`DashboardError` on anything else (a port outside 0–65535, no port).
    """
    text = text.strip()
    host, sep, port = text.rpartition(":")
    if not sep:
        host, port = "127.0.0.1", text
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not host:
        raise DashboardError(f"--http {text!r}: give HOST:PORT, e.g. 127.0.0.1:{DEFAULT_PORT}")
    try:
        number = int(port)
    except ValueError:
        raise DashboardError(f"--http {text!r}: the port must be a number") from None
    if not 0 <= number <= 65535:
        raise DashboardError(f"--http {text!r}: the port must be 0-65535")
    return host, number


def asset(name: str) -> str:
    """The text of the page file ``name`` (``dashboard.html``, ``.css``, ``.js``): package data of
    ``gridcrawl.manager`` under ``static/`` (pyproject.toml ``package-data``). Raises
    ``FileNotFoundError`` if the installation lacks it."""
    return (resources.files("gridcrawl.manager") / "static" / name).read_text(encoding="utf-8")


def _hostname(host_header: str) -> str:
    """The host name of an HTTP ``Host`` value (``127.0.0.1:9080`` -> ``127.0.0.1``,
    ``[::1]:9080`` -> ``::1``)."""
    if host_header.startswith("["):
        return host_header[1:].partition("]")[0]
    return host_header.rpartition(":")[0] if host_header.count(":") == 1 else host_header


def _origin_host(origin: str) -> str:
    """The ``host[:port]`` of an ``Origin`` header (``http://127.0.0.1:9080``), lower case; ``""``
    for ``null`` or anything that is no URL."""
    from urllib.parse import urlsplit
    try:
        return urlsplit(origin).netloc.lower()
    except ValueError:
        return ""


def is_loopback(host: str) -> bool:
    """True if ``host`` is ``localhost`` or a loopback address literal (127.0.0.0/8, ::1)."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a name other than localhost may resolve anywhere: treat it as public


# ----------------------------------------------------------------------------------------------
# The snapshot: the core's state shaped for the page and the API (built by the server loop)

SNAPSHOT_HOSTS = 50         # hosts listed (most queued + in flight first)
SNAPSHOT_APPLICATIONS = 50  # applications listed (newest first)
SNAPSHOT_RUNNING = 100      # running threads listed (newest first), before the recent finished ones
SNAPSHOT_DEPARTED = 50      # executors that left listed (last heard first), after every connected one


def empty_snapshot(now: float | None, manager: dict | None = None) -> dict:
    """A snapshot of an empty grid taken at ``now`` (None: no snapshot yet), with ``manager``
    when given (a standby's: it keeps no grid state)."""
    empty = {"time": now, "summary": {}, "executors": [], "executors_total": 0, "applications": [],
             "threads": [], "hosts": [], "hosts_total": 0}
    return empty if manager is None else {**empty, "manager": manager}


def snapshot(core, now: float) -> dict:
    """A self-contained copy of ``core``'s state (a :class:`~gridcrawl.manager.core.ManagerCore`)
    for the dashboard: plain dicts, lists, numbers and strings, JSON-ready, safe to hand to another
    thread. Call it from the thread that drives the core (the server loop).

    Keys: ``time`` (``now``, POSIX s), ``summary`` (:meth:`ManagerCore.stats`), ``executors``
    (every connected one, then at most 50 that left, last heard first; ``executors_total``: all
    the manager keeps),
    ``applications`` (newest first, at most 50), ``threads`` (running ones, then the latest
    finished, newest first), ``hosts`` (per-host politeness: queued, in flight — ``held`` of them taken back from executors and maybe still fetching —, next allowed start
    as seconds from now — ``None`` when it may start now, ``"busy"`` while a delayed host has a
    fetch in flight; most loaded first, at most 50), ``hosts_total``. Times are POSIX seconds;
    rates are per second. Cost: one pass over the live grid threads and the executors.
    """
    from gridcrawl.manager.core import ManagerCore
    from gridcrawl.protocol import ErrorKind
    from gridcrawl.states import ThreadState

    started_state, live_states = ThreadState.STARTED, (ThreadState.SCHEDULED, ThreadState.STARTED)
    connected = list(core.connected.values())
    names = {ex.executor_id: ex.name for ex in connected}  # (the executors of running threads)
    departed = heapq.nlargest(SNAPSHOT_DEPARTED, (ex for ex in core.executors.values() if not ex.connected),
                              key=lambda ex: ex.last_seen)
    executors, live = [], []
    for ex in connected + departed:
        started = 0
        for t in ex.running.values():
            live.append(t)
            started += t.state is started_state
        f, info = ex.figures, ex.info
        executors.append({
            "executor_id": ex.executor_id, "name": ex.name, "host": ex.host, "user": ex.user,
            "dedicated": ex.dedicated, "connected": ex.connected, "accepting": ex.accepting,
            "last_heartbeat": ex.last_heartbeat, "last_seen": ex.last_seen, "workers": ex.workers,
            "capacity": ex.capacity, "window": min(ex.capacity, ex.window), "quarantined_until": ex.quarantined_until,
            "assigned": len(ex.running), "running": started, "finished": ex.finished,
            "cpu_max": info.get("cpu_max", 0.0), "num_cpus": info.get("num_cpus", 1),
            "mem_max": info.get("mem_max", 0), "os": info.get("os", ""),
            "cpu_usage": f.get("cpu_usage"), "cpu_avail": f.get("cpu_avail"),
            "cpu_totalusage": f.get("cpu_totalusage"), "mem_usage": f.get("mem_usage"),
            "pages_per_second": f.get("pages_per_second"), "capabilities": sorted(ex.capabilities)})
    executors.sort(key=lambda e: (not e["connected"], e["name"]))

    applications, totals = [], {s.name: 0 for s in ThreadState}
    for app in sorted(core.applications.values(), key=lambda a: a.time_created, reverse=True):
        if not app.threads and len(applications) >= SNAPSHOT_APPLICATIONS:
            continue  # nothing to count (a stopped application's threads are gone) and not listed
        counts = dict.fromkeys(ThreadState, 0)
        for t in app.threads.values():
            counts[t.state] += 1
        by_state = {s.name: n for s, n in counts.items()}
        for name, n in by_state.items():
            totals[name] += n
        if len(applications) >= SNAPSHOT_APPLICATIONS:
            continue
        # crawl seconds (README "Figures"): first thread submitted -> last finished, or now
        # while threads of it are queued or running
        start = app.first_submitted if app.first_submitted is not None else app.time_created
        live_threads = by_state["READY"] + by_state["SCHEDULED"] + by_state["STARTED"]
        end = now if live_threads and not app.paused else (app.last_finished or app.time_completed or now)
        elapsed = max(0.0, end - start)
        applications.append({
            "application_id": app.application_id, "name": app.name, "owner": app.user,
            "state": ManagerCore.application_state(app), "attached": app.peer is not None, "threads": by_state,
            "throttled": app.throttled, "unacked_bytes": app.unacked_bytes,
            "done": app.done, "errors": app.errors, "elapsed": elapsed,
            "pages_per_second": app.done / elapsed if elapsed > 0 else 0.0, "time_created": app.time_created})

    threads = []
    for t in sorted((t for t in live if t.state in live_states), key=lambda t: t.time_assigned or 0.0,
                    reverse=True)[:SNAPSHOT_RUNNING]:
        threads.append({
            "application_id": t.application_id, "thread_id": t.thread_id, "url": t.url, "host": t.host,
            "executor": names.get(t.executor_id or ""), "executor_id": t.executor_id,
            "state": t.state.name.lower(), "status": None, "error_kind": None,
            "time_submitted": t.time_submitted, "time_started": t.time_started, "time_finished": None,
            "attempts": t.attempts, "size": 0})
    for t, executor_name in reversed(core.recent):
        page = t.result
        threads.append({
            "application_id": t.application_id, "thread_id": t.thread_id, "url": t.url, "host": t.host,
            "executor": executor_name, "executor_id": t.executor_id, "state": "failed" if t.failed else "finished",
            "status": page.status if page else None, "error_kind": (page.error_kind if page else ErrorKind.POISON.value),
            "time_submitted": t.time_submitted, "time_started": t.time_started, "time_finished": t.time_finished,
            "attempts": t.attempts, "size": page.size if page else 0})

    hosts = []
    for h in core.queue.hosts.values():
        start = h.next_start
        hosts.append({"host": h.host, "queued": h.queued, "in_flight": h.in_flight, "held": h.held, "delay": h.delay,
                      "next_start": ("busy" if start == float("inf") else (start - now if start > now else None))})
    hosts.sort(key=lambda h: (-(h["queued"] + h["in_flight"]), h["host"]))
    summary = core.stats(by_state=totals)
    return {"time": now, "summary": summary, "executors": executors, "executors_total": len(core.executors),
            "applications": applications, "threads": threads, "hosts": hosts[:SNAPSHOT_HOSTS],
            "hosts_total": len(hosts)}


def for_user(data: dict, user) -> dict:
    """What of snapshot ``data`` (:func:`snapshot`) ``user`` may see on a dashboard that needs a
    login: everything with ``ManageAllApps`` (Administrators), else (``ManageOwnApp``: the Users
    group) only that user's own applications, the threads of those (running and recently
    finished: their URLs are that crawl's), and the hosts of those threads; the summary and the
    executors (the grid's, shared by every crawl) as they are. ``user`` is a
    :class:`gridcrawl.auth.User`; returns a new dict, ``data`` is not changed. A user of one
    crawl read every other user's application names and URLs, which the grid's own protocol
    (``submit``, ``ack``, reattaching) keeps from it."""
    if MANAGE_ALL_APPS in user.permissions:
        return data
    own = {a["application_id"] for a in data.get("applications", []) if a["owner"] == user.name}
    threads = [t for t in data.get("threads", []) if t["application_id"] in own]
    hosts = {t["host"] for t in threads}
    shown = [h for h in data.get("hosts", []) if h["host"] in hosts]
    return {**data, "applications": [a for a in data.get("applications", []) if a["application_id"] in own],
            "threads": threads, "hosts": shown, "hosts_total": len(shown)}


# ----------------------------------------------------------------------------------------------
# The Flask application


def create_app(source: SnapshotSource, *, users=None, login_required: bool = False, refresh: float = 2.0):
    """The dashboard's WSGI application (a Flask app).

    ``source`` supplies snapshots and carries out control requests; ``users`` is a
    :class:`gridcrawl.auth.UserStore` or None (no users: control is open, as the grid is);
    ``login_required`` makes every request need Basic authentication; ``refresh`` is the page's
    update interval in seconds.
    """
    import msgspec
    from flask import Flask, Response, g, jsonify, request
    from gridcrawl.auth import LOGINS_BUSY, LoginsThrottled
    from flask.json.provider import JSONProvider

    class MsgspecJSON(JSONProvider):
        """Flask's JSON (``jsonify``, ``request.get_json``) by msgspec: the snapshot of 1,000
        executors (0.5 MB) encodes in about 1 ms instead of 10 with the standard library, time
        the HTTP thread would hold the GIL the manager's busy loop wants (issue 23). Keys keep
        their order; a float that is not finite becomes ``null`` (valid JSON, unlike ``Infinity``)."""

        def dumps(self, obj, **kwargs) -> str:
            return msgspec.json.encode(obj).decode()

        def loads(self, s, **kwargs):
            try:
                return msgspec.json.decode(s)
            except msgspec.DecodeError as exc:  # Flask answers 400 to a ValueError
                raise ValueError(str(exc)) from None

        def response(self, *args, **kwargs) -> Response:
            obj = kwargs or (args[0] if len(args) == 1 else list(args) or None)
            return self._app.response_class(msgspec.json.encode(obj), mimetype="application/json")

    app = Flask("gridcrawl.dashboard")
    app.json = MsgspecJSON(app)

    def challenge(reason: str) -> Response:
        response = jsonify({"error": reason})
        response.status_code = 401
        response.headers["WWW-Authenticate"] = 'Basic realm="gridcrawl manager", charset="UTF-8"'
        return response

    def current_user():
        """The verified user of this request, or None (no or wrong credentials, or no store, or
        the manager over its budget of failed logins: :func:`login_failed` says which)."""
        auth = request.authorization
        if users is None or auth is None or auth.type != "basic":
            return None
        try:
            return users.verify(auth.username or "", auth.password or "")
        except LoginsThrottled:
            return None

    def login_failed() -> str:
        """Why the credentials of this request gave no user (call after :func:`current_user`)."""
        if request.authorization is None:
            return ""
        return LOGINS_BUSY if users is not None and users.throttled() else "wrong user name or password"

    refused_logins = [0.0, 0]  # time.monotonic() of the last line logged, refusals not logged since

    def note_refused_login() -> None:
        """Log a refused dashboard login (user name, address, why): at most one line a second,
        counting those it did not log, so that a password guesser shows without flooding."""
        now = time.monotonic()
        if now - refused_logins[0] < 1.0:
            refused_logins[1] += 1
            return
        more = f"; {refused_logins[1]} more refused in the last {now - refused_logins[0]:.0f} s" \
            if refused_logins[1] else ""
        refused_logins[:] = [now, 0]
        log.warning("dashboard: login refused for %r from %s (%s)%s", request.authorization.username,
                    request.remote_addr, login_failed(), more)

    def refuse(status: int, reason: str) -> Response:
        response = jsonify({"error": reason})
        response.status_code = status
        return response

    @app.before_request
    def check_origin():
        # DNS rebinding: a web page of attacker.example, its name re-pointed at 127.0.0.1, is
        # same-origin with a loopback dashboard and would read it (and, without users, control
        # it). A loopback dashboard answers only to a loopback Host; a POST from a page of
        # another origin is refused wherever the dashboard listens.
        if not login_required and not is_loopback(_hostname(request.host)):
            return refuse(403, f"Host {request.host!r} is not this loopback dashboard's (open it as "
                               "http://127.0.0.1:PORT/ or http://localhost:PORT/)")
        origin = request.headers.get("Origin")
        if request.method == "POST" and origin is not None and _origin_host(origin) != request.host.lower():
            return refuse(403, f"a request from the page of {origin!r} (another origin) is refused")
        return None

    @app.before_request
    def check_login():
        if not login_required:
            return None
        user = current_user()
        if user is None:
            if request.authorization is not None:
                note_refused_login()
            return challenge(login_failed() or "login required: HTTP Basic with a user of the manager")
        if not user.permissions & DASHBOARD_PERMISSIONS:  # the Executors group: its password is on every desktop
            response = jsonify({"error": f"user {user.name!r} (group {user.group}) has no dashboard access"})
            response.status_code = 403
            return response
        g.user = user  # what it may see: for_user
        return None

    from werkzeug.exceptions import HTTPException, MethodNotAllowed, NotFound

    @app.errorhandler(HTTPException)
    def api_error(exc: HTTPException):
        """The API's errors in JSON, as its own refusals are (Flask's are HTML pages)."""
        if not request.path.startswith("/api/"):
            return exc
        if isinstance(exc, MethodNotAllowed):
            methods = sorted(set(exc.valid_methods or ()) - {"HEAD", "OPTIONS"})
            reason = f"{request.path} takes {' or '.join(methods)}, not {request.method}"
        elif isinstance(exc, NotFound):
            reason = f"no endpoint {request.path}: GET /api/ lists them"
        else:
            reason = exc.description or exc.name
        response = jsonify({"error": reason})
        response.status_code = exc.code or 500
        if isinstance(exc, MethodNotAllowed):
            response.headers["Allow"] = ", ".join(exc.valid_methods or ())
        return response

    @app.after_request
    def harden(response: Response) -> Response:
        response.headers["Cache-Control"] = "no-store"
        response.headers["X-Content-Type-Options"] = "nosniff"
        response.headers["X-Frame-Options"] = "DENY"
        response.headers["Referrer-Policy"] = "no-referrer"
        response.headers["Content-Security-Policy"] = ("default-src 'none'; script-src 'self'; style-src 'self'; "
                                                       "connect-src 'self'; img-src 'self' data:; "
                                                       "frame-ancestors 'none'")
        return response

    def snapshot() -> dict:
        data = source.latest_snapshot() or {**empty_snapshot(None), "age": None}
        user = g.get("user")
        return data if user is None else for_user(data, user)

    html = asset("dashboard.html").replace("{refresh_ms}", str(int(refresh * 1000)))
    css, js = asset("dashboard.css"), asset("dashboard.js")

    @app.get("/")
    def page() -> Response:
        return Response(html, mimetype="text/html")

    @app.get("/dashboard.css")
    def stylesheet() -> Response:
        return Response(css, mimetype="text/css")

    @app.get("/dashboard.js")
    def script() -> Response:
        return Response(js, mimetype="text/javascript")

    @app.get("/metrics")
    def metrics() -> Response:
        from gridcrawl.manager.metrics import CONTENT_TYPE, metrics_text
        return Response(metrics_text(snapshot()), content_type=CONTENT_TYPE)

    @app.get("/api/")
    def api_index():
        return jsonify({"endpoints": ["/api/snapshot", "/api/summary", "/api/executors", "/api/applications",
                                      "/api/threads", "/api/hosts",
                                      "POST /api/applications/<id>/pause|resume|cancel", "/metrics"]})

    @app.get("/api/snapshot")
    def api_snapshot():
        return jsonify(snapshot())

    def part(name: str):
        data = snapshot()
        return jsonify({"time": data["time"], "age": data.get("age"), name: data.get(name)})

    app.add_url_rule("/api/summary", "api_summary", lambda: part("summary"))
    app.add_url_rule("/api/executors", "api_executors", lambda: part("executors"))
    app.add_url_rule("/api/applications", "api_applications", lambda: part("applications"))
    app.add_url_rule("/api/threads", "api_threads", lambda: part("threads"))
    app.add_url_rule("/api/hosts", "api_hosts", lambda: part("hosts"))

    @app.post("/api/applications/<application_id>/<action>")
    def control(application_id: str, action: str):
        if action not in ACTIONS:
            return jsonify({"error": f"unknown action {action!r} (use pause, resume or cancel)"}), 404
        if not request.is_json:
            return jsonify({"error": "send Content-Type: application/json"}), 415
        data = snapshot()  # (a standby names the active manager)
        manager = data.get("manager") or {}
        if manager.get("role") == "standby":
            return jsonify({"error": f"this manager is a standby; the active manager is {manager['active'] or 'unknown'}"
                                     ": pause, resume and cancel there"}), 503
        user = current_user()
        owner = None  # a user who manages only their own applications: the loop looks among those alone
        if users is not None and (users.require_login or users.has_users()):
            if user is None:
                if request.authorization is not None:
                    note_refused_login()
                return challenge(login_failed() or "login required to control applications")
            if MANAGE_ALL_APPS not in user.permissions:
                if MANAGE_OWN_APP not in user.permissions:
                    return jsonify({"error": f"user {user.name!r} (group {user.group}) may not pause, resume or "
                                             "cancel applications"}), 403
                owner = user.name
        result = source.request_control(application_id, action, user.name if user else "dashboard", owner=owner)
        if result.error is not None:
            status = 404 if result.error.startswith("no application") else 409
            return jsonify({"error": result.error}), status
        if result.result is None:
            return jsonify({"error": "the manager did not answer in time"}), 503
        return jsonify(result.result)

    return app


# ----------------------------------------------------------------------------------------------
# The server thread


class Dashboard:
    """The dashboard served by waitress on a thread: ``Dashboard(server, "127.0.0.1", 9080).start()``.

    ``source``: the :class:`~gridcrawl.manager.server.ManagerServer` (or any
    :class:`SnapshotSource`); ``port`` 0 picks a free port (see :attr:`port`); ``users``: the
    manager's :class:`gridcrawl.auth.UserStore`, or None. Raises :class:`DashboardError` when
    bound off loopback without any user to log in with, and ``OSError`` if the address is in use.
    """

    def __init__(self, source: SnapshotSource, host: str = "127.0.0.1", port: int = DEFAULT_PORT, *,
                 users=None, refresh: float = 2.0, threads: int = 4) -> None:
        from waitress import create_server
        self.host = host
        self.login_required = not is_loopback(host)
        if self.login_required and (users is None or not users.has_users()):
            raise DashboardError(f"the dashboard on {host} (not loopback) requires a login, and the manager "
                                 "has no users: add one with 'gridcrawl-manager users add NAME --group Administrators' or bind --http to 127.0.0.1")
        self.app = create_app(source, users=users, login_required=self.login_required, refresh=refresh)
        self._map: dict = {}
        self.server = create_server(self.app, map=self._map, host=host, port=port, threads=threads,
                                    ident="gridcrawl", clear_untrusted_proxy_headers=True,
                                    channel_timeout=30,
                                    # poll(), not select(): a manager with 1,000 executors holds
                                    # file descriptors past select()'s limit of 1,024 (Windows has no poll)
                                    asyncore_use_poll=hasattr(select, "poll"))
        self.port = self.server.effective_port
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """The page's address, e.g. ``http://127.0.0.1:9080/``."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/"

    def start(self) -> "Dashboard":
        """Serve on a daemon thread; return self.

        Lowers the interpreter's GIL switch interval to :data:`SWITCH_INTERVAL` (CPython's
        default is 5 ms): each time a request's thread wakes (waitress hands a request from its
        I/O thread to a worker and back; the loop signals a fresh snapshot), it waits up to one
        interval for the GIL held by the manager's busy loop — the "convoy effect" of D. Beazley,
        "Understanding the Python GIL" (PyCon 2010). With 1,000 executors, ``GET /api/snapshot``
        took a median 74 ms at 5 ms and 48 ms at 1 ms, the dispatch rate within the noise
        (``benchmarks/results/2026-11-27-dashboard-json-switch-interval.md``)."""
        if sys.getswitchinterval() > SWITCH_INTERVAL:
            sys.setswitchinterval(SWITCH_INTERVAL)
        self._thread = threading.Thread(target=self.server.run, name="dashboard", daemon=True)
        self._thread.start()
        log.info("dashboard on %s%s", self.url, " (login required)" if self.login_required else "")
        return self

    def stop(self, timeout: float = 3.0) -> None:
        """Stop serving: close every socket from the server's own loop, then the worker threads."""
        from waitress import wasyncore

        def close_all() -> None:
            wasyncore.close_all(self._map)

        try:
            self.server.trigger.pull_trigger(close_all)
        except OSError:  # the trigger is closed already
            pass
        self.server.task_dispatcher.shutdown(timeout=timeout)
        if self._thread is not None:
            self._thread.join(timeout)
