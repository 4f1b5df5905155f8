"""Item specs (gridcrawl.items): reading and refusing spec files, every field option, ``each``,
``where``, types, required fields and plugins, on pages parsed by the executor's own parser."""

from __future__ import annotations

import datetime as dt
from dataclasses import replace
import sys

import pytest

from gridcrawl.items import (ItemSpecError, extract, needs_of, page_for, parse_spec, spec_to_wire, specs_for,
                             specs_from_wire)
from gridcrawl.executor.parse import parse_page
from gridcrawl.plugins import capabilities, installed_plugins
from plugins import PLUGIN_NAME, PLUGIN_VERSION, install_in_this_process

SHOP = """<html><head><title>  Shop:   page 1 </title><base href="/catalog/"></head><body>
<h1 class="t">Spring <b>sale</b></h1>
<p class="date">Published 3 March 2026</p>
<ul>
 <li class="product" data-sku="A1"><h2>Red   kettle</h2><span class="price">1.234,50 €</span>
   <a class="more" href="kettle.html?b=2&a=1">more</a><i class="tag">kitchen</i><i class="tag">red</i>
   <span class="when">2026-03-01</span></li>
 <li class="product" data-sku="B2"><h2>Blue mug</h2><span class="price">$7</span>
   <a class="more" href="/mug.html">more</a><span class="when">01/02/2020</span></li>
 <li class="product" data-sku="C3"><h2></h2><span class="price">free</span></li>
</ul></body></html>"""

URL = "http://shop.test/list/1.html"


def page(html: str = SHOP, url: str = URL):
    parsed = parse_page(html.encode(), url, "text/html; charset=utf-8")
    return page_for(url, url, 200, {"content-type": "text/html"}, parsed.document, html,
                    [[l.url, l.text] for l in parsed.links], parsed.base_url)


def run(toml: str, html: str = SHOP, **kw):
    return extract(parse_spec(toml, "t.toml"), page(html), **kw)


def test_fields_css_xpath_text_attr_and_whitespace():
    found = run("""
[[item]]
type = "page"
[item.fields]
title = { css = "title::text" }
raw = { css = "title::text", normalize = false }
heading = { css = "h1" }                        # an element: its whole text
heading_x = { xpath = "string(//h1)" }
first_sku = { css = ".product::attr(data-sku)" }
skus = { xpath = "//li/@data-sku", many = true }
none = { css = ".nothing::text" }
nones = { css = ".nothing::text", many = true }
""")
    assert found.misses == [] and found.errors == []
    (item,) = found.items
    assert item["type"] == "page" and item["position"] == 0
    assert item["fields"] == {"title": "Shop: page 1", "raw": "  Shop:   page 1 ", "heading": "Spring sale",
                              "heading_x": "Spring sale", "first_sku": "A1", "skus": ["A1", "B2", "C3"],
                              "none": None, "nones": []}


ARTICLE = """<html><head><title>Storm</title></head><body><article>
<div class="body"><h2>Storm hits the coast</h2><p>Winds of 140&nbsp;km/h.</p><p>“It was loud,” said one <b>résident</b>.</p><script>var ad = "buy";</script><style>p { color: red }</style><!-- ad slot -->Line one<br>line two<ul><li>first</li><li>second</li></ul><table><tr><td>a</td><td>b</td></tr></table></div>
<pre class="code">x = 1<br>y = <span>2</span></pre>
<script type="text/template" id="tpl">{{ name }}</script>
</article></body></html>"""


def test_an_elements_text_separates_its_blocks_and_leaves_out_scripts_and_styles():
    """<p>One.</p><p>Two.</p> reads "One. Two." (it read "One.Two.", and an article body took in
    the text of its scripts and style sheets); inline elements stay joined; a script selected
    itself still gives its text."""
    found = run("""
[[item]]
type = "article"
[item.fields]
body = { css = "div.body" }
paragraphs = { css = "div.body p", many = true }
code = { css = "pre.code", normalize = false }
template = { css = "script#tpl" }
""", ARTICLE)
    (item,) = found.items
    assert item["fields"] == {
        "body": "Storm hits the coast Winds of 140 km/h. “It was loud,” said one résident. Line one line two "
                "first second a b",
        "paragraphs": ["Winds of 140 km/h.", "“It was loud,” said one résident."],
        "code": "x = 1\ny = 2",
        "template": "{{ name }}"}


def test_an_elements_text_survives_the_deepest_nesting_the_parser_keeps():
    """The executors' parser keeps 2,048 nested elements (huge_tree): an article body nested
    1,900 deep gives its text (the walk was recursive, and Python stops at 1,000 frames)."""
    depth = 1900
    page = ("<html><body><article><p>Start.</p>" + "<div>" * depth + "deep" + "</div>" * depth
            + "<p>End.</p></article></body></html>")
    found = run("""
[[item]]
type = "article"
[item.fields]
body = { css = "article" }
""", page)
    (item,) = found.items
    assert item["fields"] == {"body": "Start. deep End."}


