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

__all__ = ["BITS", "simhash", "hamming", "near_duplicate", "NEAR_DISTANCE"]

#: Bits of a fingerprint.
BITS = 64
#: Hamming distance at most which two fingerprints count as near-duplicates (Manku et al. 2007).
NEAR_DISTANCE = 3

_WORD_RE = re.compile(r"\w+", re.UNICODE)  # runs of word characters (those without a letter are dropped)
_WITH_BIT = [[v for v in range(256) if v >> b & 1] for b in range(8)]  # byte values with bit b set
_MAX_WORDS = 10_000  # words of a page used at most (bounds the cost on huge pages; ~60 KB of text)
_LANE = 16  # bits of one counter: a lane counts the features with one hash bit set (<= _MAX_WORDS)
_LANE_MASK = (1 << _LANE) - 1
# byte value -> its 8 bits spread one per lane (bit b of the byte -> lane b)
_SPREAD = [sum((v >> b & 1) << (_LANE * b) for b in range(8)) for v in range(256)]
# word -> its feature hash with every bit in a lane of its own (0: the word is not a feature).
# Pages of one site share most of their vocabulary, so most words are found here: the sum of
# these integers is the per-bit count of the whole page in one C loop. Bounded (cleared when
# full; about 300 bytes an entry, so at most ~6 MB); shared by an executor's threads (a lost
# entry in a race is only computed again).
_FEATURES: dict[str, int] = {}
_FEATURES_MAX = 20_000


def _feature_hash(word: str) -> bytes:
    return hashlib.blake2b(word.encode("utf-8", "surrogatepass"), digest_size=8).digest()


def _spread_feature(word: str) -> int:
    """``word``'s 64-bit feature hash with bit ``i`` moved to bit ``16 i`` (0 when ``word`` is a
    bare number or holds no letter, so is no feature)."""
    if word.isdigit() or not any(map(str.isalpha, word)):
        return 0
    digest = _feature_hash(word)
    spread = 0
    for k in range(8):  # byte k of the big-endian digest holds bits 8(7-k) ... 8(7-k)+7
        spread |= _SPREAD[digest[k]] << (_LANE * 8 * (7 - k))
    return spread


def simhash(text: str) -> int:
    """The 64-bit SimHash of ``text``: an unsigned integer ``0 <= h < 2**64``.

    Features are the distinct words of ``text`` (runs of letters, digits and ``_`` holding a
    letter; bare numbers are left out), lower-cased, each of weight 1 (among its first 10,000
    words). A text without words gives 0. Bit ``i`` is set when more than half of the features'
    BLAKE2b hashes (8 bytes, big-endian) have bit ``i`` set.

    Never raises.

    Cost: one BLAKE2b per word not seen lately (:data:`_FEATURES`), one dictionary look-up per
    distinct word, and one sum of big integers: about 1 ms for a Python docs page on the
    2-core test machine (1.8 ms with a hash and a count per word).
    """
    words = _WORD_RE.findall(text.lower(), 0)
    if len(words) > _MAX_WORDS:
        words = words[:_MAX_WORDS]
    features = _FEATURES
    spreads = []
    for word in set(words):
        spread = features.get(word)
        if spread is None:
            spread = _spread_feature(word)
            if len(features) >= _FEATURES_MAX:
                features.clear()
            features[word] = spread
        if spread:
            spreads.append(spread)
    if not spreads:
        return 0
    half = len(spreads) / 2
    counts = sum(spreads)
    value = 0
    for i in range(BITS):
        if (counts >> (_LANE * i) & _LANE_MASK) > half:
            value |= 1 << i
    return value


def hamming(a: int, b: int) -> int:
    """The number of bits in which fingerprints ``a`` and ``b`` differ (0 ... 64)."""
    return (a ^ b).bit_count()


def near_duplicate(a: int, b: int, distance: int = NEAR_DISTANCE) -> bool:
    """True when fingerprints ``a`` and ``b`` differ in at most ``distance`` bits."""
    return hamming(a, b) <= distance
