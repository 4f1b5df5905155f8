"""``gridcrawl-client``: crawl from seed URLs through the grid into a crawl database, or, as an
operator, pause, resume or cancel an application (``gridcrawl-client --manager M pause APP_ID``)."""

from __future__ import annotations

import logging
import os
import re
import sys
import time
from pathlib import Path
from typing import List, Sequence

import typer

from gridcrawl.cli_common import (SETTING_OPTIONS, check_wait_for, domain, fail, manager_endpoints,
                                  peer_credentials, setting_options, setup_logging, stop_on_signals, take_lock)
from gridcrawl.config import run_program, settings as configured_settings
from gridcrawl.entry import exit_by_signal
from gridcrawl.errors import DatabaseUnavailable
from gridcrawl.settings import Settings
from gridcrawl.words import counted

log = logging.getLogger("gridcrawl.client")

app = typer.Typer(add_completion=False, rich_markup_mode="markdown",
                  help="The gridcrawl crawler application: keeps the crawl's "
                  "document / visited_url / to_visit_url tables and submits one grid thread per URL.")


RETRY_HELP = ("queue the visited URLs that failed again before crawling: 'all', or error kinds, "
              "e.g. blocked,timeout,http_503 (the summary lists them); 'robots' the URLs robots.txt "
              "disallowed, which 'all' leaves")
SEEDS_FILE_HELP = "file of seed URLs, one per line (# comments and blank lines skipped; - for standard input)"


#: The sections of ``--help`` the options generated from Settings go to (by their group).
PANELS = {"connection": "Connection and login", "scope": "Strategy and limits", "strategy": "Strategy and limits",
          "recrawl": "Recrawl"}


@app.command()
@setting_options("client", PANELS)
def crawl(
    ctx: typer.Context,
    seeds: List[str] = typer.Argument(None, help="seed URLs (none: resume the crawl in --db); or "
                                      "pause|resume|cancel APPLICATION_ID to control a running crawl"),
    manager: List[str] = typer.Option(..., help="the manager's endpoint, e.g. tcp://HOST:9000; repeat it "
                                      "(or separate with commas) for hot-standby managers, tried in order"),
    db: str = typer.Option(None, help="SQLAlchemy URL of the crawl database, e.g. sqlite:///crawl.db "
                           "(required to crawl)"),
    given: dict = SETTING_OPTIONS,
    allow_domain: List[str] = typer.Option(None, parser=domain, help="also crawl this domain and its subdomains "
                                           "(repeatable)",
                                           metavar="DOMAIN"),
    name: str = typer.Option("gridcrawl", help="application name recorded at the manager",
                                           rich_help_panel="Strategy and limits"),
    rules: str = typer.Option(None, help="keep/follow rules file (.toml or .csv, docs/strategies.md); "
                              "its base URLs are seeds; stored in the crawl database for a resume",
                                    rich_help_panel="Strategy and limits"),
    focus: str = typer.Option(None, help='focused crawl: keywords, e.g. "crawler politeness" (frontier by relevance)',
                                             rich_help_panel="Strategy and limits"),
    min_relevance: float = typer.Option(None, help="focused crawl: links scoring below this (0..1) are not followed [0]",
                                             rich_help_panel="Strategy and limits"),
    order: str = typer.Option(None, help="frontier order: bfs, dfs or priority [bfs; priority with --focus]",
                                           rich_help_panel="Strategy and limits"),
    render: bool = typer.Option(None, "--render/--no-render", help="render every page in a headless browser "
                                "(its grid threads need an executor started with --render); default: as stored "
                                "for a resumed crawl, else off; page types can ask for it in the rules file",
                                rich_help_panel="Strategy and limits"),
    wait_for: str = typer.Option(None, help="with rendering: a CSS selector the browser waits for before "
                                 "taking the DOM (default: until the network is idle)",
                                 rich_help_panel="Strategy and limits"),
    structured_data: bool = typer.Option(False, "--structured-data", help="semantic crawl: read RDF documents and "
                                         "the JSON-LD, microdata, RDFa and Open Graph of pages into the triple table",
                                         rich_help_panel="Strategy and limits"),
    focus_ontology: Path = typer.Option(None, help="focused crawl guided by an ontology (Turtle, RDF/XML, OWL): "
                                        "frontier by its classes' and properties' IRIs and labels; implies "
                                        "--structured-data", rich_help_panel="Strategy and limits"),
    extract: str = typer.Option(None, help="item spec file (TOML, docs/items.md): items the executors extract "
                                "from the pages; stored in the crawl database for a resume",
                                rich_help_panel="Strategy and limits"),
    seeds_file: str = typer.Option(None, help=SEEDS_FILE_HELP, metavar="FILE"),
    retry_failed: str = typer.Option(None, metavar="all|KIND,...", help=RETRY_HELP),
    recrawl: bool = typer.Option(False, "--recrawl", help="visit again the stored documents whose next visit is "
                                 "due (conditional requests; docs/recrawl.md), then the new links they bring",
                                 rich_help_panel="Recrawl"),
    recrawl_all: bool = typer.Option(False, "--recrawl-all", help="like --recrawl, but every stored document, "
                                     "due or not", rich_help_panel="Recrawl"),
    watch: bool = typer.Option(False, "--watch", help="with --recrawl: stay open and visit documents as they "
                               "come due, until stopped (SIGINT/SIGTERM)", rich_help_panel="Recrawl"),
    progress: bool = typer.Option(True, help="show a progress bar", rich_help_panel="Output and logs"),
    user: str = typer.Option(None, help="log in as this user (password from $GRIDCRAWL_PASSWORD or a prompt)",
                                          rich_help_panel="Connection and login"),
    curve_secret: Path = typer.Option(None, help="this client's CURVE secret key file (gridcrawl keys new); "
                                      "needs --curve-server-key", rich_help_panel="Connection and login"),
    curve_server_key: Path = typer.Option(None, help="the manager's CURVE public key file",
                              rich_help_panel="Connection and login"),
    log_level: str = typer.Option("INFO", help="DEBUG, INFO, WARNING or ERROR", rich_help_panel="Output and logs"),
    log_file: str = typer.Option(None, help="write the log to this file instead of stderr",
                              rich_help_panel="Output and logs"),
    log_json: bool = typer.Option(False, "--log-json", help="log one JSON object per line",
                                        rich_help_panel="Output and logs"),
    config: Path = typer.Option(None, help="TOML configuration file (then GRIDCRAWL_* variables, then these "
                                "options; see docs/operations.md)"),
) -> None:
    """Crawl SEEDS (or resume the crawl stored in --db) until done or --max-pages; or
    ``pause|resume|cancel APPLICATION_ID`` (a unique prefix of 4+ characters will do)."""
    setup_logging(log_level, log_file, log_json)
    if seeds and seeds[0] in CONTROL_ACTIONS:
        control(ctx, seeds[0], seeds[1:], manager, user, curve_secret, curve_server_key, given["connect_timeout"])
        return
    if db is None:
        if seeds and "://" not in seeds[0] and "." not in seeds[0] and "/" not in seeds[0]:
            # a word, not a URL: an action mistyped ("stop APP_ID") rather than a crawl without --db
            fail(f"{seeds[0]!r} is no action: give pause, resume or cancel APPLICATION_ID; or, to crawl, seed "
                 "URLs and --db (the crawl database, e.g. sqlite:///crawl.db)")
        fail("--db is required to crawl (the crawl database, e.g. sqlite:///crawl.db)")
    mode = recrawl_mode(recrawl, recrawl_all, watch)
    try:
        manager = manager_endpoints(manager)
        settings = configured_settings(ctx, **given)
    except ValueError as exc:
        fail(str(exc))
    seeds = seed_list(seeds or [], seeds_file)
    curve, password = peer_credentials(user, curve_secret, curve_server_key, manager)
    counts = run_crawl(settings, manager, db, seeds, allow_domain or [], name=name, show_progress=progress,
                       rules=rules, focus=focus, min_relevance=min_relevance, order=order, user=user,
                       password=password, curve=curve, retry_failed=parse_retry_kinds(retry_failed),
                       rerun=rerun_command("gridcrawl-client"),
                       files=[("log", log_file)] if log_file else [], recrawl=mode, watch=watch, extract=extract,
                       structured_data=structured_data, focus_ontology=focus_ontology,
                       render=render, wait_for=wait_for)
    exit_status(counts)


