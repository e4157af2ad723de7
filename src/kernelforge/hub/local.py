"""The embedded hub: kernel repositories kept in a local directory.

Layout of a hub root::

    <root>/<org>/<name>/
        .lock                         file lock taken by writers (readers never lock)
        objects/<commit>/             one immutable revision, named by its commit id
            .commit.json              parent, time, message, branch, per-file digests
            build/<variant>/...       the variant packages, as published
            README.md                 the card, when one was given
        refs/heads/<branch>           a text file holding a commit id (v1, v2, main)
        refs/tags/<tag>               likewise, for tags
        tmp/<random>/                 a revision being written (ignored by readers)

Writers hold the lock, copy the new revision into ``tmp/``, fsync it, rename it to
``objects/<commit>`` and only then move the branch ref with an atomic replace. A
reader either sees the old ref (and the old, untouched revision) or the new ref (and a
complete revision): a crash at any point leaves the previous revision loadable. What a
crash leaves behind (a ``tmp/`` directory, at worst an unreferenced object) is never
listed, and the next publish removes the ``tmp/`` leftovers.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import secrets
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import filelock

from kernelforge.errors import HubError
from kernelforge.hub import _durable
from kernelforge.hub._staging import Staged, check_digests, stage_build

__all__ = ["LocalHub", "Revision", "default_root", "validate_repo_id"]

logger = logging.getLogger(__name__)

#: Environment variable naming the default hub root; read at call time.
HUB_ENV = "KERNELFORGE_HUB"
LOCK_TIMEOUT_S = 600.0
COMMIT_FILE = ".commit.json"
CARD_FILE = _durable.CARD_FILE
CARD_BRANCH = "main"

_PART = r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,94}[A-Za-z0-9])?"
_REPO_ID_RE = re.compile(rf"^({_PART})/({_PART})$")
_REF_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
_COMMIT_RE = re.compile(r"^[0-9a-f]{40}$")
_PREFIX_RE = re.compile(r"^[0-9a-f]{4,40}$")
_VERSION_BRANCH_RE = re.compile(r"^v(0|[1-9][0-9]*)$")


def default_root() -> Path:
    """The hub root used when none is given.

    Returns:
        ``$KERNELFORGE_HUB`` when set (read now, not at import), else ``hub`` under the
        user's cache directory (``~/.cache/kernelforge/hub`` on Linux).
    """
    env = os.environ.get(HUB_ENV)
    if env:
        return Path(env).expanduser()
    import platformdirs

    return Path(platformdirs.user_cache_dir("kernelforge")) / "hub"


def validate_repo_id(repo_id: object) -> tuple[str, str]:
    """Check a repository id and split it.

    Args:
        repo_id: ``"org/name"``; each part starts and ends with a letter or digit and
            holds only letters, digits, ``.``, ``_`` and ``-`` (at most 96 characters).

    Returns:
        ``(org, name)``.

    Raises:
        ValueError: naming ``repo_id`` and what is wrong with it.
    """
    if not isinstance(repo_id, str):
        raise ValueError(f"repo_id: expected a string 'org/name', got {type(repo_id).__name__}")
    m = _REPO_ID_RE.match(repo_id)
    if m is None or ".." in repo_id:
        raise ValueError(
            f"repo_id: {repo_id!r} is not a valid repository id; expected 'org/name' "
            "made of letters, digits, '.', '_' and '-' (e.g. 'kernels-community/relu')"
        )
    return m.group(1), m.group(2)


def _check_ref_name(kind: str, name: object) -> str:
    if not isinstance(name, str) or not _REF_RE.match(name) or name.endswith(".lock"):
        raise ValueError(
            f"{kind}: {name!r} is not a valid name; expected letters, digits, '.', '_' "
            "and '-', starting with a letter or digit"
        )
    return name


@dataclass(frozen=True)
class Revision:
    """One published revision of a hub repository.

    Attributes:
        repo_id: the repository.
        commit: the 40-hex commit id.
        branch: the branch it was published on (``v1``, ``main``).
        parent: the commit the branch pointed to before, or ``None``.
        time: publication time, seconds since the epoch.
        message: the publish message.
        variants: the build variants it holds.
    """

    repo_id: str
    commit: str
    branch: str
    parent: str | None
    time: float
    message: str
    variants: tuple[str, ...] = field(default_factory=tuple)

    @property
    def short(self) -> str:
        """The first 7 hex digits of the commit id."""
        return self.commit[:7]

    @property
    def when(self) -> datetime:
        """Publication time as an aware UTC datetime."""
        return datetime.fromtimestamp(self.time, tz=timezone.utc)


class LocalHub:
    """Kernel repositories kept in a directory on this machine.

    Args:
        root: the hub directory; ``None`` means :func:`default_root` (``$KERNELFORGE_HUB``
            or the user cache), resolved when the hub is created.

    Example:
        >>> hub = LocalHub("/tmp/hub")  # doctest: +SKIP
        >>> rev = hub.publish("me/relu", "relu/build", version=1, message="first")
        >>> hub.variants("me/relu", rev.commit)
        ['torch-cpu']
    """

    def __init__(self, root: str | os.PathLike[str] | None = None) -> None:
        self.root = Path(root).expanduser() if root is not None else default_root()

    def __repr__(self) -> str:
        return f"LocalHub({str(self.root)!r})"

    # --- paths ---------------------------------------------------------------------

    def _repo_dir(self, repo_id: str) -> Path:
        org, name = validate_repo_id(repo_id)
        return self.root / org / name

    def _existing_repo(self, repo_id: str) -> Path:
        repo = self._repo_dir(repo_id)
        if not (repo / "refs").is_dir():
            known = self.repos()
            hint = f"; repositories in this hub: {', '.join(known)}" if known else "; it is empty"
            raise HubError(f"repository {repo_id!r} not found in hub {self.root}{hint}")
        return repo

    def _object_dir(self, repo_id: str, commit: str) -> Path:
        if not isinstance(commit, str) or not _COMMIT_RE.match(commit):
            raise ValueError(f"commit: expected a 40-hex commit id, got {commit!r}")
        path = self._existing_repo(repo_id) / "objects" / commit
        if not (path / COMMIT_FILE).is_file():
            raise HubError(f"commit {commit} not found in {repo_id} (hub {self.root})")
        return path

    # --- reading -------------------------------------------------------------------

    def repos(self) -> list[str]:
        """All repositories in this hub.

        Returns:
            Sorted ``org/name`` ids of the repositories that have refs.
        """
        if not self.root.is_dir():
            return []
        found = []
        for org in self.root.iterdir():
            if not org.is_dir() or org.name.startswith("."):
                continue
            for repo in org.iterdir():
                if (repo / "refs").is_dir() and _REPO_ID_RE.match(f"{org.name}/{repo.name}"):
                    found.append(f"{org.name}/{repo.name}")
        return sorted(found)

    def _refs(self, repo_id: str, kind: str) -> dict[str, str]:
        folder = self._existing_repo(repo_id) / "refs" / kind
        refs: dict[str, str] = {}
        if not folder.is_dir():
            return refs
        for entry in sorted(folder.iterdir()):
            if not _REF_RE.match(entry.name) or not entry.is_file():
                continue  # temporary files of an interrupted ref update start with '.'
            commit = entry.read_text(encoding="ascii").strip()
            if not _COMMIT_RE.match(commit):
                raise HubError(f"{entry}: corrupt ref (expected a commit id, got {commit!r})")
            refs[entry.name] = commit
        return refs

    def branches(self, repo_id: str) -> dict[str, str]:
        """Branches of a repository.

        Args:
            repo_id: ``org/name``.

        Returns:
            ``{branch: commit}`` sorted by branch name.

        Raises:
            HubError: the repository does not exist.
        """
        return self._refs(repo_id, "heads")

    def tags(self, repo_id: str) -> dict[str, str]:
        """Tags of a repository, as ``{tag: commit}``.

        Args:
            repo_id: ``org/name``.

        Returns:
            ``{tag: commit}`` sorted by tag name.
        """
        return self._refs(repo_id, "tags")

    def versions(self, repo_id: str) -> dict[int, str]:
        """Published kernel versions (branches ``v<N>``).

        Args:
            repo_id: ``org/name``.

        Returns:
            ``{N: commit}`` sorted by ``N``.
        """
        out = {}
        for branch, commit in self.branches(repo_id).items():
            m = _VERSION_BRANCH_RE.match(branch)
            if m:
                out[int(m.group(1))] = commit
        return dict(sorted(out.items()))

    def resolve(self, repo_id: str, revision: str) -> str:
        """Turn a branch, a tag or a (unique prefix of a) commit id into a commit id.

        Args:
            repo_id: ``org/name``.
            revision: branch name, tag name, full commit id or a prefix of at least
                4 hex digits that matches one commit.

        Returns:
            The 40-hex commit id.

        Raises:
            ValueError: ``revision`` is not a non-empty string.
            HubError: nothing matches, or a prefix matches several commits.
        """
        if not isinstance(revision, str) or not revision:
            raise ValueError(f"revision: expected a branch, tag or commit, got {revision!r}")
        branches = self.branches(repo_id)
        if revision in branches:
            return branches[revision]
        tags = self.tags(repo_id)
        if revision in tags:
            return tags[revision]
        if _PREFIX_RE.match(revision):
            objects = self._existing_repo(repo_id) / "objects"
            hits = sorted(c for c in self._commits(objects) if c.startswith(revision))
            if len(hits) == 1:
                return hits[0]
            if len(hits) > 1:
                raise HubError(
                    f"revision {revision!r} of {repo_id} is ambiguous: it starts "
                    f"{', '.join(h[:12] for h in hits)}; give more digits"
                )
        raise HubError(
            f"revision {revision!r} not found in {repo_id} (hub {self.root}): not a branch "
            f"({', '.join(branches) or 'none'}), a tag ({', '.join(tags) or 'none'}) "
            "or a commit"
        )

    @staticmethod
    def _commits(objects: Path) -> Iterator[str]:
        if objects.is_dir():
            for entry in objects.iterdir():
                if _COMMIT_RE.match(entry.name) and (entry / COMMIT_FILE).is_file():
                    yield entry.name

    def _record(self, repo_id: str, commit: str) -> dict[str, Any]:
        path = self._object_dir(repo_id, commit) / COMMIT_FILE
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as err:
            raise HubError(f"{path}: unreadable commit record ({err})") from err
        if not isinstance(record, dict):
            raise HubError(f"{path}: corrupt commit record (not a JSON object)")
        return record

    def revision(self, repo_id: str, commit: str) -> Revision:
        """Describe one commit.

        Args:
            repo_id: ``org/name``.
            commit: a full commit id (use :meth:`resolve` first for names).

        Returns:
            The :class:`Revision`.
        """
        rec = self._record(repo_id, commit)
        return Revision(
            repo_id=repo_id,
            commit=commit,
            branch=str(rec.get("branch", "")),
            parent=rec.get("parent"),
            time=float(rec.get("time", 0.0)),
            message=str(rec.get("message", "")),
            variants=tuple(self.variants(repo_id, commit)),
        )

    def log(self, repo_id: str, branch: str) -> list[Revision]:
        """History of a branch, newest first.

        Args:
            repo_id: ``org/name``.
            branch: e.g. ``"v1"``.

        Returns:
            The revisions from the branch head back along the parent chain.

        Raises:
            HubError: the repository or the branch does not exist.
        """
        branches = self.branches(repo_id)
        if branch not in branches:
            raise HubError(
                f"branch {branch!r} not found in {repo_id}; branches: "
                f"{', '.join(branches) or 'none'}"
            )
        out: list[Revision] = []
        seen: set[str] = set()
        commit: str | None = branches[branch]
        while commit and commit not in seen:
            seen.add(commit)
            rev = self.revision(repo_id, commit)
            out.append(rev)
            commit = rev.parent
        return out

    def commit_path(self, repo_id: str, commit: str) -> Path:
        """The directory holding a commit's files (treat it as read-only).

        Args:
            repo_id: ``org/name``.
            commit: a full commit id.

        Returns:
            ``<root>/<org>/<name>/objects/<commit>``.

        Raises:
            HubError: the commit does not exist.
        """
        return self._object_dir(repo_id, commit)

    def variants(self, repo_id: str, commit: str) -> list[str]:
        """Build variants held by a commit.

        Args:
            repo_id: ``org/name``.
            commit: a full commit id.

        Returns:
            Sorted variant directory names under ``build/``.
        """
        build = self._object_dir(repo_id, commit) / "build"
        if not build.is_dir():
            return []
        return sorted(p.name for p in build.iterdir() if p.is_dir())

    def variant_path(self, repo_id: str, commit: str, variant: str) -> Path:
        """Where a variant's files are on disk (treat them as read-only).

        Args:
            repo_id: ``org/name``.
            commit: a full commit id.
            variant: a variant name from :meth:`variants`.

        Returns:
            ``<root>/<org>/<name>/objects/<commit>/build/<variant>``.

        Raises:
            HubError: the commit does not hold that variant.
        """
        path = self._object_dir(repo_id, commit) / "build" / str(variant)
        if "/" in str(variant) or not path.is_dir():
            raise HubError(
                f"variant {variant!r} not found in {repo_id} at {commit[:7]}; variants: "
                f"{', '.join(self.variants(repo_id, commit)) or 'none'}"
            )
        return path

    def recorded_files(self, repo_id: str, commit: str) -> dict[str, str]:
        """The per-file sha256 digests recorded when the commit was published.

        Args:
            repo_id: ``org/name``.
            commit: a full commit id.

        Returns:
            ``{relpath in the revision: base64 sha256}``, e.g.
            ``{"build/torch-cpu/__init__.py": "..."}``.
        """
        files = self._record(repo_id, commit).get("files", {})
        return dict(files) if isinstance(files, dict) else {}

    def verify(self, repo_id: str, commit: str) -> None:
        """Check every file of a commit against the digests recorded at publish time.

        Args:
            repo_id: ``org/name``.
            commit: a full commit id.

        Raises:
            IntegrityError: naming each changed, missing or extra file.
        """
        from kernelforge.digest import verify_tree

        root = self._object_dir(repo_id, commit)
        verify_tree(root, self.recorded_files(repo_id, commit), ignore=(COMMIT_FILE,))

    # --- writing -------------------------------------------------------------------

    def publish(
        self,
        repo_id: str,
        build_dir: str | os.PathLike[str],
        *,
        version: int,
        message: str = "",
        card: str | None = None,
    ) -> Revision:
        """Publish a project's builds as a new revision on branch ``v<version>``.

        Args:
            repo_id: ``org/name``; created on first publish.
            build_dir: the ``build/`` directory holding ``<variant>/`` directories, or
                the project directory that contains it.
            version: the kernel's major version; the branch is ``v<version>`` and every
                variant's ``metadata.json`` ``version`` must equal it (or be absent).
            message: the revision message.
            card: the repository card (README) text; when given it is stored in the
                revision and committed on branch ``main`` too.

        Returns:
            The new :class:`Revision`.

        Raises:
            ValueError: a malformed ``repo_id`` or ``version``.
            HubError: the build is unfit to publish (no variants, a ``.pyc``, a link,
                missing or wrong metadata) or the hub cannot be written.
            IntegrityError: a variant's files do not match its recorded digest.
        """
        validate_repo_id(repo_id)
        if isinstance(version, bool) or not isinstance(version, int) or version < 0:
            raise ValueError(f"version: expected a non-negative integer, got {version!r}")
        if not isinstance(message, str):
            raise ValueError(f"message: expected a string, got {type(message).__name__}")
        if card is not None and not isinstance(card, str):
            raise ValueError(f"card: expected README text, got {type(card).__name__}")
        staged = stage_build(Path(build_dir), version)
        branch = f"v{version}"
        repo = self._repo_dir(repo_id)
        with self._locked(repo):
            rev = self._commit(repo_id, repo, branch, staged, message, card)
            if card is not None:
                self._commit(repo_id, repo, CARD_BRANCH, None, message or "Update card", card)
        logger.info(
            "published %s %s at %s (%s)", repo_id, branch, rev.short, ", ".join(rev.variants)
        )
        return rev

    def set_card(self, repo_id: str, card: str, *, message: str = "Update card") -> Revision:
        """Commit a repository card (``README.md``) on branch ``main``.

        Args:
            repo_id: ``org/name``.
            card: the README text.
            message: the revision message.

        Returns:
            The new :class:`Revision` on ``main``.
        """
        repo = self._repo_dir(repo_id)
        with self._locked(repo):
            return self._commit(repo_id, repo, CARD_BRANCH, None, message, card)

    def tag(self, repo_id: str, tag: str, revision: str) -> str:
        """Create or move a tag.

        Args:
            repo_id: ``org/name``.
            tag: the tag name.
            revision: what to tag (branch, tag or commit).

        Returns:
            The tagged commit id.
        """
        _check_ref_name("tag", tag)
        repo = self._existing_repo(repo_id)
        with self._locked(repo):
            commit = self.resolve(repo_id, revision)
            _durable.write_ref(repo / "refs" / "tags" / tag, commit)
        return commit

    def _locked(self, repo: Path) -> filelock.BaseFileLock:
        repo.mkdir(parents=True, exist_ok=True)
        return filelock.FileLock(str(repo / ".lock"), timeout=LOCK_TIMEOUT_S)

    def _commit(
        self,
        repo_id: str,
        repo: Path,
        branch: str,
        staged: Staged | None,
        message: str,
        card: str | None,
    ) -> Revision:
        """Write one revision and move ``branch`` to it. The caller holds the lock."""
        _clean_leftovers(repo)
        head = repo / "refs" / "heads" / branch
        parent = head.read_text(encoding="ascii").strip() if head.is_file() else None
        if parent is not None and not _COMMIT_RE.match(parent):
            raise HubError(f"{head}: corrupt ref (expected a commit id, got {parent!r})")
        objects = repo / "objects"
        objects.mkdir(exist_ok=True)

        tmp = repo / "tmp" / secrets.token_hex(8)
        tmp.mkdir(parents=True)
        try:
            recorded = _durable.copy_tree(tmp, staged.files if staged else (), card)
            if staged is not None:
                check_digests(tmp, staged, recorded)
            fields = {
                "tree": hashlib.sha256(
                    "".join(f"{k}\0{v}\n" for k, v in sorted(recorded.items())).encode()
                ).hexdigest(),
                "parent": parent,
                "time": time.time(),
                "message": message,
                "branch": branch,
            }
            commit = hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:40]
            record = {"format": 1, "repo-id": repo_id, **fields, "files": recorded}
            _durable.write_file(
                tmp / COMMIT_FILE, json.dumps(record, indent=1, sort_keys=True).encode()
            )
            _durable.fsync_dir(tmp)
            target = objects / commit
            if target.exists():  # this very revision was published already: reuse it
                shutil.rmtree(tmp)
            else:
                os.rename(tmp, target)
            _durable.fsync_dir(objects)
        except BaseException:
            # A failure (not a crash) cleans up at once; a crash leaves tmp/ for the
            # next publish to remove.
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        _durable.write_ref(head, commit)
        return self.revision(repo_id, commit)


def _clean_leftovers(repo: Path) -> None:
    """Remove what crashed publishes left behind. Only called under the repo lock."""
    tmp_root = repo / "tmp"
    if tmp_root.is_dir():
        for entry in tmp_root.iterdir():
            logger.info("removing %s, left behind by an interrupted publish", entry)
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
    for kind in ("heads", "tags"):
        folder = repo / "refs" / kind
        if folder.is_dir():
            for entry in folder.glob(".*.tmp"):
                entry.unlink()


