"""CURVE keys: key files (secret 0600, never overwritten, refused when readable by others), the
manager's allow-list, and real processes: a peer whose key is not allowed gets nothing, an
allowed executor and client crawl over an encrypted connection, and the executor is recorded
under its key's name rather than the user name it claimed."""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import sys
import time

import pytest
import zmq

from gridcrawl import protocol as p
from gridcrawl.keys import (AllowList, KeyFileError, client_keys, load_public, load_secret, new_key_pair,
                            server_keys)
from gridcrawl.transport import HandshakeWatch, apply_curve_client
from gridcrawl.urls import canonical_url
from grid import Grid
from sites import generate_site, reachable

posix_only = pytest.mark.skipif(os.name != "posix", reason="file modes are POSIX")


# ----------------------------------------------------------------------------------------------
# Key files

@posix_only
def test_new_key_pair_writes_a_0600_secret_and_a_public_key(tmp_path):
    public, secret = new_key_pair("alice", tmp_path / "keys")
    assert stat.S_IMODE(secret.stat().st_mode) == 0o600
    assert stat.S_IMODE(public.stat().st_mode) == 0o644
    assert stat.S_IMODE((tmp_path / "keys").stat().st_mode) == 0o700
    pub, sec = load_secret(secret)
    assert load_public(public) == pub and len(pub) == len(sec) == 40
    assert b"secret-key" not in public.read_bytes()
    assert sorted(f.name for f in (tmp_path / "keys").iterdir()) == ["alice.key", "alice.key_secret"]


