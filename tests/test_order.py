"""Frontier order (--order bfs|dfs|priority) on a known tree: the client store's claims on
SQLite, and one real crawl through the grid with one grid thread in flight at a time.

Siblings discovered on one page are inserted in fingerprint order (the store's insert-if-absent
sorts rows by key so that concurrent writers do not deadlock), so the checks are the defining
properties of each order rather than one fixed sequence: breadth-first visits children of
earlier pages first (FIFO), depth-first visits every subtree as one contiguous run (a stack)."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from gridcrawl.client.store import CrawlStore, Outcome, Scope, Strategy
from gridcrawl.db import open_database
from gridcrawl.protocol import PageResult
from grid import Grid
from sites import Site

NODES = 15  # a complete binary tree of depth 3: node i has children 2i+1 and 2i+2
BASE = "http://127.0.0.1:8000"


def node_path(i: int) -> str:
    return "/" if i == 0 else f"/n{i}.html"


def children(i: int) -> list[int]:
    return [c for c in (2 * i + 1, 2 * i + 2) if c < NODES]


def parent(i: int) -> int:
    return (i - 1) // 2


def depth(i: int) -> int:
    return 0 if i == 0 else depth(parent(i)) + 1


def subtree(i: int) -> set[int]:
    return {i}.union(*(subtree(c) for c in children(i)))


def tree_site() -> Site:
    site = Site()
    for i in range(NODES):
        links = "".join(f'<li><a href="{node_path(c)}">node {c}</a></li>' for c in children(i))
        site.pages[node_path(i)] = (f"<!DOCTYPE html><html><head><title>node {i}</title></head>"
                                    f"<body><ul>{links}</ul></body></html>").encode()
        site.links[node_path(i)] = [node_path(c) for c in children(i)]
    return site


def is_breadth_first(order: list[int]) -> bool:
    """Every node once, the root first, and children in the order their parents were visited."""
    if sorted(order) != list(range(NODES)) or order[0] != 0:
        return False
    position = {n: k for k, n in enumerate(order)}
    parents = [position[parent(n)] for n in order[1:]]
    return parents == sorted(parents)


def is_depth_first(order: list[int]) -> bool:
    """Every node once, and each node's subtree visited as one contiguous run starting at it."""
    if sorted(order) != list(range(NODES)):
        return False
    position = {n: k for k, n in enumerate(order)}
    return all(set(order[position[n]:position[n] + len(subtree(n))]) == subtree(n) for n in range(NODES))


def test_the_order_checks_can_fail():
    level_order = list(range(NODES))
    preorder = [0, 1, 3, 7, 8, 4, 9, 10, 2, 5, 11, 12, 6, 13, 14]
    assert is_breadth_first(level_order) and not is_depth_first(level_order)
    assert is_depth_first(preorder) and not is_breadth_first(preorder)
    assert not is_breadth_first([0, 2, 1, 5, 3, 4, 6, 7, 8, 9, 10, 11, 12, 13, 14])  # 5 before 3
    assert not is_depth_first([0, 1, 3, 7, 2, 8, 4, 9, 10, 5, 11, 12, 6, 13, 14])


def store_crawl(tmp_path, order: str, batch: int = 1) -> list[int]:
    """Crawl the tree through the store alone (claim, then apply each page's known links)."""
    store = CrawlStore(open_database(f"sqlite:///{tmp_path / (order + '.db')}"), Strategy(order=order))
    store.add_seeds([BASE + "/"])
    index = {BASE + node_path(i): i for i in range(NODES)}
    visited = []
    while claimed := store.claim(batch):
        outcomes = []
        for pend in claimed:
            node = index[pend.url]
            visited.append(node)
            links = [[BASE + node_path(c), f"node {c}"] for c in children(node)]
            outcomes.append(Outcome(pend, PageResult(url=pend.url, final_url=pend.url, status=200, links=links),
                                    "ex", 1, False))
        store.apply(outcomes, Scope(["127.0.0.1"]))
    return visited


