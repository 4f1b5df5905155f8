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
_MAX_WORDS = 10_000  # words of a page used at most (bounds the cost on huge pages; ~60 KB of text)
_LANE = 16  # bits of one counter: a lane counts the features with one hash bit set (<= _MAX_WORDS)
_LANE_MASK = (1 << _LANE) - 1
# _SPREAD_AT[k][v]: byte value v at byte k of the big-endian feature hash (bits 8(7-k) ... 8(7-k)+7),
# its 8 bits spread one per lane (bit i of the hash -> bit 16 i), so a feature's spread is the
# OR of 8 look-ups. Row k is row 7 shifted by 8 (7 - k) lanes, so it is built by shifting: about
# 1 ms of CPU at import instead of 5 (every program imports this module)
_SPREAD_LOW = [sum((v >> b & 1) << (_LANE * b) for b in range(8)) for v in range(256)]
_SPREAD_AT = [[x << (_LANE * 8 * (7 - k)) for x in _SPREAD_LOW] for k in range(8)]
# word (lower-cased, UTF-8) -> its feature hash with every bit in a lane of its own (0: the word
# is not a feature). Pages of one site share most of their vocabulary, so most words are found
# here: the sum of these integers is the per-bit count of the whole page in one C loop. Bounded
# (cleared when full; about 250 bytes an entry, so at most ~5 MB); shared by an executor's
# threads (a lost entry in a race is only computed again).
_FEATURES: dict[bytes, int] = {}
_FEATURES_MAX = 20_000
# a table turning every ASCII byte that is no word character into a space (letters, digits, "_"
# and the bytes of non-ASCII characters stay)
_ASCII_SEPARATORS = bytes(v if v >= 0x80 or chr(v).isalnum() or v == 0x5F else 0x20 for v in range(256))
_MAX_SEVERAL = 16  # distinct pieces of several words counted one by one at most (else: read in order)


def _utf8(text: str) -> bytes:
    return text.encode("utf-8", "surrogatepass")


def _distinct_words(text: str) -> set[bytes]:
    r"""The distinct words among the first :data:`_MAX_WORDS` words of ``text``, lower-cased, as
    UTF-8: the runs of word characters (``\w``: ``str.isalnum()`` or ``_``) that
    ``_WORD_RE.findall(text.lower())`` finds, without matching a regular expression at every
    character of the text (which took half of the SimHash time on a Python docs page).

    The ASCII characters that are no word characters become spaces and the bytes are split on
    them (C loops): each piece is one word, but for the few distinct pieces holding non-ASCII
    characters, which the regular expression splits (``café`` is one word, ``¶`` none,
    ``word—word`` two). Past :data:`_MAX_WORDS` words the pieces are read in order."""
    if "\u03a3" in text:  # Σ: the one character str.lower() maps by its context (final sigma)
        text = text.lower()
    # lower-cased piece by piece below: ASCII letters here, the non-ASCII pieces one by one
    spaced = _utf8(text).translate(_ASCII_SEPARATORS).lower()
    pieces = spaced.split()
    distinct = set(pieces)
    if text.isascii():  # every piece is one word
        return distinct if len(pieces) <= _MAX_WORDS else set(pieces[:_MAX_WORDS])
    split: dict[bytes, list[bytes]] = {}  # the non-ASCII pieces that are not one word -> their words
    for piece in [piece for piece in distinct if not piece.isascii()]:
        words = list(map(_utf8, _WORD_RE.findall(piece.decode("utf-8", "surrogatepass").lower())))
        if words != [piece]:
            split[piece] = words
    several = [(piece, len(words)) for piece, words in split.items() if len(words) > 1]
    if len(several) <= _MAX_SEVERAL:
        # at most this many words: a piece's occurrences are at most its occurrences as bytes
        bound = len(pieces) + sum((n - 1) * spaced.count(piece) for piece, n in several)
        if bound <= _MAX_WORDS:
            distinct.difference_update(split)
            for words in split.values():
                distinct.update(words)
            return distinct
    words = []
    for piece in pieces:  # in order, up to the cap
        if piece in split:
            words += split[piece]
        else:
            words.append(piece)
        if len(words) >= _MAX_WORDS:
            break
    return set(words[:_MAX_WORDS])


def _spread_feature(word: bytes) -> int:
    """``word``'s 64-bit feature hash (BLAKE2b of its UTF-8 bytes) with bit ``i`` moved to bit
    ``16 i`` (0 when ``word`` is a bare number or holds no letter, so is no feature)."""
    text = word.decode("utf-8", "surrogatepass")
    if text.isdigit() or not any(map(str.isalpha, text)):
        return 0
    d = hashlib.blake2b(word, digest_size=8).digest()
    t = _SPREAD_AT
    return (t[0][d[0]] | t[1][d[1]] | t[2][d[2]] | t[3][d[3]] | t[4][d[4]] | t[5][d[5]] | t[6][d[6]]
            | t[7][d[7]])


def simhash(text: str) -> int:
    """The 64-bit SimHash of ``text``: an unsigned integer ``0 <= h < 2**64``.

    Features are the distinct words of ``text`` (runs of letters, digits and ``_`` holding a
    letter; bare numbers are left out), lower-cased, each of weight 1 (among its first 10,000
    words). A text without words gives 0. Bit ``i`` is set when more than half of the features'
    BLAKE2b hashes (8 bytes of the word's UTF-8, big-endian) have bit ``i`` set.

    Never raises.

    Cost: the words found by C loops over bytes (:func:`_distinct_words`), one BLAKE2b per word
    not seen lately (:data:`_FEATURES`), one dictionary look-up per distinct word, and one sum
    of big integers: about 0.8 ms for a Python docs page on the 2-core test machine (1.3 ms with
    a regular expression over the text and a Python loop over the distinct words).
    """
    features = _FEATURES
    distinct = list(_distinct_words(text))
    spreads = list(map(features.get, distinct))
    if None in spreads:  # words not seen lately: hash them
        if len(features) >= _FEATURES_MAX:
            features.clear()
        for i, spread in enumerate(spreads):
            if spread is None:
                spreads[i] = features[distinct[i]] = _spread_feature(distinct[i])
    count = len(spreads) - spreads.count(0)
    if not count:
        return 0
    half = count / 2
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
