"""Users, groups and permissions: scrypt hashes with a salt per user, no default accounts, logins
required once a user exists, permissions enforced by the manager's core (executors need
ExecuteThread; a client sees only its own applications unless it has ManageAllApps), and the
real programs: a wrong password and a user without execute permission are refused with a clear
error, the right credentials crawl."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import time

import pytest
import sqlalchemy as sa

from gridcrawl import models, protocol as p
from gridcrawl.auth import AuthError, GROUP_PERMISSIONS, UserStore, hash_password, verify_password
from gridcrawl.cli_common import login_password
from gridcrawl.db import open_database
from gridcrawl.manager.core import ManagerCore, Send
from gridcrawl.settings import Settings
from grid import Grid, on_a_terminal
from sites import generate_site, reachable
from gridcrawl.urls import canonical_url

PASSWORD = "correct horse battery"


@pytest.fixture
def store(tmp_path) -> UserStore:
    return UserStore(open_database(f"sqlite:///{tmp_path / 'manager.db'}"))


# ----------------------------------------------------------------------------------------------
# Hashing

def test_hash_is_scrypt_salted_and_verifies_only_the_right_password():
    salt = os.urandom(16)
    stored = hash_password(PASSWORD, salt)
    assert stored.startswith("scrypt$n=16384,r=8,p=1$") and PASSWORD not in stored
    assert verify_password(PASSWORD, salt, stored)
    assert not verify_password(PASSWORD + "x", salt, stored)
    assert not verify_password(PASSWORD, os.urandom(16), stored)
    assert hash_password(PASSWORD, os.urandom(16)) != stored  # another salt, another hash


@pytest.mark.parametrize("stored", ["", "md5$abc", "scrypt$n=16384,r=8,p=1$zz",
                                    "scrypt$n=1073741824,r=8,p=1$00", "scrypt$n=1000,r=8,p=1$00"])
def test_malformed_or_dangerous_stored_hashes_never_verify(stored):
    assert not verify_password(PASSWORD, b"salt", stored)


# ----------------------------------------------------------------------------------------------
# The user store

def test_groups_and_permissions_exist_but_no_user(store):
    with store.engine.connect() as conn:
        groups = set(conn.execute(sa.select(models.grp.c.grp_name)).scalars())
        perms = set(conn.execute(sa.select(models.prm.c.prm_name)).scalars())
    assert groups == {"Administrators", "Executors", "Users"}
    assert perms == {"ExecuteThread", "ManageOwnApp", "ManageAllApps", "ManageUsers"}
    assert store.list() == [] and not store.has_users()


def test_a_password_given_to_a_manager_without_users_is_warned_of_once_per_user(store, tmp_path, caplog):
    """Users added to another database than the manager's (``users add`` without the
    manager's ``--db``: they went to ./gridcrawl-manager.db) left the grid open, and an executor
    with a wrong password was let in without a word. The open grid still lets everyone in, but a
    peer that gives a password is now warned of, once per user, naming the database."""
    import logging

    from gridcrawl.auth import EXECUTE_THREAD
    with caplog.at_level(logging.WARNING, logger="gridcrawl.auth"):
        assert store.authenticate("worker", "not checked", EXECUTE_THREAD) is None
        assert store.authenticate("worker", "not checked", EXECUTE_THREAD) is None
        assert store.authenticate("nobody", None, EXECUTE_THREAD) is None  # no password: gridcrawl run's own
    lines = [r.getMessage() for r in caplog.records]
    url = f"sqlite:///{tmp_path / 'manager.db'}"
    assert lines == [f"user 'worker' gave a password, but this manager's database ({url}) has no users: no login "
                     "is checked and every peer is let in. Were the users added to another database? "
                     f"gridcrawl-manager users list --db {url}; --require-login refuses everyone until they exist"]
    store.add("worker", PASSWORD, "Executors")
    store._any_user = None  # (the one-second read cache: the user just added counts at once here)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="gridcrawl.auth"):
        assert "wrong password" in store.authenticate("worker", "not checked", EXECUTE_THREAD)
    assert all("has no users" not in r.getMessage() for r in caplog.records)


def test_users_are_stored_with_a_salted_hash_never_the_password(store):
    store.add("alice", PASSWORD, "Users")
    store.add("bob", PASSWORD, "executors")  # group names are case-insensitive
    with store.engine.connect() as conn:
        rows = conn.execute(sa.select(models.usr)).all()
    assert {r.usr_name for r in rows} == {"alice", "bob"}
    assert all(PASSWORD not in r.password_hash and PASSWORD not in r.salt for r in rows)
    assert rows[0].salt != rows[1].salt and rows[0].password_hash != rows[1].password_hash
    assert [(u.name, u.group, u.permissions) for u in store.list()] == [
        ("alice", "Users", frozenset({"ManageOwnApp"})), ("bob", "Executors", frozenset({"ExecuteThread"}))]


@pytest.mark.parametrize("name, password, group, needle", [
    ("alice", "short", "Users", "at least 8"),
    ("alice", PASSWORD, "Gods", "unknown group"),
    ("al ice", PASSWORD, "Users", "invalid user name"),
    ("x" * 65, PASSWORD, "Users", "invalid user name"),
    ("'; DROP TABLE usr; --", PASSWORD, "Users", "invalid user name"),
])
def test_bad_accounts_are_refused(store, name, password, group, needle):
    with pytest.raises(AuthError, match=needle):
        store.add(name, password, group)


def test_a_user_is_added_once(store):
    store.add("alice", PASSWORD, "Users")
    with pytest.raises(AuthError, match="exists already"):
        store.add("alice", PASSWORD + "2", "Administrators")


def test_everyone_is_let_in_while_no_user_exists_unless_login_is_required(store, tmp_path):
    assert store.authenticate("anyone", None, "ExecuteThread") is None
    strict = UserStore(open_database(f"sqlite:///{tmp_path / 'strict.db'}"), require_login=True)
    assert "authentication failed" in strict.authenticate("anyone", "a guess", "ExecuteThread")
    assert strict.authenticate("anyone", None, "ExecuteThread") == (
        "this manager requires a login and 'anyone' gave no password: give --user NAME, with its password in "
        "GRIDCRAWL_PASSWORD or at the prompt")


def test_wrong_password_and_unknown_user_are_refused_alike(store):
    store.add("alice", PASSWORD, "Users")
    wrong = store.authenticate("alice", PASSWORD + "!", "ManageOwnApp")
    unknown = store.authenticate("mallory", PASSWORD, "ManageOwnApp")
    missing, nobody = store.authenticate("alice", None, "ManageOwnApp"), store.authenticate("mallory", "", "ManageOwnApp")
    assert wrong and unknown and missing
    assert wrong.replace("alice", "X") == unknown.replace("mallory", "X")
    assert missing.replace("alice", "X") == nobody.replace("mallory", "X") and "gave no password" in missing
    assert store.authenticate("alice", PASSWORD, "ManageOwnApp") is None


def test_failed_logins_past_the_budget_are_refused_without_a_password_check(store, monkeypatch):
    """Wrong passwords from fresh connections each cost the manager's loop one scrypt run (about
    45 ms): a flood froze it. Once failed checks took LOGIN_SECONDS in LOGIN_WINDOW seconds, a
    login the cache cannot answer is refused at once, as "for now" (the core's refusal says
    retry); a user who logged in before is answered from the cache all along; the budget comes
    back. The budget is seconds, not checks: on a loaded machine one check took 0.6 s, and ten
    a window took the whole loop."""
    import types
    from gridcrawl import auth
    clock = [1000.0]
    monkeypatch.setattr(auth, "time", types.SimpleNamespace(monotonic=lambda: clock[0]))
    runs = []
    real = auth.verify_password
    check_seconds = [0.1]

    def timed_check(*args):
        runs.append(1)
        clock[0] += check_seconds[0]  # what the check took
        return real(*args)

    monkeypatch.setattr(auth, "verify_password", timed_check)
    store.add("alice", PASSWORD, "Users")
    store.add("bob", PASSWORD, "Users")
    assert store.authenticate("alice", PASSWORD, "ManageOwnApp") is None  # cached from now on
    budget = round(auth.LOGIN_SECONDS / 0.1)
    for i in range(budget):
        assert not store.throttled()
        assert "authentication failed" in store.authenticate("mallory", f"guess-{i}", "ManageOwnApp")
    assert len(runs) == 1 + budget and store.throttled()
    assert store.authenticate("mallory", "one more", "ManageOwnApp") == auth.LOGINS_BUSY
    assert store.authenticate("bob", PASSWORD, "ManageOwnApp") == auth.LOGINS_BUSY  # not cached: waits its turn
    assert store.authenticate("alice", PASSWORD, "ManageOwnApp") is None            # cached: answered
    assert len(runs) == 1 + budget                                                  # no scrypt past the budget
    core = ManagerCore(Settings(), authenticate=store.authenticate)
    (refused,) = core.handle(b"x", p.Register(name="x", host="h", user="bob", threads=1, password=PASSWORD), 0.0)
    assert refused.message == p.Refuse(auth.LOGINS_BUSY, retry=True)
    clock[0] += auth.LOGIN_WINDOW + 0.1
    assert not store.throttled() and store.authenticate("bob", PASSWORD, "ManageOwnApp") is None
    # a slow machine: failed checks that each take longer than the budget spend it at the
    # fewest failures that are always checked
    check_seconds[0] = 0.6
    for i in range(auth.LOGIN_MIN_FAILURES):
        assert "authentication failed" in store.authenticate("mallory", f"slow guess {i}", "ManageOwnApp")
    assert store.authenticate("mallory", "next guess", "ManageOwnApp") == auth.LOGINS_BUSY


def test_permissions_follow_the_group(store):
    store.add("alice", PASSWORD, "Users")
    store.add("root", PASSWORD, "Administrators")
    assert "ExecuteThread" in store.authenticate("alice", PASSWORD, "ExecuteThread")
    assert "ManageAllApps" in store.authenticate("alice", PASSWORD, "ManageAllApps")
    for permission in GROUP_PERMISSIONS["Administrators"]:
        assert store.authenticate("root", PASSWORD, permission) is None


def test_a_new_password_replaces_the_old_one_even_when_cached(store):
    store.add("alice", PASSWORD, "Users")
    store.add("bob", PASSWORD, "Users")
    assert store.authenticate("alice", PASSWORD, "ManageOwnApp") is None  # now cached
    store.set_password("alice", "another password")
    assert store.authenticate("alice", PASSWORD, "ManageOwnApp") is not None
    assert store.authenticate("alice", "another password", "ManageOwnApp") is None
    assert store.remove("alice") and not store.remove("alice")
    assert store.authenticate("alice", "another password", "ManageOwnApp") is not None
    assert store.remove("bob")
    assert store.authenticate("alice", None, "ManageOwnApp") is None  # no user left: an open grid again


def _count_selects(engine) -> list:
    """The SELECT statements ``engine`` runs from now on (SQLAlchemy's own statement event)."""
    seen: list = []
    sa.event.listen(engine, "before_cursor_execute",
                    lambda conn, cursor, statement, *rest: seen.append(statement)
                    if statement.lstrip().upper().startswith("SELECT") else None)
    return seen


def test_a_burst_of_logins_reads_the_users_once(store, monkeypatch):
    from gridcrawl import auth
    monkeypatch.setattr(auth, "READ_TTL", 3600.0)  # a burst is within one read's time however slow the machine
    # an open grid: 1,000 executors registering after a manager restart ask whether any user exists
    selects = _count_selects(store.engine)
    assert all(store.authenticate("anyone", None, "ExecuteThread") is None for _ in range(1000))
    assert len(selects) == 1
    # a closed grid: one read of the user's rows for the burst (scrypt ran once, for the first)
    store.add("exec", PASSWORD, "Executors")
    selects.clear()
    assert all(store.authenticate("exec", PASSWORD, "ExecuteThread") is None for _ in range(50))
    assert store.authenticate("exec", PASSWORD + "!", "ExecuteThread") is not None  # still checked
    assert "authentication failed" in store.authenticate("nobody", PASSWORD, "ExecuteThread")
    assert len(selects) == 3  # whether a user exists, exec's rows, nobody's (none)


def test_another_process_s_user_changes_count_within_the_read_ttl(tmp_path, monkeypatch):
    from gridcrawl import auth
    engine = open_database(f"sqlite:///{tmp_path / 'manager.db'}")
    manager, command = UserStore(engine), UserStore(engine)  # the manager's; `gridcrawl users`'s
    monkeypatch.setattr(auth, "READ_TTL", 3600.0)
    assert manager.authenticate("anyone", None, "ExecuteThread") is None  # open grid, remembered
    command.add("alice", PASSWORD, "Users")
    assert manager.authenticate("anyone", None, "ExecuteThread") is None  # not read again yet
    monkeypatch.setattr(auth, "READ_TTL", 0.0)  # the time is up
    assert "gave no password" in manager.authenticate("anyone", None, "ExecuteThread")
    assert manager.authenticate("alice", PASSWORD, "ManageOwnApp") is None
    monkeypatch.setattr(auth, "READ_TTL", 3600.0)
    command.set_password("alice", "another password")
    assert manager.authenticate("alice", PASSWORD, "ManageOwnApp") is None  # the rows read before
    monkeypatch.setattr(auth, "READ_TTL", 0.0)
    assert manager.authenticate("alice", PASSWORD, "ManageOwnApp") is not None
    assert manager.authenticate("alice", "another password", "ManageOwnApp") is None


def test_login_password_comes_from_the_environment(monkeypatch):
    monkeypatch.setenv("GRIDCRAWL_PASSWORD", "from-env")
    assert login_password("alice") == "from-env"
    monkeypatch.delenv("GRIDCRAWL_PASSWORD")
    assert login_password(None) is None


# ----------------------------------------------------------------------------------------------
# The core enforces permissions (pure: authenticate is a table)

GRANTS = {("exec", "pw"): {"ExecuteThread"}, ("alice", "pw"): {"ManageOwnApp"}, ("bob", "pw"): {"ManageOwnApp"},
          ("root", "pw"): {"ExecuteThread", "ManageOwnApp", "ManageAllApps", "ManageUsers"}}


def table_auth(user, password, permission, quiet=False):
    granted = GRANTS.get((user, password))
    if granted is None:
        return "authentication failed"
    return None if permission in granted else f"no {permission}"


def make_core() -> ManagerCore:
    ids = (f"id{i:04d}" for i in itertools.count(1))  # (4 characters or more, as an id prefix must be)
    return ManagerCore(Settings(prefetch=0), new_id=lambda: next(ids), authenticate=table_auth)


def only(actions, kind):
    found = [item for a in actions if isinstance(a, Send) and isinstance(a.message, kind)
             for item in (getattr(a.message, kind.BATCH) if kind.BATCH else [a.message])]
    assert len(found) == 1, actions
    return found[0]


def test_wrong_password_cannot_register_an_executor():
    core = make_core()
    actions = core.handle(b"e", p.Register("ex", "h", "exec", 2, password="wrong"), 0.0)
    assert "authentication failed" in only(actions, p.Refuse).reason
    assert not core.executors and not [a for a in actions if not isinstance(a, Send)]


def test_a_user_without_execute_thread_cannot_register_an_executor():
    core = make_core()
    refused = core.handle(b"e", p.Register("ex", "h", "alice", 2, password="pw"), 0.0)
    assert "ExecuteThread" in only(refused, p.Refuse).reason and not core.executors
    welcomed = core.handle(b"e", p.Register("ex", "h", "exec", 2, password="pw"), 0.0)
    assert only(welcomed, p.Welcome).executor_id in core.executors


def test_an_executor_id_is_reclaimed_only_by_its_own_user():
    core = make_core()
    first = only(core.handle(b"e1", p.Register("ex", "h", "exec", 2, password="pw"), 0.0), p.Welcome).executor_id
    stolen = only(core.handle(b"e2", p.Register("ex", "h", "root", 2, password="pw", executor_id=first), 1.0),
                  p.Welcome).executor_id
    assert stolen != first and core.executors[first].peer == b"e1"


def test_a_connected_executors_id_is_not_taken_by_another_connection_of_its_user():
    """With a shared executor account, a hostile desktop registered every 2 s with a connected
    executor's id: the id flapped, the honest executor's results were fenced and the intruder's
    dropped attempts were recorded under its id. While the executor is alive on its connection
    (present, heard within the liveness), its id is refused to another one (for now: the owner
    reconnecting after a network cut gets it once the old connection is gone or silent), and the
    same name on another connection gets an id of its own."""
    present = {b"e1": True}
    ids = (f"id{i:04d}" for i in itertools.count(1))  # (4 characters or more, as an id prefix must be)
    core = ManagerCore(Settings(prefetch=0), new_id=lambda: next(ids), authenticate=table_auth,
                       peer_present=lambda peer: present.get(peer, False))
    first = only(core.handle(b"e1", p.Register("ex", "h", "exec", 2, password="pw"), 0.0), p.Welcome).executor_id
    refused = only(core.handle(b"e2", p.Register("ex", "h", "exec", 2, password="pw", executor_id=first), 1.0),
                   p.Refuse)
    assert refused.retry and refused.reason.startswith(f"executor {first[:8]} (ex) is connected on another connection")
    assert core.executors[first].peer == b"e1" and core.peers.get(b"e2") is None
    same_name = only(core.handle(b"e3", p.Register("ex", "h", "exec", 2, password="pw"), 1.5), p.Welcome).executor_id
    assert same_name != first and core.executors[first].peer == b"e1"
    present[b"e1"] = False  # the owner's old connection is gone (it reconnects after a cut)
    again = only(core.handle(b"e4", p.Register("ex", "h", "exec", 2, password="pw", executor_id=first), 2.0),
                 p.Welcome).executor_id
    assert again == first and core.executors[first].peer == b"e4"


def test_a_control_without_a_login_does_not_tell_which_application_ids_exist():
    """``pause`` of an unknown id answered "no application ..." before checking the login, and
    a login refusal for an id that exists: anyone could list a manager's applications by prefix."""
    core = make_core()
    app = only(core.handle(b"alice", p.OpenApplication("a", "alice", password="pw"), 0.0),
               p.ApplicationOpened).application_id
    known = only(core.handle(b"x", p.Control(app[:6], "pause", "", None), 0.1), p.Refuse).reason
    unknown = only(core.handle(b"x", p.Control("ffff00", "pause", "", None), 0.1), p.Refuse).reason
    assert known == unknown == "authentication failed"
    assert "no application" in only(core.handle(b"alice", p.Control("ffff00", "pause", "alice", "pw"), 0.2),
                                    p.Refuse).reason  # told once logged in
    # logged in, a user who manages only their own applications gets for another's id the
    # answer of an id that does not exist (it was "no ManageAllApps": ids could be listed)
    other = only(core.handle(b"bob", p.Control(app[:6], "pause", "bob", "pw"), 0.3), p.Refuse).reason
    assert other == f"no application {app[:6]!r} at this manager"
    assert only(core.handle(b"bob", p.Control("ffff00", "pause", "bob", "pw"), 0.3), p.Refuse).reason == \
        "no application 'ffff00' at this manager"
    assert not core.applications[app].paused
    # a prefix too short to look up says so (it said only "no application 'c28'" of alice's own)
    assert only(core.handle(b"alice", p.Control(app[:3], "pause", "alice", "pw"), 0.4), p.Refuse).reason == \
        f"no application {app[:3]!r} at this manager (give 4 or more characters of its id)"
    assert only(core.handle(b"alice", p.Control(app[:4], "pause", "alice", "pw"), 0.5), p.Controlled).state == "paused"


def test_a_control_with_a_wrong_password_costs_one_password_check_and_one_log_line(store, monkeypatch, caplog):
    """A ``control`` with a wrong password for another user's application was checked twice
    (ManageAllApps, then ManageOwnApp): two scrypt runs and two "login refused" lines."""
    import logging
    from gridcrawl import auth
    runs = []
    real = auth.verify_password
    monkeypatch.setattr(auth, "verify_password", lambda *args: runs.append(1) or real(*args))
    store.add("alice", PASSWORD, "Users")
    store.add("bob", PASSWORD, "Users")
    store.add("root", PASSWORD, "Administrators")
    core = ManagerCore(Settings(), authenticate=store.authenticate)
    app = only(core.handle(b"alice", p.OpenApplication("a", "alice", password=PASSWORD), 0.0),
               p.ApplicationOpened).application_id
    runs.clear()
    with caplog.at_level(logging.WARNING, logger="gridcrawl.auth"):
        refused = only(core.handle(b"bob", p.Control(app, "pause", "bob", "wrong password"), 0.1), p.Refuse)
    assert "authentication failed" in refused.reason and not refused.retry
    assert len(runs) == 1 and [r.getMessage() for r in caplog.records] == \
        ["login refused for user 'bob': unknown user or wrong password"]
    # the right passwords: one check each; bob (ManageOwnApp only) is told of no such application
    runs.clear()
    assert only(core.handle(b"bob", p.Control(app, "pause", "bob", PASSWORD), 0.2), p.Refuse).reason == \
        f"no application {app!r} at this manager"
    paused = core.handle(b"root", p.Control(app, "pause", "root", PASSWORD), 0.3)
    assert [a.message.state for a in paused if isinstance(a, Send) and isinstance(a.message, p.Controlled)
            and a.peer == b"root"] == ["paused"]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="gridcrawl.auth"):
        assert only(core.handle(b"alice", p.Control(app, "resume", "alice", PASSWORD), 0.4),
                    p.Controlled).state == "running"
    # a user of the Users group resuming her own crawl: no "refused: no ManageAllApps permission" WARNING
    assert [r.getMessage() for r in caplog.records if r.name == "gridcrawl.auth"] == []
    assert len(runs) == 2  # bob's and root's (alice's is the cache's, from her open)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="gridcrawl.manager"):
        core.handle(b"root", p.Control(app, "cancel", "root", PASSWORD), 0.5)
    # one line (there were two: "application … cancelled", then "… cancelled by operator root")
    assert [r.getMessage() for r in caplog.records if "cancelled" in r.getMessage()] == \
        [f"application {app[:8]} cancelled by operator root"]


