"""JSON and TOML parsing whose every failure is a ``ValueError``.

The standard parsers recurse once per nesting level, so a document nested a few
thousand levels deep (``[[[[...``) raises ``RecursionError`` rather than their own
decode error. The files kernelforge reads come from users and hubs; each place that
reads one turns a decode error into a kernelforge error naming the file, which these
helpers let it do for that case too.
"""

from __future__ import annotations

import json
import sys
from typing import Any

#: Why a document too deeply nested is refused (the parsers give no position for it).
TOO_DEEP = "values are nested too deeply to be read"
#: How to upgrade, for a file of a newer format (:func:`newer_format`): kernelforge is
#: installed from its checkout; pip, given the name kernelforge, would fetch the project
#: of that name on PyPI, another one, in its place.
UPGRADE = ("upgrade kernelforge (update the checkout it was installed from, then run "
           "pip install -e . there again)")


def json_loads(data: str | bytes) -> Any:
    """``json.loads``; a document nested too deeply raises ``ValueError`` too."""
    try:
        return json.loads(data)
    except RecursionError:
        raise ValueError(TOO_DEEP) from None


def toml_loads(text: str) -> dict[str, Any]:
    """``tomllib.loads``; a document nested too deeply raises ``TOMLDecodeError`` too."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python 3.10
        import tomli as tomllib
    try:
        return tomllib.loads(text)
    except RecursionError:
        raise tomllib.TOMLDecodeError(TOO_DEEP) from None


def newer_format(doc: object, current: str) -> str | None:
    """The ``format`` of ``doc`` (a parsed JSON document) where it names a later
    version of ``current`` (``<name>/<N>`` with a higher ``N``: a file that a newer
    kernelforge wrote), else ``None``. ``N`` has at most nine digits: a longer one is
    no version (and ``int`` refuses strings of thousands of digits)."""
    found = doc.get("format") if isinstance(doc, dict) else None
    prefix, _, number = current.rpartition("/")
    if not isinstance(found, str) or not found.startswith(f"{prefix}/"):
        return None
    version = found[len(prefix) + 1:]
    ok = version.isascii() and version.isdigit() and len(version) <= 9
    return found if ok and int(version) > int(number) else None


def newer_format_number(doc: object, current: int, missing: int | None = 1) -> int | None:
    """The numeric ``format`` of ``doc`` (a parsed JSON document) where it is above
    ``current`` (a file that a newer kernelforge wrote), else ``None``. A document
    without one is of format ``missing``; a bool is no format."""
    found = doc.get("format", missing) if isinstance(doc, dict) else None
    if isinstance(found, int) and not isinstance(found, bool) and found > current:
        return found
    return None


def undecodable_at(err: UnicodeDecodeError) -> str:
    """Where in its text ``err`` met the bytes it could not decode, as an editor counts:
    ``line 3, column 7`` (the decoder's ``position`` is a byte offset in the file)."""
    before = err.object[:err.start]
    line_start = before.rfind(b"\n") + 1
    line = before.count(b"\n") + 1
    column = len(before[line_start:].decode(err.encoding, errors="replace")) + 1
    return f"line {line}, column {column}"