def test_each_types_re_and_required():
    found = run("""
[[item]]
type = "product"
each = ".product"
[item.fields]
sku   = { css = "::attr(data-sku)", required = true }
name  = { css = "h2::text", required = true }
price = { css = ".price::text", type = "float" }
cents = { css = ".price::text", re = '([0-9.,]+)', type = "int" }
link  = { css = "a.more::attr(href)", type = "url" }
tags  = { css = ".tag::text", many = true }
when  = { css = ".when::text", type = "date", dayfirst = true }
""")
    assert [i["position"] for i in found.items] == [0, 1]
    first, second = (i["fields"] for i in found.items)
    assert first == {"sku": "A1", "name": "Red kettle", "price": 1234.5, "cents": None,
                     "link": "http://shop.test/catalog/kettle.html?a=1&b=2",   # <base href>, canonical
                     "tags": ["kitchen", "red"], "when": "2026-03-01"}
    assert second == {"sku": "B2", "name": "Blue mug", "price": 7.0, "cents": 7,
                      "link": "http://shop.test/mug.html", "tags": [], "when": "2020-02-01"}
    # the third product has no name: no item, one miss of the required field, at its position
    assert found.misses == [["product", 2, "name"]]


def test_re_takes_the_first_group_and_drops_values_without_a_match():
    found = run("""
[[item]]
type = "p"
[item.fields]
year = { css = ".date::text", re = '(\\d{4})', type = "int" }
word = { css = "li h2::text", re = 'mug', many = true }
""")
    assert found.items[0]["fields"] == {"year": 2026, "word": ["mug"]}


def test_date_formats_and_values_that_do_not_convert():
    html = "<p>5 Jan 2024</p><p>2024-01-05T10:30:00</p><p>March</p><p>soon</p><i>12.5</i><i>x</i>"
    found = run("""
[[item]]
type = "d"
[item.fields]
dates = { css = "p::text", type = "date", many = true }
ints = { css = "i::text", type = "int", many = true }
floats = { css = "i::text", type = "float", many = true }
""", html)
    assert found.items[0]["fields"] == {"dates": ["2024-01-05", "2024-01-05T10:30:00"], "ints": [],
                                        "floats": [12.5]}


def test_dates_keep_a_time_zone_written_as_a_common_abbreviation():
    """"10:00 CET" is 10:00+01:00 and "3:00 PM EST" 15:00-05:00 (both were read as times without
    a zone, an hour and five hours off UTC); GMT and offsets as before; a name with several
    meanings (CST) still gives the time as written."""
    html = ("<p>3 March 2026, 10:00 CET</p><p>Jul 1, 2026 10:00 CEST</p><p>Nov 20, 2026 3:00 PM EST</p>"
            "<p>20 Nov 2026 14:00 GMT</p><p>Mon, 30 Nov 2026 10:00:00 +0100</p><p>20 Nov 2026 09:00 JST</p>"
            "<p>20 Nov 2026 09:00 CST</p>")
    found = run("""
[[item]]
type = "d"
[item.fields]
dates = { css = "p::text", type = "date", many = true }
""", html)
    assert found.items[0]["fields"]["dates"] == [
        "2026-03-03T10:00:00+01:00", "2026-07-01T10:00:00+02:00", "2026-11-20T15:00:00-05:00",
        "2026-11-20T14:00:00+00:00", "2026-11-30T10:00:00+01:00", "2026-11-20T09:00:00+09:00",
        "2026-11-20T09:00:00"]


def test_where_regex_and_recent_dates_keep_only_what_passes():
    spec = """
[[item]]
type = "product"
each = ".product"
[item.fields]
name = { css = "h2::text" }
when = { css = ".when::text", type = "date" }
price = { css = ".price::text", type = "float" }
[item.where]
%s
"""
    today = dt.date(2026, 3, 10)
    names = lambda where: [i["fields"]["name"] for i in run(spec % where, today=today).items]
    assert names('name = { re = "(?i)KETTLE" }') == ["Red kettle"]
    assert names("when = { within_days = 30 }") == ["Red kettle"]
    assert names("when = { within_days = 5 }") == []
    assert names("price = { min = 5, max = 100 }") == ["Blue mug"]


@pytest.mark.parametrize("when, kept", [("2026-03-10", True), ("2026-02-08", True), ("2026-02-07", False),
                                        ("2026-03-11", True), ("2026-03-12", False), ("2031-01-01", False)])
def test_within_days_keeps_dates_from_n_days_before_today_to_tomorrow(when, kept):
    """within_days = 30 kept a date in 2031: items.md says "at most N days before today". A date
    after tomorrow (UTC; a page's own date may be a day ahead) fails."""
    found = run('[[item]]\ntype = "n"\n[item.fields]\nwhen = { css = "p::text", type = "date" }\n'
                '[item.where]\nwhen = { within_days = 30 }\n', f"<p>{when}</p>", today=dt.date(2026, 3, 10))
    assert bool(found.items) is kept


def test_one_item_per_page_and_specs_chosen_by_url_and_page_type():
    specs = parse_spec("""
[[item]]
type = "a"
url = '/list/[0-9]+\\.html$'
[item.fields]
t = { css = "title::text" }
[[item]]
type = "b"
page_type = "product"
[item.fields]
t = { css = "title::text" }
""")
    assert [s.type for s in specs_for(specs, URL, None)] == ["a"]
    assert [s.type for s in specs_for(specs, "http://shop.test/p/1.html", "product")] == ["b"]
    assert specs_for(specs, "http://shop.test/other", "base") == []
    # what travels in the instruction comes back the same (pages were chosen already: no url, page_type)
    assert specs_from_wire([spec_to_wire(s) for s in specs]) == [replace(s, url=None, page_type=None) for s in specs]


