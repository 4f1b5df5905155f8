"""The executor's way out to the web through an organisation's HTTP proxy (``--proxy``, ``--no-proxy``).

Desktops in an organisation often reach the web only through its forward proxy (Squid, a
corporate gateway): no direct route out, and often no DNS for outside names. A
:class:`ProxyRoute` says which fetches go through the proxy: every one, except those whose host
the ``no_proxy`` list names (the intranet). Plain ``http`` URLs are requested from the proxy in
absolute form; ``https`` ones are tunnelled with ``CONNECT`` (RFC 9110 §9.3.6), so the
certificate checked is still the site's own. The proxy itself is spoken to in plain HTTP (as
curl's and requests' ``http://`` proxies; SOCKS and TLS to the proxy are not supported). Credentials in the proxy URL
(``http://user:password@proxy:3128``) are sent as ``Proxy-Authorization: Basic`` (RFC 9110
§11.7.1, RFC 7617) and never shown: :attr:`ProxyRoute.shown` masks the password.

The ``no_proxy`` syntax is the one curl, wget and requests read from the ``no_proxy`` variable:
entries separated by commas or spaces; ``*`` alone means no proxy at all; ``example.org`` (or
``.example.org``, or ``*.example.org`` as Windows' bypass lists write it) matches that host and
every host under it; an IP address matches that literal
host; a CIDR (``10.0.0.0/8``) matches literal hosts inside it; ``host:port`` matches that port
only. Host names are compared case-insensitively, as written (no DNS lookup).

The environment's ``http_proxy``/``https_proxy``/``no_proxy`` are not read (the fetcher's sessions
ignore the environment): an executor goes where its settings say. Pass them on explicitly
(``--proxy "$https_proxy" --no-proxy "$no_proxy"``).

Only the standard library is imported here: ``Settings.validate`` checks a proxy setting before
any fetching library is loaded.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from typing import Mapping
from urllib.parse import quote, unquote, urlsplit

_SPLIT_RE = re.compile(r"[,\s]+")
_DEFAULT_PORTS = {"http": 80, "https": 443}


@dataclass(frozen=True)
class _Bypass:
    """One ``no_proxy`` entry: a domain (``host``), an address or network (``network``), or all."""

    host: str | None = None
    network: ipaddress.IPv4Network | ipaddress.IPv6Network | None = None
    port: int | None = None
    everything: bool = False

    def matches(self, host: str, port: int) -> bool:
        if self.everything:
            return True
        if self.port is not None and self.port != port:
            return False
        if self.network is not None:
            try:
                address = ipaddress.ip_address(host.strip("[]"))
            except ValueError:
                return False
            return address.version == self.network.version and address in self.network
        return host == self.host or host.endswith("." + self.host)


def _parse_bypass(entry: str) -> _Bypass:
    """One ``no_proxy`` entry (see the module docstring); raises ``ValueError`` on a bad port."""
    if entry == "*":
        return _Bypass(everything=True)
    port = None
    text = entry
    if text.startswith("["):  # [v6]:port or [v6]
        inner, _, rest = text[1:].partition("]")
        text = inner
        if rest.startswith(":"):
            port = _port(rest[1:], entry)
    elif text.count(":") == 1:  # host:port (more colons: a bare IPv6 address)
        text, _, digits = text.partition(":")
        port = _port(digits, entry)
    try:
        return _Bypass(network=ipaddress.ip_network(text, strict=False), port=port)
    except ValueError:
        pass
    host = text.lower().removeprefix("*.").strip(".")  # "*.corp.example", as Windows lists write it
    if not host or "/" in host or "*" in host:
        raise ValueError(f"--no-proxy: {entry!r} is no host, domain, IP address or CIDR")
    return _Bypass(host=host, port=port)


def _port(digits: str, entry: str) -> int:
    if not digits.isdigit() or not 0 < int(digits) < 65536:
        raise ValueError(f"--no-proxy: bad port in {entry!r}")
    return int(digits)


@dataclass(frozen=True)
class ProxyRoute:
    """Which fetches go through the HTTP proxy, and the proxy URL requests is given.

    Build it with :meth:`parse`. ``url`` is the proxy as given (credentials included, for the
    transport only); ``shown`` the same with the password masked (for messages and logs);
    ``bypass`` the parsed ``no_proxy`` entries. Immutable and thread-safe.
    """

    url: str
    shown: str
    bypass: tuple[_Bypass, ...] = ()

    @classmethod
    def parse(cls, proxy: str, no_proxy: str = "") -> "ProxyRoute | None":
        """The route for the settings ``proxy`` (``http://[user:password@]host[:port]``; without
        a scheme, ``http://`` is assumed; the port defaults to 80) and ``no_proxy`` (see the
        module docstring), or None when ``proxy`` is empty (every fetch connects directly).

        Raises ``ValueError`` (one line naming the option, never the password) for a URL that is
        not an ``http://`` proxy with a host and a valid port (SOCKS proxies and proxies spoken
        to over TLS are not supported), or a bad ``no_proxy`` entry; and for ``no_proxy`` given
        without a proxy.
        """
        proxy = proxy.strip()
        entries = [e for e in _SPLIT_RE.split(no_proxy.strip()) if e]
        if not proxy:
            if entries:
                raise ValueError("--no-proxy needs --proxy (the hosts it names are those fetched without the proxy)")
            return None
        if "://" not in proxy:
            proxy = "http://" + proxy  # "proxy.corp:3128", as curl takes it
        parts = urlsplit(proxy)
        shown = masked(proxy)
        if parts.scheme.lower().startswith("socks"):
            raise ValueError(f"--proxy {shown}: SOCKS proxies are not supported (an HTTP proxy is: http://host:port)")
        if parts.scheme.lower() == "https":
            raise ValueError(f"--proxy {shown}: a proxy spoken to over TLS is not supported; give it as "
                             "http://host:port (HTTPS pages are still tunnelled to the site with CONNECT)")
        if parts.scheme.lower() != "http":
            raise ValueError(f"--proxy {shown}: not an http:// proxy URL")
        try:
            port = parts.port
        except ValueError:
            raise ValueError(f"--proxy {shown}: bad port") from None
        if not parts.hostname or port == 0:
            raise ValueError(f"--proxy {shown}: no proxy host and port (http://host:port)")
        if parts.path not in ("", "/") or parts.query or parts.fragment:
            raise ValueError(f"--proxy {shown}: a proxy URL has no path or query (http://host:port)")
        return cls(url=proxy.rstrip("/"), shown=shown, bypass=tuple(_parse_bypass(e) for e in entries))

    def applies_to(self, url: str) -> bool:
        """True if a request for ``url`` (absolute http(s)) goes through the proxy, False if its
        host is one ``no_proxy`` names (or the URL has no host)."""
        parts = urlsplit(url)
        host = (parts.hostname or "").rstrip(".")
        if not host:
            return False
        try:
            port = parts.port or _DEFAULT_PORTS.get(parts.scheme.lower(), 80)
        except ValueError:
            return True  # a bad port fails in the fetch itself, wherever it goes
        return not any(entry.matches(host, port) for entry in self.bypass)

    def proxies_for(self, url: str) -> dict[str, str] | None:
        """requests' ``proxies`` for a request of ``url``: the proxy for both schemes, or None
        (direct) when :meth:`applies_to` says no."""
        return {"http": self.url, "https": self.url} if self.applies_to(url) else None

    def mask(self, text: str) -> str:
        """``text`` with the proxy URL's password (plain or percent-encoded) replaced by ``***``:
        for error messages that might quote the proxy URL."""
        password = urlsplit(self.url).password
        if not password:
            return text
        for form in {password, unquote(password), quote(unquote(password), safe="")}:
            text = text.replace(form, "***")
        return text


def masked(url: str) -> str:
    """``url``'s scheme and authority (no path) with its password replaced by ``***``, the user
    name kept: ``http://crawler:***@proxy:3128``. For showing a proxy setting (messages, logs,
    ``gridcrawl config show``); never raises."""
    parts = urlsplit(url)
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, _, hostport = netloc.rpartition("@")
        user = userinfo.split(":", 1)[0]
        netloc = f"{user}:***@{hostport}" if ":" in userinfo else f"{user}@{hostport}"
    return f"{parts.scheme}://{netloc}"


_PROXY_ERROR_RE = re.compile(r'(?:^|;)\s*error\s*=\s*("?)([A-Za-z0-9_.\-]+)\1', re.I)


def proxy_error(headers: Mapping[str, str]) -> str | None:
    """The error a proxy reports for a response it made itself because it could not get the
    site's (a 5xx with no site behind it), from the response ``headers`` (lower-case names):
    RFC 9209's ``Proxy-Status: NAME; error=TYPE`` (``dns_error``, ``connection_refused``,
    ``destination_not_found`` ...) or Squid's ``X-Squid-Error: ERR_CONNECT_FAIL 111``. None
    when neither says so (the response is the site's own)."""
    status = headers.get("proxy-status", "")
    for member in status.split(","):
        match = _PROXY_ERROR_RE.search(member)
        if match:
            return f"error={match.group(2)}"
    squid = headers.get("x-squid-error", "").strip()
    return squid[:100] or None


#: The environment variables curl, wget and requests take a proxy from, in the order looked at.
ENVIRONMENT_PROXIES = ("https_proxy", "HTTPS_PROXY", "http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY")


def unused_environment_proxy(proxy: str, environ: Mapping[str, str]) -> str | None:
    """A warning for a program whose fetches connect directly (``proxy``, the setting, is empty)
    while ``environ`` names a proxy (:data:`ENVIRONMENT_PROXIES`): on a desktop whose other tools
    reach the web through it, every page would fail as a connection error. Returns the one-line
    warning (the variable's value with its password masked, and the option to use), or None.
    The programs log it at start; the setting is never taken from these variables."""
    if proxy:
        return None
    for name in ENVIRONMENT_PROXIES:
        value = environ.get(name, "").strip()
        if value:
            return (f"the environment sets {name}={masked(value if '://' in value else 'http://' + value)}, "
                    f"which gridcrawl does not read: to fetch through that proxy, give it as --proxy "
                    f"(or GRIDCRAWL_PROXY) and the hosts reached directly as --no-proxy")
    return None


__all__ = ["ProxyRoute", "masked", "proxy_error", "unused_environment_proxy", "ENVIRONMENT_PROXIES"]
