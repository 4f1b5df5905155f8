"""The manager's live dashboard: a read-only web page and a JSON API under ``/api/``.

``gridcrawl-manager --http 127.0.0.1:9080`` serves, from a thread of the manager process:

* ``GET /`` — one page (HTML, CSS and JavaScript served by this module, no external assets)
  showing the executors (host, user, dedicated, connected, last heartbeat, Alchemi's CPU figures,
  threads running and finished, pages/s, capabilities), how many queued threads no connected
  executor can run (capability-based dispatch), the applications (owner, state, threads by state,
  elapsed, pages/s), the most recent grid threads (URL, executor, wait and run seconds) and the
  per-host politeness state (queued, in flight, next allowed start). It refreshes itself every
  ``refresh`` seconds with ``fetch()`` and reflows into cards on a phone's screen.
* ``GET /api/snapshot`` (all of it), ``/api/summary``, ``/api/executors``, ``/api/applications``,
  ``/api/threads``, ``/api/hosts`` — the same data as JSON; ``GET /api/`` lists them.
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
exists. Control needs ``ManageAllApps``, or ``ManageOwnApp`` for one's own
application, whenever users exist. Basic credentials travel in clear: off loopback, put the
dashboard behind a TLS reverse proxy or an SSH tunnel (docs/operations.md).

**Library.** Flask (routing, JSON, Basic-auth parsing through Werkzeug) served by waitress, a
production WSGI server in pure Python that runs on Linux, macOS and Windows and stops cleanly
from another thread — both are well kept (Pallets; Pylons Project).
"""

from __future__ import annotations

import ipaddress
import logging
import threading
from typing import Protocol

from gridcrawl.permissions import MANAGE_ALL_APPS, MANAGE_OWN_APP, MANAGE_USERS

log = logging.getLogger("gridcrawl.manager.dashboard")

DEFAULT_PORT = 9080
ACTIONS = ("pause", "resume", "cancel")
#: a user needs one of these to read the dashboard when it requires a login: the Executors group
#: (ExecuteThread only), whose credentials sit on every desktop, gets none
DASHBOARD_PERMISSIONS = frozenset({MANAGE_OWN_APP, MANAGE_ALL_APPS, MANAGE_USERS})


class DashboardError(ValueError):
    """The dashboard cannot be started as asked (bad address, login impossible)."""


class SnapshotSource(Protocol):
    """What the dashboard reads from: :class:`gridcrawl.manager.server.ManagerServer`."""

    def latest_snapshot(self) -> dict | None:  # pragma: no cover - protocol
        """The newest snapshot dict of the manager core (with its ``age``, seconds), or None."""

    def request_control(self, application_id: str, action: str, user: str | None = None,
                        timeout: float = 5.0):  # pragma: no cover - protocol
        """Queue an operator action for the server loop; return the request with result/error."""


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


def is_loopback(host: str) -> bool:
    """True if ``host`` is ``localhost`` or a loopback address literal (127.0.0.0/8, ::1)."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a name other than localhost may resolve anywhere: treat it as public


# ----------------------------------------------------------------------------------------------
# The Flask application


def create_app(source: SnapshotSource, *, users=None, login_required: bool = False, refresh: float = 2.0):
    """The dashboard's WSGI application (a Flask app).

    ``source`` supplies snapshots and carries out control requests; ``users`` is a
    :class:`gridcrawl.auth.UserStore` or None (no users: control is open, as the grid is);
    ``login_required`` makes every request need Basic authentication; ``refresh`` is the page's
    update interval in seconds.
    """
    from flask import Flask, Response, jsonify, request

    app = Flask("gridcrawl.dashboard")
    app.json.sort_keys = False

    def challenge(reason: str) -> Response:
        response = jsonify({"error": reason})
        response.status_code = 401
        response.headers["WWW-Authenticate"] = 'Basic realm="gridcrawl manager", charset="UTF-8"'
        return response

    def current_user():
        """The verified user of this request, or None (no or wrong credentials, or no store)."""
        auth = request.authorization
        if users is None or auth is None or auth.type != "basic":
            return None
        return users.verify(auth.username or "", auth.password or "")

    @app.before_request
    def check_login():
        if not login_required:
            return None
        user = current_user()
        if user is None:
            return challenge("login required: HTTP Basic with a user of the manager")
        if not user.permissions & DASHBOARD_PERMISSIONS:  # the Executors group: its password is on every desktop
            response = jsonify({"error": f"user {user.name!r} (group {user.group}) has no dashboard access"})
            response.status_code = 403
            return response
        return None

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
        return source.latest_snapshot() or {"time": None, "age": None, "summary": {}, "executors": [],
                                            "applications": [], "threads": [], "hosts": [], "hosts_total": 0}

    @app.get("/")
    def page() -> Response:
        html = PAGE.replace("{refresh_ms}", str(int(refresh * 1000)))
        return Response(html, mimetype="text/html")

    @app.get("/dashboard.css")
    def css() -> Response:
        return Response(CSS, mimetype="text/css")

    @app.get("/dashboard.js")
    def js() -> Response:
        return Response(JS, mimetype="text/javascript")

    @app.get("/api/")
    def api_index():
        return jsonify({"endpoints": ["/api/snapshot", "/api/summary", "/api/executors", "/api/applications",
                                      "/api/threads", "/api/hosts",
                                      "POST /api/applications/<id>/pause|resume|cancel"]})

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
        user = current_user()
        if users is not None and (users.require_login or users.has_users()):
            if user is None:
                return challenge("login required to control applications")
            owner = next((a["owner"] for a in snapshot()["applications"]
                          if a["application_id"].startswith(application_id)), None)
            allowed = MANAGE_ALL_APPS in user.permissions or (MANAGE_OWN_APP in user.permissions and owner == user.name)
            if not allowed:
                return jsonify({"error": f"user {user.name!r} may not {action} application {application_id}"}), 403
        result = source.request_control(application_id, action, user.name if user else "dashboard")
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
                                    channel_timeout=30)
        self.port = self.server.effective_port
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """The page's address, e.g. ``http://127.0.0.1:9080/``."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/"

    def start(self) -> "Dashboard":
        """Serve on a daemon thread; return self."""
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


