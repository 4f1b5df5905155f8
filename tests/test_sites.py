"""Tests of the local test web sites themselves: the generator, reachable(), SiteServer and the nginx docs site.

These check the test bed that every crawl test trusts: that generated sites
are deterministic, that ``reachable()`` is the answer a real crawl over HTTP
finds, and that ``SiteServer`` speaks HTTP/1.1 (404, HEAD, keep-alive),
records requests and concurrency, and applies latency. All traffic goes to
127.0.0.1.
"""

from __future__ import annotations

import collections
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from urllib.parse import urldefrag, urljoin, urlsplit

import lxml.html
import pytest
import requests

from docsite import docs_available, serve_python_docs
from grid import free_port
from sites import (
    EXTERNAL_HOST,
    Site,
    SiteServer,
    generate_site,
    reachable,
    redirect,
    slow_page,
    status_page,
)


def http_bfs(base_url: str) -> tuple[set[str], set[str], set[str]]:
    """Crawl ``base_url`` breadth-first over real HTTP, following links on that host only.

    Returns (paths fetched with 200, paths that were not 200, hrefs seen that
    were out of scope or not http). Never requests anything but ``base_url``'s host.
    """
    netloc = urlsplit(base_url).netloc
    assert urlsplit(base_url).hostname == "127.0.0.1"
    ok: set[str] = set()
    bad: set[str] = set()
    skipped: set[str] = set()
    seen = {"/"}
    todo = collections.deque(["/"])
    with requests.Session() as s:
        while todo:
            path = todo.popleft()
            url = base_url + path
            r = s.get(url, timeout=10, allow_redirects=False)
            if r.status_code != 200:
                bad.add(path)
                continue
            ok.add(path)
            doc = lxml.html.fromstring(r.content, base_url=url)
            for href in doc.xpath("//a/@href"):
                absolute, _frag = urldefrag(urljoin(url, href.strip()))
                parts = urlsplit(absolute)
                if parts.scheme not in ("http", "https") or parts.netloc != netloc:
                    skipped.add(href)
                    continue
                target = parts.path + (f"?{parts.query}" if parts.query else "")
                if target not in seen:
                    seen.add(target)
                    todo.append(target)
    return ok, bad, skipped


# --------------------------------------------------------------------------- generator


def test_generate_site_is_deterministic():
    a = generate_site(80, links_per_page=4, seed=7, page_bytes=1500, unreachable=2)
    b = generate_site(80, links_per_page=4, seed=7, page_bytes=1500, unreachable=2)
    assert a == b
    c = generate_site(80, links_per_page=4, seed=8, page_bytes=1500, unreachable=2)
    assert c.links != a.links
    assert c.pages != a.pages


def test_generate_site_shape(small_site):
    site = small_site
    expected = {"/"} | {f"/p/{i}.html" for i in range(1, 63)}
    assert set(site.pages) == expected
    assert set(site.types) == expected and set(site.links) == expected
    assert all(t.startswith("text/html") for t in site.types.values())
    for path, body in site.pages.items():
        text = body.decode("utf-8")
        assert text.startswith("<!DOCTYPE html>")
        assert "<title>" in text and "</title>" in text
        assert len(site.links[path]) == len(set(site.links[path]))  # each target once
        assert path not in site.links[path]
        assert set(site.links[path]) <= expected
    # the answer: 60 reachable pages, the 3 extra ones are linked from nowhere
    assert reachable(site) == expected - {"/p/60.html", "/p/61.html", "/p/62.html"}
    linked = {dst for dsts in site.links.values() for dst in dsts}
    assert not linked & {"/p/60.html", "/p/61.html", "/p/62.html"}
    assert site.links["/p/60.html"]  # unreachable pages still link into the site


def test_generate_site_link_forms(small_site):
    everything = b"".join(small_site.pages.values())
    home = small_site.pages["/"]
    for needle in (b'href="mailto:', b'href="javascript:', f'href="http://{EXTERNAL_HOST}/'.encode(), b'href="{BASE}/'):
        assert needle in home
    assert b'#frag"' in home
    for needle in (b'href="../', b'href="/p/', b'href="./', b"#s"):
        assert needle in everything
    # relative to the page's own directory: href="12.html"
    assert any(b'href="%d.html' % i in everything for i in range(1, 60))
    # duplicates: some page links the same target more than once
    hrefs = lxml.html.fromstring(home).xpath("//a/@href")
    resolved = [urldefrag(urljoin("http://h/", h.replace("{BASE}", "http://h")))[0] for h in hrefs]
    assert len(resolved) > len(set(resolved))


