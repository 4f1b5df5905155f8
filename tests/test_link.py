"""The manager endpoints of a peer with hot-standby managers (:mod:`gridcrawl.link`), without
sockets, and the comma-separated form of ``--manager`` in the configuration and environment."""

from __future__ import annotations

import pytest
import typer

from gridcrawl.config import run_program
from gridcrawl.link import ManagerEndpoints, split_endpoints

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
