"""ZeroMQ sockets set up the same way in every program, and sending/receiving protocol messages.

Every socket gets ``LINGER`` (so closing never hangs), ``MAXMSGSIZE`` (so a hostile peer cannot
make us allocate without bound) and explicit high-water marks. The manager's ROUTER also gets
``ROUTER_MANDATORY``, so a message to a vanished peer raises instead of vanishing silently (ZeroMQ
guide, chapter 3).
"""

from __future__ import annotations

import zmq

from gridcrawl import protocol
from gridcrawl.settings import Settings

HWM = 10_000


def make_socket(context: zmq.Context, kind: int, settings: Settings) -> zmq.Socket:
    """A new socket of ``kind`` (``zmq.ROUTER``/``zmq.DEALER``) with gridcrawl's options."""
    sock = context.socket(kind)
    sock.setsockopt(zmq.LINGER, 500)
    sock.setsockopt(zmq.MAXMSGSIZE, settings.max_message_bytes)
    sock.setsockopt(zmq.SNDHWM, HWM)
    sock.setsockopt(zmq.RCVHWM, HWM)
    if kind == zmq.ROUTER:
        sock.setsockopt(zmq.ROUTER_MANDATORY, 1)
    return sock


def send(sock: zmq.Socket, message: protocol.Message, peer: bytes | None = None) -> bool:
    """Send ``message`` (to ``peer`` through a ROUTER). Returns False if the peer is gone or the
    socket's queue is full (the caller's liveness logic deals with that peer)."""
    frames = protocol.encode(message)
    if peer is not None:
        frames.insert(0, peer)
    try:
        sock.send_multipart(frames, flags=zmq.NOBLOCK, copy=False)
        return True
    except zmq.Again:
        return False
    except zmq.ZMQError as exc:
        if exc.errno == zmq.EHOSTUNREACH:
            return False
        raise


def check_endpoint(endpoint: str) -> str:
    """Return ``endpoint`` if it looks like a ZeroMQ TCP endpoint, else raise ``ValueError``
    with a one-line reason (``tcp://HOST:PORT``; ``*`` allowed as host for binding)."""
    if not endpoint.startswith(("tcp://", "ipc://", "inproc://")):
        raise ValueError(f"{endpoint!r} is not a ZeroMQ endpoint (expected tcp://HOST:PORT)")
    if endpoint.startswith("tcp://"):
        host, sep, port = endpoint[6:].rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"{endpoint!r} is not a ZeroMQ endpoint (expected tcp://HOST:PORT)")
    return endpoint
