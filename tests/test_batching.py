"""Batched messages on a real manager: the assigns, starts and results of many grid threads travel
as few messages (issue 8), and nothing is lost or reordered on the way."""

from __future__ import annotations

import time

import zmq

from gridcrawl import protocol as p
from grid import Grid, wait_for

THREADS = 60


def _receive(sock: zmq.Socket, kind: type, want: int, timeout: float = 20.0) -> list[p.Message]:
    """Messages of type ``kind`` from ``sock`` until their batch lists hold ``want`` items."""
    got: list[p.Message] = []
    deadline = time.monotonic() + timeout
    while sum(len(getattr(m, kind.BATCH)) for m in got) < want:
        assert time.monotonic() < deadline, f"{kind.__name__}: only {got} within {timeout} s"
        if sock.poll(200):
            message = p.decode(sock.recv_multipart())
            if isinstance(message, kind):
                got.append(message)
    return got


def test_a_burst_of_grid_threads_travels_in_few_batched_messages(tmp_path):
    grid = Grid(tmp_path)
    context = zmq.Context()
    executor = context.socket(zmq.DEALER)
    client = context.socket(zmq.DEALER)
    try:
        grid.start_manager("--concurrent-requests-per-host", "1000")
        for sock in (executor, client):
            sock.setsockopt(zmq.LINGER, 0)
            sock.connect(grid.endpoint)
        executor.send_multipart(p.encode(p.Register(name="raw", host="h", user="u", threads=THREADS)))
        assert executor.poll(20_000), "no welcome"
        assert isinstance(p.decode(executor.recv_multipart()), p.Welcome)
        client.send_multipart(p.encode(p.OpenApplication("batch", "u")))
        assert client.poll(20_000), "no answer to open"
        app = p.decode(client.recv_multipart()).application_id

        # one submit of 60 threads: the manager assigns them all in one pass, so one message
        client.send_multipart(p.encode(p.Submit(app, [p.ThreadSpec(i, f"http://h.test/{i}")
                                                      for i in range(THREADS)])))
        assigns = _receive(executor, p.Assign, THREADS)
        jobs = [job for m in assigns for job in m.jobs]
        assert sorted(job.thread_id for job in jobs) == list(range(THREADS))
        assert len(assigns) < THREADS // 4, f"{len(assigns)} assign messages for {THREADS} threads"

        # the executor reports every start in one message, then each result
        executor.send_multipart(p.encode(p.Started([job.attempt_id for job in jobs])))
        for job in jobs:
            executor.send_multipart(p.encode(p.Result(job.attempt_id, p.PageResult(url=job.url, status=200))))
        dones = _receive(client, p.ThreadDone, THREADS)
        outcomes = [o for m in dones for o in m.threads]
        assert sorted(o.thread_id for o in outcomes) == list(range(THREADS))
        assert all(o.page.status == 200 and not o.failed for o in outcomes)
        assert len(dones) < THREADS // 4, f"{len(dones)} done messages for {THREADS} results"

        client.send_multipart(p.encode(p.Ack(app, [o.thread_id for o in outcomes])))
        # the batched start reached the records: every thread Dead, started before it finished
        wait_for(lambda: grid.query("manager", "SELECT count(*) FROM thread WHERE state = 4 "
                                    "AND time_started IS NOT NULL AND time_started <= time_finished")
                 == [(THREADS,)], 20, message="every thread recorded Dead with its start time")
    finally:
        executor.close()
        client.close()
        context.term()
        grid.stop()
