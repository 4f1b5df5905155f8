"""Who may join the grid: users, groups and permissions in the manager database, and checking a
user's password and permission.

This module owns Alchemi's security model, made safe:

* **Permissions** (Alchemi's ``prm`` table): ``ExecuteThread`` (run grid threads: register an
  executor), ``ManageOwnApp`` (create applications and manage one's own), ``ManageAllApps``
  (reattach to, read, acknowledge and close anyone's application), ``ManageUsers``; the names
  and each group's permissions are defined in :mod:`gridcrawl.permissions`.
* **Groups** (``grp``), each with a fixed set of permissions (``grp_prm``): ``Administrators``
  (all four), ``Executors`` (ExecuteThread), ``Users`` (ManageOwnApp). Every user (``usr``) is
  in one group. The groups and permissions are created with the schema; **no user is**: there
  is no default account (Alchemi shipped admin/admin).
* **Passwords** are stored as scrypt hashes (RFC 7914; ``hashlib.scrypt``, N=2^14, r=8, p=1,
  16 MiB of memory, a 64-byte key) with a random 16-byte salt per user, never in clear (Alchemi
  kept unsalted MD5). Verification compares in constant time (``hmac.compare_digest``) and runs
  scrypt even for an unknown user, so a wrong password and an unknown user look alike.

When is a login required? :meth:`UserStore.authenticate` lets everyone in while the ``usr``
table is empty (a local grid on 127.0.0.1), unless the store was made with
``require_login=True`` (the manager's ``--require-login``); as soon as one user exists, every
executor and client must log in. The manager's pure core calls :meth:`UserStore.authenticate`
through the ``authenticate(user, password, permission) -> str | None`` callable the server
injects.

Sources: RFC 7914 (scrypt); OWASP Password Storage Cheat Sheet (scrypt parameters); Alchemi 1.0
SQL Server script (usr/grp/prm tables and the groups' permissions).
"""

from __future__ import annotations

import collections
import hashlib
import hmac
import logging
import re
import secrets
import threading
import time
from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from gridcrawl import models
from gridcrawl.errors import AuthError  # noqa: F401 (re-exported)
from gridcrawl.permissions import (EXECUTE_THREAD, GROUP_PERMISSIONS, GROUPS, MANAGE_ALL_APPS,
                                   MANAGE_OWN_APP, MANAGE_USERS, PERMISSIONS)  # noqa: F401 (auth's names too)

log = logging.getLogger("gridcrawl.auth")

# scrypt cost (RFC 7914 §2): N (CPU/memory cost, a power of 2), r (block size), p (parallelism).
# 128 * N * r bytes = 16 MiB of memory and some 50 ms of CPU per verification.
SCRYPT_N, SCRYPT_R, SCRYPT_P = 2 ** 14, 8, 1
KEY_BYTES = 64
SALT_BYTES = 16
MIN_PASSWORD = 8
MAX_PASSWORD = 1024
_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.@-]{0,63}$")
# asked at every login of an open grid (1,000 executors registering: 1,000 times): built once,
# half the cost of building the statement each time
_ANY_USER = sa.select(models.usr.c.usr_name).limit(1)
#: seconds for which the store reuses what it read for a login (whether any user exists; a
#: user's row, group and permissions) before reading the database again. Logins are checked in
#: the manager's loop, and a query there costs milliseconds (about 2 ms on a slow 2-core machine):
#: 1,000 executors registering at once after a manager restart held the loop for seconds, one
#: query each, heartbeats waiting behind them. Changes made through this store take effect at
#: once; those made by another process (``gridcrawl users`` while the manager runs) within
#: this many seconds.
READ_TTL = 1.0
_HASH = re.compile(r"^scrypt\$n=(\d+),r=(\d+),p=(\d+)\$([0-9a-f]+)$")


# ----------------------------------------------------------------------------------------------
# Password hashing


