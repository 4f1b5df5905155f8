"""Recrawl pieces without the grid: the adaptive schedule and verdicts (pure), conditional requests
of the fetcher and the executor's visit against a real local server, and the crawl store's
recrawl (due documents, 304 / unchanged / changed / gone applied once) on a real SQLite file
and real PostgreSQL and MariaDB servers, with the WARC export of kept versions."""

from __future__ import annotations

import datetime as _dt
import hashlib
import io

import pytest
import sqlalchemy as sa

from gridcrawl import models, protocol as p
from gridcrawl.client.app import _validators
from gridcrawl.client.store import CrawlStore, Outcome, Scope
from gridcrawl.db import open_database
from gridcrawl.executor.fetch import ErrorKind, Fetcher
from gridcrawl.executor.page import conditional_headers, visit
from gridcrawl.schedule import AdaptiveSchedule, verdict
from gridcrawl.settings import Settings
from sites import Site

UA = "gridcrawl-test/0.1"
MTIME = 1_700_000_000.0


# ------------------------------------------------------------------ schedule (pure)

def test_schedule_shrinks_on_change_grows_otherwise_and_clamps():
    s = AdaptiveSchedule(initial=100.0, min_interval=60.0, max_interval=150.0, inc_rate=0.4, dec_rate=0.2)
    assert s.next_interval(100.0, "changed") == pytest.approx(80.0)      # × (1 − 0.2)
    assert s.next_interval(100.0, "revived") == pytest.approx(80.0)
    assert s.next_interval(100.0, "unchanged") == pytest.approx(140.0)   # × (1 + 0.4)
    assert s.next_interval(100.0, "not_modified") == pytest.approx(140.0)
    assert s.next_interval(100.0, "gone") == pytest.approx(140.0)
    assert s.next_interval(100.0, "error") == pytest.approx(100.0)
    assert s.next_interval(140.0, "unchanged") == 150.0                  # clamped to the maximum
    assert s.next_interval(70.0, "changed") == 60.0                      # clamped to the minimum
    assert s.next_interval(None, "unchanged") == pytest.approx(140.0)    # never scheduled: from the first
    assert s.first_interval() == 100.0
    assert AdaptiveSchedule(initial=1e9, max_interval=10.0, min_interval=1.0).first_interval() == 10.0
    now = _dt.datetime(2026, 1, 1)
    assert s.due_at(now, 90.5) == now + _dt.timedelta(seconds=90.5)


def test_schedule_defaults_are_nutchs_and_come_from_settings():
    s = AdaptiveSchedule.from_settings(Settings())
    assert (s.initial, s.min_interval, s.max_interval, s.inc_rate, s.dec_rate) == \
        (30 * 86400, 60.0, 365 * 86400, 0.4, 0.2)
    with pytest.raises(ValueError, match="recrawl_min_interval"):
        Settings(recrawl_min_interval=10.0, recrawl_max_interval=5.0).validate()
    with pytest.raises(ValueError, match="recrawl_dec_rate"):
        Settings(recrawl_dec_rate=1.0).validate()
    with pytest.raises(ValueError, match="recrawl_inc_rate"):
        Settings(recrawl_inc_rate=-0.1).validate()


@pytest.mark.parametrize("status, error_kind, digest, stored, gone, expected", [
    (304, None, None, "a", False, "not_modified"),
    (200, None, "a", "a", False, "unchanged"),
    (200, None, "b", "a", False, "changed"),
    (200, None, "b", None, False, "changed"),          # stored before digests: nothing to compare
    (200, None, None, None, False, "unchanged"),       # a body never downloaded (non-HTML), then or now
    (200, None, None, "a", False, "changed"),          # a body then, none now
    (404, "http_status", None, "a", False, "gone"),
    (410, "http_status", None, "a", True, "gone"),
    (500, "http_status", None, "a", False, "error"),
    (None, "timeout", None, "a", True, "error"),
    (None, "robots", None, "a", False, "disallowed"),   # the crawler obeyed the site: no error
    (None, "robots_unreachable", None, "a", False, "error"),
    (200, None, "a", "a", True, "revived"),
    (304, None, None, "a", True, "revived"),
])
def test_verdict(status, error_kind, digest, stored, gone, expected):
    assert verdict(status, error_kind, digest, stored, gone) == expected


def test_verdict_of_a_body_under_another_media_type_is_changed():
    assert verdict(200, None, None, None, False, retyped=True) == "changed"
    assert verdict(200, None, "a", "a", False, near=True, retyped=True) == "changed"
    assert verdict(304, None, None, "a", False, retyped=True) == "not_modified"


def test_verdict_near_duplicate_body_counts_unchanged_only_when_asked():
    assert verdict(200, None, "b", "a", False, near=True) == "unchanged"
    assert verdict(200, None, "b", "a", False, near=False) == "changed"
    assert verdict(404, "http_status", None, "a", False, near=True) == "gone"
    assert verdict(200, None, "b", "a", True, near=True) == "revived"


def test_near_unchanged_compares_simhashes_within_the_distance():
    off = AdaptiveSchedule()
    on = AdaptiveSchedule(near_distance=3)
    a = 0x0123456789ABCDEF
    assert not off.near_unchanged(a, f"{a:016x}"), "off by default: only the digest decides"
    assert on.near_unchanged(a, f"{a:016x}")
    assert on.near_unchanged(a ^ 0b111, f"{a:016x}")           # 3 bits apart
    assert not on.near_unchanged(a ^ 0b1111, f"{a:016x}")      # 4 bits apart
    assert not on.near_unchanged(None, f"{a:016x}") and not on.near_unchanged(a, None)
    assert not on.near_unchanged(a, "not hex")
    assert AdaptiveSchedule.from_settings(Settings(recrawl_simhash_distance=5)).near_distance == 5
    for bad in (-2, 65):
        with pytest.raises(ValueError, match="recrawl_simhash_distance"):
            Settings(recrawl_simhash_distance=bad).validate()


