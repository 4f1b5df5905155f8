"""The client's share of its window among hosts (client/store.py, HostShare): a claim gives every
host its first ``share`` grid threads in flight before any host gets more, on a real SQLite
crawl database, and a real crawl of many sites finishes the sites without a crawl delay first."""

from __future__ import annotations

import collections

import sqlalchemy as sa

from gridcrawl.client.store import CrawlStore, HostShare
from gridcrawl.db import open_database
from gridcrawl.urls import url_host


def frontier(tmp_path, counts: dict[str, int]) -> CrawlStore:
    """A crawl database whose frontier holds ``counts[host]`` URLs of each host, host by host."""
    store = CrawlStore(open_database(f"sqlite:///{tmp_path / 'crawl.db'}"))
    store.add_seeds([f"http://{host}/p{i}.html" for host, n in counts.items() for i in range(n)])
    return store


def in_flight(store: CrawlStore) -> list[str]:
    with store.engine.connect() as conn:
        return conn.execute(sa.text("SELECT url FROM to_visit_url WHERE in_flight ORDER BY id")).scalars().all()


def test_every_host_gets_its_share_before_one_host_gets_more(tmp_path):
    store = frontier(tmp_path, {"a.test": 500, "b.test": 20, "c.test": 20})
    share = HostShare(16)
    claimed = store.claim(100, sitemaps=8, share=share)
    hosts = collections.Counter(url_host(p.url) for p in claimed)
    # b and c first get their 16; the room left goes in the frontier's order: a's next URLs
    assert hosts == {"a.test": 68, "b.test": 16, "c.test": 16}
    assert [p.url for p in claimed if p.url.startswith("http://a.test/")] == [
        f"http://a.test/p{i}.html" for i in range(68)]  # a's own order kept
    assert sorted(in_flight(store)) == sorted(p.url for p in claimed) and not share.left
    again = store.claim(100, sitemaps=8, share=HostShare(16, collections.Counter(hosts)))
    assert not {p.url for p in again} & {p.url for p in claimed}  # never claimed twice


def test_a_single_host_keeps_the_whole_window(tmp_path):
    store = frontier(tmp_path, {"a.test": 500})
    claimed = store.claim(200, sitemaps=8, share=HostShare(16))
    assert [p.url for p in claimed] == [f"http://a.test/p{i}.html" for i in range(200)]
    more = store.claim(56, sitemaps=8, share=HostShare.of([p.url for p in claimed], 16))
    assert [p.url for p in more] == [f"http://a.test/p{i}.html" for i in range(200, 256)]


def test_a_claim_that_finds_only_hosts_at_their_share_leaves_room_and_says_so(tmp_path):
    """Each read after the first leaves out the hosts found at their share; the hosts at their
    share before the claim are left out from the first read. Other hosts' URLs may still lie
    beyond the reads (CLAIM_ROUNDS of them): the claim then takes what it may and says it left
    URLs, so the client waits for results instead of filling its window with those hosts."""
    counts = {"a.test": 1000, "b.test": 1000, "c.test": 1000, "d.test": 1000, "e.test": 10}
    store = frontier(tmp_path, counts)
    share = HostShare(16, collections.Counter(dict.fromkeys(["a.test", "b.test", "c.test", "d.test"], 16)))
    assert store.claim(50, sitemaps=8, share=share) == [] and share.left  # e lies beyond 3 reads
    assert in_flight(store) == []
    held = [f"http://{host}/p{i}.html" for host in ("a.test", "b.test", "c.test", "d.test") for i in range(16)]
    share = HostShare.of(held, 16)  # as the client builds it: a, b, c, d left out at once
    claimed = store.claim(50, sitemaps=8, share=share)
    assert [p.url for p in claimed][:10] == [f"http://e.test/p{i}.html" for i in range(10)]
    # then the frontier held nothing else: a's next URLs fill the room, in order
    assert [p.url for p in claimed][10:] == [f"http://a.test/p{i}.html" for i in range(40)] and not share.left


def test_without_a_share_a_claim_takes_the_frontier_in_order(tmp_path):
    store = frontier(tmp_path, {"a.test": 300, "b.test": 20})
    assert {url_host(p.url) for p in store.claim(100, sitemaps=8)} == {"a.test"}


def statements(store: CrawlStore) -> list[str]:
    """The SQL statements ``store``'s engine runs from now on (appended as they run)."""
    ran: list[str] = []
    sa.event.listen(store.engine, "before_cursor_execute", lambda *args: ran.append(args[2]))
    return ran


WALKS = ("to_visit_url.kind IS NOT NULL", "NOT (to_visit_url.url LIKE")  # reads that walk every waiting row


def test_a_one_host_frontier_is_not_read_to_its_end_at_every_claim(tmp_path):
    """A crawl of one host keeps it at its share (the default concurrent_requests_per_host): each
    claim's read of the sitemaps to read first and of other hosts' pages found nothing, walking
    the whole frontier every time (1-1.4 s each at 1,000,000 URLs). Once found absent, they are
    not read again until rows that may hold them are queued."""
    store = frontier(tmp_path, {"a.test": 3000})
    held = [f"http://a.test/p{i}.html" for i in range(16)]
    ran = statements(store)
    first = store.claim(64, sitemaps=8, share=HostShare.of(held, 16))
    assert [p.url for p in first] == [f"http://a.test/p{i}.html" for i in range(64)]
    assert all(any(walk in sql for sql in ran) for walk in WALKS)  # the first claim looks
    ran.clear()
    second = store.claim(64, sitemaps=8, share=HostShare.of(held, 16))
    assert [p.url for p in second] == [f"http://a.test/p{i}.html" for i in range(64, 128)]
    assert not [sql for sql in ran if any(walk in sql for walk in WALKS)]

    # another host's page queued since: it comes first, by the share
    store.add_seeds(["http://b.test/new.html"])
    third = store.claim(64, sitemaps=8, share=HostShare.of(held, 16))
    assert [p.url for p in third] == ["http://b.test/new.html"] + [f"http://a.test/p{i}.html" for i in range(128, 191)]
    # a sitemap file queued since (as a robots.txt's Sitemap line queues one): read first
    with store.engine.begin() as conn:
        conn.execute(sa.text("INSERT INTO to_visit_url (url, fingerprint, depth, priority, in_flight, kind) "
                             "VALUES ('http://a.test/sitemap.xml', 'f-sitemap', 0, 5, 0, 'sitemap')"))
    fourth = store.claim(64, sitemaps=8, share=HostShare.of(held, 16))
    assert [p.url for p in fourth][:2] == ["http://a.test/sitemap.xml", "http://a.test/p191.html"]
    ran.clear()
    store.claim(64, sitemaps=8, share=HostShare.of(held, 16))
    assert not [sql for sql in ran if any(walk in sql for walk in WALKS)]
