"""Finding a kernel: which hub, which revision, which variant, and may it load.

:func:`locate_hub`, :func:`locate_locked` and :func:`locate_local` turn the arguments of
a load into a :class:`Plan`: a :class:`KernelInfo` (repository, hub, branch, commit,
variant, the accept/reject trace) plus what the loader needs to fetch and verify it
(the hub, the digests it must match and the trust decision). Nothing is imported and,
for a remote hub, only small files are downloaded (listings, ``metadata.json``,
signatures): the variant itself is fetched by the loader after the trust check.

Which hub: a :class:`~kernelforge.hub.base.Hub` given as ``hub=``, a directory (a local
hub), ``"hf"`` (the Hugging Face Hub), or ``None``: ``$KERNELFORGE_HUB`` when set (a
directory or ``hf``), else the local hub in the user cache when it holds the
repository, else the Hugging Face Hub (whose errors then also say that the local hub
does not hold the repository, and name those it holds). Errors of a hub that
``$KERNELFORGE_HUB`` chose say so where it is ``hf`` or names a missing directory, and
those of a ``LOCAL_KERNELS`` build name its entry. A locked load with ``None`` uses
the kind of hub the lock records; a Hugging Face ``kernels.lock`` records none, so it uses
the local hub when that holds the repository at the locked commit, else the Hugging Face
Hub (:func:`hub_for_lock`), whose errors then say that the local hub lacked it
(:func:`lock_hub_explained`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kernelforge.errors import (
    HubError,
    IntegrityError,
    SignatureMismatchError,
    UnreadableSignatureError,
    VariantNotFoundError,
    one_line,
)
from kernelforge.hub import HF_NAMES, LocalHub, as_hub, validate_repo_id
from kernelforge.hub.base import Hub, signature_path, sigstore_path
from kernelforge.hub.local import HUB_ENV, refuse_empty_hub

if TYPE_CHECKING:  # pragma: no cover
    from kernelforge.lock import LockedKernel
    from kernelforge.policy import AllowArg, TrustDecision, TrustRequest
    from kernelforge.variants import SystemFacts

__all__ = [
    "LOCAL_KERNELS_ENV",
    "KernelInfo",
    "Plan",
    "hub_for",
    "local_overrides",
    "locate_hub",
    "locate_local",
    "locate_locked",
    "trust_request",
]

logger = logging.getLogger(__name__)

#: ``org/name=/path:org/other=/path``: repositories to load from a local build instead.
LOCAL_KERNELS_ENV = "LOCAL_KERNELS"

HubArg = Hub | str | os.PathLike[str] | None

#: The hub a load reads where ``hub=`` is left out (:func:`hub_for`), as the refusal of
#: an empty one says it: not a publish's (:data:`kernelforge.hub.local.DEFAULT_HUB`),
#: since a load also falls back to the Hugging Face Hub.
LOAD_DEFAULT_HUB = ("$KERNELFORGE_HUB, else the local hub when it holds the repository, "
                    "else the Hugging Face Hub")
#: The same for a locked load (:func:`hub_for_lock`).
LOCKED_DEFAULT_HUB = ("the kind of hub the lock records for each kernel (a kernels.lock "
                      "records none: the Hugging Face Hub when $KERNELFORGE_HUB is hf, else "
                      "the local hub when it holds the locked commit, else the Hugging Face "
                      "Hub)")


@dataclass(frozen=True)
class KernelInfo:
    """Where a kernel would be (or was) loaded from, and why that variant.

    Attributes:
        repo: the repository id (``LOCAL_KERNELS`` overrides keep it), or the path
            given to :func:`get_local_kernel`.
        branch: the branch used (``v1``), ``None`` for a tag, a commit or a local build;
            for a locked kernel, the branch the lock records (the one its commit was on
            when it was locked; ``None`` for a ``kernels.lock``, which records none).
        commit: the hub commit id, ``None`` for a local build.
        variant: the chosen variant directory name.
        path: the variant directory on disk; ``None`` while a remote variant is not
            downloaded yet.
        trace: one line per candidate variant: accepted or rejected, and why.
        id: the module name the variant is imported as (metadata ``id``).
        version: the kernel version in its metadata, if any.
        source: ``"hub"``, ``"lock"`` or ``"local"``.
        hub: the hub, in words (``local hub /path``, ``Hugging Face Hub``).
        notes: how the revision was chosen (redirects, versions), one line each.
        trust: the trust decision, in words.
    """

    repo: str
    branch: str | None
    commit: str | None
    variant: str
    path: Path | None
    trace: tuple[str, ...]
    id: str
    version: int | None
    source: str
    hub: str = ""
    notes: tuple[str, ...] = ()
    trust: str = ""

    def describe(self) -> str:
        """A few lines for people: what, from where, and the variant trace."""
        where = f"commit {self.commit[:12]}" if self.commit else "local build"
        if self.branch:
            where = f"branch {self.branch}, {where}"
        lines = [f"{self.repo} ({where})"]
        if self.hub:
            lines.append(f"  hub {self.hub}")
        # the notes, the variant and the trace hold names the hub chose: one line each
        lines.extend(f"  {one_line(note)}" for note in self.notes)
        lines += [f"  variant {one_line(self.variant)} -> module {self.id}",
                  f"  path {self.path if self.path else '(not downloaded yet)'}"]
        lines.extend(f"  {one_line(line)}" for line in self.trace)
        if self.trust:
            lines.append(f"  {self.trust}")
        return "\n".join(lines)


@dataclass(frozen=True)
class Plan:
    """A located kernel and what loading it requires.

    Attributes:
        info: the :class:`KernelInfo`.
        hub: the hub to fetch from; ``None`` for a local build (``info.path``).
        request: what the trust policy was shown; ``None`` for a local build.
        decision: the trust decision; ``None`` for a local build.
        metadata_sha256: the sha256 of the ``metadata.json`` bytes that were judged.
        locked: the lock file's digests of the variant, if a lock pins it.
        metadata: the parsed ``metadata.json``.
    """

    info: KernelInfo
    hub: Hub | None = None
    request: TrustRequest | None = None
    decision: TrustDecision | None = None
    metadata_sha256: str | None = None
    locked: dict[str, str] | None = None
    metadata: dict[str, Any] = field(default_factory=dict)


# --- arguments ---------------------------------------------------------------------------


def local_overrides() -> dict[str, Path]:
    """Parse ``LOCAL_KERNELS`` now (never at import).

    Returns:
        ``{repo_id: path}``.

    Raises:
        ValueError: a malformed entry (named).
    """
    raw = os.environ.get(LOCAL_KERNELS_ENV, "")
    out: dict[str, Path] = {}
    for entry in raw.split(":"):
        if not entry.strip():
            continue  # tolerate a leading, trailing or doubled ':'
        repo, sep, path = entry.partition("=")
        repo = repo.strip()
        if not sep or not path.strip():
            raise ValueError(
                f"{LOCAL_KERNELS_ENV}: malformed entry {entry!r}; expected "
                "'org/name=/path/to/build' entries separated by ':'"
            )
        try:
            validate_repo_id(repo)
        except ValueError as err:
            raise ValueError(f"{LOCAL_KERNELS_ENV}: malformed entry {entry!r}: {err}") from err
        out[repo] = Path(os.path.expanduser(path.strip()))
    return out


def _override(overrides: dict[str, Path], repo_id: str) -> Path | None:
    """The ``LOCAL_KERNELS`` build for ``repo_id``: its entry as written, else the one
    entry that names it in other case (repository ids ignore case, as on the hubs).

    Raises:
        ValueError: several entries name it in other cases, with different paths.
    """
    if repo_id in overrides:
        return overrides[repo_id]
    same = {path for key, path in overrides.items() if key.lower() == repo_id.lower()}
    if len(same) > 1:
        raise ValueError(f"{LOCAL_KERNELS_ENV}: {repo_id} is named by several entries "
                         "that differ only in case, with different paths; keep one")
    return same.pop() if same else None


def _holds(h: LocalHub, repo_id: str, commit: str) -> bool:
    """Whether a local hub holds ``repo_id`` at ``commit``."""
    if not h.has_repo(repo_id):
        return False
    try:
        h.commit_path(repo_id, commit)
    except HubError:
        return False
    return True


def hub_for_lock(hub: HubArg, locked: LockedKernel) -> Hub:
    """The hub a locked kernel loads from.

    Args:
        hub: the ``hub=`` argument; when given, it is used.
        locked: the lock file's entry.

    Returns:
        With ``hub`` ``None``: :func:`hub_for` with the kind of hub the lock records. A
        Hugging Face ``kernels.lock`` records none: then ``$KERNELFORGE_HUB=hf`` names
        the Hugging Face Hub, and otherwise the local hub (``$KERNELFORGE_HUB`` or the
        user cache) is used when it holds the repository at the locked commit, else the
        Hugging Face Hub (a commit id names one commit, so the local hub holding it is
        the hub the lock was written from).

    Raises:
        HubError: the lock records the local hub, and the default local hub lacks the
            repository or the commit (a lock records no hub directory, so one written
            from another local hub finds nothing there): the message says how to name it.
        ValueError: ``hub`` is an empty or blank string, naming the default
            (:data:`LOCKED_DEFAULT_HUB`).
    """
    refuse_empty_hub(hub, LOCKED_DEFAULT_HUB)
    if hub is None and locked.hub is None:  # a kernels.lock
        if os.environ.get(HUB_ENV, "").strip().lower() in HF_NAMES:
            return as_hub("hf")
        local = LocalHub()
        return local if _holds(local, locked.repo, locked.commit) else as_hub("hf")
    h = hub_for(hub, locked.repo, prefer=locked.hub)
    if hub is None and locked.hub == "local" and isinstance(h, LocalHub):
        problem = None
        if not h.has_repo(locked.repo):
            problem = f"repository {locked.repo!r} is not in the local hub {h.root}"
        elif not _holds(h, locked.repo, locked.commit):
            problem = (f"commit {locked.commit[:12]} of {locked.repo} is not in the local "
                       f"hub {h.root}")
        if problem is not None:
            env = os.environ.get(HUB_ENV, "").strip()
            if env.lower() in HF_NAMES:  # it names no local hub: the user cache's is used
                problem += (f" (the local hub in the user cache: {HUB_ENV}={env} names the "
                            "Hugging Face Hub, and this lock entry records a local hub)")
            elif env:  # not the user cache's hub: the variable chose it
                missing = "" if h.root.is_dir() else ", which does not exist"
                problem += f" (chosen by {HUB_ENV}={env}{missing})"
            raise HubError(
                f"{problem}; the lock file was written from a local hub, and if that was "
                f"another one than this default, name it: hub=DIR in Python, --hub DIR on "
                f"the command line, or ${HUB_ENV}")
    return h


def _lock_fallback(hub: HubArg, locked: LockedKernel, h: Hub) -> str | None:
    """Why :func:`hub_for_lock` sent a ``kernels.lock`` entry (which records no hub) to
    the Hugging Face Hub where the user named no hub: the default local hub does not
    hold the repository, or not at the locked commit (``$KERNELFORGE_HUB`` named, where
    it chose that local hub). ``None`` where the user chose the hub (``hub=``,
    ``$KERNELFORGE_HUB=hf``) or the entry records one."""
    if hub is not None or locked.hub is not None or isinstance(h, LocalHub):
        return None
    env = os.environ.get(HUB_ENV, "").strip()
    if env.lower() in HF_NAMES:
        return None
    local = LocalHub()
    try:
        held = local.has_repo(locked.repo)
    except (OSError, HubError):
        held = False
    where = f"the local hub {local.root}"
    if env:
        missing = "" if local.root.is_dir() else ", which does not exist"
        where += f" (chosen by {HUB_ENV}={env}{missing})"
    what = (f"commit {locked.commit[:12]} of {locked.repo} is not in {where}" if held
            else f"repository {locked.repo!r} is not in {where}")
    return (f"{what}, and a kernels.lock records no hub, so the Hugging Face Hub was asked "
            "(name the hub the kernel was locked from: hub=DIR in Python, --hub DIR on the "
            f"command line, or ${HUB_ENV})")


@contextlib.contextmanager
def lock_hub_explained(hub: HubArg, locked: LockedKernel, h: Hub) -> Iterator[None]:
    """Let a :class:`HubError` raised inside say why the hub ``h`` that
    :func:`hub_for_lock` gave for ``locked`` is the Hugging Face Hub, where the user did
    not choose it (see :func:`_lock_fallback`): its own error ("repository not found")
    says nothing of the local hub the kernel was looked for in first."""
    try:
        yield
    except HubError as err:
        why = _lock_fallback(hub, locked, h)
        if why is None:
            raise
        raise type(err)(f"{why}: {err}") from err


def _not_in_local_hub(repo_id: str) -> str:
    """That the default local hub does not hold ``repo_id``: where it is, the names it
    holds (the first ten) and those close to ``repo_id``, for the error of a load that then
    went to the Hugging Face Hub."""
    from kernelforge.hub.local import held_repos

    local = LocalHub()
    where = f"repository {repo_id!r} is not in the local hub {local.root}"
    try:
        held = local.repos()
    except (OSError, HubError):  # an unusable default hub: the error being said comes first
        held = []
    if not held:  # a load before the first publish, most often
        return (f"{where} (it holds no repositories: 'kernelforge publish PROJECT --repo "
                f"{repo_id}' publishes a build there)")
    return f"{where} (it holds: {held_repos(repo_id, held)})"


def _chosen_by_env(hub: HubArg, h: Hub, repo_id: str) -> str | None:
    """How the hub ``h`` was chosen for ``repo_id``, where the user did not name it and
    an error of it would not say: the default local hub does not hold the repository
    (then the Hugging Face Hub is asked; its error alone reads as a network problem for a
    mistyped name), ``$KERNELFORGE_HUB=hf`` chose the Hugging Face Hub, or
    ``$KERNELFORGE_HUB`` names a directory that is not there (a forgotten export, a
    typo). ``None`` otherwise: with ``hub=`` given, the caller chose it."""
    if hub is not None:
        return None
    env = os.environ.get(HUB_ENV, "").strip()
    if not env:
        return None if isinstance(h, LocalHub) else (
            f"{_not_in_local_hub(repo_id)}, so the Hugging Face Hub was asked")
    if env.lower() in HF_NAMES:
        local = LocalHub()  # the user cache's: $KERNELFORGE_HUB names no directory
        try:
            held = local.has_repo(repo_id)
        except (OSError, HubError):
            held = False
        also = (f" (the local hub {local.root} holds {repo_id}: unset {HUB_ENV} to load it "
                "from there)" if held else "")
        return f"{HUB_ENV}={env} chose the Hugging Face Hub{also}"
    if isinstance(h, LocalHub):
        try:
            missing = not h.root.is_dir()
        except OSError:  # a name the system cannot take (too long): the error says so
            missing = True
        if missing:
            return f"{HUB_ENV}={env} chose the local hub {h.root}"
    return None


@contextlib.contextmanager
def hub_choice_explained(hub: HubArg, h: Hub, repo_id: str) -> Iterator[None]:
    """Let a :class:`HubError` raised inside say how ``h`` was chosen where the user did
    not name it (see :func:`_chosen_by_env`): a load and ``kernelforge lock`` resolving
    ``repo_id`` with the hub :func:`hub_for` gave for ``hub``."""
    try:
        yield
    except HubError as err:
        why = _chosen_by_env(hub, h, repo_id)
        if why is None:
            raise
        raise HubError(f"{why}: {err}") from err


def hub_for(hub: HubArg, repo_id: str, *, prefer: str | None = None) -> Hub:
    """The hub a load of ``repo_id`` uses (see the module docstring).

    Args:
        hub: the ``hub=`` argument.
        repo_id: the repository.
        prefer: ``"local"`` or ``"hf"``: the kind of hub a lock file recorded; it
            decides when ``hub`` is ``None``.

    Returns:
        The hub.

    Raises:
        ValueError: ``hub`` is an empty or blank string, naming the default
            (:data:`LOAD_DEFAULT_HUB`).
    """
    refuse_empty_hub(hub, LOAD_DEFAULT_HUB)
    if hub is not None:
        return as_hub(hub)
    if prefer == "hf":
        return as_hub("hf")
    if prefer == "local":
        return LocalHub()  # $KERNELFORGE_HUB when it names a directory, else the user cache
    if os.environ.get(HUB_ENV, "").strip():  # blank counts as unset, as for LocalHub
        return as_hub(None)
    local = LocalHub()
    return local if local.has_repo(repo_id) else as_hub("hf")


# --- choosing a variant ------------------------------------------------------------------


def _archs(meta: Mapping[str, Any]) -> list[str] | None:
    """``backend.archs`` of a metadata.json, ``None`` when absent."""
    backend = meta.get("backend")
    archs = backend.get("archs") if isinstance(backend, dict) else None
    return [str(a) for a in archs] if isinstance(archs, list) else None


def _arch_check(meta: Mapping[str, Any], facts: SystemFacts) -> tuple[bool, str]:
    """Whether the build ``meta`` describes covers the GPU of ``facts``, judged by its
    ``backend.archs`` for the backend its ``backend.type`` names."""
    from kernelforge import variants

    backend = meta.get("backend")
    kind = backend.get("type") if isinstance(backend, dict) else None
    return variants.arch_supported(_archs(meta), facts,
                                   build_backend=kind if isinstance(kind, str) else None)


MetaReader = Callable[[str], tuple[bytes, dict[str, Any]]]
#: ``(variant name, metadata bytes, metadata, trace lines)``: what :func:`_choose` chose.
Chosen = tuple[str, bytes, dict[str, Any], tuple[str, ...]]

# The way out of a refusal by the GPU check alone.
_ARCH_FIX = ("the architectures a build declares can be incomplete (a kernel with a "
             "Triton fallback, say); if it runs on this GPU anyway, load it with "
             "check_arch=False (the kernel may fail or crash at run time if it does not)")


def _choose(
    names: list[str], read_meta: MetaReader, what: str, backend: str | None, check_arch: bool,
    facts: SystemFacts | None = None,
) -> Chosen:
    """Resolve a variant among ``names`` for ``facts`` (detected when not given); check
    GPU archs in preference order.

    Returns:
        ``(variant name, metadata bytes, metadata, trace lines)``.
    """
    from kernelforge import variants

    facts = facts or variants.detect_system()
    resolution = variants.resolve_variant(names, facts, backend=backend)
    trace = [str(d) for d in resolution.trace]
    resolution.require(what)  # raises with the full trace when nothing fits
    by_canonical: dict[str, str] = {}
    for name in names:
        try:
            by_canonical.setdefault(str(variants.Variant.parse(name)), name)
        except ValueError:
            continue  # unparsable names are already rejected in the trace
    for variant in resolution.ranked:
        name = by_canonical.get(str(variant), str(variant))
        data, meta = read_meta(name)
        if not check_arch:
            return name, data, meta, tuple(trace)
        ok, reason = _arch_check(meta, facts)
        if ok:
            return name, data, meta, tuple(trace)
        trace.append(f"{name}: rejected after all, {reason}")
    raise VariantNotFoundError(what, trace, facts.describe(), fix=_ARCH_FIX)


def _no_build_fix(h: Hub, repo_id: str, commit: str) -> str:
    """How to load a build when the revision asked for, at ``commit``, holds none
    (``main``, which holds the card, or a tag or commit of it): the version branches the
    builds are on (not those at ``commit``, which hold none either: a version branch a
    publish made from ``main`` before its commit), and the newest that holds a build to
    load (a branch elsewhere may hold none too: one made from an older ``main``)."""
    from kernelforge import revisions
    from kernelforge.hub.base import version_branches

    try:
        versions = {n: at for n, at in version_branches(h.branches(repo_id)).items()
                    if at != commit}
    except HubError:
        versions = {}
    if not versions:
        return ""
    try:
        newest = revisions.newest_built(h, repo_id, versions)[0]
    except VariantNotFoundError:
        return ""  # none holds a build: no version to send the load to
    except HubError:
        newest = max(versions)  # cannot be told now (offline): the newest, as before
    # those newer than it hold none: newest_built passed over them
    branches = ", ".join(f"v{n}" for n in versions if n <= newest)
    return (f"builds are published on the version branches ({branches}); load one with "
            f"version={newest} (--version {newest} on the command line), or leave the revision "
            "out for the newest")


def _disk_meta(base: Path) -> MetaReader:
    from kernelforge.hub._staging import read_metadata

    def read(name: str) -> tuple[bytes, dict[str, Any]]:
        meta = read_metadata(base / name)
        return (base / name / "metadata.json").read_bytes(), meta

    return read


def _hub_meta(hub: Hub, repo_id: str, commit: str, locked: LockedKernel | None,
              lockfile: str = "the lock file", kept: set[str] | None = None) -> MetaReader:
    """Read each variant's ``metadata.json``, checked against the lock's pin (if any) and
    parsed. A copy from a remote hub's download cache that fails either check was damaged
    there since it was fetched (a revision's files never change): it is fetched again
    once; offline, the error names the cached copy and the fix. One that the hub itself
    serves unlike the pin is refused naming ``lockfile``, as the variant's other files
    are (:func:`kernelforge.lock.raise_if_unlike_lock`). The path of each one taken from
    a copy the download cache kept is added to ``kept`` (see :func:`_choose_trusted`)."""
    from kernelforge.cache import DownloadCache
    from kernelforge.digest import b64_sha256
    from kernelforge.hub._staging import parse_metadata

    cache = getattr(hub, "cache", None) if not isinstance(hub, LocalHub) else None

    def check(name: str, where: str, data: bytes | None, served: bool
              ) -> tuple[bytes, dict[str, Any]]:
        """``served``: ``data`` is as the hub serves it (no copy kept since a fetch)."""
        if data is None:
            raise HubError(f"{where}: missing; every build variant needs its metadata.json")
        if locked is not None and locked.variants is not None:
            pinned = locked.variants[name].files.get("metadata.json")
            if pinned != b64_sha256(data):
                problem = "changed: metadata.json (it differs from the one the lock file pins)"
                if served:
                    # imported for this refusal only: a load without a lock needs
                    # nothing else of the lock module
                    from kernelforge.lock import UNLIKE_LOCK_FIX

                    raise IntegrityError(
                        where, [problem],
                        what=f"refusing {where}: the {hub.describe()} serves another "
                             f"metadata.json for the locked commit than {lockfile} pins:",
                        fix=UNLIKE_LOCK_FIX)
                raise IntegrityError(where, [problem])
        return data, parse_metadata(data, where)

    def read(name: str) -> tuple[bytes, dict[str, Any]]:
        where = f"{repo_id}@{commit[:12]}: build/{name}/metadata.json"
        path = f"build/{name}/metadata.json"
        # whether what is read comes from the download cache (fetching it again can help)
        copy = (cache.cached_file(repo_id, commit, path) if isinstance(cache, DownloadCache)
                else None)
        data = hub.read_file(repo_id, commit, path)
        try:
            found = check(name, where, data, copy is None)
        except (HubError, IntegrityError) as err:
            if copy is None or not isinstance(cache, DownloadCache):
                raise
            if getattr(hub, "offline", True):
                if isinstance(err, IntegrityError):
                    raise cache.damaged_copy(err, repo_id, commit, copy) from err
                raise HubError(
                    f"{err} (read from the download cache's copy {copy}, which is not "
                    "fetched again offline; if it was damaged there, fix: "
                    f"{cache.damaged_entry_fix(repo_id, commit)})") from err
            why = "; ".join(err.problems) if isinstance(err, IntegrityError) else str(err)
            logger.warning("kernelforge: %s: the download cache's copy %s failed its check (%s); "
                           "fetching it again", where, copy, why)
            cache.discard_file(repo_id, commit, path)
            return check(name, where, hub.read_file(repo_id, commit, path), True)
        if copy is not None and kept is not None:
            kept.add(path)
        return found

    return read


def _parses(name: str) -> bool:
    from kernelforge import variants
    from kernelforge.errors import VariantError

    try:
        variants.Variant.parse(name)
    except VariantError:
        return False
    return True


# --- locating ------------------------------------------------------------------------------


def _holds_variants(base: Path) -> bool:
    """Whether a directory holds build variants: a subdirectory with a ``metadata.json``."""
    try:
        return any((p / "metadata.json").is_file() for p in base.iterdir() if p.is_dir())
    except OSError:
        return False


def locate_local(
    path: str | os.PathLike[str], backend: str | None, check_arch: bool, repo: str | None = None
) -> Plan:
    """Locate a local build: a variant directory, or a directory whose subdirectories are
    variants (a ``build/`` directory, a snapshot), or one with a ``build/`` that holds them
    (a project).

    Where ``path`` holds variants at its top level and in ``build/``, the top level is
    tried first and ``build/`` next, and the first with a variant that fits this system
    is used, as Hugging Face's ``kernels`` does.

    Args:
        path: where the build is.
        backend: choose for this backend instead of the system's.
        check_arch: check the GPU against the build's ``backend.archs``.
        repo: the repository id it stands in for (``LOCAL_KERNELS``), for messages: its
            errors about ``path`` then name the entry (``LOCAL_KERNELS entry
            org/name=PATH: ...``) where they say ``path: ...`` otherwise.

    Returns:
        The :class:`Plan` (no hub: the files are loaded from ``path``).

    Raises:
        HubError: ``path`` does not exist, is a file, is a kernel project that was not
            built (no ``build/``), or holds no build variant (no subdirectory with a
            ``metadata.json``); each says so.
        VariantNotFoundError: no variant fits this system (with the trace; of both the
            top level and ``build/`` when both hold variants). A variant directory given
            directly is checked too when its name is a variant name (torch, backend and
            platform tags); one whose name is not is checked for the GPU arch only.
    """
    from kernelforge import variants

    root = Path(os.path.expanduser(path))
    label = repo or str(root)
    said = f"{LOCAL_KERNELS_ENV} entry {repo}={path}" if repo else "path"
    try:
        root.stat()
    except (FileNotFoundError, NotADirectoryError):
        pass  # said below, with what was expected
    except OSError as err:  # a name too long for the file system, a folder one may not read
        raise HubError(f"{said}: {root} cannot be used ({err.strerror or err})") from err
    if (root / "metadata.json").is_file():  # a variant directory itself
        base, names = root.parent, [root.name]
        if not _parses(root.name):  # the caller chose it: only the GPU arch is checked
            meta = _disk_meta(base)(root.name)[1]
            trace: tuple[str, ...] = (
                f"{root.name}: accepted, given directly (not a variant name, so the "
                "torch, backend and platform tags were not checked)",
            )
            if check_arch:
                facts = variants.detect_system()
                ok, reason = _arch_check(meta, facts)
                if not ok:
                    raise VariantNotFoundError(str(root), [f"{root.name}: rejected, {reason}"],
                                               facts.describe(), fix=_ARCH_FIX)
            info = KernelInfo(label, None, None, root.name, root, trace, meta["id"],
                              meta.get("version"), "local")
            return Plan(info, metadata=meta)
        bases = [(base, names)]
    else:
        expected = "expected a project with build/, a build/ directory or a variant directory"
        if root.is_file():
            raise HubError(f"{said}: {root} is a file, not a directory ({expected})")
        build = root / "build"
        if not root.is_dir():
            raise HubError(f"{said}: {root} does not exist ({expected})")
        bases = [(b, sorted(p.name for p in b.iterdir() if p.is_dir()))
                 for b in (root, build) if b.is_dir() and _holds_variants(b)]
        if not bases:
            if not build.is_dir() and (root / "build.toml").is_file():
                from kernelforge.hub._staging import unbuilt_project

                raise HubError(f"{said}: {unbuilt_project(root)}")
            raise HubError(f"{said}: {build if build.is_dir() else root} holds no build variant "
                           f"(no subdirectory with a metadata.json; {expected})")
    facts = variants.detect_system()
    rejected: list[tuple[Path, VariantNotFoundError]] = []
    for base, listed in bases:
        try:
            name, _data, meta, trace = _choose(listed, _disk_meta(base), f"{label} ({base})",
                                               backend, check_arch, facts)
        except VariantNotFoundError as err:
            rejected.append((base, err))
            continue
        earlier = tuple(line for b, err in rejected for line in _prefixed(err.trace, b, root))
        if earlier:
            trace = earlier + _prefixed(trace, base, root)
        info = KernelInfo(label, None, None, name, base / name, trace, meta["id"],
                          meta.get("version"), "local")
        return Plan(info, metadata=meta)
    if len(rejected) == 1:
        raise rejected[0][1]
    raise VariantNotFoundError(
        f"{label} ({root}: its top level, then build/)",
        [line for b, err in rejected for line in _prefixed(err.trace, b, root)],
        facts.describe(), fix=next((err.fix for _b, err in rejected if err.fix), ""))


def _other_version_noted(plan: Plan, version: int | None, announce: bool) -> Plan:
    """A ``LOCAL_KERNELS`` build's plan, with a note (and, with ``announce``, a WARNING
    log line) when its metadata records another version than the ``version=`` asked for
    (the override stands in for every version: the pin is not what is loaded)."""
    found = plan.info.version
    if version is None or (found == version and not isinstance(found, bool)):
        return plan
    records = "no version" if found is None else f"version {found!r}"
    note = (f"version={version} was asked for, but {LOCAL_KERNELS_ENV} names a build whose "
            f"metadata.json records {records} ({plan.info.path}); a {LOCAL_KERNELS_ENV} entry "
            f"stands in for every version (remove it to load version {version} from the hub)")
    if announce:
        logger.warning("kernelforge: %s: %s", plan.info.repo, note)
    return dataclasses.replace(plan, info=dataclasses.replace(
        plan.info, notes=(*plan.info.notes, note)))


def _prefixed(trace: Sequence[str], base: Path, root: Path) -> tuple[str, ...]:
    """Trace lines of the variants in ``base``, named from ``root`` (``build/<name>``)."""
    if base == root:
        return tuple(trace)
    return tuple(f"{base.name}/{line}" for line in trace)


def trust_request(
    h: Hub, repo_id: str, commit: str, name: str, data: bytes, allow: AllowArg,
    pinned: str | None, *, kept: set[str] | None = None,
) -> tuple[TrustRequest, TrustDecision]:
    """What the trust policy is shown for one variant of a hub revision, and its decision.

    Args:
        h: the hub.
        repo_id, commit, name: the repository, commit and variant.
        data: the exact bytes of the variant's ``metadata.json``.
        allow: ``trust_remote_code``.
        pinned: the lock file that pins the variant's files, if any.
        kept: where the paths of the signature and sigstore bundle go when they are read
            from copies the download cache kept (not fetched by this call); ``None``: not
            noted.

    Returns:
        ``(request, decision)``; the decision is made, not enforced.

    Raises:
        SignatureMismatchError: a trusted key's signature does not verify.
        UnreadableSignatureError: the signature file is malformed.
        TrustError: the trust store is malformed.
    """
    from kernelforge import policy

    owned = isinstance(h, LocalHub) and h.owned(repo_id, commit)
    req = policy.TrustRequest(
        repo_id, name, data,
        signature=None if owned else _read_noted(h, repo_id, commit, signature_path(name),
                                                 kept),
        sigstore_bundle=None if owned else _read_noted(h, repo_id, commit,
                                                       sigstore_path(name), kept),
        owned=owned, pinned=pinned, where=h.describe(),
    )
    return req, policy.evaluate(req, allow=allow)


def _read_noted(h: Hub, repo_id: str, commit: str, path: str, kept: set[str] | None
                ) -> bytes | None:
    """``h.read_file``, adding ``path`` to ``kept`` where a copy the download cache kept
    answers it (one fetched before this call, which may have been damaged on its way)."""
    from kernelforge.cache import DownloadCache

    cache = getattr(h, "cache", None)
    if (kept is not None and not isinstance(h, LocalHub) and isinstance(cache, DownloadCache)
            and cache.cached_file(repo_id, commit, path) is not None):
        kept.add(path)
    return h.read_file(repo_id, commit, path)


def _choose_trusted(h: Hub, repo_id: str, commit: str, choose: Callable[[set[str]], Chosen],
                    allow: AllowArg, pinned: str | None
                    ) -> tuple[Chosen, TrustRequest, TrustDecision]:
    """A variant chosen by ``choose`` and the trust policy's decision on it.

    ``choose(kept)`` reads the variants' ``metadata.json`` and adds to ``kept`` the
    paths it took from copies the download cache kept; so do the reads of the signature
    and the sigstore bundle. A
    trusted key's signature that does not verify over such copies may be the fault of
    the copies alone: damaged on their way (by the hub, a proxy, a disk) and kept as they
    came, they would fail every later load. Online, the variant's ``metadata.json`` and
    signature are dropped from the cache and the choice and the decision are made once
    more on fresh copies, with every check: only their failure is a refusal, so a forged
    signature is still refused, after one download more. The same goes for a kept
    signature file that does not parse (truncated, say): only that copy is to blame, and
    it is never taken for an absent signature. So too a kept sigstore bundle that
    sigstore cannot read where a trusted sigstore identity would have checked it
    (:func:`_kept_unreadable_bundle`). Offline, the refusal says the kept copies may be
    damaged and names the fix. Other refusals (an untrusted key, no signature, a lock
    file's pin) are no damage and are not fetched again.
    """
    kept: set[str] = set()
    try:
        chosen = choose(kept)
        req, decision = trust_request(h, repo_id, commit, chosen[0], chosen[1], allow,
                                      pinned, kept=kept)
        decided = _kept_unreadable_bundle(h, req, commit, decision, kept)
        if decided is not None:
            return chosen, req, decided
    except (SignatureMismatchError, UnreadableSignatureError) as err:
        _drop_signed_copies(h, repo_id, commit, err, kept)
    chosen = choose(set())
    return (chosen, *trust_request(h, repo_id, commit, chosen[0], chosen[1], allow, pinned))


def variant_metadata(h: Hub, repo_id: str, commit: str, name: str,
                     locked: LockedKernel | None = None, lockfile: str = "the lock file"
                     ) -> tuple[bytes, dict[str, Any]]:
    """One variant's ``metadata.json``, bytes and parsed, read as a load reads it: checked
    against ``locked``'s pin, if any, a copy the download cache kept that fails fetched
    again once (offline, refused with the fix; see :func:`_hub_meta`). For what reads a
    variant's ``metadata.json`` without choosing the variant."""
    return _hub_meta(h, repo_id, commit, locked, lockfile)(name)


def judge_variant(
    h: Hub, repo_id: str, commit: str, name: str, allow: AllowArg, *,
    locked: LockedKernel | None = None, lockfile: str = "the lock file",
    pinned: str | None = None,
) -> tuple[bytes, dict[str, Any], TrustRequest, TrustDecision]:
    """One variant's ``metadata.json`` and the trust policy's decision on it, made as a
    load makes them, for what judges a variant without choosing it (``kernelforge lock``
    judges every variant it pins). Copies the download cache kept that fail a check are
    fetched again once online, and offline refused with the fix: a ``metadata.json``
    unlike ``locked``'s pin or that does not parse (:func:`variant_metadata`), and a
    ``metadata.json`` and signature that a trusted key's signature does not verify over
    (:func:`_choose_trusted`).

    Args:
        h: the hub.
        repo_id, commit, name: the repository, commit and variant.
        allow: ``trust_remote_code``.
        locked: the lock file's entry that pins the variant, if any.
        lockfile: the lock file, for messages.
        pinned: the lock file that pins the variant's files, if any.

    Returns:
        ``(metadata bytes, metadata, request, decision)``; the decision is made, not
        enforced.

    Raises:
        HubError, IntegrityError: the ``metadata.json`` is missing, does not parse or
            differs from the pin.
        SignatureMismatchError: a trusted key's signature does not verify, over fresh
            copies or offline.
        UnreadableSignatureError: the signature file is malformed, fresh or offline.
        TrustError: the trust store is malformed.
    """
    def choose(kept: set[str]) -> Chosen:
        data, meta = _hub_meta(h, repo_id, commit, locked, lockfile, kept)(name)
        return name, data, meta, ()

    (_name, data, meta, _trace), req, decision = _choose_trusted(h, repo_id, commit, choose,
                                                                 allow, pinned)
    return data, meta, req, decision


def _drop_signed_copies(h: Hub, repo_id: str, commit: str,
                        err: SignatureMismatchError | UnreadableSignatureError,
                        kept: set[str]) -> None:
    """Drop from the download cache the copies of the variant's ``metadata.json`` and
    signature behind ``err``, where one to blame was kept there (see
    :func:`_choose_trusted`: either, for a signature that does not verify; the signature,
    for one that does not parse); raise ``err`` where nothing kept is to blame, and
    offline raise it with the fix. Both are dropped, so that the next decision is made
    on a pair fetched together.

    Offline, the fix said first is the cache's (remove the kept copies, fetch them
    online): what is known is that they fail, not that the hub's do, and ``err``'s fix,
    publishing again, is its publisher's, and right only where fresh copies fail too."""
    from kernelforge.cache import DownloadCache
    from kernelforge.policy import REPUBLISH

    signed = [f"build/{err.variant}/metadata.json", signature_path(err.variant)]
    unreadable = isinstance(err, UnreadableSignatureError)
    cache = getattr(h, "cache", None)
    copies = [path for path in (signed[1:] if unreadable else signed) if path in kept]
    if not copies or not isinstance(cache, DownloadCache):
        raise err
    named = _cached_copies(copies)
    if getattr(h, "offline", True):
        fresh = ("copies fetched again fail too are" if len(copies) > 1 else
                 "copy fetched again fails too is")
        raise type(err)(
            f"{err.problem}; {_kept_offline(copies)}; fix: "
            f"{cache.damaged_entry_fix(repo_id, commit)}. Only where the {fresh} the hub's "
            f"own to blame, and then {REPUBLISH}", err.variant, problem=err.problem) from err
    if unreadable:
        logger.warning("kernelforge: %s: %s is not a signature file kernelforge can read; fetching "
                       "again", repo_id, named)
    else:
        logger.warning("kernelforge: %s: the signature of variant %s does not verify over %s; "
                       "fetching again", repo_id, err.variant, named)
    for path in signed:
        cache.discard_file(repo_id, commit, path)


def _cached_copies(copies: list[str]) -> str:
    """The download cache's copies of the files ``copies``, named."""
    return (f"the download cache's {'copies' if len(copies) > 1 else 'copy'} of "
            f"{' and '.join(copies)}")


def _kept_offline(copies: list[str]) -> str:
    """Why kept ``copies`` that fail a check offline may be the copies' fault alone."""
    its, are = ("their", "they are") if len(copies) > 1 else ("its", "it is")
    return (f"{_cached_copies(copies)}, kept from an earlier fetch, may be damaged (on "
            f"{its} way, or in the cache), and offline {are} not fetched again")


def _kept_unreadable_bundle(h: Hub, req: TrustRequest, commit: str,
                            decision: TrustDecision, kept: set[str]) -> TrustDecision | None:
    """The decision on a variant whose sigstore bundle, kept in the download cache, is
    one sigstore cannot read where a sigstore identity trusted for the repository would
    have checked it (``decision.unreadable_bundle``): ``None`` online where the variant
    is refused without it, the bundle and ``metadata.json`` dropped from the cache to be
    fetched again, as :func:`_drop_signed_copies` drops an unreadable signature file;
    else ``decision``.

    Unlike an unreadable signature file, such a bundle is no refusal of its own (the
    variant is judged as one without it), and a caller that enforces nothing
    (:func:`kernelforge.kernel_info`) gets the decision as before. So offline, where the
    copy is not fetched again, it is ``decision`` with a note naming the kept copy and
    the cache's fix, which the refusal, if any, says before the ways to allow the
    variant. A variant allowed or pinned all the same is
    not fetched again online either: a fresh bundle would not change whether it loads,
    and one that the hub itself serves unreadable (of a format the installed sigstore
    does not read, say) would be fetched again, with a warning, by every later load.
    """
    from kernelforge.cache import DownloadCache

    path = sigstore_path(req.variant)
    cache = getattr(h, "cache", None)
    if (not decision.unreadable_bundle or path not in kept
            or not isinstance(cache, DownloadCache)):
        return decision
    named = _cached_copies([path])
    if getattr(h, "offline", True):
        return dataclasses.replace(decision, notes=(
            *decision.notes, f"{_kept_offline([path])} (fix: "
            f"{cache.damaged_entry_fix(req.repo_id, commit)})"))
    if decision.allowed:
        return decision
    logger.warning("kernelforge: %s: %s is not a sigstore bundle that can be read; fetching again",
                   req.repo_id, named)
    for dropped in (f"build/{req.variant}/metadata.json", path):
        cache.discard_file(req.repo_id, commit, dropped)
    return None


def _cached_path(h: Hub, repo_id: str, commit: str, name: str) -> Path | None:
    """Where the variant is on disk: in a local hub, or in a remote hub's download cache
    (``None`` when not there, or there but damaged: a load fetches it again)."""
    if isinstance(h, LocalHub):
        return h.variant_path(repo_id, commit, name)
    entry = getattr(h, "cache", None)
    found = entry.entry(repo_id, commit, name) if entry is not None else None
    return found.path if found is not None and found.damaged is None else None


def locate_hub(
    repo_id: str,
    *,
    revision: str | None,
    version: int | None,
    backend: str | None,
    hub: HubArg,
    check_arch: bool,
    allow: AllowArg,
    announce: bool = True,
    loads: bool | None = None,
    judge: bool = True,
) -> Plan:
    """Locate a kernel on a hub (or in ``LOCAL_KERNELS``).

    Args:
        repo_id: ``org/name``.
        revision: branch, tag or commit (or a unique prefix of at least
            :data:`~kernelforge.revisions.MIN_COMMIT_PREFIX` hex digits); or ``None``.
        version: major version; or ``None``.
        backend: choose for this backend instead of the system's.
        hub: the ``hub=`` argument (see :func:`hub_for`).
        check_arch: check the GPU against the build's ``backend.archs``.
        allow: ``trust_remote_code``.
        announce: log the WARNING lines that say which version a load takes
            (:func:`kernelforge.revisions.select`); ``False`` when nothing is loaded.
        loads: a load follows (default: ``announce``): the redirects followed, and a
            ``LOCAL_KERNELS`` build of another version than ``version``, are logged at
            WARNING, also where ``announce`` is ``False`` (a kernel-depends entry).
        judge: make the trust decision. ``False`` for a caller that asks only which
            build would be loaded (:func:`kernelforge.has_kernel`): the signature and
            sigstore bundle are not read, so one that cannot be read or does not
            verify, which no trust lifts, is no error there.

    Returns:
        The :class:`Plan`; its trust decision is made but not enforced (with
        ``judge=False``, not made: ``request`` and ``decision`` are ``None``).
    """
    from kernelforge import revisions, variants
    from kernelforge.digest import b64_sha256

    # this process's facts once, for the backend check before the revision is chosen (and
    # announced) and for the choice of the variant
    facts = variants.detect_system() if backend is not None else None
    variants.check_backend(backend, facts)
    override = _override(local_overrides(), repo_id)
    if override is not None:
        logger.info("%s: loading from %s (%s)", repo_id, override, LOCAL_KERNELS_ENV)
        plan = locate_local(override, backend, check_arch, repo=repo_id)
        return _other_version_noted(plan, version, announce if loads is None else loads)
    from kernelforge.hub.hf import refs_listed_once

    with refs_listed_once():  # a load lists each repository's refs once
        h = hub_for(hub, repo_id)
        with hub_choice_explained(hub, h, repo_id):
            sel = revisions.select(h, repo_id, revision=revision, version=version,
                                   announce=announce, announce_redirects=loads)
        names = h.variants(sel.repo_id, sel.commit)
        where = (f"branch {sel.branch}, revision {sel.commit[:7]}" if sel.branch
                 else f"revision {sel.commit[:7]}")
        if not names:
            # a version branch whose publish has not committed (yet) says so
            raise (revisions.empty_branch_error(h, sel.repo_id, sel.branch, sel.commit)
                   or VariantNotFoundError(f"{sel.repo_id} ({where})", [],
                                           (facts or variants.detect_system()).describe(),
                                           fix=_no_build_fix(h, sel.repo_id, sel.commit)))

        def choose(kept: set[str]) -> Chosen:
            return _choose(names, _hub_meta(h, sel.repo_id, sel.commit, None, kept=kept),
                           f"{sel.repo_id} ({where})", backend, check_arch, facts)

        req: TrustRequest | None = None
        decision: TrustDecision | None = None
        if judge:
            (name, data, meta, trace), req, decision = _choose_trusted(
                h, sel.repo_id, sel.commit, choose, allow, None)
        else:
            name, data, meta, trace = choose(set())
        info = KernelInfo(sel.repo_id, sel.branch, sel.commit, name,
                          _cached_path(h, sel.repo_id, sel.commit, name), trace, meta["id"],
                          meta.get("version"), "hub", h.describe(), sel.notes,
                          "" if decision is None else str(decision))
        return Plan(info, h, req, decision, b64_sha256(data), None, meta)


def locked_what(locked: LockedKernel, lockfile: str) -> str:
    """A locked kernel in words, for messages: ``org/name (locked revision c in FILE)``."""
    return f"{locked.repo_id} (locked revision {locked.commit[:7]} in {lockfile})"


def locked_variant_names(h: Hub, locked: LockedKernel, lockfile: str) -> list[str]:
    """The variants a lock entry offers: those it pins, else (a ``kernels.lock``, which
    pins none) those ``h`` holds at the locked commit. A commit that holds no file under
    ``build/`` at all (a version branch locked between its publish's two steps) is an
    error that says so (:func:`kernelforge.revisions.empty_lock_error`), for a load and
    a download alike, rather than a load's "fits this system" or a download of nothing.
    """
    from kernelforge import revisions

    if locked.variants is not None:
        return sorted(locked.variants)
    names = h.variants(locked.repo, locked.commit)
    if not names:
        empty = revisions.empty_lock_error(h, locked.repo, locked.commit,
                                           locked_what(locked, lockfile))
        if empty is not None:
            raise empty
    return names


def _locked_chooser(h: Hub, locked: LockedKernel, *, hub: HubArg, lockfile: str,
                    backend: str | None, check_arch: bool) -> Callable[[set[str]], Chosen]:
    """How a load chooses among the variants ``locked`` pins on the hub ``h``
    (:func:`hub_for_lock` gave it for ``hub``), for :func:`_choose_trusted`; the
    variants are listed at once."""
    repo, commit = locked.repo, locked.commit
    what = locked_what(locked, lockfile)
    with lock_hub_explained(hub, locked, h):
        names = locked_variant_names(h, locked, lockfile)

    def choose(kept: set[str]) -> Chosen:
        with lock_hub_explained(hub, locked, h):
            return _choose(names, _hub_meta(h, repo, commit, locked, lockfile, kept), what,
                           backend, check_arch)

    return choose


def locked_variant_here(h: Hub, locked: LockedKernel, *, hub: HubArg, lockfile: str,
                        backend: str | None) -> str:
    """The variant of what a lock file pins that a load here takes, chosen as
    :func:`locate_locked` chooses it (GPU archs checked) but without the trust decision:
    for ``kernelforge download``, which judges each variant it fetches itself and must
    know whether a variant it cannot fetch is the one this machine loads.

    Args:
        h: the hub :func:`hub_for_lock` gave for ``hub`` and ``locked``.
        locked: the lock file's entry.
        hub: the ``hub=`` argument, for what its errors say.
        lockfile: the lock file, for messages.
        backend: choose for this backend instead of the system's.

    Raises:
        VariantNotFoundError: no variant fits here.
        HubError, IntegrityError: a ``metadata.json`` read to choose is missing, does not
            parse or differs from the lock's pin.
    """
    choose = _locked_chooser(h, locked, hub=hub, lockfile=lockfile, backend=backend,
                             check_arch=True)
    return choose(set())[0]


def locate_locked(
    locked: LockedKernel,
    *,
    lockfile: str,
    backend: str | None,
    hub: HubArg,
    check_arch: bool,
    allow: AllowArg,
    cache_only: bool,
) -> Plan:
    """Locate exactly what a lock file pins.

    Args:
        locked: the lock file's entry for the kernel.
        lockfile: the lock file, for messages.
        backend: choose for this backend instead of the system's.
        hub: the ``hub=`` argument; ``None`` uses the kind of hub the lock records
            (:func:`hub_for_lock`).
        check_arch: check the GPU against the build's ``backend.archs``.
        allow: ``trust_remote_code`` (needed only for locks without digests).
        cache_only: never use the network (a remote hub works from its download cache):
            a :func:`~kernelforge.load_kernel`, which its errors name.

    Returns:
        The :class:`Plan`, with the lock's digests of the chosen variant.
    """
    from kernelforge.digest import b64_sha256

    h = hub_for_lock(hub, locked)
    if cache_only and hasattr(h, "cache_only"):
        h = h.cache_only(for_load_kernel=True)
    repo, commit = locked.repo, locked.commit
    choose = _locked_chooser(h, locked, hub=hub, lockfile=lockfile, backend=backend,
                             check_arch=check_arch)
    # a lock with digests pins every variant's files, a lock without them none
    pinned = lockfile if locked.variants is not None else None
    (name, data, meta, trace), req, decision = _choose_trusted(h, repo, commit, choose,
                                                               allow, pinned)
    pins = locked.variants[name].files if locked.variants is not None else None
    notes: tuple[str, ...] = (f"pinned by {lockfile}: commit {commit[:12]}"
             + ("" if pins is not None else " (a lock without digests: files are checked "
                "against their metadata only)"),)
    if repo != locked.repo_id:
        notes += (f"{locked.repo_id} was redirected to {repo} when locked",)
    info = KernelInfo(repo, locked.branch, commit, name, _cached_path(h, repo, commit, name),
                      trace, meta["id"], meta.get("version"), "lock", h.describe(), notes,
                      str(decision))
    return Plan(info, h, req, decision, b64_sha256(data), pins, meta)
