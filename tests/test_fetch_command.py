"""``gridcrawl fetch URL``: one page fetched and parsed as an executor would, run as the real
command against real sites on 127.0.0.1 (and, through a real forward proxy, a site whose name
only the proxy resolves, behind a login)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

from grid import run_at_once
from proxy import ForwardProxy
from sites import Site, SiteServer, generate_site, login_page, redirect


def _fetch(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gridcrawl", "fetch", *args], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "COLUMNS": "200"})


def _started(*args: str) -> subprocess.Popen:
    """``gridcrawl ARGS`` started, its output captured: :func:`_ended` gives its outcome. A
    ``gridcrawl run`` mostly waits (on its manager, executors and client), so a test starts it
    beside its fetches rather than after them."""
    return subprocess.Popen([sys.executable, "-m", "gridcrawl", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "COLUMNS": "200"})


def _ended(proc: subprocess.Popen, timeout: float = 180) -> subprocess.CompletedProcess:
    """The outcome of a program :func:`_started` gave, once it ended (killed past ``timeout``
    seconds, then ``subprocess.TimeoutExpired`` is raised)."""
    return run_at_once(proc, timeout=timeout)[0]


def test_fetch_shows_the_page_and_which_links_a_crawl_would_follow():
    site = generate_site(6, links_per_page=4, seed=11)
    with SiteServer(site) as server:
        done = _fetch(server.url("/"), "--json")
        assert done.returncode == 0, done.stderr
        found = json.loads(done.stdout)
        assert found["page"]["status"] == 200 and found["page"]["title"] and found["route"] == "directly"
        assert found["scope"] == ["127.0.0.1"]
        assert {url for url, _ in found["followed"]} == {server.url(path) for path in site.links["/"]}
        assert found["outside"] and all("external.invalid" in url for url, _ in found["outside"])
        assert [r.path for r in server.requests] == ["/robots.txt", "/"]  # robots.txt first, as an executor

        table = _fetch(server.url("/"), "--links", "1")
        assert table.returncode == 0, table.stderr
        assert f"followed (1 of {len(site.links['/'])}, --links lists more):" in table.stdout and "status" in table.stdout


def test_fetch_shows_a_crawl_delay_past_max_crawl_delay_with_the_delay_a_crawl_keeps():
    """``Crawl-delay: 1e9`` showed as "1e+09 s (robots.txt)", as if a crawl waited 31 years
    between two pages; it waits max_crawl_delay (30 s)."""
    site = generate_site(1, links_per_page=0, seed=3)
    site.pages["/robots.txt"] = b"User-agent: *\nCrawl-delay: 1e9\n"
    site.types["/robots.txt"] = "text/plain"
    with SiteServer(site) as server:
        done = _fetch(server.url("/"))
    assert done.returncode == 0, done.stderr
    shown = " ".join(done.stdout.replace("│", " ").split())
    assert ("crawl delay 1e+09 s (robots.txt; a crawl waits 30 s between its requests, max_crawl_delay)"
            in shown), done.stdout


def test_a_page_of_many_links_gives_max_links_per_page_and_a_crawl_queues_no_more(tmp_path):
    """A hostile page of 12,000 distinct links: an executor reports the first 10,000
    (max_links_per_page, its default), or what the option says, and a crawl's frontier gets
    no more from it (before: all of them, and a page of 455,000 links cost an executor 400 MB)."""
    anchors = "".join(f'<a href="/x{i}">.</a>' for i in range(12_000))
    site = Site(pages={"/": f"<html><body>{anchors}</body></html>".encode()})
    with SiteServer(site) as server:
        running = _started("run", server.url("/"), "--max-pages", "1", "--executors", "1", "--no-sitemaps",
                           "--no-progress", "--workdir", str(tmp_path))
        try:
            default = _fetch(server.url("/"), "--json")
            fewer = _fetch(server.url("/"), "--json", "--max-links-per-page", "300")
        finally:
            crawl = _ended(running)
    assert default.returncode == 0 and fewer.returncode == 0, default.stderr + fewer.stderr
    followed = [url for url, _ in json.loads(default.stdout)["followed"]]
    assert followed == [server.url(f"/x{i}") for i in range(10_000)]
    assert len(json.loads(fewer.stdout)["followed"]) == 300
    assert crawl.returncode == 0, crawl.stderr[-2000:]
    from grid import Grid
    assert Grid(tmp_path).query("crawl", "SELECT count(*) FROM to_visit_url") == [(10_000,)]
    assert "the first 10000 links are followed, no more (max_links_per_page)" in (tmp_path / "executor-1.log").read_text()

def test_an_rdf_documents_links_are_cut_at_max_links_per_page_too():
    """An RDF document's URI objects are its links: they were cut at 10,000 whatever
    max_links_per_page said, so ``--max-links-per-page 300`` still gave a 500-link N-Triples
    dump's 500 links to the frontier."""
    dump = "".join(f"<http://127.0.0.1/s> <http://www.w3.org/2000/01/rdf-schema#seeAlso> <http://127.0.0.1/r{i}> .\n"
                   for i in range(500))
    site = Site(pages={"/dump.nt": dump.encode()}, types={"/dump.nt": "application/n-triples"})
    with SiteServer(site) as server:
        fewer = _fetch(server.url("/dump.nt"), "--structured-data", "--json", "--max-links-per-page", "300")
        default = _fetch(server.url("/dump.nt"), "--structured-data", "--json")
    assert fewer.returncode == 0 and default.returncode == 0, fewer.stderr + default.stderr
    assert len(json.loads(fewer.stdout)["page"]["links"]) == 300
    assert len(json.loads(default.stdout)["page"]["links"]) == 500