def recrawl_mode(recrawl: bool, recrawl_all: bool, watch: bool) -> str | None:
    """The recrawl mode of the options: ``"all"`` (``--recrawl-all``), ``"due"``
    (``--recrawl``) or ``None``. Exits with status 2 when ``--watch`` comes without a recrawl."""
    if recrawl and recrawl_all:
        fail("--recrawl and --recrawl-all exclude each other: --recrawl visits the stored pages that are due, "
             "--recrawl-all every one")
    mode = "all" if recrawl_all else "due" if recrawl else None
    if watch and mode is None:
        fail("--watch needs --recrawl (or --recrawl-all)")
    return mode


CONTROL_ACTIONS = ("pause", "resume", "cancel")


def control(ctx, action: str, application_ids: list[str], manager: str, user: str | None,
            curve_secret: Path | None, curve_server_key: Path | None, connect_timeout: float) -> None:
    """``gridcrawl-client … pause|resume|cancel APPLICATION_ID…``: ask the manager, print the
    new state of each application. Exit status 2 (one-line error) when the manager refuses
    (unknown application, bad credentials, no permission) or does not answer."""
    from gridcrawl.client.app import ManagerUnreachable, Refused, control_application
    if not application_ids:
        fail(f"{action} needs the application id, or 4 or more of its first characters: the crawl summary's "
             "application row, gridcrawl report --db MANAGER_DB (its applications), the dashboard or the client's "
             f"log show it (gridcrawl-client --manager ENDPOINT {action} ID)")
    try:
        manager = manager_endpoints(manager)
        settings = configured_settings(ctx, connect_timeout=connect_timeout)
    except ValueError as exc:
        fail(str(exc))
    curve, password = peer_credentials(user, curve_secret, curve_server_key, manager)
    for application_id in application_ids:
        try:
            done = control_application(settings, manager, application_id, action, user=user, password=password,
                                       curve=curve)
        except ManagerUnreachable as exc:
            fail(str(exc))
        except Refused as exc:
            fail(f"the manager refused to {action} {application_id}: {exc}")
        typer.echo(f"application {done.application_id}: {done.state}")


def resolve_strategy(store, seeds: list[str], *, rules: str | None = None, focus: str | None = None,
                     min_relevance: float | None = None, order: str | None = None,
                     structured_data: bool = False, focus_ontology: str | Path | None = None,
                     extract: str | None = None, render: bool | None = None, wait_for: str | None = None):
    """The crawl's :class:`~gridcrawl.client.frontier.Strategy` from the options, falling back to
    what the crawl database stored (a resumed crawl keeps its rules, page types, focus,
    ontology, structured data, order, item spec and rendering), and the seeds plus the rules'
    base URLs. Stores the options given. Exits with status 2 (one-line error naming the rule, or
    the item spec's file, item and field) on an invalid rules file, item spec, focus, ontology,
    threshold or order, and on ``--min-relevance`` or ``--order priority`` without a focus (given
    or stored), where they would change nothing.

    Returns ``(strategy, seeds)``.
    """
    from gridcrawl.client.frontier import Strategy
    import json
    from gridcrawl.focus import Focus, OntologyFocus
    from gridcrawl.rules import PageType, RuleError, load_page_types, load_rules

    given_min_relevance = min_relevance
    stored = store.metas()  # read once; what changes is written once, at the end, if nothing was refused
    store_meta: dict[str, str] = {}
    try:
        if rules is not None:
            rule_list = load_rules(rules)
            page_types = load_page_types(rules, rule_list)
            store_meta["page_types"] = json.dumps({k: v.as_dict() for k, v in page_types.items()})
            seeds = list(dict.fromkeys([*seeds, *(r.base_url for r in rule_list)]))
        else:
            rule_list = store.stored_rules()
            page_types = {k: PageType(bool(v.get("render")), v.get("wait_for"))
                          for k, v in json.loads(stored.get("page_types") or "{}").items()}
    except RuleError as exc:
        fail(f"invalid rules: {exc}")
    items = resolve_items(store, extract)
    given_wait_for = wait_for
    if render is None:
        render = stored.get("render") == "1"
    if wait_for is None:
        wait_for = stored.get("wait_for") or None
    store_meta.update(render="1" if render else "0", wait_for=wait_for or "")
    try:
        if focus is not None and focus_ontology is not None:
            raise ValueError(FOCUS_BOTH)
        if focus_ontology is not None:
            focused = OntologyFocus.load(focus_ontology)
            store_meta.update(focus_ontology=str(Path(focus_ontology).resolve())[:1024], focus="")
        elif focus is not None:
            focused = Focus.parse(focus)
            store_meta.update(focus=" ".join(focused.terms), focus_ontology="")
        elif stored.get("focus_ontology"):
            focused = OntologyFocus.load(stored["focus_ontology"])
        else:
            focused = Focus.parse(stored["focus"]) if stored.get("focus") else None
        structured_data = (structured_data or focus_ontology is not None or isinstance(focused, OntologyFocus)
                           or stored.get("structured_data") == "1")
        if focused is None and (min_relevance is not None or order == "priority"):
            raise ValueError(unfocused(min_relevance, order))
        if focused is not None and order in ("bfs", "dfs"):
            typer.echo(f"warning: {focus_order_note(order, min_relevance)}", err=True)
        if min_relevance is None:
            min_relevance = float(stored.get("min_relevance", "0"))
        if order is None:  # a focus given now implies priority order (a resumed plain crawl stored bfs)
            order = ("priority" if focus is not None or focus_ontology is not None
                     else stored.get("order") or ("priority" if focused else "bfs"))
        strategy = Strategy(order=order, rules=rule_list, focus=focused, min_relevance=min_relevance,
                            structured_data=structured_data, items=items, render=render, wait_for=wait_for,
                            page_types=page_types)
    except ValueError as exc:
        if extract is None and items and str(exc).startswith("item "):  # the spec stored, not one given
            fail(f"invalid item spec: the one stored in the crawl database: {exc} (give --extract FILE with a "
                 f"spec for these rules)")
        fail(str(exc))
    check_wait_for(given_wait_for, render or any(t.render for t in page_types.values())
                   or any(spec.render for spec in items))
    # nothing refused: what was given is stored (a refused run used to replace the crawl's rules
    # first, so that even a resume without options was refused after it)
    if rules is not None:
        before, after, done = ([_rule_key(r) for r in store.stored_rules()], [_rule_key(r) for r in rule_list],
                               store.counts()["visited"])
        _warn_changed(store, "rules", rules, before, after, done, "URLs were visited",
                      "a resumed crawl does not visit again the pages visited already; a recrawl visits each "
                      "stored page once in full, with no conditional request, and applies them (--recrawl as "
                      "the pages come due, --recrawl-all at once)")
        store.save_rules(rule_list)
        if before and before != after:  # the summary's "found nothing" looks only at pages fetched since
            from gridcrawl.db import utcnow
            store_meta["rules_since"] = utcnow().isoformat()
        if before and before != after and done:
            # a 304 Not Modified brings no body to apply the new rules to (--recrawl-all said it
            # applied them to every page, and the pages it found unchanged kept their old links)
            store.forget_validators()
            _warn_unruled(store, rules, rule_list)
    if extract is not None:
        save_item_spec(store, extract, items)
    refocused = focused is not None and (store_meta.get("focus"), store_meta.get("focus_ontology")) not in (
        (None, None), (stored.get("focus", ""), stored.get("focus_ontology", "")))
    store.set_metas(store_meta | {"min_relevance": repr(strategy.min_relevance), "order": strategy.order,
                                  "structured_data": "1" if strategy.structured_data else "0"})
    if refocused and (done := store.counts()["visited"]):
        _rescore(store, focused, stored, done)
    elif (focused is not None and given_min_relevance is not None
          and given_min_relevance > float(stored.get("min_relevance") or "0")
          and (dropped := store.drop_below(given_min_relevance))):
        # the waiting links were scored by this focus, exactly: those below the new threshold go,
        # as they would not have been queued (they were visited when the crawl was resumed)
        log.warning(
            "--min-relevance %g is higher than this crawl's %g: %s waiting in its frontier, scoring below it, "
            "%s left out", given_min_relevance, float(stored.get("min_relevance") or "0"), counted(dropped, "link"),
            "is" if dropped == 1 else "are")
    return strategy, seeds


