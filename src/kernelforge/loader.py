"""Loading published kernels into this process: get_kernel, get_local_kernel, has_kernel.

A kernel is found (``LOCAL_KERNELS`` override, else the hub), the build variant that
fits this process is chosen with :func:`kernelforge.variants.resolve_variant`, the GPU
is checked against the build's ``backend.archs``, the files are checked against their
recorded digests, and the variant is imported as a package named after its metadata
``id`` (``_relu_cpu_a1b2c3d``), so two builds of one kernel live side by side.

Loaded modules are cached in-process twice: by the call's arguments (consulted before
anything touches the disk, so a repeated call is a dictionary look-up) and by variant
directory. Importing this module imports neither torch nor any kernel.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import sys
import threading
from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from kernelforge.digest import hash_file, hash_tree, is_excluded, verify_tree
from kernelforge.errors import HubError, IntegrityError, VariantNotFoundError
from kernelforge.hub import LocalHub, as_hub, default_root, validate_repo_id
from kernelforge.hub._staging import read_metadata

__all__ = [
    "KernelInfo",
    "LOCAL_KERNELS_ENV",
    "get_kernel",
    "get_local_kernel",
    "has_kernel",
    "kernel_info",
    "load_variant",
]

logger = logging.getLogger(__name__)

#: ``org/name=/path:org/other=/path``: repositories to load from a local build instead.
LOCAL_KERNELS_ENV = "LOCAL_KERNELS"

HubArg = LocalHub | str | os.PathLike[str] | None


@dataclass(frozen=True)
class KernelInfo:
    """Where a kernel would be (or was) loaded from, and why that variant.

    Attributes:
        repo: the repository id (``LOCAL_KERNELS`` overrides keep it), or the path
            given to :func:`get_local_kernel`.
        branch: the branch used (``v1``), ``None`` for a tag, a commit or a local build.
        commit: the hub commit id, ``None`` for a local build.
        variant: the chosen variant directory name.
        path: the variant directory on disk.
        trace: one line per candidate variant: accepted or rejected, and why.
        id: the module name the variant is imported as (metadata ``id``).
        version: the kernel version in its metadata, if any.
        source: ``"hub"`` or ``"local"``.
    """

    repo: str
    branch: str | None
    commit: str | None
    variant: str
    path: Path
    trace: tuple[str, ...]
    id: str
    version: int | None
    source: str

    def describe(self) -> str:
        """A few lines for people: what, from where, and the variant trace."""
        where = f"commit {self.commit[:12]}" if self.commit else "local build"
        if self.branch:
            where = f"branch {self.branch}, {where}"
        lines = [f"{self.repo} ({where})", f"  variant {self.variant} -> module {self.id}",
                 f"  path {self.path}"]
        lines.extend(f"  {line}" for line in self.trace)
        return "\n".join(lines)


@dataclass(frozen=True)
class _Loaded:
    module: ModuleType
    path: Path
    digest: tuple[str, tuple[tuple[str, str], ...]] | None  # (algorithm, sorted files)


_lock = threading.RLock()
_by_call: dict[Hashable, ModuleType] = {}
_by_path: dict[str, _Loaded] = {}
_by_id: dict[str, _Loaded] = {}


# --- arguments ---------------------------------------------------------------------------


def _check_selector(revision: object, version: object) -> None:
    if revision is not None and version is not None:
        raise ValueError("revision and version: pass one of them, not both")
    if revision is not None and (not isinstance(revision, str) or not revision):
        raise ValueError(f"revision: expected a branch, tag or commit, got {revision!r}")
    if version is not None and (
        isinstance(version, bool) or not isinstance(version, int) or version < 0
    ):
        raise ValueError(f"version: expected a non-negative integer, got {version!r}")


def _hub_key(hub: HubArg) -> str:
    if isinstance(hub, LocalHub):
        return str(hub.root)
    if hub is None:
        return str(default_root())
    if isinstance(hub, (str, os.PathLike)):
        return os.path.expanduser(os.fspath(hub))
    raise TypeError(f"hub: expected a LocalHub, a directory or None, got {type(hub).__name__}")


def _local_overrides() -> dict[str, Path]:
    """Parse ``LOCAL_KERNELS`` now (never at import)."""
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
        out[repo] = Path(path.strip()).expanduser()
    return out


# --- resolution ----------------------------------------------------------------------------


def _pick_revision(
    hub: LocalHub, repo_id: str, revision: str | None, version: int | None
) -> tuple[str | None, str]:
    """``(branch or None, commit)`` for the selector; newest ``v<N>`` when none is given."""
    if revision is not None:
        commit = hub.resolve(repo_id, revision)
        return (revision if revision in hub.branches(repo_id) else None), commit
    versions = hub.versions(repo_id)
    if not versions:
        branches = ", ".join(hub.branches(repo_id)) or "none"
        raise HubError(
            f"{repo_id} has no published versions in hub {hub.root} (no v<N> branch; "
            f"branches: {branches}); publish one first"
        )
    if version is None:
        newest = max(versions)
        logger.info(
            "kernelforge: loading %s version %d (branch v%d, revision %s) — pass "
            "version=%d to pin it", repo_id, newest, newest, versions[newest][:7], newest,
        )
        return f"v{newest}", versions[newest]
    if version not in versions:
        raise HubError(
            f"version {version} of {repo_id} not found in hub {hub.root}; published "
            f"versions: {', '.join(str(v) for v in versions)}"
        )
    if version < max(versions):
        logger.info("%s: loading version %d; version %d is available", repo_id, version,
                    max(versions))
    return f"v{version}", versions[version]


def _archs(meta: Mapping[str, Any]) -> list[str] | None:
    """``backend.archs`` of a metadata.json, ``None`` when absent."""
    backend = meta.get("backend")
    archs = backend.get("archs") if isinstance(backend, dict) else None
    return [str(a) for a in archs] if isinstance(archs, list) else None


def _choose(
    base: Path, names: list[str], what: str, backend: str | None, check_arch: bool
) -> tuple[str, Path, dict[str, Any], tuple[str, ...]]:
    """Resolve a variant among ``names`` under ``base``; check GPU archs in preference order.

    Returns:
        ``(variant name, variant dir, metadata, trace lines)``.
    """
    from kernelforge import variants

    facts = variants.detect_system()
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
        path = base / name
        meta = read_metadata(path)
        if not check_arch:
            return name, path, meta, tuple(trace)
        ok, reason = variants.arch_supported(_archs(meta), facts)
        if ok:
            return name, path, meta, tuple(trace)
        trace.append(f"{name}: rejected after all, {reason}")
    raise VariantNotFoundError(what, trace, facts.describe())


def _parses(name: str) -> bool:
    from kernelforge import variants
    from kernelforge.errors import VariantError

    try:
        variants.Variant.parse(name)
    except VariantError:
        return False
    return True


def _direct_variant(vdir: Path, label: str, check_arch: bool) -> KernelInfo:
    """A variant directory given by path under a name that is no variant name: the
    caller chose it, so only the GPU arch is checked."""
    from kernelforge import variants

    meta = read_metadata(vdir)
    trace = [f"{vdir.name}: accepted, given directly (not a variant name, so the torch, "
             "backend and platform tags were not checked)"]
    if check_arch:
        facts = variants.detect_system()
        ok, reason = variants.arch_supported(_archs(meta), facts)
        if not ok:
            raise VariantNotFoundError(str(vdir), [f"{vdir.name}: rejected, {reason}"],
                                       facts.describe())
    return KernelInfo(repo=label, branch=None, commit=None, variant=vdir.name, path=vdir,
                      trace=tuple(trace), id=meta["id"], version=meta.get("version"),
                      source="local")


def _resolve_local(
    path: str | os.PathLike[str], backend: str | None, check_arch: bool, repo: str | None = None
) -> KernelInfo:
    root = Path(path).expanduser()
    label = repo or str(root)
    if (root / "metadata.json").is_file():  # a variant directory itself
        base, names = root.parent, [root.name]
        if not _parses(root.name):
            return _direct_variant(root, label, check_arch)
    else:
        base = root / "build" if (root / "build").is_dir() else root
        if not base.is_dir():
            raise HubError(
                f"path: {root} does not exist (expected a project with build/, a build/ "
                "directory or a variant directory)"
            )
        names = sorted(p.name for p in base.iterdir() if p.is_dir())
    name, vdir, meta, trace = _choose(base, names, f"{label} ({base})", backend, check_arch)
    return KernelInfo(repo=label, branch=None, commit=None, variant=name, path=vdir,
                      trace=trace, id=meta["id"], version=meta.get("version"), source="local")


def _resolve(
    repo_id: str,
    revision: str | None,
    version: int | None,
    backend: str | None,
    hub: HubArg,
    check_arch: bool,
) -> tuple[KernelInfo, dict[str, str] | None]:
    """Find the kernel; returns its info and the hub's recorded digests of the variant."""
    overrides = _local_overrides()
    if repo_id in overrides:
        logger.info("%s: loading from %s (%s)", repo_id, overrides[repo_id], LOCAL_KERNELS_ENV)
        return _resolve_local(overrides[repo_id], backend, check_arch, repo=repo_id), None
    h = as_hub(hub)
    branch, commit = _pick_revision(h, repo_id, revision, version)
    names = h.variants(repo_id, commit)
    where = f"branch {branch}, revision {commit[:7]}" if branch else f"revision {commit[:7]}"
    build = h.commit_path(repo_id, commit) / "build"
    name, vdir, meta, trace = _choose(build, names, f"{repo_id} ({where})", backend, check_arch)
    prefix = f"build/{name}/"
    recorded = {
        k[len(prefix):]: v
        for k, v in h.recorded_files(repo_id, commit).items()
        if k.startswith(prefix)
    }
    info = KernelInfo(repo=repo_id, branch=branch, commit=commit, variant=name, path=vdir,
                      trace=trace, id=meta["id"], version=meta.get("version"), source="hub")
    return info, recorded


