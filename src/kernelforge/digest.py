"""Per-file digests of a build variant directory, and their verification.

A variant's ``metadata.json`` may carry ``digest: {algorithm, files}``: one base64
digest (standard alphabet, with ``=`` padding) per file, keyed by its path relative to
the variant directory with ``/`` separators. This module computes that map and checks a
directory against it. The encoding and the set of hashed files follow the reference
implementation of the format, so digests written here validate there and vice versa:

* hashed: every regular file below the variant directory, at any depth, hidden files
  included;
* not hashed: ``metadata.json`` and its signature bundle ``metadata.json.sigstore`` at
  the top of the variant (the metadata holds the digest, so it cannot hash itself),
  every ``*.pyc`` file and everything under a ``__pycache__`` directory (Python writes
  these on import; they never ship).

No digest covers bytecode, so no load may run any: the loader compiles kernel packages
from their checked sources and never reads ``__pycache__`` (where Python, other loaders
and older kernelforge versions write bytecode), and :func:`verify_variant` refuses by
default only ``*.pyc`` files outside ``__pycache__`` (sourceless bytecode, which a plain
import would run in place of a missing source). ``bytecode="refuse"`` refuses all of it.

Symbolic links and other non-regular files are refused by default: a variant is a plain
tree, and a link could point the importer at files the digest never covered. A check given
``follow_links=True`` (a local build the user names, which may be a snapshot of Hugging
Face's download cache, whose files are links into ``blobs/``) digests the regular file a
link points to, under the link's own path, as the reference implementation does ("Hub
cache path can be symlinks"); a link to a directory, a dangling link and a link to
anything but a regular file stay refused. The loader then imports through the same link
and checks the bytes it reads against the digest (:mod:`kernelforge.loader`).
"""

from __future__ import annotations

import base64
import hashlib
import os
import stat
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, BinaryIO, Literal

from kernelforge.errors import IntegrityError

__all__ = [
    "ALGORITHMS",
    "BytecodeRule",
    "DEFAULT_ALGORITHM",
    "b64_sha256",
    "compare",
    "digest_block",
    "hash_file",
    "hash_tree",
    "is_bytecode",
    "is_excluded",
    "verify_tree",
    "verify_variant",
]

#: Digest algorithms a ``metadata.json`` may name, spelled as the format spells them.
ALGORITHMS: tuple[str, ...] = ("sha256", "sha512")
DEFAULT_ALGORITHM = "sha256"

# Names excluded only at the top of a variant directory.
_TOP_LEVEL_EXCLUDED = frozenset({"metadata.json", "metadata.json.sigstore"})
_CACHE_DIR = "__pycache__"
_BYTECODE_SUFFIX = ".pyc"
_CHUNK = 1 << 20

#: What a check does with bytecode: leave it out (``"ignore"``), refuse only ``*.pyc``
#: files outside ``__pycache__`` (``"allow-pycache"``), or refuse all of it (``"refuse"``).
BytecodeRule = Literal["ignore", "allow-pycache", "refuse"]
_BYTECODE_RULES = ("ignore", "allow-pycache", "refuse")


def is_bytecode(relpath: str) -> bool:
    """Whether a file counts as Python bytecode: one whose extension is ``pyc`` or any
    path named ``__pycache__`` or under one, as Hugging Face's digest reads it (a file
    named just ``.pyc`` has no extension; a file named ``__pycache__`` counts).

    Args:
        relpath: path relative to the variant directory, with ``/`` separators.
    """
    parts = relpath.split("/")
    name = parts[-1]
    # ".pyc" alone is a hidden file's name, with no extension
    return (name.endswith(_BYTECODE_SUFFIX) and name != _BYTECODE_SUFFIX) or _CACHE_DIR in parts


def _bytecode_problem(relpath: str, rule: BytecodeRule) -> str | None:
    """The ``extra:`` line for a bytecode file the rule refuses, else ``None``."""
    in_cache = _CACHE_DIR in relpath.split("/")
    if rule == "ignore" or (rule == "allow-pycache" and in_cache):
        return None
    fix = "delete that __pycache__ directory" if in_cache else "delete it"
    if rule == "refuse":
        why = "this check allows none"
    else:
        why = "a build ships .py sources, and Python writes bytecode into __pycache__ only"
    return f"extra: {relpath} (Python bytecode: no digest covers it, and {why}; {fix})"


def is_excluded(relpath: str) -> bool:
    """Whether a file is left out of a variant's digest.

    Args:
        relpath: path relative to the variant directory, with ``/`` separators.

    Returns:
        ``True`` for ``metadata.json`` / ``metadata.json.sigstore`` at the top level,
        any ``*.pyc`` and anything under a ``__pycache__`` directory.
    """
    parts = relpath.split("/")
    if len(parts) == 1 and parts[0] in _TOP_LEVEL_EXCLUDED:
        return True
    return is_bytecode(relpath)


