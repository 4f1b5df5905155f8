"""A generated shop-like web site whose items are known in advance (for the items tests).

``generate_shop(lists, per_list, seed)`` makes a :class:`~sites.Site` with:

* ``/`` linking to the first list page;
* list pages ``/list/N.html``, each with ``per_list`` products (``<li class="product">`` with
  the SKU, the name, a price written one of several ways, and a link to the product page) and a
  link to the next list page;
* product pages ``/p/SKU.html`` with the name, the price (another format), the date the
  product was added (another format again) and tags; every seventh product page has no name
  (a required field: a miss, no item).

The truth: :attr:`Shop.items` is the exact set of items :data:`SPEC` must extract, as
``(type, path, position, fields)`` tuples with fields as sorted JSON, and :attr:`Shop.misses`
the ``(type, path, position, field)`` misses.
"""

from __future__ import annotations

import datetime as dt
import json
import random
from dataclasses import dataclass, field

from sites import Site

#: The item spec the tests crawl the shop with.
SPEC = r"""
[[item]]
type = "listing"
url = '/list/[0-9]+\.html$'
each = "li.product"
[item.fields]
sku   = { css = "::attr(data-sku)", required = true }
name  = { css = "a.name::text", required = true }
price = { css = ".price::text", type = "float" }
link  = { css = "a.name::attr(href)", type = "url" }

[[item]]
type = "product"
url = '/p/[A-Z0-9-]+\.html$'
[item.fields]
sku   = { xpath = "//div[@class='product']/@data-sku", required = true }
name  = { css = ".product h1::text", required = true }
price = { css = ".product .price::text", re = '([0-9][0-9., ]*)', type = "float" }
added = { css = ".added::text", type = "date" }
tags  = { css = ".tags li::text", many = true }
"""

WORDS = "kettle mug teapot pan whisk ladle sieve grater bowl jug tray spoon fork knife plate".split()
COLOURS = "red blue green black white steel copper".split()


def _price_text(cents: int, style: int) -> str:
    whole, frac = divmod(cents, 100)
    grouped = f"{whole:,}"
    return [f"${grouped}.{frac:02d}", f"{grouped.replace(',', '.')},{frac:02d} €", f"EUR {whole}.{frac:02d}",
            f"£{grouped}.{frac:02d}", f"{whole},{frac:02d} kr"][style % 5]


def _date_text(day: dt.date, style: int) -> str:
    return [day.isoformat(), day.strftime("%d %B %Y"), day.strftime("%B %d, %Y"),
            day.strftime("%a, %d %b %Y")][style % 4]


@dataclass
class Shop:
    """The site and its truth (see the module docstring)."""

    site: Site
    items: set = field(default_factory=set)
    misses: set = field(default_factory=set)
    product_paths: list = field(default_factory=list)
    shouts: set = field(default_factory=set)   # the test plugin's items: (path, fields JSON)


def _fields(**values) -> str:
    return json.dumps(values, sort_keys=True)


def generate_shop(lists: int = 6, per_list: int = 5, seed: int = 15) -> Shop:
    """A shop of ``lists`` list pages of ``per_list`` products each (deterministic per ``seed``).
    Links are root-relative, so the truth's URLs are ``{BASE}`` + path."""
    rng = random.Random(seed)
    site = Site()
    shop = Shop(site)
    site.pages["/"] = b'<!doctype html><html><head><title>Shop</title></head><body><a href="/list/1.html">shop</a></body></html>'
    site.links["/"] = ["/list/1.html"]
    number = 0
    for n in range(1, lists + 1):
        path = f"/list/{n}.html"
        rows, links = [], []
        for position in range(per_list):
            number += 1
            sku = f"SKU-{number:04d}"
            name = f"{rng.choice(COLOURS).title()} {rng.choice(WORDS)} {number}"
            cents = rng.randrange(99, 500_000)
            product = f"/p/{sku}.html"
            rows.append(f'<li class="product" data-sku="{sku}"><a class="name" href="{product}">  {name}\n </a>'
                        f'<span class="price">{_price_text(cents, number)}</span></li>')
            links.append(product)
            shop.items.add(("listing", path, position,
                            _fields(sku=sku, name=name, price=cents / 100, link="{BASE}" + product)))
            added = dt.date(2025, 1, 1) + dt.timedelta(days=rng.randrange(0, 365))
            tags = rng.sample(WORDS, rng.randrange(0, 3))
            nameless = number % 7 == 0
            heading = "<h1></h1>" if nameless else f"<h1>{name}</h1>"
            tag_list = "".join(f"<li>{t}</li>" for t in tags)
            site.pages[product] = (
                f'<!doctype html><html><head><title>{sku}</title></head><body>'
                f'<div class="product" data-sku="{sku}">{heading}'
                f'<p>Price: <span class="price">{_price_text(cents, number + 1)}</span></p>'
                f'<p>Added <span class="added">{_date_text(added, number)}</span></p>'
                f'<ul class="tags">{tag_list}</ul></div><a href="/">home</a></body></html>').encode()
            site.links[product] = ["/"]
            shop.product_paths.append(product)
            shop.shouts.add(("shout", product, 0, _fields(sku=sku, shout="" if nameless else name.upper(), links=1)))
            if nameless:
                shop.misses.add(("product", product, 0, "name"))
            else:
                shop.items.add(("product", product, 0, _fields(sku=sku, name=name, price=cents / 100,
                                                              added=added.isoformat(), tags=tags)))
        nxt = f'<a class="next" href="/list/{n + 1}.html">next</a>' if n < lists else ""
        site.pages[path] = (f'<!doctype html><html><head><title>List {n}</title></head><body><ul>{"".join(rows)}</ul>'
                            f'{nxt}</body></html>').encode()
        site.links[path] = links + ([f"/list/{n + 1}.html"] if n < lists else [])
    return shop


def stored(rows, base: str) -> set:
    """``(type, path, position, fields JSON sorted)`` of ``item`` rows ``(type, url, position, fields)``
    (``base``: the server's base URL, taken off the page URLs and put in for ``{BASE}``)."""
    out = set()
    for kind, url, position, text in rows:
        fields = json.loads(text)
        if isinstance(fields.get("link"), str):
            fields["link"] = fields["link"].replace(base, "{BASE}")
        out.add((kind, url[len(base):], position, json.dumps(fields, sort_keys=True)))
    return out