def test_ill_typed_literals_are_stored_as_written_without_a_traceback_each():
    """rdflib logged a warning with a traceback at every ill-typed literal ("2026-13-45"^^xsd:date):
    50 of them printed 450 lines on ``gridcrawl fetch``'s terminal, and a document of 20,000
    wrote 14 MB to an executor's log. The triples are kept as written, quietly."""
    dump = "".join(f'<http://127.0.0.1/s{i}> <http://127.0.0.1/p> "2026-13-{i + 10}"'
                   f'^^<http://www.w3.org/2001/XMLSchema#date> .\n' for i in range(50))
    site = Site(pages={"/dates.nt": dump.encode()}, types={"/dates.nt": "application/n-triples"})
    with SiteServer(site) as server:
        done = _fetch(server.url("/dates.nt"), "--structured-data", "--json")
    assert done.returncode == 0 and done.stderr == "", done.stderr[:2000]
    assert sorted(t[2] for t in json.loads(done.stdout)["page"]["triples"]) == [f"2026-13-{i + 10}" for i in range(50)]


def test_fetch_follows_a_seeds_redirect_to_another_host_as_a_crawl_would():
    """The URL is a crawl's seed: its redirect to another host is followed and that host joins
    the scope the links are judged by, as on the grid."""
    site = generate_site(4, links_per_page=2, seed=12)
    with SiteServer(site) as server:
        door = Site()
        door.extra["/"] = redirect(server.url("/"), 301)
        with SiteServer(door, host="127.0.0.2") as front:
            done = _fetch(front.url("/"), "--json", "--allow-private", "127.0.0.0/8")
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    assert found["page"]["final_url"] == server.url("/") and found["scope"] == ["127.0.0.2", "127.0.0.1"]
    assert {url for url, _ in found["followed"]} == {server.url(path) for path in site.links["/"]}


def test_fetch_of_a_page_that_fails_says_why_and_exits_1():
    site = Site(pages={"/robots.txt": b"User-agent: *\nDisallow: /private/\n", "/private/a.html": b"<html>a</html>"},
                types={"/robots.txt": "text/plain"})
    with SiteServer(site) as server:
        refused = _fetch(server.url("/private/a.html"), "--json")
        assert refused.returncode == 1, refused.stderr
        page = json.loads(refused.stdout)["page"]
        assert page["error_kind"] == "robots", page
        assert server.count("/private/a.html") == 0

        ignored = _fetch(server.url("/private/a.html"), "--ignore-robots")  # the executor's option
        assert ignored.returncode == 0 and "200" in ignored.stdout, ignored.stdout + ignored.stderr

        missing = _fetch(server.url("/nope.html"))
        assert missing.returncode == 1 and "http_status: HTTP 404 Not Found" in missing.stdout, missing.stdout

    for args, message in ((["not a url"], "not crawlable"), (["http://a.example/", "--proxy", "socks5://p:1"], "SOCKS")):
        bad = _fetch(*args)
        assert bad.returncode == 2 and message in bad.stderr and "Traceback" not in bad.stderr, bad.stderr


