"""Lock files: pin each kernel a project depends on to a commit and to every file's digest.

A project lists its kernels in ``pyproject.toml``, in kernelforge's table or in Hugging
Face's (both are read)::

    [tool.kernelforge.dependencies]
    "kernels-community/relu" = 1                    # version 1 (branch v1)
    "my-org/gemm" = ">=2"                           # the newest version >= 2
    "my-org/norm" = { revision = "v1.2" }           # a branch, tag or commit

    [tool.kernels.dependencies]
    "kernels-community/activation" = 1

``kernelforge lock`` writes ``kernelforge.lock``, JSON, which pins for each kernel the
commit and, for every build variant at that commit, the base64 sha256 of every file
(``metadata.json`` included)::

    {"format": "kernelforge-lock/1",
     "kernels": {"kernels-community/relu": {
         "requested": {"version": 1}, "hub": "hf", "repo": "kernels-community/relu",
         "branch": "v1", "commit": "<40 hex>",
         "variants": {"torch-cpu": {"files": {"__init__.py": "...", "metadata.json": "..."},
                                    "signer": "3f2a9c..."}},
         "depends": [
             {"requested": {"repo-id": "kernels-community/activation", "version": 1},
              "hub": "hf", "repo": "kernels-community/activation", "branch": "v1",
              "commit": "<40 hex>", "variants": {"torch-cpu": {"files": {...},
                                                               "signer": null}}}]}}}

``depends`` pins the kernels that the kernel's variants list in their ``metadata.json``
``kernel-depends``, and theirs, transitively: one flat list per locked kernel, one entry
per request (``requested`` is the ``kernel-depends`` entry itself: ``repo-id`` and
``version`` or ``revision``), each resolved when locking as a load would resolve it
and pinned like the kernel (commit, every variant's files). A locked load takes each
dependency from this list; a lock without ``depends`` (written before kernelforge pinned
dependencies) loads them as :func:`kernelforge.get_kernel` would choose them, with a
warning, as it does a dependency the list leaves out.

When the project uses ``[tool.kernels.dependencies]`` it also writes Hugging Face's
``kernels.lock`` (commit only; their reader rejects unknown fields, hence two files), so
their loader keeps working: one entry per kernel, then one per ``kernel-depends``
request the kernels pin (their loader resolves a dependency by its exact request in the
same flat list). It can only pin a commit of the repository it names, and their loader
follows no ``kernel-status.toml`` redirect: a redirected kernel is left out of it, with a
warning that names the destination to depend on instead (``kernelforge.lock`` pins the
redirect). Both formats are read: a ``kernels.lock`` pins commits, and the files
are checked against their metadata only; each of its entries also pins the same
``kernel-depends`` request of any kernel it lists. It records no hub, so with no
``hub=`` a load (or download) takes each kernel from the local hub when that holds the
repository at the locked commit, else from the Hugging Face Hub
(:func:`kernelforge.locate.hub_for_lock`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kernelforge.errors import LockError
from kernelforge.hub.base import is_commit
from kernelforge.lock._model import (
    _TABLES,
    FORMAT,
    HF_LOCK_FILE,
    LOCK_FILE,
    DependencyKey,
    LockedKernel,
    LockedVariant,
    LockFile,
    Requirement,
    _dependency_keys,
    _key_order,
    dependency_key,
    describe_dependency,
    warn_unpinned,
)
from kernelforge.lock._pyproject import read_requirements
from kernelforge.lock._read import (
    EMPTY_LOCK_WHY,
    check_lockfile,
    installed_lock,
    read_lock,
)
from kernelforge.lock._read import METADATA_LOCK_FILES as METADATA_LOCK_FILES
from kernelforge.lock._read import lock_file_path as lock_file_path
from kernelforge.lock._write import _cannot_write, _hf_entries, _write_lock_files

__all__ = [
    "EMPTY_LOCK_WHY",
    "HF_LOCK_FILE",
    "LOCK_FILE",
    "DependencyKey",
    "DownloadProgress",
    "LockFile",
    "LockedKernel",
    "LockedVariant",
    "Requirement",
    "check_lockfile",
    "dependency_key",
    "describe_dependency",
    "download_locked",
    "installed_lock",
    "lock_project",
    "read_lock",
    "read_requirements",
    "warn_unpinned",
]

logger = logging.getLogger(__name__)


# --- locking ---------------------------------------------------------------------------------


def _redirect_target(h: Any, repo_id: str) -> str:
    """The repository that ``kernel-status.toml`` redirects ``repo_id`` to, or ``repo_id``
    (the walk :func:`kernelforge.revisions.select` makes, without choosing a revision)."""
    from kernelforge import revisions
    from kernelforge.errors import HubError

    seen = [repo_id]
    while (target := revisions._redirect(h, seen[-1])) is not None:
        if target.destination in seen or len(seen) > revisions.MAX_REDIRECTS:
            raise HubError(f"redirects of {repo_id} loop or go too deep: "
                           f"{' -> '.join(seen + [target.destination])}")
        seen.append(target.destination)
    return seen[-1]


Needs = list[tuple[DependencyKey, str]]  # (request, who asks for it), for messages
_Memo = dict[DependencyKey, tuple["LockedKernel", Needs]]


def _warn_offline_refs(h: Any, req: Requirement, repo: str) -> None:
    """Log a WARNING when an offline Hugging Face Hub chose the commit to pin: its branches
    and tags come from the download cache, as last seen online (when, the refs file
    records), and may have moved since. Locking offline stays possible on purpose (a
    project can be locked again from what the cache holds); a full commit id asked for
    depends on no branch, and is not warned about."""
    import time

    from kernelforge.cache import DownloadCache

    if getattr(h, "kind", None) != "hf" or getattr(h, "offline", False) is not True:
        return
    if req.revision is not None and is_commit(req.revision.lower()):
        return
    cache = getattr(h, "cache", None)
    seen: list[float] = []
    if isinstance(cache, DownloadCache):
        times = (cache.refs_saved_at(r) for r in dict.fromkeys((req.repo_id, repo)))
        seen = [t for t in times if t is not None]
    when = (time.strftime("on %Y-%m-%d at %H:%M", time.localtime(min(seen))) if seen
            else "at a time its refs file does not record")
    why = getattr(h, "_why_offline", lambda: "offline mode is on")()
    moved = f" (redirected to {repo})" if repo != req.repo_id else ""
    logger.warning(
        "%s%s: the Hugging Face Hub is offline (%s), so the commit pinned is the one its "
        "branches and tags pointed to when the download cache last saw them online, %s; "
        "they may have moved since: run 'kernelforge lock' online to pin what they point "
        "to now", req.repo_id, moved, why, when)


def _pin_revision(req: Requirement, hub: Any, allow: Any) -> tuple[LockedKernel, Needs]:
    """Resolve one requirement and pin its commit and every variant's files.

    Returns:
        The :class:`LockedKernel` (no ``depends``) and the requests of its variants'
        ``kernel-depends``, each with the variant asking for it.
    """
    from kernelforge import policy, revisions
    from kernelforge.digest import b64_sha256, verify_variant
    from kernelforge.errors import HubError
    from kernelforge.hub._staging import parse_metadata
    from kernelforge.hub.base import signature_path, version_branches
    from kernelforge.loader import check_branch_version, records_no_version
    from kernelforge.locate import hub_choice_explained, hub_for

    h = hub_for(hub, req.repo_id)
    version = req.version
    # as for a load: an error names how the hub was chosen where the user did not name it
    # (the local hub lacks a mistyped name, which the Hugging Face Hub was asked for)
    from kernelforge.hub.hf import refs_listed_once

    # (each repository's refs are listed once for this requirement)
    with hub_choice_explained(hub, h, req.repo_id), refs_listed_once():
        if req.min_version is not None:
            # The versions on offer are the ones of the repository a load ends up in.
            target = _redirect_target(h, req.repo_id)
            fits = [v for v in version_branches(h.branches(target)) if v >= req.min_version]
            if not fits:
                moved = f" (redirected from {req.repo_id})" if target != req.repo_id else ""
                raise HubError(f"{target}{moved}: no version >= {req.min_version} in "
                               f"{h.describe()}")
            version = max(fits)
        # nothing is loaded here: the loads' "loading version N" lines would mislead
        # (but a redirect is said: the lock pins another repository than the one named)
        sel = revisions.select(h, req.repo_id, revision=req.revision, version=version,
                               announce=False, announce_redirects=True)
    _warn_offline_refs(h, req, sel.repo_id)
    variants: dict[str, LockedVariant] = {}
    needs: Needs = []
    for name in h.variants(sel.repo_id, sel.commit):
        where = f"{sel.repo_id}@{sel.commit[:12]}: build/{name}/metadata.json"
        data = h.read_file(sel.repo_id, sel.commit, f"build/{name}/metadata.json")
        if data is None:
            raise HubError(f"{where}: missing; every build variant needs its metadata.json")
        meta = parse_metadata(data, where)
        req_ = policy.TrustRequest(
            sel.repo_id, name, data,
            signature=h.read_file(sel.repo_id, sel.commit, signature_path(name)),
            sigstore_bundle=h.read_file(sel.repo_id, sel.commit,
                                        f"build/{name}/metadata.json.sigstore"),
            owned=bool(getattr(h, "owned", lambda *_: False)(sel.repo_id, sel.commit)),
            where=h.describe())
        decision = policy.evaluate(req_, allow=allow)
        policy.require(decision, req_)
        # A locked load reads no branch (the lock pins the commit), so a signed build
        # copied onto another version's branch is refused here, as a load refuses it.
        check_branch_version(sel.repo_id, name, sel.branch, meta, decision.signer,
                             req_.owned, locking=True)
        if decision.signer is not None and not meta.get("digest"):
            _check_unsigned_code(req_, allow, _NO_DIGESTS)
        if decision.signer is not None and records_no_version(sel.branch, meta):
            # a load from the branch refuses it: nothing shows it is not a replay
            _check_unsigned_code(req_, allow, _NO_VERSION.format(
                version=meta.get("version"), branch=sel.branch))
        needs += [(key, f"{sel.repo_id} (variant {name})")
                  for key in _dependency_keys(meta, where)]
        block = meta.get("digest")
        if block and block.get("algorithm") == "sha256":
            files = dict(block["files"])
        else:  # no sha256 digest to copy: fetch the variant and hash what is there
            fetched = h.fetch_variant(sel.repo_id, sel.commit, name)
            files = verify_variant(fetched.path, meta, metadata_sha256=b64_sha256(data),
                                   recorded=fetched.recorded)
        files["metadata.json"] = b64_sha256(data)
        variants[name] = LockedVariant(dict(sorted(files.items())), decision.signer)
    if not variants:
        raise HubError(f"{sel.repo_id} at {sel.commit[:12]} holds no build variants")
    return (LockedKernel(req.repo_id, sel.repo_id, sel.commit, h.kind, sel.branch,
                         req.to_json(), variants), needs)


#: Why a signed build whose metadata records no file digests is not pinned.
_NO_DIGESTS = ("its signed metadata.json records no file digests, so the signature does "
               "not cover the code, and a lock would pin the files the hub holds now, "
               "whoever put them there; refusing to lock it (ask the publisher to rebuild "
               "with kernelforge, which writes digests, and republish")
#: Why a signed build that records no version is not pinned from a version branch.
_NO_VERSION = ("its signed metadata.json records no version (metadata.json 'version': "
               "{version!r}), so nothing shows it was published for branch {branch} rather "
               "than copied there from another version, and a load from that branch "
               "refuses it; refusing to lock it (ask the publisher to rebuild with "
               "kernelforge, which records the version, and republish")


def _check_unsigned_code(req: Any, allow: Any, problem: str) -> None:
    """Refuse to pin a build its signature vouches for only in part (``problem`` says
    how: its metadata records no file digests, or, on a version branch, no version)
    unless the repository is allowed without the signature: the lock would pin what the
    hub holds now, which whoever can write the repository chose, and a load of the pin
    trusts it (a load from the branch refuses such a build)."""
    from kernelforge import policy
    from kernelforge.errors import TrustError

    unsigned = dataclasses.replace(req, signature=None, sigstore_bundle=None)
    if policy.evaluate(unsigned, allow=allow).allowed:
        return
    raise TrustError(
        f"{req.repo_id} (variant {req.variant}): {problem}; or, to pin it as it is, allow "
        f"it: kernelforge lock --allow {req.repo_id}, or "
        f"trust_remote_code=[{req.repo_id!r}] in Python)"
    )


def _pin_dependency(key: DependencyKey, parent: str, hub: Any,
                    allow: Any) -> tuple[LockedKernel, Needs]:
    """:func:`_pin_revision` for a ``kernel-depends`` request; errors say who asked."""
    from kernelforge.errors import HubError, TrustError

    try:
        return _pin_revision(Requirement(key[0], version=key[1], revision=key[2]), hub, allow)
    except (HubError, TrustError) as err:
        raise type(err)(f"{describe_dependency(key)}, a kernel-depends entry of {parent}: "
                        f"{err}") from err


def _pin_depends(needs: Needs, hub: Any, allow: Any,
                 memo: _Memo) -> dict[DependencyKey, LockedKernel]:
    """Pin every kernel ``needs`` reaches, transitively; each request is resolved once per
    ``memo`` (a cycle or a request met twice is not resolved again)."""
    out: dict[DependencyKey, LockedKernel] = {}
    todo = list(needs)
    while todo:
        key, parent = todo.pop(0)
        if key in out:
            continue
        if key not in memo:
            memo[key] = _pin_dependency(key, parent, hub, allow)
        out[key], more = memo[key]
        todo += more
    return dict(sorted(out.items(), key=lambda kv: _key_order(kv[0])))


def _lock_one(req: Requirement, hub: Any, allow: Any, memo: _Memo) -> LockedKernel:
    """:func:`lock_kernel`, sharing ``memo`` with the other kernels of a project: an exact
    requirement (a version or a revision) is the request a ``kernel-depends`` entry makes
    for the same kernel, so either one reuses the other's resolution."""
    key: DependencyKey = (req.repo_id, req.version, req.revision)
    exact = req.min_version is None
    if exact and key in memo:
        locked, needs = memo[key]
    else:
        locked, needs = _pin_revision(req, hub, allow)
        if exact:
            memo[key] = (locked, needs)
    return dataclasses.replace(locked, depends=_pin_depends(needs, hub, allow, memo))