def test_lastmod_hint_makes_due_lengthens_and_ignores_hostile_values():
    s = AdaptiveSchedule(initial=100.0, min_interval=10.0, max_interval=1000.0)
    visited = _dt.datetime(2026, 1, 1, 12, 0, 0)
    now = visited + _dt.timedelta(seconds=50)
    scheduled = visited + _dt.timedelta(seconds=100)
    # modified after the last visit: due now, the interval kept
    assert s.lastmod_hint(visited + _dt.timedelta(seconds=20), visited, 100.0, scheduled, now) == ("due", 100.0, now)
    # ...but never sooner than min_interval after the visit
    soon = visited + _dt.timedelta(seconds=3)
    assert s.lastmod_hint(visited + _dt.timedelta(seconds=1), visited, 100.0, scheduled, soon) == \
        ("due", 100.0, visited + _dt.timedelta(seconds=10))
    # due as soon already: nothing to do
    assert s.lastmod_hint(visited + _dt.timedelta(seconds=20), visited, 100.0, visited, now) is None
    # not modified since the visit: the visit is put off as a 304 would, the interval kept...
    old = visited - _dt.timedelta(days=3)
    assert s.lastmod_hint(old, visited, 100.0, scheduled, now) == \
        ("not_modified", 100.0, visited + _dt.timedelta(seconds=140))
    assert s.lastmod_hint(visited, visited, 900.0, scheduled, now)[2] == visited + _dt.timedelta(seconds=1000), \
        "clamped to the maximum"
    # ...so the same lastmod read again (the sitemap changed elsewhere) puts it off no further:
    # each read lengthened the interval again, 100 s to the 1,000 s maximum in 7 reads, no visit
    found, interval, when = "", 100.0, scheduled
    for read in range(10):
        found, interval, when = s.lastmod_hint(old, visited, interval, when, now + _dt.timedelta(seconds=read))
    assert (found, interval, when) == ("not_modified", 100.0, visited + _dt.timedelta(seconds=140))
    # hostile or missing: in the future, absurdly old, no lastmod, never visited
    assert s.lastmod_hint(now + _dt.timedelta(seconds=1), visited, 100.0, scheduled, now) is None
    assert s.lastmod_hint(_dt.datetime(9999, 12, 31), visited, 100.0, scheduled, now) is None
    assert s.lastmod_hint(_dt.datetime(1, 1, 1), visited, 100.0, scheduled, now) is None
    assert s.lastmod_hint(None, visited, 100.0, scheduled, now) is None
    assert s.lastmod_hint(visited, None, 100.0, scheduled, now) is None


def test_a_lastmod_written_as_a_date_alone_of_the_visits_day_makes_the_page_due():
    """A sitemap's <lastmod>2026-11-29</lastmod> (read as that midnight) for a page visited at
    10:00 that day may mean an edit at 15:00: the page is due (it counted as not modified since
    the visit, its interval lengthened, and the edit went unseen for the whole longer interval);
    a date before the visit's day still lengthens it, and so does a full time before the visit."""
    s = AdaptiveSchedule(initial=100.0, min_interval=10.0, max_interval=1000.0)
    visited = _dt.datetime(2026, 11, 29, 10, 0, 0)
    now = _dt.datetime(2026, 11, 30, 8, 0, 0)
    scheduled = now + _dt.timedelta(days=30)
    day = _dt.datetime(2026, 11, 29)
    assert s.lastmod_hint(day, visited, 100.0, scheduled, now) == ("due", 100.0, now)
    # a visit the next day, before the 29th has ended everywhere (UTC-12: 12:00 UTC on the 30th)
    assert s.lastmod_hint(day, _dt.datetime(2026, 11, 30, 7), 100.0, scheduled, now)[0] == "due"
    assert s.lastmod_hint(day - _dt.timedelta(days=2), visited, 100.0, scheduled, now)[0] == "not_modified"
    assert s.lastmod_hint(day + _dt.timedelta(hours=9, minutes=59), visited, 100.0, scheduled, now)[0] == \
        "not_modified", "a time of day is taken as written"
    later = _dt.datetime(2026, 12, 1, 9)
    assert s.lastmod_hint(day, _dt.datetime(2026, 11, 30, 13), 100.0, later + _dt.timedelta(days=1),
                          later)[0] == "not_modified"


# ------------------------------------------------------------------ executor: conditional requests

def conditional_site() -> Site:
    site = Site()
    site.pages["/e.html"] = b"<html><head><title>e</title></head><body><a href='/m.html'>m</a></body></html>"
    site.pages["/m.html"] = b"<html><head><title>m</title></head><body>m</body></html>"
    site.etags["/e.html"] = '"v1"'
    site.modified["/m.html"] = MTIME
    return site