def test_fetch_goes_through_the_proxy_with_the_netrc_login(tmp_path):
    seen: list = []
    site = Site(extra={"/": login_page(b"<html><head><title>Wiki</title></head><body></body></html>",
                                       "crawler", "s3cret", seen)})
    netrc = tmp_path / "netrc"
    netrc.write_text("machine wiki.intranet.invalid login crawler password s3cret\n")
    netrc.chmod(0o600)
    with SiteServer(site) as server, ForwardProxy(hosts={"wiki.intranet.invalid": "127.0.0.1"}) as proxy:
        url = f"http://wiki.intranet.invalid:{server.port}/"
        done = _fetch(url, "--proxy", proxy.url, "--netrc", str(netrc), "--ignore-robots", "--json")
        assert done.returncode == 0, done.stdout + done.stderr
        found = json.loads(done.stdout)
        assert found["route"] == f"through the proxy {proxy.url}" and found["page"]["title"] == "Wiki"
        assert proxy.records == [("GET", url)] and seen[0][1].startswith("Basic ")

        without = _fetch(url, "--proxy", proxy.url, "--ignore-robots")
        assert without.returncode == 1 and "--netrc FILE" in without.stdout, without.stdout


def test_fetch_shows_the_items_an_extract_spec_finds_and_misses(tmp_path):
    from shop import SPEC, generate_shop, stored
    shop = generate_shop(lists=2, per_list=7)
    spec = tmp_path / "shop.toml"
    spec.write_text(SPEC)
    listing = "/list/1.html"
    missing = sorted({path for _, path, _, _ in shop.misses if path.startswith("/p/")})[0]  # a product without a name
    with SiteServer(shop.site) as server:
        base = server.url("/").rstrip("/")
        for path in (listing, missing):
            done = _fetch(server.url(path), "--extract", str(spec), "--json")
            page = json.loads(done.stdout)["page"]
            rows = [(i["type"], base + path, i["position"], json.dumps(i["fields"])) for i in page.get("items", [])]
            assert stored(rows, base) == {item for item in shop.items if item[1] == path}, path
            assert {(t, path, p, f) for t, p, f in page.get("item_misses", [])} == \
                {miss for miss in shop.misses if miss[1] == path}, path
        assert stored(rows, base) == set() and page["item_misses"]  # the product page: a miss, no item

        table = _fetch(server.url(listing), "--extract", str(spec), "--links", "0")
        assert table.returncode == 0 and "items (7):" in table.stdout and "listing #0:" in table.stdout, table.stdout
        # a spec that applies and finds nothing says so; so does a spec that does not apply
        empty = tmp_path / "empty.toml"
        empty.write_text('[[item]]\ntype = "gadget"\neach = ".no-such"\n[item.fields]\nname = { css = "::text" }\n'
                         '[[item]]\ntype = "elsewhere"\nurl = "/nowhere/"\n[item.fields]\nname = { css = "h1::text" }\n')
        nothing = _fetch(server.url(listing), "--extract", str(empty), "--links", "0")
        assert "items (0): the specs of 'gadget' found nothing here" in nothing.stdout, nothing.stdout
        empty.write_text('[[item]]\ntype = "elsewhere"\nurl = "/nowhere/"\n[item.fields]\nname = { css = "h1::text" }\n')
        nothing = _fetch(server.url(listing), "--extract", str(empty), "--links", "0")
        assert "items (0): no item spec applies to this URL and page type" in nothing.stdout, nothing.stdout
        # ... and why, spec by spec: a url written as a glob gets a hint (it only said "no item spec applies")
        assert "  item 1 (elsewhere): its url '/nowhere/' is not found in the URL\n" in nothing.stdout, nothing.stdout
        empty.write_text('[[item]]\ntype = "product"\nurl = "/list/*.html"\n[item.fields]\nname = { css = "h1::text" }\n')
        glob = _fetch(server.url(listing), "--extract", str(empty), "--links", "0")
        assert ("  item 1 (product): its url '/list/*.html' is not found in the URL (a regular expression searched in "
                "the URL, not a glob: '*' repeats what is before it; any text is '.*', a dot '\\.', as in "
                "'/p/.*\\.html$')") in glob.stdout, glob.stdout
    bad = tmp_path / "bad.toml"
    bad.write_text("[[item]]\ntype = 1\n")
    refused = _fetch("http://127.0.0.1:9/", "--extract", str(bad))
    assert refused.returncode == 2 and "invalid item spec" in refused.stderr, refused.stderr


