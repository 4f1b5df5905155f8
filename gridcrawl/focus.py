"""Focused crawling: the relevance score that orders a focused crawl's frontier.

A focused crawler (``semantic-non-semantic-crawlers.txt``, section 3.5) keeps its frontier as a
priority queue and always takes the most relevant URL next; links below a threshold are not
followed. The paper leaves the relevance function open ("dynamic semantic relevance"); gridcrawl
uses the **shark-search** potential score of M. Hersovici et al., *The shark-search algorithm.
An application: tailored Web site mapping*, WWW7 (1998), section 3, with two changes said below.

Terms. ``K`` is the set of focus keywords (``--focus "kw1 kw2 ..."``, lower-cased). The tokens of
a text are its lower-case runs of letters and digits. A keyword *matches* a text when some token
of the text equals it or begins with it (``crawl`` matches ``crawler`` and ``crawling``: a
light stand-in for stemming). The similarity of a text ``t`` is the share of keywords it matches::

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
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from urllib.parse import unquote

__all__ = ["Focus", "priority", "tokens", "page_text"]

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


@dataclass(frozen=True)
class Focus:
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
        for name in ("delta", "beta", "gamma"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"focus weight {name} must be between 0 and 1, not {getattr(self, name)!r}")
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
        equals it or begins with it."""
        words = tokens(text)
        if not words:
            return 0.0
        hits = sum(1 for k in self._keys if k in words or any(w.startswith(k) for w in words))
        return hits / len(self._keys)

    def url_sim(self, url: str) -> float:
        """:meth:`sim` of the tokens of ``url`` (scheme dropped, percent-escapes decoded)."""
        return self.sim(unquote(url.split("://", 1)[-1]))

    def page_score(self, title: str, text: str, queued_score: float) -> float:
        """``R(p)``: the page's own similarity (title and text), else ``delta * queued_score``."""
        own = self.sim(f"{title} {text}")
        return own if own > 0 else self.delta * queued_score

    def link_score(self, anchor_text: str, url: str, parent_score: float) -> float:
        """``r(c)``: the potential score of a link with ``anchor_text`` to ``url`` found on a
        page whose page score is ``parent_score`` (0 ... 1)."""
        anchor = self.sim(anchor_text)
        context = 1.0 if anchor > 0 else self.url_sim(url)
        neighbourhood = self.beta * anchor + (1 - self.beta) * context
        inherited = self.delta * parent_score
        return self.gamma * inherited + (1 - self.gamma) * neighbourhood
