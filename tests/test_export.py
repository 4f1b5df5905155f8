"""``gridcrawl export``: JSON lines, CSV and WARC 1.1 of a real crawl, read back with standard
tools (warcio's ArchiveIterator, the csv and json modules)."""

from __future__ import annotations

import base64
import csv
import gzip
import hashlib
import io
import json
import re
import os
import stat
import subprocess
import sys

import pytest
import sqlalchemy as sa
from warcio.archiveiterator import ArchiveIterator

from gridcrawl import models
from gridcrawl.client.store import CrawlStore, Outcome
from gridcrawl.db import open_database
from gridcrawl.export import ExportError, export, export_warc
from gridcrawl.protocol import PageResult
from gridcrawl.urls import canonical_url, fingerprint
from grid import Grid, run_at_once
from sites import Site

PNG = bytes.fromhex("89504e470d0a1a0a0000000d4948445200000001000000010806000000") + bytes(range(256))
# with two of the five bytes Python's cp1252 leaves undefined (WHATWG's windows-1252: U+0081, U+009D):
# they were stored as U+FFFD and archived as "?"
LATIN = "<html><head><title>caf\xe9</title></head><body>na\xefve cr\xe8me \x81\x9d</body></html>".encode("iso-8859-1")


def make_site() -> Site:
    """Four pages: UTF-8 HTML with a custom header, Latin-1 HTML, a PNG, and a link to a 404."""
    site = Site()
    site.pages["/"] = ('<html><head><title>home \u2713</title></head><body>'
                      '<a href="/latin.html">l</a> <a href="/pic.png">p</a> <a href="/gone.html">g</a>'
                      '</body></html>').encode("utf-8")

    def home(h) -> None:
        h.send_response(200)  # two Set-Cookie headers: one line each in the WARC (not folded into one)
        for name, value in (("Content-Type", "text/html; charset=utf-8"), ("X-Gridcrawl-Test", "yes"),
                            ("Cache-Control", "max-age=60"), ("Set-Cookie", "a=1; Path=/"),
                            ("Set-Cookie", "b=2; Path=/"), ("Content-Length", str(len(site.pages["/"])))):
            h.send_header(name, value)
        h.end_headers()
        h.wfile.write(site.pages["/"])

    site.extra["/"] = home
    site.pages["/latin.html"] = LATIN
    site.types["/latin.html"] = "text/html; charset=iso-8859-1"
    site.pages["/pic.png"] = PNG
    site.types["/pic.png"] = "image/png"
    return site


@pytest.fixture(scope="module")
def crawl(tmp_path_factory):
    """A finished crawl of :func:`make_site` by the real programs (bodies of non-HTML kept)."""
    from sites import SiteServer
    tmp = tmp_path_factory.mktemp("export")
    site = make_site()
    server = SiteServer(site).start()
    grid = Grid(tmp)
    try:
        grid.start_manager()
        grid.start_executor("ex1", "--threads", "2", "--keep-non-html")
        client = grid.start_client(server.url("/"))
        assert client.wait(timeout=90) == 0, grid.log("client.log")
    finally:
        grid.stop()
        server.stop()
    return {"grid": grid, "server": server, "site": site, "db": grid.crawl_db, "tmp": tmp}


def served(crawl, path: str) -> bytes:
    return crawl["site"].pages[path]


def test_warc_has_request_and_response_records_with_headers_and_the_served_bodies(crawl):
    engine = open_database(crawl["db"])
    out = crawl["tmp"] / "crawl.warc.gz"
    result = export(engine, "warc", str(out))
    assert (result.records, result.skipped, result.altered) == (3, 0, 0)
    with open(out, "rb") as fh:
        assert fh.read(2) == b"\x1f\x8b"  # gzip, per record
    with open(out, "rb") as fh:
        records = list(_records(fh))
    assert records[0]["type"] == "warcinfo" and records[0]["version"] == "WARC/1.1"
    responses = {r["uri"]: r for r in records if r["type"] == "response"}
    requests = [r for r in records if r["type"] == "request"]
    base = crawl["server"].url
    assert set(responses) == {canonical_url(base(p)) for p in ("/", "/latin.html", "/pic.png")}
    assert len(requests) == 3
    for r in records[1:]:
        assert r["version"] == "WARC/1.1" and r["date"].endswith("Z") and "." in r["date"]  # 1.1: microseconds
    by_id = {r["id"]: r for r in responses.values()}
    for req in requests:
        response = by_id[req["concurrent_to"]]                    # each request names its response
        assert req["uri"] == response["uri"]
        assert req["http_line"].startswith("GET /") and req["http_line"].endswith(" HTTP/1.1")
        assert req["http_headers"]["host"] == base("/").split("//")[1].rstrip("/")
        assert "user-agent" not in req["http_headers"]  # not recorded by the crawl: not made up
    home = responses[canonical_url(base("/"))]
    assert home["status"] == "200" and home["http_line"] == "HTTP/1.1 200 OK"
    assert home["http_headers"]["x-gridcrawl-test"] == "yes"
    assert home["http_headers"]["cache-control"] == "max-age=60"
    assert home["set_cookies"] == ["a=1; Path=/", "b=2; Path=/"]
    assert home["http_headers"]["content-type"] == "text/html; charset=utf-8"
    assert home["payload"] == served(crawl, "/")
    latin = responses[canonical_url(base("/latin.html"))]
    assert latin["payload"] == LATIN                             # re-encoded in its charset: identical
    assert latin["http_headers"]["content-length"] == str(len(LATIN))
    pic = responses[canonical_url(base("/pic.png"))]
    assert pic["payload"] == PNG and pic["http_headers"]["content-type"] == "image/png"
    assert all(r["digest_ok"] for r in responses.values())


