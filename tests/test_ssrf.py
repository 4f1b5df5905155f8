"""The executor's SSRF guard: the address table as a pure function (any addresses: no traffic),
the guard's URL checks with a fake resolver (no DNS), and its live behaviour on loopback only —
the guard allows 127.0.0.2, a page there links and redirects to 127.0.0.3, where a listener
counts connections: it must count none. No test here sends a packet outside 127.0.0.0/8."""

from __future__ import annotations

import socket
import threading

import pytest

from gridcrawl.executor.fetch import ErrorKind, Fetcher, HopRefusal
from gridcrawl.executor.ssrf import SSRFGuard, classify, parse_host, parse_networks, system_resolver
from grid import Grid
from sites import Site, SiteServer, redirect

# ----------------------------------------------------------------------------------------------
# The table of addresses (pure)

REFUSED = [
    # IPv4
    ("0.0.0.0", "unspecified"), ("0.1.2.3", "unspecified"),
    ("127.0.0.1", "loopback"), ("127.255.255.254", "loopback"),
    ("10.0.0.1", "private"), ("172.16.0.1", "private"), ("172.31.255.255", "private"), ("192.168.0.1", "private"),
    ("100.64.0.1", "shared address space"), ("100.127.255.255", "shared address space"),
    ("169.254.169.254", "link-local"), ("169.254.0.1", "link-local"),
    ("224.0.0.1", "multicast"), ("239.255.255.250", "multicast"),
    ("240.0.0.1", "reserved"), ("255.255.255.255", "reserved"),
    ("192.0.2.1", "not a globally routable"), ("198.18.0.1", "not a globally routable"),
    ("198.51.100.7", "not a globally routable"), ("203.0.113.9", "not a globally routable"),
    ("192.0.0.8", "not a globally routable"),
    # IPv4 in the forms inet_aton (and so the system resolver) accepts
    ("2130706433", "loopback"), ("0x7f000001", "loopback"), ("0X7F000001", "loopback"),
    ("017700000001", "loopback"), ("0177.0.0.1", "loopback"), ("127.1", "loopback"), ("0x7f.1", "loopback"),
    ("0x7f.0.0.0x1", "loopback"), ("167772161", "private"), ("0xa9fea9fe", "link-local"), ("3232235521", "private"),
    # IPv6
    ("::", "unspecified"), ("::1", "loopback"), ("fe80::1", "link-local"), ("fe80::1%eth0", "link-local"),
    ("fc00::1", "private"), ("fd12:3456::1", "private"), ("fec0::1", "site-local"),
    ("ff02::1", "multicast"), ("ff05::2", "multicast"), ("2001:db8::1", "not a globally routable"),
    ("::127.0.0.1", "reserved"),
    # IPv6 carrying an IPv4 address
    ("::ffff:127.0.0.1", "IPv4-mapped loopback"), ("::ffff:7f00:1", "IPv4-mapped loopback"),
    ("::ffff:10.1.1.1", "IPv4-mapped private"), ("::ffff:169.254.169.254", "IPv4-mapped link-local"),
    ("[::ffff:192.168.1.1]", "IPv4-mapped private"),
    ("64:ff9b::10.0.0.1", "NAT64 private"), ("64:ff9b::127.0.0.1", "NAT64 loopback"),
    ("2002:7f00:1::", "6to4 loopback"), ("2002:a00:1::1", "6to4 private"),
]

PUBLIC = ["8.8.8.8", "1.1.1.1", "93.184.216.34", "172.32.0.1", "100.128.0.1", "223.255.255.255", "134744072",
          "2606:4700:4700::1111", "2a00:1450:4001::200e", "::ffff:8.8.8.8", "64:ff9b::8.8.8.8", "2002:808:808::1"]


@pytest.mark.parametrize("address, reason", REFUSED)
def test_classify_refuses(address, reason):
    result = classify(address)
    assert result is not None and result.startswith(reason), (address, result)


@pytest.mark.parametrize("address", PUBLIC)
def test_classify_allows_public_addresses(address):
    assert classify(address) is None


@pytest.mark.parametrize("host", ["256.1.1.1", "1.2.3.4.5", "4294967296", "0x1.0x1.0x1.0x100", "08.1.1.1",
                                  "example.com", "127.0.0.1.example.com", "", "[::1", "::zz"])
def test_parse_host_is_not_fooled_by_names_or_out_of_range_numbers(host):
    assert parse_host(host) is None
    with pytest.raises(ValueError):
        classify(host)


def test_classify_takes_integers_and_objects():
    import ipaddress
    assert classify(2130706433) == "loopback address"
    assert classify(ipaddress.ip_address("10.9.8.7")) == "private address"
    assert classify(ipaddress.ip_address("8.8.4.4")) is None