@pytest.mark.parametrize("toml, message", [
    ("[[item]\n", "t.toml: not valid TOML"),
    ("x = 1", "unknown top-level keys"),
    ("", "no [[item]] table"),
    ('[[item]]\ntype = "a"', "item 1 (a): needs [item.fields]"),
    ('[[item]]\ntype = "bad type"\n[item.fields]\nx = {css="a"}', "item 1: type must be"),
    ('[[item]]\n[item.fields]\nx = {css="a"}', 't.toml: item 1: has no type (type = "product": the name its items '
                                              'are stored under)'),  # it said "not None"
    ('[[item]]\ntype = "a"\n[item.fields]\nx = {css="a["}', "item 1 (a) field 'x': invalid css selector"),
    ('[[item]]\ntype = "a"\n[item.fields]\nx = {xpath="//a["}', "item 1 (a) field 'x': invalid xpath selector"),
    ('[[item]]\ntype = "a"\n[item.fields]\nx = {css="a", xpath="//a"}', "field 'x': give exactly one of css, xpath or jsonld"),
    ('[[item]]\ntype = "a"\n[item.fields]\nx = {css="a", re="(["}', "field 'x': invalid regular expression"),
    # a pattern quoted as the file wrote it (repr showed each backslash twice)
    ("[[item]]\ntype = 'a'\n[item.fields]\nx = {css='a', re='(\\d+\\.\\d+'}",
     "field 'x': invalid regular expression '(\\d+\\.\\d+': missing )"),
    ('[[item]]\ntype = "a"\n[item.fields]\nx = {css="a", type="money"}', "field 'x': type must be one of"),
    ('[[item]]\ntype = "a"\n[item.fields]\nx = {css="a", many="yes"}', "field 'x': many must be true or false"),
    ('[[item]]\ntype = "a"\n[item.fields]\nx = {css="a", colour=1}', "field 'x': unknown keys ['colour']"),
    ('[[item]]\ntype = "a"\nurl = "(["\n[item.fields]\nx = {css="a"}', "item 1 (a) url: invalid regular expression"),
    ('[item]\ntype = "a"\n[item.fields]\nx = {css="a"}',   # one bracket: it said "no [[item]] table"
     "[item] is a single table: write [[item]] (two brackets), one per item type, and [item.fields] under it"),
    ('[[item]]\ntype = "a"\nurl = "*.html"\n[item.fields]\nx = {css="a"}',   # a glob: the hint says how to write it
     "item 1 (a) url: invalid regular expression '*.html': nothing to repeat at position 0 (a regular expression "
     "searched in the URL, not a glob: '*' repeats what is before it; any text is '.*', a dot '\\.', as in "
     "'/p/.*\\.html$')"),
    ('[[item]]\ntype = "a"\neach = "li["\n[item.fields]\nx = {css="a"}', "item 1 (a): each: invalid css"),
    ('[[item]]\ntype = "a"\n[item.fields]\nx = {css="a"}\n[item.where]\ny = {re="a"}', "where 'y': no such field"),
    ('[[item]]\ntype = "a"\n[item.fields]\nx = {css="a"}\n[item.where]\nx = {within_days=3}',
     "within_days needs a field of type date"),
    ('[[item]]\ntype = "a"\n[item.fields]\nx = {css="a"}\n[item.where]\nx = {re="(["}', "where 'x': invalid regular"),
    ('[[item]]\ntype = "a"\n[item.fields]\nd = {css="a", type="int"}\n[item.where]\nd = {min=10, max=1}',
     "item 1 (a) where 'd': min (10) is above max (1): no value could pass"),
    ('[[item]]\ntype = "a"\nplugin = "shop"\n[item.where]\nd = {min=2.5, max=1}', "min (2.5) is above max (1)"),
    ('[[item]]\ntype = "a"\n[item.fields]\nx = {css="a", dayfirst=true}',
     "field 'x': dayfirst is for a field of type date (it says how 03/04/2026 is read), not str"),
    ('[[item]]\ntype = "a"\n[item.fields]\nx = {css="a", type="int", dayfirst=true}', "dayfirst is for a field"),
    ('[[item]]\ntype = "a"\nplugin = "shop"\n[item.fields]\nx = {css="a"}', "a plugin item has no fields"),
    ('[[item]]\ntype = "a"\nplugin = "no spaces"', "plugin must be NAME or NAME@VERSION"),
    # a url anchored at a path: the canonical URL begins with "http", so it matched no page, with no word
    ('[[item]]\ntype = "a"\nurl = "^/p/"\n[item.fields]\nx = {css="a"}',
     "item 1 (a) url: '^/p/' can match no page: it is searched in the whole URL (http://host/...), which begins "
     "with 'http', not '/'; write '/p/', or anchor at the scheme: '^https?://[^/]+/p/'"),
    # a wait_for without render = true was ignored: the page was fetched, the list it waited for never there
    ('[[item]]\ntype = "a"\nwait_for = "li.item"\n[item.fields]\nx = {css="li.item"}',
     "item 1 (a): wait_for is what the browser waits for on a rendered page: it goes with render = true"),
    ('[[item]]\ntype = "a"\n[item.fields]\nx = {css="a"}\n[[item]]\ntype = "a"\n[item.fields]\nx = {css="a"}',
     "item 2 (a): another item has type 'a'"),
])
def test_bad_specs_are_refused_naming_file_item_and_field(toml, message):
    with pytest.raises(ItemSpecError) as info:
        parse_spec(toml, "t.toml")
    assert message in str(info.value)
    assert str(info.value).startswith("t.toml")


