"""Durable file writes: copy, fsync, atomic file and ref replacement.

The local hub, the download cache, the trust store and publisher keys, the lock files
and the build's up-to-date stamps all write through these helpers, so that a crash
leaves either the old state or the new one. A local-hub revision is written under
``tmp/`` (which readers never look at), every file and directory fsynced, before the
rename that makes it visible; a ref or a file replaced in place is written to a hidden
temporary file and swapped in with ``os.replace``. The temporaries a writer killed
before its rename left are removed by the next writer under the same lock
(:func:`remove_temp_leftovers`). :data:`DISK_FULL` and :data:`NOT_WRITABLE` are the
refused writes whose fix the writers name, and :func:`nearest_folder` the folder they
name.
"""

from __future__ import annotations

import base64
import errno
import hashlib
import logging
import os
import re
import secrets
from pathlib import Path

from kernelforge.digest import DEFAULT_ALGORITHM

logger = logging.getLogger(__name__)

__all__ = [
    "CARD_FILE", "DISK_FULL", "LEFTOVER_NAME", "NOT_WRITABLE", "copy_file", "copy_tree",
    "fsync_dir", "make_dirs", "nearest_folder", "remove_temp_leftovers", "replace_file",
    "temp_leftovers", "write_file", "write_ref", "write_temp",
]

CARD_FILE = "README.md"
#: What the file system says of a write to a full disk (or quota), and of one to a place
#: this user may not write (or a read-only file system): the two refusals whose fix the
#: writers (build, hubs, cache, trust store) name rather than pass the system's words on.
DISK_FULL = frozenset({errno.ENOSPC, errno.EDQUOT})
NOT_WRITABLE = frozenset({errno.EROFS, errno.EACCES, errno.EPERM})
_CHUNK = 1 << 20
_TEMP_BYTES = 6  # random bytes in a temporary's name (:func:`write_temp`)