def lock_kernel(req: Requirement, *, hub: Any = None, allow: Any = False) -> LockedKernel:
    """Resolve one requirement and pin its commit and every variant's files, and the same
    for the ``kernel-depends`` of every variant, transitively.

    Args:
        req: the requirement.
        hub: the ``hub=`` argument (see :func:`kernelforge.locate.hub_for`); it is used for
            the dependencies too, as a load uses it.
        allow: ``trust_remote_code``: locking enforces the trust policy for every
            variant, dependencies included, so that what the lock pins was trusted when
            it was written.

    Returns:
        The :class:`LockedKernel`, its dependencies in ``depends``.

    Raises:
        HubError, TrustError, IntegrityError: resolving, trusting or hashing failed (for a
            dependency, the message names it and the variant that lists it); HubError
            also for a malformed ``kernel-depends``.
    """
    from kernelforge.hub.hf import used_for

    with used_for("lock"):
        return _lock_one(req, hub, allow, {})


@dataclass(frozen=True)
class LockResult:
    """What :func:`lock_project` wrote.

    Attributes:
        path: the ``kernelforge.lock`` written.
        hf_path: the ``kernels.lock`` written too, or ``None``.
        kernels: the locked kernels.
    """

    path: Path
    hf_path: Path | None
    kernels: list[LockedKernel]


