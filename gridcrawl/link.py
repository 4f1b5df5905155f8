"""Which manager a peer (executor, client) talks to when there are several: the endpoint list of
a grid with hot-standby managers, and its two decisions — follow a standby's redirect, or move on
to the next manager when the current one is silent.

With hot standbys (docs/operations.md, "Several managers"), exactly one manager is *active* (it
holds the lease on the shared database, :mod:`gridcrawl.manager.lease`); a *standby* answers any
peer with a ``refuse`` naming the active manager's address. A peer is configured with every
manager's endpoint (``--manager`` repeated, or comma-separated in the configuration file and
``GRIDCRAWL_MANAGER``), starts with the first, goes to the one a refusal names — only if it is
one of the configured endpoints, so a hostile answer cannot send a peer elsewhere — and, when the
current manager falls silent, tries the next one in order (with the usual exponential back-off
between attempts, kept by the caller). Pure: no sockets, no clock.
"""

from __future__ import annotations


def split_endpoints(values: str | list[str] | tuple[str, ...]) -> list[str]:
    """The manager endpoints of an option value: one string, a comma-separated string, or a list
    of either (``["tcp://a:9000,tcp://b:9000"]`` → two), stripped, duplicates dropped, in order.
    Raises ``ValueError`` if none is left."""
    if isinstance(values, str):
        values = [values]
    found: list[str] = []
    for value in values:
        for part in str(value).split(","):
            part = part.strip()
            if part and part not in found:
                found.append(part)
    if not found:
        raise ValueError("no manager endpoint given (--manager tcp://HOST:9000)")
    return found


class ManagerEndpoints:
    """The managers a peer may talk to, and the one it talks to now (:attr:`current`).

    ``endpoints``: ZeroMQ endpoints in the order to try (see :func:`split_endpoints`).
    """

    def __init__(self, endpoints: str | list[str] | tuple[str, ...]) -> None:
        self.endpoints = split_endpoints(endpoints)
        self.index = 0

    @property
    def current(self) -> str:
        """The endpoint to connect to now."""
        return self.endpoints[self.index]

    @property
    def several(self) -> bool:
        """True when there is another manager to try."""
        return len(self.endpoints) > 1

    def follow(self, active: str | None) -> bool:
        """A standby refused us naming the ``active`` manager: switch to it if it is one of ours
        (True: reconnect now); otherwise move to the next endpoint (True if there is another).
        Returns False when there is nothing else to try."""
        if active and active in self.endpoints:
            if active == self.current:
                return False
            self.index = self.endpoints.index(active)
            return True
        return self.next()

    def next(self) -> bool:
        """The current manager is silent or refuses: move to the next endpoint, round the list.
        Returns False (and stays) when there is only one."""
        if not self.several:
            return False
        self.index = (self.index + 1) % len(self.endpoints)
        return True

    def __str__(self) -> str:
        return ",".join(self.endpoints)
