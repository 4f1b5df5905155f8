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
  // An application's state: one without a client connected (stopped with Ctrl-C, killed, its
  // machine gone) is "detached", not "running": its threads go on, their results wait at the
  // manager for a client to come back, and detached_timeout cancels it.
  function applicationPill(a) {
    const detached = a.attached === false && a.state !== "stopped";
    const text = a.throttled ? "waits for its client"
      : detached ? (a.state === "paused" ? "paused, detached" : "detached") : a.state;
    const span = pill(text, a.state === "running" && !a.throttled && !detached ? "ok"
      : a.state === "stopped" ? "muted" : "warn");
    if (detached) {
      span.title = "no client is connected: its threads go on and the manager holds their results until a " +
        "client on its crawl database comes back (detached_timeout cancels it)";
    }
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
    const waiting = Object.entries(sum.unrunnable || {}).map(
      ([needs, n]) => n + (needs ? " need " + needs + ": no connected executor that has it" : " wait: no executor")
        + " takes work now (none connected, or idle-only desktops in use)");
    summary.querySelectorAll(".card")[6].id = "unrunnable-count";
    summary.querySelectorAll(".card")[6].title = waiting.join("; ") || "every queued thread has an executor that can run it";

    document.getElementById("executors-total").textContent =
      data.executors_total > (data.executors || []).length
        ? "(" + data.executors.length + " of " + data.executors_total + ": the rest left earlier)" : "";
    fill("executors", data.executors || [], e => [
      e.name, e.host, e.user, e.dedicated ? "yes" : "no (idle-only)",
      [!e.connected ? pill("disconnected", "bad") : !e.accepting ? pill("owner back", "warn")
        : e.assigned > 0 ? pill("working", "ok") : pill("idle", "muted")],
      ago(now, e.last_heartbeat),
      [fmt(e.cpu_usage), "num"], [fmt(e.cpu_avail), "num"], [fmt(e.cpu_totalusage), "num"],
      [bytes(e.mem_usage), "num"],
      [e.running + "/" + e.workers + (e.assigned > e.running ? " (+" + (e.assigned - e.running) + " buffered)" : ""), "num"],
      [e.finished, "num"], [fmt(e.pages_per_second), "num"], (e.capabilities || []).join(" ") || "–"]);

    fill("applications", data.applications || [], a => [
      a.application_id.slice(0, 8), a.name, a.owner,
      [applicationPill(a)],
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
      // held: attempts taken back that may still be fetching keep their slots (docs/politeness.md)
      h.host, [h.queued, "num"], [h.held ? h.in_flight + " (" + h.held + " taken back)" : h.in_flight, "num"],
      [fmt(h.delay, 1), "num"],
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
      statusLine.textContent = (m && m.role === "standby" ? "standby manager " + m.address +
        " (it keeps no grid state): the active manager is " + (m.active || "unknown") + " · "
        : m ? "active manager " + m.address + " · lease epoch " + m.epoch + " since " +
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
