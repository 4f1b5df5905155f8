"""robots.txt (RFC 9309) through the executor's RobotsCache and protego, against a real HTTP server
on 127.0.0.1: the matching rules as a table, what each robots.txt status means, the per-origin
cache, and how ``visit`` applies robots.txt to the URL and to every redirect hop."""

from __future__ import annotations

import threading

import pytest

from gridcrawl.executor.fetch import ErrorKind, Fetcher
from gridcrawl.executor.page import visit
from gridcrawl.protocol import MAX_SECONDS
from gridcrawl.executor.robots import ROBOTS_MAX_BYTES, RobotsCache, origin_of, product_token
from sites import Site, SiteServer, redirect, slow_page, status_page

UA = "gridcrawl/0.1 (+https://example.invalid/gridcrawl)"
TEXT = "text/plain; charset=utf-8"


class FakeClock:
    """A monotonic clock the test moves by hand (seconds)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def make_fetcher(**kw) -> Fetcher:
    kw.setdefault("deadline", 2.0)
    return Fetcher(user_agent=UA, connect_timeout=1.0, read_timeout=2.0, **kw)


def make_cache(clock=None, **kw) -> RobotsCache:
    return RobotsCache.for_fetcher(make_fetcher(), clock=clock or FakeClock(), **kw)


def serve_robots(site: Site, text: str, content_type: str = TEXT) -> None:
    site.pages["/robots.txt"] = text.encode("utf-8")
    site.types["/robots.txt"] = content_type


# --------------------------------------------------------------------------- the table

# (case, robots.txt, path, allowed for "gridcrawl")
RFC9309_CASES = [
    # §2.2.2: the most specific (longest) match wins
    ("longest match: allow inside disallow",
     "User-agent: *\nDisallow: /example/\nAllow: /example/page/\nDisallow: /example/page/disallowed.gif\n",
     "/example/page/", True),
    ("longest match: disallow inside allow",
     "User-agent: *\nDisallow: /example/\nAllow: /example/page/\nDisallow: /example/page/disallowed.gif\n",
     "/example/page/disallowed.gif", False),
    ("longest match: shorter disallow applies",
     "User-agent: *\nDisallow: /example/\nAllow: /example/page/\n", "/example/other", False),
    ("longest match counts wildcard patterns by length",
     "User-agent: *\nAllow: /page\nDisallow: /*.html\n", "/page.html", False),
    # §2.2.2: equivalent allow and disallow: allow SHOULD be used
    ("allow wins a tie", "User-agent: *\nDisallow: /folder\nAllow: /folder\n", "/folder/page", True),
    ("allow wins a tie whatever the order", "User-agent: *\nAllow: /folder\nDisallow: /folder\n", "/folder/page", True),
    # §2.2.3: "*" matches any sequence of characters
    ("* in the middle", "User-agent: *\nDisallow: /fish*.php\n", "/fishheads/catfish.php?parameters", False),
    ("* suffix match", "User-agent: *\nDisallow: /*.php\n", "/index.php", False),
    ("* does not match other extensions", "User-agent: *\nDisallow: /*.php\n", "/index.html", True),
    # §2.2.3: "$" anchors the end of the pattern
    ("$ matches the end", "User-agent: *\nDisallow: /*.php$\n", "/filename.php", False),
    ("$ refuses a query after", "User-agent: *\nDisallow: /*.php$\n", "/filename.php?parameters", True),
    ("$ refuses a longer path", "User-agent: *\nDisallow: /*.php$\n", "/filename.php/", True),
    ("$ on the root only", "User-agent: *\nDisallow: /$\n", "/anything", True),
    # §2.1, §2.2.1: groups of the same user agent are merged
    ("groups of one agent merge (first)",
     "User-agent: gridcrawl\nDisallow: /a\n\nUser-agent: otherbot\nDisallow: /\n\nUser-agent: gridcrawl\nDisallow: /b\n",
     "/a/1.html", False),
    ("groups of one agent merge (second)",
     "User-agent: gridcrawl\nDisallow: /a\n\nUser-agent: otherbot\nDisallow: /\n\nUser-agent: gridcrawl\nDisallow: /b\n",
     "/b/1.html", False),
    ("several user-agent lines open one group",
     "User-agent: otherbot\nUser-agent: gridcrawl\nDisallow: /x\n", "/x", False),
    # §2.2.1: the matching group, not "*", applies; "*" only when no group matches
    ("our group replaces *", "User-agent: *\nDisallow: /\n\nUser-agent: gridcrawl\nAllow: /\n", "/page", True),
    ("* rules do not add to our group",
     "User-agent: *\nDisallow: /private\n\nUser-agent: gridcrawl\nDisallow: /secret\n", "/private", True),
    ("our group's own rules apply",
     "User-agent: *\nDisallow: /private\n\nUser-agent: gridcrawl\nDisallow: /secret\n", "/secret", False),
    ("* applies when no group names us", "User-agent: otherbot\nAllow: /\n\nUser-agent: *\nDisallow: /\n", "/page", False),
    ("another agent's group does not apply", "User-agent: otherbot\nDisallow: /\n", "/page", True),
    # §2.2.1: user-agent matching is case-insensitive
    ("user agent upper case", "User-agent: GRIDCRAWL\nDisallow: /\n", "/page", False),
    ("user agent mixed case", "User-agent: GridCrawl\nDisallow: /p\n", "/page", False),
    ("directive names case-insensitive", "USER-AGENT: *\nDISALLOW: /p\n", "/page", False),
    # §2.2.2: paths are case-sensitive; empty Disallow allows
    ("paths are case-sensitive", "User-agent: *\nDisallow: /Page\n", "/page", True),
    ("empty disallow allows all", "User-agent: *\nDisallow:\n", "/page", True),
    ("no rules at all", "", "/page", True),
    ("comments and junk lines ignored", "# hello\nUser-agent: * # all\nnonsense line\nDisallow: /x # no\n", "/x", False),
    ("a byte order mark is ignored", "\ufeffUser-agent: *\nDisallow: /x\n", "/x", False),
    # §2.2.1: the product token is matched; a line naming more (a version, the whole User-Agent
    # string, as a site's operator pastes it) names its token (the group was never applied)
    ("our token with a version", "User-agent: Gridcrawl/1.0\nDisallow: /x\n", "/x", False),
    ("our whole User-Agent string", f"User-agent: {UA}\nDisallow: /x\n\nUser-agent: *\nDisallow: /y\n", "/x", False),
    ("... which replaces the * group", f"User-agent: {UA}\nDisallow: /x\n\nUser-agent: *\nDisallow: /y\n", "/y", True),
    ("another token that starts like ours", "User-agent: gridcrawlerbot/2\nDisallow: /x\n", "/x", True),
    # §2.2.2: percent-encoded patterns match their decoded URL and vice versa
    ("percent-encoding", "User-agent: *\nDisallow: /foo%20bar\n", "/foo%20bar", False),
    # §3: /robots.txt itself is always allowed
    ("robots.txt is always allowed", "User-agent: *\nDisallow: /\n", "/robots.txt", True),
]


@pytest.fixture(scope="module")
def robots_server():
    site = Site()
    with SiteServer(site) as server:
        yield site, server


@pytest.mark.parametrize("case,text,path,allowed", RFC9309_CASES, ids=[c[0] for c in RFC9309_CASES])
def test_rfc9309_matching(robots_server, case, text, path, allowed):
    site, server = robots_server
    serve_robots(site, text)
    cache = make_cache()
    assert cache.check(server.url(path))[0] is allowed, case


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-be"])
def test_a_robots_txt_saved_as_utf16_with_its_byte_order_mark_is_obeyed(robots_server, encoding):
    """A robots.txt saved by Windows' Notepad as "Unicode" (UTF-16 with its byte order mark):
    read as UTF-8 it was NULs between letters, no rule, so its Disallow lines were ignored."""
    site, server = robots_server
    text = "User-agent: *\nDisallow: /private/\nCrawl-delay: 2\n"
    site.pages["/robots.txt"] = (b"\xfe\xff" if encoding == "utf-16-be" else b"") + text.encode(encoding)
    site.types["/robots.txt"] = TEXT
    cache = make_cache()
    assert cache.check(server.url("/private/x.html")) == (False, 2.0)
    assert cache.check(server.url("/public.html")) == (True, 2.0)


def test_product_token_and_origin():
    assert product_token(UA) == "gridcrawl"
    assert product_token("Mozilla/5.0 (compatible)") == "mozilla"
    assert product_token("  My_Bot-2/1.0") == "my_bot-"
    assert product_token("/1.0") == "*"
    assert origin_of("HTTP://Example.COM/a?b") == "http://example.com:80"
    assert origin_of("https://example.com:8443/") == "https://example.com:8443"
    assert origin_of("https://[::1]/x") == "https://[::1]:443"
    assert origin_of("ftp://example.com/") is None
    assert origin_of("http:///nohost") is None


def test_crawl_delay_and_request_rate(robots_server):
    site, server = robots_server
    serve_robots(site, "User-agent: *\nCrawl-delay: 2.5\n\nUser-agent: gridcrawl\nCrawl-delay: 0.75\nDisallow: /x\n")
    assert make_cache().check(server.url("/page")) == (True, 0.75)
    assert make_cache().check(server.url("/x")) == (False, 0.75)
    serve_robots(site, "User-agent: *\nRequest-rate: 1/5s\n")
    assert make_cache().check(server.url("/page")) == (True, 5.0)
    serve_robots(site, "User-agent: *\nCrawl-delay: soon\n")
    assert make_cache().check(server.url("/page")) == (True, None)
    # infinity, which protego drops (no delay at all), is the longest delay (the manager caps it)
    for text in ("Crawl-delay: inf", "crawl-delay:Infinity # never", "CRAWL-DELAY : +INF"):
        serve_robots(site, f"User-agent: *\nDisallow: /x\n{text}\n\nUser-agent: other\nCrawl-delay: 1\n")
        assert make_cache().check(server.url("/page")) == (True, MAX_SECONDS), text
    serve_robots(site, "User-agent: *\nCrawl-delay: infinite-ish\nCrawl-delay: nan\n")
    assert make_cache().check(server.url("/page")) == (True, None)


# --------------------------------------------------------------------------- statuses


@pytest.mark.parametrize("status,allowed", [(404, True), (410, True), (401, True), (403, True),
                                            (429, False), (500, False), (502, False), (503, False)])
def test_status_of_robots_txt(site_server, status, allowed):
    """RFC 9309 §2.3.1.3-4: 4xx is "unavailable" (allow all), 5xx "unreachable" (disallow all);
    429 is treated as unreachable."""
    server = site_server(Site(extra={"/robots.txt": status_page(status, b"User-agent: *\nAllow: /\n")}))
    clock = FakeClock()
    cache = make_cache(clock, retry_after=60)
    decision = cache.decide(server.url("/page"))
    assert decision.allowed is allowed
    assert decision.unreachable is (not allowed)
    if not allowed:
        assert decision.retry_after == pytest.approx(60)
        assert "unreachable" in decision.reason and str(status) in decision.reason


def test_unreachable_robots_is_retried_after_the_retry_time(site_server):
    site = Site(extra={"/robots.txt": status_page(503)})
    server = site_server(site)
    clock = FakeClock()
    cache = make_cache(clock, retry_after=60)
    assert cache.check(server.url("/a")) == (False, None)
    clock.now += 30
    assert cache.check(server.url("/a")) == (False, None)  # still within the retry time: cached
    assert server.count("/robots.txt") == 1
    del site.extra["/robots.txt"]
    serve_robots(site, "User-agent: *\nDisallow: /b\n")
    clock.now += 31
    assert cache.check(server.url("/a")) == (True, None)
    assert cache.check(server.url("/b")) == (False, None)
    assert server.count("/robots.txt") == 2


def test_connection_refused_and_timeout_mean_unreachable(site_server):
    server = site_server(Site(extra={"/robots.txt": slow_page(3.0, b"User-agent: *\nAllow: /\n", TEXT)}))
    cache = RobotsCache.for_fetcher(make_fetcher(deadline=0.5), clock=FakeClock())
    decision = cache.decide(server.url("/page"))
    assert not decision.allowed and decision.unreachable
    closed = SiteServer(Site()).start()
    url = closed.url("/page")
    closed.stop()
    decision = make_cache().decide(url)
    assert not decision.allowed and decision.unreachable


def test_robots_redirects_are_followed(site_server):
    site = Site(extra={"/robots.txt": redirect("/real-robots.txt", 301),
                       "/real-robots.txt": redirect("{BASE}/rules.txt", 302)})
    serve_robots(site, "")
    site.pages["/rules.txt"] = b"User-agent: *\nDisallow: /secret\n"
    site.types["/rules.txt"] = TEXT
    server = site_server(site)
    cache = make_cache()
    assert cache.check(server.url("/secret")) == (False, None)
    assert cache.check(server.url("/open")) == (True, None)


def test_robots_redirect_loop_or_too_many_hops_mean_unavailable(site_server):
    """RFC 9309 §2.3.1.2: past the redirect limit the file MAY be assumed unavailable: allow all."""
    site = Site(extra={"/robots.txt": redirect("/loop-a"), "/loop-a": redirect("/loop-b"),
                       "/loop-b": redirect("/loop-a")})
    server = site_server(site)
    assert make_cache().decide(server.url("/page")).allowed
    site.extra = {"/robots.txt": redirect("/hop/1"), **{f"/hop/{i}": redirect(f"/hop/{i + 1}") for i in range(1, 13)}}
    assert make_cache().decide(server.url("/page")).allowed
    assert server.count("/hop/11") == 0  # robots.txt + 10 hops, then the fetcher gave up


def test_only_the_first_512_kib_are_parsed(site_server):
    """RFC 9309 §2.5: at least 500 KiB are parsed; what follows may be ignored."""
    filler = "# " + "x" * 98 + "\n"
    text = "User-agent: *\nDisallow: /early\n" + filler * (ROBOTS_MAX_BYTES // len(filler) + 100) + "Disallow: /late\n"
    site = Site()
    serve_robots(site, text)
    server = site_server(site)
    cache = make_cache()
    assert cache.check(server.url("/early"))[0] is False
    assert cache.check(server.url("/late"))[0] is True


def test_robots_served_as_html_is_still_parsed(site_server):
    site = Site()
    serve_robots(site, "User-agent: *\nDisallow: /x\n", content_type="text/html")
    server = site_server(site)
    assert make_cache().check(server.url("/x"))[0] is False


# --------------------------------------------------------------------------- the cache


def test_fetched_once_per_origin_by_concurrent_workers(site_server):
    site = Site()
    serve_robots(site, "User-agent: *\nDisallow: /x\n")
    server = site_server(site, latency=0.3)
    cache = make_cache()
    answers: list = []
    barrier = threading.Barrier(12)

    def worker(i: int) -> None:
        barrier.wait()
        answers.append(cache.check(server.url(f"/x/{i}" if i % 2 else f"/ok/{i}")))

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert sorted(answers) == [(False, None)] * 6 + [(True, None)] * 6
    assert server.count("/robots.txt") == 1 and cache.fetches == 1


def test_cache_is_per_origin_and_expires(site_server):
    site = Site()
    serve_robots(site, "User-agent: *\nDisallow: /x\n")
    one, two = site_server(site), site_server(site)
    clock = FakeClock()
    cache = make_cache(clock, max_age=3600)
    for _ in range(3):
        assert cache.check(one.url("/x")) == (False, None)
        assert cache.check(two.url("/y")) == (True, None)
    assert one.count("/robots.txt") == 1 and two.count("/robots.txt") == 1
    serve_robots(site, "User-agent: *\nDisallow: /y\n")
    clock.now += 3599
    assert cache.check(two.url("/y")) == (True, None)  # still the cached rules
    clock.now += 2
    assert cache.check(two.url("/y")) == (False, None)  # expired: fetched again
    assert two.count("/robots.txt") == 2


def test_least_recently_used_origins_are_forgotten(site_server):
    site = Site()
    serve_robots(site, "")
    servers = [site_server(site) for _ in range(3)]
    cache = make_cache(max_origins=2)
    for srv in servers:
        cache.check(srv.url("/"))
    cache.check(servers[0].url("/"))  # forgotten: fetched again
    assert [s.count("/robots.txt") for s in servers] == [2, 1, 1]


def test_the_cache_keeps_a_bounded_number_of_robots_txt_lines(site_server):
    """A maze of hosts each serving 512 KiB of robots.txt rules (25,000: 13 MiB parsed): the
    cache kept 10,000 origins whatever their size, and an executor grew by 13 MiB a host. It
    keeps ``max_lines`` lines of rules now, forgetting the least recently used origins."""
    site = Site()
    serve_robots(site, "User-agent: *\n" + "".join(f"Disallow: /d{i}/\n" for i in range(99)))  # 101 lines
    servers = [site_server(site) for _ in range(3)]
    cache = make_cache(max_lines=250)
    for srv in servers:
        assert cache.check(srv.url("/d5/x")) == (False, None)
    assert cache.check(servers[2].url("/d5/y")) == (False, None)  # kept: not fetched again
    cache.check(servers[0].url("/d5/y"))  # forgotten (3 x 101 lines > 250): fetched again
    assert [s.count("/robots.txt") for s in servers] == [2, 1, 1]
    one = make_cache(max_lines=10)  # the origin in use is kept, however long its robots.txt
    one.check(servers[1].url("/"))
    one.check(servers[1].url("/d1/"))
    assert servers[1].count("/robots.txt") == 2


# --------------------------------------------------------------------------- visit()


def robots_site() -> Site:
    site = Site(extra={"/go-private": redirect("/private/target.html", 302),
                       "/go-public": redirect("/public/target.html", 302),
                       "/go-away": redirect("http://external.invalid/x.html", 302)})
    serve_robots(site, "User-agent: *\nDisallow: /private/\nCrawl-delay: 1.5\n")
    for path in ("/private/page.html", "/private/target.html", "/public/target.html", "/page.html"):
        site.pages[path] = b"<title>t</title><a href='/other.html'>o</a>"
    return site


def test_visit_does_not_fetch_a_disallowed_url(site_server):
    server = site_server(robots_site())
    fetcher = make_fetcher()
    cache = RobotsCache.for_fetcher(fetcher)
    page = visit(fetcher, server.url("/private/page.html"), robots=cache)
    assert (page.error_kind, page.error, page.crawl_delay) == ("robots", "disallowed by robots.txt", 1.5)
    assert page.status is None and page.links == []
    assert page.requested  # robots.txt was fetched for it: the host's delay starts from here
    ok = visit(fetcher, server.url("/page.html"), robots=cache)
    assert ok.error_kind is None and ok.status == 200 and ok.crawl_delay == 1.5
    assert server.count("/private/page.html") == 0 and server.count("/page.html") == 1
    # a second disallowed URL is refused from the cached rules: no request, no delay to start
    again = visit(fetcher, server.url("/private/other.html"), robots=cache)
    assert again.error_kind == "robots" and not again.requested
    assert server.count("/robots.txt") == 1


def test_visit_checks_every_redirect_hop(site_server):
    server = site_server(robots_site())
    fetcher = make_fetcher()
    cache = RobotsCache.for_fetcher(fetcher)
    blocked = visit(fetcher, server.url("/go-private"), robots=cache)
    assert blocked.error_kind == "robots" and blocked.final_url == server.url("/private/target.html")
    assert server.count("/go-private") == 1 and server.count("/private/target.html") == 0
    followed = visit(fetcher, server.url("/go-public"), robots=cache)
    assert followed.error_kind is None and followed.final_url == server.url("/public/target.html")


class _CountingCache(RobotsCache):
    """A real RobotsCache that records every URL matched against its rules."""

    def decide(self, url):
        self.asked = getattr(self, "asked", []) + [url]
        return super().decide(url)


def test_visit_matches_each_url_against_robots_txt_once(site_server):
    """A page's URL was matched twice, by visit() and again as the fetch's first hop: on a
    robots.txt of 25,000 wildcard rules (~60 ms a match with protego 0.7) a crawl of 300 pages
    ran at 46 pages/s instead of 420; 74 now. Each redirect hop is still checked."""
    server = site_server(robots_site())
    fetcher = make_fetcher()
    for pacer in (False, True):  # a grid executor's fetcher paces; gridcrawl fetch's does not
        if pacer:
            from gridcrawl.executor.pacing import HostPacer
            fetcher = make_fetcher(pacer=HostPacer())
        cache = _CountingCache(fetcher.derive(keep_non_html=True), fetcher.user_agent)
        assert visit(fetcher, server.url("/page.html"), robots=cache).status == 200
        assert cache.asked == [server.url("/page.html")]
        cache.asked = []
        followed = visit(fetcher, server.url("/go-public"), robots=cache)
        assert followed.error_kind is None and cache.asked == [server.url("/go-public"), server.url("/public/target.html")]


def test_visit_refuses_redirects_out_of_scope(site_server):
    server = site_server(robots_site())
    page = visit(make_fetcher(), server.url("/go-away"), instruction={"scope": ["127.0.0.1"]})
    assert page.error_kind == ErrorKind.OUT_OF_SCOPE.value
    # the message names the hop and the option that would let the crawl follow it
    assert page.error.startswith(f"redirected to {page.final_url}: 'external.invalid' is outside the crawl's scope "
                                 "(--allow-domain external.invalid adds it)"), page.error
    ok = visit(make_fetcher(), server.url("/go-public"), instruction={"scope": ["127.0.0.1"]})
    assert ok.error_kind is None
    first = visit(make_fetcher(), server.url("/page.html"), instruction={"scope": ["example.org"]})
    assert first.error_kind == "out_of_scope" and server.count("/page.html") == 0


def test_redirect_out_of_scope_is_refused_before_the_ssrf_guard_looks_its_host_up(site_server):
    """On an executor the SSRF guard resolves every hop's host; the scope comes first, so a
    redirect (of a page, or of a sitemap) to a foreign name is ``out_of_scope`` without a DNS
    query, as the README says. Before, the guard ran first: a name that did not resolve failed
    the page as ``connection`` (retried twice by the manager) and an intranet name as
    ``blocked``, naming --allow-private."""
    import socket
    from gridcrawl.executor.ssrf import SSRFGuard
    asked: list[str] = []

    def resolver(host: str, port: int) -> list[str]:
        asked.append(host)
        if host == "127.0.0.1":
            return ["127.0.0.1"]
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    server = site_server(robots_site())
    guard = SSRFGuard(["127.0.0.0/8"], resolver=resolver)
    fetcher = make_fetcher(hop_check=guard.check)
    for instruction in ({"scope": ["127.0.0.1"]}, {"scope": ["127.0.0.1"], "sitemap": True}):
        page = visit(fetcher, server.url("/go-away"), instruction=instruction)
        assert page.error_kind == ErrorKind.OUT_OF_SCOPE.value, (instruction, page.error_kind, page.error)
        assert "'external.invalid' is outside the crawl's scope" in page.error
    assert "external.invalid" not in asked


def test_visit_ignores_robots_without_a_cache(site_server):
    server = site_server(robots_site())
    page = visit(make_fetcher(), server.url("/private/page.html"), robots=None)
    assert page.error_kind is None and page.crawl_delay is None
    assert server.count("/robots.txt") == 0


def test_visit_with_unreachable_robots_is_retryable(site_server):
    site = robots_site()
    site.extra["/robots.txt"] = status_page(500)
    server = site_server(site)
    fetcher = make_fetcher()
    page = visit(fetcher, server.url("/page.html"), robots=RobotsCache.for_fetcher(fetcher, retry_after=42))
    assert page.error_kind == "robots_unreachable" and 0 < page.retry_after <= 42
    assert server.count("/page.html") == 0


def test_a_server_that_refuses_connections_fails_the_page_as_a_connection_error():
    """robots.txt of a dead server is not 'unreachable for 60 s': the page cannot be fetched either,
    so it fails at once as a connection error (retried by the manager's ordinary back-off)."""
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    cache = make_cache()
    decision = cache.decide(f"http://127.0.0.1:{port}/page.html")
    assert not decision.allowed and decision.no_connection
    refusal = decision.refusal()
    assert refusal.kind == ErrorKind.CONNECTION and refusal.retry_after is None
    page = visit(cache.fetcher, f"http://127.0.0.1:{port}/page.html", robots=cache)
    assert page.error_kind == "connection"


def test_a_robots_txt_that_is_no_usable_http_fails_the_page_as_bad_response_unfetched(site_server):
    """A robots.txt whose body is not the gzip its Content-Encoding says made its origin
    "unreachable": every page failed as ``robots_unreachable`` and was retried twice for the same
    answer. It is an answer no retry mends: the page fails as ``bad_response`` (not retried),
    unfetched, naming robots.txt's answer (an SSH port's banner does the same:
    tests/test_reliability_e2e.py)."""
    site = robots_site()
    site.extra["/robots.txt"] = lambda h: h.respond(200, b"User-agent: *\nAllow: /\n",
                                                    headers={"Content-Encoding": "gzip"})
    server = site_server(site)
    cache = make_cache()
    decision = cache.decide(server.url("/page.html"))
    assert not decision.allowed and decision.bad_response and not decision.unreachable
    assert decision.refusal().kind == ErrorKind.BAD_RESPONSE
    page = visit(cache.fetcher, server.url("/page.html"), robots=cache)
    assert (page.error_kind, page.error) == ("bad_response", f"robots.txt of {origin_of(server.url('/'))}: the body "
                                             "does not decode as its Content-Encoding says: not valid gzip data "
                                             "(incorrect header check)")
    assert server.count("/page.html") == 0 and server.count("/robots.txt") == 1