def test_a_client_cannot_read_ack_submit_or_close_another_users_application():
    core = make_core()
    core.handle(b"e", p.Register("ex", "h", "exec", 1, password="pw"), 0.0)
    app = only(core.handle(b"alice", p.OpenApplication("a", "alice", password="pw"), 0.0),
               p.ApplicationOpened).application_id
    assign = only(core.handle(b"alice", p.Submit(app, [p.ThreadSpec(1, "http://a.test/")]), 0.0), p.Assign)
    core.handle(b"e", p.Result(assign.attempt_id, p.PageResult("http://a.test/", status=200, title="alice's")), 0.2)
    core.handle(b"alice", p.Bye(), 0.3)  # alice's client goes away; her result waits at the manager

    # bob reattaching to alice's application: refused, and no result is delivered to him
    actions = core.handle(b"bob", p.OpenApplication("b", "bob", application_id=app, password="pw"), 1.0)
    assert only(actions, p.Refuse).reason == (
        f"application {app} belongs to another user: a crawl database goes on with the user who started its crawl, "
        "or an administrator (ManageAllApps); give this crawl a database of its own (--db)")
    assert not [a for a in actions if isinstance(a, Send) and isinstance(a.message, p.ThreadDone)]
    # bob with his own application cannot act on alice's by naming its id
    own = only(core.handle(b"bob", p.OpenApplication("b", "bob", password="pw"), 1.0),
               p.ApplicationOpened).application_id
    assert own != app
    for message in (p.Ack(app, [1]), p.Submit(app, [p.ThreadSpec(9, "http://b.test/")]), p.CloseApplication(app)):
        assert "not open on this connection" in only(core.handle(b"bob", message, 1.1), p.Refuse).reason
    assert core.applications[app].threads[1].state.name == "FINISHED"
    assert 9 not in core.applications[app].threads
    # a wrong password cannot open anything
    assert "authentication failed" in only(core.handle(b"x", p.OpenApplication("c", "bob", password="no"), 1.2),
                                           p.Refuse).reason
    # alice herself gets her result back; an administrator (ManageAllApps) may reattach too
    done = core.handle(b"alice2", p.OpenApplication("a", "alice", application_id=app, password="pw"), 2.0)
    assert only(done, p.ThreadDone).page.title == "alice's"
    assert only(core.handle(b"root", p.OpenApplication("a", "root", application_id=app, password="pw"), 3.0),
                p.ApplicationOpened).resumed


