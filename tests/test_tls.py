"""HTTPS certificates: a real TLS server on 127.0.0.1 whose certificate a test certificate
authority signed (trustme), as an intranet's own CA would. An executor checks certificates
against certifi's authorities by default, so that site fails as a connection error whose message
names the two ways out: ``--ca-bundle FILE`` (trust the intranet's CA) and ``--no-tls-verify``
(accept any certificate, the field's default in Scrapy, Nutch and Heritrix)."""

from __future__ import annotations

import datetime
import os
import ssl
import subprocess
import sys

import pytest

from gridcrawl.executor.fetch import ErrorKind, Fetcher, tls_verify
from grid import Grid
from sites import Site, SiteServer

trustme = pytest.importorskip("trustme", reason="trustme (the test extras) makes the test CA")

PAGES = {"/": b"<html><body><a href='/a.html'>a</a></body></html>", "/a.html": b"<html><body>a</body></html>"}


@pytest.fixture(scope="module")
def ca():
    return trustme.CA()


@pytest.fixture
def https_site(ca):
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(context)
    with SiteServer(Site(pages=dict(PAGES)), tls=context) as server:
        yield server


@pytest.fixture
def ca_pem(ca, tmp_path):
    path = tmp_path / "intranet-ca.pem"
    ca.cert_pem.write_to_path(str(path))
    return str(path)


def test_an_unknown_authority_fails_as_a_connection_error_naming_the_options(https_site):
    fetcher = Fetcher(user_agent="gridcrawl-test", deadline=10)
    try:
        result = fetcher.fetch(https_site.url("/"))
    finally:
        fetcher.close()
    assert result.error_kind == ErrorKind.CONNECTION, result
    assert result.error.startswith("TLS certificate not trusted: unable to get local issuer certificate"), result.error
    assert "--ca-bundle FILE" in result.error and "--no-tls-verify" in result.error
    assert https_site.requests == []  # the handshake failed: no request reached the server


def test_a_ca_bundle_is_trusted_and_no_check_accepts_any_certificate(https_site, ca_pem):
    for verify in (tls_verify(True, ca_pem), tls_verify(False)):
        fetcher = Fetcher(user_agent="gridcrawl-test", deadline=10, verify=verify)
        try:
            result = fetcher.fetch(https_site.url("/"))
            robots = fetcher.derive(keep_non_html=True).fetch(https_site.url("/robots.txt"))
        finally:
            fetcher.close()
        assert result.error_kind is None and result.status == 200, (verify, result)
        assert robots.status == 404  # a derived fetcher (robots.txt) checks the same way
    assert tls_verify(True, ca_pem) == os.path.abspath(ca_pem)


@pytest.mark.parametrize("days, words", [(365, "certificate is not yet valid"), (-365, "certificate has expired")])
def test_a_certificate_out_of_its_dates_names_this_machines_clock(ca, ca_pem, days, words):
    """An executor whose clock is a year behind (or ahead) sees a good certificate as not yet valid
    (or expired): the message says the clock judged it and what it reads, and does not send the
    user to --ca-bundle, which an authority already trusted cannot mend."""
    now = datetime.datetime.now(datetime.timezone.utc)
    start = now + datetime.timedelta(days=days)  # as a machine whose clock is off by a year sees it
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    month = datetime.timedelta(days=30)
    valid = (start, start + month) if days > 0 else (start - month, start)
    ca.issue_cert("127.0.0.1", not_before=valid[0], not_after=valid[1]).configure_cert(context)
    with SiteServer(Site(pages=dict(PAGES)), tls=context) as server:
        fetcher = Fetcher(user_agent="gridcrawl-test", deadline=10, verify=tls_verify(True, ca_pem))
        try:
            result = fetcher.fetch(server.url("/"))
        finally:
            fetcher.close()
    assert result.error_kind == ErrorKind.CONNECTION, result
    assert result.error.startswith(f"TLS certificate not trusted: {words} (by this machine's clock, which reads "
                                   f"{now:%Y-%m-%d} "), result.error
    assert result.error.endswith("UTC: if it is wrong, set it right (NTP) and fetch the page again); "
                                 "to accept it anyway start executors with --no-tls-verify"), result.error


def test_tls_verify_refuses_a_ca_bundle_that_is_no_readable_file(tmp_path):
    with pytest.raises(ValueError, match="no readable file"):
        tls_verify(True, str(tmp_path / "missing.pem"))
    with pytest.raises(ValueError, match="no readable file"):
        tls_verify(True, str(tmp_path))  # a folder
    assert tls_verify(False, str(tmp_path / "missing.pem")) is False  # not read when nothing is checked
    assert tls_verify(True) is True


def _run(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gridcrawl", "run", *args, "--executors", "1", "--threads", "2",
                           "--no-progress", "--no-sitemaps"],
                          capture_output=True, text=True, timeout=180, env={**os.environ, **(env or {})})


@pytest.mark.e2e
def test_gridcrawl_run_crawls_an_intranet_site_with_its_own_ca(https_site, ca_pem, tmp_path):
    trusted = _run(https_site.url("/"), "--ca-bundle", ca_pem, "--workdir", str(tmp_path / "trusted"))
    assert trusted.returncode == 0, trusted.stderr[-2000:]
    rows = Grid(tmp_path / "trusted").query("crawl", "SELECT url, error_kind FROM visited_url ORDER BY url")
    assert rows == [(https_site.url("/"), None), (https_site.url("/a.html"), None)]

    # the same site without its CA: every page fails, saying which option helps (no retries here)
    untrusted = _run(https_site.url("/"), "--workdir", str(tmp_path / "untrusted"), env={"GRIDCRAWL_RETRY_TIMES": "0"})
    assert untrusted.returncode == 1, untrusted.stderr[-2000:]
    ((kind, error),) = Grid(tmp_path / "untrusted").query("crawl", "SELECT error_kind, error FROM visited_url")
    assert kind == "connection" and "--ca-bundle FILE" in error, error

    missing = _run(https_site.url("/"), "--ca-bundle", str(tmp_path / "missing.pem"),
                   "--workdir", str(tmp_path / "missing"))
    assert missing.returncode == 2 and "no readable file" in missing.stderr, missing.stderr[-2000:]
    assert not (tmp_path / "missing" / "manager.db").exists()  # refused before any process started