# --- importing ---------------------------------------------------------------------------


def _verify(
    variant_dir: Path, meta: Mapping[str, Any], recorded: Mapping[str, str] | None
) -> tuple[str, dict[str, str]] | None:
    """Check the files; return the ``(algorithm, files)`` digest they were checked with.

    A hub load checks against the digests the hub recorded at publish time, which
    cover ``metadata.json`` too (the metadata digest matched them when published); a
    local build is checked against its metadata digest. Without either nothing can be
    checked (builds from older tools carry no digest).
    """
    if recorded is not None:
        meta_file = variant_dir / "metadata.json"
        if "metadata.json" in recorded and hash_file(meta_file) != recorded["metadata.json"]:
            raise IntegrityError(variant_dir, ["changed: metadata.json"])
        files = {k: v for k, v in recorded.items() if not is_excluded(k)}
        verify_tree(variant_dir, files)
        block = meta.get("digest")
        return (str(block["algorithm"]), dict(block["files"])) if block else ("sha256", files)
    block = meta.get("digest")
    if block:
        verify_tree(variant_dir, block["files"], algorithm=block["algorithm"])
        return str(block["algorithm"]), dict(block["files"])
    logger.info("%s: no digest recorded; its files are not verified", variant_dir)
    return None


def _same_build(a: _Loaded, b_path: Path, b_digest: tuple[str, dict[str, str]] | None) -> bool:
    if a.digest is not None and b_digest is not None and a.digest[0] == b_digest[0]:
        return dict(a.digest[1]) == b_digest[1]
    return hash_tree(a.path) == hash_tree(b_path)