def lock_project(
    project: str | os.PathLike[str], *, hub: Any = None, allow: Any = False
) -> LockResult:
    """Lock every kernel a project depends on.

    Args:
        project: the project directory (holding ``pyproject.toml``), or its
            ``pyproject.toml``.
        hub: as :func:`~kernelforge.get_kernel`'s ``hub=`` (a hub, ``"hf"`` or a local
            hub directory); ``None``: ``$KERNELFORGE_HUB``, else per repository the
            local hub when it holds it, else the Hugging Face Hub.
        allow: as :func:`~kernelforge.get_kernel`'s ``trust_remote_code``, for the
            kernels that are neither published by you nor signed by a trusted key:
            ``True`` for any, or a list of repository ids.

    Returns:
        The :class:`LockResult`. Each kernel is locked with the kernels its variants
        list in ``kernel-depends``, transitively (:func:`lock_kernel`); a dependency
        several kernels share is resolved once. Files are replaced atomically and
        together (both are written before either is renamed; a failed rename puts back
        what was renamed before it); nothing is written when any kernel fails to lock.
        A lock file that exists keeps its permission bits, and one that is a symbolic
        link is written through (the file it leads to is replaced; the link stays).
        Two runs on one project take turns under a ``flock`` of the folder that holds
        ``kernelforge.lock`` (a WARNING says that one waits): each reads
        ``pyproject.toml`` once it holds the lock, so the last to write locks the
        project as it is then, never an older reading of it.

    Raises:
        LockError: the project's dependencies are malformed, a lock file cannot be
            written (naming it and the reason), or another run held the project's
            lock for over :data:`WRITER_LOCK_TIMEOUT_S` seconds.
        HubError, TrustError, IntegrityError: as :func:`lock_kernel`.
        TypeError: an ``allow`` that is neither a bool nor a list of repository ids, or
            a ``hub`` of another type.
        ValueError: an ``allow`` entry that is not a repository id (a pattern such as
            ``org/*`` belongs in the trust store).
    """
    from kernelforge.policy import allow_key

    # refused before any lock is taken, also where no kernel needs it (all of them
    # signed or yours), as a load refuses it
    allow_key(allow)
    root = Path(project)
    root = root.parent if root.name == "pyproject.toml" else root
    if not (root / "pyproject.toml").is_file():
        read_requirements(root)  # refused, naming what is wrong, before any lock is taken
    with _writer_lock(root):
        return _lock_project(root, hub, allow)