def test_fetch_extract_reports_items_where_drops_and_refuses_what_a_crawl_refuses(tmp_path):
    """gridcrawl fetch --extract: items its [item.where] dropped were not reported; --json had no
    items key when none was found (items.md says items, item_misses and item_errors are there); a
    spec's page_type that no rule gives was accepted without --rules (gridcrawl run refuses it);
    a plugin entry point naming an int failed every page with "TypeError: 'int' object is not
    callable" instead of being refused at load, as gridcrawl run does."""
    site = Site()
    site.pages["/"] = (b"<html><body><p class=n><b>Kettle</b> <i>24</i></p><p class=n><b>Mug</b> <i>3</i></p>"
                       b"</body></html>")
    spec = tmp_path / "spec.toml"
    spec.write_text('[[item]]\ntype = "thing"\neach = "p.n"\n[item.fields]\nname = { css = "b::text" }\n'
                    'price = { css = "i::text", type = "int" }\n[item.where]\nprice = { min = 10 }\n')
    with SiteServer(site) as server:
        table = _fetch(server.url("/"), "--extract", str(spec), "--links", "0")
        assert table.returncode == 0, table.stderr
        assert "items (1):" in table.stdout and "thing #0:" in table.stdout, table.stdout
        assert "dropped thing #1: its [item.where] conditions left it out" in table.stdout, table.stdout
        done = json.loads(_fetch(server.url("/"), "--extract", str(spec), "--json").stdout)
        assert [i["position"] for i in done["page"]["items"]] == [0] and done["item_dropped"] == [["thing", 1]]
        spec.write_text('[[item]]\ntype = "thing"\neach = "table"\n[item.fields]\nname = { css = "b::text" }\n')
        empty = json.loads(_fetch(server.url("/"), "--extract", str(spec), "--json").stdout)
        assert (empty["page"]["items"], empty["page"]["item_misses"], empty["page"]["item_errors"],
                empty["item_dropped"]) == ([], [], [], [])
        assert "items" not in json.loads(_fetch(server.url("/"), "--json").stdout)["page"], "no spec, no items"
    spec.write_text('[[item]]\ntype = "thing"\npage_type = "product"\n[item.fields]\nname = { css = "b::text" }\n')
    typed = _fetch("http://127.0.0.1:9/", "--extract", str(spec))
    assert typed.returncode == 2 and "page_type 'product' is no page type of this crawl" in typed.stderr, \
        typed.stderr
    (tmp_path / "badplug-1.0.dist-info").mkdir()
    (tmp_path / "badplug-1.0.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: badplug\nVersion: 1.0\n")
    (tmp_path / "badplug-1.0.dist-info" / "entry_points.txt").write_text(
        "[gridcrawl.extractors]\nnumber = gridcrawl_badplug:extract\n")
    (tmp_path / "gridcrawl_badplug.py").write_text("extract = 5\n")
    spec.write_text('[[item]]\ntype = "thing"\nplugin = "number"\n')
    plugin = subprocess.run([sys.executable, "-m", "gridcrawl", "fetch", "http://127.0.0.1:9/", "--extract",
                             str(spec)], capture_output=True, text=True, timeout=120,
                            env={**os.environ, "PYTHONPATH": os.pathsep.join(
                                [str(tmp_path), *filter(None, [os.environ.get("PYTHONPATH")])])})
    assert plugin.returncode == 2, plugin.stderr
    assert "plugin number cannot load: its entry point names an int, not a function: its package is installed " \
        "here, but the plugin does not load: fix the package (a dependency it imports, the function its entry " \
        "point names) or the spec's plugin name" in plugin.stderr, plugin.stderr
    assert "Traceback" not in plugin.stderr


