"""The crawl's tables — ``document``, ``visited_url``, ``to_visit_url`` (the paper's figure 10) —
and the operations of the application's crawl loop on them.

The tables are the truth of a crawl: a URL is identified by its fingerprint (MD5 of the
canonical URL, see :mod:`gridcrawl.urls`), ``document`` and ``visited_url`` have a unique key on
it, so no page is ever stored twice, and a new client on the same database resumes the crawl.
A ``to_visit_url`` row's id is also its grid thread's id within the application.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Iterable, Sequence

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from gridcrawl import models
from gridcrawl.db import chunks, init_schema, insert_ignore, utcnow
from gridcrawl.protocol import PageResult
from gridcrawl.urls import InvalidURL, canonical_url, fingerprint, in_scope, url_host

document, visited, to_visit = models.document, models.visited_url, models.to_visit_url


@dataclass(slots=True)
class Pending:
    """A URL the application has submitted as a grid thread (``thread_id`` = to_visit row id)."""

    thread_id: int
    url: str
    fingerprint: str
    depth: int
    priority: int = 5


@dataclass
class Outcome:
    """A finished grid thread as the client applies it: the manager's verdict and the page."""

    pending: Pending
    page: PageResult | None
    executor_id: str | None
    attempts: int
    failed: bool


@dataclass
class Scope:
    """Which links are followed: hosts in ``allowed_domains`` (and their subdomains), depth at
    most ``max_depth`` (-1: unlimited)."""

    allowed_domains: list[str] = field(default_factory=list)
    max_depth: int = -1

    def allows(self, url: str, depth: int) -> bool:
        """True if a link to ``url`` found at ``depth`` is to be crawled."""
        if self.max_depth >= 0 and depth > self.max_depth:
            return False
        return in_scope(url_host(url), self.allowed_domains)


