"""End to end: crawl a site, change it, and recrawl it with the real manager, executor and client
processes: conditional requests, change detection, gone and revived pages, the adaptive schedule,
the recrawl counts, version history and the WARC export of revisits."""

from __future__ import annotations

import datetime as _dt
import email.utils
import json
import signal
import subprocess
import sys
import time

import pytest

from gridcrawl.urls import canonical_url
from docsite import DOCS_ROOT, docs_available, serve_python_docs
from grid import Grid, wait_for
from sites import Site

pytestmark = pytest.mark.e2e

MTIME = 1_700_000_000.0  # Last-Modified of the site's pages before the edits (POSIX seconds)
#: Short intervals so that documents come due within the test (seconds).
FAST_SCHEDULE = {"GRIDCRAWL_RECRAWL_INTERVAL": "1", "GRIDCRAWL_RECRAWL_MIN_INTERVAL": "0.5",
                 "GRIDCRAWL_RECRAWL_MAX_INTERVAL": "100"}


def page(title: str, *links: str, text: str = "") -> bytes:
    anchors = "".join(f'<a href="{href}">{href}</a> ' for href in links)
    return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{title}</title></head>"
            f"<body><p>{text or title}</p>{anchors}</body></html>").encode()


def recrawl_site() -> Site:
    """Eight pages: ``/`` and ``/e*.html`` carry an ETag, ``/m*.html`` only a Last-Modified,
    ``/n*.html`` neither; ``/gone.html`` (ETag) is deleted by the test."""
    children = ["/e1.html", "/e2.html", "/m1.html", "/m2.html", "/n1.html", "/n2.html", "/gone.html"]
    site = Site()
    site.pages["/"] = page("home", *children)
    for path in children:
        site.pages[path] = page(path.strip("/"))
    for path in ("/", "/e1.html", "/e2.html", "/gone.html"):
        site.etags[path] = f'"{path}-v1"'
    for path in ("/m1.html", "/m2.html"):
        site.modified[path] = MTIME
    return site


def edit(site: Site) -> None:
    """Change the site: edit one page of each validator kind (the edited ETag page links to a
    new page), delete ``/gone.html``."""
    site.pages["/e1.html"] = page("e1", "/new.html", text="e1 edited")
    site.etags["/e1.html"] = '"/e1.html-v2"'
    site.pages["/new.html"] = page("new")
    site.pages["/m1.html"] = page("m1", text="m1 edited")
    site.modified["/m1.html"] = MTIME + 3600
    site.pages["/n1.html"] = page("n1", text="n1 edited")
    del site.pages["/gone.html"]


def documents(grid: Grid) -> dict[str, tuple]:
    rows = grid.query("crawl", "SELECT url, content_digest, etag, last_modified, fetch_interval, gone_at, "
                               "visit_status, content FROM document")
    assert len(rows) == len({r[0] for r in rows}), "a document was stored twice"
    return {r[0]: r[1:] for r in rows}


def test_recrawl_sends_conditional_requests_and_counts_each_class(tmp_path, site_server):
    site = recrawl_site()
    server = site_server(site)
    url = lambda path: canonical_url(server.url(path))
    grid = Grid(tmp_path)
    try:
        grid.start_manager()
        grid.start_executor("ex1", "--threads", "4")
        first = grid.start_client(server.url("/"), env=FAST_SCHEDULE)
        assert first.wait(timeout=60) == 0, grid.log("client.log")
        before = documents(grid)
        assert len(before) == 8
        assert before[url("/e1.html")][1] == '"/e1.html-v1"' and before[url("/m1.html")][2]
        assert before[url("/n1.html")][1] is None and before[url("/n1.html")][2] is None
        assert all(len(doc[0]) == 64 for doc in before.values()), "every document has a SHA-256 digest"
        first_bytes = server.body_bytes()

        edit(site)
        server.reset()
        # every document is due (first interval: 1 s): wait out what is left of it since the visits
        (last_due,) = grid.query("crawl", "SELECT max(next_fetch_at) FROM document")[0]
        left = _dt.datetime.fromisoformat(last_due) - _dt.datetime.now(_dt.timezone.utc).replace(tzinfo=None)
        time.sleep(max(0.0, left.total_seconds()) + 0.05)
        again = grid.start_client("--recrawl", "--keep-versions", env=FAST_SCHEDULE)
        assert again.wait(timeout=60) == 0, grid.log("client.log")
        log = grid.log("client.log")
    finally:
        grid.stop()

    # server side: validators sent as stored, 304s without a body
    records = {r.path: r for r in server.requests if r.path not in ("/robots.txt", "/sitemap.xml")}
    assert server.per_path_counts().get("/sitemap.xml") == 1, "the recrawl looks for the host's sitemap again"
    assert records["/e2.html"].conditional == {"if-none-match": '"/e2.html-v1"'}
    assert set(records["/m2.html"].conditional) == {"if-modified-since"}
    assert records["/n2.html"].conditional == {}
    assert {p for p, r in records.items() if r.status == 304} == {"/", "/e2.html", "/m2.html"}
    assert all(records[p].body_bytes == 0 for p in ("/", "/e2.html", "/m2.html"))
    assert records["/gone.html"].status == 404 and records["/new.html"].status == 200
    assert sorted(server.per_path_counts().get(p, 0) for p in records) == [1] * 9, "each page visited once"
    assert server.body_bytes() < first_bytes

    after = documents(grid)
    assert set(after) == set(before) | {url("/new.html")}, "the new page is stored, nothing else"
    # changed pages: new digest and body, the old version kept with its body
    for path in ("/e1.html", "/m1.html", "/n1.html"):
        assert after[url(path)][0] != before[url(path)][0], path
        assert "edited" in after[url(path)][6]
        assert after[url(path)][3] < 1.0, f"{path}: changed, the interval shrinks (1 s × 0.8)"
    assert after[url("/e1.html")][1] == '"/e1.html-v2"'
    versions = grid.query("crawl", "SELECT url, content_digest, content FROM document_version ORDER BY url")
    assert [(v[0], v[1]) for v in versions] == sorted((url(p), before[url(p)][0])
                                                      for p in ("/e1.html", "/m1.html", "/n1.html"))
    assert all(v[2] and "edited" not in v[2] for v in versions), "--keep-versions keeps the old bodies"
    # unchanged pages: same digest, the interval grows (1 s × 1.4)
    for path in ("/", "/e2.html", "/m2.html", "/n2.html"):
        assert after[url(path)][0] == before[url(path)][0], path
        assert after[url(path)][3] == pytest.approx(1.4), path
    assert after[url("/e2.html")][5] == 304 and after[url("/n2.html")][5] == 200
    # the deleted page: kept, marked gone with the time
    gone = after[url("/gone.html")]
    assert gone[4] is not None and gone[5] == 404 and gone[6] == before[url("/gone.html")][6]
    assert grid.query("crawl", "SELECT status, error_kind FROM visited_url WHERE url = ?", url("/gone.html")) == \
        [(404, "gone")]

    counts = grid.query("crawl", "SELECT mode, due, fetched, not_modified, unchanged, changed, gone, revived, "
                                 "errors, new, finished_at IS NOT NULL FROM recrawl")
    assert counts == [("due", 8, 4, 3, 1, 3, 1, 0, 0, 1, 1)]
    assert "not modified (304)" in log and "recrawl" in log


