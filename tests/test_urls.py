"""Tests for gridcrawl.urls: canonical URLs, fingerprints, hosts and domain scope."""

from __future__ import annotations

import re
from urllib.parse import urljoin

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from gridcrawl.urls import (
    MAX_URL_LENGTH,
    SESSION_PARAMS,
    InvalidURL,
    canonical_url,
    fingerprint,
    domain_keys,
    in_scope,
    url_host,
)

# --------------------------------------------------------------------------
# canonical_url: absolute URLs
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        # case: scheme and host lower-cased, path and query kept as written
        ("HTTP://Example.COM/Path/File.HTML", "http://example.com/Path/File.HTML"),
        ("https://WWW.Example.com/?Q=Mixed", "https://www.example.com/?Q=Mixed"),
        # default ports removed, other ports kept
        ("http://example.com:80/a", "http://example.com/a"),
        ("https://example.com:443/a", "https://example.com/a"),
        ("http://example.com:080/a", "http://example.com/a"),
        ("https://example.com:80/a", "https://example.com:80/a"),
        ("http://example.com:443/a", "http://example.com:443/a"),
        ("http://example.com:8080/a", "http://example.com:8080/a"),
        ("http://example.com:/a", "http://example.com/a"),
        # fragments dropped
        ("http://example.com/a#section-2", "http://example.com/a"),
        ("http://example.com/a?x=1#frag?y=2", "http://example.com/a?x=1"),
        ("http://example.com/#", "http://example.com/"),
        # query arguments sorted by name, then value; blank values kept
        ("http://example.com/s?b=2&a=1&c=3", "http://example.com/s?a=1&b=2&c=3"),
        ("http://example.com/s?a=2&a=1", "http://example.com/s?a=1&a=2"),
        ("http://example.com/s?b&a=1", "http://example.com/s?a=1&b="),
        # session parameters removed from query and path, any letter case
        ("http://example.com/s?PHPSESSID=abc123&x=1", "http://example.com/s?x=1"),
        ("http://example.com/s?x=1&sessionid=9&y=2", "http://example.com/s?x=1&y=2"),
        ("http://example.com/s?SessionId=9&JSESSIONID=1", "http://example.com/s"),
        ("http://example.com/?sid=42", "http://example.com/"),
        ("http://example.com/cart;jsessionid=0A1B2C?item=3", "http://example.com/cart?item=3"),
        ("http://example.com/a;JSESSIONID=x/b", "http://example.com/a/b"),
        ("http://example.com/a;jsessionid=x;v=2", "http://example.com/a;v=2"),
        # shop and application servers' own names (osCommerce, Zen Cart, ColdFusion)
        ("http://example.com/p.php?products_id=7&osCsid=5f2a9c", "http://example.com/p.php?products_id=7"),
        ("http://example.com/index.php?main_page=x&zenid=q1w2e3", "http://example.com/index.php?main_page=x"),
        ("http://example.com/a.cfm?CFID=123&CFTOKEN=456&id=2", "http://example.com/a.cfm?id=2"),
        ("http://example.com/a?sessid=8&k=1", "http://example.com/a?k=1"),
        # a conference's session is a page, not a visitor's session
        ("http://example.com/talk?session_id=42", "http://example.com/talk?session_id=42"),
        # names that merely contain a session parameter's name are kept
        ("http://example.com/s?sidebar=1&side=2", "http://example.com/s?side=2&sidebar=1"),
        ("http://example.com/a;sidebar=1", "http://example.com/a;sidebar=1"),
        # IDNA: non-ASCII host names in punycode
        ("http://Bücher.example/", "http://xn--bcher-kva.example/"),
        ("https://пример.рф:443/", "https://xn--e1afmkfd.xn--p1ai/"),
        ("http://ÉCOLE.fr", "http://xn--cole-9oa.fr/"),
        # percent-encoding normalised: unreserved decoded, upper-case hex, non-ASCII as UTF-8
        ("http://example.com/%7euser/a%2fb", "http://example.com/~user/a%2Fb"),
        ("http://example.com/a b", "http://example.com/a%20b"),
        ("http://example.com/résumé", "http://example.com/r%C3%A9sum%C3%A9"),
        ("http://example.com/r%c3%a9sum%c3%a9", "http://example.com/r%C3%A9sum%C3%A9"),
        ("http://example.com/s?q=a b", "http://example.com/s?q=a+b"),
        ("http://example.com/s?q=%zz", "http://example.com/s?q=%25zz"),
        # dot segments removed (RFC 3986 5.2.4)
        ("http://example.com/a/./b/../c", "http://example.com/a/c"),
        ("http://example.com/../../x", "http://example.com/x"),
        # empty path becomes "/"
        ("http://example.com", "http://example.com/"),
        ("http://example.com?x=1", "http://example.com/?x=1"),
        # surrounding whitespace stripped
        ("  http://example.com/a \n", "http://example.com/a"),
        # host details: trailing dot, IPv6, IPv4, user information kept as written
        ("http://example.com./a", "http://example.com/a"),
        ("http://[0:0::1]:8080/", "http://[::1]:8080/"),
        ("http://[::1]:80/", "http://[::1]/"),
        ("http://127.0.0.1:80/x", "http://127.0.0.1/x"),
        ("http://User:Pw@Example.com/", "http://User:Pw@example.com/"),
        ("http://my_host.example.com/", "http://my_host.example.com/"),
        # backslashes before the query are path separators (WHATWG URL Standard)
        ("http://example.com\\evil.example/x", "http://example.com/evil.example/x"),
        ("http://example.com/a\\b?q=c\\d", "http://example.com/a/b?q=c%5Cd"),
    ],
)
def test_canonical_url_absolute(url: str, expected: str) -> None:
    assert canonical_url(url) == expected


