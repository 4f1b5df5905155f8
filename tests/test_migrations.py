"""Schema migrations (:mod:`gridcrawl.migrations`, Alembic): a database made by gridcrawl's
first release is upgraded to this release's schema — the same columns and indexes as a new
database — on SQLite, PostgreSQL and MariaDB, and then crawled into by the real programs."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
import sqlalchemy as sa

from gridcrawl import migrations, models
from gridcrawl.db import DatabaseUnavailable, init_schema, open_database, schema_version
from grid import Grid
from sites import generate_site, reachable

DATA = Path(__file__).parent / "data"
KINDS = {"manager": (models.manager_metadata, models.manager_meta),
         "crawl": (models.crawl_metadata, models.crawl_meta)}


def _load_first_release(engine: sa.engine.Engine) -> None:
    """Create the first release's tables (tests/data/first_release_<dialect>.sql) with a few rows."""
    script = (DATA / f"first_release_{engine.dialect.name}.sql").read_text()
    script = "\n".join(line for line in script.splitlines() if not line.startswith("--"))
    with engine.begin() as conn:
        for statement in filter(None, (s.strip() for s in script.split(";\n"))):
            conn.exec_driver_sql(statement)
        conn.exec_driver_sql(
            "INSERT INTO visited_url (url, fingerprint, depth, status, attempts, visited_at) "
            "VALUES ('http://old.example/', '0123456789abcdef0123456789abcdef', 0, 200, 1, '2026-01-01 00:00:00')")


def _shape(engine: sa.engine.Engine, metadata: sa.MetaData) -> dict:
    """Columns (name, nullable) and indexes (name, columns, unique) of ``metadata``'s tables."""
    inspector = sa.inspect(engine)
    shape = {}
    for table in metadata.sorted_tables:
        columns = {c["name"]: c["nullable"] for c in inspector.get_columns(table.name)}
        indexes = {(i["name"], tuple(i["column_names"]), bool(i["unique"])) for i in inspector.get_indexes(table.name)}
        shape[table.name] = (columns, indexes)
    return shape


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_each_schema_has_one_linear_chain_of_revisions(kind):
    from alembic.script import ScriptDirectory
    script = ScriptDirectory.from_config(migrations.alembic_config(None, kind))
    assert script.get_heads() == [migrations.head(kind)]
    chain = [rev.revision for rev in reversed(list(script.walk_revisions()))]
    assert chain == migrations.revisions(kind)
    assert chain[0] == "0001" and all(int(b) == int(a) + 1 for a, b in zip(chain, chain[1:]))


def test_first_release_database_upgrades_to_the_new_schema(db_url, tmp_path):
    old = open_database(db_url)
    _load_first_release(old)
    for kind, (metadata, meta) in KINDS.items():
        assert schema_version(old, meta) == 1
        init_schema(old, metadata, meta)
        assert schema_version(old, meta) == int(migrations.head(kind))
        with old.connect() as conn:
            assert migrations.current(conn, kind) == migrations.head(kind)
    # the same shape as a database gridcrawl makes new
    new = open_database(f"sqlite:///{tmp_path / 'new.db'}") if old.dialect.name == "sqlite" else None
    if new is not None:
        for metadata, meta in KINDS.values():
            init_schema(new, metadata, meta)
            assert _shape(old, metadata) == _shape(new, metadata)
    else:  # a server: compare with the models (names and nullability; index names)
        for metadata, _meta in KINDS.values():
            shape = _shape(old, metadata)
            for table in metadata.sorted_tables:
                columns, indexes = shape[table.name]
                assert columns == {c.name: c.nullable for c in table.columns}, table.name
                assert {i.name for i in table.indexes} <= {name for name, _cols, _u in indexes}, table.name
    with old.connect() as conn:  # rows of the old release are kept
        assert conn.exec_driver_sql("SELECT url FROM visited_url").fetchall() == [("http://old.example/",)]
    if old.dialect.name in ("mysql", "mariadb"):  # times to the microsecond after the upgrade
        with old.connect() as conn:
            kind = conn.exec_driver_sql("SELECT DATETIME_PRECISION FROM information_schema.COLUMNS WHERE "
                                        "TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'thread' AND "
                                        "COLUMN_NAME = 'time_started'").scalar()
        assert kind == 6
    # a second open finds it at the head and changes nothing
    for metadata, meta in KINDS.values():
        init_schema(old, metadata, meta)


