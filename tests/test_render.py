"""Rendered visits (``gridcrawl.executor.render``) with Debian's Chromium and a real HTTP server
serving a site whose links and content exist only after JavaScript runs (``jssite``).

Every test drives the real browser through :func:`gridcrawl.executor.page.visit`, the same call
an executor's worker makes: script-inserted links, a list loaded with ``fetch()``, a client-side
redirect, a script that loops forever (cut at the deadline), a script asking a private address
(refused by the SSRF guard before any connection, and recorded), robots.txt for sub-requests,
images refused by type, at most ``max_pages`` pages open, and a browser killed mid-page.
"""

from __future__ import annotations

import json
import os
import re
import signal
import sys
import threading
import time
from urllib.parse import urlsplit

import pytest

from jssite import PRIVATE_URL, browser_or_skip, js_site
from sites import slow_page

from gridcrawl.executor.fetch import Fetcher
from gridcrawl.executor.page import visit
from gridcrawl.executor.robots import RobotsCache
from gridcrawl.executor.ssrf import SSRFGuard

UA = "gridcrawl-test/1.0"


def paths(links) -> set[str]:
    return {urlsplit(link[0]).path for link in links}


class Visitor:
    """An executor's fetch/robots/render trio on the loopback site, as the agent builds it."""

    def __init__(self, **render_options) -> None:
        from gridcrawl.executor.render import Renderer
        guard = SSRFGuard(["127.0.0.0/8"])
        self.fetcher = Fetcher(user_agent=UA, deadline=10, hop_check=guard.check)
        self.robots = RobotsCache.for_fetcher(self.fetcher)
        options = {"max_pages": 2, "deadline": 10.0, "idle_timeout": 2.0, **render_options}
        self.renderer = Renderer(self.fetcher, browser_path=browser_or_skip(), **options).start()

    def visit(self, url: str, render: bool = True, **instruction):
        return visit(self.fetcher, url, instruction={"render": render, **instruction} if render else instruction,
                     robots=self.robots, renderer=self.renderer)

    def close(self) -> None:
        self.renderer.close()
        self.fetcher.close()
        self.robots.fetcher.close()


@pytest.fixture(scope="module")
def server():
    from sites import SiteServer
    site = js_site()
    gate, asked = threading.Event(), threading.Event()
    site.extra["/api/slow.json"] = lambda h: (asked.set(), gate.wait(20),
                                              h.respond(200, b"[]", content_type="application/json"))
    site.pages["/slow.html"] = (b"<html><body><script>fetch('/api/slow.json').then(() => "
                                b"document.body.innerHTML += '<a href=/item/1.html>x</a>')</script></body></html>")
    site.extra["/sleepy.html"] = slow_page(0.0, b"<html><body><p id=p></p><script>fetch('/api/nap.json')"
                                           b".then(() => document.getElementById('p').textContent = 'done')"
                                           b"</script></body></html>")
    site.extra["/api/nap.json"] = slow_page(0.6, b"[]", content_type="application/json")
    # a page whose script asks, every 100 ms, what the server never answers (until the end)
    hang = threading.Event()
    site.extra["/api/hang/*"] = lambda h: (hang.wait(60), h.respond(200, b"[]", content_type="application/json"))
    site.pages["/hang.html"] = (b"<html><body><p>busy</p><script>let n = 0; setInterval(() => "
                                b"fetch('/api/hang/' + (n++)).catch(() => 0), 100)</script></body></html>")
    # popups: two plain ones, and one that goes to a private address 0.6 s after it opened
    site.pages["/popup.html"] = (b"<html><body><p>opener</p><script>window.open('/item/1.html');"
                                 b"window.open('/item/2.html', '_blank'); window.open('/away-later.html')</script>"
                                 b"</body></html>")
    site.pages["/away-later.html"] = (b"<html><body><script>setTimeout(() => location = '" + PRIVATE_URL.encode() +
                                      b"', 600)</script></body></html>")
    # a script filling array buffers (outside the JavaScript heap's cap) without end
    site.pages["/hog.html"] = (b"<html><body><p>hog</p><script>const a = []; setInterval(() => { for (let i = 0; "
                               b"i < 8; i++) { const b = new Uint8Array(64 << 20); b.fill(1); a.push(b) } }, 50)"
                               b"</script></body></html>")
    # a page whose script goes back in the history (of a page opened afresh: there is nothing before)
    site.pages["/back.html"] = b"<html><body><a href=/item/3.html>three</a><script>history.back()</script></body></html>"
    site.pages["/to-blank.html"] = b"<html><body><a href=/item/3.html>three</a><script>location = 'about:blank'</script>"
    # a page whose script sends it to a JSON document
    site.pages["/to-json.html"] = (b"<html><body><a href=/item/2.html>two</a><script>"
                                   b"location = '/api/list-1.json'</script></body></html>")
    # a page with an async script whose server never answers (until the end)
    site.pages["/tracked.html"] = (b"<html><head><script async src='/api/hang/tracker.js'></script></head><body>"
                                   b"<div id=o></div><script>document.getElementById('o').innerHTML = "
                                   b"'<a href=/item/1.html>made</a>'</script></body></html>")
    # a page whose server sets a session cookie, and whose script sets one and asks an API for JSON
    site.extra["/session.html"] = lambda h: h.respond(200, (
        b"<html><body><div id=o></div><script>document.cookie = 'js=1; path=/';"
        b"fetch('/api/echo', {headers: {'Accept': 'application/json', 'X-Requested-With': 'XMLHttpRequest'}})"
        b".then(r => r.json()).then(d => { const a = document.createElement('a'); a.href = '/item/1.html';"
        b"a.textContent = JSON.stringify(d); document.getElementById('o').appendChild(a) })</script></body></html>"),
        headers={"Set-Cookie": "session=s1; Path=/"})
    site.extra["/api/echo"] = lambda h: h.respond(200, json.dumps(
        {name: h.headers.get(name) for name in ("Cookie", "Accept", "X-Requested-With")}).encode(),
        content_type="application/json")
    srv = SiteServer(site).start()
    srv.gate, srv.asked = gate, asked
    yield srv
    gate.set()
    hang.set()
    srv.stop()