def test_a_last_modified_in_the_future_is_not_sent_back_so_an_edit_is_seen(tmp_path, site_server):
    """A server whose clock was ahead dated a page in 2100; we sent that date back as
    If-Modified-Since, and a server that compares dates (the page's not after the one asked:
    304) answered 304 to every recrawl once its clock was right, the edits unseen."""
    site = recrawl_site()
    site.modified["/m1.html"] = 4_102_444_800.0  # Fri, 01 Jan 2100 00:00:00 GMT
    server = site_server(site)
    url = lambda path: canonical_url(server.url(path))
    grid = Grid(tmp_path)
    try:
        grid.start_manager()
        grid.start_executor("ex1", "--threads", "2")
        assert grid.start_client(server.url("/")).wait(timeout=60) == 0, grid.log("client.log")
        site.pages["/m1.html"] = page("m1", text="m1 edited")
        site.modified["/m1.html"] = time.time() - 60  # the clock put right, the page edited
        server.reset()
        assert grid.start_client("--recrawl-all").wait(timeout=60) == 0, grid.log("client.log")
    finally:
        grid.stop()
    m1 = [r for r in server.requests if r.path == "/m1.html"]
    assert [(r.status, r.conditional) for r in m1] == [(200, {})], "no If-Modified-Since of 2100"
    assert [r.status for r in server.requests if r.path == "/m2.html"] == [304], "a date in the past is sent"
    assert grid.query("crawl", "SELECT content LIKE '%m1 edited%' FROM document WHERE url = ?", url("/m1.html")) == [(1,)]
    assert grid.query("crawl", "SELECT changed FROM recrawl") == [(1,)]


#: A schedule under which nothing is due during the test (100 s) but a lastmod hint may make a
#: page due half a second after its visit.
SLOW_SCHEDULE = {"GRIDCRAWL_RECRAWL_INTERVAL": "100", "GRIDCRAWL_RECRAWL_MIN_INTERVAL": "0.5",
                 "GRIDCRAWL_RECRAWL_MAX_INTERVAL": "1000"}
WORDS = ("alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike november oscar papa "
         "quebec romeo sierra tango uniform victor whiskey xray yankee zulu")


def sitemap_xml(lastmods: dict[str, str]) -> bytes:
    entries = "".join(f"<url><loc>{{BASE}}{path}</loc><lastmod>{when}</lastmod></url>"
                      for path, when in lastmods.items())
    return (f'<?xml version="1.0" encoding="UTF-8"?>'
            f'<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">{entries}</urlset>').encode()


def footer_page(stamp: str) -> bytes:
    return page("footer", text=f"{WORDS} {WORDS.upper()} — last updated {stamp}")


