"""Fetching through an organisation's HTTP proxy (``--proxy``, ``--no-proxy``).

The site is served on 127.0.0.1 under a name no resolver knows (``docs.intranet.invalid``: RFC
6761's ``.invalid``, which the executors' resolver answers without asking the machine's DNS
server); a real forward proxy on 127.0.0.1 (:mod:`proxy`) maps that name to
the site, so the site is reachable through the proxy only — as an outside site is from a desktop
whose only way out is the proxy. Plain HTTP is forwarded in absolute form, HTTPS tunnelled with
CONNECT to a server whose certificate a test CA issued for that name. No packet leaves
127.0.0.0/8."""

from __future__ import annotations

import os
import re
import ssl
import subprocess
import sys
import time

import pytest

from gridcrawl.executor.fetch import ErrorKind, Fetcher, HopRefusal
from gridcrawl.executor.proxy import ProxyRoute, proxy_error
from gridcrawl.executor.ssrf import SSRFGuard
from gridcrawl.settings import Settings
from grid import Grid, fetch_once, free_port, wait_for
from proxy import ForwardProxy
from sites import Site, SiteServer, generate_site, reachable, status_page

NAME = "docs.intranet.invalid"
PAGES = {"/": b"<html><body><a href='/a.html'>a</a></body></html>", "/a.html": b"<html><body>a</body></html>"}


def _url(server: SiteServer, path: str = "/", scheme: str = "http") -> str:
    """``server``'s page ``path`` under the name only the proxy resolves."""
    return f"{scheme}://{NAME}:{server.port}{path}"


@pytest.fixture
def site():
    with SiteServer(Site(pages=dict(PAGES))) as server:
        yield server


# ----------------------------------------------------------------------------------------------
# The setting (pure)

def test_a_proxy_setting_is_parsed_and_its_password_never_shown():
    assert ProxyRoute.parse("") is None
    route = ProxyRoute.parse("proxy.corp.example:3128")
    assert route.url == "http://proxy.corp.example:3128" and route.shown == route.url
    secret = ProxyRoute.parse("http://crawler:s%40cret@proxy.corp.example:3128/")
    assert secret.url == "http://crawler:s%40cret@proxy.corp.example:3128"  # the transport gets it all
    assert secret.shown == "http://crawler:***@proxy.corp.example:3128"
    assert secret.mask("407 for http://crawler:s%40cret@proxy and s@cret") == "407 for http://crawler:***@proxy and ***"

    bad = {"socks5://proxy:1080": "SOCKS", "https://proxy:3128": "over TLS", "ftp://proxy:21": "not an http://",
           "http://:3128": "no proxy host", "http://proxy:99999": "bad port", "http://proxy:3128/path": "no path",
           "http://u:hunter2@proxy:3128/path": "u:***@proxy"}
    for value, message in bad.items():
        with pytest.raises(ValueError, match=re.escape(message)) as raised:
            ProxyRoute.parse(value)
        assert "hunter2" not in str(raised.value)
    with pytest.raises(ValueError, match="--no-proxy needs --proxy"):
        ProxyRoute.parse("", "intranet.example")
    for entry in ("a/b", "wiki.*.example", "*"*2):
        with pytest.raises(ValueError, match="no host, domain"):
            ProxyRoute.parse("http://proxy:3128", entry)
    with pytest.raises(ValueError, match="bad port"):
        ProxyRoute.parse("http://proxy:3128", "wiki.example:http")
    # every program checks it at start, with the other settings
    with pytest.raises(ValueError, match="SOCKS"):
        Settings(proxy="socks5h://proxy:1080").validate()
    assert Settings(proxy="http://proxy:3128", no_proxy="corp.example").validate().proxy == "http://proxy:3128"