@pytest.mark.parametrize("order", ["bfs", "dfs"])
def test_a_link_found_again_by_a_shorter_path_takes_its_depth(tmp_path, order):
    """Two seeds: / links /a, /a links /b, /b links /c and /deep; /two links /deep too. The
    result of /two comes back last (a large page, or depth-first order), after /deep was queued
    at depth 3 through /b: /deep kept depth 3, and a --max-depth 3 crawl left out its link to
    /end, 2 hops from the seed /two. Now /deep takes depth 1."""
    links = {"/": ["/a"], "/a": ["/b"], "/b": ["/c", "/deep"], "/two": ["/deep"], "/c": [], "/deep": ["/end"],
             "/end": []}
    store = CrawlStore(open_database(f"sqlite:///{tmp_path / 'c.db'}"), Strategy(order=order))
    store.add_seeds([BASE + "/", BASE + "/two"])
    scope = Scope(["127.0.0.1"], max_depth=3)

    def page(pend):
        paths = links[pend.url[len(BASE):]]
        return Outcome(pend, PageResult(url=pend.url, final_url=pend.url, status=200,
                                        links=[[BASE + p, p] for p in paths]), "ex", 1, False)

    def depth_of(table, path):
        with store.engine.connect() as conn:
            return conn.execute(sa.text(f"SELECT depth FROM {table} WHERE url = :u"), {"u": BASE + path}).scalar()

    seeds = {p.url[len(BASE):]: p for p in store.claim(10)}
    store.apply([page(seeds["/"])], scope)
    for path in ("/a", "/b"):
        (pend,) = store.claim(10)
        assert pend.url == BASE + path
        store.apply([page(pend)], scope)
    assert depth_of("to_visit_url", "/deep") == 3
    store.apply([page(seeds["/two"])], scope)  # the late result
    assert depth_of("to_visit_url", "/deep") == 1
    while claimed := store.claim(10):
        store.apply([page(p) for p in claimed], scope)
    assert (depth_of("visited_url", "/deep"), depth_of("visited_url", "/end")) == (1, 2)


def test_store_claims_breadth_first(tmp_path):
    order = store_crawl(tmp_path, "bfs")
    assert is_breadth_first(order), order
    assert [depth(n) for n in order] == sorted(depth(n) for n in order)


def test_store_claims_depth_first(tmp_path):
    order = store_crawl(tmp_path, "dfs")
    assert is_depth_first(order), order
    assert order[:4] != [0, 1, 2, 3]


def test_breadth_first_batches_take_a_whole_level_first(tmp_path):
    order = store_crawl(tmp_path, "bfs", batch=4)
    assert [depth(n) for n in order] == sorted(depth(n) for n in order)


def test_priority_order_claims_the_highest_priority_first(tmp_path):
    store = CrawlStore(open_database(f"sqlite:///{tmp_path / 'p.db'}"), Strategy(order="priority"))
    store.add_seeds([BASE + node_path(i) for i in range(1, 6)])
    with store.engine.begin() as conn:
        for i, prio in zip(range(1, 6), (3, 9, 5, 8, 1)):
            conn.execute(sa.text("UPDATE to_visit_url SET priority = :p WHERE url = :u"),
                         {"p": prio, "u": BASE + node_path(i)})
    assert [p.url for p in store.claim(5)] == [BASE + node_path(i) for i in (2, 4, 3, 1, 5)]


@pytest.mark.e2e
def test_real_crawls_visit_in_breadth_and_depth_first_order(tmp_path, site_server):
    server = site_server(tree_site())
    index = {server.url(node_path(i)): i for i in range(NODES)}
    grid = Grid(tmp_path)
    orders = {}
    try:
        grid.start_manager()
        grid.start_executor("ex1", "--threads", "1")
        for order in ("dfs", "bfs"):
            db = f"sqlite:///{tmp_path / (order + '.db')}"
            client = grid.start_client(server.url("/"), "--db", db, "--order", order, "--max-in-flight", "1",
                                       "--no-sitemaps")  # pages only: the order of their visits
            assert client.wait(timeout=60) == 0, grid.log("client.log")
            engine = open_database(db)
            with engine.connect() as conn:
                urls = conn.execute(sa.text("SELECT url FROM visited_url ORDER BY id")).scalars().all()
                stored = conn.execute(sa.text("SELECT value FROM crawl_meta WHERE name = 'order'")).scalar()
            engine.dispose()
            orders[order] = [index[u] for u in urls]
            assert stored == order
    finally:
        grid.stop()
    print(f"\nvisit order on a 15-node binary tree: bfs {orders['bfs']}, dfs {orders['dfs']}")
    assert is_breadth_first(orders["bfs"]), orders["bfs"]
    assert is_depth_first(orders["dfs"]), orders["dfs"]


