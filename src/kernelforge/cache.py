"""The download cache for remote hubs: content-addressed, crash-safe, shared by processes.

Layout of a cache root (``$KERNELFORGE_CACHE``, else ``downloads`` under the user cache
directory)::

    <root>/
        variants/<org>/<name>/<commit>/<variant>/   one complete, checked variant
            entry.json                             what was fetched: format, sha256 of every file
            files/...                              the variant directory (read-only files)
        files/<org>/<name>/<commit>/<path>         single files (metadata.json, .sig, ...)
        files/<org>/<name>/<commit>/<path>.absent  "the revision has no such file"
        listings/<org>/<name>/<commit>.json        every file path of a commit
        refs/<org>/<name>.json                     branches and tags last seen online
        locks/<key>.lock                           the lock of each key ever written
        tmp/<key>.<random>/                        entries being written
        CACHEDIR.TAG                               marks the directory as a cache

Repository ids ignore case, as on the Hugging Face Hub: a repository's folders keep the
spelling of its first download, and every spelling of the id finds them.

Entries are addressed by commit (itself a content hash) and variant, and every file in
them is checked by its sha256: nothing under a commit ever changes, so an entry is
written once and read many times. Each one is written under ``tmp/``, checked, and
published with an atomic rename while holding a file lock: a process killed at any
point leaves at most a ``tmp/`` directory (removed by the next write or removal of the
cache, once no one holds its lock) and never a partial entry, and eight processes asking
for the same cold entry fetch it once. The file lock is released by the kernel when its
holder dies.

``locks/`` keeps one small, empty lock file for every key ever written (each variant,
single file and removal): a removal cannot tell whether another process is about to take
a lock file it would delete (that process would then lock a file no one else sees, and
two writers could run at once), so they stay, and ``kernelforge cache clear`` leaves them
(and the tag) in place.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import hashlib
import json
import logging
import math
import numbers
import os
import secrets
import shlex
import shutil
import stat
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kernelforge import _durable
from kernelforge._parse import UPGRADE, json_loads, newer_format_number
from kernelforge._paths import HERE, env_path, path_word, refuse_empty_path
from kernelforge._userdirs import user_dir
from kernelforge.errors import HubError, IntegrityError, NotCachedError
from kernelforge.hub.base import is_commit, is_timestamp, spellings, validate_repo_id

__all__ = ["CACHE_ENV", "CachedVariant", "DownloadCache", "Entry", "Removed",
           "as_published", "default_cache_root", "is_intact", "variant_name"]

logger = logging.getLogger(__name__)

#: Environment variable naming the cache root; read at call time.
CACHE_ENV = "KERNELFORGE_CACHE"
#: What to pass instead of an empty download cache path (``cache=""``).
EMPTY_CACHE_GIVE = (f"the download cache's directory ({HERE}), or nothing (None in Python) "
                    f"for the default: ${CACHE_ENV}, else downloads in the user cache")
ENTRY_FILE = "entry.json"
#: Why an empty or blank variant name is refused by a removal, in the words of an empty
#: path's refusal (:func:`kernelforge._paths.empty_path_why`): it names no variant, so
#: a removal of it would remove nothing and read as if nothing were cached.
EMPTY_VARIANT = "an empty name is not a variant (it would match no cached variant)"
#: The format of the ``entry.json`` this version writes, and the newest it reads (one
#: without ``format`` is of format 1). An entry of a newer format is refused, never
#: taken for damage and replaced: the newer kernelforge sharing the cache needs it.
ENTRY_FORMAT = 1
FILES_DIR = "files"
LOCK_TIMEOUT_S = 1800.0
#: What the file system says of a write the download cache cannot make
#: (:meth:`DownloadCache.write_error`): a full disk, or a place this user may not write.
WRITE_ERRNOS = _durable.DISK_FULL | _durable.NOT_WRITABLE
_ABSENT = ".absent"
#: What a cache root holds (see the module docstring).
_CACHE_PARTS = frozenset({"variants", "files", "listings", "refs", "locks", "tmp"})


def default_cache_root() -> Path:
    """``$KERNELFORGE_CACHE``, else ``downloads`` in the user cache directory (an empty
    or blank ``$KERNELFORGE_CACHE`` counts as unset, as ``$KERNELFORGE_HUB`` does)."""
    env = env_path(CACHE_ENV)
    if env is not None:
        return env
    return user_dir("cache", "the download cache", CACHE_ENV, HubError) / "downloads"


def variant_name(variant_dir: Path) -> str:
    """The variant a variant directory holds: its own name, but for the ``files/`` folder
    of a download-cache entry (``.../<variant>/files``), the entry's, which messages must
    name rather than ``files``."""
    if variant_dir.name == FILES_DIR and (variant_dir.parent / ENTRY_FILE).is_file():
        return variant_dir.parent.name
    return variant_dir.name


def _check_owner(path: Path, *, follow: bool = False) -> None:
    """Refuse a cache file or folder that another user made (root aside), a folder every
    user may write (without the sticky bit), or, unless ``follow``, a link: whoever can
    write the cache, or rename what one of its folders holds, chooses the bytes a load
    of an allowed, unsigned kernel runs.

    Args:
        path: the file or folder (nothing to check when it does not exist).
        follow: judge what a link leads to (the cache's root, which may be a link the
            user made) rather than refusing it.

    Raises:
        HubError: naming the path, what is wrong with it and the fix.
    """
    geteuid = getattr(os, "geteuid", None)
    if geteuid is None:  # pragma: no cover - not POSIX
        return
    try:
        st = os.stat(path) if follow else os.lstat(path)
    except FileNotFoundError:
        return
    what = "folder" if stat.S_ISDIR(st.st_mode) else "file"
    if stat.S_ISLNK(st.st_mode):
        raise HubError(
            f"{path}: a symbolic link in the download cache, which makes none, and a link "
            "can lead a load to files another user writes; refusing to use it. Fix: "
            "remove the link")
    if st.st_uid not in (geteuid(), 0):  # the user this process writes its files as
        fix = ("remove the entry" if what == "file"
               else "have its owner remove it")
        raise HubError(
            f"{path}: this download cache {what} belongs to another user (uid "
            f"{st.st_uid}), and whoever writes the cache chooses the code a load runs; "
            f"refusing to use it. Set {CACHE_ENV} to a directory only you can write (the "
            f"default, in your user cache directory, is), or {fix}"
        )
    if what == "folder" and st.st_mode & stat.S_IWOTH and not st.st_mode & stat.S_ISVTX:
        raise HubError(
            f"{path}: this download cache folder may be written by every user, who could "
            "rename what it holds; refusing to use it. Fix: chmod o-w on it, or set "
            f"{CACHE_ENV} to a directory only you can write")


def make_dirs(path: Path, *, exist_ok: bool = True) -> None:
    """``path.mkdir(parents=True, exist_ok=exist_ok)``, but every folder it makes with
    mode 0o755 (less what the umask takes away): under a umask that would let every
    user write them (``umask 000``), :func:`_check_owner` would refuse the cache's own
    folders."""
    missing: list[Path] = []
    current = path
    while not current.exists() and current != current.parent:
        missing.append(current)
        current = current.parent
    if not missing and (not exist_ok or not path.is_dir()):  # as Path.mkdir says it
        raise FileExistsError(f"{path} exists")
    for folder in reversed(missing):
        try:
            os.mkdir(folder, 0o755)
        except FileExistsError:
            if folder == path and not exist_ok:
                raise


def is_revision_path(path: str) -> bool:
    """Whether ``path`` is a plain file path inside a revision (``build/torch-cpu/x.py``):
    relative, ``/``-separated, with no empty, ``.`` or ``..`` part, backslash or NUL, so
    that it cannot name a file outside the directory it is joined to."""
    return (bool(path) and not path.startswith("/") and "\\" not in path
            and "\0" not in path and not any(p in ("", ".", "..") for p in path.split("/")))


def _safe_rel(path: str) -> tuple[str, ...]:
    if not is_revision_path(path):
        raise ValueError(f"path: {path!r} is not a relative file path inside a revision")
    return tuple(path.split("/"))


def _check_age(older_than: object) -> None:
    """Refuse a :meth:`DownloadCache.remove` ``older_than`` that is no age, as ``cache
    clear --older-than`` does: a negative one would remove every variant (each was
    fetched more than -1 seconds ago), NaN or infinity only those with no fetch time."""
    if (isinstance(older_than, bool) or not isinstance(older_than, numbers.Real)
            or not 0 <= float(older_than) < math.inf):
        raise ValueError(f"older_than: expected a number of seconds, 0 or more, got "
                         f"{older_than!r}")


@dataclass(frozen=True)
class Entry:
    """A variant in the cache.

    Attributes:
        path: the variant directory (``.../files``).
        files: ``{relpath: base64 sha256}`` of every file, ``metadata.json`` included,
            as checked when it was fetched.
        fetched: ``True`` when this call fetched it.
        damaged: why the entry cannot be a variant (its ``files/`` directory or its
            ``metadata.json`` is missing, or that does not parse, or its ``entry.json``
            is not a record of its files), ``None`` when it can. Its files are not
            checked against their digests here (the loader does that).
    """

    path: Path
    files: dict[str, str]
    fetched: bool = False
    damaged: str | None = None


@dataclass(frozen=True)
class CachedVariant:
    """A complete variant in the cache, as ``kernelforge cache list`` shows it.

    Attributes:
        repo_id: ``org/name``.
        commit: the full commit id.
        variant: the variant name.
        size: bytes of its files on disk.
        fetched: when it was fetched (seconds since the epoch), ``None`` if not recorded
            (or not as a time this version can read).
        damaged: why its copy cannot be used (a load online fetches it again), if so:
            as :attr:`Entry.damaged` says it, its files not hashed (a changed file is
            found by the load that verifies it).
        newer_format: the format of its ``entry.json`` where a newer kernelforge wrote it
            (above :data:`ENTRY_FORMAT`), else ``None``. Such an entry is not damaged:
            this version cannot use it, and a load here refuses it rather than fetch it
            again over the newer version's own.
        modified: where it records no fetch time this version can read and is not a
            newer kernelforge's (its ``entry.json`` damaged, or without a time), the
            newest modification time of its folder and of what that holds: what a
            removal by age dates it by, since such an entry may be one another program is
            writing now. ``None`` otherwise.
    """

    repo_id: str
    commit: str
    variant: str
    size: int
    fetched: float | None
    damaged: str | None = None
    newer_format: int | None = None
    modified: float | None = None


@dataclass(frozen=True)
class Removed:
    """What :meth:`DownloadCache.remove` took out of the cache.

    Attributes:
        variants: the variants removed.
        other_bytes: bytes of the other files removed with them: single files (metadata,
            signatures), file listings, remembered refs and leftovers of interrupted
            downloads.
        kept: the variants an ``older_than`` removal left in place although they
            record no fetch time this version can read: those a newer kernelforge wrote
            (:attr:`CachedVariant.newer_format` set), whose age is unknown here and which
            the newer version sharing the cache may need; and the others (a damaged
            ``entry.json``, or one without a time) whose files were modified within
            ``older_than`` (:attr:`CachedVariant.modified`), which another program may be
            writing now. Variants whose recorded fetch time is recent are not listed.
    """

    variants: list[CachedVariant]
    other_bytes: int
    kept: list[CachedVariant] = dataclasses.field(default_factory=list)

    @property
    def total_bytes(self) -> int:
        """Every byte removed."""
        return sum(v.size for v in self.variants) + self.other_bytes


class DownloadCache:
    """A download cache root (see the module docstring for the layout).

    Args:
        root: the directory; ``None`` for :func:`default_cache_root`. An empty (or
            blank) string is refused: it would mean the current directory, which
            ``cache clear`` would then empty.

    Raises:
        ValueError: ``root`` is an empty or blank string.
    """

    def __init__(self, root: str | os.PathLike[str] | None = None) -> None:
        refuse_empty_path(root, "root", "a download cache", EMPTY_CACHE_GIVE)
        self.root = Path(os.path.expanduser(root)) if root is not None else default_cache_root()

    def __repr__(self) -> str:
        return f"DownloadCache({str(self.root)!r})"

    # --- helpers -------------------------------------------------------------------

    def _repos(self, kind: str, repo_id: str, suffix: str = "") -> list[Path]:
        """Where ``kind`` keeps ``repo_id`` (``org/name`` plus ``suffix``): the folders
        (files, with a suffix) that exist under any spelling of the id, the spelling as
        given first; else the path as given, where a first write puts it. Repository
        ids ignore case, as on the Hugging Face Hub, so a load of ``Org/Relu`` finds what
        a load of ``org/relu`` cached. More than one exists only where two spellings were
        first cached at once, or by versions that kept each spelling apart."""
        org, name = validate_repo_id(repo_id)
        self._check_root()
        exact = self.root / kind / org / f"{name}{suffix}"
        base = self.root / kind
        found = [base / o / n for o in spellings(base, org)
                 for n in spellings(base / o, f"{name}{suffix}", files=bool(suffix))]
        if exact in found:
            found.remove(exact)
        elif found:
            return found
        return [exact, *found]

    def _repo(self, kind: str, repo_id: str) -> Path:
        """Where ``kind`` keeps ``repo_id``, or would put it (see :meth:`_repos`)."""
        return self._repos(kind, repo_id)[0]

    @staticmethod
    def _key(kind: str, repo_id: str, rest: str) -> str:
        """A lock key; the same for every spelling of the repository id."""
        return f"{kind}:{repo_id.lower()}@{rest}"

    @staticmethod
    def _check_commit(commit: str) -> str:
        if not is_commit(commit):
            raise ValueError(f"commit: expected a 40-hex commit id, got {commit!r}")
        return commit

    def _lock(self, key: str) -> Any:
        import filelock

        self._make_root()
        locks = self.root / "locks"
        make_dirs(locks)
        digest = hashlib.sha256(key.encode("utf-8")).hexdigest()[:32]
        return filelock.FileLock(str(locks / f"{digest}.lock"), timeout=LOCK_TIMEOUT_S)

    def _tmp(self, key: str) -> Path:
        """A fresh temporary directory for ``key``; removes what crashed writers left.

        Only called with the key's lock held, so no live writer owns a leftover of
        ``key``. Those of other keys go too where no one holds their lock: a writer
        killed after its rename (a fetched file in place, an entry thrown away) leaves
        its folder, and nothing would write that key again to remove it.
        """
        tmp_root = self.root / "tmp"
        make_dirs(tmp_root)
        prefix = hashlib.sha256(key.encode("utf-8")).hexdigest()[:32]
        for old in tmp_root.glob(f"{prefix}.*"):
            logger.info("removing %s, left behind by an interrupted download", old)
            _remove(old)
        try:
            self._remove_leftovers(skip=prefix)
        except OSError as err:  # not this write's own: the next writer tries again
            logger.info("kept a leftover of an interrupted download in %s (%s)", tmp_root,
                        err.strerror or err)
        path = tmp_root / f"{prefix}.{secrets.token_hex(6)}"
        make_dirs(path, exist_ok=False)
        return path

    def _check_owners(self, path: Path) -> None:
        """:func:`_check_owner` for ``path`` and for every folder from the root down to
        it (the root included, through a link): whoever owns a folder, or may write it,
        can rename what it holds, putting one commit's files where another's are looked
        for, and a link below the root can lead anywhere.

        Raises:
            HubError: one of them was made by another user (not root), may be written by
                every user, or (below the root) is a link; named.
        """
        current = self.root
        _check_owner(current, follow=True)  # a root the user links elsewhere: judged there
        for part in path.relative_to(self.root).parts:
            current = current / part
            _check_owner(current)

    def _check_root(self) -> None:
        """Refuse a root that is not a directory (a file, or below one), which every read
        and write of the cache would otherwise fail on with the bare system error.

        Raises:
            HubError: naming the root and the fix.
        """
        try:
            is_dir = stat.S_ISDIR(os.stat(self.root).st_mode)
        except FileNotFoundError:
            return  # made by the first write
        except NotADirectoryError:
            is_dir = False  # a file stands where a folder of its path should be
        if not is_dir:
            raise HubError(f"{self.root} is a file (or lies below one), not a download cache "
                           f"directory; fix: set {CACHE_ENV} to a directory, or move the "
                           "file away")

    def _make_root(self) -> None:
        """Where every write starts: the root made if missing, and tagged as a cache when
        this call made it, never a directory that was already there (a mistyped
        KERNELFORGE_CACHE naming a home or project directory).

        Raises:
            HubError: the root is a file, or lies below one (:meth:`_check_root`).
        """
        if self.root.is_dir():
            return
        self._check_root()
        try:
            make_dirs(self.root, exist_ok=False)
        except FileExistsError:  # made meanwhile, by another process (which tags it)
            self._check_root()  # (or a file made meanwhile)
            return
        except NotADirectoryError:  # a file made meanwhile on its path
            self._check_root()
            raise
        self._tag()

    def write_error(self, err: OSError, doing: str = "") -> HubError:
        """The error for ``err``, met writing to this cache (or, ``doing`` something, by
        a download into it): names the cache, the reason and the fix, which for a full
        disk or a cache that may not be written differs from a network failure's.

        Args:
            err: what the file system said.
            doing: what failed (``downloading build/...``), for the start of the message.
        """
        what = f"{err.strerror or err}" + (f": {err.filename}" if err.filename else "")
        if err.errno in _durable.DISK_FULL:
            fix = f"free space on its disk, or set {CACHE_ENV} to a directory on another one"
        elif err.errno in _durable.NOT_WRITABLE:
            fix = (f"set {CACHE_ENV} to a directory you can write, or, to load only what "
                   "the cache holds without writing to it, set HF_HUB_OFFLINE=1")
        elif err.errno == errno.ENOENT:  # the cache's own folders, made just before
            fix = ("run it again: its folders were removed while this wrote to them (by "
                   "'kernelforge cache remove' or 'clear' in another process, say), and the "
                   "next run fetches what it needs anew")
        else:
            fix = f"remove the cause, or set {CACHE_ENV} to another directory"
        return HubError(f"{doing}{': ' if doing else ''}writing to the download cache "
                        f"{self.root} failed ({what}); nothing was cached; fix: {fix}")

    @contextlib.contextmanager
    def _writing(self) -> Iterator[None]:
        """Within the block, a file system error (a full disk, a read-only cache) is a
        :class:`HubError` that says so (:meth:`write_error`), not a bare ``OSError``."""
        try:
            yield
        except (TimeoutError, ConnectionError):
            raise  # a lock held too long (filelock.Timeout), the network: not the disk
        except OSError as err:
            raise self.write_error(err) from err

    def _write_json(self, path: Path, doc: Any) -> None:
        data = (json.dumps(doc, indent=1, sort_keys=True) + "\n").encode()
        with self._writing():
            self._make_root()
            for attempt in range(3):  # a removal may prune the folders in between
                try:
                    make_dirs(path.parent)
                    _durable.replace_file(path, data)
                    return
                except FileNotFoundError:
                    if attempt == 2:
                        raise

    @staticmethod
    def _read_json(path: Path) -> Any:
        try:
            return json_loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as err:
            logger.warning("kernelforge: ignoring unreadable cache file %s (%s)", path, err)
            return None

    # --- refs and listings ---------------------------------------------------------

    def _refs_files(self, repo_id: str) -> list[Path]:
        # The name plus ".json" (not with_suffix, which would give org/relu and
        # org/relu.v2 one file).
        return self._repos("refs", repo_id, ".json")

    def save_refs(self, repo_id: str, branches: dict[str, str], tags: dict[str, str]) -> None:
        """Remember a repository's refs for offline use (atomic replace)."""
        self._write_json(self._refs_files(repo_id)[0], {
            "repo-id": repo_id, "branches": branches, "tags": tags, "time": time.time()})

    def _refs_doc(self, repo_id: str) -> dict[str, Any] | None:
        """The refs record :meth:`load_refs` reads, or ``None``."""
        docs = []
        for path in self._refs_files(repo_id):
            self._check_owners(path)  # whoever writes it picks the commit an offline load takes
            doc = self._read_json(path)
            if (isinstance(doc, dict) and isinstance(doc.get("repo-id"), str)
                    and doc["repo-id"].lower() == repo_id.lower()):
                problem = _refs_problem(doc)
                if problem is None:
                    docs.append(doc)
                else:  # damaged: as if none were cached (the next online load rewrites it)
                    logger.warning("kernelforge: ignoring damaged cache file %s (%s)",
                                   path, problem)
        return max(docs, key=_saved_at) if docs else None

    def load_refs(self, repo_id: str) -> tuple[dict[str, str], dict[str, str]] | None:
        """``(branches, tags)`` last seen online, or ``None``.

        A refs file names the repository it was written for (in any case), and one
        written for another is not this one's. Files of versions before that name none
        (and those versions gave ``org/x`` and ``org/x.y`` one file): they are not read,
        and the next online load writes the file again. Where two spellings of the id
        each have a file, the one saved last counts.

        Raises:
            HubError: a refs file was made by another user (not root).
        """
        doc = self._refs_doc(repo_id)
        if doc is None:
            return None
        return dict(doc.get("branches", {})), dict(doc.get("tags", {}))

    def refs_saved_at(self, repo_id: str) -> float | None:
        """When the refs :meth:`load_refs` returns were seen online (seconds since the
        epoch), ``None`` when none are cached or their file records no time."""
        doc = self._refs_doc(repo_id)
        saved = _saved_at(doc) if doc is not None else 0.0
        return saved or None

    def save_listing(self, repo_id: str, commit: str, files: list[str]) -> None:
        """Remember every file path of a commit (immutable, so kept forever)."""
        path = self._repo("listings", repo_id) / f"{self._check_commit(commit)}.json"
        self._write_json(path, sorted(files))

    def load_listing(self, repo_id: str, commit: str) -> list[str] | None:
        """The file paths of a commit, or ``None`` when never listed.

        Raises:
            HubError: the listing was made by another user (not root): it decides which
                files a download fetches.
        """
        name = f"{self._check_commit(commit)}.json"
        for folder in self._repos("listings", repo_id):
            self._check_owners(folder / name)
            doc = self._read_json(folder / name)
            if isinstance(doc, list):
                return [str(p) for p in doc]
        return None

    def known_commits(self, repo_id: str) -> list[str]:
        """Commits of a repository this cache knows anything about."""
        found: set[str] = set()
        for kind in ("listings", "variants", "files"):
            for base in self._repos(kind, repo_id):
                if base.is_dir():
                    found.update(p.name.removesuffix(".json") for p in base.iterdir()
                                 if is_commit(p.name.removesuffix(".json")))
        return sorted(found)

    # --- single files --------------------------------------------------------------

    def _cached_file(self, repo_id: str, commit: str, path: str
                     ) -> tuple[bytes | None, bool, Path]:
        """``(data, absent, target)``: a single file's bytes under any spelling of the
        id, whether the revision is known to lack it, and where a fetch puts it."""
        parts = (self._check_commit(commit), *_safe_rel(path))
        targets = [folder.joinpath(*parts) for folder in self._repos("files", repo_id)]
        for target in targets:
            absent = target.with_name(target.name + _ABSENT)
            self._check_owners(target)
            _check_owner(absent)
            data = _read_bytes(target)
            if data is not None or absent.exists():
                return data, data is None, target
        return None, False, targets[0]

    def peek_file(self, repo_id: str, commit: str, path: str) -> bytes | None:
        """A single file if it is cached, else ``None`` (never fetches)."""
        return self._cached_file(repo_id, commit, path)[0]

    def cached_file(self, repo_id: str, commit: str, path: str) -> Path | None:
        """Where a single file's cached copy is (or the record that the revision lacks
        it), ``None`` when neither is cached: what :meth:`get_file` would read without
        fetching."""
        data, absent, target = self._cached_file(repo_id, commit, path)
        if data is not None:
            return target
        return target.with_name(target.name + _ABSENT) if absent else None

    def discard_file(self, repo_id: str, commit: str, path: str) -> None:
        """Remove a single file's cached copy (and any record that the revision lacks it)
        under its lock, so that the next :meth:`get_file` fetches it again: for a copy
        that fails its check (the cache was damaged since it was fetched).

        Args:
            repo_id: ``org/name``.
            commit: the full commit id.
            path: the path in the revision.
        """
        parts = (self._check_commit(commit), *_safe_rel(path))
        key = self._key("file", repo_id, f"{commit}/{path}")
        with self._lock(key):
            for folder in self._repos("files", repo_id):
                target = folder.joinpath(*parts)
                for found in (target, target.with_name(target.name + _ABSENT)):
                    if found.exists() or found.is_symlink():
                        self._throw_away(key, found)

    def get_file(
        self,
        repo_id: str,
        commit: str,
        path: str,
        fetch: Callable[[Path], bool] | None,
        *,
        not_cached: Callable[[], HubError] | None = None,
    ) -> bytes | None:
        """One file of a revision, fetched at most once.

        Args:
            repo_id: ``org/name``.
            commit: the full commit id.
            path: the path in the revision.
            fetch: writes the file to the given path and returns ``True``, or returns
                ``False`` when the revision has no such file; ``None`` when offline.
            not_cached: makes the error raised when the file is not cached and ``fetch``
                is ``None`` (the hub words why it is offline); ``None``: a generic one.

        Returns:
            The file's bytes, or ``None`` when the revision has no such file.

        Raises:
            HubError: the file is not cached and ``fetch`` is ``None``, or it cannot be
                written to the cache (a full disk, a read-only cache: :meth:`write_error`).
        """
        data, absent_known, target = self._cached_file(repo_id, commit, path)
        if data is not None or absent_known:
            return data
        if fetch is None:
            if not_cached is not None:
                raise not_cached()
            raise NotCachedError(
                f"{repo_id}: {path} at {commit[:12]} is not in the download cache "
                f"{self.root} and the hub is offline; load the kernel once with get_kernel "
                "while online, or, for a locked project, run 'kernelforge download' while "
                "online and load it with load_kernel(repo_id, lockfile=...)")
        key = self._key("file", repo_id, f"{commit}/{path}")
        with self._writing(), self._lock(key):
            data, absent_known, target = self._cached_file(repo_id, commit, path)
            if data is not None or absent_known:
                return data
            absent = target.with_name(target.name + _ABSENT)
            tmp = self._tmp(key)
            try:
                staged = tmp / "file"
                found = fetch(staged)
                data = staged.read_bytes() if found else None
                if found:
                    os.chmod(staged, 0o444)
                    _rename_into(staged, target)
                else:
                    _durable.write_file(tmp / "absent", b"")
                    _rename_into(tmp / "absent", absent)
                with contextlib.suppress(FileNotFoundError):  # a removal pruned it already
                    _durable.fsync_dir(target.parent)
            finally:
                _remove(tmp)
        return data  # what was fetched, whatever a removal did to the cache since

    # --- variants ------------------------------------------------------------------

    def _entry_dirs(self, repo_id: str, commit: str, variant: str) -> list[Path]:
        """A variant's directory under each spelling of the id (see :meth:`_repos`)."""
        _safe_rel(variant)
        commit = self._check_commit(commit)
        return [folder / commit / variant for folder in self._repos("variants", repo_id)]

    def _entry_dir(self, repo_id: str, commit: str, variant: str) -> Path:
        return self._entry_dirs(repo_id, commit, variant)[0]

    def entry(self, repo_id: str, commit: str, variant: str) -> Entry | None:
        """A complete cached variant, or ``None``.

        Args:
            repo_id: ``org/name``.
            commit: the full commit id.
            variant: the variant name.

        Returns:
            The :class:`Entry`; its files are not re-checked here (the loader does that),
            but an entry whose ``files/`` or ``metadata.json`` is gone (a removal by hand
            that was interrupted), whose ``metadata.json`` does not parse, or whose
            ``entry.json`` is not a record of its files (its ``files`` then empty) says so
            in ``damaged``: :meth:`install` fetches such an entry again. A sound entry
            under another spelling of the id is taken before a damaged one.

        Raises:
            HubError: the entry was made by another user (not root).
        """
        damaged: Entry | None = None
        for where in self._entry_dirs(repo_id, commit, variant):
            self._check_owners(where)
            for path in (where / ENTRY_FILE, where / FILES_DIR):
                _check_owner(path)
            doc, problem, newer = _entry_record(where / ENTRY_FILE)
            if newer is not None:
                raise HubError(
                    f"{where / ENTRY_FILE}: this download cache entry is of format {newer}, "
                    "written by a newer kernelforge sharing the cache (this version reads "
                    f"format {ENTRY_FORMAT}); {UPGRADE}, or, to have this version fetch it "
                    "again in its own format, "
                    f"{self.damaged_entry_fix(repo_id, commit)}")
            if doc is not None:
                return Entry(where / FILES_DIR,
                             {str(k): str(v) for k, v in doc["files"].items()},
                             damaged=_damage(where / FILES_DIR))
            if problem is not None and damaged is None:
                damaged = Entry(where / FILES_DIR, {}, damaged=problem)
        return damaged

    def remove_command(self, repo_id: str, commit: str) -> str:
        """The command that removes what this cache holds of ``repo_id`` at ``commit``
        (for messages), quoted: ``'kernelforge cache remove ORG/NAME --revision C'``,
        naming the cache where it is not the default one."""
        where = ("" if self.root == default_cache_root()
                 else f" --cache {shlex.quote(path_word(self.root))}")
        return f"'kernelforge cache remove {repo_id} --revision {commit[:12]}{where}'"

    def damaged_entry_fix(self, repo_id: str, commit: str) -> str:
        """The commands that replace a damaged entry of ``repo_id`` at ``commit``: remove
        it, then fetch it again (for messages)."""
        return (f"{self.remove_command(repo_id, commit)}, then 'kernelforge download' on a "
                "locked project, or a load while online")

    def damaged_copy(self, err: IntegrityError, repo_id: str, commit: str,
                     copy: Path | None = None, *, changed: bool = True) -> IntegrityError:
        """``err``, about a cached copy of ``repo_id`` at ``commit`` that cannot be
        fetched again offline, with a last line naming the fix (and the copy, when
        given); its ``problems`` stay those of the files.

        Args:
            changed: the copy changed since it was fetched; ``False``: it is as it was
                served, so it was damaged on its way (or by whatever served it).
        """
        what = f"the download cache's copy{f' {copy}' if copy is not None else ''}"
        how = ("was changed since it was fetched" if changed
               else "holds the files as they were served, damaged on their way")
        damaged = IntegrityError(err.where, err.problems)
        damaged.args = (f"{damaged}\n{what} {how}, and offline it is not fetched again; "
                        f"fix: {self.damaged_entry_fix(repo_id, commit)}",)
        return damaged

    def entries(self) -> list[tuple[str, str, str]]:
        """Every complete cached variant as ``(repo_id, commit, variant)``."""
        return [named for named, _ in self._entries()]

    def _entries(self) -> list[tuple[tuple[str, str, str], Path]]:
        """:meth:`entries`, each with the folder it was found in."""
        base = self.root / "variants"
        out = []
        for entry in sorted(base.glob(f"*/*/*/*/{ENTRY_FILE}")) if base.is_dir() else []:
            named = _entry_names(entry.parent.relative_to(base))
            if named is None or self._reached_through_a_link(entry):
                logger.warning("kernelforge: ignoring %s: not a download cache entry", entry.parent)
                continue
            out.append((named, entry.parent))
        return out

    def install(
        self,
        repo_id: str,
        commit: str,
        variant: str,
        fill: Callable[[Path], None],
        check: Callable[[Path], dict[str, str]],
    ) -> Entry:
        """Fetch a variant into the cache once, atomically.

        Args:
            repo_id: ``org/name``.
            commit: the full commit id.
            variant: the variant name.
            fill: writes the variant's files into the (empty) directory it is given.
            check: verifies that directory and returns ``{relpath: base64 sha256}`` of
                every file; raises (e.g. ``IntegrityError``) to reject it.

        Returns:
            The :class:`Entry`; ``fetched`` tells whether this call fetched it (another
            process may have done so while this one waited for the lock). A damaged
            entry (see :meth:`entry`) is replaced: it vanishes at once, and the new one
            is written as any other.

        Raises:
            HubError: the cache cannot be written (a full disk, a read-only cache:
                :meth:`write_error`); nothing was cached.
        """
        key = self._key("variant", repo_id, f"{commit}/{variant}")
        with self._writing(), self._lock(key):
            existing = self.entry(repo_id, commit, variant)
            if existing is not None and existing.damaged is None:
                return existing
            if existing is not None:
                logger.info("replacing the damaged download cache entry %s (%s)",
                            existing.path.parent, existing.damaged)
                self._throw_away(key, existing.path.parent)
            final = self._entry_dir(repo_id, commit, variant)
            if final.exists():  # a directory without entry.json is no entry: clear it
                _remove(final)
            tmp = self._tmp(key)
            try:
                files_dir = tmp / FILES_DIR
                make_dirs(files_dir, exist_ok=False)
                fill(files_dir)
                files = check(files_dir)
                doc = {"format": ENTRY_FORMAT, "repo-id": repo_id, "commit": commit,
                       "variant": variant, "files": files, "time": time.time()}
                _seal(files_dir)
                _durable.write_file(tmp / ENTRY_FILE, json.dumps(doc, indent=1,
                                                                 sort_keys=True).encode())
                for dirpath, _dirs, _files in os.walk(tmp, topdown=False):
                    _durable.fsync_dir(Path(dirpath))
                _rename_into(tmp, final)
                _durable.fsync_dir(final.parent)
            except BaseException:
                _remove(tmp)
                raise
        return Entry(final / FILES_DIR, files, fetched=True)

    def discard(self, repo_id: str, commit: str, variant: str) -> None:
        """Remove a cached variant (it vanishes at once: renamed away, then deleted).

        Args:
            repo_id: ``org/name``.
            commit: the full commit id.
            variant: the variant name.
        """
        key = self._key("variant", repo_id, f"{commit}/{variant}")
        with self._lock(key):
            for final in self._entry_dirs(repo_id, commit, variant):
                if final.exists():
                    self._throw_away(key, final)

    def _throw_away(self, key: str, path: Path) -> bool:
        """Rename ``path`` into a fresh temporary folder and delete it there, so that it
        vanishes at once; called with ``key``'s lock held. ``False``: it was gone
        already (removed meanwhile by another process)."""
        trash = self._tmp(key)
        try:
            os.rename(path, trash / "old")
        except FileNotFoundError:
            return False
        finally:
            _remove(trash)
        return True


    # --- listing and removal -------------------------------------------------------

    def variants(self) -> list[CachedVariant]:
        """Every complete cached variant with its size and fetch time, sorted by
        repository, commit and variant."""
        # described where each was found: looking each up again by its id lists the
        # folders of its organization and of the cache's variants, once per entry
        return [self._described(*named, where=where) for named, where in self._entries()]

    def _described(self, repo_id: str, commit: str, variant: str,
                   where: Path | None = None) -> CachedVariant:
        if where is None:
            where = self._entry_dir(repo_id, commit, variant)
        doc, problem, newer = _entry_record(where / ENTRY_FILE)
        fetched = doc.get("time") if doc is not None else None
        when = float(fetched) if is_timestamp(fetched) else None
        size = _tree_size(where)
        if newer is not None:  # not this version's to judge: no damage it can be sure of
            return CachedVariant(repo_id, commit, variant, size, when, newer_format=newer)
        return CachedVariant(repo_id, commit, variant, size, when,
                             problem or _damage(where / FILES_DIR),
                             modified=_newest_mtime(where) if when is None else None)

    def other_size(self) -> int:
        """Bytes of everything but the variants: single files, listings, refs and
        leftovers of interrupted downloads."""
        return sum(_tree_size(self.root / kind) for kind in ("files", "listings", "refs", "tmp"))

    def commits_matching(self, repo_id: str, prefix: str) -> list[str]:
        """The cached commits of ``repo_id`` that start with ``prefix`` (lower case hex)."""
        return [c for c in self.known_commits(repo_id) if c.startswith(prefix.lower())]

    def remove(
        self,
        repo_id: str | None = None,
        *,
        commits: list[str] | None = None,
        variant: str | None = None,
        older_than: float | None = None,
    ) -> Removed:
        """Remove cached variants, and with them what else the cache keeps for them.

        With no argument the whole cache is emptied (the lock files and the cache's tag
        aside). Each variant goes under its lock, as :meth:`discard` removes it: a
        download of it that is running finishes first, and it vanishes at once. A load
        reading the cache at that moment may fail, and succeeds when run again (it
        fetches what it needs anew). Nothing is followed through a link: the cache makes
        none, so a link found in it is removed itself, or skipped (with a warning) where
        it stands between the cache and what was asked for. A remove never touches the
        hubs. Whatever the scope, what interrupted downloads and removals left in
        ``tmp/`` goes too (a running one's stays).

        Args:
            repo_id: only this repository's; ``None``: every repository's.
            commits: only these full commit ids (see :meth:`commits_matching`; an empty
                list removes nothing).
            variant: only this variant.
            older_than: only variants fetched more than this many seconds ago, judged
                again under each variant's lock (so once a download of it that is running
                has ended, by what that wrote); the small files of the repositories and
                commits are kept. An entry that records no fetch time this version can
                read (its ``entry.json`` damaged, or without a time) is dated by the
                newest modification time of its folder and files
                (:attr:`CachedVariant.modified`) instead: another program may be writing
                it now, so it goes only once that is as old, and is kept
                (:attr:`Removed.kept`) until then. An entry a newer kernelforge wrote
                (:attr:`CachedVariant.newer_format`) goes only where it records a fetch
                time this version can read that is that old; one that records none is
                kept (:attr:`Removed.kept`), since a version that cannot read an entry
                cannot tell it is old, and the newer version sharing the cache may need
                it. Naming the repository without ``older_than``, or emptying the whole
                cache, removes such entries too.

        Returns:
            What was removed, and what ``older_than`` kept of the entries that record no
            fetch time this version can read.

        Raises:
            HubError: the directory is not a download cache (a mistyped cache path), or
                a part of it cannot be removed (naming it); nothing more is removed.
            ValueError: a malformed ``repo_id`` or commit, ``commits`` without
                ``repo_id``, an empty or blank ``variant`` (as ``kernelforge cache remove
                --variant`` refuses it), or an ``older_than`` that is not a number of
                seconds, 0 or more (as ``kernelforge cache clear --older-than`` refuses it).
        """
        if repo_id is not None:
            validate_repo_id(repo_id)
        if variant is not None and not variant.strip():
            raise ValueError(f"variant: {EMPTY_VARIANT}; pass a variant's name, or nothing "
                             "(None) for every variant")
        if older_than is not None:
            _check_age(older_than)
        for commit in commits or ():
            self._check_commit(commit)
        if commits is not None and repo_id is None:
            raise ValueError("commits: give the repository whose commits they are")
        self.check_is_cache()
        removed: list[CachedVariant] = []
        kept: list[CachedVariant] = []
        other = 0
        try:
            for cached in self.variants():
                if ((repo_id is not None and cached.repo_id.lower() != repo_id.lower())
                        or (commits is not None and cached.commit not in commits)
                        or (variant is not None and cached.variant != variant)):
                    continue
                if older_than is not None and not _old_enough(cached, older_than):
                    if cached.fetched is None:  # said, with why: no recorded time
                        kept.append(cached)
                    continue  # keeping needs no lock: only a removal waits for one
                entry = self._discard_entry(cached.repo_id, cached.commit, cached.variant,
                                            older_than, kept)
                if entry is not None:
                    removed.append(entry)
            if variant is None and older_than is None:
                other = self._remove_rest(repo_id, commits, removed)
            # whatever the scope: a removal killed halfway left the entry it was throwing
            # away there, and running it again finds nothing else to remove
            other += self._remove_leftovers()
        except OSError as err:
            raise HubError(f"{self.root}: cannot remove {err.filename or 'a cache file'} "
                           f"({err.strerror or err}); what was removed before stays removed "
                           "and the rest is untouched") from err
        return Removed(removed, other, kept)

    def _remove_rest(self, repo_id: str | None, commits: list[str] | None,
                     removed: list[CachedVariant]) -> int:
        """After the listed variants: what is left of the scope under ``variants/``
        (entries that appeared since, under their locks, and leftovers), and the scope's
        single files, listings and refs. Returns the bytes removed besides ``removed``."""
        base = self.root / "variants"
        if repo_id is None:
            scopes = [base]
            paths = [self.root / kind for kind in ("files", "listings", "refs")]
        else:  # under every spelling of the id
            repos = self._repos("variants", repo_id)
            files = self._repos("files", repo_id)
            listings = self._repos("listings", repo_id)
            if commits is None:
                scopes = repos
                paths = [*files, *listings, *self._refs_files(repo_id)]
            else:
                scopes = [r / c for r in repos for c in commits]
                paths = [p for c in commits for p in (
                    *(f / c for f in files), *(li / f"{c}.json" for li in listings))]
        freed = 0
        for scope in scopes:
            freed += self._sweep_variants(scope, removed)
        for path in paths:
            freed += self._discard_path(path)  # prunes its emptied folders
        return freed

    def _reached_through_a_link(self, path: Path, *, quiet: bool = False) -> bool:
        """Whether a folder between the cache root and ``path`` is a link (the cache
        makes none; removing through one would remove outside the cache). Logs it
        unless ``quiet``."""
        if self.root not in path.parents:
            return False
        for parent in path.parents:
            if parent == self.root:
                return False
            if parent.is_symlink():
                if not quiet:
                    logger.warning("kernelforge: skipping %s: it is reached through the link %s, "
                                   "which no download cache makes; remove the link by hand", path,
                                   parent)
                return True
        return False

    def _prune_empty(self, path: Path) -> None:
        """Remove ``path`` and its parents below the root while they are empty folders,
        never a link nor anything reached through one."""
        while path != self.root and self.root in path.parents:
            if path.is_symlink() or self._reached_through_a_link(path, quiet=True):
                return
            try:
                path.rmdir()
            except OSError:
                return
            path = path.parent

    def _discard_entry(self, repo_id: str, commit: str, variant: str,
                       older_than: float | None = None,
                       kept: list[CachedVariant] | None = None) -> CachedVariant | None:
        """Remove a variant's directory under its lock; what it was, if it was an entry
        (``None`` for a leftover that was not, one already gone, one reached through a
        link, or, with ``older_than``, one :func:`_old_enough` does not find that old,
        judged under the lock; of those, the ones that record no fetch time are added to
        ``kept``)."""
        final = self._entry_dir(repo_id, commit, variant)
        if self._reached_through_a_link(final):
            return None
        key = self._key("variant", repo_id, f"{commit}/{variant}")
        with self._lock(key):
            if not (final.exists() or final.is_symlink()):
                return None
            cached = self._described(repo_id, commit, variant)
            if older_than is not None and not _old_enough(cached, older_than):
                if kept is not None and cached.fetched is None:
                    kept.append(cached)
                return None  # fetched or written again since it was listed
            was_entry = (final / ENTRY_FILE).is_file() and not final.is_symlink()
            self._throw_away(key, final)
        self._prune_empty(final.parent)
        return cached if was_entry else None

    def _sweep_variants(self, scope: Path, removed: list[CachedVariant]) -> int:
        """Remove what is left under ``scope`` (a part of ``variants/``): entries made
        since the listing, each under its lock (added to ``removed``), and leftovers
        (returns their size); names no download could have made go without a lock.
        Folders are removed only once empty, so a download finishing meanwhile keeps its
        entry."""
        base = self.root / "variants"
        if self._reached_through_a_link(scope):
            return 0
        if scope.is_symlink() or scope.is_file():  # no folder a download makes
            return self._discard_path(scope)
        freed = 0

        def visit(folder: Path) -> None:
            nonlocal freed
            depth = len(folder.relative_to(base).parts)
            for child in sorted(folder.iterdir()):
                rel = child.relative_to(base)
                real_dir = child.is_dir() and not child.is_symlink()
                named = _entry_names(rel) if depth == 3 else None
                if named is not None and real_dir:
                    size = _tree_size(child)
                    entry = self._discard_entry(*named)
                    if entry is not None:
                        removed.append(entry)
                    else:
                        freed += size
                elif depth < 3 and real_dir and _entry_prefix(rel):
                    visit(child)
                else:  # a link, a file or a name no download makes: removed itself
                    freed += self._discard_path(child)
            with contextlib.suppress(OSError):
                folder.rmdir()  # once empty

        if scope.is_dir() and not scope.is_symlink():
            visit(scope)
        self._prune_empty(scope.parent)
        return freed

    def _tag(self) -> None:
        tag = self.root / _TAG
        if not tag.exists():
            make_dirs(self.root)
            _durable.replace_file(tag, _TAG_TEXT.encode())

    def _tagged(self) -> bool:
        """Whether the root holds kernelforge's tag (a regular file, read without
        following links or blocking, its first bytes only)."""
        flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
        try:
            fd = os.open(self.root / _TAG, flags)
        except OSError:
            return False
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return False
            return os.read(fd, len(_TAG_TEXT) + 16).startswith(_TAG_TEXT.encode())
        finally:
            os.close(fd)

    def check_is_cache(self, refusing: str = "to remove anything from it") -> None:
        """Refuse to act on a directory that is not a download cache (a mistyped
        ``KERNELFORGE_CACHE`` naming a home or project directory): by default to remove
        anything from it, else what ``refusing`` says. A cache the cache made is tagged
        (``CACHEDIR.TAG`` with kernelforge's line); an untagged directory is taken for
        one (and left untagged) only when everything in it has the cache's layout.

        Raises:
            HubError: it is not one, naming what it holds that no cache holds."""
        try:
            names = sorted(p.name for p in self.root.iterdir())
        except (FileNotFoundError, NotADirectoryError):
            return
        for kind in ("tmp", "locks"):  # every removal writes through them
            part = self.root / kind
            if part.is_symlink() or (part.exists() and not part.is_dir()):
                raise HubError(f"{part} is a link or a file where the download cache keeps "
                               "a folder; refusing to remove anything through it. Remove it "
                               "by hand")
        if self._tagged():
            return
        stray = next((self.root / n for n in names
                      if n not in _CACHE_PARTS and not _is_durable_temp(n, _TAG)), None)
        for kind, pattern, ok in _LAYOUT:
            if stray is not None:
                break
            if (self.root / kind).is_symlink():
                stray = self.root / kind
                break
            for path in sorted((self.root / kind).glob(pattern)):
                if not ok(path):
                    stray = path
                    break
        if stray is not None:
            raise HubError(
                f"{self.root} does not look like a kernelforge download cache: it holds "
                f"{stray}, which no download cache holds; refusing {refusing}. Point "
                f"{CACHE_ENV} (or --cache) at the cache directory itself; if "
                f"{self.root} is the cache, remove that path by hand first")

    def _discard_path(self, path: Path) -> int:
        """Remove a file, link or directory of the cache at once (renamed away, then
        deleted; a link is removed, never followed); returns its size."""
        if not (path.exists() or path.is_symlink()) or self._reached_through_a_link(path):
            return 0
        size = _tree_size(path)
        key = f"remove:{path.relative_to(self.root)}"
        with self._lock(key):
            if not self._throw_away(key, path):
                size = 0
        self._prune_empty(path.parent)
        return size

    def _remove_leftovers(self, *, skip: str | None = None) -> int:
        """Remove what interrupted downloads and removals left in ``tmp/`` (names the
        cache makes there only), but those of the key whose lock digest is ``skip``; a
        directory whose writer is still running (its lock is held) stays."""
        import filelock

        tmp_root = self.root / "tmp"
        if tmp_root.is_symlink() or not tmp_root.is_dir():
            return 0  # (a link or a file there is refused before anything is removed)
        freed = 0
        for leftover in sorted(tmp_root.iterdir()):
            if not _is_leftover(leftover) or leftover.name.split(".")[0] == skip:
                continue
            lock = filelock.FileLock(
                str(self.root / "locks" / f"{leftover.name.split('.')[0]}.lock"), timeout=0)
            try:
                with lock:
                    size = _tree_size(leftover)
                    _remove(leftover)
                    freed += size
            except filelock.Timeout:
                continue
        return freed


