"""The embedded hub: kernel repositories kept in a local directory.

Layout of a hub root::

    <root>/<org>/<name>/
        .lock                         file lock taken by writers (readers never lock)
        objects/<commit>/             one immutable revision, named by its commit id
            .commit.json              format, parent, time, message, branch, per-file digests
            build/<variant>/...       the variant packages, as published
            README.md                 the card, when one was given
        refs/heads/<branch>           a text file holding a commit id (v1, v2, main)
        refs/tags/<tag>               likewise, for tags
        tmp/<random>/                 a revision being written (ignored by readers)
        tmp/<random>.pending          the commit it will be, once renamed into objects/

Writers hold the lock, copy the new revision into ``tmp/``, fsync it, note its commit
beside it (``.pending``), rename it to ``objects/<commit>`` and only then move the
branch ref with an atomic replace, and drop the note. A reader either sees the old ref
(and the old, untouched revision) or the new ref (and a complete revision): a crash at
any point leaves the previous revision loadable. A repository's first ref comes with
its ``refs/`` folder, renamed into place whole, so a repository never shows without a
branch. What a crash leaves behind (a ``tmp/`` entry, an object that no ref reaches)
is never listed, and the next writer of the repository (a publish, a card or status
update) removes it under the lock: the ``tmp/`` leftovers, and each object a pending
note names that no ref reaches by then, so killed publishes never pile up copies of a
build. Until then such an object is no commit of the repository, as a failed push
makes none on the Hugging Face Hub: a short commit id never finds it (nor makes another
ambiguous); only its full id, which no one was told, does (as it does a revision that
a ref moved by hand left behind, which no note names and which is kept).
A publish of the very files the branch's head holds (published by this user, intact)
writes nothing: the build is compared with the head where it lies, before any copy.

A revision is what its record (``.commit.json``) lists: a folder added under
``build/`` later is no variant of it, and :meth:`LocalHub.read_file` reads only
recorded files, as the Hugging Face Hub serves only a revision's listed files.

Repository ids ignore case, as on the Hugging Face Hub: a repository is kept under the
spelling it was first published with, and any spelling of its id finds it
(:meth:`LocalHub.stored_id`). A repository's first publish runs under the hub-wide
``.create.lock`` as well, and one that fails takes away the folders it made, so that a
refused publish decides no spelling; the folders of one killed outright (no refs) are
taken away by the next first publish, which finds them unused under that lock.

A hub holds folders and regular files only. A symbolic link on the way from the root
(which may be one) to what is read or written is refused, naming it
(:func:`~kernelforge.hub._local_write.refuse_link`): each use checks the few folders on
its path with one ``lstat`` apiece, and the files of a variant are checked when its
digests are (a link there is refused too).
"""

from __future__ import annotations

import logging
import os
import reprlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kernelforge import _durable
from kernelforge._parse import UPGRADE, json_loads, newer_format_number
from kernelforge._paths import (
    HERE,
    blank_name_hint,
    empty_path_why,
    env_path,
    is_empty_path,
    path_word,
)
from kernelforge._userdirs import user_dir
from kernelforge.errors import HubError, IntegrityError
from kernelforge.hub import _local_write, base
from kernelforge.hub._local_write import (
    COMMIT_FILE,
    RECORD_FORMAT,
    _not_a_hub,
    read_ref,
    refuse_link,
)
from kernelforge.hub.base import (
    Fetched,
    Hub,
    Revision,
    validate_repo_id,
    version_branches,
)

if TYPE_CHECKING:  # pragma: no cover
    from kernelforge.signing import SigningKey

__all__ = ["EMPTY_HUB", "LocalHub", "Revision", "default_root", "validate_repo_id"]

logger = logging.getLogger(__name__)

#: Environment variable naming the default hub root; read at call time.
HUB_ENV = "KERNELFORGE_HUB"
CARD_FILE = _durable.CARD_FILE
CARD_BRANCH = base.CARD_BRANCH

_REF_RE = base.REF_RE
_COMMIT_RE = base.COMMIT_RE
_PREFIX_RE = base.PREFIX_RE

#: What to pass instead of an empty hub path, in Python and on the command line.
EMPTY_HUB_GIVE = f"a hub directory ({HERE}), 'hf' for the Hugging Face Hub"
#: Why an empty hub path is refused, and what to pass instead: the start of every
#: refusal, the library's (:func:`empty_hub`, ``hub=""``) and the command line's
#: (``--hub ""``).
EMPTY_HUB_WHY = empty_path_why("a hub", EMPTY_HUB_GIVE)
#: The hub that ``None`` names where a hub is made (:func:`~kernelforge.hub.as_hub`,
#: :class:`LocalHub`), as for a publish. A load's default differs
#: (:data:`kernelforge.locate.LOAD_DEFAULT_HUB`).
DEFAULT_HUB = "$KERNELFORGE_HUB, else the local hub in the user cache"