def _warn_unruled(store, source: str, rules: list) -> None:
    """One WARNING when pages wait in the frontier of a crawl whose rules changed (to ``rules``,
    from file ``source``) with page types no rule names any more (neither as ``from_type`` nor as
    ``to_type``): the old rules queued them, the crawl visits them, and nothing on them is
    followed or kept."""
    named = {r.from_type for r in rules} | {r.to_type for r in rules if r.to_type}
    stale = {t: n for t, n in store.waiting_page_types().items() if t is not None and t not in named}
    if stale:
        total = sum(stale.values())
        log.warning(
            "%s waiting in this crawl's frontier %s page types the old rules gave and no rule in %s names "
            "(%s): %s visited, and nothing on them is followed or kept", counted(total, "page"),
            "has" if total == 1 else "have", source, ", ".join(f"{t}: {n:,}" for t, n in sorted(stale.items())),
            "it is" if total == 1 else "they are")


def _rescore(store, focused, stored: dict, done: int) -> None:
    """A focus given to a crawl that has visited ``done`` URLs with another focus (``stored``:
    the crawl's metas before this run), or none: score its waiting links again by the new one
    (:meth:`~gridcrawl.client.store.CrawlStore.rescore_frontier`; they kept the old scores and
    were claimed in that order) and say so in one WARNING."""
    was = (f"'{stored['focus']}'" if stored.get("focus") else f"the ontology {stored['focus_ontology']}"
           if stored.get("focus_ontology") else "no focus")
    count = store.rescore_frontier(focused)
    log.warning(
        "the focus changed since this crawl visited %s (it was %s); %s waiting %s scored again by the new one, "
        "from %s URL and the stored page that links %s (anchor texts are not stored); links earlier runs left "
        "out below --min-relevance are not recorded, so the new focus reaches them only through pages visited "
        "from now on", counted(done, "URL"), was, counted(count, "link"), "was" if count == 1 else "were",
        "its" if count == 1 else "their", "it" if count == 1 else "them")


FOCUS_BOTH = "--focus and --focus-ontology exclude each other: give keywords or an ontology"


def unfocused(min_relevance: float | None, order: str | None) -> str:
    """Why ``--min-relevance`` (given: not None) or ``--order priority`` is refused in a crawl
    without a focus (given or stored)."""
    return (f"{'--min-relevance' if min_relevance is not None else '--order priority'} works on a focused crawl's "
            "relevance scores, and this crawl has no focus (without one every URL scores alike): give --focus "
            "KEYWORDS or --focus-ontology FILE with it, or leave it out")


def focus_order_note(order: str, min_relevance: float | None) -> str:
    """What a focused crawl given ``--order bfs`` or ``dfs`` (``order``) does: the order given
    wins over the priority order a focus implies, so relevance only filters links (with
    ``--min-relevance``, None when not given)."""
    what = "breadth-first" if order == "bfs" else "depth-first"
    return (f"--order {order} with a focus: links are taken {what}, not by relevance (--focus implies --order "
            "priority when no --order is given); " + (
                f"the focus only leaves out links scoring below --min-relevance {min_relevance:g}"
                if min_relevance else "without --min-relevance the focus changes nothing of what is crawled "
                "(it only records scores)"))


def check_new_strategy(*, focus: str | None = None, focus_ontology: str | Path | None = None,
                       min_relevance: float | None = None, order: str | None = None,
                       retry_failed: list[str] | None = None) -> None:
    """Exit with status 2 (one line) on strategy options a new crawl refuses, nothing being
    stored that could complete them: ``--focus`` with ``--focus-ontology``, an unknown
    ``--order``, a ``--min-relevance`` outside 0 ... 1, keywords that make no focus,
    ``--min-relevance`` or ``--order priority`` without a focus, an unknown ``--retry-failed``
    kind, a ``--focus-ontology`` file that cannot be read, does not parse or names no term.
    Called before a new crawl's database is created, so that a refused run creates nothing
    (:func:`resolve_strategy` checks them again with what a resumed crawl stored)."""
    from gridcrawl.client.frontier import ORDERS
    from gridcrawl.focus import Focus
    if focus is not None and focus_ontology is not None:
        fail(FOCUS_BOTH)
    if order is not None and order not in ORDERS:
        fail(f"--order must be one of {', '.join(ORDERS)}, not {order!r}")
    if min_relevance is not None and not 0.0 <= min_relevance <= 1.0:
        fail(f"--min-relevance must be between 0 and 1, not {min_relevance!r}")
    if focus is None and focus_ontology is None and (min_relevance is not None or order == "priority"):
        fail(unfocused(min_relevance, order))
    if focus is not None:
        try:
            Focus.parse(focus)
        except ValueError as exc:
            fail(str(exc))
    if focus_ontology is not None:  # before gridcrawl run starts its manager and executors
        from gridcrawl.focus import OntologyError, OntologyFocus
        try:
            OntologyFocus.load(focus_ontology)
        except OntologyError as exc:
            fail(str(exc))
    if retry_failed:
        _refuse_unknown_kinds(retry_failed, set())


def _rule_key(rule) -> tuple:
    """What a rule does (its fields but where it was read), to tell whether rules changed."""
    return (rule.base_url, rule.rule_type, rule.from_type, rule.to_type, rule.pattern, rule.element_id,
            rule.element_class, rule.element_tag)


def _warn_changed(store, what: str, source: str, before: list, after: list, done: int, done_text: str,
                  remedy: str) -> None:
    """One WARNING when a resumed crawl is given ``what`` (its rules, its item spec: from file
    ``source``) that differ from those its ``done`` URLs or items were made with."""
    if before and before != after and done:
        log.warning(
            "the %s in %s changed since this crawl's %d %s; %s", what, source, done, done_text, remedy)


def fetch_command(group, strategy) -> str:
    """``gridcrawl fetch URL`` for the example URL of error group ``group`` (a
    :class:`~gridcrawl.client.store.ErrorGroup`), rendered as the crawl renders it: with
    ``--render`` (and the ``--wait-for`` its page would have: the page type's, an item spec's, the
    crawl's) when the crawl renders that page — every page, or its page type or an item spec
    says ``render = true`` — or the failure is the browser's (``render``), and with ``--structured-data`` when the crawl is
    semantic or the failure is an RDF parser's (``rdf_parse``, ``rdf_limit``: a plain fetch
    neither downloads nor parses an RDF document, so it showed a 200 and no error)."""
    import shlex
    from gridcrawl.items import specs_for
    command = f"gridcrawl fetch {shlex.quote(group.url)}"
    rendered = strategy.render_instruction(group.page_type, specs_for(strategy.items, group.url, group.page_type))
    if rendered or group.kind == "render":
        command += " --render"
        if rendered.get("waitFor"):
            command += f" --wait-for {shlex.quote(rendered['waitFor'])}"
    if strategy.structured_data or group.kind in ("rdf_parse", "rdf_limit"):
        command += " --structured-data"
    return command


def check_item_spec(path: str) -> list:
    """The validated item specs of file ``path``; exits with status 2 (one line naming the
    file, the item and the field) when it is invalid."""
    from gridcrawl.items import ItemSpecError, load_spec
    try:
        return load_spec(path)
    except ItemSpecError as exc:
        fail(f"invalid item spec: {exc}")


def resolve_items(store, extract: str | None) -> list:
    """The crawl's item specs: those of file ``extract`` (validated; :func:`save_item_spec`
    stores them), else those a previous run stored (none: no items)."""
    from gridcrawl.client.items import stored_spec
    from gridcrawl.items import ItemSpecError
    if extract is not None:
        return check_item_spec(extract)
    try:
        return stored_spec(store.engine)
    except ItemSpecError as exc:
        fail(f"invalid item spec: {exc}")