def _lock_project(root: Path, hub: Any, allow: Any) -> LockResult:
    """:func:`lock_project` of a project directory, under its writer lock: the project
    is read here, after any other lock of it has written its files."""
    from kernelforge.hub.hf import used_for

    _remove_temp_leftovers(root)
    reqs = read_requirements(root)
    memo: _Memo = {}  # each dependency resolved once, however many kernels need it
    with used_for("lock"):  # offline, its errors do not send it to a lock file
        kernels = [_lock_one(r, hub, allow, memo) for r in reqs]
    doc = {"format": FORMAT, "kernels": {k.repo_id: k.to_json() for k in kernels}}
    writes: list[tuple[Path, Any]] = [(root / LOCK_FILE, doc)]
    hf_path = None
    hf_reqs = {r.repo_id for r in reqs if r.table == _TABLES[1]}
    if hf_reqs:
        hf_path = root / HF_LOCK_FILE
        writes.append((hf_path, _hf_entries([k for k in kernels if k.repo_id in hf_reqs])))
    _write_lock_files(writes)
    if hf_path is None and (root / HF_LOCK_FILE).is_file():
        _warn_stale_hf_lock(root / HF_LOCK_FILE)
    return LockResult(root / LOCK_FILE, hf_path, kernels)


def _remove_temp_leftovers(root: Path) -> None:
    """Remove the temporaries beside the lock files (or the files their links lead to)
    that a run killed before its renames left: under the writer lock no other run is
    writing them."""
    from kernelforge._durable import remove_temp_leftovers

    for name in (LOCK_FILE, HF_LOCK_FILE):
        remove_temp_leftovers(Path(os.path.realpath(root / name)), "'kernelforge lock'")