def test_parse_networks_refuses_bad_cidrs():
    assert [str(n) for n in parse_networks(["127.0.0.2", "10.0.0.1/8", "::1"])] == ["127.0.0.2/32", "10.0.0.0/8",
                                                                                   "::1/128"]
    with pytest.raises(ValueError, match="not an IP network"):
        parse_networks(["10.0.0.0/33"])


def test_one_allow_private_value_may_hold_several_networks_as_the_configuration_file_does():
    """``--allow-private 10.0.0.0/8,192.168.0.0/16`` was "not an IP network" on the command line,
    where the configuration file and GRIDCRAWL_ALLOW_PRIVATE took the same list."""
    assert [str(n) for n in parse_networks(["10.0.0.0/8, 192.168.0.0/16", "::1"])] == ["10.0.0.0/8", "192.168.0.0/16",
                                                                                      "::1/128"]
    with pytest.raises(ValueError, match="'x' is not an IP network"):
        parse_networks(["10.0.0.0/8,x"])


# ----------------------------------------------------------------------------------------------
# The guard on URLs, with a fake resolver (no DNS query leaves this process)

def fake_resolver(table: dict[str, list[str]]):
    def resolve(host: str, port: int) -> list[str]:
        literal = parse_host(host)
        if literal is not None:
            return [str(literal)]
        if host not in table:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return table[host]
    return resolve


DNS = {"public.test": ["93.184.216.34"], "intranet.test": ["10.1.2.3"], "both.test": ["93.184.216.34", "10.1.2.3"],
       "metadata.test": ["169.254.169.254"], "v6.test": ["2606:4700::1", "::1"], "site.test": ["127.0.0.2"]}


@pytest.mark.parametrize("url, needle", [
    ("http://intranet.test/", "private"),
    ("http://both.test/", "private"),          # any refused address refuses the host
    ("http://metadata.test/latest/meta-data/", "link-local"),
    ("http://v6.test/", "loopback"),
    ("http://127.0.0.1:8080/admin", "loopback"),
    ("http://2130706433/", "loopback"),
    ("http://0x7f000001/", "loopback"),
    ("http://[::ffff:127.0.0.1]/", "IPv4-mapped loopback"),
    ("http://[::1]:9000/", "loopback"),
    ("http://0/", "unspecified"),
    ("https://10.0.0.1/", "private"),
    ("ftp://public.test/", "scheme"),
    ("file:///etc/passwd", "scheme"),
    ("gopher://public.test/", "scheme"),
    ("http:///nohost", "no host"),
    ("http://public.test:99999/", "unparseable"),
])
def test_guard_refuses(url, needle):
    reason = SSRFGuard(resolver=fake_resolver(DNS)).check(url)
    assert reason is not None and needle in reason, reason


def test_the_guard_keeps_a_hosts_addresses_for_a_minute_and_a_proxied_failure_as_long():
    """One look-up per host a minute, not one per page; a failure is asked again at once
    unless the proxy resolves the URL; the least recently used host goes first when full."""
    from gridcrawl.executor import ssrf
    from gridcrawl.executor.proxy import ProxyRoute
    asked: list[str] = []
    table = dict(DNS)

    def counting(host: str, port: int) -> list[str]:
        asked.append(host)
        return fake_resolver(table)(host, port)
    now = [1000.0]
    guard = SSRFGuard(resolver=counting, clock=lambda: now[0])
    for path in range(50):
        assert guard.check(f"http://public.test/{path}") is None
        assert "private" in guard.check(f"http://INTRANET.test/{path}")
    assert asked == ["public.test", "intranet.test"]
    table["public.test"] = ["10.9.9.9"]  # the host moves: seen once the entry is a minute old
    now[0] += ssrf.DNS_CACHE_SECONDS - 1
    assert guard.check("http://public.test/") is None and len(asked) == 2
    now[0] += 2
    assert "private" in guard.check("http://public.test/") and asked[-1] == "public.test"

    for _ in range(3):  # a DNS failure is not kept: the manager's retry must ask again
        assert isinstance(guard.check("http://unknown.test/"), HopRefusal)
    assert asked.count("unknown.test") == 3
    route = ProxyRoute.parse("http://127.0.0.1:3128", "outside.test:8080")
    proxied = SSRFGuard(resolver=counting, proxy=route, clock=lambda: now[0])
    for _ in range(3):  # behind the proxy the same failure is "allowed: the proxy resolves it", kept
        assert proxied.check("http://outside.test/") is None
    assert asked.count("outside.test") == 1
    direct = proxied.check("http://outside.test:8080/")  # no_proxy: fetched directly, so asked again
    assert isinstance(direct, HopRefusal) and asked.count("outside.test") == 2

    small = SSRFGuard(resolver=counting, clock=lambda: now[0])
    hosts = [f"h{i}.public.test" for i in range(ssrf.DNS_CACHE_SIZE + 1)]
    table.update({h: ["93.184.216.34"] for h in hosts})
    for host in hosts:
        small.resolve(host, 80)
    before = len(asked)
    small.resolve(hosts[-1], 80)  # kept
    small.resolve(hosts[0], 80)  # the least recently used: dropped, asked again
    assert asked[before:] == [hosts[0]]


