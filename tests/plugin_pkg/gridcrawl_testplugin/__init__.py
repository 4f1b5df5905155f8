"""A small extractor plugin for the tests (entry-point group ``gridcrawl.extractors``, name
``testshop``): one item per product page of the generated shop (tests/shop.py), with the
product's SKU, its name upper-cased (something the declarative selectors cannot say) and the
number of links on the page. Pages whose URL contains ``/boom`` make it raise (``/boom-bare`` an
exception without a message, ``/die`` end its process), ``/slow`` makes
it sleep past any sane deadline, ``/odd`` makes it yield numbers JSON cannot hold (an integer past
64 bits, NaN, infinity), ``/decimal`` prices as ``Decimal`` and a date, ``/many`` makes it yield
1,500 items, ``/deep`` one with values past every bound of an item."""

from __future__ import annotations

import datetime
import decimal
import os
import time


def extract(page):
    """Yield ``{"sku", "shout", "links"}`` for a product page (none for other pages)."""
    if "/die" in page.url:  # a plugin that ends its process (os._exit, as a crash in a native library does)
        os._exit(7)
    if "/boom-bare" in page.url:
        raise KeyError
    if "/boom" in page.url:
        raise RuntimeError("the test plugin blew up")
    if "/slow" in page.url:
        time.sleep(30)
    if "/odd" in page.url:
        yield {"big": 2**70, "nan": float("nan"), "inf": float("-inf"), "fine": 2**62}
        return
    if "/decimal" in page.url:  # how Python code keeps prices
        yield {"price": decimal.Decimal("1234.50"), "tenth": decimal.Decimal("0.1"),
               "exact": decimal.Decimal("12345678901234567890.123456789"), "nan": decimal.Decimal("NaN"),
               "seen": datetime.date(2026, 11, 29)}
        return
    if "/deep" in page.url:  # more than an item may hold: cut, and the cut recorded
        nested = {"leaf": 1}
        for level in range(6):
            nested = {f"l{level}": nested}
        yield {"deep": nested, "wide": {f"k{i}": i for i in range(300)}, "long": list(range(1500)),
               "text": "x" * 100_001, "k" * 250 + "1": 1}
        return
    if "/many" in page.url:
        yield from ({"n": n} for n in range(1500))
        return
    sku = page.selector.css(".product::attr(data-sku)").get()
    if sku is None:
        return
    name = page.selector.css(".product h1::text").get() or ""
    yield {"sku": sku, "shout": name.upper(), "links": len(page.links)}


def returns_dict(page):
    """A plugin written wrong: returns its one item instead of yielding it."""
    return {"sku": "Z9"}


def returns_number(page):
    """A plugin written wrong: returns a count."""
    return 42


def strips(page):
    """A plugin that cleans its page up before reading it, as Scrapy code does: drops the
    scripts and the product element, empties the links and changes the JSON-LD it reads."""
    for obj in page.jsonld_objects():
        obj.clear()
    page.selector.css("script, div.product").drop()
    page.links.clear()
    yield {"text": " ".join(page.selector.css("body ::text").getall()).strip()}