def test_only_an_operator_puts_threads_above_the_default_priority(caplog):
    """The manager honoured any priority a peer sent: one user's client (speaking the protocol
    itself) could put a crawl before every other user's. On a manager with users, a user without
    ManageAllApps now gets at most the default priority (logged once per application); lower
    ones stand, and an operator's stand whatever they are."""
    core = make_core()
    alice = only(core.handle(b"alice", p.OpenApplication("a", "alice", password="pw"), 0.0),
                 p.ApplicationOpened).application_id
    root = only(core.handle(b"root", p.OpenApplication("r", "root", password="pw"), 0.0),
                p.ApplicationOpened).application_id
    with caplog.at_level("WARNING", logger="gridcrawl.manager"):
        core.handle(b"alice", p.Submit(alice, [p.ThreadSpec(i, f"http://a.test/{i}", priority=prio)
                                               for i, prio in enumerate([1000, 9, 3])]), 1.0)
    core.handle(b"root", p.Submit(root, [p.ThreadSpec(1, "http://r.test/", priority=1000)]), 1.0)
    threads = core.applications[alice].threads
    assert [threads[i].priority for i in range(3)] == [p.DEFAULT_PRIORITY, p.DEFAULT_PRIORITY, 3]
    assert core.applications[root].threads[1].priority == 1000
    warnings = [r.getMessage() for r in caplog.records if "asked for priority" in r.getMessage()]
    assert len(warnings) == 1 and "user alice asked for priority 1000" in warnings[0]


