"""Crawl strategies end to end: the real manager, executor and client processes crawl local
sites whose right answer is known.

* Keep/follow rules: the paper's Government Consultation example (rule-based-recursive-
  crawler.txt, Table I) rebuilt as a site; the exact set of kept PDF links, and no page outside
  the rules fetched; pages fetched against a plain crawl of the same site.
* Focused crawl: a site with a topical region and a large off-topic region; the focused crawl
  reaches >= 90 % of the topical pages with fewer than half the fetches a breadth-first crawl
  needs for the same coverage (the breadth-first curve is computed over the known link graph).
* Bad strategy options are one-line errors (exit status 2) naming the rule.
"""

from __future__ import annotations

import collections
import random
import re
import subprocess
import sys

import pytest

from grid import Grid
from sites import Site

pytestmark = pytest.mark.e2e

CONSULT_CLASS = "col-xs-12 col-sm-7 col-md-8 col-lg-9"
PDF = "application/pdf"
ROBOTS = "/robots.txt"  # an executor may ask for it; it is not a page of the crawl


def html(title: str, body: str) -> bytes:
    return (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{title}</title></head>'
            f"<body><h1>{title}</h1>{body}</body></html>").encode()


def links(*pairs: tuple[str, str]) -> str:
    return "".join(f'<a href="{href}">{text}</a> ' for href, text in pairs)


# ------------------------------------------------------------------------------------ the paper's example

# "international" consultations on the search page -> the short name of their documents' paths
TOP = {"international-trade": "trade", "international-aid": "aid"}


def consultation_site() -> Site:
    """The Government of Canada Consultations site of the paper's section II, in miniature."""
    site = Site()

    def page(path: str, title: str, body: str) -> None:
        site.pages[path] = html(title, body)

    def pdf(path: str) -> None:
        site.pages[path] = b"%PDF-1.4\n% a test document\n%%EOF\n"
        site.types[path] = PDF

    page("/", "Consulting with Canadians", (
        "<header>" + links(("/consultation/international-news.html", "International news"),
                           ("/about.html", "About")) + "</header>"
        f'<div class="{CONSULT_CLASS}"><ul>'
        + "".join(f'<li><a href="/consultation/{n}.html">Consultation: {n}</a></li>' for n in TOP)
        + '<li><a href="/consultation/fisheries.html">Fisheries</a></li>'
        '<li><a href="/consultation/health.html">Health</a></li></ul></div>'
        "<footer>" + links(("/docs/search-help.pdf", "Help (PDF)")) + "</footer>"))
    pdf("/docs/search-help.pdf")
    for name, short in TOP.items():  # topLevel pages
        page(f"/consultation/{name}.html", f"Consultation {name}", (
            "<nav>" + links(("/", "Home"), ("/consultation/international-archive.html", "International archive"),
                            (f"/docs/{short}-nav-guide.pdf", "Guide")) + "</nav>"
            "<main>" + links((f"/consultation/{short}/international-details.html", "Details"),
                             (f"/consultation/{short}/faq.html", "FAQ"),
                             (f"/docs/{short}-summary.pdf", "Summary"),
                             (f"http://external.invalid/{short}-report.pdf", "OECD report")) + "</main>"))
        pdf(f"/docs/{short}-nav-guide.pdf")
        pdf(f"/docs/{short}-summary.pdf")
        page(f"/consultation/{short}/international-details.html", f"Details of {name}", (  # secondLevel
            "<main>" + links((f"/docs/{short}-annex-1.pdf", "Annex 1"), (f"/docs/{short}-annex-2.pdf", "Annex 2"),
                             (f"/consultation/{short}/international-more.html", "More")) + "</main>"
            "<aside>" + links(("/docs/shared-glossary.pdf", "Glossary")) + "</aside>"))
        pdf(f"/docs/{short}-annex-1.pdf")
        pdf(f"/docs/{short}-annex-2.pdf")
        page(f"/consultation/{short}/faq.html", "FAQ", links(("/docs/faq.pdf", "FAQ (PDF)")))
        page(f"/consultation/{short}/international-more.html", "More", links(("/docs/more.pdf", "More (PDF)")))
    pdf("/docs/shared-glossary.pdf")
    pdf("/docs/faq.pdf")
    pdf("/docs/more.pdf")
    page("/consultation/international-news.html", "News", links(("/docs/news.pdf", "News (PDF)")))
    pdf("/docs/news.pdf")
    page("/consultation/international-archive.html", "Archive", links(("/docs/archive.pdf", "Archive")))
    pdf("/docs/archive.pdf")
    page("/about.html", "About", "")
    page("/consultation/fisheries.html", "Fisheries", links(
        ("/consultation/fisheries/international-quota.html", "International quota"), ("/docs/fisheries.pdf", "PDF")))
    page("/consultation/fisheries/international-quota.html", "Quota", links(("/docs/quota.pdf", "PDF")))
    pdf("/docs/fisheries.pdf")
    pdf("/docs/quota.pdf")
    page("/consultation/health.html", "Health", links(("/docs/health.pdf", "PDF")))
    pdf("/docs/health.pdf")
    return site


