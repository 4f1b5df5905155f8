"""CURVE key pairs for encrypted, authenticated ZeroMQ connections, and the manager's allow-list.

This module owns gridcrawl's key files (CurveZMQ, RFC 26/CURVEZMQ; pyzmq's ``zmq.auth`` file
format, which is czmq's "zcert" format):

* ``NAME.key`` — the public key (share it: the manager's goes to every executor and client; an
  executor's or client's goes into the manager's allow-list directory);
* ``NAME.key_secret`` — the public and the secret key, file mode 0600 (keep it where it is).

:func:`new_key_pair` writes them with ``zmq.auth.create_certificates`` inside a private (0700)
temporary folder, sets the secret file to 0600 and only then moves both into place, so the secret
is never readable by others, not even for a moment. :func:`load_secret` refuses a secret file
that group or others can read (as ssh does). :class:`AllowList` is the manager's list of accepted
public keys: every ``*.key`` file of a directory, read again at each new connection (add or
remove a file and the next connection sees it), the file's name being the peer's authenticated
identity (the ZAP ``User-Id`` of its messages). :func:`start_authenticator` runs pyzmq's ZAP
handler (``ThreadAuthenticator``) with that list.

Sources: ZeroMQ RFC 26 (CurveZMQ) and RFC 27 (ZAP); pyzmq ``zmq.auth`` (``create_certificates``,
``load_certificate``, ``ThreadAuthenticator``, ``configure_curve_callback``, ``curve_user_id``).
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path

import zmq
import zmq.auth
from zmq.utils import z85
from zmq.auth.thread import ThreadAuthenticator

from gridcrawl.errors import KeyFileError  # noqa: F401 (re-exported)

log = logging.getLogger("gridcrawl.keys")

_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.@-]{0,63}$")
PUBLIC_SUFFIX = ".key"
SECRET_SUFFIX = ".key_secret"


@dataclass(frozen=True)
class ClientKeys:
    """What an executor or client needs for CURVE: its own key pair and the manager's public
    key (all z85-encoded, 40 bytes each), and ``options``, the command-line options that give
    them (``--curve-secret FILE --curve-server-key FILE``), for the commands a program suggests."""

    public: bytes
    secret: bytes
    server_public: bytes
    options: tuple[str, ...] = ()


@dataclass(frozen=True)
class ServerKeys:
    """What the manager needs for CURVE: its key pair (z85) and the allow-list directory."""

    public: bytes
    secret: bytes
    allow_dir: Path


def _check_z85_key(key: bytes | None, path: Path, what: str) -> bytes:
    if not key or len(key) != 40:
        raise KeyFileError(f"{path}: no valid {what} key (expected 40 z85 characters)")
    try:
        if len(z85.decode(key)) != 32:
            raise ValueError
    except Exception:
        raise KeyFileError(f"{path}: the {what} key is not z85-encoded") from None
    return key


def new_key_pair(name: str, directory: str | os.PathLike = ".") -> tuple[Path, Path]:
    """Write ``NAME.key`` (public, mode 0644) and ``NAME.key_secret`` (mode 0600) in
    ``directory`` (created 0700 if missing); return their paths (public, secret).

    ``name`` is 1–64 letters, digits, ``_ . @ -`` (it becomes the peer's identity at the manager).
    Raises :class:`KeyFileError` for a bad name (a path names the ``--dir`` and name to give instead),
    a folder that cannot be made or written in, or
    if either file exists already (a key pair is never overwritten).
    """
    if isinstance(name, str) and ("/" in name or os.sep in name) and _NAME.match(os.path.basename(name)):
        # keys/desk-17: a folder and a name, which the name alone was refused as
        raise KeyFileError(f"invalid key name {name!r}: a name is no path; give the folder apart: "
                           f"gridcrawl keys new {os.path.basename(name)} --dir {os.path.dirname(name) or os.sep}")
    if not isinstance(name, str) or not _NAME.match(name):
        raise KeyFileError(f"invalid key name {name!r}: use 1-64 letters, digits, _ . @ - (not first)")
    folder = Path(directory)
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        private = Path(tempfile.mkdtemp(prefix=".gridcrawl-keys-", dir=folder))  # mode 0700
    except OSError as exc:  # ("[Errno 17] File exists: 'keys/alice.key'" said nothing of --dir)
        what = "is a file, not a folder" if folder.is_file() else f"cannot be written in ({exc.strerror})"
        raise KeyFileError(f"{folder} {what}: give --dir a folder for the key files") from None
    public, secret = folder / f"{name}{PUBLIC_SUFFIX}", folder / f"{name}{SECRET_SUFFIX}"
    for path in (public, secret):
        if path.exists():
            shutil.rmtree(private, ignore_errors=True)
            raise KeyFileError(f"{path} exists already; remove it first or choose another name")
    try:
        made_public, made_secret = (Path(p) for p in zmq.auth.create_certificates(private, name))
        os.chmod(made_secret, 0o600)
        os.chmod(made_public, 0o644)
        os.link(made_secret, secret)  # link: fails instead of overwriting a file made meanwhile
        os.link(made_public, public)
    except FileExistsError as exc:
        raise KeyFileError(f"{exc.filename} exists already") from None
    finally:
        shutil.rmtree(private, ignore_errors=True)
    log.info("CURVE key pair %s written: %s, %s", name, public, secret)
    return public, secret


def load_secret(path: str | os.PathLike) -> tuple[bytes, bytes]:
    """(public, secret) z85 keys from a ``.key_secret`` file.

    Raises :class:`KeyFileError` if the file is missing, holds no secret key, or (on POSIX) can
    be read by its group or others (``chmod 600 FILE`` fixes that).
    """
    file = Path(path)
    try:
        mode = file.stat().st_mode
    except OSError as exc:
        raise KeyFileError(f"cannot read secret key file {file}: {exc.strerror}") from None
    try:
        public, secret = zmq.auth.load_certificate(file)
    except (OSError, ValueError) as exc:
        raise KeyFileError(f"{file} is not a CURVE key file: {exc}") from None
    if public and not secret:  # the public half of a pair: no chmod makes it a secret key
        raise KeyFileError(f"{file} is a public key file, with no secret key in it: give the pair's "
                           f"{file.name.removesuffix(PUBLIC_SUFFIX)}{SECRET_SUFFIX}")
    if os.name == "posix" and mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise KeyFileError(f"secret key file {file} is accessible by others (mode {stat.S_IMODE(mode):04o}); "
                           f"run: chmod 600 {file}")
    public, secret = _check_z85_key(public, file, "public"), _check_z85_key(secret, file, "secret")
    if zmq.curve_public(secret) != public:  # halves of two pairs: the manager would refuse it unexplained
        raise KeyFileError(f"{file}: its public key is not the one its secret key makes (the halves of two "
                           "key pairs?): make a new pair with gridcrawl keys new")
    return public, secret


def load_public(path: str | os.PathLike) -> bytes:
    """The z85 public key in ``path`` (a ``.key`` file, or a ``.key_secret`` file's public
    part). Raises :class:`KeyFileError` if it is missing or malformed."""
    file = Path(path)
    if not file.is_file():
        raise KeyFileError(f"cannot read public key file {file}: "
                           f"{'it is a directory' if file.is_dir() else 'no such file'}")
    try:
        public, _ = zmq.auth.load_certificate(file)
    except (OSError, ValueError) as exc:
        raise KeyFileError(f"cannot read public key file {file}: {exc}") from None
    return _check_z85_key(public, file, "public")


def client_keys(secret_file: str | os.PathLike, server_key_file: str | os.PathLike) -> ClientKeys:
    """An executor's or client's :class:`ClientKeys` from its secret key file and the manager's
    public key file. Raises :class:`KeyFileError`, also when the manager's file holds its
    secret key (copied to a desktop, it lets anyone who reads it pose as the manager)."""
    public, secret = load_secret(secret_file)
    server = Path(server_key_file)
    try:
        _, server_secret = zmq.auth.load_certificate(server)
    except (OSError, ValueError):
        server_secret = None  # load_public says what is wrong with it
    if server_secret:
        raise KeyFileError(f"{server} holds the manager's secret key: give its public key file "
                           f"({server.name.removesuffix(SECRET_SUFFIX)}{PUBLIC_SUFFIX}) and keep the secret one "
                           "on the manager alone")
    return ClientKeys(public, secret, load_public(server),
                      ("--curve-secret", str(secret_file), "--curve-server-key", str(server_key_file)))


def server_keys(secret_file: str | os.PathLike, allow_dir: str | os.PathLike) -> ServerKeys:
    """The manager's :class:`ServerKeys` from its secret key file and allow-list directory.
    Raises :class:`KeyFileError` (also when the directory does not exist or is a file: as
    :class:`AllowList` says)."""
    public, secret = load_secret(secret_file)
    return ServerKeys(public, secret, AllowList(allow_dir).directory)


class AllowList:
    """The public keys the manager accepts: every ``*.key`` file in ``directory``.

    The directory is read again at every check (a ZAP request is made once per new connection,
    so this is cheap), so adding or deleting a file takes effect for the next connection. A file
    that does not parse is skipped with a warning. Used as pyzmq's CURVE credentials provider
    (:meth:`callback`) and to name a key (:meth:`name_of`).
    """

    def __init__(self, directory: str | os.PathLike) -> None:
        self.directory = Path(directory)
        if not self.directory.is_dir():
            what = "is a file, not a directory" if self.directory.exists() else "does not exist"
            raise KeyFileError(f"allow-list directory {self.directory} {what} (--curve-allow names the directory "
                               "of the allowed peers' .key files)")
        self._refused: dict[str, int] = {}
        self._unreadable: dict[Path, float] = {}  # file -> its mtime when its warning was logged

    def keys(self) -> dict[bytes, str]:
        """z85 public key -> name (the file name without ``.key``) of every allowed key. A file
        that does not parse is warned about once (again when it changes), not at every connection."""
        found: dict[bytes, str] = {}
        for file in sorted(self.directory.glob(f"*{PUBLIC_SUFFIX}")):
            try:
                found.setdefault(load_public(file), file.name[: -len(PUBLIC_SUFFIX)])
            except KeyFileError as exc:
                try:
                    changed = file.stat().st_mtime
                except OSError:
                    changed = 0.0
                if self._unreadable.get(file) != changed:
                    self._unreadable[file] = changed
                    log.warning("allow-list: %s (skipped until it changes)", exc)
        return found

    def names(self) -> set[str]:
        """The names of the key files in the directory now (``NAME`` of ``NAME.key``), read
        without parsing them: the manager's check, every second, that a connected peer's key is
        still allowed."""
        return {file.name[: -len(PUBLIC_SUFFIX)] for file in self.directory.glob(f"*{PUBLIC_SUFFIX}")}

    def problems(self) -> list[str]:
        """What is wrong with the directory's contents now, one sentence each for the manager's
        log at start (empty when nothing is): secret key files in it (``NAME.key_secret``, copied
        instead of ``NAME.key``: the list reads public keys alone, so their peers are refused,
        and a secret key belongs on its own machine alone), and no ``.key`` file at all (every
        executor and client is refused until one is added)."""
        found = []
        secrets = sorted(file.name for file in self.directory.glob(f"*{SECRET_SUFFIX}"))
        if secrets:
            shown = ", ".join(secrets[:5]) + (f" and {len(secrets) - 5} more" if len(secrets) > 5 else "")
            found.append(f"allow-list directory {self.directory} holds secret key files ({shown}): only public "
                         f"NAME{PUBLIC_SUFFIX} files are read there, so their peers are refused; copy each peer's "
                         f"NAME{PUBLIC_SUFFIX} there instead, and delete the secret ones, which belong on their own "
                         "machines alone")
        if not self.names():
            found.append(f"allow-list directory {self.directory} has no {PUBLIC_SUFFIX} file: every executor and "
                         f"client is refused until its public key (NAME{PUBLIC_SUFFIX}, made by gridcrawl keys new "
                         "NAME) is copied there")
        return found

    def _secret_file_of(self, z85_key: bytes) -> str | None:
        """The name of a ``.key_secret`` file in the directory whose public key is ``z85_key``, or
        None: a refused peer whose key pair's secret file was copied there instead of its public one."""
        for file in sorted(self.directory.glob(f"*{SECRET_SUFFIX}")):
            try:
                public, _ = zmq.auth.load_certificate(file)
            except (OSError, ValueError):
                continue
            if public == z85_key:
                return file.name
        return None

    def name_of(self, z85_key: bytes) -> str | None:
        """The name of the allowed key ``z85_key``, or None if it is not allowed."""
        return self.keys().get(bytes(z85_key))

    def callback(self, domain: str, z85_key: bytes) -> bool:
        """pyzmq's credentials-provider hook: True if ``z85_key`` may connect."""
        name = self.name_of(z85_key)
        key = bytes(z85_key).decode("ascii", errors="replace")
        if name is None:
            # A refused peer's ZeroMQ reconnects every few hundred ms: log the 1st, 10th, 100th ... refusal.
            count = self._refused[key] = self._refused.get(key, 0) + 1
            if len(self._refused) > 10_000:
                self._refused.clear()
            if count in (1, 10, 100) or count % 1000 == 0:
                secret = self._secret_file_of(bytes(z85_key))
                why = "" if secret is None else (
                    f": it is the key of {secret} in the allow-list directory, a secret key file, which is not read; "
                    f"copy {secret.removesuffix(SECRET_SUFFIX)}{PUBLIC_SUFFIX} there instead")
                log.warning("CURVE: refused a connection with unknown public key %s (%s)%s", key,
                            "once" if count == 1 else f"{count:,} times", why)
            return False
        log.debug("CURVE: accepted key %s", name)  # (the manager's "register/open from CURVE key" line says it once)
        return True


class _NamedAuthenticator(ThreadAuthenticator):
    """pyzmq's ZAP thread, reporting an accepted key's allow-list name as its ``User-Id``."""

    allow_list: AllowList

    def curve_user_id(self, client_public_key: bytes) -> str:
        z85_key = z85.encode(client_public_key)
        return self.allow_list.name_of(z85_key) or z85_key.decode("ascii")


def start_authenticator(context: zmq.Context, allow: AllowList) -> ThreadAuthenticator:
    """Start the ZAP handler on ``context`` accepting the CURVE keys of ``allow``; the
    authenticated name reaches the manager as each message's ``User-Id`` property.

    Must run before the manager's socket binds; stop it with ``.stop()`` before the context is
    terminated. Without a running ZAP handler libzmq accepts *any* CURVE client key.
    """
    auth = _NamedAuthenticator(context, log=logging.getLogger("gridcrawl.zap"))
    auth.allow_list = allow
    auth.configure_curve_callback("*", credentials_provider=allow)
    auth.start()
    return auth


__all__ = ["KeyFileError", "ClientKeys", "ServerKeys", "AllowList", "new_key_pair", "load_secret",
           "load_public", "client_keys", "server_keys", "start_authenticator"]