def _check_algorithm(algorithm: str) -> None:
    if algorithm not in ALGORITHMS:
        raise ValueError(
            f"algorithm: unsupported digest algorithm {algorithm!r}; "
            f"expected one of {', '.join(ALGORITHMS)}"
        )


def b64_sha256(data: bytes) -> str:
    """The base64 sha256 of some bytes, encoded like :func:`hash_file`."""
    return base64.b64encode(hashlib.sha256(data).digest()).decode("ascii")


def hash_file(path: str | os.PathLike[str], algorithm: str = DEFAULT_ALGORITHM) -> str:
    """Digest one file, streaming it.

    Args:
        path: the file.
        algorithm: ``"sha256"`` (default) or ``"sha512"``.

    Returns:
        The digest, base64-encoded with the standard alphabet and padding.

    Example:
        >>> hash_file("build/torch-cpu/__init__.py")  # doctest: +SKIP
        'WJG1tSLV3whtD/CxEPvZ0hu0/HFjrzTQgoai6Eb2vgM='
    """
    _check_algorithm(algorithm)
    with open(path, "rb") as f:
        return base64.b64encode(file_digest(f, algorithm)).decode("ascii")


def _hash_file_twice(path: Path, algorithm: str, also: str) -> tuple[str, str]:
    """A file's ``algorithm`` and ``also`` digests (encoded as :func:`hash_file`), from
    one read of its bytes: two reads could see two contents (a file rewritten between
    them), one passing the metadata's digests and the other recorded for the import."""
    first, second = hashlib.new(algorithm), hashlib.new(also)
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(_CHUNK), b""):
            first.update(chunk)
            second.update(chunk)
    return (base64.b64encode(first.digest()).decode("ascii"),
            base64.b64encode(second.digest()).decode("ascii"))


def file_digest(fh: BinaryIO, algorithm: str = DEFAULT_ALGORITHM) -> bytes:
    """The digest of the open file ``fh`` from where it stands, read in chunks (a
    multi-gigabyte file is never in memory whole)."""
    if hasattr(hashlib, "file_digest"):  # Python >= 3.11
        return hashlib.file_digest(fh, algorithm).digest()
    h = hashlib.new(algorithm)  # pragma: no cover - Python 3.10
    for chunk in iter(lambda: fh.read(_CHUNK), b""):  # pragma: no cover
        h.update(chunk)
    return h.digest()  # pragma: no cover


def _link_problem(path: Path, follow_links: bool) -> str | None:
    """Why a symbolic link is refused; ``None`` for a link (followed) to a regular file."""
    if not follow_links:
        return "a symbolic link"
    try:
        mode = os.stat(path).st_mode  # follows the whole chain of links
    except FileNotFoundError:
        return f"a dangling symbolic link to {os.readlink(path)}"
    except OSError as err:  # a loop, a target it may not look at, ...
        return f"a symbolic link that cannot be followed ({err.strerror or err})"
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISDIR(mode):
        return "a symbolic link to a directory, which is not followed"
    return "a symbolic link to something that is not a regular file"


def _walk(root: Path, follow_links: bool = False) -> Iterator[tuple[str, Path, str | None]]:
    """Yield ``(relpath, path, problem)`` for every entry but directories.

    Directories are descended (symlinked ones are not), ``__pycache__`` included.
    ``problem`` is ``None`` for a regular file and, with ``follow_links``, for a symbolic
    link to a regular file; else it says what the entry is (a symbolic link, a link to a
    directory, a dangling link, not a regular file). Excluded files come out too:
    callers sort them.
    """
    stack: list[tuple[Path, str]] = [(root, "")]
    while stack:
        directory, prefix = stack.pop()
        with os.scandir(directory) as it:
            entries = sorted(it, key=lambda e: e.name)
        for entry in entries:
            rel = f"{prefix}{entry.name}"
            mode = entry.stat(follow_symlinks=False).st_mode
            if stat.S_ISDIR(mode):
                stack.append((Path(entry.path), rel + "/"))
                continue
            if stat.S_ISREG(mode):
                problem = None
            elif stat.S_ISLNK(mode):
                problem = _link_problem(Path(entry.path), follow_links)
            else:
                problem = "not a regular file"
            yield rel, Path(entry.path), problem