def _saved_at(doc: dict[str, Any]) -> float:
    """When a cache record says it was written (0 where it says nothing usable: not a
    number, or one no date can be given for, such as NaN or a year past 9999)."""
    time_ = doc.get("time")
    return float(time_) if is_timestamp(time_) else 0.0


def _refs_problem(doc: dict[str, Any]) -> str | None:
    """What is wrong with a refs file's ``branches`` and ``tags``, if anything: each must
    map names to commit ids."""
    for kind in ("branches", "tags"):
        refs = doc.get(kind, {})
        if not isinstance(refs, dict) or not all(
                isinstance(name, str) and is_commit(commit) for name, commit in refs.items()):
            return f"'{kind}' is not a mapping of names to commit ids"
    return None


def _rename_into(src: Path, dst: Path) -> None:
    """``os.rename`` into ``dst``'s folder, made first; made again if a concurrent
    removal pruned it in between (it removes only empty folders)."""
    for attempt in range(3):
        try:
            make_dirs(dst.parent)  # a folder it made may be pruned before the next one
            os.rename(src, dst)
            return
        except FileNotFoundError:
            if attempt == 2 or not (src.exists() or src.is_symlink()):
                raise


def _entry_names(rel: Path) -> tuple[str, str, str] | None:
    """``(repo_id, commit, variant)`` of a path ``org/name/commit/variant`` under
    ``variants/``, or ``None`` where it names no entry a download could make."""
    parts = rel.parts
    if len(parts) != 4 or not is_commit(parts[2]) or not is_revision_path(parts[3]):
        return None
    try:
        validate_repo_id(f"{parts[0]}/{parts[1]}")
    except ValueError:
        return None
    return f"{parts[0]}/{parts[1]}", parts[2], parts[3]


