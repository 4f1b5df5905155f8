"""Keep/follow rules (gridcrawl/rules.py): reading TOML and CSV, validation errors naming the
rule, the paper's JSON crawling instruction, applying an instruction to a parsed page (the
executor's side, also through a real HTTP fetch), the crawl_rule table, and the client store
applying followed and kept links (SQLite)."""

from __future__ import annotations

import json

import pytest
import sqlalchemy as sa

from gridcrawl.client.store import CrawlStore, Outcome, Scope, Strategy
from gridcrawl.db import open_database
from gridcrawl.executor.fetch import Fetcher
from gridcrawl.executor.page import visit
from gridcrawl.executor.parse import parse_page
from gridcrawl.protocol import PageResult, decode, encode, Assign, Job
from gridcrawl.rules import (Rule, RuleError, apply_instruction, instruction_for, load_rules, parse_csv,
                             parse_toml, rules_from_table, store_rules, validate_rules)
from gridcrawl.urls import fingerprint
from sites import Site

BASE = "http://127.0.0.1:8000/"
CONSULT_CLASS = "col-xs-12 col-sm-7 col-md-8 col-lg-9"

# The paper's Table I, as its authors wrote it (tab-separated, camelCase columns), base URL ours.
TABLE_I = f"""baseURL\truleType\tfromType\ttoType\tpattern\tid\tclass\ttag
{BASE}\tfollow\tbase\ttopLevel\tinternational\tall\t{CONSULT_CLASS}\tall
{BASE}\tkeep\ttopLevel\t\t.pdf\tall\tall\tall
{BASE}\tfollow\ttopLevel\tsecondLevel\tinternational\tall\tall\tmain
{BASE}\tkeep\tsecondLevel\t\t.pdf\tall\tall\tall
"""

TABLE_I_TOML = f"""
base_url = "{BASE}"

[[rule]]
rule_type = "follow"
from_type = "base"
to_type = "topLevel"
pattern = "international"
class = "{CONSULT_CLASS}"

[[rule]]
rule_type = "keep"
from_type = "topLevel"
pattern = ".pdf"

[[rule]]
rule_type = "follow"
from_type = "topLevel"
to_type = "secondLevel"
pattern = "international"
tag = "main"

[[rule]]
rule_type = "keep"
from_type = "secondLevel"
pattern = ".pdf"
"""


def table_i() -> list[Rule]:
    return validate_rules(parse_csv(TABLE_I, "table1.tsv", "\t"))


# ----------------------------------------------------------------------------------- reading


def test_table_i_from_csv_and_toml_files_are_the_same_rules(tmp_path):
    (tmp_path / "r.tsv").write_text(TABLE_I)
    (tmp_path / "r.toml").write_text(TABLE_I_TOML)
    comma = TABLE_I.replace("\t", ",")
    (tmp_path / "r.csv").write_text(comma)
    strip = lambda rules: [(r.base_url, r.rule_type, r.from_type, r.to_type, r.pattern, r.element_id,
                            r.element_class, r.element_tag, r.number) for r in rules]
    from_tsv, from_toml, from_csv = (load_rules(tmp_path / n) for n in ("r.tsv", "r.toml", "r.csv"))
    assert strip(from_tsv) == strip(from_toml) == strip(from_csv)
    first, second, third, fourth = from_tsv
    assert (first.rule_type, first.from_type, first.to_type, first.pattern) == ("follow", "base", "topLevel", "international")
    assert first.scope == ("class", CONSULT_CLASS)
    assert (second.rule_type, second.to_type, second.pattern, second.scope) == ("keep", None, ".pdf", None)
    assert third.scope == ("tag", "main") and third.to_type == "secondLevel"
    assert fourth.from_type == "secondLevel" and [r.number for r in from_tsv] == [1, 2, 3, 4]


def test_a_csv_saved_by_a_spreadsheet_with_semicolons_reads_as_the_comma_one(tmp_path):
    """A spreadsheet in a locale whose decimal mark is the comma (French, German ...) saves CSV
    with semicolons, a BOM and CRLF line ends: it was refused as one unknown column named
    'baseURL;ruleType;fromType;…'."""
    comma = TABLE_I.replace("\t", ",")
    (tmp_path / "r.csv").write_text(comma)
    (tmp_path / "excel.csv").write_bytes(b"\xef\xbb\xbf" + TABLE_I.replace("\t", ";").replace("\n", "\r\n").encode())
    strip = lambda rules: [(r.base_url, r.rule_type, r.from_type, r.to_type, r.pattern, r.element_id,
                            r.element_class, r.element_tag, r.number) for r in rules]
    assert strip(load_rules(tmp_path / "excel.csv")) == strip(load_rules(tmp_path / "r.csv"))


