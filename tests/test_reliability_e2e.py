"""Hostile peers against the real grid (issue 22, items 1 and 2): the real manager, an honest
executor and a client run as processes; the adversary is a few lines of pyzmq speaking the
protocol on a real socket. Each test prints its figures (``pytest -s``).

* a rogue executor registers declaring 50,000 worker threads and never answers: before, it won
  least-loaded dispatch for every thread, timed-out threads went back to it, and the crawl
  "completed" with 0 documents; now every page is stored once and the rogue is quarantined.
* a forger sends results naming the honest executor's attempts (read from the manager's own
  attempt table, as if stolen): before, each rewrote that attempt's outcome to ``fenced`` and cost
  an INFO log line; now nothing is recorded, the forger is blocked and the log stays short.
* a client that never acknowledges its results: before, the manager held every one (2.6 GB in
  90 s); now its application waits at max_unacked_bytes while an honest crawl goes on.
* a manager that keeps fewer threads of an application than the client's max_in_flight: the
  client lowers it instead of being refused again and again.
"""

from __future__ import annotations

import contextlib
import threading
import time

import pytest
import zmq

from gridcrawl import protocol as p
from gridcrawl.urls import canonical_url
from grid import Grid, wait_for
from sites import RawServer, generate_site, reachable

pytestmark = pytest.mark.e2e


@contextlib.contextmanager
def dealer(endpoint: str):
    """A DEALER socket connected to ``endpoint`` (closed, with its context, on leaving)."""
    context = zmq.Context()
    sock = context.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(endpoint)
    try:
        yield sock
    finally:
        sock.close()
        context.term()


class Rogue(threading.Thread):
    """A scripted executor: registers (``threads`` claimed), heartbeats, answers nothing. With
    ``forge`` set, it instead sends one result per attempt id ``forge()`` returns, as fast as it can."""

    def __init__(self, endpoint: str, threads: int = 50_000, register: bool = True, forge=None) -> None:
        super().__init__(daemon=True)
        self.endpoint, self.threads, self.register, self.forge = endpoint, threads, register, forge
        self.stop = threading.Event()
        self.assigned = 0
        self.sent = 0
        self.refused = 0

    def run(self) -> None:
        with dealer(self.endpoint) as sock:
            if self.register:
                sock.send_multipart(p.encode(p.Register(name="rogue", host="rogue", user="rogue",
                                                        threads=self.threads)))
            last_beat = 0.0
            while not self.stop.is_set():
                if sock.poll(50):
                    while True:
                        try:
                            message = p.decode(sock.recv_multipart(zmq.NOBLOCK))
                        except zmq.Again:
                            break
                        if isinstance(message, p.Assign):
                            self.assigned += len(message.jobs)
                        elif isinstance(message, (p.Refuse, p.Bye)):
                            self.refused += 1
                if time.monotonic() - last_beat > 0.25:
                    last_beat = time.monotonic()
                    sock.send_multipart(p.encode(p.Heartbeat()))
                if self.forge is not None:
                    for attempt_id in self.forge():
                        sock.send_multipart(p.encode(p.Result(attempt_id, p.PageResult(url="http://forged.test/"))))
                        self.sent += 1


def stored(grid: Grid) -> list[str]:
    return [row[0] for row in grid.query("crawl", "SELECT url FROM document")]