def _records(fh):
    for record in ArchiveIterator(fh):
        rec = {"type": record.rec_type, "version": record.rec_headers.protocol,
               "uri": record.rec_headers.get_header("WARC-Target-URI"),
               "id": record.rec_headers.get_header("WARC-Record-ID"),
               "date": record.rec_headers.get_header("WARC-Date"),
               "concurrent_to": record.rec_headers.get_header("WARC-Concurrent-To")}
        if record.http_headers is not None:
            # warcio splits the first line at its first space: "HTTP/1.1" + "200 OK", "GET" + "/ HTTP/1.1"
            rec["http_line"] = f"{record.http_headers.protocol} {record.http_headers.statusline}"
            rec["status"] = record.http_headers.get_statuscode()
            rec["http_headers"] = {k.lower(): v for k, v in record.http_headers.headers}
            rec["set_cookies"] = [v for k, v in record.http_headers.headers if k.lower() == "set-cookie"]
        payload = record.content_stream().read()
        rec["payload"] = payload
        digest = record.rec_headers.get_header("WARC-Payload-Digest")
        if digest and record.rec_type == "response":
            import hashlib
            rec["digest_ok"] = digest == "sha1:" + base64.b32encode(hashlib.sha1(payload).digest()).decode()
        yield rec


def test_a_warc_request_records_host_never_carries_a_urls_credentials():
    import io
    from warcio.warcwriter import WARCWriter
    from gridcrawl.export import _write_exchange
    out = io.BytesIO()
    writer = WARCWriter(out, gzip=False, warc_version="1.1")
    _write_exchange(writer, {"url": "http://user:secret@127.0.0.1:8301/m.html", "status": 200}, b"<html></html>", None)
    out.seek(0)
    (request,) = [r for r in _records(out) if r["type"] == "request"]
    assert request["http_headers"]["host"] == "127.0.0.1:8301"  # was "user:secret@127.0.0.1:8301"


def test_uncompressed_warc_reads_back_too(crawl, tmp_path):
    out = tmp_path / "crawl.warc"
    export(open_database(crawl["db"]), "warc", str(out))
    with open(out, "rb") as fh:
        head = fh.read(8)
    assert head == b"WARC/1.1"
    with open(out, "rb") as fh:
        kinds = [r.rec_type for r in ArchiveIterator(fh)]
    assert kinds[0] == "warcinfo" and kinds.count("response") == 3 and kinds.count("request") == 3


def test_jsonl_has_one_document_per_line_with_metadata(crawl, tmp_path):
    out = tmp_path / "docs.jsonl"
    result = export(open_database(crawl["db"]), "jsonl", str(out))
    lines = out.read_text(encoding="utf-8").splitlines()
    assert result.records == len(lines) == 3
    docs = {d["url"]: d for d in map(json.loads, lines)}
    base = crawl["server"].url
    home = docs[canonical_url(base("/"))]
    assert home["status"] == 200 and home["title"] == "home \u2713" and home["fingerprint"] == fingerprint(home["url"])
    assert home["fetched_at"].endswith("Z") and home["executor"] and home["fetch_seconds"] >= 0
    assert home["headers"]["x-gridcrawl-test"] == "yes"
    assert home["content"] == served(crawl, "/").decode("utf-8")
    # docs/operations.md: the bytes served, from content and encoding (with 0x81 and 0x9D, which
    # Python's cp1252 refuses, so that content.encode(encoding) alone raises)
    from gridcrawl.charsets import errors_for
    latin = docs[canonical_url(base("/latin.html"))]
    assert latin["content"].encode(latin["encoding"], errors=errors_for(latin["encoding"])) == LATIN
    with pytest.raises(UnicodeEncodeError):
        latin["content"].encode(latin["encoding"])
    pic = docs[canonical_url(base("/pic.png"))]
    assert base64.b64decode(pic["body_base64"]) == PNG and pic["content"] is None
    out2 = tmp_path / "meta.jsonl"
    export(open_database(crawl["db"]), "jsonl", str(out2), content=False)
    for doc in map(json.loads, out2.read_text(encoding="utf-8").splitlines()):
        assert "content" not in doc and "body_base64" not in doc and doc["url"]


