"""Running one grid thread on an executor: fetch the URL, parse it if it is HTML, return a
:class:`~gridcrawl.protocol.PageResult` (the executor steps 2–5 of the paper's grid flow)."""

from __future__ import annotations

import os
import time

from gridcrawl.protocol import PageResult
from gridcrawl.executor.fetch import Fetcher
from gridcrawl.executor.parse import is_html, parse_page

# Test-only fault injection (issue: fault tolerance): when this environment variable is set, an
# executor process dies at once on any URL containing its value, as a crashing executor would.
CRASH_ENV = "GRIDCRAWL_TEST_CRASH_ON"


def visit(fetcher: Fetcher, url: str, *, store_content: bool = True, instruction: dict | None = None) -> PageResult:
    """Fetch ``url`` with ``fetcher`` and, for an HTML page, extract its links.

    Returns a :class:`PageResult`: times in seconds, sizes in bytes, ``links`` as
    ``[canonical_url, anchor_text]`` pairs, ``error_kind`` set when the fetch failed.
    Never raises for anything the web sends.
    """
    crash_on = os.environ.get(CRASH_ENV)
    if crash_on and crash_on in url:
        os._exit(70)
    fetched = fetcher.fetch(url)
    result = PageResult(
        url=url, final_url=fetched.final_url or url, status=fetched.status,
        content_type=fetched.content_type, size=fetched.size, fetch_seconds=fetched.seconds,
        error_kind=fetched.error_kind.value if fetched.error_kind else None, error=fetched.error,
        retry_after=fetched.retry_after, redirects=list(fetched.redirects))
    body = fetched.body
    if not fetched.ok or body is None:
        return result
    if not is_html(fetched.content_type):
        result.content = body if store_content else None
        return result
    started = time.perf_counter()
    page = parse_page(body, result.final_url, fetched.content_type)
    result.title = page.title
    result.encoding = page.encoding
    result.links = [[link.url, link.text] for link in page.links]
    if store_content:
        result.content = body.decode(page.encoding, errors="replace")
    result.parse_seconds = time.perf_counter() - started
    return result