def fetched(server) -> dict[str, int]:
    """Requests per page path (robots.txt and the /sitemap.xml a plain crawl asks for left out)."""
    return {path: n for path, n in server.per_path_counts().items() if path not in (ROBOTS, "/sitemap.xml")}


def test_consultation_rules_keep_exactly_the_international_pdfs(tmp_path, site_server):
    site = consultation_site()
    server = site_server(site)
    base = server.url("/")
    rules = tmp_path / "consultation.csv"
    rules.write_text("baseURL,ruleType,fromType,toType,pattern,id,class,tag\n"   # Table I, our base URL
                     f"{base},follow,base,topLevel,international,all,{CONSULT_CLASS},all\n"
                     f"{base},keep,topLevel,,.pdf,all,all,all\n"
                     f"{base},follow,topLevel,secondLevel,international,all,all,main\n"
                     f"{base},keep,secondLevel,,.pdf,all,all,all\n")
    grid = Grid(tmp_path)
    try:
        grid.start_manager()
        grid.start_executor("ex1", "--threads", "4")
        client = grid.start_client("--rules", str(rules))  # no seeds: the rules' base URL is the seed
        assert client.wait(timeout=60) == 0, grid.log("client.log")
        rules_fetched = fetched(server)
        server.reset()
        plain_db = f"sqlite:///{tmp_path / 'plain.db'}"
        plain = grid.start_client(base, "--db", plain_db)
        assert plain.wait(timeout=60) == 0, grid.log("client.log")
        plain_fetched = fetched(server)
    finally:
        grid.stop()

    pages = {"/": "base", **{f"/consultation/{n}.html": "topLevel" for n in TOP},
             **{f"/consultation/{s}/international-details.html": "secondLevel" for s in TOP.values()}}
    assert rules_fetched == {path: 1 for path in pages}, "a page outside the rules was fetched (or one twice)"
    docs = grid.query("crawl", "SELECT url, page_type FROM document")
    assert sorted(docs) == sorted((server.url(path), kind) for path, kind in pages.items())

    expected = {}
    for name, short in TOP.items():
        for url in (server.url(f"/docs/{short}-nav-guide.pdf"), server.url(f"/docs/{short}-summary.pdf"),
                    f"http://external.invalid/{short}-report.pdf"):
            expected[url] = (2, "topLevel", server.url(f"/consultation/{name}.html"))
        for k in (1, 2):
            expected[server.url(f"/docs/{short}-annex-{k}.pdf")] = (
                4, "secondLevel", server.url(f"/consultation/{short}/international-details.html"))
    kept = grid.query("crawl", "SELECT url, rule, source_page_type, source_url FROM kept_link")
    assert len(kept) == len(expected) + 1, kept
    summary = " ".join(grid.log("client.log").split())  # the crawl's main output, counted in its summary
    assert f"links kept │ {len(kept)} (the keep rules' matches: table kept_link)" in summary, summary[-3000:]
    glossary = [row for row in kept if row[0] == server.url("/docs/shared-glossary.pdf")]
    assert [(rule, kind) for _, rule, kind, _ in glossary] == [(4, "secondLevel")]
    assert {url: (rule, kind, source) for url, rule, kind, source in kept if url not in {g[0] for g in glossary}} == expected
    assert grid.query("crawl", "SELECT COUNT(*) FROM to_visit_url") == [(0,)]
    assert grid.query("crawl", "SELECT COUNT(*) FROM crawl_rule") == [(4,)]
    assert "found nothing" not in summary, "every rule found something: no rule is said to be idle"

    assert set(plain_fetched) == set(site.pages), "the plain crawl fetches every page and local PDF"
    print(f"\nconsultation example: rules crawl fetched {sum(rules_fetched.values())} pages and kept "
          f"{len(kept)} PDF links; a plain crawl fetched {sum(plain_fetched.values())} "
          f"({len([p for p in site.pages if p.endswith('.html') or p == '/'])} HTML pages + "
          f"{len([p for p in site.pages if p.endswith('.pdf')])} PDFs)")


