"""A real HTTP forward proxy on 127.0.0.1 for the tests, standing in for an organisation's Squid.

``ForwardProxy(hosts={"docs.intranet.invalid": "127.0.0.1"})`` listens on a free port of
127.0.0.1. It forwards absolute-form requests (``GET http://host:port/path HTTP/1.1``) and
tunnels ``CONNECT host:port`` (HTTPS), reaching a host only by the address ``hosts`` gives for
its name (or an IP literal of 127.0.0.0/8): a name nobody else can resolve is reachable through
this proxy only, as an outside name is from a desktop behind a real one. A name written
``*.maze.test`` stands for every subdomain of ``maze.test``, as a wildcard DNS record does. With ``credentials``
(``("user", "password")``) a request without the matching ``Proxy-Authorization: Basic`` gets
``407``. ``records`` lists ``(method, target)`` of every request the proxy received.
"""

from __future__ import annotations

import base64
import http.client
import http.server
import ipaddress
import selectors
import socket
import threading
from urllib.parse import urlsplit

_HOP_BY_HOP = {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer",
               "transfer-encoding", "upgrade", "proxy-connection"}


class _ProxyHandler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = 30

    def log_message(self, format: str, *args) -> None:  # noqa: A002 - stdlib signature
        """Log nothing."""

    @property
    def proxy(self) -> "ForwardProxy":
        return self.server.forward_proxy  # type: ignore[attr-defined]

    def _allowed(self) -> bool:
        self.proxy.records.append((self.command, self.path))
        expected = self.proxy.credentials
        if expected is None:
            return True
        token = base64.b64encode(f"{expected[0]}:{expected[1]}".encode()).decode()
        if self.headers.get("Proxy-Authorization", "") == f"Basic {token}":
            return True
        self.send_response(407)
        self.send_header("Proxy-Authenticate", 'Basic realm="test proxy"')
        self.send_header("Content-Length", "0")
        self.end_headers()
        return False

    def _address(self, host: str) -> str | None:
        host = host.lower()
        mapped = self.proxy.hosts.get(host)
        if mapped is not None:
            return mapped
        parent = host
        while "." in parent:
            parent = parent.split(".", 1)[1]
            if f"*.{parent}" in self.proxy.hosts:
                return self.proxy.hosts[f"*.{parent}"]
        try:
            return host if ipaddress.ip_address(host) in ipaddress.ip_network("127.0.0.0/8") else None
        except ValueError:
            return None

    def _fail(self, status: int) -> None:
        """Answer ``status`` itself, saying why as RFC 9209 asks (``Proxy-Status``)."""
        self.send_response(status)
        self.send_header("Proxy-Status", "test-proxy; error=destination_not_found")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_CONNECT(self) -> None:
        if not self._allowed():
            return
        host, _, port = self.path.rpartition(":")
        address = self._address(host)
        if address is None:
            self._fail(502)
            return
        try:
            upstream = socket.create_connection((address, int(port)), timeout=10)
        except OSError:
            self._fail(502)
            return
        self.send_response(200, "Connection established")
        self.end_headers()
        self.wfile.flush()
        selector = selectors.DefaultSelector()  # not select(): a test process may hold fds past 1024
        selector.register(self.connection, selectors.EVENT_READ, upstream)
        selector.register(upstream, selectors.EVENT_READ, self.connection)
        try:
            while True:
                ready = selector.select(30)
                if not ready:
                    break
                for key, _ in ready:
                    data = key.fileobj.recv(65536)
                    if not data:
                        return
                    key.data.sendall(data)
        except OSError:
            pass
        finally:
            selector.close()
            upstream.close()
            self.close_connection = True

    def _forward(self) -> None:
        if not self._allowed():
            return
        parts = urlsplit(self.path)
        address = self._address(parts.hostname or "") if parts.scheme == "http" else None
        if address is None:
            self._fail(502)
            return
        headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP_BY_HOP}
        upstream = http.client.HTTPConnection(address, parts.port or 80, timeout=10)
        try:
            upstream.request(self.command, (parts.path or "/") + (f"?{parts.query}" if parts.query else ""),
                             headers=headers)
            response = upstream.getresponse()
            body = response.read()
        except OSError:
            self._fail(502)
            return
        finally:
            upstream.close()
        self.send_response(response.status, response.reason)
        for name, value in response.getheaders():
            if name.lower() not in _HOP_BY_HOP and name.lower() != "content-length":
                self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    do_GET = _forward
    do_HEAD = _forward


class ForwardProxy:
    """The test proxy (see the module docstring); a context manager that starts and stops it."""

    def __init__(self, hosts: dict[str, str] | None = None, credentials: tuple[str, str] | None = None) -> None:
        self.hosts = {k.lower(): v for k, v in (hosts or {}).items()}
        self.credentials = credentials
        self.records: list[tuple[str, str]] = []
        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _ProxyHandler)
        self._server.daemon_threads = True
        self._server.handle_error = lambda request, address: None  # a client hanging up is no test failure
        self._server.forward_proxy = self  # type: ignore[attr-defined]
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, name="test-proxy", daemon=True)

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT``: the value of ``--proxy``."""
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> "ForwardProxy":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()
