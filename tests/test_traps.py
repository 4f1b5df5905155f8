"""Crawler traps on the client side: the path-repetition rule, the URL length cap, session-id
parameters, depth, and the pages-per-host cap applied by CrawlStore.apply on a real SQLite file."""

from __future__ import annotations

import pytest

from gridcrawl.client.store import CrawlStore, Outcome, Pending, Scope
from gridcrawl.db import open_database
from gridcrawl.protocol import PageResult
from gridcrawl.urls import MAX_URL_LENGTH, InvalidURL, canonical_url, fingerprint, path_trap, scope_domain


@pytest.mark.parametrize("url,segment", [
    ("http://h.example/a/b/a/b/a/b", "a"),
    ("http://h.example/x/x/x", "x"),
    ("http://h.example/x/x/x/", "x"),
    ("http://h.example/cal/2024/cal/05/cal/", "cal"),
    ("http://h.example/a//a//b/a", "a"),
    ("http://h.example/x/x/", None),
    ("http://h.example/a/b/a/b/", None),
    ("http://h.example/docs/3/library/os.html", None),
    ("http://h.example/?q=x/x/x", None),  # the query is not the path
    ("http://h.example/", None),
])
def test_path_trap(url, segment):
    assert path_trap(url) == segment


def test_path_trap_limit():
    assert path_trap("http://h.example/x/x/", limit=2) == "x"
    assert path_trap("http://h.example/x/x/x/", limit=4) is None


def test_session_variants_are_one_page():
    base = canonical_url("http://h.example/cart?item=3")
    for variant in ("http://h.example/cart;jsessionid=0A1B?item=3", "http://h.example/cart?item=3&sid=42",
                    "http://h.example/cart?PHPSESSID=abc&item=3", "http://h.example/cart?item=3&SessionId=q",
                    "HTTP://H.EXAMPLE:80/cart?item=3#top"):
        assert canonical_url(variant) == base
        assert fingerprint(canonical_url(variant)) == fingerprint(base)


def test_url_length_cap():
    assert len(canonical_url("http://h.example/" + "a" * (MAX_URL_LENGTH - 17))) == MAX_URL_LENGTH
    with pytest.raises(InvalidURL, match="longer than 2083"):
        canonical_url("http://h.example/" + "a" * (MAX_URL_LENGTH - 16))


def test_scope_allows():
    scope = Scope(["h.example"], max_depth=2)
    assert scope.allows("http://h.example/a/b/", 2)
    assert scope.allows("http://sub.h.example/", 1)
    assert not scope.allows("http://h.example/a/", 3)  # too deep
    assert not scope.allows("http://other.example/", 1)  # out of scope
    assert not scope.allows("http://h.example/a/b/a/b/a/", 1)  # path trap
    assert scope.instruction() == {"scope": ["h.example"]}


def test_scope_domain_is_the_most_specific_allowed_domain_a_host_falls_under():
    allowed = ["example.com", "docs.example.com", "127.0.0.1"]
    assert scope_domain("a.b.docs.example.com", allowed) == "docs.example.com"
    assert scope_domain("WWW.Example.COM.", allowed) == "example.com"
    assert scope_domain("example.com", allowed) == "example.com"
    assert scope_domain("badexample.com", allowed) is None
    assert scope_domain("127.0.0.1", allowed) == "127.0.0.1"
    assert scope_domain("", allowed) is None
    assert scope_domain("bücher.example.com", ["BÜCHER.example.com"]) == "xn--bcher-kva.example.com"
    scope = Scope(["example.com", "docs.example.com"])
    assert scope.site("http://x.y.example.com:8080/p") == "example.com"
    assert scope.site("http://a.docs.example.com/") == "docs.example.com"
    assert scope.site("http://elsewhere.example/") == "elsewhere.example"  # outside the scope: its host
    assert scope.site("http://a.elsewhere.example/") == "a.elsewhere.example"
    assert scope.widen("elsewhere.example")  # a seed redirected there: its subdomains now count with it
    assert scope.site("http://a.elsewhere.example/") == "elsewhere.example"