# ----------------------------------------------------------------------------------------------
# The page (served from here: no CDN, no build step)

PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>gridcrawl manager</title>
<link rel="stylesheet" href="/dashboard.css">
<script src="/dashboard.js" defer></script>
</head>
<body data-refresh="{refresh_ms}">
<header>
  <h1>gridcrawl manager</h1>
  <p id="status" class="status">loading…</p>
</header>
<main>
  <section class="cards" id="summary" aria-label="summary"></section>
  <section>
    <h2>Executors</h2>
    <table id="executors" class="grid">
      <thead><tr><th>name</th><th>host</th><th>user</th><th>dedicated</th><th>state</th><th>heartbeat</th>
      <th>CPU use %</th><th>CPU avail %</th><th>CPU s</th><th>memory</th><th>running/threads</th><th>finished</th>
      <th>pages/s</th><th>capabilities</th></tr></thead><tbody></tbody>
    </table>
  </section>
  <section>
    <h2>Applications</h2>
    <table id="applications" class="grid">
      <thead><tr><th>id</th><th>name</th><th>owner</th><th>state</th><th>ready</th><th>scheduled</th>
      <th>started</th><th>finished</th><th>done</th><th>errors</th><th>crawl s</th><th>pages/s</th></tr></thead><tbody></tbody>
    </table>
  </section>
  <section>
    <h2>Recent threads</h2>
    <table id="threads" class="grid">
      <thead><tr><th>thread</th><th>URL</th><th>executor</th><th>state</th><th>status</th><th>wait s</th>
      <th>run s</th><th>ended</th></tr></thead><tbody></tbody>
    </table>
  </section>
  <section>
    <h2>Hosts <small id="hosts-total"></small></h2>
    <table id="hosts" class="grid">
      <thead><tr><th>host</th><th>queued</th><th>in flight</th><th>delay s</th><th>next start</th></tr></thead>
      <tbody></tbody>
    </table>
  </section>
