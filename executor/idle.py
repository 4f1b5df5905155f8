"""Idle detection for non-dedicated (idle-desktop) executors: take grid threads only while the
desktop's owner is not using it.

Alchemi's non-dedicated executors worked while a desktop was idle. Here "idle" means both:

* the **CPU load of other processes** — the machine's CPU use minus this executor's own —
  stays under ``threshold`` percent of the machine (``--cpu-threshold``), and
* the local time of day is inside the allowed **hours** (``--hours 18:00-08:00``; a window
  whose end is before its start wraps past midnight).

The decision has hysteresis so that a desktop does not flap: the executor stops taking work as
soon as the mean load over the last ``busy_seconds`` exceeds the threshold (the owner came
back), and takes work again only after the load has stayed under the threshold for
``idle_seconds`` (and the hours allow it).

Everything that decides is pure — :func:`parse_hours`, :func:`within_hours`,
:func:`other_cpu_percent`, :func:`busy_percent` and :class:`IdlePolicy` take the clock and the
CPU figures as arguments — and :class:`CpuSampler`/:class:`IdleMonitor` read them from psutil
(Linux, macOS and Windows alike: no POSIX-only call).
"""

from __future__ import annotations

import datetime as _dt
import re
import time
from collections import deque
from typing import Callable, NamedTuple

from gridcrawl.settings import Settings

_HOURS = re.compile(r"^\s*(\d{1,2}):(\d{2})\s*-\s*(\d{1,2}):(\d{2})\s*$")


class HoursWindow(NamedTuple):
    """Allowed local hours as minutes after midnight: ``start`` included, ``end`` excluded.
    ``end < start`` wraps past midnight; ``start == end`` means all day."""

    start: int
    end: int


def parse_hours(text: str) -> HoursWindow:
    """``"HH:MM-HH:MM"`` (24-hour local time) → :class:`HoursWindow`.

    ``"18:00-08:00"`` is 18:00 to 08:00 the next morning; ``"00:00-24:00"`` is all day.
    Raises ``ValueError`` naming the problem (format, hour over 24, minute over 59).
    """
    match = _HOURS.match(text or "")
    if match is None:
        raise ValueError(f"hours {text!r}: use HH:MM-HH:MM, e.g. 18:00-08:00")
    h1, m1, h2, m2 = (int(g) for g in match.groups())
    for hour, minute in ((h1, m1), (h2, m2)):
        if minute > 59 or hour > 24 or (hour == 24 and minute != 0):
            raise ValueError(f"hours {text!r}: {hour:02d}:{minute:02d} is not a time of day")
    return HoursWindow((h1 * 60 + m1) % 1440, (h2 * 60 + m2) % 1440 if (h2, m2) != (24, 0) else 1440)


def minute_of_day(moment: _dt.datetime | _dt.time) -> int:
    """Minutes after midnight of ``moment`` (its own, local, clock)."""
    return moment.hour * 60 + moment.minute


def within_hours(window: HoursWindow | None, minute: int) -> bool:
    """True if ``minute`` (after midnight, 0–1439) is inside ``window`` (None: always)."""
    if window is None:
        return True
    start, end = window
    if end == 1440:
        end = 0 if start == 0 else end
    if start == end:
        return True
    if start < end:
        return start <= minute < end
    return minute >= start or minute < end  # wraps past midnight


def busy_percent(before: tuple[float, float], after: tuple[float, float]) -> float:
    """Machine CPU use in percent between two ``(busy_seconds, total_seconds)`` readings of the
    machine's CPU times (all CPUs summed). 0.0 when no time passed."""
    total = after[1] - before[1]
    if total <= 0:
        return 0.0
    return max(0.0, min(100.0, 100.0 * (after[0] - before[0]) / total))


