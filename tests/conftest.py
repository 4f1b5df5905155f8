"""Pytest fixtures for the local test web sites (see sites.py): servers and seeded sites.

Only site fixtures live here (and SIGINT's default action, below). ``site_server`` is a factory that starts a
``SiteServer`` on 127.0.0.1 and stops it at teardown; ``small_site`` is a
seeded 60-page site with 3 unreachable pages.
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterator

import pytest

from sites import Site, SiteServer, generate_site

# A test run started in the background by a script (``pytest ... &`` without job control) has
# SIGINT ignored, and every program it starts inherits that, so the tests of Ctrl-C (which send
# SIGINT to a real program) found programs that could not be interrupted: 7 failures. The
# programs a test starts get SIGINT's default action again, as from a terminal.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture
def site_server() -> Iterator[Callable[..., SiteServer]]:
    """Factory fixture: ``site_server(site, latency=0.0, **kw) -> SiteServer`` (started).

    ``latency`` is seconds slept before each answer; other keywords go to
    ``SiteServer`` (``host``, ``port``). Every server made is stopped at teardown.
    """
    servers: list[SiteServer] = []

    def make(site: Site, latency: float = 0.0, **kw) -> SiteServer:
        srv = SiteServer(site, latency=latency, **kw)
        servers.append(srv)
        return srv.start()

    yield make
    for srv in servers:
        srv.stop()


@pytest.fixture
def small_site() -> Site:
    """A fresh seeded site: 60 reachable pages (``/``, ``/p/1.html``..``/p/59.html``), 5 links each, plus 3 unreachable pages."""
    return generate_site(60, links_per_page=5, seed=1234, unreachable=3)
from dbfixtures import *  # noqa: E402,F401,F403  (database fixtures: postgres_url, mariadb_url, sqlite_url, db_url, small_disk, read_only_dir)