@pytest.fixture(scope="module")
def visitor():
    browser_or_skip()
    v = Visitor()
    yield v
    v.close()


@pytest.fixture(scope="module")
def lone():
    """A renderer of one page slot (``--render-pages 1``), for the tests of what a page leaves
    to the next one; each sets the idle wait and deadline it needs (:func:`tune`). Its pages'
    own requests get 3.3 s, a third of its 10 s deadline (fixed when it is made)."""
    browser_or_skip()
    v = Visitor(max_pages=1)
    yield v
    v.close()


def tune(monkeypatch, v: Visitor, **settings) -> None:
    """Set the renderer's ``deadline`` or ``idle_timeout`` (seconds) of a shared visitor for
    one test (put back after it): a browser start per setting is 1-2 s."""
    for name, value in settings.items():
        monkeypatch.setattr(v.renderer, name, float(value))


def test_script_inserted_links_are_found_only_when_rendered(server, visitor):
    rendered = visitor.visit(server.url("/"))
    assert rendered.error_kind is None, rendered.error
    assert paths(rendered.links) == {"/list/1.html", "/list/2.html", "/hop.html"}
    assert rendered.render_seconds is not None and rendered.render_seconds > 0
    assert "<a href=\"/list/1.html\">" in rendered.content  # the rendered DOM is the document
    plain = visitor.visit(server.url("/"), render=False)
    assert plain.error_kind is None and plain.links == [] and plain.render_seconds is None


def test_list_loaded_with_fetch_and_private_address_refused_before_any_connection(server, visitor):
    connects: list = []
    watching = True

    def audit(event, args):  # every connect() this process makes (the fetcher runs here)
        if watching and event == "socket.connect":
            connects.append(args[1])

    sys.addaudithook(audit)
    visitor.fetcher.close()  # new connections, so the hook sees the ones this page makes
    visitor.renderer.fetcher.close()
    try:
        server.reset()
        page = visitor.visit(server.url("/list/1.html"))
    finally:
        watching = False
    assert page.error_kind is None, page.error
    assert paths(page.links) == {"/item/1.html", "/item/2.html", "/item/3.html", "/item/4.html"}
    refused = {url: kind for url, kind, _reason in page.refused_requests}
    assert refused == {PRIVATE_URL: "blocked"}
    assert "SSRF guard" in page.refused_requests[0][2]
    assert not [a for a in connects if isinstance(a, tuple) and a and a[0] == "10.0.0.1"]
    assert any(isinstance(a, tuple) and a[0] == "127.0.0.1" for a in connects)  # the hook did watch
    assert 'data-refused="yes"' in page.content  # the page saw its request fail
    assert server.count("/pic.png") == 0  # images are refused by type, never fetched
    assert server.count("/api/list-1.json") == 1


def test_sub_request_disallowed_by_robots_txt_is_refused(server, visitor):
    server.reset()
    page = visitor.visit(server.url("/list/2.html"))
    assert page.error_kind is None, page.error
    assert [(urlsplit(u).path, kind) for u, kind, _ in page.refused_requests] == [("/hidden/extra.json", "robots")]
    assert server.count("/hidden/extra.json") == 0


