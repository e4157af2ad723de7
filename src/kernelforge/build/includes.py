"""What each source of a project may read, found by the names it includes.

The planner compiles a kernel source that does not use the build's namespace with a
digest of what it may read (:func:`kernelforge.build.plan.sources_using_extension_name`),
so that its object is kept until one of the project's files it may read changes. This
module scans the project's files for the names they read (:func:`scan`) and digests, for
each source, the files reachable from it through those names (:class:`IncludeGraph`).

The scan errs on the side of reading more: every file of an included base name counts,
whatever its folder and case (a new one found first on the include path included), and
a file that reads a name the scan cannot see (an ``#include`` of a macro, the
assembler's ``.incbin``) is *opaque*: what reaches it may read anything.
"""

from __future__ import annotations

import hashlib
import os
import posixpath
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from kernelforge.digest import file_digest

#: The define that names the build's namespace; a file that names it, or includes the
#: header whose macros expand it (:data:`NAME_HEADER`), uses the namespace.
NAME_DEFINE = b"TORCH_EXTENSION_NAME"

#: The builder's header whose macros expand the define (included by that name).
NAME_HEADER = "registration.h"

#: Blanks a directive may hold between its tokens: spaces, tabs and comments that close
#: on its line (:func:`names_read` blanks those that span lines). Unambiguous, so that a
#: line of many comments takes linear time.
_BLANKS = rb"(?:[ \t]|/\*(?:[^*\n]|\*+[^*/\n])*\*+/)*"

#: A line that is a directive reading a file: ``#include`` (``%:include``,
#: ``#include_next``, ``#import``, C23's ``#embed``) or C++20's ``import "h";``, with the
#: name it gives when that is quoted or bracketed; without one (``#include
#: KERNEL_HEADER``) it reads a file by a macro's value.
_INCLUDE_LINE = re.compile(
    _BLANKS + rb"(?:#|%:)" + _BLANKS
    + rb"(?:include_next|include|import|embed)(?![A-Za-z0-9_])" + _BLANKS
    + rb'(?:[<"]([^>"\n]+)[>"])?'
    + rb"|" + _BLANKS + rb"(?:export[ \t]+)?import" + _BLANKS + rb'[<"]([^>"\n]+)[>"]')

#: The words every such line holds, which find the lines to match.
_INCLUDE_WORDS = (b"include", b"import", b"embed")

#: ``__has_include`` (``__has_include_next``, ``__has_embed``), which tests for a file, so a
#: new one changes what compiles; with the name it tests for, or without one (a macro's).
_HAS_INCLUDE = re.compile(
    rb"__has_(?:include_next|include|embed)[ \t]*\([ \t]*(?:[<\"]([^>\"\n]+)[>\"])?")

#: The assembler's directives that read a file (``asm(".incbin \"table.bin\"")``).
_ASSEMBLER_READ = re.compile(rb"\.(?:incbin|include)\b")

#: Line splices, which join a directive's lines before the preprocessor reads it.
_SPLICE = re.compile(rb"\\[ \t]*\n")

#: Files larger than this are not scanned for names: they are opaque.
_SCANNED_BYTES = 16 << 20



@dataclass(frozen=True)
class Scanned:
    """What :func:`scan` reads from one file."""

    mentions_name: bool  #: it names :data:`NAME_DEFINE` or includes :data:`NAME_HEADER`
    includes: frozenset[str]  #: the base names of the files it reads, lower case
    digest: bytes  #: sha256 of its bytes
    opaque: bool = False  #: it reads a file by a name the scan cannot see


def _normalized(data: bytes) -> bytes:
    """``data`` as the preprocessor's first phases see it: no byte order mark, ``\\n``
    line ends, line splices joined, form feeds and vertical tabs as blanks."""
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    if b"\r" in data:
        data = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
    if b"\\" in data:
        data = _SPLICE.sub(b"", data)
    if b"\f" in data or b"\v" in data:
        data = data.replace(b"\f", b" ").replace(b"\v", b" ")
    return data


def _without_block_comments(text: bytes) -> bytes:
    """``text`` with each ``/* ... */`` a blank, as the preprocessor's third phase has it
    (in one pass: an unclosed comment ends the search)."""
    out: list[bytes] = []
    at = 0
    while (start := text.find(b"/*", at)) >= 0 and (end := text.find(b"*/", start + 2)) >= 0:
        out += [text[at:start], b" "]
        at = end + 2
    out.append(text[at:])
    return b"".join(out)


def names_read(text: bytes) -> tuple[list[str], bool]:
    """The base names (lower case) of the files ``text`` reads, and whether it reads one
    the scan cannot name: as written, and with each block comment a blank (as the
    preprocessor sees a directive after a comment that spans lines)."""
    names, opaque = _names_read(text)
    if b"/*" in text:
        more, also = _names_read(_without_block_comments(text))
        names, opaque = names + more, opaque or also
    return names, opaque