def test_a_spec_saved_by_a_windows_editor_is_read_and_stored_as_written(tmp_path):
    """A spec saved with a byte-order mark (Notepad's "UTF-8 with BOM", PowerShell) was refused
    as "not valid TOML: Invalid statement (at line 1, column 1)", where rules files with one were
    read; one saved as UTF-16 said "'utf-8' codec can't decode byte 0xff". The first is read,
    the second is told to be saved as UTF-8."""
    from gridcrawl.items import load_spec
    text = '[[item]]\ntype = "page"\n[item.fields]\ntitle = { css = "title::text" }\n'
    (tmp_path / "bom.toml").write_bytes(b"\xef\xbb\xbf" + text.replace("\n", "\r\n").encode())
    assert load_spec(tmp_path / "bom.toml") == parse_spec(text)
    (tmp_path / "u16.toml").write_text(text, encoding="utf-16")
    with pytest.raises(ItemSpecError) as info:
        load_spec(tmp_path / "u16.toml")
    assert str(info.value) == (f"{tmp_path / 'u16.toml'}: cannot read the item spec: it is UTF-16 text (invalid "
                               "start byte at byte 0): save it as UTF-8")


@pytest.fixture
def plugin(tmp_path):
    """The test plugin, visible to this process through an entry-point metadata directory."""
    saved = list(sys.path)
    install_in_this_process(tmp_path)
    try:
        yield installed_plugins()
    finally:
        sys.path[:] = saved
        sys.modules.pop("gridcrawl_testplugin", None)


PRODUCT = '<html><body><div class="product" data-sku="Z9"><h1>Kettle</h1><a href="/x">x</a></div></body></html>'


def test_plugins_are_found_through_entry_points_and_declared_as_capabilities(plugin):
    assert plugin[PLUGIN_NAME].version == PLUGIN_VERSION
    assert capabilities(plugin) == [f"plugin:{PLUGIN_NAME}", f"plugin:{PLUGIN_NAME}@{PLUGIN_VERSION}"]
    specs = parse_spec(f'[[item]]\ntype = "p"\nplugin = "{PLUGIN_NAME}@{PLUGIN_VERSION}"')
    assert needs_of(specs) == [f"plugin:{PLUGIN_NAME}@{PLUGIN_VERSION}"]
    found = extract(specs, page(PRODUCT, "http://shop.test/p/1.html"), plugins=plugin)
    assert found.items == [{"type": "p", "position": 0, "fields": {"sku": "Z9", "shout": "KETTLE", "links": 1}}]


def test_a_plugin_that_raises_runs_late_or_is_missing_fails_only_the_items(plugin):
    specs = parse_spec(f'[[item]]\ntype = "p"\nplugin = "{PLUGIN_NAME}"')
    boom = extract(specs, page(PRODUCT, "http://shop.test/boom.html"), plugins=plugin)
    assert boom.items == [] and boom.errors == [["p", "plugin testshop: RuntimeError: the test plugin blew up"]]
    bare = extract(specs, page(PRODUCT, "http://shop.test/boom-bare.html"), plugins=plugin)
    assert bare.errors == [["p", "plugin testshop: KeyError"]]  # was "KeyError: " (an exception without a message)
    slow = extract(specs, page(PRODUCT, "http://shop.test/slow.html"), plugins=plugin, plugin_timeout=0.2)
    assert slow.errors == [["p", "plugin testshop: TimeoutError: ran past its deadline of 0.2 s"]]
    missing = extract(specs, page(PRODUCT, "http://shop.test/p/1.html"), plugins={})
    assert missing.errors == [["p", "plugin 'testshop' is not installed on this executor (installed: none)"]]
    wrong = extract(parse_spec(f'[[item]]\ntype = "p"\nplugin = "{PLUGIN_NAME}@9"'),
                    page(PRODUCT, "http://shop.test/p/1.html"), plugins=plugin)
    assert wrong.errors == [["p", f"plugin 'testshop@9' is not installed on this executor ({PLUGIN_NAME} {PLUGIN_VERSION} is)"]]


def test_a_plugin_that_returns_a_dict_or_a_number_is_told_to_yield_its_items(plugin):
    """A plugin that returned its one item (a dict) failed with "yielded a str, not a dict" (the
    dict's keys, iterated); one that returned a number with "'int' object is not iterable"."""
    import importlib.metadata
    from gridcrawl.plugins import ENTRY_POINT_GROUP, Plugin
    wrong = {name: Plugin(name, "1", importlib.metadata.EntryPoint(name, f"gridcrawl_testplugin:{name}",
                                                                   ENTRY_POINT_GROUP))
             for name in ("returns_dict", "returns_number")}
    for name, kind in (("returns_dict", "a dict"), ("returns_number", "an int")):
        found = extract(parse_spec(f'[[item]]\ntype = "p"\nplugin = "{name}"'),
                        page(PRODUCT, "http://shop.test/p/1.html"), plugins=wrong)
        assert found.items == [] and found.errors == [
            ["p", f"plugin {name}: TypeError: returned {kind}, not an iterable of dicts: yield each item "
                  "(or return a list of dicts)"]]


