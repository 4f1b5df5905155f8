"""ZeroMQ sockets set up the same way in every program, and sending/receiving protocol messages.

Every socket gets ``LINGER`` (so closing never hangs), ``MAXMSGSIZE`` (so a hostile peer cannot
make us allocate without bound) and explicit high-water marks. A DEALER retries a refused TCP
connection after :data:`RECONNECT_FIRST` seconds, doubling up to :data:`RECONNECT_MAX` (ZeroMQ's
``RECONNECT_IVL``/``RECONNECT_IVL_MAX``; its own default is a fixed 0.1 s), so a peer started a
moment before its manager binds connects at once, and a thousand peers of a manager that is down
do not knock every 0.1 s (connections the manager closes during the handshake do not grow the
interval: :data:`RECONNECT_SLOW`). The manager's ROUTER also gets
``ROUTER_MANDATORY``, so a message to a vanished peer raises instead of vanishing silently (ZeroMQ
guide, chapter 3).

With CURVE keys (see :mod:`gridcrawl.keys`) :func:`apply_curve_server` / :func:`apply_curve_client`
make a socket encrypted and key-authenticated, and :class:`HandshakeWatch` tells a client at
once that the manager refused its key.
"""

from __future__ import annotations

import msgspec
import zmq

from gridcrawl import protocol
from gridcrawl.errors import MessageTooLarge
from gridcrawl.settings import Settings
from gridcrawl.words import counted

HWM = 10_000
RECONNECT_FIRST = 0.01  # seconds before a refused connection is tried again, at first
RECONNECT_MAX = 2.0  # seconds between tries at most (the interval doubles up to this)
#: Seconds between tries of a socket whose manager closed :data:`SLOW_AFTER_CLOSED` connections
#: during the handshake since the last one that succeeded (a wrong manager public key, a plain
#: peer at a CURVE manager): ZeroMQ tried again every 10 ms, 83 handshakes a second, each a
#: CURVE computation at the manager (0.34 CPU-s of the manager's in 20 s, per desktop).
RECONNECT_SLOW = 1.0
SLOW_AFTER_CLOSED = 50


def seed_routing_ids() -> None:
    """Seed the C library's ``rand()`` from ``os.urandom`` before a ROUTER socket is made.

    libzmq 4.3 numbers the peers of a ROUTER that give no routing id of their own from
    ``rand()``, which nothing seeds: every process's first id is ``00 6b8b4567`` (glibc's first
    value) and the next ones count up. A peer may give itself an id that starts with a zero
    byte, so one that claims the ids the manager will hand out next, then connects without
    one, makes the ROUTER hand out an id in use, and libzmq aborts the process (an assertion in
    ``socket_base.cpp``): a walkthrough killed a manager with CURVE on, one allowed key, 28
    connections. Seeded from 32 random bits, the next id is not known. Does nothing where the C
    library cannot be loaded."""
    import ctypes
    import os
    try:
        ctypes.CDLL(None).srand(int.from_bytes(os.urandom(4), "little"))
    except (OSError, AttributeError, TypeError):  # no libc to load (Windows), or no srand in it
        pass


def make_socket(context: zmq.Context, kind: int, settings: Settings,
                reconnect_first: float = RECONNECT_FIRST) -> zmq.Socket:
    """A new socket of ``kind`` (``zmq.ROUTER``/``zmq.DEALER``) with gridcrawl's options (a
    ROUTER's routing ids from a random start: :func:`seed_routing_ids`); a DEALER reconnects
    ``reconnect_first`` seconds after a connection ends (then doubling up to :data:`RECONNECT_MAX`
    while TCP connections are refused; ZeroMQ starts again from it after every connection
    closed during the handshake, so :class:`~gridcrawl.link.ManagerLink` makes a socket with a
    longer one for a manager that keeps closing them: :data:`RECONNECT_SLOW`)."""
    if kind == zmq.ROUTER:
        seed_routing_ids()
    sock = context.socket(kind)
    sock.setsockopt(zmq.LINGER, 500)
    sock.setsockopt(zmq.MAXMSGSIZE, settings.max_message_bytes)
    sock.setsockopt(zmq.SNDHWM, HWM)
    sock.setsockopt(zmq.RCVHWM, HWM)
    if kind == zmq.ROUTER:
        sock.setsockopt(zmq.ROUTER_MANDATORY, 1)
    else:
        sock.setsockopt(zmq.RECONNECT_IVL, int(reconnect_first * 1000))
        sock.setsockopt(zmq.RECONNECT_IVL_MAX, int(RECONNECT_MAX * 1000))
    return sock