def test_fetch_shows_what_keep_and_follow_rules_do_on_a_page_of_a_type(tmp_path):
    def page(body: str) -> bytes:
        return f"<html><body>{body}</body></html>".encode()
    site = Site(pages={
        "/": page('<nav><a href="/about.html">About</a></nav><div class="consult">'
                  '<a href="/c/tax-international.html">Tax</a><a href="/c/health.html">Health</a></div>'),
        "/c/tax-international.html": page('<nav><a href="/docs/nav-guide.pdf">Guide</a></nav><main>'
                                          '<a href="/c/tax/international-details.html">Details</a>'
                                          '<a href="/docs/summary.pdf">Summary</a></main>')})
    with SiteServer(site) as server:
        rules = tmp_path / "rules.csv"
        rules.write_text("baseURL,ruleType,fromType,toType,pattern,id,class,tag\n"
                         f"{server.url('/')},follow,base,topLevel,international,all,consult,all\n"
                         f"{server.url('/')},keep,topLevel,,.pdf,all,all,all\n"
                         f"{server.url('/')},follow,topLevel,secondLevel,international,all,all,main\n")
        base = json.loads(_fetch(server.url("/"), "--rules", str(rules), "--json").stdout)
        assert base["followed"] == [[server.url("/c/tax-international.html"), "Tax", "topLevel"]]
        assert base["page"].get("kept", []) == []

        top = _fetch(server.url("/c/tax-international.html"), "--rules", str(rules), "--page-type", "topLevel", "--json")
        found = json.loads(top.stdout)
        assert found["followed"] == [[server.url("/c/tax/international-details.html"), "Details", "secondLevel"]]
        assert sorted(found["page"]["kept"]) == [[server.url("/docs/nav-guide.pdf"), 2], [server.url("/docs/summary.pdf"), 2]]

        table = _fetch(server.url("/c/tax-international.html"), "--rules", str(rules), "--page-type", "topLevel")
        assert "kept (2):" in table.stdout and "-> secondLevel" in table.stdout, table.stdout
        typo = _fetch(server.url("/c/tax-international.html"), "--rules", str(rules), "--page-type", "toplevel")
        assert typo.returncode == 2 and "--page-type 'toplevel' is no page type of the rules (base, secondLevel, " \
            "topLevel): did you mean 'topLevel'?" in typo.stderr, typo.stderr

        rules.write_text("baseURL,ruleType,fromType,toType,pattern,id,class,tag\nnot a url,follow,base,,x,all,all,all\n")
        bad = _fetch(server.url("/"), "--rules", str(rules))
        assert bad.returncode == 2 and "invalid rules" in bad.stderr and "Traceback" not in bad.stderr, bad.stderr


