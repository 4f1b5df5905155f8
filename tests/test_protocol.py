"""Round trips of every protocol message and the decoder's refusals of bad frames."""

from __future__ import annotations

import msgpack
import msgspec
import pytest

from gridcrawl import protocol as p

PAGE = p.PageResult(url="http://a.test/", final_url="http://a.test/x", status=200, content_type="text/html",
                    size=123, fetch_seconds=0.5, parse_seconds=0.01, title="T", encoding="utf-8",
                    content="<html>é</html>", links=[["http://a.test/b", "B"]], redirects=["http://a.test/x"])

EXAMPLES = [
    p.Register(name="e1", host="h", user="u", threads=8, dedicated=False, cpu_max=2300.0, num_cpus=2,
               mem_max=1 << 30, os="Linux", arch="x86_64", executor_id="abc", password="pw"),
    p.Welcome("abc", 1.0, 3),
    p.Heartbeat(),
    p.Heartbeat({"cpu_usage": 3.5, "running": 2}),
    p.Assign([p.Job(7, "app", 3, "http://a.test/", 2, {"keepRules": []}), p.Job(8, "app", 4, "http://a.test/b")]),
    p.Started([7]),
    p.Started([7, 8, 9]),
    p.Result(7, PAGE),
    p.Result(8, p.PageResult(url="http://a.test/f.pdf", content=b"%PDF-\x00\xff")),
    p.Results([p.AttemptResult(7, PAGE, 0.25), p.AttemptResult(8, p.PageResult(url="http://a.test/f.pdf"))]),
    p.Cancel(7),
    p.Availability(False),
    p.Availability(False, [7, 8]),
    p.OpenApplication("crawl", "u", None, None),
    p.ApplicationOpened("app", True, 0.5, 3),
    p.Submit("app", [p.ThreadSpec(1, "http://a.test/"), p.ThreadSpec(2, "http://a.test/b", 1, 9, {"x": 1})]),
    p.ThreadDone("app", [p.FinishedThread(3, "abc", 2, False, PAGE), p.FinishedThread(4, None, 3, True, None)]),
    p.Ack("app", [1, 2, 3]),
    p.CloseApplication("app", True),
    p.Refuse("no"),
    p.Bye("leaving"),
    p.Control("3f2a91c0", "pause", "operator", "secret"),
    p.Controlled("3f2a91c0" * 4, "pause", "paused"),
]


def test_every_message_type_has_an_example():
    assert {type(m) for m in EXAMPLES} == set(p.MESSAGES.values())


@pytest.mark.parametrize("message", EXAMPLES, ids=lambda m: type(m).__name__)
def test_round_trip(message):
    frames = p.encode(message)
    assert frames[0] == p.PROTOCOL_VERSION and frames[1] == message.TYPE
    assert p.decode(frames) == message


def frames(kind: bytes, body) -> list[bytes]:
    return [p.PROTOCOL_VERSION, kind, msgpack.packb(body, use_bin_type=True)]


@pytest.mark.parametrize("bad, reason", [
    ([b"GC1", b"heartbeat"], "expected 3 frames"),
    ([b"GC9", b"heartbeat", msgpack.packb({})], "protocol version"),
    (frames(b"nosuch", {}), "unknown message type"),
    ([p.PROTOCOL_VERSION, b"heartbeat", b"\xc1"], "not msgpack"),
    (frames(b"started", {}), "missing field 'attempt_ids'"),
    (frames(b"started", {"attempt_ids": ["7"]}), "expected an integer"),
    (frames(b"started", {"attempt_ids": [True]}), "expected an integer"),
    (frames(b"started", {"attempt_ids": [1], "extra": 2}), "unknown fields"),
    (frames(b"submit", {"application_id": "a", "threads": [{"thread_id": 1}]}), "missing field 'url'"),
    (frames(b"submit", {"application_id": "a", "threads": {"x": 1}}), "expected a list"),
    (frames(b"heartbeat", [1, 2]), "body must be a map"),
    (frames(b"result", {"attempt_id": 1, "page": {"url": 5}}), "fits none|expected str"),
])
def test_decode_refuses_bad_frames(bad, reason):
    with pytest.raises(p.ProtocolError, match=reason):
        p.decode(bad)


NESTED = b"\x81\xa1a" * 1000 + b"\x00"  # maps nested 1,000 deep: 3 KB


@pytest.mark.parametrize("relay", [False, True])
@pytest.mark.parametrize("bad", [
    [p.PROTOCOL_VERSION, b"heartbeat", b"\x81\xa7figures" + NESTED],
    [p.PROTOCOL_VERSION, b"open", b"\x82\xa4user\xa1u\xabinstruction" + NESTED],
    [p.PROTOCOL_VERSION, b"result", b"\x82\xaaattempt_id\x01\xa4page\x82\xa3url\xa1u\xa7headers" + NESTED],
    [p.PROTOCOL_VERSION, b"results", b"\x81\xa7results\x91\x82\xaaattempt_id\x01\xa4page"
                                     b"\x82\xa3url\xa1u\xa7headers" + NESTED],
], ids=["heartbeat", "open", "result", "results"])
def test_a_body_nested_too_deeply_is_a_protocol_error_not_a_crash(bad, relay):
    """msgspec raises RecursionError on maps nested ~1,000 deep: one 3 KB message from any peer
    that could connect killed the manager. (Such a page never reaches a client: the manager,
    skipping over the page it relays, refuses the result.) A heartbeat's figures are typed now:
    the first nested map is refused."""
    with pytest.raises(p.ProtocolError, match="nested too deeply|figures.*expected bool"):
        p.decode(bad, relay=relay)