def test_a_plugin_that_changes_its_page_changes_nothing_for_the_specs_after_it(plugin):
    """A plugin dropping the page's scripts and product element (as Scrapy code cleans a page up
    before reading its text), emptying its links and clearing its JSON-LD works on a copy: the
    specs after it read the page as it was. Before, they found no SKU, no JSON-LD price and no
    links, and the executor read the cut tree after them."""
    import importlib.metadata
    from gridcrawl.plugins import ENTRY_POINT_GROUP, Plugin
    strips = {"strips": Plugin("strips", "1", importlib.metadata.EntryPoint(
        "strips", "gridcrawl_testplugin:strips", ENTRY_POINT_GROUP))}
    html = PRODUCT.replace("<body>", '<body><script type="application/ld+json">'
                                     '{"@type": "Product", "offers": {"price": "12.5"}}</script>')
    specs = parse_spec('[[item]]\ntype = "cleaned"\nplugin = "strips"\n'
                       '[[item]]\ntype = "product"\n[item.fields]\n'
                       'sku = { css = ".product::attr(data-sku)", required = true }\n'
                       'price = { jsonld = "offers.price", type = "float" }\n'
                       'link = { css = "a::attr(href)" }\n')
    shown = page(html, "http://shop.test/p/1.html")
    for _ in range(2):  # the page given to the plugin twice: each call its own copy
        found = extract(specs, shown, plugins=strips)
        assert found.errors == [] and found.items == [
            {"type": "cleaned", "position": 0, "fields": {"text": ""}},
            {"type": "product", "position": 0, "fields": {"sku": "Z9", "price": 12.5, "link": "/x"}}]
    assert len(shown.selector.css("script")) == 1 and shown.links == [["http://shop.test/x", "x"]]


def _second_shop(folder) -> str:
    """A second installed distribution (``othershop 9.0``) registering a plugin named as the test
    plugin, its metadata written into ``folder``; returns ``folder``."""
    info = folder / "othershop-9.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: othershop\nVersion: 9.0\n")
    (info / "entry_points.txt").write_text(f"[gridcrawl.extractors]\n{PLUGIN_NAME} = gridcrawl_testplugin:returns_dict\n")
    return str(folder)


def test_two_packages_registering_one_plugin_name_are_named(plugin, tmp_path, site_server):
    """Two installed packages registering one plugin name: the first on sys.path ran, the other
    was ignored without a word (which one runs may differ from one executor to the next). Now
    the executor's log, gridcrawl fetch and gridcrawl run say which runs and which is ignored."""
    import os
    import subprocess
    from gridcrawl.plugins import shadowing
    from plugins import plugin_env
    from sites import Site
    sys.path.append(_second_shop(tmp_path / "second"))
    plugins = installed_plugins()
    assert plugins[PLUGIN_NAME].version == PLUGIN_VERSION  # the first on sys.path runs
    assert plugins[PLUGIN_NAME].shadowed == ("othershop 9.0 (gridcrawl_testplugin:returns_dict)",)
    line = (f"plugin {PLUGIN_NAME} is registered by 2 installed packages: gridcrawl-testplugin {PLUGIN_VERSION} "
            f"(gridcrawl_testplugin:extract) runs, othershop 9.0 (gridcrawl_testplugin:returns_dict) is ignored "
            f"(uninstall one, or rename its entry point)")
    assert shadowing(plugins) == [line]
    import logging
    from gridcrawl.executor.agent import ExecutorAgent
    from gridcrawl.settings import Settings
    seen: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: seen.append(record.getMessage())
    logging.getLogger("gridcrawl.executor").addHandler(handler)
    try:
        executor = ExecutorAgent(Settings(), "tcp://127.0.0.1:1")  # constructed only: it says what it offers
        executor.context.destroy(linger=0)
        executor._local.destroy(linger=0)
    finally:
        logging.getLogger("gridcrawl.executor").removeHandler(handler)
    assert line in seen and f"plugin:{PLUGIN_NAME}@{PLUGIN_VERSION}" in executor.capabilities
    site = Site()
    site.pages["/p/1.html"] = PRODUCT.encode()
    server = site_server(site)
    spec = tmp_path / "shop.toml"
    spec.write_text(f'[[item]]\ntype = "p"\nplugin = "{PLUGIN_NAME}"\n')
    env = plugin_env(tmp_path / "meta")
    env["PYTHONPATH"] += os.pathsep + str(tmp_path / "second")
    out = subprocess.run([sys.executable, "-m", "gridcrawl", "fetch", server.url("/p/1.html"), "--extract", str(spec),
                          "--allow-private", "127.0.0.0/8"],
                         capture_output=True, text=True, timeout=60, env={**os.environ, **env})
    assert out.returncode == 0, out.stderr
    assert line in " ".join(out.stderr.split()), out.stderr
    assert '"shout": "KETTLE"' in out.stdout  # the first one ran