@pytest.mark.parametrize("order", ["bfs", "dfs"])
def test_breadth_and_depth_first_claims_read_an_index_not_a_sort_of_the_frontier(tmp_path, order):
    """SQLite's plan for the claim of a bfs or dfs crawl walks ix_to_visit_url_depth: no
    temporary B-tree sorting every frontier row on each claim (the scale benchmark's slowest
    stretch). A database made before the index existed gets it from init_schema."""
    from gridcrawl import migrations, models
    from gridcrawl.db import init_schema
    engine = open_database(f"sqlite:///{tmp_path}/crawl.db")
    CrawlStore(engine)
    with engine.begin() as conn:  # as revision 0001 left it: the index came with 0002
        conn.exec_driver_sql("DROP INDEX ix_to_visit_url_depth")
        migrations.stamp(conn, "crawl", "0001")
    init_schema(engine, models.crawl_metadata, models.crawl_meta)  # an older database, reopened
    stmt = CrawlStore.claim_statement(engine.dialect, 256, order)
    sql = str(stmt.compile(dialect=engine.dialect, compile_kwargs={"literal_binds": True}))
    with engine.connect() as conn:
        plan = " ".join(row[-1] for row in conn.exec_driver_sql("EXPLAIN QUERY PLAN " + sql))
    assert "ix_to_visit_url_depth" in plan and "TEMP B-TREE" not in plan, plan


def test_priority_claims_read_an_index_not_a_sort_of_the_top_priority(tmp_path):
    """SQLite's plan for a focused (priority order) crawl's claim walks an index in (priority
    DESC, id) order: the index in (priority, id) order left a temporary B-tree sorting every
    waiting row of the top priority on each claim. A database of the previous revision, with
    the old index only, is upgraded to the new one."""
    from gridcrawl import migrations, models
    from gridcrawl.db import init_schema
    engine = open_database(f"sqlite:///{tmp_path}/crawl.db")
    CrawlStore(engine)
    with engine.begin() as conn:  # as revision 0009 left it
        conn.exec_driver_sql("DROP INDEX ix_to_visit_url_priority")
        conn.exec_driver_sql("CREATE INDEX ix_to_visit_url_queue ON to_visit_url (in_flight, priority, id)")
        migrations.stamp(conn, "crawl", "0009")
    init_schema(engine, models.crawl_metadata, models.crawl_meta)
    stmt = CrawlStore.claim_statement(engine.dialect, 256, "priority")
    sql = str(stmt.compile(dialect=engine.dialect, compile_kwargs={"literal_binds": True}))
    with engine.connect() as conn:
        plan = " ".join(row[-1] for row in conn.exec_driver_sql("EXPLAIN QUERY PLAN " + sql))
        indexes = {row[1] for row in conn.exec_driver_sql("PRAGMA index_list(to_visit_url)")}
    assert "ix_to_visit_url_priority" in plan and "TEMP B-TREE" not in plan, plan
    assert "ix_to_visit_url_queue" not in indexes


