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
from typing import TYPE_CHECKING, Any

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

if TYPE_CHECKING:
    from kernelforge.errors import VariantNotFoundError

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
        if h.kind == "local":  # the hub's own files: fetching won't help
            from kernelforge.hub.local import damaged_copy

            raise_if_unlike_lock(err, fetched.path, fetched.recorded, pins, lockfile, where,
                                 "download")
            raise damaged_copy(err, lockfile) from err
        if fetched.fetched or as_published(fetched.path, pinned_metadata, fetched.recorded):
            # a copy fetched just now, or one whose only fault is to differ from the lock
            # file: fetching won't help
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
        logger.warning("kernelforge: %s: the cached copy of variant %s failed verification (%s); "
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
    it whatever it trusts or allows, before any of the variant's files is fetched (the
    caller decides whether that fails the download: :meth:`_Download.fetch`); a lock
    without digests leaves the rest to the trust policy, whose refusal is returned
    (:func:`_load_refusal`). Then the other files an offline load reads, and the
    variant's files, verified against the lock and the ``metadata.json`` judged
    (:func:`_fetch_checked`).

    Returns:
        The variant's path, and for a lock without digests why a load would refuse the
        variant and how to load it (``None``: it would not; a lock with digests pins
        the files, which is trust enough).

    Raises:
        TrustError: a signature by a trusted key that does not verify (over fresh
            copies, or offline over kept ones: a :class:`SignatureMismatchError`), a
            signature file that cannot be read (an :class:`UnreadableSignatureError`,
            fresh, or offline kept), or a trust store that cannot be.
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
    refuse it). A refusal that no key trusted and no allowance lifts (a signature that
    does not verify or cannot be read) is raised, as for a lock with digests: the
    variant is not fetched (:meth:`_Download.fetch`)."""
    from kernelforge.loader import no_digests_fix
    from kernelforge.locate import judge_variant
    from kernelforge.policy import key_fix

    data, meta, _req, decision = judge_variant(h, locked.repo, locked.commit, name, False,
                                               locked=locked)
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
    from kernelforge.hub.base import signature_path, sigstore_path

    for path in (f"build/{name}/metadata.json", signature_path(name), sigstore_path(name)):
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
        skipped: ``(repo_id, variant, why)`` of each variant left out because a load
            refuses it whatever it trusts or allows (its signature by a trusted key does
            not verify, or cannot be read), and it is not the one a load here takes (nor,
            of a dependency, one that a variant a load here takes needs); with
            ``all_variants`` only, since that one fails the download instead. ``why`` is
            one line: the refusal, and which variant a load here takes.
    """

    fetched: list[tuple[str, str, Path]] = dataclasses.field(default_factory=list)
    left: list[str] = dataclasses.field(default_factory=list)
    skipped: list[tuple[str, str, str]] = dataclasses.field(default_factory=list)


