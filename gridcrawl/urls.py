"""Canonical URLs and URL fingerprints: the one place gridcrawl normalises URLs.

Every URL that enters the frontier, the database or a keep/follow rule passes
through :func:`canonical_url` first, so two spellings of the same resource
(``HTTP://Example.COM:80/a?b=2&a=1#top`` and ``http://example.com/a?a=1&b=2``)
get the same canonical URL and therefore the same :func:`fingerprint`
(MD5 of the canonical URL, as MCMTCrawler keys its URLs).

Canonicalisation follows RFC 3986 section 6 (syntax-based normalisation:
case, percent-encoding, dot segments; scheme-based normalisation: default
ports, empty path) and the usual crawler practice of sorting the query and
dropping fragments and session identifiers. Percent-encoding, query sorting,
dot segments and IPv6 normalisation are delegated to
``w3lib.url.canonicalize_url`` (Scrapy's URL library); host validation, IDNA,
default ports and session parameters are done here.

Speed (this is the parse hot path, about 300 links per page), measured on
Python 3.11.7 / w3lib 2.5 (best of 5 runs on a quiet 2-core machine; about
1.3 times that under load), one ``canonical_url(href, base)`` call:

* a URL not seen before: about 15 us for a relative or absolute path
  (``../reference/x.html``), about 26 us with a three-argument query;
  ``w3lib.url.canonicalize_url`` alone takes 12 and 25 us of that. The
  commonest shape (lower-case http(s) host, a path of unreserved and
  sub-delimiter characters, no query, no percent sign) takes a fast path
  instead, about 3 us: dot segments removed (RFC 3986 section 5.2.4), the
  default port and the fragment dropped. It gives what w3lib gives, checked
  by a property test and on every link of the Python documentation
  (``tests/test_urls.py``);
* a URL seen before (navigation menus repeat on every page of a site):
  about 1 us, from an LRU cache of 32768 canonical URLs, keyed without the
  fragment (``os.html#os.getcwd`` and ``os.html#os.chdir`` are one entry: on
  the Python docs 5,700 entries instead of 29,000, 3 % misses instead of 18 %);
* a fragment-only link (``#section``): about 0.3 us.

Relative references are joined by a fast path equivalent to
``urllib.parse.urljoin`` for the common shapes; unusual ones fall back to
``urljoin`` itself.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections.abc import Iterable
from functools import lru_cache
from urllib.parse import unquote_plus, urljoin, urlsplit

from w3lib.url import canonicalize_url as _w3lib_canonicalize_url

from gridcrawl.errors import InvalidURL  # noqa: F401 (re-exported)

__all__ = [
    "address_hint",
    "MAX_URL_LENGTH",
    "SESSION_PARAMS",
    "InvalidURL",
    "Domains",
    "canonical_url",
    "domain_keys",
    "fingerprint",
    "in_scope",
    "path_trap",
    "scope_domain",
    "url_host",
    "url_shape",
]

#: Longest canonical URL accepted, in characters (the historical Internet
#: Explorer limit, the de facto ceiling that sites design for).
MAX_URL_LENGTH = 2083

#: Query and path parameters that carry a session identifier, not content;
#: they are removed during canonicalisation (compared case-insensitively): Java servlets'
#: ``jsessionid``, PHP's ``PHPSESSID``, osCommerce's ``osCsid``, Zen Cart's ``zenid``,
#: ColdFusion's ``CFID`` and ``CFTOKEN``, and the generic ``sid``, ``sessid``, ``sessionid``.
#: A shop that writes a new one into every link of every page otherwise makes each page a new
#: URL on each visit. ``session_id`` is not one of them: a conference site's
#: ``/talk?session_id=42`` names a page.
SESSION_PARAMS = frozenset({"jsessionid", "phpsessid", "sid", "sessid", "sessionid", "oscsid", "zenid", "cfid",
                            "cftoken"})

_CRAWLABLE_SCHEMES = {"http": 80, "https": 443}  # scheme -> default port (RFC 9110 4.2)

# Inputs this many times over the limit are refused before any parsing: they
# cannot shrink to MAX_URL_LENGTH and would only bloat the cache keys.
_RAW_LENGTH_GUARD = 4 * MAX_URL_LENGTH

# ";jsessionid=ABC" style path parameters (Java servlets, RFC 3986 3.3 params).
_PATH_SESSION_RE = re.compile(
    r";(?:" + "|".join(sorted(SESSION_PARAMS)) + r")=[^/;]*", re.IGNORECASE
)
# Cheap pre-check before splitting a query into arguments.
_QUERY_SESSION_HINT_RE = re.compile("|".join(sorted(SESSION_PARAMS)), re.IGNORECASE)
# An RFC 3986 scheme followed by ":" at the start of a reference.
_SCHEME_RE = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*:")
# A DNS label after IDNA encoding (underscores are tolerated: they occur in
# real host names even though RFC 952 forbids them).
_LABEL_RE = re.compile(r"[a-z0-9_](?:[a-z0-9_\-]{0,61}[a-z0-9_])?\Z")
_TAB_NEWLINE = str.maketrans("", "", "\t\n\r")
# The fast path's URLs: lower-case http(s) host, optional port without a leading zero, a path of
# characters w3lib leaves as they are (RFC 3986 unreserved and sub-delims but ";", plus ":" "@"),
# no query, any fragment (dropped). Anything else takes w3lib's path.
_SIMPLE_URL_RE = re.compile(
    r"(https?)://([a-z0-9_.\-]+)(?::([1-9][0-9]{0,4}))?(/[A-Za-z0-9._~!$&'()*+,=:@/\-]*)?(?:#.*)?\Z", re.S)


@lru_cache(maxsize=4096)
def _encode_host(hostname: str) -> str | None:
    """Lower-case, IDNA-encode (RFC 3490, after NFKC) and validate a host name.

    Returns the ASCII host (IPv6 addresses in brackets, one trailing dot
    removed) or None when the name is not a valid host.
    """
    if ":" in hostname:  # IPv6 literal; urlsplit has already validated it
        return f"[{hostname}]"
    host = hostname.lower()
    if not host.isascii():
        try:
            host = unicodedata.normalize("NFKC", host).encode("idna").decode("ascii")
        except UnicodeError:
            return None
    if host.endswith("."):
        host = host[:-1]
    if not host or len(host) > 253:
        return None
    for label in host.split("."):
        if not _LABEL_RE.match(label):
            return None
    return host


def _strip_session_query(query: str) -> str:
    """Drop ``&``-separated arguments whose name is a session parameter."""
    kept = []
    for arg in query.split("&"):
        name = arg.split("=", 1)[0]
        if unquote_plus(name).strip().lower() not in SESSION_PARAMS:
            kept.append(arg)
    return "&".join(kept)


def _remove_dot_segments(path: str) -> str:
    """RFC 3986 section 5.2.4 on an absolute path (starting with ``/``): ``.`` and ``..``
    segments removed, a trailing one leaving a trailing slash (``/a/b/..`` is ``/a/``)."""
    segments = path.split("/")
    out: list[str] = []
    last = len(segments) - 1
    for i in range(1, len(segments)):
        segment = segments[i]
        if segment == "." or segment == "..":
            if segment == ".." and out:
                out.pop()
            if i == last:
                out.append("")
        else:
            out.append(segment)
    return "/" + "/".join(out)


def _canonical_simple(url: str) -> str | None:
    """The fast path of :func:`_canonical_absolute`: the canonical form of a URL of the common
    shape (see ``_SIMPLE_URL_RE``), equal to what the full path gives; None for any other URL."""
    match = _SIMPLE_URL_RE.match(url)
    if match is None:
        return None
    scheme, host, port, path = match.groups()
    if _encode_host(host) != host:  # a bad label, or a trailing dot to remove
        return None
    if port is not None:
        number = int(port)
        if number > 65535:
            return None
        if number != _CRAWLABLE_SCHEMES[scheme]:
            host = f"{host}:{number}"
    if not path:
        path = "/"
    elif "/." in path:
        path = _remove_dot_segments(path)
    canonical = f"{scheme}://{host}{path}"
    return canonical if len(canonical) <= MAX_URL_LENGTH else None


@lru_cache(maxsize=32768)
def _canonical_absolute(url: str) -> str:
    """Canonicalise an absolute URL (whitespace already stripped); see canonical_url."""
    return _canonical_simple(url) or _canonical_full(url)


def _canonical_full(url: str) -> str:
    """Canonicalise any absolute URL through urlsplit and w3lib (the path every URL the fast
    path refuses takes); raises :class:`InvalidURL` as canonical_url documents."""
    try:
        parts = urlsplit(url)
        hostname = parts.hostname
        port = parts.port
    except ValueError as exc:  # bad IPv6 literal, non-numeric or out-of-range port
        raise InvalidURL(url, f"unparsable: {exc}") from None
    scheme = parts.scheme  # urlsplit lower-cases it
    default_port = _CRAWLABLE_SCHEMES.get(scheme)
    if default_port is None:
        raise InvalidURL(url, f"scheme {scheme!r} not crawlable")
    if not hostname:
        raise InvalidURL(url, "no host")
    host = _encode_host(hostname)
    if host is None:
        raise InvalidURL(url, f"bad host name {hostname!r}")
    if port is not None:
        if port == 0:
            raise InvalidURL(url, "port out of range 1-65535")
        if port != default_port:
            host = f"{host}:{port}"
    netloc = parts.netloc
    at = netloc.rfind("@")
    if at != -1:  # keep user information as written (it is case-sensitive)
        host = netloc[: at + 1] + host
    path = parts.path
    if ";" in path:
        path = _PATH_SESSION_RE.sub("", path)
    query = parts.query
    if query and _QUERY_SESSION_HINT_RE.search(query):
        query = _strip_session_query(query)
    rebuilt = f"{scheme}://{host}{path}?{query}" if query else f"{scheme}://{host}{path}"
    try:
        canonical = _w3lib_canonicalize_url(rebuilt, keep_fragments=False)
        for _ in range(3):
            # w3lib decodes %XX of unreserved characters in one pass, which can leave a new escape
            # behind ("%a%44" becomes "%aD"): canonicalise again until nothing changes
            if "%" not in canonical:
                break
            again = _w3lib_canonicalize_url(canonical, keep_fragments=False)
            if again == canonical:
                break
            canonical = again
    except ValueError as exc:  # defensive: w3lib re-parses the rebuilt URL
        raise InvalidURL(url, f"unparsable: {exc}") from None
    if "?" in canonical and _QUERY_SESSION_HINT_RE.search(canonical):
        # once more on w3lib's spelling: "jsessionid\x00" names a session parameter only after
        # w3lib drops the control character, and a canonical URL must be its own canonical form
        head, _, query = canonical.partition("?")
        query = _strip_session_query(query)
        canonical = f"{head}?{query}" if query else head
    if len(canonical) > MAX_URL_LENGTH:
        raise InvalidURL(url, f"longer than {MAX_URL_LENGTH} characters")
    return canonical


@lru_cache(maxsize=256)
def _split_base(base: str) -> tuple[str, str, str, str] | None:
    """(scheme, "scheme://netloc", path, base without fragment) for an http(s) base, else None."""
    try:
        parts = urlsplit(base)
    except ValueError:
        return None
    if parts.scheme not in _CRAWLABLE_SCHEMES or not parts.netloc:
        return None
    origin = f"{parts.scheme}://{parts.netloc}"
    path = parts.path or "/"
    without_fragment = f"{origin}{path}?{parts.query}" if parts.query else f"{origin}{path}"
    return parts.scheme, origin, path, without_fragment


def _join(base: str, ref: str) -> str:
    """Resolve reference ``ref`` against absolute ``base`` (RFC 3986 section 5.2).

    Gives the same canonical result as ``urllib.parse.urljoin(base, ref)``:
    the common shapes are joined by string operations (dot segments are left
    for w3lib to remove), anything else is handed to ``urljoin``. It differs
    only where ``urljoin`` departs from RFC 3986 section 5.2 and from
    browsers: empty path segments are kept (``a//b`` stays, ``urljoin``
    collapses it to ``a/b``); a bare ``?`` gives the base path with an empty
    query and a bare ``;`` the base directory, where ``urljoin`` returns the
    base document itself.
    """
    split = _split_base(base)
    if split is None:
        return urljoin(base, ref)
    if "\t" in ref or "\n" in ref or "\r" in ref:  # removed by browsers and urlsplit
        ref = ref.translate(_TAB_NEWLINE)
    scheme, origin, path, without_fragment = split
    if not ref or ref[0] == "#":
        return without_fragment
    first = ref[0]
    if first == "/":
        if ref.startswith("//"):
            if len(ref) == 2 or ref[2] in "/?#":  # empty authority: urljoin's rules
                return urljoin(base, ref)
            return f"{scheme}:{ref}"
        return origin + ref
    if first == "?":
        return origin + path + ref
    match = _SCHEME_RE.match(ref)
    if match:
        end = match.end()
        if match.group()[:-1].lower() != scheme:
            return ref  # absolute URL with another scheme: urljoin returns it unchanged
        if ref.startswith("//", end) and len(ref) > end + 2 and ref[end + 2] not in "/?#":
            return ref  # absolute URL with an authority
        return urljoin(base, ref)  # "http:foo", "http://": urljoin's relative special cases
    return origin + path[: path.rfind("/") + 1] + ref


def _backslashes_to_slashes(url: str) -> str:
    """Turn ``\\`` into ``/`` before the query, as browsers (and w3lib) do for http(s) URLs.

    WHATWG URL Standard: in special schemes a backslash in the authority or
    path is a path separator, so ``http://a.example\\b`` is host
    ``a.example`` and ``\\\\host/x`` is a scheme-relative reference.
    """
    cut = len(url)
    for mark in "?#":
        index = url.find(mark)
        if index != -1 and index < cut:
            cut = index
    return url[:cut].replace("\\", "/") + url[cut:]


def canonical_url(url: str, base: str | None = None) -> str:
    """Return the canonical form of ``url``, resolved against ``base`` when given.

    Steps: strip surrounding whitespace; read a backslash before the query
    as ``/``, as browsers do; resolve against ``base`` (RFC 3986 section 5,
    as ``urllib.parse.urljoin``); accept only ``http`` and ``https`` with a
    host; lower-case scheme and host and IDNA-encode the host (RFC 3490,
    Python's ``idna`` codec after NFKC, as w3lib does); drop the default
    port (80 for http, 443 for https), the fragment, ``;jsessionid=...``-style
    path parameters and query arguments named in :data:`SESSION_PARAMS`;
    sort the query arguments, normalise percent-encoding and remove dot
    segments (``w3lib.url.canonicalize_url``, blank values kept); an empty
    path becomes ``/``.

    Args:
        url: an absolute URL, or a reference relative to ``base`` (an ``href``).
        base: absolute URL of the page (or its ``<base href>``), or None.

    Returns:
        The canonical URL, an ASCII ``str`` of at most :data:`MAX_URL_LENGTH`
        characters.

    Raises:
        InvalidURL: the URL is unparsable (bad IPv6 literal, bad port), its
            scheme is not http/https (``javascript:``, ``mailto:``, relative
            without a base), it has no host or a malformed host name, or its
            canonical form is longer than :data:`MAX_URL_LENGTH`.
    """
    url = url.strip()
    if "\\" in url:
        url = _backslashes_to_slashes(url)
    if base is not None:
        base = base.strip()
        if "\\" in base:
            base = _backslashes_to_slashes(base)
        url = _join(base, url)
    if len(url) > _RAW_LENGTH_GUARD:
        raise InvalidURL(url, f"longer than {MAX_URL_LENGTH} characters")
    hash_at = url.find("#")
    if hash_at != -1:  # the fragment goes anyway: one cache entry for every anchor of a page
        url = url[:hash_at]
    return _canonical_absolute(url)


def fingerprint(canonical: str) -> str:
    """Return the fingerprint of a canonical URL: MD5 hex digest (32 lowercase hex chars).

    The MD5 (RFC 1321) of the UTF-8 bytes of ``canonical`` keys URLs in the
    frontier and the database, as in MCMTCrawler. It is an identifier, not a
    security measure. The argument is expected to be the output of
    :func:`canonical_url`; it is hashed as given.
    """
    return hashlib.md5(canonical.encode("utf-8"), usedforsecurity=False).hexdigest()


#: A path segment occurring this many times makes a URL a crawler trap (see :func:`path_trap`).
PATH_REPEAT_LIMIT = 3


def path_trap(url: str, limit: int = PATH_REPEAT_LIMIT) -> str | None:
    """Tell whether ``url``'s path repeats a segment ``limit`` times: a crawler trap.

    Relative links that resolve onto themselves (``a/b/`` on ``/a/b/``) and misconfigured
    servers make ever longer paths such as ``/a/b/a/b/a/b/`` or ``/x/x/x``; a real site almost
    never names one directory three times on one path. This is Apache Nutch's repeating-path
    rule (``regex-urlfilter.txt``) made independent of where the repeats sit. Empty segments
    (``//``) are not counted; segments are compared as written (a canonical URL has one
    spelling).

    Args:
        url: an absolute URL (normally canonical).
        limit: how many occurrences of one segment make a trap (3).

    Returns:
        The repeated segment (e.g. ``"a"``), or ``None`` when the path is not a trap.
    """
    if url.startswith(("http://", "https://")):  # fast path: the path of a canonical URL
        rest = url[url.index("//") + 2:].split("#", 1)[0].split("?", 1)[0]
        slash = rest.find("/")
        path = "" if slash == -1 else rest[slash:]
    else:
        try:
            path = urlsplit(url).path
        except ValueError:
            return None
    if path.count("/") < limit:
        return None
    counts: dict[str, int] = {}
    for segment in path.split("/"):
        if segment:
            seen = counts.get(segment, 0) + 1
            if seen >= limit:
                return segment
            counts[segment] = seen
    return None


#: What varies in a numbered family: a run of 12+ letters and digits with a digit in it (a
#: random token), else a run of hex digits with a digit in it (``a3f9c2e1``, a UUID's parts,
#: plain numbers).
_VARYING_RE = re.compile(r"[0-9A-Za-z]{12,}|[0-9a-fA-F]*[0-9][0-9a-fA-F]*")
_DIGIT_RE = re.compile(r"[0-9]")


def url_shape(url: str) -> str | None:
    """The shape of ``url``: ``host/path?query`` (scheme and fragment dropped, host lower case)
    with every run of digits in the path and query replaced by ``#``
    (``/calendar?month=2024-05`` → ``/calendar?month=#-#``), and so every token with a digit
    in it: a run of hex digits (``?token=a3f9c2e1b7d04f6a`` → ``?token=#``, a UUID → ``#-#-#-#-#``)
    or of 12 or more letters and digits (``?sid=xK9mQ2pLr7Zt``); ``None`` when its path and
    query hold no digit (such a URL is no member of a numbered family). The port stays as it is.
    (Digits only, a session token of hex letters gave every URL a shape of its own: a site's
    one page under random tokens took the whole per-host cap, 100,000 fetches.)

    The client's trap detector groups pages by shape (:mod:`gridcrawl.client.traps`), and the
    executor computes a page's SimHash only when its URL has a shape (or the instruction asks
    for it on every page): nobody else reads it."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return None
    tail = parts.path + ("?" + parts.query if parts.query else "")
    if _DIGIT_RE.search(tail) is None:
        return None
    return parts.netloc.lower() + _VARYING_RE.sub(_varying, tail)


def _varying(match: re.Match) -> str:
    """``#`` for a token of :data:`_VARYING_RE` with a digit in it (a hex run has one), else
    the token (a long word)."""
    token = match.group()
    return "#" if len(token) < 12 or _DIGIT_RE.search(token) else token


def url_origin(url: str) -> str:
    """The origin of canonical URL ``url`` as written: ``"scheme://host[:port]"`` (everything
    before its path, query or fragment), lower case; ``url`` itself when it has no ``//``."""
    start = url.find("//")
    if start == -1:
        return url.lower()
    end = len(url)
    for mark in "/?#":
        i = url.find(mark, start + 2, end)
        if i != -1:
            end = i
    return url[:end].lower()


def url_host(url: str) -> str:
    """Return the lower-case host name of ``url`` without port or brackets.

    Returns ``""`` when the URL has no host or cannot be parsed. The name is
    returned as written (a canonical URL already carries the IDNA form).
    """
    if url.startswith(("http://", "https://")):  # fast path: canonical URLs (a hot path)
        start = url.index("//") + 2
        end = len(url)
        for mark in "/?#":
            i = url.find(mark, start, end)
            if i != -1:
                end = i
        netloc = url[start:end]
        if "@" not in netloc and "[" not in netloc and "\\" not in netloc and not netloc.isspace():
            return netloc.split(":", 1)[0].lower()
    try:
        return urlsplit(url.strip()).hostname or ""
    except ValueError:
        return ""


@lru_cache(maxsize=1024)
def _domain_key(domain: str) -> str:
    """Lower-case, IDNA-encoded form of an allowed domain (leading/trailing dots removed)."""
    domain = domain.strip().strip(".").lower()
    if not domain.isascii():
        encoded = _encode_host(domain)
        if encoded is not None:
            return encoded
    return domain


class Domains(frozenset):
    """Allowed domains in the form :func:`in_scope` compares them (lower case, IDNA, no outer
    dots), made by :func:`domain_keys`: checking a host against it costs one set look-up per
    label of the host, however many domains it holds (a crawl of many seed hosts)."""

    __slots__ = ()


def domain_keys(domains: Iterable[str]) -> Domains:
    """``domains`` (names such as ``"example.com"``) as a :class:`Domains` set, for
    :func:`in_scope` to use many times; a :class:`Domains` is returned as it is."""
    if isinstance(domains, Domains):
        return domains
    return Domains(key for key in map(_domain_key, domains) if key)


def in_scope(host: str, allowed_domains: Iterable[str]) -> bool:
    """Tell whether ``host`` is one of ``allowed_domains`` or a subdomain of one.

    Comparison is case-insensitive, label-wise and ignores a trailing dot:
    ``"example.com"`` allows ``"example.com"`` and ``"a.example.com"`` but not
    ``"badexample.com"``. Non-ASCII domains are compared in IDNA form. An
    empty ``allowed_domains`` allows nothing.

    Args:
        host: a host name without port, e.g. from :func:`url_host`.
        allowed_domains: domain names such as ``"example.com"``, or the :class:`Domains` that
            :func:`domain_keys` made of them (then a check costs one set look-up per label of
            ``host``; otherwise the names are read first).

    Returns:
        True when the host is in scope.
    """
    return scope_domain(host, allowed_domains) is not None


def scope_domain(host: str, allowed_domains: Iterable[str]) -> str | None:
    """The allowed domain ``host`` falls under, as :func:`in_scope` compares them, or None.

    The most specific one wins: with ``example.com`` and ``docs.example.com`` allowed,
    ``a.docs.example.com`` falls under ``docs.example.com`` and ``www.example.com`` under
    ``example.com``. Returns the domain in its compared form (lower case, IDNA, no outer
    dots), the key the per-host cap counts a seed's subdomains under."""
    host = host.strip().rstrip(".").lower()
    if not host:
        return None
    if not host.isascii():
        host = _encode_host(host) or host
    keys = domain_keys(allowed_domains)
    while host not in keys:  # the host, then each parent domain: a.b.example.com, b.example.com ...
        dot = host.find(".")
        if dot == -1:
            return None
        host = host[dot + 1:]
    return host


def address_hint(seed: str) -> str:
    """What an invalid ``seed`` (a seed URL, a rule's ``base_url``) may have meant, as a
    parenthesised clause ("" when nothing fits). For a file on this machine (a ``file:`` URL, a path starting ``/``, ``./``, ``../``,
    ``~`` or ``C:\\``, or the name of a file that exists): the command that serves its folder
    over HTTP on 127.0.0.1 and the URL to crawl there, as executors fetch over HTTP(S) only. For
    a URL written without a scheme: its ``http://`` form; with a misspelt one (``htp://``,
    ``htps://``): the URL with the scheme it is closest to."""
    import difflib
    import shlex
    from pathlib import Path
    from urllib.parse import quote, unquote
    if seed.lower().startswith("file:"):
        path = unquote(urlsplit(seed).path)
    elif (seed.startswith(("/", "./", "../", "~")) or re.match(r"[A-Za-z]:[\\/]", seed)
          or ("://" not in seed and Path(seed).is_file())):
        path = seed
    else:
        if "://" in seed:
            scheme, rest = seed.split("://", 1)
            close = difflib.get_close_matches(scheme.lower(), ["http", "https"], n=1, cutoff=0.7)
            return f" (did you mean {close[0]}://{rest}?)" if close and scheme.lower() not in ("http", "https") else ""
        if not seed:
            return ""
        # a scheme written wrong (http:/host, https//host, http:host): the scheme it named, mended
        mended = re.match(r"(?i)(https?)(?::/?|//|:)(?!/)(.+)", seed)
        return f" (did you mean {mended.group(1).lower()}://{mended.group(2)}?)" if mended else \
            f" (did you mean http://{seed}?)"
    file = Path(path).expanduser()
    folder, name = (file, "") if file.is_dir() else (file.parent, file.name)
    return (f" (a file, not a web address: executors fetch over HTTP, so serve its folder with "
            f"`python3 -m http.server 8000 --bind 127.0.0.1 --directory {shlex.quote(str(folder))}` "
            f"and crawl http://127.0.0.1:8000/{quote(name)})")