def test_a_rogue_executor_claiming_50000_threads_cannot_empty_the_crawl(tmp_path, site_server):
    site = generate_site(60, links_per_page=4, seed=31)
    server = site_server(site, latency=0.02)
    expected = {canonical_url(server.url(path)) for path in reachable(site)}
    grid = Grid(tmp_path)
    rogue = None
    try:
        grid.start_manager("--thread-timeout", "1.5", "--max-attempts", "2",
                           env={"GRIDCRAWL_QUARANTINE_SECONDS": "30"})
        rogue = Rogue(grid.endpoint)
        rogue.start()
        wait_for(lambda: "registered: rogue" in grid.log("manager.log"), 30, 0.05, "the rogue registered")
        grid.start_executor("honest", "--threads", "4")
        wait_for(lambda: grid.log("manager.log").count("registered:") >= 2, 30, 0.05, "the honest executor")
        started = time.monotonic()
        client = grid.start_client(server.url("/"))
        assert client.wait(timeout=120) == 0, grid.log("client.log")[-3000:]
        seconds = time.monotonic() - started
    finally:
        if rogue is not None:
            rogue.stop.set()
        grid.stop()
    urls = stored(grid)
    quarantined = grid.query("manager", "SELECT quarantined_until IS NOT NULL FROM executor WHERE name = 'rogue'")
    poison = grid.query("crawl", "SELECT COUNT(*) FROM visited_url WHERE error_kind = 'poison'")[0][0]
    timeouts = grid.query("manager", "SELECT COUNT(*) FROM attempt WHERE outcome = 'timeout'")[0][0]
    print(f"\n[rogue executor, 50,000 threads claimed] pages expected={len(expected)}, stored={len(urls)}, "
          f"duplicates={len(urls) - len(set(urls))}, poison={poison}, rogue held at most {rogue.assigned} "
          f"attempts in all, timed out={timeouts}, quarantined={bool(quarantined and quarantined[0][0])}, "
          f"crawl seconds={seconds:.1f}")
    assert set(urls) == expected and len(urls) == len(expected) and poison == 0
    assert quarantined == [(1,)]
    assert 0 < rogue.assigned <= 8 + 4  # the start window, then a halved one after the quarantine


def test_a_silent_executor_that_takes_the_seed_does_not_hold_the_crawl_for_the_thread_timeout(tmp_path, site_server):
    """Real programs and a scripted executor that registers first, claims many workers, takes
    the seed and never answers (heartbeating all the while). With the default thread_timeout
    (300 s) the honest executor sat idle until then: a 5 s crawl took 601 s. The seed is now
    taken back as a straggler once it is held past straggler_seconds (2 s here) while the honest
    executor has nothing to run, and the crawl completes well within the thread timeout."""
    site = generate_site(30, links_per_page=4, seed=32)
    server = site_server(site)
    expected = {canonical_url(server.url(path)) for path in reachable(site)}
    grid = Grid(tmp_path)
    rogue = Rogue(grid.endpoint, threads=64)
    try:
        grid.start_manager("--straggler-seconds", "2")
        rogue.start()
        wait_for(lambda: "registered: rogue" in grid.log("manager.log"), 30, 0.05, "the rogue registered")
        client = grid.start_client(server.url("/"), "--no-sitemaps")
        wait_for(lambda: rogue.assigned > 0, 30, 0.05, "the rogue holding the seed")
        grid.start_executor("honest", "--threads", "4")
        assert client.wait(timeout=120) == 0, grid.log("client.log")[-3000:]  # thread_timeout is 300 s
    finally:
        rogue.stop.set()
        grid.stop()
    assert set(stored(grid)) == expected
    stragglers = grid.query("manager", "SELECT COUNT(*) FROM attempt a JOIN executor e ON e.executor_id = a.executor_id "
                                       "WHERE a.outcome = 'straggler' AND e.name = 'rogue'")[0][0]
    assert stragglers >= 1 and "taken back (straggler)" in grid.log("manager.log")


def test_forged_results_touch_no_record_and_block_the_forger(tmp_path, site_server):
    site = generate_site(80, links_per_page=4, seed=37)
    server = site_server(site, latency=0.1)
    expected = {canonical_url(server.url(path)) for path in reachable(site)}
    grid = Grid(tmp_path)
    forgers: list[Rogue] = []

    def stolen() -> list[int]:  # the honest executor's live attempt ids, as if sniffed
        time.sleep(0.01)
        try:
            return [row[0] for row in grid.query("manager", "SELECT attempt_id FROM attempt WHERE outcome = 'running'")]
        except Exception:
            return []

    try:
        grid.start_manager()
        grid.start_executor("honest", "--threads", "4")
        wait_for(lambda: "registered:" in grid.log("manager.log"), 30, 0.05, "the honest executor")
        client = grid.start_client(server.url("/"))
        wait_for(lambda: len(stolen()) > 0, 30, 0.02, "attempts running")
        forgers = [Rogue(grid.endpoint, register=False, forge=stolen),               # never registered
                   Rogue(grid.endpoint, threads=1, register=True, forge=stolen)]     # a registered executor
        for forger in forgers:
            forger.start()
        wait_for(lambda: grid.log("manager.log").count("blocked for") >= 2, 30, 0.05, "both forgers blocked")
        server.latency = 0.01  # both blocked: the rest of the crawl need not be slow
        assert client.wait(timeout=120) == 0, grid.log("client.log")[-3000:]
    finally:
        for forger in forgers:
            forger.stop.set()
        grid.stop()
    urls = stored(grid)
    fenced = grid.query("manager", "SELECT COUNT(*) FROM attempt WHERE outcome = 'fenced'")[0][0]
    unfinished = grid.query("manager", "SELECT COUNT(*) FROM attempt a JOIN executor e ON e.executor_id = a.executor_id "
                            "WHERE e.name = 'honest' AND a.outcome NOT IN ('finished', 'retry')")[0][0]
    log = grid.log("manager.log")
    sent = sum(f.sent for f in forgers)
    print(f"\n[forged results] forged sent={sent}, attempts rewritten={fenced}, honest attempts not finished="
          f"{unfinished}, pages expected={len(expected)}, stored={len(urls)}, forgers blocked="
          f"{log.count('blocked for')}, manager log bytes={len(log.encode())}")
    assert sent > 0 and fenced == 0 and unfinished == 0
    assert set(urls) == expected and len(urls) == len(expected)
    assert log.count("blocked for") >= 2 and log.count("hostile messages dropped") <= 2 * 2