def test_fetcher_sends_validators_and_takes_a_304_without_a_body(site_server):
    server = site_server(conditional_site())
    fetcher = Fetcher(user_agent=UA)
    full = fetcher.fetch(server.url("/e.html"))
    assert full.status == 200 and full.headers["etag"] == '"v1"' and full.body
    same = fetcher.fetch(server.url("/e.html"), headers={"If-None-Match": '"v1"'})
    assert same.ok and same.status == 304 and same.body is None and same.size == 0
    other = fetcher.fetch(server.url("/e.html"), headers={"If-None-Match": '"v0"'})
    assert other.status == 200 and other.body == full.body
    lm = full_lm = fetcher.fetch(server.url("/m.html"))
    assert "etag" not in lm.headers and lm.headers["last-modified"]
    since = fetcher.fetch(server.url("/m.html"), headers={"If-Modified-Since": full_lm.headers["last-modified"]})
    assert since.status == 304 and since.body is None
    older = fetcher.fetch(server.url("/m.html"), headers={"If-Modified-Since": "Sat, 01 Jan 2000 00:00:00 GMT"})
    assert older.status == 200 and older.body
    statuses = [(r.path, r.status, r.body_bytes) for r in server.requests]
    assert [s for s in statuses if s[1] == 304] == [("/e.html", 304, 0), ("/m.html", 304, 0)]
    fetcher.close()


def test_validators_go_to_the_urls_own_hop_only_not_to_a_redirects_target(site_server):
    """A stored page that began to redirect: its validators sent on to the target (whose
    Last-Modified was the same, a static site built at once) got a 304 there, and the recrawl
    took the page as unchanged for ever. They go to the first hop only; other headers go on."""
    from sites import redirect
    site = conditional_site()
    site.extra["/moved.html"] = redirect("{BASE}/m.html")
    server = site_server(site)
    fetcher = Fetcher(user_agent=UA)
    try:
        lm = fetcher.fetch(server.url("/m.html")).headers["last-modified"]
        moved = fetcher.fetch(server.url("/moved.html"), headers={"If-Modified-Since": lm, "If-None-Match": '"v1"',
                                                                  "Accept": "text/html"})
    finally:
        fetcher.close()
    assert moved.status == 200 and moved.body == site.pages["/m.html"]
    assert [(r.path, r.conditional) for r in server.requests[-2:]] == [
        ("/moved.html", {"if-modified-since": lm, "if-none-match": '"v1"'}), ("/m.html", {})]


def test_a_304_to_a_request_without_validators_is_a_failure_not_a_page(site_server):
    """A server that answers 304 to a plain GET (RFC 9110 §15.4.5 allows it only for a
    conditional one) gave a first visit a document of status 304 and no content."""
    site = conditional_site()
    site.extra["/always-304.html"] = lambda h: h.respond(304)
    server = site_server(site)
    fetcher = Fetcher(user_agent=UA)
    try:
        plain = fetcher.fetch(server.url("/always-304.html"))
        asked = fetcher.fetch(server.url("/always-304.html"), headers={"If-None-Match": '"v1"'})
    finally:
        fetcher.close()
    assert plain.status == 304 and plain.error_kind is ErrorKind.HTTP_STATUS
    assert "asked for no validation" in plain.error
    assert asked.ok and asked.status == 304  # a recrawl's conditional request: not modified, as before


def test_visit_digests_bodies_and_does_not_parse_a_304(site_server):
    site = conditional_site()
    server = site_server(site)
    fetcher = Fetcher(user_agent=UA)
    page = visit(fetcher, server.url("/e.html"))
    assert page.digest == hashlib.sha256(site.pages["/e.html"]).hexdigest()
    assert page.links and page.title == "e"
    again = visit(fetcher, server.url("/e.html"), instruction={"ifNoneMatch": '"v1"'})
    assert again.status == 304 and again.error_kind is None
    assert again.digest is None and again.links == [] and again.content is None and again.title == ""
    assert server.requests[-1].conditional == {"if-none-match": '"v1"'}
    fetcher.close()


def test_conditional_headers_take_only_single_line_text():
    assert conditional_headers(None) is None
    assert conditional_headers({"scope": ["x"]}) is None
    assert conditional_headers({"ifNoneMatch": '"a"', "ifModifiedSince": "Tue, 14 Nov 2023 22:13:20 GMT"}) == \
        {"If-None-Match": '"a"', "If-Modified-Since": "Tue, 14 Nov 2023 22:13:20 GMT"}
    assert conditional_headers({"ifNoneMatch": '"a"\r\nX-Evil: 1', "ifModifiedSince": 7}) is None
    assert conditional_headers({"ifNoneMatch": "x" * 2000}) is None
    # a Last-Modified in the future is not sent back (a server comparing dates would say 304 until then)
    future = {"ifNoneMatch": '"a"', "ifModifiedSince": "Fri, 01 Jan 2100 00:00:00 GMT"}
    assert conditional_headers(future) == {"If-None-Match": '"a"'}
    assert conditional_headers(future, now=4_102_444_800.0)["If-Modified-Since"] == future["ifModifiedSince"]


def test_validators_travel_in_the_thread_instruction():
    spec = p.ThreadSpec(1, "http://127.0.0.1/", 0, 5, {"scope": ["127.0.0.1"], "ifNoneMatch": '"v1"'})
    frames = p.encode(p.Submit("app", [spec]))
    assert p.decode(frames).threads[0].instruction["ifNoneMatch"] == '"v1"'
    result = p.decode(p.encode(p.Result(1, p.PageResult("http://127.0.0.1/", status=304, digest="ab" * 32))))
    assert result.page.digest == "ab" * 32


# ------------------------------------------------------------------ the crawl store's recrawl

def crawl_once(store: CrawlStore, fetcher: Fetcher, scope: Scope) -> dict:
    """Claim every to-visit URL, visit it for real (with its validators) and apply the results."""
    totals: dict = {}
    while pendings := store.claim(100):
        outcomes = [Outcome(x, visit(fetcher, x.url, instruction=_validators({}, x)), "ex", 1, False)
                    for x in pendings]
        for key, value in store.apply(outcomes, scope).items():
            totals[key] = totals.get(key, 0) + value
    return totals


