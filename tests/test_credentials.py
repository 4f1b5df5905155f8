"""Sites behind a login: HTTP Basic credentials from a netrc file (``--netrc``).

Real servers on 127.0.0.1 whose pages answer ``401`` without the right ``Authorization`` header
(and record the header each request carried); a second server on 127.0.0.2 stands for another
host, which must never see the credentials, even when the protected site redirects there."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from gridcrawl.executor.credentials import read_netrc
from gridcrawl.executor.fetch import ErrorKind, Fetcher
from gridcrawl.settings import Settings
from grid import Grid, fetch_once
from sites import Site, SiteServer, generate_site, login_page, reachable, redirect

LOGIN, PASSWORD = "crawler", "s3cret pass"


def _protected(body: bytes, seen: list):
    """The login page handler (:func:`sites.login_page`) for ``LOGIN:PASSWORD``."""
    return login_page(body, LOGIN, PASSWORD, seen)


def _netrc(tmp_path, text: str, mode: int = 0o600) -> str:
    path = tmp_path / "netrc"
    path.write_text(text)
    path.chmod(mode)
    return str(path)


# ----------------------------------------------------------------------------------------------
# The file

def test_a_netrc_file_gives_each_named_host_its_login_and_nothing_to_other_hosts(tmp_path):
    path = _netrc(tmp_path, f"machine Wiki.Corp.Example login {LOGIN} password s3cret\n"
                            "machine docs.corp.example\n  login reader\n  password an0ther\n"
                            "machine nopass.corp.example login someone\n"
                            "default login everyone password for-every-host\n")
    assert read_netrc(path) == {"wiki.corp.example": (LOGIN, "s3cret"), "docs.corp.example": ("reader", "an0ther")}
    assert Settings(netrc=path).validate().netrc == path

    for text, message in (("machine\n", "not a netrc file"), ("default login a password b\n", "no 'machine HOST"),
                          ("machines a.example login b password c\n", "not a netrc file")):
        with pytest.raises(ValueError, match=message) as raised:
            read_netrc(_netrc(tmp_path, text))
        assert "for-every-host" not in str(raised.value)
    with pytest.raises(ValueError, match="no such file"):
        Settings(netrc=str(tmp_path / "missing")).validate()


def test_a_netrc_file_other_users_can_read_is_warned_about(tmp_path):
    entry = f"machine a.example login {LOGIN} password s3cret\n"
    assert Settings(netrc=_netrc(tmp_path, entry, 0o600)).warnings({}) == []
    (warning,) = Settings(netrc=_netrc(tmp_path, entry, 0o644)).warnings({})
    assert "other users can read it: chmod 600" in warning and "s3cret" not in warning


# ----------------------------------------------------------------------------------------------
# The fetcher

def test_credentials_go_to_their_host_on_every_hop_and_never_to_another_host():
    seen, elsewhere = [], []
    with SiteServer(Site(), host="127.0.0.2") as other:
        other.site.extra["/landing"] = _protected(b"<html>other</html>", elsewhere)
        site = Site(extra={"/private": _protected(b"<html>private</html>", seen),
                           "/away": redirect(other.url("/landing")),
                           "/back": redirect("/private")})
        with SiteServer(site) as server:
            credentials = {"127.0.0.1": (LOGIN, PASSWORD)}
            ok = fetch_once(server.url("/private"), credentials=credentials)
            assert ok.error_kind is None and ok.body == b"<html>private</html>", ok
            assert fetch_once(server.url("/back"), credentials=credentials).status == 200  # a hop on the same host
            assert seen[-1][1] is not None and [path for path, _ in seen] == ["/private", "/private"]

            away = fetch_once(server.url("/away"), credentials=credentials)  # the site sends us to another host
            assert away.error_kind == ErrorKind.HTTP_STATUS and away.status == 401, away
            assert elsewhere == [("/landing", None)]  # it got no credentials
            assert "give credentials for 127.0.0.2 in --netrc FILE" in away.error
            assert 'Basic realm="Intranet"' in away.error

            refused = fetch_once(server.url("/private"), credentials={"127.0.0.1": (LOGIN, "wrong")})
            assert refused.status == 401 and "the credentials --netrc gives for 127.0.0.1 were refused" in refused.error
            none = fetch_once(server.url("/private"))
            assert none.status == 401 and "--netrc FILE" in none.error and seen[-1] == ("/private", None)
            derived = Fetcher(user_agent="gridcrawl-test", credentials=credentials).derive(keep_non_html=True)
            assert derived.credentials == credentials  # robots.txt and sitemaps log in too


# ----------------------------------------------------------------------------------------------
# gridcrawl run

def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gridcrawl", "run", *args, "--executors", "1", "--threads", "4",
                           "--no-progress", "--no-sitemaps"], capture_output=True, text=True, timeout=180,
                          env={**os.environ, "GRIDCRAWL_RETRY_TIMES": "0"})


@pytest.mark.e2e
def test_gridcrawl_run_crawls_a_site_behind_a_login_with_a_netrc_file(tmp_path):
    generated = generate_site(10, seed=3)
    seen: list = []
    site = Site(links=generated.links, extra={path: _protected(body, seen) for path, body in generated.pages.items()})
    expected = reachable(site)
    with SiteServer(site) as server:
        netrc = _netrc(tmp_path, f'machine 127.0.0.1 login {LOGIN} password "{PASSWORD}"\n')
        done = _run(server.url("/"), "--netrc", netrc, "--workdir", str(tmp_path / "login"))
        assert done.returncode == 0, done.stderr[-3000:]
        rows = Grid(tmp_path / "login").query("crawl", "SELECT url, error_kind FROM visited_url")
        assert sorted(rows) == sorted((server.url(path), None) for path in expected)
        assert PASSWORD not in done.stdout + done.stderr

        seen.clear()
        without = _run(server.url("/"), "--workdir", str(tmp_path / "without"))
        assert without.returncode == 1, without.stderr[-3000:]
        ((kind, error),) = Grid(tmp_path / "without").query("crawl", "SELECT error_kind, error FROM visited_url")
        assert kind == "http_status" and "--netrc FILE" in error, error
        assert seen == [("/", None)]
        assert f"gridcrawl fetch {server.url('/')}" in without.stderr  # the summary's next command

        bad = _run(server.url("/"), "--netrc", str(tmp_path / "missing"), "--workdir", str(tmp_path / "bad"))
        assert bad.returncode == 2 and "no such file" in bad.stderr and "Traceback" not in bad.stderr, bad.stderr


def test_the_executor_logs_a_urls_password_as_stars(caplog):
    """The executor's log printed a URL's credentials as given (``http://user:pw@host/``): a
    page whose rules cannot be applied, a result over max_message_bytes (and a crashed thread,
    the same call) now show ``user:***@``."""
    import logging
    from gridcrawl import protocol as p
    from grid import agent_with_router, collect_results
    big = b"<html><title>big</title><body>" + b"<p>words words words</p>" * 120_000 + b"</body></html>"
    server = SiteServer(Site(pages={"/big.html": big, "/small.html": b"<html><title>small</title></html>"})).start()
    settings = Settings(obey_robots=False, sitemaps=False, threads=1, max_message_bytes=2_000_000)
    with_login = lambda path: server.url(path).replace("http://", "http://alice:s3cret@")  # noqa: E731
    try:
        with caplog.at_level(logging.INFO, logger="gridcrawl.executor"):
            with agent_with_router(settings) as (manager, peer):
                manager.send_multipart([peer, *p.encode(p.Assign([
                    p.Job(1, "app", 0, with_login("/big.html")),
                    p.Job(2, "app", 1, with_login("/small.html"), instruction={"keepRules": [{"pattern": "(("}]})]))])
                pages = collect_results(manager, 2)
    finally:
        server.stop()
    assert pages[1].error_kind == "too_large" and pages[2].error_kind == "bad_instruction"
    said = [r.getMessage() for r in caplog.records]
    assert not [line for line in said if "s3cret" in line], said
    assert [line for line in said if "over max_message_bytes" in line and "alice:***@127.0.0.1" in line]
    assert [line for line in said if "not a valid regular expression" in line and "alice:***@127.0.0.1" in line]