def test_page_bytes_pads_pages():
    site = generate_site(20, seed=3, page_bytes=5000)
    for body in site.pages.values():
        assert 4900 <= len(body) <= 5100
    plain = generate_site(20, seed=3)
    assert all(len(body) < 2000 for body in plain.pages.values())


def test_generate_site_rejects_bad_arguments():
    with pytest.raises(ValueError):
        generate_site(0)
    with pytest.raises(ValueError):
        generate_site(5, unreachable=-1)
    one = generate_site(1)
    assert set(one.pages) == {"/"} and reachable(one) == {"/"}


def test_reachable_on_a_known_graph():
    site = Site(links={"/": ["/a"], "/a": ["/b", "/"], "/c": ["/a"], "/b": ["/missing"]})
    assert reachable(site) == {"/", "/a", "/b", "/missing"}
    assert reachable(site, "/c") == {"/", "/a", "/b", "/c", "/missing"}
    assert reachable(site, "/missing") == {"/missing"}


# --------------------------------------------------------------------------- server


def test_reachable_matches_http_crawl(small_site, site_server):
    srv = site_server(small_site)
    ok, bad, skipped = http_bfs(srv.base_url)
    assert bad == set()
    assert ok == reachable(small_site)
    assert len(ok) == 60
    assert any(EXTERNAL_HOST in h for h in skipped)
    assert any(h.startswith("mailto:") for h in skipped)
    assert any(h.startswith("javascript:") for h in skipped)
    counts = srv.per_path_counts()
    assert set(counts) == ok
    assert all(n == 1 for n in counts.values())
    assert srv.count("/") == 1 and srv.count("/p/60.html") == 0


def test_base_placeholder_is_replaced(small_site, site_server):
    srv = site_server(small_site)
    body = requests.get(srv.url("/"), timeout=10).content
    assert b"{BASE}" not in body
    assert f'href="{srv.base_url}/p/'.encode() in body
    assert srv.base_url.startswith("http://127.0.0.1:") and srv.url("/x") == srv.base_url + "/x"


