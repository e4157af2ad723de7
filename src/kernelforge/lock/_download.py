"""Downloading: fetch what a lock file pins into the download cache, each variant verified
against the lock, with the kernels its ``kernel-depends`` name, for offline loads
(:func:`download_locked`); and the error that says a hub now serves other files for a
locked commit than the lock pins (:func:`raise_if_unlike_lock`), which loads raise too."""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kernelforge.lock._model import (
    DependencyKey,
    LockedKernel,
    LockFile,
    _dependency_keys,
    dependency_key,
    describe_dependency,
    warn_unpinned,
)
from kernelforge.lock._read import check_lockfile, read_lock

# the package's name, as before it was split into modules: what users' logging filters on
logger = logging.getLogger("kernelforge.lock")


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


def _fetch_checked(h: Any, locked: LockedKernel, name: str, lockfile: str,
                   metadata_sha256: str | None = None) -> Path:
    """Fetch one locked variant and verify it against the lock. A cached copy that fails
    is fetched again once, as a load fetches it: one changed in the cache since it was
    fetched, or one kept as it was served that does not match the ``metadata.json`` the
    lock pins (for a lock without digests, ``metadata_sha256``: the one the trust policy
    judged, if given; or its own digests): damaged on its way. Offline, such a copy is
    refused with the fix."""
    from kernelforge.cache import DownloadCache, as_published, is_intact
    from kernelforge.digest import verify_variant
    from kernelforge.errors import IntegrityError
    from kernelforge.hub._staging import read_metadata

    pins = locked.variants[name].files if locked.variants is not None else None
    pinned_metadata = pins.get("metadata.json") if pins else metadata_sha256

    def check(path: Path, recorded: dict[str, str] | None) -> Path:
        verify_variant(path, read_metadata(path), metadata_sha256=pinned_metadata,
                       recorded=recorded, locked=pins)
        return path

    where = (f"{locked.repo} (variant {name}) at commit {locked.commit[:12]} from the "
             f"{h.describe()}")
    fetched = h.fetch_variant(locked.repo, locked.commit, name)
    try:
        return check(fetched.path, fetched.recorded)
    except IntegrityError as err:
        if (fetched.fetched or h.kind == "local"
                or as_published(fetched.path, pinned_metadata, fetched.recorded)):
            # the hub's own files, a copy fetched just now, or one whose only fault is to
            # differ from the lock file: fetching won't help
            raise_if_unlike_lock(err, fetched.path, fetched.recorded, pins, lockfile, where,
                                 "download")
            raise
        if getattr(h, "offline", True):  # not fetched again offline: say the fix
            cache = getattr(h, "cache", None)
            if isinstance(cache, DownloadCache):
                raise cache.damaged_copy(err, locked.repo, locked.commit,
                                         changed=not is_intact(fetched.path,
                                                               fetched.recorded)) from err
            raise
        logger.warning("%s: the cached copy of variant %s failed verification (%s); "
                       "fetching it again", locked.repo, name, "; ".join(err.problems))
    fetched = h.fetch_variant(locked.repo, locked.commit, name, refresh=True)
    try:
        return check(fetched.path, fetched.recorded)
    except IntegrityError as err:
        raise_if_unlike_lock(err, fetched.path, fetched.recorded, pins, lockfile, where,
                             "download")
        raise


