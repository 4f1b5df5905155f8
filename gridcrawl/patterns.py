"""Users' regular expressions — rules' patterns, item specs' ``url``, ``re`` and ``where`` — compiled
once and matched with a time limit.

Python's ``re`` holds the GIL for a whole match and cannot be stopped: the pattern
``^(([a-z0-9./:])+)+#$`` (nested repetition) searched in a 31-character URL took 386 s, and all
that time every thread of the executor stood still, its heartbeats too, so the manager declared it
dead and gave the page to the next executor, which froze the same way. A client's rules or item
specs, hostile or mistyped, could stop a grid. The ``regex`` package (Matthew Barnett's engine,
re-compatible in its default VERSION0 and proposed for Python's standard library) matches that
pattern at once, releases the GIL while it matches a ``str``, and stops a match at a timeout.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

from gridcrawl.errors import PatternError, PatternTooSlow

if TYPE_CHECKING:
    import regex

#: Seconds one match of a user's pattern may take (a URL's, or a field's text): a match takes
#: microseconds; one that runs a second backtracks without end.
MATCH_SECONDS = 1.0


@functools.lru_cache(maxsize=512)
def compile_pattern(pattern: str) -> regex.Pattern:
    """``pattern`` compiled (cached: 512 patterns). Raises :class:`PatternError` if it is not valid.
    ``regex`` is imported here, at the first pattern, not with every program (9 ms)."""
    import regex
    try:
        return regex.compile(pattern)
    except regex.error as exc:
        raise PatternError(str(exc)) from None


def search(pattern: str, text: str) -> regex.Match | None:
    """The first match of ``pattern`` in ``text``, or None, found within :data:`MATCH_SECONDS`
    (other threads run meanwhile). Raises :class:`PatternError` for an invalid pattern and
    :class:`~gridcrawl.errors.PatternTooSlow` (an input error, one line naming the pattern) for a
    match that takes longer."""
    try:
        return compile_pattern(pattern).search(text, timeout=MATCH_SECONDS)
    except TimeoutError:
        shown = pattern if len(pattern) <= 200 else pattern[:200] + "…"
        raise PatternTooSlow(f"regular expression '{shown}' was stopped after {MATCH_SECONDS:g} s on "
                             f"{len(text):,} characters (it backtracks without end: a repetition inside a "
                             f"repetition, as (a+)+, is the usual cause; write it without)") from None
