"""The link of a peer to the manager (:mod:`gridcrawl.link`), without sockets: the manager
endpoints of a grid with hot-standby managers, the comma-separated form of ``--manager`` in the
configuration and environment, and the Paranoid Pirate decisions of :class:`LinkState` (events and
times in, actions out) that executor, client and operator command share; and, with a real ROUTER
socket on 127.0.0.1, what the socket-owning :class:`ManagerLink` logs of malformed messages."""

from __future__ import annotations

import pytest
import typer

from gridcrawl import protocol as p
from gridcrawl.config import run_program
from gridcrawl.errors import ManagerUnreachable, Refused
from gridcrawl.link import Beat, Connect, Fail, LinkState, ManagerEndpoints, split_endpoints
from gridcrawl.settings import Settings

A, B, C = "tcp://a:9000", "tcp://b:9000", "tcp://c:9000"


def test_endpoints_split_on_commas_keep_order_and_drop_duplicates():
    assert split_endpoints([f"{A},{B}", C, f" {A} "]) == [A, B, C]
    assert split_endpoints(A) == [A]
    with pytest.raises(ValueError, match="no manager endpoint"):
        split_endpoints([" , "])


def test_a_standby_refusal_moves_to_the_manager_it_names():
    link = ManagerEndpoints([A, B, C])
    assert link.current == A and link.several
    assert link.follow(C) is True and link.current == C
    assert link.follow(C) is False and link.current == C       # names itself: wait here, do not move
    assert link.follow("tcp://evil:1") is True and link.current == A  # not ours: the next one instead


def test_a_silent_manager_makes_way_for_the_next_round_the_list():
    link = ManagerEndpoints([A, B])
    assert [link.next(), link.current, link.next(), link.current] == [True, B, True, A]
    single = ManagerEndpoints(A)
    assert single.next() is False and single.current == A and not single.several
    assert single.follow(None) is False


def test_the_environment_gives_several_managers_as_one_comma_separated_value(monkeypatch):
    seen = {}
    app = typer.Typer(add_completion=False)

    @app.command()
    def run(manager: list[str] = typer.Option(...), threads: int = typer.Option(1)) -> None:
        seen["manager"] = manager

    monkeypatch.setenv("GRIDCRAWL_MANAGER", f"{A},{B}")
    with pytest.raises(SystemExit) as done:
        run_program(app, "executor", [])
    assert done.value.code == 0
    assert split_endpoints(seen["manager"]) == [A, B]


# ---------------------------------------------------------------------------------------------
# LinkState: interval 1 s, liveness 3 (dead after 3 s of silence), back-off 1 s doubling to 4 s,
# connect timeout 10 s


SETTINGS = Settings(heartbeat_interval=1.0, heartbeat_liveness=3, reconnect_initial=1.0, reconnect_max=4.0,
                    connect_timeout=10.0)
WELCOME = p.Welcome("ex-1", 1.0, 3)


def link(*endpoints: str) -> LinkState:
    return LinkState(list(endpoints) or [A], SETTINGS, (p.Welcome,))


def up(state: LinkState, now: float = 0.0) -> LinkState:
    assert state.start(now) == [Connect(state.managers.current)]
    assert state.received(now, WELCOME) == [] and state.up
    return state


def test_a_peer_with_one_silent_manager_waits_for_it_until_the_connect_timeout():
    state = link(A)
    assert state.start(0.0) == [Connect(A)]
    assert state.tick(5.0) == [] and state.tick(10.0) == []  # no reconnect before the first answer
    (fail,) = state.tick(10.1)
    assert isinstance(fail, Fail) and isinstance(fail.error, ManagerUnreachable)
    assert str(fail.error) == f"no answer from the manager at {A} within 10 s"


def test_a_connect_timeout_under_a_second_is_said_as_given():
    """``--connect-timeout 0.5`` gave up "within 0 s" (the seconds were rounded to none)."""
    import dataclasses
    state = LinkState([A], dataclasses.replace(SETTINGS, connect_timeout=0.5), (p.Welcome,))
    state.start(0.0)
    (fail,) = state.tick(0.6)
    assert str(fail.error) == f"no answer from the manager at {A} within 0.5 s"