@pytest.mark.parametrize(
    "url",
    [
        "http://example.com/a?b=2&a=1",
        "https://xn--bcher-kva.example/r%C3%A9sum%C3%A9?q=a+b",
        "http://[::1]:8080/x;v=1?a=&b=2",
    ],
)
def test_canonical_url_is_idempotent(url: str) -> None:
    once = canonical_url(url)
    assert canonical_url(once) == once


# --------------------------------------------------------------------------
# canonical_url: relative references
# --------------------------------------------------------------------------

BASE = "http://example.com/docs/guide/index.html?x=1#intro"


@pytest.mark.parametrize(
    ("href", "expected"),
    [
        ("intro.html", "http://example.com/docs/guide/intro.html"),
        ("./intro.html", "http://example.com/docs/guide/intro.html"),
        ("../api/", "http://example.com/docs/api/"),
        ("../../../../x.html", "http://example.com/x.html"),
        ("..", "http://example.com/docs/"),
        (".", "http://example.com/docs/guide/"),
        ("/root.html", "http://example.com/root.html"),
        ("//cdn.example.org/lib.js", "http://cdn.example.org/lib.js"),
        ("?page=2", "http://example.com/docs/guide/index.html?page=2"),
        ("#section", "http://example.com/docs/guide/index.html?x=1"),
        ("", "http://example.com/docs/guide/index.html?x=1"),
        ("  next.html\n", "http://example.com/docs/guide/next.html"),
        ("ne\txt.ht\nml", "http://example.com/docs/guide/next.html"),
        ("sub/page.html?b=1&a=2#f", "http://example.com/docs/guide/sub/page.html?a=2&b=1"),
        ("page;jsessionid=ABC?sid=1&q=2", "http://example.com/docs/guide/page?q=2"),
        ("https://Other.Example:443/a", "https://other.example/a"),
        ("HTTP://EXAMPLE.ORG", "http://example.org/"),
        ("http:other.html", "http://example.com/docs/guide/other.html"),
        ("\\\\cdn.example.org\\lib.js", "http://cdn.example.org/lib.js"),
        ("sub\\page.html", "http://example.com/docs/guide/sub/page.html"),
    ],
)
def test_canonical_url_relative(href: str, expected: str) -> None:
    assert canonical_url(href, BASE) == expected


@pytest.mark.parametrize(
    "base",
    [
        BASE,
        "http://example.com",
        "http://example.com/dir/",
        "https://example.com:443/x;p?q=1",
        "http://user@example.com/a/b/c",
    ],
)
@pytest.mark.parametrize(
    "href",
    [
        "a.html",
        "../a/../../b/./c/",
        "/abs?z=1&a=2",
        "//other.example/p",
        "#top",
        "",
        "?q=1",
        "https:foo",
        "http:foo",
        "http://",
        "//",
        "///x",
        "HTTPS://X.example",
        "a:b",
        "mailto:x@example.com",
        "\n/\n/evil.example/",
        "a/b?c#d",
        "é/ü.html",
    ],
)
def test_canonical_url_relative_matches_urljoin(href: str, base: str) -> None:
    """Resolution agrees with urllib.parse.urljoin (then canonicalised) on common shapes."""

    def outcome(*args: str) -> str:
        try:
            return canonical_url(*args)
        except InvalidURL as exc:
            return f"InvalidURL: {exc.reason}"

    assert outcome(href, base) == outcome(urljoin(base, href.strip()))