# pyzmq's ``send_multipart``/``recv_multipart`` cost 7-9 µs a message of 3-4 small frames, most
# of it Python around the C calls (a type check per frame, ``SNDMORE | flags`` on enum flags, a
# ``getsockopt(RCVMORE)`` through the option wrapper); the backend's methods with int flags cost
# 1-2.5 µs (measured, pyzmq 27). A manager with 1,000 desktops sends and receives about one
# message per grid thread (issue 23), so these two functions call the backend directly.
_SEND = zmq.backend.Socket.send
_RECV = zmq.backend.Socket.recv
_NOBLOCK = int(zmq.NOBLOCK)
_MORE_NOBLOCK = int(zmq.SNDMORE) | _NOBLOCK


def send(sock: zmq.Socket, message: protocol.Message, peer: bytes | None = None) -> bool:
    """Send ``message`` (to ``peer`` through a ROUTER). Returns False if the peer is gone or the
    socket's queue is full (the caller's liveness logic deals with that peer).

    A message over the socket's ``MAXMSGSIZE`` (``max_message_bytes``, which every program is
    assumed to share) would make the receiver drop the connection, and the sender would connect
    and send it again for ever: a batched message (``BATCH``: jobs, results, threads ...) goes
    in halves instead, and a message that cannot be split raises
    :class:`~gridcrawl.errors.MessageTooLarge`."""
    version, kind, body = protocol.encode(message)
    if len(body) > 1 << 20 and len(body) > (limit := sock.getsockopt(zmq.MAXMSGSIZE)) >= 0:
        items = getattr(message, message.BATCH) if message.BATCH else ()
        if len(items) < 2:
            raise MessageTooLarge(f"the {kind.decode()} message ({len(body) / 2**20:.1f} MiB) is larger than "
                                  f"max_message_bytes ({limit / 2**20:.1f} MiB), which the manager refuses: "
                                  "raise max_message_bytes on every program")
        half = len(items) // 2
        first = send(sock, msgspec.structs.replace(message, **{message.BATCH: items[:half]}), peer)
        return send(sock, msgspec.structs.replace(message, **{message.BATCH: items[half:]}), peer) and first
    return _frames_out(sock, peer, version, kind, body) is True


def _frames_out(sock: zmq.Socket, peer: bytes | None, version: bytes, kind: bytes, body: bytes) -> bool | None:
    """Put one message's frames on ``sock`` without blocking: True when queued, False when the
    queue is full, None when ``peer`` is gone (``ROUTER_MANDATORY``'s ``EHOSTUNREACH``)."""
    try:
        if peer is not None:
            _SEND(sock, peer, _MORE_NOBLOCK)
        _SEND(sock, version, _MORE_NOBLOCK)
        _SEND(sock, kind, _MORE_NOBLOCK)
        _SEND(sock, body, _NOBLOCK)
        return True
    except zmq.Again:
        return False
    except zmq.ZMQError as exc:
        if exc.errno == zmq.EHOSTUNREACH:
            return None
        raise


def reachable(sock: zmq.Socket, peer: bytes) -> bool:
    """Whether the ``ROUTER_MANDATORY`` socket ``sock`` still has a connection to ``peer``: a
    heartbeat sent to it is queued, or waits behind a full queue (True), or fails with
    ``EHOSTUNREACH`` (False: the peer is gone, e.g. its process was killed and the kernel closed
    its connection)."""
    return _frames_out(sock, peer, *protocol.encode(protocol.Heartbeat())) is not None


def receive(sock: zmq.Socket) -> list[bytes]:
    """The frames of the next message waiting on ``sock`` (``recv_multipart(zmq.NOBLOCK)``, as
    bytes, without pyzmq's per-frame Python wrappers). Raises ``zmq.Again`` if none is waiting."""
    frames = []
    while True:
        frame = _RECV(sock, _NOBLOCK, copy=False)  # a Frame says whether more follow (no getsockopt)
        frames.append(frame.bytes)
        if not frame.more:
            return frames