def test_a_plugin_whose_import_hangs_is_not_offered_and_the_executor_starts(tmp_path, monkeypatch):
    """A plugin whose module waits at import (a server it connects to that does not answer) held
    the executor's start for ever: it never registered, and said nothing. Its import now has a
    deadline: past it the plugin is named in a WARNING and not offered, and the executor goes on."""
    import logging
    from gridcrawl import plugins as plugins_module
    from gridcrawl.executor.agent import ExecutorAgent
    from gridcrawl.plugins import loadable
    from gridcrawl.settings import Settings
    info = tmp_path / "hangplug-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: hangplug\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[gridcrawl.extractors]\nhang = wt_hang_plugin:extract\n")
    (tmp_path / "wt_hang_plugin.py").write_text("import time\ntime.sleep(60)\n\ndef extract(page):\n    yield {}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    ok, problems = loadable(installed_plugins(), deadline=0.5)
    line = "plugin hang cannot load: TimeoutError: its import did not finish within 0.5 s"
    assert "hang" not in ok and problems == [line]
    monkeypatch.setattr(plugins_module, "IMPORT_DEADLINE", 0.5)
    seen: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: seen.append(record.getMessage())
    logging.getLogger("gridcrawl.executor").addHandler(handler)
    try:
        executor = ExecutorAgent(Settings(), "tcp://127.0.0.1:1")  # constructed: it got past the import
        executor.context.destroy(linger=0)
        executor._local.destroy(linger=0)
    finally:
        logging.getLogger("gridcrawl.executor").removeHandler(handler)
    assert f"{line}: not offered to the manager" in seen
    assert not any(c.startswith("plugin:hang") for c in executor.capabilities)


def test_a_plugin_named_with_a_space_is_not_offered_and_the_executor_still_registers(tmp_path):
    """An installed plugin whose entry point's name has a space ("my shop") made the executor
    declare "plugin:my shop", which the manager refuses: the executor exited at registration,
    whatever the crawl. It is now named in a WARNING and not offered; the executor registers."""
    import os
    import sqlite3
    from gridcrawl.plugins import loadable
    from grid import Grid, wait_for
    info = tmp_path / "meta" / "spaceplug-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: spaceplug\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[gridcrawl.extractors]\nmy shop = gridcrawl_testplugin:extract\n")
    saved = list(sys.path)
    sys.path[:0] = [str(tmp_path / "meta")]
    try:
        ok, problems = loadable(installed_plugins())
    finally:
        sys.path[:] = saved
    line = ("plugin 'my shop' (gridcrawl_testplugin:extract, version '1.0') cannot be offered: a plugin's "
            "entry-point name is 1 to 64 letters, digits, _ . - and its version 1 to 32 of those or + !; "
            "rename it in its package's entry points")
    assert "my shop" not in ok and problems == [line]
    (tmp_path / "grid").mkdir()
    grid = Grid(tmp_path / "grid")
    try:
        grid.start_manager()
        grid.start_executor("spacey", env={"PYTHONPATH": os.pathsep.join(
            [str(tmp_path / "meta"), os.environ.get("PYTHONPATH", "")])})
        executor = grid.processes[-1]

        def registered() -> bool:
            assert executor.poll() is None, (tmp_path / "grid" / "spacey.log").read_text()[-2000:]
            try:
                return grid.query("manager", "SELECT name FROM executor") == [("spacey",)]
            except sqlite3.OperationalError:  # the manager has not made its tables yet
                return False

        wait_for(registered, 60, interval=0.2, message="the executor to register")
        assert "cannot be offered" in (tmp_path / "grid" / "spacey.log").read_text()
    finally:
        grid.stop()