def test_a_resumed_crawl_keeps_the_strategy_it_stored(tmp_path):
    """``resolve_strategy`` (every crawl's start) stores the options given in one transaction
    and a run given none takes them back from the crawl database: order, focus, threshold,
    structured data, rendering and its selector. Options refused (``--focus`` with
    ``--focus-ontology``) exit with status 2 and change nothing stored."""
    import typer
    from gridcrawl.client.cli import resolve_strategy

    store = CrawlStore(open_database(f"sqlite:///{tmp_path / 'crawl.db'}"))
    first, seeds = resolve_strategy(store, [BASE + "/"], focus="crawler politeness", min_relevance=0.25,
                                    order="dfs", structured_data=True, render=True, wait_for="#main")
    assert seeds == [BASE + "/"]
    stored = store.metas()
    assert {k: stored[k] for k in ("order", "focus", "focus_ontology", "min_relevance", "structured_data",
                                   "render", "wait_for")} == {
        "order": "dfs", "focus": "crawler politeness", "focus_ontology": "", "min_relevance": "0.25",
        "structured_data": "1", "render": "1", "wait_for": "#main"}
    resumed, _ = resolve_strategy(store, [])
    assert (resumed.order, resumed.focus.terms, resumed.min_relevance, resumed.structured_data, resumed.render,
            resumed.wait_for) == ("dfs", first.focus.terms, 0.25, True, True, "#main")
    with pytest.raises(typer.Exit) as refused:
        resolve_strategy(store, [], focus="other words", focus_ontology=str(tmp_path / "o.ttl"), render=False)
    assert refused.value.exit_code == 2
    assert store.metas() == stored
    # a plain crawl resumed with --focus becomes a priority crawl (it kept its stored bfs, unfocused in order)
    plain = CrawlStore(open_database(f"sqlite:///{tmp_path / 'plain.db'}"))
    assert resolve_strategy(plain, [BASE + "/"])[0].order == "bfs"
    focused, _ = resolve_strategy(plain, [], focus="asyncio event loop")
    assert focused.order == "priority" and plain.metas()["order"] == "priority"
    assert resolve_strategy(plain, [], focus="asyncio", order="dfs")[0].order == "dfs"  # unless --order says


@pytest.mark.parametrize("order, min_relevance, says", [
    ("bfs", None, "links are taken breadth-first, not by relevance (--focus implies --order priority when no --order "
                  "is given); without --min-relevance the focus changes nothing of what is crawled (it only records scores)"),
    ("dfs", 0.2, "links are taken depth-first, not by relevance (--focus implies --order priority when no --order is "
                 "given); the focus only leaves out links scoring below --min-relevance 0.2")])
def test_a_focus_with_order_bfs_or_dfs_is_taken_with_a_warning(tmp_path, capsys, order, min_relevance, says):
    """``--focus kettle --order bfs`` was taken silently although strategies.md says --focus
    implies --order priority: the order given wins, and a warning says what the focus still does."""
    from gridcrawl.client.cli import resolve_strategy
    store = CrawlStore(open_database(f"sqlite:///{tmp_path / 'crawl.db'}"))
    strategy, _ = resolve_strategy(store, [BASE + "/"], focus="kettle", order=order, min_relevance=min_relevance)
    assert strategy.order == order and strategy.focus is not None
    assert capsys.readouterr().err == f"warning: --order {order} with a focus: {says}\n"
    resolve_strategy(store, [BASE + "/"], focus="kettle")
    assert capsys.readouterr().err == "", "no warning without --order bfs or dfs"


@pytest.mark.parametrize("options, named", [({"min_relevance": 0.3}, "--min-relevance"),
                                            ({"order": "priority"}, "--order priority")])
def test_focus_only_options_without_a_focus_are_refused(tmp_path, capsys, options, named):
    """``--min-relevance`` and ``--order priority`` act on a focused crawl's relevance scores;
    without a focus (given or stored) every URL scores alike and they would change nothing,
    so the crawl refuses them (status 2, one line) and stores nothing. With the focus stored
    by an earlier run, a resumed crawl takes them."""
    import typer
    from gridcrawl.client.cli import resolve_strategy

    store = CrawlStore(open_database(f"sqlite:///{tmp_path / 'crawl.db'}"))
    before = store.metas()
    with pytest.raises(typer.Exit) as refused:
        resolve_strategy(store, [BASE + "/"], **options)
    assert refused.value.exit_code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {named} works on a focused crawl's relevance scores") and "--focus" in err
    assert store.metas() == before
    resolve_strategy(store, [BASE + "/"], focus="crawler politeness")
    resumed, _ = resolve_strategy(store, [], **options)
    assert resumed.focus is not None and (resumed.order, resumed.min_relevance) == (
        "priority", options.get("min_relevance", 0.0))