def is_loopback_endpoint(endpoint: str) -> bool:
    """True if ZeroMQ ``endpoint`` listens only on this machine (``ipc://``, ``inproc://``, or
    TCP on a loopback address or ``localhost``); ``tcp://*:9000`` and ``tcp://0.0.0.0:9000`` are not."""
    if not endpoint.startswith("tcp://"):
        return True
    host = endpoint[6:].rpartition(":")[0].strip("[]")
    return host == "localhost" or _is_loopback(host)


def check_endpoint(endpoint: str, *, bind: bool = False) -> str:
    """Return ``endpoint`` if it looks like a ZeroMQ endpoint (``tcp://HOST:PORT``,
    ``ipc://...``, ``inproc://...``) to connect to, or with ``bind`` to listen at; else raise
    ``ValueError`` with a one-line reason (for ``HOST:PORT`` without ``tcp://``, or with
    ``http://``, the endpoint it may have meant). The host ``*`` (every address) is for binding only:
    connecting to it made ZeroMQ raise "Invalid argument", a traceback from the client and the
    executor."""
    if not endpoint.startswith(("tcp://", "ipc://", "inproc://")):
        # 127.0.0.1:9000, http://host:9000: the endpoint it names, written as ZeroMQ's
        rest = endpoint.split("://", 1)[1] if "://" in endpoint else endpoint
        host, sep, port = rest.rstrip("/").rpartition(":")
        meant = f" (did you mean tcp://{host}:{port}?)" if sep and host and "/" not in host and port.isdigit() else ""
        raise ValueError(f"{endpoint!r} is not a ZeroMQ endpoint (expected tcp://HOST:PORT){meant}")
    if endpoint.startswith("tcp://"):
        host, sep, port = endpoint[6:].rpartition(":")
        if not sep or not host or not port:
            raise ValueError(f"{endpoint!r} is not a ZeroMQ endpoint: it names no port (expected tcp://HOST:PORT)")
        if not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"{endpoint!r} is not a ZeroMQ endpoint: its port {port!r} is no number from 1 to 65535")
        if host == "*" and not bind:
            raise ValueError(f"{endpoint!r}: `*` is for --bind; connect to tcp://HOST:PORT "
                             f"(the manager's host name or address, e.g. tcp://127.0.0.1:{port})")
    return endpoint


def listen_problem(endpoint: str) -> str | None:
    """Why a manager could not listen at the ``tcp://HOST:PORT`` endpoint it is to bind, found by
    binding a plain socket there for a moment (as ZeroMQ does: ``SO_REUSEADDR``, ``*`` for every
    IPv4 address), so that a manager refuses to start before it creates or touches its database;
    None when the port is free, and for ``ipc://`` / ``inproc://``. A one-line reason: another
    program listens there, the host is not one of this machine's addresses, or the port needs
    privileges (below 1024)."""
    import errno
    import socket
    if not endpoint.startswith("tcp://"):
        return None
    host, _, port = endpoint[6:].rpartition(":")
    host = "" if host == "*" else host.strip("[]")
    try:
        family = socket.getaddrinfo(host or None, int(port), type=socket.SOCK_STREAM)[0][0] if host else socket.AF_INET
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind((host, int(port)))
    except (OSError, UnicodeError, ValueError) as exc:
        code = getattr(exc, "errno", None)
        if code == errno.EADDRINUSE:
            return ("another program listens there (another gridcrawl-manager? a web server?): stop it, or give "
                    "another --bind port")
        if code == errno.EADDRNOTAVAIL:
            return f"{host!r} is not an address of this machine (use * for all of them)"
        return getattr(exc, "strerror", None) or str(exc)
    return None