def save_item_spec(store, extract: str, specs: list) -> None:
    """Store the item spec of file ``extract`` (``specs``, validated) in the crawl database,
    with a WARNING when it differs from the one the crawl's items were extracted with."""
    from gridcrawl.client.items import save_spec, stored_spec
    from gridcrawl.db import shown_url
    from gridcrawl.rules import read_text_file
    from gridcrawl.items import ItemSpecError
    try:
        before = stored_spec(store.engine)
    except ItemSpecError:
        before = None
    extract_all = f"gridcrawl extract --db {shown_url(str(store.engine.url))} --extract {extract}"
    items = store.item_count()
    if before and before != specs:
        _warn_changed(store, "item spec", extract, before, specs, items, "items were extracted",
                      f"pages not visited again (or answering 304 Not Modified to a recrawl) keep their old items; "
                      f"{extract_all} applies it to every stored page")
    if before != specs and not items and (pages := store.counts()["documents"]):
        # a crawl begun without --extract (or whose spec found nothing): its pages are not parsed
        # again, and the items table said "none found: no page it applies to" of pages it did
        log.warning(
            "the item spec in %s is new to this crawl's %d stored page%s, which keep no items unless "
            "visited again; %s applies it to every stored page", extract, pages, "" if pages == 1 else "s",
            extract_all)
    save_spec(store.engine, extract, read_text_file(Path(extract)))


#: Exit status of a crawl in which every page of the run failed (a user error is 2, cli_common).
CRAWL_FAILED = 1


def parse_retry_kinds(value: str | None) -> list[str] | None:
    """``--retry-failed``'s value: None (option not given), ``[]`` (every failed URL: ``all``)
    or the error kinds named, comma-separated (``blocked,timeout,http_503``; the summary's
    ``http 503`` is taken as ``http_503``)."""
    if value is None:
        return None
    kinds = [k.strip().replace(" ", "_") for k in value.split(",") if k.strip()]  # "http 503": the summary's label
    return [] if kinds in ([], ["all"]) else kinds



def _check_retry_kinds(store, kinds: list[str]) -> None:
    """Refuse (exit 2) an error kind that is neither one gridcrawl records, nor in the database,
    nor ``http_NNN`` (one HTTP status's failures)."""
    import sqlalchemy as sa
    from gridcrawl import models
    with store.engine.connect() as conn:
        stored = set(conn.scalars(sa.select(models.visited_url.c.error_kind).distinct()
                                  .where(models.visited_url.c.error_kind.is_not(None))))
    _refuse_unknown_kinds(kinds, stored)


def _refuse_unknown_kinds(kinds: list[str], stored: set[str]) -> None:
    """Exit with status 2 when an error kind of ``kinds`` is neither one gridcrawl records, nor
    in ``stored`` (the crawl database's), nor ``http_NNN``."""
    from gridcrawl.executor.fetch import ErrorKind
    from gridcrawl.client.store import http_status_kind
    known = {k.value for k in ErrorKind} | {"poison", "lost"} | stored
    unknown = [k for k in kinds if k not in known and not http_status_kind(k)]
    if unknown:
        status = re.fullmatch(r"(?i)(?:http)?[-_]?([1-5][0-9][0-9])", unknown[0])  # 404, http404, http-404
        meant = f" (did you mean http_{status.group(1)}, the failures of that HTTP status?)" if status else ""
        fail(f"--retry-failed: unknown error kind {unknown[0]!r}{meant} (kinds: {', '.join(sorted(known))}, "
             f"or http_NNN for one HTTP status, as http_503)")


def seed_list(seeds: Sequence[str], seeds_file: str | None = None) -> list[str]:
    """A command's seed URLs: ``seeds`` (its arguments), then the lines of ``seeds_file`` (one
    URL per line, UTF-8; blank lines and lines starting with ``#`` skipped; ``"-"`` reads
    standard input), each once, in order. Every one is checked as the crawl will queue it
    (:func:`gridcrawl.client.store.check_seed`), so a bad line stops the command before any
    process starts: exit status 2 with one message naming the first five bad seeds (and their
    line numbers), a URL without a scheme with the ``http://`` form it may have meant. Also
    exits 2 when ``seeds_file`` cannot be read or holds no URL."""
    from gridcrawl.client.store import check_seed
    from gridcrawl.urls import InvalidURL, address_hint
    given = [(None, seed) for seed in seeds]
    if seeds_file is not None:
        try:
            if seeds_file == "-":
                import sys
                if sys.stdin.isatty():  # not a pipe: it waited for the keyboard, saying nothing
                    typer.echo("reading seed URLs from standard input, one per line (Ctrl-D to end)", err=True)
                text = sys.stdin.read()
            else:
                text = Path(seeds_file).read_text(encoding="utf-8-sig")
        except (OSError, UnicodeDecodeError) as exc:
            fail(f"cannot read --seeds-file {seeds_file}: {exc}")
        lines = [(n, line.strip()) for n, line in enumerate(text.splitlines(), 1)]
        lines = [(n, line) for n, line in lines if line and not line.startswith("#")]
        if not lines:
            fail(f"--seeds-file {seeds_file} holds no URL (one per line)")
        if (table := _table_hint(seeds_file, [line for _, line in lines[:2]])) is not None:
            fail(table)
        given += lines
    bad = []
    for line, seed in given:
        try:
            check_seed(seed)
        except InvalidURL as exc:
            where = f"{seeds_file} line {line}: " if line is not None else ""
            bad.append(f"{where}{exc}{address_hint(seed.strip())}")
    if bad:
        more = f"; and {len(bad) - 5} more" if len(bad) > 5 else ""
        fail(f"invalid seed URL{'s' if len(bad) > 1 else ''}: {'; '.join(bad[:5])}{more}")
    return list(dict.fromkeys(seed for _, seed in given))


def _table_hint(seeds_file: str, first: list[str]) -> str | None:
    """The error for a seeds file whose ``first`` lines (one or two) are rows of a table (CSV,
    or tab-separated: an export, a spreadsheet) with a URL column rather than one URL per line,
    naming the ``cut`` command that takes that column out; None for a list of URLs. Each row
    was refused as an invalid URL, with its ``http://`` form "meant" (``http://id,url,...``)."""
    import re
    import shlex
    sep = "\t" if "\t" in first[0] else "," if "," in first[0] else None
    if sep is None:
        return None
    rows = [line.split(sep) for line in first]
    header = [field.strip().strip('"').lower() for field in rows[0]]
    column = next((i for i, field in enumerate(header) if field in ("url", "urls", "seed", "address", "link")), None)
    data = rows[1] if column is not None and len(rows) > 1 else rows[0]
    if column is None:  # no header: a row that is no URL itself (a URL may hold a comma) but has one
        from gridcrawl.client.store import check_seed
        from gridcrawl.urls import InvalidURL
        try:
            check_seed(first[0])
            return None
        except InvalidURL:
            column = next((i for i, field in enumerate(data) if re.match(r"(?i)\s*\"?https?://", field)), None)
    if column is None or len(data) < 2:
        return None
    cut = f"cut{' -d,' if sep == ',' else ''} -f{column + 1} {shlex.quote(seeds_file)}" + (
        " | tail -n +2" if data is not rows[0] else "")
    return (f"--seeds-file {seeds_file} is a table ({'comma' if sep == ',' else 'tab'}-separated columns), not one "
            f"URL per line: its column {column + 1} holds the URLs ({cut} > seeds.txt takes them out)")