</main>
</body>
</html>
"""

CSS = """
:root { --bg:#f6f7f9; --fg:#1d2330; --muted:#687086; --line:#dde1e8; --card:#fff; --ok:#1b7f3b;
        --warn:#a15c00; --bad:#b3261e; --accent:#2457c5; }
* { box-sizing: border-box; }
body { margin:0; font:14px/1.4 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif;
       background:var(--bg); color:var(--fg); }
header { display:flex; flex-wrap:wrap; align-items:baseline; justify-content:space-between; gap:.5rem;
         padding:.75rem 1rem; background:var(--fg); color:#fff; }
header h1 { font-size:1.15rem; margin:0; }
.status { margin:0; font-size:.85rem; color:#cfd6e6; }
.status.error { color:#ffb4ab; }
main { padding:.75rem; max-width:1400px; margin:0 auto; }
h2 { font-size:1rem; margin:1.25rem 0 .4rem; }
h2 small { color:var(--muted); font-weight:normal; }
.cards { display:grid; grid-template-columns:repeat(auto-fit, minmax(8.5rem, 1fr)); gap:.5rem; }
.card { background:var(--card); border:1px solid var(--line); border-radius:8px; padding:.5rem .75rem; }
.card b { display:block; font-size:1.35rem; font-variant-numeric:tabular-nums; }
.card span { color:var(--muted); font-size:.8rem; }
table.grid { width:100%; border-collapse:collapse; background:var(--card); border:1px solid var(--line);
             border-radius:8px; overflow:hidden; }
.grid th, .grid td { padding:.35rem .5rem; border-bottom:1px solid var(--line); text-align:left;
                     vertical-align:top; }
.grid th { background:#eef1f6; font-weight:600; font-size:.8rem; white-space:nowrap; }
.grid td.num { text-align:right; font-variant-numeric:tabular-nums; white-space:nowrap; }
.grid td.url { word-break:break-all; max-width:32rem; }
.grid tr.empty td { color:var(--muted); text-align:center; }
.pill { display:inline-block; padding:0 .45rem; border-radius:999px; font-size:.78rem; border:1px solid; }
.ok { color:var(--ok); } .warn { color:var(--warn); } .bad { color:var(--bad); } .muted { color:var(--muted); }
/* Phones: every row becomes a card, each cell labelled with its column. */
@media (max-width: 720px) {
  main { padding:.5rem; }
  .grid thead { display:none; }
  .grid, .grid tbody, .grid tr, .grid td { display:block; width:100%; }
  table.grid { border:none; background:none; }
  .grid tr { background:var(--card); border:1px solid var(--line); border-radius:8px; margin-bottom:.5rem;
             padding:.25rem 0; }
  .grid td { border:none; padding:.15rem .75rem; display:flex; justify-content:space-between; gap:1rem;
             text-align:right; }
  .grid td.num { text-align:right; }
  .grid td::before { content:attr(data-label); color:var(--muted); text-align:left; flex:none; }
  .grid td.url { max-width:none; }
  .grid tr.empty td::before { content:none; }
}
"""

JS = r"""
"use strict";
// The gridcrawl dashboard: fetch /api/snapshot every few seconds and redraw the tables.
// Everything a peer sent (names, URLs) goes into the page as text (textContent), never as HTML.
(function () {
  const refresh = parseInt(document.body.dataset.refresh, 10) || 2000;
  const statusLine = document.getElementById("status");
  let failures = 0;

  function fmt(value, digits) {
    if (value === null || value === undefined || Number.isNaN(value)) return "–";
    return Number(value).toFixed(digits === undefined ? 1 : digits);
  }
  function ago(now, t) {
    if (t === null || t === undefined) return "–";
    const s = Math.max(0, now - t);
    return s < 90 ? s.toFixed(1) + " s ago" : (s / 60).toFixed(1) + " min ago";
  }
  function seconds(s) {
    if (s === null || s === undefined) return "–";
    if (s < 120) return s.toFixed(1) + " s";
    if (s < 7200) return (s / 60).toFixed(1) + " min";
    return (s / 3600).toFixed(1) + " h";
  }
  function bytes(n) {
    if (n === null || n === undefined) return "–";
    const units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let i = 0;
    while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
    return n.toFixed(i ? 1 : 0) + " " + units[i];
  }
  function pill(text, cls) {
    const span = document.createElement("span");
    span.className = "pill " + cls;
    span.textContent = text;
    return span;
  }
  function fill(id, rows, makeCells) {
    const table = document.getElementById(id);
    const labels = Array.from(table.querySelectorAll("thead th")).map(th => th.textContent);
    const body = document.createElement("tbody");
    if (!rows.length) {
      const tr = body.insertRow();
      const td = tr.insertCell();
      td.colSpan = labels.length;
      td.textContent = "none";
      tr.className = "empty";
    }
    for (const row of rows) {
      const tr = body.insertRow();
      makeCells(row).forEach((cell, i) => {
        const td = tr.insertCell();
        td.dataset.label = labels[i] || "";
        const [value, cls] = Array.isArray(cell) ? cell : [cell, ""];
        if (cls) td.className = cls;
        if (value instanceof Node) td.appendChild(value); else td.textContent = String(value);
      });
    }
    table.replaceChild(body, table.tBodies[0]);
  }
  function card(value, label) {
    const div = document.createElement("div");
    div.className = "card";
    const b = document.createElement("b");
    b.textContent = value;
    const span = document.createElement("span");
    span.textContent = label;
    div.append(b, span);
    return div;
  }

  function draw(data) {
    const now = data.time || 0;
    const sum = data.summary || {};
    const threads = sum.threads || {};
    const pps = (data.executors || []).reduce((a, e) => a + (e.connected ? (e.pages_per_second || 0) : 0), 0);
    const summary = document.getElementById("summary");
    summary.replaceChildren(
      card(sum.executors ?? 0, "executors connected"),
      card((data.applications || []).filter(a => a.state !== "stopped").length, "applications live"),
      // READY threads of every application, as the applications table counts them; those of a
      // paused or detached application wait outside the dispatch queue
      card(threads.READY || 0, (threads.READY || 0) > (sum.queued ?? 0)
           ? "threads ready (" + ((threads.READY || 0) - (sum.queued ?? 0)) + " held: paused or detached)"
           : "threads ready"),
      card((threads.SCHEDULED || 0) + (threads.STARTED || 0), "threads running"),
      card((data.executors || []).reduce((a, e) => a + e.finished, 0), "threads finished"),
      card(fmt(pps, 1), "pages/s"),
      card(Object.values(sum.unrunnable || {}).reduce((a, n) => a + n, 0), "threads no executor can run"));
    summary.querySelectorAll(".card")[3].id = "running-count";
    summary.querySelectorAll(".card")[4].id = "finished-count";
    const waiting = Object.entries(sum.unrunnable || {}).map(([needs, n]) => n + " need " + needs);
    summary.querySelectorAll(".card")[6].id = "unrunnable-count";
    summary.querySelectorAll(".card")[6].title = waiting.join("; ") || "every queued thread has an executor that can run it";

    fill("executors", data.executors || [], e => [
      e.name, e.host, e.user, e.dedicated ? "yes" : "no (idle-only)",
      [!e.connected ? pill("disconnected", "bad") : !e.accepting ? pill("owner back", "warn")
        : e.assigned > 0 ? pill("working", "ok") : pill("idle", "muted")],
      ago(now, e.last_heartbeat),
      [fmt(e.cpu_usage), "num"], [fmt(e.cpu_avail), "num"], [fmt(e.cpu_totalusage), "num"],
      [bytes(e.mem_usage), "num"],
      [e.running + "/" + e.threads + (e.assigned > e.running ? " (+" + (e.assigned - e.running) + " buffered)" : ""), "num"],
      [e.finished, "num"], [fmt(e.pages_per_second), "num"], (e.capabilities || []).join(" ") || "–"]);

    fill("applications", data.applications || [], a => [
      a.application_id.slice(0, 8), a.name, a.owner,
      [pill(a.state, a.state === "running" ? "ok" : a.state === "paused" ? "warn" : "muted")],
      [a.threads.READY, "num"], [a.threads.SCHEDULED, "num"], [a.threads.STARTED, "num"],
      [a.threads.FINISHED, "num"], [a.done, "num"], [a.errors ?? 0, a.errors ? "num bad" : "num"],
      [seconds(a.elapsed), "num"],
      [fmt(a.pages_per_second), "num"]]);

    fill("threads", (data.threads || []).slice(0, 40), t => {
      const wait = t.time_started !== null ? t.time_started - t.time_submitted : null;
      const run = t.time_started !== null ? (t.time_finished !== null ? t.time_finished : now) - t.time_started : null;
      const stateCls = t.state === "failed" ? "bad" : t.state === "finished" ? "ok" : "warn";
      const status = t.error_kind ? t.error_kind + (t.status ? " " + t.status : "") : (t.status ?? "–");
      return [t.application_id.slice(0, 8) + "/" + t.thread_id, [t.url, "url"], t.executor || "–",
              [pill(t.state, stateCls)], [status, t.error_kind ? "bad" : ""], [fmt(wait, 2), "num"],
              [fmt(run, 2), "num"], ago(now, t.time_finished)];
    });

    document.getElementById("hosts-total").textContent =
      data.hosts_total > (data.hosts || []).length ? "(" + data.hosts.length + " of " + data.hosts_total + ")" : "";
    fill("hosts", data.hosts || [], h => [
      h.host, [h.queued, "num"], [h.in_flight, "num"], [fmt(h.delay, 1), "num"],
      h.next_start === null ? "now" : h.next_start === "busy" ? "after the fetch in flight"
        : "in " + fmt(h.next_start, 1) + " s"]);
  }

  async function update() {
    try {
      const response = await fetch("/api/snapshot", {cache: "no-store", credentials: "same-origin"});
      if (!response.ok) throw new Error("HTTP " + response.status);
      const data = await response.json();
      draw(data);
      failures = 0;
      statusLine.className = "status";
      const m = data.manager;
      statusLine.textContent = (m ? "active manager " + m.address + " · lease epoch " + m.epoch + " since " +
        new Date(m.since * 1000).toLocaleTimeString() + " · " : "") +
        "updated " + new Date().toLocaleTimeString() + " · every " + refresh / 1000 + " s";
    } catch (err) {
      failures += 1;
      statusLine.className = "status error";
      statusLine.textContent = "cannot reach the manager (" + err.message + "); retrying";
    } finally {
      setTimeout(update, failures ? Math.min(refresh * 2 ** failures, 30000) : refresh);
    }
  }
  update();
})();
"""