def crawled_once(db_url: str, site_server, seed: str):
    """:func:`conditional_site` served, crawled once from ``seed`` into a store at ``db_url``
    that keeps versions (intervals: 100 s first, 10 s to 1000 s). Returns ``(site, server,
    fetcher, store, scope, found)``, ``found`` what the crawl counted."""
    site = conditional_site()
    server = site_server(site)
    fetcher = Fetcher(user_agent=UA)
    store = CrawlStore(open_database(db_url), keep_versions=True,
                       schedule=AdaptiveSchedule(initial=100.0, min_interval=10.0, max_interval=1000.0))
    scope = store.scope([server.url(seed)], [], -1)
    store.add_seeds([server.url(seed)])
    return site, server, fetcher, store, scope, crawl_once(store, fetcher, scope)


def test_a_recrawl_batch_writes_its_counts_in_its_own_transaction(tmp_path, site_server):
    """The recrawl row's counts are written with the visits they count: read by another
    connection right after apply() (a client killed then, before a second write, lost the counts
    of what it had stored: the run's row said fewer visits than were applied)."""
    db_url = f"sqlite:///{tmp_path}/c.db"
    site, server, fetcher, store, scope, found = crawled_once(db_url, site_server, "/e.html")
    later = _dt.datetime.now(_dt.timezone.utc).replace(tzinfo=None) + _dt.timedelta(seconds=101)
    due = store.queue_due(later)
    site.pages["/m.html"] += b"<p>edited</p>"
    site.modified["/m.html"] = MTIME + 60
    recrawl_id = store.start_recrawl("due", due)
    before = {"due": due, "fetched": 0, "not_modified": 0, "unchanged": 0, "changed": 0, "gone": 0,
              "revived": 0, "disallowed": 0, "errors": 0, "new": 0}
    pendings = store.claim(10)
    outcomes = [Outcome(x, visit(fetcher, x.url, instruction=_validators({}, x)), "ex", 1, False) for x in pendings]
    done = store.apply(outcomes, scope, recrawl=(recrawl_id, before))
    other = open_database(db_url)  # the client dies here: what does the database say?
    with other.connect() as conn:
        row = conn.execute(sa.select(models.recrawl.c.due, models.recrawl.c.fetched, models.recrawl.c.not_modified,
                                     models.recrawl.c.changed)).one()
    other.dispose()
    assert tuple(row) == (2, 1, 1, 1)
    assert done["recrawl"] == {**before, "fetched": 1, "not_modified": 1, "changed": 1}
    assert before["fetched"] == 0, "the counts given are not changed in place"
    fetcher.close()


def test_store_recrawl_applies_each_visit_once_and_keeps_versions(db_url, site_server):
    """On SQLite, PostgreSQL and MariaDB (servers that do not answer are skipped)."""
    site, server, fetcher, store, scope, found = crawled_once(db_url, site_server, "/e.html")
    assert found["new"] == 2
    assert store.queue_due() == 0, "nothing is due 100 s ahead of time"
    later = _dt.datetime.now(_dt.timezone.utc).replace(tzinfo=None) + _dt.timedelta(seconds=101)
    assert store.queue_due(later) == 2
    assert store.queue_due(later) == 0, "a queued document is not queued twice"

    pendings = store.claim(10)
    assert {x.etag for x in pendings} == {'"v1"', None}
    assert {x.last_modified is not None for x in pendings} == {True, False}
    outcomes = [Outcome(x, visit(fetcher, x.url, instruction=_validators({}, x)), "ex", 1, False) for x in pendings]
    assert {o.page.status for o in outcomes} == {304}
    first = store.apply(outcomes, scope)
    second = store.apply(outcomes, scope)
    assert (first["not_modified"], first["new"]) == (2, 0)
    assert second["not_modified"] == 0, "a visit applied twice counts once"
    with store.engine.connect() as conn:
        intervals = [float(r) for r in conn.execute(sa.select(models.document.c.fetch_interval)).scalars()]
    assert intervals == [pytest.approx(140.0)] * 2

    site.pages["/e.html"] = site.pages["/e.html"].replace(b"<body>", b"<body>edited ")
    site.etags["/e.html"] = '"v2"'
    del site.pages["/m.html"]
    assert store.queue_due(every=True) == 2
    pendings = store.claim(10)
    outcomes = [Outcome(x, visit(fetcher, x.url, instruction=_validators({}, x)), "ex", 1, False) for x in pendings]
    done = store.apply(outcomes, scope)
    assert store.apply(outcomes, scope)["changed"] == 0
    assert (done["changed"], done["gone"]) == (1, 1)
    counts = store.counts()
    assert (counts["documents"], counts["gone"], counts["versions"]) == (2, 1, 1)
    d, v = models.document.c, models.document_version.c
    with store.engine.connect() as conn:
        version = conn.execute(sa.select(v.content, v.etag)).one()
        doc = conn.execute(sa.select(d.content, d.etag, d.fetch_interval).where(d.url == server.url("/e.html"))).one()
    assert "edited" not in version[0] and version[1] == '"v1"'
    assert "edited" in doc[0] and doc[1] == '"v2"' and float(doc[2]) == pytest.approx(140.0 * 0.8)

    from warcio.archiveiterator import ArchiveIterator
    from gridcrawl.export import export_warc
    out = io.BytesIO()
    result = export_warc(store.engine, out, gzip=False)
    assert (result.records, result.versions) == (2, 1)
    out.seek(0)
    bodies = [r.content_stream().read() for r in ArchiveIterator(out) if r.rec_type == "response"]
    assert sum(b"edited" in b for b in bodies) == 1 and len(bodies) == 3

    # --retry-failed gone (the page back): its visit is a revisit, and its visited_url row stays
    # (it was deleted, and never written again: the URL vanished from visited_url and exports)
    site.pages["/m.html"] = b"<html><body>back</body></html>"
    assert store.retry_failed(["gone"]) == 1
    assert store.counts()["visited"] == 2
    outcomes = [Outcome(x, visit(fetcher, x.url, instruction=_validators({}, x)), "ex", 1, False)
                for x in store.claim(10)]
    assert store.apply(outcomes, scope)["revived"] == 1
    counts = store.counts()
    assert (counts["visited"], counts["gone"], counts["errors"]) == (2, 0, 0)

    fetcher.close()