def _import_package(module_id: str, variant_dir: Path, meta: Mapping[str, Any]) -> ModuleType:
    init = variant_dir / "__init__.py"
    if not init.is_file():  # older layout: the package in a directory of its own
        nested = variant_dir / str(meta["name"]).replace("-", "_") / "__init__.py"
        if not nested.is_file():
            raise HubError(f"{variant_dir}: no __init__.py; this is not a kernel package")
        init = nested
    spec = importlib.util.spec_from_file_location(
        module_id, init, submodule_search_locations=[str(init.parent)]
    )
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {init} as {module_id}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_id] = module
    try:
        spec.loader.exec_module(module)
    except BaseException as err:
        for name in [n for n in sys.modules if n == module_id or n.startswith(module_id + ".")]:
            del sys.modules[name]
        err.add_note(f"while importing kernel {meta['name']!r} ({variant_dir}) as {module_id}")
        raise
    return module


def _load(variant_dir: Path, recorded: Mapping[str, str] | None = None) -> ModuleType:
    """Verify and import a variant, once per directory and once per module id."""
    key = os.path.abspath(variant_dir)
    loaded = _by_path.get(key)
    if loaded is not None:
        return loaded.module
    with _lock:
        loaded = _by_path.get(key)
        if loaded is not None:
            return loaded.module
        meta = read_metadata(variant_dir)
        module_id = str(meta["id"])
        digest = _verify(variant_dir, meta, recorded)
        frozen = None if digest is None else (digest[0], tuple(sorted(digest[1].items())))
        previous = _by_id.get(module_id)
        if previous is not None:
            if not _same_build(previous, variant_dir, digest):
                raise ImportError(
                    f"cannot load {variant_dir} as {module_id}: a different build with the "
                    f"same id is already loaded from {previous.path}; rebuild one of them "
                    "(ids are unique per source tree) or use a separate process"
                )
            _by_path[key] = previous
            return previous.module
        if module_id in sys.modules:
            raise ImportError(
                f"cannot load {variant_dir} as {module_id}: that module name is already "
                f"taken by {sys.modules[module_id]!r}"
            )
        module = _import_package(module_id, variant_dir, meta)
        loaded = _Loaded(module=module, path=Path(key), digest=frozen)
        _by_path[key] = loaded
        _by_id[module_id] = loaded
        return module


def load_variant(variant_dir: str | os.PathLike[str]) -> ModuleType:
    """Verify a variant directory against its digest and import it.

    Args:
        variant_dir: a ``build/<variant>`` directory with ``metadata.json``.

    Returns:
        The package, imported as ``metadata["id"]``; the same object on every call.

    Raises:
        IntegrityError: a file is changed, missing or extra (each one named).
        HubError: ``metadata.json`` or ``__init__.py`` is missing or malformed.
        ImportError: another build already holds the module name.
    """
    return _load(Path(variant_dir))