def _fetch_judged(h: Any, locked: LockedKernel, name: str, lockfile: str
                  ) -> tuple[Path, str | None]:
    """Fetch one locked variant as a load takes it. Its ``metadata.json`` and signature
    first, judged as a load judges them, which ``--all-variants`` does not do otherwise
    (no variant is chosen): the ``metadata.json`` checked against the lock's pin, and
    copies the download cache kept that fail that or a trusted key's signature fetched
    again once (offline, refused with the fix), so that the variant's fetch, which takes
    that ``metadata.json``, does not inherit a damaged one, and an offline load finds
    copies it accepts. A signature that fresh copies fail is refused, as a load refuses
    it, where the lock pins the files; a lock without digests leaves the variant to the
    trust policy, whose refusal is returned (:func:`_load_refusal`). Then the other
    files an offline load reads, and the variant's files, verified against the lock and
    the ``metadata.json`` judged (:func:`_fetch_checked`).

    Returns:
        The variant's path, and for a lock without digests why a load would refuse the
        variant and how to load it (``None``: it would not; a lock with digests pins
        the files, which is trust enough).

    Raises:
        TrustError: a lock with digests, and a signature by a trusted key that does not
            verify (over fresh copies, or offline) or cannot be read.
    """
    from kernelforge.digest import b64_sha256
    from kernelforge.locate import judge_variant

    if locked.variants is not None:
        data, _meta, _req, _decision = judge_variant(
            h, locked.repo, locked.commit, name, False, locked=locked, lockfile=lockfile,
            pinned=lockfile)
        refusal = None
    else:
        data, refusal = _load_refusal(h, locked, name)
    _cache_load_files(h, locked.repo, locked.commit, name)
    return _fetch_checked(h, locked, name, lockfile, b64_sha256(data)), refusal


def _load_refusal(h: Any, locked: LockedKernel, name: str) -> tuple[bytes, str | None]:
    """A variant of a lock without digests judged by the trust policy as a load judges
    it (:func:`kernelforge.locate.judge_variant`): kept copies of its ``metadata.json``
    and signature that a trusted key's signature does not verify over are fetched again
    once first, since a load online fetches them again too, so only a refusal that fresh
    copies earn is reported. Returns the ``metadata.json`` judged and why a load would
    refuse the variant, with how to load it where trusting a key or allowing the
    repository would, else the fix the load's refusal names (``None``: a load would not
    refuse it)."""
    from kernelforge.errors import TrustError
    from kernelforge.loader import no_digests_fix
    from kernelforge.locate import judge_variant, variant_metadata
    from kernelforge.policy import key_fix

    try:
        data, meta, _req, decision = judge_variant(h, locked.repo, locked.commit, name,
                                                   False, locked=locked)
    except TrustError as err:
        # a signature that does not verify or cannot be read: no key trusted and no
        # allowance lifts it, and its text says what does (offline, with the cache's fix)
        data, _meta = variant_metadata(h, locked.repo, locked.commit, name, locked)
        return data, str(err)
    if not decision.allowed:
        problem = str(decision)
    elif decision.signer is not None and not meta.get("digest"):
        # a trusted key's signature: neither trusting a key nor allowing the repository
        # lifts the load's refusal, so its own fix is the one said
        return data, ("its signed metadata.json records no file digests, so the "
                      "signature does not cover the code. To load it: "
                      f"{no_digests_fix(locked.repo)}")
    else:
        return data, None
    return data, (f"{problem}. To load it: {key_fix(problem, 'ORG/*')}, allow the "
                  f"repository ('kernelforge trust allow {locked.repo}'), or pass "
                  f"trust_remote_code=[{locked.repo!r}] to load_kernel / get_locked_kernel")


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
                path, _refusal = _fetch_judged(h, dep, name, str(self.lock.path))
                out.append((dep.repo_id, name, path))
                out += self.dependencies(top, path, dep.repo_id)
        return out


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
        digests, for a kernel neither signed by a trusted key nor allowed, or signed
        over a metadata.json that records no file digests) is fetched all the same,
        with a WARNING log line saying why and how to load it: trusting a key or
        allowing the repository where that helps, else the fix the load's refusal
        names (judged as a load judges it: kept copies of its ``metadata.json`` and
        signature that a trusted key's signature does not verify over are fetched
        again once first). Each one is followed by the kernels its ``kernel-depends``
        name (and theirs): the commits the lock pins for them, verified against the
        lock (every variant of them with ``all_variants``, else the one a load here
        chooses), each fetched once per call.
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
            path, refusal = _fetch_judged(h, locked, name, str(lock.path))
            if refusal is not None:
                logger.warning("%s (variant %s): %s pins only its commit, and a load will "
                               "refuse it: %s", repo_id, name, lock.path.name, refusal)
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