def _names_read(text: bytes) -> tuple[list[str], bool]:
    names: list[bytes] = []
    opaque = _ASSEMBLER_READ.search(text) is not None
    line_starts: set[int] = set()
    for word in _INCLUDE_WORDS:
        at = text.find(word)
        while at >= 0:
            line_starts.add(text.rfind(b"\n", 0, at) + 1)
            end = text.find(b"\n", at)  # the line's other words find the same start
            at = -1 if end < 0 else text.find(word, end)
    for start in sorted(line_starts):
        end = text.find(b"\n", start)
        m = _INCLUDE_LINE.match(text, start, len(text) if end < 0 else end)
        if m is None:
            continue
        name = m.group(1) or m.group(2)
        if name:
            names.append(name)
        else:
            opaque = True
    if b"__has_" in text:
        for m in _HAS_INCLUDE.finditer(text):
            if m.group(1):
                names.append(m.group(1))
            else:
                opaque = True
    return [os.fsdecode(posixpath.basename(n)).lower() for n in names], opaque


def scan(path: Path) -> Scanned:
    """Digest ``path`` and read the names of the files it includes. A file larger than
    :data:`_SCANNED_BYTES` is digested in chunks and is opaque; one holding a NUL byte
    (data for ``#embed``, an object) names no file."""
    with path.open("rb") as fh:
        if os.fstat(fh.fileno()).st_size > _SCANNED_BYTES:
            return Scanned(True, frozenset(), file_digest(fh), opaque=True)
        data = fh.read()
    digest = hashlib.sha256(data).digest()
    if b"\0" in data:
        return Scanned(NAME_DEFINE in data, frozenset(), digest)
    text = _normalized(data)
    del data
    names, opaque = names_read(text)
    return Scanned(NAME_DEFINE in text or NAME_HEADER in names, frozenset(names), digest,
                   opaque)


def base_key(path: Path) -> str:
    """The key a file is found by: its name, lower case (file systems that fold case find
    ``Conf.h`` for ``conf.h``)."""
    return path.name.lower()


class IncludeGraph:
    """The files of a project and the files each names, reduced to strongly connected
    components (headers that include each other), each with a digest of everything
    reachable from it.

    Args:
        scanned: every file that may be read, with its scan.
        by_base: the files of each :func:`base_key`.
        rel_of: the name each file is digested under (its path in the project).
        uses_name: the files that use the build's namespace, directly.
    """

    def __init__(self, scanned: Mapping[Path, Scanned], by_base: Mapping[str, list[Path]],
                 rel_of: Mapping[Path, str], uses_name: Iterable[Path]) -> None:
        self._scanned = scanned
        self._names = {p: sorted({q for base in found.includes for q in by_base.get(base, ())},
                                 key=str)
                       for p, found in scanned.items()}
        self._rel_of = rel_of
        self._uses_name = set(uses_name)
        self._component: dict[Path, int] = {}
        self._digest: list[bytes] = []
        self._names_or_opaque: list[bool] = []

    def _visit(self, root: Path) -> None:
        """Tarjan's algorithm from ``root``, iteratively; each component is finished
        after every component it reaches, so its digest can be made from theirs."""
        if root in self._component:
            return
        index: dict[Path, int] = {}
        low: dict[Path, int] = {}
        stack: list[Path] = []
        on_stack: set[Path] = set()
        work = [(root, 0)]
        while work:
            node, i = work.pop()
            if i == 0:
                index[node] = low[node] = len(index)
                stack.append(node)
                on_stack.add(node)
            children = self._names[node]
            while i < len(children):
                child = children[i]
                i += 1
                if child in self._component:
                    continue
                if child not in index:
                    work += [(node, i), (child, 0)]
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                if low[node] == index[node]:
                    members: list[Path] = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        members.append(member)
                        if member == node:
                            break
                    self._finish(members)
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])

    def _finish(self, members: list[Path]) -> None:
        number = len(self._digest)
        for member in members:
            self._component[member] = number
        reached = sorted({self._component[q] for m in members for q in self._names[m]}
                         - {number})
        h = hashlib.sha256()
        for member in sorted(members, key=str):
            rel = self._rel_of.get(member, str(member))
            h.update(os.fsencode(rel) + b"\0" + self._scanned[member].digest + b"\0")
        for digest in sorted(self._digest[c] for c in reached):
            h.update(digest)
        self._digest.append(h.digest())
        self._names_or_opaque.append(
            any(m in self._uses_name or self._scanned[m].opaque for m in members)
            or any(self._names_or_opaque[c] for c in reached))

    def may_use_name(self, roots: Iterable[Path]) -> bool:
        """Whether what ``roots`` may read uses the namespace, or is opaque (may be
        anything)."""
        roots = list(roots)
        for root in roots:
            self._visit(root)
        return any(self._names_or_opaque[self._component[r]] for r in roots)

    def digest(self, roots: Iterable[Path]) -> str:
        """A digest of the paths and contents of what ``roots`` may read, and of the names
        that lead there."""
        h = hashlib.sha256()
        for root in roots:
            self._visit(root)
            h.update(self._digest[self._component[root]])
        return h.hexdigest()