def test_a_type_the_receiver_does_not_accept_is_refused_before_its_body_is_read(caplog):
    """A manager takes no ``done``: one of 20,000 broken pages was decoded page by page, a
    WARNING each, stalling the manager's loop for seconds, before it was refused."""
    outcome = {"thread_id": 1, "executor_id": None, "attempts": 1, "failed": False, "page": "x"}
    frames = [p.PROTOCOL_VERSION, b"done", msgpack.packb({"application_id": "a", "threads": [outcome] * 20_000})]
    with pytest.raises(p.ProtocolError, match="does not accept 'done'"):
        p.decode(frames, relay=True, only={b"heartbeat", b"results"})
    assert caplog.records == []
    with caplog.at_level("WARNING", logger="gridcrawl.protocol"):  # a client takes it: one line, not 20,000
        done = p.decode(frames)
    assert len(done.threads) == 20_000 and all(t.failed for t in done.threads)
    (line,) = [r.getMessage() for r in caplog.records]
    assert "and 19999 more pages of this message that do not decode" in line


def test_message_table_lists_every_type():
    table = p.message_table()
    for kind in p.MESSAGES:
        assert f"`{kind.decode()}`" in table


def test_batch_merges_runs_of_one_type_per_peer_and_keeps_order():
    job = lambda i: p.Job(i, "app", i, f"http://a.test/{i}")  # noqa: E731
    outcome = lambda i: p.FinishedThread(i, "ex", 1, False, None)  # noqa: E731
    first = p.Assign([job(1)])
    messages = [first, p.Assign([job(2)]), p.Cancel(1), p.Assign([job(3)]),
                p.ThreadDone("app", [outcome(1)]), p.ThreadDone("app", [outcome(2)]),
                p.ThreadDone("other", [outcome(3)]), p.Started([1]), p.Started([2, 3])]
    merged = p.batch(messages)
    assert [type(m).__name__ for m in merged] == ["Assign", "Cancel", "Assign", "ThreadDone", "ThreadDone", "Started"]
    assert [j.attempt_id for j in merged[0].jobs] == [1, 2]          # the cancel still follows its assign
    assert [j.attempt_id for j in merged[2].jobs] == [3]
    assert [o.thread_id for o in merged[3].threads] == [1, 2]         # same application only
    assert merged[4].application_id == "other" and merged[5].attempt_ids == [1, 2, 3]
    assert first.jobs == [job(1)]                                     # the caller's messages are not changed
    assert p.decode(p.encode(merged[0])) == merged[0]


def test_the_manager_relays_a_page_as_it_came_and_reads_only_its_envelope():
    page = p.PageResult(url="http://a.test/", status=503, size=9, error_kind="http_status", retry_after=2.5,
                        content="<html>é</html>", links=[["http://a.test/b", "B", "item"]], kept=[("http://a.test/k", 3)])
    frames = p.encode(p.Result(7, page))
    relayed = p.decode(frames, relay=True)
    assert isinstance(relayed.page, p.RelayedPage)
    assert (relayed.page.status, relayed.page.size, relayed.page.error_kind, relayed.page.retry_after) == \
        (503, 9, "http_status", 2.5)
    done = p.decode(p.encode(p.ThreadDone("app", [p.FinishedThread(1, "ex", 1, False, relayed.page)])))
    assert done.threads[0].page == p.decode(frames).page       # the client gets the page whole


def test_results_carry_pages_encoded_once_and_the_manager_reads_their_envelopes():
    page = p.PageResult(url="http://a.test/", status=429, error_kind="http_status", retry_after=1.5, content="x")
    sent = p.Results([p.AttemptResult(7, p.encode_page(page), 0.125), p.AttemptResult(8, p.encode_page(PAGE))])
    wire = p.encode(sent)
    assert p.decode(wire) == p.Results([p.AttemptResult(7, page, 0.125), p.AttemptResult(8, PAGE)])
    relayed = p.decode(wire, relay=True)
    assert [(r.attempt_id, r.ran, r.page.status, r.page.retry_after) for r in relayed.results] == \
        [(7, 0.125, 429, 1.5), (8, None, 200, None)]
    done = p.decode(p.encode(p.ThreadDone("app", [p.FinishedThread(1, "ex", 1, False, relayed.results[1].page)])))
    assert done.threads[0].page == PAGE
    # a page whose envelope does not decode is unreadable, named; the message's other pages count
    mixed = p.decode(frames(b"results", {"results": [{"attempt_id": 1, "page": {"url": "u"}},
                                                     {"attempt_id": 2, "page": {"url": 5}}]}), relay=True)
    assert [(r.attempt_id, r.page.unreadable) for r in mixed.results] == \
        [(1, None), (2, "results.results[1].page.url: expected str, got int")]