def test_no_proxy_names_hosts_domains_addresses_networks_and_ports_as_curl_reads_them():
    route = ProxyRoute.parse("http://proxy:3128", "corp.example, *.lab.example 10.0.0.0/8,192.0.2.7,"
                                                  "wiki.example:8080,[::1]")
    direct = ["http://corp.example/", "https://wiki.corp.example/x", "http://CORP.example./", "http://a.b.lab.example/",
              "http://lab.example/", "http://10.1.2.3/", "http://192.0.2.7:81/", "http://wiki.example:8080/",
              "http://[::1]:8000/"]
    proxied = ["http://notcorp.example/", "http://corp.example.org/", "http://192.0.2.8/", "http://11.0.0.1/",
               "http://wiki.example/", "https://wiki.example/", "http://[::2]/", "http://docs.python.org/"]
    assert [u for u in direct if route.applies_to(u)] == []
    assert [u for u in proxied if not route.applies_to(u)] == []
    assert route.proxies_for("http://docs.python.org/") == {"http": route.url, "https": route.url}
    assert route.proxies_for("http://corp.example/") is None
    assert not ProxyRoute.parse("http://proxy:3128", "*").applies_to("http://docs.python.org/")


# ----------------------------------------------------------------------------------------------
# The fetcher through a real proxy

def test_a_site_only_the_proxy_reaches_is_fetched_through_it_and_no_proxy_hosts_directly(site):
    with ForwardProxy(hosts={NAME: "127.0.0.1"}) as proxy:
        route = ProxyRoute.parse(proxy.url, "127.0.0.1")
        result = fetch_once(_url(site, "/"), proxy=route)
        assert result.error_kind is None and result.status == 200 and result.body == PAGES["/"], result
        assert proxy.records == [("GET", _url(site, "/"))]  # absolute form, to the proxy
        assert [r.path for r in site.requests] == ["/"]

        direct = fetch_once(site.url("/a.html"), proxy=route)  # 127.0.0.1 is in no_proxy
        assert direct.status == 200 and len(proxy.records) == 1
        assert [r.path for r in site.requests] == ["/", "/a.html"]

    # without the proxy the name does not resolve (an executor's guard asks first, and answers an
    # .invalid name itself; the fetch alone would ask the machine's DNS server)
    unreachable = fetch_once(_url(site, "/"), hop_check=SSRFGuard().check)
    assert unreachable.error_kind == ErrorKind.CONNECTION and "cannot resolve host" in unreachable.error, unreachable


def test_https_is_tunnelled_with_connect_and_the_site_certificate_still_checked(tmp_path):
    trustme = pytest.importorskip("trustme", reason="trustme (the test extras) makes the test CA")
    ca = trustme.CA()
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert(NAME).configure_cert(context)
    ca_pem = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_pem))
    with SiteServer(Site(pages=dict(PAGES), extra={"/trickle": _trickle}), tls=context) as server, \
            ForwardProxy(hosts={NAME: "127.0.0.1"}) as proxy:
        route = ProxyRoute.parse(proxy.url)
        result = fetch_once(_url(server, "/a.html", "https"), proxy=route, verify=str(ca_pem))
        assert result.error_kind is None and result.body == PAGES["/a.html"], result
        assert proxy.records == [("CONNECT", f"{NAME}:{server.port}")]  # the proxy saw no path

        untrusted = fetch_once(_url(server, "/", "https"), proxy=route)  # certifi's CAs: the site's own cert fails
        assert untrusted.error_kind == ErrorKind.CONNECTION and untrusted.error.startswith("TLS certificate not trusted: "), untrusted.error

        # the fetch's deadline holds through the tunnel (its connections are watched as direct ones)
        cut = Fetcher(user_agent="gridcrawl-test", deadline=1, read_timeout=5, proxy=route, verify=str(ca_pem))
        try:
            trickled = cut.fetch(_url(server, "/trickle", "https"))
        finally:
            cut.close()
        assert trickled.error_kind == ErrorKind.TIMEOUT and trickled.body is None, trickled
        wait_for(lambda: len(server.requests) == 2, 10, message="the trickling handler to end")
        assert TRICKLED[-1] < 50  # the connection was cut at the deadline, not read to its end
    assert [r.path for r in server.requests] == ["/a.html", "/trickle"]


TRICKLED: list[int] = []  # header lines each /trickle response got out before the client hung up