def test_snake_case_csv_with_comments_blank_cells_and_defaults(tmp_path):
    path = tmp_path / "rules.csv"
    path.write_text("# the crawl of example\n"
                    "base_url,rule_type,from_type,to_type,pattern,id,class,tag\n"
                    f"{BASE},follow,base,list,,,,\n"
                    "\n"
                    f"{BASE},keep,list,,\\.zip$,downloads,,\n")
    follow, keep = load_rules(path)
    assert (follow.pattern, follow.scope) == ("all", None)
    assert keep.scope == ("id", "downloads") and keep.pattern == r"\.zip$"


@pytest.mark.parametrize("text, message", [
    ("base_url,rule_type,from_type,colour\nhttp://a.example/,follow,base,red\n", "unknown attribute 'colour'"),
    ("base_url,rule_type\nhttp://a.example/,follow\n", "rule 1 (r.csv row 2): missing from_type"),
    ("rule_type,from_type,to_type\nfollow,base,x\n", "missing base_url"),
])
def test_bad_csv_is_refused_naming_the_rule(tmp_path, text, message):
    path = tmp_path / "r.csv"
    path.write_text(text)
    with pytest.raises(RuleError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_rules(path)


def test_bad_files_are_refused(tmp_path):
    (tmp_path / "r.toml").write_text("[[rule]\n")
    with pytest.raises(RuleError, match="not valid TOML"):
        load_rules(tmp_path / "r.toml")
    (tmp_path / "r.json").write_text("{}")
    with pytest.raises(RuleError, match="unknown format '.json'"):
        load_rules(tmp_path / "r.json")
    with pytest.raises(RuleError, match="cannot read rules file"):
        load_rules(tmp_path / "missing.csv")
    (tmp_path / "empty.csv").write_text("base_url,rule_type,from_type\n")
    with pytest.raises(RuleError, match="empty.csv has no rule: write a header row"):
        load_rules(tmp_path / "empty.csv")
    # saved by PowerShell's ">" (UTF-16): it was "'utf-8' codec can't decode byte 0xff in position 0"
    (tmp_path / "ps.csv").write_text(TABLE_I.replace("\t", ","), encoding="utf-16")
    with pytest.raises(RuleError) as info:
        load_rules(tmp_path / "ps.csv")
    assert str(info.value) == (f"cannot read rules file {tmp_path / 'ps.csv'}: it is UTF-16 text (invalid start byte "
                               "at byte 0): save it as UTF-8")


def test_toml_structure_errors():
    with pytest.raises(RuleError, match=r"'rule' must be an array of tables"):
        parse_toml("rule = 3")
    with pytest.raises(RuleError, match=r"unknown top-level keys \['rules'\]"):
        parse_toml("[[rules]]\nrule_type = 'keep'")
    with pytest.raises(RuleError, match=r"rule 1 \(r.toml \[\[rule\]\] 1\): pattern must be text, not list"):
        parse_toml(f"[[rule]]\nbase_url = '{BASE}'\nrule_type = 'keep'\nfrom_type = 'x'\npattern = ['a']", "r.toml")


# ----------------------------------------------------------------------------------- validation


def rule(n: int, rule_type: str, from_type: str, to_type: str | None = None, **kw) -> Rule:
    return Rule(kw.pop("base_url", BASE), rule_type, from_type, to_type, number=n, source="test", **kw)


GOOD = rule(1, "follow", "base", "list")


@pytest.mark.parametrize("bad, message", [
    (rule(2, "follow", "list"), r"rule 2 \(test: follow list\): a follow rule needs a to_type"),
    (rule(2, "keep", "list", "detail"), r"rule 2 .*a keep rule takes no to_type"),
    (rule(2, "keep", "list", element_id="main", element_class="content"),
     r"rule 2 .*at most one of id, class and tag may be set, not id and class"),
    (rule(2, "keep", "list", element_class="c", element_tag="main"), r"rule 2 .*not class and tag"),
    (rule(2, "keep", "list", pattern="intern(ational"), r"rule 2 .*pattern 'intern\(ational' is not a valid regular expression"),
    # as the file wrote it: repr() showed a backslash twice
    (rule(2, "keep", "list", pattern=r"/c/[a-z+/1\.html$"), r"rule 2 .*pattern '/c/\[a-z\+/1\\\.html\$' is not a valid"),
    (rule(2, "skip", "list"), r"rule 2 .*rule_type must be keep or follow, not 'skip'"),
    (rule(2, "keep", "detail"), r"rule 2 .*no follow rule has to_type 'detail', so the rule never applies$"),
    # a page type mistyped: the one meant is named (case apart, or the closest)
    (rule(2, "keep", "Base"), r"rule 2 .*no follow rule has to_type 'Base', so the rule never applies: did you mean 'base'\?"),
    (rule(2, "keep", "lists"), r"rule 2 .*to_type 'lists', so the rule never applies: did you mean 'list'\?"),
    (rule(2, "keep", "list", base_url="GCC"), r"rule 2 .*base_url 'GCC' is not a crawlable URL"),
    # what it may have meant, as for a seed: the http:// form, or how to serve a file over HTTP
    (rule(2, "keep", "list", base_url="127.0.0.1:8000/"), r"not crawlable \(did you mean http://127.0.0.1:8000/\?\)$"),
    (rule(2, "keep", "list", base_url="file:///usr/share/doc/index.html"),
     r"\(a file, not a web address: .*--directory /usr/share/doc` and crawl http://127.0.0.1:8000/index.html\)$"),
    # a CSS selector or XPath where a plain name goes: it used to match nothing, a silent empty crawl
    (rule(2, "keep", "list", element_tag="div[@role='main']"), r"rule 2 .*tag \"div\[@role='main'\]\" is not an element name"),
    (rule(2, "keep", "list", element_tag="div.body"), r"rule 2 .*tag 'div.body' is not an element name"),
    (rule(2, "keep", "list", element_id="#main"), r"rule 2 .*id '#main' cannot be an element's id"),
    (rule(2, "keep", "list", element_id="main content"), r"rule 2 .*id 'main content' cannot be"),
    (rule(2, "keep", "list", element_class="body .content"), r"rule 2 .*class 'body .content' has a name starting with '.'"),
    # the same links followed to two page types: the first rule gives the type, the second never applies
    (rule(2, "follow", "base", "other"), r"rule 2 \(test: follow base -> other\): follows the same links as rule 1"),
])
def test_invalid_rules_are_refused_naming_the_rule(bad, message):
    with pytest.raises(RuleError, match=message):
        validate_rules([GOOD, bad])


def test_plain_scope_names_and_repeated_follow_rules_are_taken():
    """Custom elements, upper-case tags and ids with punctuation are names; a follow rule may
    repeat another's pattern with another scope, or the same one with the same to_type."""
    rules = validate_rules([GOOD, rule(2, "follow", "base", "other", element_tag="MY-Widget"),
                            rule(3, "follow", "base", "list", pattern="all"),
                            rule(4, "keep", "list", element_id="main.content_2"),
                            rule(5, "keep", "other", element_class="col-md-8 body")])
    assert len(rules) == 5



def test_a_page_type_longer_than_the_database_keeps_is_refused():
    """A 72-character to_type was stored cut to 64 characters with the pages it typed, so that
    no rule (from_type: the 72 characters) applied to them: the crawl stopped there, and the
    summary said the rule that had typed them found nothing."""
    long = "listing_" * 9
    with pytest.raises(RuleError, match=r"rule 1 .*to_type is 72 characters long; a page type takes at most 64"):
        validate_rules([rule(1, "follow", "base", long), rule(2, "follow", long, "item")])
    validate_rules([rule(1, "follow", "base", long[:64]), rule(2, "follow", long[:64], "item")])


def test_a_base_url_needs_a_follow_rule_from_base():
    with pytest.raises(RuleError, match=r"rule 1 .*no follow rule from 'base'"):
        validate_rules([rule(1, "keep", "base", pattern=".pdf")])
    other = "http://127.0.0.2:8000/"
    with pytest.raises(RuleError, match=r"rule 2 .*base URL http://127.0.0.2:8000/ has no follow rule"):
        validate_rules([GOOD, rule(2, "keep", "base", base_url=other)])
    with pytest.raises(RuleError, match="no rules given"):
        validate_rules([])


@pytest.mark.parametrize("name, text, says", [
    ("rules.csv", "base_url,rule_type,from_type,to_type,pattern\n", "rules.csv has no rule: write a header row naming "
                                                                   "the columns, then one rule per row"),
    ("rules.csv", "# only a comment\n\n", "rules.csv has no rule: write a header row"),
    ("rules.toml", 'base_url = "http://127.0.0.1:8000/"\n', "rules.toml has no rule: write each rule in a [[rule]] table")])
def test_a_rules_file_without_rules_is_named(tmp_path, name, text, says):
    """A rules file with a header and no rows (or no [[rule]] table) was refused as "no rules
    given", which a user who gave a file cannot act on: the error names the file and what it lacks."""
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(RuleError) as refused:
        load_rules(path)
    assert str(refused.value).startswith(says), refused.value


# ----------------------------------------------------------------------------------- instructions


def test_instructions_are_the_papers_json():
    rules = table_i()
    # section II.B: the first instruction, built from Rule 1 (fromType "base")
    first = instruction_for("base", BASE, rules)
    assert first == {"baseURL": BASE, "urlToCrawl": BASE, "pageType": "base", "keepRules": [],
                     "followRules": [{"toType": "topLevel", "rule": 1, "pattern": "international", "id": "all",
                                      "class": CONSULT_CLASS, "tag": "all"}]}
    # a topLevel page gets Rules 2 and 3 together: fetched once, both applied
    gcc1 = instruction_for("topLevel", BASE + "gcc1", rules)
    assert [e["rule"] for e in gcc1["keepRules"]] == [2] and [e["rule"] for e in gcc1["followRules"]] == [3]
    assert gcc1["followRules"][0]["tag"] == "main"
    # and the paper's last one, for "GCC2"
    gcc2 = instruction_for("secondLevel", BASE + "gcc2", rules)
    assert gcc2["keepRules"] == [{"rule": 4, "pattern": ".pdf", "id": "all", "class": "all", "tag": "all"}]
    assert gcc2["followRules"] == [] and gcc2["urlToCrawl"] == BASE + "gcc2"
    # a type no rule applies to: nothing kept or followed
    assert instruction_for("nowhere", BASE, rules)["followRules"] == []
    # it is JSON and travels in the protocol's assign message unchanged
    assert json.loads(json.dumps(gcc1)) == gcc1
    message = decode(encode(Assign([Job(1, "app", 7, BASE + "gcc1", 1, gcc1)])))
    assert message.jobs[0].instruction == gcc1


PAGE = f"""<!DOCTYPE html><html><head><title>Consultations</title></head><body>
<nav><a href="/consultation/international-nav.html">International (menu)</a> <a href="/guide.pdf">Guide</a></nav>
<div class="{CONSULT_CLASS} results">
  <a href="/consultation/international-trade.html">Trade, international</a>
  <a href="/consultation/fisheries.html">Fisheries</a>
  <div><a href="/consultation/international-aid.html">Aid</a></div>
</div>
<div class="col-xs-12 col-sm-7">  <!-- only some of the classes: not in scope -->
  <a href="/consultation/international-partial.html">Partial</a>
</div>
<main id="content"><a href="/docs/report.pdf">Report</a> <a href="consultation/international-deep.html">Deep</a>
  <section><a href="/docs/annex.pdf">Annex</a></section></main>
<footer><a href="/docs/report.pdf">Report again</a></footer>
</body></html>"""


def parsed(html: str = PAGE, url: str = BASE):
    return parse_page(html.encode(), url, "text/html; charset=utf-8")


def test_each_base_url_takes_its_own_base_rules():
    """Every site's seed has the type ``base``: a rules file for two sites gives each base URL's
    page only the ``base`` rules of its own base_url (the other site's rule had it follow links
    the user meant for the other site, as 404s); a seed no rule names takes every base rule."""
    other = "http://127.0.0.2:8000/"
    rules = validate_rules([rule(1, "follow", "base", "list", pattern="/docs/"),
                            rule(2, "follow", "base", "forum", pattern="/topics/", base_url=other),
                            rule(3, "keep", "base", pattern=r"\.pdf$", base_url=other)])
    mine = instruction_for("base", BASE, rules)
    assert [e["rule"] for e in mine["followRules"]] == [1] and mine["keepRules"] == [] and mine["baseURL"] == BASE
    theirs = instruction_for("base", other, rules)
    assert [e["rule"] for e in theirs["followRules"]] == [2] and [e["rule"] for e in theirs["keepRules"]] == [3]
    assert theirs["baseURL"] == other
    seed = instruction_for("base", "http://127.0.0.3:8000/", rules)
    assert [e["rule"] for e in seed["followRules"]] == [1, 2] and [e["rule"] for e in seed["keepRules"]] == [3]


def test_class_scope_needs_every_class_name_in_any_order():
    page = parsed()
    follow, keep = apply_instruction(page.document, BASE, page.links, instruction_for("base", BASE, table_i()))
    assert follow == [(BASE + "consultation/international-trade.html", "Trade, international", "topLevel"),
                      (BASE + "consultation/international-aid.html", "Aid", "topLevel")]
    assert keep == []


def test_keep_all_elements_and_follow_within_main():
    page = parsed()
    follow, keep = apply_instruction(page.document, BASE, page.links, instruction_for("topLevel", BASE, table_i()))
    assert follow == [(BASE + "consultation/international-deep.html", "Deep", "secondLevel")]
    assert keep == [(BASE + "guide.pdf", 2), (BASE + "docs/report.pdf", 2), (BASE + "docs/annex.pdf", 2)]


def test_id_scope_first_follow_rule_wins_and_base_href_is_used():
    html = ('<html><head><base href="http://127.0.0.1:8000/sub/"></head><body>'
            '<div id="list"><a href="a.html">A</a><a href="b.html">B</a></div>'
            '<a href="c.html">C</a></body></html>')
    page = parsed(html, BASE + "index.html")
    rules = validate_rules([rule(1, "follow", "base", "wide", pattern=r"/[ac]\.html$"),
                            rule(2, "follow", "base", "narrow", element_id="list"),
                            rule(3, "keep", "base", element_id="list", pattern=r"/b\.html$"),
                            rule(4, "keep", "base", element_id="missing")])
    follow, keep = apply_instruction(page.document, BASE + "index.html", page.links,
                                     instruction_for("base", BASE, rules))
    assert follow == [(BASE + "sub/a.html", "A", "wide"), (BASE + "sub/c.html", "C", "wide"),
                      (BASE + "sub/b.html", "B", "narrow")]
    assert keep == [(BASE + "sub/b.html", 3)]


def test_links_as_pairs_and_invalid_pattern_in_an_instruction():
    page = parsed()
    pairs = [[link.url, link.text] for link in page.links]
    instruction = instruction_for("base", BASE, validate_rules([rule(1, "follow", "base", "x", pattern="fisheries")]))
    follow, _ = apply_instruction(page.document, BASE, pairs, instruction)
    assert follow == [(BASE + "consultation/fisheries.html", "Fisheries", "x")]
    instruction["followRules"][0]["pattern"] = "("
    with pytest.raises(RuleError, match="not a valid regular expression"):
        apply_instruction(page.document, BASE, pairs, instruction)
    # what lxml cannot look up is a RuleError too (it was a ValueError: the page crashed)
    for key, value in (("tag", "{x"), ("id", "a\x00b"), ("class", "\ud800")):
        bad = {"followRules": [{"toType": "x", "rule": 1, key: value}]}
        with pytest.raises(RuleError, match="cannot be looked up"):
            apply_instruction(page.document, BASE, pairs, bad)


def test_a_pattern_that_backtracks_without_end_stops_at_its_limit_and_no_other_thread():
    """A client's follow rule ``(a|aa)+$`` and a link ending in 60 a's and a b: Python's ``re``
    held the GIL for the whole match (``^(([a-z0-9./:])+)+#$`` on a 31-character URL took 386 s),
    so every thread of the executor stood still, its heartbeats too, and the manager declared it
    dead. The match now stops at its time limit (gridcrawl.patterns), the page fails as
    bad_instruction naming the pattern, and the executor's other threads run meanwhile."""
    import threading
    import time
    page = parsed(f'<html><body><a href="/{"a" * 60}b">x</a></body></html>')
    pairs = [[link.url, link.text] for link in page.links]
    ticks, done = [], threading.Event()

    def other_thread():
        while not done.is_set():
            ticks.append(1)
            time.sleep(0.01)
    thread = threading.Thread(target=other_thread)
    thread.start()
    try:
        with pytest.raises(RuleError, match=r"instruction pattern: regular expression '\(a\|aa\)\+\$' was "
                                            r"stopped after 1 s on \d+ characters"):
            apply_instruction(page.document, BASE, pairs, {"followRules": [{"toType": "t", "pattern": "(a|aa)+$"}]})
    finally:
        done.set()
        thread.join()
    assert len(ticks) > 10, ticks  # it ran during the match (under re: at most once, before it began)


def test_an_instruction_the_executor_cannot_apply_fails_the_page_as_bad_instruction_in_one_line(caplog):
    """A client's keep rule ``{"pattern": "(("}``: the executor logged a full traceback per page
    ("thread N crashed") and the page came back as ``crash``, which says "a bug of ours". It is the
    client's instruction: one line, and the page fails as ``bad_instruction`` (not retried)."""
    import logging
    from gridcrawl import protocol as p
    from gridcrawl.settings import Settings
    from grid import agent_with_router, collect_results
    from sites import SiteServer
    server = SiteServer(Site(pages={"/": PAGE.encode()})).start()
    settings = Settings(obey_robots=False, sitemaps=False, threads=1)
    try:
        with caplog.at_level(logging.INFO, logger="gridcrawl"):
            with agent_with_router(settings) as (manager, peer):
                manager.send_multipart([peer, *p.encode(p.Assign([
                    p.Job(1, "app", 0, server.url("/"), instruction={"keepRules": [{"pattern": "(("}]}),
                    p.Job(2, "app", 1, server.url("/"), instruction={"followRules": [{"toType": "t", "tag": "{"}]}),
                    p.Job(3, "app", 2, server.url("/"), instruction={"keepRules": [{"pattern": "pdf"}]})]))])
                pages = collect_results(manager, 3)
    finally:
        server.stop()
    assert pages[1].error_kind == pages[2].error_kind == "bad_instruction"
    assert "instruction pattern '((' is not a valid regular expression" in pages[1].error
    assert "instruction id, class or tag '{' cannot be looked up" in pages[2].error
    assert pages[3].error_kind is None and pages[3].status == 200
    said = [r for r in caplog.records if "instruction" in r.getMessage()]
    assert len(said) == 2 and all(r.levelno == logging.WARNING and r.exc_info is None for r in said)
    assert not [r for r in caplog.records if r.exc_info or "crashed" in r.getMessage()]


def test_rules_follow_and_keep_at_most_max_links():
    """Each DOM-scoped rule reads at most ``max_links`` links, and follow and keep hold at most
    that many in all (two rules over two lists would otherwise add up past the bound)."""
    lists = "".join(f'<div id="{kind}">' + "".join(f'<a href="/{kind}{i}.html">{i}</a>' for i in range(20)) + "</div>"
                    for kind in ("one", "two"))
    page = parsed(f"<html><body>{lists}</body></html>")
    rules = validate_rules([rule(1, "follow", "base", "a", element_id="one"),
                            rule(2, "follow", "base", "b", element_id="two"),
                            rule(3, "keep", "base", element_id="two")])
    follow, keep = apply_instruction(page.document, BASE, page.links, instruction_for("base", BASE, rules), 25)
    assert [url for url, _, _ in follow] == [BASE + f"one{i}.html" for i in range(20)] + [BASE + f"two{i}.html" for i in range(5)]
    assert keep == [(BASE + f"two{i}.html", 3) for i in range(20)]
    few, kept = apply_instruction(page.document, BASE, page.links, instruction_for("base", BASE, rules), 8)
    assert len(few) == 8 and kept == [(BASE + f"two{i}.html", 3) for i in range(8)]

def test_executor_visit_applies_the_instruction_to_one_fetch(site_server):
    site = Site(pages={"/": PAGE.encode()})
    server = site_server(site)
    base = server.url("/")
    rules = validate_rules(parse_csv(TABLE_I.replace(BASE, base), "t.tsv", "\t"))
    fetcher = Fetcher(user_agent="gridcrawl-test", connect_timeout=3, read_timeout=5, deadline=10)
    try:
        result = visit(fetcher, base, instruction={"scope": ["127.0.0.1"], **instruction_for("topLevel", base, rules)})
        plain = visit(fetcher, base)
    finally:
        fetcher.close()
    assert result.error_kind is None, result.error
    assert result.links == [[base + "consultation/international-deep.html", "Deep", "secondLevel"]]
    assert result.kept == [[base + "guide.pdf", 2], [base + "docs/report.pdf", 2], [base + "docs/annex.pdf", 2]]
    assert len(plain.links) == 9 and plain.kept == [] and all(len(link) == 2 for link in plain.links)
    assert server.count("/") == 2  # one fetch per visit, whatever the number of rules


# ----------------------------------------------------------------------------------- SQL


def test_crawl_rule_table_round_trip(tmp_path):
    store = CrawlStore(open_database(f"sqlite:///{tmp_path / 'crawl.db'}"))
    assert store.stored_rules() == []
    rules = table_i()
    store.save_rules(rules)
    again = store.stored_rules()
    assert [(r.number, r.rule_type, r.from_type, r.to_type, r.pattern, r.element_class, r.element_tag)
            for r in again] == [(r.number, r.rule_type, r.from_type, r.to_type, r.pattern, r.element_class,
                                 r.element_tag) for r in rules]
    store.save_rules(rules[:2] + [rule(3, "follow", "topLevel", "x")])  # replaces, not appends
    assert [r.number for r in store.stored_rules()] == [1, 2, 3]
    with store.engine.begin() as conn:  # a broken rule in the table is reported, naming it
        conn.execute(sa.text("UPDATE crawl_rule SET pattern = '(' WHERE rule_id = 2"))
    with pytest.raises(RuleError, match=r"rule 2 \(crawl_rule table: keep topLevel\)"):
        store.stored_rules()
    with store.engine.begin() as conn:
        store_rules(conn, [])
        assert rules_from_table(conn) == []


def test_store_follows_only_typed_links_and_keeps_kept_ones(tmp_path):
    rules = table_i()
    store = CrawlStore(open_database(f"sqlite:///{tmp_path / 'crawl.db'}"), Strategy(rules=rules))
    store.add_seeds([BASE])
    (seed,) = store.claim(10)
    assert seed.page_type == "base"
    page = PageResult(url=BASE, final_url=BASE, status=200, content_type="text/html",
                      links=[[BASE + "international-a.html", "A", "topLevel"],
                             [BASE + "untyped.html", "old executor"],           # no to_type: not followed
                             ["http://elsewhere.example/international", "x", "topLevel"]],  # out of scope
                      kept=[[BASE + "a.pdf", 2], [BASE + "a.pdf", 2], ["http://oecd.example/b.pdf", 4],
                            ["not-a-pair"]])
    counts = store.apply([Outcome(seed, page, "ex", 1, False)], Scope(["127.0.0.1"]))
    assert counts["kept"] == 2 and counts["links"] == 1
    (next_page,) = store.claim(10)
    assert (next_page.url, next_page.page_type, next_page.depth) == (BASE + "international-a.html", "topLevel", 1)
    with store.engine.connect() as conn:
        kept = conn.execute(sa.text("SELECT url, fingerprint, source_url, source_page_type, rule FROM kept_link "
                                    "ORDER BY url")).all()
        doc_type = conn.execute(sa.text("SELECT page_type FROM document")).scalar()
    assert [tuple(k) for k in kept] == [(BASE + "a.pdf", fingerprint(BASE + "a.pdf"), BASE, "base", 2),
                                        ("http://oecd.example/b.pdf", fingerprint("http://oecd.example/b.pdf"), BASE, "base", 4)]
    assert doc_type == "base"
    # applying the same result again stores nothing twice
    store.apply([Outcome(seed, page, "ex", 1, False)], Scope(["127.0.0.1"]))
    assert store.counts()["kept"] == 2


def test_a_link_a_follow_rule_gives_another_type_keeps_its_first_and_is_counted(tmp_path):
    """A product linked from the home page's footer (rule base -> featured) and from its list
    page (list -> product) is crawled once, as 'featured': the item specs of 'product' do not
    apply to it. That stayed silent (the crawl had one product item fewer, no word why); the
    store counts such links now, with one example, for the summary's line."""
    from gridcrawl.client.cli import retyped_note
    rules = validate_rules(parse_toml(f"""base_url = "{BASE}"
[[rule]]
rule_type = "follow"
from_type = "base"
to_type = "featured"
tag = "footer"
pattern = "/p/"
[[rule]]
rule_type = "follow"
from_type = "base"
to_type = "list"
pattern = "/list/"
[[rule]]
rule_type = "follow"
from_type = "list"
to_type = "product"
pattern = "/p/"
"""))
    store = CrawlStore(open_database(f"sqlite:///{tmp_path / 'crawl.db'}"), Strategy(rules=rules))
    store.add_seeds([BASE])
    (seed,) = store.claim(10)
    home = PageResult(url=BASE, final_url=BASE, status=200, content_type="text/html",
                      links=[[BASE + "p/1.html", "Featured", "featured"], [BASE + "list/1.html", "L1", "list"],
                             [BASE + "list/2.html", "L2", "list"]])
    store.apply([Outcome(seed, home, "ex", 1, False)], Scope(["127.0.0.1"]))
    assert store.retyped == 0 and store.retyped_example is None
    claimed = {p.url: p for p in store.claim(10)}
    lists = [PageResult(url=url, final_url=url, status=200, content_type="text/html",
                        links=[[BASE + "p/1.html", "one", "product"], [BASE + "p/2.html", "two", "product"]])
             for url in (BASE + "list/1.html", BASE + "list/2.html")]
    # both lists in one batch: p/1 queued as 'featured' before; p/2 new, the same type twice
    store.apply([Outcome(claimed[page.url], page, "ex", 1, False) for page in lists], Scope(["127.0.0.1"]))
    with store.engine.connect() as conn:
        types = dict(conn.execute(sa.text("SELECT url, page_type FROM to_visit_url WHERE url LIKE '%/p/%'")).all())
    assert types == {BASE + "p/1.html": "featured", BASE + "p/2.html": "product"}
    assert store.retyped == 2 and store.retyped_example == (BASE + "p/1.html", "featured", "product")
    assert retyped_note(store.retyped, *store.retyped_example) == (
        f"2 links kept the page type their URLs had when a follow rule gave them another, e.g. {BASE}p/1.html is "
        "'featured', not 'product': a URL is crawled once, with the type of the rule that found it first, so the "
        "rules and item specs of the other type do not apply to it; rules whose patterns or id/class/tag do not "
        "overlap keep the types apart")
    # two pages of one batch giving a new URL two types: the first kept, counted
    store2 = CrawlStore(open_database(f"sqlite:///{tmp_path / 'crawl2.db'}"), Strategy(rules=rules))
    store2.add_seeds([BASE, BASE + "list/9.html"])
    pages = {p.url: p for p in store2.claim(10)}
    both = [PageResult(url=BASE, final_url=BASE, status=200, content_type="text/html",
                       links=[[BASE + "p/9.html", "F", "featured"]]),
            PageResult(url=BASE + "list/9.html", final_url=BASE + "list/9.html", status=200,
                       content_type="text/html", links=[[BASE + "p/9.html", "nine", "product"]])]
    store2.apply([Outcome(pages[page.url], page, "ex", 1, False) for page in both], Scope(["127.0.0.1"]))
    assert store2.retyped == 1 and store2.retyped_example == (BASE + "p/9.html", "featured", "product")


# ---------------------------------------------------------------------------- page types (rendering)


def test_page_types_ask_for_rendering_and_a_selector_to_wait_for():
    from gridcrawl.rules import PageType, parse_page_types
    text = """
base_url = "http://shop.test/"
[[rule]]
rule_type = "follow"
from_type = "base"
to_type = "list"
[page_type.list]
render = true
wait_for = "li.item"
[page_type.base]
render = false
"""
    rules = validate_rules(parse_toml(text))
    assert parse_page_types(text, rules=rules) == {"list": PageType(True, "li.item"), "base": PageType(False, None)}


@pytest.mark.parametrize("table, message", [
    ("[page_type.list]\nrender = 'yes'", "render must be true or false"),
    ("[page_type.list]\nwait_for = ''", "wait_for must be a CSS selector"),
    ("[page_type.list]\nheadless = true", "unknown keys ['headless']"),
    ("[page_type.nowhere]\nrender = true", "no rule gives pages the type 'nowhere'"),
])
def test_bad_page_type_options_are_refused_naming_the_table(table, message):
    from gridcrawl.rules import parse_page_types
    text = ('base_url = "http://shop.test/"\n[[rule]]\nrule_type = "follow"\nfrom_type = "base"\n'
            'to_type = "list"\n' + table)
    rules = validate_rules(parse_toml(text))
    with pytest.raises(RuleError, match="page_type") as info:
        parse_page_types(text, rules=rules)
    assert message in str(info.value)


def test_strategy_renders_the_page_types_that_ask_and_every_page_with_render():
    from gridcrawl.client.store import Strategy
    from gridcrawl.rules import PageType
    typed = Strategy(page_types={"list": PageType(True, "li.item"), "item": PageType(False)})
    assert typed.render_instruction("list") == {"render": True, "waitFor": "li.item"}
    assert typed.render_instruction("item") == {} and typed.render_instruction(None) == {}
    every = Strategy(render=True, wait_for="main", page_types={"list": PageType(True, "li.item")})
    assert every.render_instruction(None) == {"render": True, "waitFor": "main"}
    assert every.render_instruction("list") == {"render": True, "waitFor": "li.item"}


def test_idle_rule_notes_name_the_options_that_left_links_out():
    """The end-of-crawl line of a rule that found nothing names the crawl's limits that left links
    out (a focused crawl's --min-relevance drops links the rule matched), a keep rule's only its own
    pattern and scope, and counts the lines beyond the first ``most``."""
    from gridcrawl.client.cli import idle_rule_notes
    follow, keep = rule(1, "follow", "base", "list"), rule(2, "keep", "list", pattern=r"\.pdf$")
    lines = idle_rule_notes([(follow, 1, BASE), (keep, 3, BASE + "a b")], "my rules.toml",
                            ["--max-depth", "--min-relevance"], most=1)
    assert lines == [
        "rule 1 (test: follow base -> list) found nothing: no URL got the page type 'list' from the 1 'base' page "
        "fetched (its pattern or id/class/tag matches no new link there, an earlier follow rule gave those links "
        "another type, or the crawl left them out: another host, --max-depth, --min-relevance); what the rules "
        f"match on one: gridcrawl fetch {BASE} --rules 'my rules.toml' --page-type base",
        "and 1 more rule found nothing"]
    assert idle_rule_notes([(keep, 3, BASE)], None)[0].startswith(
        "rule 2 (test: keep list) found nothing: it kept no link from the 3 'list' pages fetched (its pattern or "
        "id/class/tag matches no link there); ")
    assert idle_rule_notes([(keep, 3, BASE)], None)[0].endswith("--rules RULES_FILE --page-type list")
    # a pattern written as a shell glob: matches nothing of what it looks like, and the line says why
    glob = rule(3, "follow", "base", "product", pattern="/p/*.html")
    assert idle_rule_notes([(glob, 1, BASE)], "r.toml")[0].endswith(
        "--page-type base; its pattern '/p/*.html' is a regular expression searched in the URL, not a glob: '*' "
        "repeats what is before it; any text is '.*', a dot '\\.', as in '/p/.*\\.html$'")
    with pytest.raises(RuleError, match=r"nothing to repeat at position 0 \(a regular expression searched in the "
                                        r"URL, not a glob"):
        validate_rules([rule(1, "follow", "base", "product", pattern="*.html")])
    # a pattern anchored at a path matched no URL (they begin with "http"): the crawl stopped at its seed
    with pytest.raises(RuleError) as info:
        validate_rules([rule(1, "follow", "base", "product", pattern=r"\A/p/\d+")])
    assert str(info.value) == ("rule 1 (test: follow base -> product): pattern '\\A/p/\\d+' can match no page: it is "
                               "searched in the whole URL (http://host/...), which begins with 'http', not '/'; write "
                               "'/p/\\d+', or anchor at the scheme: '^https?://[^/]+/p/\\d+'")
    assert validate_rules([rule(1, "follow", "base", "product", pattern="(?i)/P/")])  # not anchored: taken