def _outcome(store_row: Pending, links: list[str]) -> Outcome:
    page = PageResult(url=store_row.url, final_url=store_row.url, status=200, content_type="text/html",
                      links=[[u, ""] for u in links])
    return Outcome(store_row, page, "ex", 1, False)


def _queued(store: CrawlStore) -> list[str]:
    from gridcrawl import models
    import sqlalchemy as sa
    with store.engine.connect() as conn:
        return sorted(conn.execute(sa.select(models.to_visit_url.c.url)).scalars())


def test_max_pages_per_host_caps_queued_urls(tmp_path):
    store = CrawlStore(open_database(f"sqlite:///{tmp_path / 'crawl.db'}"))
    store.add_seeds(["http://a.example/", "http://b.example/"])
    scope = Scope(["a.example", "b.example"], -1, max_pages_per_host=4)
    seeds = store.claim(10)
    a_seed = next(p for p in seeds if "a.example" in p.url)
    b_seed = next(p for p in seeds if "b.example" in p.url)
    links_a = [f"http://a.example/{i}" for i in range(10)]
    # a.example: the seed counts, so 3 more fit; b.example is counted on its own
    store.apply([_outcome(a_seed, links_a + ["http://b.example/1"])], scope)
    assert _queued(store) == ["http://a.example/0", "http://a.example/1", "http://a.example/2",
                              "http://b.example/", "http://b.example/1"]
    assert store.capped == {"a.example": 7}  # the links left out, for the summary
    # the same links again, and more: nothing new for a.example; b.example gets up to its cap
    store.apply([_outcome(b_seed, links_a + [f"http://b.example/{i}" for i in range(1, 9)])], scope)
    queued = _queued(store)
    assert [u for u in queued if "a.example" in u] == ["http://a.example/0", "http://a.example/1", "http://a.example/2"]
    assert [u for u in queued if "b.example" in u] == ["http://b.example/1", "http://b.example/2", "http://b.example/3"]
    assert store.capped == {"a.example": 7, "b.example": 5}  # a link left out once is not counted again
    # a new client on the same database counts what is there
    again = CrawlStore(store.engine)
    more = again.claim(10)
    again.apply([_outcome(more[0], ["http://a.example/new", "http://b.example/new"])], scope)
    assert "http://a.example/new" not in _queued(again) and "http://b.example/new" not in _queued(again)


def test_the_cap_counts_a_seeds_subdomains_with_it(tmp_path):
    """A maze over endless host names (one page each) is capped as one site: the seed's."""
    store = CrawlStore(open_database(f"sqlite:///{tmp_path / 'crawl.db'}"))
    store.add_seeds(["http://maze.example/", "http://docs.maze.example/"])
    scope = Scope(["maze.example", "docs.maze.example"], -1, max_pages_per_host=5)
    seed = next(p for p in store.claim(10) if p.url == "http://maze.example/")
    subdomains = [f"http://h{i}.maze.example/" for i in range(10)]
    store.apply([_outcome(seed, subdomains + ["http://a.docs.maze.example/", "http://b.docs.maze.example/"])], scope)
    queued = _queued(store)
    # maze.example: its seed (now visited) and four subdomains fill its 5; docs.maze.example, a seed
    # itself, counts on its own
    assert [u for u in queued if "docs" not in u] == subdomains[:4]
    assert [u for u in queued if "docs" in u] == ["http://a.docs.maze.example/", "http://b.docs.maze.example/",
                                                  "http://docs.maze.example/"]
    assert store.capped == {"maze.example": 6}
    # a new client on the same database counts the sites from the tables
    again = CrawlStore(store.engine)
    more = again.claim(20)
    again.apply([_outcome(more[0], ["http://new.maze.example/", "http://c.docs.maze.example/"])], scope)
    assert "http://new.maze.example/" not in _queued(again) and "http://c.docs.maze.example/" in _queued(again)


