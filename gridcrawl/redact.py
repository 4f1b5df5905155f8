"""How gridcrawl shows what may hold a password: a database URL (its password, an ODBC
connection string's ``PWD=``), a setting's value, a message quoting one. Every program prints
URLs in its errors, summaries and ``config show``; none may print a secret there. Imports
nothing heavy (SQLAlchemy only inside :func:`shown_url` and :func:`holds_secret`), so that
``gridcrawl config show`` and ``--help`` stay light (issue 23)."""

from __future__ import annotations

import re


def shown_url(url) -> str:
    """A database URL (a string or SQLAlchemy ``URL``) as a program may print it: its password
    replaced by ``***``, and so are, in its query, a ``password``/``pwd`` value and the ``PWD``
    or ``Password`` of an ODBC connection string (``odbc_connect``, URL-encoded or not); the rest
    of the query (the ODBC driver, a schema option) is kept, so that a command printed with it
    works once its password is filled in. A string SQLAlchemy cannot parse is shown up to its
    ``?``."""
    from sqlalchemy.engine import URL, make_url
    from sqlalchemy.exc import ArgumentError
    try:
        parsed = url if isinstance(url, URL) else make_url(url)
        query = {key: tuple(_masked(key, v) for v in value) if isinstance(value, tuple) else _masked(key, value)
                 for key, value in parsed.query.items()}
        return parsed.set(query=query).render_as_string(hide_password=True)
    except (ArgumentError, ValueError):
        return str(url).split("?", 1)[0]


def holds_secret(url: str) -> bool:
    """True when :func:`shown_url` hides something of ``url``: a password, or one in its query."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError
    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError):
        return False
    return parsed.password is not None or any(
        any(_masked(key, v) != v for v in (value if isinstance(value, tuple) else (value,)))
        for key, value in parsed.query.items())


_USERINFO_SECRET = re.compile(r"(?P<user>[^\s:/@'\"\[\]]+):(?P<secret>[^\s@/'\"]+)@")
_ODBC_SECRET_TEXT = re.compile(r"(?i)(^|[;&?\s'\"{]|%3B)(pwd|password)(=|%3D)(?:[^;&\s'\"%]|%(?!3B))*")


def hide_passwords(text: str) -> str:
    """``text`` (a message, a setting's value) with every password a URL or an ODBC connection
    string in it may carry as ``***``: ``user:secret@`` (a scheme forgotten included) and
    ``PWD=secret`` (URL-encoded too). For what is shown of a value that is no parsed URL."""
    text = _USERINFO_SECRET.sub(lambda m: f"{m['user']}:***@", text)
    return _ODBC_SECRET_TEXT.sub(lambda m: f"{m.group(1)}{m.group(2)}{m.group(3)}***", text)


_ODBC_SECRET = re.compile(r"(?i)((?:^|;)\s*(?:pwd|password)\s*=\s*)(\{(?:[^}]|\}\})*\}|[^;]*)")


def _masked(key: str, value: str) -> str:
    """A URL query ``value`` of ``key`` with any password in it as ``***``."""
    if key.lower() in ("password", "pwd", "passwd"):
        return "***"
    if key.lower() == "odbc_connect":
        return _ODBC_SECRET.sub(lambda m: m.group(1) + "***", value)
    return value


# C0 and C1 control characters but tab and newline: a server's reason phrase, a page's title
# or an anchor may hold ESC sequences that set a terminal's title or clear its screen
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def terminal_text(text: str) -> str:
    """``text`` as a program prints it on a terminal with rich: its control characters shown as
    ``\\xNN`` (a server's ``ESC]0;...`` would set the terminal's title, ``ESC[2J`` clear the
    screen) and its rich markup escaped (``[render]`` printed, not read as a style)."""
    from rich.markup import escape
    return escape(_CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text))
