"""A generated web site whose navigation and content exist only after JavaScript runs, and the
browser checks the rendering tests share.

:func:`js_site` builds a :class:`sites.Site` (served by ``sites.SiteServer``) where:

* ``/`` is a static shell: its only links are inserted by ``/app.js``;
* ``/list/K.html`` (K = 1..``lists``) loads ``/api/list-K.json`` with ``fetch()`` and writes one
  ``<li class="item"><a href="/item/N.html">`` per entry (``items`` per list);
* ``/hop.html`` sends the browser on with ``location.replace('/landing.html')`` (a client-side
  redirect); ``/landing.html`` inserts the link to ``/deep.html`` (a static page);
* ``/list/1.html`` also asks ``http://10.0.0.1/secret`` (a private address the executor's SSRF
  guard refuses before any connection) and shows an image (refused by type, never requested);
* ``/list/2.html`` also asks ``/hidden/extra.json``, which robots.txt disallows;
* ``/item/N.html`` are static pages, no script.

:data:`JS_REACHED` is what a rendered crawl from ``/`` visits; a crawl that does not run
scripts visits ``/`` only. ``/loop.html`` (a script that never ends) is served but not linked.
"""

from __future__ import annotations

import json
import os
import random

from sites import Site

#: Where the tests find Chromium (Debian's package); GRIDCRAWL_CHROMIUM names another.
CHROMIUM = os.environ.get("GRIDCRAWL_CHROMIUM", "/usr/bin/chromium")
#: The private address page scripts ask for (never loopback: the tests allow 127.0.0.0/8).
PRIVATE_URL = "http://10.0.0.1/secret"
_JSON = "application/json"
_JS = "text/javascript"


def browser_or_skip():
    """Skip the calling test, with one reason, unless Playwright imports and Chromium exists;
    return the path of Chromium."""
    import pytest
    pytest.importorskip("playwright.async_api", reason="playwright is not installed "
                        "(pip install 'gridcrawl[render]'; it drives Debian's chromium, no browser download)")
    if not os.path.exists(CHROMIUM):
        pytest.skip(f"no Chromium at {CHROMIUM} (apt-get install chromium) — set GRIDCRAWL_CHROMIUM to another")
    return CHROMIUM


def _page(title: str, body: str) -> bytes:
    return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{title}</title></head>"
            f"<body>{body}</body></html>").encode()


def _words(seed: int, n: int = 6) -> str:
    """``n`` made-up words of item ``seed``'s own: pages that differed only in their numbers
    would be a template trap to the crawler (gridcrawl.client.traps)."""
    rng = random.Random(seed)
    return " ".join("".join(rng.choice("bdfgklmnprstvz") + rng.choice("aeiou") for _ in range(3))
                    for _ in range(n))


def js_site(lists: int = 2, items: int = 4) -> Site:
    """The site described in the module docstring: ``lists`` list pages of ``items`` items."""
    site = Site()
    links = [f"/list/{k}.html" for k in range(1, lists + 1)] + ["/hop.html"]
    site.pages["/"] = _page("Shell", "<h1>Shell</h1><nav id='nav'></nav><script src='/app.js'></script>")
    site.pages["/app.js"] = (
        "const nav = document.getElementById('nav');\n"
        f"for (const href of {json.dumps(links)}) {{\n"
        "  const a = document.createElement('a'); a.href = href; a.textContent = href; nav.appendChild(a);\n"
        "}\n").encode()
    site.types["/app.js"] = _JS
    site.links["/"] = links
    number = 0
    for k in range(1, lists + 1):
        extra = (f"<img src='/pic.png'><script>fetch({json.dumps(PRIVATE_URL)}).catch(() => "
                 "document.body.setAttribute('data-refused', 'yes'));</script>") if k == 1 else (
                 "<script>fetch('/hidden/extra.json').catch(() => 0);</script>" if k == 2 else "")
        site.pages[f"/list/{k}.html"] = _page(f"List {k}", (
            f"<h1>List {k}</h1><ul id='items'></ul>{extra}<script>"
            f"fetch('/api/list-{k}.json').then(r => r.json()).then(rows => {{"
            "  const ul = document.getElementById('items');"
            "  for (const row of rows) { const li = document.createElement('li'); li.className = 'item';"
            "    li.innerHTML = `<a href='${row.href}'>${row.name}</a>`; ul.appendChild(li); }"
            "});</script>"))
        rows = []
        for _ in range(items):
            number += 1
            rows.append({"href": f"/item/{number}.html", "name": f"Item {number}"})
            site.pages[f"/item/{number}.html"] = _page(f"Item {number}", f"<h1>Item {number}</h1><p>static, "
                                                       f"{_words(number)}</p>")
            site.links[f"/item/{number}.html"] = []
        site.pages[f"/api/list-{k}.json"] = json.dumps(rows).encode()
        site.types[f"/api/list-{k}.json"] = _JSON
        site.links[f"/list/{k}.html"] = [r["href"] for r in rows]
    site.pages["/hop.html"] = _page("Hop", "<p>moving on</p><script>location.replace('/landing.html')</script>")
    site.pages["/landing.html"] = _page("Landing", "<div id='more'></div><script>"
                                        "const a = document.createElement('a'); a.href = '/deep.html';"
                                        "a.textContent = 'deep'; document.getElementById('more').appendChild(a);"
                                        "</script>")
    site.links["/hop.html"] = ["/deep.html"]
    site.pages["/deep.html"] = _page("Deep", "<p>reached through a client-side redirect</p>")
    site.pages["/robots.txt"] = b"User-agent: *\nDisallow: /hidden/\n"
    site.types["/robots.txt"] = "text/plain"
    site.pages["/hidden/extra.json"] = b"[]"
    site.types["/hidden/extra.json"] = _JSON
    site.pages["/pic.png"] = b"\x89PNG\r\n\x1a\n" + b"\0" * 64
    site.types["/pic.png"] = "image/png"
    site.pages["/loop.html"] = _page("Loop", "<p>forever</p><script>while (true) {}</script>")
    return site


def js_reached(lists: int = 2, items: int = 4) -> set[str]:
    """Paths of the pages (grid threads) a rendered crawl of :func:`js_site` from ``/`` visits
    (``/hop.html`` is stored with ``/landing.html`` as its final URL)."""
    return ({"/", "/hop.html", "/deep.html"} | {f"/list/{k}.html" for k in range(1, lists + 1)}
            | {f"/item/{n}.html" for n in range(1, lists * items + 1)})


JS_REACHED = js_reached()