def test_rules_that_find_nothing_are_named_after_the_crawl(tmp_path, site_server):
    """A follow rule shadowed by an earlier one (same links, another type) and a keep rule whose
    pattern matches no link: the crawl ends at the pages it can reach, and says which rules found
    nothing, on how many pages of which type, and the command that shows what they match."""
    server = site_server(consultation_site())
    base = server.url("/")
    rules = tmp_path / "shadowed.csv"
    rules.write_text("baseURL,ruleType,fromType,toType,pattern,id,class,tag\n"
                     f"{base},follow,base,topLevel,international,all,{CONSULT_CLASS},all\n"
                     f"{base},follow,base,trade,international-trade,all,all,all\n"  # rule 1 took them
                     f"{base},keep,topLevel,,\\.docx$,all,all,all\n"                # no such link
                     f"{base},keep,topLevel,,\\.pdf$,all,all,main\n"
                     f"{base},keep,trade,,\\.pdf$,all,all,all\n")
    grid = Grid(tmp_path)
    try:
        grid.start_manager()
        grid.start_executor("ex1", "--threads", "2")
        client = grid.start_client("--rules", str(rules))
        assert client.wait(timeout=60) == 0, grid.log("client.log")
    finally:
        grid.stop()
    said = " ".join(grid.log("client.log").split())
    assert grid.query("crawl", "SELECT COUNT(*) FROM visited_url") == [(3,)]  # base and the 2 topLevel
    assert (f"rule 2 (shadowed.csv row 3: follow base -> trade) found nothing: no URL got the page type 'trade' "
            f"from the 1 'base' page fetched (its pattern or id/class/tag matches no new link there, an earlier "
            f"follow rule gave those links another type, or the crawl left them out: another host); what the rules match on one: gridcrawl fetch {base} "
            f"--rules {rules} --page-type base") in said, said[-3000:]
    assert "rule 3 (shadowed.csv row 4: keep topLevel) found nothing: it kept no link from the 2 'topLevel' pages" in said
    assert "rule 4 (" not in said and "rule 5 (" not in said and "rule 1 (" not in said, said[-3000:]


# ------------------------------------------------------------------------------------ focused crawl

OFF_TOPIC = {"food": "Recipe", "sport": "Match report", "news": "City news"}
OFF_BRANCHING, OFF_LEVELS = 5, 3            # 5 + 25 + 125 pages under each off-topic hub
TOPIC_BRANCHING, TOPIC_LEVELS = 3, 3        # 3 + 9 + 27 pages under the research hub


def tree(branching: int, levels: int) -> dict[int, list[int]]:
    """Children of each node of a complete tree (node 0 is the hub), numbered breadth-first."""
    kids, next_id, frontier = {0: []}, 1, [0]
    for _ in range(levels):
        new = []
        for node in frontier:
            for _ in range(branching):
                kids[node].append(next_id)
                kids[next_id] = []
                new.append(next_id)
                next_id += 1
        frontier = new
    return kids