def test_client_side_redirect_is_followed(server, visitor):
    page = visitor.visit(server.url("/hop.html"))
    assert page.error_kind is None, page.error
    assert urlsplit(page.final_url).path == "/landing.html"
    assert paths(page.links) == {"/deep.html"}


def test_client_side_redirect_out_of_scope_is_refused(server, visitor):
    server.site.pages["/away.html"] = b"<html><body><script>location.href='http://localhost:1/'</script></body></html>"
    page = visitor.visit(server.url("/away.html"), scope=["127.0.0.1"])
    assert page.error_kind == "out_of_scope"  # as an HTTP redirect out of scope
    assert "client-side navigation to http://localhost:1/" in page.error
    assert [kind for _u, kind, _r in page.refused_requests] == ["out_of_scope"]
    # waiting for a selector the page never shows (it tried to leave): the same error at once, not
    # "render deadline ... passed waiting for 'a'" after the whole deadline (10 s here)
    began = time.monotonic()
    page = visitor.visit(server.url("/away.html"), scope=["127.0.0.1"], waitFor="a")
    assert page.error_kind == "out_of_scope" and "client-side navigation to http://localhost:1/" in page.error
    print(f"\n[refused navigation while waiting for a selector] failed after {time.monotonic() - began:.2f} s")
    # a foreign name is refused by the scope before the SSRF guard looks it up: out_of_scope,
    # not "connection: cannot resolve host" (retried, the page rendered three times in all)
    server.site.pages["/far.html"] = (b"<html><body><script>location.href='http://elsewhere.invalid/x'"
                                      b"</script></body></html>")
    page = visitor.visit(server.url("/far.html"), scope=["127.0.0.1"])
    assert page.error_kind == "out_of_scope", page.error
    assert "client-side navigation to http://elsewhere.invalid/x" in page.error and "outside the crawl's scope" in page.error


def test_client_side_redirect_to_a_place_that_cannot_be_fetched_fails_the_page_as_that_fetch(server, visitor):
    """A script sending the page to a closed port or to a missing page: the page fails as that
    fetch failed (an HTTP redirect there would), not stored as the DOM left behind (Chromium's
    error page, final URL chrome-error://chromewebdata/, or an empty document) with no error."""
    import socket
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{sock.getsockname()[1]}/x"
    server.site.pages["/to-dead.html"] = f"<html><body><script>location.href='{dead}'</script></body></html>".encode()
    server.site.pages["/to-missing.html"] = b"<html><body><script>location.href='/missing.html'</script></body></html>"
    page = visitor.visit(server.url("/to-dead.html"))
    assert (page.error_kind, page.content) == ("connection", None), (page.final_url, page.error)
    assert f"client-side navigation to {dead}: cannot connect" in page.error
    assert not (page.final_url or "").startswith("chrome-error:")
    page = visitor.visit(server.url("/to-missing.html"))
    assert page.error_kind == "http_status", (page.final_url, page.error)
    assert f"client-side navigation to {server.url('/missing.html')}" in page.error
    # waiting for a selector: the same error at once, not the whole deadline's timeout
    page = visitor.visit(server.url("/to-dead.html"), waitFor="a")
    assert page.error_kind == "connection", page.error


def test_a_page_that_reloads_itself_is_fetched_a_bounded_number_of_times_and_kept(server, visitor):
    """A script calling location.reload() at every load (or a moment after it): the page is
    fetched at most 1 + MAX_NAVIGATIONS times, then stays on the document it shows, which is
    stored with its links. Before, it was fetched 501 times in 25 s and Chromium's error page
    (final URL chrome-error://chromewebdata/, no links) was stored as the page, with no error."""
    from gridcrawl.executor.render import MAX_NAVIGATIONS
    server.site.pages["/reload.html"] = (b"<html><body><a href='/item/1.html'>one</a>"
                                         b"<script>location.reload()</script></body></html>")
    server.site.pages["/reload-later.html"] = (b"<html><body><a href='/item/2.html'>two</a>"
                                               b"<script>setTimeout(() => location.reload(), 100)</script></body></html>")
    for path, link in (("/reload.html", "/item/1.html"), ("/reload-later.html", "/item/2.html")):
        server.reset()
        began = time.monotonic()
        page = visitor.visit(server.url(path))
        took = time.monotonic() - began
        assert page.error_kind is None, page.error
        assert urlsplit(page.final_url).path == path and paths(page.links) == {link}
        assert server.count(path) == 1 + MAX_NAVIGATIONS
        assert [kind for _u, kind, _r in page.refused_requests] == ["too_many_navigations"]
        assert took < 8, took  # not the render deadline (10 s here)
        print(f"\n[{path}] {server.count(path)} fetches, {took:.2f} s")
    # a page that reloads once (a cookie set, then the page again) is not refused
    server.site.pages["/once.html"] = (b"<html><body><a href='/item/3.html'>three</a><script>"
                                       b"if (!sessionStorage.getItem('r')) { sessionStorage.setItem('r', '1'); "
                                       b"location.reload() }</script></body></html>")
    page = visitor.visit(server.url("/once.html"))
    assert page.error_kind is None and page.refused_requests in (None, []) and paths(page.links) == {"/item/3.html"}