def _entry_prefix(rel: Path) -> bool:
    """Whether ``org``, ``org/name`` or ``org/name/commit`` under ``variants/`` is a
    folder a download could make."""
    parts = rel.parts
    try:
        validate_repo_id(f"{parts[0]}/{parts[1] if len(parts) > 1 else 'x'}")
    except ValueError:
        return False
    return len(parts) < 3 or (len(parts) == 3 and is_commit(parts[2]))


def _is_durable_temp(name: str, target: str | None = None) -> bool:
    """Whether ``name`` is a temporary file an interrupted atomic write left
    (``.<name>.<12 hex>.tmp``, see :mod:`kernelforge._durable`), of ``target`` if given."""
    if not (name.startswith(".") and name.endswith(".tmp")):
        return False
    stem, _, token = name[1:-4].rpartition(".")
    return (len(token) == 12 and all(c in "0123456789abcdef" for c in token)
            and (target is None or stem == target))


def _is_lock(p: Path) -> bool:
    return p.suffix == ".lock" and not p.is_dir()


def _is_leftover(p: Path) -> bool:
    head, _, tail = p.name.partition(".")
    return len(head) == 32 and all(c in "0123456789abcdef" for c in head + tail) and bool(tail)


def _is_repo_part(p: Path, suffix: str = "") -> bool:
    try:
        validate_repo_id(f"{p.parent.name}/{p.name.removesuffix(suffix)}")
    except ValueError:
        return False
    return p.name.endswith(suffix)