def test_once_up_a_peer_beats_every_interval_and_only_while_up():
    state = up(link(A))
    assert state.tick(0.5) == []
    assert state.tick(1.0) == [Beat()]
    assert state.tick(1.5) == [] and state.tick(2.0) == [Beat()]
    state.received(2.5, p.Heartbeat())
    assert state.tick(3.0) == [Beat()] and state.silence(3.0) == 0.5


def test_a_peer_beats_as_often_as_the_manager_asks_never_less_often_and_never_flooding():
    """A manager with a shorter heartbeat interval than its peer's (0.25 s x 4 against the
    default 1 s) counted the peer dead between two of its heartbeats, in an endless "unknown
    peer, connecting again" loop: the peer takes the interval its welcome names when shorter,
    and never one under MIN_INTERVAL; a longer one changes nothing."""
    from gridcrawl.link import MIN_INTERVAL
    state = link(A)
    state.start(0.0)
    state.received(0.0, p.Welcome("ex-1", 0.25, 4))
    assert state.tick(0.25) == [Beat()] and state.tick(0.4) == [] and state.tick(0.5) == [Beat()]
    slower = link(A)
    slower.start(0.0)
    slower.received(0.0, p.Welcome("ex-1", 5.0, 3))
    assert slower.tick(1.0) == [Beat()]  # its own 1 s
    flood = link(A)
    flood.start(0.0)
    flood.received(0.0, p.Welcome("ex-1", 1e-9, 3))
    assert flood.interval == MIN_INTERVAL


def test_a_busy_peer_skips_heartbeats_but_sends_its_figures_every_five_intervals():
    state = up(link(A))
    beats = []
    for tenth in range(1, 121):  # 12 s; a result sent every 0.3 s for the first 11 s
        now = tenth / 10
        if now <= 11.0 and tenth % 3 == 0:
            state.sent(now)
        if tenth % 10 == 5:
            state.received(now, p.Assign([]))  # the manager's side of a busy link
        if state.tick(now) == [Beat()]:
            beats.append(now)
    # busy: a beat only when the last one is 5 intervals old (its figures); idle again after 11 s:
    # every interval (the last message went out at 10.8 s)
    assert beats == [5.0, 10.0, 12.0]
    assert state.silence(12.0) == 0.5  # silence is judged on what the manager sends, as before


def test_a_message_to_another_manager_is_no_sign_of_life_to_the_next():
    state = up(link(A, B))
    state.sent(2.9)
    assert state.tick(3.1) == [Connect(B)]  # A silent for 3 s: the next manager
    assert state.received(3.2, WELCOME) == []
    assert state.tick(4.2) == [Beat()]  # its first interval: a beat, though a message went to A at 2.9


def test_a_silent_manager_is_reconnected_with_a_new_socket_after_a_doubling_backoff():
    state = up(link(A))
    state.received(1.0, p.Heartbeat())
    assert Connect(A) not in state.tick(4.0)                  # 3 s of silence: not yet dead
    assert state.tick(4.1) == [] and not state.up             # dead: reconnect in 1 s
    assert state.tick(5.1) == [Connect(A)]
    assert state.tick(8.2) == [] and state.tick(10.2) == [Connect(A)]   # again dead: 2 s
    assert state.tick(13.3) == [] and state.tick(17.3) == [Connect(A)]  # 4 s, the maximum
    assert state.tick(20.4) == [] and state.tick(24.4) == [Connect(A)]  # still 4 s
    assert state.received(25.0, WELCOME) == [] and state.up and state.backoff == SETTINGS.reconnect_initial
    connects = [t / 10 for t in range(251, 10_000) if Connect(A) in state.tick(t / 10)]
    assert connects[0] == 29.1 and connects[-1] > 990  # silent again: reconnected, and once up: never gives up