def empty_hub(default: str = DEFAULT_HUB) -> str:
    """The refusal of an empty hub path (``hub=""``), ending with the hub that ``None``
    (the argument left out) gives the caller: ``default``, which each caller says."""
    return f"hub: {EMPTY_HUB_WHY}, or nothing (None in Python) for the default: {default}"


def refuse_empty_hub(hub: object, default: str = DEFAULT_HUB) -> None:
    """Refuse an empty or blank hub path, which would name the current directory.

    Args:
        hub: the ``hub=`` argument as given.
        default: what ``None`` gives this caller (:func:`empty_hub`).

    Raises:
        ValueError: ``hub`` is an empty or blank string.
    """
    if is_empty_path(hub):
        raise ValueError(empty_hub(default) + blank_name_hint(hub))


#: The message refusing an empty hub path (``hub=""``) where a hub is made.
EMPTY_HUB = empty_hub()


def _distinct(found: list[tuple[str, str]], root: Path) -> list[tuple[str, str]]:
    """``found`` without the spellings that reach a folder another one reaches (a link
    ``Org -> org`` is one repository, not two), keeping the first of each."""
    seen: set[tuple[int, int]] = set()
    out = []
    # The real folder before a link to it (a stable sort keeps the order otherwise).
    for org, name in sorted(found, key=lambda f: (root / f[0]).is_symlink()
                            or (root / f[0] / f[1]).is_symlink()):
        try:
            st = (root / org / name).stat()
        except OSError:
            continue
        if (st.st_dev, st.st_ino) not in seen:
            seen.add((st.st_dev, st.st_ino))
            out.append((org, name))
    return out


def default_root() -> Path:
    """The hub root used when none is given.

    Returns:
        ``$KERNELFORGE_HUB`` when it names a directory (read now, not at import; a
        leading ``~`` is the home directory), else ``hub`` under the user's cache
        directory (``~/.cache/kernelforge/hub`` on Linux). An empty or blank
        ``$KERNELFORGE_HUB`` counts as unset, and so does ``hf`` (or ``huggingface``),
        which names the Hugging Face Hub for :func:`~kernelforge.hub.as_hub`.

    Raises:
        HubError: the user cache directory is needed but no home directory can be
            found (the message names the variable to set instead).
    """
    env = env_path(HUB_ENV)  # None: unset, empty or blank
    # "hf" and "huggingface" name HfHub
    if env is not None and os.environ[HUB_ENV].strip().lower() not in ("hf", "huggingface"):
        return env
    return user_dir("cache", "the local hub", HUB_ENV, HubError) / "hub"


def _is_repo_id(text: str) -> bool:
    """Whether a folder pair names a repository: one that :func:`validate_repo_id`
    refuses could be listed (a "did you mean" of a load's error) but never loaded."""
    try:
        validate_repo_id(text)
    except ValueError:
        return False
    return True


def held_repos(repo_id: str, held: list[str]) -> str:
    """The repositories ``held`` by a hub that lacks ``repo_id``, for its error: the first
    ten, and a "did you mean" for those whose name (after the organization) is close to
    ``repo_id``'s, as a typo or another organization gives."""
    import difflib

    def name(repo: str) -> str:  # a shared organization alone makes ids look alike
        return repo.partition("/")[2].lower()

    by_name: dict[str, list[str]] = {}
    for repo in held:
        by_name.setdefault(name(repo), []).append(repo)
    close = [repo for match in difflib.get_close_matches(name(repo_id), list(by_name), n=3)
             for repo in by_name[match]][:3]
    hint = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
    shown = held[:10] + ([f"... ({len(held) - 10} more)"] if len(held) > 10 else [])
    return ", ".join(shown) + hint