def hash_password(password: str, salt: bytes, *, n: int = SCRYPT_N, r: int = SCRYPT_R, p: int = SCRYPT_P) -> str:
    """The stored form of ``password`` with ``salt``: ``"scrypt$n=N,r=R,p=P$<128 hex digits>"``.

    The parameters travel with the hash, so a later release can raise them and still verify old
    hashes. Raises ``ValueError`` (from ``hashlib``) on parameters scrypt rejects.
    """
    key = hashlib.scrypt(password.encode("utf-8"), salt=salt, n=n, r=r, p=p, maxmem=256 * n * r * p,
                         dklen=KEY_BYTES)
    return f"scrypt$n={n},r={r},p={p}${key.hex()}"


def verify_password(password: str, salt: bytes, stored: str) -> bool:
    """True if ``password`` with ``salt`` gives ``stored`` (a :func:`hash_password` string).

    Compares in constant time. A malformed ``stored`` value, or parameters beyond sane bounds
    (N above 2^20, which would let a tampered row exhaust the manager's memory), give False.
    """
    match = _HASH.match(stored or "")
    if match is None:
        return False
    n, r, p = (int(g) for g in match.groups()[:3])
    if not (2 <= n <= 2 ** 20 and n & (n - 1) == 0 and 1 <= r <= 32 and 1 <= p <= 16):
        return False
    try:
        computed = hash_password(password, salt, n=n, r=r, p=p)
    except ValueError:
        return False
    return hmac.compare_digest(computed.encode(), stored.encode())


def check_name(name: str) -> str:
    """``name`` if it is a valid user name (1–64 characters: letters, digits, ``_ . @ -``, not
    starting with ``.``, ``@`` or ``-``); else raise :class:`AuthError`."""
    if not isinstance(name, str) or not _NAME.match(name):
        raise AuthError(f"invalid user name {name!r}: use 1-64 letters, digits, _ . @ - (not first)")
    return name


def check_password(password: str) -> str:
    """``password`` if it is acceptable for a new account (``MIN_PASSWORD`` to ``MAX_PASSWORD``
    characters); else raise :class:`AuthError`."""
    if not isinstance(password, str) or len(password) < MIN_PASSWORD:
        raise AuthError(f"the password must have at least {MIN_PASSWORD} characters")
    if len(password) > MAX_PASSWORD:
        raise AuthError(f"the password must have at most {MAX_PASSWORD} characters")
    return password


# ----------------------------------------------------------------------------------------------
# The user store


@dataclass(frozen=True)
class User:
    """A row of ``usr`` with its group's name and permissions (``created``: naive UTC)."""

    name: str
    group: str
    permissions: frozenset[str]
    created: datetime | None


#: Seconds of failed password checks (scrypt runs) a manager spends in :data:`LOGIN_WINDOW`
#: seconds, at most (a tenth of its loop); beyond, a login its cache cannot answer is refused at
#: once with :data:`LOGINS_BUSY` (the peer tries again shortly). A flood of wrong passwords from
#: fresh connections froze the manager's loop (about 45 ms a check: 38 a second made a 3.5 s
#: crawl take 45 s); a budget of checks (10 in 5 s) still let a loaded machine, where a check
#: took 0.6 s, spend its whole loop on them. The first :data:`LOGIN_MIN_FAILURES` failures of a
#: window are always checked (a user who mistypes twice is not told to wait). A user who logged
#: in before is answered from the cache and never waits.
LOGIN_SECONDS = 0.5
LOGIN_MIN_FAILURES = 3
LOGIN_WINDOW = 5.0
#: The refusal of a login beyond the budget (the manager core makes it a "try again" refusal).
LOGINS_BUSY = (f"too many failed logins at this manager (over {LOGIN_SECONDS:g} s of password checks in "
               f"{LOGIN_WINDOW:g} s): trying again shortly")