def test_the_warnings_of_a_silent_manager_name_it_and_count_the_whole_silence(caplog):
    """Each reconnect of an outage said "manager silent for 3.0 s" (the liveness, the same every
    time; a second figure only from the second on) and never which manager; nor did a goodbye."""
    import logging
    state = up(link(A))
    state.received(1.0, p.Heartbeat())
    with caplog.at_level(logging.WARNING, logger="gridcrawl.link"):
        for t in range(41, 250):
            state.tick(t / 10)
    said = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert said[:3] == [f"no answer from the manager at {A} for 3 s; reconnecting in 1.0 s",
                        f"no answer from the manager at {A} for 7 s; reconnecting in 2.0 s",
                        f"no answer from the manager at {A} for 12 s; reconnecting in 4.0 s"], said
    caplog.clear()
    state = up(link(A, B))
    with caplog.at_level(logging.WARNING, logger="gridcrawl.link"):
        assert state.tick(3.1) == [Connect(B)]
        state.received(3.5, WELCOME)
        state.received(4.0, p.Bye("manager shutting down"))
    assert [r.getMessage() for r in caplog.records] == [f"no answer from the manager at {A} for 3 s; trying {B}",
                                                        f"the manager at {B} left (manager shutting down); trying {A}"]


def test_an_answer_to_the_hello_cancels_the_reconnect_the_silence_before_it_scheduled():
    """A hello answered after the link had counted the new connection silent (the manager came
    back during the back-off) is a working link: the reconnect scheduled for the silence used to
    fire anyway, registering the executor again and dropping every result of the jobs it had
    received on the working connection (a 60 s outage cost 8 lost attempts)."""
    state = up(link(A))
    assert state.tick(3.1) == [] and not state.up            # silent: reconnect at 4.1
    assert state.tick(4.1) == [Connect(A)]
    assert state.tick(7.2) == [] and not state.up            # the new hello unanswered: reconnect at 9.2
    assert state.received(8.0, WELCOME) == [] and state.up   # answered
    assert all(Connect(A) not in state.tick(t / 10) for t in range(81, 200) if state.received(t / 10, p.Heartbeat()) == [])
    assert state.up


def test_a_program_that_was_itself_paused_gives_its_manager_a_fresh_timeout(caplog):
    """After SIGSTOP/SIGCONT of the program (or a laptop's sleep) its loop ticks again long after
    the previous tick: the manager's silence over that time is not its own. It was counted dead
    at once ("manager silent for 20.1 s") and the link torn down."""
    state = up(link(A))
    assert state.tick(0.5) == []
    with caplog.at_level("INFO", logger="gridcrawl.link"):
        assert Connect(A) not in state.tick(20.6) and state.up  # 20 s stopped: no reconnect
    assert "this program was paused for 20.6 s" in caplog.text
    assert state.tick(23.0) in ([], [Beat()]) and state.up
    assert state.tick(23.7) == [] and not state.up  # then silent for real: counted dead as ever


def test_with_several_managers_silence_moves_to_the_next_at_once_even_before_the_first_answer():
    state = link(A, B)
    assert state.start(0.0) == [Connect(A)]
    assert state.tick(3.0) == [] and state.tick(3.1) == [Connect(B)]
    assert state.received(4.0, WELCOME) == [] and state.up
    assert all(state.tick(t) in ([], [Beat()]) for t in (5.0, 6.0, 7.0))  # (a program ticks often)
    assert state.tick(7.1) == [Connect(A)]  # B silent: round the list


def test_a_standby_refusal_moves_to_the_named_manager_at_once_or_waits_when_it_names_itself(caplog):
    """A standby naming an active manager the peer was given is hot standbys at work: logged
    as information, not as a warning (every client of a standby setup warned at each start)."""
    import logging
    state = link(A, B)
    state.start(0.0)
    with caplog.at_level(logging.INFO, logger="gridcrawl.link"):
        assert state.received(0.1, p.Refuse("standby manager; the active manager is B", active=B)) == [Connect(B)]
    assert [r.levelno for r in caplog.records if "manager refused" in r.getMessage()] == [logging.INFO]
    assert state.received(0.2, p.Refuse("standby manager; taking over", active=B)) == []
    assert state.tick(0.3) == [] and state.tick(0.45) == [Connect(B)]  # again after min(back-off, interval / 4)


