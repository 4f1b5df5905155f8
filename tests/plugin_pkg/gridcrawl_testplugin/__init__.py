"""A small extractor plugin for the tests (entry-point group ``gridcrawl.extractors``, name
``testshop``): one item per product page of the generated shop (tests/shop.py), with the
product's SKU, its name upper-cased (something the declarative selectors cannot say) and the
number of links on the page. Pages whose URL contains ``/boom`` make it raise, ``/slow`` makes
it sleep past any sane deadline."""

from __future__ import annotations

import time


def extract(page):
    """Yield ``{"sku", "shout", "links"}`` for a product page (none for other pages)."""
    if "/boom" in page.url:
        raise RuntimeError("the test plugin blew up")
    if "/slow" in page.url:
        time.sleep(30)
    sku = page.selector.css(".product::attr(data-sku)").get()
    if sku is None:
        return
    name = page.selector.css(".product h1::text").get() or ""
    yield {"sku": sku, "shout": name.upper(), "links": len(page.links)}