#: What a build leaves beside ``build/<variant>/`` while it runs: its staging directory
#: (``.<variant>.tmp-<owner>-<random>``) and, where the file system cannot exchange two
#: directories in one step, the old tree set aside (``.<variant>.old-<owner>``); the
#: owner names the build's host and process (``kernelforge.build.package._owner``:
#: ``<8 hex>-<digits>``). The build recovers what a killed build left
#: (``kernelforge.build.package.recover_leftovers``); ``publish`` skips these entries
#: and refuses a build whose variant is set aside. (Older versions named staging
#: ``.<variant>.<8 random>``: too like a user's own folder to delete.)
LEFTOVER_NAME = re.compile(
    r"^\.(?P<variant>[^.]+)\.(?:old-(?P<old>[0-9a-f]{8}-\d+)"
    r"|tmp-(?P<tmp>[0-9a-f]{8}-\d+)-[A-Za-z0-9_]+)$"
)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def fsync_dir(path: Path) -> None:
    """Flush a directory's entries (new names, renames) to disk."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def make_dirs(path: Path) -> None:
    """Create ``path`` and its missing parents, fsyncing the directory that holds each new
    one: a new folder's name is an entry of its parent, and without that fsync a power
    loss can drop it, and with it everything written below (a revision, a ref) that was
    itself fsynced."""
    missing = []
    folder = path
    while folder != folder.parent and not folder.is_dir():
        missing.append(folder)
        folder = folder.parent
    path.mkdir(parents=True, exist_ok=True)
    for new in reversed(missing):
        fsync_dir(new.parent)


def copy_file(src: Path, dst: Path) -> str:
    """Copy one file durably and make the copy read-only; return its base64 sha256."""
    h = hashlib.new(DEFAULT_ALGORITHM)
    with open(src, "rb") as fin, open(dst, "xb") as fout:
        for chunk in iter(lambda: fin.read(_CHUNK), b""):
            h.update(chunk)
            fout.write(chunk)
        fout.flush()
        os.fsync(fout.fileno())
    os.chmod(dst, 0o444)
    return _b64(h.digest())


def write_file(path: Path, data: bytes) -> str:
    """Create a new read-only file durably; return its base64 sha256."""
    with open(path, "xb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.chmod(path, 0o444)
    return _b64(hashlib.sha256(data).digest())


def write_ref(path: Path, commit: str) -> None:
    """Point a ref at a commit: atomically replace the file (which fsyncs its directory),
    its folders (``refs/``, ``refs/heads/``) made durably first where they are new."""
    make_dirs(path.parent)
    replace_file(path, (commit + "\n").encode("ascii"))


def write_temp(path: Path, data: bytes, *, mode: int = 0o644,
               chmod: int | None = None) -> Path:
    """Write ``data`` to a new hidden ``.<name>.<random>.tmp`` file beside ``path``,
    fsynced, and return it (removed again if the write fails).

    Args:
        path: the file the temporary is for; its directory must exist.
        data: the content.
        mode: permission bits the file is created with (the umask applies).
        chmod: exact permission bits to set instead (the umask aside), before any byte
            is written.
    """
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(_TEMP_BYTES)}.tmp")
    write_new(tmp, data, mode=mode, chmod=chmod)
    return tmp


def temp_leftovers(path: Path) -> list[Path]:
    """The temporaries :func:`write_temp` made for ``path`` that are still there (a
    process killed before its rename leaves one): ``.<name>.<12 hex>.tmp`` beside it.
    Only the process that writes ``path`` alone (under its lock) may remove them."""
    name = re.compile(rf"^\.{re.escape(path.name)}\.[0-9a-f]{{{2 * _TEMP_BYTES}}}\.tmp$")
    try:
        entries = list(path.parent.iterdir())
    except OSError:  # no folder, or not readable: whatever writes there next says why
        return []
    return sorted(p for p in entries if name.match(p.name))


def remove_temp_leftovers(path: Path, writer: str) -> None:
    """Remove the temporaries of ``path`` that a process killed before its rename left
    (:func:`temp_leftovers`). Call it only under the lock every writer of ``path``
    holds, where no other process is writing one. One that cannot be removed is left:
    the write that follows reports a folder it cannot write to.

    Args:
        path: the file the temporaries were for.
        writer: what wrote them, for the log (``'kernelforge trust'``).
    """
    for tmp in temp_leftovers(path):
        try:
            tmp.unlink()
        except FileNotFoundError:
            continue
        except OSError as err:
            logger.debug("%s: not removed (%s)", tmp, err)
            continue
        logger.info("%s: removed, a temporary that a killed %s left", tmp, writer)


def write_new(path: Path, data: bytes, *, mode: int = 0o644,
              chmod: int | None = None) -> None:
    """Create ``path``, which must not exist, and write ``data`` to it, fsynced (removed
    again if the write fails).

    Args:
        path: the new file; its directory must exist.
        data: the content.
        mode: permission bits the file is created with (the umask applies).
        chmod: exact permission bits to set instead (the umask aside), before any byte
            is written.

    Raises:
        FileExistsError: ``path`` exists.
    """
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        with os.fdopen(fd, "wb") as f:
            if chmod is not None:
                os.fchmod(f.fileno(), chmod)
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
    except BaseException:
        path.unlink(missing_ok=True)
        raise


def replace_file(path: Path, data: bytes, *, mode: int = 0o644,
                 chmod: int | None = None) -> None:
    """Write ``path`` atomically: a hidden temporary file, fsynced, then ``os.replace``.

    Readers see the old content or the new one, never a part; a crash leaves at worst
    a hidden ``.<name>.<random>.tmp`` file beside it.

    Args:
        path: the file to create or replace; its directory must exist.
        data: the new content.
        mode, chmod: the new file's permission bits, as for :func:`write_temp`.
    """
    tmp = write_temp(path, data, mode=mode, chmod=chmod)
    try:
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def copy_tree(dst: Path, files: tuple[tuple[Path, str], ...], card: str | None) -> dict[str, str]:
    """Copy ``(source, relpath)`` pairs (and the card) under ``dst``, all fsynced.

    Returns:
        ``{relpath: base64 sha256}`` of everything written.
    """
    recorded: dict[str, str] = {}
    for src, rel in files:
        target = dst / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        recorded[rel] = copy_file(src, target)
    if card is not None:
        if not isinstance(card, str):
            raise ValueError(f"card: expected README text, got {type(card).__name__}")
        recorded[CARD_FILE] = write_file(dst / CARD_FILE, card.encode("utf-8"))
    for dirpath, _dirs, _files in os.walk(dst, topdown=False):
        fsync_dir(Path(dirpath))
    return recorded


def nearest_folder(path: Path) -> Path:
    """``path``, or the nearest folder above it that exists: the one to make writable
    where a write under ``path`` is refused (a write makes the folders below it)."""
    return next((d for d in (path, *path.parents) if d.is_dir()), path)