@dataclass
class _Download:
    """One :func:`download_locked` call: what it reads and what it fetched already."""

    lock: LockFile
    hub: Any
    backend: str | None
    all_variants: bool
    seen: set[tuple[Any, ...]]  # requests and (repo, commit): each fetched once
    progress: DownloadProgress
    # (repo, commit) -> the variant a load here takes, None where none fits
    here: dict[tuple[str, str], str | None] = dataclasses.field(default_factory=dict)
    # the markers of ``seen`` reached from a variant a load here takes: their own such
    # variant was judged as this machine's (with all_variants, a dependency reached
    # first from another variant is reached again from this machine's)
    seen_here: set[tuple[Any, ...]] = dataclasses.field(default_factory=set)

    def variants(self, h: Any, locked: LockedKernel) -> list[str]:
        """The variants of a locked kernel to fetch: all of them, or the one a load here
        chooses (chosen as a load chooses it; :meth:`fetch` judges its trust)."""
        from kernelforge.locate import lock_hub_explained, locked_variant_names

        if not self.all_variants:
            name = self.taken_here(h, locked)  # raises where none fits
            return [name] if name is not None else []
        # h is the hub hub_for_lock gave for self.hub: its errors say why where it chose
        with lock_hub_explained(self.hub, locked, h):
            return locked_variant_names(h, locked, str(self.lock.path))

    def taken_here(self, h: Any, locked: LockedKernel) -> str | None:
        """The variant of ``locked`` a load here takes (for ``--backend``, where given),
        once per kernel. With ``all_variants``, ``None`` where none fits (a machine that
        prepares the download for others); else that raises VariantNotFoundError."""
        from kernelforge.errors import VariantNotFoundError
        from kernelforge.locate import locked_variant_here

        key = (locked.repo, locked.commit)
        if key not in self.here:
            try:
                self.here[key] = locked_variant_here(h, locked, hub=self.hub,
                                                     lockfile=str(self.lock.path),
                                                     backend=self.backend)
            except VariantNotFoundError:
                if not self.all_variants:
                    raise
                self.here[key] = None
        return self.here[key]

    def loads(self, h: Any, locked: LockedKernel, name: str) -> bool:
        """Whether a load here takes variant ``name`` of ``locked`` (without
        ``all_variants``, every variant fetched is one)."""
        return not self.all_variants or self.taken_here(h, locked) == name

    def fetch(self, h: Any, locked: LockedKernel, name: str, *, loads_here: bool = True
              ) -> tuple[Path | None, str | None]:
        """:func:`_fetch_judged`, with one rule for a variant a load refuses whatever it
        trusts or allows (a trusted key's signature that does not verify over fresh
        copies, or offline over kept ones; one that cannot be read): its files are not
        fetched. Where it is the variant a load here takes, the download fails, naming
        it: exiting 0 would leave this machine an offline load that fails. Any other
        (with ``all_variants``) is skipped, with a WARNING and in
        :attr:`DownloadProgress.skipped`: a machine that loads it refuses it online as
        offline, so it is noise here, not a reason to stop. So is the variant a load
        here would take of a dependency that only variants no load here takes need.

        Args:
            loads_here: whether a variant a load here takes needs ``locked`` (always so
                for a kernel the lock lists); where not, no variant of it fails the run.

        Returns:
            The variant's path (``None``: skipped), and the trust policy's refusal that
            :func:`_fetch_judged` returns.

        Raises:
            TrustError: the refusal of the variant a load here takes, restated to say so
                (a :class:`SignatureMismatchError` or :class:`UnreadableSignatureError`
                stays one).
        """
        from kernelforge.errors import TrustError

        try:
            return _fetch_judged(h, locked, name, str(self.lock.path))
        except TrustError as err:
            here = self.taken_here(h, locked)
            if here == name and loads_here:
                # skipped before, where only a variant no load here takes needed it
                self.progress.skipped[:] = [s for s in self.progress.skipped
                                            if s[:2] != (locked.repo_id, name)]
                raise _refused_here(err, locked.repo_id, name, self.backend,
                                    offline=getattr(h, "offline", False)) from err
            taken = ("no variant that depends on it" if here == name
                     else f"variant {here}" if here is not None else "none of its variants")
            why = (f"a load refuses it ({_as_one_line(err)}), and a load on this machine"
                   f"{_for_backend(self.backend)} takes {taken}")
            self.progress.skipped.append((locked.repo_id, name, why))
            logger.warning("kernelforge: %s (variant %s): skipped, not fetched: %s; the download "
                           "goes on", locked.repo_id, name, why)
            return None, None

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

    def dependencies(self, top: LockedKernel, variant_dir: Path, parent: str | None = None,
                     *, loads_here: bool = True) -> list[tuple[str, str, Path]]:
        """Fetch the ``kernel-depends`` of a fetched variant (of ``parent``, by default
        ``top``, a kernel the lock lists), and theirs: as the lock pins them in ``top``'s
        ``depends`` (verified against the lock), else as a load would choose them (with
        a warning). ``loads_here``: a load here takes that variant, so a pinned
        dependency's variant a load here takes is this machine's too (:meth:`fetch`);
        one fetched before from a variant no load here takes is judged again as such."""
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
            marker = ("lock", dep.repo, dep.commit)
            if marker in (self.seen_here if loads_here else self.seen):
                continue
            again = marker in self.seen  # fetched already, for other machines only
            self.seen.add(marker)
            if loads_here:
                self.seen_here.add(marker)
            h = hub_for_lock(self.hub, dep)
            names = self.variants(h, dep) if not again else [
                n for n in [self.taken_here(h, dep)] if n is not None]
            for name in names:
                path, _refusal = self.fetch(h, dep, name, loads_here=loads_here)
                if path is not None:
                    if not again:
                        out.append((dep.repo_id, name, path))
                    out += self.dependencies(
                        top, path, dep.repo_id,
                        loads_here=loads_here and self.loads(h, dep, name))
        return out


def _as_one_line(err: Exception) -> str:
    """An error's message as one line, for a list of what was skipped and why."""
    return " ".join(str(err).split())


def _for_backend(backend: str | None) -> str:
    """`` for backend B`` where ``--backend`` was given, so that what a message says a
    load here takes is true of the choice made for it."""
    return f" for backend {backend}" if backend else ""