def test_a_fragment_a_script_sets_is_not_part_of_the_final_url(server, visitor):
    """A hash router's ``#/home`` (here a new random fragment every 20 ms) does not load another
    document: the final URL is the page's, without it, as an HTTP fetch's is (before, the page's
    IRI for its Open Graph triples changed at every render)."""
    server.site.pages["/hashy.html"] = (b'<html><head><meta property="og:title" content="Hashy"></head><body>'
                                        b'<a href="/deep.html">d</a><script>location.hash = "#/home"; setInterval('
                                        b'() => { location.hash = "#" + Math.random() }, 20)</script></body></html>')
    page = visitor.visit(server.url("/hashy.html"), semantic=True)
    assert page.error_kind is None, page.error
    assert page.final_url == server.url("/hashy.html")
    assert [t[0] for t in page.triples if t[1] == "http://ogp.me/ns#title"] == [server.url("/hashy.html")]


def test_links_and_text_in_open_shadow_roots_are_found_where_they_show(server, visitor, monkeypatch):
    """A web component's open shadow root is serialised in place (the DOM's flat tree): its link
    is found, a ``<slot>`` shows the light-DOM link assigned to it once, its text and markup keep
    their escaping (raw ``<style>``, ``&``/``"`` in values); a closed root stays unseen."""
    server.site.pages["/shadow.html"] = (
        b'<!DOCTYPE html><html lang="en"><head><title>Shadow</title></head><body>'
        b'<x-nav><a href="/item/2.html">slotted link</a></x-nav><x-secret></x-secret>'
        b'<script>customElements.define("x-nav", class extends HTMLElement { constructor() { super();'
        b' this.attachShadow({mode: "open"}).innerHTML = \'<style>a > b {}</style><nav title="say &quot;hi&quot;">'
        b'<a href="/item/1.html?a=1&amp;b=2">shadow link</a> <slot></slot><slot name="none">fallback &lt;text&gt;'
        b'</slot></nav>\' } });'
        b'customElements.define("x-secret", class extends HTMLElement { constructor() { super();'
        b' this.attachShadow({mode: "closed"}).innerHTML = \'<a href="/item/3.html">closed link</a>\' } });'
        b'</script></body></html>')
    tune(monkeypatch, visitor, idle_timeout=0.0)  # (its scripts run as it loads: no network idle to wait for)
    page = visitor.visit(server.url("/shadow.html"))
    assert page.error_kind is None, page.error
    anchors = {urlsplit(url).path: text for url, text in page.links}
    assert anchors == {"/item/1.html": "shadow link", "/item/2.html": "slotted link"}
    assert server.url("/item/1.html?a=1&b=2") in {url for url, _ in page.links}
    assert page.content.startswith("<!DOCTYPE html><html lang=\"en\">")
    assert page.content.count("slotted link") == 1
    assert "<style>a > b {}</style>" in page.content
    assert 'title="say &quot;hi&quot;"' in page.content and "fallback &lt;text&gt;" in page.content
    assert "<x-secret></x-secret>" in page.content  # (the closed root's link: not among the links above)


def test_a_dom_too_deep_to_flatten_is_taken_as_it_is(server, visitor, monkeypatch):
    """A shadow host in a DOM of 30,000 nested elements (a script's, past the script stack's
    depth): the DOM is taken without flattening, not lost."""
    server.site.pages["/deep-shadow.html"] = (
        b'<html><body><div id=host></div><div id=deep style="display: none"></div><script>document.getElementById("host").attachShadow({mode: "open"})'
        b'.innerHTML = "<a href=/item/1.html>in shadow</a>"; let e = document.getElementById("deep");'
        b'for (let i = 0; i < 30000; i++) { const d = document.createElement("div"); e.appendChild(d); e = d }'
        b'e.innerHTML = "<a href=/item/2.html>at the bottom</a>"</script></body></html>')
    tune(monkeypatch, visitor, idle_timeout=0.0)  # (its script runs as it loads: no network idle to wait for)
    page = visitor.visit(server.url("/deep-shadow.html"))
    assert page.error_kind is None, page.error
    assert '<a href="/item/2.html">at the bottom</a>' in page.content
    assert '<div id="host"></div>' in page.content  # (not flattened: its shadow root's link is not there)


