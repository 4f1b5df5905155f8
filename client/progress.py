"""The client's progress bar (pages, errors, in flight, pages/s) and end-of-crawl summary, drawn
with rich on stderr."""

from __future__ import annotations

import logging
import math
import sys
import time
from typing import Sequence

from rich.console import Console
from rich.table import Table

from gridcrawl.words import counted
from gridcrawl.redact import terminal_text


#: Seconds between two plain progress lines when stderr is no terminal (see :class:`ProgressView`).
PLAIN_EVERY = 60.0


def _floor2(score: float) -> float:
    """``score`` rounded down to two decimals: a ``--min-relevance`` of the number shown follows
    the link that scored it (0.2999 rounded would show 0.30, which still leaves it out)."""
    return math.floor(score * 100 + 1e-9) / 100


class ProgressView:
    """A live progress bar updated from :class:`gridcrawl.client.app.Progress` figures: pages,
    errors, URLs to visit (the frontier, in flight included), in flight, pages/s, time.

    ``total`` is the page limit; without one (``None``) the bar's end is the pages done plus the
    URLs left to visit once the frontier has been counted (it moves away as pages bring new
    links), and it pulses before. Disabled views (off, or
    stderr not a terminal) print only the summary and do not import ``rich.progress`` (about
    9 ms of a command's start-up, issue 23); a view that is on but whose stderr is no terminal
    (a log file, ``nohup``) prints the same figures as one plain line every
    :data:`PLAIN_EVERY` seconds instead (it printed nothing for hours on a site with no end).
    """

    def __init__(self, *, enabled: bool = True, total: int | None = None) -> None:
        self.console = Console(stderr=True)
        self.enabled = enabled and self.console.is_terminal
        self.plain = enabled and not self.enabled  # on, without a terminal: a line now and then
        self._plain_said = time.monotonic()
        self._moved = []
        self.bar = None
        if self.enabled:
            from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
            self.bar = Progress(
                TextColumn("[bold]crawl"), BarColumn(), TextColumn("{task.fields[pages]}"),
                TextColumn("{task.fields[errors]}"), TextColumn("{task.fields[to_visit]} to visit"),
                TextColumn("{task.fields[in_flight]} in flight"),
                TextColumn("{task.fields[rate]:.1f} pages/s"), TimeElapsedColumn(),
                TextColumn("[bold red]{task.fields[note]}"), console=self.console)
            self.task = self.bar.add_task("crawl", total=total, pages=counted(0, "page"), errors=counted(0, "error"),
                                          to_visit="?", in_flight=0, rate=0.0, note="")
            self.limit = total

    def __enter__(self) -> "ProgressView":
        if self.bar is None:
            return self
        stderr = sys.stderr
        self.bar.__enter__()
        # log lines on stderr go through rich's proxy while the bar is shown, so each is printed
        # on its own line above the bar instead of glued onto it
        self._moved = [(h, h.setStream(sys.stderr)) for h in logging.getLogger().handlers
                       if type(h) is logging.StreamHandler and h.stream is stderr
                       and sys.stderr is not stderr]
        return self

    def __exit__(self, *exc) -> None:
        for handler, stream in self._moved:
            handler.setStream(stream)
        if self.bar is not None:
            self.bar.__exit__(*exc)

    def update(self, progress) -> None:
        """Show the figures of ``progress`` (a :class:`gridcrawl.client.app.Progress`), and its note
        ("database unavailable, retrying") when it has one."""
        if self.plain and time.monotonic() - self._plain_said >= PLAIN_EVERY:
            self._plain_said = time.monotonic()
            to_visit = progress.to_visit
            note = getattr(progress, "note", "")
            self.console.print(f"crawl: {pages_label(progress)}, {counted(progress.errors, 'error')}, "
                               f"{'?' if to_visit is None else f'{max(to_visit, progress.in_flight):,}'} to visit, "
                               f"{progress.in_flight:,} in flight, {progress.pages_per_second:.1f} pages/s"
                               + (f" ({note})" if note else ""), markup=False, highlight=False, soft_wrap=True)
        if self.bar is not None:
            to_visit = progress.to_visit  # counted now and then: never fewer than those in flight
            to_visit = None if to_visit is None else max(to_visit, progress.in_flight)
            total = self.limit or (progress.pages + to_visit if to_visit is not None else None)
            self.bar.update(self.task, completed=progress.pages, total=total, pages=pages_label(progress),
                            errors=counted(progress.errors, "error"),
                            to_visit="?" if to_visit is None else to_visit, in_flight=progress.in_flight,
                            rate=progress.pages_per_second, note=getattr(progress, "note", ""))

    def summary(self, counts: dict, errors: list = (), files: list[tuple[str, str]] = (),
                commands: list[tuple[str, str]] = ()) -> None:
        """Print the end-of-crawl summary on stderr, within 80 columns (counts with thousands
        separators, as ``URLs visited``): the figures of ``counts``
        (application id, pages this run (``pages``; the sitemap files read, ``sitemaps_read``,
        named apart: no document), documents, visited, errors, set aside, to visit, links
        not queued because their host was at ``max_pages_per_host`` (``capped``: host -> links,
        a seed's subdomains counted under it), sitemap files not read (``sitemaps_skipped``:
        host -> files, :attr:`~gridcrawl.client.store.CrawlStore.sitemaps_skipped`), links of pages at ``max_depth`` not followed
        (``beyond_depth``, this crawl's runs together; ``new_crawl``: how a crawl starts afresh,
        ``a new --workdir`` or ``a new --db``), links a focused crawl scored below ``min_relevance`` (``below_relevance``),
        pages whose links were cut at their executor's ``max_links_per_page`` (``links_cut``:
        ``(url, max_links_per_page)`` pairs), the hosts
        whose robots.txt asks a Crawl-delay (``crawl_delays``: host -> seconds asked; with
        ``max_crawl_delay``, the most kept),
        seconds, pages/s (pages, not sitemap files)), then ``errors`` (:class:`~gridcrawl.client.store.ErrorGroup`: kind,
        count, one example URL and its reason) in two tables, the failures and the URLs the
        crawl's rules set aside (duplicates, traps, noindex), the ``files`` written (what, path)
        and the next ``commands`` (what for, command line). The URLs robots.txt disallowed
        (``disallowed``; the ``robots`` group of ``errors`` gives the example) are a row of
        their own, not errors."""
        table = Table(title="gridcrawl: crawl summary", show_header=False, title_justify="left")
        table.add_column(no_wrap=True)
        table.add_column(overflow="fold")
        table.add_row("application", str(counts.get("application_id", ""))[:8])
        sitemaps = counts.get("sitemaps_read") or 0
        table.add_row("pages this run", f"{counts['pages']:,}" + (
            f" (and {sitemaps:,} sitemap file{'s' if sitemaps != 1 else ''} read: no document)" if sitemaps else ""))
        table.add_row("documents stored", documents_label(counts))
        table.add_row("URLs visited", visited_label(counts))
        table.add_row("errors", f"{counts['errors']:,}")
        if counts.get("disallowed"):
            table.add_row("disallowed by robots.txt", terminal_text(disallowed_label(counts, errors)))
        if counts.get("set_aside"):
            table.add_row("set aside", f"{counts['set_aside']:,} (duplicates, traps, noindex: not errors)")
        table.add_row("left to visit", f"{counts['to_visit']:,}")
        if counts.get("kept"):
            table.add_row("links kept", f"{counts['kept']:,} (the keep rules' matches: table kept_link)")
        capped = counts.get("capped") or {}
        if capped:
            table.add_row("not queued", f"{counted(sum(capped.values()), 'link')} of hosts at the per-host cap of "
                          f"{counted(counts.get('max_pages_per_host') or 0, 'URL')} (a seed's subdomains counted with it): "
                          f"{_most(capped)}")
        skipped = counts.get("sitemaps_skipped") or {}
        if skipped:
            from gridcrawl.client.store import HOST_SITEMAPS, SITEMAP_FILES_PER_SITE
            table.add_row("sitemaps not read", f"{sum(skipped.values()):,} sitemap files: a site's sitemaps are "
                          f"{SITEMAP_FILES_PER_SITE:,} at most ({HOST_SITEMAPS} of its own robots.txt's), none once "
                          f"it has max_pages_per_host URLs: {_most(skipped)}")
        if counts.get("beyond_depth"):
            table.add_row("not followed", f"{counted(counts['beyond_depth'], 'link')} of pages at --max-depth "
                          f"{counts.get('max_depth')} (the hop limit against traps; -1: none; this crawl's runs "
                          f"together); not recorded: a deeper crawl takes {counts.get('new_crawl', 'a new --workdir')}")
        if counts.get("links_cut"):
            cut = counts["links_cut"]
            bounds = sorted({bound for _, bound in cut})
            bound = f"{bounds[0]:,}" if len(bounds) == 1 else f"{bounds[0]:,}-{bounds[-1]:,}"
            table.add_row("links cut", f"{len(cut):,} page{'s' if len(cut) != 1 else ''} with more than {bound} "
                          f"links: the first {bound} of each followed, no more (its executor's "
                          f"max_links_per_page), e.g. {terminal_text(shorten(cut[0][0]))}")
        delays = counts.get("crawl_delays") or {}
        cap = counts.get("max_crawl_delay") or 0.0
        if delays and cap > 0:  # (a max_crawl_delay of 0 keeps none)
            slowest = sorted(delays.items(), key=lambda kv: (-kv[1], kv[0]))
            shown = ", ".join(f"{host} ({asked:g} s" + (f", {cap:g} s kept" if cap and asked > cap else "") + ")"
                              for host, asked in slowest[:3])
            more = f" and {len(slowest) - 3} more" if len(slowest) > 3 else ""
            table.add_row("crawl delay", terminal_text(
                f"{len(delays):,} host{'s' if len(delays) != 1 else ''} ask{'s' if len(delays) == 1 else ''} "
                f"for one in robots.txt, their pages fetched one at a time that far apart (at most "
                f"max_crawl_delay, {cap:g} s): {shown}{more}"))
        if counts.get("below_relevance"):
            table.add_row("not queued", f"{counted(counts['below_relevance'], 'link')} scoring below --min-relevance "
                          f"{counts.get('min_relevance'):g}, the best of them {_floor2(counts.get('best_below', 0.0)):.2f} "
                          "(a lower --min-relevance follows more)")
        table.add_row("crawl seconds", f"{counts['seconds']:.2f}")
        table.add_row("pages/s", f"{counts['pages_per_second']:.1f}")
        for need, n in sorted((counts.get("waiting") or {}).items()):
            from gridcrawl.plugins import how_to_provide
            table.add_row(terminal_text(f"waiting for {need}"),
                          terminal_text(f"{n:,} grid thread{'s' if n != 1 else ''}: no executor with {need} "
                                        f"answered ({how_to_provide(need)})"))
        self.console.print(table)
        if counts.get("recrawl"):
            self.recrawl_summary(counts["recrawl"])
        print_error_groups(self.console, errors)
        for what, path in files:
            self.console.print(f"{what}: {terminal_text(path)}", soft_wrap=True, highlight=False)
        for what, command in commands:
            self.console.print(f"{what}:\n  {terminal_text(command)}", soft_wrap=True, highlight=False)

    def semantic_summary(self, counts: dict, command: str) -> None:
        """Print the semantic crawl's own small section (``--structured-data``): the triples
        stored, and ``command``, the report that tells more."""
        table = Table(title="gridcrawl: semantic crawl", show_header=False, title_justify="left",
                      min_width=28)  # the title on one line: a table of two short cells wrapped it
        table.add_column(no_wrap=True)
        table.add_column(overflow="fold")
        table.add_row("triples stored", f"{counts.get('triples', 0):,}")
        self.console.print(table)
        self.console.print(f"triples, RDF documents and errors:\n  {terminal_text(command)}", soft_wrap=True,
                           highlight=False)

    def recrawl_summary(self, recrawl: dict) -> None:
        """Print a recrawl's counts (:data:`gridcrawl.client.app.RECRAWL_COUNTS`) as a table of
        its own: due, fetched, not modified (304), unchanged, changed, gone, revived, disallowed
        by robots.txt (not errors), errors, new (labels: :data:`gridcrawl.report.RECRAWL_LABELS`)."""
        from gridcrawl.report import RECRAWL_COLUMNS, RECRAWL_LABELS
        table = Table(title="gridcrawl: recrawl", show_header=False)
        for key in RECRAWL_COLUMNS:
            table.add_row(RECRAWL_LABELS.get(key, key), f"{recrawl.get(key, 0):,}")
        self.console.print(table)

    def item_summary(self, figures) -> None:
        """Print the items section: items per type and, per field, items with a value and misses
        of a required value (``figures``: :func:`gridcrawl.client.items.item_summary`); fields
        of stored items that never matched are flagged (a broken selector, usually). A type with
        no item stored because a required field missed says so, and flags only that field (the
        others' selectors may match: an item without a required value is not stored)."""
        table = Table(title="gridcrawl: items")
        for column in ("type", "field", "items", "with a value", "required misses", "note"):
            table.add_column(column, justify="left" if column in ("type", "field", "note") else "right")
        examples = []
        for t in figures:
            missed = not t.items and any(f.missed for f in t.fields.values())
            notes = [f"{counted(t.errors, 'page')} failed (below)" if t.errors else "",
                     "none stored: a required field missed" if missed else "",
                     "none found: no page it applies to (its url, page_type), or its each matched nothing"
                     if not t.items and not missed and not t.errors else ""]
            table.add_row(t.type, "", f"{t.items:,}", "", "", "; ".join(n for n in notes if n))
            if t.error_example:
                examples.append((t.type, t.errors, *t.error_example))
            for f in t.fields.values():
                note = ("never matched" if t.items and f.filled == 0
                        else "required, missed: no item without it" if missed and f.missed else "")
                table.add_row("", f.name, "", f"{f.filled:,}", f"{f.missed:,}", note)
        self.console.print(table)
        for kind, count, url, message in examples:  # what failed, and where the rest is
            line = (f"{kind}: 1 page's items failed, {url}: {message} (table item_issue, kind 'error')"
                    if count == 1 else f"{kind}: {counted(count, 'page')}' items failed, e.g. {url}: {message} "
                                       "(all of them: table item_issue, kind 'error')")
            self.console.print(terminal_text(line), soft_wrap=True, highlight=False)