def test_a_standby_naming_a_manager_not_given_is_asked_again_and_the_final_error_names_it(caplog):
    """Given only a standby's address, a peer does not go where the standby points (a hostile
    answer must not send it elsewhere), asks again, logs the refusal once, and its final error
    names the active manager to add — not "no answer", since the manager did answer."""
    import logging
    state = link(A)
    state.start(0.0)
    refusal = p.Refuse(f"standby manager; the active manager is {B}", active=B)
    with caplog.at_level(logging.DEBUG, logger="gridcrawl.link"):
        now = 0.1
        while now < 3.0:
            state.received(now, refusal)
            now = max(now + 0.05, (state.reconnect_at or now) + 0.01)
            state.tick(now)
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and len([r for r in caplog.records if "manager refused" in r.getMessage()]) > 5
    (fail,) = state.tick(10.1)
    assert isinstance(fail.error, Refused) and str(fail.error) == (
        f"standby manager; the active manager is {B}; {B} is not one of the managers given to this program "
        f"({A}): add --manager {B}")


def test_a_refusal_of_the_hello_by_the_one_manager_is_final():
    state = link(A)
    state.start(0.0)
    (fail,) = state.received(0.1, p.Refuse("authentication failed"))
    assert isinstance(fail.error, Refused) and str(fail.error) == "authentication failed"


def test_a_refusal_naming_nobody_moves_on_with_several_managers_and_is_final_at_the_timeout():
    state = link(A, B)
    state.start(0.0)
    assert state.received(0.1, p.Refuse("authentication failed")) == [Connect(B)]
    assert state.received(0.2, p.Refuse("authentication failed")) == [Connect(A)]
    (fail,) = state.tick(10.1)
    assert isinstance(fail.error, Refused) and str(fail.error) == "authentication failed"


def test_the_active_managers_refusal_is_final_once_a_standby_names_it():
    """``gridcrawl-client pause ID --manager STANDBY,ACTIVE`` of a stopped application: the active
    manager refused (naming nobody: move on to the next), the standby named the active one
    (follow it), at once each time — 1,800 log lines and as many connections in 10 s before the
    connect timeout gave the answer. Now the answer comes after the standby's first pointer back,
    in either order of the list."""
    for order in ((A, B), (B, A)):  # A the standby, B the active manager
        state = link(*order)
        actions = state.start(0.0)
        answers = {A: p.Refuse(f"standby manager; the active manager is {B}", active=B),
                   B: p.Refuse("application 1c9ee645 is stopped already")}
        for step in range(6):
            (action,) = actions
            if isinstance(action, Fail):
                break
            actions = state.received(0.1 + step / 100, answers[action.endpoint])
        assert isinstance(action, Fail) and str(action.error) == "application 1c9ee645 is stopped already"
        assert step <= 3  # at most: the standby, the active manager, the standby


def test_a_manager_that_forgot_the_peer_gets_the_hello_again_at_once():
    state = up(link(A))
    assert state.received(1.0, p.Refuse("unknown executor: register again")) == [Connect(A)]
    assert not state.up
    assert state.received(1.1, WELCOME) == [] and state.up


def test_refusals_on_a_socket_being_replaced_are_not_answers():
    state = up(link(A))
    state.received(1.0, p.Bye("manager stopping"))  # reconnect in 1 s; what the old socket still says is moot
    assert state.received(1.1, p.Refuse("unknown executor: register again")) == []
    assert state.tick(1.5) == [] and state.tick(2.0) == [Connect(A)]


def test_a_goodbye_reconnects_after_the_backoff():
    state = up(link(A))
    assert state.received(1.0, p.Bye("manager stopping")) == [] and not state.up
    assert state.tick(1.9) == [] and state.tick(2.0) == [Connect(A)]


def test_with_standbys_a_goodbye_moves_to_the_next_manager_at_once():
    """A manager stopped with SIGTERM says bye and releases its lease: a standby takes over within
    half a heartbeat interval. Its peers reconnected to the manager that had just stopped, found it
    silent for peer_timeout, and only then tried the standby (4 s instead of under 1 s)."""
    state = up(link(A, B))
    assert state.received(1.0, p.Bye("manager shutting down")) == [Connect(B)] and not state.up
    assert state.received(1.1, WELCOME) == [] and state.up