#: The cache's layout, for recognising an untagged cache: (folder, glob, check).
_LAYOUT: tuple[tuple[str, str, Callable[[Path], bool]], ...] = (
    *((kind, "*", lambda p: p.is_dir() and _entry_prefix(Path(p.name)))
      for kind in ("variants", "files", "listings", "refs")),
    ("variants", "*/*", lambda p: p.is_dir() and _is_repo_part(p)),
    ("variants", "*/*/*", lambda p: p.is_dir() and is_commit(p.name)),
    ("files", "*/*", lambda p: p.is_dir() and _is_repo_part(p)),
    ("files", "*/*/*", lambda p: p.is_dir() and is_commit(p.name)),
    ("listings", "*/*", lambda p: p.is_dir() and _is_repo_part(p)),
    ("listings", "*/*/*", lambda p: (p.suffix == ".json" and is_commit(p.stem))
     or _is_durable_temp(p.name)),
    ("refs", "*/*", lambda p: p.is_file() and (_is_repo_part(p, ".json")
                                               or _is_durable_temp(p.name))),
    ("locks", "*", _is_lock),
    ("tmp", "*", _is_leftover),
)
_TAG = "CACHEDIR.TAG"
_TAG_SIGNATURE = b"Signature: 8a477f597d28d172789f06886806bc55"
_TAG_TEXT = (_TAG_SIGNATURE.decode() + "\n# This file is a cache directory tag created by "
             "kernelforge for its download cache.\n")  # checked whole: other tools' tags differ