#: How long :func:`lock_project` waits for another lock of the same project to finish.
WRITER_LOCK_TIMEOUT_S = 600.0


@contextlib.contextmanager
def _writer_lock(root: Path) -> Iterator[None]:
    """Hold the project's writer lock, so that two :func:`lock_project` runs of one
    project take turns; a run that has to wait says so. The lock is an exclusive
    ``flock`` on the folder that holds the file ``kernelforge.lock`` leads to (the file
    itself, or a link's target): it leaves no file behind in the project, and the
    kernel lets it go when the process ends, however it ends. Where ``flock`` does not
    exist (Windows) runs are not kept apart.

    Raises:
        LockError: that folder cannot be opened (naming it, as for the lock files), or
            another run held it for over :data:`WRITER_LOCK_TIMEOUT_S`.
    """
    try:
        import fcntl
    except ImportError:  # pragma: no cover - no flock here
        yield
        return
    import time

    path = root / LOCK_FILE
    target = Path(os.path.realpath(path))
    try:
        fd = os.open(target.parent, os.O_RDONLY)
    except OSError as err:
        raise _cannot_write(path, target, err, "nothing was changed") from err
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            logger.warning("%s: another 'kernelforge lock' of this project is running (it "
                           "holds a lock on %s); waiting for it to finish", root,
                           target.parent)
            deadline = time.monotonic() + WRITER_LOCK_TIMEOUT_S
            while True:
                time.sleep(0.05)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() > deadline:
                        raise LockError(
                            f"{root}: another 'kernelforge lock' of this project has held "
                            f"a lock on {target.parent} for over "
                            f"{WRITER_LOCK_TIMEOUT_S:.0f}s; wait for it to finish, then run "
                            "'kernelforge lock' again") from None
        yield
    finally:
        os.close(fd)  # lets the lock go


def _warn_stale_hf_lock(path: Path) -> None:
    """Say that a ``kernels.lock`` is left as it was: it is written for the kernels of
    ``[tool.kernels.dependencies]``, and the project lists none there any more."""
    try:
        pinned = ", ".join(sorted(read_lock(path).kernels)) or "nothing"
    except LockError:
        pinned = "what it pinned before"
    logger.warning(
        "%s: left as it was, pinning %s: it is written for the kernels of [%s], and the "
        "project lists none there now, so it no longer follows the project (%s does); "
        "a load given this file (Hugging Face's kernels, or lockfile=%r) takes those old "
        "pins: delete it, or list the kernels in [%s] again and run 'kernelforge lock'",
        path, pinned, _TABLES[1], LOCK_FILE, HF_LOCK_FILE, _TABLES[1])


# --- downloading ----------------------------------------------------------------------------


#: The last line of an error about files a hub serves for a locked commit unlike the lock.
UNLIKE_LOCK_FIX = ("The hub serves other files for the locked commit than when it was locked "
                   "(or the lock file was edited); fetching them again does not help. Check "
                   "what changed, and if you trust the files served now, run 'kernelforge "
                   "lock' again")


def raise_if_unlike_lock(err: Any, path: Path, recorded: Mapping[str, str] | None,
                         pins: Mapping[str, str] | None, lockfile: str, where: str,
                         doing: str = "load") -> None:
    """Raise ``err`` (an :class:`~kernelforge.errors.IntegrityError` about a locked
    variant's copy at ``path``) restated where that copy is as the hub served it (it
    matches ``recorded``) and differs from the lock file's pins: the hub serves other
    files for the locked commit than when it was locked, which fetching again cannot
    mend, so the message names the lock file rather than leaving "recorded digests" to
    be read as a damaged download. Return where that is not so (the copy changed since
    it was fetched, or nothing pins its files): the caller raises ``err`` itself.

    Args:
        err: the error.
        path, recorded: the copy and the digests recorded when it was fetched.
        pins: the lock's digests of the variant.
        lockfile: the lock file, for the message.
        where: ``org/name (variant v) at commit c`` from ``hub``, for the message.
        doing: ``"load"`` or ``"download"``.
    """
    from kernelforge.cache import is_intact
    from kernelforge.digest import verify_variant
    from kernelforge.errors import IntegrityError

    if pins is None or not is_intact(path, dict(recorded or {})):
        return
    try:
        verify_variant(path, {}, locked=pins)
    except IntegrityError:
        raise IntegrityError(
            err.where, err.problems,
            what=f"refusing to {doing} {where}: the files it serves differ from those "
                 f"{lockfile} pins:",
            fix=UNLIKE_LOCK_FIX) from err