def test_a_standby_naming_the_manager_just_left_is_asked_again_until_it_takes_over(caplog):
    """The active manager paused (or dead on another host): its peers notice the silence after
    peer_timeout (3 s), as its lease expires (3 s by default). A standby asked just before it
    read the lease expired named the silent manager; the peer went back to it and lost another
    3 s of silence. Now it asks the standby again until that one takes over — for peer_timeout at
    most, then it follows the refusal as before (a manager alive but out of this peer's reach)."""
    import logging
    state = up(link(A, B))
    assert state.tick(3.1) == [Connect(B)]
    refusal = p.Refuse(f"standby manager; the active manager is {A}", active=A)
    with caplog.at_level(logging.DEBUG, logger="gridcrawl.link"):
        assert state.received(3.2, refusal) == []
        assert state.tick(3.3) == [] and state.tick(3.45) == [Connect(B)]
        assert state.received(3.5, refusal) == [] and state.tick(3.75) == [Connect(B)]
    assert len([r for r in caplog.records if "has just been left" in r.getMessage()]) == 1
    assert state.received(3.8, WELCOME) == [] and state.up
    # a standby that keeps naming A past peer_timeout: A is alive, out of this peer's reach only
    state = up(link(A, B))
    assert state.tick(3.1) == [Connect(B)]
    assert state.received(6.0, refusal) == [] and state.tick(6.25) == [Connect(B)]
    assert state.received(6.2, refusal) == [Connect(A)]


def test_a_failed_handshake_is_final_with_one_manager_and_logged_with_standbys():
    state = link(A)
    state.start(0.0)
    (fail,) = state.handshake_failed(0.1, "the manager refused this program's CURVE key")
    assert isinstance(fail.error, Refused)
    # once answered too: a key revoked while connected said "manager silent" for ever
    state = up(link(A))
    (fail,) = state.handshake_failed(1.0, "the manager refused this program's CURVE key")
    assert isinstance(fail.error, Refused) and "it was accepted before: the key was revoked" in str(fail.error)
    # with hot standbys another manager may still take the key: logged, the link goes on
    state = up(link(A, B))
    assert state.handshake_failed(1.0, "the manager refused this program's CURVE key") == []


def test_a_manager_sending_malformed_messages_after_it_answered_is_logged_once_per_interval(caplog):
    """Once the manager has answered, malformed messages from it are dropped and logged: the
    first at once, then one line with their count per ``MALFORMED_LOG_EVERY`` seconds, not a
    line each (a broken peer must not flood the log). A real ROUTER socket on 127.0.0.1 plays
    the manager; the link's clock is the test's."""
    import logging
    import time as _time

    import zmq

    from gridcrawl.link import MALFORMED_LOG_EVERY, ManagerLink
    from gridcrawl.transport import receive, send

    now = [100.0]
    context = zmq.Context()
    router = context.socket(zmq.ROUTER)
    port = router.bind_to_random_port("tcp://127.0.0.1")
    link = ManagerLink(context, Settings(), f"tcp://127.0.0.1:{port}", lambda: p.Heartbeat(), (p.Welcome,),
                       clock=lambda: now[0])

    def drain() -> list[p.Message]:
        """Read until the manager's next sentinel heartbeat (messages on one connection keep order)."""
        send(router, p.Heartbeat(), peer)
        got: list[p.Message] = []
        deadline = _time.monotonic() + 10
        while not any(isinstance(m, p.Heartbeat) for m in got) and _time.monotonic() < deadline:
            if link.socket.poll(50):
                got += link.receive()
        return got
    try:
        link.start()
        assert router.poll(5000)
        peer = receive(router)[0]
        send(router, p.Welcome("e1", 1.0, 3), peer)
        drain()
        assert link.up
        with caplog.at_level(logging.WARNING, logger="gridcrawl.link"):
            for _ in range(50):
                router.send_multipart([peer, b"junk"])
            assert drain() == [p.Heartbeat()]
            assert [r.getMessage() for r in caplog.records] == [
                "dropped a malformed message from the manager: expected 3 frames, got 1"]
            now[0] += MALFORMED_LOG_EVERY
            router.send_multipart([peer, b"junk"])
            drain()
        lines = [r.getMessage() for r in caplog.records]
        assert lines[1:] == [f"dropped a malformed message from the manager (50 in the last "
                             f"{MALFORMED_LOG_EVERY:.0f} s): expected 3 frames, got 1"]
        assert link.up  # dropped, not taken for the manager's answer nor its loss
    finally:
        link.close(linger=0)
        router.close(linger=0)
        context.term()


