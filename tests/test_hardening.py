"""Hostile responses through ``visit`` (fetch + parse) against the adversarial site on 127.0.0.1,
and the fetcher's hop-check composition and body truncation."""

from __future__ import annotations

import os

import lxml.html
import psutil
import pytest

from adversarial import BOGUS_LINKS, PDF_BYTES, TITLE_CP1251, adversarial_site
from gridcrawl.executor.fetch import ErrorKind, Fetcher, HopRefusal, chain_hop_checks
from gridcrawl.executor.page import visit
from gridcrawl.executor import memory
from gridcrawl.executor.parse import looks_binary, sniff_html
from sites import Site

UA = "gridcrawl/0.1 (+https://example.invalid/gridcrawl)"


def make_fetcher(**kw) -> Fetcher:
    kw.setdefault("deadline", 3.0)
    return Fetcher(user_agent=UA, connect_timeout=1.0, read_timeout=3.0, **kw)


@pytest.fixture(scope="module")
def adversarial_server():
    from sites import SiteServer
    with SiteServer(adversarial_site()) as server:
        yield server


def test_pdf_is_metadata_only(adversarial_server):
    page = visit(make_fetcher(), adversarial_server.url("/doc.pdf"))
    assert (page.error_kind, page.status, page.content_type) == (None, 200, "application/pdf")
    assert (page.size, page.content, page.links, page.title) == (len(PDF_BYTES), None, [], "")


def test_pdf_body_kept_when_asked_but_never_parsed(adversarial_server):
    page = visit(make_fetcher(keep_non_html=True), adversarial_server.url("/doc.pdf"))
    assert page.content == PDF_BYTES and page.links == []


def test_binary_served_as_html_is_not_parsed(adversarial_server):
    page = visit(make_fetcher(), adversarial_server.url("/binary.html"))
    assert page.error_kind is None and page.status == 200 and page.content_type == "text/html"
    assert page.links == [] and page.title == "" and page.content is None
    assert not any(adversarial_server.count(p) for p in BOGUS_LINKS)


def test_cp1251_declared_in_meta_only(adversarial_server):
    page = visit(make_fetcher(), adversarial_server.url("/cp1251.html"))
    assert (page.title, page.encoding) == (TITLE_CP1251, "cp1251")
    assert page.links == [[adversarial_server.url("/good/2.html"), "ещё"]]


@pytest.mark.parametrize("path,kind", [("/tarpit", "timeout"), ("/bomb.html", "too_large"),
                                       ("/huge.html", "too_large"), ("/loop-a", "redirect_loop"),
                                       ("/long/0", "too_many_redirects"), ("/missing.html", "http_status")])
def test_hostile_responses_fail_with_their_kind(adversarial_server, path, kind):
    page = visit(make_fetcher(max_body_bytes=2 * 1024 * 1024), adversarial_server.url(path))
    assert page.error_kind == kind, page.error
    assert page.content is None and page.links == []


def test_session_id_links_are_canonical(adversarial_server):
    page = visit(make_fetcher(), adversarial_server.url("/good/1.html"))
    urls = [u for u, _ in page.links]
    assert urls == [adversarial_server.url("/good/2.html"), adversarial_server.url("/good/1.html"),
                    adversarial_server.url("/private/secret.html")]


def test_missing_content_type_is_sniffed(site_server):
    site = Site()
    server = site_server(site)
    site.extra["/untyped.html"] = lambda h: _untyped(h, b"  <!DOCTYPE html><title>t</title><a href='/x'>x</a>")
    site.extra["/untyped.bin"] = lambda h: _untyped(h, os.urandom(2048))
    page = visit(make_fetcher(), server.url("/untyped.html"))
    assert page.title == "t" and page.links == [[server.url("/x"), "x"]]
    binary = visit(make_fetcher(), server.url("/untyped.bin"))
    assert binary.error_kind is None and binary.links == [] and binary.content is None


@pytest.mark.parametrize("content_type", ["html", "", ";;;;=====", "text", "unknown/unknown", "*/*"])
def test_a_content_type_that_names_no_media_type_is_sniffed(site_server, content_type):
    """A ``Content-Type`` that is no ``type/subtype`` (a broken CGI script's ``html``, an empty
    value) or says nothing (``unknown/unknown``, ``*/*``) was taken as a type that is not HTML:
    the page was kept without title, text or links. Browsers sniff such a body (WHATWG MIME
    Sniffing §7.1), as a page without the header is sniffed here."""
    body = b"<!DOCTYPE html><title>t</title><a href='/x'>x</a>"
    server = site_server(Site(pages={"/page": body}, types={"/page": content_type}))
    page = visit(make_fetcher(), server.url("/page"))
    assert page.title == "t" and page.links == [[server.url("/x"), "x"]], page
    binary = site_server(Site(pages={"/bin": os.urandom(2048)}, types={"/bin": content_type}))
    page = visit(make_fetcher(), binary.url("/bin"))
    assert page.error_kind is None and page.links == [] and page.content is None


def _untyped(h, body: bytes) -> None:
    h.send_response(200)
    h.send_header("Content-Length", str(len(body)))
    h.end_headers()
    h.wfile.write(body)