def _fetch_checked(h: Any, locked: LockedKernel, name: str, lockfile: str) -> Path:
    """Fetch one locked variant and verify it against the lock; re-fetch a bad copy once
    (offline, a cached copy changed since it was fetched is refused with the fix)."""
    from kernelforge.cache import DownloadCache, is_intact
    from kernelforge.digest import verify_variant
    from kernelforge.errors import IntegrityError
    from kernelforge.hub._staging import read_metadata

    pins = locked.variants[name].files if locked.variants is not None else None

    def check(path: Path, recorded: dict[str, str] | None) -> Path:
        verify_variant(path, read_metadata(path),
                       metadata_sha256=pins.get("metadata.json") if pins else None,
                       recorded=recorded, locked=pins)
        return path

    where = (f"{locked.repo} (variant {name}) at commit {locked.commit[:12]} from the "
             f"{h.describe()}")
    fetched = h.fetch_variant(locked.repo, locked.commit, name)
    try:
        return check(fetched.path, fetched.recorded)
    except IntegrityError as err:
        if fetched.fetched or h.kind == "local" or is_intact(fetched.path, fetched.recorded):
            raise_if_unlike_lock(err, fetched.path, fetched.recorded, pins, lockfile, where,
                                 "download")
            raise
        if getattr(h, "offline", True):  # the cached copy changed since: say the fix
            cache = getattr(h, "cache", None)
            if isinstance(cache, DownloadCache):
                raise cache.damaged_copy(err, locked.repo, locked.commit) from err
            raise
        logger.warning("%s: the cached copy of %s failed verification; fetching it again",
                       locked.repo_id, name)
    fetched = h.fetch_variant(locked.repo, locked.commit, name, refresh=True)
    try:
        return check(fetched.path, fetched.recorded)
    except IntegrityError as err:
        raise_if_unlike_lock(err, fetched.path, fetched.recorded, pins, lockfile, where,
                             "download")
        raise


def _cache_load_files(h: Any, repo: str, commit: str, name: str) -> None:
    """Read the files an offline load reads besides the variant's own, so that a remote
    hub keeps them in its download cache: the variant's ``metadata.json`` and its
    signature and sigstore bundle (or the record that they are absent)."""
    from kernelforge.hub.base import signature_path

    for path in (f"build/{name}/metadata.json", signature_path(name),
                 f"build/{name}/metadata.json.sigstore"):
        h.read_file(repo, commit, path)


def _fetch_dependency(hub: Any, key: DependencyKey, backend: str | None,
                      seen: set[tuple[Any, ...]]) -> list[tuple[str, str, Path]]:
    """Fetch a ``kernel-depends`` request the lock does not pin, and its dependencies, as a
    load would choose them (verified against their own metadata), for offline loads."""
    from kernelforge.locate import locate_hub

    plan = locate_hub(key[0], revision=key[2], version=key[1], backend=backend, hub=hub,
                      check_arch=True, allow=True)  # trust is the load's decision
    info = plan.info
    if plan.hub is None or info.commit is None:  # a LOCAL_KERNELS override: on disk
        return []
    fetched = plan.hub.fetch_variant(info.repo, info.commit, info.variant)
    _cache_load_files(plan.hub, info.repo, info.commit, info.variant)
    return [(key[0], info.variant, fetched.path),  # named as requested, as pinned ones are
            *_fetch_dependencies(hub, fetched.path, backend, seen)]


def _fetch_dependencies(hub: Any, variant_dir: Path, backend: str | None,
                        seen: set[tuple[Any, ...]]) -> list[tuple[str, str, Path]]:
    """:func:`_fetch_dependency` for each ``kernel-depends`` entry of a fetched variant
    (below a dependency the lock does not pin, a load pins none either)."""
    from kernelforge.hub._staging import read_metadata

    out: list[tuple[str, str, Path]] = []
    for key in _dependency_keys(read_metadata(variant_dir), None):
        if key not in seen:
            seen.add(key)
            out += _fetch_dependency(hub, key, backend, seen)
    return out


def _request_of(locked: LockedKernel) -> DependencyKey | None:
    """The exact request a ``kernels.lock`` entry pins, or ``None`` (``">=2"``)."""
    try:
        return dependency_key({"repo-id": locked.repo_id, **(locked.requested or {})})
    except ValueError:
        return None


@dataclass
class DownloadProgress:
    """How far a :func:`download_locked` call got, kept up to date as it goes: what a
    caller reads when it fails partway.

    Attributes:
        fetched: ``(repo_id, variant, path)`` of each variant fetched and verified so far
            (those of a ``kernel-depends`` being fetched when it failed excepted).
        left: what was not fetched yet, in order: ``org/name``, ``org/name (v1, v2)``
            (those variants of it), or ``the kernel-depends of org/name variant``.
    """

    fetched: list[tuple[str, str, Path]] = dataclasses.field(default_factory=list)
    left: list[str] = dataclasses.field(default_factory=list)