def test_a_refusal_for_now_is_asked_again_shortly_and_named_at_the_timeout():
    """A manager over its budget of failed logins refuses with ``retry``: the peer does not give
    up (a final refusal ends it at once), it connects again shortly, and the timeout's error
    names that refusal rather than "no answer"."""
    state = link(A)
    assert state.start(0.0) == [Connect(A)]
    busy = p.Refuse("too many failed logins at this manager: trying again shortly", retry=True)
    assert state.received(0.1, busy) == []
    assert state.tick(0.2) == [] and state.tick(0.4) == [Connect(A)]  # min(back-off, interval / 4) later
    assert state.received(0.5, busy) == [] and not state.up
    (fail,) = state.tick(SETTINGS.connect_timeout + 0.1)
    assert isinstance(fail.error, Refused) and str(fail.error) == busy.reason


def test_a_final_refusal_stops_the_peer_instead_of_reconnecting_to_send_it_again():
    """A submit over the manager's instruction bound was refused; the link took any refusal of
    an up peer for a manager that forgot it, reconnected at once and the client sent the same
    submit again: 12,781 times in 2 minutes, each a 'reattached' line in the manager's log. A
    ``final`` refusal now ends the peer with its reason; a plain one still reconnects."""
    state = up(link(A))
    (fail,) = state.received(1.0, p.Refuse("grid thread 2: its instruction is 112555 bytes, over 65536", final=True))
    assert isinstance(fail, Fail) and isinstance(fail.error, Refused) and "112555 bytes" in str(fail.error)
    again = up(link(A))
    assert again.received(1.0, p.Refuse("unknown application: open it again")) == [Connect(A)] and not again.up


def test_a_peer_waiting_for_a_manager_that_does_not_answer_says_so_while_it_waits(caplog):
    """A desktop started before its manager, with the day-long ``connect_timeout`` of the
    service recipes (docs/operations.md), logs what it waits for after ``WAITING_SAID_AFTER``
    seconds, with what the network says of the endpoint, then once every
    ``WAITING_SAID_EVERY``: it used to say nothing until the manager answered or the day ended.
    A real port on 127.0.0.1 where nothing listens plays the manager that is not there yet; the
    link's clock is the test's."""
    import logging
    import socket

    import zmq

    from gridcrawl.link import WAITING_SAID_AFTER, WAITING_SAID_EVERY, ManagerLink

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    now = [100.0]
    context = zmq.Context()
    link = ManagerLink(context, Settings(connect_timeout=86400.0), f"tcp://127.0.0.1:{port}",
                       lambda: p.Heartbeat(), (p.Welcome,), clock=lambda: now[0])
    try:
        with caplog.at_level(logging.WARNING, logger="gridcrawl.link"):
            link.start()
            link._probed = True  # (the probe of a non-ZeroMQ listener is not what this test is about)
            for seconds in (1.0, WAITING_SAID_AFTER - 1):
                now[0] = 100.0 + seconds
                link.tick()
            assert [r.getMessage() for r in caplog.records] == []
            now[0] = 100.0 + WAITING_SAID_AFTER
            link.tick()
            now[0] += WAITING_SAID_EVERY / 2
            link.tick()
            lines = [r.getMessage() for r in caplog.records]
            assert lines == [f"no answer from the manager at tcp://127.0.0.1:{port} for {WAITING_SAID_AFTER:.0f} s "
                             f"(nothing listens at 127.0.0.1:{port} (connection refused): is the manager running "
                             f"there?); waiting for it up to {86400 - WAITING_SAID_AFTER:.0f} s more "
                             "(--connect-timeout 86400)"]
            now[0] = 100.0 + WAITING_SAID_AFTER + WAITING_SAID_EVERY
            link.tick()
            assert len(caplog.records) == 2
            assert f"for {WAITING_SAID_AFTER + WAITING_SAID_EVERY:.0f} s" in caplog.records[1].getMessage()
    finally:
        link.close(linger=0)
        context.term()