def test_the_peers_of_a_user_no_longer_allowed_are_cut(store):
    """A login was checked only at hello: a user removed while connected kept its executors and
    crawls running. ``revoke`` now cancels the applications of a user without ManageOwnApp and
    forgets the executors of one without ExecuteThread, each told why by a final refusal; the
    allowed users' peers are untouched, and a check that raises changes nothing."""
    core = make_core()
    ex = only(core.handle(b"e", p.Register("ex", "h", "exec", 2, password="pw"), 0.0), p.Welcome).executor_id
    alice = only(core.handle(b"alice", p.OpenApplication("a", "alice", password="pw"), 0.0),
                 p.ApplicationOpened).application_id
    bob = only(core.handle(b"bob", p.OpenApplication("b", "bob", password="pw"), 0.0),
               p.ApplicationOpened).application_id
    assign = only(core.handle(b"alice", p.Submit(alice, [p.ThreadSpec(1, "http://a.test/")]), 0.1), p.Assign)
    core.handle(b"bob", p.Bye(), 0.2)  # bob's crawl is detached: cancelled all the same

    def broken(user, permission):
        raise sa.exc.OperationalError("SELECT", {}, Exception("database is locked"))
    with pytest.raises(sa.exc.OperationalError):
        core.revoke(1.0, broken)
    assert core.applications[alice].state.name != "STOPPED" and ex in core.connected
    assert core.revoke(1.0, lambda user, permission: True) == []

    gone = {"exec", "alice"}
    actions = core.revoke(1.0, lambda user, permission: user not in gone)
    refusals = {a.peer: a.message for a in actions if isinstance(a, Send) and isinstance(a.message, p.Refuse)}
    assert set(refusals) == {b"e", b"alice"} and all(m.final for m in refusals.values())
    assert "user 'exec' may no longer run grid threads" in refusals[b"e"].reason
    assert "log in as a user of the Executors group" in refusals[b"e"].reason
    assert f"application {alice[:8]} is cancelled" in refusals[b"alice"].reason
    assert ex not in core.connected and b"e" not in core.peers and b"alice" not in core.peers
    assert core.applications[alice].state.name == "STOPPED"
    assert core.applications[alice].threads == {}  # its thread aborted, the executor told
    assert [a.peer for a in actions if isinstance(a, Send) and isinstance(a.message, p.Cancel)
            and a.message.attempt_id == assign.attempt_id] == [b"e"]
    assert core.applications[bob].state.name != "STOPPED"  # bob is still a user

    store.add("dave", PASSWORD, "Executors")
    store.add("carol", PASSWORD, "Users")  # the store's answer: the user's group, read again
    assert store.allows("carol", "ManageOwnApp") and not store.allows("carol", "ExecuteThread")
    store.remove("carol")
    assert not store.allows("carol", "ManageOwnApp") and not store.allows("nobody", "ManageOwnApp")


