"""robots.txt on an executor: fetch once per origin, cache, answer "may I fetch this URL?".

This module owns the Robots Exclusion Protocol (RFC 9309) for an executor process: one
:class:`RobotsCache` shared by all worker threads fetches ``/robots.txt`` of each origin
(scheme, host and port, RFC 9309 §2.3) once, parses it with protego, keeps the rules for at most
``max_age`` seconds (24 h, RFC 9309 §2.4), and answers :meth:`RobotsCache.check` for every URL
and every redirect hop the executor is about to request. Concurrent workers asking about the
same origin wait for the one fetch in progress instead of all fetching it.

What a robots.txt fetch means (RFC 9309 §2.3.1):

===========================================  ==================================================
outcome                                       rules used
===========================================  ==================================================
2xx (after at most 10 redirects)              parsed (the first ``max_bytes``: RFC 9309 §2.5)
4xx except 429 ("unavailable")                allow everything
too many redirects, a redirect loop, an       allow everything (RFC 9309 §2.3.1.2: the file
invalid or refused redirect target            MAY be assumed unavailable)
429, 5xx, timeout, connection failure         disallow everything for ``retry_after`` seconds,
("unreachable")                               then fetch again (RFC 9309 §2.3.1.4)
an answer that is no usable HTTP              disallow everything for ``retry_after`` seconds:
(``bad_response``: an SSH banner, headers     the page fails as ``bad_response`` too, unfetched
past the limits, a body that does not         and not retried (a retry gets the same answer)
decode)
===========================================  ==================================================

429 counts as unreachable, not unavailable: a server that asks us to slow down must not be
read as "no rules" (Google does the same). Rules are matched for the **product token** of the
User-Agent (``gridcrawl`` of ``gridcrawl/0.1 (+https://...)``), case-insensitively, as RFC 9309
§2.2.1 says; protego implements the matching (longest match, Allow wins a tie, ``*`` and ``$``,
groups of the same user agent merged, ``*`` group as the fallback).

The crawl delay reported is the group's ``Crawl-delay``, else ``Request-rate`` as seconds per
request, else ``None``; capping it is the manager's job (``max_crawl_delay``).
"""

from __future__ import annotations

import math
import re
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Callable, Protocol
from urllib.parse import urlsplit

from protego import Protego

from gridcrawl.executor.fetch import ErrorKind, FetchResult, HopRefusal
from gridcrawl.protocol import MAX_SECONDS

__all__ = ["RobotsCache", "RobotsDecision", "product_token", "origin_of", "ROBOTS_MAX_BYTES", "ROBOTS_CACHE_LINES"]

#: Redirects followed to reach a robots.txt (RFC 9309 §2.3.1.2: at least five); pages get 20.
ROBOTS_MAX_REDIRECTS = 10
#: Bytes of a robots.txt that are parsed (RFC 9309 §2.5: at least 500 KiB); the rest is ignored.
ROBOTS_MAX_BYTES = 512 * 1024
#: Lines of robots.txt (about one rule each) the cache keeps parsed, all origins together; the
#: least recently used origins are forgotten beyond it. protego keeps ~500 bytes a rule: 512 KiB
#: of rules (25,000) took 13 MiB, and a maze of subdomains serving such a file each grew an
#: executor by as much per host, 10,000 origins kept. 250,000 lines: ~130 MiB at most; 5,000
#: origins of a 50-line robots.txt.
ROBOTS_CACHE_LINES = 250_000

_DEFAULT_PORTS = {"http": 80, "https": 443}
_TOKEN_RE = re.compile(r"[A-Za-z_-]+")
#: A ``Crawl-delay`` of infinity ("inf", "Infinity"): protego drops a value that is not finite,
#: which left such a host with no delay at all; it is read as the longest delay (MAX_SECONDS),
#: which the manager caps at ``max_crawl_delay``.
_INFINITE_DELAY = re.compile(r"^([ \t]*crawl-delay[ \t]*:[ \t]*)\+?inf(?:inity)?(?=[ \t]*(?:#|$))",
                             re.IGNORECASE | re.MULTILINE)
#: A ``User-agent`` line naming a product with more than its token (``gridcrawl/0.1``, our whole
#: User-Agent string): protego looked for all of it in our token and never applied the group.
#: The line names its token only, as Google's parser reads it (the leading letters, ``_`` and
#: ``-``; RFC 9309 §2.2.1: a crawler matches its product token).
_AGENT_VERSION = re.compile(r"^([ \t]*user-agent[ \t]*:[ \t]*[A-Za-z_-]+)[^\s#]*[^\r\n#]*",
                            re.IGNORECASE | re.MULTILINE)


class _Fetches(Protocol):
    def fetch(self, url: str) -> FetchResult: ...  # pragma: no cover - a protocol


