"""A TCP relay on 127.0.0.1 whose link can be cut and healed, to cut a process off the network
without killing it.

While cut, the relay accepts connections and keeps them open but forwards nothing — a silent
drop, as a pulled cable or a dropping firewall looks to TCP. When healed, the data held back is
forwarded, as TCP's retransmissions would deliver it.
"""

from __future__ import annotations

import selectors
import socket
import threading


class CuttableLink:
    """Relay ``127.0.0.1:port`` → ``target`` (host, port). ``cut()`` and ``heal()`` switch it."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(16)
        self.port = self.listener.getsockname()[1]
        self.connected = threading.Event()
        self.healed = threading.Event()
        self.healed.set()
        self._stop = threading.Event()
        self._sockets: list[socket.socket] = []
        self.connections = 0
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def endpoint(self) -> str:
        """The ZeroMQ endpoint of the relay."""
        return f"tcp://127.0.0.1:{self.port}"

    def cut(self) -> None:
        """Stop forwarding (connections stay open, data waits)."""
        self.healed.clear()

    def heal(self) -> None:
        """Forward again, including what waited."""
        self.healed.set()

    def close(self) -> None:
        """Stop the relay and close every connection."""
        self._stop.set()
        self.healed.set()
        for s in [self.listener, *self._sockets]:
            try:
                s.close()
            except OSError:
                pass

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            self.connections += 1
            self._sockets += [client, upstream]
            threading.Thread(target=self._pump, args=(client, upstream), daemon=True).start()

    def _pump(self, a: socket.socket, b: socket.socket) -> None:
        peers = {a: b, b: a}
        try:
            # epoll, not select(): a test process may hold over 1,024 files by then
            with selectors.DefaultSelector() as ready:
                ready.register(a, selectors.EVENT_READ)
                ready.register(b, selectors.EVENT_READ)
                while not self._stop.is_set():
                    self.healed.wait()
                    for key, _ in ready.select(0.1):
                        if not self.healed.is_set():
                            break
                        data = key.fileobj.recv(65536)
                        if not data:
                            return
                        peers[key.fileobj].sendall(data)
        except (OSError, ValueError):  # (ValueError: a socket closed by cut())
            return
        finally:
            for s in (a, b):
                try:
                    s.close()
                except OSError:
                    pass
