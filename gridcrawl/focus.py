"""Focused crawling: the relevance score that orders a focused crawl's frontier.

A focused crawler (``semantic-non-semantic-crawlers.txt``, section 3.5) keeps its frontier as a
priority queue and always takes the most relevant URL next; links below a threshold are not
followed. The paper leaves the relevance function open ("dynamic semantic relevance"); gridcrawl
uses the **shark-search** potential score of M. Hersovici et al., *The shark-search algorithm.
An application: tailored Web site mapping*, WWW7 (1998), section 3, with two changes said below.

Terms. ``K`` is the set of focus keywords (``--focus "kw1 kw2 ..."``, lower-cased). The tokens of
a text are its lower-case runs of letters and digits. A keyword *matches* a text when some token
of the text equals it or begins with it (``crawl`` matches ``crawler`` and ``crawling``: a
light stand-in for stemming); a keyword of one or two characters (the ``e`` of ``e-commerce``)
only matches a token equal to it. The similarity of a text ``t`` is the share of keywords it matches::

    sim(t) = |{k in K : k matches t}| / |K|             (0 ... 1)

Page score of a fetched page ``p`` (stored as ``document.relevance``; shark-search's
inherited-score rule applied to the page itself)::

    R(p) = sim(title and text of p)        if that is > 0
         = delta * r(p)                    otherwise (r(p): the score p was queued with;
                                           1 for a seed)

Score of a link from page ``p`` to ``c`` with anchor text ``a`` (stored as
``to_visit_url.relevance``; the frontier's order)::

    inherited(c)      = delta * R(p)
    anchor(c)         = sim(a)
    context(c)        = 1 if anchor(c) > 0 else sim(URL tokens of c)
    neighbourhood(c)  = beta * anchor(c) + (1 - beta) * context(c)
    r(c)              = gamma * inherited(c) + (1 - gamma) * neighbourhood(c)

Changes from shark-search: (1) the "anchor context" (text around the link, which the executor
does not send) is replaced by the tokens of the link's URL (host, path and query), which often
name the topic (``/papers/focused-crawler.html``); (2) a page without keywords inherits from
the score it was queued with instead of its parent's inherited score, which is what the client
has at hand; it decays by ``delta`` at each such page just the same. Defaults: ``delta = 0.5``
(shark-search's decay factor), ``beta = 0.8`` (anchor over context, as shark-search),
``gamma = 0.5`` (inherited against neighbourhood). Every score lies in 0 ... 1.

A link whose score is below ``--min-relevance`` is not queued. The frontier's integer priority
(higher first at the client and the manager) is ``round(1000 * r)``: see :func:`priority`.

**Ontology-guided focus** (``--focus-ontology FILE``, :class:`OntologyFocus`): the semantic
focused crawler of the paper (section 3.5, "dynamic semantic relevance"; section 3.4's ontology
analyser matching fetched models against a stored ontology). The same shark-search formulas,
with the similarity counting *ontology terms* instead of keywords, as in M. Ehrig and
A. Maedche, *Ontology-focused crawling of Web documents*, ACM SAC 2003, section 3 (relevance
from the ontology entities a document refers to). The terms ``T`` are the ontology's classes
(``owl:Class``, ``rdfs:Class``) and properties (``rdf:Property``, ``owl:ObjectProperty``,
``owl:DatatypeProperty``, ``owl:AnnotationProperty``); each has its IRI and its labels
(``rdfs:label``, ``skos:prefLabel``, ``skos:altLabel``), a label matching a text when each of its
tokens matches a token of the text as a keyword does. A term *matches* a page when its IRI is
the subject, predicate, URI object or datatype of one of the page's triples, or a label matches
the page's title and text; for anchor texts and URLs only labels count::

    sim(p) = min(1, |{t in T : t matches p}| / S),   S = min(3, |T|)

(``S``, the saturation: a page naming three terms of the ontology is fully on topic; the share
of all terms, as for keywords, would make every page of a large ontology's topic score low).
``R(p)``, ``r(c)``, ``delta``, ``beta``, ``gamma`` and ``--min-relevance`` are as above.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable
from urllib.parse import unquote

from gridcrawl.errors import OntologyError  # noqa: F401 (re-exported)

__all__ = ["Focus", "OntologyFocus", "OntologyError", "priority", "tokens", "page_text"]

_TOKEN_RE = re.compile(r"[^\W_]+", re.UNICODE)
_SCRIPT_RE = re.compile(r"<(script|style)\b.*?</\1\s*>", re.IGNORECASE | re.DOTALL)
_TAG_RE = re.compile(r"<[^>]*>")
#: Characters of page text looked at for the page score.
MAX_TEXT = 200_000


def tokens(text: str) -> set[str]:
    """The distinct lower-case tokens (runs of letters and digits) of ``text``."""
    return set(_TOKEN_RE.findall(text.lower()))


def page_text(html: str | None) -> str:
    """The visible text of an HTML document, roughly: scripts, styles and tags removed (first
    :data:`MAX_TEXT` characters). ``None`` gives ``""``."""
    if not html:
        return ""
    html = html[:MAX_TEXT]
    return _TAG_RE.sub(" ", _SCRIPT_RE.sub(" ", html))


def priority(score: float) -> int:
    """The integer grid-thread priority of a relevance ``score`` (0 ... 1): ``round(1000 * score)``."""
    return int(round(1000 * max(0.0, min(1.0, score))))


class _SharkSearch:
    """Shark-search's page and link scores on top of a subclass's ``sim`` (module docstring)."""

    delta: float
    beta: float
    gamma: float

    def sim(self, text: str) -> float:  # pragma: no cover - defined by subclasses
        raise NotImplementedError

    def page_sim(self, title: str, text: str, iris: Iterable[str] = ()) -> float:
        """The similarity of a fetched page: of its title and text (``iris``, the IRIs of its
        triples, count only for an ontology focus)."""
        return self.sim(f"{title} {text}")

    def url_sim(self, url: str) -> float:
        """:meth:`sim` of the tokens of ``url`` (scheme dropped, percent-escapes decoded)."""
        return self.sim(unquote(url.split("://", 1)[-1]))

    def page_score(self, title: str, text: str, queued_score: float, iris: Iterable[str] = ()) -> float:
        """``R(p)``: the page's own similarity (:meth:`page_sim`), else ``delta * queued_score``."""
        own = self.page_sim(title, text, iris)
        return own if own > 0 else self.delta * queued_score

    def link_score(self, anchor_text: str, url: str, parent_score: float) -> float:
        """``r(c)``: the potential score of a link with ``anchor_text`` to ``url`` found on a
        page whose page score is ``parent_score`` (0 ... 1)."""
        anchor = self.sim(anchor_text)
        context = 1.0 if anchor > 0 else self.url_sim(url)
        neighbourhood = self.beta * anchor + (1 - self.beta) * context
        inherited = self.delta * parent_score
        return self.gamma * inherited + (1 - self.gamma) * neighbourhood


