"""gridcrawl's exceptions, in one tree (the layout of httpx's ``_exceptions.py``).

Every error gridcrawl raises on purpose derives from :class:`GridcrawlError`, so a program that
embeds gridcrawl can catch them all with one ``except``. Each class keeps the builtin base its
callers relied on before the tree existed (``ValueError`` for bad input, ``RuntimeError`` for a
failure of the environment or a peer), so ``except ValueError`` around a parse still catches it,
and every program's one-line message and exit status are unchanged. ``str(exc)`` is always the
one-line message a user sees.

The tree::

    * GridcrawlError
      x InputError (ValueError): bad input from a user, a file or a peer; the message says where
        + ConfigError        the configuration file or a GRIDCRAWL_* variable    (gridcrawl.config)
        + InvalidURL         a URL that cannot be crawled; .url, .reason          (gridcrawl.urls)
        + RuleError          a crawl rule or rules file                           (gridcrawl.rules)
        + PatternError       a user's regular expression that is not valid        (gridcrawl.patterns)
        + PatternTooSlow     a user's regular expression stopped at its time limit (gridcrawl.patterns)
        + ItemSpecError      an item spec (--extract)                             (gridcrawl.items)
        + OntologyError      a --focus-ontology file                              (gridcrawl.focus)
        + KeyFileError       a CURVE key file or directory                        (gridcrawl.keys)
        + AuthError          a user or group that cannot be created or changed    (gridcrawl.auth)
        + UnsupportedDialect a database back end without view SQL                 (gridcrawl.views)
        + ItemExportError    an item export (format, no item table)               (gridcrawl.client.items)
        + ControlError       an operator's pause/resume/cancel                    (gridcrawl.manager.core)
        + DashboardError     the dashboard's address or login                     (gridcrawl.manager.dashboard)
        + ProtocolError      frames that are not a valid message                  (gridcrawl.protocol)
        + SitemapError       a body that is not a readable sitemap                (gridcrawl.executor.sitemap)
        + RDFError           a document that is not readable RDF                  (gridcrawl.semantic)
          - RDFLimit         parsing stopped at a bound (size, triples, time)
      x LinkError (RuntimeError): the link to the manager                         (gridcrawl.link)
        + ManagerUnreachable no manager answered within connect_timeout
        + MessageTooLarge    a message over max_message_bytes that cannot be split (gridcrawl.transport)
        + Refused            the manager refused this peer (credentials, permission, CURVE key)
      x DatabaseError (RuntimeError): a database cannot be used
        + DatabaseUnavailable bad URL, missing driver, server not answering      (gridcrawl.db)
        + SchemaTooNew       a newer gridcrawl wrote the schema                   (gridcrawl.migrations)
        + CrawlDatabaseError the crawl database failed for good during a crawl    (gridcrawl.client.app)
        + LeaseHeld          another manager holds the database's lease           (gridcrawl.manager.lease)
        + LeaseLost          this manager's lease was taken over (fenced out)
      x Unavailable (RuntimeError): an optional part is missing on this machine
        + SparkUnavailable   pyspark or a Java runtime                            (gridcrawl.spark)
        + RenderUnavailable  Playwright or a browser                              (gridcrawl.executor.render)
      x ExportError (RuntimeError): an export that cannot be made                 (gridcrawl.export)
      x ReportError (RuntimeError): a report that cannot be made                  (gridcrawl.report)
      x IllegalTransition (RuntimeError): a grid thread moved against the table   (gridcrawl.states)

The modules named on the right re-export their classes, so ``from gridcrawl.urls import
InvalidURL`` keeps working. Private control-flow exceptions (``executor.fetch._Failure``,
``semantic._StopAtDoctypeEnd``, the Spark test's ``_InjectedFailure``) never reach a caller and
are not part of the tree.
"""

from __future__ import annotations

__all__ = [
    "AuthError", "ConfigError", "ControlError", "CrawlDatabaseError", "DashboardError", "DatabaseError",
    "DatabaseUnavailable", "ExportError", "GridcrawlError", "IllegalTransition", "InputError", "InvalidURL",
    "ItemExportError", "ItemSpecError", "KeyFileError", "LeaseHeld", "LeaseLost", "LinkError",
    "ManagerUnreachable", "MessageTooLarge", "OntologyError", "PatternError", "PatternTooSlow", "ProtocolError", "RDFError", "RDFLimit", "Refused", "RenderUnavailable",
    "ReportError", "RuleError", "SchemaTooNew", "SitemapError", "SparkUnavailable", "Unavailable",
    "UnsupportedDialect",
]


class GridcrawlError(Exception):
    """The base of every exception gridcrawl raises on purpose (see the tree above)."""


# ----------------------------------------------------------------------------------------------
# Bad input


class InputError(GridcrawlError, ValueError):
    """Bad input from a user, a file or a peer; the one-line message says where and why."""