def _most(per_host: dict) -> str:
    """The three hosts of ``per_host`` (host -> count) with the highest counts, with their counts,
    and how many more: ``"a.test (9,000), b.test (12) and 4 more"``."""
    hosts = sorted(per_host.items(), key=lambda kv: (-kv[1], kv[0]))
    more = f" and {len(hosts) - 3} more" if len(hosts) > 3 else ""
    return ", ".join(f"{host} ({n:,})" for host, n in hosts[:3]) + more


def pages_label(progress) -> str:
    """The pages a running crawl has done (a :class:`gridcrawl.client.app.Progress`), and the
    sitemap files among its results apart: ``"2 pages, 1,783 sitemaps"`` (a sitemap is read
    for its links and stores no document, so it is not counted as a page nor in pages/s)."""
    n = progress.sitemaps
    return counted(progress.page_count, "page") + (f", {counted(n, 'sitemap')}" if n else "")


def documents_label(counts: dict) -> str:
    """The "documents stored" figure of :func:`gridcrawl.client.store.crawl_counts`' ``counts``,
    naming the duplicates among them (a row naming its original, without content: a WARC leaves
    them out), which "set aside" counts too: ``"59 (1 a duplicate of another page)"``."""
    n = counts.get("duplicates") or 0
    return f"{counts['documents']:,}" + (f" ({n:,} {'a duplicate' if n == 1 else 'duplicates'} of another page)"
                                         if n else "")