def test_sitemap_lastmod_drives_the_recrawl_and_simhash_ignores_a_footer(tmp_path, site_server):
    """A sitemap lists pages with lastmod; between crawls one lastmod moves past the first
    fetch: a ``--recrawl`` (nothing due by the schedule) reads the sitemap again conditionally
    and fetches exactly that page; unchanged lastmods lengthen the interval; a future and a
    malformed lastmod change nothing. Then a page whose footer timestamp alone changed counts
    unchanged with the SimHash setting on, changed with it off."""
    lastmods = {"/": "2020-01-01", "/a.html": "2020-01-01", "/b.html": "2020-01-01T00:00:00Z",
                "/fut.html": "2999-01-01", "/bad.html": "yesterday"}
    site = Site()
    site.pages["/"] = page("home", "/a.html", "/b.html", "/fut.html", "/bad.html", "/f.html")
    for path in ("/a.html", "/b.html", "/fut.html", "/bad.html"):
        site.pages[path] = page(path.strip("/"))
    site.pages["/f.html"] = footer_page("2026-11-23 01:30:00")
    site.pages["/sitemap.xml"] = sitemap_xml(lastmods)
    site.types["/sitemap.xml"] = "application/xml"
    site.etags["/sitemap.xml"] = '"sm-v1"'
    server = site_server(site)
    url = lambda path: canonical_url(server.url(path))
    grid = Grid(tmp_path)

    def intervals() -> dict[str, float]:
        return {u: float(i) for u, i in grid.query("crawl", "SELECT url, fetch_interval FROM document")}

    def fetched() -> dict[str, tuple]:
        return {r.path: (r.status, r.conditional) for r in server.requests if r.path != "/robots.txt"}

    try:
        grid.start_manager()
        grid.start_executor("ex1", "--threads", "2")
        assert grid.start_client(server.url("/"), env=SLOW_SCHEDULE).wait(timeout=60) == 0, grid.log("client.log")
        assert set(intervals()) == {url(p) for p in ("/", "/a.html", "/b.html", "/fut.html", "/bad.html", "/f.html")}
        assert set(intervals().values()) == {100.0}, "a plain crawl keeps a sitemap's lastmod, no schedule change"
        assert grid.query("crawl", "SELECT lastmod FROM document WHERE url = ?", url("/a.html")) == \
            [("2020-01-01 00:00:00.000000",)]

        time.sleep(1.2)  # the new lastmod is after the first fetch (and half a second has passed)
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        site.pages["/a.html"] = page("a", text="a edited")
        site.pages["/sitemap.xml"] = sitemap_xml({**lastmods, "/a.html": stamp})
        site.etags["/sitemap.xml"] = '"sm-v2"'
        server.reset()
        assert grid.start_client("--recrawl", env=SLOW_SCHEDULE).wait(timeout=60) == 0, grid.log("client.log")
        assert fetched() == {"/sitemap.xml": (200, {"if-none-match": '"sm-v1"'}), "/a.html": (200, {})}, \
            "exactly the sitemap (conditionally) and the page with the newer lastmod"
        after = intervals()
        assert after[url("/a.html")] == pytest.approx(80.0), "changed: 100 s × 0.8"
        assert after[url("/")] == after[url("/b.html")] == 100.0, "lastmod not newer: the interval kept..."
        put_off = {u: (_dt.datetime.fromisoformat(n) - _dt.datetime.fromisoformat(v)).total_seconds()
                   for u, n, v in grid.query("crawl", "SELECT url, next_fetch_at, visited_at FROM document")}
        assert put_off[url("/")] == put_off[url("/b.html")] == pytest.approx(140.0), \
            "...and the next visit put off as by a 304: 100 s × 1.4"
        assert after[url("/fut.html")] == after[url("/bad.html")] == after[url("/f.html")] == 100.0
        assert grid.query("crawl", "SELECT due, fetched, changed, not_modified FROM recrawl") == [(1, 1, 1, 0)]
        assert grid.query("crawl", "SELECT content LIKE '%a edited%' FROM document WHERE url = ?",
                          url("/a.html")) == [(1,)]

        # a second recrawl: the sitemap answers 304 and nothing is due (no page fetched)
        server.reset()
        assert grid.start_client("--recrawl", env=SLOW_SCHEDULE).wait(timeout=60) == 0, grid.log("client.log")
        assert fetched() == {"/sitemap.xml": (304, {"if-none-match": '"sm-v2"'})}

        # the crawl stored SimHashes only for URLs with digits (the trap detector's): the first
        # recrawl with the SimHash setting on stores those of the unchanged pages...
        simhashes = lambda: dict(grid.query("crawl", "SELECT url, simhash FROM document"))
        assert set(simhashes().values()) == {None}
        near = {**SLOW_SCHEDULE, "GRIDCRAWL_RECRAWL_SIMHASH_DISTANCE": "3"}
        assert grid.start_client("--recrawl-all", env=near).wait(timeout=60) == 0, grid.log("client.log")
        assert None not in simhashes().values()
        # ...then only the footer's timestamp changes: unchanged with the SimHash setting on...
        site.pages["/f.html"] = footer_page("2026-11-24 09:15:00")
        assert grid.start_client("--recrawl-all", env=near).wait(timeout=60) == 0, grid.log("client.log")
        site.pages["/f.html"] = footer_page("2026-11-25 10:00:00")
        # ...changed with it off (the default)
        assert grid.start_client("--recrawl-all", env=SLOW_SCHEDULE).wait(timeout=60) == 0, grid.log("client.log")
    finally:
        grid.stop()
    rows = grid.query("crawl", "SELECT mode, due, unchanged, changed FROM recrawl ORDER BY recrawl_id")
    assert rows[2:] == [("all", 6, 6, 0), ("all", 6, 6, 0), ("all", 6, 5, 1)]
    assert grid.query("crawl", "SELECT COUNT(*) FROM document_version WHERE url = ?", url("/f.html")) == [(1,)]
    assert grid.query("crawl", "SELECT content LIKE '%10:00:00%' FROM document WHERE url = ?", url("/f.html")) == [(1,)]