def _tree(
    root: Path, algorithm: str, ignore: frozenset[str] = frozenset(),
    bytecode: BytecodeRule = "ignore", follow_links: bool = False,
    also: dict[str, str] | None = None, also_algorithm: str = DEFAULT_ALGORITHM,
) -> tuple[dict[str, str], list[str], set[str]]:
    """``(digests of the files, refused entries as problem lines, their relpaths)``;
    given ``also``, it receives each file's ``also_algorithm`` digest, made from the same
    read of its bytes."""
    if bytecode not in _BYTECODE_RULES:
        raise ValueError(f"bytecode: expected one of {', '.join(_BYTECODE_RULES)}, got "
                         f"{bytecode!r}")
    if not root.is_dir():
        raise IntegrityError(root, ["not a directory (the variant directory is missing)"])
    files: dict[str, str] = {}
    refused: list[str] = []
    refused_rels: set[str] = set()
    allowed = ("a local build holds regular files and links to regular files only"
               if follow_links else "variants hold regular files only")
    for rel, path, problem in _walk(root, follow_links):
        if rel in ignore:
            continue
        if is_bytecode(rel):
            line = _bytecode_problem(rel, bytecode)
            if line is not None:
                refused.append(line)
            continue
        if is_excluded(rel):
            continue
        if problem is None and also is not None:
            files[rel], also[rel] = _hash_file_twice(path, algorithm, also_algorithm)
        elif problem is None:
            files[rel] = hash_file(path, algorithm)
        else:
            refused.append(f"refused: {rel} ({problem}; {allowed})")
            refused_rels.add(rel)
    return dict(sorted(files.items())), refused, refused_rels


def _not_refused(problems: Iterable[str], refused: set[str]) -> list[str]:
    """``problems`` without the ``missing:`` lines of files already listed as refused, or
    behind a refused link to a directory (a refused entry is not hashed, so every record
    would otherwise also call it, or the files under it, missing)."""
    def behind(rel: str) -> bool:
        parts = rel.split("/")
        return any("/".join(parts[:n]) in refused for n in range(1, len(parts) + 1))

    return [p for p in problems
            if not (p.startswith("missing: ") and behind(p[len("missing: "):]))]


def hash_tree(
    variant_dir: str | os.PathLike[str], *, algorithm: str = DEFAULT_ALGORITHM,
    follow_links: bool = False,
) -> dict[str, str]:
    """Digest every file of a variant directory.

    Args:
        variant_dir: the variant directory (``build/<variant>``).
        algorithm: ``"sha256"`` (default) or ``"sha512"``.
        follow_links: digest the files that symbolic links point to instead of refusing
            the links (a directory of another tool's cache, whose files are links).

    Returns:
        ``{relpath: base64 digest}`` sorted by path; relpaths use ``/``. See the module
        docstring for the files left out.

    Raises:
        IntegrityError: the directory is missing, or holds a symbolic link (unless
            followed to a regular file) or another non-regular file (each one is named).

    Example:
        >>> hash_tree("build/torch-cpu")  # doctest: +SKIP
        {'__init__.py': 'WJG1...', '_ops.py': '...'}
    """
    _check_algorithm(algorithm)
    root = Path(variant_dir)
    files, refused, _rels = _tree(root, algorithm, follow_links=follow_links)
    if refused:
        raise IntegrityError(root, refused)
    return files


def verify_tree(
    variant_dir: str | os.PathLike[str],
    expected: Mapping[str, str],
    *,
    algorithm: str = DEFAULT_ALGORITHM,
    ignore: Iterable[str] = (),
    bytecode: BytecodeRule = "ignore",
) -> None:
    """Check a variant directory against recorded digests.

    Args:
        variant_dir: the variant directory.
        expected: ``{relpath: base64 digest}`` as recorded (``metadata["digest"]["files"]``).
        algorithm: the algorithm the digests were made with.
        ignore: relpaths to leave out besides the usual exclusions.
        bytecode: ``"ignore"`` (default: a build Python imported may hold some),
            ``"allow-pycache"`` or ``"refuse"`` (see :func:`verify_variant`).

    Raises:
        IntegrityError: listing every ``changed:``, ``missing:`` and ``extra:`` file by
            its relative path (refused bytecode included), and every refused symbolic
            link.
    """
    _check_algorithm(algorithm)
    root = Path(variant_dir)
    actual, problems, refused = _tree(root, algorithm, frozenset(ignore), bytecode)
    problems.extend(_not_refused(compare(actual, expected), refused))
    if problems:
        raise IntegrityError(root, problems)


def compare(actual: Mapping[str, str], expected: Mapping[str, str]) -> list[str]:
    """The differences between two ``{relpath: digest}`` maps.

    Args:
        actual: what is on disk.
        expected: what was recorded.

    Returns:
        ``"changed: rel"``, ``"missing: rel"`` (recorded, not on disk) and
        ``"extra: rel"`` (on disk, not recorded) lines, sorted by path; empty when equal.
    """
    problems = []
    for rel in sorted(set(expected) | set(actual)):
        if rel not in actual:
            problems.append(f"missing: {rel}")
        elif rel not in expected:
            problems.append(f"extra: {rel}")
        elif actual[rel] != expected[rel]:
            problems.append(f"changed: {rel}")
    return problems