def test_an_executor_with_more_plugins_than_a_manager_takes_says_so_at_start(tmp_path):
    """Each plugin gives an executor two capabilities, and a manager takes at most 64: an
    executor with 33 plugins installed was refused only when it registered ("capabilities: at
    most 64 names, not 66"), plugins unnamed. It now stops at start, naming the plugins, the
    limit (gridcrawl.protocol.MAX_CAPABILITIES) and how many plugins fit; 32 still start."""
    import os
    import subprocess
    from gridcrawl import protocol as p
    from plugins import PLUGIN_SOURCE

    def install(count: int) -> dict:
        info = tmp_path / f"m{count}" / "manyplug-1.0.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text("Metadata-Version: 2.1\nName: manyplug\nVersion: 1.0\n")
        (info / "entry_points.txt").write_text("[gridcrawl.extractors]\n" + "".join(
            f"shop{i} = gridcrawl_testplugin:extract\n" for i in range(count)))
        return {**os.environ, "PYTHONPATH": os.pathsep.join([str(info.parent), str(PLUGIN_SOURCE)])}

    fits = p.MAX_CAPABILITIES // 2
    code = ("from gridcrawl.executor.agent import ExecutorAgent; from gridcrawl.settings import Settings; "
            "a = ExecutorAgent(Settings(), 'tcp://127.0.0.1:1'); print(len(a.capabilities))")
    out = subprocess.run([sys.executable, "-c", code], env=install(fits), capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.split() == [str(p.MAX_CAPABILITIES)], out.stderr
    out = subprocess.run([sys.executable, "-m", "gridcrawl.executor", "--manager", "tcp://127.0.0.1:1",
                          "--capability", "gpu"], env=install(fits + 1), capture_output=True, text=True, timeout=60)
    said = " ".join(out.stderr.split())
    assert out.returncode == 2 and "Traceback" not in said, said
    assert (f"{fits + 1} extractor plugins are installed here: they make {2 * fits + 2} capabilities" in said
            and f"a manager takes at most {p.MAX_CAPABILITIES} per executor: at most {fits - 1} plugins here" in said), said


def test_plugin_items_pass_through_where(plugin):
    specs = parse_spec(f'[[item]]\ntype = "p"\nplugin = "{PLUGIN_NAME}"\n[item.where]\nshout = {{ re = "^MUG" }}')
    assert extract(specs, page(PRODUCT, "http://shop.test/p/1.html"), plugins=plugin).items == []


def test_plugin_calls_past_their_deadline_are_bounded(plugin, monkeypatch):
    import gridcrawl.items as items
    monkeypatch.setattr(items, "MAX_ABANDONED", len(items._abandoned) + 1)
    specs = parse_spec(f'[[item]]\ntype = "p"\nplugin = "{PLUGIN_NAME}"')
    slow = page(PRODUCT, "http://shop.test/slow.html")
    assert "TimeoutError" in extract(specs, slow, plugins=plugin, plugin_timeout=0.05).errors[0][1]
    refused = extract(specs, slow, plugins=plugin, plugin_timeout=0.05).errors[0][1]
    assert "RuntimeError" in refused and "still run past their deadline; not started" in refused


def test_plugin_values_json_cannot_hold_become_strings_and_extra_items_are_cut_saying_so(plugin):
    import json
    from gridcrawl import protocol
    specs = parse_spec(f'[[item]]\ntype = "p"\nplugin = "{PLUGIN_NAME}"')
    odd = extract(specs, page(PRODUCT, "http://shop.test/odd.html"), plugins=plugin)
    assert odd.items == [{"type": "p", "position": 0,
                          "fields": {"big": str(2**70), "nan": "nan", "inf": "-inf", "fine": 2**62}}]
    json.dumps(odd.items, allow_nan=False)  # strict JSON, as the crawl tables and exports hold it
    protocol.encode_page(protocol.PageResult(url="http://shop.test/odd.html", items=odd.items))  # and the wire
    deep = extract(specs, page(PRODUCT, "http://shop.test/deep.html"), plugins=plugin)
    (item,) = deep.items
    fields = item["fields"]
    assert fields["deep"] == {"l5": {"l4": {"l3": {"l2": "{'l1': {'l0': {'leaf': 1}}}"}}}}
    assert len(fields["wide"]) == 200 and fields["long"] == list(range(1000)) and len(fields["text"]) == 100_000
    assert "k" * 200 in fields
    assert deep.errors == [["p", "plugin testshop: values cut to fit: keys past 200 characters, lists and maps "
                                 "nested past 4 levels (kept as text), lists past 1,000 entries, maps past 200 "
                                 "keys, text past 100,000 characters"]]
    many = extract(specs, page(PRODUCT, "http://shop.test/many.html"), plugins=plugin)
    assert [i["fields"]["n"] for i in many.items] == list(range(1000))
    assert many.errors == [["p", "plugin testshop: kept its first 1000 items, it yielded more (at most 1000 a page "
                                 "and type)"]]


def test_a_plugins_decimal_prices_are_numbers_that_where_compares(plugin):
    """A plugin's Decimal("1234.50") is the number 1234.5 (it was the text "1234.50", which a
    min/max condition never passes: the item was dropped); a Decimal no float holds stays text."""
    specs = parse_spec(f'[[item]]\ntype = "p"\nplugin = "{PLUGIN_NAME}"\n[item.where]\nprice = {{ min = 100 }}\n')
    found = extract(specs, page(PRODUCT, "http://shop.test/decimal.html"), plugins=plugin)
    assert found.dropped == []
    assert found.items == [{"type": "p", "position": 0, "fields": {
        "price": 1234.5, "tenth": 0.1, "exact": "12345678901234567890.123456789", "nan": "NaN",
        "seen": "2026-11-29"}}]


def test_each_matches_past_the_per_page_limit_are_cut_saying_so():
    html = "<ul>" + "".join(f"<li>{n}</li>" for n in range(1003)) + "</ul>"
    found = run('[[item]]\ntype = "e"\neach = "li"\n[item.fields]\nn = { css = "::text", type = "int" }', html)
    assert [i["fields"]["n"] for i in found.items] == list(range(1000))
    assert found.errors == [["e", "kept the first 1000 of the 1003 matches of its 'each' (at most 1000 a page "
                                  "and type)"]]


def test_xpath_numbers_and_booleans_give_their_xpath_string_values():
    found = run("""
[[item]]
type = "page"
[item.fields]
products = { xpath = "count(//li[@class='product'])", type = "int" }
products_text = { xpath = "count(//li[@class='product'])" }
half = { xpath = "count(//li) div 2", type = "float" }
has_h1 = { xpath = "boolean(//h1)" }
has_h5 = { xpath = "boolean(//h5)" }
""")
    assert found.items[0]["fields"] == {"products": 3, "products_text": "3", "half": 1.5, "has_h1": "true",
                                        "has_h5": "false"}


def test_json_safe_keeps_what_json_and_msgpack_hold_and_makes_the_rest_strings():
    from gridcrawl.protocol import json_safe
    value = {"a": [1, 2**63 - 1, -2**63, 2**63, -2**63 - 1, 1.5, float("nan"), float("inf")], 3: {"t": True},
             "s": "x", "n": None}
    assert json_safe(value) == {"a": [1, 2**63 - 1, -2**63, str(2**63), str(-2**63 - 1), 1.5, "nan", "inf"],
                                "3": {"t": True}, "s": "x", "n": None}


@pytest.mark.parametrize("text, as_int, as_float", [
    ("12", 12, 12.0), (" -3 ", -3, -3.0), ("1.5", None, 1.5),
    ("1.234", None, 1.234),              # a plain number is read as Python reads it, for both types
    ("1.234,50 €", None, 1234.5), ("$7", 7, 7.0), ("-€2", -2, -2.0),
    ("free", None, None), ("Free shipping", None, None), ("n/a", None, None),   # no digit: no number
    ("inf", None, None), ("nan", None, None),
    ("123456789012345678901234567890", None, 1.2345678901234568e29),   # past 64 bits: no int
    ("9223372036854775807", 2**63 - 1, 9.223372036854776e18), ("1e400", None, None),
    ("CHF 1’234.50", None, 1234.5), ("Fr. 1’234.–", 1234, 1234.0),   # a typographic apostrophe: was 1
    ("CHF 1'234.50", None, 1234.5), ("12.5%", None, 12.5), ("20%", 20, 20.0),   # 12.5% was 12
])
def test_numbers_convert_alike_as_int_and_float_and_words_are_dropped(text, as_int, as_float):
    from gridcrawl.items import _number
    assert _number(text, True) == as_int and _number(text, False) == as_float
    assert type(_number(text, False)) in (float, type(None))


def test_a_plugin_running_late_does_not_hold_the_other_pages_of_its_executor(plugin, site_server):
    """Plugins ran inside the executor's parse gate (``parse_threads``, 1): one that waited out
    its plugin_timeout held every other page of the executor back (99 pages: 82 s instead of
    0.6). The gate is let go before a plugin runs."""
    import threading
    from gridcrawl.executor.fetch import Fetcher
    from gridcrawl.executor.page import visit
    from gridcrawl.items import spec_to_wire
    from sites import Site

    server = site_server(Site(pages={"/slow.html": PRODUCT.encode(), "/p/1.html": PRODUCT.encode()}))
    instruction = {"items": [spec_to_wire(s) for s in parse_spec(f'[[item]]\ntype = "p"\nplugin = "{PLUGIN_NAME}"')]}
    fetcher = Fetcher(user_agent="gridcrawl-test", connect_timeout=2.0, read_timeout=5.0)
    acquired = threading.Event()

    class Gate:  # the executor's semaphore, saying when it is first taken
        def __init__(self):
            self.semaphore = threading.BoundedSemaphore(1)

        def __enter__(self):
            self.semaphore.acquire()
            acquired.set()

        def __exit__(self, *exc):
            self.semaphore.release()

    gate, finished = Gate(), []

    def work(path):
        page = visit(fetcher, server.url(path), instruction=instruction, parse_gate=gate, plugins=plugin,
                     plugin_timeout=3.0)
        finished.append((path, page))

    slow = threading.Thread(target=work, args=("/slow.html",))
    slow.start()
    assert acquired.wait(10)
    work("/p/1.html")
    slow.join(10)
    assert [path for path, _ in finished] == ["/p/1.html", "/slow.html"]
    pages = dict(finished)
    assert pages["/p/1.html"].items[0]["fields"]["sku"] == "Z9"
    assert "TimeoutError" in pages["/slow.html"].item_errors[0][1]


def test_a_plugin_that_does_not_load_is_not_offered(plugin, tmp_path, monkeypatch):
    """An entry point whose module fails to import, or that names no function, was declared as
    ``plugin:NAME``: threads went to that executor and failed every page's items instead of
    waiting for one where the plugin works."""
    from gridcrawl.plugins import loadable
    info = tmp_path / "broken-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: broken\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[gridcrawl.extractors]\nbadimport = gridcrawl_no_such_module:extract\n"
                                           "notcallable = gridcrawl_testplugin:__name__\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    found = installed_plugins()
    assert {"testshop", "badimport", "notcallable"} <= set(found)
    ok, problems = loadable(found)
    assert set(ok) == {"testshop"} and capabilities(ok) == [f"plugin:{PLUGIN_NAME}", f"plugin:{PLUGIN_NAME}@{PLUGIN_VERSION}"]
    assert sorted(problems) == [
        "plugin badimport cannot load: ModuleNotFoundError: No module named 'gridcrawl_no_such_module'",
        "plugin notcallable cannot load: its entry point names a str, not a function"]


def test_a_pattern_that_backtracks_without_end_fails_its_items_only():
    """A field's ``re`` or a ``where`` of ``(a|aa)+$`` on a text of 60 a's and a b backtracks for
    ever; Python's ``re`` held the GIL the whole time (the executor's every thread, heartbeats
    too, stood still). The match stops at its time limit (gridcrawl.patterns): that spec's items
    fail naming the pattern, the other specs' items are kept."""
    html = f"<html><head><title>{'a' * 60}b</title></head><body><h1>Sale</h1></body></html>"
    found = run("""
[[item]]
type = "slow"
[item.fields]
title = { css = "title::text", re = "(a|aa)+$" }
[[item]]
type = "slow_where"
where = { title = { re = "(a|aa)+$" } }
[item.fields]
title = { css = "title::text" }
[[item]]
type = "fast"
[item.fields]
heading = { css = "h1::text" }
""", html)
    assert [item["type"] for item in found.items] == ["fast"]
    assert [kind for kind, _ in found.errors] == ["slow", "slow_where"], found.errors
    assert all("regular expression '(a|aa)+$' was stopped after 1 s" in why for _, why in found.errors)
    spec = parse_spec('[[item]]\ntype = "u"\nurl = "(a|aa)+$"\n[item.fields]\nt = { css = "title::text" }', "t.toml")[0]
    assert not spec.applies_to(f"http://shop.test/{'a' * 60}b", None)  # said once in a WARNING, left out
    assert "was stopped after 1 s" in spec.why_not(f"http://shop.test/{'a' * 60}b", None)