def open_crawl(settings: Settings, db: str, seeds: list[str], allow_domains: list[str], *,
               rules: str | None = None, focus: str | None = None, min_relevance: float | None = None,
               order: str | None = None, retry_failed: list[str] | None = None, recrawl: bool = False,
               structured_data: bool = False, focus_ontology: str | None = None, extract: str | None = None,
               render: bool | None = None, wait_for: str | None = None, command: str = "gridcrawl-client"):
    """Open the crawl database (with the recrawl schedule of ``settings``; ``recrawl``: it must
    hold documents), choose the strategy (:func:`resolve_strategy`), queue the failed URLs
    again (``retry_failed``, as :func:`run_crawl`) and ``seeds``, and compute the scope:
    what every crawl does before its first page (``gridcrawl-client``, ``gridcrawl run``,
    ``gridcrawl spark``: ``command``, which the crawler lock's holder line names, :func:`_lock_crawl`).
    Returns ``(store, scope)``. Exits with status 2 (one-line error) on
    an invalid seed, invalid rules, an unusable database, or no seeds and no crawl to resume."""
    from gridcrawl.db import open_database
    from gridcrawl.client.store import CrawlStore

    seeds = seed_list(seeds)
    _check_files_first(rules, extract)
    if _new_sqlite(db):  # refused before the file is made: a refused run creates nothing
        check_new_strategy(focus=focus, focus_ontology=focus_ontology, min_relevance=min_relevance, order=order,
                           retry_failed=retry_failed)
    # SQLite: before the database's first transaction, which waits silently while gridcrawl extract writes
    lock = _lock_crawl(db, None, command=command)
    from gridcrawl.schedule import AdaptiveSchedule
    try:
        store = CrawlStore(open_database(db, existing=not seeds and rules is None),
                           schedule=AdaptiveSchedule.from_settings(settings), keep_versions=settings.keep_versions)
    except DatabaseUnavailable as exc:
        fail(str(exc) if seeds or rules is not None else
             f"nothing to recrawl: {exc}" if recrawl else f"no seed URLs given and no crawl to resume: {exc}")
    lock = lock or _lock_crawl(db, store, command=command)  # before anything of the crawl is read or written
    import sqlalchemy as sa
    try:
        seeds = _prepare_crawl(store, seeds, rules=rules, focus=focus, min_relevance=min_relevance, order=order,
                               retry_failed=retry_failed, recrawl=recrawl, structured_data=structured_data,
                               focus_ontology=focus_ontology, extract=extract, render=render, wait_for=wait_for)
    except sa.exc.DBAPIError as exc:  # read-only, full, a lost server: one line, not a traceback
        from gridcrawl.db import describe_error
        fail(f"the crawl database failed: {describe_error(exc, store.engine)}; no page was crawled: run the "
             "same command again once it takes writes")
    if not seeds and store.get_meta("allowed_domains") is None:
        fail("no seed URLs given and no crawl to resume in the database")
    scope = store.scope(seeds, allow_domains, settings.max_depth, settings.max_pages_per_host)
    store.max_crawl_delay = settings.max_crawl_delay
    scope.follow_nofollow = settings.follow_nofollow
    scope.trap_near_duplicates, scope.trap_distance = settings.trap_near_duplicates, settings.trap_distance
    store.lock = lock  # held while the store lives
    return store, scope


def _prepare_crawl(store, seeds: list[str], *, rules, focus, min_relevance, order, retry_failed, recrawl,
                   structured_data, focus_ontology, extract, render, wait_for) -> list[str]:
    """:func:`open_crawl`'s writes before the crawl: the strategy, the failed URLs queued again
    and the seeds added. Returns the seeds. Raises SQLAlchemy's ``DBAPIError`` when the
    database fails."""
    if recrawl and not store.counts()["documents"]:
        fail("nothing to recrawl: the crawl database has no documents yet; crawl first (the same command with the "
             "seed URLs, without --recrawl), then recrawl")
    store.strategy, seeds = resolve_strategy(store, list(seeds), rules=rules, focus=focus,
                                             min_relevance=min_relevance, order=order,
                                             structured_data=structured_data, focus_ontology=focus_ontology,
                                             extract=extract, render=render, wait_for=wait_for)
    if retry_failed is not None:
        _check_retry_kinds(store, retry_failed)
        retried, took = _retry_failed(store, retry_failed)
        typer.echo(f"{counted(retried, 'failed URL')} queued again{f' in {took:.0f} s' if took >= 1 else ''}",
                   err=True)
    store.add_seeds(seeds)
    return seeds