def test_an_invalid_name_is_answered_at_once_without_asking_the_dns_server(monkeypatch):
    """RFC 6761 §6.4: ``.invalid`` names never resolve, and glibc would send the query to the
    machine's DNS server (off this host); the resolver answers itself."""
    asked = []
    real = socket.getaddrinfo
    monkeypatch.setattr(socket, "getaddrinfo", lambda host, *a, **k: asked.append(host) or real(host, *a, **k))
    for host in ("docs.intranet.invalid", "INVALID.", "a.b.Invalid"):
        with pytest.raises(socket.gaierror, match="RFC 6761"):
            system_resolver(host, 80)
    assert asked == []
    assert system_resolver("127.0.0.1", 80) == ["127.0.0.1"] and asked == ["127.0.0.1"]
    refusal = SSRFGuard().check("http://docs.intranet.invalid/")
    assert isinstance(refusal, HopRefusal) and refusal.kind == ErrorKind.CONNECTION
    assert "cannot resolve host 'docs.intranet.invalid'" in refusal.reason and asked == ["127.0.0.1"]


def test_a_host_that_does_not_resolve_is_refused_as_a_connection_error():
    """Fail closed (the fetch would resolve the name again), but as the DNS failure it is: a
    ``connection`` refusal, which the manager retries, not ``blocked``, which it never does and
    which told the user to widen ``--allow-private``."""
    guard = SSRFGuard(resolver=fake_resolver(DNS))
    refusal = guard.check("http://unknown.test/page")
    assert isinstance(refusal, HopRefusal) and refusal.kind == ErrorKind.CONNECTION, refusal
    assert "cannot resolve host 'unknown.test'" in refusal.reason and "SSRF" not in refusal.reason
    empty = SSRFGuard(resolver=lambda host, port: []).check("http://nothing.test/")
    assert isinstance(empty, HopRefusal) and empty.kind == ErrorKind.CONNECTION
    assert "resolves to no IP address" in empty.reason
    fetcher = Fetcher(user_agent="gridcrawl-test", deadline=5, hop_check=guard.check)
    try:
        result = fetcher.fetch("http://unknown.test/page")
    finally:
        fetcher.close()
    assert result.error_kind == ErrorKind.CONNECTION and "cannot resolve" in result.error
    assert result.status is None and result.body is None  # nothing was requested
    from gridcrawl.manager.core import ManagerCore
    from gridcrawl.protocol import PageResult
    assert ManagerCore._retryable(PageResult(url="http://unknown.test/page", error_kind=result.error_kind.value))
    assert not ManagerCore._retryable(PageResult(url="http://intranet.test/", error_kind=ErrorKind.BLOCKED.value))


def test_guard_allows_public_hosts_and_allowed_networks():
    guard = SSRFGuard(["127.0.0.2/32", "10.0.0.0/8"], resolver=fake_resolver(DNS))
    assert guard.check("http://public.test/page") is None
    assert guard.check("https://public.test:8443/") is None
    assert guard.check("http://site.test/") is None
    assert guard.check("http://127.0.0.2:8080/x") is None
    assert guard.check("http://[::ffff:127.0.0.2]/") is None     # the mapped form of an allowed address
    assert guard.check("http://intranet.test/") is None
    assert guard.check("http://both.test/") is None
    assert "loopback" in guard.check("http://127.0.0.3/")
    assert "link-local" in guard.check("http://metadata.test/")


# ----------------------------------------------------------------------------------------------
# Live, on loopback only: 127.0.0.2 allowed, 127.0.0.3 refused without a connection

class CountingListener:
    """A TCP listener on ``host`` that counts the connections it accepts (and answers nothing)."""

    def __init__(self, host: str) -> None:
        self.sock = socket.socket()
        self.sock.bind((host, 0))
        self.sock.listen(16)
        self.sock.settimeout(0.1)
        self.port = self.sock.getsockname()[1]
        self.connections = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.connections += 1
            conn.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(2)
        self.sock.close()


@pytest.fixture
def trap():
    listener = CountingListener("127.0.0.3")
    yield listener
    listener.close()


def test_the_listener_counts_connections(trap):
    """The trap works: a direct connection is counted (so a count of 0 below means something)."""
    socket.create_connection(("127.0.0.3", trap.port), timeout=5).close()
    for _ in range(50):
        if trap.connections:
            break
        threading.Event().wait(0.05)
    assert trap.connections == 1


