"""When to visit a stored document again: the adaptive recrawl schedule, and the verdict of a visit.

This module owns the pure decisions of a recrawl (no SQL, no clock: ``now`` is passed in):

* :func:`verdict` — what one visit of a stored document found: ``not_modified`` (304),
  ``unchanged`` / ``changed`` (a body whose digest equals / differs from the stored one),
  ``gone`` (404 or 410), ``revived`` (a gone page answering again) or ``error``.
* :class:`AdaptiveSchedule` — the next interval, after Apache Nutch's ``AdaptiveFetchSchedule``
  (``org.apache.nutch.crawl.AdaptiveFetchSchedule``; its defaults in ``conf/nutch-default.xml``):
  a page found modified is next visited after ``interval × (1 − dec_rate)``, one found not
  modified after ``interval × (1 + inc_rate)``, the result clamped to
  ``[min_interval, max_interval]``. Nutch's defaults are kept: a first interval of 30 days
  (``db.fetch.interval.default``), ``inc_rate`` 0.4, ``dec_rate`` 0.2, 60 s and 365 days as the
  bounds. Nutch's optional ``sync_delta`` (shift the schedule towards the page's own
  Last-Modified) is not done.
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass

#: Statuses that mark a stored page as gone (RFC 9110 §15.5.5 Not Found, §15.5.11 Gone).
GONE_STATUSES = frozenset({404, 410})
#: The outcomes :func:`verdict` returns, which are also the recrawl table's counters.
VERDICTS = ("not_modified", "unchanged", "changed", "gone", "revived", "error")


def verdict(status: int | None, error_kind: str | None, digest: str | None, stored_digest: str | None,
            was_gone: bool) -> str:
    """What a visit of a stored document found, one of :data:`VERDICTS`.

    Args:
        status: the HTTP status of the final response (``None``: no response).
        error_kind: the page's :class:`~gridcrawl.executor.fetch.ErrorKind` value, or ``None``.
        digest: hex SHA-256 of the body fetched now (``None``: no body read, e.g. a non-HTML
            page whose body is not downloaded).
        stored_digest: the stored body's digest (``None``: no body was read, or stored before
            digests were kept; a body now with no stored digest counts as changed).
        was_gone: the document was marked gone before this visit.

    A 404/410 is ``gone``; any other failure ``error``; any answer on a gone page ``revived``;
    a 304 ``not_modified`` (RFC 9110 §15.4.5); else ``unchanged`` when the digests are equal,
    ``changed`` when not.
    """
    if status in GONE_STATUSES:
        return "gone"
    if error_kind:
        return "error"
    if was_gone:
        return "revived"
    if status == 304:
        return "not_modified"
    if digest == stored_digest:  # also both None: a body never downloaded (non-HTML), nothing to compare
        return "unchanged"
    return "changed"


@dataclass(frozen=True)
class AdaptiveSchedule:
    """Nutch's AdaptiveFetchSchedule: intervals in seconds (see the module documentation).

    ``initial``: the interval of a newly stored document; ``min_interval``/``max_interval``:
    the clamp; ``inc_rate``/``dec_rate``: the factors (0.4 and 0.2 by default).
    """

    initial: float = 2_592_000.0
    min_interval: float = 60.0
    max_interval: float = 31_536_000.0
    inc_rate: float = 0.4
    dec_rate: float = 0.2

    @classmethod
    def from_settings(cls, settings) -> "AdaptiveSchedule":
        """The schedule of a :class:`~gridcrawl.settings.Settings` (``recrawl_*`` fields)."""
        return cls(settings.recrawl_interval, settings.recrawl_min_interval, settings.recrawl_max_interval,
                   settings.recrawl_inc_rate, settings.recrawl_dec_rate)

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
        often, but still looked at: it may come back); ``error`` keeps it. Seconds, clamped.
        """
        current = self.first_interval() if interval is None or interval <= 0 else float(interval)
        if found in ("changed", "revived"):
            current *= 1.0 - self.dec_rate
        elif found in ("not_modified", "unchanged", "gone"):
            current *= 1.0 + self.inc_rate
        return self.clamp(current)

    @staticmethod
    def due_at(now: _dt.datetime, interval: float) -> _dt.datetime:
        """When a document visited at ``now`` (naive UTC) is due again, ``interval`` s later."""
        return now + _dt.timedelta(seconds=interval)