def test_fetch_with_render_sees_the_links_javascript_makes(tmp_path):
    from jssite import PRIVATE_URL, browser_or_skip, js_site
    browser = browser_or_skip()
    site = js_site()
    with SiteServer(site) as server:
        plain = json.loads(_fetch(server.url("/"), "--json").stdout)
        assert plain["followed"] == []  # the shell page has no links until its script runs
        rendered = _fetch(server.url("/"), "--render", "--browser-path", browser, "--json")
        assert rendered.returncode == 0, rendered.stderr[-2000:]
        found = json.loads(rendered.stdout)
        assert {link[0] for link in found["followed"]} == {server.url(path) for path in site.links["/"]}
        assert found["page"]["render_seconds"] > 0
        # an item spec (or a rules file's page type) that asks for rendering is rendered, as in a crawl
        spec = tmp_path / "list.toml"
        spec.write_text('[[item]]\ntype = "entry"\nurl = "/list/"\nrender = true\nwait_for = "li.item"\n'
                        'each = "li.item"\n[item.fields]\nname = { css = "a::text", required = true }\n')
        listed = _fetch(server.url("/list/1.html"), "--extract", str(spec), "--browser-path", browser, "--json")
        assert listed.returncode == 0, listed.stderr[-2000:]
        names = [item["fields"]["name"] for item in json.loads(listed.stdout)["page"]["items"]]
        assert names == [f"Item {n}" for n in range(1, 5)]
        rules = tmp_path / "rules.toml"
        rules.write_text(f'base_url = "{server.url("/")}"\n[[rule]]\nrule_type = "follow"\nfrom_type = "base"\n'
                         'to_type = "list"\npattern = "/list/"\n[page_type.list]\nrender = true\nwait_for = "li.item"\n')
        typed = _fetch(server.url("/list/1.html"), "--rules", str(rules), "--page-type", "list",
                       "--browser-path", browser)
        assert typed.returncode == 0, typed.stderr[-2000:]
        rendered_row = re.search(r"rendered\W+([0-9.]+) s in the browser", typed.stdout)
        assert rendered_row and float(rendered_row[1]) > 0, typed.stdout
        # what the page's scripts asked for and were refused is shown, as it is why content may be
        # missing (list 1's script asks a private address: the SSRF guard refuses it). A --render
        # fetch of its own: one waiting for the page type's selector may end before the script's
        # request is refused (in a fresh clone's CI run the table had no such row)
        shown = _fetch(server.url("/list/1.html"), "--render", "--browser-path", browser)
        assert shown.returncode == 0, shown.stderr[-2000:]
        assert "refused while rendering (1):" in shown.stdout, shown.stdout
        assert f"{PRIVATE_URL}  blocked: " in shown.stdout, shown.stdout
        rules.write_text(rules.read_text().replace("render = true", "render = 'yes'"))
        refused = _fetch(server.url("/list/1.html"), "--rules", str(rules), "--page-type", "list")
        assert refused.returncode == 2 and "render must be true or false" in refused.stderr, refused.stderr
    missing = _fetch("http://127.0.0.1:9/", "--render", "--browser-path", "/nonexistent/chromium")
    assert missing.returncode == 2 and "Traceback" not in missing.stderr, missing.stderr[-2000:]


def test_fetch_shows_the_triples_a_semantic_crawl_reads():
    body = ('<html><head><title>Shop</title><meta property="og:type" content="product">'
            '<script type="application/ld+json">{"@context": "https://schema.org", "@type": "Product", '
            '"@id": "http://shop.example/nest-box", "name": "Nest box"}</script></head><body></body></html>')
    with SiteServer(Site(pages={"/": body.encode()})) as server:
        plain = json.loads(_fetch(server.url("/"), "--json").stdout)
        assert plain["page"].get("triples", []) == []
        found = json.loads(_fetch(server.url("/"), "--structured-data", "--json").stdout)["page"]
        triples = {tuple(t[:3]) for t in found["triples"]}
        assert ("http://shop.example/nest-box", "http://schema.org/name", "Nest box") in triples, triples
        assert (server.url("/"), "http://ogp.me/ns#type", "product") in triples
        table = _fetch(server.url("/"), "--structured-data")
        assert f"triples ({len(found['triples'])}):" in table.stdout and "Nest box" in table.stdout, table.stdout
        cut = _fetch(server.url("/"), "--structured-data", "--links", "1")
        assert f"triples (1 of {len(found['triples'])}, --links lists more):" in cut.stdout, cut.stdout


def test_fetch_body_prints_what_the_executor_parsed():
    page = "<html><head><meta charset='iso-8859-1'><title>Caf\xe9</title></head><body>cr\xe8me</body></html>"
    site = Site(pages={"/": page.encode("iso-8859-1")}, types={"/": "text/html"})
    with SiteServer(site) as server:
        done = _fetch(server.url("/"), "--body")
        assert done.returncode == 0 and done.stdout == page + "\n", done.stdout  # decoded from Latin-1
        missing = _fetch(server.url("/nope.html"), "--body")
        assert missing.returncode == 1 and missing.stdout == "" and "http_status" in missing.stderr