def _trickle(handler) -> None:
    """A response whose header lines come one every 0.1 s, for 5 s at most (so no read timeout
    fires and no body arrives); appends to :data:`TRICKLED` how many lines went out before a
    write failed."""
    sent = 0
    try:
        handler.wfile.write(b"HTTP/1.1 200 OK\r\n")
        for i in range(50):
            handler.wfile.write(f"X-Slow-{i}: 1\r\n".encode())
            handler.wfile.flush()
            sent += 1
            time.sleep(0.1)
    except OSError:
        pass  # the fetcher hung up
    TRICKLED.append(sent)
    handler.close_connection = True


def test_proxy_credentials_are_sent_and_a_407_says_which_option_helps(site):
    with ForwardProxy(hosts={NAME: "127.0.0.1"}, credentials=("crawler", "hunter2")) as proxy:
        good = ProxyRoute.parse(f"http://crawler:hunter2@127.0.0.1:{proxy.port}")
        assert fetch_once(_url(site, "/"), proxy=good).status == 200
        for url in (_url(site, "/"), _url(site, "/", "https")):  # 407 to a request, and to a CONNECT
            for route in (ProxyRoute.parse(proxy.url), ProxyRoute.parse(f"http://crawler:wrong-pass@127.0.0.1:{proxy.port}")):
                result = fetch_once(url, proxy=route)
                assert result.error_kind == ErrorKind.CONNECTION, (url, result)
                assert "407" in result.error and "--proxy http://user:password@host:port" in result.error, result.error
                assert "wrong-pass" not in result.error
    assert [r.path for r in site.requests] == ["/"]  # only the request with the right credentials got through


def test_a_proxy_that_cannot_reach_the_site_is_a_connection_error_and_the_sites_own_5xx_is_not():
    assert proxy_error({"proxy-status": 'ExampleCDN; error=dns_error; rcode="NXDOMAIN"'}) == "error=dns_error"
    assert proxy_error({"proxy-status": "cdn, corp-proxy; error=connection_refused"}) == "error=connection_refused"
    assert proxy_error({"x-squid-error": "ERR_CONNECT_FAIL 111"}) == "ERR_CONNECT_FAIL 111"
    assert proxy_error({"proxy-status": "cache; hit"}) is None and proxy_error({}) is None

    site = Site(pages=dict(PAGES), extra={"/busy": status_page(503)})
    with SiteServer(site) as server, ForwardProxy(hosts={NAME: "127.0.0.1"}) as proxy:
        route = ProxyRoute.parse(proxy.url)
        lost = fetch_once(f"http://elsewhere.intranet.invalid:{server.port}/", proxy=route)  # the proxy knows no such host
        assert lost.error_kind == ErrorKind.CONNECTION, lost
        assert lost.error == f"the proxy {proxy.url} could not reach the site: HTTP 502 error=destination_not_found"
        busy = fetch_once(_url(server, "/busy"), proxy=route)  # the site's own 503, passed on by the proxy
        assert busy.error_kind == ErrorKind.HTTP_STATUS and busy.status == 503, busy


def test_a_proxy_that_does_not_answer_fails_the_page_as_a_connection_error_naming_it(site):
    dead = f"http://crawler:hunter2@127.0.0.1:{free_port()}"
    result = fetch_once(_url(site, "/"), proxy=ProxyRoute.parse(dead))
    assert result.error_kind == ErrorKind.CONNECTION, result
    assert result.error.startswith("cannot connect to the proxy http://crawler:***@127.0.0.1:"), result.error
    assert "Connection refused" in result.error and "hunter2" not in result.error
    assert site.requests == []


def test_the_ssrf_guard_leaves_names_it_cannot_resolve_to_the_proxy_and_still_judges_the_rest(site):
    with ForwardProxy(hosts={NAME: "127.0.0.1"}) as proxy:
        route = ProxyRoute.parse(proxy.url, "corp.invalid")
        guard = SSRFGuard(proxy=route)  # nothing private allowed
        assert guard.check(_url(site, "/")) is None  # the proxy resolves it
        assert "loopback" in guard.check("http://localhost/")  # resolves here: judged, proxy or not
        assert "loopback" in guard.check("http://127.0.0.1/")
        assert isinstance(SSRFGuard().check(_url(site, "/")), HopRefusal)  # no proxy: a DNS failure
        refusal = guard.check("http://nothing.corp.invalid/")  # fetched directly: a DNS failure too
        assert isinstance(refusal, HopRefusal) and refusal.kind == ErrorKind.CONNECTION

        # the connection to the proxy (on loopback) is not judged as a page's address would be
        result = fetch_once(_url(site, "/"), proxy=route, hop_check=guard.check, peer_check=guard.check_peer)
        assert result.status == 200, result
        refused = fetch_once(site.url("/"), proxy=route, hop_check=guard.check, peer_check=guard.check_peer)
        assert refused.error_kind == ErrorKind.BLOCKED and proxy.records == [("GET", _url(site, "/"))]


