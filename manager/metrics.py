"""The dashboard's ``GET /metrics``: a snapshot of the grid in Prometheus' text format.

Prometheus (or any scraper of its exposition format: VictoriaMetrics, Grafana Agent, the
OpenTelemetry collector) reads the same figures as the dashboard's JSON API, from the same
snapshot (:func:`gridcrawl.manager.dashboard.snapshot`, at most 0.5 s old), under the same login
and seen by the same user: an operator graphs and alerts on executors that vanish, queues that
grow and pages per second that fall, as dask's scheduler offers for its workers.

Families (``gridcrawl_`` first; counters end in ``_total``):

* ``manager_active{address}``: 1 on the active manager, 0 on a hot standby, which reports
  nothing else (it holds no grid state: its zeros read as a grid that lost every executor);
* ``executors_connected``, ``applications``, ``hosts``: how many the manager holds now;
* ``threads{state}``: the live grid threads by state (READY ... DEAD; a thread its application
  acknowledged is forgotten), ``threads_queued``, ``threads_unrunnable{needs}`` (queued threads
  no connected executor can run now), ``results_fenced_total``;
* per executor (label ``executor``: its name, and ``executor_id``): ``executor_connected``,
  ``executor_workers``, ``executor_threads_assigned``, ``executor_threads_running``,
  ``executor_threads_finished_total``, ``executor_pages_per_second``, ``executor_cpu_usage``
  (percent) and ``executor_memory_bytes``, for every connected executor and the latest 50 that left;
* per application (labels ``application``, its id, ``name`` and ``owner``; the newest 50):
  ``application_threads{state}``, ``application_threads_done_total``,
  ``application_threads_failed_total``, ``application_pages_per_second``,
  ``application_paused``.

**Library.** prometheus_client (the Prometheus project's own Python client) writes the format,
escaping of label values included; it is imported on the first scrape, never at start-up.
"""

from __future__ import annotations

#: The Content-Type of the answer (Prometheus' text format 0.0.4).
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def metrics_text(data: dict) -> bytes:
    """Snapshot ``data`` (:func:`gridcrawl.manager.dashboard.snapshot`, maybe filtered for a
    user) as Prometheus exposition text (UTF-8 bytes). A snapshot not taken yet (a manager
    starting) gives the grid-wide families at zero and no per-peer ones; a standby's gives
    ``manager_active`` 0 alone."""
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    summary = data.get("summary") or {}

    def gauge(name: str, doc: str, value=None, labels=()):
        return GaugeMetricFamily("gridcrawl_" + name, doc, value=value, labels=labels or None)

    def grid():
        yield gauge("executors_connected", "executors connected to the manager", summary.get("executors", 0))
        yield gauge("applications", "applications (crawls) the manager holds", summary.get("applications", 0))
        yield gauge("hosts", "hosts with politeness state at the manager", data.get("hosts_total", 0))
        yield gauge("threads_queued", "grid threads queued, waiting for an executor", summary.get("queued", 0))
        by_state = gauge("threads", "live grid threads by state", labels=["state"])
        for state, n in (summary.get("threads") or {}).items():
            by_state.add_metric([state], n)
        yield by_state
        unrunnable = gauge("threads_unrunnable", "queued grid threads no connected executor can run now, by the "
                           "capabilities they need", labels=["needs"])
        for needs, n in (summary.get("unrunnable") or {}).items():
            unrunnable.add_metric([needs], n)
        yield unrunnable
        yield CounterMetricFamily("gridcrawl_results_fenced", "results refused as late or forged (fenced)",
                                  value=summary.get("fenced", 0))

    def executors():
        labels = ["executor", "executor_id"]
        families = {
            "connected": gauge("executor_connected", "1 while the executor is connected", labels=labels),
            "workers": gauge("executor_workers", "worker threads the executor runs", labels=labels),
            "assigned": gauge("executor_threads_assigned", "grid threads assigned to the executor", labels=labels),
            "running": gauge("executor_threads_running", "grid threads the executor reported started",
                             labels=labels),
            "finished": CounterMetricFamily("gridcrawl_executor_threads_finished", "grid threads the executor "
                                            "finished", labels=labels),
            "pages_per_second": gauge("executor_pages_per_second", "pages per second, by its heartbeat",
                                      labels=labels),
            "cpu_usage": gauge("executor_cpu_usage", "CPU use of its desktop, percent, by its heartbeat",
                               labels=labels),
            "mem_usage": gauge("executor_memory_bytes", "memory in use on its desktop, bytes, by its heartbeat",
                               labels=labels),
        }
        for ex in data.get("executors") or []:
            values = [ex["name"], ex["executor_id"]]
            for key, family in families.items():
                value = ex.get(key)
                if value is not None:
                    family.add_metric(values, float(value))
        yield from families.values()

    def applications():
        labels = ["application", "name", "owner"]
        threads = gauge("application_threads", "the application's live grid threads by state",
                        labels=labels + ["state"])
        done = CounterMetricFamily("gridcrawl_application_threads_done", "grid threads of the application done "
                                   "(results received, failures included)", labels=labels)
        failed = CounterMetricFamily("gridcrawl_application_threads_failed", "grid threads of the application "
                                     "that failed (robots.txt's disallows are no failures)", labels=labels)
        rate = gauge("application_pages_per_second", "pages per second over its crawl seconds", labels=labels)
        paused = gauge("application_paused", "1 while an operator has paused it", labels=labels)
        for app in data.get("applications") or []:
            values = [app["application_id"], app["name"], app["owner"]]
            for state, n in (app.get("threads") or {}).items():
                threads.add_metric(values + [state], n)
            done.add_metric(values, app.get("done", 0))
            failed.add_metric(values, app.get("errors", 0))
            rate.add_metric(values, app.get("pages_per_second", 0.0))
            paused.add_metric(values, 1.0 if app.get("state") == "paused" else 0.0)
        yield from (threads, done, failed, rate, paused)

    manager = data.get("manager") or {}
    standby = manager.get("role") == "standby"

    def role():
        if manager:
            active = gauge("manager_active", "1 on the active manager, 0 on a hot standby (which holds no grid "
                           "state and reports no other family)", labels=["address"])
            active.add_metric([manager.get("address") or ""], 0.0 if standby else 1.0)
            yield active

    class Snapshot:
        def collect(self):
            yield from role()
            if not standby:  # zeros from a standby would read as a grid that lost its executors
                yield from grid()
                yield from executors()
                yield from applications()

    registry = CollectorRegistry(auto_describe=False)
    registry.register(Snapshot())
    return generate_latest(registry)


__all__ = ["CONTENT_TYPE", "metrics_text"]