def test_a_page_that_turned_noindex_keeps_its_copy_and_interval_and_counts_as_an_error(sqlite_url, site_server):
    """A stored page now says noindex: its new body is not stored, so the visit keeps the stored
    copy and its interval, as an error does. It counted as changed, visit after visit, and its
    interval shrank to the minimum, with no version kept."""
    site, server, fetcher, store, scope, found = crawled_once(sqlite_url, site_server, "/m.html")
    assert found["new"] == 1
    site.pages["/m.html"] = b"<html><head><meta name=robots content=noindex></head><body>hidden now</body></html>"
    site.modified.pop("/m.html")
    for _ in range(2):
        assert store.queue_due(every=True) == 1
        found = crawl_once(store, fetcher, scope)
        assert (found["error"], found["changed"]) == (1, 0)
    d = models.document.c
    with store.engine.connect() as conn:
        content, interval = conn.execute(sa.select(d.content, d.fetch_interval)).one()
        kind = conn.execute(sa.select(models.visited_url.c.error_kind)).scalar()
    assert "hidden" not in content and float(interval) == pytest.approx(100.0)
    assert kind == "noindex" and store.counts()["versions"] == 0
    fetcher.close()


def test_a_page_whose_type_changed_is_changed_though_no_body_was_read_then_or_now(sqlite_url, site_server):
    """A PDF that turned into a PNG (neither body downloaded: no digest then or now), and an
    HTML page stored before digests were kept that turned into a PDF: both counted unchanged
    (no digest either side), the stored copy kept its old type (and the HTML its old body)."""
    site, server, fetcher, store, scope, found = crawled_once(sqlite_url, site_server, "/m.html")
    site.pages["/doc"] = b"%PDF-1.4 one"
    site.types["/doc"] = "application/pdf"
    store.add_seeds([server.url("/doc")])
    crawl_once(store, fetcher, scope)
    d = models.document.c
    with store.engine.begin() as conn:  # /m.html as a crawl made before digests stored it
        conn.execute(models.document.update().where(d.url.like("%/m.html")).values(content_digest=None))
    site.pages["/doc"], site.types["/doc"] = b"\x89PNG now", "image/png"
    site.pages["/m.html"], site.types["/m.html"] = b"%PDF-1.4 now", "application/pdf"
    site.modified.pop("/m.html")
    assert store.queue_due(every=True) == 2
    again = crawl_once(store, fetcher, scope)
    assert (again["changed"], again["unchanged"]) == (2, 0)
    with store.engine.connect() as conn:
        rows = dict(conn.execute(sa.select(d.url, d.content_type)).all())
        versions = sorted(conn.execute(sa.select(models.document_version.c.content_type)).scalars())
    assert sorted(rows.values()) == ["application/pdf", "image/png"]
    assert versions == ["application/pdf", "text/html; charset=utf-8"], "each replaced type is kept as a version"
    fetcher.close()


def test_validators_too_long_for_their_column_are_not_stored_nor_sent_cut(db_url, site_server):
    """On SQLite, PostgreSQL and MariaDB. An ETag longer than ``document.etag`` (255) on a page
    found unchanged or not modified went into the update as it came: PostgreSQL and MariaDB
    refused the batch, and a recrawl stopped on that page. (A first visit cut it to 255, and the
    cut tag, sent back, matched nothing.) Such a validator is not stored at all."""
    site, server, fetcher, store, scope, found = crawled_once(db_url, site_server, "/e.html")
    long_tag = '"' + "t" * 300 + '"'
    site.etags["/e.html"] = long_tag  # the same body under a new, long ETag: a 200, unchanged
    assert store.queue_due(every=True) == 2
    again = crawl_once(store, fetcher, scope)
    assert again["unchanged"] == 1
    site.pages["/new.html"] = b"<html><head><title>n</title></head><body>n</body></html>"
    site.etags["/new.html"] = long_tag
    store.add_seeds([server.url("/new.html")])
    assert crawl_once(store, fetcher, scope)["new"] == 1
    d = models.document.c
    with store.engine.connect() as conn:
        tags = dict(conn.execute(sa.select(d.url, d.etag)).all())
    assert tags[server.url("/e.html")] is None and tags[server.url("/new.html")] is None
    server.reset()
    assert store.queue_due(every=True) == 3
    crawl_once(store, fetcher, scope)
    assert all(not r.conditional.get("if-none-match", "").startswith('"ttt') for r in server.requests)
    fetcher.close()