# ----------------------------------------------------------------------------------------------
# gridcrawl run through the proxy

def test_the_proxy_setting_comes_from_the_environment_and_config_show_masks_its_password():
    import typer
    from gridcrawl.config import show_rows
    from gridcrawl.executor.cli import app
    environ = {"GRIDCRAWL_PROXY": "http://crawler:hunter2@proxy.corp.example:3128", "GRIDCRAWL_NO_PROXY": "corp.example"}
    rows = {name: (value, source) for name, value, source in
            show_rows("executor", typer.main.get_command(app), [], None, environ)}
    assert rows["proxy"] == ("'http://crawler:***@proxy.corp.example:3128'", "env GRIDCRAWL_PROXY")
    assert rows["no_proxy"] == ("'corp.example'", "env GRIDCRAWL_NO_PROXY")


def _run(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gridcrawl", "run", *args, "--executors", "1", "--threads", "4",
                           "--no-progress", "--no-sitemaps"], capture_output=True, text=True, timeout=180,
                          env={**os.environ, "GRIDCRAWL_RETRY_TIMES": "0", **(env or {})})


@pytest.mark.e2e
def test_gridcrawl_run_crawls_a_site_reachable_only_through_the_proxy(tmp_path):
    generated = generate_site(12, seed=7)
    pages = {path: body.replace(b"{BASE}", b"") for path, body in generated.pages.items()}  # links stay on the name
    site = Site(pages=pages, links=generated.links)
    expected = reachable(site)
    assert len(expected) == 12
    with SiteServer(site) as server, \
            ForwardProxy(hosts={NAME: "127.0.0.1"}, credentials=("crawler", "hunter2")) as proxy:
        # the executors get the proxy, password included, in their environment (not on a command line)
        secret = f"http://crawler:hunter2@127.0.0.1:{proxy.port}"
        done = _run(_url(server, "/"), "--proxy", secret, "--workdir", str(tmp_path / "proxied"))
        assert done.returncode == 0, done.stderr[-3000:]
        logs = "".join(p.read_text() for p in (tmp_path / "proxied").rglob("*.log"))
        assert f"through the proxy http://crawler:***@127.0.0.1:{proxy.port}" in logs
        assert "hunter2" not in logs + done.stdout + done.stderr
        rows = Grid(tmp_path / "proxied").query("crawl", "SELECT url, error_kind FROM visited_url")
        assert sorted(rows) == sorted((_url(server, path), None) for path in expected)
        assert ("GET", _url(server, "/robots.txt")) in proxy.records  # robots.txt went the same way
        assert sorted(r.path for r in server.requests if r.path != "/robots.txt") == sorted(expected)

        # the environment's proxy variables are not read, but named at start
        direct = _run(_url(server, "/"), "--workdir", str(tmp_path / "direct"), env={"https_proxy": secret})
        assert direct.returncode == 1, direct.stderr[-3000:]
        assert (f"the environment sets https_proxy=http://crawler:***@127.0.0.1:{proxy.port}, which gridcrawl "
                "does not read" in direct.stderr), direct.stderr[-3000:]
        assert "hunter2" not in direct.stderr
        ((kind, error),) = Grid(tmp_path / "direct").query("crawl", "SELECT error_kind, error FROM visited_url")
        assert kind == "connection" and "cannot resolve host" in error, error

        bad = _run(_url(server, "/"), "--proxy", "socks5://127.0.0.1:1080", "--workdir", str(tmp_path / "bad"))
        assert bad.returncode == 2 and "SOCKS proxies are not supported" in bad.stderr, bad.stderr[-2000:]
        assert "Traceback" not in bad.stderr and not (tmp_path / "bad" / "manager.db").exists()