def _refused_here(err: Exception, repo_id: str, name: str, backend: str | None, *,
                  offline: bool) -> Exception:
    """``err``, a refusal of ``repo_id``'s variant ``name`` that nothing lifts, restated
    as the failure of a download of the variant a load here takes (of the same type).
    ``offline``: the hub worked from its download cache, whose kept copies a load online
    fetches again, so only an offline load is known to refuse the variant (``err`` says
    the cache's fix)."""
    from kernelforge.errors import SignatureMismatchError, TrustError, UnreadableSignatureError

    when = "while offline" if offline else "offline as online"
    message = (f"{repo_id} (variant {name}): not fetched: it is the variant a load on this "
               f"machine{_for_backend(backend)} takes, and a load refuses it, {when}: {err}")
    if isinstance(err, (SignatureMismatchError, UnreadableSignatureError)):
        return type(err)(message, err.variant, problem=err.problem)
    return TrustError(message)


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
            dependencies the lock does not pin (every pinned variant is fetched), and
            which variant of a kernel is the one a load here takes (see Returns).
        progress: a :class:`DownloadProgress` to keep up to date, which says after an
            error what was fetched (it stays in the download cache) and what was not.

    Returns:
        ``(repo_id, variant, path)`` for each variant fetched (or already cached), all
        verified against the lock, each once: the lock's kernels by name, each variant
        followed by the kernel-depends it brought in first (a kernel the lock lists that
        one sorted before it needs comes there, not again). A variant a load would
        refuse unless told otherwise (a lock without digests, for a kernel neither
        signed by a trusted key nor allowed, or signed over a metadata.json that records
        no file digests) is fetched all the same, with a WARNING log line saying why and
        how to load it: trusting a key or allowing the repository where that helps, else
        the fix the load's refusal names. A variant a load refuses whatever it trusts or allows (a
        signature by a trusted key that does not verify, or cannot be read) is not
        fetched: the one a load here takes fails the download (TrustError), of a kernel
        the lock lists or of a dependency a variant a load here takes needs; any other
        (with ``all_variants``) is skipped with a WARNING log line and listed in
        ``progress.skipped``. Both are judged as a load judges them: kept copies of a
        ``metadata.json`` and signature that a trusted key's signature does not verify
        over, or of a signature that does not parse, are fetched again once first.
        Each variant fetched is followed by the kernels its ``kernel-depends`` name
        (and theirs): the commits the lock pins for them, verified against the lock
        (every variant of them with ``all_variants``, else the one a load here
        chooses), each fetched once per call.
        A dependency the lock does not pin (a lock written before kernelforge pinned
        dependencies, or a ``kernels.lock``) is fetched as a load would choose it,
        verified against its own metadata, with a WARNING log line. A ``kernels.lock``
        lists the kernels and their dependencies alike: an entry that no variant here
        fits but that other entries' variants list in ``kernel-depends`` is one a load
        here does not use, and is skipped with an INFO log line (a WARNING where its
        locked commit holds no build, which fails a load of those variants).

    Raises:
        LockError: the lock file is missing or malformed.
        ValueError: ``lockfile`` is an empty or blank string (it would mean the current
            directory; pass ``"."`` for that).
        HubError: a locked kernel cannot be fetched (the hub or the network is down,
            the commit is gone, the download cache cannot be written).
        IntegrityError: a fetched file differs from what the lock pins (or, for what
            it pins no files of, from the variant's own metadata).
        TrustError: the variant a load here takes (for ``backend``, where given) is one
            a load refuses whatever it trusts or allows: its signature by a trusted key
            does not verify (a SignatureMismatchError) or cannot be read (an
            UnreadableSignatureError). The message names the variant and says why. Or the
            trust store cannot be read (before anything is fetched).
        VariantNotFoundError: a kernel the lock lists has no variant that fits this
            system.
        VariantError: ``backend`` cannot be chosen in this process (with
            ``all_variants`` too).
        TypeError: a ``hub`` of another type.
    """
    from kernelforge import trust, variants
    from kernelforge.hub.hf import used_for

    # as a load refuses it, before anything is fetched (with all_variants it still
    # chooses the variants of the dependencies a lock leaves unpinned)
    check_lockfile(lockfile)
    variants.check_backend(backend, elsewhere=(
        f"with --all-variants, the download fetches every variant the lock pins, {backend}'s "
        "too: leave --backend out" if all_variants else variants.OTHER_MACHINES))
    lock = read_lock(lockfile)
    # Every variant is judged with it: one that cannot be read fails the run here, once,
    # rather than pass for a refusal of each variant that --all-variants may skip.
    trust.load_store()
    with used_for("download"):  # its network errors do not send it to the download cache
        return _download_locked(lock, hub, all_variants, backend,
                                progress if progress is not None else DownloadProgress())


def _download_locked(lock: LockFile, hub: Any, all_variants: bool, backend: str | None,
                     progress: DownloadProgress) -> list[tuple[str, str, Path]]:
    """:func:`download_locked` of a lock file read."""
    from kernelforge.errors import VariantNotFoundError
    from kernelforge.locate import hub_for_lock

    out = progress.fetched
    run = _Download(lock, hub, backend, all_variants, set(), progress)  # each dependency once
    unfit: list[tuple[LockedKernel, VariantNotFoundError]] = []
    kernels = sorted(lock.kernels.items())
    for i, (repo_id, locked) in enumerate(kernels):
        later = [r for r, _ in kernels[i + 1:]]
        progress.left = [repo_id, *later]
        h = hub_for_lock(hub, locked)
        marker = ("lock", locked.repo, locked.commit)
        new, new_here = marker not in run.seen, marker not in run.seen_here
        run.seen.add(marker)  # a dependency cycle back to it
        run.seen_here.add(marker)  # its own variant a load here takes is judged below
        try:
            names = run.variants(h, locked)
        except VariantNotFoundError as err:
            if lock.kind != "kernels":
                raise
            # A kernels.lock lists the dependencies of its kernels beside them: decided
            # below, once the kernels that fit are fetched with what they need here.
            if new:
                run.seen.discard(marker)
            if new_here:
                run.seen_here.discard(marker)
            unfit.append((locked, err))
            continue
        for j, name in enumerate(names):
            progress.left = [f"{repo_id} ({', '.join(names[j:])})", *later]
            # metadata.json first, as a load reads it: the fetch takes that copy (with
            # all_variants, read after the fetch, it was downloaded a second time)
            path, refusal = run.fetch(h, locked, name)
            if refusal is not None:
                logger.warning("kernelforge: %s (variant %s): %s pins only its commit, and a load "
                               "will refuse it: %s", repo_id, name, lock.path.name, refusal)
            if path is None:  # skipped: said, and neither it nor what it needs is fetched
                continue
            _add_new(out, [(repo_id, name, path)])
            rest = [f"{repo_id} ({', '.join(names[j + 1:])})"] if names[j + 1:] else []
            progress.left = [f"the kernel-depends of {repo_id} {name}", *rest, *later]
            _add_new(out, run.dependencies(locked, path, loads_here=run.loads(h, locked, name)))
    progress.left = []
    for locked, refused in unfit:
        key = _request_of(locked)
        listed = run.listed_by(locked, key) if key is not None else []
        if key is None or not listed:  # a kernel of the project as far as the file tells
            progress.left = [locked.repo_id]
            raise refused
        _say_unused(lock, describe_dependency(key), listed, refused)
    return out


def _add_new(out: list[tuple[str, str, Path]], fetched: list[tuple[str, str, Path]]) -> None:
    """Append to ``out`` each of ``fetched`` whose variant directory it does not hold yet.
    A kernel the lock lists is also fetched, and judged, as such where a kernel sorted
    before it brought it in through ``kernel-depends`` (a ``kernels.lock`` lists the
    dependencies beside the kernels; a project may list a kernel that another needs):
    that variant is one directory, said once, where it was fetched first."""
    listed = {path for _repo, _name, path in out}
    for item in fetched:
        if item[2] not in listed:
            listed.add(item[2])
            out.append(item)


def _say_unused(lock: LockFile, what: str, listed: list[str],
                refused: VariantNotFoundError) -> None:
    """Say why a ``kernels.lock`` entry that only the variants ``listed`` (of other
    entries) depend on, none of which a load here takes, is not fetched. Where no
    variant of it fits here, that is all (INFO). Where its locked commit holds no build
    at all (``refused.problem``), a load of those variants fails on any machine: a
    WARNING says so, with the fix, rather than that nothing fits this system."""
    users = ", ".join(listed)
    if not refused.problem:
        logger.info("%s: %s is not fetched: no build variant of it fits this system, and "
                    "it is only a kernel-depends entry of %s, which a load here does not "
                    "use", lock.path, what, users)
        return
    logger.warning("kernelforge: %s: %s is not fetched: %s %s; it is only a kernel-depends entry "
                   "of %s, which a load here does not use, but a load of those fails; fix: %s",
                   lock.path, what, refused.what, refused.problem, users, refused.fix)