def focus_site() -> tuple[Site, set[str]]:
    """A portal with a topical region (/research/, about crawler politeness) and a large
    off-topic region (food, sport, news); returns the site and the topical paths."""
    site = Site()

    words = random.Random(5)

    def page(path: str, title: str, text: str, out: list[tuple[str, str]]) -> None:
        # a few made-up words of its own, as real pages have: pages differing only in numbers
        # would be a template trap (gridcrawl.client.traps)
        own = " ".join("".join(words.choice("bcdfghklmnprstvz") + words.choice("aeiou") for _ in range(3))
                       for _ in range(6))
        site.pages[path] = html(title, f"<p>{text}</p><p>{own}</p><ul>" + "".join(
            f'<li><a href="{href}">{anchor}</a></li>' for href, anchor in out) + "</ul>")
        site.links[path] = list(dict.fromkeys(href for href, _ in out))

    off_kids = tree(OFF_BRANCHING, OFF_LEVELS)
    off_path = lambda region, n: f"/{region}/index.html" if n == 0 else f"/{region}/{n}.html"
    for region, noun in OFF_TOPIC.items():
        for n, kids in off_kids.items():
            out = [(off_path(region, k), f"{noun} {k}") for k in kids]
            if region == "news" and n == 0:  # two topical pages only the news knows about
                out += [("/research/press.html", "Crawler politeness in the press"),
                        ("/research/press-2.html", "More on crawler politeness")]
            page(off_path(region, n), f"{noun} {n}", f"Everything about {region}, part {n}.", out)
    topical = {"/research/press.html", "/research/press-2.html"}
    for path in topical:
        page(path, "Crawler politeness in the press", "Web crawler politeness, reported.", [])
    topic_kids = tree(TOPIC_BRANCHING, TOPIC_LEVELS)

    def topic_path(n: int) -> str:
        if n == 0:
            return "/research/index.html"
        # some pages are linked by an anchor without keywords, but their URL names the topic
        return f"/research/crawler-politeness-appendix-{n}.html" if n % 4 == 0 else f"/research/{n}.html"

    for n, kids in topic_kids.items():
        out = [(topic_path(k), f"Appendix {k}" if k % 4 == 0 else f"Crawler politeness, part {k}") for k in kids]
        out += [(off_path("food", 1 + n % 5), "Lunch break"), (off_path("sport", 1 + n % 5), "Results")]
        page(topic_path(n), f"Crawler politeness study {n}",
             "How a web crawler keeps its politeness: crawl delay, robots.txt, one host at a time.", out)
        topical.add(topic_path(n))
    page("/", "City portal", "Welcome to the city portal.", [
        ("/food/index.html", "Cooking"), ("/sport/index.html", "Sports"),
        ("/research/index.html", "Crawler research"), ("/news/index.html", "News")])
    return site, topical


def bfs_fetches_for(site: Site, topical: set[str], coverage: float) -> int:
    """Pages a breadth-first crawl from / fetches before it holds ``coverage`` of the topical pages."""
    seen, queue, fetched_pages, found = {"/"}, collections.deque(["/"]), 0, 0
    while queue:
        path = queue.popleft()
        fetched_pages += 1
        found += path in topical
        if found / len(topical) >= coverage:
            return fetched_pages
        for target in site.links.get(path, ()):
            if target not in seen:
                seen.add(target)
                queue.append(target)
    raise AssertionError(f"breadth-first never reaches {coverage:.0%} of the topical pages")