def test_queue_due_reads_the_due_documents_through_their_index_not_the_whole_table(db_url):
    """On SQLite, PostgreSQL and MariaDB. The due documents were read in doc_id order with
    "next_fetch_at <= now" as a filter: every look of a --watch read the whole table, bodies and
    all, however few were due. Counted on SQLite: the steps of its statements. Slices of 2 rows:
    a slice boundary inside a run of equal times loses nothing."""
    from gridcrawl.urls import fingerprint
    store = CrawlStore(open_database(db_url))
    now = _dt.datetime(2026, 11, 30, 12, 0, 0)
    later, early = now + _dt.timedelta(days=30), now - _dt.timedelta(days=2)
    when = {5: None, 17: early, 900: now - _dt.timedelta(days=9), 1400: early, 1401: early, 1402: early}
    rows = [{"url": f"http://127.0.0.1:1/{i}", "fingerprint": fingerprint(f"http://127.0.0.1:1/{i}"),
             "final_url": f"http://127.0.0.1:1/{i}", "size": 3000, "depth": 1, "fetched_at": now,
             "content": "x" * 3000, "next_fetch_at": when.get(i, later)} for i in range(1, 2001)]
    with store.engine.begin() as conn:
        conn.execute(models.document.insert(), rows)
    steps = []
    if store.engine.dialect.name == "sqlite":
        store.engine.dispose()
        sa.event.listen(store.engine, "connect",
                        lambda dbapi, _rec: dbapi.set_progress_handler(lambda: steps.append(1), 100))
    assert store.queue_due(now, batch=2) == 6
    with store.engine.connect() as conn:
        queued = conn.execute(sa.select(models.to_visit_url.c.url).order_by(models.to_visit_url.c.id)).scalars().all()
    assert sorted(int(u.rsplit("/", 1)[1]) for u in queued) == [5, 17, 900, 1400, 1401, 1402]
    if store.engine.dialect.name == "sqlite":
        assert len(steps) * 100 < 2000, f"{len(steps) * 100} SQLite steps for 6 due documents of 2,000 (fewer than one a row)"
    assert store.queue_due(now, every=True) == 2000 - 6


def test_a_gone_page_back_unchanged_answers_304_and_is_revived(sqlite_url, site_server):
    """A gone page that comes back as it was answers the stored validators with a 304: no new
    body, and it is revived (``gone_at`` cleared), not an error."""
    site, server, fetcher, store, scope, found = crawled_once(sqlite_url, site_server, "/e.html")
    body = site.pages.pop("/e.html")
    assert store.queue_due(every=True) == 2
    assert crawl_once(store, fetcher, scope)["gone"] == 1
    site.pages["/e.html"] = body  # its ETag "v1" still stands
    assert store.queue_due(every=True) == 2
    again = crawl_once(store, fetcher, scope)
    assert (again["revived"], again["error"]) == (1, 0)
    assert store.counts()["gone"] == 0
    fetcher.close()


def _visit_all(store, fetcher, scope) -> dict:
    """Visit every URL the store gives (sitemaps read) and apply the results, as a crawl would;
    return the summed counts of :meth:`CrawlStore.apply`."""
    from gridcrawl.client.app import thread_instruction
    totals: dict = {}
    while pendings := store.claim(100):
        outcomes = [Outcome(x, visit(fetcher, x.url, instruction=thread_instruction({}, store.strategy, x,
                                                                                   sitemaps=True)[0]),
                            "ex", 1, False) for x in pendings]
        for key, value in store.apply(outcomes, scope).items():
            totals[key] = totals.get(key, 0) + value
    return totals


def test_store_rereads_sitemaps_and_acts_on_their_lastmod(db_url, site_server):
    """On SQLite, PostgreSQL and MariaDB: the ``sitemap`` table keeps a sitemap's validators; a
    recrawl run queues it again with them; a changed sitemap's newer lastmod queues the page at
    once (counted in ``due``), an older one lengthens the interval; a 304 reads nothing."""
    site = Site()
    site.pages["/"] = b"<html><head><title>home</title></head><body><a href='/a.html'>a</a></body></html>"
    site.pages["/a.html"] = b"<html><head><title>a</title></head><body>a</body></html>"
    entries = lambda when, root="2020-01-01": (
        '<?xml version="1.0"?><urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">'
        f'<url><loc>{{BASE}}/</loc><lastmod>{root}</lastmod></url>'
        f'<url><loc>{{BASE}}/a.html</loc><lastmod>{when}</lastmod></url></urlset>').encode()
    site.pages["/sitemap.xml"] = entries("2020-01-01")
    site.types["/sitemap.xml"] = "application/xml"
    site.modified["/sitemap.xml"] = MTIME
    server = site_server(site)
    fetcher = Fetcher(user_agent=UA)
    store = CrawlStore(open_database(db_url), schedule=AdaptiveSchedule(initial=100.0, min_interval=1.0,
                                                                        max_interval=1000.0))
    scope = store.scope([server.url("/")], [], -1)
    store.add_seeds([server.url("/")])

    def run() -> dict:
        return _visit_all(store, fetcher, scope)

    assert run()["new"] == 2
    s, d = models.sitemap.c, models.document.c
    with store.engine.connect() as conn:
        assert conn.execute(sa.select(s.kind, s.status, s.last_modified.is_not(None))).all() == [("sitemap", 200, True)]
        visited_at = conn.execute(sa.select(sa.func.max(d.visited_at))).scalar()
    now = _dt.datetime.now(_dt.timezone.utc).replace(tzinfo=None)
    while now < visited_at + _dt.timedelta(seconds=1.1):  # the lastmod must be after the visit, 1 s (min) later
        now = _dt.datetime.now(_dt.timezone.utc).replace(tzinfo=None)
    site.pages["/sitemap.xml"] = entries(now.isoformat(timespec="seconds") + "Z", root="2020-01-02")
    site.modified["/sitemap.xml"] = MTIME + 60
    store.recrawl_since = now
    assert store.queue_due() == 0 and store.queue_sitemaps(every=True) == 1
    assert store.queue_sitemaps(every=True) == 0, "a queued sitemap is not queued twice"
    server.reset()
    assert run()["due"] == 1
    assert [(r.path, r.status) for r in server.requests] == [("/sitemap.xml", 200), ("/a.html", 200)]
    assert "if-modified-since" in server.requests[0].conditional
    with store.engine.connect() as conn:
        intervals = dict(conn.execute(sa.select(d.url, d.fetch_interval)).all())
    assert float(intervals[server.url("/")]) == 100.0, "lastmod not newer: the interval kept..."
    assert float(intervals[server.url("/a.html")]) == pytest.approx(140.0), "fetched, unchanged body"
    with store.engine.connect() as conn:
        put_off = conn.execute(sa.select(d.next_fetch_at, d.visited_at)
                               .where(d.url == server.url("/"))).one()
    assert (put_off[0] - put_off[1]).total_seconds() == pytest.approx(140.0), "...the visit put off as by a 304"

    # the sitemap changes in another entry only: "/"'s entry, read again, puts its visit off no
    # further (each read of a sitemap changed elsewhere lengthened every page's interval again)
    site.pages["/sitemap.xml"] = entries("2020-01-03", root="2020-01-02")
    site.modified["/sitemap.xml"] = MTIME + 120
    store.recrawl_since = _dt.datetime.now(_dt.timezone.utc).replace(tzinfo=None)
    assert store.queue_sitemaps(every=True) == 1
    assert run().get("due", 0) == 0
    with store.engine.connect() as conn:
        again = conn.execute(sa.select(d.next_fetch_at, d.fetch_interval).where(d.url == server.url("/"))).one()
    assert again[0] == put_off[0] and float(again[1]) == 100.0, "the same lastmod read again"

    store.recrawl_since = _dt.datetime.now(_dt.timezone.utc).replace(tzinfo=None)
    assert store.queue_sitemaps(every=True) == 1
    server.reset()
    assert run().get("due", 0) == 0
    assert [(r.path, r.status) for r in server.requests] == [("/sitemap.xml", 304)]
    assert store.next_due() is not None
    fetcher.close()