def test_fetch_render_of_a_page_whose_request_never_answers_ends_quietly(server):
    """``gridcrawl fetch --render`` of a page whose script waits on a request that never answers
    printed "ERROR asyncio: Task was destroyed but it is pending!" as it ended, and ended only
    when that request's fetch gave up (30 s; the server here holds it 20 s): its thread pool was
    joined at exit."""
    import subprocess
    server.gate.clear()
    done = subprocess.run([sys.executable, "-m", "gridcrawl", "fetch", server.url("/slow.html"), "--render",
                           "--allow-private", "127.0.0.0/8", "--browser-path", browser_or_skip(),
                           "--wait-for", "body"], capture_output=True, text=True, timeout=15,
                          env={**os.environ, "GRIDCRAWL_RENDER_IDLE": "0.5"})
    assert done.returncode == 0, done.stderr
    assert "Task was destroyed" not in done.stderr and "Traceback" not in done.stderr, done.stderr


def test_a_pages_requests_carry_its_headers_and_cookies(server, visitor):
    """The page's own request headers (an API answering JSON only to ``Accept:
    application/json``) and its cookies (the server's ``Set-Cookie`` on the document, the
    script's ``document.cookie``) go with its requests, as a browser sends them; they went as the
    crawler's (``Accept: text/html...``, no cookie), and such an API answered the page's script
    with what it was not waiting for."""
    page = visitor.visit(server.url("/session.html"))
    assert page.error_kind is None, page.error
    (sent,) = [json.loads(text) for _url, text in page.links]
    assert sent == {"Cookie": "session=s1; js=1", "Accept": "application/json", "X-Requested-With": "XMLHttpRequest"}


def test_a_script_whose_host_never_answers_costs_a_share_of_the_deadline_not_the_page(server, visitor):
    """An async script whose server never answers (a tracker's) holds the ``load`` event until
    its request ends: the request gets a third of the page's deadline, and the page is taken with
    what its own scripts made, where it failed as ``timeout`` at the deadline."""
    page = visitor.visit(server.url("/tracked.html"))
    assert page.error_kind is None, page.error
    assert paths(page.links) == {"/item/1.html"}