def test_a_servers_control_characters_and_markup_reach_no_terminal(tmp_path):
    """A reason phrase with ESC sequences (set the terminal's title, clear the screen) and rich
    markup: `gridcrawl fetch` and the summary of `gridcrawl run` show them as text (``\\x1b``,
    ``[bold]``). Before, both printed the raw ESC sequences."""
    reason = "\x1b]0;pwned\x07\x1b[2J [bold]loud[/bold]"

    def hostile(h):
        h.send_response(500, reason)
        h.send_header("Content-Length", "0")
        h.end_headers()
    site = Site(pages={"/": b"<html><body><a href='/bad'>bad</a></body></html>"}, extra={"/bad": hostile})
    with SiteServer(site) as server:
        running = _started("run", server.url("/"), "--executors", "1", "--no-sitemaps", "--no-progress",
                           "--workdir", str(tmp_path))
        try:
            fetched = _fetch(server.url("/bad"))
        finally:
            run = _ended(running)
    for shown in (fetched.stdout, run.stdout + run.stderr):
        assert "\x1b" not in shown and "\x07" not in shown
        assert "\\x1b]0;pwned\\x07\\x1b[2J [bold]loud[/bold]" in shown, shown


def test_the_summarys_fetch_command_of_an_rdf_failure_shows_that_failure():
    """The summary's "one of them fetched as an executor does" for a crawl's ``rdf_parse`` or
    ``rdf_limit`` page: run as printed against the real page, it shows the parser's error
    (before, it was printed without --structured-data, and the plain fetch showed a 200 and
    no error: a plain fetch neither downloads nor parses an RDF document)."""
    import shlex
    from gridcrawl.client.cli import fetch_command
    from gridcrawl.client.store import ErrorGroup, Strategy
    site = Site(pages={"/broken.ttl": b"@prefix ex: <http://x/> . ex:a ex:b "}, types={"/broken.ttl": "text/turtle"})
    with SiteServer(site) as server:
        url = server.url("/broken.ttl")
        for strategy in (Strategy(), Strategy(structured_data=True)):
            command = shlex.split(fetch_command(ErrorGroup("rdf_parse", None, 1, url, "invalid turtle"), strategy))
            assert command[:3] == ["gridcrawl", "fetch", url]
            done = _fetch(*command[2:], "--json")
            assert json.loads(done.stdout)["page"]["error_kind"] == "rdf_parse", done.stderr
    timeout = ErrorGroup("timeout", None, 1, "http://127.0.0.1:8000/a.html", "read timed out")
    assert fetch_command(timeout, Strategy(structured_data=True)) == \
        "gridcrawl fetch http://127.0.0.1:8000/a.html --structured-data"
    assert fetch_command(timeout, Strategy()) == "gridcrawl fetch http://127.0.0.1:8000/a.html"


def test_a_semantic_fetch_follows_the_rdf_versions_a_page_names_in_link_alternate():
    """A Linked Data page points to its data with ``<link rel="alternate" type="text/turtle">``
    (and RDF/XML, JSON-LD): a semantic crawl follows those (before, it did not: a page linking
    its Turtle only so left it unfetched); not a feed's alternate, nor in a plain crawl."""
    head = ('<link rel="alternate" type="text/turtle" href="/data/a.ttl">'
            '<link rel="Alternate meta" type="application/rdf+xml; charset=utf-8" href="data/a.rdf">'
            '<link rel="alternate" type="application/rss+xml" href="/feed.xml">'
            '<link rel="stylesheet" type="text/turtle" href="/not-alternate.ttl">')
    site = Site(pages={"/page/": f"<html><head>{head}</head><body><p>no anchors</p></body></html>".encode()})
    with SiteServer(site) as server:
        semantic = _fetch(server.url("/page/"), "--structured-data", "--json")
        plain = _fetch(server.url("/page/"), "--json")
    assert semantic.returncode == 0 and plain.returncode == 0, semantic.stderr + plain.stderr
    assert [url for url, _ in json.loads(semantic.stdout)["followed"]] == [server.url("/data/a.ttl"),
                                                                           server.url("/page/data/a.rdf")]
    assert json.loads(plain.stdout)["followed"] == []