def _retry_failed(store, kinds: list[str], batch: int = 10_000) -> tuple[int, float]:
    """Queue the failed URLs of ``kinds`` again (:meth:`CrawlStore.retry_failed
    <gridcrawl.client.store.CrawlStore.retry_failed>`), saying on stderr how many it will queue
    before it starts and, when they are more than one ``batch``, how far it got at every tenth
    (a million took four minutes, in silence). Returns (how many, seconds taken)."""
    started = time.monotonic()
    said = [0]

    def show(done: int, total: int) -> None:
        step = max(batch, total // 10)
        if done == 0 and total:
            which = ", ".join(kinds) if kinds else "every kind but the crawl's own decisions"
            typer.echo(f"queueing {counted(total, 'failed URL')} again ({which}) ...", err=True)
        elif total > batch and done < total and done // step > said[0] // step:
            typer.echo(f"  {done:,} of {total:,} queued ({time.monotonic() - started:.0f} s)", err=True)
            said[0] = done

    retried = store.retry_failed(kinds, batch=batch, progress=show)
    return retried, time.monotonic() - started


def _new_sqlite(db: str) -> bool:
    """True when ``db`` names a SQLite file that does not exist yet (a new crawl's)."""
    import sqlalchemy as sa
    try:
        url = sa.engine.make_url(db)
    except (ValueError, sa.exc.ArgumentError):
        return False
    return (url.get_backend_name() == "sqlite" and not url.host and url.database not in (None, "", ":memory:")
            and not url.database.startswith("file:") and not os.path.exists(url.database))


def _lock_crawl(db: str, store, refusal=None, command: str = "gridcrawl-client"):
    """Take the crawl database's crawler lock for as long as this process (and the children it
    forks) lives: a second crawler on the same crawl database (a ``gridcrawl-client`` beside a
    ``gridcrawl run``, a ``gridcrawl spark``) exits with status 2 naming the first. It handed
    the first's URLs in flight back to the frontier at its start and fetched them again (227
    pages of 529 twice). SQLite: ``FILE.lock`` beside the file ``FILE`` (:func:`take_lock`;
    none where ``fcntl`` does not exist), which needs no database transaction: with ``store``
    None it is taken before the database is opened, if ``FILE`` exists (a crawl started while
    ``gridcrawl extract`` writes the items is refused at once, where its first transaction
    waited silently for the extract's); PostgreSQL, MariaDB and SQL Server: the server's own
    lock (:class:`~gridcrawl.db.CrawlerLock`, needing ``store``), the holder named by the
    ``crawler`` meta row the lock's connection writes as it takes the lock, trusted only while
    the session it records holds the lock (PostgreSQL, MariaDB: a crawler killed or just
    starting is not named after the one before it). The holder line names ``command``
    (``gridcrawl run, pid N, since ...``; on a server ``pid N on HOST``), so that a refusal
    says what holds the lock. ``refusal(where, holder)``, when given, is the one-line error
    when another holds it (a command other than a crawl that writes the crawl: ``gridcrawl
    extract``). Returns what holds the lock (its ``close`` lets go), or None (with ``store``
    None: none taken yet)."""
    import socket
    import sqlalchemy as sa
    from gridcrawl.db import CrawlerLock, describe_error, running_crawler, shown_url

    def refuse(where: str, holder: str):
        fail((refusal or crawl_refusal)(where, holder))
    if store is not None and CrawlerLock.supported(store.engine):
        lock = CrawlerLock(store.engine, f"{command}, pid {os.getpid()} on {socket.gethostname()}, since "
                                         f"{time.strftime('%Y-%m-%d %H:%M:%S')}")
        try:
            if not lock.take():
                # SQL Server's holder row is read as written: who holds its lock cannot be asked
                holder = (running_crawler(store.engine) if store.engine.dialect.name in CrawlerLock.ASKED
                          else store.get_meta("crawler"))
                refuse(shown_url(store.engine.url), holder or "a crawler starting")
        except sa.exc.DBAPIError as exc:
            fail(f"the crawl database failed: {describe_error(exc, store.engine)}")
        return lock
    try:
        import fcntl  # noqa: F401 - take_lock's: POSIX only
    except ImportError:
        return None
    path = sqlite_file(db)
    if path is None or (store is None and not os.path.isfile(path)):
        return None
    try:
        lock = open(path + ".lock", "a+", encoding="utf-8")
    except OSError:
        return None  # a folder we may not write to: open_database says what is wrong
    holder = take_lock(lock, f"cannot write the crawl database's lock file {path}.lock", command)
    if holder is not None:
        lock.close()
        refuse(path, holder)
    return lock


def crawl_refusal(where: str, holder: str, option: str = "--db") -> str:
    """The one-line error of a crawl refused because ``holder`` (the crawler lock's holder line,
    :func:`gridcrawl.db.running_crawler`) holds the crawler lock of the crawl database
    ``where``: another crawl, or ``gridcrawl extract``. ``option``: what gives another crawl
    database (``--workdir`` for ``gridcrawl run``)."""
    from gridcrawl.db import holder_is_extract
    if holder_is_extract(holder):
        return (f"gridcrawl extract is extracting the items of {where} again ({holder}): a crawl now would mix "
                f"the items it stores with the extract's; wait for it to end, or give another {option}")
    return (f"another crawler is crawling into {where} ({holder}): two on one crawl database fetch the same URLs "
            f"twice; wait for it to end, or give another {option}")


def sqlite_file(db: str) -> str | None:
    """The absolute path of the SQLite file that ``db`` names (a ``sqlite:///`` URL, or the
    path of an existing file, as :func:`~gridcrawl.db.open_database` takes it), whether it
    exists or not; None for another database, one in memory, or no URL."""
    import sqlalchemy as sa
    if "://" not in db and os.path.isfile(db):
        return os.path.abspath(db)
    try:
        url = sa.engine.make_url(db)
    except (ValueError, sa.exc.ArgumentError):
        return None
    if url.get_backend_name() != "sqlite" or url.host or not url.database or url.database == ":memory:":
        return None
    return os.path.abspath(url.database)


def _check_files_first(rules: str | None, extract: str | None) -> None:
    """Exit with status 2 (one line) on an invalid rules file or item spec, or a spec's
    ``page_type`` the rules never give, before the crawl database is created or touched (they are
    read again, with what the database stored, by :func:`resolve_strategy`)."""
    from gridcrawl.rules import RuleError, load_page_types, load_rules
    rule_list = []
    if rules is not None:
        try:
            rule_list = load_rules(rules)
            load_page_types(rules, rule_list)
        except RuleError as exc:
            fail(f"invalid rules: {exc}")
    if extract is not None:
        specs = check_item_spec(extract)
        if rules is not None:
            refuse_unknown_page_types(extract, specs, rule_list)


def refuse_unknown_page_types(extract: str, specs: list, rule_list: list) -> None:
    """Exit with status 2 when an item spec of file ``extract`` names a ``page_type`` the
    keep/follow rules ``rule_list`` never give a page (its items would never be extracted;
    without rules only the seeds have a page type, ``base``)."""
    from gridcrawl.items import ItemSpecError, check_page_types
    try:
        check_page_types(specs, rule_list)
    except ItemSpecError as exc:
        fail(f"invalid item spec: {extract}: {exc}")


def run_crawl(settings: Settings, manager: str, db: str, seeds: list[str], allow_domains: list[str], *,
              name: str = "gridcrawl", show_progress: bool = True, rules: str | None = None,
              focus: str | None = None, min_relevance: float | None = None, order: str | None = None,
              user: str | None = None, password: str | None = None, curve=None,
              before_crawl=None, retry_failed: list[str] | None = None, rerun: str = "",
              files: list[tuple[str, str]] = (), manager_db: str | None = None,
              structured_data: bool = False, focus_ontology: str | Path | None = None,
              recrawl: str | None = None, watch: bool = False, extract: str | None = None,
              render: bool | None = None, wait_for: str | None = None, stop=None,
              command: str = "gridcrawl-client") -> dict:
    """Open the crawl database, queue ``seeds``, crawl through the manager, print a summary.

    Shared by ``gridcrawl-client`` and ``gridcrawl run``. ``rules``, ``focus``,
    ``min_relevance``, ``order``, ``structured_data``, ``focus_ontology``, ``extract`` (an
    item spec file), ``render`` and ``wait_for`` choose the crawl strategy (:func:`resolve_strategy`);
    ``user``/``password`` log in at the manager, ``curve`` (:class:`gridcrawl.keys.ClientKeys`)
    encrypts the connection. ``before_crawl()``, when given, is called once the database and
    seeds are ready, just before the first grid thread is submitted (``gridcrawl run`` waits
    there for its executors, so that this set-up overlaps their start-up). ``retry_failed``:
    queue the visited URLs that failed again first (``[]``: all; else only these error kinds).
    The summary names the ``files`` written (what, path) besides the crawl database, and the
    next commands: ``rerun`` is the command line that runs this crawl again (for
    ``--retry-failed``), ``manager_db`` the manager database's URL when known (for
    ``gridcrawl report``). ``recrawl`` (``"due"``, ``"all"`` or ``None``) and ``watch``: a
    recrawl of the stored documents (:class:`~gridcrawl.client.app.CrawlApplication`).
    ``stop``: a :class:`~gridcrawl.cli_common.StopEvent` that ends the crawl when set (default:
    one set by SIGINT/SIGTERM, :func:`~gridcrawl.cli_common.stop_on_signals`). ``command``: the
    program, as the crawl database's crawler lock names its holder (:func:`open_crawl`).
    Exits with status 2 (one-line error) on an invalid seed, invalid rules, an unusable
    database, a recrawl of a database without documents, or a manager that does not answer.
    Returns the final counts of the crawl tables plus ``pages``, ``run_errors``, ``run_disallowed``
    (pages robots.txt disallowed: not errors), ``seconds`` and ``pages_per_second`` of this run (pages, not sitemap files: those are ``sitemaps_read``), the
    ``application_id`` and ``recrawl`` (the recrawl's counts, or None); see :func:`exit_status` for
    the crawl's exit status.
    """
    import sqlalchemy as sa
    from gridcrawl.client.app import CrawlApplication, CrawlDatabaseError, ManagerUnreachable, MessageTooLarge, Refused
    from gridcrawl.db import describe_error, shown_url
    from gridcrawl.client.progress import ProgressView

    store, scope = open_crawl(settings, db, seeds, allow_domains, rules=rules, focus=focus,
                              min_relevance=min_relevance, order=order, retry_failed=retry_failed, recrawl=recrawl,
                              structured_data=structured_data, focus_ontology=focus_ontology, extract=extract,
                              render=render, wait_for=wait_for, command=command)
    if deeper := deeper_note(store, settings):
        typer.echo(f"warning: {deeper}", err=True)
    view = ProgressView(enabled=show_progress, total=settings.max_pages or None)
    application = CrawlApplication(settings, manager, store, scope, name=name,
                                   on_progress=view.update if view.enabled or view.plain else None,
                                   user=user, password=password, curve=curve, recrawl=recrawl, watch=watch)
    if before_crawl is not None:
        before_crawl()
    stop = stop or stop_on_signals()
    with view:
        try:
            final = application.run(stop)
        except (ManagerUnreachable, MessageTooLarge, CrawlDatabaseError) as exc:
            fail(str(exc))
        except Refused as exc:
            fail(f"the manager refused the application: {exc}")
        except sa.exc.DBAPIError as exc:  # at start or at the end: no crawl loop to pause
            fail(f"the crawl database failed: {describe_error(exc, store.engine)}")
    try:
        counts = store.counts()
    except sa.exc.DBAPIError as exc:
        fail(f"the crawl database failed: {describe_error(exc, store.engine)}")
    beyond = len(store.beyond_depth)
    if beyond:  # not recorded: a later run with a larger --max-depth is told so; earlier runs' added
        metas = store.metas()
        if metas.get("links_beyond_max_depth") == str(settings.max_depth):
            beyond += int(metas.get("links_beyond_depth") or 0)
        store.set_metas({"links_beyond_depth": str(beyond), "links_beyond_max_depth": str(settings.max_depth)})
    new_crawl = "a new --workdir" if command == "gridcrawl run" else "a new --db"
    counts.update(signal=getattr(stop, "signum", None),
                  seconds=final.seconds, pages_per_second=final.pages_per_second, pages=final.page_count,
                  run_errors=final.page_errors, run_disallowed=final.disallowed, sitemaps_read=final.sitemaps,
                  application_id=final.application_id,
                  recrawl=final.recrawl,
                  waiting=dict(final.waiting), capped=dict(store.capped),
                  sitemaps_skipped=dict(store.sitemaps_skipped),
                  max_pages_per_host=settings.max_pages_per_host,
                  beyond_depth=beyond, max_depth=settings.max_depth, new_crawl=new_crawl,
                  below_relevance=len(store.below_relevance), min_relevance=store.strategy.min_relevance,
                  best_below=store.best_below, links_cut=sorted(store.links_cut.items()),
                  crawl_delays=dict(store.crawl_delays), max_crawl_delay=settings.max_crawl_delay)
    if stop.is_set() and not final.application_id:  # no manager answered this run: no summary of nothing
        endpoints = manager if isinstance(manager, str) else ",".join(manager)
        view.console.print(f"stopped ({getattr(stop, 'reason', '') or 'asked to stop'}) before the manager at "
                           f"{endpoints} answered: nothing was crawled this run, {counted(counts['to_visit'], 'URL')} "
                           f"left to visit; the same command goes on{f' ({rerun})' if rerun else ''}",
                           soft_wrap=True, highlight=False)
        return counts
    groups = store.error_summary() if counts["errors"] or counts["set_aside"] or counts["disallowed"] else []
    errors = [g for g in groups if g.failed]
    counts["error_kinds"] = {g.label: g.count for g in errors}
    shown = shown_url(db)
    report_db = manager_db or "<the manager's --db URL>"
    again = rerun.replace(" --recrawl-all", " --recrawl", 1) if recrawl == "all" and rerun else rerun
    commands = [("the threads per executor",
                 f"gridcrawl report --db {report_db} --application {final.application_id[:8]}")] if final.pages else []
    commands.append(("the pages", f"gridcrawl export --db {shown} --format jsonl pages.jsonl"))
    # gridcrawl fetch lets a URL reach its own private address: it would not show the SSRF guard's block
    from gridcrawl.protocol import ErrorKind
    fetchable = [g for g in errors if g.retry_kind != ErrorKind.BLOCKED.value]
    if errors:
        commands += [("every visited URL with its error kind and reason",
                      f"gridcrawl export --db {shown} --format csv visited.csv"),
                     *([("one of them fetched as an executor does (with the executors' options)",
                         fetch_command(fetchable[0], store.strategy))] if fetchable else []),
                     # gone pages need no retry: a recrawl visits them again on their schedule
                     # after --recrawl-all, --recrawl: --recrawl-all again would visit every page again too
                     *([("once the cause is fixed, fetch the failed URLs again (all, or some kinds)",
                         f"{again or 'gridcrawl-client ...'} --retry-failed {','.join(retried)}")]
                       if (retried := sorted({g.retry_kind for g in errors} - {ErrorKind.GONE.value})) else [])]
    view.summary(counts, groups, [("crawl database", shown), *files], commands)
    if store.capped:
        view.console.print(f"the links above {capped_note(settings.max_pages_per_host, new_crawl)}", soft_wrap=True,
                           highlight=False)
    if reached := max_pages_note(settings.max_pages, counts, recrawl, rerun):
        view.console.print(reached, soft_wrap=True, highlight=False)
    elif counts["to_visit"] and (final.state == "cancelled" or stop.is_set()):
        why = ("cancelled by an operator (gridcrawl-client cancel)" if final.state == "cancelled"
               else f"stopped before the end ({getattr(stop, 'reason', '') or 'asked to stop'})")
        if recrawl == "all":  # the same command would queue again the pages this run visited
            resume = rerun.replace(" --recrawl-all", " --recrawl", 1)
            view.console.print(f"{why} with {counted(counts['to_visit'], 'URL')} left to visit: --recrawl instead of "
                               f"--recrawl-all resumes the recrawl{f' ({resume})' if rerun else ''} (--recrawl-all "
                               "would visit again the pages this run visited)", soft_wrap=True, highlight=False)
        else:
            view.console.print(f"{why} with {counted(counts['to_visit'], 'URL')} left to visit: the same command resumes the "
                               f"crawl{f' ({rerun})' if rerun else ''}", soft_wrap=True, highlight=False)
    elif recrawl == "due" and not (final.recrawl or {}).get("due") and not counts["to_visit"]:
        first = store.next_due(sitemaps=False)
        view.console.print(("no stored page came due while this --watch ran" if watch else
                            "no stored page was due for a visit") + (
            f": the first is due at {first:%Y-%m-%d %H:%M} UTC (a page is visited again recrawl_interval, "
            f"{settings.recrawl_interval / 86400:g} days, after its visit at first, then adaptively)" if first else "")
            # a crawl stopped before its end (--max-pages, Ctrl-C) left URLs to visit: the recrawl visited them
            + (f"; this run visited {counted(counts['pages'], 'new page')} instead: the URLs the crawl had left to "
               "visit (it stopped before its end) and the links found on them" if counts["pages"] else "")
            + "; --recrawl-all visits every stored page now", soft_wrap=True, highlight=False)
    elif final.page_count and not final.page_errors and final.disallowed >= final.page_count:
        from gridcrawl.redact import terminal_text
        example = next((g.url for g in groups if g.disallowed), "")
        view.console.print(terminal_text(disallowed_note(final.disallowed, len(seeds), example, command, rerun)),
                           soft_wrap=True, highlight=False, markup=False)
    elif not final.pages and not counts["to_visit"] and counts["visited"] and not recrawl:
        view.console.print("nothing was left to visit: every URL of this crawl was visited by an earlier run "
                           "(--retry-failed fetches the failed ones again, --recrawl the stored pages, "
                           "new seeds add to it)" + ("; the warning above says why a larger --max-depth "
                                                     "found nothing" if deeper else ""),
                           soft_wrap=True, highlight=False)
    if not counts["to_visit"] and not recrawl:  # a finished crawl: rules that matched nothing
        left_out = [why for why, n in (("--max-depth", beyond), ("--min-relevance", len(store.below_relevance)),
                                       ("--max-pages-per-host", len(store.capped))) if n]
        for line in idle_rule_notes(store.idle_rules(), rules, left_out):
            view.console.print(line, soft_wrap=True, highlight=False, markup=False)
    if store.retyped_example is not None:
        view.console.print(retyped_note(store.retyped, *store.retyped_example), soft_wrap=True, highlight=False,
                           markup=False)
    if store.strategy.items:  # the items section: per type, per field (misses of required values)
        from gridcrawl.client.items import item_summary
        figures = item_summary(store.engine, store.strategy.items)
        view.item_summary(figures)
        counts["items"] = {t.type: t.items for t in figures}
    if store.strategy.structured_data:
        view.semantic_summary(counts, f"gridcrawl report --crawl-db {shown}")
    return counts


def rerun_command(program: str, argv: Sequence[str] | None = None) -> str:
    """The command line that runs this crawl again as it was started: ``program``
    (``gridcrawl`` or ``gridcrawl-client``) and its arguments as given (``argv``, default
    ``sys.argv[1:]``). Every option is kept — a crawl's fetch settings (delays, User-Agent,
    robots.txt, limits) are not stored with it, so a shorter command would resume it with other
    ones — but ``--retry-failed`` and its value (the summary's next commands add their own).
    A password in a URL shows as ``***`` (:func:`gridcrawl.redact.shown_url`: an ODBC ``PWD=`` in its
    query too); the login's password is never on it."""
    import shlex
    args = list(sys.argv[1:] if argv is None else argv)
    shown: list[str] = [program]
    i = 0
    while i < len(args):
        arg = args[i]
        i += 1
        if arg == "--retry-failed":
            i += 1  # and its value
        elif not arg.startswith("--retry-failed="):
            shown.append(_without_password(arg))
    return shlex.join(shown)


def _without_password(arg: str) -> str:
    """``arg`` (``--name=VALUE`` or a value) with the passwords of a URL in it as ``***``
    (:func:`gridcrawl.redact.shown_url`: the user's, and an ODBC ``PWD=`` in its query)."""
    from gridcrawl.redact import holds_secret, shown_url
    name, eq, value = arg.partition("=")
    if not (arg.startswith("--") and eq):  # a value, not --name=VALUE
        name, eq, value = "", "", arg
    return name + eq + shown_url(value) if "://" in value and holds_secret(value) else arg


def deeper_note(store, settings) -> str | None:
    """What to tell a run whose ``--max-depth`` is larger (or none) than the one with which an
    earlier run of the crawl left links out (crawl meta ``links_beyond_depth``): those links
    were not recorded, so this crawl cannot reach them; None when nothing was left out so."""
    metas = store.metas()
    left, old = int(metas.get("links_beyond_depth") or 0), int(metas.get("links_beyond_max_depth") or -1)
    if not left or not (settings.max_depth < 0 or settings.max_depth > old >= 0):
        return None
    return (f"an earlier run left out {counted(left, 'link')} deeper than its --max-depth {old}; links left out are not "
            "recorded, so a larger --max-depth reaches them only in a crawl into a new --workdir (or --db)")


def idle_rule_notes(idle: Sequence, rules_file: str | None, left_out: Sequence[str] = (), most: int = 5) -> list[str]:
    """One line per rule that found nothing (:meth:`~gridcrawl.client.store.CrawlStore.idle_rules`:
    ``(rule, pages of its from_type fetched, one of their URLs)``), at most ``most`` and a line
    counting the others: what it found nothing on, the likely causes, and the ``gridcrawl fetch``
    command that shows what the rules match on that page (``rules_file``: the rules file given,
    None on a resumed crawl). ``left_out``: the options by which this crawl left links out
    (``--max-depth``, ``--min-relevance``, ``--max-pages-per-host``), named as further causes of
    a follow rule's; links to other hosts always are one."""
    import shlex
    from gridcrawl.rules import glob_hint
    lines = []
    for rule, pages, url in idle[:most]:
        found = (f"no URL got the page type {rule.to_type!r}" if rule.rule_type == "follow" else "it kept no link")
        causes = "its pattern or id/class/tag matches no link there"
        if rule.rule_type == "follow":
            causes = causes.replace("no link", "no new link") + (", an earlier follow rule gave those links another type, or the crawl left them out: "
                       + ", ".join(["another host", *left_out]))
        lines.append(f"{rule.label} found nothing: {found} from the {pages:,} {rule.from_type!r} "
                     f"page{'s' if pages != 1 else ''} fetched ({causes}); what the rules match on one: gridcrawl "
                     f"fetch {shlex.quote(url)} --rules {shlex.quote(rules_file) if rules_file else 'RULES_FILE'} "
                     f"--page-type {shlex.quote(rule.from_type)}"
                     + (f"; its pattern {rule.pattern!r} is {hint.strip()[1:-1]}" if (hint := glob_hint(rule.pattern)) else ""))
    if len(idle) > most:
        lines.append(f"and {len(idle) - most} more rule{'s' if len(idle) - most != 1 else ''} found nothing")
    return lines


def retyped_note(count: int, url: str, first: str, other: str) -> str:
    """The summary's line on links a follow rule gave a page type their URL did not get (it was
    queued or visited with another: a URL is crawled once, with its first type): ``count`` of
    them, one ``url`` with its ``first`` type and the ``other`` one."""
    return (f"{counted(count, 'link')} kept the page type {'its URL' if count == 1 else 'their URLs'} had when a "
            f"follow rule gave {'it' if count == 1 else 'them'} another, e.g. {url} is {first!r}, not {other!r}: a URL is "
            "crawled once, with the type of the rule that found it first, so the rules and item specs of the other "
            "type do not apply to it; rules whose patterns or id/class/tag do not overlap keep the types apart")


def capped_note(cap: int, new_crawl: str = "a new --workdir") -> str:
    """The end of the sentence a crawl's summary prints when the per-host cap (``cap`` URLs,
    ``--max-pages-per-host``) left links out: why, and what to do about it (``new_crawl``: how
    a crawl starts afresh, since the links left out are not recorded)."""
    return (f"were not queued: their hosts had {counted(cap, 'URL')} queued or visited (sitemap files not counted), a "
            "seed's subdomains counted with it (--max-pages-per-host, the cap that ends a link maze, over one host or endless "
            f"subdomains); a site that large takes {new_crawl} and a larger cap (0: none)")


def max_pages_note(max_pages: int, counts: dict, recrawl: str | None = None, rerun: str = "") -> str | None:
    """The line a crawl's summary ends with when ``--max-pages`` stopped it with URLs left
    (``counts`` of :func:`run_crawl`), else None. For a crawl, the limit is on the URLs visited
    by the whole crawl (``counts["visited"]``); for a recrawl (``recrawl``: ``"due"`` or
    ``"all"``), on the URLs visited by this run (``counts["pages"]`` and the sitemaps read again,
    ``counts["sitemaps_read"]``, named in the line when there are any),
    and the line names the command that resumes the recrawl (``rerun``, the command line of this
    run: ``--recrawl-all`` would queue again the pages this run visited, so ``--recrawl``)."""
    if not (max_pages and counts["to_visit"]):
        return None
    if recrawl is None:
        if counts["visited"] < max_pages:
            return None
        return (f"stopped at --max-pages {max_pages}, a limit on the whole crawl ({counts['visited']} URL"
                f"{'s' if counts['visited'] != 1 else ''} visited in all): a larger --max-pages, or none, visits the "
                f"{counts['to_visit']} left")
    maps = counts.get("sitemaps_read") or 0
    visited = counts["pages"] + maps  # --max-pages counts every URL visited
    if visited < max_pages:
        return None
    resume = rerun.replace(" --recrawl-all", " --recrawl", 1) if recrawl == "all" else rerun
    how = ("--recrawl, not --recrawl-all (which would visit again the pages this run visited), resumes the recrawl"
           if recrawl == "all" else "the same command resumes the recrawl")
    left = counts["to_visit"]
    among = f", {counted(maps, 'sitemap')} read again among them" if maps else ""
    return (f"stopped at --max-pages {max_pages}, a limit on the pages of this recrawl run ({visited} "
            f"visited{among}) with "
            f"{left} URL{'s' if left != 1 else ''} left to "
            f"visit: {how}{f' ({resume})' if resume else ''}, up to --max-pages of them a run (none: all of them)")


def disallowed_note(disallowed: int, seeds: int, example: str, command: str, rerun: str) -> str:
    """The line that ends the summary of a run whose every page robots.txt disallowed (no page
    fetched, none failed): ``disallowed`` pages, the ``seeds`` given to the run (when they are
    those pages, it names them as seeds), ``example`` one of their URLs (``""``: none known),
    ``command`` the program (``gridcrawl run`` and ``gridcrawl spark`` take ``--ignore-robots``
    themselves; for ``gridcrawl-client`` it is an option of the executors) and ``rerun`` the command line that
    runs this crawl again (:func:`rerun_command`; ``""``: unknown), to which the line adds
    ``--retry-failed robots``: the URLs are visited, so only that queues them again."""
    what = (("the seed" if seeds == 1 else "both seeds" if seeds == 2 else f"all {seeds:,} seeds") if seeds == disallowed
            else f"every URL this run visited ({disallowed:,})")
    url = f" {example}" if example and seeds == disallowed == 1 else f" (e.g. {example})" if example else ""
    them = "it" if disallowed == 1 else "them"
    itself = command in ("gridcrawl run", "gridcrawl spark")
    how = (f"--ignore-robots fetches {them} regardless" if itself
           else f"executors started with --ignore-robots fetch {them} regardless")
    again = f": {rerun}{' --ignore-robots' if itself else ''} --retry-failed robots" if rerun else ""
    return (f"no page was fetched: the site's robots.txt disallows {what}{url}, and the crawl obeys it (not an "
            f"error); where the site's owner agrees, {how}{again}")


def exit_status(counts: dict) -> None:
    """End a crawl command once its summary is printed (``counts`` from :func:`run_crawl`):
    by the signal that stopped the crawl (``counts["signal"]``: Ctrl-C, SIGTERM), so that the
    shell sees it interrupted (:func:`gridcrawl.entry.exit_by_signal`: status 130 or 143, and
    a script's loop stops); else, when pages of this run failed and no page was fetched well
    (every page failed, or was disallowed by robots.txt: ``run_disallowed``, 0 if absent), with
    one line on stderr naming the error kinds and exit status :data:`CRAWL_FAILED`. Returns
    when at least one page was stored, when nothing was to do, and when robots.txt disallowed
    every page and none failed (the crawler obeyed the site, as a noindex page is no failure
    either; :func:`run_crawl` says so in a line of its own)."""
    if counts.get("signal"):
        exit_by_signal(counts["signal"])
    pages, failed, disallowed = counts["pages"], counts["run_errors"], counts.get("run_disallowed", 0)
    if failed and failed + disallowed >= pages:
        kinds = ", ".join(f"{label} {n}" for label, n in counts["error_kinds"].items())
        # "of this run": a resumed crawl (--retry-failed) may hold hundreds of stored pages; the
        # kinds are the crawl's (the table above), since its rows do not say which run made them
        what = (f"every page of this run failed ({counted(pages, 'page')}; " if not disallowed else
                f"every page of this run failed or was disallowed by robots.txt ({counted(pages, 'page')}: "
                f"{failed:,} failed, {disallowed:,} disallowed; ")
        typer.echo(f"error: {what}the crawl's errors by kind: {kinds}); the errors by kind above say why", err=True)
        raise typer.Exit(CRAWL_FAILED)


def main() -> None:
    """Entry point of the ``gridcrawl-client`` script (reads ``--config`` and ``GRIDCRAWL_*`` first)."""
    run_program(app, "client")


if __name__ == "__main__":  # pragma: no cover
    main()