def test_a_sitemap_that_says_modified_today_on_every_read_moves_no_page_sooner_than_min_interval(
        sqlite_url, site_server):
    """A sitemap whose body changes on every read (a counter) and that gives every page a
    lastmod of today's date (read as modified after any visit made today): the page hints it
    gives within ``min_interval`` (60 s here) of a page's visit move nothing sooner.

    * a page visited in this recrawl run (the sitemap read after it): no hint at all, its
      schedule is the visit's (``CrawlStore._lastmod_hints``' "visited in this run less than
      ``min_interval`` ago");
    * a page visited before this run, less than ``min_interval`` ago: due only at its visit +
      ``min_interval`` (``lastmod_hint``'s clamp), so neither queued nor fetched now (the store
      queues only a page whose due time has come);
    * the sitemap itself, changed on every read: read again ``min_interval`` after each read,
      not sooner (``next_interval``'s clamp of its own schedule)."""
    from gridcrawl.db import utcnow

    reads = iter(range(1, 1_000_000))
    site = Site()
    site.pages["/"] = b"<html><head><title>home</title></head><body><a href='/a.html'>a</a></body></html>"
    site.pages["/a.html"] = b"<html><head><title>a</title></head><body>a</body></html>"

    def sitemap(h) -> None:
        today = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d")
        h.respond(200, (f'<?xml version="1.0"?><!-- read {next(reads)} -->'
                        '<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">'
                        f'<url><loc>{{BASE}}/</loc><lastmod>{today}</lastmod><changefreq>always</changefreq></url>'
                        f'<url><loc>{{BASE}}/a.html</loc><lastmod>{today}</lastmod></url></urlset>').encode(),
                  content_type="application/xml")
    site.extra["/sitemap.xml"] = sitemap
    server = site_server(site)
    fetcher = Fetcher(user_agent=UA)
    store = CrawlStore(open_database(sqlite_url), schedule=AdaptiveSchedule(initial=100.0, min_interval=60.0,
                                                                           max_interval=1000.0))
    scope = store.scope([server.url("/")], [], -1)
    store.add_seeds([server.url("/")])

    def run() -> dict:
        return _visit_all(store, fetcher, scope)

    def schedules() -> dict:
        d, m = models.document.c, models.sitemap.c
        with store.engine.connect() as conn:
            rows = conn.execute(sa.select(d.url, d.visited_at, d.fetch_interval, d.next_fetch_at)).all()
            rows += conn.execute(sa.select(m.url, m.visited_at, m.fetch_interval, m.next_fetch_at)).all()
        return {url.removeprefix(server.url("/")[:-1]): (visited, float(interval), (due - visited).total_seconds())
                for url, visited, interval, due in rows}

    assert run()["new"] == 2 and server.count("/sitemap.xml") == 1  # the crawl

    # a recrawl run visits both pages (unchanged: 100 s -> 140 s), then reads the sitemap
    store.recrawl_since = utcnow()
    assert store.queue_due(every=True) == 2
    run()
    store.queue_sitemaps(every=True)
    assert run().get("due", 0) == 0
    visited = schedules()
    assert visited["/"][1:] == visited["/a.html"][1:] == (140.0, pytest.approx(140.0)), \
        "visited in this run: the sitemap read after the visit leaves the visit's schedule"
    assert visited["/sitemap.xml"][1:] == (60.0, pytest.approx(60.0)), \
        "a sitemap changed on every read is read again min_interval later, not sooner"

    # the next run reads the sitemap at once: the pages' visits were seconds ago, before this run
    store.recrawl_since = utcnow()
    assert store.queue_sitemaps(every=True) == 1
    server.reset()
    assert run().get("due", 0) == 0
    assert [r.path for r in server.requests] == ["/sitemap.xml"], "no page fetched sooner than min_interval"
    hinted = schedules()
    for path in ("/", "/a.html"):
        assert hinted[path][0] == visited[path][0] and hinted[path][1:] == (140.0, pytest.approx(60.0)), \
            (path, hinted[path], "due min_interval after the visit, its interval kept")
    assert hinted["/sitemap.xml"][1:] == (60.0, pytest.approx(60.0))
    assert store.to_visit_count() == 0
    fetcher.close()


