"""The manager's own stall never kills a live peer (issue 23, item 5), with a real manager process.

A manager with a 0.75 s liveness (heartbeats every 0.25 s, 3 missed) has executors connected over
real ZeroMQ sockets that heartbeat every 0.1 s. The manager process is stopped (SIGSTOP) for four
times its liveness — a pause, a swap storm, a long pass of its loop — while they go on
heartbeating into its socket; one of them goes silent just before. After SIGCONT the heartbeats
that waited unread must keep every live executor alive, and the silent one must be declared dead
(once the manager has caught up with its input).
"""

from __future__ import annotations

import signal
import threading
import time

import pytest
import zmq

from gridcrawl import protocol as p
from grid import Grid, wait_for

pytestmark = pytest.mark.e2e

LIVE = 20  # executors that heartbeat all along


class SimExecutors:
    """``count`` executors (DEALER sockets named ``live-N``, one ``silent``) in a thread of this
    process: register, then heartbeat every 0.1 s; the silent one stops when :attr:`hush` is set.
    Records every refusal or goodbye the manager sends (a live executor gets one only if the
    manager declared it dead)."""

    def __init__(self, endpoint: str, count: int) -> None:
        self.context = zmq.Context()
        self.names = [f"live-{i}" for i in range(count)] + ["silent"]
        self.sockets = []
        for name in self.names:
            sock = self.context.socket(zmq.DEALER)
            sock.setsockopt(zmq.LINGER, 0)
            sock.connect(endpoint)
            sock.send_multipart(p.encode(p.Register(name=name, host="sim", user="test", threads=1)))
            self.sockets.append(sock)
        self.welcomed: set[str] = set()
        self.refused: list[tuple[str, str]] = []
        self.hush, self.stop = threading.Event(), threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        next_beat = time.monotonic()
        while not self.stop.is_set():
            for name, sock in zip(self.names, self.sockets):
                while True:
                    try:
                        message = p.decode(sock.recv_multipart(zmq.NOBLOCK))
                    except zmq.Again:
                        break
                    if isinstance(message, p.Welcome):
                        self.welcomed.add(name)
                    elif isinstance(message, (p.Refuse, p.Bye)):
                        self.refused.append((name, type(message).__name__))
            if time.monotonic() >= next_beat:
                next_beat += 0.1
                for name, sock in zip(self.names, self.sockets):
                    if name in self.welcomed and not (name == "silent" and self.hush.is_set()):
                        sock.send_multipart(p.encode(p.Heartbeat()))
            time.sleep(0.01)

    def close(self) -> None:
        self.stop.set()
        self.thread.join(5)
        for sock in self.sockets:
            sock.close()
        self.context.term()


def test_a_stopped_manager_declares_only_the_silent_executor_dead_after_it_resumes(tmp_path):
    grid = Grid(tmp_path)
    manager = grid.start_manager()
    sims = None
    try:
        sims = SimExecutors(grid.endpoint, LIVE)
        wait_for(lambda: len(sims.welcomed) == LIVE + 1, 30, message="every executor welcomed")
        time.sleep(1.0)  # a liveness of heartbeats, handled
        assert sims.refused == [] and "declared dead" not in grid.log("manager.log")
        sims.hush.set()
        time.sleep(0.05)
        manager.send_signal(signal.SIGSTOP)
        try:
            time.sleep(3.0)  # 4 × the liveness: the live executors' heartbeats wait in the socket
        finally:
            manager.send_signal(signal.SIGCONT)
        wait_for(lambda: "executor" in grid.log("manager.log") and "(silent) silent for" in grid.log("manager.log"),
                 15, message="the silent executor declared dead")
        time.sleep(1.0)  # more than a liveness after the manager resumed
        dead = [line for line in grid.log("manager.log").splitlines() if "declared dead" in line]
        assert len(dead) == 1 and "(silent)" in dead[0], dead
        assert sims.refused == [], sims.refused
    finally:
        if sims is not None:
            sims.close()
        grid.stop()