def why_unreachable(endpoint: str, timeout: float = 2.0) -> str | None:
    """Why a ``tcp://HOST:PORT`` manager endpoint may not have answered, found by asking the
    network directly (for the one-line error of a program that gave up on its manager): the host
    does not resolve, nothing listens at the port (connection refused), the port does not answer
    within ``timeout`` seconds (a firewall, a host that is down), or what listens there does not
    speak ZeroMQ (a ZMTP peer sends its greeting, which starts with byte 0xFF, as soon as a
    connection opens: ZeroMQ RFC 23; silence for a second, or another first byte, is not one).
    None when a ZeroMQ peer answers or the connection is closed at once (the manager was busy,
    or cut the handshake: :class:`HandshakeWatch` tells) and for ``ipc://`` / ``inproc://``."""
    found = probe_endpoint(endpoint, timeout)
    return found[1] if found is not None else None


def probe_endpoint(endpoint: str, timeout: float = 2.0) -> tuple[str, str] | None:
    """:func:`why_unreachable`'s finding as ``(kind, reason)``: ``kind`` is ``"resolve"``,
    ``"refused"``, ``"unreachable"`` or ``"not_zeromq"`` (only that one is sure to last: a
    manager may yet start, or its host come up); None as there."""
    import socket
    if not endpoint.startswith("tcp://"):
        return None
    host, _, port = endpoint[6:].rpartition(":")
    host = host.strip("[]")
    try:
        addresses = socket.getaddrinfo(host, int(port), type=socket.SOCK_STREAM)
    except (OSError, UnicodeError, ValueError) as exc:
        return "resolve", f"the host {host!r} does not resolve ({getattr(exc, 'strerror', None) or exc})"
    family, kind, proto, _, address = addresses[0]
    with socket.socket(family, kind, proto) as probe:
        probe.settimeout(timeout)
        try:
            probe.connect(address)
        except OSError as exc:
            return connect_failure(host, port, address[0], exc, timeout)
        probe.settimeout(min(timeout, 1.0))
        try:
            greeting = probe.recv(1)
        except TimeoutError:
            greeting = None  # silent, as a web server waiting for a request
        except OSError:
            greeting = b""
    if greeting in (b"\xff", b""):  # a ZeroMQ peer, or one that closed at once (a CURVE manager, a proxy)
        return None
    return "not_zeromq", (f"what listens at {host}:{port} does not speak ZeroMQ: not a gridcrawl manager (a web "
                          "server? check the port of the manager's --bind)")


def connect_failure(host: str, port, address: str, exc: OSError, timeout: float) -> tuple[str, str]:
    """:func:`probe_endpoint`'s ``(kind, reason)`` for a TCP connection to ``host``:``port``
    (resolved to the IP ``address``) that failed with ``exc`` after at most ``timeout`` seconds:
    ``"refused"`` (nothing listens there: off loopback, a manager bound to 127.0.0.1 is named
    among the causes), or ``"unreachable"``: no answer (the host is down or a firewall drops the
    packets), no route from this machine (``ENETUNREACH``: its own network or the address is
    wrong), or another refusal by the network (``EHOSTUNREACH``: the host is down, or a firewall
    rejects it)."""
    import errno
    if isinstance(exc, ConnectionRefusedError):
        if _is_loopback(address):
            return "refused", f"nothing listens at {host}:{port} (connection refused): is the manager running there?"
        return "refused", (f"nothing listens at {host}:{port} (connection refused): is the manager running there, "
                           f"bound to an address other hosts reach (--bind tcp://*:{port}, not 127.0.0.1)?")
    if isinstance(exc, TimeoutError):
        return "unreachable", (f"{host}:{port} cannot be reached (no answer within {timeout:g} s: the host is down "
                               "or a firewall drops it)")
    reason = exc.strerror or str(exc)
    if exc.errno == errno.ENETUNREACH:
        return "unreachable", (f"{host}:{port} cannot be reached ({reason}): this machine has no route to {address}; "
                               "check the manager's address and this machine's network")
    return "unreachable", f"{host}:{port} cannot be reached ({reason}: the host is down, or a firewall rejects it)"


def _is_loopback(address: str) -> bool:
    """True if the IP ``address`` (text, as ``getaddrinfo`` gives it) is a loopback one."""
    import ipaddress
    try:
        return ipaddress.ip_address(address.split("%")[0]).is_loopback
    except ValueError:
        return False


