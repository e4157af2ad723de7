"""Locking: resolve each kernel a project depends on as a load would, enforce the trust
policy, and pin its commit and every variant's files, and the same for the kernels its
variants list in ``kernel-depends``, transitively (:func:`lock_kernel`); then write the
project's lock files under its writer lock (:func:`lock_project`)."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kernelforge._paths import HERE, refuse_empty_path
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
    Requirement,
    _dependency_keys,
    _key_order,
    describe_dependency,
)
from kernelforge.lock._pyproject import read_requirements
from kernelforge.lock._read import read_lock
from kernelforge.lock._write import _cannot_write, _hf_entries, _write_lock_files

# the package's name, as before it was split into modules: what users' logging filters on
logger = logging.getLogger("kernelforge.lock")


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
        "kernelforge: %s%s: the Hugging Face Hub is offline (%s), so the commit pinned is the one "
        "its branches and tags pointed to when the download cache last saw them online, %s; they "
        "may have moved since: run 'kernelforge lock' online to pin what they point to "
        "now", req.repo_id, moved, why, when)


def _pin_revision(req: Requirement, hub: Any, allow: Any) -> tuple[LockedKernel, Needs]:
    """Resolve one requirement and pin its commit and every variant's files.

    Returns:
        The :class:`LockedKernel` (no ``depends``) and the requests of its variants'
        ``kernel-depends``, each with the variant asking for it.
    """
    from kernelforge import policy, revisions
    from kernelforge.digest import b64_sha256, verify_variant
    from kernelforge.errors import HubError
    from kernelforge.hub.base import version_branches
    from kernelforge.loader import check_branch_version, records_no_version
    from kernelforge.locate import hub_choice_explained, hub_for, judge_variant

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
            fits = {v: commit for v, commit in version_branches(h.branches(target)).items()
                    if v >= req.min_version}
            if not fits:
                moved = f" (redirected from {req.repo_id})" if target != req.repo_id else ""
                raise HubError(f"{target}{moved}: no version >= {req.min_version} in "
                               f"{h.describe()}")
            # the newest that holds a build, as a load that pins no version takes it
            version, passed = revisions.newest_built(h, target, fits,
                                                     at_least=req.min_version)
            if passed:
                logger.warning("kernelforge: %s: version %d is taken, %s", target, version, passed)
        # nothing is loaded here: the loads' "loading version N" lines would mislead
        # (but a redirect is said: the lock pins another repository than the one named)
        sel = revisions.select(h, req.repo_id, revision=req.revision, version=version,
                               announce=False, announce_redirects=True)
    _warn_offline_refs(h, req, sel.repo_id)
    variants: dict[str, LockedVariant] = {}
    needs: Needs = []
    names = h.variants(sel.repo_id, sel.commit)
    if not names:
        # a version branch whose publish has not committed (yet) says so, as for a load
        empty = revisions.empty_branch_error(h, sel.repo_id, sel.branch, sel.commit)
        if empty is not None:
            raise empty
    for name in names:
        where = f"{sel.repo_id}@{sel.commit[:12]}: build/{name}/metadata.json"
        # judged as a load judges it: copies the download cache kept that fail a check
        # (damaged on their way) are fetched again once, and offline refused with the fix
        data, meta, req_, decision = judge_variant(h, sel.repo_id, sel.commit, name, allow)
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
    """:func:`_pin_revision` for a ``kernel-depends`` request; errors say who asked (and
    keep their type, a signature's refusal the variant it names)."""
    from kernelforge.errors import (
        HubError,
        SignatureMismatchError,
        TrustError,
        UnreadableSignatureError,
        VariantNotFoundError,
    )

    try:
        return _pin_revision(Requirement(key[0], version=key[1], revision=key[2]), hub, allow)
    except (SignatureMismatchError, UnreadableSignatureError) as err:
        raise type(err)(f"{_asked_by(key, parent)}: {err}", err.variant,
                        problem=err.problem) from err
    except VariantNotFoundError as err:  # a version branch without a build: pinning chose none
        raise VariantNotFoundError(f"{_asked_by(key, parent)}: {err.what}", err.trace,
                                   fix=err.fix, problem=err.problem) from err
    except (HubError, TrustError) as err:
        raise type(err)(f"{_asked_by(key, parent)}: {err}") from err


def _asked_by(key: DependencyKey, parent: str) -> str:
    """The dependency ``key`` and the variant whose ``kernel-depends`` asks for it."""
    return f"{describe_dependency(key)}, a kernel-depends entry of {parent}"


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


#: What to pass instead of an empty project path to :func:`lock_project`.
LOCK_PROJECT_GIVE = f"the project directory holding pyproject.toml ({HERE}), or its pyproject.toml"


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
            ``org/*`` belongs in the trust store); ``project`` is an empty or blank
            string (it would mean the current directory).
    """
    from kernelforge.policy import allow_key

    refuse_empty_path(project, "project", "a project", LOCK_PROJECT_GIVE)
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
            logger.warning("kernelforge: %s: another 'kernelforge lock' of this project is running "
                           "(it holds a lock on %s); waiting for it to finish", root,
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
        "kernelforge: %s: left as it was, pinning %s: it is written for the kernels of [%s], and "
        "the project lists none there now, so it no longer follows the project (%s does); a load "
        "given this file (Hugging Face's kernels, or lockfile=%r) takes those old pins: delete it, "
        "or list the kernels in [%s] again and run 'kernelforge lock'",
        path, pinned, _TABLES[1], LOCK_FILE, HF_LOCK_FILE, _TABLES[1])