def other_cpu_percent(machine_percent: float, own_cpu_seconds: float, wall_seconds: float, cpus: int) -> float:
    """The CPU load of other processes, in percent of the whole machine.

    ``machine_percent``: the machine's CPU use over the interval (0–100, all CPUs);
    ``own_cpu_seconds``: CPU-seconds this process used in it; ``wall_seconds``: its length;
    ``cpus``: logical CPUs. The executor's own share (``own / (wall × cpus)``) is taken off, so
    the executor's crawling never counts as the owner being back. Clamped to 0–100.
    """
    if wall_seconds <= 0 or cpus <= 0:
        return max(0.0, min(100.0, machine_percent))
    own_percent = 100.0 * own_cpu_seconds / (wall_seconds * cpus)
    return max(0.0, min(100.0, machine_percent - own_percent))


class IdlePolicy:
    """The accept/stop decision with hysteresis, fed one CPU sample at a time.

    ``threshold``: percent of the machine other processes may use; ``hours``: allowed window or
    None; ``idle_seconds``: quiet time needed before work is taken (again); ``busy_seconds``:
    the window whose mean load decides that the owner is back. Starts not accepting.
    """

    def __init__(self, threshold: float = Settings.cpu_threshold, hours: HoursWindow | None = None, *,
                 idle_seconds: float = Settings.idle_seconds, busy_seconds: float = 3.0) -> None:
        if not 0 < threshold <= 100:
            raise ValueError(f"cpu threshold must be in (0, 100] percent, not {threshold!r}")
        if idle_seconds < 0 or busy_seconds < 0:
            raise ValueError("idle and busy seconds must be >= 0")
        self.threshold = threshold
        self.hours = hours
        self.idle_seconds = idle_seconds
        self.busy_seconds = busy_seconds
        self.accepting = False
        window = "" if hours is None else (f", between {hours.start // 60:02d}:{hours.start % 60:02d} and "
                                           f"{hours.end // 60:02d}:{hours.end % 60:02d}")
        self.reason = (f"waiting for an idle desktop: other processes under {threshold:.0f}% of the CPU "
                       f"for {idle_seconds:.0f} s{window} (--cpu-threshold, --idle-seconds, --hours)")
        self._samples: deque[tuple[float, float]] = deque()
        self._quiet_since: float | None = None
        self._load = 0.0  # the mean load of other processes over the busy window, percent
        self._outside_hours = False
        self._waiting_since: float | None = None  # when the policy last said why it waits (or stopped waiting)

    def update(self, now: float, minute: int, other_percent: float) -> bool:
        """Feed one sample: ``now`` (monotonic seconds), ``minute`` of the local day, and the
        load of other processes in percent. Returns whether to accept work now; sets
        :attr:`reason` to a sentence explaining a change."""
        self._samples.append((now, other_percent))
        horizon = now - max(self.busy_seconds, 0.0)
        while len(self._samples) > 1 and self._samples[0][0] < horizon:
            self._samples.popleft()
        if other_percent >= self.threshold:
            self._quiet_since = None
        elif self._quiet_since is None:
            self._quiet_since = now
        recent = [value for t, value in self._samples if t >= horizon]
        mean = self._load = sum(recent) / len(recent)
        self._outside_hours = not within_hours(self.hours, minute)
        if self._outside_hours:
            if self.accepting:
                self.reason = "outside the allowed hours"
            self.accepting = False
        elif self.accepting:
            if mean >= self.threshold:
                self.accepting = False
                self.reason = (f"owner back: other processes use {mean:.0f}% of the CPU "
                               f"(threshold {self.threshold:.0f}%)")
        elif self._quiet_since is not None and now - self._quiet_since >= self.idle_seconds:
            self.accepting = True
            self.reason = (f"idle: other processes under {self.threshold:.0f}% of the CPU for "
                           f"{now - self._quiet_since:.0f} s")
        return self.accepting

    def still_waiting(self, now: float) -> str | None:
        """While work is not taken, once every :data:`WAITING_REPEAT` seconds (``now``: monotonic
        seconds, as :meth:`update`'s): why, with the figures of the last sample (``other processes
        use 87% of the CPU (--cpu-threshold 25%)``); else None. A desktop that stayed busy
        logged one line at start and nothing more for hours."""
        if self.accepting or self._waiting_since is None:
            self._waiting_since = now
            return None
        if now - self._waiting_since < WAITING_REPEAT:
            return None
        self._waiting_since = now
        if self._outside_hours:
            why = "outside the allowed hours (--hours)"
        elif self._load >= self.threshold or self._quiet_since is None:
            why = f"other processes use {self._load:.0f}% of the CPU (--cpu-threshold {self.threshold:.0f}%)"
        else:
            why = f"quiet for {now - self._quiet_since:.0f} s of the {self.idle_seconds:.0f} s needed (--idle-seconds)"
        return why