def test_focused_crawl_reaches_the_topic_with_far_fewer_fetches(tmp_path, site_server):
    site, topical = focus_site()
    server = site_server(site)
    grid = Grid(tmp_path)
    try:
        grid.start_manager()
        grid.start_executor("ex1", "--threads", "4")
        client = grid.start_client(server.url("/"), "--focus", "crawler politeness", "--min-relevance", "0.3")
        assert client.wait(timeout=60) == 0, grid.log("client.log")
    finally:
        grid.stop()
    got = fetched(server)
    found = {path for path in got if path in topical}
    coverage = len(found) / len(topical)
    bfs_needed = bfs_fetches_for(site, topical, coverage)
    print(f"\nfocused crawl: {len(found)}/{len(topical)} topical pages ({coverage:.0%}) with "
          f"{sum(got.values())} fetches; breadth-first needs {bfs_needed} fetches for the same coverage "
          f"(site: {len(site.pages)} pages)")
    idle = [line for line in grid.log("ex1.log").splitlines() if "worker idle between pages" in line]
    assert len(idle) == 1, "the executor logs its workers' idle time at shutdown"
    print("executor:", idle[0].split(": ", 1)[-1])
    assert coverage >= 0.9, sorted(set(topical) - found)
    assert sum(got.values()) < bfs_needed / 2
    assert set(got.values()) == {1}
    # the score is stored with each document; a page on the topic scores 1 (all keywords)
    rows = grid.query("crawl", "SELECT url, relevance FROM document")
    assert len(rows) == len(got) and all(r is not None for _, r in rows)
    assert all(r == 1.0 for url, r in rows if url.startswith(server.url("/research/")))
    assert grid.query("crawl", "SELECT value FROM crawl_meta WHERE name = 'order'") == [("priority",)]
    # relevance orders the crawl's own claims, not the grid: every thread reached the manager at
    # the default priority (sent as its priority, up to 1000, it went before every other user's 5)
    assert grid.query("manager", "SELECT DISTINCT priority FROM thread") == [(5,)]
    # the summary says how many links the threshold left out, and the best score among them
    shown = re.search(r"(\d+) links scoring below --min-relevance 0.3, the best of them (\d\.\d\d)",
                      " ".join(grid.log("client.log").replace("│", " ").split()))
    assert shown and int(shown.group(1)) > 0 and float(shown.group(2)) < 0.3, grid.log("client.log")[-2000:]


def test_a_crawl_resumed_with_another_focus_rescores_its_frontier(tmp_path, site_server):
    """A crawl resumed with another --focus took its waiting links in the order of the old
    focus's scores, without a word: resumed with --focus kettle, it visited the soup pages the
    first run had queued first. The waiting links are scored again by the new focus, and a
    WARNING says so."""
    site = Site()
    site.pages["/"] = html("Home", links(*[(f"/soup/{i}.html", f"Soup {i}") for i in range(3)],
                                         *[(f"/kettle/{i}.html", f"more {i}") for i in range(3)]))
    for kind in ("soup", "kettle"):
        for i in range(3):
            site.pages[f"/{kind}/{i}.html"] = html(f"{kind} {i}", "nothing to follow")
    server = site_server(site)
    workdir = str(tmp_path / "w")
    base = ("gridcrawl", "run", "--workdir", workdir, "--executors", "1", "--threads", "1", "--max-in-flight", "1")
    rc, err = run(*base, server.url("/"), "--focus", "soup", "--max-pages", "1")
    assert rc == 0, err
    rc, err = run(*base, "--focus", "kettle", "--max-pages", "3")
    assert rc == 0, err
    got = [path for path in (r.path for r in server.requests) if path != ROBOTS]
    assert got[0] == "/" and len(got) == 3 and all(path.startswith("/kettle/") for path in got[1:]), got
    said = " ".join(err.split())
    assert "the focus changed since this crawl visited 1 URL (it was 'soup'); 6 links waiting were scored again " \
           "by the new one" in said, err


# ------------------------------------------------------------------------------------ user errors


def run(*args: str) -> tuple[int, str]:
    proc = subprocess.run([sys.executable, "-m", *args], capture_output=True, text=True, timeout=60)
    return proc.returncode, proc.stderr


