"""The executor's SSRF guard: a crawled page must not make an executor fetch an address inside the
network it runs in (server-side request forgery).

Executors run on an organisation's own desktops. A link (or a redirect) to ``http://10.0.0.5/``,
``http://169.254.169.254/`` (a cloud's metadata service), ``http://localhost:8080/admin`` or
``http://[::ffff:127.0.0.1]/`` would otherwise be fetched from inside that network and its answer
stored in the crawl. This module owns the decision which addresses an executor may connect to:

* :func:`classify` — a pure function: the reason an IP address is refused (unspecified,
  loopback, private, shared/CGNAT, link-local, multicast, reserved, site-local, or otherwise not
  globally routable), or None for a public address. IPv4-mapped (``::ffff:a.b.c.d``), NAT64
  (``64:ff9b::/96``) and 6to4 (``2002::/16``) IPv6 addresses are judged by the IPv4 address
  they carry.
* :func:`parse_host` — a pure parser of the numeric host forms that ``inet_aton`` (and so the
  system resolver) accepts: ``2130706433``, ``0x7f000001``, ``0177.0.0.1``, ``127.1`` all mean
  127.0.0.1.
* :class:`SSRFGuard` — ``check(url)``, the fetcher's hop check (called before the first request
  and before every redirect hop): only ``http``/``https``; the host is resolved
  (``getaddrinfo``, every address it returns) and refused if any address is refused by
  :func:`classify` and not inside one of the allowed networks (``--allow-private CIDR``). A host
  that does not resolve is refused too (fail closed: the fetch would resolve it again), as the
  connection error it is (``ErrorKind.CONNECTION``: retried, as any DNS failure), not as a
  blocked address — except when the URL goes through the organisation's HTTP proxy
  (``--proxy``): desktops behind one often cannot resolve outside names at all, and the proxy
  resolves them, so a name that does not resolve here is left to the proxy. A name that does
  resolve here is judged by its addresses, proxy or not.

What it does not cover: the fetch resolves the host again when it connects, so a DNS server that
answers a public address to the guard and a private one a moment later (DNS rebinding) is not
stopped here; see docs/security.md.

Sources: RFC 1918 (private IPv4), RFC 6598 (shared address space), RFC 3927 (IPv4 link-local),
RFC 4193 (unique local IPv6), RFC 4291 §2.5.5.2 (IPv4-mapped IPv6), RFC 6052 (NAT64 prefix),
RFC 3056 (6to4), RFC 6890 (special-purpose address registries), OWASP SSRF Prevention Cheat
Sheet; ``inet_aton(3)`` for the numeric host forms.
"""

from __future__ import annotations

import collections
import ipaddress
import logging
import socket
import threading
import time
from typing import TYPE_CHECKING, Callable, Iterable
from urllib.parse import urlsplit

if TYPE_CHECKING:  # the fetcher's libraries are loaded by the executor, not by `gridcrawl run` reading this
    from gridcrawl.executor.fetch import HopRefusal
    from gridcrawl.executor.proxy import ProxyRoute

log = logging.getLogger("gridcrawl.executor.ssrf")

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

ALLOWED_SCHEMES = ("http", "https")
_SHARED = ipaddress.IPv4Network("100.64.0.0/10")  # RFC 6598 carrier-grade NAT
_NAT64 = (ipaddress.IPv6Network("64:ff9b::/96"), ipaddress.IPv6Network("64:ff9b:1::/48"))  # RFC 6052, 8215
_THIS_NETWORK = ipaddress.IPv4Network("0.0.0.0/8")  # RFC 1122: "this host on this network"
# RFC 6890 special-purpose blocks that are not globally reachable, written out so the verdict does
# not depend on the Python version's ipaddress tables (3.11 counts 192.0.0.8 as global).
_NOT_GLOBAL = tuple(ipaddress.ip_network(n) for n in (
    "192.0.0.0/24", "192.0.2.0/24", "192.88.99.0/24", "198.18.0.0/15", "198.51.100.0/24", "203.0.113.0/24",
    "100::/64", "2001::/23", "2001:db8::/32", "3fff::/20", "5f00::/16"))