@dataclass
class _Download:
    """One :func:`download_locked` call: what it reads and what it fetched already."""

    lock: LockFile
    hub: Any
    backend: str | None
    all_variants: bool
    seen: set[tuple[Any, ...]]  # requests and (repo, commit): each fetched once

    def variants(self, h: Any, locked: LockedKernel) -> list[str]:
        """The variants of a locked kernel to fetch: all of them, or the one a load here
        chooses."""
        from kernelforge.locate import locate_locked, lock_hub_explained

        # h is the hub hub_for_lock gave for self.hub: its errors say why where it chose
        with lock_hub_explained(self.hub, locked, h):
            if self.all_variants:
                return (sorted(locked.variants) if locked.variants is not None
                        else h.variants(locked.repo, locked.commit))
            plan = locate_locked(locked, lockfile=str(self.lock.path), backend=self.backend,
                                 hub=h, check_arch=True, allow=True, cache_only=False)
            return [plan.info.variant]

    def listed_by(self, locked: LockedKernel, key: DependencyKey) -> list[str]:
        """The variants of the lock's other entries (``org/name (variant v)``, any
        system's) whose ``kernel-depends`` make the request ``key`` that ``locked`` pins
        (repository ids ignore case)."""
        from kernelforge.errors import HubError
        from kernelforge.hub._staging import parse_metadata
        from kernelforge.locate import hub_for_lock

        want = (key[0].lower(), key[1], key[2])
        entries = {(k.repo.lower(), k.commit): k
                   for k in [*self.lock.kernels.values(), *(locked.depends or {}).values()]}
        entries.pop((locked.repo.lower(), locked.commit), None)
        out = []
        for _where, other in sorted(entries.items()):
            h = hub_for_lock(self.hub, other)
            names = (sorted(other.variants) if other.variants is not None
                     else h.variants(other.repo, other.commit))
            for name in names:
                where = f"{other.repo}@{other.commit[:12]}: build/{name}/metadata.json"
                data = h.read_file(other.repo, other.commit, f"build/{name}/metadata.json")
                try:
                    meta = parse_metadata(data, where) if data is not None else {}
                except HubError:
                    continue  # a load of that variant refuses it, naming it
                if any((k[0].lower(), k[1], k[2]) == want
                       for k in _dependency_keys(meta, None)):
                    out.append(f"{other.repo_id} (variant {name})")
        return out

    def dependencies(self, top: LockedKernel, variant_dir: Path,
                     parent: str | None = None) -> list[tuple[str, str, Path]]:
        """Fetch the ``kernel-depends`` of a fetched variant (of ``parent``, by default
        ``top``, a kernel the lock lists), and theirs: as the lock pins them in ``top``'s
        ``depends`` (verified against the lock), else as a load would choose them (with
        a warning)."""
        from kernelforge.hub._staging import read_metadata
        from kernelforge.locate import hub_for_lock

        out: list[tuple[str, str, Path]] = []
        for key in _dependency_keys(read_metadata(variant_dir), None):
            dep = top.depends.get(key) if top.depends is not None else None
            if dep is None:
                if key not in self.seen:
                    self.seen.add(key)
                    warn_unpinned(logger, self.lock, top, key, parent or top.repo_id)
                    out += _fetch_dependency(self.hub, key, self.backend, self.seen)
                continue
            if ("lock", dep.repo, dep.commit) in self.seen:
                continue
            self.seen.add(("lock", dep.repo, dep.commit))
            h = hub_for_lock(self.hub, dep)
            for name in self.variants(h, dep):
                _cache_load_files(h, dep.repo, dep.commit, name)  # first, as below
                path = _fetch_checked(h, dep, name, str(self.lock.path))
                out.append((dep.repo_id, name, path))
                out += self.dependencies(top, path, dep.repo_id)
        return out


def _trust_problem(h: Any, locked: LockedKernel, name: str, path: Path) -> str | None:
    """Why a fetched variant of a lock without digests would be refused at load, if it
    would (a lock with digests pins the files, which is trust enough)."""
    from kernelforge.errors import TrustError
    from kernelforge.hub._staging import read_metadata
    from kernelforge.locate import trust_request

    if locked.variants is not None:
        return None
    data = (path / "metadata.json").read_bytes()
    try:
        _req, decision = trust_request(h, locked.repo, locked.commit, name, data, False, None)
    except TrustError as err:
        return str(err)
    if not decision.allowed:
        return str(decision)
    if decision.signer is not None and not read_metadata(path).get("digest"):
        return ("its signed metadata.json records no file digests, so the signature does "
                "not cover the code")
    return None