def _check_weights(focus) -> None:
    for name in ("delta", "beta", "gamma"):
        if not 0.0 <= getattr(focus, name) <= 1.0:
            raise ValueError(f"focus weight {name} must be between 0 and 1, not {getattr(focus, name)!r}")


#: Letters a keyword needs to match the tokens it begins (shorter: only an equal token). The
#: ``e`` of ``e-commerce``, the ``c`` of ``C++``, the ``t`` of ``T-shirt`` began most words of
#: every page: "electric egg cooker" scored 1/3 for "e-commerce kettle", "Cats and dogs" 1/2
#: for "C++ programming".
MIN_PREFIX = 3


def _matches(key: str, words: set[str], ordered: list[str]) -> bool:
    """True when keyword ``key`` equals a word or begins one (``ordered``: ``words`` sorted; a
    key of fewer than :data:`MIN_PREFIX` characters only equals one)."""
    if key in words:
        return True
    if len(key) < MIN_PREFIX:
        return False
    i = bisect.bisect_left(ordered, key)
    return i < len(ordered) and ordered[i].startswith(key)


@dataclass(frozen=True)
class Focus(_SharkSearch):
    """The relevance function of a focused crawl on ``keywords`` (see the module docstring).

    ``delta``, ``beta`` and ``gamma`` are shark-search's decay, anchor and inheritance weights
    (each 0 ... 1). Raises ``ValueError`` if there is no keyword or a weight is outside 0 ... 1.
    """

    keywords: tuple[str, ...]
    delta: float = 0.5
    beta: float = 0.8
    gamma: float = 0.5
    _keys: tuple[str, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        keys = tuple(dict.fromkeys(t for k in self.keywords for t in _TOKEN_RE.findall(k.lower())))
        if not keys:
            raise ValueError("--focus needs at least one keyword (letters or digits)")
        _check_weights(self)
        object.__setattr__(self, "_keys", keys)

    @classmethod
    def parse(cls, text: str) -> "Focus":
        """A focus from the ``--focus`` option's text: keywords separated by spaces or commas."""
        return cls(tuple(_TOKEN_RE.findall(text.lower())))

    @property
    def terms(self) -> tuple[str, ...]:
        """The normalised keywords (lower case, distinct, in the given order)."""
        return self._keys

    def sim(self, text: str) -> float:
        """Share of keywords matched by ``text`` (0 ... 1): a keyword matches a token that
        equals it or begins with it (a keyword of one or two characters: only an equal token)."""
        words = tokens(text)
        if not words:
            return 0.0
        hits = sum(1 for k in self._keys
                   if k in words or (len(k) >= MIN_PREFIX and any(w.startswith(k) for w in words)))
        return hits / len(self._keys)


_RDF = "http://www.w3.org/1999/02/22-rdf-syntax-ns#"
_RDFS = "http://www.w3.org/2000/01/rdf-schema#"
_OWL = "http://www.w3.org/2002/07/owl#"
_SKOS = "http://www.w3.org/2004/02/skos/core#"
#: The types whose instances are the ontology's terms: classes and properties.
TERM_TYPES = (_OWL + "Class", _RDFS + "Class", _RDF + "Property", _OWL + "ObjectProperty",
              _OWL + "DatatypeProperty", _OWL + "AnnotationProperty")
#: The label properties read for each term.
LABELS = (_RDFS + "label", _SKOS + "prefLabel", _SKOS + "altLabel")
#: Ontology file suffixes and their rdflib formats (other names: RDF/XML if it starts with "<").
ONTOLOGY_FORMATS = {".ttl": "turtle", ".n3": "n3", ".nt": "nt", ".owl": "xml", ".rdf": "xml", ".xml": "xml",
                    ".jsonld": "json-ld"}


@dataclass(frozen=True)
class OntologyFocus(_SharkSearch):
    """The relevance function of an ontology-guided crawl (module docstring).

    ``terms`` maps each term's IRI to its labels' token tuples. Build one with :meth:`load`.
    Raises ``ValueError`` for an empty ontology or a weight outside 0 ... 1.
    """

    terms: dict
    source: str = ""
    delta: float = 0.5
    beta: float = 0.8
    gamma: float = 0.5

    def __post_init__(self) -> None:
        if not self.terms:
            raise OntologyError(f"{self.source or 'the ontology'} names no class or property "
                                "(owl:Class, rdfs:Class, rdf:Property, owl:ObjectProperty, ...)")
        _check_weights(self)

    def __hash__(self) -> int:
        return hash(self.source)

    @property
    def saturation(self) -> int:
        """``S``: the number of matching terms that makes a page fully on topic (3, or fewer terms)."""
        return min(3, len(self.terms))

    @classmethod
    def load(cls, path: str | Path) -> "OntologyFocus":
        """Read an ontology file (Turtle, RDF/XML or OWL in RDF/XML, N-Triples, JSON-LD; the
        format from its suffix) with the parsers of :mod:`gridcrawl.semantic`, which never touch
        the network (``owl:imports`` is not followed). Raises :class:`OntologyError` with the
        reason when it cannot be read or names no term."""
        from gridcrawl.semantic import Limits, RDFError, parse_rdf
        path = Path(path)
        try:
            body = path.read_bytes()
        except OSError as exc:
            raise OntologyError(f"cannot read the ontology {path}: {exc.strerror or exc}") from None
        fmt = ONTOLOGY_FORMATS.get(path.suffix.lower()) or ("xml" if body.lstrip()[:1] == b"<" else "turtle")
        try:
            triples = parse_rdf(body, path.resolve().as_uri(), fmt, Limits(max_bytes=64 * 1024 * 1024,
                                                                           max_triples=2_000_000, deadline=120))
        except RDFError as exc:
            raise OntologyError(f"the ontology {path} does not parse: {exc}") from None
        return cls.from_triples(triples, source=str(path))

    @classmethod
    def from_triples(cls, triples: Iterable[list], source: str = "", **weights) -> "OntologyFocus":
        """The focus of an ontology given as wire triples (:mod:`gridcrawl.semantic`)."""
        triples = list(triples)
        iris = {t[0] for t in triples if t[1] == _RDF + "type" and t[2] in TERM_TYPES and not t[0].startswith("_:")}
        labels: dict = {iri: [] for iri in iris}
        for s, p, o, kind, _, _ in triples:
            if s in labels and p in LABELS and kind == "literal":
                words = tuple(dict.fromkeys(_TOKEN_RE.findall(o.lower())))
                if words and words not in labels[s]:
                    labels[s].append(words)
        return cls({iri: tuple(v) for iri, v in sorted(labels.items())}, source=source, **weights)

    def _label_hits(self, text: str) -> set[str]:
        words = tokens(text)
        if not words:
            return set()
        ordered = sorted(words)
        return {iri for iri, labels in self.terms.items()
                if any(all(_matches(k, words, ordered) for k in label) for label in labels)}

    def sim(self, text: str) -> float:
        """Share of the saturation ``S`` reached by the terms whose labels ``text`` matches (0 ... 1)."""
        return min(1.0, len(self._label_hits(text)) / self.saturation)

    def page_sim(self, title: str, text: str, iris: Iterable[str] = ()) -> float:
        """``sim(p)``: terms whose IRI is in the page's triples (``iris``: their subjects,
        predicates, URI objects and datatypes) or whose labels the title and text match."""
        hits = self._label_hits(f"{title} {text}")
        hits.update(iri for iri in set(iris) if iri in self.terms)
        return min(1.0, len(hits) / self.saturation)