# --- public entry points -----------------------------------------------------------------


def get_kernel(
    repo_id: str,
    *,
    revision: str | None = None,
    version: int | None = None,
    backend: str | None = None,
    hub: HubArg = None,
    check_arch: bool = True,
) -> ModuleType:
    """Load a kernel from the hub (or from ``LOCAL_KERNELS``) and return its module.

    Args:
        repo_id: ``org/name``.
        revision: a branch, a tag or a commit (a unique prefix will do).
        version: the kernel version ``N`` (branch ``vN``). With neither ``revision`` nor
            ``version`` the newest ``v<N>`` branch is used and logged at INFO level.
        backend: choose the variant for this backend (``"cpu"`` or torch's own)
            instead of the system's.
        hub: a :class:`~kernelforge.hub.LocalHub`, a hub directory, or ``None`` for
            ``$KERNELFORGE_HUB`` / the user cache.
        check_arch: refuse builds whose ``backend.archs`` do not cover the GPU.

    Returns:
        The kernel package, imported under its metadata ``id``. A repeated call with the
        same arguments returns the same module without touching the disk.

    Raises:
        ValueError: both ``revision`` and ``version``, a malformed ``repo_id`` or
            ``LOCAL_KERNELS``.
        HubError: the repository, version or revision does not exist.
        VariantNotFoundError: no variant fits this system; the message lists each
            candidate and why it was rejected.
        IntegrityError: the files do not match their digests.

    Example:
        >>> relu = get_kernel("kernels-community/relu", version=1)  # doctest: +SKIP
        >>> relu.relu(out, x)  # doctest: +SKIP
    """
    validate_repo_id(repo_id)
    _check_selector(revision, version)
    key = ("hub", repo_id, revision, version, backend, _hub_key(hub), check_arch,
           os.environ.get(LOCAL_KERNELS_ENV))
    module = _by_call.get(key)
    if module is not None:
        return module
    with _lock:
        module = _by_call.get(key)
        if module is None:
            info, recorded = _resolve(repo_id, revision, version, backend, hub, check_arch)
            module = _load(info.path, recorded)
            _by_call[key] = module
    return module


def get_local_kernel(
    path: str | os.PathLike[str], *, backend: str | None = None, check_arch: bool = True
) -> ModuleType:
    """Load a kernel from a local build.

    Args:
        path: a project directory holding ``build/``, a ``build/`` directory, or one
            variant directory.
        backend: choose the variant for this backend instead of the system's.
        check_arch: refuse builds whose ``backend.archs`` do not cover the GPU.

    Returns:
        The kernel package, imported under its metadata ``id``.

    Raises:
        HubError: ``path`` does not exist or holds no kernel package.
        VariantNotFoundError: no variant fits this system (with the trace).
        IntegrityError: the files do not match their digests.
    """
    key = ("local", os.path.abspath(os.path.expanduser(os.fspath(path))), backend, check_arch)
    module = _by_call.get(key)
    if module is not None:
        return module
    with _lock:
        module = _by_call.get(key)
        if module is None:
            info = _resolve_local(path, backend, check_arch)
            module = _load(info.path)
            _by_call[key] = module
    return module


def kernel_info(
    repo_id: str,
    *,
    revision: str | None = None,
    version: int | None = None,
    backend: str | None = None,
    hub: HubArg = None,
    check_arch: bool = True,
) -> KernelInfo:
    """Say which build :func:`get_kernel` would load, without importing it.

    Args:
        repo_id, revision, version, backend, hub, check_arch: as for :func:`get_kernel`.

    Returns:
        The :class:`KernelInfo`: repository, branch, commit, variant, path and trace.

    Raises:
        As :func:`get_kernel`, except for integrity and import errors.
    """
    validate_repo_id(repo_id)
    _check_selector(revision, version)
    return _resolve(repo_id, revision, version, backend, hub, check_arch)[0]


def has_kernel(
    repo_id: str,
    *,
    revision: str | None = None,
    version: int | None = None,
    backend: str | None = None,
    hub: HubArg = None,
    check_arch: bool = True,
) -> bool:
    """Whether :func:`get_kernel` would find a build for this system.

    Args:
        repo_id, revision, version, backend, hub, check_arch: as for :func:`get_kernel`.

    Returns:
        ``False`` when the repository, version, revision or a fitting variant is missing;
        it does not import or verify anything.

    Raises:
        ValueError: malformed arguments (both ``revision`` and ``version``, ...).
    """
    validate_repo_id(repo_id)
    _check_selector(revision, version)
    try:
        _resolve(repo_id, revision, version, backend, hub, check_arch)
    except (HubError, VariantNotFoundError):
        return False
    return True
