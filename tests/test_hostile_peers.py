"""Hostile and broken peers, as real ZeroMQ DEALER sockets, against a real manager (and the real
executor and client programs beside them): each test here fails without the fix it names."""

from __future__ import annotations

import threading
import time

import msgpack
import msgspec
import pytest
import zmq

from gridcrawl import protocol as p
from gridcrawl.urls import canonical_url
from grid import Grid
from sites import generate_site, reachable


def _answer(sock: zmq.Socket, *kinds, beat: bool = False, seconds: float = 60.0) -> p.Message:
    """The next message of one of ``kinds`` on ``sock`` (others skipped) within ``seconds``;
    with ``beat``, the socket heartbeats meanwhile."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if beat:
            sock.send_multipart(p.encode(p.Heartbeat()))
        if sock.poll(100):
            message = p.decode(sock.recv_multipart())
            if isinstance(message, kinds):
                return message
    raise AssertionError(f"no {kinds} within {seconds} s")


class RawExecutor(threading.Thread):
    """A registered executor driven by hand, in a thread of its own: ``answer(job)`` gives the
    page it returns for each job (a :class:`~gridcrawl.protocol.PageResult`, or a dict sent as
    it is; None: no answer), until :meth:`stop`. ``jobs`` counts the jobs it was given."""

    def __init__(self, context: zmq.Context, endpoint: str, name: str, answer, threads: int = 8) -> None:
        super().__init__(daemon=True)
        self.context, self.endpoint, self.name, self.answer, self.threads = context, endpoint, name, answer, threads
        self.jobs = 0
        self.welcomed = threading.Event()
        self._done = threading.Event()

    def run(self) -> None:
        sock = self.context.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.connect(self.endpoint)
        try:
            sock.send_multipart(p.encode(p.Register(name=self.name, host="h", user="u", threads=self.threads)))
            _answer(sock, p.Welcome)
            self.welcomed.set()
            while not self._done.is_set():
                sock.send_multipart(p.encode(p.Heartbeat()))
                if not sock.poll(100):
                    continue
                message = p.decode(sock.recv_multipart())
                if isinstance(message, p.Assign):
                    self.jobs += len(message.jobs)
                    results = [{"attempt_id": job.attempt_id, "page": msgspec.to_builtins(page), "ran": 0.001}
                               for job in message.jobs if (page := self.answer(job)) is not None]
                    if results:
                        sock.send_multipart([p.PROTOCOL_VERSION, b"results", msgpack.packb({"results": results})])
        finally:
            sock.close()

    def stop(self) -> None:
        """End the thread (its socket is closed)."""
        self._done.set()
        self.join(10)


@pytest.mark.e2e
def test_an_executor_that_cannot_reach_the_web_does_not_take_the_crawls_hosts_down(tmp_path, site_server):
    """A desktop behind a firewall (or with a broken proxy) answers every grid thread at once with
    "connection refused". It is the most idle executor, so least-loaded dispatch gave it each
    host's next probe: three failed probes, and the manager declared the site down and failed every
    queued URL of it without a fetch. Now a host's threads go to another executor than those that
    found no answer from it, while one can run them: every page is crawled."""
    site = generate_site(30, links_per_page=4, seed=21)
    server = site_server(site)
    grid = Grid(tmp_path)
    context = zmq.Context()
    broken = RawExecutor(context, grid.endpoint, "no-network", lambda job: p.PageResult(
        url=job.url, error_kind="connection", error="connection refused"), threads=16)
    try:
        grid.start_manager()
        broken.start()
        assert broken.welcomed.wait(30)
        grid.start_executor("honest", "--threads", "2")
        client = grid.start_client(server.url("/"), "--no-sitemaps")
        assert client.wait(timeout=120) == 0, grid.log("client.log")
    finally:
        broken.stop()
        context.term()
        grid.stop()
    assert broken.jobs >= 1  # it did get work
    assert "did not answer 3 probes" not in grid.log("manager.log")
    docs = {row[0] for row in grid.query("crawl", "SELECT url FROM document")}
    assert docs == {canonical_url(server.url(path)) for path in reachable(site)}


@pytest.mark.e2e
@pytest.mark.parametrize("page, problem", [
    ({"status": "200"}, "page.status: expected int | null, got str"),
    ({"status": 200, "content": "<html></html>", "added_by_a_later_release": 1},
     "page: unknown fields ['added_by_a_later_release']")])
def test_an_executor_whose_pages_do_not_decode_gets_its_threads_run_elsewhere_at_once(tmp_path, site_server, page,
                                                                                      problem):
    """A broken executor answers every grid thread with a page that does not decode. One the
    manager cannot read (its status a text): the manager dropped the whole ``results`` message as
    malformed, so its threads, and any good results of the same message, waited for a straggler
    take-back (120 s) or thread_timeout (300 s). One of another release, with a field the client
    does not know: the manager relayed it, and the client failed every such URL as poison. Now
    each such page's attempt is taken back at once (recorded ``unreadable``, a strike against the
    executor, whose first pages the manager decodes in full) and its thread runs on another
    executor: the crawl completes, well within a straggler delay."""
    site = generate_site(20, links_per_page=4, seed=22)
    server = site_server(site)
    grid = Grid(tmp_path)
    context = zmq.Context()
    broken = RawExecutor(context, grid.endpoint, "broken", lambda job: {"url": job.url, **page}, threads=16)
    try:
        grid.start_manager()
        broken.start()
        assert broken.welcomed.wait(30)
        grid.start_executor("honest", "--threads", "2")
        client = grid.start_client(server.url("/"), "--no-sitemaps")
        assert client.wait(timeout=60) == 0, grid.log("client.log")
    finally:
        broken.stop()
        context.term()
        grid.stop()
    assert broken.jobs >= 1
    docs = {row[0] for row in grid.query("crawl", "SELECT url FROM document")}
    assert docs == {canonical_url(server.url(path)) for path in reachable(site)}
    assert grid.query("manager", "SELECT count(*) FROM attempt WHERE outcome = 'unreadable'")[0][0] >= 1
    log = grid.log("manager.log")
    assert "executor broken: the page of application" in log and problem in log, log[-3000:]
