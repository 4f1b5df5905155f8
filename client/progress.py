"""The client's progress bar (pages, errors, in flight, pages/s) and end-of-crawl summary, drawn
with rich on stderr."""

from __future__ import annotations

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table


class ProgressView:
    """A live progress bar updated from :class:`gridcrawl.client.app.Progress` figures.

    ``total`` is the page limit (``None``: unknown, the bar pulses). Disabled views print only
    the summary.
    """

    def __init__(self, *, enabled: bool = True, total: int | None = None) -> None:
        self.console = Console(stderr=True)
        self.enabled = enabled and self.console.is_terminal
        self.bar = Progress(
            TextColumn("[bold]crawl"), BarColumn(), TextColumn("{task.completed} pages"),
            TextColumn("{task.fields[errors]} errors"), TextColumn("{task.fields[in_flight]} in flight"),
            TextColumn("{task.fields[rate]:.1f} pages/s"), TimeElapsedColumn(),
            TextColumn("[bold red]{task.fields[note]}"), console=self.console, disable=not self.enabled)
        self.task = self.bar.add_task("crawl", total=total, errors=0, in_flight=0, rate=0.0, note="")

    def __enter__(self) -> "ProgressView":
        self.bar.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self.bar.__exit__(*exc)

    def update(self, progress) -> None:
        """Show the figures of ``progress`` (a :class:`gridcrawl.client.app.Progress`), and its note
        ("database unavailable, retrying") when it has one."""
        self.bar.update(self.task, completed=progress.pages, errors=progress.errors,
                        in_flight=progress.in_flight, rate=progress.pages_per_second,
                        note=getattr(progress, "note", ""))

    def summary(self, counts: dict) -> None:
        """Print the end-of-crawl table: pages this run, documents, errors, to visit, time, rate."""
        table = Table(title="gridcrawl: crawl summary", show_header=False)
        table.add_row("application", str(counts.get("application_id", ""))[:8])
        table.add_row("pages this run", str(counts["pages"]))
        table.add_row("documents stored", str(counts["documents"]))
        table.add_row("URLs visited", str(counts["visited"]))
        table.add_row("errors", str(counts["errors"]))
        table.add_row("left to visit", str(counts["to_visit"]))
        table.add_row("seconds", f"{counts['seconds']:.2f}")
        table.add_row("pages/s", f"{counts['pages_per_second']:.1f}")
        self.console.print(table)