class ConfigError(InputError):
    """The configuration file or an environment variable is unusable; the message says where."""


class InvalidURL(InputError):
    """A URL that cannot be crawled: unparsable, wrong scheme, no host, bad port, too long.

    ``str(exc)`` names the URL and the reason; the parts are also kept as
    ``exc.url`` and ``exc.reason``.
    """

    def __init__(self, url: str, reason: str) -> None:
        shown = url if len(url) <= 200 else url[:200] + "..."
        super().__init__(f"invalid URL {shown!r}: {reason}")
        self.url = url
        self.reason = reason


class RuleError(InputError):
    """A rule (or a rules file) is invalid; the message names the rule and says why."""


class PatternError(InputError):
    """A user's regular expression that is not valid; the message is the engine's, worded as
    ``re.error``'s ("missing ) at position 1")."""


class PatternTooSlow(InputError):
    """A user's regular expression (a rule's pattern, an item spec's url, re or where) took longer
    than its time limit on one text; the message names the pattern and the usual cause."""


class ItemSpecError(InputError):
    """An item spec is invalid; the message names the file, the item and the field, and why."""


class OntologyError(InputError):
    """The ``--focus-ontology`` file cannot be read, does not parse, or names no class or property."""


class KeyFileError(InputError):
    """A key file or directory is missing, unreadable, malformed, or too open (secret key
    readable by group or others)."""


class AuthError(InputError):
    """A user cannot be created or changed: bad name, weak password, unknown group, duplicate."""


class UnsupportedDialect(InputError):
    """gridcrawl has no view SQL for this back end."""


class ItemExportError(InputError):
    """Items cannot be exported (bad format, no items table); the message says why."""


class ControlError(InputError):
    """An operator's pause/resume/cancel cannot be done (unknown or ambiguous application, bad
    action, not allowed); the message says why."""


class DashboardError(InputError):
    """The dashboard cannot be started as asked (bad address, login impossible)."""


class ProtocolError(InputError):
    """A peer sent frames that are not a valid message of this protocol version."""


class SitemapError(InputError):
    """The body is not a readable sitemap (not XML, not a urlset or index, or too large)."""


class RDFError(InputError):
    """A document could not be parsed as RDF (invalid syntax, refused XML entities)."""


class RDFLimit(RDFError):
    """Parsing stopped at a bound of :class:`gridcrawl.semantic.Limits` (too big, too many
    triples, too slow)."""


# ----------------------------------------------------------------------------------------------
# The manager link


class LinkError(GridcrawlError, RuntimeError):
    """The link of an executor, client or operator command to the manager failed
    (:mod:`gridcrawl.link`)."""


class ManagerUnreachable(LinkError):
    """No manager answered the first request (registration, application, control) within
    ``connect_timeout`` seconds."""


class MessageTooLarge(LinkError):
    """A message is larger than ``max_message_bytes``: the manager would drop the connection
    (ZeroMQ's ``MAXMSGSIZE``) and the sender would connect and send it again for ever."""


class Refused(LinkError):
    """The manager refused this peer: bad credentials, missing permission, a CURVE key it does
    not accept, an unknown application; the message is the manager's reason."""


# ----------------------------------------------------------------------------------------------
# Databases


class DatabaseError(GridcrawlError, RuntimeError):
    """A database cannot be used; the message is one line naming the cause and the database."""


class DatabaseUnavailable(DatabaseError):
    """The database URL is invalid, its driver is missing, or its server does not answer."""


class SchemaTooNew(DatabaseError):
    """The database's schema revision is unknown to this release (a newer gridcrawl wrote it)."""


class CrawlDatabaseError(DatabaseError):
    """The crawl database failed in a way waiting will not cure (disk full, permission denied,
    schema mismatch): the message is one line naming the cause and the database. Nothing was
    half-applied; running the client again after the fix resumes the crawl."""


class LeaseHeld(DatabaseError):
    """Another manager holds a live lease on this database (the message names it)."""


class LeaseLost(DatabaseError):
    """This manager's lease was taken over by another (its epoch moved on): stop writing."""


# ----------------------------------------------------------------------------------------------
# Optional parts missing, other failures


class Unavailable(GridcrawlError, RuntimeError):
    """An optional part this command needs is missing on this machine; the message is one line
    saying what to install."""


class SparkUnavailable(Unavailable):
    """pyspark is not installed or no Java runtime is found."""


class RenderUnavailable(Unavailable):
    """This machine cannot render: Playwright is not installed or no browser starts. The message
    is one line saying what to install."""


class ExportError(GridcrawlError, RuntimeError):
    """The export cannot be made (not a crawl database, unwritable output, unknown format)."""


class ReportError(GridcrawlError, RuntimeError):
    """A report cannot be made (unknown or ambiguous application, matplotlib not installed for
    ``--plot``)."""


class IllegalTransition(GridcrawlError, RuntimeError):
    """A grid thread was asked to move between states the table does not allow (a bug)."""