def test_a_spark_layer_cut_off_before_its_commit_is_resumed_not_taken_for_a_recrawl(tmp_path, site_server):
    """A Spark layer's download stage writes documents, its commit stage their visits: killed
    between the two, `gridcrawl spark` refused to resume ("N recrawl visits are queued") and a
    grid resume took the pages for recrawl visits, updating visited rows that did not exist
    (30 URLs of 260 lost their visit). The documents' URLs are still queued: a resume visits them
    again and records their visits."""
    site = conditional_site()
    server = site_server(site)
    fetcher = Fetcher(user_agent=UA)
    store = CrawlStore(open_database(f"sqlite:///{tmp_path}/c.db"))
    scope = store.scope([server.url("/e.html")], [], -1)
    store.add_seeds([server.url("/e.html")])
    pendings = store.claim(10)
    outcomes = [Outcome(x, visit(fetcher, x.url), "ex", 1, False) for x in pendings]
    store.write_documents(store.rows(outcomes, scope))  # the download stage; the driver dies here
    assert store.counts()["documents"] == 1 and store.counts()["visited"] == 0
    assert store.queued_revisits() == 0
    store.release_all()
    totals = crawl_once(store, fetcher, scope)  # the grid resumes it
    counts = store.counts()
    assert totals["pages"] == 2 and counts["visited"] == counts["documents"] == 2 and counts["to_visit"] == 0


# ------------------------------------------------------------------ robots.txt now disallows a stored page

def _summary_row(text: str, label: str) -> str | None:
    """The value of the row ``label`` of a rich table printed in ``text`` (first match), or None."""
    for line in text.splitlines():
        cells = [c.strip() for c in line.split("│")]
        if len(cells) >= 3 and cells[1] == label:
            return cells[2]
    return None


def test_a_stored_page_robots_txt_now_disallows_is_kept_and_counted_disallowed_not_an_error(tmp_path, site_server):
    """A real ``gridcrawl run`` stores ``/`` and ``/private/a``; the site's robots.txt then
    disallows ``/private/``. ``gridcrawl run --recrawl-all`` does not fetch the page, keeps its
    stored copy and interval, and counts it in the recrawl table's "disallowed by robots.txt
    (kept)" row, not among its errors (before: "errors 1", verdict ``error``); the run exits 0.
    ``gridcrawl report --crawl-db`` shows the same row of the recrawl run, and the ``recrawl``
    table holds ``disallowed`` 1, ``errors`` 0."""
    import subprocess
    import sys
    site = Site()
    site.pages["/"] = b"<html><head><title>home</title></head><body><a href='/private/a'>a</a></body></html>"
    site.pages["/private/a"] = b"<html><head><title>a</title></head><body>the private page</body></html>"
    site.pages["/robots.txt"] = b"User-agent: *\nAllow: /\n"
    site.types["/robots.txt"] = "text/plain"
    server = site_server(site)
    workdir = tmp_path / "w"

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "gridcrawl", "run", *args, "--workdir", str(workdir),
                               "--executors", "1", "--no-progress", "--no-sitemaps"],
                              capture_output=True, text=True, timeout=120)

    first = run(server.url("/"))
    assert first.returncode == 0, first.stderr[-3000:]
    engine = open_database(f"sqlite:///{workdir / 'crawl.db'}")
    d = models.document.c
    with engine.connect() as conn:
        before = {r.url: (r.content, r.fetch_interval) for r in conn.execute(sa.select(d.url, d.content, d.fetch_interval))}
    private = server.url("/private/a")
    assert "the private page" in before[private][0]

    site.pages["/robots.txt"] = b"User-agent: *\nDisallow: /private/\n"
    server.reset()
    again = run("--recrawl-all")
    assert again.returncode == 0, again.stderr[-3000:]
    assert "/private/a" not in [r.path for r in server.requests], "robots.txt obeyed"
    recrawl_table = again.stderr[again.stderr.index("gridcrawl: recrawl"):]
    assert _summary_row(recrawl_table, "disallowed by robots.txt (kept)") == "1", again.stderr
    assert _summary_row(recrawl_table, "errors") == "0", again.stderr
    assert "every page of this run failed" not in again.stderr
    with engine.connect() as conn:
        after = {r.url: (r.content, r.fetch_interval) for r in conn.execute(sa.select(d.url, d.content, d.fetch_interval))}
        row = conn.execute(sa.select(models.recrawl.c.disallowed, models.recrawl.c.errors,
                                     models.recrawl.c.unchanged)).one()
        kind = conn.execute(sa.select(models.visited_url.c.error_kind)
                            .where(models.visited_url.c.url == private)).scalar()
    engine.dispose()
    assert after[private] == before[private], "the stored copy and its interval are kept"
    assert tuple(row) == (1, 0, 1)
    assert kind == "robots"  # the visit says why: --retry-failed robots queues it again

    report = subprocess.run([sys.executable, "-m", "gridcrawl", "report", "--crawl-db",
                             f"sqlite:///{workdir / 'crawl.db'}", "--wide"], capture_output=True, text=True, timeout=60)
    assert report.returncode == 0, report.stderr
    runs = report.stdout[report.stdout.index("recrawls (table recrawl)"):]
    assert _summary_row(runs, "disallowed by robots.txt (kept)") == "1", report.stdout
    assert _summary_row(runs, "errors") == "0", report.stdout