def _tree_size(path: Path) -> int:
    """Bytes of the files under ``path`` (or of the file itself); links not followed."""
    try:
        if not path.is_dir() or path.is_symlink():
            return os.lstat(path).st_size
    except FileNotFoundError:
        return 0
    total = 0
    for dirpath, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(dirpath, name)).st_size
            except FileNotFoundError:
                pass
    return total


def is_intact(path: Path, recorded: dict[str, str] | None) -> bool:
    """Whether a cached variant still matches the digests recorded when it was fetched.

    Args:
        path: the entry's variant directory.
        recorded: its recorded ``{relpath: base64 sha256}``.

    Returns:
        ``False`` when something changed since, a sourceless ``*.pyc`` appeared in it,
        or nothing was recorded: such an entry is worth fetching again; ``True`` when a verification
        failure must come from the remote content itself.
    """
    from kernelforge.digest import verify_variant

    if recorded is None:
        return False
    try:
        verify_variant(path, {}, recorded=recorded)
    except IntegrityError:
        return False
    return True


def as_published(path: Path, metadata_sha256: str | None,
                 recorded: Mapping[str, str] | None) -> bool:
    """Whether a cached variant holds what the hub publishes: the ``metadata.json``
    whose sha256 is ``metadata_sha256`` (the one the trust policy or the lock judged;
    ``None``: any), the files its digests record, and the bytes ``recorded`` when it was
    fetched.

    A copy that fails a check but passes these differs from the lock file alone, which a
    fresh copy cannot mend. One that fails them changed in the cache since, or was
    damaged before it was recorded (on its way, as :func:`is_intact` cannot tell): a
    fresh copy may pass, and is fetched once.

    Args:
        path: the entry's variant directory.
        metadata_sha256: the base64 sha256 its ``metadata.json`` must have, if any.
        recorded: its recorded ``{relpath: base64 sha256}``.
    """
    from kernelforge.digest import verify_variant
    from kernelforge.hub._staging import read_metadata

    try:
        verify_variant(path, read_metadata(path), metadata_sha256=metadata_sha256,
                       recorded=recorded)
    except (HubError, IntegrityError):
        return False
    return True