@pytest.mark.parametrize(
    ("href", "expected"),
    [
        # RFC 3986 5.2.2 and browsers keep empty path segments (urljoin collapses them)
        ("a//b", "http://example.com/docs/guide/a//b"),
        # a bare "?" is the base path with an empty query (urljoin keeps the base query)
        ("?", "http://example.com/docs/guide/index.html"),
    ],
)
def test_canonical_url_relative_follows_rfc_where_urljoin_does_not(href: str, expected: str) -> None:
    assert canonical_url(href, BASE) == expected


# --------------------------------------------------------------------------
# canonical_url: rejected URLs
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "base", "reason"),
    [
        ("javascript:void(0)", None, "not crawlable"),
        ("JavaScript:alert(1)", BASE, "not crawlable"),
        ("mailto:someone@example.com", None, "not crawlable"),
        ("mailto:", BASE, "not crawlable"),
        ("tel:+15551234", BASE, "not crawlable"),
        ("ftp://example.com/file", None, "not crawlable"),
        ("data:text/html,hello", BASE, "not crawlable"),
        ("file:///etc/passwd", None, "not crawlable"),
        ("/relative/without/base", None, "not crawlable"),
        ("//example.com/no-scheme-no-base", None, "not crawlable"),
        ("", None, "not crawlable"),
        ("http://[::1", None, "unparsable"),
        ("http://[::1/x", BASE, "unparsable"),
        ("http:///x", None, "no host"),
        ("http://", None, "no host"),
        ("https://user@/x", None, "no host"),
        ("http://example.com:99999/", None, "unparsable"),
        ("http://example.com:65536/", None, "unparsable"),
        ("http://example.com:0/", None, "port out of range"),
        ("http://example.com:-1/", None, "unparsable"),
        ("http://example.com:abc/", None, "unparsable"),
        ("http://exa mple.com/", None, "bad host"),
        ("http://a..example.com/", None, "bad host"),
        ("http://.example.com/", None, "bad host"),
        ("http://-example.com/", None, "bad host"),
        ("http://" + "a" * 64 + ".com/", None, "bad host"),
        ("http://exa%6dple.com/", None, "bad host"),
        ("http://example.com/" + "a" * MAX_URL_LENGTH, None, "longer than"),
        ("http://example.com/" + "é" * 400, None, "longer than"),  # 419 chars, 2419 when encoded
        ("http://example.com/" + "a" * 10 * MAX_URL_LENGTH, None, "longer than"),
    ],
)
def test_canonical_url_rejects(url: str, base: str | None, reason: str) -> None:
    with pytest.raises(InvalidURL) as info:
        canonical_url(url, base)
    assert reason in info.value.reason
    assert reason in str(info.value)
    assert isinstance(info.value, ValueError)


def test_invalid_url_message_names_url_and_reason() -> None:
    with pytest.raises(InvalidURL) as info:
        canonical_url("mailto:someone@example.com")
    assert "mailto:someone@example.com" in str(info.value)
    assert "scheme 'mailto' not crawlable" in str(info.value)
    assert info.value.url == "mailto:someone@example.com"


def test_invalid_url_is_raised_every_time() -> None:
    for _ in range(3):
        with pytest.raises(InvalidURL):
            canonical_url("http://[::1")


@pytest.mark.parametrize(
    ("length", "accepted"),
    [(MAX_URL_LENGTH - 1, True), (MAX_URL_LENGTH, True), (MAX_URL_LENGTH + 1, False)],
)
def test_max_url_length_boundary(length: int, accepted: bool) -> None:
    prefix = "http://example.com/"
    url = prefix + "a" * (length - len(prefix))
    assert len(url) == length
    if accepted:
        assert canonical_url(url) == url
    else:
        with pytest.raises(InvalidURL, match="longer than"):
            canonical_url(url)


def test_length_is_measured_on_the_canonical_form() -> None:
    """A long fragment is dropped before the length is checked."""
    url = "http://example.com/page#" + "f" * MAX_URL_LENGTH
    assert canonical_url(url) == "http://example.com/page"


def test_session_params_constant() -> None:
    assert SESSION_PARAMS == frozenset({"jsessionid", "phpsessid", "sid", "sessid", "sessionid", "oscsid", "zenid",
                                        "cfid", "cftoken"})
    assert MAX_URL_LENGTH == 2083