def test_bad_strategy_options_are_one_line_errors(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("base_url,rule_type,from_type,to_type\n"
                   "http://127.0.0.1:9/,follow,base,list\n"
                   "http://127.0.0.1:9/,follow,list,\n")
    db = f"sqlite:///{tmp_path / 'c.db'}"
    rc, err = run("gridcrawl.client", "--manager", "tcp://127.0.0.1:9", "--db", db, "--rules", str(bad))
    assert rc == 2 and err.strip().splitlines() == [
        "error: invalid rules: rule 2 (bad.csv row 3: follow list): a follow rule needs a to_type "
        "(the page type of the links it queues)"]
    rc, err = run("gridcrawl", "run", "--rules", str(bad), "--workdir", str(tmp_path / "w"))
    assert rc == 2 and "rule 2 (bad.csv row 3" in err and "Traceback" not in err
    rc, err = run("gridcrawl.client", "--manager", "tcp://127.0.0.1:9", "--db", db, "http://127.0.0.1:9/",
                  "--order", "sideways")
    assert rc == 2 and "--order must be one of bfs, dfs, priority" in err
    rc, err = run("gridcrawl.client", "--manager", "tcp://127.0.0.1:9", "--db", db, "http://127.0.0.1:9/",
                  "--focus", "crawler", "--min-relevance", "2")
    assert rc == 2 and "--min-relevance must be between 0 and 1" in err


def test_host_hash_dispatch_keeps_each_host_on_one_executor_and_survives_a_kill(tmp_path):
    """ParaCA's host partitioning with real processes: 30 hosts (30 loopback addresses, one small
    site each), 3 executors, ``--dispatch host-hash``. Every host's pages run on one executor; when
    one executor is killed, only its hosts move, and the crawl completes."""
    from sites import SiteServer, generate_site
    from grid import Grid, wait_for

    servers, grid = [], None
    try:
        for i in range(30):
            servers.append(SiteServer(generate_site(6, links_per_page=2, seed=i), latency=0.05,
                                      host=f"127.0.0.{i + 2}").start())
        grid = Grid(tmp_path)
        # the killed executor's attempts keep their hosts' slots until their fetches could have
        # ended (docs/politeness.md, "Attempts taken back"): at most thread_timeout, 10 s here
        grid.start_manager("--dispatch", "host-hash", "--thread-timeout", "10")
        execs = {name: grid.start_executor(name, "--threads", "2") for name in ("e1", "e2", "e3")}
        wait_for(lambda: grid.log("manager.log").count("registered:") >= 3, 30, message="3 executors")
        client = grid.start_client(*[s.url("/") for s in servers])

        def finished_by_host() -> dict[str, set[str]]:
            rows = grid.query("manager", "SELECT t.host, e.name FROM attempt a "
                                         "JOIN thread t ON t.internal_thread_id = a.internal_thread_id "
                                         "JOIN executor e ON e.executor_id = a.executor_id "
                                         "WHERE a.outcome = 'finished'")
            out: dict[str, set[str]] = {}
            for host, name in rows:
                out.setdefault(host, set()).add(name)
            return out

        wait_for(lambda: sum(len(v) for v in finished_by_host().values()) >= 20, 60, message="20 pages")
        before = finished_by_host()
        assert all(len(names) == 1 for names in before.values()), before
        victim = max(("e1", "e2", "e3"), key=lambda n: sum(n in v for v in before.values()))
        execs[victim].kill()
        for s in servers:  # the kill came mid-crawl: the rest of the crawl need not be slow
            s.latency = 0.01
        assert client.wait(timeout=120) == 0, grid.log("client.log")
        grid.stop()
        after = finished_by_host()
        assert len(after) == 30
        moved = {h for h, names in after.items() if victim in names and len(names) > 1}
        assert moved, f"no host of {victim} had pages left when it was killed: the kill came too late"
        for host, names in after.items():
            assert len(names - {victim}) <= 1, (host, names)  # one survivor per host
        stayed = {h for h, names in after.items() if victim not in names}
        assert all(len(after[h]) == 1 for h in stayed)
        expected = sum(len(s.site.pages) for s in servers)
        docs = grid.query("crawl", "SELECT COUNT(*), COUNT(DISTINCT fingerprint) FROM document")[0]
        assert docs[0] == docs[1] == expected
        print(f"\n[host-hash] hosts=30, victim={victim}, hosts moved={len(moved)}, documents={docs[0]}")
    finally:
        if grid is not None:  # a failed assertion left the manager and two executors running
            grid.stop()
        for s in servers:
            s.stop()