def test_a_scope_without_a_cap_queues_every_link(tmp_path):
    store = CrawlStore(open_database(f"sqlite:///{tmp_path / 'crawl.db'}"))
    store.add_seeds(["http://a.example/"])
    [seed] = store.claim(1)
    store.apply([_outcome(seed, [f"http://a.example/{i}" for i in range(50)])], Scope(["a.example"]))
    assert len(_queued(store)) == 50 and not store.capped


def test_links_found_again_and_trapped_links_are_looked_up_by_fingerprint(tmp_path):
    """Each apply lowers the depth of the waiting URLs its links found by a shorter path and drops
    the waiting URLs of a shape that became a trap. Written as ``fingerprint IN (...) AND
    in_flight = 0``, SQLite took the frontier's order index for these (it keeps no statistics
    and took ``in_flight = 0`` for the selective part) and walked every waiting URL deeper than
    the links: 1.4 s an apply with a frontier of 1,000,000 URLs. The plans of every statement
    an apply runs on ``to_visit_url`` are checked here, on the real file."""
    import sqlite3

    import sqlalchemy as sa

    db = tmp_path / "crawl.db"
    store = CrawlStore(open_database(f"sqlite:///{db}"))
    scope = Scope(["a.example"], -1, 0, trap_near_duplicates=1)
    store.add_seeds(["http://a.example/cal?m=1"])
    seed = store.claim(1)[0]
    trapped = [f"http://a.example/cal?m={m}" for m in (3, 4, 5)]
    deep = [f"http://a.example/deep/{i}" for i in range(3000)] + trapped
    with store.engine.begin() as conn:  # a frontier queued from deep pages, waiting
        conn.execute(sa.text("INSERT INTO to_visit_url (url, fingerprint, depth, priority, in_flight) "
                             "VALUES (:url, :fp, 7, 5, 0)"),
                     [{"url": u, "fp": fingerprint(canonical_url(u))} for u in deep])
    ran: list[tuple[str, tuple]] = []
    sa.event.listen(store.engine, "before_cursor_execute",
                    lambda conn, cur, sql, params, ctx, many: ran.append((sql, params)) if not many else None)

    def page(pend: Pending, links: list[str]) -> Outcome:
        result = PageResult(url=pend.url, final_url=pend.url, status=200, content_type="text/html",
                            links=[[u, ""] for u in links], simhash=0x5A5A)
        return Outcome(pend, result, "ex", 1, False)

    store.apply([page(seed, ["http://a.example/cal?m=2", deep[1], deep[2]])], scope)
    with store.engine.connect() as conn:
        depths = dict(conn.execute(sa.text("SELECT url, depth FROM to_visit_url")).all())
        second = conn.execute(sa.text("SELECT id FROM to_visit_url WHERE url = 'http://a.example/cal?m=2'")).scalar()
    assert depths[deep[1]] == depths[deep[2]] == 1 and depths[deep[3]] == 7  # found by a shorter path
    # /cal?m=2, found on /cal?m=1 and alike: its shape is a trap, and the waiting /cal?m=3... are dropped
    store.apply([page(store.pending(second), trapped)], scope)
    with store.engine.connect() as conn:
        assert not set(trapped) & set(conn.execute(sa.text("SELECT url FROM to_visit_url")).scalars())
        assert dict(conn.execute(sa.text("SELECT url, error_kind FROM visited_url WHERE url LIKE '%cal?m=_' "
                                         "AND url != 'http://a.example/cal?m=1' AND url != 'http://a.example/cal?m=2'")
                                 ).all()) == dict.fromkeys(trapped, "trap")

    plans = {}
    with sqlite3.connect(db) as raw:
        for sql, params in ran:
            if "to_visit_url" in sql and not sql.lstrip().upper().startswith("INSERT"):
                plans[sql] = " ".join(r[3] for r in raw.execute("EXPLAIN QUERY PLAN " + sql, params))
    assert any("DELETE" in sql for sql in plans) and any(sql.startswith("UPDATE to_visit_url SET depth") for sql in plans)
    walks = {sql: plan for sql, plan in plans.items() if "ix_to_visit_url_depth" in plan or "ix_to_visit_url_priority" in plan}
    assert walks == {}
