"""Items in the crawl database (client/items.py, CrawlStore.apply): stored once per (page, type,
position) however often a page comes back, hostile entries dropped, the per-field figures, the
spec kept for a resume, exports — and the SQL examples of docs/items.md run against real
PostgreSQL and MariaDB servers (the SQL Server ones parsed as T-SQL)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import sqlalchemy as sa

from gridcrawl import protocol as p
from gridcrawl.client.items import ItemExportError, export_items, item_summary, save_spec, stored_spec
from gridcrawl.client.store import CrawlStore, Outcome, Pending, Scope, Strategy
from gridcrawl.db import open_database
from gridcrawl.items import parse_spec
from gridcrawl.urls import fingerprint

SPEC = """
[[item]]
type = "product"
each = "li"
[item.fields]
name = { css = "b::text", required = true }
price = { css = "i::text", type = "float" }
colour = { css = "u::text" }
[[item]]
type = "sql_command"
[item.fields]
command = { css = "h1::text" }
purpose = { css = "p::text" }
synopsis = { css = "pre::text", many = true }
"""
DOCS = Path(__file__).resolve().parent.parent / "docs" / "items.md"


def outcome(thread_id: int, url: str, items=(), misses=(), errors=()) -> Outcome:
    page = p.PageResult(url=url, final_url=url, status=200, content="<html></html>", items=list(items),
                        item_misses=list(misses), item_errors=list(errors))
    return Outcome(Pending(thread_id, url, fingerprint(url), 0), page, "ex", 1, False)


def product(position: int, name: str, price: float) -> dict:
    # in the keys' order, as a crawl's results deliver them: the CSV's columns follow the spec's order
    return {"type": "product", "position": position, "fields": {"colour": None, "name": name, "price": price}}


def fill(store: CrawlStore) -> None:
    a, b = "http://shop.test/list/1.html", "http://shop.test/list/2.html"
    first = outcome(1, a, [product(0, "Kettle", 24.5), product(1, "Mug", 7.0)], misses=[["product", 2, "name"]])
    store.apply([first, outcome(2, b, [product(0, "Spoon", 1.5), {"type": "nope", "position": 0, "fields": {}},
                                       {"type": "product", "position": -1, "fields": {}}, "junk",
                                       {"type": "product", "position": True, "fields": {}}],
                                errors=[["product", "plugin x: RuntimeError: boom"], ["other", "x"]])],
                Scope(["shop.test"]))
    store.apply([first], Scope(["shop.test"]))   # delivered again: nothing twice
    store.apply([outcome(3, "http://pg.test/sql-select.html",
                         [{"type": "sql_command", "position": 0,
                           "fields": {"command": "SELECT", "purpose": "retrieve rows",
                                      "synopsis": ["SELECT a", "TABLE t"]}}])], Scope(["pg.test"]))


@pytest.fixture
def store(tmp_path) -> CrawlStore:
    return CrawlStore(open_database(f"sqlite:///{tmp_path}/c.db"), Strategy(items=parse_spec(SPEC)))


def test_items_are_stored_once_and_hostile_entries_dropped(store):
    fill(store)
    with store.engine.connect() as conn:
        rows = conn.execute(sa.text("SELECT type, url, position, fields FROM item ORDER BY url, position")).all()
        issues = conn.execute(sa.text("SELECT type, position, field, kind, message FROM item_issue ORDER BY id")).all()
    assert [(r.type, r.url.rsplit("/", 1)[1], r.position) for r in rows] == [
        ("sql_command", "sql-select.html", 0), ("product", "1.html", 0), ("product", "1.html", 1), ("product", "2.html", 0)]
    assert json.loads(rows[1].fields) == {"name": "Kettle", "price": 24.5, "colour": None}
    assert sorted(tuple(i) for i in issues) == [("product", -1, "", "error", "plugin x: RuntimeError: boom"),
                                                ("product", 2, "name", "missing", None)]


def test_figures_per_type_and_field(store):
    fill(store)
    product_figures = next(t for t in item_summary(store.engine, store.strategy.items) if t.type == "product")
    assert (product_figures.items, product_figures.pages, product_figures.errors) == (3, 2, 1)
    assert {f.name: (f.filled, f.missed) for f in product_figures.fields.values()} == \
        {"name": (3, 1), "price": (3, 0), "colour": (0, 0)}
    assert product_figures.never_matched == ["colour"]


def test_the_spec_is_kept_for_a_resume(store):
    assert stored_spec(store.engine) == []
    save_spec(store.engine, "shop.toml", SPEC)
    save_spec(store.engine, "shop.toml", SPEC)
    assert stored_spec(store.engine) == parse_spec(SPEC)


def test_an_interrupted_reextraction_leaves_the_items_and_the_spec_as_they_were(store):
    """gridcrawl extract deleted every item first, then wrote batch by batch: a Ctrl-C, a crash
    or a hanging plugin mid-run left the crawl with no items (and the old spec). One
    transaction now: interrupted, nothing changed; finished, the new items and spec."""
    from gridcrawl.client.items import reextract
    fill(store)
    save_spec(store.engine, "shop.toml", SPEC)
    query = "SELECT type, url, position, fields FROM item ORDER BY url, type, position"
    with store.engine.connect() as conn:
        before = conn.execute(sa.text(query)).all()
        issues_before = conn.execute(sa.text("SELECT COUNT(*) FROM item_issue")).scalar()
    assert before and issues_before
    other = '[[item]]\ntype = "heading"\n[item.fields]\ntext = { css = "title::text" }\n'

    def interrupt(done, total):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        reextract(store.engine, parse_spec(other), batch=1, on_progress=interrupt, spec=("other.toml", other))
    with store.engine.connect() as conn:
        assert conn.execute(sa.text(query)).all() == before
        assert conn.execute(sa.text("SELECT COUNT(*) FROM item_issue")).scalar() == issues_before
    assert stored_spec(store.engine) == parse_spec(SPEC)
    done = reextract(store.engine, parse_spec(other), batch=1, spec=("other.toml", other))
    assert done.pages == 3 and stored_spec(store.engine) == parse_spec(other)
    with store.engine.connect() as conn:
        assert {r.type for r in conn.execute(sa.text(query)).all()} <= {"heading"}


def test_a_reextraction_whose_spec_renders_says_the_stored_pages_were_not_rendered(tmp_path):
    """A spec with render = true over a crawl stored without --render found 0 items and said
    "never matched" with no hint: the stored bodies are the HTML as served, before any script ran."""
    import subprocess
    import sys
    from gridcrawl.client.items import reextract
    store = CrawlStore(open_database(f"sqlite:///{tmp_path}/c.db"))
    shell = '<html><body><div id="app"></div><script>app.innerHTML = "<h1>Kettle</h1>"</script></body></html>'
    built = '<html><body><div id="app"><h1>Kettle</h1></div></body></html>'
    pages = []
    for n, (content, seconds) in enumerate([(shell, None), (shell, None), (built, 0.4)], 1):
        page = p.PageResult(url=f"http://shop.test/{n}.html", final_url=f"http://shop.test/{n}.html", status=200,
                            content=content, render_seconds=seconds)
        pages.append(Outcome(Pending(n, page.url, fingerprint(page.url), 0), page, "ex", 1, False))
    store.apply(pages, Scope(["shop.test"]))
    spec = '[[item]]\ntype = "product"\nrender = true\n[item.fields]\nname = { css = "h1::text", required = true }\n'
    done = reextract(store.engine, parse_spec(spec))
    assert (done.items, done.unrendered) == (1, {"product": 2})
    unrendered = reextract(store.engine, parse_spec(spec.replace("render = true\n", "")))
    assert unrendered.unrendered == {}, "a spec that does not render asks nothing of the stored pages"
    (tmp_path / "spec.toml").write_text(spec)
    proc = subprocess.run([sys.executable, "-m", "gridcrawl", "extract", "--db", f"sqlite:///{tmp_path}/c.db",
                           "--extract", str(tmp_path / "spec.toml"), "--no-progress"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert ("note: item type 'product' asks for rendering (render = true), but 2 of the stored pages it applies to "
            "were not rendered (document.render_seconds is NULL: the crawl ran without --render)") in proc.stderr


def test_a_reextraction_naming_a_plugin_not_installed_here_is_refused_and_keeps_the_items(store, tmp_path):
    """gridcrawl extract with a spec naming a plugin installed on the executors but not where it
    runs replaced the crawl's items with none, every page's items failing as "not installed on
    this executor". It is refused now, as gridcrawl run and fetch refuse it, the items kept."""
    import subprocess
    import sys
    fill(store)
    (tmp_path / "spec.toml").write_text('[[item]]\ntype = "review"\nplugin = "nowhere"\n')
    proc = subprocess.run([sys.executable, "-m", "gridcrawl", "extract", "--db", f"sqlite:///{tmp_path}/c.db",
                           "--extract", str(tmp_path / "spec.toml"), "--no-progress"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("error: plugin 'nowhere' is not installed in this Python environment"), proc.stderr
    assert "gridcrawl extract runs the plugins of this Python environment" in proc.stderr
    with store.engine.connect() as conn:
        assert conn.execute(sa.text("SELECT count(*) FROM item")).scalar() == 4


def test_a_reextraction_of_a_crawl_still_running_is_refused_and_keeps_the_items(store, tmp_path):
    """gridcrawl extract on a crawl database a crawler was crawling into replaced its items and
    stored spec while the crawl went on storing items by the spec it started with: the two
    mixed, under the new spec's name. It is refused now, naming the crawler (the crawler lock's
    holder), the items kept; once the crawl ended it runs."""
    import subprocess
    import sys
    from gridcrawl.client.cli import _lock_crawl
    fill(store)
    (tmp_path / "spec.toml").write_text('[[item]]\ntype = "product"\n[item.fields]\nname = { css = "h1::text" }\n')
    url = f"sqlite:///{tmp_path}/c.db"
    command = [sys.executable, "-m", "gridcrawl", "extract", "--db", url, "--extract", str(tmp_path / "spec.toml"),
               "--no-progress"]
    lock = _lock_crawl(url, store)  # as a crawler holds it
    try:
        proc = subprocess.run(command, capture_output=True, text=True, timeout=60)
    finally:
        lock.close()
    assert proc.returncode == 2, proc.stderr
    assert re.match(r"error: a crawl is still running on this database \(gridcrawl-client, pid \d+[^)]*\): "
                    r"gridcrawl extract replaces the crawl's items and item spec", proc.stderr), proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    with store.engine.connect() as conn:
        assert conn.execute(sa.text("SELECT count(*) FROM item")).scalar() == 4
    proc = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr


def test_a_reextraction_naming_a_page_type_the_crawl_never_gave_is_refused_and_keeps_the_items(store, tmp_path):
    """gridcrawl extract with a spec whose page_type the crawl's pages do not have (written for
    a rules crawl, run on one without rules) replaced the crawl's items with none ("none found:
    no page it applies to"). It is refused now, as gridcrawl run refuses it, the items kept; a
    page type the crawl's stored rules give is taken."""
    import subprocess
    import sys
    from gridcrawl.rules import parse_toml, validate_rules
    fill(store)
    (tmp_path / "spec.toml").write_text('[[item]]\ntype = "product"\npage_type = "detail"\n'
                                        '[item.fields]\nname = { css = "h1::text" }\n')
    command = [sys.executable, "-m", "gridcrawl", "extract", "--db", f"sqlite:///{tmp_path}/c.db",
               "--extract", str(tmp_path / "spec.toml"), "--no-progress"]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr == (f"error: invalid item spec: {tmp_path / 'spec.toml'}: item 1 (product): page_type 'detail' "
                           "is no page type of this crawl: page types come from keep/follow rules (--rules), and "
                           "without them only the seeds have one, 'base'\n")
    with store.engine.connect() as conn:
        assert conn.execute(sa.text("SELECT count(*) FROM item")).scalar() == 4
    store.save_rules(validate_rules(parse_toml('base_url = "http://shop.test/"\n[[rule]]\nrule_type = "follow"\n'
                                               'from_type = "base"\nto_type = "detail"\n')))
    proc = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr


def test_export_jsonl_and_csv(store, tmp_path):
    fill(store)
    save_spec(store.engine, "shop.toml", SPEC)
    assert export_items(store.engine, str(tmp_path / "all.jsonl")).items == 4
    lines = [json.loads(line) for line in (tmp_path / "all.jsonl").read_text().splitlines()]
    (sql,) = [line for line in lines if line["type"] == "sql_command"]
    assert sql["fields"]["synopsis"] == ["SELECT a", "TABLE t"] and sql["position"] == 0
    assert sql["extracted_at"].endswith("Z")  # UTC, written as the pages' times are
    assert export_items(store.engine, str(tmp_path / "p.csv"), "csv", "product").items == 3
    header, *rows = (tmp_path / "p.csv").read_text().splitlines()
    assert header == "type,url,position,extracted_at,name,price,colour"
    (kettle,) = [row for row in rows if ",Kettle," in row]
    assert kettle.startswith("product,http://shop.test/list/1.html,0,") and kettle.endswith(",Kettle,24.5,")
    with pytest.raises(ItemExportError, match=r"--type 'prodcut': this crawl has no items of that type "
                                              r"\(its types: product, sql_command\)"):
        export_items(store.engine, str(tmp_path / "typo.csv"), "csv", "prodcut")
    assert not (tmp_path / "typo.csv").exists()
    # a field named as a fixed column (a plugin's "url") gets a column of its own
    store.apply([outcome(9, "http://shop.test/p/9.html", [{"type": "product", "position": 0,
                                                           "fields": {"name": "Pan", "url": "/p/9"}}])],
                Scope(["shop.test"]))
    export_items(store.engine, str(tmp_path / "clash.csv"), "csv", "product")
    import csv
    with open(tmp_path / "clash.csv", newline="") as f:
        table = list(csv.DictReader(f))
    assert list(table[0]) == ["type", "url", "position", "extracted_at", "name", "price", "colour", "field.url"]
    (pan,) = [row for row in table if row["name"] == "Pan"]
    assert (pan["url"], pan["field.url"]) == ("http://shop.test/p/9.html", "/p/9")


def doc_queries(dialect: str) -> list[str]:
    """The SQL blocks of docs/items.md marked ``<!-- dialect -->``."""
    return re.findall(rf"<!-- {dialect} -->\n```sql\n(.*?)```", DOCS.read_text(), re.S)


def test_the_sql_server_examples_are_t_sql():
    sqlglot = pytest.importorskip("sqlglot")
    queries = doc_queries("sqlserver")
    assert len(queries) == 2
    for query in queries:
        assert sqlglot.parse_one(query, read="tsql") is not None


def run_examples(url: str, dialect: str) -> list[list]:
    engine = open_database(url)
    store = CrawlStore(engine, Strategy(items=parse_spec(SPEC)))
    fill(store)
    with engine.connect() as conn:
        return [[tuple(row) for row in conn.exec_driver_sql(query)] for query in doc_queries(dialect)]


def test_the_postgresql_examples_run(postgres_url):
    commands, cheap, synopses = run_examples(postgres_url, "postgresql")
    assert commands == [("SELECT", "retrieve rows")]
    assert cheap == [("http://shop.test/list/2.html", "Spoon", 1.5), ("http://shop.test/list/1.html", "Mug", 7.0)]
    assert synopses == [("SELECT", "SELECT a"), ("SELECT", "TABLE t")]


def test_the_sql_server_json_value_examples_run_on_mariadb(mariadb_url):
    commands, cheap = run_examples(mariadb_url, "sqlserver")
    assert commands == [("SELECT", "retrieve rows")]
    assert [(u, n, float(x)) for u, n, x in cheap] == [("http://shop.test/list/2.html", "Spoon", 1.5),
                                                      ("http://shop.test/list/1.html", "Mug", 7.0)]


def test_a_page_visited_again_gets_its_new_items_and_a_304_keeps_the_old(store):
    url = "http://shop.test/list/9.html"
    first = outcome(1, url, [product(0, "Kettle", 24.5), product(1, "Mug", 7.0)])
    first.page.encoding = "utf-8"
    store.apply([first], Scope(["shop.test"]))
    again = outcome(2, url, [product(0, "Teapot", 30.0)], misses=[["product", 1, "name"]])
    again.page.encoding = "utf-8"   # parsed again: a changed page
    store.apply([again], Scope(["shop.test"]))
    not_modified = outcome(3, url)
    not_modified.page.status, not_modified.page.content = 304, None
    store.apply([not_modified], Scope(["shop.test"]))
    with store.engine.connect() as conn:
        rows = conn.execute(sa.text("SELECT position, fields FROM item")).all()
        issues = conn.execute(sa.text("SELECT position, field FROM item_issue")).all()
    assert [(r.position, json.loads(r.fields)["name"]) for r in rows] == [(0, "Teapot")]
    assert [tuple(i) for i in issues] == [(1, "name")]


def test_a_changed_spec_on_a_crawl_with_items_warns_that_old_items_stay(store, tmp_path, caplog):
    from gridcrawl.client.cli import resolve_items, save_item_spec

    def given(path):  # what a run given --extract PATH does with it
        specs = resolve_items(store, str(path))
        save_item_spec(store, str(path), specs)
        return specs
    fill(store)
    spec = tmp_path / "shop.toml"
    spec.write_text(SPEC)
    assert given(spec) == parse_spec(SPEC)
    assert not [r for r in caplog.records if r.levelname == "WARNING"]  # the first spec, or the same again
    assert given(spec) == parse_spec(SPEC)
    assert not [r for r in caplog.records if r.levelname == "WARNING"]
    spec.write_text(SPEC.replace('colour = { css = "u::text" }', 'colour = { css = "s::text" }'))
    given(spec)
    (warning,) = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert f"the item spec in {spec} changed since this crawl's 4 items were extracted" in warning
    assert f"gridcrawl extract --db sqlite:///{tmp_path}" in warning and f"--extract {spec}" in warning


def test_a_first_spec_on_a_crawl_with_pages_names_the_extract_command(store, tmp_path, caplog):
    """A crawl begun without --extract, resumed with one: its stored pages are not parsed
    again, so they keep no items, and nothing said so (the items table said "none found: no
    page it applies to" of the list page it applies to)."""
    from gridcrawl.client.cli import resolve_items, save_item_spec
    spec = tmp_path / "shop.toml"
    spec.write_text(SPEC)
    store.apply([outcome(1, "http://shop.test/list/1.html"), outcome(2, "http://shop.test/list/2.html")],
                Scope(["shop.test"]))
    save_item_spec(store, str(spec), resolve_items(store, str(spec)))
    (warning,) = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert warning == (f"the item spec in {spec} is new to this crawl's 2 stored pages, which keep no items unless "
                       f"visited again; gridcrawl extract --db sqlite:///{tmp_path}/c.db --extract {spec} applies "
                       "it to every stored page")
    caplog.clear()
    save_item_spec(store, str(spec), resolve_items(store, str(spec)))  # the same spec again: said once
    assert not [r for r in caplog.records if r.levelname == "WARNING"]


def test_a_page_set_aside_as_a_duplicate_or_noindex_stores_no_items(store):
    """The same list under two URLs: the second is a duplicate (same body digest) and stored its
    items too, so products counted twice, and a re-extraction from the stored bodies (the
    duplicate keeps none) gave other counts than the crawl."""
    def page(thread_id, url, **extra):
        result = p.PageResult(url=url, final_url=url, status=200, content="<html></html>", digest="d1",
                              items=[product(0, "Kettle", 24.5)], **extra)
        return Outcome(Pending(thread_id, url, fingerprint(url), 0), result, "ex", 1, False)

    scope = Scope(["shop.test"])
    store.apply([page(1, "http://shop.test/list/0.html")], scope)
    store.apply([page(2, "http://shop.test/list/0.html?from=side"),
                 page(3, "http://shop.test/hidden.html", noindex=True)], scope)
    with store.engine.connect() as conn:
        urls = conn.execute(sa.text("SELECT url FROM item")).scalars().all()
        kinds = dict(conn.execute(sa.text("SELECT url, error_kind FROM visited_url")).all())
    assert kinds["http://shop.test/list/0.html?from=side"] == "duplicate"
    assert kinds["http://shop.test/hidden.html"] == "noindex"
    assert urls == ["http://shop.test/list/0.html"]


def test_report_writes_item_and_error_counts_with_thousands_separators(tmp_path):
    """``gridcrawl report --crawl-db`` wrote "URLs visited 2,345" but the items and the errors by
    kind as "1234" and "2345": every count of the report now has its separators."""
    import datetime as dt
    from typer.testing import CliRunner
    from gridcrawl import models
    from gridcrawl.cli import app
    from gridcrawl.db import init_schema
    url = f"sqlite:///{tmp_path / 'crawl.db'}"
    engine = open_database(url)
    init_schema(engine, models.crawl_metadata, models.crawl_meta)
    now = dt.datetime(2026, 11, 30)
    with engine.begin() as conn:
        conn.execute(models.item.insert(), [
            {"type": "product", "fingerprint": f"f{i}", "url": f"http://x.test/{i}", "position": 0,
             "fields": json.dumps({"name": "kettle", "price": None}), "extracted_at": now} for i in range(1234)])
        conn.execute(models.visited_url.insert(), [
            {"url": f"http://x.test/{i}", "fingerprint": f"f{i}", "depth": 1, "status": 404,
             "error_kind": "http_status", "error": "HTTP 404", "attempts": 1, "visited_at": now} for i in range(2345)])
    result = CliRunner().invoke(app, ["report", "--crawl-db", url], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    rows = {line.split("│")[1].strip() or line.split("│")[2].strip(): [cell.strip() for cell in line.split("│")[2:-1]]
            for line in result.output.splitlines() if line.count("│") > 2}
    assert rows["product"][1] == "1,234" and rows["name"][2:4] == ["1,234", "0"], result.output
    assert rows["http 404"][0] == "2,345", result.output