def test_invalid_bytes_decode_with_replacement(site_server):
    body = b"<html><title>caf\xe9 \xff\xfe ok</title><a href='/a'>\x80x</a></html>"
    server = site_server(Site(pages={"/bad.html": body}, types={"/bad.html": "text/html; charset=utf-8"}))
    page = visit(make_fetcher(), server.url("/bad.html"))
    assert page.title == "caf\ufffd \ufffd\ufffd ok" and page.links == [[server.url("/a"), "\ufffdx"]]


def test_looks_binary_and_sniff_html():
    assert looks_binary(bytes(range(256)) * 4)
    assert looks_binary(b"<html><a href='/x'>" + os.urandom(4096))
    assert not looks_binary(b"<html>" + b"text " * 2000 + b"\x00")  # one stray NUL is not binary
    assert not looks_binary("<html><title>hé</title></html>".encode("utf-16"))  # UTF-16's NULs are text
    assert not looks_binary(b"<p>\x1b$B</p>")  # ESC of ISO-2022-JP is text
    assert sniff_html(b"\xef\xbb\xbf\n<!doctype HTML><p>") and sniff_html(b"<HTML>") and sniff_html(b"<p>x</p>")
    assert not sniff_html(b"%PDF-1.4") and not sniff_html(b"hello <html>") and not sniff_html(b"<htmlx>")


# --------------------------------------------------------------------------- fetcher


def test_chain_hop_checks_first_refusal_wins():
    calls: list[str] = []

    def named(name, answer):
        def check(url):
            calls.append(name)
            return answer
        return check

    assert chain_hop_checks() is None and chain_hop_checks(None, None) is None
    only = named("only", None)
    assert chain_hop_checks(None, only) is only
    chained = chain_hop_checks(named("a", None), None, named("b", "private address"), named("c", "never"))
    assert chained("http://x.example/") == "private address" and calls == ["a", "b"]


def test_hop_refusal_kinds_and_per_fetch_checks(site_server):
    server = site_server(adversarial_site())
    fetcher = make_fetcher(hop_check=lambda url: "private" if "/private/" in url else None)
    result = fetcher.fetch(server.url("/go-private"))
    assert result.error_kind == ErrorKind.BLOCKED
    assert result.error == f"redirected to {server.url('/private/moved.html')}: private"
    refusal = HopRefusal(ErrorKind.ROBOTS_UNREACHABLE, "later", 7.0)
    result = fetcher.fetch(server.url("/go-public"), hop_check=lambda url: refusal)
    assert (result.error_kind, result.error, result.retry_after) == (ErrorKind.ROBOTS_UNREACHABLE, "later", 7.0)
    assert server.count("/go-public") == 0 and server.count("/private/moved.html") == 0


def test_truncate_body_keeps_the_first_bytes(site_server):
    server = site_server(adversarial_site())
    fetcher = make_fetcher(keep_non_html=True, max_body_bytes=100_000, truncate_body=True)
    result = fetcher.fetch(server.url("/huge.html"))
    assert result.ok and len(result.body) == 100_000 and result.body.startswith(b"<html><title>huge")
    bomb = fetcher.fetch(server.url("/bomb.html"))
    assert bomb.ok and bomb.body == bytes(100_000)
    derived = fetcher.derive(truncate_body=False)
    assert derived.fetch(server.url("/huge.html")).error_kind == ErrorKind.TOO_LARGE
    assert (derived.user_agent, derived.max_body_bytes, derived.keep_non_html) == (UA, 100_000, True)


def test_parse_gate_bounds_the_pages_parsed_at_once(site_server):
    """The executor's ``parse_threads``: eight workers fetch at once, one parses at a time, and
    every page is still parsed with all its links."""
    import threading

    from sites import generate_site

    site = generate_site(24, links_per_page=6, page_bytes=60_000, seed=5)
    server = site_server(site, latency=0.02)

    class CountingGate:
        def __init__(self):
            self.lock, self.holders, self.most = threading.Lock(), 0, 0
            self.gate = threading.BoundedSemaphore(1)

        def __enter__(self):
            self.gate.acquire()
            with self.lock:
                self.holders += 1
                self.most = max(self.most, self.holders)

        def __exit__(self, *exc):
            with self.lock:
                self.holders -= 1
            self.gate.release()

    gate, fetcher, pages = CountingGate(), make_fetcher(), {}
    paths = sorted(site.pages)

    def work(mine):
        for path in mine:
            pages[path] = visit(fetcher, server.url(path), parse_gate=gate)

    workers = [threading.Thread(target=work, args=(paths[i::8],)) for i in range(8)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(60)
    assert len(pages) == len(paths) and gate.most == 1
    for path, page in pages.items():
        assert page.status == 200 and page.parse_seconds > 0
        assert {u for u, _ in page.links} >= {server.url(d) for d in site.links[path]}


@pytest.mark.skipif(not memory._libc, reason="glibc only")
def test_free_memory_is_given_back_only_above_the_resident_bound():
    """After a large page the executor trims glibc's heaps only when its resident memory is over
    the bound (a trim makes the next large page fault its memory in again)."""
    assert psutil.Process().memory_info().rss > 1 << 20  # what the bound is compared with
    for _ in range(3):  # a large tree's nodes are glibc heap memory, free after the del
        tree = lxml.html.document_fromstring("<p>" + "<b>x</b>y" * 200_000)
        del tree
        assert memory.release_free_memory(above=1 << 60) is False  # under the bound: kept
    assert memory.release_free_memory(above=1 << 20) is True  # over it: given back
