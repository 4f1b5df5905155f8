"""The manager's I/O shell: a ZeroMQ ROUTER loop that feeds :class:`ManagerCore` and carries out
its actions (messages to peers, records to SQL through the :class:`Recorder`).

Peer input is never trusted: frames that do not decode are logged and dropped (counted per
peer); the loop never dies on what a peer sends.
"""

from __future__ import annotations

import logging
import threading
import time

import sqlalchemy as sa
import zmq

from gridcrawl import models, protocol
from gridcrawl.db import init_schema
from gridcrawl.settings import Settings
from gridcrawl.states import ApplicationState, ThreadState
from gridcrawl.transport import make_socket, send
from gridcrawl.manager.core import ManagerCore, Record, Send
from gridcrawl.manager.recorder import Recorder

log = logging.getLogger("gridcrawl.manager")

BATCH = 2000  # messages handled before the loop looks at timers again


class ManagerServer:
    """A running manager: ``ManagerServer(settings, bind, engine).serve(stop)``.

    ``bind`` is a ZeroMQ endpoint (``tcp://*:9000``; port 0 picks a free port, see
    :attr:`endpoint`); ``engine`` the manager database (its schema is created if missing, and
    unfinished work is restored from it). Raises ``zmq.ZMQError`` if the address is in use.
    """

    def __init__(self, settings: Settings, bind: str, engine: sa.engine.Engine) -> None:
        self.settings = settings
        self.engine = engine
        init_schema(engine, models.manager_metadata, models.manager_meta)
        self.context = zmq.Context()
        self.socket = make_socket(self.context, zmq.ROUTER, settings)
        if bind.endswith(":0"):
            port = self.socket.bind_to_random_port(bind[:-2])
            self.endpoint = f"{bind[:-2]}:{port}"
        else:
            self.socket.bind(bind)
            self.endpoint = bind
        self.recorder = Recorder(engine, settings.record_interval)
        self.core = self._restore()
        self.malformed: dict[bytes, int] = {}

    def _restore(self) -> ManagerCore:
        """Build the core from the database: ids continue, unfinished threads are READY again."""
        t, a, x = models.thread, models.application, models.attempt
        with self.engine.begin() as conn:
            next_internal = (conn.execute(sa.select(sa.func.max(t.c.internal_thread_id))).scalar() or 0) + 1
            next_attempt = (conn.execute(sa.select(sa.func.max(x.c.attempt_id))).scalar() or 0) + 1
            apps = [dict(r._mapping) for r in conn.execute(
                sa.select(a).where(a.c.state != int(ApplicationState.STOPPED)))]
            threads = [dict(r._mapping) for r in conn.execute(
                sa.select(t).join(a, a.c.application_id == t.c.application_id)
                .where(t.c.state != int(ThreadState.DEAD), a.c.state != int(ApplicationState.STOPPED))
                .order_by(t.c.internal_thread_id))]
            conn.execute(models.executor.update().values(is_connected=False))
            conn.execute(x.update().where(x.c.outcome == "running").values(outcome="lost"))
        core = ManagerCore(self.settings, next_internal_id=next_internal, next_attempt_id=next_attempt)
        self._carry_out(core.restore(apps, threads, time.time()))
        return core

    def _carry_out(self, actions) -> None:
        for action in actions:
            if type(action) is Send:
                if not send(self.socket, action.message, action.peer):
                    log.debug("peer %r gone; dropped %s", action.peer, action.message.TYPE)
            else:
                self.recorder.add(action)

    def serve(self, stop: threading.Event) -> None:
        """Run until ``stop`` is set; then say goodbye to peers and flush the records."""
        self.recorder.start()
        poller = zmq.Poller()
        poller.register(self.socket, zmq.POLLIN)
        tick_every = min(0.25, self.settings.heartbeat_interval / 4)
        next_tick = 0.0
        log.info("manager listening on %s", self.endpoint)
        try:
            while not stop.is_set():
                timeout = max(0.0, next_tick - time.time())
                if poller.poll(timeout * 1000):
                    self._drain()
                now = time.time()
                if now >= next_tick:
                    self._carry_out(self.core.tick(now))
                    next_tick = now + tick_every
        finally:
            for peer in list(self.core.peers):
                send(self.socket, protocol.Bye("manager shutting down"), peer)
            self.recorder.close()
            self.socket.close(linger=200)
            self.context.term()
            log.info("manager stopped")

    def _drain(self) -> None:
        sock, core = self.socket, self.core
        for _ in range(BATCH):
            try:
                frames = sock.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            peer = frames[0]
            try:
                message = protocol.decode(frames[1:])
            except protocol.ProtocolError as exc:
                count = self.malformed[peer] = self.malformed.get(peer, 0) + 1
                if count <= 3 or count % 1000 == 0:
                    log.warning("dropped a malformed message from peer %s (%d so far): %s", peer.hex(), count, exc)
                continue
            try:
                actions = core.handle(peer, message, time.time())
            except Exception:  # a bug of ours must not take the grid down
                log.exception("handling %s from peer %s failed", message.TYPE.decode(), peer.hex())
                continue
            self._carry_out(actions)