def _embedded_ipv4(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address carries (IPv4-mapped, NAT64, 6to4), or None."""
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if any(address in net for net in _NAT64):
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    if address.sixtofour is not None:
        return address.sixtofour
    return None


def _parse_part(text: str) -> int:
    if not text:
        raise ValueError("empty part")
    if text[:2].lower() == "0x":
        digits = text[2:]
        return int(digits, 16) if digits else 0  # "0x" alone is 0 to inet_aton
    if len(text) > 1 and text[0] == "0":
        return int(text[1:], 8)
    if not text.isdigit():
        raise ValueError("not a number")
    return int(text, 10)


def parse_host(host: str) -> IPAddress | None:
    """The IP address a URL host names without DNS, or None for a host name.

    Accepts IPv6 literals (with or without brackets, a ``%zone`` is dropped), dotted IPv4 and
    every ``inet_aton`` form: 1 to 4 parts, each decimal, octal (leading ``0``) or hexadecimal
    (``0x``), the last part filling the remaining bytes (``127.1`` = 127.0.0.1, ``2130706433`` =
    ``0x7f000001`` = 127.0.0.1). A numeric form out of range (``256.1.1.1``) is not an address
    (None). Pure: no DNS, no I/O.
    """
    if not isinstance(host, str) or not host:
        return None
    text = host.strip()
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    if ":" in text:
        try:
            return ipaddress.IPv6Address(text.split("%", 1)[0])
        except ValueError:
            return None
    text = text[:-1] if text.endswith(".") and text.count(".") <= 4 and text[:-1] else text
    parts = text.split(".")
    if not 1 <= len(parts) <= 4:
        return None
    try:
        values = [_parse_part(p) for p in parts]
    except ValueError:
        return None
    *head, last = values
    if any(v > 255 for v in head) or last >= 256 ** (4 - len(head)):
        return None
    number = 0
    for v in head:
        number = number * 256 + v
    number = number * 256 ** (4 - len(head)) + last
    return ipaddress.IPv4Address(number)


def classify(address: IPAddress | str | int) -> str | None:
    """Why an executor must not connect to ``address``, or None if it is a public address.

    ``address``: an ``ipaddress`` object, an integer (IPv4 when below 2^32), or any string
    :func:`parse_host` reads (``"10.0.0.1"``, ``"::ffff:127.0.0.1"``, ``"0x7f000001"``).
    Returns one of ``"unspecified address"``, ``"loopback address"``, ``"private address"``,
    ``"shared address space (RFC 6598)"``, ``"link-local address"``, ``"multicast address"``,
    ``"reserved address"``, ``"site-local address"``, ``"not a globally routable address"``,
    prefixed ``"IPv4-mapped "`` / ``"NAT64 "`` / ``"6to4 "`` when it was found in the IPv4
    address an IPv6 address carries. Raises ``ValueError`` if ``address`` is not an IP address.
    Pure: no DNS, no I/O.
    """
    if isinstance(address, str):
        parsed = parse_host(address)
        if parsed is None:
            raise ValueError(f"{address!r} is not an IP address")
        address = parsed
    elif isinstance(address, int) and not isinstance(address, bool):
        address = ipaddress.ip_address(address)
    if not isinstance(address, (ipaddress.IPv4Address, ipaddress.IPv6Address)):
        raise ValueError(f"{address!r} is not an IP address")
    if isinstance(address, ipaddress.IPv6Address):
        if address.scope_id is not None:
            address = ipaddress.IPv6Address(str(address).split("%", 1)[0])
        inner = _embedded_ipv4(address)
        if inner is not None:
            reason = classify(inner)
            if reason is None:
                return None
            kind = "IPv4-mapped" if address.ipv4_mapped is not None else (
                "6to4" if address.sixtofour is not None else "NAT64")
            return f"{kind} {reason}"
    if address.is_unspecified or (isinstance(address, ipaddress.IPv4Address) and address in _THIS_NETWORK):
        return "unspecified address"
    if address.is_loopback:
        return "loopback address"
    if address.is_link_local:
        return "link-local address"
    if address.is_multicast:
        return "multicast address"
    if isinstance(address, ipaddress.IPv4Address) and address in _SHARED:
        return "shared address space (RFC 6598)"
    if isinstance(address, ipaddress.IPv6Address) and address.is_site_local:
        return "site-local address"
    if address.is_reserved:
        return "reserved address"
    if address.is_private:
        if any(address in ipaddress.ip_network(n) for n in
               ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "fc00::/7")):
            return "private address"
        return "not a globally routable address"
    if not address.is_global or any(address.version == n.version and address in n for n in _NOT_GLOBAL):
        return "not a globally routable address"
    return None


def parse_networks(cidrs: Iterable[str]) -> list[IPNetwork]:
    """``--allow-private`` values as networks (``"127.0.0.0/8"``, ``"10.1.2.3"`` = /32,
    ``"::1/128"``); host bits are allowed, and a value may hold several, comma-separated
    (``"10.0.0.0/8,192.168.0.0/16"``, as the configuration file, the environment and
    ``--no-proxy`` take them). Raises ``ValueError`` naming a bad value."""
    networks = []
    for value in cidrs:
        for cidr in str(value).split(","):
            try:
                networks.append(ipaddress.ip_network(cidr.strip(), strict=False))
            except ValueError:
                raise ValueError(f"{cidr.strip()!r} is not an IP network (expected CIDR such as 127.0.0.0/8)") from None
    return networks


def _port(parts) -> int:
    port = parts.port  # raises ValueError on a bad port
    return port if port is not None else (443 if parts.scheme.lower() == "https" else 80)


Resolver = Callable[[str, int], list[str]]

#: Seconds :class:`SSRFGuard` keeps a host's addresses before asking the resolver again.
DNS_CACHE_SECONDS = 60.0
#: Host names :class:`SSRFGuard` keeps addresses of, at most (Scrapy's ``DNSCACHE_SIZE``).
DNS_CACHE_SIZE = 10_000


def system_resolver(host: str, port: int) -> list[str]:
    """Every address the system resolver gives for ``host`` (TCP), as strings; raises
    ``OSError`` (``socket.gaierror``) when it does not resolve. A name under ``.invalid`` gets
    that answer at once, without a DNS query, as RFC 6761 §6.4 asks of resolution libraries
    (glibc asks the DNS server)."""
    if host.rstrip(".").rpartition(".")[2].lower() == "invalid":
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known (.invalid never resolves: RFC 6761 §6.4)")
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
    return [info[4][0] for info in infos]


def suggested_network(address: IPAddress) -> str:
    """The ``--allow-private`` value that would let ``address`` through, for error messages: the
    loopback or RFC 1918 network it lies in (``127.0.0.0/8``, ``10.0.0.0/8``, ``172.16.0.0/12``,
    ``192.168.0.0/16``), else the address alone (``/32``, ``/128``)."""
    for network in ("127.0.0.0/8", "10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"):
        net = ipaddress.ip_network(network)
        if address.version == net.version and address in net:
            return network
    return f"{address}/{address.max_prefixlen}"


def _dns_failure(reason: str) -> HopRefusal:
    """A hop refusal of kind CONNECTION (a DNS failure) saying ``reason``."""
    from gridcrawl.executor.fetch import ErrorKind, HopRefusal
    return HopRefusal(ErrorKind.CONNECTION, reason)


class SSRFGuard:
    """The executor's hop check: ``SSRFGuard(allow=["127.0.0.0/8"]).check(url) -> str | HopRefusal | None``.

    ``allow``: CIDRs that are fetched even though :func:`classify` refuses them (the tests'
    loopback sites, an intranet the crawl is meant for). ``resolver(host, port) -> [address]``
    defaults to the system resolver. ``proxy``: the fetcher's HTTP proxy route, if any; a host
    that does not resolve here but goes through the proxy is allowed (the proxy resolves it).
    The first refused address is logged once as a WARNING naming the option to use (a grid on
    a private network otherwise crawls nothing silently).

    A host's addresses are kept :data:`DNS_CACHE_SECONDS` (at most :data:`DNS_CACHE_SIZE`
    hosts, the least recently used dropped first), as Scrapy's DNS cache and Heritrix's
    do: without it every page cost a look-up (A and AAAA queries to the desktop's DNS server,
    553 for a crawl of 529 pages). A name that does not resolve is kept as long when the URL
    goes through the proxy (allowed either way), and not kept otherwise (the manager retries
    the DNS failure, which must ask again). A stale entry lets no rebinding through on a direct
    fetch: the connected address is checked on every new connection (:meth:`check_peer`).
    ``clock`` (seconds, monotonic) is for the tests. Thread-safe. Raises ``ValueError`` on a bad
    CIDR.
    """

    def __init__(self, allow: Iterable[str] = (), *, resolver: Resolver | None = None,
                 proxy: ProxyRoute | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.allow = parse_networks(allow)
        self.resolver = resolver or system_resolver
        self.proxy = proxy
        self.warned = False
        self.clock = clock
        self._cache: collections.OrderedDict[str, tuple[float, list[str] | None]] = collections.OrderedDict()
        self._lock = threading.Lock()

    def resolve(self, host: str, port: int, keep_failure: bool = False) -> list[str]:
        """``host``'s addresses from the cache, else from ``resolver`` (then kept for
        :data:`DNS_CACHE_SECONDS`); raises what the resolver raised (``OSError`` ...). With
        ``keep_failure`` (a URL the proxy resolves) a failure is kept too, and a kept one is
        raised as ``socket.gaierror`` without asking; without it a kept failure is asked again."""
        key = host.lower()
        now = self.clock()
        with self._lock:
            hit = self._cache.get(key)
            if hit is not None and hit[0] > now and (hit[1] is not None or keep_failure):
                self._cache.move_to_end(key)
                if hit[1] is None:
                    raise socket.gaierror(socket.EAI_NONAME, f"{host} did not resolve a moment ago")
                return hit[1]
        try:
            found = list(self.resolver(host, port))
        except (OSError, UnicodeError, ValueError):
            if keep_failure:
                self._keep(key, now, None)
            raise
        self._keep(key, now, found)
        return found

    def _keep(self, key: str, now: float, addresses: list[str] | None) -> None:
        """Cache ``addresses`` (None: did not resolve) of host ``key`` from ``now``."""
        with self._lock:
            self._cache[key] = (now + DNS_CACHE_SECONDS, addresses)
            self._cache.move_to_end(key)
            while len(self._cache) > DNS_CACHE_SIZE:
                self._cache.popitem(last=False)

    def allowed(self, address: IPAddress) -> bool:
        """True if ``address`` (or the IPv4 address it carries) is inside an allowed network."""
        candidates = [address]
        if isinstance(address, ipaddress.IPv6Address):
            inner = _embedded_ipv4(address)
            if inner is not None:
                candidates.append(inner)
        return any(a.version == net.version and a in net for a in candidates for net in self.allow)

    def check_address(self, address: IPAddress) -> str | None:
        """The reason ``address`` is refused, or None (public, or inside an allowed network)."""
        reason = classify(address)
        if reason is None or self.allowed(address):
            return None
        return reason

    def check_peer(self, address: str) -> str | None:
        """The reason a connection to IP ``address`` (text, as ``getpeername`` gives it) must be
        closed, or None. The fetcher calls it on every new connection: the host name was checked
        by :meth:`check`, but the connection resolved it again (DNS rebinding)."""
        parsed = parse_host(address)
        reason = self.check_address(parsed) if parsed is not None else f"unparseable address {address!r}"
        if reason is None:
            return None
        return (f"connected to {address}, refused by the SSRF guard: {reason} (the host name resolved to "
                "another address when checked: DNS rebinding?)")

    def check(self, url: str) -> str | HopRefusal | None:
        """The reason the executor must not request ``url``, or None to go ahead.

        Refuses schemes other than http/https, URLs without a host, and hosts any of whose
        addresses is refused (see :meth:`check_address`), with a string (the fetch ends
        ``blocked``). A host that does not resolve, or resolves to no address, is refused with a
        :class:`~gridcrawl.executor.fetch.HopRefusal` of kind ``connection`` (a DNS failure:
        the manager retries it; nothing is requested meanwhile), unless the URL goes through
        the proxy, which resolves it (allowed). Never raises.
        """
        try:
            parts = urlsplit(url)
            scheme = parts.scheme.lower()
            if scheme not in ALLOWED_SCHEMES:
                return f"scheme {parts.scheme!r} is not allowed (only http and https)"
            host = parts.hostname
            if not host:
                return "URL has no host"
            port = _port(parts)
        except ValueError as exc:
            return f"unparseable URL: {exc}"
        addresses: list[IPAddress] = []
        literal = parse_host(host)
        if literal is not None:
            addresses.append(literal)
        proxied = self.proxy is not None and self.proxy.applies_to(url)
        try:
            for text in self.resolve(host, port, keep_failure=proxied):
                parsed = parse_host(text)
                if parsed is not None:
                    addresses.append(parsed)
        except (OSError, UnicodeError, ValueError) as exc:
            if literal is None:
                if proxied:
                    return None  # the proxy resolves outside names the desktop cannot
                return _dns_failure(f"cannot resolve host {host!r} ({exc})")
        if not addresses:
            return _dns_failure(f"host {host!r} resolves to no IP address")
        for address in addresses:
            reason = self.check_address(address)
            if reason is not None:
                shown = host if str(address) == host else f"{host} ({address})"
                refusal = (f"{shown} is refused by the SSRF guard: {reason} — allow it with --allow-private "
                           f"{suggested_network(address)} (gridcrawl run, gridcrawl-executor)")
                if not self.warned:
                    self.warned = True
                    log.warning("%s (logged once; every such page fails as 'blocked')", refusal)
                return refusal
        return None

    __call__ = check


__all__ = ["suggested_network", "classify", "parse_host", "parse_networks", "SSRFGuard", "system_resolver", "ALLOWED_SCHEMES",
           "DNS_CACHE_SECONDS", "DNS_CACHE_SIZE"]