class CrawlStore:
    """The crawl tables in ``engine`` (created if missing)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        init_schema(engine, models.crawl_metadata, models.crawl_meta)

    # ------------------------------------------------------------------ meta

    def get_meta(self, name: str, default: str | None = None) -> str | None:
        """The stored crawl setting ``name`` (application id, scope ...), or ``default``."""
        with self.engine.connect() as conn:
            value = conn.execute(sa.select(models.crawl_meta.c.value)
                                 .where(models.crawl_meta.c.name == name)).scalar()
        return default if value is None else value

    def set_meta(self, name: str, value: str) -> None:
        """Store crawl setting ``name`` (replacing an older value)."""
        meta = models.crawl_meta
        with self.engine.begin() as conn:
            if conn.execute(meta.update().where(meta.c.name == name).values(value=value)).rowcount == 0:
                conn.execute(meta.insert().values(name=name, value=value))

    def scope(self, seeds: Sequence[str], allow_domains: Iterable[str], max_depth: int) -> Scope:
        """The crawl's scope: the seeds' hosts plus ``allow_domains``, merged with what an
        earlier run stored (so a resumed crawl keeps its scope)."""
        stored = json.loads(self.get_meta("allowed_domains", "[]"))
        domains = list(dict.fromkeys([*stored, *(url_host(u) for u in seeds), *(d.lower().strip(".") for d in allow_domains)]))
        self.set_meta("allowed_domains", json.dumps(domains))
        return Scope(domains, max_depth)

    # ------------------------------------------------------------------ frontier

    def add_seeds(self, urls: Sequence[str]) -> int:
        """Queue seed URLs at depth 0 unless already visited; return how many were new.
        Raises :class:`~gridcrawl.urls.InvalidURL` for a URL that cannot be crawled."""
        rows = []
        for url in urls:
            canonical = canonical_url(url)
            rows.append({"url": canonical, "fingerprint": fingerprint(canonical), "depth": 0,
                         "priority": 5, "discovered_from": None, "in_flight": False})
        with self.engine.begin() as conn:
            before = conn.execute(sa.select(sa.func.count()).select_from(to_visit)).scalar()
            seen = self._visited(conn, [r["fingerprint"] for r in rows])
            insert_ignore(conn, to_visit, [r for r in rows if r["fingerprint"] not in seen])
            return conn.execute(sa.select(sa.func.count()).select_from(to_visit)).scalar() - before

    def release_all(self) -> int:
        """Mark every to-visit URL as not in flight (at start: what an earlier client had
        submitted is submitted again); return how many were."""
        with self.engine.begin() as conn:
            return conn.execute(to_visit.update().where(to_visit.c.in_flight == sa.true())
                                .values(in_flight=False)).rowcount

    def claim(self, limit: int) -> list[Pending]:
        """Take up to ``limit`` to-visit URLs (highest priority, then oldest) and mark them in
        flight. Returns them as :class:`Pending` grid threads."""
        if limit <= 0:
            return []
        with self.engine.begin() as conn:
            rows = conn.execute(
                sa.select(to_visit.c.id, to_visit.c.url, to_visit.c.fingerprint, to_visit.c.depth,
                          to_visit.c.priority)
                .where(to_visit.c.in_flight == sa.false())
                .order_by(to_visit.c.priority.desc(), to_visit.c.id).limit(limit)).all()
            for ids in chunks([r.id for r in rows], 500):
                conn.execute(to_visit.update().where(to_visit.c.id.in_(ids)).values(in_flight=True))
        return [Pending(r.id, r.url, r.fingerprint, r.depth, r.priority) for r in rows]

    # ------------------------------------------------------------------ results

    @staticmethod
    def _visited(conn, fingerprints: Sequence[str]) -> set[str]:
        found: set[str] = set()
        for part in chunks(list(fingerprints), 500):
            found.update(conn.execute(sa.select(visited.c.fingerprint).where(visited.c.fingerprint.in_(part))).scalars())
        return found

    def apply(self, outcomes: Sequence[Outcome], scope: Scope, *, store_content: bool = True) -> dict:
        """Apply finished grid threads in ONE transaction (the paper's application steps 7–10):
        store each fetched page in ``document``, add its URL to ``visited_url``, delete it from
        ``to_visit_url``, and queue its in-scope links that are neither visited nor queued.

        Returns counts ``{"pages", "documents", "errors", "links"}``. Idempotent: applying the
        same outcome twice changes nothing the second time.
        """
        now = utcnow()
        docs, visits, links = [], [], {}
        errors = 0
        for o in outcomes:
            page, pend = o.page, o.pending
            status = page.status if page else None
            kind = "poison" if o.failed else (page.error_kind if page else "lost")
            if kind:
                errors += 1
            visits.append({"url": pend.url, "fingerprint": pend.fingerprint, "depth": pend.depth, "status": status,
                           "error_kind": kind, "error": ((page.error or "") if page else "")[:1000] or None,
                           "attempts": o.attempts, "visited_at": now})
            if page is None or kind:
                continue
            content = page.content if store_content else None
            docs.append({"url": pend.url, "fingerprint": pend.fingerprint, "final_url": page.final_url or pend.url,
                         "status": status, "content_type": (page.content_type or "")[:255] or None,
                         "size": page.size, "title": page.title, "encoding": page.encoding,
                         "content": content if isinstance(content, str) else None,
                         "body": content if isinstance(content, bytes) else None, "depth": pend.depth,
                         "fetched_at": now, "executor": o.executor_id, "fetch_seconds": page.fetch_seconds,
                         "parse_seconds": page.parse_seconds})
            depth = pend.depth + 1
            for link in page.links:
                url = link[0]
                if len(url) > models.URL_LENGTH or not scope.allows(url, depth):
                    continue
                fp = fingerprint(url)
                if fp not in links:
                    links[fp] = {"url": url, "fingerprint": fp, "depth": depth, "priority": 5,
                                 "discovered_from": pend.url[:models.URL_LENGTH], "in_flight": False}
        with self.engine.begin() as conn:
            insert_ignore(conn, document, docs)
            insert_ignore(conn, visited, visits)
            for ids in chunks([o.pending.thread_id for o in outcomes], 500):
                conn.execute(to_visit.delete().where(to_visit.c.id.in_(ids)))
            if links:
                seen = self._visited(conn, list(links))
                insert_ignore(conn, to_visit, [row for fp, row in links.items() if fp not in seen])
        return {"pages": len(outcomes), "documents": len(docs), "errors": errors, "links": len(links)}

    # ------------------------------------------------------------------ figures

    def counts(self) -> dict:
        """Rows in each table: ``documents``, ``visited``, ``to_visit``, ``errors``."""
        with self.engine.connect() as conn:
            count = lambda table, *where: conn.execute(sa.select(sa.func.count()).select_from(table).where(*where)).scalar()
            return {"documents": count(document), "visited": count(visited), "to_visit": count(to_visit),
                    "errors": count(visited, visited.c.error_kind.is_not(None))}


def check_seed(url: str) -> str:
    """The canonical form of seed ``url``; raises :class:`InvalidURL` with the reason."""
    return canonical_url(url)


__all__ = ["CrawlStore", "Outcome", "Pending", "Scope", "InvalidURL", "check_seed"]