#: Seconds between two lines of an idle-only executor that takes no work, saying why (:meth:`IdlePolicy.still_waiting`).
WAITING_REPEAT = 600.0


def own_cpu_seconds(process) -> float:
    """CPU-seconds (user + system) of psutil ``process`` and of its descendants: those running
    (the headless browser of ``--render`` and its driver) and those ended and waited for (each
    one's ``children_*`` times), so that a process's own load includes what it started. A
    descendant that ends between two readings moves from the first sum to its parent's
    ``children_*``: the total does not jump."""
    import psutil
    total = 0.0
    try:
        family = [process, *process.children(recursive=True)]
    except psutil.Error:
        family = [process]
    for member in family:
        try:
            t = member.cpu_times()
        except psutil.Error:  # ended meanwhile
            continue
        total += t.user + t.system + getattr(t, "children_user", 0.0) + getattr(t, "children_system", 0.0)
    return total


class CpuSampler:
    """Reads the machine's and this process's CPU times with psutil and returns the load of
    other processes since the previous call (:func:`other_cpu_percent`). This process's own
    load includes its children (:func:`own_cpu_seconds`: a browser it renders with is not the
    desktop's owner coming back). Its own readings of the machine's times, so other
    ``psutil.cpu_percent`` callers do not disturb it."""

    def __init__(self) -> None:
        import psutil
        self._psutil = psutil
        self._process = psutil.Process()
        self._cpus = psutil.cpu_count() or 1
        self._last = self._read()

    def _read(self) -> tuple[float, float, float, float]:
        t = self._psutil.cpu_times()
        total = sum(t) - getattr(t, "guest", 0.0) - getattr(t, "guest_nice", 0.0)  # Linux counts guest in user
        idle = t.idle + getattr(t, "iowait", 0.0)
        return time.monotonic(), total - idle, total, own_cpu_seconds(self._process)

    def other_percent(self) -> float:
        """Percent of the machine used by other processes since the previous call."""
        now = self._read()
        before, self._last = self._last, now
        machine = busy_percent((before[1], before[2]), (now[1], now[2]))
        return other_cpu_percent(machine, now[3] - before[3], now[0] - before[0], self._cpus)


class IdleMonitor:
    """An :class:`IdlePolicy` fed from a CPU sampler and a clock: ``monitor.check()`` → accept?

    ``sample``: returns the other processes' load in percent (default: a :class:`CpuSampler`);
    ``clock``: returns the local time (default ``datetime.now``); ``monotonic``: seconds.
    """

    def __init__(self, policy: IdlePolicy, *, sample: Callable[[], float] | None = None,
                 clock: Callable[[], _dt.datetime] | None = None,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self.policy = policy
        self.sample = sample or CpuSampler().other_percent
        self.clock = clock or _dt.datetime.now
        self.monotonic = monotonic
        self.last_load = 0.0

    def check(self) -> bool:
        """Take one sample and return whether the executor should take work now."""
        self.last_load = self.sample()
        return self.policy.update(self.monotonic(), minute_of_day(self.clock()), self.last_load)

    @property
    def reason(self) -> str:
        """Why the executor accepts work or not (the policy's last change)."""
        return self.policy.reason

    def still_waiting(self) -> str | None:
        """The policy's :meth:`IdlePolicy.still_waiting` now."""
        return self.policy.still_waiting(self.monotonic())


__all__ = ["HoursWindow", "parse_hours", "minute_of_day", "within_hours", "busy_percent", "other_cpu_percent",
           "IdlePolicy", "CpuSampler", "IdleMonitor"]