def test_a_database_from_a_newer_release_is_refused(sqlite_url):
    engine = open_database(sqlite_url)
    init_schema(engine, models.crawl_metadata, models.crawl_meta)
    with engine.begin() as conn:
        conn.execute(migrations.version_table("crawl").update().values(version_num="9999"))
    with pytest.raises(DatabaseUnavailable, match="newer than this gridcrawl"):
        init_schema(engine, models.crawl_metadata, models.crawl_meta)


def test_db_upgrade_command_then_a_crawl_into_the_upgraded_databases(tmp_path, site_server):
    for name in ("crawl", "manager"):
        _load_first_release(open_database(f"sqlite:///{tmp_path / (name + '.db')}"))
    upgraded = subprocess.run([sys.executable, "-m", "gridcrawl", "db", "upgrade", "--db",
                               f"sqlite:///{tmp_path / 'manager.db'}", "--kind", "manager"],
                              capture_output=True, text=True, timeout=60)
    assert upgraded.returncode == 0, upgraded.stderr
    assert f"manager schema: revision (none) -> {migrations.head('manager')}" in upgraded.stdout
    # crawl.db is still at the first release: `gridcrawl run` upgrades it when it opens it
    site = generate_site(30, links_per_page=3, seed=5)
    server = site_server(site)
    done = subprocess.run([sys.executable, "-m", "gridcrawl", "run", server.url("/"), "--executors", "1",
                           "--threads", "2", "--workdir", str(tmp_path), "--no-progress"],
                          capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-2000:]
    grid = Grid(tmp_path)
    # the host's /sitemap.xml (a 404: its robots.txt names no sitemap) is one more visited URL and thread
    assert grid.query("crawl", "SELECT count(*) FROM visited_url") == [(len(reachable(site)) + 1 + 1,)]
    assert grid.query("crawl", "SELECT count(*) FROM document") == [(len(reachable(site)),)]
    assert grid.query("crawl", "SELECT version_num FROM gridcrawl_crawl_version") == [(migrations.head("crawl"),)]
    assert grid.query("manager", "SELECT count(*) FROM thread WHERE executor_id IS NOT NULL") == \
        [(len(reachable(site)) + 1,)]


def test_reading_commands_name_an_older_schema_and_the_upgrade_command(tmp_path):
    """``report`` and ``export`` do not upgrade a database: on a first-release one (both kinds of
    tables in one file) they said "no such table: kept_link", "its views are missing" or, wrongly,
    "is a manager database"; now they name its revision and ``gridcrawl db upgrade``."""
    path = tmp_path / "old.db"
    _load_first_release(open_database(f"sqlite:///{path}"))
    url = f"sqlite:///{path}"

    printed = []

    def gridcrawl(*args):
        done = subprocess.run([sys.executable, "-m", "gridcrawl", *args], capture_output=True, text=True, timeout=60)
        printed.append(done.stdout)
        return done.returncode, done.stderr.strip()

    for kind, args in (("crawl", ("report", "--crawl-db", url)), ("manager", ("report", "--db", url)),
                       ("crawl", ("export", "--db", url, "--format", "jsonl", str(tmp_path / "out.jsonl"))),
                       # these said "no such table: triple" and "the crawl ran without --extract"; the CSV's
                       # header row came out on standard output before the error
                       ("crawl", ("export", "--db", url, "--triples", "-")),
                       ("crawl", ("export", "--db", url, "--items", "-")),
                       ("crawl", ("export", "--db", url, "--format", "csv", "-"))):
        rc, err = gridcrawl(*args)
        assert rc == 2 and "Traceback" not in err, err
        assert printed[-1] == ""  # no tables first (a report of the manager's printed its empty tables)
        who = "the manager does so when it starts" if kind == "manager" else "the crawl's programs do so when they open it"
        assert err.endswith(f"{url} is a {kind} database at schema revision (none: an early release), older than "
                            f"this gridcrawl's {migrations.head(kind)}: gridcrawl db upgrade --db {url} upgrades it "
                            f"({who})"), err
    rc, err = gridcrawl("db", "upgrade", "--db", url)
    assert rc == 0, err
    rc, err = gridcrawl("report", "--crawl-db", url)
    assert rc == 0, err  # one database of both kinds is a crawl database too


