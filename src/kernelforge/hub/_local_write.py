"""Writing to the embedded local hub: publish, cards, status, tags (see
:mod:`kernelforge.hub.local` for the layout and the crash-safety argument).

The writing half of :class:`~kernelforge.hub.local.LocalHub`, as functions of the hub:
its methods (``publish``, ``set_card``, ...) are documented there and call these, which
rely on the reading half for paths, refs and revisions. Kept apart so that each module
reads in one sitting; not a base class, so that ``help(LocalHub)`` shows one class.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import secrets
import shutil
import stat
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from kernelforge import _durable
from kernelforge.digest import b64_sha256, hash_file
from kernelforge.errors import HubError, IntegrityError
from kernelforge.hub._staging import Staged, build_file_error, check_digests, stage_build
from kernelforge.hub.base import (
    CARD_BRANCH,
    COMMIT_RE,
    STATUS_FILE,
    Revision,
    check_card,
    check_publish_arguments,
    check_ref_name,
    check_status,
    check_text,
    signature_path,
)

if TYPE_CHECKING:  # pragma: no cover
    import filelock

    from kernelforge.hub.local import LocalHub
    from kernelforge.signing import SigningKey

__all__ = ["COMMIT_FILE", "LOCK_TIMEOUT_S", "RECORD_FORMAT", "check_publishable",
           "commit_main", "locked", "publish", "read_ref", "refuse_link", "set_card",
           "set_status", "set_tag"]

logger = logging.getLogger("kernelforge.hub.local")

LOCK_TIMEOUT_S = 600.0
COMMIT_FILE = ".commit.json"
#: The format of the commit records this version writes, and the newest it reads (a
#: record without ``format`` is one of format 1). A change that an older reader would
#: misread raises it: an older version then refuses such a revision, naming it, rather
#: than loading it wrongly.
RECORD_FORMAT = 1
#: The hub-wide lock under which a new repository's folder is made.
CREATE_LOCK = ".create.lock"
#: The suffix of the note ``tmp/<name>.pending`` that a publish writes, naming its
#: commit, before it renames the revision ``tmp/<name>`` into ``objects/``, and removes
#: once its ref names the commit: what a publish that died between the two left in
#: ``objects/`` is found by it, and removed by the next writer.
PENDING_SUFFIX = ".pending"
CARD_FILE = _durable.CARD_FILE
_COMMIT_RE = COMMIT_RE


def check_publishable(hub: LocalHub) -> None:
    """:meth:`LocalHub.check_publishable <kernelforge.hub.local.LocalHub.check_publishable>`."""
    problem = hub._root_problem() or _not_a_hub(hub.root)
    if problem is not None:
        raise HubError(f"cannot write to the hub: {problem}")


def publish(
    hub: LocalHub,
    repo_id: str,
    build_dir: str | os.PathLike[str],
    *,
    version: int,
    message: str = "",
    card: str | None = None,
    signer: SigningKey | None = None,
) -> Revision:
    """:meth:`LocalHub.publish <kernelforge.hub.local.LocalHub.publish>`: the arguments
    are checked and the build staged before the hub is locked or written."""
    check_publish_arguments(repo_id, build_dir, version, message, card, signer)
    staged = stage_build(Path(build_dir), version)
    if signer is not None:
        from kernelforge.signing import check_signable

        check_signable(staged.digests, build_dir, staged.unversioned)
    branch = f"v{version}"
    with locked(hub, repo_id) as (repo_id, repo):
        # Without a card the branch keeps the one it has, as on the Hugging Face Hub,
        # where a publish replaces only build/: the same build published with and
        # without --card is then one revision, not a new one each time.
        extra = ({CARD_FILE: card.encode("utf-8")} if card is not None
                 else _branch_card(hub, repo_id, repo, branch))
        rev = _commit(hub, repo_id, repo, branch, staged, message, extra, signer)
        if card is not None:
            _card_after(hub, repo_id, repo, rev, message or "Update card", card)
    logger.info(
        "published %s %s at %s (%s)", repo_id, branch, rev.short, ", ".join(rev.variants)
    )
    return rev


def _card_after(hub: LocalHub, repo_id: str, repo: Path, rev: Revision, message: str,
                card: str) -> None:
    """Write ``card`` to ``main`` once ``rev`` is published on its branch. A failure here
    says that the build was published: :func:`locked` would otherwise report the
    revisions as they were, though the branch has moved."""
    try:
        commit_main(hub, repo_id, repo, message, {CARD_FILE: card})
    except (OSError, HubError) as err:
        why = (f"{_write_failed(hub, err)}; fix: {_write_fix(hub, err)}, then publish "
               "it again with the card" if isinstance(err, OSError) else str(err))
        raise HubError(f"{repo_id} {rev.branch} was published at {rev.short}, but its "
                       f"card was not written to {CARD_BRANCH}: {why}") from err


def set_card(hub: LocalHub, repo_id: str, card: str, *, message: str) -> Revision:
    """:meth:`LocalHub.set_card <kernelforge.hub.local.LocalHub.set_card>`: the card is
    checked as :meth:`publish` checks one."""
    check_card(card)
    check_text("message", message, "a string")
    with locked(hub, repo_id) as (repo_id, repo):
        return commit_main(hub, repo_id, repo, message, {CARD_FILE: card})


def set_status(hub: LocalHub, repo_id: str, status: str | None, *, message: str) -> Revision:
    """:meth:`LocalHub.set_status <kernelforge.hub.local.LocalHub.set_status>`: the text
    is parsed before the hub is locked."""
    check_text("message", message, "a string")
    if status is not None:
        check_status(status)
        from kernelforge.revisions import parse_status

        parse_status(status, f"{repo_id}: {STATUS_FILE}")
    with locked(hub, repo_id) as (repo_id, repo):
        return commit_main(hub, repo_id, repo, message, {STATUS_FILE: status})


def set_tag(hub: LocalHub, repo_id: str, tag: str, revision: str) -> str:
    """:meth:`LocalHub.tag <kernelforge.hub.local.LocalHub.tag>`."""
    check_ref_name("tag", tag)
    hub._existing_repo(repo_id)
    with locked(hub, repo_id) as (repo_id, repo):
        commit = hub.resolve(repo_id, revision)
        refuse_link(repo / "refs" / "tags")
        _durable.write_ref(repo / "refs" / "tags" / tag, commit)
    return commit


@contextlib.contextmanager
def locked(hub: LocalHub, repo_id: str) -> Iterator[tuple[str, Path]]:
    """Hold the write lock of ``repo_id``'s folder (creating it), giving the id as the
    hub stores it (:meth:`~kernelforge.hub.local.LocalHub.stored_id`) and the folder.

    A repository not published yet (no ``refs/``) is written under the hub-wide
    lock too, held until the body ends: its folder is looked up and made under it,
    so that two first publishes under spellings that differ in case make one
    folder, and a body that fails (a refused build) takes away again the folders
    it made while nothing else can be using them, so that the first publish that
    succeeds decides the spelling. The hub's files cannot be written (the root is
    a file, no permission, no space, the lock is held too long): a
    :class:`HubError` naming the hub, never an ``OSError``.

    Only errors about the hub's own paths (or about no path: a write that ran out
    of space) blame the hub; an ``OSError`` about a file elsewhere, which the body
    should have reported itself (:func:`~kernelforge.hub._staging.build_file_error`),
    names that file and says the hub is not at fault."""
    # Imported here, not with the module: reading the hub (every load) takes no
    # lock, and filelock takes about as long to import as the loader itself.
    import filelock

    check_publishable(hub)
    try:
        repo = hub._repo_dir(repo_id)
        if (repo / "refs").is_dir():  # published: never removed, no hub-wide lock
            with _repo_lock(repo):
                yield f"{repo.parent.name}/{repo.name}", repo
            return
        # New folders (the root, <org>/, <org>/<name>/) are fsynced into their
        # parents: a revision fsynced below a folder whose name a power loss drops
        # is lost with it.
        _durable.make_dirs(hub.root)
        refuse_link(hub.root / CREATE_LOCK)
        with filelock.FileLock(str(hub.root / CREATE_LOCK), timeout=LOCK_TIMEOUT_S):
            repo = hub._repo_dir(repo_id)  # looked up again under the lock
            if repo.is_dir() and not (repo / "refs").is_dir():
                # No publish is writing it (a first publish holds this lock until it
                # ends): a first publish killed outright (kill -9, a power loss) left
                # it. Taken away if it holds no revision once what that publish left is
                # removed (a revision it wrote but no ref names, too), so that it
                # decides no spelling either.
                with _repo_lock(repo):
                    _clean_leftovers(hub, repo_id, repo)
                org_alone = [p.name for p in repo.parent.iterdir()] == [repo.name]
                _remove_unpublished([repo, repo.parent] if org_alone else [repo])
                repo = hub._repo_dir(repo_id)
            made = [p for p in (repo, repo.parent) if not p.is_dir()]
            _durable.make_dirs(repo)
            try:
                with _repo_lock(repo):
                    yield f"{repo.parent.name}/{repo.name}", repo
            except BaseException:
                _remove_unpublished(made)
                raise
    except filelock.Timeout as err:
        raise HubError(
            f"{Path(err.lock_file).parent}: another process has held its lock "
            f"{err.lock_file} for over "
            f"{LOCK_TIMEOUT_S:.0f}s; wait for it to finish, or remove the lock file if "
            "no kernelforge process is running"
        ) from err
    except OSError as err:
        if err.filename is not None and not _in_tree(err.filename, hub.root):
            raise HubError(f"{err.filename}: {err.strerror or err} (a file outside the hub "
                           f"{hub.root}; no revision was written)") from err
        raise HubError(f"{_write_failed(hub, err)}; its revisions are as they were; "
                       f"fix: {_write_fix(hub, err)}") from err


def _write_failed(hub: LocalHub, err: OSError) -> str:
    """What a write to this hub that the file system refused was refused with."""
    what = f"{err.strerror or err}" + (f": {err.filename}" if err.filename else "")
    return f"writing to the hub {hub.root} failed ({what})"


def _write_fix(hub: LocalHub, err: OSError) -> str:
    """What to do about a write to this hub that the file system refused."""
    if err.errno in _durable.DISK_FULL:
        return "free space on its disk"
    if err.errno in _durable.NOT_WRITABLE:
        # the hub, with what it holds; where it does not exist yet, the folder it
        # would be made in
        where = _durable.nearest_folder(hub.root)
        return (f"make {where} writable, or publish to a hub you can write (--hub on "
                "the command line, hub= in Python)")
    return "remove the cause, then run it again"


def _repo_lock(repo: Path) -> filelock.FileLock:
    """The write lock of a repository folder (its ``.lock``, never a link)."""
    import filelock

    refuse_link(repo / ".lock")
    return filelock.FileLock(str(repo / ".lock"), timeout=LOCK_TIMEOUT_S)


def commit_main(
    hub: LocalHub, repo_id: str, repo: Path, message: str, changes: dict[str, str | None]
) -> Revision:
    """Commit on ``main``: its card and status files, with ``changes`` applied."""
    head = read_ref(repo / "refs" / "heads" / CARD_BRANCH)
    files: dict[str, bytes] = {}
    if head is not None:
        old = repo / "objects" / head
        for name in (CARD_FILE, STATUS_FILE):
            if (old / name).is_file():
                files[name] = (old / name).read_bytes()
    for name, text in changes.items():
        if text is None:
            files.pop(name, None)
        else:
            files[name] = text.encode("utf-8")
    return _commit(hub, repo_id, repo, CARD_BRANCH, None, message, files, None)


def _commit(
    hub: LocalHub,
    repo_id: str,
    repo: Path,
    branch: str,
    staged: Staged | None,
    message: str,
    extra: dict[str, bytes],
    signer: SigningKey | None,
) -> Revision:
    """Write one revision and move ``branch`` to it. The caller holds the lock.

    ``extra`` files (card, status) are written as given; with a ``signer`` every
    staged variant's copied ``metadata.json`` is signed into ``build/<v>.sig``.
    """
    # what this publish writes into is the hub's own (tmp/: _clean_leftovers checks)
    refuse_link(repo / "objects", repo / "refs", repo / "refs" / "heads")
    _clean_leftovers(hub, repo_id, repo)
    head = repo / "refs" / "heads" / branch
    parent = read_ref(head)
    if (parent is not None and staged is not None and signer is None
            and _published_already(hub, repo_id, parent, staged, extra)):
        # checked before anything is copied: a publish of the build the branch holds
        # writes nothing (see the copy's own check below)
        return replace(hub.revision(repo_id, parent), parent=parent)
    objects = repo / "objects"
    _durable.make_dirs(objects)

    tmp = repo / "tmp" / secrets.token_hex(8)
    tmp.mkdir(parents=True)
    try:
        try:
            recorded = _durable.copy_tree(tmp, staged.files if staged else (), None)
        except OSError as err:
            # A file of the build that cannot be read is the build's problem, not
            # the hub's: say which file (the copy under tmp/ is removed below).
            source = _failed_source(err, staged)
            if source is None or staged is None:
                raise
            raise build_file_error(source, err, staged) from err
        if staged is not None:
            check_digests(tmp, staged, recorded)
            if signer is not None:
                for variant in staged.variants:
                    meta = (tmp / "build" / variant / "metadata.json").read_bytes()
                    extra = {**extra, signature_path(variant): signer.sign_variant(
                        variant, meta, repo_id=repo_id)}
        for rel, data in sorted(extra.items()):
            recorded[rel] = _durable.write_file(tmp / rel, data)
        # copy_tree fsynced the folders before these files were added to them (a
        # signature to build/, the card to the top): flush those entries again
        # below, before the rename publishes the revision.
        extra_dirs = {(tmp / rel).parent for rel in extra} - {tmp}
        if parent is not None and _unchanged(hub, repo_id, parent, recorded):
            # The branch holds these very files, published by this user: no new
            # revision (as the Hugging Face Hub makes no commit that changes
            # nothing). The returned revision is the head, with itself as parent.
            shutil.rmtree(tmp)
            return replace(hub.revision(repo_id, parent), parent=parent)
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
        from kernelforge.trust import owner_mark

        record = {"format": RECORD_FORMAT, "repo-id": repo_id, **fields, "files": recorded,
                  "owner": owner_mark(repo_id, commit, recorded)}
        _durable.write_file(
            tmp / COMMIT_FILE, json.dumps(record, indent=1, sort_keys=True).encode()
        )
        for folder in sorted(extra_dirs, key=lambda d: len(d.parts), reverse=True):
            _durable.fsync_dir(folder)
        _durable.fsync_dir(tmp)
        target = objects / commit
        pending = None
        if target.exists():  # this very revision was published already: reuse it
            shutil.rmtree(tmp)
        else:
            pending = _note_pending(tmp, commit)
            os.rename(tmp, target)
        _durable.fsync_dir(objects)
    except BaseException:
        # A failure (not a crash) cleans up at once; a crash leaves tmp/ for the
        # next publish to remove. From the rename on, the pending note stays: the
        # next writer removes the revision unless a ref names it by then.
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    _write_ref(repo, head, commit)
    if pending is not None:
        _drop_note(pending, repo_id, branch, commit)
    return hub.revision(repo_id, commit)


def _note_pending(tmp: Path, commit: str) -> Path:
    """Write, durably and before ``tmp`` is renamed to ``objects/<commit>``, the note
    (:data:`PENDING_SUFFIX`) by which the next writer finds that revision if this
    publish dies before a ref names it (:func:`_drop_unreferenced`)."""
    note = tmp.with_name(tmp.name + PENDING_SUFFIX)
    _durable.write_file(note, f"{commit}\n".encode("ascii"))
    _durable.fsync_dir(tmp.parent)
    return note


def _drop_note(note: Path, repo_id: str, branch: str, commit: str) -> None:
    """Remove the pending ``note`` of ``commit``, which the ref ``branch`` names now. The
    publish has landed by then, so a note that cannot be removed (no permission, an I/O
    error) is a warning, not an error saying the revisions are as they were. Left, it
    does no harm: the next writer of the repository finds a ref reaching its commit, so
    it keeps the revision and removes the note (:func:`_clean_leftovers`)."""
    try:
        note.unlink()
    except OSError as err:
        logger.warning(
            "kernelforge: %s: %s was published at %s, but its pending note %s could not be removed "
            "(%s); it does no harm, and the next publish, card or status change of %s "
            "removes it", repo_id, branch, commit[:7], note, err.strerror or err, repo_id)


def _write_ref(repo: Path, head: Path, commit: str) -> None:
    """Point the branch ``head`` at ``commit``. A repository's first ref is written in a
    ``refs/`` folder made under ``tmp/`` and renamed into place: ``refs/`` is what makes
    a folder a published repository (:meth:`~kernelforge.hub.local.LocalHub.has_repo`),
    so it never shows without a branch, which a publish killed between making
    ``refs/heads/`` and writing its file would otherwise leave (a repository with no
    versions, which a load with no hub given would take for this hub's)."""
    refs = repo / "refs"
    if refs.is_dir():
        _durable.write_ref(head, commit)
        return
    staged = repo / "tmp" / f"{secrets.token_hex(8)}.refs"
    _durable.write_ref(staged / head.relative_to(refs), commit)
    os.rename(staged, refs)
    _durable.fsync_dir(repo)


def _branch_card(hub: LocalHub, repo_id: str, repo: Path, branch: str) -> dict[str, bytes]:
    """The card the head of ``branch`` holds, as ``extra`` files for its next revision
    (none when the branch is new, has no card, or its card cannot be read)."""
    head = read_ref(repo / "refs" / "heads" / branch)
    if head is None:
        return {}
    try:
        data = hub.read_file(repo_id, head, CARD_FILE)
    except HubError as err:
        logger.info("the card of %s %s cannot be read (%s); not kept", repo_id, branch,
                    err)
        return {}
    return {} if data is None else {CARD_FILE: data}


def _published_already(hub: LocalHub, repo_id: str, head: str, staged: Staged,
                       extra: dict[str, bytes]) -> bool:
    """Whether the revision at ``head`` holds exactly the files this publish would
    write (:meth:`_unchanged`), found by reading the build where it is rather than
    by copying it into the hub first. The files are hashed only when the head
    records the same paths and the same bytes for each variant's ``metadata.json``
    (which records the digest of every other file); a file that cannot be read is
    left to the copy, which names it."""
    try:
        old = hub._record(repo_id, head).get("files", {})
    except HubError:
        return False
    if set(old) != {rel for _, rel in staged.files} | set(extra) or any(
            b64_sha256(data) != old[rel] for rel, data in extra.items()):
        return False
    try:
        metadata = [(src, rel) for src, rel in staged.files
                    if rel.count("/") == 2 and rel.endswith("/metadata.json")]
        if any(hash_file(src) != old[rel] for src, rel in metadata):
            return False
        recorded = {rel: hash_file(src) for src, rel in staged.files}
    except OSError:
        return False
    recorded.update({rel: b64_sha256(data) for rel, data in extra.items()})
    check_digests(None, staged, recorded)  # a build changed since: refused, as below
    return _unchanged(hub, repo_id, head, recorded)


def _unchanged(hub: LocalHub, repo_id: str, head: str, recorded: dict[str, str]) -> bool:
    """Whether the revision at ``head`` records exactly ``recorded``, was published
    by this user and is intact on disk. A damaged head (a corrupt record, a file
    changed, removed or added) is not the same: publishing the build again is the
    fix the damage messages give, so it must make a new revision."""
    try:
        old = hub._record(repo_id, head)
        if old.get("files") != recorded or not hub._owned(repo_id, head, old):
            return False
        hub.verify(repo_id, head)
    except (HubError, IntegrityError) as err:
        logger.info("the head %s of %s is damaged (%s); publishing a new revision",
                    head[:12], repo_id, err)
        return False
    return True


def read_ref(path: Path) -> str | None:
    """The commit id a ref file holds, ``None`` when there is no such file.

    Raises:
        HubError: the file cannot be read, is a symbolic link (:func:`refuse_link`) or
            holds no commit id, naming the file and what to do (a ref is one line: a
            40-hex commit id).
    """
    refuse_link(path)
    if not path.is_file():
        return None
    try:
        text = path.read_bytes().decode("ascii", errors="replace").strip()
    except OSError as err:
        raise HubError(f"{path}: cannot read this ref ({err.strerror or err}); check its "
                       "permissions") from err
    if not _COMMIT_RE.match(text):
        raise HubError(
            f"{path}: corrupt ref (expected a 40-hex commit id, got {text[:60]!r}); write "
            f"into it the id of a commit under {path.parents[2] / 'objects'} (the one it "
            "pointed at, if known), or remove it to drop the branch or tag")
    return text


def refuse_link(*paths: Path) -> None:
    """Refuse the first of ``paths`` that is a symbolic link (one ``lstat`` each; nothing
    to check where one is missing or cannot be named). A local hub holds folders and
    regular files only, below its root (which may itself be a link the user made): a
    link there could lead a load to code outside the hub, which the owner mark of a
    revision would then vouch for, or a write to files outside it.

    Raises:
        HubError: naming the link, where it leads and the fix.
    """
    for path in paths:
        try:
            linked = stat.S_ISLNK(os.lstat(path).st_mode)
        except (OSError, ValueError):
            continue
        if linked:
            try:
                target = f" to {os.readlink(path)}"
            except OSError:  # pragma: no cover - replaced meanwhile
                target = ""
            raise HubError(
                f"{path}: a symbolic link{target} in a local hub, which holds none (a "
                "publish makes none), and a link can lead a load to files outside the hub; "
                "refusing to follow it. Fix: remove the link and publish the build again "
                "(or put the folder it leads to in its place, if you trust what it holds)")


def _not_a_hub(root: Path) -> str | None:
    """Why ``root`` is no hub to write to, if it holds anything but ``<org>/<name>/``
    folders (a project directory given as the hub, say), ignoring dot-entries."""
    try:
        orgs = [e for e in root.iterdir() if not e.name.startswith(".")]
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as err:
        return (f"cannot list the hub directory {root} ({err.strerror or err}); check its "
                "permissions, or name another hub directory")
    for org in orgs:
        try:
            stray = org if not org.is_dir() else next(
                (e for e in org.iterdir() if not e.name.startswith(".") and not e.is_dir()),
                None)
        except OSError as err:
            return (f"cannot list {org} in the hub {root} ({err.strerror or err}); check "
                    "its permissions")
        if stray is not None:
            return (f"{root} is not a hub directory: it holds {stray}{_project_part(root)}, "
                    "and a hub holds only <org>/<name>/ folders; name an empty directory "
                    "or an existing hub (hub= in Python, --hub on the command line, or "
                    "$KERNELFORGE_HUB), or leave it out for the default")
    return None


def _project_part(root: Path) -> str:
    """What ``root``, given as a hub, is where it is a kernel project or its ``build/``
    folder (a project passed as ``--hub`` rather than as the command's PATH), for
    :func:`_not_a_hub`'s error; empty otherwise."""
    try:
        if (root / "build.toml").is_file():
            what = "a kernel project"
        elif root.name == "build" and (root.parent / "build.toml").is_file():
            what = "a kernel project's build/ folder"
        else:
            return ""
    except OSError:
        return ""
    return (f" ({what}: the project is the PATH of 'kernelforge publish PATH --repo "
            "ORG/NAME', not the hub)")


def _in_tree(filename: str | bytes | int, root: Path) -> bool:
    """Whether an ``OSError``'s ``filename`` lies under ``root`` (as spelt, or once both
    are resolved, so a hub reached through a link still counts)."""
    if isinstance(filename, int):  # a file descriptor: the hub's own open files
        return True
    path = Path(os.fsdecode(filename))
    return (path.is_relative_to(root)
            or path.resolve().is_relative_to(root.resolve()))


def _failed_source(err: OSError, staged: Staged | None) -> Path | None:
    """The file of ``staged`` that ``err`` is about, if it is one of them."""
    if staged is None or err.filename is None or isinstance(err.filename, int):
        return None
    failed = Path(os.fsdecode(err.filename))
    return next((src for src, _rel in staged.files if src == failed), None)


def _remove_unpublished(made: list[Path]) -> None:
    """Take away the folders a failed first publish ``made`` (its repository's, then
    its organization's), under the hub-wide lock, so that a refused publish leaves no
    folder that would decide how the repository (or a new one of the organization) is
    spelt. Nothing else can be using them: every writer of a repository without refs
    holds that lock. Only what a failed publish leaves is removed (the lock file, an
    empty ``tmp/`` and ``objects/``); a folder that holds anything more (a revision
    whose ref could not be written, with its pending note, until the next publish
    removes both; a file another program put there) is kept, as a repository without
    refs, which loads and listings ignore. Best effort: the publish's own error is what
    the caller sees."""
    if not made:
        return
    repo = made[0]
    try:
        for name in ("tmp", "objects"):
            with contextlib.suppress(FileNotFoundError):
                (repo / name).rmdir()
        with contextlib.suppress(FileNotFoundError):
            (repo / ".lock").unlink()
        for folder in made:
            folder.rmdir()
            _durable.fsync_dir(folder.parent)
    except OSError as err:
        logger.info("kept %s after the failed publish (%s)", err.filename or repo,
                    err.strerror or err)


def _clean_leftovers(hub: LocalHub, repo_id: str, repo: Path) -> None:
    """Remove what crashed publishes left behind: ``tmp/``'s entries, the revisions
    they renamed into ``objects/`` that no ref reaches (:func:`_drop_unreferenced`; their
    notes stay where that cannot be told), and the temporaries of refs. Only called
    under the repo lock.

    Raises:
        HubError: ``tmp/`` is a symbolic link (whose target is not the hub's to empty).
    """
    tmp_root = repo / "tmp"
    refuse_link(tmp_root)
    if tmp_root.is_dir():
        kept = _drop_unreferenced(hub, repo_id, repo)
        for entry in tmp_root.iterdir():
            if entry in kept:
                continue
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




def _drop_unreferenced(hub: LocalHub, repo_id: str, repo: Path) -> list[Path]:
    """Move back into ``tmp/`` (whose entries the caller removes) each revision that a
    publish renamed into ``objects/`` and then died before a ref named it, as its
    pending note (:func:`_note_pending`) says: complete, but no commit of the
    repository, and its id was never given out, so nothing else would remove it and
    every such kill would leave a copy of the build behind. One that a ref reaches
    (the publish died after its ref was written, or a tag was set on it since) is kept.
    Called under the repo lock, where no publish is under way.

    Returns:
        The notes to keep: all of them where what the refs reach cannot be told
        (:func:`_reached`), so that a writer that can tell removes their revisions
        later; none otherwise.
    """
    notes = [note for note in sorted((repo / "tmp").glob(f"*{PENDING_SUFFIX}"))
             if not note.is_symlink() and note.is_file()]  # a link is no note
    if not notes:
        return []
    reached = _reached(hub, repo_id, repo)
    if reached is None:
        logger.info("not removing what interrupted publishes left in %s: what its refs "
                    "reach cannot be told", repo_id)
        return notes
    objects = repo / "objects"
    dropped = False
    for note in notes:
        try:
            with open(note, "rb") as f:
                commit = f.read(64).decode("ascii").strip()
        except (OSError, UnicodeDecodeError):
            continue
        revision = objects / commit
        if (_COMMIT_RE.match(commit) and commit not in reached and revision.is_dir()
                and not revision.is_symlink()):
            logger.info("removing revision %s of %s, which a publish that did not finish "
                        "wrote but no ref names", commit[:12], repo_id)
            os.rename(revision, repo / "tmp" / secrets.token_hex(8))
            dropped = True
    if dropped:
        _durable.fsync_dir(objects)
    return []


def _reached(hub: LocalHub, repo_id: str, repo: Path) -> set[str] | None:
    """The commits the repository's refs reach along their parent chains (none before
    its first ref), or ``None`` where that cannot be told: a ref that cannot be read
    (corrupt, a link) could name any commit, and a revision on the way whose record
    cannot be read (damaged, missing, or of a newer format) any parent. A revision that
    is not there at all ends its chain: nothing of it is left to remove, and no record
    names a parent."""
    if not (repo / "refs").is_dir():
        return set()
    objects = repo / "objects"
    reached: set[str] = set()
    try:
        heads = [*hub.branches(repo_id).values(), *hub.tags(repo_id).values()]
        for head in heads:
            commit: str | None = head
            while commit is not None and commit not in reached:
                reached.add(commit)
                if not os.path.lexists(objects / commit):
                    break
                commit = hub._record(repo_id, commit, repo).get("parent")
    except HubError:
        return None
    return reached