def download_locked(
    lockfile: str | os.PathLike[str],
    *,
    hub: Any = None,
    all_variants: bool = False,
    backend: str | None = None,
    progress: DownloadProgress | None = None,
) -> list[tuple[str, str, Path]]:
    """Fetch every locked kernel into the download cache, for offline loads.

    Args:
        lockfile: the lock file, or a project directory holding one (or its
            ``pyproject.toml``).
        hub: the ``hub=`` argument; ``None`` uses the kind each lock entry records (a
            ``kernels.lock`` records none: the local hub when it holds the repository at
            the locked commit, else the Hugging Face Hub; see
            :func:`kernelforge.locate.hub_for_lock`).
        all_variants: every locked variant, not only the one this system loads.
        backend: choose for this backend (``"cpu"`` or torch's own) instead of the
            system's. With ``all_variants`` it chooses only the variants of the
            dependencies the lock does not pin (every pinned variant is fetched).
        progress: a :class:`DownloadProgress` to keep up to date, which says after an
            error what was fetched (it stays in the download cache) and what was not.

    Returns:
        ``(repo_id, variant, path)`` for each variant fetched (or already cached), all
        verified against the lock. A variant a load would refuse (a lock without
        digests, for a kernel neither signed by a trusted key nor allowed) is fetched
        all the same, with a WARNING log line saying how to allow it. Each one is
        followed by the kernels its ``kernel-depends`` name (and theirs): the commits
        the lock pins for them, verified against the lock (every variant of them with
        ``all_variants``, else the one a load here chooses), each fetched once per call.
        A dependency the lock does not pin (a lock written before kernelforge pinned
        dependencies, or a ``kernels.lock``) is fetched as a load would choose it,
        verified against its own metadata, with a WARNING log line. A ``kernels.lock``
        lists the kernels and their dependencies alike: an entry that no variant here
        fits but that other entries' variants list in ``kernel-depends`` is one a load
        here does not use, and is skipped with an INFO log line.

    Raises:
        LockError: the lock file is missing or malformed.
        ValueError: ``lockfile`` is an empty or blank string (it would mean the current
            directory; pass ``"."`` for that).
        HubError: a locked kernel cannot be fetched (the hub or the network is down,
            the commit is gone, the download cache cannot be written).
        IntegrityError: a fetched file differs from what the lock pins (or, for what
            it pins no files of, from the variant's own metadata).
        VariantNotFoundError: a kernel the lock lists has no variant that fits this
            system.
        VariantError: ``backend`` cannot be chosen in this process (with
            ``all_variants`` too).
        TypeError: a ``hub`` of another type.
    """
    from kernelforge import variants
    from kernelforge.hub.hf import used_for

    # as a load refuses it, before anything is fetched (with all_variants it still
    # chooses the variants of the dependencies a lock leaves unpinned)
    check_lockfile(lockfile)
    variants.check_backend(backend)
    lock = read_lock(lockfile)
    with used_for("download"):  # its network errors do not send it to the download cache
        return _download_locked(lock, hub, all_variants, backend,
                                progress if progress is not None else DownloadProgress())


def _download_locked(lock: LockFile, hub: Any, all_variants: bool, backend: str | None,
                     progress: DownloadProgress) -> list[tuple[str, str, Path]]:
    """:func:`download_locked` of a lock file read."""
    from kernelforge.errors import VariantNotFoundError
    from kernelforge.locate import hub_for_lock
    from kernelforge.policy import key_fix

    out = progress.fetched
    run = _Download(lock, hub, backend, all_variants, set())  # each dependency fetched once
    unfit: list[tuple[LockedKernel, VariantNotFoundError]] = []
    kernels = sorted(lock.kernels.items())
    for i, (repo_id, locked) in enumerate(kernels):
        later = [r for r, _ in kernels[i + 1:]]
        progress.left = [repo_id, *later]
        h = hub_for_lock(hub, locked)
        marker = ("lock", locked.repo, locked.commit)
        new = marker not in run.seen
        run.seen.add(marker)  # a dependency cycle back to it
        try:
            names = run.variants(h, locked)
        except VariantNotFoundError as err:
            if lock.kind != "kernels":
                raise
            # A kernels.lock lists the dependencies of its kernels beside them: decided
            # below, once the kernels that fit are fetched with what they need here.
            if new:
                run.seen.discard(marker)
            unfit.append((locked, err))
            continue
        for j, name in enumerate(names):
            progress.left = [f"{repo_id} ({', '.join(names[j:])})", *later]
            # metadata.json first, as a load reads it: the fetch takes that copy (with
            # all_variants, read after the fetch, it was downloaded a second time)
            _cache_load_files(h, locked.repo, locked.commit, name)
            path = _fetch_checked(h, locked, name, str(lock.path))
            problem = _trust_problem(h, locked, name, path)
            if problem is not None:
                logger.warning(
                    "%s (variant %s): %s pins only its commit, and a load will refuse it: "
                    "%s. To load it: %s, allow the repository ('kernelforge trust allow "
                    "%s'), or pass trust_remote_code=[%r] to load_kernel / "
                    "get_locked_kernel", repo_id, name, lock.path.name, problem,
                    key_fix(problem, "ORG/*"), locked.repo, locked.repo)
            out.append((repo_id, name, path))
            rest = [f"{repo_id} ({', '.join(names[j + 1:])})"] if names[j + 1:] else []
            progress.left = [f"the kernel-depends of {repo_id} {name}", *rest, *later]
            out += run.dependencies(locked, path)
    progress.left = []
    for locked, refused in unfit:
        key = _request_of(locked)
        listed = run.listed_by(locked, key) if key is not None else []
        if key is None or not listed:  # a kernel of the project as far as the file tells
            progress.left = [locked.repo_id]
            raise refused
        logger.info(
            "%s: %s is not fetched: no build variant of it fits this system, and it is only "
            "a kernel-depends entry of %s, which a load here does not use",
            lock.path, describe_dependency(key), ", ".join(listed))
    return out