def test_a_peer_whose_connect_timeout_ends_first_gives_its_one_line_error_and_no_waiting_line(caplog):
    """With the default ``connect_timeout`` (10 s) the peer's one-line error comes at the
    timeout, with the network's reason, and no "waiting" line before it."""
    import logging
    import socket

    import zmq

    from gridcrawl.link import ManagerLink

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    now = [100.0]
    context = zmq.Context()
    link = ManagerLink(context, Settings(), f"tcp://127.0.0.1:{port}", lambda: p.Heartbeat(), (p.Welcome,),
                       clock=lambda: now[0])
    try:
        with caplog.at_level(logging.WARNING, logger="gridcrawl.link"):
            link.start()
            link._probed = True
            now[0] = 100.0 + Settings().connect_timeout - 0.5
            link.tick()
            now[0] = 100.0 + Settings().connect_timeout + 0.5
            with pytest.raises(ManagerUnreachable, match="nothing listens at"):
                link.tick()
        assert [r.getMessage() for r in caplog.records] == []
    finally:
        link.close(linger=0)
        context.term()


def test_a_peer_whose_managers_all_went_silent_backs_off_between_rounds_and_says_so_once_a_minute(caplog):
    """Two managers, both gone (the active one stopped, its standby on an address the peer was not
    given): the executor tried them in turn every 3 s for ever, logging "manager silent for 3.0 s;
    trying ..." each time, 1,200 WARNINGs an hour. Now a whole round without an answer makes the
    next wait the back-off, and one WARNING a minute says that no manager has answered."""
    import logging

    from gridcrawl.link import ROUND_SAID_EVERY
    state = up(link(A, B))
    connects, now = [], 0.0
    with caplog.at_level(logging.WARNING, logger="gridcrawl.link"):
        while now < 600.0:
            now += 0.5
            connects += [a.endpoint for a in state.tick(now) if isinstance(a, Connect)]
    warnings = [r.getMessage() for r in caplog.records]
    # each try waits out the silence (3 s) and then the back-off (up to reconnect_max, 4 s here)
    assert connects[:2] == [B, A] and len(connects) < 100, connects   # (at once after each silence: 171)
    assert warnings[0] == "no answer from the manager at tcp://a:9000 for 4 s; trying tcp://b:9000"
    assert warnings[1] == ("no manager has answered for 7 s (tcp://a:9000,tcp://b:9000); trying tcp://a:9000 in "
                           "2.0 s (said again at most every 60 s)")
    assert len(warnings) <= 2 + 600 / ROUND_SAID_EVERY, warnings
    assert state.received(now, WELCOME) == [] and state.up and state.backoff == SETTINGS.reconnect_initial
    # a peer no manager has answered yet: ManagerLink's "no answer from the manager ... (the reason)" says it
    caplog.clear()
    never = link(A, B)
    never.connect_timeout = 86400.0
    never.start(0.0)
    with caplog.at_level(logging.WARNING, logger="gridcrawl.link"):
        for t in range(1, 600):
            never.tick(float(t))
    assert not [r for r in caplog.records if "no manager has answered" in r.getMessage()]


def test_a_manager_answering_while_the_peer_waits_out_a_rounds_back_off_is_the_one_it_names():
    """While a peer whose managers all went silent waited the back-off before the next round,
    it already named the next manager as its own, so the one it was still connected to, coming
    back and answering, was logged and followed as the other ("registered as executor ... with
    tcp://m2" of a manager at tcp://m1). The next is taken only when the reconnect is made."""
    state = up(link(A, B))
    now, connects = 0.0, []
    while len(connects) < 2:  # B tried, then A again after the back-off: a round went silent
        now += 0.5
        connects += [a.endpoint for a in state.tick(now) if isinstance(a, Connect)]
    while state.reconnect_at is None:  # A silent again: the back-off before B
        now += 0.5
        state.tick(now)
    assert state.managers.current == A
    assert state.received(now + 0.1, WELCOME) == [] and state.up and state.managers.current == A
    assert all(not isinstance(a, Connect) for t in (1.0, 2.0, 10.0) for a in state.tick(now + t))


