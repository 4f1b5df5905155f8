"""windows-1252 as the WHATWG Encoding Standard defines it, for Python's ``cp1252`` codec.

The HTML Standard decodes ``ISO-8859-1``, ``ascii`` and undeclared legacy pages as windows-1252,
and the Encoding Standard's windows-1252 maps every byte: the five that Microsoft's code page
leaves undefined (0x81, 0x8D, 0x8F, 0x90, 0x9D) become the C1 controls of the same number, as in
ISO-8859-1. Python's ``cp1252`` refuses them, so a valid Latin-1 page holding one was stored with
U+FFFD and its WARC payload with ``?``. :data:`ERRORS` names an error handler that gives those
five bytes their WHATWG characters when decoding and their bytes back when encoding (anything
else undecodable is U+FFFD, unencodable ``?``, as ``errors="replace"``), so that a page decoded
with it re-encodes to the bytes it was served as.
"""

from __future__ import annotations

import codecs

#: the ``errors=`` name to decode and encode windows-1252 (``cp1252``) with
ERRORS = "gridcrawl-whatwg-cp1252"
#: bytes ``cp1252`` leaves undefined, which WHATWG's windows-1252 maps to U+0081 ... U+009D
C1_BYTES = frozenset({0x81, 0x8D, 0x8F, 0x90, 0x9D})


def _handler(exc: UnicodeError) -> tuple[str | bytes, int]:
    if isinstance(exc, UnicodeDecodeError):
        return "".join(chr(b) if b in C1_BYTES else "\ufffd" for b in exc.object[exc.start:exc.end]), exc.end
    if isinstance(exc, UnicodeEncodeError):
        part = exc.object[exc.start:exc.end]
        if all(ord(c) in C1_BYTES for c in part):
            return bytes(ord(c) for c in part), exc.end
        return "?" * len(part), exc.end
    raise exc


codecs.register_error(ERRORS, _handler)


def errors_for(encoding: str) -> str:
    """The ``errors=`` argument to decode or encode a page in Python codec ``encoding``:
    :data:`ERRORS` for ``cp1252``, else ``"replace"``."""
    return ERRORS if codecs.lookup(encoding).name == "cp1252" else "replace"