class LocalHub(Hub):
    """Kernel repositories kept in a directory on this machine: the embedded
    :class:`~kernelforge.hub.base.Hub`.

    Every method that takes a ``repo_id`` refuses a malformed one with ``ValueError``
    (and a ``commit`` that is not 40 hex digits), and raises ``HubError`` where the
    repository or commit does not exist, where the hub cannot be read, or where it finds
    a symbolic link or a damaged commit record.

    Args:
        root: the hub directory (a leading ``~`` is the home directory); ``None`` means
            :func:`default_root` (``$KERNELFORGE_HUB`` or the user cache), resolved when
            the hub is created. It need not exist yet (the first publish creates it),
            but an empty (or blank) string is refused: it would mean the current
            directory.

    Raises:
        ValueError: ``root`` is an empty or blank string.

    Example:
        >>> hub = LocalHub("/tmp/hub")  # doctest: +SKIP
        >>> rev = hub.publish("me/relu", "relu/build", version=1, message="first")
        >>> hub.variants("me/relu", rev.commit)
        ['torch-cpu']
    """

    kind = "local"

    def __init__(self, root: str | os.PathLike[str] | None = None) -> None:
        refuse_empty_hub(root)
        self.root = Path(os.path.expanduser(root)) if root is not None else default_root()

    def __repr__(self) -> str:
        return f"LocalHub({str(self.root)!r})"

    def describe(self) -> str:
        """``local hub <root>``."""
        return f"local hub {self.root}"

    # --- paths ---------------------------------------------------------------------

    def _repo_dir(self, repo_id: str) -> Path:
        """``<root>/<org>/<name>``, neither of them a link (:func:`refuse_link`)."""
        org, name = self.stored_id(repo_id).split("/")
        refuse_link(self.root / org, self.root / org / name)
        return self.root / org / name

    def stored_id(self, repo_id: str) -> str:
        """The spelling under which this hub keeps ``repo_id``.

        Repository ids are case-insensitive, as on the Hugging Face Hub: ``Org/Relu``
        names the repository first published as ``org/relu``, whatever the file system,
        and a new repository joins its organization's folder as first spelled.

        Args:
            repo_id: ``org/name``, in any case.

        Returns:
            The stored ``org/name``; for a repository not in the hub yet, ``repo_id``
            with the organization spelled as the hub already spells it (the first in
            sort order where a hub written by an earlier version has several).

        Raises:
            ValueError: a malformed ``repo_id``.
            HubError: the hub holds the repository under two spellings (a hub written
                by an earlier version on a case-sensitive file system).
        """
        org, name = validate_repo_id(repo_id)
        self._check_path()
        orgs = base.spellings(self.root, org)
        found = _distinct([(o, r) for o in orgs for r in base.spellings(self.root / o, name)],
                          self.root)
        if len(found) > 1:
            published = [f for f in found if (self.root / f[0] / f[1] / "refs").is_dir()]
            if len(published) > 1:
                both = " and ".join(str(self.root / o / r) for o, r in published)
                raise HubError(
                    f"repository {repo_id!r}: hub {self.root} holds it under "
                    f"{len(published)} spellings ({both}), but repository ids ignore case; "
                    "keep one (move the others out of the hub)"
                )
            found = published or found[:1]  # no refs in any: the first in sort order
        if found:
            return "/".join(found[0])
        if org not in orgs and orgs:
            return f"{orgs[0]}/{name}"
        return f"{org}/{name}"

    def _path_problem(self) -> str | None:
        """Why the system cannot use the hub path at all (a NUL byte, a name too long, a
        folder on the way that may not be searched), if it cannot. A path that does not
        exist yet, or that leads through a file, is no such problem: the messages about
        a missing hub or a file given as the hub say more."""
        try:
            os.stat(self.root)
        except (FileNotFoundError, NotADirectoryError):
            return None
        except (OSError, ValueError) as err:
            why = err.strerror if isinstance(err, OSError) and err.strerror else str(err)
            return (f"the hub path {str(self.root)!r} cannot be used ({why}); name a hub "
                    "directory (hub= in Python, --hub on the command line, or "
                    f"${HUB_ENV}) or leave it out for the default")
        return None

    def _check_path(self) -> None:
        problem = self._path_problem()
        if problem is not None:
            raise HubError(problem)

    def _root_problem(self) -> str | None:
        """Why the hub root cannot be a hub directory (it is a file, or the path cannot
        be used), if it cannot."""
        problem = self._path_problem()
        if problem is not None:
            return problem
        if self.root.exists() and not self.root.is_dir():
            return (f"{self.root} is not a directory, so it cannot be a hub; name a hub "
                    "directory (hub= in Python, --hub on the command line) or leave it out "
                    "for the default")
        return None

    def _existing_repo(self, repo_id: str) -> Path:
        repo = self._repo_dir(repo_id)
        refuse_link(repo / "refs")
        if not (repo / "refs").is_dir():
            problem = self._root_problem()
            if problem is not None:
                raise HubError(f"repository {repo_id!r} not found: {problem}")
            if not self.root.exists():
                meant = ("; for the default local hub, leave the hub out"
                         if str(self.root) in ("local", "default") else "")
                raise HubError(f"repository {repo_id!r} not found: the hub directory "
                               f"{self.root} does not exist; check the path, or publish "
                               f"to it first ({self._publish_hint(repo_id)}, which creates "
                               f"it){meant}")
            known = self.repos()
            if not known:  # a project directory given as the hub, say: not "empty"
                stray = _not_a_hub(self.root)
                if stray is not None:
                    raise HubError(f"repository {repo_id!r} not found: {stray}")
            hint = (f"; repositories in this hub: {held_repos(repo_id, known)}" if known
                    else f"; it is empty (publish to it with {self._publish_hint(repo_id)})")
            raise HubError(f"repository {repo_id!r} not found in hub {self.root}{hint}")
        return repo

    def _publish_hint(self, repo_id: str) -> str:
        """The command that publishes ``repo_id`` to this hub, for the error of a load
        made before any publish."""
        import shlex

        return (f"'kernelforge publish PROJECT --repo {repo_id} --hub "
                f"{shlex.quote(path_word(self.root))}'")

    def _object_dir(self, repo_id: str, commit: str, repo: Path | None = None) -> Path:
        """A commit's folder; ``repo`` is the repository's folder where the caller has
        it from :meth:`_existing_repo` already (a walk over many commits)."""
        if not isinstance(commit, str) or not _COMMIT_RE.match(commit):
            raise ValueError(f"commit: expected a 40-hex commit id, got {commit!r}")
        objects = (repo if repo is not None else self._existing_repo(repo_id)) / "objects"
        path = objects / commit
        refuse_link(objects, path, path / COMMIT_FILE)
        if not (path / COMMIT_FILE).is_file():
            raise HubError(f"commit {commit} not found in {repo_id} (hub {self.root})")
        return path

    # --- reading -------------------------------------------------------------------

    def repos(self) -> list[str]:
        """All repositories in this hub.

        Returns:
            Sorted ``org/name`` ids of the repositories that have refs; ``[]`` when the
            hub directory does not exist yet.

        Raises:
            HubError: the hub directory cannot be listed.
        """
        self._check_path()
        if not self.root.is_dir():
            return []
        found = []
        try:
            for org in self.root.iterdir():
                # a link is no repository of this hub: a load through it is refused
                if org.is_symlink() or not org.is_dir() or org.name.startswith("."):
                    continue
                for repo in org.iterdir():
                    if (not repo.is_symlink() and (repo / "refs").is_dir()
                            and _is_repo_id(f"{org.name}/{repo.name}")):
                        found.append(f"{org.name}/{repo.name}")
        except OSError as err:
            raise HubError(f"cannot list the hub {self.root}: {err.strerror or err}"
                           + (f": {err.filename}" if err.filename else "")
                           + "; check its permissions") from err
        return sorted(found)

    def has_repo(self, repo_id: str) -> bool:
        """Whether ``repo_id`` exists in this hub.

        Args:
            repo_id: ``org/name`` (in any case, see :meth:`stored_id`).

        Returns:
            ``True`` when the repository has refs here.

        Raises:
            ValueError: a malformed ``repo_id``.
            HubError: the hub holds it under two spellings (:meth:`stored_id`).
        """
        return (self._repo_dir(repo_id) / "refs").is_dir()

    def _refs(self, repo_id: str, kind: str) -> dict[str, str]:
        folder = self._existing_repo(repo_id) / "refs" / kind
        refuse_link(folder)
        refs: dict[str, str] = {}
        if not folder.is_dir():
            return refs
        for entry in sorted(folder.iterdir()):
            if not _REF_RE.match(entry.name):
                continue  # temporary files of an interrupted ref update start with '.'
            commit = read_ref(entry)  # refuses a link
            if commit is not None:
                refs[entry.name] = commit
        return refs

    def branches(self, repo_id: str) -> dict[str, str]:
        """Branches of a repository.

        Args:
            repo_id: ``org/name``.

        Returns:
            ``{branch: commit}`` sorted by branch name.

        Raises:
            ValueError: a malformed ``repo_id``.
            HubError: the repository does not exist.
        """
        return self._refs(repo_id, "heads")

    def tags(self, repo_id: str) -> dict[str, str]:
        """Tags of a repository, as ``{tag: commit}``.

        Args:
            repo_id: ``org/name``.

        Returns:
            ``{tag: commit}`` sorted by tag name.

        Raises:
            ValueError: a malformed ``repo_id``.
            HubError: the repository does not exist.
        """
        return self._refs(repo_id, "tags")

    def versions(self, repo_id: str) -> dict[int, str]:
        """Published kernel versions (branches ``v<N>``).

        Args:
            repo_id: ``org/name``.

        Returns:
            ``{N: commit}`` sorted by ``N``.

        Raises:
            ValueError: a malformed ``repo_id``.
            HubError: the repository does not exist.
        """
        return version_branches(self.branches(repo_id))

    def resolve(self, repo_id: str, revision: str) -> str:
        """Turn a branch, a tag or a (unique prefix of a) commit id into a commit id.

        A prefix matches only the commits a branch or tag reaches (its head and the
        parents on the way back): an object a killed publish left behind is no commit
        of the repository (the publisher was told the publish failed). A full commit id
        finds any complete object, as a revision pinned by a lock file stays loadable
        after a ref is moved past it.

        Args:
            repo_id: ``org/name``.
            revision: branch name, tag name, full commit id or a prefix of at least
                4 hex digits that matches one commit.

        Returns:
            The 40-hex commit id.

        Raises:
            ValueError: a malformed ``repo_id``; a ``revision`` that is not a non-empty
                string.
            HubError: the repository does not exist, nothing matches, or a prefix
                matches several commits.
        """
        if not isinstance(revision, str) or not revision:
            raise ValueError(f"revision: expected a branch, tag or commit, got {revision!r}")
        branches = self.branches(repo_id)
        if revision in branches:
            return branches[revision]
        tags = self.tags(repo_id)
        if revision in tags:
            return tags[revision]
        if _PREFIX_RE.match(revision.lower()):  # commit ids are hex, in either case
            revision = revision.lower()
            objects = self._existing_repo(repo_id) / "objects"
            if _COMMIT_RE.match(revision) and (objects / revision / COMMIT_FILE).is_file():
                return revision
            reachable = self._reachable(repo_id, [*branches.values(), *tags.values()])
            hits = sorted(c for c in reachable if c.startswith(revision))
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

    def _reachable(self, repo_id: str, heads: list[str]) -> set[str]:
        """The commits that ``heads`` (ref targets) reach along their parent chains. A
        missing object or a corrupt record ends its chain: the damage is reported where
        that revision is used (its record is named then), and is no reason to refuse a
        prefix of another commit."""
        repo = self._existing_repo(repo_id)
        objects = repo / "objects"
        seen: set[str] = set()
        for head in heads:
            commit: str | None = head
            while commit is not None and commit not in seen:
                if not (objects / commit / COMMIT_FILE).is_file():
                    break
                seen.add(commit)
                try:
                    commit = self._record(repo_id, commit, repo).get("parent")
                except HubError:
                    break
        return seen

    def _record(self, repo_id: str, commit: str, repo: Path | None = None) -> dict[str, Any]:
        path = self._object_dir(repo_id, commit, repo) / COMMIT_FILE
        try:
            record = json_loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as err:
            raise HubError(f"{path}: unreadable commit record ({err}); {_DAMAGED}") from err
        newer = _newer_format(record)
        if newer is not None:
            raise HubError(
                f"{path}: this commit record is of format {newer}, written by a newer "
                f"kernelforge (this version reads format {RECORD_FORMAT}); {UPGRADE} "
                "to use this revision")
        problem = _record_problem(record)
        if problem is not None:
            raise HubError(f"{path}: corrupt commit record ({problem}); {_DAMAGED}")
        return record

    def revision(self, repo_id: str, commit: str) -> Revision:
        """Describe one commit.

        Args:
            repo_id: ``org/name``.
            commit: a full commit id (use :meth:`resolve` first for names).

        Returns:
            The :class:`Revision`.

        Raises:
            ValueError: a malformed ``repo_id`` or ``commit``.
            HubError: the repository or the commit does not exist, or its record is
                damaged.
        """
        return self._revision(repo_id, commit, None)

    def _revision(self, repo_id: str, commit: str, repo: Path | None) -> Revision:
        """:meth:`revision`, from one read of the commit's record."""
        rec = self._record(repo_id, commit, repo)  # checked: parent and time have their types
        return Revision(
            repo_id=repo_id,
            commit=commit,
            branch=str(rec.get("branch", "")),
            parent=rec.get("parent"),
            time=float(rec.get("time", 0.0)),
            message=str(rec.get("message", "")),
            variants=tuple(_recorded_variants(self._files(rec))),
        )

    def log(self, repo_id: str, branch: str) -> list[Revision]:
        """History of a branch, newest first.

        Args:
            repo_id: ``org/name``.
            branch: e.g. ``"v1"``.

        Returns:
            The revisions from the branch head back along the parent chain.

        Raises:
            ValueError: a malformed ``repo_id``.
            HubError: the repository or the branch does not exist, or a record on the
                way back is damaged.
        """
        branches = self.branches(repo_id)
        if branch not in branches:
            raise HubError(
                f"branch {branch!r} not found in {repo_id}; branches: "
                f"{', '.join(branches) or 'none'}"
            )
        # the repository's folder is looked up once, not once per revision: that lookup
        # lists the hub's and the organization's folders (stored_id)
        repo = self._existing_repo(repo_id)
        out: list[Revision] = []
        seen: set[str] = set()
        commit: str | None = branches[branch]
        while commit and commit not in seen:
            seen.add(commit)
            rev = self._revision(repo_id, commit, repo)
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
            ValueError: a malformed ``repo_id`` or ``commit``.
            HubError: the repository or the commit does not exist.
        """
        return self._object_dir(repo_id, commit)

    def variants(self, repo_id: str, commit: str) -> list[str]:
        """Build variants held by a commit.

        Args:
            repo_id: ``org/name``.
            commit: a full commit id.

        Returns:
            Sorted names of the variants the commit's record lists (a
            ``build/<variant>/metadata.json``); a folder added under ``build/`` after
            the publish is none (the record, and the owner mark over it, do not cover
            its files).

        Raises:
            ValueError: a malformed ``repo_id`` or ``commit``.
            HubError: the repository or the commit does not exist, or its record is
                damaged.
        """
        return _recorded_variants(self._files(self._record(repo_id, commit)))

    def variant_path(self, repo_id: str, commit: str, variant: str) -> Path:
        """Where a variant's files are on disk (treat them as read-only).

        Args:
            repo_id: ``org/name``.
            commit: a full commit id.
            variant: a variant name from :meth:`variants`.

        Returns:
            ``<root>/<org>/<name>/objects/<commit>/build/<variant>``.

        Raises:
            ValueError: a malformed ``repo_id`` or ``commit``.
            HubError: the repository or the commit does not exist, the commit's record
                lists no such variant (a folder added under ``build/`` later is none),
                or its folder is missing.
        """
        return self._variant_path(repo_id, commit, variant, self._record(repo_id, commit))

    def _variant_path(self, repo_id: str, commit: str, variant: str,
                      record: dict[str, Any]) -> Path:
        build = self._object_dir(repo_id, commit) / "build"
        known = _recorded_variants(self._files(record))
        if isinstance(variant, str) and variant in known:
            refuse_link(build, build / variant)  # its files: when they are verified
        if not isinstance(variant, str) or variant not in known:
            note = ""
            if isinstance(variant, str) and _plain_part(variant) and _is_dir(build / variant):
                note = (f"; {build / variant} is not in the commit's record: it was added "
                        "after the publish (by hand or by another program) and is no part "
                        "of the revision; remove it")
            raise HubError(
                f"variant {variant!r} not found in {repo_id} at {commit[:7]}; variants: "
                f"{', '.join(known) or 'none'}{note}"
            )
        path = build / variant
        if not path.is_dir():
            raise HubError(
                f"variant {variant!r} of {repo_id} at {commit[:7]} is recorded, but its "
                f"folder {path} is missing: the hub is damaged; publish the build again")
        return path

    def recorded_files(self, repo_id: str, commit: str) -> dict[str, str]:
        """The per-file sha256 digests recorded when the commit was published.

        Args:
            repo_id: ``org/name``.
            commit: a full commit id.

        Returns:
            ``{relpath in the revision: base64 sha256}``, e.g.
            ``{"build/torch-cpu/__init__.py": "..."}``.

        Raises:
            ValueError: a malformed ``repo_id`` or ``commit``.
            HubError: the repository or the commit does not exist, or its record is
                damaged.
        """
        return self._files(self._record(repo_id, commit))

    def read_file(self, repo_id: str, commit: str, path: str) -> bytes | None:
        """One file of a revision, as published.

        Args:
            repo_id: ``org/name``.
            commit: a full commit id.
            path: the path in the revision (``build/torch-cpu/metadata.json``).

        Returns:
            Its bytes, or ``None`` when the revision has no such file: its record does
            not list it (a file added to the hub later is none, as on the Hugging Face
            Hub a revision serves only its own files), or it is gone.

        Raises:
            ValueError: a malformed ``repo_id`` or ``commit``; a ``path`` that is not a
                plain relative path (no empty, ``.`` or ``..`` part), or that names the
                commit record.
            HubError: the repository or the commit does not exist, or the file is there
                but cannot be read, or is bigger than
                :data:`~kernelforge.hub.base.SMALL_FILE_MAX`.
        """
        from kernelforge.cache import is_revision_path

        if (not isinstance(path, str) or not is_revision_path(path)
                or path.split("/")[0] == COMMIT_FILE):
            raise ValueError(f"path: {path!r} is not a file path inside a revision")
        root = self._object_dir(repo_id, commit)
        if path not in self._files(self._record(repo_id, commit)):
            return None
        parts = path.split("/")
        refuse_link(*(root.joinpath(*parts[:i]) for i in range(1, len(parts) + 1)))
        target = root.joinpath(*parts)
        try:
            if not target.is_file():
                return None
            base.check_small_file(repo_id, commit, path, target.stat().st_size, self.describe())
            return target.read_bytes()
        except OSError as err:
            raise HubError(f"{repo_id} at {commit[:7]}: cannot read {target} "
                           f"({err.strerror or err}); check its permissions") from err

    def owned(self, repo_id: str, commit: str) -> bool:
        """Whether this user published ``commit`` (its owner mark verifies).

        Args:
            repo_id: ``org/name``.
            commit: a full commit id.

        Returns:
            ``True`` when the commit record carries a mark made with this user's owner
            key over exactly the recorded files (see :mod:`kernelforge.trust`).

        Raises:
            ValueError: a malformed ``repo_id`` or ``commit``.
            HubError: the repository or the commit does not exist, or its record is
                damaged.
        """
        return self._owned(repo_id, commit, self._record(repo_id, commit))

    @staticmethod
    def _files(record: dict[str, Any]) -> dict[str, str]:
        files = record.get("files", {})
        return dict(files) if isinstance(files, dict) else {}

    def _owned(self, repo_id: str, commit: str, record: dict[str, Any]) -> bool:
        from kernelforge.trust import check_owner_mark

        # The mark covers the id as the publish spelled it (the record's), which is this
        # repository's whatever the case.
        spelled = record.get("repo-id")
        if not isinstance(spelled, str) or spelled.lower() != repo_id.lower():
            spelled = self.stored_id(repo_id)
        return check_owner_mark(record.get("owner"), spelled, commit, self._files(record))

    def fetch_variant(
        self, repo_id: str, commit: str, variant: str, *, refresh: bool = False
    ) -> Fetched:
        """A variant's files: already on disk here, nothing is copied.

        Args:
            repo_id: ``org/name``.
            commit: a full commit id.
            variant: the variant name.
            refresh: ignored (the hub's files are the only copy).

        Returns:
            The :class:`~kernelforge.hub.base.Fetched` variant: its directory, the
            digests recorded at publish time (``metadata.json`` included) and whether
            this user published it. Both come from one read of the commit record, so the
            digests the load checks are the ones the owner mark covers.

        Raises:
            ValueError: a malformed ``repo_id`` or ``commit``.
            HubError: as for :meth:`variant_path`.
        """
        record = self._record(repo_id, commit)
        path = self._variant_path(repo_id, commit, variant, record)
        prefix = f"build/{variant}/"
        recorded = {k[len(prefix):]: v for k, v in self._files(record).items()
                    if k.startswith(prefix)}
        return Fetched(path, recorded, owned=self._owned(repo_id, commit, record))

    def verify(self, repo_id: str, commit: str) -> None:
        """Check every file of a commit against the digests recorded at publish time.

        Args:
            repo_id: ``org/name``.
            commit: a full commit id.

        Raises:
            IntegrityError: naming each changed, missing or extra file (sourceless
                ``*.pyc`` too; ``__pycache__`` is left out, as loads never read it).
            ValueError: a malformed ``repo_id`` or ``commit``.
            HubError: the repository or the commit does not exist, or its record is
                damaged.
        """
        from kernelforge.digest import verify_tree

        root = self._object_dir(repo_id, commit)
        verify_tree(root, self.recorded_files(repo_id, commit), ignore=(COMMIT_FILE,),
                    bytecode="allow-pycache")


    # --- writing (kernelforge.hub._local_write) ------------------------------------

    def check_publishable(self) -> None:
        """Refuse, before any work, a root that cannot hold a hub: a file, a path that
        cannot be used, or a directory holding something other than ``<org>/<name>/``
        folders (a project given as the hub by mistake).

        Raises:
            HubError: naming the hub and what is wrong with it.
        """
        _local_write.check_publishable(self)

    def publish(
        self,
        repo_id: str,
        build_dir: str | os.PathLike[str],
        *,
        version: int,
        message: str = "",
        card: str | None = None,
        signer: SigningKey | None = None,
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
                revision and committed on branch ``main`` too. Without one the revision
                keeps the card of the branch's head, as a Hugging Face Hub publish does.
            signer: sign every variant with this key (``build/<variant>.sig``), so
                that others who trust the key can load it.

        Returns:
            The new :class:`Revision`; where the branch's head, published by you, holds
            the same files, that head (no new revision), with itself as its parent.

        Raises:
            ValueError: a malformed ``repo_id`` or ``version``, an empty or blank
                ``build_dir`` string, a ``message`` or ``card`` that is not a string,
                a ``card`` bigger than :data:`~kernelforge.hub.base.SMALL_FILE_MAX`
                (16 MiB: a later publish without a card could not read it back).
            TypeError: a ``signer`` that is not a
                :class:`~kernelforge.signing.SigningKey`.
            HubError: the build is unfit to publish (no variants, a ``.pyc``, a link,
                missing or wrong metadata, a ``metadata.json`` ``version`` other than
                ``version``) or the hub cannot be written.
            IntegrityError: a variant's files do not match its recorded digest.
            TrustError: ``signer`` is given but a variant's ``metadata.json`` records
                no file digests (a signature would not cover its code).
        """
        return _local_write.publish(self, repo_id, build_dir, version=version,
                                    message=message, card=card, signer=signer)

    def set_card(self, repo_id: str, card: str, *, message: str = "Update card") -> Revision:
        """Commit a repository card (``README.md``) on branch ``main``.

        Args:
            repo_id: ``org/name``; created when the hub does not hold it yet.
            card: the README text.
            message: the revision message.

        Returns:
            The new :class:`Revision` on ``main``; where ``main``'s head, published by
            you, holds this card already, that head (no new revision), with itself as
            its parent.

        Raises:
            ValueError: a malformed ``repo_id``, a ``card`` or ``message`` that is not a
                string, a ``card`` bigger than
                :data:`~kernelforge.hub.base.SMALL_FILE_MAX` (16 MiB: a later publish
                without a card could not read it back), as :meth:`publish` refuses it.
            HubError: the hub cannot be written.
        """
        return _local_write.set_card(self, repo_id, card, message=message)

    def set_status(
        self, repo_id: str, status: str | None, *, message: str = "Update kernel status"
    ) -> Revision:
        """Commit (or remove, with ``None``) ``kernel-status.toml`` on branch ``main``.

        The file can redirect loads to another repository, in the format Hugging
        Face's ``kernels`` reads: ``kind = "redirect"``, ``destination = "org/name"``
        and an optional ``revision``.

        Args:
            repo_id: ``org/name``; created when the hub does not hold it yet.
            status: the TOML text, or ``None`` to remove the file.
            message: the revision message.

        Returns:
            The new :class:`Revision` on ``main``; where ``main``'s head, published by
            you, holds this status already, that head (no new revision), with itself as
            its parent.

        Raises:
            ValueError: a malformed ``repo_id``, a ``status`` that is neither a string
                nor ``None`` or that is bigger than
                :data:`~kernelforge.hub.base.SMALL_FILE_MAX` (16 MiB: every load of the
                repository reads it, and would refuse it), a ``message`` that is not a
                string.
            HubError: ``status`` is not a valid ``kernel-status.toml``, or the hub
                cannot be written.
        """
        return _local_write.set_status(self, repo_id, status, message=message)

    def tag(self, repo_id: str, tag: str, revision: str) -> str:
        """Create or move a tag.

        Args:
            repo_id: ``org/name``.
            tag: the tag name (letters, digits, ``.``, ``_`` and ``-``).
            revision: what to tag (branch, tag or commit), as :meth:`resolve` reads it.

        Returns:
            The tagged commit id.

        Raises:
            ValueError: a malformed ``repo_id`` or ``tag`` name.
            HubError: the repository or ``revision`` does not exist, or the hub cannot
                be written.
        """
        return _local_write.set_tag(self, repo_id, tag, revision)


#: What to do about a damaged commit record (anyone who can write the hub can change it).
_DAMAGED = ("the hub's copy of this revision is damaged: do not load it; publish the build "
            "again, or restore the file from a backup")


def damage_fix(lockfile: str | None = None) -> str:
    """What to do about a local hub's copy of a revision whose files no longer match what
    was published (anyone who can write the hub can change them): only a new publish mends
    it, and that is a new revision, so a lock file that pins this one is written again."""
    if lockfile is None:
        return ("the hub's copy of this revision is damaged: publish the build again (or "
                "load another revision)")
    return ("the hub's copy of this revision is damaged: publish the build again, then run "
            f"'kernelforge lock' again so that {lockfile} pins the new revision")


def damaged_copy(err: IntegrityError, lockfile: str | None = None) -> IntegrityError:
    """``err``, about the files of a local hub's own copy of a revision, with a last line
    naming the fix (:func:`damage_fix`); its ``where`` and ``problems`` stay as they are.

    Fetching again, which mends a download cache's copy, cannot help here: the hub's copy
    is the published revision itself."""
    damaged = IntegrityError(err.where, err.problems)
    damaged.args = (f"{err}\n{damage_fix(lockfile)}",)
    return damaged


def _newer_format(record: object) -> int | None:
    """The format of a commit record that a newer kernelforge wrote (above
    :data:`RECORD_FORMAT`), which this version must not read as its own; ``None`` for
    any other record (a bad ``format`` is :func:`_record_problem`'s)."""
    return newer_format_number(record, RECORD_FORMAT)


def _record_problem(record: object) -> str | None:
    """What is wrong with a commit record's shape, if anything: a value of the wrong
    type would otherwise surface as a ``ValueError`` far from the file that holds it."""
    if not isinstance(record, dict):
        return "not a JSON object"
    found = record.get("format", 1)
    if isinstance(found, bool) or not isinstance(found, int) or found < 1:
        return f"'format' is {reprlib.repr(found)}, not a format number"
    parent = record.get("parent")
    if parent is not None and not (isinstance(parent, str) and _COMMIT_RE.match(parent)):
        return f"'parent' is {parent!r}, not a commit id or null"
    when = record.get("time", 0.0)
    if not base.is_timestamp(when):
        return f"'time' is {reprlib.repr(when)}, not a number of seconds since the epoch"
    files = record.get("files", {})
    if not isinstance(files, dict) or not all(isinstance(v, str) for v in files.values()):
        return "'files' is not a mapping of paths to digests"
    return None


def _plain_part(name: str) -> bool:
    """Whether ``name`` is one plain path part: no ``/``, backslash or NUL, not empty,
    ``.`` or ``..``."""
    return (bool(name) and name not in (".", "..")
            and not any(c in name for c in ("/", "\\", "\0")))


def _is_dir(path: Path) -> bool:
    """``path.is_dir()``, ``False`` for a name the system cannot take (too long)."""
    try:
        return path.is_dir()
    except (OSError, ValueError):
        return False


def _recorded_variants(files: dict[str, str]) -> list[str]:
    """The variants a record's ``files`` list: each ``build/<variant>/metadata.json``."""
    found = set()
    for rel in files:
        parts = rel.split("/")
        if (len(parts) == 3 and parts[0] == "build" and parts[2] == "metadata.json"
                and _plain_part(parts[1])):
            found.add(parts[1])
    return sorted(found)
