"""Every tunable of the three programs, in one object with documented defaults and units.

The command-line programs build one :class:`Settings` and pass it down; no module reads globals
or the environment on its own. Each field is declared once, here: its documentation in
``metadata["doc"]`` (the README's settings table) and, in ``metadata["cli"]`` (a
:class:`CliOption`), which programs have an option for it, with its help text and section of
``--help``. The programs' options are generated from that
(:func:`gridcrawl.cli_common.setting_options`), and so are the options ``gridcrawl run`` passes
to the programs it starts (:func:`gridcrawl.cli_common.setting_argv`).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Mapping

#: Most worker threads an executor may declare in its registration
#: (:data:`gridcrawl.protocol.MAX_THREADS`, the same bound): a manager drops a registration
#: claiming more as malformed, so a ``threads`` above it is refused here.
MAX_THREADS = 100_000


#: The programs whose command lines can show a setting as an option (a field's ``cli`` tags):
#: ``gridcrawl-manager``, ``gridcrawl-executor``, ``gridcrawl-client``, ``gridcrawl run``,
#: ``gridcrawl spark``, ``gridcrawl extract`` and ``gridcrawl fetch``.
PROGRAMS = ("manager", "executor", "client", "run", "spark", "extract", "fetch")
M, E, C, R, S, X, F = PROGRAMS  # short names for the tags below


def _doc(default, doc: str, *, cli: tuple[str, ...] = (), help: str | None = None,
         help_for: dict[str, str] | None = None, group: str | None = None, flag: str | None = None,
         inverse: str | None = None, secret: bool = False):
    """A dataclass field with a default and a one-line description (``doc``: the README's
    settings table), and how the command lines show it (:class:`CliOption`, read by
    :func:`gridcrawl.cli_common.setting_options`):

    ``cli``: the programs (:data:`PROGRAMS`) that have an option for it; ``help``: the option's
    help text (default ``doc``), ``help_for``: another text for some programs (program ->
    text); ``group``: the kind of option (``connection``, ``scheduling``, ``politeness``,
    ``fetching``, ``rendering``, ``idle``, ``scope``, ``strategy``, ``recrawl``; None: a
    common option), which each program maps to a section of its ``--help``; ``flag``: the
    option's declaration when it is not ``--name`` (``"--partitions"``,
    ``"--sitemaps/--no-sitemaps"``); ``inverse``: the option is the negation of the setting,
    named so (``ignore_robots`` for ``obey_robots``: a flag ``--ignore-robots``).

    ``secret``: the value may hold a password (a URL's ``user:password@``): ``gridcrawl run``
    hands it to the programs it starts in their environment, never on their command lines, and
    ``gridcrawl config show`` masks it.
    """
    unknown = set(cli) - set(PROGRAMS)
    if unknown:
        raise ValueError(f"unknown program tag {sorted(unknown)} of a setting")
    metadata = {"doc": doc, "secret": secret}
    if cli:
        metadata["cli"] = CliOption(tuple(cli), help or doc, dict(help_for or {}), group, flag, inverse)
    return field(default=default, metadata=metadata)


@dataclass(frozen=True)
class CliOption:
    """How the command lines show one setting (``metadata["cli"]`` of a :class:`Settings` field;
    see :func:`_doc` for the meaning of each attribute)."""

    programs: tuple[str, ...]
    help: str
    help_for: dict[str, str]
    group: str | None
    flag: str | None
    inverse: str | None

    def help_of(self, program: str) -> str:
        """The help text ``program`` shows."""
        return self.help_for.get(program, self.help)


@dataclass
class Settings:
    """Settings of manager, executor and client. Times are seconds, sizes bytes.

    Build one with keyword arguments (``Settings(heartbeat_interval=0.5)``) or copy one with
    :meth:`replace`. Unknown names raise ``TypeError``; :meth:`validate` raises ``ValueError`` on
    values that cannot work (a negative timeout, zero threads).
    """

    # --- grid: heartbeats and liveness (the ZeroMQ guide's Paranoid Pirate pattern) ---
    heartbeat_interval: float = _doc(1.0, "seconds between heartbeats, both ways (an executor or client beats at least as often as its manager asks in its welcome)",
                cli=(M, E, C), group="connection", help="seconds between heartbeats")
    heartbeat_liveness: int = _doc(3, "missed heartbeat intervals before a peer counts as dead",
                cli=(M, E, C), group="connection",
                help="missed heartbeats before the manager counts as lost",
                help_for={M: "missed heartbeats before a peer is dead"})
    reconnect_initial: float = _doc(1.0, "first reconnect back-off of an executor or client, seconds")
    reconnect_max: float = _doc(32.0, "largest reconnect back-off, seconds")
    connect_timeout: float = _doc(10.0, "seconds a program waits for the manager's first answer before it fails",
                cli=(E, C), group="connection",
                help="seconds to wait for the manager's first answer",
                help_for={C: "seconds to wait for the manager's answer"})
    max_message_bytes: int = _doc(64 * 1024 * 1024, "largest ZeroMQ message accepted (MAXMSGSIZE), bytes",
                cli=(M,), group="connection",
                help="largest message a peer may send, bytes; a peer sending more is disconnected")

    # --- manager: scheduling ---
    thread_timeout: float = _doc(300.0, "seconds a grid thread may run before it is taken back and reassigned (counted from its start; a thread waiting in an executor's buffer waits this long for each round of the executor's workers ahead of it, and is taken back sooner when the executor reports no start or result for this long)",
                cli=(M,), group="scheduling", help="seconds before a running thread is taken back")
    straggler_seconds: float = _doc(120.0, "seconds after which an attempt is taken back from its executor and given to another executor whose workers would otherwise sit idle (nothing else to run): a silent or stuck executor cannot hold a crawl's last threads for thread_timeout (0: never)",
                cli=(M,), group="scheduling", help="seconds before a straggler is given to an idle executor")
    max_attempts: int = _doc(3, "attempts (lost or timed-out executors) before a grid thread is failed as poison",
                cli=(M,), group="scheduling", help="lost attempts before a thread fails (poison)")
    prefetch: int = _doc(6, "grid threads an executor may hold beyond its worker threads (local buffer); its refills travel this many to an assign, and a thread waits in a buffer only while every executor able to run it is busy",
                cli=(M,), group="scheduling", help="threads an executor may buffer beyond its workers")
    lease_seconds: float = _doc(0.0, "seconds a manager's lease on its database lasts unrenewed (renewed every third of it; 0: heartbeat_interval × heartbeat_liveness): a second manager on the database refuses to start while it lasts, a hot standby takes over when it expires",
                cli=(M,), group="connection",
                help="seconds the database lease lasts unrenewed (0: heartbeat interval x liveness): how long a standby waits")
    record_interval: float = _doc(0.5, "seconds between batched writes of the manager's records to SQL")
    dispatch: str = _doc("least-loaded", "how the manager picks an executor: least-loaded or host-hash",
                cli=(M, R), group="politeness", help="least-loaded or host-hash (one executor per host)")
    max_threads_per_executor: int = _doc(64, "worker threads the manager believes an executor has, at most (a larger claim is capped)")
    start_window: int = _doc(8, "grid threads a new executor may hold unanswered; grows by one per result returned up to threads + prefetch (TCP slow start), halves on a timed-out attempt")
    quarantine_after: int = _doc(3, "timed-out attempts in a row after which an executor is quarantined (gets no new work)")
    quarantine_seconds: float = _doc(60.0, "seconds of an executor's first quarantine; each further one doubles it, up to 16 times")
    max_threads_per_application: int = _doc(100_000, "grid threads one application may have at the manager (queued, running, or finished and not yet acknowledged); a submit beyond is refused (a client keeps max_in_flight)")
    max_applications_per_user: int = _doc(16, "applications of one user open at the manager at once (created or reopened and not yet completed or cancelled, detached ones included); one more cancels the one without a client longest, if silent past the liveness, or else is refused (with max_threads_per_application, max_unacked_bytes and the 256 MiB of instructions one application's threads may hold, a bound on what one user's crawls hold in the manager's memory)")
    max_unacked_bytes: int = _doc(256 * 1024 * 1024, "bytes of results (as the executors sent them) the manager holds for one application until its client acknowledges them; beyond, the application's threads wait at the manager until the client acknowledges half")
    detached_timeout: float = _doc(7 * 86_400.0, "seconds an application may stay without a client (detached) before the manager cancels it, dropping its queued threads and the results it holds; a client that comes back later goes on as a new application and submits again what it had in flight (0: never)")
    keep_departed: int = _doc(10_000, "executors that left, and applications that stopped, the manager keeps in memory, of each (one that returns keeps its id); beyond, those gone longest are forgotten: their records stay in SQL, and one that returns gets a new id")

    # --- manager: per-peer limits against floods and malformed input (manager.server.PeerGuard) ---
    peer_rate: float = _doc(5000.0, "messages per second one peer may send on average; more are dropped (a token bucket)")
    peer_burst: float = _doc(20000.0, "messages one peer may send in a burst above peer_rate")
    peer_max_strikes: int = _doc(20, "malformed, out-of-bounds or refused messages of one peer within peer_strike_window that block it")
    peer_strike_window: float = _doc(10.0, "seconds over which a peer's strikes are counted (and its idle state is pruned)")
    peer_block_seconds: float = _doc(60.0, "seconds a blocked peer is ignored")

    # --- manager: politeness for the whole grid ---
    concurrent_requests_per_host: int = _doc(8, "grid threads of one host in flight at once, grid-wide",
                cli=(M, R, S), group="politeness",
                help="threads of one host in flight at once",
                help_for={M: "threads of one host in flight at once, grid-wide", S: "fetches of one host in flight at once"})
    download_delay: float = _doc(0.0, "seconds between two fetches of one host (0: only the concurrency cap)",
                cli=(M, R, S), group="politeness", help="seconds between two fetches of one host")
    max_crawl_delay: float = _doc(30.0, "largest robots.txt Crawl-delay honoured, seconds",
                cli=(M,), group="politeness")
    retry_times: int = _doc(2, "retries of a fetch whose connection was refused or reset, or got 5xx/429 "
                            "(timeouts are not retried, nor is an answer that is no usable HTTP: `bad_response`)",
                cli=(M,), group="politeness", help="retries of connection errors, 5xx and 429 (not of timeouts, "
                "nor of bad_response)")
    retry_backoff: float = _doc(1.0, "seconds before the first retry; doubles with each retry",
                cli=(M,), group="politeness", help="seconds before the first retry (doubles)")

    # --- executor: fetching ---
    threads: int = _doc(8, "worker threads of one executor (grid threads run at once)",
                cli=(E, R, S),
                help="worker threads (grid threads run at once)",
                help_for={R: "worker threads per executor", S: "fetching threads per Spark task"})
    parse_threads: int = _doc(1, "worker threads of one executor that parse a page at once (parsing is CPU work, mostly under Python's GIL: more hold more page trees in memory for little speed)")
    user_agent: str = _doc("gridcrawl/0.1 (+https://example.invalid/gridcrawl)", "User-Agent header sent with every fetch: "
                           "give it your crawler's name and a way to reach you, 'NAME/VERSION (+URL)' (the default names "
                           "no one; gridcrawl run and gridcrawl spark warn when they fetch other hosts than this machine "
                           "with it); robots.txt rules apply to its first word",
                cli=(E, R, S, F), group="fetching", help="User-Agent header of every fetch: 'NAME/VERSION (+URL of a page about your crawler)' [default: gridcrawl/0.1, naming no one]")
    fetch_connect_timeout: float = _doc(10.0, "TCP connect timeout of one fetch, seconds")
    fetch_read_timeout: float = _doc(30.0, "socket read timeout of one fetch, seconds")
    download_timeout: float = _doc(30.0, "wall-clock deadline of one fetch including redirects, seconds",
                cli=(E, F), group="fetching", help="wall-clock deadline of one fetch, seconds")
    max_body_bytes: int = _doc(10 * 1024 * 1024, "largest body kept, counted after decompression, bytes",
                cli=(E, F), group="fetching", help="largest body kept, bytes")
    max_links_per_page: int = _doc(10_000, "links of one page reported and followed, at most: the first in document "
                                   "order (Heritrix caps a page's outlinks at 6,000, Nutch at 100; the largest page "
                                   "of the Python and PostgreSQL docs has 801): a hostile page of 455,000 links cost "
                                   "an executor 400 MB and 2.6 CPU-s and its client 455,000 URLs to visit",
                cli=(E, F), group="fetching", help="links of one page followed, at most")
    max_redirects: int = _doc(20, "redirect hops followed before a fetch fails (20, as browsers and Scrapy)")
    keep_non_html: bool = _doc(False, "download and store bodies of non-HTML responses (PDF, images)",
                cli=(E,), group="fetching", help="also download bodies of non-HTML responses")
    ca_bundle: str = _doc("", "PEM file of the certificate authorities HTTPS servers are checked against instead of certifi's (an intranet's own CA; empty: certifi's)",
                cli=(E, R, S, F), group="fetching", help="PEM file of the CAs HTTPS servers are checked against (an intranet's own)")
    tls_verify: bool = _doc(True, "check HTTPS servers' certificates (off: any certificate is accepted, as Scrapy, Nutch and Heritrix do by default; a certificate that fails the check makes the page a connection error saying so)",
                cli=(E, R, S, F), group="fetching", inverse="no_tls_verify", help="accept any HTTPS certificate (self-signed, expired, another host's)")
    proxy: str = _doc("", "HTTP proxy every fetch goes through, http://[user:password@]host:port (an organisation's way out to the web; HTTPS is tunnelled with CONNECT; empty: fetches connect directly). The environment's http_proxy and https_proxy are not read",
                cli=(E, R, S, F), group="fetching", help="fetch through this HTTP proxy, http://[user:password@]host:port",
                secret=True)
    no_proxy: str = _doc("", "with a proxy: hosts fetched directly, comma-separated as curl's no_proxy (example.org matches its subdomains too; an IP address, a CIDR, host:port, or * for all)",
                cli=(E, R, S, F), group="fetching", help="with --proxy: hosts fetched directly, comma-separated (an intranet: corp.example,10.0.0.0/8)")
    netrc: str = _doc("", "netrc file (machine HOST login USER password PASS) whose hosts are sent HTTP Basic credentials on every request (an intranet behind a login; no other host ever gets them); empty: none",
                cli=(E, R, S, F), group="fetching", help="netrc file of credentials for sites behind a login (HTTP Basic, sent only to the hosts it names)")
    obey_robots: bool = _doc(True, "obey robots.txt (RFC 9309): disallowed URLs are recorded, not fetched",
                cli=(E, R, S, F), group="politeness", inverse="ignore_robots", help="do not fetch or obey robots.txt")
    render_pages: int = _doc(2, "pages an executor started with --render has open in its browser at once",
                cli=(E, R), group="rendering", help="with --render: pages open in the browser at once")
    render_timeout: float = _doc(30.0, "wall-clock deadline of one rendered page in the browser, seconds (a script that loops forever is cut there)",
                cli=(E, R, F), group="rendering",
                help="with --render: wall-clock deadline of one rendered page, seconds")
    render_idle: float = _doc(5.0, "seconds a rendered page may take after its load event to go network-idle (500 ms without a request); its DOM is taken then either way")
    render_restart: int = _doc(100, "pages a browser renders before the executor replaces it with a fresh one")
    browser_path: str = _doc("", "the browser an executor started with --render drives (empty: Chromium or Chrome found on PATH)",
                cli=(E, R, F), group="rendering",
                help="with --render: the Chromium or Chrome executable (default: found on PATH)")
    rdf_max_bytes: int = _doc(5 * 1024 * 1024, "semantic crawl: largest RDF document parsed, and largest XML entity expansion, bytes (8 x it: characters of one page's triples)")
    max_triples: int = _doc(50_000, "semantic crawl: triples read from one page or RDF document at most (more: rdf_limit)")
    rdf_parse_deadline: float = _doc(10.0, "semantic crawl: seconds one page's RDF or structured data may take to parse (checked at every triple)")
    robots_retry: float = _doc(60.0, "seconds a host whose robots.txt is unreachable (5xx, 429, no answer) stays disallowed before robots.txt is fetched again",
                cli=(E,), group="fetching",
                help="seconds a host with an unreachable robots.txt stays disallowed before robots.txt is fetched again")
    plugin_timeout: float = _doc(10.0, "seconds an extractor plugin may spend on one page before that page's items fail",
                cli=(X,), help="seconds a plugin may spend on one page")

    # --- executor: a non-dedicated desktop (--idle-only; gridcrawl.executor.idle) ---
    cpu_threshold: float = _doc(25.0, "with --idle-only: percent of the machine's CPU other processes may use before the owner counts as back",
                cli=(E,), group="idle")
    idle_seconds: float = _doc(30.0, "with --idle-only: seconds the CPU must stay under the threshold before work is taken (again)",
                cli=(E,), group="idle")

    # --- client: the crawl ---
    max_pages: int = _doc(0, "URLs to visit before the crawl stops, its earlier runs included; a recrawl: this run's visits (0: no limit)",
                cli=(C, R, S), help="stop once the crawl has visited this many URLs in all, its earlier runs "
                "included (0: no limit)")
    max_depth: int = _doc(20, "largest link depth (hops) from a seed to visit, a last-resort trap cap (-1: no limit; the Python and PostgreSQL docs need 3)",
                cli=(C, R, S), group="scope", help="largest link depth (hops) from a seed (-1: no limit)")
    max_pages_per_host: int = _doc(100_000, "URLs of one host queued or visited at most, a seed's subdomains (or an --allow-domain's) counted with it, sitemap files not counted (bounded apart: 1,000 a site), its seeds queued whatever the count: the cap that ends a link maze, over one host or endless subdomains (0: no limit)",
                cli=(C, R, S), group="scope", help="URLs of one host queued or visited at most, sitemap files not counted (a seed's subdomains counted with it), the end of a link maze (0: no limit)")
    max_in_flight: int = _doc(256, "grid threads an application keeps submitted at once",
                cli=(C, R), group="strategy", help="grid threads submitted at once (1: the exact --order)")
    apply_batch: int = _doc(256, "results applied to the crawl tables in one transaction, at most")
    apply_interval: float = _doc(0.1, "seconds a result may wait before its batch is applied (none once every submitted thread is back, or half of them while the frontier has nothing more to submit)")
    store_content: bool = _doc(True, "store page bodies in the document table",
                cli=(C, R, S), group="strategy", inverse="no_content", help="do not store page bodies")
    trap_near_duplicates: int = _doc(8, "near-identical pages of one URL shape (a host's URLs differing only in numbers), each found on a page of that shape, after which links of that shape are not followed but recorded as traps (0: off)")
    trap_distance: int = _doc(3, "largest Hamming distance between the 64-bit SimHashes of two pages' text for them to count as near-identical (Manku et al., WWW 2007)")
    sitemaps: bool = _doc(True, "read the sitemaps of the seeds' hosts (robots.txt Sitemap lines, else /sitemap.xml) and crawl the pages they list",
                cli=(C, R), group="strategy", flag="--sitemaps/--no-sitemaps",
                help="read the seeds' hosts' sitemaps (robots.txt Sitemap lines, else /sitemap.xml); "
                "not with --rules or a focus, which decide what is followed")
    follow_nofollow: bool = _doc(False, "follow links marked rel=nofollow (skipped by default)",
                cli=(C, R), group="scope", help="follow rel=nofollow links too")
    store_duplicates: bool = _doc(False, "store a page in full although its canonical link or its body digest names a page stored already (else a row without content saying which)",
                cli=(C, R), group="strategy", help="store duplicate pages (same canonical or body) in full")

    # --- client: recrawl (--recrawl; Nutch's AdaptiveFetchSchedule, gridcrawl.schedule) ---
    recrawl_interval: float = _doc(2_592_000.0, "first interval between two visits of a document, seconds (30 days: Nutch's db.fetch.interval.default)")
    recrawl_min_interval: float = _doc(60.0, "shortest interval between two visits of a document, seconds (Nutch's adaptive min_interval)")
    recrawl_max_interval: float = _doc(31_536_000.0, "longest interval between two visits of a document, seconds (365 days: Nutch's adaptive max_interval)")
    recrawl_inc_rate: float = _doc(0.4, "a page found unchanged (or 304, or gone) is next visited after interval × (1 + this)")
    recrawl_dec_rate: float = _doc(0.2, "a page found changed is next visited after interval × (1 − this)")
    recrawl_simhash_distance: int = _doc(-1, "recrawl: a body whose 64-bit SimHash is within this many bits of the stored one counts as unchanged (e.g. 3; -1: off, the SHA-256 digest alone decides)")
    watch_interval: float = _doc(10.0, "--recrawl --watch: longest wait between two looks for documents coming due, seconds")
    keep_versions: bool = _doc(False, "recrawl: keep the body of every replaced version in document_version (WARC export)",
                cli=(C, R), group="recrawl",
                help="recrawl: keep the body of every replaced version in document_version (for WARC export)")

    # --- gridcrawl spark: the crawl on Apache Spark ---
    spark_partitions: int = _doc(0, "partitions of a Spark crawl's frontier, each owning its hosts (0: twice Spark's default parallelism)",
                cli=(S,), flag="--partitions",
                help="frontier partitions, each owning its hosts (0: twice Spark's default parallelism)")
    spark_layer_urls: int = _doc(100_000, "to-visit URLs a Spark crawl takes into one layer at most (a larger layer runs in several rounds)")

    def replace(self, **changes) -> "Settings":
        """Return a copy with ``changes`` applied (unknown names raise ``TypeError``)."""
        return dataclasses.replace(self, **changes)

    def validate(self) -> "Settings":
        """Check values that cannot work; return self. Raises ``ValueError`` naming the setting
        and its option (:func:`_named`): it may come from the command line, the environment or
        the file."""
        for f in dataclasses.fields(self):  # NaN passes every comparison below; inf is no setting either
            value = getattr(self, f.name)
            if isinstance(value, float) and not math.isfinite(value):
                raise ValueError(f"{_named(f.name)} must be a finite number, not {value!r}")
        if self.max_depth < -1:
            raise ValueError(f"{_named('max_depth')} must be -1 (no limit) or >= 0, not {self.max_depth!r}")
        positive = ("heartbeat_interval", "reconnect_initial", "reconnect_max", "connect_timeout", "robots_retry",
                    "plugin_timeout", "thread_timeout", "record_interval", "quarantine_seconds",
                    "fetch_connect_timeout", "fetch_read_timeout", "download_timeout", "apply_interval",
                    "recrawl_interval", "recrawl_min_interval", "recrawl_max_interval", "watch_interval",
                    "rdf_parse_deadline", "render_timeout", "peer_rate", "peer_burst", "peer_strike_window",
                    "peer_block_seconds")
        for name in positive:
            if getattr(self, name) <= 0:
                raise ValueError(f"{_named(name)} must be > 0, not {getattr(self, name)!r}")
        for name in ("heartbeat_liveness", "max_attempts", "max_threads_per_executor", "start_window",
                     "quarantine_after", "threads", "parse_threads", "max_in_flight", "apply_batch",
                     "max_message_bytes", "max_body_bytes", "concurrent_requests_per_host", "rdf_max_bytes",
                     "max_triples", "render_pages", "render_restart", "spark_layer_urls", "peer_max_strikes",
                     "max_links_per_page", "max_threads_per_application", "max_unacked_bytes",
                     "max_applications_per_user"):
            if getattr(self, name) < 1:
                raise ValueError(f"{_named(name)} must be >= 1, not {getattr(self, name)!r}")
        if self.threads > MAX_THREADS:  # a manager would drop the registration unanswered
            raise ValueError(f"{_named('threads')} must be at most {MAX_THREADS:,} (a manager grants at most its "
                             f"max_threads_per_executor, 64 by default), not {self.threads}")
        if self.dispatch not in ("least-loaded", "host-hash"):
            raise ValueError(f"{_named('dispatch')} must be least-loaded or host-hash, not {self.dispatch!r}")
        for name in ("prefetch", "lease_seconds", "max_redirects", "max_pages", "max_pages_per_host", "download_delay",
                     "max_crawl_delay", "retry_times", "retry_backoff", "trap_near_duplicates", "trap_distance",
                     "render_idle", "spark_partitions", "keep_departed", "detached_timeout"):
            if getattr(self, name) < 0:
                raise ValueError(f"{_named(name)} must be >= 0, not {getattr(self, name)!r}")
        if self.proxy or self.no_proxy:
            from gridcrawl.executor.proxy import ProxyRoute  # the standard library only
            ProxyRoute.parse(self.proxy, self.no_proxy)
        if self.netrc:
            from gridcrawl.executor.credentials import read_netrc  # the standard library only
            read_netrc(self.netrc)
        if self.recrawl_min_interval > self.recrawl_max_interval:
            raise ValueError(f"{_named('recrawl_min_interval')} ({self.recrawl_min_interval!r}) must not exceed "
                             f"{_named('recrawl_max_interval')} ({self.recrawl_max_interval!r})")
        if self.recrawl_inc_rate < 0:
            raise ValueError(f"{_named('recrawl_inc_rate')} must be >= 0, not {self.recrawl_inc_rate!r}")
        if not -1 <= self.recrawl_simhash_distance <= 64:
            raise ValueError(f"{_named('recrawl_simhash_distance')} must be -1 (off) or 0 to 64, "
                             f"not {self.recrawl_simhash_distance!r}")
        if not 0 <= self.recrawl_dec_rate < 1:
            raise ValueError(f"{_named('recrawl_dec_rate')} must be >= 0 and < 1, not {self.recrawl_dec_rate!r}")
        return self

    def warnings(self, environ: Mapping[str, str]) -> list[str]:
        """One-line warnings about fetch settings that work but are likely not what the user
        wants, for a program to log at start: ``environ`` (the process environment) names a
        proxy that ``proxy`` leaves unused; the ``netrc`` file is readable by other users."""
        from gridcrawl.executor.proxy import unused_environment_proxy
        found = [unused_environment_proxy(self.proxy, environ)]
        if self.netrc:
            from gridcrawl.executor.credentials import readable_by_others
            if readable_by_others(self.netrc):
                found.append(f"--netrc {self.netrc} holds passwords and other users can read it: chmod 600 it")
        return [w for w in found if w]

    @property
    def peer_timeout(self) -> float:
        """Seconds of silence after which a peer counts as dead (interval × liveness)."""
        return self.heartbeat_interval * self.heartbeat_liveness

    def request_window(self, render: bool = True) -> float:
        """The longest one grid thread of an executor with these settings may go on sending
        requests to its host after it starts, in seconds: its host's robots.txt (its own fetch,
        ``download_timeout``, or the wait for another worker's, 5 s longer), its page
        (``download_timeout``, redirect hops included) and, for an executor that renders
        (``render``), the browser's requests (``render_timeout``): 65 s by default, 95 s with
        rendering. Not counted: the fetcher's waits between its own requests to a host with a
        delay (bounded only by ``thread_timeout / 2``); counted, they made a dead executor's
        hosts wait 245 s for slots no request held (a kill -9 is the common case of an executor
        declared dead; one only late registers again and says what it still runs).
        An executor declares it when it registers (:class:`gridcrawl.protocol.Register`
        ``request_window``); the manager keeps a taken-back attempt's politeness slot this long
        (:meth:`gridcrawl.manager.queue.ReadyQueue.hold`)."""
        return 2 * self.download_timeout + 5.0 + (self.render_timeout if render else 0.0)

    @classmethod
    def documented(cls) -> list[tuple[str, object, str]]:
        """(name, default, description) of every setting, in declaration order."""
        return [(f.name, f.default, f.metadata.get("doc", "")) for f in dataclasses.fields(cls)]


def _named(name: str) -> str:
    """How an error names setting ``name``: ``setting threads (--threads)``, its option as the
    command lines declare it; the setting's name alone when no program has an option for it
    (it is set in the environment, ``GRIDCRAWL_<NAME>``, or the configuration file)."""
    cli = Settings.__dataclass_fields__[name].metadata.get("cli")
    if cli is None:
        return f"setting {name}"
    return f"setting {name} ({(cli.flag or '--' + (cli.inverse or name).replace('_', '-')).split('/')[0]})"


#: The programs that read a setting besides those with an option for it (its ``cli`` tags):
#: setting -> programs. ``gridcrawl run`` (``run``) reads what its own client reads and passes on
#: what it has an option for (:func:`used_by`). A setting that appears only in a message of a
#: program (the client names the executors' ``download_timeout`` when it waits) is not read by it.
_FETCHER = (E, S, F)  # gridcrawl.executor.fetch.Fetcher.from_settings: the executors, Spark tasks, gridcrawl fetch
_ALSO_USED_BY: dict[str, tuple[str, ...]] = {
    "reconnect_initial": (E, C), "reconnect_max": (E, C), "max_message_bytes": (E, C),
    "thread_timeout": (E, S),  # an executor's and a Spark task's longest wait for a host's robots.txt
    **dict.fromkeys(("record_interval", "max_threads_per_executor", "start_window", "quarantine_after",
                     "quarantine_seconds", "max_threads_per_application", "max_applications_per_user",
                     "max_unacked_bytes", "detached_timeout", "keep_departed", "peer_rate", "peer_burst",
                     "peer_max_strikes", "peer_strike_window", "peer_block_seconds"), (M,)),
    "concurrent_requests_per_host": (C,),  # the client shares its window among hosts by it
    "download_delay": (F,), "max_crawl_delay": (E, S, F),
    "parse_threads": (E,),
    **dict.fromkeys(("fetch_connect_timeout", "fetch_read_timeout", "max_redirects", "keep_non_html",
                     "download_timeout", "max_body_bytes"), _FETCHER),
    "max_links_per_page": (C, S), "render_idle": (E, F), "render_restart": (E,),
    **dict.fromkeys(("rdf_max_bytes", "max_triples", "rdf_parse_deadline", "robots_retry"), (E, S, F)),
    "plugin_timeout": (E, S, F),
    "max_depth": (F,), "apply_batch": (C, S), "apply_interval": (C,), "store_content": (E,),
    **dict.fromkeys(("trap_near_duplicates", "trap_distance", "recrawl_interval", "recrawl_min_interval",
                     "recrawl_max_interval", "recrawl_inc_rate", "recrawl_dec_rate", "recrawl_simhash_distance",
                     "watch_interval"), (C,)),
    "follow_nofollow": (F,), "spark_layer_urls": (S,),
}


def used_by(name: str) -> tuple[str, ...]:
    """The programs (of :data:`PROGRAMS`) that read setting ``name``, in that order: those with
    an option for it, those recorded in :data:`_ALSO_USED_BY`, and ``run`` (``gridcrawl run``)
    when its own client reads it. What a program's section of the configuration file may hold
    (:mod:`gridcrawl.config`). Raises ``KeyError`` for a name that is no setting."""
    f = Settings.__dataclass_fields__[name]
    programs = set(f.metadata["cli"].programs if "cli" in f.metadata else ()) | set(_ALSO_USED_BY.get(name, ()))
    if "client" in programs:
        programs.add("run")
    return tuple(p for p in PROGRAMS if p in programs)


del M, E, C, R, S, X, F