def _entry_record(path: Path) -> tuple[dict[str, Any] | None, str | None, int | None]:
    """An entry's ``entry.json``: ``(record, None, None)`` when it records the entry's
    files; ``(None, why, None)`` when it is damaged (not JSON, or no such record: the
    entry cannot be used, and is fetched again); ``(document, why, format)`` when a newer
    kernelforge wrote it (of a format above :data:`ENTRY_FORMAT`: not this version's to
    use, nor to replace; the document as read, for the fetch time a removal by age may
    still read in it); ``(None, None, None)`` when it is missing (no entry), or cannot be
    read for a reason that may pass (logged; not taken for damage it can be sure of)."""
    try:
        doc = json_loads(path.read_bytes())
    except FileNotFoundError:
        return None, None, None
    except OSError as err:
        logger.warning("kernelforge: ignoring unreadable cache file %s (%s)", path, err)
        return None, None, None
    except ValueError:
        return None, f"its {ENTRY_FILE} is not valid JSON", None
    found = newer_format_number(doc, ENTRY_FORMAT)
    if found is not None:
        return doc, (f"its {ENTRY_FILE} is of format {found}, written by a newer "
                     "kernelforge"), found
    if not isinstance(doc, dict) or not isinstance(doc.get("files"), dict):
        return None, f"its {ENTRY_FILE} records no files", None
    return doc, None, None