def visited_label(counts: dict) -> str:
    """The "URLs visited" figure of :func:`gridcrawl.client.store.crawl_counts`' ``counts``, naming
    the sitemaps among them (read for their links, or a host's ``/sitemap.xml`` not found: no
    document), so that documents, errors, set-aside URLs (less the duplicates, which are
    documents too: :func:`documents_label`) and sitemaps add up to it:
    ``"529 (1 sitemap URL: no document)"``."""
    n = counts.get("sitemaps") or 0
    if not n:
        return f"{counts['visited']:,}"
    return f"{counts['visited']:,} ({n:,} sitemap URL{'s' if n > 1 else ''}: no document)"


def disallowed_label(counts: dict, groups: Sequence) -> str:
    """The "disallowed by robots.txt" figure of :func:`gridcrawl.client.store.crawl_counts`'
    ``counts`` (``disallowed``), with the example URL of the ``robots`` group among ``groups``
    (:class:`~gridcrawl.client.store.ErrorGroup`, :attr:`~gridcrawl.client.store.ErrorGroup.disallowed`)
    when there is one: ``"3 URLs not fetched, as the sites ask (not errors), e.g.
    http://a.test/private/"``."""
    example = next((group.url for group in groups if group.disallowed), None)
    n = counts.get("disallowed") or 0
    return (f"{counted(n, 'URL')} not fetched, as the sites ask ({'not an error' if n == 1 else 'not errors'})"
            + (f", e.g. {shorten(example)}" if example else ""))