def test_extract_upgrades_an_older_crawl_database_as_the_crawls_programs_do(tmp_path):
    """``gridcrawl extract`` writes the crawl database, but did not upgrade a first-release one:
    it ended in a traceback ("no such table: crawl_rule"). It upgrades it now, as every program
    that writes a crawl database does, and extracts its items."""
    path = tmp_path / "old.db"
    _load_first_release(open_database(f"sqlite:///{path}"))
    url = f"sqlite:///{path}"
    spec = tmp_path / "spec.toml"
    spec.write_text('[[item]]\ntype = "page"\n[item.fields]\ntitle = { css = "title::text" }\n')
    done = subprocess.run([sys.executable, "-m", "gridcrawl", "extract", "--db", url, "--extract", str(spec),
                           "--no-progress"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    engine = open_database(url)
    with engine.connect() as conn:
        assert conn.execute(sa.text("SELECT version_num FROM gridcrawl_crawl_version")).scalar() == \
            migrations.head("crawl")
        assert conn.execute(sa.text("SELECT count(*) FROM item")).scalar() == \
            conn.execute(sa.text("SELECT count(*) FROM document WHERE content IS NOT NULL")).scalar()


def test_report_names_a_database_a_newer_gridcrawl_wrote(tmp_path):
    """``report`` on a database at a newer schema revision (a newer gridcrawl wrote it, say on
    the grid, read here by an older one) read it without a word; when the newer release's views
    were not what this one reads, it said "not a gridcrawl manager database, or its views are
    missing". Now it warns with the revisions and reads on, and when reading breaks it names them."""
    url = {}
    for kind, (metadata, meta) in KINDS.items():
        url[kind] = f"sqlite:///{tmp_path / (kind + '.db')}"
        engine = open_database(url[kind])
        init_schema(engine, metadata, meta)
        with engine.begin() as conn:
            conn.execute(migrations.version_table(kind).update().values(version_num="9999"))
        engine.dispose()

    def report(*args):
        done = subprocess.run([sys.executable, "-m", "gridcrawl", "report", *args], capture_output=True, text=True,
                              timeout=60)
        return done.returncode, done.stderr.strip()

    for kind, option in (("manager", "--db"), ("crawl", "--crawl-db")):
        newer = (f"{url[kind]} is a {kind} database at schema revision 9999, newer than this gridcrawl's "
                 f"{migrations.head(kind)}: upgrade gridcrawl to read it")
        rc, err = report(option, url[kind])
        assert rc == 0 and err == f"warning: {newer}; the figures below may be incomplete", err
    with open_database(url["manager"]).begin() as conn:  # the newer release's views are not this one's
        conn.exec_driver_sql("DROP VIEW executor_summary")
    rc, err = report("--db", url["manager"])
    assert rc == 2 and err.splitlines()[-1] == (f"error: {url['manager']} is a manager database at schema revision "
                                                f"9999, newer than this gridcrawl's {migrations.head('manager')}: "
                                                "upgrade gridcrawl to read it"), err


def test_db_upgrade_upgrades_the_kinds_of_tables_a_database_holds_and_creates_none(tmp_path):
    """``gridcrawl db upgrade --db CRAWL_DB`` (no --kind) upgraded the crawl tables and created
    every manager table in the crawl database; now it upgrades what the database holds, refuses
    a database holding no gridcrawl table (creating no SQLite file) and creates what --kind names."""
    def upgrade(path, *args):
        done = subprocess.run([sys.executable, "-m", "gridcrawl", "db", "upgrade", "--db", f"sqlite:///{path}", *args],
                              capture_output=True, text=True, timeout=60)
        return done.returncode, done.stdout, done.stderr

    crawl = tmp_path / "crawl.db"
    init_schema(open_database(f"sqlite:///{crawl}"), models.crawl_metadata, models.crawl_meta)
    manager_tables = {t.name for t in models.manager_metadata.sorted_tables}
    rc, out, err = upgrade(crawl)
    assert rc == 0, err
    head = migrations.head("crawl")
    assert out.splitlines() == [f"crawl schema: revision {head} -> {head}"]
    assert not manager_tables & set(sa.inspect(open_database(f"sqlite:///{crawl}")).get_table_names())
    rc, out, err = upgrade(tmp_path / "typo.db")
    assert rc == 2 and "typo.db" in err and "Traceback" not in err, err
    assert not (tmp_path / "typo.db").exists()
    empty = tmp_path / "empty.db"
    sqlite3.connect(empty).close()
    rc, out, err = upgrade(empty)
    assert rc == 2 and err.strip().endswith("holds no gridcrawl tables: give --kind manager, crawl or both to "
                                            "create them"), err
    rc, out, err = upgrade(empty, "--kind", "manager")
    assert rc == 0 and out.splitlines() == [f"manager schema: revision (none) -> {migrations.head('manager')}"]
    assert manager_tables <= set(sa.inspect(open_database(f"sqlite:///{empty}")).get_table_names())


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_every_revision_creates_times_to_the_microsecond_on_sql_server_and_mariadb(kind, tmp_path):
    """The tables a revision creates get the models' time type on every back end. Revision 0001
    wrote ``sa.DateTime``, which SQL Server's dialect renders ``DATETIME`` (to 3.33 ms: a grid
    thread's run of 2 ms read 0 or 3.3 ms) and MariaDB's ``DATETIME`` (whole seconds): a
    database made before migrations that lacked one of its tables got it so. Every revision is
    run on an empty SQLite database; each table it creates is compiled for SQL Server and MariaDB."""
    from sqlalchemy.dialects import mssql, mysql
    from sqlalchemy.schema import CreateTable
    created: list[sa.Table] = []

    def record(conn, clauseelement, multiparams, params, execution_options):
        if isinstance(clauseelement, CreateTable) and not clauseelement.element.name.startswith("_alembic_tmp"):
            created.append(clauseelement.element)

    engine = open_database(f"sqlite:///{tmp_path / 'chain.db'}")
    sa.event.listen(engine, "before_execute", record)
    with engine.begin() as conn:
        migrations.upgrade(conn, kind)
    times = [(t.name, c.name, c.type) for t in created for c in t.columns
             if isinstance(c.type, sa.DateTime) or isinstance(getattr(c.type, "impl", None), sa.DateTime)]
    assert {"thread" if kind == "manager" else "document"} <= {table for table, _c, _t in times}  # 0001's
    for table, column, type_ in times:
        assert type_.compile(dialect=mssql.dialect()) == "DATETIME2(6)", f"{kind} {table}.{column} on SQL Server"
        assert type_.compile(dialect=mysql.dialect()) == "DATETIME(6)", f"{kind} {table}.{column} on MariaDB"


def test_db_init_gives_a_database_only_the_kinds_of_tables_it_holds(tmp_path):
    """``gridcrawl db init --db WORKDIR/crawl.db`` (no --kind), as docs/databases.md shows it,
    created every manager table in the crawl database: ``gridcrawl report --db`` of it then printed
    empty tables instead of "is a crawl database". Now it completes the kinds the database holds,
    both kinds in a database that holds none, and what --kind names."""
    def init(path, *args):
        done = subprocess.run([sys.executable, "-m", "gridcrawl", "db", "init", "--db", f"sqlite:///{path}", *args],
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        return done.stdout.strip(), set(sa.inspect(open_database(f"sqlite:///{path}")).get_table_names())

    manager_tables = {t.name for t in models.manager_metadata.sorted_tables}
    crawl_tables = {t.name for t in models.crawl_metadata.sorted_tables}
    crawl = tmp_path / "crawl.db"
    init_schema(open_database(f"sqlite:///{crawl}"), models.crawl_metadata, models.crawl_meta)
    out, tables = init(crawl)
    assert out == f"crawl schema ready in sqlite:///{crawl}"
    assert crawl_tables <= tables and not manager_tables & tables
    report = subprocess.run([sys.executable, "-m", "gridcrawl", "report", "--db", f"sqlite:///{crawl}"],
                            capture_output=True, text=True, timeout=60)
    assert report.returncode == 2 and "is a crawl database" in report.stderr, report.stderr
    out, tables = init(tmp_path / "new.db")
    assert out.startswith("manager and crawl schema ready") and manager_tables | crawl_tables <= tables
    out, tables = init(crawl, "--kind", "manager")
    assert out.startswith("manager schema ready") and manager_tables <= tables