class Unacknowledging(threading.Thread):
    """A broken client: opens an application, submits ``urls`` as grid threads, heartbeats,
    counts the results it gets and acknowledges none of them until ``ack`` is set; then it
    acknowledges every result, those it holds and those that come."""

    def __init__(self, endpoint: str, urls: list[str]) -> None:
        super().__init__(daemon=True)
        self.endpoint, self.urls = endpoint, urls
        self.stop, self.ack = threading.Event(), threading.Event()
        self.results: set[int] = set()

    def run(self) -> None:
        with dealer(self.endpoint) as sock:
            sock.send_multipart(p.encode(p.OpenApplication(name="broken", user="broken", client="broken-1")))
            app, held, last_beat = None, [], 0.0
            while not self.stop.is_set():
                if sock.poll(50):
                    message = p.decode(sock.recv_multipart())
                    if isinstance(message, p.ApplicationOpened):
                        app = message.application_id
                        sock.send_multipart(p.encode(p.Submit(app, [p.ThreadSpec(i, url)
                                                                    for i, url in enumerate(self.urls)])))
                    elif isinstance(message, p.ThreadDone):
                        done = [t.thread_id for t in message.threads]
                        self.results.update(done)
                        held += done
                if app is not None and self.ack.is_set() and held:
                    sock.send_multipart(p.encode(p.Ack(app, held)))
                    held = []
                if time.monotonic() - last_beat > 0.25:
                    last_beat = time.monotonic()
                    sock.send_multipart(p.encode(p.Heartbeat()))


def test_a_client_that_does_not_acknowledge_costs_the_manager_a_bounded_memory_and_stalls_no_other(
        tmp_path, site_server):
    """Before: a client that submits and never acknowledges made the manager hold every result
    (30 MB/s on the Python docs, 2.6 GB in 90 s). Now its application waits once
    max_unacked_bytes of its results are held (here 60 KB: a few pages); an honest crawl on the
    same manager goes on to its end meanwhile, and the broken client's threads run again once
    it acknowledges."""
    big = generate_site(60, links_per_page=3, seed=41, page_bytes=8_000)
    honest_site = generate_site(40, links_per_page=4, seed=43)
    big_server, honest_server = site_server(big), site_server(honest_site)
    urls = [big_server.url(path) for path in sorted(reachable(big))]
    grid = Grid(tmp_path)
    broken = Unacknowledging(grid.endpoint, urls)
    try:
        grid.start_manager(env={"GRIDCRAWL_MAX_UNACKED_BYTES": "60000"})
        grid.start_executor("ex1", "--threads", "2")
        wait_for(lambda: "registered:" in grid.log("manager.log"), 30, 0.05, "the executor")
        broken.start()
        wait_for(lambda: "its threads wait until it acknowledges half" in grid.log("manager.log"), 60, 0.05,
                 "the broken application to wait")
        client = grid.start_client(honest_server.url("/"))
        assert client.wait(timeout=120) == 0, grid.log("client.log")[-3000:]
        stalled = len(broken.results)
        broken.ack.set()
        wait_for(lambda: len(broken.results) == len(urls), 60, 0.05, "the broken client's threads")
    finally:
        broken.stop.set()
        grid.stop()
    expected = {canonical_url(honest_server.url(path)) for path in reachable(honest_site)}
    assert set(stored(grid)) == expected
    # while it held them, the broken application got about 60 KB of 8 KB pages (7 or 8), plus
    # what the executor held at the time (2 workers, prefetch 6), not its 60 threads
    print(f"\n[unacknowledged] results before acknowledging {stalled} of {len(urls)}")
    assert stalled <= 8 + 2 + 6 < len(urls)