def test_gone_page_is_revived_and_export_holds_revisits(tmp_path, site_server):
    site = recrawl_site()
    server = site_server(site)
    url = lambda path: canonical_url(server.url(path))
    grid = Grid(tmp_path)
    body = site.pages.pop("/gone.html")
    try:
        grid.start_manager()
        grid.start_executor("ex1", "--threads", "2")
        site.pages["/gone.html"] = body
        assert grid.start_client(server.url("/")).wait(timeout=60) == 0, grid.log("client.log")
        del site.pages["/gone.html"]
        # the default schedule (30 days) makes nothing due: --recrawl-all visits every document
        assert grid.start_client("--recrawl").wait(timeout=60) == 0, grid.log("client.log")
        assert grid.query("crawl", "SELECT due FROM recrawl") == [(0,)]
        assert grid.start_client("--recrawl-all").wait(timeout=60) == 0, grid.log("client.log")
        assert grid.query("crawl", "SELECT gone_at IS NOT NULL FROM document WHERE url = ?",
                          url("/gone.html")) == [(1,)]
        site.pages["/gone.html"] = page("gone", text="back again")
        del site.etags["/gone.html"]  # back without its old ETag: a 200 with the new body
        assert grid.start_client("--recrawl-all").wait(timeout=60) == 0, grid.log("client.log")
    finally:
        grid.stop()
    rows = grid.query("crawl", "SELECT mode, due, gone, revived, not_modified, unchanged FROM recrawl ORDER BY recrawl_id")
    assert rows == [("due", 0, 0, 0, 0, 0), ("all", 8, 1, 0, 5, 2), ("all", 8, 0, 1, 5, 2)]
    assert grid.query("crawl", "SELECT gone_at, content LIKE '%back again%' FROM document WHERE url = ?",
                      url("/gone.html")) == [(None, 1)]
    assert grid.query("crawl", "SELECT COUNT(*) FROM document") == [(8,)]

    from warcio.archiveiterator import ArchiveIterator
    warc = tmp_path / "crawl.warc.gz"
    # the export and the report read the crawl at once
    exporting = subprocess.Popen([sys.executable, "-m", "gridcrawl", "export", "--db", grid.crawl_db, "--format",
                                  "warc", str(warc)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        report = subprocess.run([sys.executable, "-m", "gridcrawl", "report", "--crawl-db", grid.crawl_db],
                                capture_output=True, text=True, timeout=60)
        _out, err = exporting.communicate(timeout=60)
    finally:
        if exporting.poll() is None:
            exporting.kill()
            exporting.wait()
    assert exporting.returncode == 0, err
    with open(warc, "rb") as fh:
        records = [(r.rec_type, r.rec_headers.get_header("WARC-Target-URI"),
                    r.rec_headers.get_header("WARC-Profile"), r.rec_headers.get_header("WARC-Refers-To"))
                   for r in ArchiveIterator(fh)]
    responses = {uri for kind, uri, _, _ in records if kind == "response"}
    revisits = {uri: (profile, refers) for kind, uri, profile, refers in records if kind == "revisit"}
    assert len(responses) == 8
    # the 304 pages and the unchanged page without validators were revisited; the revived page was not
    assert set(revisits) == {url(p) for p in ("/", "/e1.html", "/e2.html", "/m1.html", "/m2.html",
                                              "/n1.html", "/n2.html")}
    assert revisits[url("/e1.html")][0].endswith("/revisit/server-not-modified")
    assert revisits[url("/n1.html")][0].endswith("/revisit/identical-payload-digest")
    assert all(refers for _, refers in revisits.values())

    assert report.returncode == 0, report.stderr
    assert "recrawls" in report.stdout and "revived" in report.stdout


def export_items(grid: Grid, out, *options: str) -> tuple[list[str], str]:
    """``gridcrawl export --items`` of ``grid``'s crawl to ``out``: the URLs of the items written,
    and the command's message."""
    done = subprocess.run([sys.executable, "-m", "gridcrawl", "export", "--db", grid.crawl_db, "--items", *options,
                           str(out)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return sorted(json.loads(line)["url"] for line in out.read_text().splitlines()), done.stderr.strip()


def test_the_items_of_a_page_found_gone_are_left_out_of_the_export_until_it_comes_back(tmp_path, site_server):
    """A product page removed from the site (404) keeps its document and its items stored, but
    an export of the items is what the site holds now: the removed product is left out, saying
    so (it was exported as if still for sale), --include-gone exports it, and it is back once
    the page is."""
    site = recrawl_site()
    server = site_server(site)
    url = lambda path: canonical_url(server.url(path))
    spec = tmp_path / "spec.toml"
    spec.write_text('[[item]]\ntype = "page"\nurl = "/[a-z0-9]+\\\\.html$"\n[item.fields]\n'
                    'title = { css = "title::text", required = true }\n')
    grid = Grid(tmp_path)
    try:
        grid.start_manager()
        grid.start_executor("ex1", "--threads", "2")
        assert grid.start_client(server.url("/"), "--extract", str(spec)).wait(timeout=60) == 0, grid.log("client.log")
        pages = [url(p) for p in ("/e1.html", "/e2.html", "/gone.html", "/m1.html", "/m2.html", "/n1.html", "/n2.html")]
        assert export_items(grid, tmp_path / "first.jsonl") == (sorted(pages), "exported 7 items to "
                                                                 f"{tmp_path / 'first.jsonl'}")
        del site.pages["/gone.html"]
        assert grid.start_client("--recrawl-all").wait(timeout=60) == 0, grid.log("client.log")
        assert grid.query("crawl", "SELECT COUNT(*) FROM item WHERE url = ?", url("/gone.html")) == [(1,)]
        now = tmp_path / "now.jsonl"
        assert export_items(grid, now) == (sorted(set(pages) - {url("/gone.html")}), (
            f"exported 6 items to {now} (1 item of 1 page a recrawl found gone, 404/410, left out: "
            "--include-gone exports them)"))
        every = tmp_path / "all.jsonl"
        assert export_items(grid, every, "--include-gone") == (sorted(pages), f"exported 7 items to {every}")
        site.pages["/gone.html"] = page("gone", text="back again")
        del site.etags["/gone.html"]
        assert grid.start_client("--recrawl-all").wait(timeout=60) == 0, grid.log("client.log")
    finally:
        grid.stop()
    assert export_items(grid, tmp_path / "back.jsonl")[0] == sorted(pages)


def test_an_interrupted_recrawl_resumes_without_visiting_a_page_twice(tmp_path, site_server):
    """A --recrawl-all stopped half-way: its summary names --recrawl as the command that resumes
    it (--recrawl-all again queued every page again, and fetched the recrawled ones twice), and the
    resumed run counts the leftovers it visits as due (it said due 148 against 400 visits)."""
    site = Site()
    paths = [f"/p{i}.html" for i in range(40)]
    site.pages["/"] = page("home", *paths)
    for path in paths:
        site.pages[path] = page(path.strip("/"))
        site.etags[path] = f'"{path}"'
    server = site_server(site)
    grid = Grid(tmp_path)
    try:
        grid.start_manager()
        grid.start_executor("ex1", "--threads", "2")
        assert grid.start_client(server.url("/"), "--no-sitemaps").wait(timeout=120) == 0, grid.log("client.log")
        before = len(server.requests)
        server.latency = 0.1  # slow only while the recrawl must be stopped half-way
        first = grid.start_client("--recrawl-all", "--no-sitemaps")
        wait_for(lambda: len(server.requests) >= before + 10, 60, message="the recrawl under way")
        first.send_signal(signal.SIGTERM)
        assert first.wait(timeout=60) == -signal.SIGTERM, grid.log("client.log")
        stopped = grid.log("client.log")
        assert "--recrawl instead of --recrawl-all resumes the recrawl (gridcrawl-client" in stopped, stopped[-2000:]
        server.latency = 0.0
        assert grid.start_client("--recrawl", "--no-sitemaps").wait(timeout=120) == 0, grid.log("client.log")
    finally:
        grid.stop()
    recrawled = [r.path for r in server.requests[before:] if r.path != "/robots.txt"]
    assert sorted(recrawled) == sorted(["/", *paths]), "every page visited again once, none twice"
    (interrupted, resumed) = grid.query("crawl", "SELECT mode, due, not_modified + unchanged FROM recrawl "
                                                 "ORDER BY recrawl_id")
    assert interrupted[0] == "all" and interrupted[1] == 41
    assert resumed[0] == "due" and resumed[1] == resumed[2] == 41 - interrupted[2] > 0, (interrupted, resumed)


def test_watch_keeps_recrawling_as_documents_come_due(tmp_path, site_server):
    site = recrawl_site()
    server = site_server(site)
    grid = Grid(tmp_path)
    env = {**FAST_SCHEDULE, "GRIDCRAWL_WATCH_INTERVAL": "0.5"}
    try:
        grid.start_manager()
        grid.start_executor("ex1", "--threads", "2")
        assert grid.start_client(server.url("/"), env=env).wait(timeout=60) == 0, grid.log("client.log")
        watcher = grid.start_client("--recrawl", "--watch", env=env)
        wait_for(lambda: (grid.query("crawl", "SELECT not_modified FROM recrawl") or [(0,)])[0][0] >= 3, 60,
                 message="the first recrawl of the 304 pages")
        # changed only once the first recrawl has fetched it: a later look must find it due again
        # (the client applies each result as it comes, so the 304 pages may be counted first)
        wait_for(lambda: server.count("/n1.html") >= 2, 60, message="the first recrawl of /n1.html")
        site.pages["/n1.html"] = page("n1", text="changed while watched")
        wait_for(lambda: grid.query("crawl", "SELECT COUNT(*) FROM document_version") == [(1,)], 60,
                 message="the watched change")
        assert watcher.poll() is None, "--watch keeps the application open"
        watcher.send_signal(signal.SIGTERM)
        # the watch ends by the signal once it has stopped (gridcrawl.entry.exit_by_signal)
        assert watcher.wait(timeout=30) == -signal.SIGTERM, grid.log("client.log")
    finally:
        grid.stop()
    (mode, due, changed, finished), = grid.query("crawl", "SELECT mode, due, changed, finished_at FROM recrawl")
    assert mode == "watch" and due > 8 and changed >= 1 and finished is not None


def _gaps(server, path: str) -> list[float]:
    """Seconds between the starts of consecutive requests of ``path`` at ``server``."""
    starts = sorted(r.started for r in server.requests if r.path == path)
    return [b - a for a, b in zip(starts, starts[1:])]


def test_watch_with_a_hostile_sitemap_does_not_loop(tmp_path, site_server):
    """Four sitemaps (robots.txt names them) whose bodies change on every read, each saying of
    one page "modified today" (a date alone: modified after any visit made today,
    ``AdaptiveSchedule.DATE_SPAN``) with ``changefreq always``, and of another "2999"; the page's
    own body, ETag and Last-Modified change on every fetch, with ``Cache-Control: max-age=0``.
    Under ``--watch`` with ``recrawl_min_interval`` 1 s, the page is fetched at most once a
    second, each sitemap read at most once a second (on its own schedule, clamped to the
    minimum as it changes on every read), and the "2999" page never again.

    The sitemaps' first reads in the watch answer 0, 0.25, 0.5 and 0.75 s late, so that their
    later reads, each about a second after the last, come between the page's visits. What
    keeps the page from being visited at each of them is two guards together: no hint for a
    page visited in this run less than ``min_interval`` ago (``CrawlStore._lastmod_hints``),
    and ``lastmod_hint``'s "never sooner than ``min_interval`` after the visit" (each alone is
    checked in tests/test_recrawl.py: the other hides it here). A sitemap schedule shrinking
    below the minimum (``next_interval``'s clamp) or not kept reads a sitemap more often. Each
    shows as two requests of one URL less than 1 s apart (a lower bound, which a slow machine
    only makes safer)."""
    delays = {"/sm-a.xml": 0.0, "/sm-b.xml": 0.25, "/sm-c.xml": 0.5, "/sm-d.xml": 0.75}
    reads = {path: iter(range(1, 1_000_000)) for path in delays}
    fetches = iter(range(1, 1_000_000))
    site = Site()
    site.pages["/"] = page("home", "/x.html", "/fut.html")
    site.pages["/fut.html"] = page("fut")
    site.pages["/robots.txt"] = ("User-agent: *\nAllow: /\n" + "".join(f"Sitemap: {{BASE}}{path}\n"
                                                                    for path in delays)).encode()
    site.types["/robots.txt"] = "text/plain"

    def changing_page(h) -> None:
        n = next(fetches)
        h.respond(200, page("x", text=f"fetch {n}"),
                  headers={"ETag": f'"x-{n}"', "Cache-Control": "max-age=0",
                           "Last-Modified": email.utils.formatdate(time.time() + n, usegmt=True)})

    def hostile(h) -> None:
        path = h.path
        read = next(reads[path])
        if read == 2:  # the watch's first read (the crawl's was the first)
            time.sleep(delays[path])
        today = time.strftime("%Y-%m-%d", time.gmtime())
        entries = (f"<url><loc>{{BASE}}/x.html</loc><lastmod>{today}</lastmod>"
                   "<changefreq>always</changefreq><priority>1.0</priority></url>"
                   "<url><loc>{BASE}/fut.html</loc><lastmod>2999-01-01T00:00:00Z</lastmod></url>")
        h.respond(200, (f'<?xml version="1.0" encoding="UTF-8"?><!-- read {read} -->'
                        f'<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">{entries}</urlset>').encode(),
                  content_type="application/xml")
    site.extra["/x.html"] = changing_page
    site.extra.update(dict.fromkeys(delays, hostile))
    server = site_server(site)
    grid = Grid(tmp_path)
    env = {**SLOW_SCHEDULE, "GRIDCRAWL_RECRAWL_MIN_INTERVAL": "1", "GRIDCRAWL_WATCH_INTERVAL": "0.2"}
    try:
        grid.start_manager()
        grid.start_executor("ex1", "--threads", "4")
        assert grid.start_client(server.url("/"), env=env).wait(timeout=60) == 0, grid.log("client.log")
        assert grid.query("crawl", "SELECT count(*) FROM sitemap") == [(4,)], "every sitemap read"
        server.reset()
        watcher = grid.start_client("--recrawl", "--watch", env=env)
        wait_for(lambda: all(server.count(path) >= 3 for path in ("/x.html", *delays)), 60, 0.05,
                 "the page the sitemaps say is modified visited 3 times, each sitemap read 3 times")
        watcher.send_signal(signal.SIGTERM)
        # the watch ends by the signal once it has stopped (gridcrawl.entry.exit_by_signal)
        assert watcher.wait(timeout=30) == -signal.SIGTERM, grid.log("client.log")
    finally:
        grid.stop()
    counts = server.per_path_counts()
    assert counts.get("/fut.html", 0) == 0, "a lastmod in the future makes nothing due"
    assert counts.get("/", 0) == 0, "a page the sitemaps do not list is not due (100 s)"
    for path in ("/x.html", *delays):
        gaps = _gaps(server, path)
        assert min(gaps) >= 1.0, (path, [round(g, 3) for g in gaps], counts)
    intervals = grid.query("crawl", "SELECT fetch_interval FROM sitemap")
    assert sorted(float(i) for (i,) in intervals) == [1.0] * 4, "changed on every read: read every min_interval"


def test_a_recrawl_with_nothing_due_says_when_the_first_page_is_due(tmp_path, site_server):
    server = site_server(recrawl_site())
    grid = Grid(tmp_path)
    try:
        grid.start_manager()
        grid.start_executor("ex1", "--threads", "2")
        assert grid.start_client(server.url("/")).wait(timeout=60) == 0, grid.log("client.log")
        visited = grid.query("crawl", "SELECT min(visited_at) FROM document")[0][0]
        assert grid.start_client("--recrawl").wait(timeout=60) == 0, grid.log("client.log")
    finally:
        grid.stop()
    log = grid.log("client.log")
    assert "no stored page was due for a visit: the first is due at " in log, log
    due = log.split("the first is due at ", 1)[1][:16]
    (first,) = grid.query("crawl", "SELECT min(next_fetch_at) FROM document")[0]
    assert due == str(first)[:16] and str(first) > str(visited), (due, first, visited)
    assert "recrawl_interval, 30 days" in log and "--recrawl-all visits every stored page now" in log


def test_a_watch_that_found_nothing_due_says_so_in_its_own_words(tmp_path, site_server):
    """A ``--recrawl --watch`` stopped after watching, with nothing due all along, said "no
    stored page was due for a visit", the words of a one-shot --recrawl that looked once."""
    server = site_server(recrawl_site())
    grid = Grid(tmp_path)
    try:
        grid.start_manager()
        grid.start_executor("ex1", "--threads", "2")
        assert grid.start_client(server.url("/")).wait(timeout=60) == 0, grid.log("client.log")
        before = len(grid.log("client.log"))
        watcher = grid.start_client("--recrawl", "--watch", "--no-sitemaps", env={"GRIDCRAWL_WATCH_INTERVAL": "0.5"})
        wait_for(lambda: "recrawl (watch): 0 documents due" in grid.log("client.log")[before:], 60,
                 message="the watch's start")
        watcher.send_signal(signal.SIGTERM)
        assert watcher.wait(timeout=30) == -signal.SIGTERM, grid.log("client.log")
    finally:
        grid.stop()
    log = " ".join(grid.log("client.log")[before:].split())
    assert "no stored page came due while this --watch ran: the first is due at " in log, log[-2000:]
    assert "no stored page was due for a visit" not in log, log[-2000:]


def test_a_recrawl_with_nothing_due_names_the_pages_a_stopped_crawl_left_that_it_visited(tmp_path, site_server):
    """A ``--recrawl`` of a crawl stopped at --max-pages with URLs left visits them (a run of the
    same crawl), and its summary said only "no stored page was due for a visit", as if it had
    done nothing."""
    server = site_server(recrawl_site())
    grid = Grid(tmp_path)
    try:
        grid.start_manager()
        grid.start_executor("ex1", "--threads", "2")
        assert grid.start_client(server.url("/"), "--max-pages", "3").wait(timeout=60) == 0, grid.log("client.log")
        stored = grid.query("crawl", "SELECT count(*) FROM document")[0][0]
        assert grid.start_client("--recrawl").wait(timeout=60) == 0, grid.log("client.log")
    finally:
        grid.stop()
    log = " ".join(grid.log("client.log").split())
    assert stored < 8 and grid.query("crawl", "SELECT count(*) FROM document") == [(8,)], stored
    assert "no stored page was due for a visit: the first is due at " in log, log
    assert (f"; this run visited {8 - stored} new pages instead: the URLs the crawl had left to visit (it stopped "
            "before its end) and the links found on them; --recrawl-all visits every stored page now") in log, log


def test_the_retry_command_after_a_recrawl_all_does_not_visit_every_page_again(tmp_path, site_server):
    """After a ``--recrawl-all`` with failed URLs, the summary's "fetch the failed URLs again"
    command was the run's own with ``--retry-failed`` added: ``--recrawl-all`` again, which
    visits every stored page once more besides the failed ones. Now ``--recrawl``."""
    site = recrawl_site()
    site.pages["/"] = page("home", "/e1.html", "/missing.html")
    server = site_server(site)
    grid = Grid(tmp_path)
    try:
        grid.start_manager()
        grid.start_executor("ex1", "--threads", "2")
        assert grid.start_client(server.url("/")).wait(timeout=60) == 0, grid.log("client.log")
        before = len(grid.log("client.log"))
        assert grid.start_client("--recrawl-all").wait(timeout=60) == 0, grid.log("client.log")
        command = grid.client_command().replace(" --recrawl-all", " --recrawl")
    finally:
        grid.stop()
    log = grid.log("client.log")[before:]
    assert "http 404" in log, log
    assert f"{command} --retry-failed http_404" in log, log[-2000:]
    assert "--recrawl-all --retry-failed" not in log, log[-2000:]


def test_a_recrawl_stopped_at_max_pages_names_its_per_run_limit_and_is_resumed_page_by_page(tmp_path,
                                                                                            site_server):
    """``--recrawl-all --max-pages 1`` of a 3-page crawl spent its page on the host's sitemap and
    said "a limit on the whole crawl (4 URLs visited in all): a larger --max-pages, or none,
    visits the 3 left" (a recrawl's limit is per run, and --recrawl-all again visits everything);
    and every ``--recrawl --max-pages 1`` after it read the sitemap again, never coming to a page."""
    site = Site()
    site.pages["/"] = page("home", "/a.html", "/b.html")
    site.pages["/a.html"] = page("a")
    site.pages["/b.html"] = page("b")
    server = site_server(site)
    grid = Grid(tmp_path)
    try:
        grid.start_manager()
        grid.start_executor("ex1", "--threads", "2")
        assert grid.start_client(server.url("/")).wait(timeout=60) == 0, grid.log("client.log")
        assert server.per_path_counts().get("/sitemap.xml") == 1
        assert grid.start_client("--recrawl-all", "--max-pages", "1").wait(timeout=60) == 0, grid.log("client.log")
        stopped = grid.log("client.log")
        command = grid.client_command().replace(" --recrawl-all", " --recrawl")
        resumes = []
        for _ in range(3):
            before = len(grid.log("client.log"))  # each run appends to the log
            assert grid.start_client("--recrawl", "--max-pages", "1").wait(timeout=60) == 0, grid.log("client.log")
            resumes.append(grid.log("client.log")[before:])
    finally:
        grid.stop()
    assert "a limit on the whole crawl" not in stopped, stopped[-2000:]
    assert ("stopped at --max-pages 1, a limit on the pages of this recrawl run (1 visited, 1 sitemap read again "
            "among them) with 3 URLs left to visit: --recrawl, not --recrawl-all (which would visit again "
            "the pages this run visited), resumes the recrawl (") in stopped, stopped[-2000:]
    assert f"resumes the recrawl ({command}), up to --max-pages of them a run (none: all of them)" in stopped
    assert server.per_path_counts().get("/sitemap.xml") == 2, "read again once, by the recrawl's first run"
    assert "with 2 URLs left to visit: the same command resumes the recrawl" in resumes[0], resumes[0][-2000:]
    assert "with 1 URL left to visit" in resumes[1], resumes[1][-2000:]
    assert "stopped at --max-pages" not in resumes[2], resumes[2][-2000:]
    assert grid.query("crawl", "SELECT count(*) FROM to_visit_url") == [(0,)]
    assert sorted(server.per_path_counts().get(p) for p in ("/", "/a.html", "/b.html")) == [2, 2, 2]


def test_recrawl_options_refuse_bad_use(tmp_path):
    db = f"sqlite:///{tmp_path / 'crawl.db'}"
    base = [sys.executable, "-m", "gridcrawl.client", "--manager", "tcp://127.0.0.1:9", "--db", db, "--no-progress"]
    watch = subprocess.run(base + ["--watch"], capture_output=True, text=True, timeout=60)
    assert watch.returncode == 2 and "--watch needs --recrawl" in watch.stderr
    assert "Traceback" not in watch.stderr
    both = subprocess.run(base + ["--recrawl", "--recrawl-all"], capture_output=True, text=True, timeout=60)
    assert both.returncode == 2 and "--recrawl and --recrawl-all exclude each other" in both.stderr, both.stderr
    empty = subprocess.run(base + ["--recrawl"], capture_output=True, text=True, timeout=60)
    assert empty.returncode == 2 and "nothing to recrawl" in empty.stderr
    assert "Traceback" not in empty.stderr


_NO_DOCS = docs_available()


@pytest.mark.skipif(_NO_DOCS is not None, reason=f"docs site unavailable: {_NO_DOCS}")
def test_gridcrawl_run_recrawls_nginx_with_304s(tmp_path):
    """``gridcrawl run --recrawl-all`` against nginx serving a copy of 40 pages of the Python docs:
    nginx answers the conditional requests, a touched file comes back in full and is found
    unchanged, an edited one changed, and every other page is a 304."""
    import os
    import shutil
    root = tmp_path / "html"
    shutil.copytree(os.path.realpath(DOCS_ROOT), root, symlinks=False,
                    ignore=shutil.ignore_patterns("_sources", "_images", "_downloads", "c-api", "library"))
    workdir = tmp_path / "run"
    command = [sys.executable, "-m", "gridcrawl", "run", "--executors", "1", "--threads", "4", "--workdir",
               str(workdir), "--no-progress"]
    with serve_python_docs(root=str(root)) as base:
        first = subprocess.run(command + [f"{base}/index.html", "--max-pages", "40"], capture_output=True,
                               text=True, timeout=180)
        assert first.returncode == 0, first.stderr[-2000:]
        grid = Grid(workdir)
        stored = {url: (etag, lm) for url, etag, lm in
                  grid.query("crawl", "SELECT url, etag, last_modified FROM document WHERE status = 200")}
        assert stored and all(etag and lm for etag, lm in stored.values()), "nginx sends both validators"
        paths = sorted(url[len(base):] for url in stored if url.endswith(".html") and url != f"{base}/index.html")
        touched, edited = paths[0], paths[1]
        later = time.time() + 10
        os.utime(root / touched.lstrip("/"), (later, later))
        with open(root / edited.lstrip("/"), "a", encoding="utf-8") as fh:
            fh.write("<!-- edited -->\n")
        again = subprocess.run(command + ["--recrawl-all"], capture_output=True, text=True, timeout=180)
        assert again.returncode == 0, again.stderr[-2000:]
    counts = grid.query("crawl", "SELECT due, fetched, not_modified, unchanged, changed, gone FROM recrawl")
    assert counts == [(len(stored), 2, len(stored) - 2, 1, 1, 0)]
    assert grid.query("crawl", "SELECT url FROM document_version") == [(base + edited,)]
    assert "not modified (304)" in again.stderr


def test_run_and_report_refuse_bad_use(tmp_path):
    run = subprocess.run([sys.executable, "-m", "gridcrawl", "run", "--watch", "--workdir", str(tmp_path)],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 2 and "--watch needs --recrawl" in run.stderr and "Traceback" not in run.stderr
    report = subprocess.run([sys.executable, "-m", "gridcrawl", "report"], capture_output=True, text=True, timeout=60)
    assert report.returncode == 2 and "--crawl-db" in report.stderr and "Traceback" not in report.stderr


def test_a_recrawl_counts_each_url_once_against_the_per_host_cap(tmp_path, site_server):
    """A recrawl queues the stored pages again, so each was in ``visited_url`` and in
    ``to_visit_url`` at once, and the per-host cap counted it twice: the 8 pages of a site under
    ``--max-pages-per-host 12`` counted 16, and the page the site gained was left out of the
    recrawl ("over the per-host cap") with 9 URLs of 12 known. Now each URL counts once."""
    site = recrawl_site()
    server = site_server(site)
    grid = Grid(tmp_path)
    try:
        grid.start_manager()
        grid.start_executor("ex1", "--threads", "1")
        assert grid.start_client(server.url("/"), "--max-pages-per-host", "12").wait(timeout=60) == 0, \
            grid.log("client.log")
        edit(site)  # /e1.html now links to /new.html
        server.latency = 0.2  # the recrawl's results one at a time: applied in batches of their own
        assert grid.start_client("--recrawl-all", "--max-pages-per-host", "12").wait(timeout=60) == 0, \
            grid.log("client.log")
    finally:
        grid.stop()
    assert canonical_url(server.url("/new.html")) in documents(grid), grid.log("client.log")
    assert "per-host cap" not in grid.log("client.log")