_URL_PIECES = st.sampled_from(
    ["http://", "https://", "HTTP://", "//", "/", "..", ".", "?", "#", "&", "=", ";", "%", "%2e", "%zz",
     "@", ":", "[", "]", "::1", "80", "443", "a", "é", "\ud800", "\x00", " ", "\t", "jsessionid", "sid",
     "example.com", "xn--", "-", "_", "\\", "+"]
)


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_URL_PIECES, max_size=12).map("".join), st.sampled_from([None, BASE, "https://h.example"]))
@example("?jsessionid\x00", BASE)  # found by hypothesis: w3lib drops the NUL after our session filter
def test_canonical_url_raises_only_invalid_url_and_is_idempotent(url: str, base: str | None) -> None:
    try:
        canonical = canonical_url(url, base)
    except InvalidURL:
        return
    assert canonical.isascii()
    assert canonical.startswith(("http://", "https://"))
    assert "#" not in canonical
    assert len(canonical) <= MAX_URL_LENGTH
    assert canonical_url(canonical) == canonical


# --------------------------------------------------------------------------
# fingerprint
# --------------------------------------------------------------------------


def test_fingerprint_known_value() -> None:
    # MD5("http://example.com/"), RFC 1321
    assert fingerprint("http://example.com/") == "a6bf1757fff057f266b697df9cf176fd"


@pytest.mark.parametrize(
    "url",
    ["http://example.com/", "https://xn--bcher-kva.example/r%C3%A9sum%C3%A9?q=1", "http://[::1]:8080/"],
)
def test_fingerprint_is_stable_32_hex(url: str) -> None:
    first = fingerprint(url)
    assert first == fingerprint(url)
    assert re.fullmatch(r"[0-9a-f]{32}", first)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("http://example.com/", "https://example.com/"),
        ("http://example.com/a", "http://example.com/A"),
        ("http://example.com/?a=1", "http://example.com/?a=2"),
        ("http://example.com:8080/", "http://example.com/"),
    ],
)
def test_fingerprint_differs(a: str, b: str) -> None:
    assert fingerprint(canonical_url(a)) != fingerprint(canonical_url(b))


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("HTTP://Example.com:80/x?b=2&a=1#f", "http://example.com/x?a=1&b=2"),
        ("http://Bücher.example", "http://xn--bcher-kva.example/"),
        ("http://example.com/s;jsessionid=1?PHPSESSID=2", "http://example.com/s"),
    ],
)
def test_fingerprint_same_for_equivalent_spellings(a: str, b: str) -> None:
    assert fingerprint(canonical_url(a)) == fingerprint(canonical_url(b))


def test_fingerprint_hashes_utf8() -> None:
    # input is hashed as given, as UTF-8 bytes (MD5 of b"\xc3\xa9", not of latin-1 b"\xe9")
    assert fingerprint("é") == "66ddcd97cfdeabb2f6fb8a999b4bc76f"


# --------------------------------------------------------------------------
# url_host and in_scope
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "host"),
    [
        ("http://Example.COM:8080/x", "example.com"),
        ("https://docs.example.org/a?b#c", "docs.example.org"),
        ("http://user:pw@Host.example/", "host.example"),
        ("https://[::1]:443/", "::1"),
        ("/relative/path", ""),
        ("mailto:a@example.com", ""),
        ("http://[::1", ""),
        ("", ""),
    ],
)
def test_url_host(url: str, host: str) -> None:
    assert url_host(url) == host


@pytest.mark.parametrize(
    ("host", "domains", "expected"),
    [
        ("example.com", ["example.com"], True),
        ("a.example.com", ["example.com"], True),
        ("a.b.example.com", ["example.com"], True),
        ("badexample.com", ["example.com"], False),
        ("example.com.evil.org", ["example.com"], False),
        ("example.org", ["example.com"], False),
        ("com", ["example.com"], False),
        ("A.Example.COM", ["example.com"], True),
        ("a.example.com", ["EXAMPLE.COM"], True),
        ("example.com.", ["example.com"], True),
        ("a.example.com", [".example.com"], True),
        ("other.org", ["example.com", "other.org"], True),
        ("example.com", [], False),
        ("", ["example.com"], False),
        ("example.com", [""], False),
        ("xn--bcher-kva.example", ["bücher.example"], True),
        ("www.bücher.example", ["xn--bcher-kva.example"], True),
    ],
)
def test_in_scope(host: str, domains: list[str], expected: bool) -> None:
    assert in_scope(host, domains) is expected
    assert in_scope(host, domain_keys(domains)) is expected  # the set a Scope checks links with