def test_an_open_grid_allows_every_connected_peer(store, tmp_path):
    assert store.allows("anyone", "ExecuteThread")  # no user: an open grid cuts no one
    closed = UserStore(open_database(f"sqlite:///{tmp_path / 'closed.db'}"), require_login=True)
    assert not closed.allows("anyone", "ExecuteThread")


# ----------------------------------------------------------------------------------------------
# The real programs

def _environment(env: dict | None) -> dict:
    return {**{k: v for k, v in os.environ.items() if k != "GRIDCRAWL_PASSWORD"}, **(env or {})}


def manager_cli(*args: str, env: dict | None = None, input: str | None = None, cwd=None) -> subprocess.CompletedProcess:
    """The manager program run with no terminal (a session of its own: no /dev/tty to ask on)."""
    return subprocess.run([sys.executable, "-m", "gridcrawl.manager", *args], capture_output=True, text=True,
                          timeout=60, env=_environment(env), input=input or "", start_new_session=True, cwd=cwd)


def test_users_passwd_of_an_unknown_user_says_so_before_asking_for_a_password(tmp_path):
    """``users passwd nobody`` asked for the new password twice (or, with no terminal, said "no
    password for nobody: set GRIDCRAWL_PASSWORD") and only then that there was no such user."""
    db = f"sqlite:///{tmp_path / 'm.db'}"
    UserStore(open_database(db)).add("alice", PASSWORD, "Users")
    out = manager_cli("users", "passwd", "nobody", "--db", db)
    assert out.returncode == 2 and out.stderr.strip() == \
        f"error: no user 'nobody' in {db} (gridcrawl-manager users list --db ... lists them)", out.stderr
    changed = manager_cli("users", "passwd", "alice", "--db", db, env={"GRIDCRAWL_PASSWORD": "another password"})
    assert changed.returncode == 0 and changed.stdout == "password of alice changed\n", changed.stderr