class UserStore:
    """Users, groups and permissions in the manager database ``engine``.

    The constructor creates the manager schema if it is missing (see
    :func:`gridcrawl.db.init_schema`) and the fixed groups and permissions. ``require_login``:
    refuse everyone while no user exists (otherwise an empty ``usr`` table means an open grid).
    Thread-safe (the manager's loop and the CLI use it; the cache has a lock).
    """

    def __init__(self, engine: Engine, *, require_login: bool = False) -> None:
        from gridcrawl.db import init_schema, insert_ignore
        self.engine = engine
        self.require_login = require_login
        init_schema(engine, models.manager_metadata, models.manager_meta)
        with engine.begin() as conn:
            insert_ignore(conn, models.prm, [{"prm_id": i, "prm_name": n} for i, n in PERMISSIONS.items()])
            insert_ignore(conn, models.grp, [{"grp_id": i, "grp_name": n} for i, n in GROUPS.items()])
            ids = {n: i for i, n in PERMISSIONS.items()}
            insert_ignore(conn, models.grp_prm, [{"grp_id": g, "prm_id": ids[perm]} for g, name in GROUPS.items()
                                                 for perm in sorted(GROUP_PERMISSIONS[name])])
        # Successful verifications, so that an executor's reconnects do not run scrypt again:
        # user -> (HMAC of the password under a key that lives only in this process, stored hash).
        self._key = secrets.token_bytes(32)
        self._verified: dict[str, tuple[bytes, str]] = {}
        # what logins read, for READ_TTL seconds: (monotonic time read, whether a user exists)
        # and user -> (monotonic time read, its rows)
        self._any_user: tuple[float, bool] | None = None
        # users who gave a password while no user exists (none was checked): warned of once each
        self._unchecked: set[str] = set()
        self._read: dict[str, tuple[float, list]] = {}
        self._lock = threading.Lock()
        # failed checks: (monotonic time, seconds the check took); their seconds summed
        self._failures: collections.deque[tuple[float, float]] = collections.deque()
        self._failure_seconds = 0.0
        # an unknown user's password is checked against this (never matching) hash, so that it
        # costs one scrypt run like a real check; random digits: no scrypt run at start-up
        self._dummy_salt = secrets.token_bytes(SALT_BYTES)
        self._dummy_hash = f"scrypt$n={SCRYPT_N},r={SCRYPT_R},p={SCRYPT_P}${secrets.token_hex(KEY_BYTES)}"

    # ------------------------------------------------------------------ administration

    def add(self, name: str, password: str, group: str, *, now: datetime | None = None) -> User:
        """Create user ``name`` in ``group`` (a name of :data:`GROUPS`) with ``password``.

        Raises :class:`AuthError` on an invalid name, a weak password, an unknown group or a
        user that exists already.
        """
        from gridcrawl.db import is_unique_violation, utcnow
        check_name(name)
        check_password(password)
        group_id = {n.lower(): i for i, n in GROUPS.items()}.get((group or "").lower())
        if group_id is None:
            raise AuthError(f"unknown group {group!r}: use one of {', '.join(GROUPS.values())}")
        salt = secrets.token_bytes(SALT_BYTES)
        row = {"usr_name": name, "password_hash": hash_password(password, salt), "salt": salt.hex(),
               "grp_id": group_id, "created": now or utcnow()}
        try:
            with self.engine.begin() as conn:
                conn.execute(models.usr.insert(), row)
        except sa.exc.IntegrityError as exc:
            if is_unique_violation(exc):
                raise AuthError(f"user {name!r} exists already") from None
            raise
        self._forget(name)
        log.info("user %s added to group %s", name, GROUPS[group_id])
        return self.get(name)  # type: ignore[return-value]

    def set_password(self, name: str, password: str) -> None:
        """Give user ``name`` a new ``password`` (and a new salt). Raises :class:`AuthError`
        if the user does not exist or the password is weak."""
        check_password(password)
        salt = secrets.token_bytes(SALT_BYTES)
        with self.engine.begin() as conn:
            count = conn.execute(models.usr.update().where(models.usr.c.usr_name == name).values(
                password_hash=hash_password(password, salt), salt=salt.hex())).rowcount
        if not count:
            raise AuthError(f"no user {name!r}")
        self._forget(name)

    def remove(self, name: str) -> bool:
        """Delete user ``name``; True if it existed."""
        with self.engine.begin() as conn:
            count = conn.execute(models.usr.delete().where(models.usr.c.usr_name == name)).rowcount
        self._forget(name)
        return bool(count)

    def _forget(self, name: str) -> None:
        """Drop what this store remembers of user ``name`` and whether any user exists (it was
        added, removed or given a new password through this store)."""
        with self._lock:
            self._verified.pop(name, None)
            self._read.pop(name, None)
            self._any_user = None

    def get(self, name: str) -> User | None:
        """User ``name`` with its group and permissions, or None."""
        rows = self._rows(name)
        if not rows:
            return None
        return User(name, rows[0].grp_name, frozenset(r.prm_name for r in rows if r.prm_name), rows[0].created)

    def list(self) -> list[User]:
        """Every user, by name."""
        u = models.usr
        with self.engine.connect() as conn:
            names = conn.execute(sa.select(u.c.usr_name).order_by(u.c.usr_name)).scalars().all()
        return [user for user in map(self.get, names) if user is not None]

    def has_users(self) -> bool:
        """True if at least one user exists (logins are then required). The answer may be up to
        :data:`READ_TTL` seconds old where another process added or removed the user."""
        now = time.monotonic()
        with self._lock:
            known = self._any_user
        if known is not None and now - known[0] < READ_TTL:
            return known[1]
        with self.engine.connect() as conn:
            found = conn.execute(_ANY_USER).first() is not None
        with self._lock:
            self._any_user = (now, found)
        return found

    def _login_rows(self, name: str) -> list:
        """:meth:`_rows` of ``name`` as read at most :data:`READ_TTL` seconds ago (a login's
        read; at most 4,096 names remembered)."""
        now = time.monotonic()
        with self._lock:
            known = self._read.get(name)
        if known is not None and now - known[0] < READ_TTL:
            return known[1]
        rows = self._rows(name)
        with self._lock:
            if len(self._read) >= 4096:
                self._read.clear()
            self._read[name] = (now, rows)
        return rows

    def _rows(self, name: str) -> list:
        u, g, gp, pr = models.usr, models.grp, models.grp_prm, models.prm
        stmt = (sa.select(u.c.usr_name, u.c.password_hash, u.c.salt, u.c.created, g.c.grp_name, pr.c.prm_name)
                .join(g, g.c.grp_id == u.c.grp_id)
                .outerjoin(gp, gp.c.grp_id == g.c.grp_id)
                .outerjoin(pr, pr.c.prm_id == gp.c.prm_id)
                .where(u.c.usr_name == name))
        with self.engine.connect() as conn:
            return conn.execute(stmt).all()

    # ------------------------------------------------------------------ checking

    def verify(self, name: str, password: str | None) -> User | None:
        """The user ``name`` if ``password`` is its password, else None (unknown user and wrong
        password alike; both cost one scrypt run). Raises :class:`LoginsThrottled` instead of
        running scrypt when failed checks took :data:`LOGIN_SECONDS` in the last
        :data:`LOGIN_WINDOW` seconds (a password the cache knows is answered all the same)."""
        if not isinstance(name, str) or not isinstance(password, str) or len(password) > MAX_PASSWORD:
            return None
        rows = self._login_rows(name) if _NAME.match(name) else []
        tag = hmac.new(self._key, password.encode("utf-8"), hashlib.sha256).digest()
        row = rows[0] if rows else None
        with self._lock:
            cached = self._verified.get(name) if row is not None else None
            if cached is not None and cached[1] == row.password_hash and hmac.compare_digest(cached[0], tag):
                return User(name, row.grp_name, frozenset(r.prm_name for r in rows if r.prm_name), row.created)
            if self._budget_spent():
                raise LoginsThrottled(LOGINS_BUSY)
        began = time.monotonic()
        if row is None:
            verify_password(password, self._dummy_salt, self._dummy_hash)  # same cost as a real check
            ok = False
        else:
            try:
                ok = verify_password(password, bytes.fromhex(row.salt), row.password_hash)
            except ValueError:
                ok = False
        with self._lock:
            if not ok:
                ended = time.monotonic()
                self._failures.append((ended, ended - began))
                self._failure_seconds += ended - began
                return None
            if len(self._verified) >= 4096:
                self._verified.clear()
            self._verified[name] = (tag, row.password_hash)
        return User(name, row.grp_name, frozenset(r.prm_name for r in rows if r.prm_name), row.created)

    def allows(self, user: str, permission: str) -> bool:
        """Whether ``user``, logged in before, may still use ``permission`` (a name of
        :data:`PERMISSIONS`): True while no login is required (an open grid), else whether the
        user exists in a group that has it. No password is checked; what is read is at most
        :data:`READ_TTL` seconds old, as for a login. The manager asks it of its connected peers'
        users, to cut those of a user removed while they were connected. Raises SQLAlchemy's
        errors when the database does not answer."""
        if not self.require_login and not self.has_users():
            return True
        rows = self._login_rows(user) if isinstance(user, str) and _NAME.match(user) else []
        return any(r.prm_name == permission for r in rows)

    def throttled(self) -> bool:
        """Whether the budget of failed password checks is spent now (:meth:`verify` refuses)."""
        with self._lock:
            return self._budget_spent()

    def _budget_spent(self) -> bool:
        """Forget failed checks older than :data:`LOGIN_WINDOW`; whether those left, at least
        :data:`LOGIN_MIN_FAILURES` of them, took :data:`LOGIN_SECONDS` or more (call with the
        lock held)."""
        now = time.monotonic()
        while self._failures and now - self._failures[0][0] > LOGIN_WINDOW:
            self._failure_seconds -= self._failures.popleft()[1]
        if not self._failures:
            self._failure_seconds = 0.0  # no drift from summing floats
        return len(self._failures) >= LOGIN_MIN_FAILURES and self._failure_seconds >= LOGIN_SECONDS

    def authenticate(self, user: str, password: str | None, permission: str, *, quiet: bool = False) -> str | None:
        """The manager core's check: None if ``user`` with ``password`` may use ``permission``
        (a name of :data:`PERMISSIONS`), else the reason to send in a ``refuse`` message.
        ``quiet``: a question, not a login (nothing is refused by the answer), so a user without
        ``permission`` is not logged as refused.

        While no user exists and ``require_login`` is off, everyone may do everything (an open,
        local grid). The reason does not tell an unknown user from a wrong password; a peer that
        gave no password (started without ``--user``) is told to give one; beyond the budget of
        failed checks the reason is :data:`LOGINS_BUSY`.
        """
        if not self.require_login and not self.has_users():
            if password and user not in self._unchecked and len(self._unchecked) < UNCHECKED_SAID_AT_MOST:
                self._unchecked.add(user)
                url = self.engine.url.render_as_string(hide_password=True)
                log.warning("user %r gave a password, but this manager's database (%s) has no users: no login is "
                            "checked and every peer is let in. Were the users added to another database? "
                            "gridcrawl-manager users list --db %s; --require-login refuses everyone until they "
                            "exist", user, url, url)
            return None
        if not password:  # decided before any look-up: says nothing of whether the user exists
            log.warning("login refused for user %r: no password given", user)
            return (f"this manager requires a login and {user!r} gave no password: give --user NAME, "
                    "with its password in GRIDCRAWL_PASSWORD or at the prompt")
        try:
            found = self.verify(user, password)
        except LoginsThrottled as exc:
            return str(exc)
        if found is None:
            log.warning("login refused for user %r: unknown user or wrong password", user)
            return f"authentication failed for user {user!r}: unknown user or wrong password"
        if permission not in found.permissions:
            if quiet:
                return f"no {permission}"
            log.warning("user %r (group %s) refused: no %s permission", user, found.group, permission)
            return f"user {user!r} (group {found.group}) does not have the {permission} permission"
        return None


#: Users of an open grid (no user in its database) whose unchecked password is warned of, at most.
UNCHECKED_SAID_AT_MOST = 100


class LoginsThrottled(Exception):
    """Raised by :meth:`UserStore.verify` when the budget of failed password checks is spent."""


__all__ = ["AuthError", "LoginsThrottled", "LOGINS_BUSY", "User", "UserStore", "hash_password", "verify_password",
           "check_name", "check_password", "PERMISSIONS", "GROUPS", "GROUP_PERMISSIONS", "EXECUTE_THREAD", "MANAGE_OWN_APP", "MANAGE_ALL_APPS",
           "MANAGE_USERS"]