def test_refused_rules_change_nothing_stored_and_changed_rules_on_a_visited_crawl_warn(tmp_path, capsys, caplog):
    """A run given rules that its stored item spec cannot use (a page type they no longer give)
    is refused — and used to replace the crawl's rules first, so that even a resume without
    options was refused after it, the original rules gone. Now nothing is stored until nothing
    is refused. Rules that differ from those of a crawl with visited URLs are taken, with a
    WARNING that pages visited already are not visited again under them."""
    import datetime as dt
    import typer
    from gridcrawl import models
    from gridcrawl.client.cli import _rule_key, resolve_strategy

    header = "baseURL,ruleType,fromType,toType,pattern,id,class,tag\n"
    rules_a, rules_b, rules_c = tmp_path / "a.csv", tmp_path / "b.csv", tmp_path / "c.csv"
    rules_a.write_text(header + f"{BASE}/,follow,base,topLevel,/c/,all,all,all\n"
                                f"{BASE}/,follow,topLevel,reviews,/r/,all,all,all\n")
    rules_b.write_text(header + f"{BASE}/,follow,base,topLevel,/c/,all,all,all\n")
    rules_c.write_text(rules_a.read_text() + f"{BASE}/,keep,reviews,,.pdf,all,all,all\n")
    spec = tmp_path / "items.toml"
    spec.write_text('[[item]]\ntype = "review"\npage_type = "reviews"\n[item.fields]\ntitle = { css = "title::text" }\n')
    store = CrawlStore(open_database(f"sqlite:///{tmp_path / 'crawl.db'}"))
    resolve_strategy(store, [], rules=str(rules_a), extract=str(spec))
    rules, metas = [_rule_key(r) for r in store.stored_rules()], store.metas()
    assert len(rules) == 2
    with pytest.raises(typer.Exit) as refused:
        resolve_strategy(store, [], rules=str(rules_b))
    err = capsys.readouterr().err
    assert refused.value.exit_code == 2 and err.startswith("error: invalid item spec: the one stored in the crawl "
                                                           "database: item 1 (review): page_type 'reviews' is no "
                                                           "page type"), err
    assert [_rule_key(r) for r in store.stored_rules()] == rules and store.metas() == metas
    resumed, _ = resolve_strategy(store, [])  # the resume works, with the crawl's own rules
    assert [_rule_key(r) for r in resumed.rules] == rules
    assert not [r for r in caplog.records if r.levelname == "WARNING"]
    with store.engine.begin() as conn:
        conn.execute(models.visited_url.insert().values(url=BASE + "/", fingerprint="f" * 32, depth=0,
                                                    visited_at=dt.datetime(2026, 1, 1)))
        conn.execute(models.document.insert().values(url=BASE + "/", fingerprint="f" * 32, final_url=BASE + "/",
                                                     depth=0, page_type="base", fetched_at=dt.datetime(2026, 1, 1),
                                                     etag='"v1"', last_modified="Thu, 01 Jan 2026 00:00:00 GMT"))
    assert store.queue_due(every=True) == 1  # a recrawl stopped before its end left the page queued
    resolve_strategy(store, [], rules=str(rules_c))
    assert len(store.stored_rules()) == 3
    (warning,) = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert warning.startswith(f"the rules in {rules_c} changed since this crawl's 1 URLs were visited") \
        and warning.endswith("a recrawl visits each stored page once in full, with no conditional request, and "
                             "applies them (--recrawl as the pages come due, --recrawl-all at once)"), warning
    # a 304 Not Modified would bring no body to apply the new rules to: the next visit is a full fetch
    # (--recrawl-all said it applied them to every page, and the pages that answered 304 kept their links)
    assert store.queue_due(every=True) == 0, "queued already"
    (again,) = store.claim(5)
    assert (again.url, again.etag, again.last_modified) == (BASE + "/", None, None)


