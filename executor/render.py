"""Rendering pages that need JavaScript: one headless browser per executor.

This module owns an executor's browser (``gridcrawl-executor --render``): Playwright for Python
driving an *installed* Chromium (Debian's ``chromium``, ``--browser-path`` for another; never a
browser download at run time). :class:`Renderer` runs the browser on one thread of its own (an
asyncio loop with Playwright's async API); worker threads call :meth:`Renderer.render` and wait
for the rendered DOM.

A rendered visit (:func:`gridcrawl.executor.page.visit`) first fetches the document with the
ordinary fetcher (robots.txt, scope, SSRF guard, redirects, deadline, body cap), then hands its
bytes to :meth:`Renderer.render`, which opens the page on them, lets its scripts run, waits for
``load`` plus a bounded network idle (or a CSS selector, ``wait_for``), and returns the DOM's HTML
(its flat tree when web components hold open shadow roots: :data:`FLAT_DOM`). That HTML is
parsed exactly as a fetched page.

How a rendered page stays bounded and safe (the browser is treated as hostile ground):

* **The browser never touches the network itself.** Every request a page makes (the document,
  scripts, ``fetch()``/XHR, a client-side navigation) is intercepted (``BrowserContext.route``)
  and answered from the executor's own :class:`~gridcrawl.executor.fetch.Fetcher`, whose hop check
  is the SSRF guard and which follows redirects by hand, so every hop passes the guard and the
  crawl's robots.txt for its host (navigations also the crawl's scope, checked first: a foreign
  host is not even looked up) *before* any connection is made. A refused request is aborted and recorded (:attr:`Rendered.refused`). Anything that would
  escape interception (a WebSocket) meets the browser's proxy setting: a closed port on loopback,
  with loopback not bypassed, so it fails without a packet leaving the machine; WebRTC may use
  that proxy only (its UDP went past both).
* Images, fonts and media are refused without a fetch (``block``); only GET and HEAD requests are
  made; downloads are refused; service workers are blocked (they would bypass interception); at
  most ``max_requests`` requests per page, and :data:`MAX_NAVIGATIONS` navigations of its top
  frame (a reload loop stays on the document it shows).
* A wall-clock deadline per page (``deadline`` seconds, from opening the page to taking its DOM):
  a script that loops forever is cut there (the page is closed, which stops its renderer).
* At most ``max_pages`` pages open at once; a worker thread waits for a free one. Each page is
  kept and reused for page after page (opening a page starts a renderer process: about 4× the
  cost of a navigation); between two pages it goes to ``about:blank`` (the old document's
  scripts stop; a late request of theirs is refused) and its cookies are cleared. A page that
  failed (deadline, browser error) is closed with its context and made anew.
* One browser per executor, restarted after ``restart_after`` pages (a long-lived browser grows)
  and relaunched when it dies; a page whose browser died ends as ``ErrorKind.RENDER``, which the
  manager retries as a new attempt.

Each browser launch gets a new, empty profile (Playwright creates a temporary user-data
directory per launch). Politeness: the page's grid thread holds its host's slot at the manager
for the whole render (the manager counts a thread in flight until its result arrives); the
requests a page makes to its own host are not counted separately.

Sources: Playwright for Python API (``BrowserType.launch``, ``BrowserContext.route``,
``Route.fulfill``/``abort``, ``Page.wait_for_load_state("networkidle")``); Chromium command-line
switches (``--proxy-server``, ``--proxy-bypass-list=<-loopback>``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import logging
import math
import os
import re
import shutil
import sys
import threading
import time
from dataclasses import dataclass, field
from urllib.parse import urldefrag

from gridcrawl.executor.fetch import ErrorKind, FetchCancel, Fetcher, HopCheck
from gridcrawl.executor.parse import html_document
from gridcrawl.errors import RenderUnavailable  # noqa: F401 (re-exported)
from gridcrawl.redact import hide_passwords

log = logging.getLogger("gridcrawl.executor.render")

__all__ = ["BLOCKED_TYPES", "Rendered", "RenderUnavailable", "Renderer", "find_browser", "INSTALL_HINT"]

#: Resource types refused without a fetch by default (Playwright's ``Request.resource_type``).
BLOCKED_TYPES = frozenset({"image", "font", "media"})
#: Error kinds of a sub-request that mean "refused by a check" (recorded), not "failed".
REFUSALS = frozenset({ErrorKind.BLOCKED, ErrorKind.ROBOTS, ErrorKind.ROBOTS_UNREACHABLE,
                      ErrorKind.OUT_OF_SCOPE, ErrorKind.INVALID_URL})
#: Refused requests kept per page (the rest are counted, not listed).
MAX_REFUSED = 50
#: Navigations of a page's top frame after its first document (client-side redirects, reloads)
#: fetched at most; a later one is cancelled (``net::ERR_ABORTED``: no error page), which leaves
#: the page on the document it shows (a script reloading its page at every load made 500 fetches
#: of it, and the 501st, refused, left Chromium's error page stored as the page).
MAX_NAVIGATIONS = 5
#: Requests of one page fetched at once (a browser's six connections per host); the others wait.
PAGE_FETCHES = 6
#: Share of the page's deadline one of its requests may take, at most: a script whose host never
#: answers (a tracker's, ``<script async src>``) holds the page's ``load`` event until its fetch ends,
#: and with the whole deadline every page of a site that had one failed as ``timeout`` (30 s each,
#: tried again), its DOM ready long before; now that request fails and the page goes on.
REQUEST_SHARE = 1 / 3
#: Request headers of the browser's not sent on by the fetcher: its own (user agent, encodings it
#: decodes, connection), the browser cache's validators (the answer is always whole) and a range.
NOT_FORWARDED = frozenset({"user-agent", "accept-encoding", "host", "connection", "content-length",
                           "if-none-match", "if-modified-since", "if-match", "if-unmodified-since", "if-range",
                           "range", "upgrade-insecure-requests"})
#: Response headers not handed to the browser: the fetcher decoded the body and read it whole.
#: ``Content-Disposition`` neither: an ``attachment`` would turn the page into a refused download.
NOT_RETURNED = frozenset({"content-encoding", "content-length", "transfer-encoding", "connection", "keep-alive",
                          "strict-transport-security", "alt-svc", "content-disposition"})

#: The page's DOM as a reader sees it when some element hosts an open shadow root (a web
#: component's ``attachShadow({mode: "open"})``), else ``null`` (then ``page.content()`` serves).
#: The *flat tree* of the DOM specification: a shadow host's children are its shadow root's, and
#: a ``<slot>`` there stands for the light-DOM nodes assigned to it (its own children when none
#: is), so the component's links and text are found where they show, as Googlebot's rendering
#: "flattens the shadow DOM and light DOM". Serialised as HTML's fragment serialisation does
#: (text and attribute values escaped; ``script``/``style`` text raw; void elements without an
#: end tag; a ``<template>`` as itself). Closed shadow roots are out of any script's reach and
#: stay unseen. On a DOM too deep for the script's stack, ``null``.
FLAT_DOM = """() => {
  if (!Array.from(document.querySelectorAll('*')).some(e => e.shadowRoot)) return null;
  const RAW = new Set(['script', 'style', 'xmp', 'iframe', 'noembed', 'noframes', 'plaintext', 'noscript']);
  const VOID = new Set(['area', 'base', 'br', 'col', 'embed', 'hr', 'img', 'input', 'link', 'meta',
                        'param', 'source', 'track', 'wbr']);
  const text = s => s.replace(/&/g, '&amp;').replace(/\\u00a0/g, '&nbsp;').replace(/</g, '&lt;')
                     .replace(/>/g, '&gt;');
  const value = s => s.replace(/&/g, '&amp;').replace(/\\u00a0/g, '&nbsp;').replace(/"/g, '&quot;');
  const inShadow = n => n.getRootNode() instanceof ShadowRoot;
  const children = n => {
    if (n.shadowRoot) return n.shadowRoot.childNodes;
    if (n.localName === 'slot' && inShadow(n)) {
      const assigned = n.assignedNodes({flatten: true});
      return assigned.length ? assigned : n.childNodes;
    }
    return n.childNodes;
  };
  const out = [];
  const walk = (n, raw) => {
    if (n.nodeType === Node.TEXT_NODE) { out.push(raw ? n.data : text(n.data)); return; }
    if (n.nodeType === Node.COMMENT_NODE) { out.push('<!--' + n.data + '-->'); return; }
    if (n.nodeType !== Node.ELEMENT_NODE) return;
    const tag = n.localName;
    if (tag === 'template') { out.push(n.outerHTML); return; }
    if (tag === 'slot' && inShadow(n)) { for (const c of children(n)) walk(c, raw); return; }
    let start = '<' + tag;
    for (const a of n.attributes) start += ' ' + a.name + '="' + value(a.value) + '"';
    out.push(start + '>');
    if (VOID.has(tag)) return;
    for (const c of children(n)) walk(c, RAW.has(tag));
    out.push('</' + tag + '>');
  };
  try {
    if (document.doctype) out.push('<!DOCTYPE ' + document.doctype.name + '>');
    walk(document.documentElement, false);
  } catch (e) {
    return null;
  }
  return out.join('');
}"""
#: Run in every document before its scripts: history traversal does nothing, as on a page opened
#: afresh (whose history has no entry before its document). A page is reused for page after page,
#: so its history held ``about:blank`` and the pages rendered before: a script's
#: ``history.back()`` left ``about:blank`` (no links) stored as the page, with no error, and
#: ``history.go(-2)`` would have shown an earlier page's DOM as this one's. ``go(0)`` still reloads.
#: (The Navigation API's ``navigation.back()`` reaches only entries of the document's own origin
#: that follow one another: ``about:blank`` between two pages keeps the earlier ones out of reach.)
NO_HISTORY = """(() => {
  const go = History.prototype.go;
  History.prototype.back = History.prototype.forward = function () {};
  History.prototype.go = function (delta) { if (!delta) return go.call(this); };
})();"""
#: The proxy every browser request that escapes interception is sent to: a closed loopback port.
DEAD_PROXY = "http://127.0.0.1:9"
#: A page's JavaScript heap, at most (MB): past it, its renderer dies and the page fails as ``RENDER``.
JS_HEAP_MB = 512
#: A renderer process's resident memory, at most (MB): the heap cap leaves out array buffers (a
#: script filling ``Uint8Array`` s took 2.5 GB in 2 s), so a renderer past this is killed, checked
#: every :data:`MEMORY_CHECK_SECONDS` while pages are open; its page fails as ``RENDER``.
RENDERER_MB = 1024
MEMORY_CHECK_SECONDS = 0.25
#: Seconds a worker thread waits for one of the ``render_pages`` pages before its page fails as
#: ``RENDER`` (a new attempt): within the manager's ``thread_timeout`` (300 s), which would take
#: a thread back that waited on behind a run of slow pages.
SLOT_WAIT_SECONDS = 120.0
#: Launches of a new browser tried in a row, :data:`LAUNCH_RETRY_SECONDS` apart, when the one
#: running died: if none starts (its executable removed or broken by an upgrade), the renderer is
#: :attr:`Renderer.lost` and renders nothing more; an executor then stops, its threads going to
#: executors that render. Before, every page after failed at once as ``render`` (51 pages in 5 s,
#: each "BrowserType.launch: Target page, context or browser has been closed"), while the
#: executor went on declaring ``render`` and taking the threads of executors that could.
LAUNCH_ATTEMPTS = 3
LAUNCH_RETRY_SECONDS = 1.0
#: Chromium flags for a closed network: no GPU, no QUIC, no background or component traffic.
BROWSER_ARGS = ("--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                "--disable-dev-shm-usage", f"--proxy-server={DEAD_PROXY}", "--proxy-bypass-list=<-loopback>",
                # WebRTC's UDP (STUN/TURN, ICE) goes past both interception and the proxy: a script's
                # RTCPeerConnection sent packets to any address it named; with this, only through the proxy
                "--webrtc-ip-handling-policy=disable_non_proxied_udp",
                # a page's JavaScript heap: V8's own limit (about 4 GB) let one page take 3.4 GB
                f"--js-flags=--max-old-space-size={JS_HEAP_MB}",
                # no crash reports in the user's home, and no crashpad handlers outliving the browser
                "--disable-breakpad", "--disable-crash-reporter")
#: What a user must install to render (the one line printed when --render cannot start).
INSTALL_HINT = ("pip install 'gridcrawl[render]' and a Chromium (Debian/Ubuntu: apt-get install chromium; "
                "Windows/macOS: install Google Chrome or run 'playwright install chromium'), "
                "or pass --browser-path")

# Where browsers live when they are not on PATH (Playwright can drive Chrome and Edge as well).
_KNOWN_PATHS = {
    "darwin": ["/Applications/Chromium.app/Contents/MacOS/Chromium",
               "/Applications/Google Chrome.app/Contents/MacOS/Google Chrome"],
    "win32": [r"C:\Program Files\Google\Chrome\Application\chrome.exe",
              r"C:\Program Files (x86)\Google\Chrome\Application\chrome.exe",
              r"C:\Program Files (x86)\Microsoft\Edge\Application\msedge.exe"],
}
_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome")


def find_browser(path: str | None = None) -> str | None:
    """The browser executable to drive: ``path`` if given (it must exist), else the first
    Chromium or Chrome on ``PATH`` or in the usual install places, else ``None`` (Playwright's
    own browser, present only after ``playwright install chromium``).

    Raises :class:`RenderUnavailable` when ``path`` names no executable file.
    """
    if path:
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
        found = shutil.which(path)
        if found:
            return found
        raise RenderUnavailable(f"no browser at {path} (--browser-path); {INSTALL_HINT}")
    for name in _NAMES:
        found = shutil.which(name)
        if found:
            return found
    for candidate in _KNOWN_PATHS.get(sys.platform, []):
        if os.path.isfile(candidate):
            return candidate
    return None


@dataclass
class Rendered:
    """The outcome of one :meth:`Renderer.render`; never an exception.

    ``html``: the DOM serialised after the scripts ran (``None`` on failure); ``final_url``: the
    page's URL at the end (a client-side redirect moves it); ``seconds``: wall-clock seconds
    from opening the page to taking its DOM (waiting for a free page not included);
    ``requests``: requests the page made that were fetched; ``blocked``: requests refused by
    type (images, fonts, media) without a fetch; ``refused``: requests refused by a check, as
    ``[url, error_kind, reason]`` (at most :data:`MAX_REFUSED`; ``refused_total`` counts all);
    ``error_kind``: ``TIMEOUT`` (the deadline passed), ``RENDER`` (the browser failed),
    ``TOO_LARGE`` (the DOM is larger than the body cap), or the refusal's kind when the page
    itself navigated somewhere refused (``OUT_OF_SCOPE``, ``ROBOTS``, ``BLOCKED``: a client-side
    redirect is judged as an HTTP redirect), ``None`` on success.
    """

    final_url: str
    html: str | None = None
    seconds: float = 0.0
    requests: int = 0
    blocked: int = 0
    refused: list = field(default_factory=list)
    refused_total: int = 0
    error_kind: ErrorKind | None = None
    error: str | None = None
    #: ``(status, content_type, body)`` when the page's own navigation (a script's ``location =``)
    #: landed on a document that is not HTML (a PDF, JSON): that document, as an HTTP redirect there
    #: would give it (``final_url`` is its URL, ``html`` None); the page stays where it was meanwhile.
    document: tuple | None = None

    @property
    def ok(self) -> bool:
        """True when the page rendered."""
        return self.error_kind is None


class _DaemonPool(concurrent.futures.Executor):
    """``workers`` daemon threads running the page's requests (``run_in_executor``). Unlike a
    ``ThreadPoolExecutor``, whose threads the interpreter joins at exit, a fetch that never
    answers (a script's request to a server that holds it) does not keep the program alive
    after its renderer closed: ``gridcrawl fetch --render`` of such a page ended 30 s late."""

    def __init__(self, workers: int, name: str) -> None:
        import queue
        self._jobs: "queue.SimpleQueue" = queue.SimpleQueue()
        self._workers = [threading.Thread(target=self._work, name=f"{name}-{i}", daemon=True) for i in range(workers)]
        for worker in self._workers:
            worker.start()

    def submit(self, fn, /, *args, **kwargs) -> concurrent.futures.Future:
        """Run ``fn(*args, **kwargs)`` on a worker; its future."""
        future: concurrent.futures.Future = concurrent.futures.Future()
        self._jobs.put((future, fn, args, kwargs))
        return future

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Stop the workers once they are free (``wait``: join them); ``cancel_futures``: drop
        what has not started."""
        if cancel_futures:
            import queue
            while True:
                try:
                    job = self._jobs.get_nowait()
                except queue.Empty:
                    break
                if job is not None:
                    job[0].cancel()
        for _ in self._workers:
            self._jobs.put(None)
        if wait:
            for worker in self._workers:
                worker.join()

    def _work(self) -> None:
        while (job := self._jobs.get()) is not None:
            future, fn, args, kwargs = job
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(fn(*args, **kwargs))
            except BaseException as exc:  # the caller's to see
                future.set_exception(exc)


class _Page:
    """What one render knows while its page is open: the document to serve and the checks."""

    def __init__(self, url: str, status: int, content_type: str, body: bytes,
                 navigation_check: HopCheck | None, resource_check: HopCheck | None,
                 scope_check: HopCheck | None = None, headers: dict[str, str] | None = None) -> None:
        self.url = url
        self.document: tuple[int, dict[str, str], bytes] | None = (
            status, _returned(headers, content_type), body)
        self.scope_check = scope_check
        self.navigation_check = navigation_check
        self.resource_check = resource_check
        self.outcome = Rendered(final_url=url)
        self.landed: dict[str, str] = {}  # navigation URL -> URL its fetch ended at (HTTP redirects)
        self.other = None  # the FetchResult of a navigation of the page to a document that is not HTML
        self.left: tuple[ErrorKind, str] | None = None  # a refused or failed navigation of the page itself
        self.has_left: asyncio.Event | None = None  # set once ``left`` is (made on the browser's loop)
        self.fetching: asyncio.Semaphore | None = None  # PAGE_FETCHES at once (made on the browser's loop)
        self.navigations = 0  # of the top frame after the first document (MAX_NAVIGATIONS)
        self.stopped: asyncio.Event | None = None  # set when one past them was cancelled (made on the loop)
        self.requests = FetchCancel()  # what is fetched for the page ends when it closes
        self.closed = False

    def close(self) -> None:
        """The page is done: its requests still fetching end now, and later ones are not made.
        A request that hung held its worker until its own deadline, after the page had closed,
        and the next pages' requests queued behind it (9 of 21 pages stored as empty shells)."""
        self.closed = True
        self.requests.cancel()

    def leave(self, kind: ErrorKind, url: str, error: str) -> None:
        """The page itself tried to go to ``url`` (a client-side navigation of its top frame),
        which was refused or whose fetch failed with ``kind``: the page fails so, as an HTTP
        redirect there would, and a wait for its selector ends."""
        self.left = (kind, f"client-side navigation to {url}: {error}")
        if self.has_left is not None:
            self.has_left.set()

    def refuse(self, url: str, kind: str, reason: str) -> None:
        out = self.outcome
        out.refused_total += 1
        if len(out.refused) < MAX_REFUSED:
            out.refused.append([url[:2048], kind, (reason or "")[:300]])
        log.info("render of %s: refused %s (%s: %s)", hide_passwords(self.url), hide_passwords(url)[:200], kind,
                 hide_passwords(reason or ""))


class _Slot:
    """One of the ``max_pages`` pages a renderer keeps open: its browser, context and page (made
    when first needed, reused for page after page) and the render it serves now, if any."""

    def __init__(self) -> None:
        self.browser = None
        self.context = None
        self.page = None
        self.job: _Page | None = None


class Renderer:
    """One headless browser for an executor: ``Renderer(fetcher).start()``, then
    :meth:`render` from any worker thread, :meth:`close` at the end.

    Args:
        fetcher: the executor's page fetcher. Sub-requests use a copy of it (same user agent,
            timeouts and hop check — the SSRF guard) that downloads any content type and whose
            deadline is at most ``deadline`` × :data:`REQUEST_SHARE`.
        browser_path: the browser executable (:func:`find_browser` picks one when ``None``).
        max_pages: pages open at once, at most (``--render-pages``).
        deadline: wall-clock seconds one page may take, from opening it to taking its DOM.
        idle_timeout: seconds to wait, after ``load``, for the network to go idle (Playwright's
            ``networkidle``: no request for 500 ms); the DOM is taken when it passes either way.
        restart_after: pages a browser renders before it is replaced by a fresh one.
        block: resource types refused without a fetch (default :data:`BLOCKED_TYPES`).
        max_requests: requests one page may make; later ones are refused.

    Thread-safe: :meth:`render` may be called from many threads; the browser lives on one
    thread of its own.
    """

    def __init__(self, fetcher: Fetcher, *, browser_path: str | None = None, max_pages: int = 2,
                 deadline: float = 30.0, idle_timeout: float = 5.0, restart_after: int = 100,
                 block=BLOCKED_TYPES, max_requests: int = 500) -> None:
        if max_pages < 1 or restart_after < 1 or deadline <= 0 or idle_timeout < 0:
            raise ValueError("render: max_pages and restart_after must be >= 1, deadline > 0, idle_timeout >= 0")
        self.fetcher = fetcher.derive(keep_non_html=True, deadline=min(fetcher.deadline, deadline * REQUEST_SHARE))
        self.user_agent = fetcher.user_agent
        self.browser_path = browser_path
        self.max_pages = int(max_pages)
        self.deadline = float(deadline)
        self.idle_timeout = float(idle_timeout)
        self.restart_after = int(restart_after)
        self.block = frozenset(block)
        self.max_requests = int(max_requests)
        self.slots = threading.BoundedSemaphore(self.max_pages)
        self.pages = 0          #: pages rendered (successful or not) since start
        self.launches = 0       #: browsers launched since start (restarts included)
        self.open_pages = 0     #: pages open right now
        self.peak_open_pages = 0
        self.memory_kills = 0   #: renderer processes killed for passing RENDERER_MB
        self._killed = (-math.inf, 0)  # the last kill: monotonic s, MB
        self.browser_pid: int | None = None  #: the current browser's main process id, when known
        #: why no browser can be started any more (one line), once :data:`LAUNCH_ATTEMPTS` launches
        #: in a row failed; ``None`` while rendering works
        self.lost: str | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._pool = _DaemonPool(PAGE_FETCHES * self.max_pages, "render-fetch")
        self._playwright = None
        self._browser = None
        self._browser_pages = 0
        self._slots = [_Slot() for _ in range(self.max_pages)]
        self._free: asyncio.Queue | None = None
        self._lock: asyncio.Lock | None = None
        self._error_class: type[BaseException] = Exception

    # ------------------------------------------------------------------ life cycle

    @staticmethod
    def check_installed(browser_path: str | None = None) -> None:
        """Raise :class:`RenderUnavailable` (one line) unless Playwright imports and
        ``browser_path`` (when given) is an executable; launches nothing."""
        try:
            import playwright.async_api  # noqa: F401
        except ImportError:
            raise RenderUnavailable(f"rendering needs Playwright for Python: {INSTALL_HINT}") from None
        find_browser(browser_path)

    def start(self) -> "Renderer":
        """Import Playwright, launch the browser once (to know it works) and return self.

        Raises :class:`RenderUnavailable` (one line saying what to install) when Playwright is
        missing or the browser does not start within 60 s.
        """
        self.check_installed()
        self.browser_path = find_browser(self.browser_path)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="render-browser", daemon=True)
        self._thread.start()
        future = asyncio.run_coroutine_threadsafe(self._start(), self._loop)
        try:
            future.result(60)
        except RenderUnavailable:
            self.close()
            raise
        except Exception as exc:
            self.close()
            raise RenderUnavailable(f"the browser did not start: {_one_line(exc)}; {INSTALL_HINT}") from None
        return self

    async def _start(self) -> None:
        from playwright.async_api import Error as PlaywrightError, async_playwright
        self._error_class = PlaywrightError
        self._lock = asyncio.Lock()
        self._free = asyncio.Queue()
        for slot in self._slots:
            self._free.put_nowait(slot)
        try:
            self._playwright = await async_playwright().start()
            self._browser = await self._launch()
        except PlaywrightError as exc:
            where = self.browser_path or "Playwright's own Chromium"
            raise RenderUnavailable(f"cannot start the browser ({where}): {_launch_error(exc)}; {INSTALL_HINT}") from None
        asyncio.ensure_future(self._memory_guard())

    async def _memory_guard(self) -> None:
        """Kill a renderer process of the browser whose resident memory passes
        :data:`RENDERER_MB` (checked while pages are open; ended with the loop's other tasks)."""
        import psutil
        pids, listed = [], -math.inf
        while True:
            await asyncio.sleep(MEMORY_CHECK_SECONDS)
            if not self.open_pages:
                continue
            if time.monotonic() - listed >= 2.0:  # listing them reads every process of the machine
                pids, listed = self.browser_pids()[1:], time.monotonic()
            for pid in pids:
                try:
                    proc = psutil.Process(pid)
                    rss = proc.memory_info().rss
                    if rss > RENDERER_MB * 2**20 and "--type=renderer" in proc.cmdline():
                        proc.kill()
                        self.memory_kills += 1
                        self._killed = (time.monotonic(), rss // 2**20)
                        log.warning("a renderer process took %d MB (more than %d): killed, its page fails (%s)",
                                    rss // 2**20, RENDERER_MB,
                                    ", ".join(hide_passwords(s.job.url) for s in self._slots if s.job))
                except psutil.Error:
                    pass

    async def _launch(self):
        before = _descendants()
        browser = await self._playwright.chromium.launch(
            executable_path=self.browser_path, headless=True, args=list(BROWSER_ARGS),
            handle_sigint=False, handle_sigterm=False, handle_sighup=False)
        # the browser's main process: the new process whose parent is not new itself
        new = {p.pid: p for p in _descendants() if p.pid not in {q.pid for q in before}}
        roots = [p for p in new.values() if p.ppid() not in new and _is_browser(p)]
        self.browser_pid = roots[0].pid if len(roots) == 1 else None
        self.launches += 1
        self._browser_pages = 0
        log.info("browser %d started (%s)", self.launches, self.browser_path or "Playwright's Chromium")
        return browser

    def close(self) -> None:
        """Close the browser and its thread (pages still open are closed with it)."""
        loop, self._loop = self._loop, None
        if loop is None:
            return
        if loop.is_running():
            try:
                asyncio.run_coroutine_threadsafe(self._close(), loop).result(20)
            except Exception as exc:  # closing is best effort
                log.warning("browser close: %s", _one_line(exc))
            loop.call_soon_threadsafe(loop.stop)
        if self._thread is not None:
            self._thread.join(5)
        self._pool.shutdown(wait=False, cancel_futures=True)

    async def _close(self) -> None:
        browsers = {slot.browser for slot in self._slots if slot.browser is not None} | {self._browser}
        for slot in self._slots:
            slot.context = slot.page = slot.browser = None
        self._browser = None
        for browser in browsers - {None}:
            try:
                await browser.close()
            except Exception:
                pass
        if self._playwright is not None:
            try:
                await self._playwright.stop()
            except Exception:
                pass
            self._playwright = None
        # what still runs (a route handler waiting on a fetch that never answers) ends here, so
        # that stopping the loop leaves no "Task was destroyed but it is pending!" on stderr
        others = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
        for task in others:
            task.cancel()
        if others:
            await asyncio.wait(others, timeout=2.0)

    # ------------------------------------------------------------------ rendering

    def render(self, url: str, *, status: int, content_type: str | None, body: bytes,
               navigation_check: HopCheck | None = None, resource_check: HopCheck | None = None,
               scope_check: HopCheck | None = None, headers: dict[str, str] | None = None,
               wait_for: str | None = None, max_bytes: int | None = None) -> Rendered:
        """Render the document ``body`` (already fetched, as ``status`` and ``content_type``) at
        ``url``; wait for one of :attr:`max_pages` free pages first.

        Args:
            url: the document's URL (the fetch's final URL): the page's address in the browser.
            navigation_check: run (after the SSRF guard) on every hop of every navigation the
                page starts (a client-side redirect): robots.txt.
            scope_check: run *before* the SSRF guard on every hop of every navigation: the
                crawl's scope (a navigation out of it is ``out_of_scope``, its host not looked
                up).
            resource_check: run (after the SSRF guard) on every hop of every other request
                (scripts, ``fetch()``): robots.txt of the request's host.
            headers: the document's response headers (lower-case keys, as
                :attr:`FetchResult.headers`): handed to the browser with it (its ``Set-Cookie``).
            wait_for: a CSS selector to wait for instead of the network going idle.
            max_bytes: largest serialised DOM kept (UTF-8 bytes); larger is ``TOO_LARGE``.

        Returns a :class:`Rendered`; never raises for anything a page does.
        """
        loop = self._loop
        if loop is None:
            return Rendered(url, error_kind=ErrorKind.RENDER, error="the renderer is not running")
        if self.lost is not None:
            return Rendered(url, error_kind=ErrorKind.RENDER, error=self.lost)
        if not self.slots.acquire(timeout=SLOT_WAIT_SECONDS):  # else the manager's thread_timeout takes it back
            return Rendered(url, error_kind=ErrorKind.RENDER,
                            error=f"no browser page came free within {SLOT_WAIT_SECONDS:g} s (--render-pages "
                                  f"{self.max_pages}: more pages, or fewer --threads, wait less)")
        try:
            job = _Page(url, status or 200, content_type or "text/html", body, navigation_check, resource_check,
                        scope_check, headers)
            future = asyncio.run_coroutine_threadsafe(self._render(job, wait_for), loop)
            try:
                outcome = future.result(self.deadline + 30.0)
            except Exception as exc:  # the loop is stuck or gone: a browser failure, retried elsewhere
                future.cancel()
                outcome = job.outcome
                outcome.error_kind, outcome.error = ErrorKind.RENDER, f"the browser did not answer: {_one_line(exc)}"
        finally:
            self.slots.release()
        if outcome.html is not None and max_bytes is not None and len(outcome.html.encode("utf-8", "replace")) > max_bytes:
            outcome.html = None
            outcome.error_kind = ErrorKind.TOO_LARGE
            outcome.error = f"rendered DOM exceeds the cap of {max_bytes} bytes"
        return outcome

    async def _render(self, job: _Page, wait_for: str | None) -> Rendered:
        out = job.outcome
        slot = await self._free.get()
        started = time.monotonic()
        self.open_pages += 1
        self.peak_open_pages = max(self.peak_open_pages, self.open_pages)
        failed = True
        try:
            await asyncio.wait_for(self._render_on(slot, job, wait_for), self.deadline)
            failed = False
        except asyncio.TimeoutError:
            if job.left is not None:  # it tried to leave for a refused place: that is why
                out.error_kind, out.error = job.left
            else:
                out.error_kind = ErrorKind.TIMEOUT
                out.error = f"render deadline of {self.deadline:g} s passed" + (
                    f" waiting for {wait_for!r}" if wait_for else "")
        except RenderUnavailable as exc:  # no browser starts any more (lost)
            out.error_kind, out.error = ErrorKind.RENDER, str(exc)
        except self._error_class as exc:
            out.error_kind, out.error = ErrorKind.RENDER, f"browser: {_one_line(exc)}"
            if self._killed[0] >= started:  # the memory guard killed its renderer: say so, not "Page crashed"
                out.error = f"its renderer process took {self._killed[1]} MB (more than {RENDERER_MB}) and was killed"
        except Exception as exc:  # a bug must cost one page, not the browser thread
            log.exception("render of %s crashed", hide_passwords(job.url))
            out.error_kind, out.error = ErrorKind.RENDER, f"{type(exc).__name__}: {_one_line(exc)}"
        finally:
            job.close()
            slot.job = None
            out.seconds = time.monotonic() - started
            if out.error_kind is not None:
                out.html = None
            if failed:  # the page may still run a script, or its browser is gone: never reuse it
                await self._discard(slot)
            self.open_pages -= 1
            self.pages += 1
            self._free.put_nowait(slot)
        return out

    async def _render_on(self, slot: "_Slot", job: _Page, wait_for: str | None) -> None:
        browser = await self._current_browser()
        if slot.page is None or slot.browser is not browser or slot.page.is_closed():
            await self._discard(slot)
            slot.browser = browser
            slot.context = await browser.new_context(service_workers="block", accept_downloads=False,
                                                     user_agent=self.user_agent)
            await slot.context.add_init_script(NO_HISTORY)
            await slot.context.route("**/*", functools.partial(self._route_slot, slot))
            slot.page = await slot.context.new_page()
            slot.page.on("download", functools.partial(self._download, slot))
            slot.context.on("page", functools.partial(self._popup, slot))  # (after new_page: not this one)
        slot.job = job
        job.has_left, job.stopped = asyncio.Event(), asyncio.Event()
        job.fetching = asyncio.Semaphore(PAGE_FETCHES)
        page = slot.page
        await _unless(job.stopped, page.goto(job.url, wait_until="load", timeout=0))
        if wait_for:  # until the selector is there, or the page tried to go where it may not
            waits = [asyncio.ensure_future(page.wait_for_selector(wait_for, state="attached", timeout=0)),
                     asyncio.ensure_future(job.has_left.wait())]
            try:
                await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for waiting in waits:
                    waiting.cancel()
            await asyncio.gather(*waits, return_exceptions=True)  # (retrieved: no "never retrieved" lines)
        elif self.idle_timeout > 0 and not job.stopped.is_set():
            try:
                await _unless(job.stopped, page.wait_for_load_state("networkidle", timeout=self.idle_timeout * 1000))
            except self._error_class:  # still busy after idle_timeout: take the DOM as it is
                pass
        for _ in range(5):  # a client-side redirect may be under way: let it land
            try:
                await _unless(job.stopped, page.wait_for_load_state("load", timeout=0))
                job.outcome.html = await page.evaluate(FLAT_DOM) or await page.content()
                break
            except self._error_class as exc:
                if "navigat" not in str(exc):
                    raise
                await asyncio.sleep(0.05)
        else:
            raise self._error_class("the page kept navigating")
        # without the fragment a script set (a hash router's "#/home", "#" + a random number at
        # every tick): the same document, as an HTTP fetch's final URL is (it was the page's IRI
        # for its Open Graph triples, a new one at every render)
        job.outcome.final_url = urldefrag(job.landed.get(page.url, page.url)).url
        if job.left is not None:  # as an HTTP redirect to a refused place: the page fails so
            job.outcome.html = None
            job.outcome.error_kind, job.outcome.error = job.left
        elif job.other is not None:  # as an HTTP redirect to that document
            job.outcome.html = None
            job.outcome.final_url = job.other.final_url
            job.outcome.document = (job.other.status, job.other.content_type, job.other.body or b"")
        elif not page.url.startswith(("http://", "https://")):
            # a script sent the page where no request goes (location = "about:blank", a bot trap):
            # as an HTTP redirect to a URL that is not http(s); its empty DOM was stored as the page,
            # final URL about:blank, with no error
            job.outcome.html = None
            job.outcome.error_kind = ErrorKind.INVALID_URL
            job.outcome.error = (f"client-side navigation to {page.url[:200]}: only http and https documents are "
                                 "rendered")
        # ready for the next page: this document's scripts stop, its cookies go
        slot.job = None
        job.close()
        await page.goto("about:blank", timeout=0)
        await slot.context.clear_cookies()

    async def _current_browser(self):
        """The browser for the next page: a new one when none is running, the current one died,
        or it rendered ``restart_after`` pages (the old one closes once no page slot uses it)."""
        async with self._lock:
            browser = self._browser
            if browser is not None and (not browser.is_connected() or self._browser_pages >= self.restart_after):
                why = "died" if not browser.is_connected() else f"rendered {self._browser_pages} pages"
                log.info("browser %d %s: starting a new one", self.launches, why)
                self._browser = None
                for slot in self._slots:
                    if slot.browser is browser and slot.job is None:
                        await self._discard(slot)
                await self._close_unused(browser)
                browser = None
            if browser is None:
                browser = self._browser = await self._relaunch()
            self._browser_pages += 1
            return browser

    async def _relaunch(self):
        """A new browser, tried :data:`LAUNCH_ATTEMPTS` times, :data:`LAUNCH_RETRY_SECONDS` apart.

        Raises :class:`RenderUnavailable` (and sets :attr:`lost`) when none starts, or at once
        when :attr:`lost` is already set."""
        if self.lost is not None:
            raise RenderUnavailable(self.lost)
        where = self.browser_path or "Playwright's Chromium"
        for attempt in range(1, LAUNCH_ATTEMPTS + 1):
            try:
                return await self._launch()
            except self._error_class as exc:
                error = _launch_error(exc)
                log.warning("a new browser (%s) did not start (try %d of %d): %s", where, attempt,
                            LAUNCH_ATTEMPTS, error)
            if attempt < LAUNCH_ATTEMPTS:
                await asyncio.sleep(LAUNCH_RETRY_SECONDS)
        self.lost = (f"the browser ({where}) stopped and no new one starts ({LAUNCH_ATTEMPTS} tries): {error}; "
                     f"{INSTALL_HINT}")
        log.error("%s", self.lost)
        raise RenderUnavailable(self.lost)

    async def _discard(self, slot: "_Slot") -> None:
        """Close a page slot's context (and its browser, when retired and no longer used)."""
        context, browser = slot.context, slot.browser
        slot.context = slot.page = slot.browser = None
        if context is not None:
            try:
                await context.close()
            except Exception:
                pass
        if browser is not None:
            await self._close_unused(browser)

    async def _close_unused(self, browser) -> None:
        if browser is self._browser or any(slot.browser is browser for slot in self._slots):
            return
        try:
            await browser.close()
        except Exception:
            pass

    def _download(self, slot: "_Slot", download) -> None:
        if slot.job is not None:
            slot.job.refuse(download.url, "download", "downloads are refused while rendering")

    async def _popup(self, slot: "_Slot", page) -> None:
        """A page the slot's page opened (``window.open``, ``target=_blank``): closed at once.
        Left open, popups piled up in the context (31 after 10 renders, 15 MB each), and one
        navigating later failed the next page as having left for a refused host."""
        if page is slot.page:
            return
        try:  # (its navigation was refused and recorded as a popup: _route_slot)
            await page.close()
        except Exception:
            pass

    async def _route_slot(self, slot: "_Slot", route) -> None:
        job = slot.job
        try:
            own = route.request.frame.page is slot.page
        except Exception:  # a request of no frame (a worker's)
            own = False
        if job is not None and not own and route.request.is_navigation_request():
            job.refuse(route.request.url, "popup", "pages a page opens are closed while rendering")
        if job is None or not own:  # between pages (about:blank, a late timer of the previous page), a popup
            try:
                await route.abort("blockedbyclient")
            except Exception:
                pass
            return
        await self._route(job, route)

    async def _route(self, job: _Page, route) -> None:
        """Answer one request of the page: the document from the fetch already made, anything
        else from the executor's fetcher after the checks, or refuse it."""
        try:
            request = route.request
            url = request.url
            navigation = request.is_navigation_request()
            if job.document is not None and navigation:  # the first navigation: page.goto(job.url)
                status, headers, body = job.document
                job.document = None
                await route.fulfill(status=status, headers=headers, body=body)
                return
            if request.resource_type in self.block:
                job.outcome.blocked += 1
                await route.abort("blockedbyclient")
                return
            if request.method not in ("GET", "HEAD"):
                job.refuse(url, "method", f"{request.method} requests are not made while rendering")
                await route.abort("blockedbyclient")
                return
            if not url.startswith(("http://", "https://")):
                job.refuse(url, ErrorKind.INVALID_URL.value, "only http and https requests are made")
                await route.abort("blockedbyclient")
                return
            top = navigation and request.frame.parent_frame is None
            if top and job.navigations >= MAX_NAVIGATIONS:  # a reload or redirect loop: stay where it is
                job.refuse(url, "too_many_navigations", f"the page navigated {MAX_NAVIGATIONS} times (a script "
                                                        "reloading it or redirecting in a loop): it stays on its document")
                await route.abort("aborted")  # (no error page; the document's loading stops: no load event)
                if job.stopped is not None:
                    job.stopped.set()
                return
            if job.outcome.requests >= self.max_requests:
                job.refuse(url, "too_many_requests", f"a page may make {self.max_requests} requests")
                await route.abort("aborted" if top else "blockedbyclient")
                return
            if top:
                job.navigations += 1
            job.outcome.requests += 1
            check = job.navigation_check if navigation else job.resource_check
            # as the page asks (its Accept, X-Requested-With, cookies ...): an API answering JSON
            # only to "Accept: application/json", or only with the session cookie its first page set,
            # answered the crawler's HTML Accept and no cookie (the page's content missing)
            sent = {k: v for k, v in (await request.all_headers()).items()
                    if k.lower() not in NOT_FORWARDED and not k.startswith(":")}
            async with job.fetching:  # one page cannot take every worker
                if job.closed:
                    return
                fetched = await asyncio.get_running_loop().run_in_executor(
                    self._pool, functools.partial(self.fetcher.fetch, url, hop_check=check, cancel=job.requests,
                                                  scope_check=job.scope_check if navigation else None,
                                                  headers=sent))
            if job.closed:
                return
            if fetched.error_kind in REFUSALS:
                job.refuse(fetched.final_url or url, fetched.error_kind.value, fetched.error or "")
                if navigation and request.frame.parent_frame is None:
                    job.leave(fetched.error_kind, fetched.final_url or url, fetched.error or "")
                await route.abort("blockedbyclient")
            elif fetched.error_kind is not None:
                # a navigation of the page that could not be fetched (a name that does not resolve,
                # a refused connection, an error status) fails the page as that fetch failed: the
                # DOM left would be Chromium's error page (chrome-error://chromewebdata/), or an
                # empty one, stored before as the page, with no error
                if navigation and request.frame.parent_frame is None:
                    job.leave(fetched.error_kind, fetched.final_url or url, fetched.error or "")
                if fetched.error_kind == ErrorKind.HTTP_STATUS and fetched.status:
                    await route.fulfill(status=fetched.status, body=b"")
                else:
                    await route.abort("failed")
            elif navigation and request.frame.parent_frame is None and not html_document(fetched.content_type,
                                                                                         fetched.body):
                # the page sent itself to a PDF, JSON ...: Chromium's viewer page for it (a <pre> of
                # the JSON, an empty PDF placeholder) was stored as the page, with no links
                job.other = fetched
                await route.abort("aborted")  # (it stays on its document: no viewer page)
                if job.stopped is not None:
                    job.stopped.set()
            else:
                if navigation and fetched.final_url != url:
                    job.landed[url] = fetched.final_url
                await route.fulfill(status=fetched.status or 200, headers=_returned(fetched.headers, fetched.content_type),
                                    body=fetched.body or b"")
        except Exception as exc:  # the page closed under us (deadline): nothing to answer
            if not job.closed:
                log.debug("render of %s: request handler: %s", hide_passwords(job.url), _one_line(exc))

    # ------------------------------------------------------------------ figures

    def browser_pids(self) -> list[int]:
        """Process ids of this renderer's current browser: its main process and every process
        it started (renderers, GPU, network ...), for figures and tests; empty when unknown."""
        import psutil
        if self.browser_pid is None:
            return []
        try:
            main = psutil.Process(self.browser_pid)
            return [main.pid, *(p.pid for p in main.children(recursive=True))]
        except psutil.Error:
            return []


async def _unless(event: asyncio.Event, awaitable) -> None:
    """Await ``awaitable`` until it ends or ``event`` is set (then it is cancelled); what it
    raises is raised."""
    work = asyncio.ensure_future(awaitable)
    if event.is_set():
        work.cancel()
    else:
        stop = asyncio.ensure_future(event.wait())
        try:
            await asyncio.wait([work, stop], return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
            work.cancel()
    try:
        await work
    except asyncio.CancelledError:
        if not event.is_set():
            raise


def _returned(headers: dict[str, str] | None, content_type: str | None) -> dict[str, str]:
    """The response headers handed to the browser with a body the fetcher read (``headers``:
    :attr:`FetchResult.headers`, several ``Set-Cookie`` one per line, as Playwright takes them):
    all but :data:`NOT_RETURNED`, with ``content_type`` when given. Its cookies so reach the
    browser's jar, and the page's later requests carry them."""
    out = {k: v for k, v in (headers or {}).items() if k.lower() not in NOT_RETURNED}
    if content_type:
        out["content-type"] = content_type
    return out


def _descendants() -> list:
    """Every live descendant process of this process (psutil objects)."""
    import psutil
    try:
        return psutil.Process().children(recursive=True)
    except psutil.Error:
        return []


def _is_browser(proc) -> bool:
    """True when ``proc`` looks like a Chromium/Chrome/Edge process."""
    try:
        name = proc.name().lower()
    except Exception:
        return False
    return any(word in name for word in ("chrom", "chrome", "msedge"))


def _launch_error(exc: BaseException) -> str:
    """One line for a failed browser launch: Playwright's first line ("Target page, context or
    browser has been closed" says nothing of why) and what the browser itself wrote on stderr
    before it ended (Playwright's "[pid=N][err] ..." lines, the last two) with its exit code."""
    text = str(exc)
    said = [m.group(1).strip() for m in re.finditer(r"^\[pid=\d+\]\[err\] (.*)$", text, re.M) if m.group(1).strip()]
    code = re.search(r"<process did exit: exitCode=(-?\d+)", text)
    details = [f"the browser said: {' / '.join(said[-2:])}"] if said else []
    if code and code.group(1) != "0":
        details.append(f"exit status {code.group(1)}")
    line = _one_line(exc)
    return (f"{line} ({'; '.join(details)})" if details else line)[:600]


def _one_line(exc: BaseException) -> str:
    """The first line of an exception's message (Playwright's messages carry call logs)."""
    text = str(exc).strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:300]