def test_fetcher_with_guard_never_connects_to_a_refused_address(trap):
    target = f"http://127.0.0.3:{trap.port}/secret"
    site = Site(pages={"/": f'<a href="{target}">internal</a>'.encode()}, extra={"/jump": redirect(target, 302)})
    with SiteServer(site, host="127.0.0.2") as server:
        guard = SSRFGuard(["127.0.0.2/32"])
        fetcher = Fetcher(user_agent="gridcrawl-test", deadline=5, hop_check=guard.check)
        try:
            page = fetcher.fetch(server.url("/"))
            direct = fetcher.fetch(target)
            jump = fetcher.fetch(server.url("/jump"))
        finally:
            fetcher.close()
    assert page.ok and target.encode() in page.body
    assert direct.error_kind == ErrorKind.BLOCKED and "loopback" in direct.error
    assert jump.error_kind == ErrorKind.BLOCKED and jump.redirects == [target]
    assert trap.connections == 0


@pytest.mark.e2e
def test_grid_thread_to_a_refused_address_is_blocked_without_a_connection(tmp_path, trap):
    target = f"http://127.0.0.3:{trap.port}/secret"
    site = Site(pages={"/": f'<a href="{target}">internal</a> <a href="/jump">jump</a>'.encode()},
                extra={"/jump": redirect(f"http://127.0.0.3:{trap.port}/other", 302)})
    grid = Grid(tmp_path)
    with SiteServer(site, host="127.0.0.2") as server:
        try:
            grid.start_manager()
            grid.start_executor("ex1", "--threads", "2", "--ignore-robots", allow_private="127.0.0.2/32")
            client = grid.start_client(server.url("/"), "--allow-domain", "127.0.0.3")
            assert client.wait(timeout=60) == 0, grid.log("client.log")
        finally:
            grid.stop()
    rows = dict(grid.query("crawl", "SELECT url, error_kind FROM visited_url"))
    assert rows[target] == "blocked", rows
    assert rows[server.url("/jump")] == "blocked", rows
    assert rows[server.url("/")] is None
    assert trap.connections == 0


def test_gridcrawl_run_allows_exactly_the_seeds_private_addresses():
    from gridcrawl.cli import _private_networks
    networks = _private_networks(["http://127.0.0.1:8088/index.html", "http://[::1]:9000/", "http://93.184.216.34/",
                                  "10.1.2.3", "http://127.0.0.1:9/other"], ["192.168.0.0/16"])
    assert networks == ["192.168.0.0/16", "10.1.2.3/32", "127.0.0.1/32", "::1/128"]
    guard = SSRFGuard(networks, resolver=fake_resolver(DNS))
    assert guard.check("http://127.0.0.1:8088/x") is None
    assert guard.check("http://127.0.0.2:8088/x") is not None  # only the seed's own address
    # many seed hosts (a --seeds-file): adjacent addresses merge, and nothing else joins them
    seeds = [f"http://127.0.{n // 256}.{n % 256}/" for n in range(4, 12)] + ["http://127.0.0.13/"]
    assert _private_networks(seeds, []) == ["127.0.0.4/30", "127.0.0.8/30", "127.0.0.13/32"]


def test_dns_rebinding_is_caught_at_the_connected_address():
    """The guard's lookup of ``localhost`` says a public address (a rebinding DNS server's first
    answer; here a fake resolver), but the connection resolves the name again and reaches
    127.0.0.1. Without the peer check the request gets through (the hole); with it the fetch is
    BLOCKED before a byte is sent. ``localhost`` resolves from /etc/hosts: no DNS query."""
    with SiteServer(Site(pages={"/secret": b"<html>internal</html>"}), host="127.0.0.1") as server:
        url = f"http://localhost:{server.port}/secret"
        guard = SSRFGuard(resolver=fake_resolver({"localhost": ["93.184.216.34"]}))
        assert guard.check(url) is None  # the first answer looks public
        hole = Fetcher(user_agent="gridcrawl-test", deadline=5, hop_check=guard.check)
        fenced = Fetcher(user_agent="gridcrawl-test", deadline=5, hop_check=guard.check, peer_check=guard.check_peer)
        try:
            before = hole.fetch(url)
            reached = len(server.requests)
            after = fenced.fetch(url)
            robots = fenced.derive(keep_non_html=True).fetch(url)  # derived fetchers keep the check
        finally:
            hole.close()
            fenced.close()
    print(f"\n[DNS rebinding] without the peer check: status={before.status}, requests reached={reached}; "
          f"with it: {after.error_kind.value}, requests reached={len(server.requests) - reached}")
    assert before.ok and reached == 1
    assert after.error_kind == ErrorKind.BLOCKED and "connected to 127.0.0.1" in after.error and "loopback" in after.error
    assert robots.error_kind == ErrorKind.BLOCKED
    assert len(server.requests) == reached