def shorten(text: str, most: int = 240) -> str:
    """``text`` cut to ``most`` characters, the last of them ``…``, for a summary's table: a
    URL of 2,000 characters folded over 36 lines of it."""
    return text if len(text) <= most else text[:most - 1] + "…"


def print_error_groups(console: Console, errors: Sequence, *, disallowed: bool = False) -> None:
    """Print ``errors`` (:class:`~gridcrawl.client.store.ErrorGroup`) on ``console`` in two
    tables, the failures and the URLs the crawl's rules set aside (duplicates, traps, noindex):
    kind, count, one example URL and its reason (each cut at 240 characters: a URL of 2,000
    took 36 lines of the table). The URLs robots.txt disallowed are in neither: with
    ``disallowed``, in a third table (``gridcrawl report --crawl-db``); a crawl's summary gives
    them a row of its own instead (:func:`disallowed_label`)."""
    for title, which in (("errors by kind (one example each)", "failed"),
                         ("set aside by the crawl's rules (one example each)", "set aside"),
                         ("disallowed by robots.txt (not errors)", "disallowed")):
        groups = [group for group in errors if which == ("disallowed" if group.disallowed else
                                                         "failed" if group.failed else "set aside")]
        if which == "disallowed" and not disallowed:
            continue
        if not groups:
            continue
        kinds = Table(title=title, title_justify="left")
        kinds.add_column("kind", no_wrap=True)
        kinds.add_column("count", justify="right")
        kinds.add_column("example", overflow="fold")
        for group in groups:
            url, reason = shorten(group.url), shorten(group.error)
            kinds.add_row(group.label, f"{group.count:,}", terminal_text(f"{url}\n{reason}".strip()))
        console.print(kinds)
