"""The focused crawl's relevance score (gridcrawl/focus.py) computed by hand from its documented
formula, and the client store using it (SQLite): links below --min-relevance are not queued,
the frontier is claimed by relevance, scores are stored with documents and links."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from gridcrawl.client.store import CrawlStore, Outcome, Scope, Strategy
from gridcrawl.db import open_database
from gridcrawl.focus import Focus, page_text, priority, tokens

BASE = "http://127.0.0.1:8000/"
FOCUS = Focus(("crawler", "politeness"))  # delta 0.5, beta 0.8, gamma 0.5


def test_similarity_is_the_share_of_keywords_matched_by_prefix():
    assert tokens("Web-Crawler, crawl_delay 2!") == {"web", "crawler", "crawl", "delay", "2"}
    assert FOCUS.sim("A CRAWLER design") == 0.5
    assert FOCUS.sim("crawlers and their politeness") == 1.0      # "crawler" begins "crawlers"
    assert FOCUS.sim("crawl politely") == 0.0                      # neither keyword begins a token
    assert FOCUS.sim("") == 0.0
    assert FOCUS.url_sim("http://127.0.0.1:8000/politeness/crawler%2Dtraps.html") == 1.0
    assert Focus.parse("  Crawler, POLITENESS crawler ").terms == ("crawler", "politeness")
    # a keyword of one or two characters only matches itself: the "e" of "e-commerce" began most
    # words ("electric egg cooker" scored 1/3 for "e-commerce kettle", "Cats and dogs" 1/2 for "C++")
    shop = Focus.parse("e-commerce kettle")
    assert shop.terms == ("e", "commerce", "kettle")
    assert shop.sim("electric egg cooker") == 0.0 and shop.sim("E-commerce kettles") == 1.0
    assert Focus.parse("C++ programming").sim("Cats and dogs") == 0.0
    assert Focus.parse("go routines").sim("good routines") == 0.5  # "go" no longer matches "good"


def test_link_score_follows_the_documented_formula():
    # anchor matches one keyword of two: anchor 0.5, context 1, neighbourhood .8*.5 + .2*1 = .6
    # parent page score .8: inherited .5*.8 = .4; r = .5*.4 + .5*.6 = .5
    assert FOCUS.link_score("Crawler design", BASE + "x.html", 0.8) == pytest.approx(0.5)
    # no keyword in the anchor: context is the URL's similarity (1 here): neighbourhood .2
    assert FOCUS.link_score("next", BASE + "politeness/crawler-9.html", 1.0) == pytest.approx(.25 + .1)
    # nothing: only the inherited part is left
    assert FOCUS.link_score("recipes", BASE + "food/soup.html", 0.4) == pytest.approx(0.1)
    assert FOCUS.link_score("recipes", BASE + "food/soup.html", 0.0) == 0.0
    weighted = Focus(("crawler",), delta=1.0, beta=1.0, gamma=0.0)
    assert weighted.link_score("crawler", BASE, 0.0) == 1.0


def test_page_score_is_own_similarity_else_decayed_queue_score():
    assert FOCUS.page_score("Politeness", "of a crawler", 0.1) == 1.0
    assert FOCUS.page_score("Soup", "recipes", 0.6) == pytest.approx(0.3)
    assert page_text("<html><script>crawler()</script><p>poli<b>teness</b></p></html>").split() == ["poli", "teness"]
    assert page_text(None) == ""


def test_priority_and_invalid_focus():
    assert [priority(x) for x in (0.0, 0.4994, 0.5, 1.0, 1.5, -1)] == [0, 499, 500, 1000, 1000, 0]
    with pytest.raises(ValueError, match="at least one keyword"):
        Focus.parse(" ,; ")
    with pytest.raises(ValueError, match="delta must be between 0 and 1"):
        Focus(("a",), delta=1.5)
    with pytest.raises(ValueError, match="--min-relevance must be between 0 and 1"):
        Strategy(focus=FOCUS, min_relevance=1.5)
    with pytest.raises(ValueError, match="--order must be one of bfs, dfs, priority"):
        Strategy(order="random")


def page(url: str, title: str, text: str, links: list[list[str]]):
    from gridcrawl.protocol import PageResult
    return PageResult(url=url, final_url=url, status=200, content_type="text/html", title=title,
                      content=f"<html><body><p>{text}</p></body></html>", links=links)


def test_store_queues_by_relevance_and_drops_links_below_the_threshold(tmp_path):
    store = CrawlStore(open_database(f"sqlite:///{tmp_path / 'crawl.db'}"),
                       Strategy(order="priority", focus=FOCUS, min_relevance=0.3))
    store.add_seeds([BASE])
    (seed,) = store.claim(5)
    assert (seed.relevance, seed.priority) == (1.0, 1000)
    home = page(BASE, "Home", "welcome", [
        [BASE + "soup.html", "Soup"],                          # r = .5*.5*.5 = .125 -> dropped
        [BASE + "politeness.html", "Politeness rules"],        # .125 + .5*(.8*.5 + .2) = .425
        [BASE + "both.html", "crawler politeness"],            # .125 + .5 = .625
        [BASE + "crawler-faq.html", "faq"],                    # .125 + .5*(.2*.5) = .175 -> dropped
    ])
    store.apply([Outcome(seed, home, "ex", 1, False)], Scope(["127.0.0.1"]))
    claimed = store.claim(5)
    assert [(p.url, round(p.relevance, 3), p.priority) for p in claimed] == [
        (BASE + "both.html", 0.625, 625), (BASE + "politeness.html", 0.425, 425)]
    with store.engine.connect() as conn:
        assert conn.execute(sa.text("SELECT relevance FROM document")).scalar() == pytest.approx(0.5)  # .5 * 1.0
        assert conn.execute(sa.text("SELECT COUNT(*) FROM to_visit_url")).scalar() == 2


def test_a_crawl_resumed_with_a_higher_min_relevance_leaves_out_the_waiting_links_below_it(tmp_path, caplog):
    """--min-relevance raised on a resumed crawl applied only to links found from then on: the
    links already waiting below it were visited all the same. They are left out, counted among
    the links not queued, with a WARNING; the seeds stay."""
    from gridcrawl.client.cli import resolve_strategy
    store = CrawlStore(open_database(f"sqlite:///{tmp_path / 'crawl.db'}"))
    store.strategy, seeds = resolve_strategy(store, [BASE], focus="crawler politeness")
    store.add_seeds(seeds)
    (seed,) = store.claim(5)
    home = page(BASE, "Home", "welcome", [[BASE + "soup.html", "Soup"],                  # .125
                                          [BASE + "politeness.html", "Politeness rules"],  # .425
                                          [BASE + "both.html", "crawler politeness"]])     # .625
    store.apply([Outcome(seed, home, "ex", 1, False)], Scope(["127.0.0.1"]))
    store.add_seeds([BASE + "start.html"])  # a seed (no discovered_from): never left out
    resumed = CrawlStore(store.engine)
    resumed.strategy, _ = resolve_strategy(resumed, [], min_relevance=0.3)
    with store.engine.connect() as conn:
        waiting = set(conn.execute(sa.text("SELECT url FROM to_visit_url")).scalars())
    assert waiting == {BASE + "politeness.html", BASE + "both.html", BASE + "start.html"}
    assert (len(resumed.below_relevance), resumed.best_below) == (1, 0.125)
    assert ("--min-relevance 0.3 is higher than this crawl's 0: 1 link waiting in its frontier, scoring below it, "
            "is left out") in caplog.text
    caplog.clear()
    resolve_strategy(CrawlStore(store.engine), [], min_relevance=0.3)  # the same threshold: nothing to say
    assert "--min-relevance" not in caplog.text


def test_a_plain_crawl_resumed_with_a_focus_scores_its_waiting_seeds_and_links(tmp_path):
    """A plain crawl resumed with --focus kept its waiting URLs at the plain priority 5, below
    every link the focus scored over 0.005: its waiting seeds are scored as a focused crawl's
    seeds (1, priority 1000) and its links by the new focus."""
    from gridcrawl.client.cli import resolve_strategy
    store = CrawlStore(open_database(f"sqlite:///{tmp_path / 'crawl.db'}"))
    store.strategy, seeds = resolve_strategy(store, [BASE, BASE + "second.html"])
    store.add_seeds(seeds)
    first = next(p for p in store.claim(1))
    home = page(first.url, "Crawler politeness", "", [[BASE + "politeness-faq.html", "faq"], [BASE + "soup.html", "x"]])
    store.apply([Outcome(first, home, "ex", 1, False)], Scope(["127.0.0.1"]))
    resumed = CrawlStore(store.engine)
    resumed.strategy, _ = resolve_strategy(resumed, [], focus="crawler politeness")
    with store.engine.connect() as conn:
        rows = {url: (prio, rel) for url, prio, rel in conn.execute(
            sa.text("SELECT url, priority, relevance FROM to_visit_url"))}
    # links: .5 * .5 * R(home) (1: both keywords) + .5 * .2 * sim(URL)
    assert rows == {BASE + "second.html": (1000, 1.0), BASE + "politeness-faq.html": (300, pytest.approx(0.3)),
                    BASE + "soup.html": (250, 0.25)}, rows


@pytest.mark.parametrize("max_pages_per_host", [0, 100_000])  # no cap; the default cap
def test_a_link_found_again_from_a_better_page_gets_the_better_score(tmp_path, max_pages_per_host):
    scope = Scope(["127.0.0.1"], max_pages_per_host=max_pages_per_host)
    store = CrawlStore(open_database(f"sqlite:///{tmp_path / 'crawl.db'}"),
                       Strategy(order="priority", focus=FOCUS))
    store.add_seeds([BASE, BASE + "topic.html"])
    home, topic = store.claim(5)
    target = BASE + "target.html"
    store.apply([Outcome(home, page(BASE, "Home", "welcome", [[target, "more"]]), "ex", 1, False)], scope)
    with store.engine.connect() as conn:
        low = conn.execute(sa.text("SELECT relevance FROM to_visit_url WHERE url = :u"), {"u": target}).scalar()
    store.apply([Outcome(topic, page(topic.url, "Crawler politeness", "", [[target, "more"]]), "ex", 1, False)],
                scope)
    (again,) = store.claim(5)
    assert low == pytest.approx(0.125) and again.relevance == pytest.approx(0.25) and again.priority == 250


def test_summary_shows_the_best_score_left_out_rounded_down(capsys, monkeypatch):
    """The summary's best score among the links below --min-relevance is rounded down, so that
    a --min-relevance of the number shown follows it: 0.2999 below 0.3 showed as 0.30, which
    would still leave it out."""
    from gridcrawl.client.progress import ProgressView
    monkeypatch.setenv("COLUMNS", "200")
    counts = {"pages": 1, "documents": 1, "visited": 1, "errors": 0, "to_visit": 0, "seconds": 1.0,
              "pages_per_second": 1.0, "below_relevance": 3, "min_relevance": 0.3}
    for best, shown in ((0.2999, "0.29"), (0.125, "0.12"), (0.29, "0.29"), (0.0, "0.00")):
        ProgressView(enabled=False).summary({**counts, "best_below": best})
        said = " ".join(capsys.readouterr().err.split())
        assert f"3 links scoring below --min-relevance 0.3, the best of them {shown} " in said, said


def test_a_focused_recrawl_visits_its_due_pages_before_the_frontier(tmp_path):
    """A recrawl of a focused crawl queues its due documents before the frontier's links, as
    --retry-failed queues its URLs (at the seeds' priority): at priority 5, below every link
    scoring over 0.005, a recrawl of a crawl stopped at --max-pages with links left visited those
    links (and the links they brought) and none of its due pages, run after run."""
    scope = Scope(["127.0.0.1"])
    store = CrawlStore(open_database(f"sqlite:///{tmp_path / 'crawl.db'}"),
                       Strategy(order="priority", focus=FOCUS))
    store.add_seeds([BASE])
    (seed,) = store.claim(5)
    store.apply([Outcome(seed, page(BASE, "Crawler politeness", "", [[BASE + "left.html", "crawler politeness"]]),
                         "ex", 1, False)], scope)  # the crawl stops here (--max-pages 1): one link left
    assert store.queue_due(every=True) == 1
    (first,) = store.claim(1)
    assert (first.url, first.priority) == (BASE, 1000)


def test_summary_counts_of_one_take_the_singular(capsys, monkeypatch):
    """The summary said "1 links scoring below --min-relevance 0.3" (and "1 links of pages at
    --max-depth", "1 links of hosts at the per-host cap of 1 URLs"): a count of one takes the
    singular now."""
    from gridcrawl.client.progress import ProgressView
    monkeypatch.setenv("COLUMNS", "250")
    counts = {"pages": 1, "documents": 1, "visited": 1, "errors": 0, "to_visit": 0, "seconds": 1.0,
              "pages_per_second": 1.0, "below_relevance": 1, "min_relevance": 0.3, "best_below": 0.2,
              "beyond_depth": 1, "max_depth": 1, "capped": {"a.test": 1}, "max_pages_per_host": 1}
    ProgressView(enabled=False).summary(counts)
    said = " ".join(capsys.readouterr().err.replace("│", " ").split())
    for shown in ("1 link scoring below --min-relevance 0.3,", "1 link of pages at --max-depth 1",
                  "1 link of hosts at the per-host cap of 1 URL ("):
        assert shown in said, (shown, said)
