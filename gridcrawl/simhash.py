"""SimHash: 64-bit similarity fingerprints of a page's visible text, and their Hamming distance.

This module owns the near-duplicate fingerprint of gridcrawl. Two pages whose texts share most of
their words get fingerprints that differ in few bits; unrelated pages differ in about half of the
64 bits. The client's trap detector (:mod:`gridcrawl.client.traps`) uses it to tell a family of
generated, near-identical pages (a calendar, an endless "next page") from real pages that merely
share a URL shape; the recrawl work may use it to tell an unchanged page from a changed one.

The algorithm (Charikar, "Similarity Estimation Techniques from Rounding Algorithms", STOC 2002,
section 3; applied to web pages by Manku, Jain and Das Sarma, "Detecting Near-Duplicates for Web
Crawling", WWW 2007, with 64-bit fingerprints and near-duplicates at a Hamming distance of at most
3): every feature of the document is hashed to 64 bits; bit ``i`` of the fingerprint is 1 when
the weights of the features whose hash has bit ``i`` set outweigh those whose hash has it clear.

Features here are the **distinct** words of the text, lower-cased, each of weight 1 (the SimHash
of the text's vocabulary); a word is a run of letters, digits and ``_`` with at least one letter,
so numbers alone (dates, counters, ids, page numbers: what tells the pages of a generated family
apart) are not features. Exact changes are the body digest's job, not this fingerprint's. Weighting words by their frequency, the textbook choice, was measured
to fail on real documentation: long pages on one subject share their frequent words, and the
Python docs' "What's New" pages came within 1 bit of each other (median 10), as close as the
months of a generated calendar. With distinct words they are at least 12 bits apart (PostgreSQL's
release notes at least 14), while calendar months stay within 0-3 bits (median 3; docs/realweb.md).

Why not a library: the PyPI ``simhash`` package (2.1.2, last release March 2022) pulls in NumPy
(tens of MB in every executor process, whose memory budget is 120 MB) and ``floc-simhash`` has had
one release (2021); the algorithm is twenty lines. Feature hashes are BLAKE2b with an 8-byte
digest (:mod:`hashlib`), so fingerprints are the same on every platform and Python version.
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter

__all__ = ["BITS", "simhash", "hamming", "near_duplicate", "NEAR_DISTANCE"]

#: Bits of a fingerprint.
BITS = 64
#: Hamming distance at most which two fingerprints count as near-duplicates (Manku et al. 2007).
NEAR_DISTANCE = 3

_WORD_RE = re.compile(r"\w+", re.UNICODE)  # runs of word characters (those without a letter are dropped)
_WITH_BIT = [[v for v in range(256) if v >> b & 1] for b in range(8)]  # byte values with bit b set
_MAX_WORDS = 10_000  # words of a page used at most (bounds the cost on huge pages; ~60 KB of text)


def _feature_hash(word: str) -> bytes:
    return hashlib.blake2b(word.encode("utf-8", "surrogatepass"), digest_size=8).digest()


def simhash(text: str) -> int:
    """The 64-bit SimHash of ``text``: an unsigned integer ``0 <= h < 2**64``.

    Features are the distinct words of ``text`` (runs of letters, digits and ``_`` holding a
    letter; bare numbers are left out), lower-cased, each of weight 1 (among its first 10,000
    words). A text without words gives 0.
    Never raises.

    Cost: one BLAKE2b per distinct word, then per byte of the hashes a count done by
    :class:`collections.Counter` (C loops): about 2 ms for a 3,000-word page of the Python docs
    on the 2-core test machine.
    """
    words = _WORD_RE.findall(text.lower(), 0)
    if len(words) > _MAX_WORDS:
        words = words[:_MAX_WORDS]
    # a plain \w+ and a letter test per distinct word: a regex demanding a letter inside the
    # word was the slowest step (2 ms of 3 on a Python docs page)
    digests = [_feature_hash(w) for w in set(words) if not w.isdigit() and any(c.isalpha() for c in w)]
    if not digests:
        return 0
    total = len(digests)
    value = 0
    # byte k of every digest, counted by value; bit b of that byte is bit 8k+b (big-endian digest)
    for k, column in enumerate(zip(*digests)):
        weights = [0] * 256
        for v, c in Counter(column).items():
            weights[v] = c
        for b in range(8):
            if 2 * sum(map(weights.__getitem__, _WITH_BIT[b])) > total:
                value |= 1 << ((7 - k) * 8 + b)
    return value


def hamming(a: int, b: int) -> int:
    """The number of bits in which fingerprints ``a`` and ``b`` differ (0 ... 64)."""
    return (a ^ b).bit_count()


def near_duplicate(a: int, b: int, distance: int = NEAR_DISTANCE) -> bool:
    """True when fingerprints ``a`` and ``b`` differ in at most ``distance`` bits."""
    return hamming(a, b) <= distance