def test_in_scope_with_many_domains_agrees_with_comparing_each_suffix() -> None:
    """Checked against a Domains set (one look-up per label), a host gets the answer of the
    rule stated plainly: equal to a domain, or ending in "." + a domain."""
    import random
    rng = random.Random(7)
    labels = ["a", "b", "ex", "example", "com", "org", "0", "127", "xn--bcher-kva"]
    name = lambda: ".".join(rng.choice(labels) for _ in range(rng.randint(1, 4)))  # noqa: E731
    domains = [name() for _ in range(3000)]
    keys = domain_keys(domains)
    for _ in range(3000):
        host = name()
        plain = any(host == d or host.endswith("." + d) for d in domains)
        assert in_scope(host, keys) is plain, (host, plain)
    assert domain_keys(keys) is keys


def test_in_scope_accepts_any_iterable() -> None:
    assert in_scope("a.example.com", (d for d in ["nope.org", "example.com"]))
    assert in_scope("a.example.com", frozenset({"example.com"}))


# ----------------------------------------------------------------------------------------------
# The fast path of canonicalisation gives exactly what the full (w3lib) path gives

from gridcrawl.urls import _canonical_full, _canonical_simple, _join  # noqa: E402

from pathlib import Path  # noqa: E402

DOCS_ROOT = "/usr/share/doc/python3-doc/html"

_SEGMENTS = st.one_of(
    st.sampled_from([".", "..", "", "a", "B", "x.html", "~u", "a(b)", "!$&'*+,=:@", "-_", "%41", ";x", "é", "?q", "#f"]),
    st.text(alphabet="abcXYZ019._~!$&'()*+,=:@-", max_size=6))


@settings(max_examples=1000, deadline=None)
@given(st.sampled_from(["http", "https", "HTTP"]),
       st.sampled_from(["a.example", "h", "127.0.0.1", "A.b", "a..b", "x_y.z", "a.", "-a"]),
       st.sampled_from(["", ":80", ":443", ":8080", ":0", ":99999", ":080", ":"]),
       st.lists(_SEGMENTS, max_size=6), st.sampled_from(["", "#x", "#"]), st.booleans())
def test_fast_path_equals_the_full_path(scheme, host, port, segments, fragment, slash):
    url = f"{scheme}://{host}{port}" + ("/" + "/".join(segments) if segments or slash else "") + fragment
    fast = _canonical_simple(url)
    if fast is None:
        return  # not the common shape: the full path handles it
    assert fast == _canonical_full(url), url


def test_fast_path_takes_the_common_shapes_and_refuses_the_rest():
    assert _canonical_simple("http://a.example/b/../c/./d.html#top") == "http://a.example/c/d.html"
    assert _canonical_simple("https://a.example:443") == "https://a.example/"
    assert _canonical_simple("http://a.example:8080/x") == "http://a.example:8080/x"
    for other in ("http://A.example/", "http://a.example/?q=1", "http://a.example/%7E", "http://a.example/;jsessionid=1",
                  "http://user@a.example/", "ftp://a.example/", "http://a.example:0/", "http://a.example/é"):
        assert _canonical_simple(other) is None, other


@pytest.mark.skipif(not Path(DOCS_ROOT).is_dir(), reason="Debian's python3-doc is not installed")
def test_fast_path_equals_the_full_path_on_every_link_of_the_python_docs():
    import glob

    import lxml.html

    checked = 0
    for path in sorted(glob.glob(f"{DOCS_ROOT}/**/*.html", recursive=True))[::7]:
        base = "http://docs.example" + path[len(DOCS_ROOT):]
        for href in lxml.html.parse(path).getroot().xpath("//a/@href"):
            url = _join(base, href.strip())
            fast = _canonical_simple(url)
            if fast is not None:
                assert fast == _canonical_full(url), (base, href)
                checked += 1
    assert checked > 5000  # the fast path is the common case on a real site


def test_an_escape_made_by_decoding_another_is_normalised_too():
    # w3lib turns "%44" into "D" in one pass, which makes "%a" + "D" a new escape "%aD"
    assert canonical_url("http://a.example/%a%443") == "http://a.example/%AD3"
    assert canonical_url(canonical_url("http://http://%a%443")) == canonical_url("http://http://%a%443")