# ----------------------------------------------------------------------------------------------
# CURVE (encryption and key authentication; keys from gridcrawl.keys)


def apply_curve_server(sock: zmq.Socket, public: bytes, secret: bytes) -> None:
    """Make ``sock`` a CURVE server with the manager's z85 key pair (call before ``bind``).
    Clients must then know the manager's public key and present a key the ZAP handler accepts
    (see :func:`gridcrawl.keys.start_authenticator`)."""
    sock.setsockopt(zmq.CURVE_SERVER, 1)
    sock.setsockopt(zmq.CURVE_PUBLICKEY, public)
    sock.setsockopt(zmq.CURVE_SECRETKEY, secret)


def apply_curve_client(sock: zmq.Socket, keys) -> None:
    """Make ``sock`` a CURVE client (call before ``connect``): ``keys`` is a
    :class:`gridcrawl.keys.ClientKeys` (own key pair, manager's public key, z85)."""
    sock.setsockopt(zmq.CURVE_SERVERKEY, keys.server_public)
    sock.setsockopt(zmq.CURVE_PUBLICKEY, keys.public)
    sock.setsockopt(zmq.CURVE_SECRETKEY, keys.secret)


class HandshakeWatch:
    """Watches a connecting socket for a failed security handshake (ZeroMQ socket monitor), so a
    peer whose CURVE key the manager refuses learns it at once instead of waiting for a timeout.

    ``HandshakeWatch(sock, curve=...)`` (``curve``: whether ``sock`` uses CURVE, for the wording);
    :meth:`failure` returns the reason once a handshake failed (None
    otherwise; never blocks); :meth:`close` before the socket is closed.

    A mismatch of security mechanisms (a plain peer, a CURVE manager) shows as a protocol failure
    when the peer has read the manager's greeting, but as a handshake closed with no detail when
    the manager closed the connection first (a race each connection may lose), which a manager
    restarting or a proxy cutting connections also causes: those are only counted
    (``closed_early``), and :meth:`hint` words them for the message of a connection that timed out.
    """

    EVENTS = (zmq.EVENT_HANDSHAKE_FAILED_AUTH | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
              | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL | zmq.EVENT_HANDSHAKE_SUCCEEDED)

    def __init__(self, sock: zmq.Socket, *, curve: bool = True) -> None:
        self.sock = sock
        self.curve = curve
        self.monitor = sock.get_monitor_socket(self.EVENTS)
        self.succeeded = False
        self.closed_early = 0  # handshakes since the last success that were closed before saying why

    def failure(self) -> str | None:
        """Why the last handshake failed, or None (no failure seen, or a later one succeeded)."""
        from zmq.utils.monitor import recv_monitor_message
        reason = None
        while self.monitor is not None and self.monitor.poll(0):
            event = recv_monitor_message(self.monitor)
            kind = event["event"]
            if kind == zmq.EVENT_HANDSHAKE_SUCCEEDED:
                self.succeeded, reason, self.closed_early = True, None, 0
            elif kind == zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL:
                self.closed_early += 1
            elif kind == zmq.EVENT_HANDSHAKE_FAILED_AUTH:
                reason = (f"the manager refused this program's CURVE key (ZAP status {int(event['value'])}): "
                          "its public key is not in the manager's allow-list directory")
            elif kind == zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL:
                reason = ("the CURVE handshake with the manager failed (wrong manager public key, "
                          "or the manager does not use CURVE)" if self.curve else
                          "the manager requires CURVE encryption: give --curve-secret and --curve-server-key")
        return reason

    def hint(self) -> str | None:
        """What handshakes closed before saying why suggest (call after :meth:`failure`), or None."""
        if self.closed_early == 0:
            return None
        guess = ("wrong manager public key, or the manager does not use CURVE" if self.curve else
                 "if the manager requires CURVE encryption, give --curve-secret and --curve-server-key")
        return f"the manager closed {counted(self.closed_early, 'connection')} during the handshake ({guess})"

    def close(self) -> None:
        """Stop monitoring and close the monitor socket (idempotent)."""
        if self.monitor is not None:
            try:
                self.sock.disable_monitor()
            except zmq.ZMQError:
                pass
            self.monitor.close(linger=0)
            self.monitor = None
