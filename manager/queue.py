"""The manager's queue of READY grid threads: priority first (higher number first), then FIFO.

A plain binary heap with lazy deletion: a thread that leaves READY by another way (aborted) is
skipped when it reaches the top, because its ``queue_seq`` no longer matches the entry.
"""

from __future__ import annotations

import heapq
import itertools
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from gridcrawl.manager.core import GridThread


class ReadyQueue:
    """READY grid threads in dispatch order: higher ``priority`` first, then submission order."""

    def __init__(self) -> None:
        self._heap: list[tuple[int, int, "GridThread"]] = []
        self._seq = itertools.count()
        self._live = 0

    def push(self, thread: "GridThread") -> None:
        """Queue ``thread`` (it must be READY); a thread pushed again replaces its older entry."""
        if thread.queue_seq is not None:
            self._live -= 1
        thread.queue_seq = next(self._seq)
        heapq.heappush(self._heap, (-thread.priority, thread.queue_seq, thread))
        self._live += 1

    def discard(self, thread: "GridThread") -> None:
        """Forget ``thread`` if it is queued (lazily: its entry is skipped later)."""
        if thread.queue_seq is not None:
            thread.queue_seq = None
            self._live -= 1

    def pop(self) -> "GridThread | None":
        """The next thread to dispatch, or ``None`` when the queue is empty."""
        heap = self._heap
        while heap:
            _, seq, thread = heapq.heappop(heap)
            if thread.queue_seq == seq:
                thread.queue_seq = None
                self._live -= 1
                return thread
        return None

    def __len__(self) -> int:
        return self._live