def product_token(user_agent: str) -> str:
    """The product token of a User-Agent string, lower-cased (RFC 9309 §2.2.1).

    ``"gridcrawl/0.1 (+https://example.invalid)"`` gives ``"gridcrawl"``: the leading run of
    letters, ``_`` and ``-``. A string without one gives ``"*"`` (only ``*`` groups apply).
    """
    match = _TOKEN_RE.match(user_agent.strip())
    return match.group().lower() if match else "*"


def origin_of(url: str) -> str | None:
    """The robots.txt origin of ``url``: ``"scheme://host:port"`` with the port always written
    (``http://example.com:80``), lower case; ``None`` for a URL that is not http(s) with a host."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS or not parts.hostname:
        return None
    host = parts.hostname.lower()
    if ":" in host:
        host = f"[{host}]"
    return f"{scheme}://{host}:{port or _DEFAULT_PORTS[scheme]}"


def _robots_url(origin: str) -> str:
    scheme, rest = origin.split("://", 1)
    host, port = rest.rsplit(":", 1)
    if int(port) == _DEFAULT_PORTS[scheme]:
        return f"{scheme}://{host}/robots.txt"
    return f"{origin}/robots.txt"


@dataclass(frozen=True)
class RobotsDecision:
    """The answer for one URL.

    Attributes:
        allowed: True when the URL may be fetched.
        crawl_delay: seconds the host asks between requests (``Crawl-delay``, else
            ``Request-rate``), or ``None``.
        reason: why it is refused (``None`` when allowed).
        unreachable: True when refused only because robots.txt could not be fetched (429, 5xx,
            no answer): the refusal lifts after ``retry_after`` seconds.
        retry_after: seconds until robots.txt is fetched again (only when ``unreachable``).
        no_connection: True when robots.txt found no connection at all: the page fails as
            ``connection`` (retried).
        bad_response: True when robots.txt was answered, but not in usable HTTP (not an HTTP
            response, headers past the limits, a body that does not decode): the page fails as
            ``bad_response`` (not retried; ``reason`` says what robots.txt got).
        fetched: True when this decision fetched robots.txt (a request to the host was made),
            False when it came from the cache.
    """

    allowed: bool
    crawl_delay: float | None = None
    reason: str | None = None
    unreachable: bool = False
    retry_after: float | None = None
    no_connection: bool = False  # the origin refused the connection: the page cannot be fetched either
    bad_response: bool = False  # robots.txt was answered, not in usable HTTP: nor would the page be
    fetched: bool = False

    def refusal(self) -> HopRefusal | None:
        """This decision as a Fetcher hop-check answer: ``None`` if allowed, else a
        :class:`HopRefusal` of kind ROBOTS or ROBOTS_UNREACHABLE (CONNECTION when robots.txt
        found no connection, BAD_RESPONSE when its answer was no usable HTTP)."""
        if self.allowed:
            return None
        if self.no_connection:  # a dead server: the page fails as a connection error (retried soon)
            return HopRefusal(ErrorKind.CONNECTION, self.reason or "connection refused", None)
        if self.bad_response:  # a server of another protocol: the page fails so, not retried
            return HopRefusal(ErrorKind.BAD_RESPONSE, self.reason or "robots.txt: not a usable HTTP response", None)
        kind = ErrorKind.ROBOTS_UNREACHABLE if self.unreachable else ErrorKind.ROBOTS
        return HopRefusal(kind, self.reason or "disallowed by robots.txt", self.retry_after)


CONNECTION_RECHECK = 1.0  # seconds a "cannot connect" robots.txt answer is cached


@dataclass
class _Rules:
    """The cached rules of one origin."""

    parser: Protego | None  # None: allow or disallow everything, per ``allow_all``
    allow_all: bool
    crawl_delay: float | None
    expires: float  # clock() value after which robots.txt is fetched again
    unreachable: bool = False
    note: str = ""  # what happened to the fetch, for messages
    no_connection: bool = False  # the fetch could not connect at all
    bad_response: bool = False  # the fetch failed as bad_response: the origin's answer is no usable HTTP
    lines: int = 0  # lines of robots.txt parsed (the cache's weight of these rules)


class RobotsCache:
    """Per-origin robots.txt rules for one executor; thread-safe.

    Args:
        fetcher: what fetches robots.txt: an object with ``fetch(url) -> FetchResult``, normally
            a :class:`~gridcrawl.executor.fetch.Fetcher` made with ``keep_non_html=True`` (so a
            ``text/plain`` body is downloaded), ``max_body_bytes=ROBOTS_MAX_BYTES`` and
            ``truncate_body=True`` — :meth:`for_fetcher` builds one. Its own hop check (e.g.
            private addresses) applies; it must not be the robots check itself.
        user_agent: the crawler's User-Agent header; rules are matched for its product token.
        max_age: seconds a fetched robots.txt is used (RFC 9309 §2.4: at most 24 hours).
        clock: the time source, seconds (monotonic); tests pass a fake one.
        retry_after: seconds an unreachable robots.txt (429, 5xx, no answer) keeps the origin
            disallowed before it is fetched again.
        max_origins: origins kept; the least recently used is forgotten beyond that.
        max_lines: lines of robots.txt kept parsed, all origins together (the most recently
            used origin is always kept); the least recently used are forgotten beyond that.
    """

    def __init__(self, fetcher: _Fetches, user_agent: str, max_age: float = 24 * 3600,
                 clock: Callable[[], float] = time.monotonic, *, retry_after: float = 60.0,
                 max_origins: int = 10_000, max_lines: int = ROBOTS_CACHE_LINES) -> None:
        self.fetcher = fetcher
        self.user_agent = user_agent
        self.token = product_token(user_agent)
        self.max_age = float(max_age)
        self.clock = clock
        self.retry_after = float(retry_after)
        self.max_origins = int(max_origins)
        self.max_lines = int(max_lines)
        self._lines = 0  # lines of the rules kept
        self.fetches = 0  #: robots.txt fetches made (for tests and figures)
        self._lock = threading.Lock()
        self._rules: OrderedDict[str, _Rules] = OrderedDict()
        self._pending: dict[str, threading.Event] = {}

    @classmethod
    def for_fetcher(cls, fetcher, **kwargs) -> "RobotsCache":
        """A cache fetching robots.txt with a copy of page fetcher ``fetcher`` (same user agent,
        timeouts, hop check and pacer) that downloads any type, keeps the first
        :data:`ROBOTS_MAX_BYTES` and follows at most :data:`ROBOTS_MAX_REDIRECTS` redirects. ``kwargs`` go to the constructor."""
        robots_fetcher = fetcher.derive(keep_non_html=True, max_body_bytes=ROBOTS_MAX_BYTES,
                                        truncate_body=True, max_redirects=ROBOTS_MAX_REDIRECTS)
        return cls(robots_fetcher, fetcher.user_agent, **kwargs)

    # ------------------------------------------------------------------ queries

    def check(self, url: str) -> tuple[bool, float | None]:
        """``(allowed, crawl_delay)`` for ``url``; fetches the origin's robots.txt if needed.

        ``crawl_delay`` is seconds or ``None``. A URL that is not http(s) is allowed (the
        fetcher refuses it anyway). Blocks while robots.txt of the origin is being fetched
        (at most the fetcher's deadline). Never raises for anything the web sends.
        """
        decision = self.decide(url)
        return decision.allowed, decision.crawl_delay

    def decide(self, url: str) -> RobotsDecision:
        """The full :class:`RobotsDecision` for ``url`` (see :meth:`check`)."""
        origin = origin_of(url)
        if origin is None:
            return RobotsDecision(True)
        rules, fetched = self._rules_for(origin)
        if rules.parser is None:
            if rules.allow_all:
                return RobotsDecision(True, rules.crawl_delay, fetched=fetched)
            if rules.no_connection:
                return RobotsDecision(False, None, f"cannot connect to {origin}: {rules.note}",
                                      unreachable=True, no_connection=True, fetched=fetched)
            if rules.bad_response:
                return RobotsDecision(False, None, f"robots.txt of {origin}: {rules.note}", bad_response=True,
                                      fetched=fetched)
            wait = max(0.0, rules.expires - self.clock())
            return RobotsDecision(False, None, f"robots.txt unreachable, so disallowed for now: {rules.note}",
                                  unreachable=True, retry_after=wait, fetched=fetched)
        if urlsplit(url).path == "/robots.txt" or rules.parser.can_fetch(url, self.token):
            return RobotsDecision(True, rules.crawl_delay, fetched=fetched)
        return RobotsDecision(False, rules.crawl_delay, "disallowed by robots.txt", fetched=fetched)

    def sitemaps(self, url: str) -> list[str]:
        """The ``Sitemap:`` URLs of the robots.txt of ``url``'s origin (fetched if needed), in
        file order, at most 1,000; empty when it names none or could not be read."""
        origin = origin_of(url)
        if origin is None:
            return []
        rules, _ = self._rules_for(origin)
        if rules.parser is None:
            return []
        found: list[str] = []
        for sitemap in rules.parser.sitemaps:
            if isinstance(sitemap, str) and sitemap.startswith(("http://", "https://")):
                found.append(sitemap.strip())
                if len(found) >= 1000:
                    break
        return found

    def hop_check(self, url: str) -> HopRefusal | None:
        """A Fetcher hop check: ``None`` when ``url`` may be requested, else a refusal of kind
        ROBOTS or ROBOTS_UNREACHABLE (see :func:`gridcrawl.executor.fetch.chain_hop_checks`)."""
        return self.decide(url).refusal()

    # ------------------------------------------------------------------ cache

    def _rules_for(self, origin: str) -> tuple[_Rules, bool]:
        """The rules of ``origin`` and whether this call fetched them (False: from the cache,
        or fetched by another thread while this one waited)."""
        while True:
            with self._lock:
                rules = self._rules.get(origin)
                if rules is not None and self.clock() < rules.expires:
                    self._rules.move_to_end(origin)
                    return rules, False
                event = self._pending.get(origin)
                if event is None:
                    event = self._pending[origin] = threading.Event()
                    owner = True
                else:
                    owner = False
            if not owner:
                # bounded by the fetcher's deadline; the timeout only guards against a bug
                event.wait(getattr(self.fetcher, "deadline", 30.0) + 5.0)
                continue
            rules = None
            try:
                rules = self._load(origin)
            finally:
                if rules is None:  # _load raised: treat as unreachable, never hang the waiters
                    rules = self._unreachable("crash while fetching")
                with self._lock:
                    old = self._rules.pop(origin, None)
                    self._lines += rules.lines - (old.lines if old is not None else 0)
                    self._rules[origin] = rules
                    while len(self._rules) > 1 and (len(self._rules) > self.max_origins
                                                    or self._lines > self.max_lines):
                        self._lines -= self._rules.popitem(last=False)[1].lines
                    self._pending.pop(origin, None)
                event.set()
            return rules, True

    def _unreachable(self, note: str) -> _Rules:
        return _Rules(None, False, None, self.clock() + self.retry_after, unreachable=True, note=note)

    def _load(self, origin: str) -> _Rules:
        """Fetch and interpret the robots.txt of ``origin`` (RFC 9309 §2.3.1)."""
        self.fetches += 1
        result = self.fetcher.fetch(_robots_url(origin))
        expires = self.clock() + self.max_age
        kind, status = result.error_kind, result.status
        if kind is None and status is not None and 200 <= status < 300:
            body = result.body or b""
            # RFC 9309 §2.3 asks for UTF-8; a file saved as UTF-16 (Windows' "Unicode") decoded as
            # UTF-8 was all NULs and no rule: its Disallow lines were ignored. Its byte order mark
            # says which it is.
            utf16 = body.startswith((b"\xff\xfe", b"\xfe\xff"))
            text = body.decode("utf-16" if utf16 else "utf-8", errors="replace")
            if text.startswith("\ufeff"):
                text = text[1:]
            text = _AGENT_VERSION.sub(r"\g<1>", _INFINITE_DELAY.sub(rf"\g<1>{MAX_SECONDS:g}", text))
            parser = Protego.parse(text)
            parser.can_fetch(f"{origin}/", self.token)  # build protego's lazy indexes before sharing
            return _Rules(parser, True, self._delay(parser), expires, note=f"HTTP {status}", lines=text.count("\n") + 1)
        if kind == ErrorKind.CONNECTION and status is None:
            # Nothing answers at all (refused, unresolvable): the page fails the same way, as a
            # connection error with the ordinary retries; robots.txt is asked again on the next try.
            return _Rules(None, False, None, self.clock() + min(self.retry_after, CONNECTION_RECHECK),
                          unreachable=True, note=result.error or kind.value, no_connection=True)
        if kind == ErrorKind.BAD_RESPONSE:
            # An answer no retry mends (an SSH banner on the port, headers past the limits, a body
            # that does not decode): the page fails the same way, not retried (as "unavailable" it
            # was read as no rules for a day, the page fetched to fail again); asked again after
            # robots_retry.
            return _Rules(None, False, None, self.clock() + self.retry_after, note=result.error or kind.value,
                          bad_response=True)
        if status == 429 or (status is not None and status >= 500) or kind in (
                ErrorKind.TIMEOUT, ErrorKind.CONNECTION, ErrorKind.CRASH):
            note = f"HTTP {status}" if kind in (None, ErrorKind.HTTP_STATUS) and status else (
                result.error or kind.value)
            return self._unreachable(note)
        # 4xx, 3xx without Location, too many redirects, a loop, a refused or invalid target:
        # "unavailable" (RFC 9309 §2.3.1.2-3): no rules apply.
        return _Rules(None, True, None, expires, note=f"HTTP {status}" if status else (kind.value if kind else "no status"))

    def _delay(self, parser: Protego) -> float | None:
        """The group's Crawl-delay (or Request-rate as seconds per request): finite, 0 or more,
        at most ``MAX_SECONDS`` (a page reports no more), else None."""
        delay = parser.crawl_delay(self.token)
        if delay is None:
            rate = parser.request_rate(self.token)
            delay = rate.seconds / rate.requests if rate is not None and rate.requests > 0 else None
        if delay is None or not math.isfinite(float(delay)) or float(delay) < 0:
            return None
        return min(float(delay), MAX_SECONDS)