def test_an_active_manager_out_of_reach_while_a_standby_names_it_is_said_once_a_minute(caplog):
    """The active manager cut off from its peers but not from its database keeps its lease: its
    standby names it, the peer goes back to it, finds it silent, and asks the standby again. Each
    round logged "no answer from the manager at ... for 3 s; trying ..." again, a WARNING every
    6 s (600 an hour per executor) that never said why the grid waited. Now the first silence
    is said as before, and a silence that comes back without any manager having served the peer
    meanwhile is said once a minute, naming the manager that does not answer and why the
    standby does not take over."""
    import logging

    from gridcrawl.link import ROUND_SAID_EVERY
    state = up(link(A, B))
    refusal = p.Refuse(f"standby manager; the active manager is {A}", active=A)
    connects, now = [], 0.0
    with caplog.at_level(logging.WARNING, logger="gridcrawl.link"):
        while now < 600.0:
            now += 0.125
            for action in state.tick(now):
                if isinstance(action, Connect):
                    connects.append(action.endpoint)
                    if action.endpoint == B:  # the standby answers at once, naming A
                        for answer in state.received(now + 0.01, refusal):
                            connects.append(answer.endpoint)
    warnings = [r.getMessage() for r in caplog.records]
    assert connects.count(A) > 50  # it keeps going back to A: the failover is as fast as ever
    assert warnings[0] == "no answer from the manager at tcp://a:9000 for 3 s; trying tcp://b:9000"
    assert warnings[1].startswith(
        "no manager has served this program for 9 s: tcp://a:9000, the active manager as the standbys say, "
        "does not answer it"), warnings[1]
    assert len(warnings) <= 2 + 600 / ROUND_SAID_EVERY, warnings
    assert state.received(now, WELCOME) == [] and state.up
    # served again: the next silence is the first again, said at once
    caplog.clear()
    serving = state.managers.current
    other = B if serving == A else A
    with caplog.at_level(logging.WARNING, logger="gridcrawl.link"):
        for t in range(1, 8):
            state.tick(now + t / 2)
    assert [r.getMessage() for r in caplog.records] == [
        f"no answer from the manager at {serving} for 4 s; trying {other}"]


def test_a_link_no_manager_answered_closes_at_once_and_one_that_answered_lingers():
    """A program that never reached its manager waited the socket's linger (0.5 s; a client 1 s)
    at exit for heartbeats no one would read: it closes with no linger now. Once a manager has
    answered, what is queued (a Bye, results) still gets its linger. (Real sockets; a
    :class:`zmq.Context` subclass only records each close's linger, as pyzmq lets one.)"""
    import zmq

    from grid import free_port, wait_for
    from gridcrawl.link import ManagerLink
    from gridcrawl.transport import receive, send

    lingers: list = []

    class RecordingSocket(zmq.Socket):
        def close(self, linger=None):
            if not self.closed and self.type == zmq.DEALER:  # the link's own (not its handshake watch's)
                lingers.append(linger)
            super().close(linger=linger)

    class RecordingContext(zmq.Context):
        _socket_class = RecordingSocket

    context = RecordingContext()
    router = zmq.Context.instance().socket(zmq.ROUTER)
    port = router.bind_to_random_port("tcp://127.0.0.1")
    silent = answered = None
    try:
        silent = ManagerLink(context, Settings(), f"tcp://127.0.0.1:{free_port()}", lambda: p.Heartbeat(),
                             (p.Welcome,))
        silent.start()
        silent.close(bye="executor stopping", linger=500)
        answered = ManagerLink(context, Settings(), f"tcp://127.0.0.1:{port}", lambda: p.Heartbeat(), (p.Welcome,))
        answered.start()
        assert router.poll(5000)
        send(router, p.Welcome("e1", 1.0, 3), receive(router)[0])
        wait_for(lambda: answered.socket.poll(50) and [*answered.receive()] is not None and answered.up, 10,
                 message="the manager's welcome")
        answered.close(bye="executor stopping", linger=500)
        assert lingers == [0, 500]
    finally:
        for link in (silent, answered):
            if link is not None:
                link.close(linger=0)
        router.close(linger=0)
        context.term()