def test_a_relayed_page_that_does_not_decode_fails_its_thread_only():
    bad = msgpack.packb({"attempt_id": 2, "page": {"url": "http://a.test/x", "links": {"x": 1}}}, use_bin_type=True)
    relayed = p.decode([p.PROTOCOL_VERSION, b"result", bad], relay=True)   # the manager reads the envelope only
    good = p.decode(p.encode(p.Result(1, PAGE)), relay=True)
    done = p.decode(p.encode(p.ThreadDone("app", [p.FinishedThread(1, "ex", 1, False, good.page),
                                                  p.FinishedThread(2, "ex", 1, False, relayed.page)])))
    assert [(t.thread_id, t.failed) for t in done.threads] == [(1, False), (2, True)] and done.threads[0].page == PAGE
    failed = done.threads[1].page  # the reason, for visited_url.error (it was None: a poison row saying nothing)
    assert failed.error_kind == "poison" and failed.error.startswith(
        "the result of executor ex does not decode: done.threads.page (thread 2).links: expected a list")


@pytest.mark.parametrize("field, value", [("fetch_seconds", float("nan")), ("parse_seconds", -1e308),
                                          ("size", -5), ("retry_after", float("inf")), ("crawl_delay", -1.0),
                                          ("status", 1000), ("render_seconds", float("nan"))])
def test_a_page_with_an_absurd_number_fails_its_thread_saying_why(field, value):
    """A hostile executor's NaN fetch_seconds reached the crawl table's NOT NULL column (SQLite
    stores NaN as NULL): the client failed "the crawl database failed" on every resume, as the
    manager kept delivering it. Numbers a page reports are checked at the door: the manager
    refuses a relayed page whose envelope is absurd (a strike), the client fails the thread."""
    good = p.PageResult(url="http://a.test/", status=200, content="<html></html>")
    raw = msgpack.packb({"attempt_id": 3, "page": {**msgspec.to_builtins(good), field: value}}, use_bin_type=True)
    if field in ("size", "retry_after", "crawl_delay", "status"):  # the manager reads these
        assert field in p.decode([p.PROTOCOL_VERSION, b"result", raw], relay=True).page.unreadable
    else:
        relayed = p.decode([p.PROTOCOL_VERSION, b"result", raw], relay=True)
        done = p.decode(p.encode(p.ThreadDone("app", [p.FinishedThread(3, "ex", 1, False, relayed.page)])))
        (thread,) = done.threads
        assert thread.failed and field in thread.page.error
    # the envelope's fields are checked (its attempt is taken back); error kinds are the protocol's
    assert "expected str" in p.decode(frames(b"result", {"attempt_id": 1, "page": {"url": 5}}), relay=True).page.unreadable
    assert "error_kind" in p.decode(frames(b"result", {"attempt_id": 1, "page": {"url": "u", "error_kind": "nosuch"}}),
                                    relay=True).page.unreadable


@pytest.mark.parametrize("text", ["", "é", "a" * 31, "a" * 32, "é" * 127, "é" * 128, "ü" * 32767, "ü" * 32768,
                                  "\ufeff<p>Ünï ✓ 🙂</p>" * 5000])
def test_text_that_keeps_its_utf8_goes_on_the_wire_as_the_same_msgpack_str(text):
    """An executor's page content decoded strictly from UTF-8 is sent as its bytes (no second
    encoding): the wire is byte for byte what encoding the text gives, at every msgpack str
    size (fixstr, str 8, 16 and 32), and the receiver gets a plain str back."""
    plain, kept = p.PageResult(url="http://a.test/"), p.PageResult(url="http://a.test/")
    plain.content = text
    kept.content = p.Utf8Text.decode(text.encode())
    assert kept.content == text and kept.content.utf8 == text.encode()
    assert bytes(p.encode_page(kept)) == bytes(p.encode_page(plain))
    back = p.decode(p.encode(p.Result(1, kept))).page.content
    assert back == text and type(back) is str


def test_utf8_text_refuses_bytes_that_are_not_utf8():
    with pytest.raises(UnicodeDecodeError):
        p.Utf8Text.decode(b"caf\xe9")
    with pytest.raises(UnicodeDecodeError):
        p.Utf8Text.decode(b"\xed\xa0\x80")  # an encoded surrogate: not UTF-8, so never sent as such


def test_instruction_reads_typed_keys_and_ignores_the_rest():
    ins = p.Instruction.read({"scope": ["a.test"], "ifNoneMatch": '"v"', "render": True, "waitFor": 7, "x": 1})
    assert (ins.scope, ins.if_none_match, ins.render, ins.wait_for, ins.has_rules) == (["a.test"], '"v"', True, None, False)
    assert p.Instruction.read(None) == p.Instruction()
    assert p.Instruction(scope=["a.test"], follow_rules=[]).wire() == {"scope": ["a.test"], "followRules": []}
    assert p.Instruction.read({"keepRules": []}).has_rules
