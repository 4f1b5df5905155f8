"""Credentials for sites behind a login: HTTP Basic authentication from a netrc file (``--netrc``).

An organisation's intranet (a wiki, a document store) often answers ``401 Unauthorized`` until
the client logs in with HTTP authentication. ``--netrc FILE`` names a file in the netrc format
curl (``--netrc-file``), wget and requests read::

    machine wiki.corp.example login crawler password s3cret
    machine docs.corp.example
        login crawler
        password an0ther

Each ``machine`` is a host name (compared case-insensitively, any port, either scheme); its
login and password are sent as ``Authorization: Basic`` (RFC 7617) on every request to that host
— pages, redirect hops, robots.txt, sitemaps and a rendered page's requests — and to no other
host: a redirect to another host goes without them. A ``default`` entry (credentials for every
host) is ignored: a crawl reaches hosts nobody chose, and they would all get the password.
``account`` and ``macdef`` are ignored too. Digest, NTLM and form logins are not supported.

Only the standard library is imported here (``netrc``): ``Settings.validate`` reads the file at
start, before any fetching library is loaded.
"""

from __future__ import annotations

import netrc
import os
import stat


def read_netrc(path: str) -> dict[str, tuple[str, str]]:
    """The credentials of a netrc file: ``{host (lower case): (login, password)}``.

    ``default`` and entries without a login or password are left out. Raises ``ValueError``
    (one line naming ``--netrc`` and the file, never a password) when the file cannot be read
    or does not parse, or when it names no host at all.
    """
    shown = f"--netrc {path}"
    full = os.path.abspath(os.path.expanduser(path))
    try:
        parsed = netrc.netrc(full)
    except FileNotFoundError:
        raise ValueError(f"{shown}: no such file") from None
    except netrc.NetrcParseError as exc:
        raise ValueError(f"{shown}: not a netrc file: {exc.msg} (line {exc.lineno})") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"{shown}: cannot read it ({exc})") from None
    found = {host.lower().rstrip("."): (login, password)
             for host, (login, _account, password) in parsed.hosts.items()
             if host != "default" and login and password}
    if not found:
        raise ValueError(f"{shown}: no 'machine HOST login USER password PASS' entry")
    return found


def readable_by_others(path: str) -> bool:
    """True if the file at ``path`` may be read by users other than its owner (group or other
    read bit set): a password file should be mode 0600. False when it cannot be checked."""
    try:
        mode = os.stat(os.path.expanduser(path)).st_mode
    except OSError:
        return False
    return bool(mode & (stat.S_IRGRP | stat.S_IROTH))


__all__ = ["read_netrc", "readable_by_others"]