def _old_enough(cached: CachedVariant, older_than: float) -> bool:
    """Whether a removal by age takes ``cached``: its recorded fetch time is more than
    ``older_than`` seconds ago, or, where it records none this version can read, so is
    the newest modification time of its files. A damaged ``entry.json`` may be one that
    another program is writing now (not this version's downloads, which write under
    ``tmp/`` and rename), so it is not taken for old. An entry a newer kernelforge
    wrote that records no time is never old here: this version cannot tell its age."""
    when = cached.fetched
    if when is None and cached.newer_format is None:
        when = cached.modified
    return when is not None and time.time() - when > older_than


def _newest_mtime(path: Path) -> float | None:
    """The newest modification time of ``path`` and of everything below it, links not
    followed (``None`` when ``path`` is gone). What a folder this user may not list
    holds is passed over; the folder's own time still counts."""
    try:
        newest = os.lstat(path).st_mtime
    except OSError:
        return None
    for dirpath, dirs, files in os.walk(path):
        for name in (*dirs, *files):
            try:
                newest = max(newest, os.lstat(os.path.join(dirpath, name)).st_mtime)
            except OSError:  # removed meanwhile
                continue
    return newest


def _damage(files_dir: Path) -> str | None:
    """Why an entry's variant directory cannot be a variant, if it cannot: it or its
    ``metadata.json`` is missing, or that does not parse as a kernel's metadata (every
    entry was checked whole when it was written, so its cached copy was damaged since)."""
    from kernelforge.hub._staging import parse_metadata

    if not files_dir.is_dir():
        return f"its {FILES_DIR}/ directory is missing"
    path = files_dir / "metadata.json"
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return f"its {FILES_DIR}/metadata.json is missing"
    except OSError:
        # Not damage it can be sure of (too many open files, an I/O error that may pass):
        # the entry is kept, and the read that follows says what failed.
        return None
    try:
        parse_metadata(data, f"{FILES_DIR}/metadata.json")
    except HubError as err:
        return f"its {err}"
    return None


def _read_bytes(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None


def _seal(root: Path) -> None:
    """Make every file read-only: the cache is not a place to edit kernels in."""
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            os.chmod(os.path.join(dirpath, name), 0o444)


def _remove(path: Path) -> None:
    """Delete a file or a tree, read-only files included."""
    if path.is_dir() and not path.is_symlink():
        for dirpath, dirs, _files in os.walk(path):
            for d in dirs:
                if not os.path.islink(os.path.join(dirpath, d)):  # never chmod through a link
                    os.chmod(os.path.join(dirpath, d), 0o755)
            os.chmod(dirpath, 0o755)
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()