def test_unknown_path_is_404_and_head_has_no_body(small_site, site_server):
    srv = site_server(small_site)
    with requests.Session() as s:
        r = s.get(srv.url("/no/such/page.html"), timeout=10)
        assert r.status_code == 404
        assert r.headers["Content-Length"] == str(len(r.content))
        get = s.get(srv.url("/p/1.html"), timeout=10)
        assert get.status_code == 200
        assert get.headers["Content-Type"] == "text/html; charset=utf-8"
        assert int(get.headers["Content-Length"]) == len(get.content) > 0
    # HEAD then GET pipelined on one raw socket, read to EOF: a HEAD response
    # that wrongly carried a body would show up between the two responses
    # (requests and http.client both silently discard such stray bytes)
    with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as raw:
        raw.sendall(
            b"HEAD /p/1.html HTTP/1.1\r\nHost: x\r\n\r\n"
            b"GET /p/1.html?utm=1 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        )
        data = b""
        while chunk := raw.recv(65536):
            data += chunk
    head, rest = data.split(b"\r\n\r\n", 1)
    assert head.startswith(b"HTTP/1.1 200 ")
    assert b"\r\nContent-Length: " + get.headers["Content-Length"].encode() + b"\r\n" in head + b"\r\n"
    assert rest.startswith(b"HTTP/1.1 200 ")  # nothing between the HEAD response and the next one
    assert rest.split(b"\r\n\r\n", 1)[1] == get.content  # a query string that is not a page is ignored
    assert [(r.method, r.status) for r in srv.requests] == [("GET", 404), ("GET", 200), ("HEAD", 200), ("GET", 200)]
    assert srv.count("/p/1.html?utm=1") == 1 and srv.count("/p/1.html") == 2


def test_keep_alive_reuses_one_connection(small_site, site_server):
    srv = site_server(small_site)
    with requests.Session() as s:
        for p in ("/", "/p/1.html", "/p/2.html"):
            assert s.get(srv.url(p), timeout=10).status_code == 200
    for p in ("/", "/p/1.html"):
        with requests.Session() as s:  # a new connection each
            assert s.get(srv.url(p), timeout=10).status_code == 200
    threads = [r.thread for r in srv.requests]
    assert len(set(threads[:3])) == 1  # one handler thread per connection
    assert len(set(threads)) == 3


def test_request_records_and_max_concurrency(small_site, site_server):
    srv = site_server(small_site, latency=0.3)
    paths = [f"/p/{i}.html" for i in range(1, 6)]
    barrier = threading.Barrier(len(paths))
    statuses: list[int] = []

    def fetch(path: str) -> None:
        with requests.Session() as s:
            barrier.wait()
            statuses.append(s.get(srv.url(path), timeout=10).status_code)

    workers = [threading.Thread(target=fetch, args=(p,)) for p in paths]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert statuses == [200] * 5
    assert srv.max_concurrency() >= 2
    assert sorted(r.path for r in srv.requests) == sorted(paths)
    assert all(srv.count(p) == 1 for p in paths)
    assert srv.per_path_counts() == {p: 1 for p in paths}
    assert all(r.finished - r.started >= 0.3 for r in srv.requests)
    srv.reset()
    assert srv.requests == [] and srv.max_concurrency() == 0


def test_latency_is_applied(small_site, site_server):
    srv = site_server(small_site, latency=0.25)
    t0 = time.monotonic()
    r = requests.get(srv.url("/nothing-here"), timeout=10)
    elapsed = time.monotonic() - t0
    assert r.status_code == 404
    assert elapsed >= 0.25  # a lower bound: sleep never returns early
    (rec,) = srv.requests
    assert rec.finished - rec.started >= 0.25
    srv.latency = 0.0  # changeable while running
    assert requests.get(srv.url("/"), timeout=10).status_code == 200


def test_extra_handlers(small_site, site_server):
    small_site.extra["/moved"] = redirect("{BASE}/p/2.html", 301)
    small_site.extra["/boom"] = status_page(503, b"busy")
    small_site.extra["/slow"] = slow_page(0.1, b"<html><title>slow</title></html>")
    small_site.extra["/p/3.html"] = status_page(410)  # extra wins over pages
    srv = site_server(small_site)
    with requests.Session() as s:
        r = s.get(srv.url("/moved"), timeout=10, allow_redirects=False)
        assert r.status_code == 301 and r.headers["Location"] == srv.url("/p/2.html")
        followed = s.get(srv.url("/moved"), timeout=10)
        assert followed.url == srv.url("/p/2.html") and followed.content == requests.get(srv.url("/p/2.html"), timeout=10).content
        boom = s.get(srv.url("/boom"), timeout=10)
        assert boom.status_code == 503 and boom.content == b"busy"
        slow = s.get(srv.url("/slow"), timeout=10)
        assert slow.status_code == 200 and b"slow" in slow.content
        assert s.get(srv.url("/p/3.html"), timeout=10).status_code == 410
    assert srv.count("/moved") == 2


def test_stop_closes_server_and_open_connections(small_site):
    srv = SiteServer(small_site)
    with pytest.raises(RuntimeError):
        srv.base_url
    with srv:
        s = requests.Session()
        assert s.get(srv.url("/"), timeout=10).status_code == 200  # leaves a keep-alive connection open
    with pytest.raises(requests.ConnectionError):
        s.get(srv.url("/"), timeout=5)
    s.close()
    srv.stop()  # idempotent


# --------------------------------------------------------------------------- nginx docs site

_NO_DOCS = docs_available()


@pytest.mark.skipif(_NO_DOCS is not None, reason=f"docs site unavailable: {_NO_DOCS}")
def test_docsite_serves_python_docs():
    with serve_python_docs() as base:
        assert base.startswith("http://127.0.0.1:")
        with requests.Session() as s:
            r = s.get(base + "/index.html", timeout=10)
            assert r.status_code == 200
            assert r.headers["Content-Type"].startswith("text/html")
            assert b"<title>" in r.content
            assert s.get(base + "/contents.html", timeout=10).status_code == 200
            assert s.get(base + "/no-such-page.html", timeout=10).status_code == 404
    with pytest.raises(requests.ConnectionError):
        requests.get(base + "/index.html", timeout=5)


@pytest.mark.skipif(_NO_DOCS is not None, reason=f"docs site unavailable: {_NO_DOCS}")
def test_docsite_command_stops_nginx_on_sigterm(tmp_path):
    """``python tests/docsite.py`` (the README's way to serve the docs) stopped with ``kill``
    (SIGTERM) stops its nginx too and deletes its temp dir: nothing keeps serving the port."""
    port = free_port()
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    proc = subprocess.Popen([sys.executable, os.path.join(os.path.dirname(__file__), "docsite.py"), "--port", str(port)],
                            stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert "serving" in proc.stdout.readline()
        assert requests.get(f"http://127.0.0.1:{port}/index.html", timeout=10).status_code == 200
        assert [p.name for p in tmp_path.iterdir() if p.name.startswith("gridcrawl-nginx-")]
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    with pytest.raises(requests.ConnectionError):
        requests.get(f"http://127.0.0.1:{port}/index.html", timeout=5)
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith("gridcrawl-nginx-")]
