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

Symbolic links and other non-regular files are refused: a variant is a plain tree, and a
link could point the importer at files the digest never covered.
"""

from __future__ import annotations

import base64
import hashlib
import os
import stat
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from kernelforge.errors import IntegrityError

__all__ = [
    "ALGORITHMS",
    "DEFAULT_ALGORITHM",
    "digest_block",
    "hash_file",
    "hash_tree",
    "is_excluded",
    "verify_tree",
]

#: Digest algorithms a ``metadata.json`` may name, spelled as the format spells them.
ALGORITHMS: tuple[str, ...] = ("sha256", "sha512")
DEFAULT_ALGORITHM = "sha256"

# Names excluded only at the top of a variant directory.
_TOP_LEVEL_EXCLUDED = frozenset({"metadata.json", "metadata.json.sigstore"})
_CACHE_DIR = "__pycache__"
_BYTECODE_SUFFIX = ".pyc"
_CHUNK = 1 << 20


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
    if parts[-1].endswith(_BYTECODE_SUFFIX):
        return True
    return _CACHE_DIR in parts[:-1]


def _check_algorithm(algorithm: str) -> None:
    if algorithm not in ALGORITHMS:
        raise ValueError(
            f"algorithm: unsupported digest algorithm {algorithm!r}; "
            f"expected one of {', '.join(ALGORITHMS)}"
        )


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
        if hasattr(hashlib, "file_digest"):  # Python >= 3.11
            h = hashlib.file_digest(f, algorithm)
        else:  # pragma: no cover - Python 3.10
            h = hashlib.new(algorithm)
            for chunk in iter(lambda: f.read(_CHUNK), b""):
                h.update(chunk)
    return base64.b64encode(h.digest()).decode("ascii")


def _walk(root: Path) -> Iterator[tuple[str, Path, bool]]:
    """Yield ``(relpath, path, is_regular_file)`` for every non-excluded entry.

    Directories are descended (symlinked ones are not); entries that are neither
    regular files nor directories (symlinks, sockets, ...) come out with ``False``.
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
                if entry.name != _CACHE_DIR:
                    stack.append((Path(entry.path), rel + "/"))
                continue
            if is_excluded(rel):
                continue
            yield rel, Path(entry.path), stat.S_ISREG(mode)


def _tree(
    root: Path, algorithm: str, ignore: frozenset[str] = frozenset()
) -> tuple[dict[str, str], list[str]]:
    if not root.is_dir():
        raise IntegrityError(root, ["not a directory (the variant directory is missing)"])
    files: dict[str, str] = {}
    refused: list[str] = []
    for rel, path, regular in _walk(root):
        if rel in ignore:
            continue
        if regular:
            files[rel] = hash_file(path, algorithm)
        else:
            kind = "a symbolic link" if path.is_symlink() else "not a regular file"
            refused.append(f"refused: {rel} ({kind}; variants hold regular files only)")
    return dict(sorted(files.items())), refused


def hash_tree(
    variant_dir: str | os.PathLike[str], *, algorithm: str = DEFAULT_ALGORITHM
) -> dict[str, str]:
    """Digest every file of a variant directory.

    Args:
        variant_dir: the variant directory (``build/<variant>``).
        algorithm: ``"sha256"`` (default) or ``"sha512"``.

    Returns:
        ``{relpath: base64 digest}`` sorted by path; relpaths use ``/``. See the module
        docstring for the files left out.

    Raises:
        IntegrityError: the directory is missing, or holds a symbolic link or another
            non-regular file (each one is named).

    Example:
        >>> hash_tree("build/torch-cpu")  # doctest: +SKIP
        {'__init__.py': 'WJG1...', '_ops.py': '...'}
    """
    _check_algorithm(algorithm)
    root = Path(variant_dir)
    files, refused = _tree(root, algorithm)
    if refused:
        raise IntegrityError(root, refused)
    return files


def verify_tree(
    variant_dir: str | os.PathLike[str],
    expected: Mapping[str, str],
    *,
    algorithm: str = DEFAULT_ALGORITHM,
    ignore: Iterable[str] = (),
) -> None:
    """Check a variant directory against recorded digests.

    Args:
        variant_dir: the variant directory.
        expected: ``{relpath: base64 digest}`` as recorded (``metadata["digest"]["files"]``).
        algorithm: the algorithm the digests were made with.
        ignore: relpaths to leave out besides the usual exclusions.

    Raises:
        IntegrityError: listing every ``changed:``, ``missing:`` and ``extra:`` file by
            its relative path, and every refused symbolic link.
    """
    _check_algorithm(algorithm)
    root = Path(variant_dir)
    actual, problems = _tree(root, algorithm, frozenset(ignore))
    for rel in sorted(set(expected) | set(actual)):
        if rel not in actual:
            problems.append(f"missing: {rel}")
        elif rel not in expected:
            problems.append(f"extra: {rel}")
        elif actual[rel] != expected[rel]:
            problems.append(f"changed: {rel}")
    if problems:
        raise IntegrityError(root, problems)


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