def test_new_rules_say_which_waiting_pages_no_rule_applies_to_any_more(tmp_path, caplog):
    """A crawl resumed with rules that drop a page type went on visiting the pages the old rules
    had queued as that type, following nothing from them, and only the rules' change was said:
    a WARNING now counts them by page type (a type the new rules still give, topLevel, is not
    among them)."""
    import datetime as dt
    from gridcrawl import models
    from gridcrawl.client.cli import resolve_strategy
    from gridcrawl.urls import fingerprint

    header = "baseURL,ruleType,fromType,toType,pattern,id,class,tag\n"
    old, new = tmp_path / "old.csv", tmp_path / "new.csv"
    old.write_text(header + f"{BASE}/,follow,base,topLevel,/c/,all,all,all\n"
                            f"{BASE}/,follow,topLevel,reviews,/r/,all,all,all\n")
    new.write_text(header + f"{BASE}/,follow,base,topLevel,/c/,all,all,all\n")
    store = CrawlStore(open_database(f"sqlite:///{tmp_path / 'crawl.db'}"))
    resolve_strategy(store, [], rules=str(old))
    with store.engine.begin() as conn:
        conn.execute(models.visited_url.insert().values(url=BASE + "/", fingerprint=fingerprint(BASE + "/"), depth=0,
                                                        visited_at=dt.datetime(2026, 1, 1)))
        conn.execute(models.to_visit_url.insert(), [
            {"url": url, "fingerprint": fingerprint(url), "depth": depth, "priority": 5, "in_flight": False,
             "page_type": page_type, "discovered_from": BASE + "/"}
            for url, depth, page_type in ((BASE + "/c/1", 1, "topLevel"), (BASE + "/r/1", 2, "reviews"),
                                          (BASE + "/r/2", 2, "reviews"))])
    resolve_strategy(store, [], rules=str(new))
    said = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert f"2 pages waiting in this crawl's frontier have page types the old rules gave and no rule in {new} " \
           "names (reviews: 2): they are visited, and nothing on them is followed or kept" in said, said


def test_rules_changed_on_a_resume_are_not_said_to_find_nothing_on_pages_fetched_before(tmp_path):
    """New rules given to a crawl whose seed was fetched under the old ones: the summary said the
    new base rule "found nothing ... from the 1 'base' page fetched", a page they were never
    applied to (a resumed crawl does not fetch it again). Only pages fetched since the rules
    changed count."""
    import datetime as dt
    from gridcrawl import models
    from gridcrawl.client.cli import resolve_strategy
    from gridcrawl.urls import fingerprint

    header = "baseURL,ruleType,fromType,toType,pattern,id,class,tag\n"
    old, new = tmp_path / "old.csv", tmp_path / "new.csv"
    old.write_text(header + f"{BASE}/,follow,base,topLevel,/c/,all,all,all\n")
    new.write_text(header + f"{BASE}/,follow,base,category,/k/,all,all,all\n")
    store = CrawlStore(open_database(f"sqlite:///{tmp_path / 'crawl.db'}"))
    store.strategy, _ = resolve_strategy(store, [], rules=str(old))
    with store.engine.begin() as conn:
        conn.execute(models.visited_url.insert().values(url=BASE + "/", fingerprint=fingerprint(BASE + "/"), depth=0,
                                                        page_type="base", visited_at=dt.datetime(2026, 1, 1)))
    assert [r.number for r, _n, _url in store.idle_rules()] == [1]  # the old rule found nothing on it
    store.strategy, _ = resolve_strategy(store, [], rules=str(new))
    assert store.idle_rules() == []
    with store.engine.begin() as conn:  # fetched again (a recrawl) under the new rules: it counts
        conn.execute(models.visited_url.update().values(visited_at=dt.datetime.now(dt.timezone.utc).replace(tzinfo=None)
                                                        + dt.timedelta(seconds=1)))
    assert [(r.to_type, n) for r, n, _url in store.idle_rules()] == [("category", 1)]


def test_a_link_with_credentials_is_not_followed(tmp_path):
    """A page linking ``http://user:pw@host/page`` chose a login the crawler would send (and the
    password would be stored with the URL, as a page apart from ``http://host/page``): such a
    link is not queued; the same page linked without credentials is."""
    store = CrawlStore(open_database(f"sqlite:///{tmp_path / 'c.db'}"))
    store.add_seeds([BASE + "/"])
    (seed,) = store.claim(10)
    links = [["http://user:pw@127.0.0.1:8000/cred", "with"], [BASE + "/plain", "without"]]
    store.apply([Outcome(seed, PageResult(url=seed.url, final_url=seed.url, status=200, links=links),
                         "ex", 1, False)], Scope(["127.0.0.1"]))
    assert [p.url for p in store.claim(10)] == [BASE + "/plain"]
