"""Template traps: families of generated pages that never end (calendars, endless "next page"
chains, ever-growing counters, numeric ids), detected by URL shape and near-identical content.

This module owns :class:`TrapDetector`, which the application's
:class:`~gridcrawl.client.store.CrawlStore` consults for every link it is about to queue.

A URL's **shape** (:func:`gridcrawl.urls.url_shape`) is its host, path and query with every run
of digits replaced by ``#`` (``/calendar?month=2024-05`` → ``/calendar?month=#-#``,
``/item/1234.html`` → ``/item/#.html``). URLs of one shape differ only in numbers or dates. Many
real pages share a shape too (release notes ``release-15-1.html``, ``release-15-2.html``), so a
shape alone proves nothing: what marks a trap is that pages of the shape keep coming **and look
alike**. Each page fetched from a URL with a shape gets a 64-bit SimHash of its visible text
(:mod:`gridcrawl.simhash`, Charikar 2002; Manku, Jain and Das Sarma, WWW 2007; the executor
computes it for those pages only); a page whose SimHash is within ``distance`` bits of one of the
shape's earlier pages is a near-duplicate. Once a shape has had ``near_duplicates``
near-duplicate pages, its links are no longer followed: the application records them in
``visited_url`` with ``error_kind = 'trap'`` and the shape in ``error``.

Heritrix's rules for the same problem are the anchors (design.md §5): a path segment repeated
(:func:`gridcrawl.urls.path_trap`, already applied by the scope) and a hop limit
(``max_depth``, 20 by default, the last resort).

State is per client process and bounded (at most ``max_shapes`` shapes, least recently seen
forgotten; at most ``samples`` fingerprints per shape). A resumed crawl learns its traps again,
at the cost of at most ``near_duplicates`` more pages per trap.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

from gridcrawl.simhash import NEAR_DISTANCE, hamming
from gridcrawl.urls import url_shape

__all__ = ["TrapDetector"]


@dataclass
class _Family:
    """What is known of one URL shape: fingerprints of distinct pages, near-duplicates seen."""

    samples: list[int] = field(default_factory=list)
    pages: int = 0
    near: int = 0
    trapped: bool = False
    # hashes of the URLs counted (a sample, or a near-duplicate): at most samples + near_duplicates
    urls: set[int] = field(default_factory=set)


class TrapDetector:
    """Learns which URL shapes are template traps from the pages fetched.

    Args:
        near_duplicates: near-duplicate pages of one shape after which the shape is a trap
            (0: never).
        distance: largest Hamming distance (bits of 64) between two SimHashes counted as
            near-identical (Manku et al.: 3).
        max_shapes: shapes remembered at most.
        samples: distinct fingerprints kept per shape (a page is compared with these).
    """

    def __init__(self, near_duplicates: int = 8, distance: int = NEAR_DISTANCE, *, max_shapes: int = 100_000,
                 samples: int = 16) -> None:
        self.near_duplicates = int(near_duplicates)
        self.distance = int(distance)
        self.max_shapes = int(max_shapes)
        self.samples = int(samples)
        self._families: OrderedDict[str, _Family] = OrderedDict()

    def observe(self, url: str, simhash: int | None) -> str | None:
        """Count the page fetched from ``url`` with text fingerprint ``simhash`` (``None``: not
        HTML, nothing to compare). Returns the shape when this page made it a trap, else None.
        A URL counted before is not counted again: revisited eight times by a recrawl, one page
        made its shape a trap, and new pages of that shape were never fetched."""
        if self.near_duplicates <= 0 or simhash is None:
            return None
        shape = url_shape(url)
        if shape is None:
            return None
        family = self._families.get(shape)
        if family is None:
            family = self._families[shape] = _Family()
            while len(self._families) > self.max_shapes:
                self._families.popitem(last=False)
        else:
            self._families.move_to_end(shape)
        key = hash(url)
        if key in family.urls:  # the same page again (a recrawl's revisit): one page, not a repeat
            return None
        family.pages += 1
        if any(hamming(simhash, seen) <= self.distance for seen in family.samples):
            family.near += 1
            family.urls.add(key)
        elif len(family.samples) < self.samples:
            family.samples.append(simhash)
            family.urls.add(key)
        if not family.trapped and family.near >= self.near_duplicates:
            family.trapped = True
            return shape
        return None

    def trapped(self, url: str) -> str | None:
        """The shape of ``url`` when that shape is a trap (its links are not to be followed),
        else None."""
        if self.near_duplicates <= 0 or not self._families:
            return None
        shape = url_shape(url)
        if shape is None:
            return None
        family = self._families.get(shape)
        return shape if family is not None and family.trapped else None

    def figures(self) -> dict[str, dict]:
        """Per shape: ``{"pages", "near", "trapped"}`` (for logs and tests)."""
        return {shape: {"pages": f.pages, "near": f.near, "trapped": f.trapped}
                for shape, f in self._families.items()}