def test_a_client_keeps_no_more_threads_at_the_manager_than_the_manager_takes(tmp_path, site_server):
    """The manager's max_threads_per_application (here 20) reaches the client in ``opened``: a
    client whose max_in_flight (256) is larger lowers it, says so, and crawls the whole site
    without one refused submit (before: refused, reconnect, resubmit, refused, 33,000 times a
    minute, and no page after the first 24)."""
    site = generate_site(120, links_per_page=5, seed=47)
    server = site_server(site)
    grid = Grid(tmp_path)
    try:
        grid.start_manager(env={"GRIDCRAWL_MAX_THREADS_PER_APPLICATION": "20"})
        grid.start_executor("ex1", "--threads", "4")
        client = grid.start_client(server.url("/"))
        assert client.wait(timeout=120) == 0, grid.log("client.log")[-3000:]
    finally:
        grid.stop()
    assert set(stored(grid)) == {canonical_url(server.url(path)) for path in reachable(site)}
    assert "max_in_flight 256 lowered to that" in grid.log("client.log")
    assert "max_threads_per_application is 20" not in grid.log("manager.log")  # no submit refused


def test_a_server_of_another_protocol_fails_once_a_reset_is_retried(tmp_path):
    """Real programs: a seed on a port that speaks SSH ("SSH-2.0-OpenSSH_9.6" first, then
    closes) and one on a server that resets every connection. The SSH port failed as
    ``connection`` and was tried 3 times (retry_times 2), its retry waits too, though a retry
    cannot make it speak HTTP; it fails once as ``bad_response`` now, naming what it answered,
    and ``--retry-failed bad_response`` fetches it again in a later run. The reset is transient
    and is still retried: 3 attempts, ``connection``."""
    ssh, reset = RawServer(first=b"SSH-2.0-OpenSSH_9.6\r\n"), RawServer(reset=True)
    grid = Grid(tmp_path)
    try:
        grid.start_manager(env={"GRIDCRAWL_RETRY_BACKOFF": "0.25"})
        grid.start_executor("ex1", "--threads", "2", "--robots-retry", "0.25")  # robots.txt's answer kept 0.25 s
        client = grid.start_client(ssh.url("/"), reset.url("/"), "--no-sitemaps")
        assert client.wait(timeout=120) == 1, grid.log("client.log")[-3000:]  # every page failed
        first = (ssh.connections, reset.connections)
        summary = grid.log("client.log")
        again = grid.start_client(ssh.url("/"), reset.url("/"), "--no-sitemaps", "--retry-failed", "bad_response")
        assert again.wait(timeout=120) == 1, grid.log("client.log")[-3000:]
    finally:
        grid.stop()
        ssh.close()
        reset.close()
    threads = grid.query("manager", "SELECT url, error_kind, attempts FROM thread ORDER BY internal_thread_id")
    visited = dict((url, (kind, error)) for url, kind, error in grid.query(
        "crawl", "SELECT url, error_kind, error FROM visited_url"))
    print(f"\n[not HTTP] threads {threads}, connections: SSH port {ssh.connections}, reset {reset.connections}")
    ssh_url, reset_url = canonical_url(ssh.url("/")), canonical_url(reset.url("/"))
    # one attempt a run; one connection each (robots.txt's: the page fails with it, unfetched)
    assert [row for row in threads if row[0] == ssh_url] == [(ssh_url, "bad_response", 1)] * 2, threads
    assert (first[0], ssh.connections) == (1, 2)
    kind, error = visited[ssh_url]
    assert kind == "bad_response" and "not an HTTP response: it began 'SSH-2.0-OpenSSH_9.6'" in error, error
    assert [row for row in threads if row[0] == reset_url] == [(reset_url, "connection", 3)], threads  # not again
    assert visited[reset_url] == ("connection", "cannot connect to http://127.0.0.1:%d: connection reset by the "
                                                "server" % reset.port), visited[reset_url]
    assert reset.connections == first[1]
    assert "bad_response │     1 │" in summary and "--retry-failed bad_response,connection" in summary, summary