@posix_only
def test_keys_new_command_makes_a_0600_secret(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "gridcrawl", "keys", "new", "manager", "--dir", str(tmp_path)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert stat.S_IMODE((tmp_path / "manager.key_secret").stat().st_mode) == 0o600
    again = subprocess.run([sys.executable, "-m", "gridcrawl", "keys", "new", "manager", "--dir", str(tmp_path)],
                           capture_output=True, text=True, timeout=60)
    assert again.returncode == 2 and "exists already" in again.stderr and "Traceback" not in again.stderr


def test_a_key_pair_is_never_overwritten(tmp_path):
    _, secret = new_key_pair("bob", tmp_path)
    before = secret.read_bytes()
    with pytest.raises(KeyFileError, match="exists already"):
        new_key_pair("bob", tmp_path)
    assert secret.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bob.key", "bob.key_secret"]  # no temporary folder left


def test_a_keys_folder_that_is_a_file_is_named_with_the_option(tmp_path):
    """``gridcrawl keys new NAME --dir FILE`` said "[Errno 17] File exists: 'FILE'"."""
    public, _ = new_key_pair("alice", tmp_path)
    with pytest.raises(KeyFileError, match=r"alice.key is a file, not a folder: give --dir a folder for the key files"):
        new_key_pair("bob", public)


@pytest.mark.parametrize("name", ["", "../evil", "a/b", ".hidden", "-x", "x" * 65, "a b"])
def test_key_names_are_checked(tmp_path, name):
    with pytest.raises(KeyFileError, match="invalid key name"):
        new_key_pair(name, tmp_path)


@posix_only
def test_a_secret_key_readable_by_others_is_refused(tmp_path):
    _, secret = new_key_pair("carol", tmp_path)
    os.chmod(secret, 0o644)
    with pytest.raises(KeyFileError, match="chmod 600"):
        load_secret(secret)


def test_malformed_key_files_are_refused(tmp_path):
    bad = tmp_path / "bad.key"
    bad.write_text('curve\n    public-key = "short"\n')
    with pytest.raises(KeyFileError):
        load_public(bad)
    with pytest.raises(KeyFileError, match="missing.key: no such file"):  # (was "Invalid certificate file")
        load_public(tmp_path / "missing.key")
    public, secret = new_key_pair("dave", tmp_path)
    with pytest.raises(KeyFileError):
        load_secret(public)  # a public key file has no secret key
    # the secret half of another pair pasted in: refused at once, not "no answer from the manager"
    _, other = new_key_pair("erin", tmp_path)
    mixed = tmp_path / "mixed.key_secret"
    lines = secret.read_text().splitlines()
    stolen = next(line for line in other.read_text().splitlines() if "secret-key" in line)
    mixed.write_text("\n".join(stolen if "secret-key" in line else line for line in lines) + "\n")
    mixed.chmod(0o600)
    with pytest.raises(KeyFileError, match="is not the one its secret key makes"):
        load_secret(mixed)


def test_the_wrong_half_of_a_pair_is_named_with_the_file_to_give(tmp_path):
    """A public key given as the secret one is named so (it used to be "chmod 600", then "no valid
    secret key"); a manager's secret key given as its public one is refused: on a desktop it lets
    whoever reads it pose as the manager."""
    public, secret = new_key_pair("carol", tmp_path)
    manager_public, manager_secret = new_key_pair("manager", tmp_path)
    with pytest.raises(KeyFileError) as refused:
        load_secret(public)  # (mode 0644)
    assert str(refused.value) == f"{public} is a public key file, with no secret key in it: give the pair's carol.key_secret"
    with pytest.raises(KeyFileError) as refused:
        client_keys(secret, manager_secret)
    assert str(refused.value) == (f"{manager_secret} holds the manager's secret key: give its public key file "
                                  "(manager.key) and keep the secret one on the manager alone")
    assert client_keys(secret, manager_public).server_public == load_public(manager_public)


def test_allow_list_names_keys_and_sees_changes(tmp_path, caplog):
    allow = tmp_path / "allow"
    allow.mkdir()
    keys = tmp_path / "keys"
    a_pub, _ = new_key_pair("alice", keys)
    b_pub, _ = new_key_pair("bob", keys)
    (allow / "alice.key").write_bytes(a_pub.read_bytes())
    (allow / "junk.key").write_text("not a key")
    allowed = AllowList(allow)
    with caplog.at_level("WARNING", logger="gridcrawl.keys"):
        for _ in range(5):  # five connections: the unreadable file is named once (it was twice each)
            assert allowed.name_of(load_public(a_pub)) == "alice"
    assert sum("junk.key" in r.getMessage() for r in caplog.records) == 1
    assert allowed.callback("*", load_public(a_pub)) and not allowed.callback("*", load_public(b_pub))
    (allow / "bob.key").write_bytes(b_pub.read_bytes())  # read again at the next check
    assert allowed.name_of(load_public(b_pub)) == "bob"
    (allow / "alice.key").unlink()
    assert not allowed.callback("*", load_public(a_pub))
    with pytest.raises(KeyFileError, match="does not exist"):
        AllowList(tmp_path / "nowhere")
    with pytest.raises(KeyFileError, match="is a file, not a directory"):
        AllowList(a_pub)
    with pytest.raises(KeyFileError, match="does not exist"):
        server_keys(keys / "alice.key_secret", tmp_path / "nowhere")
    # the manager's --curve-allow given a key file: said "does not exist" of a file that exists
    with pytest.raises(KeyFileError, match=r"alice.key is a file, not a directory \(--curve-allow names the directory"):
        server_keys(keys / "alice.key_secret", a_pub)


# ----------------------------------------------------------------------------------------------
# Real processes

@pytest.fixture
def curve_grid(tmp_path):
    """A Grid whose manager requires CURVE: keys for the manager and for ``ex1`` and ``client``
    (allowed) and ``stranger`` (not allowed)."""
    keys, allow = tmp_path / "keys", tmp_path / "allow"
    allow.mkdir()
    for name in ("manager", "ex1", "client", "stranger"):
        new_key_pair(name, keys)
    for name in ("ex1", "client"):
        (allow / f"{name}.key").write_bytes((keys / f"{name}.key").read_bytes())
    grid = Grid(tmp_path)
    grid.keys = keys
    grid.start_manager("--curve-secret", str(keys / "manager.key_secret"), "--curve-allow", str(allow))
    grid.wait_listening()  # a program's first tries meet its handshake, not a port still closed
    yield grid
    grid.stop()


def curve_args(grid: Grid, name: str) -> list[str]:
    return ["--curve-secret", str(grid.keys / f"{name}.key_secret"),
            "--curve-server-key", str(grid.keys / "manager.key")]


def _dealer(context: zmq.Context, grid: Grid, name: str | None) -> tuple[zmq.Socket, HandshakeWatch]:
    sock = context.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    if name is not None:
        apply_curve_client(sock, client_keys(grid.keys / f"{name}.key_secret", grid.keys / "manager.key"))
    watch = HandshakeWatch(sock, curve=name is not None)
    sock.connect(grid.endpoint)
    sock.send_multipart(p.encode(p.Register(name="raw", host="h", user="raw", threads=1)))
    return sock, watch


def _outcome(sock: zmq.Socket, watch: HandshakeWatch, timeout: float = 20.0):
    """The first message ``sock`` receives, or the handshake failure, whichever comes first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        failure = watch.failure()
        if failure is not None:
            return failure
        if sock.poll(100):
            return p.decode(sock.recv_multipart())
    return None


@pytest.mark.e2e
def test_unknown_curve_key_and_plain_connections_get_nothing(curve_grid):
    context = zmq.Context()
    try:
        known, known_watch = _dealer(context, curve_grid, "ex1")
        assert isinstance(_outcome(known, known_watch), p.Welcome)  # the control: an allowed key is welcomed
        stranger, watch = _dealer(context, curve_grid, "stranger")
        outcome = _outcome(stranger, watch)
        assert isinstance(outcome, str) and "refused this program's CURVE key" in outcome
        assert not stranger.poll(500), "a refused key received a message"
        plain, plain_watch = _dealer(context, curve_grid, None)
        outcome = _outcome(plain, plain_watch, timeout=2.0)
        # told why, or (the manager closed the connection before its greeting was read) counted
        assert (isinstance(outcome, str) and "requires CURVE" in outcome
                or outcome is None and "requires CURVE" in plain_watch.hint()), outcome
        assert not plain.poll(500)
    finally:
        context.destroy(linger=0)  # its sockets and their monitors, whatever failed
    log = curve_grid.log("manager.log")
    assert "refused a connection with unknown public key" in log
    assert log.count("registered:") == 1  # only the allowed raw peer registered


@pytest.mark.e2e
def test_an_executor_with_an_unknown_key_exits_with_a_clear_error(curve_grid):
    proc = curve_grid.start_executor("stranger", "--connect-timeout", "30", *curve_args(curve_grid, "stranger"))
    assert proc.wait(timeout=30) == 2
    log = curve_grid.log("stranger.log")
    assert "refused this program's CURVE key" in log and "Traceback" not in log


@pytest.mark.e2e
def test_an_executor_without_keys_is_told_the_manager_requires_curve(curve_grid):
    """A plain executor at a CURVE manager: whichever side of the handshake race it meets (the
    manager's greeting read: refused at once; or every connection closed first: a timeout whose
    message says why), it exits 2 with one line naming CURVE. (The three run side by side.)"""
    procs = [curve_grid.start_executor(f"plain{i}", "--connect-timeout", "2") for i in range(3)]
    for i, proc in enumerate(procs):
        assert proc.wait(timeout=30) == 2
        log = curve_grid.log(f"plain{i}.log")
        assert "requires CURVE encryption" in log and "Traceback" not in log, log[-2000:]


@pytest.mark.e2e
def test_a_timeout_after_handshakes_cut_short_says_so(tmp_path):
    """Something that accepts each connection and closes it at once (a proxy whose manager is
    down, a CURVE manager closing on a plain peer before its greeting is read): the executor
    keeps trying until its connect timeout (a cut is no refusal), then exits 2 with a message
    that counts the cut handshakes and names CURVE."""
    import socket
    import threading

    listener = socket.create_server(("127.0.0.1", 0))
    cuts = [0]

    def accept_and_close() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            conn.close()
            cuts[0] += 1

    threading.Thread(target=accept_and_close, daemon=True).start()
    grid = Grid(tmp_path)
    try:
        proc = grid.start_executor("cut", "--connect-timeout", "1",
                                   manager=f"tcp://127.0.0.1:{listener.getsockname()[1]}")
        assert proc.wait(timeout=30) == 2
    finally:
        listener.close()
        grid.stop()
    log = grid.log("cut.log")
    assert "no answer from the manager" in log and "connections during the handshake" in log, log[-2000:]
    assert "requires CURVE encryption" in log and "Traceback" not in log and cuts[0] >= 2


@pytest.mark.e2e
def test_a_crawl_over_curve_records_the_executor_under_its_key_name(curve_grid, site_server):
    """A CURVE crawl whose client starts before any executor: the client's line that no executor
    takes work names a command that starts one on this grid, with the manager's public key (it
    named --manager alone, which such a manager refuses); once one comes the crawl ends whole.
    (The client says it after one heartbeat without a result here, not WAIT_BEATS = 5.)"""
    from grid import wait_for
    site = generate_site(30, links_per_page=3, seed=5)
    server = site_server(site)
    grid = curve_grid
    client = grid.start_client(server.url("/"), *curve_args(grid, "client"),
                               env={"GRIDCRAWL_TEST_CONSTANTS": "gridcrawl.client.app.WAIT_BEATS=1"})
    wait_for(lambda: "no executor takes grid threads now" in grid.log("client.log"), 60,
             message="the client saying that no executor takes work")
    line = next(x for x in grid.log("client.log").splitlines() if "no executor takes" in x)
    assert (f"(gridcrawl-executor --manager {grid.endpoint} --curve-secret DESKTOP.key_secret "
            f"--curve-server-key {grid.keys / 'manager.key'})") in line, line
    grid.start_executor("ex1", "--threads", "3", *curve_args(grid, "ex1"))
    assert client.wait(timeout=90) == 0, grid.log("client.log")
    grid.stop()
    docs = {row[0] for row in grid.query("crawl", "SELECT url FROM document")}
    assert docs == {canonical_url(server.url(path)) for path in reachable(site)}
    # the executor claimed the OS user name; the manager records the authenticated key name
    assert grid.query("manager", "SELECT usr_name FROM executor") == [("ex1",)]
    assert grid.query("manager", "SELECT usr_name FROM application") == [("client",)]


@pytest.mark.e2e
def test_a_key_removed_from_the_allow_list_cuts_its_connected_executor(curve_grid):
    """The allow-list was read only at a new connection: an executor whose key file was deleted
    stayed connected (and was given work) until its connection dropped. Now it is cut within
    seconds, told why, and exits 2."""
    from grid import wait_for
    grid = curve_grid
    ex1 = grid.start_executor("ex1", *curve_args(grid, "ex1"))
    wait_for(lambda: "registered as executor" in grid.log("ex1.log"), 30, message="ex1 registered")
    (grid.workdir / "allow" / "ex1.key").unlink()
    assert ex1.wait(timeout=20) == 2
    log = grid.log("ex1.log")
    assert "CURVE key 'ex1' was removed from the manager's allow-list directory" in log, log[-2000:]
    assert "putting ex1.key back there" in log and "Traceback" not in log
    assert "CURVE key ex1 left the allow-list directory: executor ex1 cut off" in grid.log("manager.log")


@pytest.mark.e2e
def test_an_executor_given_a_wrong_manager_key_says_why_while_it_waits(curve_grid):
    """A desktop given another key as the manager's (the manager's keys made anew) and a long
    --connect-timeout (the systemd recipe's day) logged "no answer from the manager ... for 10 s;
    waiting for it up to ..." every minute with no cause; only the last line, a day later, named
    the handshakes the manager closed. The waiting line names them now. And it knocked 83 times a
    second (ZeroMQ reconnects 10 ms after each closed handshake), each a CURVE computation at the
    manager: after 50 it tries once a second. (The waiting line comes 1 s in here, not 10.)"""
    from grid import wait_for
    grid = curve_grid
    proc = grid.start_executor("ex1", "--connect-timeout", "600", "--curve-secret", str(grid.keys / "ex1.key_secret"),
                               "--curve-server-key", str(grid.keys / "stranger.key"),
                               env={"GRIDCRAWL_TEST_CONSTANTS": "gridcrawl.link.WAITING_SAID_AFTER=1.0"})
    wait_for(lambda: "waiting for it up to" in grid.log("ex1.log"), 60, message="the waiting line")
    line = next(x for x in grid.log("ex1.log").splitlines() if "waiting for it up to" in x)
    assert "WARNING" in line and "no answer from the manager at" in line, line
    assert " connections during the handshake (wrong manager public key, or the manager does not use CURVE)" in line, line
    slower = re.compile(r"INFO gridcrawl\.executor: the manager at tcp://127\.0\.0\.1:\d+ closed \d+ connections during "
                        r"the handshake: trying again every 1 s")
    wait_for(lambda: slower.search(grid.log("ex1.log")), 30, message="the executor trying once a second")
    assert proc.poll() is None  # it waits on, as told


@pytest.mark.e2e
def test_a_secret_key_copied_into_the_allow_list_is_named_by_the_manager(tmp_path):
    """An operator who copied a desktop's NAME.key_secret into the allow-list directory instead
    of NAME.key saw that desktop refused as an "unknown public key" with the file right there,
    and a manager started on a directory without a .key file said nothing of it. Now its log
    says both at start, and the refusal names the secret file and the file to copy instead."""
    from grid import wait_for
    keys, allow = tmp_path / "keys", tmp_path / "allow"
    allow.mkdir()
    for name in ("manager", "desk1"):
        new_key_pair(name, keys)
    shutil.copy(keys / "desk1.key_secret", allow / "desk1.key_secret")
    grid = Grid(tmp_path)
    grid.keys = keys
    try:
        grid.start_manager("--curve-secret", str(keys / "manager.key_secret"), "--curve-allow", str(allow))
        wait_for(lambda: "manager listening" in grid.log("manager.log"), 30, message="the manager listening")
        log = grid.log("manager.log")
        assert (f"allow-list directory {allow} holds secret key files (desk1.key_secret): only public NAME.key "
                "files are read there") in log, log[-2000:]
        assert f"allow-list directory {allow} has no .key file: every executor and client is refused" in log
        proc = grid.start_executor("desk1", "--connect-timeout", "30", *curve_args(grid, "desk1"))
        assert proc.wait(timeout=30) == 2
        assert "refused this program's CURVE key" in grid.log("desk1.log")
        wait_for(lambda: "desk1.key_secret in the allow-list directory" in grid.log("manager.log"), 10,
                 message="the refusal logged")
        assert ("it is the key of desk1.key_secret in the allow-list directory, a secret key file, which is not "
                "read; copy desk1.key there instead") in grid.log("manager.log")
    finally:
        grid.stop()


@pytest.mark.e2e
def test_a_paused_crawl_over_curve_names_a_resume_command_that_works(curve_grid, site_server):
    """A paused crawl's client says which command resumes it: the command it named left out the
    CURVE keys, and at a CURVE manager it was refused ("the manager requires CURVE encryption").
    It now names the crawl's --curve-secret and --curve-server-key, and works as shown. (The
    client says it after one heartbeat without a result here, not WAIT_BEATS = 5.)"""
    import re
    import shlex
    from grid import wait_for
    server = site_server(generate_site(3, links_per_page=1, seed=2))
    grid = curve_grid
    client = grid.start_client(server.url("/"), *curve_args(grid, "client"),  # no executor yet: it waits
                               env={"GRIDCRAWL_TEST_CONSTANTS": "gridcrawl.client.app.WAIT_BEATS=1"})
    wait_for(lambda: "application " in grid.log("client.log"), 30, message="the application opened")
    app_id = re.search(r"application (\w{8}) opened", grid.log("client.log")).group(1)
    paused = subprocess.run([sys.executable, "-m", "gridcrawl.client", "--manager", grid.endpoint,
                             *curve_args(grid, "client"), "pause", app_id], capture_output=True, text=True, timeout=60)
    assert paused.returncode == 0, paused.stderr
    wait_for(lambda: "it is resumed (" in grid.log("client.log"), 30, message="the client naming the resume command")
    hint = re.search(r"it is resumed \((gridcrawl-client .*?)\)\n", grid.log("client.log")).group(1)
    assert "--curve-secret" in hint and "--curve-server-key" in hint, hint
    args = shlex.split(hint)[1:]
    resumed = subprocess.run([sys.executable, "-m", "gridcrawl.client", *args], capture_output=True, text=True,
                             timeout=60)
    assert resumed.returncode == 0 and resumed.stdout.strip().endswith(": running"), resumed.stderr
    wait_for(lambda: "an operator resumed this application" in grid.log("client.log"), 30, message="told of it")
    assert client.poll() is None


def test_an_accepted_key_is_one_line_of_the_managers_log_not_two(tmp_path, caplog):
    """Each executor's registration was three INFO lines ("CURVE: accepted key desk1", "register
    from CURVE key desk1", "executor ... registered"), and every reconnect of every peer one more:
    the handshake that accepts a key now logs at DEBUG; a refused key stays a WARNING."""
    allow = tmp_path / "allow"
    allow.mkdir()
    a_pub, _ = new_key_pair("alice", tmp_path / "keys")
    b_pub, _ = new_key_pair("bob", tmp_path / "keys")
    (allow / "alice.key").write_bytes(a_pub.read_bytes())
    allowed = AllowList(allow)
    with caplog.at_level("INFO", logger="gridcrawl.keys"):
        assert allowed.callback("*", load_public(a_pub)) and not allowed.callback("*", load_public(b_pub))
    assert [(r.levelname, "unknown public key" in r.getMessage()) for r in caplog.records] == [("WARNING", True)]