def test_csv_lists_every_visited_url(crawl, tmp_path):
    out = tmp_path / "visited.csv"
    result = export(open_database(crawl["db"]), "csv", str(out))
    with open(out, newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    assert result.records == len(rows) == 5   # 3 pages, the 404, the host's /sitemap.xml (none there)
    base = crawl["server"].url
    by_url = {r["url"]: r for r in rows}
    assert by_url[canonical_url(base("/gone.html"))]["status"] == "404"
    assert by_url[canonical_url(base("/gone.html"))]["error_kind"]
    assert by_url[canonical_url(base("/"))]["status"] == "200" and by_url[canonical_url(base("/"))]["error_kind"] == ""


def test_the_export_command_line(crawl, tmp_path):
    out = tmp_path / "cli.warc.gz"
    cmd = [sys.executable, "-m", "gridcrawl", "export", "--db"]
    # the manager's database is no crawl database; an unknown format (the three at once)
    done, bad, unknown = run_at_once([*cmd, crawl["db"], "--format", "warc", str(out)],
                                     [*cmd, crawl["grid"].manager_db, "--format", "csv", str(tmp_path / "x.csv")],
                                     [*cmd, crawl["db"], "--format", "pdf", str(tmp_path / "x.pdf")])
    assert done.returncode == 0, done.stderr
    assert "exported 3 pages" in done.stderr
    with gzip.open(out, "rb") as fh:
        assert fh.read(8) == b"WARC/1.1"
    # the manager's database is no crawl database: one line, exit status 2
    assert bad.returncode == 2 and bad.stderr.startswith("error: ")
    assert "is a manager database (WORKDIR/manager.db), not a crawl database" in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1
    assert unknown.returncode == 2 and "unknown format 'pdf'" in unknown.stderr


def test_without_format_the_output_files_name_chooses_it(crawl, tmp_path):
    """`gridcrawl export --db DB pages.warc.gz` writes a WARC, `visited.csv` a CSV: a file is
    never given one format's name and another's content (it wrote JSON lines into both)."""
    exports = (("pages.warc.gz",), ("pages.WARC",), ("visited.csv",), ("pages.jsonl",),
               ("pages.csv", "--format", "jsonl"), ("items.warc", "--items"), ("pages.nt",),
               ("pages.x", "--format", "nt"))
    done = run_at_once(*([sys.executable, "-m", "gridcrawl", "export", "--db", crawl["db"], *extra, str(tmp_path / name)]
                         for name, *extra in exports))  # each to a file of its own: all at once
    export = dict(zip((name for name, *_ in exports), done))
    assert export["pages.warc.gz"].returncode == 0
    with gzip.open(tmp_path / "pages.warc.gz", "rb") as fh:
        assert fh.read(8) == b"WARC/1.1"
    assert export["pages.WARC"].returncode == 0
    assert (tmp_path / "pages.WARC").read_bytes().startswith(b"WARC/1.1")
    assert export["visited.csv"].returncode == 0
    assert (tmp_path / "visited.csv").read_text().startswith("id,url,fingerprint,")
    assert export["pages.jsonl"].returncode == 0
    assert json.loads((tmp_path / "pages.jsonl").read_text().splitlines()[0])["url"].startswith("http://")
    assert export["pages.csv"].returncode == 0  # a format given is obeyed
    assert (tmp_path / "pages.csv").read_text().startswith("{")
    # a name whose format cannot hold what is exported: one line, exit 2, no file
    refused = export["items.warc"]
    assert refused.returncode == 2 and not (tmp_path / "items.warc").exists()
    assert refused.stderr == (f"error: {tmp_path / 'items.warc'}: a .warc file is WARC, which the items are not "
                              "exported as: give --format jsonl or csv, or another file name\n")
    assert export["pages.nt"].stderr == (f"error: {tmp_path / 'pages.nt'}: a .nt file is N-Triples, which the pages "
                                         "are not exported as: give --format jsonl or warc or csv, or another file "
                                         "name; --triples exports the crawl's triples as N-Triples\n")
    assert "unknown format 'nt' (use jsonl, warc or csv; nt goes with --triples)" in export["pages.x"].stderr


def test_pages_crawled_without_content_are_left_out_of_a_warc(tmp_path):
    store = CrawlStore(open_database(f"sqlite:///{tmp_path / 'c.db'}"))
    url = canonical_url("http://127.0.0.1:1/a.html")
    store.add_seeds([url])
    (pending,) = store.claim(1)
    page = PageResult(url=url, final_url=url, status=200, content_type="text/html", size=10, title="a",
                      content="<p>a</p>", headers={"content-type": "text/html"})
    store.apply([Outcome(pending, page, "ex", 1, False)], store.scope([url], [], -1), store_content=False)
    buf = io.BytesIO()
    result = export_warc(store.engine, buf, gzip=False)
    assert (result.records, result.skipped) == (0, 1)
    buf.seek(0)
    assert [r.rec_type for r in ArchiveIterator(buf)] == ["warcinfo"]


def test_a_warc_export_names_the_duplicates_it_leaves_out(tmp_path):
    """A duplicate of a stored page (same body digest: a redirect to it, a mirror) has no record of
    its own; the command said "1 without a stored body left out", as of a --no-content crawl."""
    db = f"sqlite:///{tmp_path / 'c.db'}"
    store = CrawlStore(open_database(db))
    urls = [canonical_url(f"http://127.0.0.1:1/{name}.html") for name in ("a", "b")]
    store.add_seeds(urls)
    for pending in sorted(store.claim(2), key=lambda p: p.url):  # a first: the original
        page = PageResult(url=pending.url, final_url=pending.url, status=200, content_type="text/html", size=8,
                          title="a", content="<p>a</p>", digest=hashlib.sha256(b"<p>a</p>").hexdigest())
        store.apply([Outcome(pending, page, "ex", 1, False)], store.scope(urls, [], -1), store_content=True)
    result = export_warc(store.engine, io.BytesIO(), gzip=False)
    assert (result.records, result.skipped, result.duplicates) == (1, 1, 1)
    done = subprocess.run([sys.executable, "-m", "gridcrawl", "export", "--db", db, str(tmp_path / "c.warc")],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stderr == \
        f"exported 1 page to {tmp_path / 'c.warc'} (1 duplicate of stored pages left out)\n"


def test_a_warc_export_names_the_replaced_versions_it_has_no_body_for(tmp_path):
    """A recrawl without --keep-versions keeps a replaced version without its body: the export
    left it out and said "0 earlier versions" of a crawl that had one."""
    db = f"sqlite:///{tmp_path / 'c.db'}"
    store = CrawlStore(open_database(db))
    url = canonical_url("http://127.0.0.1:1/a.html")
    store.add_seeds([url])
    scope = store.scope([url], [], -1)
    for body in ("<p>one</p>", "<p>two</p>"):  # the first crawl, then a recrawl that finds it changed
        (pending,) = store.claim(1)
        page = PageResult(url=url, final_url=url, status=200, content_type="text/html", size=len(body), title="a",
                          content=body, digest=hashlib.sha256(body.encode()).hexdigest())
        store.apply([Outcome(pending, page, "ex", 1, False)], scope)
        store.queue_due(every=True)
    assert store.counts()["versions"] == 1
    done = subprocess.run([sys.executable, "-m", "gridcrawl", "export", "--db", db, str(tmp_path / "c.warc")],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stderr == (
        f"exported 1 page to {tmp_path / 'c.warc'}; 1 earlier version left out: replaced by recrawls without "
        "--keep-versions, which keep no body (give it to the recrawls to keep them)\n")


def test_a_jsonl_export_has_json_numbers_for_real_columns_on_every_back_end(db_url, tmp_path):
    """MariaDB's DOUBLE came back as Decimal, which json cannot write: ``gridcrawl export`` of a
    MariaDB crawl stopped with a traceback. Every back end reads its real columns as floats."""
    store = CrawlStore(open_database(db_url))
    url = canonical_url("http://127.0.0.1:1/a.html")
    store.add_seeds([url])
    (pending,) = store.claim(1)
    page = PageResult(url=url, final_url=url, status=200, content_type="text/html", size=10, title="a",
                      content="<p>a</p>", headers={"content-type": "text/html"}, fetch_seconds=0.125,
                      parse_seconds=0.25)
    store.apply([Outcome(pending, page, "ex", 1, False)], store.scope([url], [], -1), store_content=True)
    out = tmp_path / "pages.jsonl"
    assert export(store.engine, "jsonl", str(out)).records == 1
    (record,) = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert (record["fetch_seconds"], record["parse_seconds"]) == (0.125, 0.25)
    assert type(record["fetch_seconds"]) is float and type(record["fetch_interval"]) in (float, type(None))
    with store.engine.connect() as conn:  # any reader of the table, not the export alone
        row = conn.execute(sa.select(models.document.c.fetch_seconds, models.document.c.fetch_interval)).one()
    assert type(row.fetch_seconds) is float and row.fetch_seconds == 0.125


def test_an_export_of_a_running_crawl_says_it_is_a_snapshot(db_url, tmp_path):
    """An export of a crawl database a crawler was still crawling into said nothing of it: the
    file looked like the crawl's whole. It now warns that it is a snapshot of a running crawl,
    naming the crawler (the crawler lock's holder, asked without taking the lock), and exports."""
    from gridcrawl.client.cli import _lock_crawl
    store = CrawlStore(open_database(db_url))
    url = canonical_url("http://127.0.0.1:1/a.html")
    store.add_seeds([url])
    (pending,) = store.claim(1)
    page = PageResult(url=url, final_url=url, status=200, content_type="text/html", size=8, title="a",
                      content="<p>a</p>")
    store.apply([Outcome(pending, page, "ex", 1, False)], store.scope([url], [], -1), store_content=True)

    def exported(*extra: str) -> str:
        out = tmp_path / "out.jsonl"
        done = subprocess.run([sys.executable, "-m", "gridcrawl", "export", "--db", db_url, *extra, str(out)],
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0 and out.exists(), done.stderr
        return " ".join(done.stderr.split())

    lock = _lock_crawl(db_url, store)  # as a crawler holds it
    try:
        said = exported()
        assert re.match(r"warning: a crawl is still running on this database \(gridcrawl-client, pid \d+[^)]*\): the "
                        r"export is a "
                        r"snapshot of what it has stored so far exported 1 document to ", said), said
        assert said.startswith("warning: a crawl is still running") and "exported 0 items" in exported("--items")
    finally:
        lock.close()
        store.engine.dispose()  # a server's lock lives with its connection, which the pool keeps
    assert exported() == f"exported 1 document to {tmp_path / 'out.jsonl'}"


def test_export_refuses_unknown_formats_and_unwritable_paths(tmp_path):
    engine = open_database(f"sqlite:///{tmp_path / 'c.db'}")
    CrawlStore(engine)
    with pytest.raises(ExportError, match="unknown format"):
        export(engine, "xml", str(tmp_path / "x"))
    with pytest.raises(ExportError, match="cannot write"):
        export(engine, "jsonl", str(tmp_path / "no-such-dir" / "x.jsonl"))
    # the crawl database itself named as OUT (with --format) was replaced by its export
    with pytest.raises(ExportError, match="it is a SQLite database .* which an export never replaces"):
        export(engine, "jsonl", str(tmp_path / "c.db"))
    assert open_database(f"sqlite:///{tmp_path / 'c.db'}", existing=True)  # still a database
    with pytest.raises(ExportError, match="plain text, not gzip"):  # (was plain text under a .gz name)
        export(engine, "jsonl", str(tmp_path / "pages.jsonl.gz"))


def test_no_content_is_refused_where_it_would_be_ignored(tmp_path):
    """``--no-content`` leaves the bodies out of the pages' JSON lines only: with a WARC it was
    ignored, and a user who asked for no bodies got every one of them (exit 0)."""
    db = f"sqlite:///{tmp_path / 'c.db'}"
    CrawlStore(open_database(db))
    refused = ((["crawl.warc.gz"], "a WARC export"), (["visited.csv"], "a CSV export"),
               (["--items", "items.jsonl"], "items"), (["--triples", "t.nt"], "triples"))
    cmd = [sys.executable, "-m", "gridcrawl", "export", "--db", db, "--no-content"]
    *ran, done = run_at_once(*([*cmd, *args[:-1], str(tmp_path / args[-1])] for args, _ in refused),
                             [*cmd, str(tmp_path / "pages.jsonl")])  # each to a file of its own: all at once
    for (args, what), refusal in zip(refused, ran, strict=True):
        assert refusal.returncode == 2 and refusal.stderr.startswith(
            f"error: --no-content goes with the pages' JSON lines, not {what}: "), refusal.stderr
        assert len(refusal.stderr.splitlines()) == 1 and not (tmp_path / args[-1]).exists()
    assert done.returncode == 0 and "exported 0 documents" in done.stderr


def test_an_export_of_no_items_or_no_triples_says_why(tmp_path):
    """A crawl run without ``--extract`` exported "0 items" and said no more, though
    ``gridcrawl extract`` gets them from the stored pages; one without ``--structured-data``
    "0 triples"."""
    db = f"sqlite:///{tmp_path / 'c.db'}"
    CrawlStore(open_database(db))

    cmd = [sys.executable, "-m", "gridcrawl", "export", "--db", db]
    done, triples = run_at_once([*cmd, "--items", str(tmp_path / "items.jsonl")],
                                [*cmd, "--triples", str(tmp_path / "t.nt")])
    assert done.returncode == 0 and done.stderr == (
        f"exported 0 items to {tmp_path / 'items.jsonl'} (this crawl ran without --extract: gridcrawl extract "
        "--db DB --extract SPEC.toml extracts items from its stored pages, fetching nothing)\n")
    done = triples
    assert done.returncode == 0 and done.stderr == (
        f"exported 0 triples to {tmp_path / 't.nt'} (this crawl stored no triples: a crawl with --structured-data "
        "or --focus-ontology stores them)\n")


@pytest.fixture(scope="module")
def big_crawl(tmp_path_factory) -> str:
    """A crawl database of 100 pages of 200 KB each (a 20 MB export, written in about 0.2 s:
    long enough to pause its export mid-write). Returns its URL."""
    db = f"sqlite:///{tmp_path_factory.mktemp('big') / 'c.db'}"
    store = CrawlStore(open_database(db))
    urls = [canonical_url(f"http://127.0.0.1:1/{i}.html") for i in range(100)]
    store.add_seeds(urls)
    for pending in store.claim(len(urls)):
        page = PageResult(url=pending.url, final_url=pending.url, status=200, content_type="text/html",
                          size=200_000, title="t", content="<p>" + "x" * 200_000 + "</p>")
        store.apply([Outcome(pending, page, "ex", 1, False)], store.scope(urls, [], -1))
    return db


def _parts(out) -> list:
    """The temporary files of exports to ``out`` beside it (``OUT.XXXXXXXX.part``; ``OUT.part``
    before each export had one of its own)."""
    return sorted(p for p in out.parent.iterdir() if p.name.startswith(f"{out.name}.") and p.name.endswith(".part"))


def _pause_mid_export(proc, out):
    """Stop the export process ``proc`` (SIGSTOP) once its temporary file beside ``out`` holds
    data, and check that it stopped mid-export: that file is there and ``out`` is not. Returns
    the temporary file's path."""
    import signal
    while True:
        try:
            written = [p for p in _parts(out) if p.stat().st_size]
        except FileNotFoundError:  # renamed or deleted while listed
            written = []
        if written:
            os.kill(proc.pid, signal.SIGSTOP)
            break
        assert proc.poll() is None, "the export ended before its temporary file was seen"
    assert _parts(out) == written and not out.exists(), "the export ended before it was paused"
    return written[0]


def test_an_export_ended_by_sigterm_leaves_no_part_file(big_crawl, tmp_path):
    """``timeout 60 gridcrawl export ...`` (SIGTERM) left ``OUT.part`` behind, as large as what
    was written. The export now unwinds as on Ctrl-C, deletes it, and ends by SIGTERM. (The
    export is paused, SIGSTOP, once its temporary file holds data, so that the signal certainly
    comes mid-write.)"""
    import signal
    out = tmp_path / "pages.warc"
    proc = subprocess.Popen([sys.executable, "-m", "gridcrawl", "export", "--db", big_crawl, str(out)],
                            stderr=subprocess.PIPE, text=True)
    try:
        part = _pause_mid_export(proc, out)
        assert part.read_bytes().startswith(b"WARC/1.1")
        proc.send_signal(signal.SIGTERM)
        proc.send_signal(signal.SIGCONT)
        assert proc.wait(timeout=60) == -signal.SIGTERM, proc.stderr.read()
    finally:
        proc.kill()
        proc.wait()
    assert not list(tmp_path.iterdir())  # no OUT, no OUT.XXXXXXXX.part


def test_two_exports_to_one_file_at_once_never_mix_and_the_last_to_finish_wins_whole(big_crawl, crawl, tmp_path):
    """Two ``gridcrawl export`` to the same OUT at once (a cron job's overlapping a user's)
    wrote into the one ``OUT.part``: the second truncated the first's half-written file, wrote
    its own export there and renamed it into place; the first went on writing into OUT (the
    second's export, a hole of zero bytes, then the first's tail) and failed ("cannot write
    OUT: No such file or directory"). Each has a temporary file of its own now: the first,
    paused mid-write while the second runs from start to end, finishes last and leaves its whole
    export; no ``.part`` is left. (The second exports another crawl database, so that the two
    exports differ.)"""
    import signal
    out = tmp_path / "pages.jsonl"
    first_whole, second_whole = tmp_path / "first.jsonl", tmp_path / "second.jsonl"  # each export alone
    export(open_database(big_crawl), "jsonl", str(first_whole))
    export(open_database(crawl["db"]), "jsonl", str(second_whole))
    first = subprocess.Popen([sys.executable, "-m", "gridcrawl", "export", "--db", big_crawl, str(out)],
                             stderr=subprocess.PIPE, text=True)  # 20 MB
    try:
        part = _pause_mid_export(first, out)
        second = subprocess.run([sys.executable, "-m", "gridcrawl", "export", "--db", crawl["db"], str(out)],
                                capture_output=True, text=True, timeout=60)  # a few KB
        assert second.returncode == 0, second.stderr
        assert out.read_bytes() == second_whole.read_bytes()
        assert _parts(out) == [part]  # the first's, untouched
        first.send_signal(signal.SIGCONT)
        assert first.wait(timeout=60) == 0, first.stderr.read()
    finally:
        first.kill()
        first.wait()
    assert out.read_bytes() == first_whole.read_bytes()
    assert not _parts(out)


def test_a_crawl_writes_on_while_an_export_of_its_sqlite_database_reads_one_snapshot(big_crawl, tmp_path):
    """An export's read transaction on SQLite was ``BEGIN IMMEDIATE``: it held the database's
    write lock for the export's length, so a crawl writing the same file stood still (its
    applier waited the 30 s busy timeout, then failed) and a second export waited. Exports read
    in a deferred transaction now: with the export paused mid-write, a writer takes the write
    lock at once (here with a 2 s busy timeout) and changes every title, and the export, resumed,
    holds the titles as they were when it began (one snapshot, WAL's readers)."""
    import signal
    import sqlite3
    out = tmp_path / "pages.jsonl"
    proc = subprocess.Popen([sys.executable, "-m", "gridcrawl", "export", "--db", big_crawl, str(out)],
                            stderr=subprocess.PIPE, text=True)
    try:
        _pause_mid_export(proc, out)
        writer = sqlite3.connect(big_crawl.removeprefix("sqlite:///"), timeout=2, isolation_level=None)
        try:
            writer.execute("BEGIN IMMEDIATE")  # before: "database is locked" after 2 s
            writer.execute("UPDATE document SET title = 'changed'")
            writer.execute("COMMIT")
        finally:
            writer.close()
        proc.send_signal(signal.SIGCONT)
        assert proc.wait(timeout=60) == 0, proc.stderr.read()
    finally:
        proc.kill()
        proc.wait()
        with sqlite3.connect(big_crawl.removeprefix("sqlite:///"), isolation_level=None) as again:
            again.execute("UPDATE document SET title = 't'")  # the module's crawl as it was
    titles = [json.loads(line)["title"] for line in out.read_text().splitlines()]
    assert len(titles) == 100 and set(titles) == {"t"}


def test_an_export_to_standard_output_is_utf8_whatever_the_locale(tmp_path):
    """``gridcrawl export --db DB - > pages.jsonl`` wrote in the locale's encoding: with a
    Latin-1 one (or a Windows code page) a Japanese page stopped it with a UnicodeEncodeError
    traceback. Standard output gets UTF-8, as a file does."""
    db = f"sqlite:///{tmp_path / 'c.db'}"
    store = CrawlStore(open_database(db))
    url = canonical_url("http://127.0.0.1:1/ja.html")
    store.add_seeds([url])
    (pending,) = store.claim(1)
    page = PageResult(url=url, final_url=url, status=200, content_type="text/html", size=10, title="日本語",
                      content="<title>日本語</title>", encoding="utf-8")
    store.apply([Outcome(pending, page, "ex", 1, False)], store.scope([url], [], -1), store_content=True)
    env = {**os.environ, "PYTHONIOENCODING": "latin-1"}
    done = subprocess.run([sys.executable, "-m", "gridcrawl", "export", "--db", db, "-"], capture_output=True,
                          env=env, timeout=60)
    assert done.returncode == 0, done.stderr.decode("utf-8", "replace")
    (record,) = [json.loads(line) for line in done.stdout.decode("utf-8").splitlines()]
    assert record["title"] == "日本語" and record["content"] == "<title>日本語</title>"
    export(store.engine, "jsonl", str(tmp_path / "pages.jsonl"))
    assert done.stdout == (tmp_path / "pages.jsonl").read_bytes()  # byte for byte what a file gets


def test_an_export_goes_through_pipes_and_links_and_a_full_disk_is_one_line(crawl, tmp_path):
    """OUT a pipe (``mkfifo``, ``>(wc -l)``): the export hung, reading 16 bytes of it first. OUT
    a link (to a file, or to ``/proc/self/fd/1``): the link was replaced by a plain file, and as
    root ``/dev/full`` was. A write that fails (``/dev/full``, as a full disk): one
    line, exit 2; it was a 36-line traceback."""
    import threading
    cmd = [sys.executable, "-m", "gridcrawl", "export", "--db", crawl["db"], "--format", "csv"]
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    read: list[bytes] = []
    reader = threading.Thread(target=lambda: read.append(fifo.read_bytes()))
    reader.start()
    done = subprocess.run([*cmd, str(fifo)], capture_output=True, text=True, timeout=60)
    reader.join(60)
    assert done.returncode == 0, done.stderr
    assert read and read[0].startswith(b"id,url,fingerprint,") and fifo.is_fifo()
    real, link = tmp_path / "real.csv", tmp_path / "link.csv"
    real.write_text("old")
    link.symlink_to(real)
    assert subprocess.run([*cmd, str(link)], capture_output=True, timeout=60).returncode == 0
    assert link.is_symlink() and real.read_text().startswith("id,url,fingerprint,")
    full = tmp_path / "full.csv"  # a link to a device whose writes fail, as on a full disk
    full.symlink_to("/dev/full")
    failed = subprocess.run([*cmd, str(full)], capture_output=True, text=True, timeout=60)
    assert failed.returncode == 2, failed.stderr
    assert failed.stderr == f"error: cannot write {full}: No space left on device\n"
    assert full.is_symlink() and not list(tmp_path.glob("*.part"))


def test_every_warc_date_parses_back_and_another_reader_replays_the_file(crawl, tmp_path):
    """Every WARC-Date is ISO 8601 with one ``Z`` (issue 21: an aware datetime gave ``…+00:00Z``)
    and equals the page's fetch time; warcio parses each back, and fastwarc (a second,
    independent WARC reader) reads every record, its date and its digests."""
    from warcio.timeutils import iso_date_to_timestamp
    fastwarc = pytest.importorskip("fastwarc.warc", reason="fastwarc is in the test extra: pip install -e '.[test]'")
    out = tmp_path / "dates.warc.gz"
    export(open_database(crawl["db"]), "warc", str(out))
    with open(out, "rb") as fh:
        dates = [r.rec_headers.get_header("WARC-Date") for r in ArchiveIterator(fh)]
    assert len(dates) == 7  # warcinfo + 3 request/response pairs
    for date in dates:
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{6})?Z", date), date
        assert len(iso_date_to_timestamp(date)) == 14
    types = []
    with open(out, "rb") as fh:
        for record in fastwarc.ArchiveIterator(fh, parse_http=False):
            types.append(record.record_type)
            assert record.record_date is not None and record.verify_block_digest()
    assert types.count(fastwarc.WarcRecordType.response) == 3 and types.count(fastwarc.WarcRecordType.request) == 3


def test_an_export_of_large_pages_holds_a_few_of_them_in_memory_not_hundreds(tmp_path):
    """120 pages of 2 MB (a hostile site's pages near the 10 MiB body cap are worse): the export
    process's peak memory stays near a few pages, where batches of 500 rows held all 240 MB."""
    store = CrawlStore(open_database(f"sqlite:///{tmp_path / 'c.db'}"))
    urls = [canonical_url(f"http://127.0.0.1:1/{i}.html") for i in range(120)]
    store.add_seeds(urls)
    body = "<p>" + "x" * (2 << 20) + "</p>"
    claimed = store.claim(len(urls))
    for start in range(0, len(claimed), 20):  # stored 20 at a time (40 MB), as a client's batches of results
        store.apply([Outcome(pending, PageResult(url=pending.url, final_url=pending.url, status=200,
                                                 content_type="text/html", size=len(body), title="big",
                                                 content=body[:-5] + f"{pending.url}</p>"), "ex", 1, False)
                     for pending in claimed[start:start + 20]], store.scope(urls, [], -1))
    # the export's own peak: VmHWM of its process image (ru_maxrss would carry the forking parent's over exec)
    wrapper = ("import re, runpy, sys\n"
               "try:\n    runpy.run_module('gridcrawl', run_name='__main__', alter_sys=True)\n"
               "finally:\n    status = open('/proc/self/status').read()\n"
               "    print('peak kB', re.search(r'VmHWM:\\s+(\\d+)', status).group(1), file=sys.stderr)\n")
    formats = (("jsonl", "pages.jsonl"), ("warc", "pages.warc"))
    ran = run_at_once(*([sys.executable, "-c", wrapper, "export", "--db", f"sqlite:///{tmp_path / 'c.db'}",
                         "--format", fmt, str(tmp_path / name)] for fmt, name in formats), timeout=300)  # both at once
    for (fmt, name), done in zip(formats, ran, strict=True):
        assert done.returncode == 0 and "exported 120 " in done.stderr, done.stderr
        peak_mb = int(re.search(r"peak kB (\d+)", done.stderr).group(1)) / 1024
        assert peak_mb < 200, f"the {fmt} export took {peak_mb:.0f} MB"
    assert (tmp_path / "pages.jsonl").stat().st_size > 120 * (2 << 20)


@pytest.mark.parametrize("backend", ["postgres_url", "mariadb_url"])
def test_an_items_export_streams_the_items_from_a_database_server(backend, request, tmp_path):
    """psycopg (and PyMySQL) read every item into memory before the first line was written: 100,000
    items of 2 KB took 270 MB where the pages export stays near 50 MB. The export reads them in
    batches now (a server-side cursor): its peak stays near the interpreter's own (about 60 MB here;
    40,000 items read at once took 145 MB, past the bound of 110 MB, on both servers)."""
    import datetime as dt
    T0 = dt.datetime(2024, 5, 1, 12, 0, 0)
    url = request.getfixturevalue(backend)
    store = CrawlStore(open_database(url))
    fields = json.dumps({"title": "t" * 2000})
    # the 40,000 rows made by the server (its md5 is urls.fingerprint): sent from here in batches
    # of 1,000 they took 2.5 s (PostgreSQL) and 6.5 s (MariaDB), made there 1 s
    numbers = {"postgresql": "SELECT 'http://127.0.0.1:1/' || i AS u FROM generate_series(0, 39999) AS i",
               "mysql": "SELECT CONCAT('http://127.0.0.1:1/', seq) AS u FROM seq_0_to_39999"}
    with store.engine.begin() as conn:
        conn.execute(sa.text("INSERT INTO item (type, fingerprint, url, position, fields, extracted_at) "
                             f"SELECT 'p', md5(u), u, 0, :fields, :t0 FROM ({numbers[conn.dialect.name]}) AS n"),
                     {"fields": fields, "t0": T0})
        assert conn.execute(sa.text("SELECT count(*) FROM item")).scalar() == 40_000
    wrapper = ("import re, runpy, sys\n"
               "try:\n    runpy.run_module('gridcrawl', run_name='__main__', alter_sys=True)\n"
               "finally:\n    status = open('/proc/self/status').read()\n"
               "    print('peak kB', re.search(r'VmHWM:\\s+(\\d+)', status).group(1), file=sys.stderr)\n")
    names = ("items.jsonl", "items.csv")
    ran = run_at_once(*([sys.executable, "-c", wrapper, "export", "--db", url, "--items", str(tmp_path / name)]
                        for name in names), timeout=300)  # both at once
    for name, done in zip(names, ran, strict=True):
        assert done.returncode == 0 and "exported 40000 items" in done.stderr, done.stderr
        peak_mb = int(re.search(r"peak kB (\d+)", done.stderr).group(1)) / 1024
        assert peak_mb < 110, f"the {name} export took {peak_mb:.0f} MB"
    assert (tmp_path / "items.jsonl").stat().st_size > 40_000 * 2000


def test_an_export_over_a_file_keeps_its_permissions_and_leaves_a_read_only_one(crawl, tmp_path):
    """OUT an existing file: the export, renamed over it, replaced a private (0600) file with one
    every user could read (0644, the umask's), and a read-only (0444) one that ``>`` refuses.
    Now the new file keeps the old one's permission bits, and a file this user may not write is
    refused (exit 2) and left as it was (root may write any file, as with ``>``). A new file gets
    the permissions the umask gives, as with ``>`` (not the 0600 of the temporary file it was
    written as)."""
    cmd = [sys.executable, "-m", "gridcrawl", "export", "--db", crawl["db"]]
    new = tmp_path / "new.csv"
    done = subprocess.run([*cmd, str(new)], capture_output=True, text=True, timeout=60,
                          preexec_fn=lambda: os.umask(0o027))
    assert done.returncode == 0, done.stderr
    assert stat.S_IMODE(new.stat().st_mode) == 0o640
    private = tmp_path / "visited.csv"
    private.write_text("old")
    private.chmod(0o600)
    done = subprocess.run([*cmd, str(private)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert private.read_text().startswith("id,url,fingerprint,")
    assert stat.S_IMODE(private.stat().st_mode) == 0o600
    locked = tmp_path / "pages.jsonl"
    locked.write_text("old")
    locked.chmod(0o444)
    done = subprocess.run([*cmd, str(locked)], capture_output=True, text=True, timeout=60)
    if os.geteuid() == 0:  # root writes a read-only file, as its shell's > does; its mode stays
        assert done.returncode == 0 and locked.read_text().startswith("{"), done.stderr
    else:
        assert done.returncode == 2
        assert done.stderr == f"error: cannot write {locked}: Permission denied (the file is read-only)\n"
        assert locked.read_text() == "old"
    assert stat.S_IMODE(locked.stat().st_mode) == 0o444 and not list(tmp_path.glob("*.part"))