def test_users_remove_of_an_unknown_user_names_the_database_it_looked_in(tmp_path):
    """``users remove alice`` without --db looks in ./gridcrawl-manager.db, not the manager's
    database: it said "no user 'alice'", leaving the operator to wonder where she had gone.
    It names the database, as ``users passwd`` does."""
    db = f"sqlite:///{tmp_path / 'm.db'}"
    UserStore(open_database(db)).add("alice", PASSWORD, "Users")
    UserStore(open_database(f"sqlite:///{tmp_path / 'gridcrawl-manager.db'}")).add("bob", PASSWORD, "Users")
    out = manager_cli("users", "remove", "alice", cwd=tmp_path)
    assert out.returncode == 2 and out.stderr.strip() == (
        "error: no user 'alice' in sqlite:///gridcrawl-manager.db (the default database: give the manager's --db, "
        "or --config with its [manager] db) (gridcrawl-manager users list --db ... lists them)"), out.stderr
    removed = manager_cli("users", "remove", "alice", "--db", db)
    assert removed.returncode == 0 and removed.stdout == "user alice removed\n", removed.stderr


def test_users_add_takes_the_password_from_the_environment_or_a_prompt_never_an_argument(tmp_path):
    db = f"sqlite:///{tmp_path / 'm.db'}"
    # listing, changing or removing the users of a database that is not there creates none
    for command in (["list"], ["remove", "alice"], ["passwd", "alice"]):
        out = manager_cli("users", *command, "--db", db, env={"GRIDCRAWL_PASSWORD": PASSWORD})
        assert out.returncode == 2 and out.stderr.strip() == f"error: no database file {tmp_path / 'm.db'} (from {db})"
    assert not (tmp_path / "m.db").exists()
    out = manager_cli("users", "add", "alice", "--group", "Users", "--db", db, env={"GRIDCRAWL_PASSWORD": PASSWORD})
    assert out.returncode == 0, out.stderr
    assert out.stdout == f"user alice added to group Users in {db}\n"  # where it went
    rc, shown = on_a_terminal([sys.executable, "-m", "gridcrawl.manager", "users", "add", "bob", "--group",
                               "Executors", "--db", db], answers=[PASSWORD, PASSWORD], env=_environment(None))
    assert rc == 0, shown
    assert "password for bob:" in shown and "again:" in shown and PASSWORD not in shown  # asked twice, no echo
    rc, shown = on_a_terminal([sys.executable, "-m", "gridcrawl.manager", "users", "add", "dan", "--group", "Users",
                               "--db", db], answers=[PASSWORD, PASSWORD + "!"], env=_environment(None))
    assert rc == 2 and "the two passwords differ" in shown, shown
    # no terminal to ask on (a service, a pipe): one line, exit 2, nothing read from stdin with echo
    out = manager_cli("users", "add", "erin", "--group", "Users", "--db", db, input=f"{PASSWORD}\n{PASSWORD}\n")
    assert out.returncode == 2 and out.stderr.strip() == \
        "error: no password for erin: set GRIDCRAWL_PASSWORD or run on a terminal", out.stderr
    listed = manager_cli("users", "list", "--db", db).stdout
    assert "alice\tUsers\tManageOwnApp" in listed and "bob\tExecutors\tExecuteThread" in listed
    out = manager_cli("users", "add", "carl", "--group", "Users", "--password", PASSWORD, "--db", db)
    assert out.returncode != 0 and "No such option" in out.stderr
    with sa.create_engine(db).connect() as conn:
        hashes = conn.execute(sa.text("SELECT password_hash || salt FROM usr")).scalars().all()
    assert len(hashes) == 2 and not any(PASSWORD in h for h in hashes)
    # --db before "users" (where gridcrawl-manager --help lists it) is the database used: it
    # went to ./gridcrawl-manager.db, leaving the manager on --db without users, open to anyone
    out = manager_cli("--db", db, "users", "add", "fay", "--group", "Users", env={"GRIDCRAWL_PASSWORD": PASSWORD},
                      cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert not (tmp_path / "gridcrawl-manager.db").exists()
    assert "fay\tUsers" in manager_cli("--db", db, "users", "list", cwd=tmp_path).stdout
    # no --db anywhere: the default database, named as such (the manager's may be another)
    out = manager_cli("users", "add", "gus", "--group", "Users", env={"GRIDCRAWL_PASSWORD": PASSWORD}, cwd=tmp_path)
    assert out.returncode == 0 and out.stdout == (
        "user gus added to group Users in sqlite:///gridcrawl-manager.db (the default database: give the "
        "manager's --db, or --config with its [manager] db)\n"), out.stdout


@pytest.mark.parametrize("module, extra", [("gridcrawl.executor", []),
                                           ("gridcrawl.client", ["--db", "sqlite:///{tmp}/c.db", "http://127.0.0.1:9/"])])
def test_a_login_with_no_password_and_no_terminal_is_one_line(tmp_path, module, extra):
    """Started by a service or a script (no terminal) with --user and no $GRIDCRAWL_PASSWORD:
    exit 2 with one line, no getpass warning, nothing read from standard input with echo."""
    out = subprocess.run([sys.executable, "-m", module, "--manager", "tcp://127.0.0.1:9", "--user", "worker",
                          *[a.format(tmp=tmp_path) for a in extra]], capture_output=True, text=True, timeout=60,
                         env=_environment(None), input="typed-in-clear\n", start_new_session=True)
    assert out.returncode == 2 and out.stderr.strip() == \
        "error: no password for worker: set GRIDCRAWL_PASSWORD or run on a terminal", out.stderr


@pytest.mark.e2e
def test_logins_at_a_running_manager(tmp_path, site_server):
    site = generate_site(20, links_per_page=3, seed=9)
    server = site_server(site)
    grid = Grid(tmp_path)
    db = grid.manager_db
    for name, group in (("crawler", "Users"), ("worker", "Executors")):
        out = manager_cli("users", "add", name, "--group", group, "--db", db, env={"GRIDCRAWL_PASSWORD": PASSWORD})
        assert out.returncode == 0, out.stderr
    try:
        grid.start_manager()
        wrong = grid.start_executor("wrong", "--user", "worker", env={"GRIDCRAWL_PASSWORD": "not it"})
        anonymous = grid.start_executor("anonymous")
        no_execute = grid.start_executor("noexec", "--user", "crawler", env={"GRIDCRAWL_PASSWORD": PASSWORD})
        for proc in (wrong, anonymous, no_execute):
            assert proc.wait(timeout=30) == 2
        assert "authentication failed" in grid.log("wrong.log")
        assert "this manager requires a login and" in grid.log("anonymous.log")  # (no --user: the login name,
        assert "gave no password: give --user NAME" in grid.log("anonymous.log")  # no password)
        assert "ExecuteThread" in grid.log("noexec.log")
        grid.start_executor("good", "--user", "worker", "--threads", "3", env={"GRIDCRAWL_PASSWORD": PASSWORD})
        anonymous_client = grid.start_client(server.url("/"))
        assert anonymous_client.wait(timeout=30) == 2
        assert "gave no password: give --user NAME" in grid.log("client.log")
        client = grid._spawn("gridcrawl.client", ["--manager", grid.endpoint, "--db", grid.crawl_db, "--no-progress",
                                                  "--heartbeat-interval", "0.25", "--user", "crawler",
                                                  server.url("/")], "client2.log", {"GRIDCRAWL_PASSWORD": PASSWORD})
        assert client.wait(timeout=90) == 0, grid.log("client2.log")
    finally:
        grid.stop()
    docs = {row[0] for row in grid.query("crawl", "SELECT url FROM document")}
    assert docs == {canonical_url(server.url(path)) for path in reachable(site)}
    assert grid.query("manager", "SELECT DISTINCT usr_name FROM executor") == [("worker",)]
    assert grid.query("manager", "SELECT usr_name FROM application") == [("crawler",)]


@pytest.mark.e2e
def test_a_user_removed_while_connected_is_cut_off(tmp_path, site_server):
    """``gridcrawl-manager users remove`` while the user's executor and crawl are connected:
    both used to go on until they dropped; now each stops within seconds, exit status 2, with
    one line saying why (no traceback), and the manager's log names what it cut."""
    from grid import wait_for
    server = site_server(generate_site(60, links_per_page=3, seed=4))
    grid = Grid(tmp_path)
    users = UserStore(open_database(grid.manager_db))  # as `gridcrawl-manager users` does, from outside
    for name, group in (("crawler", "Users"), ("worker", "Executors"), ("admin", "Administrators")):
        users.add(name, PASSWORD, group)
    login = {"GRIDCRAWL_PASSWORD": PASSWORD}
    try:
        grid.start_manager("--download-delay", "0.5")  # a crawl of 30 s: connected when removed
        executor = grid.start_executor("worker", "--user", "worker", env=login)
        client = grid.start_client(server.url("/"), "--user", "crawler", env=login)
        wait_for(lambda: "registered as executor" in grid.log("worker.log")
                 and "application " in grid.log("client.log"), 30, message="both connected")
        assert users.remove("worker") and users.remove("crawler")
        assert executor.wait(timeout=20) == 2 and client.wait(timeout=20) == 2
    finally:
        grid.stop()
    assert "may no longer run grid threads on this manager" in grid.log("worker.log")
    client_log = grid.log("client.log")
    assert "user 'crawler' may no longer crawl on this manager" in client_log and "is cancelled" in client_log
    assert "Traceback" not in grid.log("worker.log") + client_log
    manager_log = grid.log("manager.log")
    assert "user crawler was removed or lost the ManageOwnApp permission" in manager_log
    assert "user worker was removed or lost the ExecuteThread permission" in manager_log
    assert grid.query("manager", "SELECT state FROM application") == [(2,)]  # Stopped


def test_a_manager_that_requires_logins_and_has_no_user_says_so_at_start(tmp_path, caplog):
    """``--require-login`` on a database without users refused every executor and client with
    "unknown user or wrong password", and nothing in the manager's log said that no user
    existed: it now warns at start, naming the database and the command that adds one."""
    import threading
    from gridcrawl.manager.server import ManagerServer
    db = f"sqlite:///{tmp_path / 'manager.db'}"
    done = threading.Event()
    done.set()  # (serve returns at once, closing what it opened)
    with caplog.at_level("WARNING", logger="gridcrawl.manager"):
        ManagerServer(Settings(), "tcp://127.0.0.1:0", open_database(db), require_login=True).serve(done)
        said = [r.getMessage() for r in caplog.records if "--require-login" in r.getMessage()]
        assert said == [f"--require-login and no user in {db} yet: every executor and client is refused until one "
                        f"is added (gridcrawl-manager users add NAME --group Executors --db {db})"]
        UserStore(open_database(db)).add("worker", PASSWORD, "Executors")
        caplog.clear()
        ManagerServer(Settings(), "tcp://127.0.0.1:0", open_database(db), require_login=True).serve(done)
        assert not [r for r in caplog.records if "--require-login" in r.getMessage()]


@pytest.mark.e2e
def test_an_administrator_reattached_to_a_removed_users_crawl_is_not_cut(tmp_path, site_server):
    """An administrator reattached (ManageAllApps) to the crawl of a user who is then removed:
    the manager cancelled the crawl and cut the administrator's client off with "user 'crawler'
    may no longer crawl", exit status 2. The crawl is the administrator's now: it goes on to its
    end; removing the administrator then would cut that client (not cancel the crawl).

    One page of the site is held back until the manager has cut the removed user's other
    application (opened beside it, left without a client), so the crawl is surely running when
    the manager acts on the removal, and the test need not wait out a slow crawl."""
    import threading
    import zmq
    from grid import wait_for
    site = generate_site(30, links_per_page=3, seed=5)
    held_page, release = site.links["/"][0], threading.Event()
    held_body = site.pages[held_page]

    def held(handler) -> None:  # (never past the fetch's 30 s read timeout)
        release.wait(25)
        handler.respond(200, held_body)
    site.extra[held_page] = held
    server = site_server(site)
    grid = Grid(tmp_path)
    users = UserStore(open_database(grid.manager_db))
    for name, group in (("crawler", "Users"), ("worker", "Executors"), ("admin", "Administrators")):
        users.add(name, PASSWORD, group)
    login = {"GRIDCRAWL_PASSWORD": PASSWORD}
    context = zmq.Context()
    try:
        grid.start_manager()
        grid.start_executor("worker", "--user", "worker", env=login)
        owner = grid.start_client(server.url("/"), "--user", "crawler", env=login)
        wait_for(lambda: "application " in grid.log("client.log"), 30, message="the crawl under way")
        time.sleep(1.0)
        owner.terminate()  # the owner's client leaves: the application waits for a client
        assert owner.wait(timeout=30) != 2
        admin = grid._spawn("gridcrawl.client", ["--manager", grid.endpoint, "--db", grid.crawl_db, "--no-progress",
                                                 "--heartbeat-interval", "0.25", "--user", "admin", server.url("/")],
                            "admin.log", login)
        wait_for(lambda: "reattached by admin" in grid.log("manager.log"), 30, message="the administrator reattached")
        other = context.socket(zmq.DEALER)
        other.setsockopt(zmq.LINGER, 0)
        other.connect(grid.endpoint)
        other.send_multipart(p.encode(p.OpenApplication("other", "crawler", password=PASSWORD, client="other")))
        assert other.poll(30_000), "no answer to the removed user's other application"
        opened = p.decode(other.recv_multipart())
        assert isinstance(opened, p.ApplicationOpened), opened
        other.close()
        assert users.remove("crawler")
        wait_for(lambda: f"application {opened.application_id[:8]} cancelled" in grid.log("manager.log"), 30,
                 message="the removed user's other application cancelled")
        assert admin.poll() is None, grid.log("admin.log")  # (the crawl still runs, its page held back)
        release.set()
        assert admin.wait(timeout=90) == 0, grid.log("admin.log")
    finally:
        release.set()
        context.term()
        grid.stop()
    assert "may no longer crawl" not in grid.log("admin.log")
    removed = [line for line in grid.log("manager.log").splitlines() if "user crawler was removed" in line]
    assert len(removed) == 1 and f"application {opened.application_id[:8]} cancelled" in removed[0], removed
    docs = {row[0] for row in grid.query("crawl", "SELECT url FROM document")}
    assert docs == {canonical_url(server.url(path)) for path in reachable(site)}, len(docs)


def test_a_password_sent_without_curve_to_another_host_is_a_warning_on_the_peers_side(tmp_path):
    """Without CURVE a login's password crosses the network in clear: the manager's operator
    was warned (it listens off loopback without CURVE), the password's owner — the user starting
    a client, the desktop starting an executor — was not. Now a password for a manager on
    another host without CURVE keys is a WARNING naming the options; to this machine's manager,
    or with keys, nothing. (The crawl database cannot be opened, so nothing connects anywhere.)"""
    from test_keys import curve_args
    from gridcrawl.keys import new_key_pair
    for name in ("manager", "alice"):
        new_key_pair(name, tmp_path / "keys")
    holder = type("KeyHolder", (), {"keys": tmp_path / "keys"})
    unusable = f"sqlite:///{tmp_path / 'no-such-folder' / 'crawl.db'}"

    def client(manager: str, *more: str) -> str:
        proc = subprocess.run([sys.executable, "-m", "gridcrawl.client", "--manager", manager, "--user", "alice",
                               "--db", unusable, *more, "http://127.0.0.1:9/"], capture_output=True, text=True,
                              timeout=60, env={**os.environ, "GRIDCRAWL_PASSWORD": "a long password"})
        assert proc.returncode == 2 and "cannot open the SQLite database" in proc.stderr, proc.stderr
        return proc.stderr
    told = client("tcp://10.0.0.5:9000")
    assert ("WARNING: the password of alice goes to the manager at tcp://10.0.0.5:9000 unencrypted, for anyone on "
            "the network between to read: give --curve-secret and --curve-server-key (docs/security.md)") in told, told
    assert "WARNING" not in client("tcp://127.0.0.1:9000")
    assert "WARNING" not in client("tcp://10.0.0.5:9000", *curve_args(holder, "alice"))
