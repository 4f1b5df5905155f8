"""When to visit a stored document again: the adaptive recrawl schedule, and the verdict of a visit.

This module owns the pure decisions of a recrawl (no SQL, no clock: ``now`` is passed in):

* :func:`verdict` — what one visit of a stored document found: ``not_modified`` (304),
  ``unchanged`` / ``changed`` (a body whose digest equals / differs from the stored one),
  ``gone`` (404 or 410), ``revived`` (a gone page answering again), ``disallowed`` (robots.txt
  now disallows it: not fetched, no error) or ``error``.
* :class:`AdaptiveSchedule` — the next interval, after Apache Nutch's ``AdaptiveFetchSchedule``
  (``org.apache.nutch.crawl.AdaptiveFetchSchedule``; its defaults in ``conf/nutch-default.xml``):
  a page found modified is next visited after ``interval × (1 − dec_rate)``, one found not
  modified after ``interval × (1 + inc_rate)``, the result clamped to
  ``[min_interval, max_interval]``. Nutch's defaults are kept: a first interval of 30 days
  (``db.fetch.interval.default``), ``inc_rate`` 0.4, ``dec_rate`` 0.2, 60 s and 365 days as the
  bounds.
* :meth:`AdaptiveSchedule.lastmod_hint` — what a sitemap's ``<lastmod>`` for a stored document
  says about its next visit: a lastmod after the last visit makes it due (but never sooner than
  ``min_interval`` after that visit), and so does a date without a time of the visit's day (the
  change may have come after the visit), one not after it counts as a "not modified" observation
  (the interval lengthens as after a 304), one in the future or before 1970 is ignored.
  Nutch keeps a sitemap's lastmod only as the page's ``modifiedTime`` (``SitemapProcessor``),
  which its schedule reads for ``sync_delta``; gridcrawl acts on it directly, see docs/recrawl.md.

Nutch's optional ``sync_delta`` (make the interval at least the time since the page's own
Last-Modified and shift the next visit back by a fraction of it) is not done: the
Last-Modified of a static file is its mtime, which on packaged or deployed documentation is the
build time, not the time of the last edit (docs/recrawl.md).
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass

from gridcrawl.protocol import DISALLOWED
from gridcrawl.simhash import hamming

#: Statuses that mark a stored page as gone (RFC 9110 §15.5.5 Not Found, §15.5.11 Gone).
GONE_STATUSES = frozenset({404, 410})
#: The outcomes :func:`verdict` returns, which are also the recrawl table's counters.
VERDICTS = ("not_modified", "unchanged", "changed", "gone", "revived", "disallowed", "error")


def verdict(status: int | None, error_kind: str | None, digest: str | None, stored_digest: str | None,
            was_gone: bool, near: bool = False, retyped: bool = False) -> str:
    """What a visit of a stored document found, one of :data:`VERDICTS`.

    Args:
        status: the HTTP status of the final response (``None``: no response).
        error_kind: the page's :class:`~gridcrawl.executor.fetch.ErrorKind` value, or ``None``.
        digest: hex SHA-256 of the body fetched now (``None``: no body read, e.g. a non-HTML
            page whose body is not downloaded).
        stored_digest: the stored body's digest (``None``: no body was read, or stored before
            digests were kept; a body now with no stored digest counts as changed).
        was_gone: the document was marked gone before this visit.
        near: the body's SimHash is within the near-duplicate distance of the stored one
            (:meth:`AdaptiveSchedule.near_unchanged`): a body with another digest counts as
            ``unchanged`` (a changed footer timestamp is not a change).
        retyped: the response's media type (``Content-Type`` without parameters) differs from
            the stored document's: ``changed`` whatever the digests say (an HTML page that
            turned into a PDF whose body is not downloaded has no digest, nor had a page stored
            before digests were kept: both ``None``, it counted as ``unchanged`` and kept its
            old HTML copy and type).

    A 404/410 is ``gone``; a URL robots.txt disallows (``error_kind`` in
    :data:`gridcrawl.protocol.DISALLOWED`: the crawler obeyed the site, nothing failed)
    ``disallowed``; any other failure ``error``; any answer on a gone page ``revived``;
    a 304 ``not_modified`` (RFC 9110 §15.4.5); else ``changed`` when ``retyped``, ``unchanged``
    when the digests are equal (or ``near``), ``changed`` when not.
    """
    if status in GONE_STATUSES:
        return "gone"
    if error_kind in DISALLOWED:
        return "disallowed"
    if error_kind:
        return "error"
    if was_gone:
        return "revived"
    if status == 304:
        return "not_modified"
    if retyped:
        return "changed"
    if digest == stored_digest or near:  # also both None: a body never downloaded (non-HTML), nothing to compare
        return "unchanged"
    return "changed"


@dataclass(frozen=True)
class AdaptiveSchedule:
    """Nutch's AdaptiveFetchSchedule: intervals in seconds (see the module documentation).

    ``initial``: the interval of a newly stored document; ``min_interval``/``max_interval``:
    the clamp; ``inc_rate``/``dec_rate``: the factors (0.4 and 0.2 by default);
    ``near_distance``: a body whose 64-bit SimHash differs from the stored one in at most this
    many bits counts as unchanged (``-1``, the default: off, only the digest decides).
    """

    initial: float = 2_592_000.0
    min_interval: float = 60.0
    max_interval: float = 31_536_000.0
    inc_rate: float = 0.4
    dec_rate: float = 0.2
    near_distance: int = -1

    #: A sitemap lastmod before this is absurd (no web page is older) and ignored.
    EARLIEST_LASTMOD = _dt.datetime(1970, 1, 1)
    #: How long after its midnight (UTC) a lastmod written as a date alone (``2026-11-29``, read
    #: as that midnight) may have been: to the end of that calendar day in the zone furthest
    #: west (UTC−12), 36 hours. A visit within that span may precede the change.
    DATE_SPAN = _dt.timedelta(hours=36)

    @classmethod
    def from_settings(cls, settings) -> "AdaptiveSchedule":
        """The schedule of a :class:`~gridcrawl.settings.Settings` (``recrawl_*`` fields)."""
        return cls(settings.recrawl_interval, settings.recrawl_min_interval, settings.recrawl_max_interval,
                   settings.recrawl_inc_rate, settings.recrawl_dec_rate, settings.recrawl_simhash_distance)

    def near_unchanged(self, simhash: str | int | None, stored_simhash: str | int | None) -> bool:
        """True when near-duplicate detection is on (``near_distance >= 0``) and the two 64-bit
        SimHashes (ints, or 16-digit hex text as stored in ``document.simhash``) differ in at
        most ``near_distance`` bits (:func:`gridcrawl.simhash.hamming`). False when either is
        missing or unreadable, or when it is off."""
        if self.near_distance < 0:
            return False
        try:
            a = simhash if isinstance(simhash, int) else int(simhash, 16)
            b = stored_simhash if isinstance(stored_simhash, int) else int(stored_simhash, 16)
        except (TypeError, ValueError):
            return False
        return hamming(a, b) <= self.near_distance

    def clamp(self, interval: float) -> float:
        """``interval`` seconds kept within ``[min_interval, max_interval]``."""
        return min(self.max_interval, max(self.min_interval, interval))

    def first_interval(self) -> float:
        """Seconds until the first recrawl of a newly stored document (the clamped ``initial``)."""
        return self.clamp(self.initial)

    def next_interval(self, interval: float | None, found: str) -> float:
        """The interval after a visit that found ``found`` (a :func:`verdict`), from the
        document's current ``interval`` (``None``: never scheduled, the first interval).

        ``changed`` and ``revived`` shorten it by ``dec_rate``; ``not_modified``, ``unchanged``
        and ``gone`` lengthen it by ``inc_rate`` (a gone page is looked at less and less
        often, but still looked at: it may come back); ``error`` and ``disallowed`` keep it (the
        stored copy was not compared: nothing was learnt of its changes). Seconds, clamped.
        """
        current = self.first_interval() if interval is None or interval <= 0 else float(interval)
        if found in ("changed", "revived"):
            current *= 1.0 - self.dec_rate
        elif found in ("not_modified", "unchanged", "gone"):
            current *= 1.0 + self.inc_rate
        return self.clamp(current)

    def lastmod_hint(self, lastmod: _dt.datetime | None, visited_at: _dt.datetime | None,
                     interval: float | None, next_fetch_at: _dt.datetime | None,
                     now: _dt.datetime) -> tuple[str, float, _dt.datetime] | None:
        """What a sitemap's ``<lastmod>`` for a stored document says (all times naive UTC).

        Args:
            lastmod: the sitemap's lastmod for the page.
            visited_at: the document's last visit (its copy was current then).
            interval: its ``fetch_interval`` seconds (``None``: the first interval).
            next_fetch_at: its next visit (``None``: due now).
            now: the time the sitemap was read.

        Returns ``None`` when the lastmod says nothing: missing, after ``now`` (a clock ahead or
        a hostile sitemap: a future lastmod would make the page due on every read), before 1970,
        or no visit to compare with. Else ``(found, interval, next_fetch_at)``:

        * ``("due", interval, when)`` — modified after the last visit: due at
          ``max(now, visited_at + min_interval)`` if that is sooner than ``next_fetch_at``
          (the interval is kept: the visit will tell whether it changed). A lastmod at a
          midnight (a date without a time, as many sitemaps write it) counts as modified after
          a visit made before the end of that day anywhere (:data:`DATE_SPAN`): the page may
          have changed later that day, and the visit is one conditional request;
        * ``("not_modified", interval, visited_at + longer)`` — not modified since the last
          visit: the next visit is put off as a 304 would put it off (``longer`` =
          ``next_interval(interval, "not_modified")``), the interval itself kept. So the hint is
          the same however often the same lastmod is read: a sitemap read again because another
          entry changed put the visit off no further (it lengthened the interval on every read,
          a watch reached ``max_interval`` after a few reads with no visit); the visit that comes
          then lengthens the interval as its verdict says.
        """
        if lastmod is None or visited_at is None or lastmod > now or lastmod < self.EARLIEST_LASTMOD:
            return None
        whole_day = lastmod.hour == lastmod.minute == lastmod.second == lastmod.microsecond == 0
        if lastmod > visited_at or (whole_day and visited_at < lastmod + self.DATE_SPAN):
            when = max(now, visited_at + _dt.timedelta(seconds=self.min_interval))
            if next_fetch_at is not None and next_fetch_at <= when:
                return None  # due as soon already
            current = self.first_interval() if interval is None or interval <= 0 else float(interval)
            return "due", current, when
        current = self.first_interval() if interval is None or interval <= 0 else float(interval)
        longer = self.next_interval(interval, "not_modified")
        return "not_modified", current, self.due_at(visited_at, longer)

    @staticmethod
    def due_at(now: _dt.datetime, interval: float) -> _dt.datetime:
        """When a document visited at ``now`` (naive UTC) is due again, ``interval`` s later."""
        return now + _dt.timedelta(seconds=interval)