def verify_variant(
    variant_dir: str | os.PathLike[str],
    metadata: Mapping[str, Any],
    *,
    metadata_sha256: str | None = None,
    recorded: Mapping[str, str] | None = None,
    locked: Mapping[str, str] | None = None,
    bytecode: BytecodeRule = "allow-pycache",
    metadata_data: bytes | None = None,
    follow_links: bool = False,
) -> dict[str, str]:
    """Check a variant directory against every digest known for it, hashing each file once.

    Args:
        variant_dir: the variant directory.
        metadata: its parsed ``metadata.json`` (its ``digest`` block is checked).
        metadata_sha256: the base64 sha256 that ``metadata.json`` must have (the bytes
            that were signature-checked or shown to the trust policy).
        recorded: sha256 digests recorded by a hub or the download cache, keyed by
            relpath, ``metadata.json`` included.
        locked: sha256 digests from a lock file, likewise.
        bytecode: what to do with bytecode, which no digest covers:
            ``"allow-pycache"`` (default: ``__pycache__`` left out, since the loader never
            reads it; a ``*.pyc`` elsewhere, which a plain import would run in place of
            a missing source, refused) or ``"refuse"`` (all of it).
        metadata_data: the bytes ``metadata`` was parsed from. Given, they are what is
            checked as ``metadata.json`` (the file is not read again), so the digests
            checked are those of the very bytes that were hashed: a file that changes
            between two reads (a hub on a hostile file system) cannot show one version
            to the parser and another to the hash.
        follow_links: accept a symbolic link to a regular file and check the bytes it
            leads to (a local build in another tool's cache, whose files are links);
            ``False`` (default) refuses every link, as a hub or the download cache, which
            hold regular files only, must.

    Returns:
        The sha256 of every file as found (``metadata.json`` left out), as
        :func:`hash_tree` gives it. When no record exists at all (a build from an older
        tool, given no ``metadata_sha256``, ``recorded`` or ``locked``), nothing was
        checked: callers decide whether that is acceptable.

    Raises:
        IntegrityError: naming every ``changed:``, ``missing:`` and ``extra:`` file
            (``metadata.json`` and refused bytecode included) and every refused link.
    """
    root = Path(variant_dir)
    block = metadata.get("digest")
    if not (isinstance(block, Mapping) and isinstance(block.get("files"), Mapping)):
        block = None
    algorithm = str(block.get("algorithm", DEFAULT_ALGORITHM)) if block else DEFAULT_ALGORITHM
    _check_algorithm(algorithm)
    # Each file is read once: the digests checked against the metadata's and those the
    # import checks its bytes against (sha256) must come from the same bytes.
    mine: dict[str, str] | None = {} if algorithm != DEFAULT_ALGORITHM else None
    actual, problems, refused = _tree(root, DEFAULT_ALGORITHM, bytecode=bytecode,
                                      follow_links=follow_links, also=mine,
                                      also_algorithm=algorithm)
    meta_path = root / "metadata.json"
    if metadata_data is not None:
        meta_sha: str | None = b64_sha256(metadata_data)
    else:
        meta_sha = hash_file(meta_path) if meta_path.is_file() else None
    with_meta = dict(actual)
    if meta_sha is not None:
        with_meta["metadata.json"] = meta_sha
    found: list[str] = []
    if metadata_sha256 is not None and meta_sha != metadata_sha256:
        found.append("changed: metadata.json" if meta_sha else "missing: metadata.json")
    for expected in (recorded, locked):
        if expected is not None:
            found.extend(compare(with_meta, {k: v for k, v in expected.items()
                                             if k == "metadata.json" or not is_excluded(k)}))
    if block is not None:
        found.extend(compare(actual if mine is None else mine, block["files"]))
    # the same file may differ from several records; a refused one is named once
    problems.extend(dict.fromkeys(_not_refused(found, refused)))
    if problems:
        raise IntegrityError(root, problems)
    return actual


def digest_block(
    variant_dir: str | os.PathLike[str], *, algorithm: str = DEFAULT_ALGORITHM
) -> dict[str, Any]:
    """The ``digest`` value to store in a variant's ``metadata.json``.

    Args:
        variant_dir: the variant directory, complete except for ``metadata.json``.
        algorithm: ``"sha256"`` (default) or ``"sha512"``.

    Returns:
        ``{"algorithm": algorithm, "files": hash_tree(variant_dir)}``.
    """
    return {"algorithm": algorithm, "files": hash_tree(variant_dir, algorithm=algorithm)}