def test_a_scripts_webrtc_sends_no_packet(server, visitor):
    """WebRTC's UDP (a STUN or TURN server a script names) went past both the interception and
    the browser's dead proxy: a page's RTCPeerConnection sent datagrams to any address. Now
    WebRTC may use the proxy only, and no packet leaves."""
    import socket
    listener = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    listener.bind(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    server.site.pages["/rtc.html"] = (
        "<html><body><script>const pc = new RTCPeerConnection({iceServers: ["
        f"{{urls: 'stun:127.0.0.1:{port}'}}, {{urls: 'turn:127.0.0.1:{port}?transport=udp', username: 'u', "
        "credential: 'c'}]}); pc.createDataChannel('d'); const done = () => { if (!document.getElementById('done')) "
        "document.body.innerHTML += '<a id=done href=/item/1.html>done</a>' };"
        "pc.onicegatheringstatechange = () => { if (pc.iceGatheringState === 'complete') done() };"
        "pc.createOffer().then(o => pc.setLocalDescription(o)); setTimeout(done, 1500)</script></body></html>").encode()
    try:
        page = visitor.visit(server.url("/rtc.html"), waitFor="#done")
        assert page.error_kind is None, page.error
        listener.settimeout(0.5)
        with pytest.raises(socket.timeout):
            data, sender = listener.recvfrom(2048)
    finally:
        listener.close()


def test_a_page_whose_script_sends_it_to_a_document_that_is_not_html_is_that_document(server, visitor):
    """``location = '/api/list-1.json'``: as an HTTP redirect there, the page is the JSON document
    (its URL, type and bytes), not Chromium's viewer page for it stored as HTML (a ``<pre>`` of
    the JSON; an empty placeholder for a PDF)."""
    page = visitor.visit(server.url("/to-json.html"))
    assert page.error_kind is None, page.error
    assert urlsplit(page.final_url).path == "/api/list-1.json"
    assert page.content_type == "application/json" and page.links == []
    assert page.size == len(server.site.pages["/api/list-1.json"])


def test_a_page_that_goes_back_in_its_history_stays_as_on_a_page_opened_afresh(server, visitor):
    """The browser page is reused, so its history held ``about:blank`` and the pages before:
    ``history.back()`` left ``about:blank`` stored as the page (no links, no error). Going back
    now does nothing, as on a page opened afresh."""
    assert visitor.visit(server.url("/")).error_kind is None  # a page before it, on the same browser page
    page = visitor.visit(server.url("/back.html"))
    assert page.error_kind is None, page.error
    assert urlsplit(page.final_url).path == "/back.html" and paths(page.links) == {"/item/3.html"}


def test_a_page_whose_script_sends_it_to_about_blank_fails_as_a_redirect_there_would(server, visitor):
    """``location = 'about:blank'`` (a script's way out for a visitor it takes for a bot): no
    request goes there, and the page's empty DOM was stored, final URL ``about:blank``, no
    error. It fails as an HTTP redirect to a URL that is not http(s)."""
    page = visitor.visit(server.url("/to-blank.html"))
    assert page.error_kind == "invalid_url" and "about:blank" in page.error, (page.error_kind, page.error)


def test_wait_for_a_css_selector(server, visitor):
    page = visitor.visit(server.url("/sleepy.html"), waitFor="#p:not(:empty)")
    assert page.error_kind is None, page.error
    assert '<p id="p">done</p>' in page.content


def test_a_script_that_loops_forever_is_cut_at_the_deadline_and_the_browser_goes_on(server, visitor, monkeypatch):
    tune(monkeypatch, visitor, deadline=2.0, idle_timeout=0.0)  # the shell's links exist at load
    launches = visitor.renderer.launches
    assert visitor.visit(server.url("/")).error_kind is None  # one page slot, kept
    page = visitor.visit(server.url("/loop.html"))  # the other one (the two are taken in turn)
    assert page.error_kind == "timeout"
    assert "render deadline of 2 s" in page.error
    assert 1.9 <= page.render_seconds < 15  # cut, not hung (bound generous on a busy machine)
    after = visitor.visit(server.url("/"))  # the first slot again
    assert after.error_kind is None and len(after.links) == 3
    assert visitor.renderer.launches == launches  # the same browser went on


def test_at_most_render_pages_open_at_once(server, visitor):
    results = []

    def work():
        results.append(visitor.visit(server.url("/sleepy.html"), waitFor="#p:not(:empty)"))

    threads = [threading.Thread(target=work) for _ in range(3)]  # one more than max_pages
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert [r.error_kind for r in results] == [None] * 3
    assert visitor.renderer.peak_open_pages == 2  # max_pages


def test_browser_restarted_after_n_pages(server):
    v = Visitor(restart_after=2, idle_timeout=0.0)  # the shell's links exist at load
    try:
        for _ in range(4):
            assert v.visit(server.url("/")).error_kind is None
        assert v.renderer.launches == 2  # pages 1-2, 3-4 (a count never reset: 1-2, 3, 4)
    finally:
        v.close()


def test_a_browser_killed_mid_page_fails_the_page_as_render_and_is_relaunched(server):
    import psutil
    v = Visitor(idle_timeout=15.0)
    try:
        server.gate.clear()
        server.asked.clear()
        box = []
        t = threading.Thread(target=lambda: box.append(v.visit(server.url("/slow.html"))))
        t.start()
        assert server.asked.wait(20)  # the page is open, its script waiting on the gated request
        pids = v.renderer.browser_pids()
        assert pids
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        t.join(30)
        server.gate.set()
        assert box and box[0].error_kind == "render", box
        again = v.visit(server.url("/"))
        assert again.error_kind is None, again.error
        assert v.renderer.launches == 2
        assert not any(psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
                       for pid in pids)
    finally:
        server.gate.set()
        v.close()


def test_a_thread_that_needs_rendering_fails_as_render_on_an_executor_without_a_browser(server):
    fetcher = Fetcher(user_agent=UA, hop_check=SSRFGuard(["127.0.0.0/8"]).check)
    try:
        page = visit(fetcher, server.url("/"), instruction={"render": True})
    finally:
        fetcher.close()
    assert page.error_kind == "render" and "--render" in page.error


def test_no_browser_is_one_line_saying_what_to_install():
    pytest.importorskip("playwright.async_api", reason="playwright is not installed")
    from gridcrawl.executor.render import RenderUnavailable, Renderer
    with pytest.raises(RenderUnavailable) as info:
        Renderer(Fetcher(user_agent=UA), browser_path="/nonexistent/chromium").start()
    message = str(info.value)
    assert "\n" not in message and "/nonexistent/chromium" in message and "gridcrawl[render]" in message


def test_pages_are_reused_without_cookies_of_the_page_before(server, visitor, monkeypatch):
    server.site.pages["/cookie-set.html"] = b"<html><body><script>document.cookie = 'k=v'</script></body></html>"
    server.site.pages["/cookie-read.html"] = (b"<html><body><p id=c></p><script>"
                                              b"document.getElementById('c').textContent = 'cookie:' + document.cookie"
                                              b"</script></body></html>")
    tune(monkeypatch, visitor, idle_timeout=0.0)  # (their scripts run as they load: no network idle to wait for)
    launches = visitor.renderer.launches
    assert visitor.visit(server.url("/cookie-set.html")).error_kind is None
    for _ in range(visitor.renderer.max_pages):  # every page slot once, the one that set it included
        page = visitor.visit(server.url("/cookie-read.html"))
        assert '<p id="c">cookie:</p>' in page.content
    assert visitor.renderer.launches == launches


ITEM_SPEC = """
[[item]]
type = "entry"
page_type = "list"
render = true
wait_for = "li.item"
each = "li.item"
[item.fields]
name = { css = "a::text", required = true }
link = { css = "a::attr(href)", type = "url" }
"""


def shop_rules() -> list:
    """Follow rules that give the page types the item spec names (list, item)."""
    from gridcrawl.rules import Rule
    return [Rule("http://shop.test/", "follow", "base", "list", number=1),
            Rule("http://shop.test/", "follow", "list", "item", number=2)]


def test_a_recrawl_renders_a_page_whose_shell_is_unchanged_and_digests_the_rendered_dom(server, visitor):
    """The shell answers 304 to its stored ETag, but what its scripts load may have changed: a
    page to render is asked for in full, and its digest (what a recrawl compares and duplicates
    are found by) is the rendered DOM's, which two pages of one shell do not share."""
    import hashlib
    server.site.etags["/list/1.html"] = '"shell-1"'
    shell = visitor.visit(server.url("/list/1.html"), render=False, ifNoneMatch='"shell-1"')
    assert shell.status == 304  # the server honours the validator
    page = visitor.visit(server.url("/list/1.html"), ifNoneMatch='"shell-1"', waitFor="li.item")
    assert page.error_kind is None and page.status == 200, (page.status, page.error)
    assert paths(page.links) >= {f"/item/{n}.html" for n in range(1, 5)}
    assert page.digest == hashlib.sha256(page.content.encode("utf-8")).hexdigest()
    plain = visitor.visit(server.url("/list/1.html"), render=False)
    assert plain.digest != page.digest


def test_items_of_an_item_spec_with_render_come_from_the_rendered_dom(server, visitor):
    from gridcrawl.client.store import Strategy
    from gridcrawl.items import parse_spec, spec_to_wire, specs_for
    specs = parse_spec(ITEM_SPEC)
    url = server.url("/list/1.html")
    mine = specs_for(specs, url, "list")
    render = Strategy(items=specs, rules=shop_rules()).render_instruction("list", mine)
    assert render == {"render": True, "waitFor": "li.item"}  # the spec asks for it
    assert Strategy(items=specs, rules=shop_rules()).render_instruction("item", specs_for(specs, url, "item")) == {}
    wire = [spec_to_wire(s) for s in mine]
    page = visit(visitor.fetcher, url, instruction={"items": wire, **render}, robots=visitor.robots,
                 renderer=visitor.renderer)
    assert page.error_kind is None, page.error
    assert [item["fields"]["name"] for item in page.items] == [f"Item {n}" for n in range(1, 5)]
    assert urlsplit(page.items[0]["fields"]["link"]).path == "/item/1.html"
    plain = visit(visitor.fetcher, url, instruction={"items": wire}, robots=visitor.robots)
    assert plain.items == []  # the list exists only after its script ran


def test_an_item_spec_render_must_be_true_or_false():
    from gridcrawl.items import ItemSpecError, parse_spec
    with pytest.raises(ItemSpecError, match="render must be true or false"):
        parse_spec(ITEM_SPEC.replace("render = true", 'render = "yes"'))


def test_threads_of_pages_to_render_need_the_render_capability(tmp_path):
    from gridcrawl.client.app import CrawlApplication
    from gridcrawl.client.store import CrawlStore, Pending, Scope, Strategy
    from gridcrawl.db import open_database
    from gridcrawl.items import parse_spec
    from gridcrawl.rules import PageType
    from gridcrawl.settings import Settings
    store = CrawlStore(open_database(f"sqlite:///{tmp_path / 'crawl.db'}"))
    store.strategy = Strategy(items=parse_spec(ITEM_SPEC), rules=shop_rules(),
                              page_types={"base": PageType(render=True)})
    app = CrawlApplication(Settings(), "tcp://127.0.0.1:1", store, Scope(["shop.test"]))
    try:
        def needs(page_type):
            return app._needs(Pending(1, "http://shop.test/x", "f" * 32, 0, page_type=page_type))
        assert needs("base") == ["render"]   # the page type asks
        assert needs("list") == ["render"]   # the item spec that applies to it asks
        assert needs("item") == []
    finally:
        app.context.term()


def test_a_page_whose_requests_hang_does_not_starve_the_pages_after_it(server, lone, monkeypatch):
    """A page's requests that the server never answers end when the page closes. They held the
    renderer's fetch workers until their own deadline, and the next pages' ``fetch()`` calls
    queued behind them: those pages were stored as empty shells, no error, no links."""
    tune(monkeypatch, lone, idle_timeout=1.0)
    hung = lone.visit(server.url("/hang.html"))
    assert hung.error_kind is None, hung.error  # the DOM is taken when the idle wait passes
    for _ in range(3):
        page = lone.visit(server.url("/list/2.html"))
        assert page.error_kind is None, page.error
        assert paths(page.links) == {f"/item/{n}.html" for n in range(5, 9)}, page.content


def test_popups_are_closed_at_once_and_cannot_fail_the_page_after(server, lone, monkeypatch):
    """Pages a page opens (``window.open``) are closed and recorded as refused. Left open they
    piled up in the page slot's context, and one that navigated to a refused address later
    failed the next page, which had done nothing, as "client-side navigation ... refused"."""
    tune(monkeypatch, lone, idle_timeout=0.5)
    opener = lone.visit(server.url("/popup.html"))
    assert opener.error_kind is None, opener.error
    popups = sorted(urlsplit(url).path for url, kind, _ in opener.refused_requests if kind == "popup")
    assert popups == ["/away-later.html", "/item/1.html", "/item/2.html"], opener.refused_requests
    began = time.monotonic()
    while time.monotonic() - began < 1.5:  # past the popup's 0.6 s timer
        page = lone.visit(server.url("/list/2.html"))
        assert page.error_kind is None, page.error
    assert len(lone.renderer._slots[0].context.pages) == 1


def test_a_renderer_past_its_memory_cap_is_killed_and_the_browser_goes_on(server, lone, monkeypatch):
    """A script filling array buffers (which V8's heap cap does not count) took 2.5 GB of the
    desktop in 2 s. Its renderer is killed past RENDERER_MB, the page fails as ``render`` (a new
    attempt, maybe elsewhere), and the next page renders in the same browser."""
    tune(monkeypatch, lone, idle_timeout=5.0, deadline=20.0)
    kills, launches = lone.renderer.memory_kills, lone.renderer.launches
    hog = lone.visit(server.url("/hog.html"))
    assert hog.error_kind == "render", (hog.error_kind, hog.error)
    assert re.fullmatch(r"its renderer process took \d+ MB \(more than 1024\) and was killed", hog.error)
    assert lone.renderer.memory_kills == kills + 1
    after = lone.visit(server.url("/list/2.html"))
    assert after.error_kind is None and len(after.links) == 4, after.error
    assert lone.renderer.launches == launches


def test_a_thread_waits_for_a_browser_page_no_longer_than_slot_wait(server, lone, monkeypatch):
    """Worker threads wait for one of the render_pages pages at most SLOT_WAIT_SECONDS, then their
    page fails as ``render`` (a new attempt): behind a run of slow pages they waited without end,
    past the manager's thread_timeout."""
    from grid import wait_for
    from gridcrawl.executor import render
    monkeypatch.setattr(render, "SLOT_WAIT_SECONDS", 1.0)
    # the loop holds the page 2.5 s from when it opened; the wait gives up 1 s after that
    tune(monkeypatch, lone, deadline=2.5, idle_timeout=0.0)
    slow = threading.Thread(target=lone.visit, args=(server.url("/loop.html"),))
    slow.start()
    try:
        wait_for(lambda: lone.renderer.open_pages == 1, 20, message="the looping page open")
        waited = lone.visit(server.url("/"))
    finally:
        slow.join(30)
    assert waited.error_kind == "render"
    assert waited.error == "no browser page came free within 1 s (--render-pages 1: more pages, or fewer " \
                           "--threads, wait less)"
    assert lone.visit(server.url("/")).error_kind is None
