"""Loading published kernels into this process.

``get_kernel`` (a hub), ``get_locked_kernel`` / ``load_kernel`` (exactly what a lock
file pins, the kernel's ``kernel-depends`` included), ``get_local_kernel`` (a build on
disk), plus ``has_kernel`` and ``kernel_info``. A load goes: locate
(:mod:`kernelforge.locate`: hub, revision, variant, trust decision), enforce the trust
policy (:mod:`kernelforge.policy`), fetch the variant (a remote hub downloads it into
the download cache once), verify every file against every digest known for it (the
metadata digest, the hub's or the cache's record, the lock file), and only then import
the package under its metadata ``id`` (``_relu_cpu_a1b2c3d``), so two builds of one
kernel live side by side. The package and its submodules are compiled from their checked
sources: no digest covers bytecode, so none is read from ``__pycache__`` and none is
written into the variant.

A cached remote variant that fails verification is fetched again once, and so is a
damaged cache entry (its ``files/`` or ``metadata.json`` gone); everything else that
fails verification is refused with the files named. Loaded modules are cached
in-process twice: by the call's arguments (consulted before anything touches the disk,
so a repeated call is a dictionary look-up; a local build, from ``get_local_kernel`` or
``LOCAL_KERNELS``, has its chosen variant's ``metadata.json`` read and hashed again, so
that a rebuild is loaded) and by variant directory. Importing this module imports
neither torch nor any kernel.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import importlib.abc
import importlib.machinery
import importlib.util
import logging
import os
import sys
import threading
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import CodeType, ModuleType
from typing import TYPE_CHECKING, Any

from kernelforge._paths import HERE, refuse_empty_path
from kernelforge.errors import (
    HubError,
    IntegrityError,
    KernelforgeError,
    TrustError,
    VariantNotFoundError,
)
from kernelforge.hub import LocalHub
from kernelforge.hub._staging import read_metadata
from kernelforge.hub.base import Hub, Same, is_hub, validate_repo_id
from kernelforge.locate import LOCAL_KERNELS_ENV, HubArg, KernelInfo, Plan

if TYPE_CHECKING:  # pragma: no cover
    from kernelforge.lock import LockedKernel, LockFile

__all__ = [
    "LOCAL_KERNELS_ENV",
    "KernelInfo",
    "get_kernel",
    "get_local_kernel",
    "get_locked_kernel",
    "has_kernel",
    "kernel_info",
    "load_kernel",
    "load_variant",
]

logger = logging.getLogger(__name__)

TrustArg = bool | Sequence[str]


@dataclass(frozen=True)
class _Loaded:
    module: ModuleType
    path: Path
    digest: tuple[tuple[str, str], ...]  # sha256 of every file, sorted
    dirty: str | None = None  # the warning for a build from a dirty git tree
    metadata_sha256: str = ""  # of the metadata.json it was loaded with (hex)


@dataclass(frozen=True)
class _Anchors:
    metadata_sha256: str | None = None
    recorded: Mapping[str, str] | None = None
    locked: Mapping[str, str] | None = None


_lock = threading.RLock()
_resolving = threading.local()  # .chain: the kernels whose dependencies are being loaded
_by_call: dict[Hashable, ModuleType] = {}
_by_path: dict[str, _Loaded] = {}
_by_id: dict[str, _Loaded] = {}
_importing: dict[str, int] = {}  # module id -> the thread running its import


def _after_fork_in_child() -> None:
    """In a child made by ``os.fork``, where only the forking thread lives on: a new
    lock, since one that another thread held at the fork would never be released, and
    the imports other threads were running forgotten (their half-made modules taken out
    of ``sys.modules``, and Python's import locks of their modules dropped), so that a
    load here imports such a kernel afresh."""
    global _lock
    _lock = threading.RLock()
    me = threading.get_ident()
    for module_id, thread in list(_importing.items()):
        if thread == me:
            continue  # forked from inside that import: it goes on here
        del _importing[module_id]
        _forget_import(module_id)
        _forget_module_locks(module_id)


def _forget_module_locks(module_id: str) -> None:
    """Drop Python's import locks of a kernel package's modules in a forked child: the
    parent's thread that was importing one of them (its ``_ops.py``, say) holds its lock
    and is gone here, so the child's import of the kernel would wait on it forever.
    Python makes a new lock for a name that has none."""
    import importlib._bootstrap as bootstrap

    locks = getattr(bootstrap, "_module_locks", None)  # name -> weakref to its lock
    if not isinstance(locks, dict):
        return
    for name in [n for n in locks if n == module_id or n.startswith(module_id + ".")]:
        locks.pop(name, None)


def _forget_import(module_id: str) -> None:
    """Take a kernel package whose import did not finish out of ``sys.modules`` (its
    submodules too) and out of the finder, so that a later load imports it afresh."""
    for name in [n for n in sys.modules if n == module_id or n.startswith(module_id + ".")]:
        del sys.modules[name]
    _finder.packages.pop(module_id, None)
    _finder.dependencies.pop(module_id, None)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


# --- arguments ---------------------------------------------------------------------------


def _check_selector(revision: object, version: object) -> None:
    """Refuse a ``revision``/``version`` pair no load can use. A blank ``revision``
    (``" "``, an unset variable quoted) names no branch, tag or commit: refused here as
    an empty one is, rather than sent to the hub (where :func:`has_kernel` said ``False``
    as if the repository lacked it)."""
    if revision is not None and version is not None:
        raise ValueError("revision and version: pass one of them, not both")
    if revision is not None and (not isinstance(revision, str) or not revision.strip()):
        raise ValueError(f"revision: expected a branch, tag or commit, got {revision!r}")
    if version is not None and (
        isinstance(version, bool) or not isinstance(version, int) or version < 0
    ):
        raise ValueError(f"version: expected a non-negative integer, got {version!r}")


def _hub_key(hub: HubArg) -> Hashable:
    """What identifies the hub a load with ``hub=`` reads, computed without touching the
    disk. A local hub is named by its absolute root, since a relative one names another
    hub after a change of directory (``LocalHub`` reads its root against the current
    directory); ``None`` by the hubs it stands for now (``$KERNELFORGE_HUB``, else the
    local hub in the user cache or the Hugging Face Hub)."""
    from kernelforge.hub import HF_NAMES
    from kernelforge.hub.local import HUB_ENV, default_root

    if isinstance(hub, LocalHub):
        return ("local", str(hub.root.absolute()))
    if hub is None:
        hf = _hf_key()
        if os.environ.get(HUB_ENV, "").strip().lower() in HF_NAMES:
            return ("default", hf)
        return ("default", str(default_root().absolute()), hf)
    if isinstance(hub, str) and hub.lower() in HF_NAMES:
        return _hf_key()
    if isinstance(hub, (str, os.PathLike)):
        # as LocalHub reads it; Path.absolute keeps '..', which may follow a link
        return ("local", str(Path(os.path.expanduser(hub)).absolute()))
    key = getattr(hub, "cache_key", None)
    if is_hub(hub) and callable(key):
        return key()
    if is_hub(hub):
        return ("hub", Same(hub))  # held: no later hub takes its id
    raise TypeError(f"hub: expected a LocalHub, an HfHub, 'hf', a directory or None, got "
                    f"{type(hub).__name__}")


def _hf_key() -> Hashable:
    """:meth:`HfHub.cache_key <kernelforge.hub.hf.HfHub.cache_key>` of the Hugging Face Hub
    ``hub="hf"`` makes now (its download cache is ``$KERNELFORGE_CACHE``)."""
    from kernelforge.hub.hf import HfHub

    return HfHub().cache_key()


def _cached(key: Hashable, make: Any) -> ModuleType:
    module = _by_call.get(key)
    if module is not None:
        return module
    with _lock:
        module = _by_call.get(key)
        if module is None:
            module = make()
            _by_call[key] = module
    return module


# --- importing ---------------------------------------------------------------------------


# Every file of a kernel being (or once) imported, by absolute path, with the sha256 it
# was verified with: the import runs exactly those bytes, or nothing.
_verified: dict[str, str] = {}


def _expected_digest(where: str) -> str:
    """The sha256 a kernel file (an absolute path) was verified with; a file that no digest
    covers is refused, naming it."""
    expected = _verified.get(where)
    if expected is None:
        raise IntegrityError(os.path.dirname(where), [
            f"extra: {os.path.basename(where)} (no digest covers it: it appeared after the "
            "kernel was verified, or it is bytecode; refusing to import it. Remove it, or "
            "fetch or publish the kernel again)"])
    return expected


def _refuse_changed(where: str) -> IntegrityError:
    return IntegrityError(os.path.dirname(where), [
        f"changed: {os.path.basename(where)} (after the kernel was verified, before "
        "its import; something is writing to the kernel's files: load it from a "
        "directory only you can write)"])


def _checked_bytes(path: str) -> bytes:
    """The bytes of a kernel file, read once and checked against the digest it was
    verified with, so that what runs is what was verified (a file changed, swapped or
    added between the check and the import is refused, naming it)."""
    from kernelforge.digest import b64_sha256

    where = os.path.abspath(path)
    expected = _expected_digest(where)
    with open(where, "rb") as f:
        data = f.read()
    if b64_sha256(data) != expected:
        raise _refuse_changed(where)
    return data


def _check_file(path: str) -> None:
    """:func:`_checked_bytes` for a file whose bytes are not needed here (an extension,
    which the dynamic loader reads itself): hashed as a stream, never held in memory.

    Hashed every time: a file whose inode, size and times are as they were at the
    verification may still hold other bytes (written through a writable mapping made
    before it, which sets no time), which only reading it tells."""
    from kernelforge.digest import hash_file

    where = os.path.abspath(path)
    if hash_file(where) != _expected_digest(where):
        raise _refuse_changed(where)


def _remember_source(path: str, data: bytes) -> None:
    """Give :mod:`linecache` the checked source of a kernel module, as the text of
    ``path``: what reads a function's source back (``inspect.getsource``, which
    TorchScript and Triton's ``@jit`` compile from, and tracebacks) then reads the
    verified text, not the file as it is by then. An entry with no modification time is
    one that linecache never checks against the file."""
    import linecache

    lines = importlib.util.decode_source(data).splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n"
    linecache.cache[path] = (len(data), None, lines, path)


class _SourceOnlyLoader(importlib.machinery.SourceFileLoader):
    """Compiles a module from its verified source every time: it reads no bytecode from
    ``__pycache__``, which no digest covers, writes none into the variant, and compiles
    the very bytes it checked against the digest (which are also what
    ``inspect.getsource`` gives for its functions: :func:`_remember_source`)."""

    def get_code(self, fullname: str) -> CodeType:
        path = self.get_filename(fullname)
        data = _checked_bytes(path)
        _remember_source(path, data)
        return self.source_to_code(data, path)


class _VerifiedExtensionLoader(importlib.machinery.ExtensionFileLoader):
    """Loads an extension module by its path right after checking the file against its
    digest (the dynamic loader reads it again, so a file swapped in that instant is not
    caught: keep kernels in directories only you can write, and, for a local build whose
    files are links, the directories they lead to as well)."""

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        _check_file(self.path)
        return super().create_module(spec)  # type: ignore[no-any-return]


class _RefusedBytecode(importlib.machinery.SourcelessFileLoader):
    """Sourceless bytecode found beside a kernel's modules: never loaded (no digest
    covers bytecode); listed so that the finder refuses it rather than letting Python's
    own finders run it."""

    def get_code(self, fullname: str) -> CodeType:
        _expected_digest(os.path.abspath(self.get_filename(fullname)))  # raises
        raise IntegrityError(os.path.dirname(self.path), [
            f"bytecode: {os.path.basename(self.path)} (refusing to import it)"])


_LOADERS: tuple[tuple[Any, list[str]], ...] = (
    (_VerifiedExtensionLoader, importlib.machinery.EXTENSION_SUFFIXES),
    (_SourceOnlyLoader, importlib.machinery.SOURCE_SUFFIXES),
    (_RefusedBytecode, importlib.machinery.BYTECODE_SUFFIXES),
)  # what a plain directory finder offers, each file checked against its digest


class _VariantDirectory:
    """The path entry finder of one directory of a loaded kernel, kept in
    ``sys.path_importer_cache``: Python's path finder, asked when the kernel's finder
    finds nothing (a missing module, or a package whose ``__path__`` also names other
    directories), looks in the variant again through it, so a module file planted
    meanwhile meets the same checks. A top-level name (the directory may also be on
    ``sys.path``) is checked too when it finds one of the kernel's files, as a kernel
    importing its own modules that way does; a file no kernel ships (a user's script
    beside it) is found with Python's own finder for the directory."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.checked = importlib.machinery.FileFinder(path, *_LOADERS)
        self._plain: Any = None

    def find_spec(self, fullname: str,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if fullname.partition(".")[0] in _finder.packages:
            return self.checked.find_spec(fullname, target)
        spec = self.checked.find_spec(fullname, target)
        if spec is not None and (spec.origin is None
                                 or os.path.abspath(spec.origin) in _verified):
            return spec  # one of the kernel's own files (or a folder of the kernel)
        if self._plain is None:
            for hook in sys.path_hooks:  # what Python's path finder would have made
                if hook is _variant_path_hook:
                    continue
                try:
                    self._plain = hook(self.path)
                    break
                except ImportError:
                    continue
        return self._plain.find_spec(fullname, target) if self._plain is not None else None

    def invalidate_caches(self) -> None:
        self.checked.invalidate_caches()
        if self._plain is not None and hasattr(self._plain, "invalidate_caches"):
            self._plain.invalidate_caches()

    def iter_modules(self, prefix: str = "") -> Any:
        """For :func:`pkgutil.iter_modules` over a kernel package's ``__path__``."""
        import pkgutil

        return pkgutil.iter_importer_modules(self.checked, prefix)  # type: ignore[attr-defined]


class _KernelFinder(importlib.abc.MetaPathFinder):
    """Finds the modules of loaded kernel packages inside their variant directories with
    loaders that check every file against its digest (:func:`_checked_bytes`), so that no
    submodule import runs bytecode or a file that no digest covers. Inside a variant
    directory it is the only finder: a module file that is not verified is refused,
    never left to Python's own finders, whose path finder uses this finder's per-directory
    finders (:class:`_VariantDirectory`) for the variant's directories."""

    def __init__(self) -> None:
        self.packages: dict[str, tuple[str, str]] = {}  # module id -> (__init__.py, root)
        self.dependencies: dict[str, Mapping[str, ModuleType]] = {}  # its kernel-depends
        self._finders: dict[str, _VariantDirectory] = {}

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        top = fullname.partition(".")[0]
        package = self.packages.get(top)
        if package is None:
            return None
        init, root = package
        if fullname == top:  # importlib.reload of the package itself
            return _package_spec(fullname, Path(init), self.dependencies.get(top, {}))
        portions: list[str] = []  # folders without __init__.py: a namespace package
        foreign = False
        for entry in path or ():
            where = os.path.abspath(entry)
            if where != root and not where.startswith(root + os.sep):
                foreign = True  # the package extended its __path__: not ours to judge
                continue
            spec = self.directory(where).checked.find_spec(fullname, target)
            if spec is None:
                continue
            if spec.loader is not None:
                if spec.origin is None or os.path.abspath(spec.origin) not in _verified:
                    _expected_digest(os.path.abspath(spec.origin or where))  # raises
                return spec
            portions.extend(spec.submodule_search_locations or ())
        if portions and not foreign:
            # Made here rather than left to Python's own finders, which would look in the
            # variant again: a module file planted meanwhile would run unverified.
            spec = importlib.machinery.ModuleSpec(fullname, None, is_package=True)
            # The path type Python's own namespace packages have (importlib.resources
            # needs it); a plain list where this Python has no such type.
            namespace_path = getattr(importlib._bootstrap_external, "_NamespacePath", None)
            spec.submodule_search_locations = (
                portions if namespace_path is None
                else namespace_path(fullname, portions, self._namespace_portions))
            return spec
        return None  # directories outside the variant: the usual finders

    def directory(self, where: str) -> _VariantDirectory:
        """The finder of one directory (absolute) of a loaded kernel."""
        finder = self._finders.get(where)
        if finder is None:
            finder = self._finders[where] = _VariantDirectory(where)
        return finder

    def _namespace_portions(self, fullname: str,
                            path: Sequence[str] | None) -> importlib.machinery.ModuleSpec | None:
        # What a namespace package's path asks when its parent's path changes: the spec
        # with its portions as a plain list, as Python's path finder gives them.
        spec = self.find_spec(fullname, path)
        if spec is not None and spec.loader is None and spec.submodule_search_locations:
            spec.submodule_search_locations = list(spec.submodule_search_locations)
        return spec

    def invalidate_caches(self) -> None:
        for finder in self._finders.values():
            finder.invalidate_caches()


_finder = _KernelFinder()


def _variant_path_hook(path: str) -> _VariantDirectory:
    """First of ``sys.path_hooks`` once a kernel is loaded: the path entry finder of a
    directory inside a loaded variant is the kernel's (:class:`_VariantDirectory`), also
    for a top-level import through ``sys.path`` that no relative import preceded, and
    after ``sys.path_importer_cache`` was cleared. Other directories: Python's hooks."""
    where = os.path.abspath(path or os.getcwd())
    for _init, root in list(_finder.packages.values()):
        if where == root or where.startswith(root + os.sep):
            return _finder.directory(where)
    raise ImportError(f"{path!r} is not a directory of a loaded kernel")


def _guard_directories(root: str) -> None:
    """Install :func:`_variant_path_hook`, and give the finders Python already cached
    for the variant's directories (a ``sys.path`` entry imported from before the kernel
    was loaded) to the kernel."""
    if _variant_path_hook not in sys.path_hooks:
        sys.path_hooks.insert(0, _variant_path_hook)
    for key in list(sys.path_importer_cache):
        where = os.path.abspath(key or os.getcwd()) if isinstance(key, str) else None
        if where is not None and (where == root or where.startswith(root + os.sep)):
            sys.path_importer_cache[key] = _finder.directory(where)


class _PackageLoader(_SourceOnlyLoader):
    """The loader of a kernel package's ``__init__.py``, which it runs where the kernel's
    ``kernel-depends`` are visible (:func:`_dependency_context`): at its import and at an
    ``importlib.reload``."""

    def __init__(self, fullname: str, path: str, deps: Mapping[str, ModuleType]) -> None:
        super().__init__(fullname, path)
        self.deps = deps

    def exec_module(self, module: ModuleType) -> None:
        with _dependency_context(self.deps):
            super().exec_module(module)


def _package_spec(module_id: str, init: Path,
                  deps: Mapping[str, ModuleType]) -> importlib.machinery.ModuleSpec:
    spec = importlib.util.spec_from_file_location(
        module_id, init, loader=_PackageLoader(module_id, str(init), deps),
        submodule_search_locations=[str(init.parent)],
    )
    if spec is None:  # pragma: no cover - a .py path always gives a spec
        raise ImportError(f"cannot import {init} as {module_id}")
    return spec


def _package_init(variant_dir: Path, meta: Mapping[str, Any]) -> Path:
    init = variant_dir / "__init__.py"
    if not init.is_file():  # older layout: the package in a directory of its own
        nested = variant_dir / str(meta["name"]).replace("-", "_") / "__init__.py"
        if not nested.is_file():
            raise HubError(f"{variant_dir}: no __init__.py; this is not a kernel package")
        init = nested
    return init


def _add_note(err: BaseException, note: str) -> None:
    """Add ``note`` to ``err``'s ``__notes__``, as ``add_note`` does on Python >= 3.11. On
    3.10 the list is kept by hand (PEP 678's way), so code and tools that read the notes,
    pytest's reports among them, see the same context there."""
    if sys.version_info >= (3, 11):
        err.add_note(note)
        return
    try:
        notes = err.__dict__.setdefault("__notes__", [])
    except AttributeError:  # pragma: no cover - an exception without a __dict__
        return
    if isinstance(notes, list):
        notes.append(note)


def _import_package(module_id: str, variant_dir: Path, meta: Mapping[str, Any],
                    deps: Mapping[str, ModuleType], files: Mapping[str, str]) -> ModuleType:
    root = os.path.abspath(variant_dir)
    _verified.update({os.path.join(root, *rel.split("/")): sha for rel, sha in files.items()})
    # From the absolute directory: a relative __path__ would name another directory once
    # the process changes its working directory, and the finder would not guard it.
    init = _package_init(Path(root), meta)
    spec = _package_spec(module_id, init, deps)
    loader = spec.loader
    if loader is None:  # pragma: no cover - _package_spec always sets one
        raise ImportError(f"cannot import {init} as {module_id}")
    module = importlib.util.module_from_spec(spec)
    if _finder not in sys.meta_path:
        sys.meta_path.insert(0, _finder)
    _finder.packages[module_id] = (str(init), root)
    _finder.dependencies[module_id] = deps
    _guard_directories(root)
    sys.modules[module_id] = module
    _importing[module_id] = threading.get_ident()
    try:
        loader.exec_module(module)
    except BaseException as err:
        _forget_import(module_id)
        _add_note(err, f"while importing kernel {meta['name']!r} ({variant_dir}) as {module_id}")
        raise
    finally:
        _importing.pop(module_id, None)
    return module


# kernel-builder's python-depends names: (the package to install, the module it provides,
# None for a package without Python code). A name not listed is taken as both.
_PYTHON_DEPENDS = {
    "einops": ("einops", "einops"),
    "helion": ("helion", "helion"),
    "tvm-ffi": ("apache-tvm-ffi", "tvm_ffi"),
    "nvidia-cutlass-dsl": ("nvidia-cutlass-dsl", "cutlass"),
    "nki": ("nki", "nki"),
    "onednn": ("onednn-devel", None),
}


def _installed(module: str) -> bool:
    """Whether ``module`` can be imported; for a dotted one (``ruamel.yaml``), also
    ``False`` when its top package is absent, where ``find_spec`` raises instead."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package missing, or an empty part
        return False


def _check_python_depends(variant_dir: Path, meta: Mapping[str, Any]) -> None:
    """Refuse, before importing anything, a kernel whose ``python-depends`` are not
    installed, naming the package to install."""
    names = meta.get("python-depends") or []
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise HubError(f"{variant_dir}: metadata.json 'python-depends' must be a list of "
                       f"names, got {names!r}")
    missing = []
    for name in names:
        package, module = _PYTHON_DEPENDS.get(name, (name, name.replace("-", "_")))
        if module is not None and not _installed(module):
            missing.append(package)
    if missing:
        raise ImportError(
            f"{variant_dir}: kernel {meta.get('name')!r} needs the Python package(s) "
            f"{', '.join(missing)} (its python-depends), not installed here; fix: pip install "
            f"{' '.join(missing)}")


def _dependency_context(deps: Mapping[str, ModuleType]) -> contextlib.AbstractContextManager[Any]:
    """What makes ``deps`` visible to the kernel's import: a kernel gets its
    ``kernel-depends`` through Hugging Face's ``kernels.get_kernel_dep(repo_id)``, which
    answers inside ``kernels.deps.use_kernel_deps``."""
    if not deps:
        return contextlib.nullcontext()
    try:
        from kernels.deps import use_kernel_deps  # type: ignore[import-untyped]
    except ImportError:  # the kernel's own 'import kernels' fails then, and says so
        return contextlib.nullcontext()
    return use_kernel_deps(dict(deps))  # type: ignore[no-any-return]


DepsLoader = Callable[[Mapping[str, Any]], dict[str, ModuleType]]


Pin = tuple[str, int | None, str | None]  # (repository, version, revision); None: not known


@dataclass(frozen=True)
class _LockPins:
    """The lock a kernel was loaded from: its entry's ``depends`` pins the kernel's
    ``kernel-depends``, and theirs."""

    lock: LockFile
    top: LockedKernel  # the entry of the kernel the load started from


def _same_kernel(a: Pin, b: Pin) -> bool:
    """Whether two pins can name the same build (a version or revision not known matches
    any)."""
    return a[0] == b[0] and all(x is None or y is None or x == y
                                for x, y in zip(a[1:], b[1:], strict=True))


def _dependencies(parent: str, hub: HubArg, backend: str | None, check_arch: bool,
                  allow: TrustArg, cache_only: bool = False,
                  pin: Pin | None = None, locks: _LockPins | None = None) -> DepsLoader:
    """A loader of a kernel's ``kernel-depends``: each one through :func:`get_kernel`, with
    the same hub, backend, architecture check and trust allowance as the kernel itself
    (so verified and trusted the same way), from the download cache alone with
    ``cache_only``; a cycle (the same repository and version again) is refused. With
    ``locks``, each one the lock pins loads exactly as pinned (commit and files, as
    :func:`get_locked_kernel` loads a kernel), and one it does not pin through
    :func:`get_kernel`, with a WARNING log line."""
    def load(meta: Mapping[str, Any]) -> dict[str, ModuleType]:
        entries = meta.get("kernel-depends") or []
        where = f"{parent}: metadata.json 'kernel-depends'"
        if not isinstance(entries, list):
            raise HubError(f"{where} must be a list of {{repo-id, version | revision}}")
        # (repo, version, revision) of each kernel whose dependencies are being loaded
        chain: list[Pin] = getattr(_resolving, "chain", [])
        _resolving.chain = chain
        root = not chain
        if root:
            chain.append(pin or (parent, None, None))
        try:
            pins = [_pinned(entry, where) for entry in entries]
            return {wanted[0]: _load_one(wanted, chain) for wanted in pins}
        finally:
            if root:
                chain.pop()

    def _pinned(entry: object, where: str) -> Pin:
        from kernelforge.lock import dependency_key  # the one reading of such entries

        try:
            return dependency_key(entry)
        except ValueError as err:
            raise HubError(f"{where}: entry {entry!r} is not {{repo-id, version | revision}} "
                           f"({err}); ask the kernel's publisher to fix its metadata") from None

    def _load_one(wanted: Pin, chain: list[Pin]) -> ModuleType:
        repo_id = wanted[0]
        if any(_same_kernel(wanted, c) for c in chain):
            names = [c[0] for c in chain]
            raise HubError(f"cyclic kernel dependency: {' -> '.join([*names, repo_id])}")
        chain.append(wanted)
        try:
            if locks is not None:
                pinned = _lock_pin(locks, wanted)
                if pinned is not None:
                    return _load_pinned(locks, wanted, pinned)
            return _load_unpinned(wanted)
        except Exception as err:
            _add_note(err, f"while loading {repo_id}, a kernel-depends entry of {parent}")
            raise
        finally:
            chain.pop()

    def _lock_pin(locks: _LockPins, wanted: Pin) -> LockedKernel | None:
        from kernelforge.lock import warn_unpinned

        depends = locks.top.depends  # keyed by request, as _pinned checked ``wanted``
        found = depends.get(wanted) if depends is not None else None
        if found is None:
            warn_unpinned(logger, locks.lock, locks.top, wanted, parent)
        return found

    def _load_pinned(locks: _LockPins, wanted: Pin, dep: LockedKernel) -> ModuleType:
        from kernelforge.locate import locate_locked
        from kernelforge.policy import allow_key

        lockfile = str(locks.lock.path)
        key = ("pinned", lockfile, locks.top.repo_id, wanted, dep.repo, dep.commit, backend,
               _hub_key(hub), check_arch, allow_key(allow), cache_only)
        return _cached(key, lambda: _load_plan(
            locate_locked(dep, lockfile=lockfile, backend=backend, hub=hub,
                          check_arch=check_arch, allow=allow, cache_only=cache_only),
            _dependencies(dep.repo_id, hub, backend, check_arch, allow, cache_only,
                          pin=wanted, locks=locks)))

    def _load_unpinned(wanted: Pin) -> ModuleType:
        repo_id, version, revision = wanted
        dep_hub: HubArg = hub
        if cache_only:
            from kernelforge.locate import hub_for

            found = hub_for(hub, repo_id)
            dep_hub = (found.cache_only(for_load_kernel=True) if hasattr(found, "cache_only")
                       else found)
        return _get_kernel(repo_id, revision, version, backend, dep_hub, check_arch, allow,
                           announce=False)

    return load


def _loaded_elsewhere(
    module: ModuleType, variant_dir: Path, meta: Mapping[str, Any],
    digest: tuple[tuple[str, str], ...],
) -> tuple[Path | None, bool]:
    """Where another loader (Hugging Face's ``kernels``, say) imported ``module`` from,
    and whether the files there are the ones verified in ``variant_dir``.

    Returns:
        ``(its variant directory, same files)``; ``(None, False)`` when the module is
        not a kernel package imported from a variant directory.
    """
    from kernelforge.digest import hash_tree

    file = getattr(module, "__file__", None)
    if not isinstance(file, str):
        return None, False
    rel = _package_init(variant_dir, meta).relative_to(variant_dir).parts
    theirs = Path(os.path.abspath(file))
    if theirs.parts[-len(rel):] != rel:
        return None, False
    other = theirs.parents[len(rel) - 1]
    if not (other / "metadata.json").is_file():
        return None, False
    try:  # bytecode left out: this process already ran whatever it ran; links followed:
        # Hugging Face's download cache links each file to a blob
        return other, tuple(sorted(hash_tree(other, follow_links=True).items())) == digest
    except (OSError, IntegrityError):
        return other, False


def _read_metadata_once(variant_dir: Path) -> tuple[bytes, dict[str, Any]]:
    """A variant's ``metadata.json``: its bytes, read once, and what they parse to (the
    digests checked are those of the bytes parsed, whatever a second read would give)."""
    from kernelforge.hub._staging import parse_metadata

    path = variant_dir / "metadata.json"
    if not path.is_file():
        read_metadata(variant_dir)  # raises, saying it is missing
    try:
        data = path.read_bytes()
    except OSError as err:
        raise HubError(f"{path}: cannot be read ({err})") from err
    return data, parse_metadata(data, str(path))


def _dirty_warning(variant_dir: Path, meta: Mapping[str, Any]) -> str | None:
    """The warning for a build whose ``provenance`` says it was built from a git tree with
    uncommitted changes (the kernel's or the builder's), as Hugging Face's ``kernels``
    warns; ``None`` for a clean build or one without that provenance."""
    prov = meta.get("provenance")
    if not isinstance(prov, Mapping):
        return None
    dirty = []
    for key, what in (("kernel", "the kernel source"), ("kernel-builder", "the builder")):
        entry = prov.get(key)
        if isinstance(entry, Mapping) and entry.get("dirty") is True:
            commit = entry.get("commit")
            at = f" at commit {commit[:12]}" if isinstance(commit, str) and commit else ""
            dirty.append(f"{what}{at}")
    if not dirty:
        return None
    from kernelforge.cache import variant_name

    return (f"kernel {meta.get('name')!r} variant {variant_name(variant_dir)} "
            f"({variant_dir}) was built from a dirty git tree ({' and '.join(dirty)} had "
            "uncommitted changes): its recorded git revision does not fully identify the "
            "sources it was built from, so the build may not be reproducible")


def _announced(loaded: _Loaded) -> ModuleType:
    """``loaded.module``, after the WARNING of a build from a dirty tree (once per load)."""
    if loaded.dirty is not None:
        logger.warning("kernelforge: %s", loaded.dirty)
    return loaded.module


def _load(variant_dir: Path, anchors: _Anchors = _Anchors(),
          deps: DepsLoader | None = None, follow_links: bool = False) -> ModuleType:
    """Verify and import a variant, once per directory and once per module id.

    Bytecode under ``__pycache__`` is left out of the check (Python, other loaders and
    older kernelforge versions write it; the import never reads it); a ``*.pyc``
    elsewhere, which a plain import would run in place of a missing source, is refused.
    With ``follow_links`` (a local build), a file that is a symbolic link to a regular
    file is verified and imported through the link (the bytes imported are checked
    against the digest); every other link is refused. A hub's or the download cache's
    copy holds regular files only: a link there is refused.
    The kernels its metadata lists in ``kernel-depends`` are loaded first, by ``deps``
    (default: as :func:`get_kernel` does with its defaults), and handed to its import.
    A build from a dirty git tree is loaded with a WARNING log line saying so.
    """
    from kernelforge.digest import verify_variant

    key = os.path.abspath(variant_dir)
    loaded = _by_path.get(key)
    if loaded is not None and _still_there(loaded):
        return _announced(loaded)
    with _lock:
        loaded = _by_path.get(key)
        if loaded is not None and _still_there(loaded):
            return _announced(loaded)
        data, meta = _read_metadata_once(variant_dir)
        meta_digest = hashlib.sha256(data).hexdigest()  # what _still_there compares
        module_id = str(meta["id"])
        actual = verify_variant(variant_dir, meta, metadata_sha256=anchors.metadata_sha256,
                                recorded=anchors.recorded, locked=anchors.locked,
                                bytecode="allow-pycache", metadata_data=data,
                                follow_links=follow_links)
        if not meta.get("digest") and anchors == _Anchors():
            logger.info("%s: no digest recorded; its files are not verified", variant_dir)
        digest = tuple(sorted(actual.items()))
        dirty = _dirty_warning(variant_dir, meta)
        # Keyed without one leading '_': ids are the op namespace, which builds made
        # before kernelforge wrote that '_' left out (relu_cpu_<uid>), so a build of the
        # same sources from either is the same extension (torch aborts the process when
        # a namespace is registered twice).
        id_key = module_id.removeprefix("_")
        previous = _by_id.get(id_key)
        if previous is not None:
            if previous.digest != digest:
                raise ImportError(
                    f"cannot load {variant_dir} as {module_id}: a different build with the "
                    f"same id is already loaded from {previous.path}; rebuild one of them "
                    "(ids are unique per source tree) or use a separate process"
                )
            # this directory's own entry: its metadata.json is the one to watch for a
            # rebuild here, not that of the directory it was first loaded from
            _by_path[key] = dataclasses.replace(
                previous, path=Path(key), dirty=dirty,
                metadata_sha256=meta_digest)
            return _announced(_by_path[key])
        taken = sys.modules.get(module_id)
        if taken is not None:
            other, same = _loaded_elsewhere(taken, variant_dir, meta, digest)
            if other is None:
                raise ImportError(
                    f"cannot load {variant_dir} as {module_id}: that module name is already "
                    f"taken by {taken!r}; the kernel's metadata id must not name another "
                    "module (rebuild it with a current builder, which makes ids unique)"
                )
            if not same:
                raise ImportError(
                    f"cannot load {variant_dir} as {module_id}: another loader (such as "
                    f"Hugging Face's kernels) already imported a build with different "
                    f"files under that name from {other}; load only one of the two builds "
                    "in this process, or use a separate process for the other"
                )
            logger.info("%s: reusing module %s, which another loader imported from %s "
                        "(the same files)", variant_dir, module_id, other)
            loaded = _Loaded(module=taken, path=Path(key), digest=digest, dirty=dirty,
                             metadata_sha256=meta_digest)
            _by_path[key] = loaded
            _by_id[id_key] = loaded
            return _announced(loaded)
        _check_python_depends(variant_dir, meta)
        needed: dict[str, ModuleType] = {}
        if meta.get("kernel-depends"):
            load_deps = deps or _dependencies(str(variant_dir), None, None, True, False)
            needed = load_deps(meta)
        module = _import_package(module_id, variant_dir, meta, needed, actual)
        loaded = _Loaded(module=module, path=Path(key), digest=digest, dirty=dirty,
                         metadata_sha256=meta_digest)
        _by_path[key] = loaded
        _by_id[id_key] = loaded
        return _announced(loaded)


def _metadata_sha256(variant_dir: Path) -> str:
    """The sha256 (hex) of a variant directory's ``metadata.json``, which changes with
    every build written there; "" when it cannot be read (the load then says why)."""
    try:
        return hashlib.sha256((variant_dir / "metadata.json").read_bytes()).hexdigest()
    except OSError:
        return ""


def _still_there(loaded: _Loaded) -> bool:
    """Whether the directory ``loaded`` came from still holds that build: a local build
    directory is rewritten in place by the next build (a hub's or the download cache's
    copy of a commit never changes), and a load after that must not return the old
    module."""
    digest = _metadata_sha256(loaded.path)
    return bool(digest) and digest == loaded.metadata_sha256


def no_digests_fix(repo: str) -> str:
    """How to load a signed build whose ``metadata.json`` records no file digests without
    pinning it: a load refuses it whatever key is trusted or repository allowed (the
    signature covers none of the code), so only a rebuild or a ``kernelforge.lock`` that
    pins its files by choice lifts the refusal."""
    return ("ask the publisher to rebuild with kernelforge, which writes digests, and "
            f"republish; or pin it with a kernelforge.lock: kernelforge lock --allow {repo}")


def _check_signed_build(plan: Plan) -> None:
    """Refuse what a signature (or owner mark) vouches for only in part.

    A signature covers ``metadata.json`` alone: without a ``digest`` block it says nothing
    about the code, on any hub (a local hub's commit record is unsigned and writable by
    whoever can write the hub). Nor does it cover the branch: a build signed as version
    M served from branch ``vN`` was copied there (a rollback or replay). A locked load
    reads no branch (the lock pins the commit, and the branch it records is where that
    commit was when locked), so that check is not made for it: ``kernelforge lock`` makes
    it before pinning (:func:`check_branch_version`, :func:`records_no_version`).
    """
    info, decision, req = plan.info, plan.decision, plan.request
    if decision is None or req is None:
        return
    if info.source == "lock":
        info = dataclasses.replace(info, branch=None)
    if decision.signer is not None and not plan.metadata.get("digest") and plan.locked is None:
        raise TrustError(
            f"{info.repo} (variant {info.variant}): its signed metadata.json records no "
            "file digests, so the signature does not cover the code; refusing to load it "
            f"({no_digests_fix(info.repo)})"
        )
    if decision.signer is not None and records_no_version(info.branch, plan.metadata):
        # Without it, the signed build could have been copied from any other version's
        # branch. (A build you published unsigned loads as before: Hugging Face's builds
        # of old may record no version, and publish takes them.)
        raise TrustError(
            f"{info.repo} (variant {info.variant}): its signed metadata.json records no "
            f"version (metadata.json 'version': {plan.metadata.get('version')!r}), so "
            f"nothing shows it was published as version {(info.branch or '')[1:]} rather "
            f"than copied to branch {info.branch} from another; refusing to load it (ask "
            "the publisher to rebuild with kernelforge, which records the version, and "
            "republish; or pin it with a kernelforge.lock: kernelforge lock --allow "
            f"{info.repo})"
        )
    check_branch_version(info.repo, info.variant, info.branch, plan.metadata,
                         decision.signer, req.owned)


def records_no_version(branch: str | None, metadata: Mapping[str, Any]) -> bool:
    """Whether a build served from a version branch ``vN`` records no version in its
    ``metadata.json``: nothing then shows that it was published as version N rather than
    copied there from another version's branch, which a signature does not cover.

    Loads refuse such a signed build (:func:`_check_signed_build`), and ``kernelforge
    lock`` pins one only where the repository is allowed without its signature
    (:func:`kernelforge.lock.lock_project`).
    """
    from kernelforge.hub.base import VERSION_BRANCH_RE

    version = metadata.get("version")
    return (VERSION_BRANCH_RE.match(branch or "") is not None
            and (not isinstance(version, int) or isinstance(version, bool)))


def check_branch_version(repo: str, variant: str, branch: str | None,
                         metadata: Mapping[str, Any], signer: str | None, owned: bool,
                         *, locking: bool = False) -> None:
    """Refuse a build vouched for (signed, or published by you) as version M that branch
    ``vN`` serves: it was copied there from another version (a rollback or replay), which
    neither a signature nor the owner mark covers.

    Loads make this check (:func:`_check_signed_build`), and so does ``kernelforge
    lock`` before it pins a commit (:func:`kernelforge.lock.lock_project`): a locked load
    reads no branch, so what the lock pins must have passed it when it was written.

    Args:
        repo, variant: the repository and variant, for the message.
        branch: the branch the commit was taken from, if any.
        metadata: the variant's parsed ``metadata.json``.
        signer: the key id or sigstore identity that signed it, if any.
        owned: whether its owner mark says you published it.
        locking: word the refusal for ``kernelforge lock``.

    Raises:
        TrustError: naming the branch, the version the build records and the fix.
    """
    from kernelforge.hub.base import VERSION_BRANCH_RE

    match = VERSION_BRANCH_RE.match(branch or "")
    version = metadata.get("version")
    if (match and (signer is not None or owned) and isinstance(version, int)
            and not isinstance(version, bool) and version != int(match.group(1))):
        vouch = f"signed by {signer}" if signer is not None else "published by you"
        want = (f"depend on version {version}" if locking else f"load version={version}")
        raise TrustError(
            f"{repo} (variant {variant}): branch {branch} serves a build {vouch} as "
            f"version {version} (metadata.json 'version'), so it was copied there from "
            f"another version; refusing to {'lock' if locking else 'load'} it (republish "
            f"version {match.group(1)}, or {want} if that is the build you want)"
        )


def _load_plan(plan: Plan, deps: DepsLoader | None = None) -> ModuleType:
    """Enforce the trust decision, fetch, verify and import a located kernel (its
    ``kernel-depends`` loaded by ``deps``)."""
    from kernelforge import policy
    from kernelforge.cache import DownloadCache, as_published, is_intact

    info = plan.info
    if plan.hub is None or plan.request is None or plan.decision is None:
        if info.path is None:  # pragma: no cover - local plans always have a path
            raise HubError(f"{info.repo}: nothing to load")
        # a local build may be a snapshot of Hugging Face's download cache: links to blobs
        return _load(info.path, deps=deps, follow_links=True)
    policy.require(plan.decision, plan.request)
    _check_signed_build(plan)
    if not plan.metadata.get("digest") and plan.locked is None and plan.hub.kind != "local":
        logger.warning("kernelforge: %s (variant %s): its metadata.json records no file digests; "
                       "the files are checked only against what was downloaded", info.repo,
                       info.variant)
    commit = info.commit or ""
    fetched = plan.hub.fetch_variant(info.repo, commit, info.variant)
    if plan.request.owned and not fetched.owned:
        raise TrustError(
            f"{info.repo} (variant {info.variant}): revision {commit[:12]} in the "
            f"{plan.hub.describe()} was published by you when the trust policy looked, but "
            "its commit record changed before the load (its owner mark no longer verifies); "
            "refusing to load it. Something else writes to this hub: keep your hub in a "
            "directory only you can write, and publish the kernel again"
        )
    anchors = _Anchors(plan.metadata_sha256, fetched.recorded, plan.locked)
    try:
        with _removed_while_loading(plan, fetched.path):
            return _load(fetched.path, anchors, deps)
    except IntegrityError as err:
        if plan.hub.kind == "local":  # the hub's own files: fetching won't help
            from kernelforge.hub.local import damaged_copy

            _raise_if_unlike_lock(plan, fetched.path, fetched.recorded, err)
            raise damaged_copy(err, _lockfile_named(plan)) from err
        if fetched.fetched or as_published(fetched.path, plan.metadata_sha256,
                                           fetched.recorded):
            # a copy fetched just now, or one whose only fault is to differ from the lock
            # file: fetching won't help
            _raise_if_unlike_lock(plan, fetched.path, fetched.recorded, err)
            raise
        if getattr(plan.hub, "offline", True):  # not fetched again offline: say the fix
            cache = getattr(plan.hub, "cache", None)
            if isinstance(cache, DownloadCache):
                raise cache.damaged_copy(err, info.repo, commit,
                                         changed=not is_intact(fetched.path,
                                                               fetched.recorded)) from err
            raise
        # Changed in the cache since, or damaged before it was recorded (a copy that
        # matches what was fetched can still differ from the metadata.json the trust
        # policy saw): either way a fresh copy may pass, and must pass every check.
        logger.warning("kernelforge: %s: the cached copy of variant %s failed verification (%s); "
                       "fetching it again", info.repo, info.variant, "; ".join(err.problems))
    fetched = plan.hub.fetch_variant(info.repo, commit, info.variant, refresh=True)
    try:
        with _removed_while_loading(plan, fetched.path):
            return _load(fetched.path, _Anchors(plan.metadata_sha256, fetched.recorded,
                                                plan.locked), deps)
    except IntegrityError as err:
        _raise_if_unlike_lock(plan, fetched.path, fetched.recorded, err)
        raise


def _raise_if_unlike_lock(plan: Plan, path: Path, recorded: Mapping[str, str] | None,
                          err: IntegrityError) -> None:
    """Raise ``err`` restated to name the lock file where a locked load's copy at ``path``
    is as the hub served it and differs from the lock's pins
    (:func:`kernelforge.lock.raise_if_unlike_lock`); return where it is not so."""
    from kernelforge.lock import raise_if_unlike_lock

    if plan.locked is None or plan.hub is None or plan.request is None:
        return
    info = plan.info
    where = (f"{info.repo} (variant {info.variant}) at commit {(info.commit or '')[:12]} "
             f"from the {plan.hub.describe()}")
    raise_if_unlike_lock(err, path, recorded, plan.locked,
                         plan.request.pinned or "the lock file", where)


@contextlib.contextmanager
def _removed_while_loading(plan: Plan, path: Path) -> Iterator[None]:
    """Say so when the load of a download cache's copy at ``path`` fails because the copy
    is gone: another process removed it after it was verified (``kernelforge cache clear``
    or ``remove``), and the file that could not be read is no fault of the kernel's."""
    try:
        yield
    except (HubError, OSError, ImportError) as err:
        if plan.hub is None or plan.hub.kind == "local" or path.is_dir():
            raise
        again = ("fetch it again while online ('kernelforge download' for a locked project, "
                 "or a load with get_kernel), then load it again"
                 if getattr(plan.hub, "offline", False)
                 else "load it again, which fetches it anew")
        raise HubError(
            f"{plan.info.repo} (variant {plan.info.variant}): its copy {path} was removed "
            "from the download cache while it was loading (by 'kernelforge cache clear' or "
            f"'remove' in another process); {again}") from err


def load_variant(variant_dir: str | os.PathLike[str]) -> ModuleType:
    """Verify a variant directory against its digest and import it.

    Args:
        variant_dir: a ``build/<variant>`` directory with ``metadata.json``. As for
            :func:`get_local_kernel`, a file may be a symbolic link to a regular file
            (its bytes are what is verified and imported); other links are refused.

    Returns:
        The package, imported as ``metadata["id"]``; the same object on every call.

    Raises:
        IntegrityError: a file is changed, missing or extra (each one named).
        HubError: ``variant_dir`` does not exist or is not a variant directory (a
            project or ``build/`` directory is named as such, with
            :func:`get_local_kernel` as the way to load it), or ``metadata.json`` or
            ``__init__.py`` is missing or malformed.
        ImportError: another build already holds the module name, or a package its
            ``python-depends`` lists is not installed (as for :func:`get_kernel`).
        ValueError: ``variant_dir`` is an empty or blank string (it would mean the
            current directory).
    """
    refuse_empty_path(variant_dir, "variant_dir", "a variant directory",
                      f"a build/<variant> directory ({HERE})")
    path = Path(variant_dir)
    if not (path / "metadata.json").is_file():
        _not_a_variant(path)
    return _load(path, follow_links=True)


def _not_a_variant(path: Path) -> None:
    """Raise for a path given to :func:`load_variant` that holds no ``metadata.json``,
    saying what it is: missing, a file, or a project or ``build/`` directory (whose
    variant :func:`get_local_kernel` chooses)."""
    from kernelforge.hub._staging import read_metadata
    from kernelforge.locate import _holds_variants

    expected = "expected one build variant directory, build/<variant>, with a metadata.json"
    if not path.exists():
        raise HubError(f"variant_dir: {path} does not exist ({expected})")
    if not path.is_dir():
        raise HubError(f"variant_dir: {path} is not a directory ({expected})")
    if _holds_variants(path) or _holds_variants(path / "build"):
        raise HubError(
            f"variant_dir: {path} is not a build variant directory but holds build variants "
            f"({expected}); pass one of them, or load it with get_local_kernel({str(path)!r}), "
            "which chooses the variant that fits this process")
    read_metadata(path)  # raises, saying it is missing


# --- locating ----------------------------------------------------------------------------


def _locate(
    repo_id: str, revision: str | None, version: int | None, backend: str | None,
    hub: HubArg, check_arch: bool, trust_remote_code: TrustArg, announce: bool = True,
    loads: bool | None = None, judge: bool = True,
) -> Plan:
    """:func:`~kernelforge.locate.locate_hub`; ``announce=False`` for a caller that loads
    nothing, so that no WARNING line says "loading" (``loads``, ``judge``: as there)."""
    from kernelforge.locate import locate_hub

    return locate_hub(repo_id, revision=revision, version=version, backend=backend, hub=hub,
                      check_arch=check_arch, allow=trust_remote_code, announce=announce,
                      loads=loads, judge=judge)


def _locate_locked(
    repo_id: str, lockfile: str | os.PathLike[str] | LockFile, backend: str | None,
    hub: HubArg, check_arch: bool, trust_remote_code: TrustArg, cache_only: bool,
) -> tuple[LockFile, LockedKernel, Plan]:
    """The lock file (read from ``lockfile``, unless it is one already), its entry for
    ``repo_id`` and where that entry's build is."""
    from kernelforge.locate import locate_locked
    from kernelforge.lock import LockFile, read_lock

    lock = lockfile if isinstance(lockfile, LockFile) else read_lock(lockfile)
    locked = lock.require(repo_id)
    return lock, locked, locate_locked(locked, lockfile=str(lock.path), backend=backend,
                                       hub=hub, check_arch=check_arch,
                                       allow=trust_remote_code, cache_only=cache_only)


def _caller_module() -> str:
    """The name of the module that called into kernelforge: the nearest frame outside
    it (``__main__`` for a script, ``"?"`` for code with no module name). A module run
    with ``python -m pkg.mod`` is named ``__main__`` but imported as ``pkg.mod``: that
    name is given, so that its package's installed metadata is found."""
    frame = sys._getframe(1)
    while frame is not None:
        name = frame.f_globals.get("__name__")
        if isinstance(name, str) and name.partition(".")[0] != "kernelforge":
            spec = frame.f_globals.get("__spec__") if name == "__main__" else None
            spec_name = getattr(spec, "name", None)
            return spec_name if isinstance(spec_name, str) and spec_name else name
        frame = frame.f_back  # type: ignore[assignment]
    return "?"  # pragma: no cover - kernelforge is never called by nothing


def _lock_source(
    lockfile: str | os.PathLike[str] | None, caller: str,
) -> tuple[str | os.PathLike[str] | LockFile, tuple[str, str | None]]:
    """What a locked load reads its lock from, and what the load is remembered by
    (:func:`_lock_identity`). ``None`` is the lock file in the installed metadata of the
    package that called ``caller``, as in Hugging Face's ``kernels``
    (:func:`~kernelforge.lock.installed_lock`), read now: remembered by its path and the
    sha256 of its text, so that a reinstalled package loads what its new lock pins. An
    empty ``lockfile`` string is refused rather than read as the current directory."""
    from kernelforge.lock import check_lockfile

    check_lockfile(lockfile, ", or nothing (None in Python) for the lock file in the "
                   "calling package's installed metadata")
    if lockfile is not None:
        return lockfile, _lock_identity(lockfile)
    from kernelforge.lock import installed_lock

    lock, sha256 = installed_lock(_caller_module(), caller)
    return lock, (str(lock.path), sha256)


def _lock_identity(lockfile: str | os.PathLike[str]) -> tuple[str, str | None]:
    """What a locked load is remembered by: the lock file's absolute path and the
    sha256 of its content, so that a call after a change of directory (a relative
    path naming another project's lock) or after ``kernelforge lock`` rewrote the file
    loads what the file pins now. ``None`` for the content of a file that cannot be read
    (the load then says why)."""
    import hashlib

    from kernelforge.lock import lock_file_path

    # the lock file read_lock reads (a project directory's), by its absolute path; not
    # os.path.abspath, whose '..' removal names another file past a symbolic link
    path = str(lock_file_path(os.path.expanduser(os.fspath(lockfile))).absolute())
    try:
        with open(path, "rb") as f:
            return path, hashlib.sha256(f.read()).hexdigest()
    except OSError:
        return path, None


def _load_locked(
    repo_id: str, lockfile: str | os.PathLike[str] | LockFile, backend: str | None, hub: HubArg,
    check_arch: bool, trust_remote_code: TrustArg, cache_only: bool,
) -> ModuleType:
    """Load what a lock pins for ``repo_id``, and its ``kernel-depends`` as the lock pins
    them."""
    lock, locked, plan = _locate_locked(repo_id, lockfile, backend, hub, check_arch,
                                        trust_remote_code, cache_only)
    return _load_plan(plan, _dependencies(repo_id, hub, backend, check_arch, trust_remote_code,
                                          cache_only, locks=_LockPins(lock, locked)))


# --- public entry points -----------------------------------------------------------------


def _sending(user_agent: str | dict[str, Any] | None) -> contextlib.AbstractContextManager[Any]:
    """The context in which the Hugging Face Hub's downloads send ``user_agent``
    (:func:`kernelforge.hub.hf.sent_as`; nothing to do, nothing imported, for ``None``).

    Raises:
        TypeError: on entering, a ``user_agent`` ``huggingface_hub`` cannot send.
    """
    if user_agent is None:
        return contextlib.nullcontext()
    from kernelforge.hub.hf import sent_as

    return sent_as(user_agent)


def _hub_repo_id(repo_id: object) -> None:
    """:func:`validate_repo_id`, whose error says, for a path that exists here (a project
    or its ``build/`` given to ``get_kernel``), which function loads a local build."""
    try:
        validate_repo_id(repo_id)
    except ValueError as err:
        # os.path: a '~user' of no such user, or a name too long to look up, is no path
        if isinstance(repo_id, (str, os.PathLike)) and str(repo_id) and \
                os.path.exists(os.path.expanduser(repo_id)):
            raise ValueError(f"{err}; {str(repo_id)!r} is a path here: to load a local build, "
                             f"use get_local_kernel({str(repo_id)!r})") from None
        raise


def get_kernel(
    repo_id: str,
    revision: str | None = None,
    version: int | None = None,
    backend: str | None = None,
    user_agent: str | dict[str, Any] | None = None,
    trust_remote_code: bool | Sequence[str] = False,
    *,
    hub: Hub | str | os.PathLike[str] | None = None,
    check_arch: bool = True,
) -> ModuleType:
    """Load a kernel from a hub (or from ``LOCAL_KERNELS``) and return its module.

    The arguments Hugging Face's ``kernels.get_kernel`` takes come first, in its order,
    and may be given by position as some of its versions allow; ``check_arch``, which
    it takes by keyword only, comes after ``hub``.

    Args:
        repo_id: ``org/name``.
        revision: a branch, a tag or a commit (a unique prefix of at least 4 hex
            digits of the commit id will do; a shorter one is refused, saying so).
        version: the kernel version ``N`` (branch ``vN``). With neither ``revision`` nor
            ``version`` the newest ``v<N>`` branch is used and a WARNING log line says
            which (pass ``version=`` to pin it); an older version than the newest is
            logged as a WARNING too. A ``kernel-status.toml`` on ``main`` that redirects
            the repository is followed, with a WARNING naming the destination.
        backend: choose the variant for this backend (``"cpu"`` or torch's own)
            instead of the system's.
        user_agent: sent with the files downloaded from the Hugging Face Hub, besides
            kernelforge's own name (a string, or a dict sent as ``key/value`` pairs), as
            ``huggingface_hub`` sends it, unless ``HF_HUB_DISABLE_TELEMETRY`` is set. A
            local hub, a download already cached and an
            :class:`~kernelforge.hub.hf.HfHub` made with a client of its own (``api=``)
            send nothing more.
        trust_remote_code: load a kernel that is neither published by you nor signed by
            a trusted key: ``True`` for any, or a list of repository ids (``org/name``,
            each allowed as written; a pattern such as ``org/*`` belongs in the trust
            store: ``kernelforge trust allow``).
        hub: a hub (:class:`~kernelforge.hub.LocalHub`, :class:`~kernelforge.hub.hf.HfHub`),
            ``"hf"``, a local hub directory, or ``None``: ``$KERNELFORGE_HUB``, else the
            local hub when it holds ``repo_id``, else the Hugging Face Hub.
        check_arch: refuse builds whose ``backend.archs`` do not cover the GPU.

    Returns:
        The kernel package, imported under its metadata ``id``. A repeated call with the
        same arguments (``user_agent`` aside) returns the same module without touching
        the disk, also after a publish moved the branch it took (``revision=`` the new
        commit loads that one beside it) (with
        ``LOCAL_KERNELS`` naming this repository, it reads the local build's
        ``metadata.json`` again, so that a rebuild is loaded). The kernels
        its metadata lists in ``kernel-depends`` are loaded first, with the same
        arguments but their own version or revision, and its import reaches them
        through Hugging Face's ``kernels.get_kernel_dep`` (which needs ``kernels``
        installed).

    Raises:
        ValueError: both ``revision`` and ``version``, a ``version`` that is not a
            non-negative integer, a ``revision`` that is not a string or is blank, a
            malformed ``repo_id`` or ``LOCAL_KERNELS``, a ``trust_remote_code`` entry
            that is not a repository id (a pattern such as ``org/*``).
        VariantError: an unknown ``backend`` or one this torch cannot use (a
            ``ValueError`` too).
        TypeError: a ``user_agent`` that is not a string, a dict with string keys or
            ``None``; a ``trust_remote_code`` that is neither a bool nor a list of
            repository ids; a ``hub`` of another type.
        HubError: the repository, version or revision does not exist (or, offline, is
            not in the download cache), or the hub cannot be read.
        VariantNotFoundError: no variant fits this system; the message lists each
            candidate and why it was rejected. It is a ``FileNotFoundError`` too, as
            Hugging Face's ``kernels.get_kernel`` raises in this case.
        TrustError: not published by you, not signed by a trusted key, not allowed.
        IntegrityError: the files do not match their digests (each file named).
        ImportError: a package its ``python-depends`` lists is not installed (the
            message gives the ``pip install``), or another build holds its module name.
            What the kernel's own import raises reaches the caller as it is, with a note
            naming the kernel.

    Example:
        >>> relu = get_kernel("kernels-community/relu", version=1)  # doctest: +SKIP
        >>> y = relu.relu(x)  # doctest: +SKIP
    """
    _hub_repo_id(repo_id)
    _check_selector(revision, version)
    with _sending(user_agent):  # the kernel-depends' downloads send it too
        return _get_kernel(repo_id, revision, version, backend, hub, check_arch,
                           trust_remote_code)


def _get_kernel(repo_id: str, revision: str | None, version: int | None,
                backend: str | None, hub: HubArg, check_arch: bool,
                trust_remote_code: TrustArg, announce: bool = True) -> ModuleType:
    """:func:`get_kernel` of checked arguments; ``announce=False`` for a kernel-depends
    entry, whose version the kernel's publisher chose: no WARNING line says which
    version it takes or that a newer one exists (advice its loader cannot follow)."""
    from kernelforge.policy import allow_key

    key = ("hub", repo_id, revision, version, backend, _hub_key(hub), check_arch,
           allow_key(trust_remote_code), os.environ.get(LOCAL_KERNELS_ENV),
           _override_identity(repo_id, backend, check_arch))
    return _cached(key, lambda: _load_plan(
        _locate(repo_id, revision, version, backend, hub, check_arch, trust_remote_code,
                announce=announce, loads=True),
        _dependencies(repo_id, hub, backend, check_arch, trust_remote_code,
                      pin=(repo_id, version, revision))))


def get_locked_kernel(
    repo_id: str,
    *,
    lockfile: str | os.PathLike[str] | None,
    backend: str | None = None,
    hub: Hub | str | os.PathLike[str] | None = None,
    check_arch: bool = True,
    trust_remote_code: bool | Sequence[str] = False,
    user_agent: str | dict[str, Any] | None = None,
) -> ModuleType:
    """Load exactly the revision and files a lock file pins, downloading if needed.

    Args:
        repo_id: ``org/name``; must be in the lock file.
        lockfile: a ``kernelforge.lock`` (which pins every file's sha256) or a Hugging
            Face ``kernels.lock`` (which pins only the commit), or a project directory
            holding one. ``None``, as in Hugging Face's ``kernels``: the lock file in the
            installed metadata (``<name>.dist-info/``) of the package that made the call
            (the nearest caller outside kernelforge), ``kernelforge.lock`` first, else
            ``kernels.lock`` (which ``kernels`` writes there when the package is built
            with it); read on every call, so a reinstall with a new lock loads its pins.
        backend: choose the variant for this backend instead of the system's.
        hub: as for :func:`get_kernel`; ``None`` uses the kind of hub the lock records
            (``$KERNELFORGE_HUB`` or the user cache for ``local``). A ``kernels.lock``
            records none: then the local hub when it holds the repository at the locked
            commit, else the Hugging Face Hub (``$KERNELFORGE_HUB=hf``: that one).
        check_arch: refuse builds whose ``backend.archs`` do not cover the GPU.
        trust_remote_code: as for :func:`get_kernel`; needed only for a lock without
            digests, since files a ``kernelforge.lock`` pins are trusted as pinned.
        user_agent: as for :func:`get_kernel`.

    Returns:
        The kernel package. The kernels its ``kernel-depends`` list (and theirs) load as
        the lock pins them: the commit and every file checked, as for the kernel itself.
        One the lock does not pin (a lock written before kernelforge pinned
        dependencies, a ``kernels.lock``, or an entry that leaves it out) loads as
        :func:`get_kernel` would load it, with a WARNING log line naming it.

    Raises:
        LockError: the lock file is missing, malformed or does not list ``repo_id``;
            with ``lockfile=None``, the calling package's metadata holds none, or the
            caller belongs to no installed package (the message says where it looked
            and to pass the lock file's path instead).
        ValueError: an empty or blank ``lockfile`` string (it would mean the current
            directory; pass ``"."`` for that); otherwise as for :func:`get_kernel`.
        IntegrityError: a file of the kernel or of a pinned dependency differs from what
            the lock pins (each file named).
        HubError, VariantNotFoundError, TrustError: as for :func:`get_kernel`.
        VariantError, TypeError, ImportError: as for :func:`get_kernel`.
    """
    from kernelforge.policy import allow_key

    validate_repo_id(repo_id)
    with _sending(user_agent):
        source, identity = _lock_source(lockfile, "get_locked_kernel")
        key = ("locked", repo_id, identity, backend, _hub_key(hub), check_arch,
               allow_key(trust_remote_code))
        return _cached(key, lambda: _load_locked(repo_id, source, backend, hub, check_arch,
                                                 trust_remote_code, cache_only=False))


def load_kernel(
    repo_id: str,
    *,
    lockfile: str | os.PathLike[str] | None,
    backend: str | None = None,
    hub: Hub | str | os.PathLike[str] | None = None,
    check_arch: bool = True,
    trust_remote_code: bool | Sequence[str] = False,
) -> ModuleType:
    """Load a locked kernel without any network access (``kernelforge download`` first).

    Args:
        repo_id: ``org/name``; must be in the lock file.
        lockfile: the lock file, or ``None`` for the one in the calling package's
            installed metadata (see :func:`get_locked_kernel`).
        backend: choose the variant for this backend instead of the system's.
        hub: as for :func:`get_locked_kernel`.
        check_arch: refuse builds whose ``backend.archs`` do not cover the GPU.
        trust_remote_code: as for :func:`get_locked_kernel`; needed only for a lock
            without digests (Hugging Face's ``kernels.lock``) of a kernel that is not
            signed by a trusted key or allowed.

    Returns:
        The kernel package.

    Raises:
        HubError: the locked variant, or a dependency's, is not in the download cache of
            a remote hub (the message says to run ``kernelforge download``, or to use
            :func:`get_locked_kernel`, which downloads); a local hub is read directly.
        LockError, IntegrityError, VariantNotFoundError, TrustError: as for
            :func:`get_locked_kernel`.
        ValueError: as for :func:`get_locked_kernel` (an empty ``lockfile`` string
            included).
        VariantError, TypeError, ImportError: as for :func:`get_kernel`.

    The kernel's ``kernel-depends`` load as for :func:`get_locked_kernel`, from the
    download cache alone (``kernelforge download`` fetches the commits the lock pins
    for them).
    """
    from kernelforge.policy import allow_key

    validate_repo_id(repo_id)
    source, identity = _lock_source(lockfile, "load_kernel")
    key = ("cached", repo_id, identity, backend, _hub_key(hub), check_arch,
           allow_key(trust_remote_code))
    return _cached(key, lambda: _load_locked(repo_id, source, backend, hub, check_arch,
                                             trust_remote_code, cache_only=True))


def get_local_kernel(
    repo_path: str | os.PathLike[str], backend: str | None = None, *,
    check_arch: bool = True,
    trust_remote_code: bool | Sequence[str] = False,
    user_agent: str | dict[str, Any] | None = None,
) -> ModuleType:
    """Load a kernel from a local build.

    Args:
        repo_path: a project directory holding ``build/``, a ``build/`` directory, or one
            variant directory (whose torch, backend and platform tags are checked when
            its name is a variant name). A directory with variants both at its top level
            and in ``build/`` uses the top level when a variant there fits, else
            ``build/``, as Hugging Face's ``kernels`` does (whose ``get_local_kernel``
            names this argument the same).
        backend: choose the variant for this backend instead of the system's (by
            position too, as some versions of Hugging Face's ``kernels`` take it).
        check_arch: refuse builds whose ``backend.archs`` do not cover the GPU.
        trust_remote_code, user_agent: as for :func:`get_kernel`, for the kernels the
            build's ``kernel-depends`` list, which load from a hub (the local build
            itself is yours and always trusted).

    Returns:
        The kernel package, imported under its metadata ``id``. Files may be symbolic
        links to regular files (a snapshot in Hugging Face's download cache, as
        ``kernels.install_kernel`` returns it): the bytes they lead to are verified and
        imported. A link to a directory, a dangling link or a link to anything else is
        refused. A build from a dirty git tree loads with a WARNING log line. A repeated
        call returns the same module while the chosen variant's ``metadata.json`` is
        unchanged (it is read again, about 0.3 ms), and the new build after a rebuild.

    Raises:
        HubError: ``repo_path`` does not exist, is a file, is a kernel project that was not
            built yet (no ``build/``: run ``kernelforge build PATH``), or holds no build
            variant (no subdirectory with a ``metadata.json``); or a kernel its
            ``kernel-depends`` list is not found, as for :func:`get_kernel`.
        TrustError: a kernel its ``kernel-depends`` list is not trusted (the local
            build itself always is).
        VariantNotFoundError: no variant fits this system (with the trace); a
            ``FileNotFoundError`` too, as with Hugging Face's ``kernels``.
        IntegrityError: the files do not match their digests.
        VariantError: an unknown ``backend`` or one this torch cannot use (a
            ``ValueError`` too).
        ValueError: a ``trust_remote_code`` entry that is not a repository id; a
            ``repo_path`` that is an empty or blank string (it would mean the current
            directory).
        TypeError: a ``user_agent`` that is not a string, a dict with string keys or
            ``None``; a ``trust_remote_code`` that is neither a bool nor a list of
            repository ids.
        ImportError: as for :func:`get_kernel`.
    """
    from kernelforge.locate import locate_local
    from kernelforge.policy import allow_key

    refuse_empty_path(repo_path, "repo_path", "a build",
                      f"the project directory holding build/ ({HERE}), its build/ directory "
                      "or one variant directory")

    with _sending(user_agent):
        # Located on every call (it reads one metadata.json): a rebuild in this process
        # makes another build, which the next call loads.
        plan = locate_local(repo_path, backend, check_arch)
        key = ("local", os.path.abspath(os.path.expanduser(os.fspath(repo_path))), backend,
               check_arch, allow_key(trust_remote_code), _build_identity(plan))
        where = os.fspath(repo_path)
        return _cached(key, lambda: _load_plan(plan, _dependencies(
            where, None, backend, check_arch, trust_remote_code)))


def _override_identity(repo_id: str, backend: str | None,
                       check_arch: bool) -> tuple[str, str] | None:
    """The :func:`_build_identity` of the local build ``LOCAL_KERNELS`` loads in place of
    ``repo_id``, if it names one (a rebuild there is loaded by the next call, as by
    :func:`get_local_kernel`); None when it names none or the build cannot be located
    (the load then reports why)."""
    from kernelforge.locate import _override, local_overrides, locate_local

    if not os.environ.get(LOCAL_KERNELS_ENV):
        return None
    override = _override(local_overrides(), repo_id)
    if override is None:
        return None
    try:
        return _build_identity(locate_local(override, backend, check_arch, repo=repo_id))
    except KernelforgeError:
        return None


def _build_identity(plan: Plan) -> tuple[str, str]:
    """The variant directory a local plan chose and the sha256 of its metadata.json,
    which changes with every build written there."""
    if plan.info.path is None:  # pragma: no cover - a local plan always has its path
        return "", ""
    # absolute: a relative LOCAL_KERNELS path names another build after a chdir
    return str(Path(plan.info.path).absolute()), _metadata_sha256(Path(plan.info.path))


def kernel_info(
    repo_id: str,
    *,
    revision: str | None = None,
    version: int | None = None,
    backend: str | None = None,
    hub: Hub | str | os.PathLike[str] | None = None,
    check_arch: bool = True,
    trust_remote_code: bool | Sequence[str] = False,
    lockfile: str | os.PathLike[str] | None = None,
) -> KernelInfo:
    """Say which build :func:`get_kernel` would load and whether it would be trusted,
    without downloading the variant or importing anything. It logs no "loading ..."
    WARNING: the notes say which version was chosen and why.

    Args:
        repo_id, revision, version, backend, hub, check_arch, trust_remote_code: as for
            :func:`get_kernel`.
        lockfile: describe what this lock file pins instead (as
            :func:`get_locked_kernel` would load it); not with ``revision`` or
            ``version``.

    Returns:
        The :class:`KernelInfo`: repository, hub, branch, commit, variant, the
        revision notes, the variant trace and the trust decision.

    Raises:
        ValueError: ``lockfile`` with ``revision`` or ``version``, or an empty
            ``lockfile`` string (it would mean the current directory); otherwise as
            :func:`get_kernel`, a malformed ``trust_remote_code`` included, whether or
            not the decision needs it.
        LockError: as for :func:`get_locked_kernel`, with ``lockfile``.
        VariantError, TypeError, HubError, VariantNotFoundError: as for
            :func:`get_kernel`.
        TrustError: a signature that no trust or allowance lifts
            (:class:`~kernelforge.errors.SignatureMismatchError`,
            :class:`~kernelforge.errors.UnreadableSignatureError`), or a trust store that
            cannot be read. Any other refusal by the trust policy, or a local hub's
            damaged copy, is no error: ``trust`` says it.
    """
    from kernelforge.policy import allow_key

    _hub_repo_id(repo_id)
    _check_selector(revision, version)
    # refused as get_kernel refuses it, also where the decision does not consult it (a
    # kernel you published): a caller learns of the mistake before a load needs it
    allow_key(trust_remote_code)
    if lockfile is not None:
        from kernelforge.lock import check_lockfile

        check_lockfile(lockfile, ", or nothing (None in Python) to describe what a load "
                       "picks without a lock")
    if lockfile is not None and (revision is not None or version is not None):
        given = "revision" if revision is not None else "version"
        raise ValueError(f"lockfile: the lock file decides the revision; pass lockfile= "
                         f"without {given}= (or {given}= without lockfile=)")
    if lockfile is not None:
        _lock, _locked, plan = _locate_locked(repo_id, lockfile, backend, hub, check_arch,
                                              trust_remote_code, cache_only=False)
    else:
        plan = _locate(repo_id, revision, version, backend, hub, check_arch, trust_remote_code,
                       announce=False)
    if plan.decision is not None and plan.decision.allowed:
        try:  # what the load refuses after the policy allowed it
            _check_signed_build(plan)
        except TrustError as err:
            return dataclasses.replace(plan.info, trust=f"trust: refused, {err}")
        damage = _local_hub_damage(plan)
        if damage is not None:
            return dataclasses.replace(plan.info, trust=f"trust: refused, {damage}")
    return plan.info


def _local_hub_damage(plan: Plan) -> str | None:
    """Why a load from a local hub would refuse the variant's files, if it would: they
    are on disk, so checking them costs what hashing them does (a download is never
    made for this)."""
    from kernelforge.digest import verify_variant

    info = plan.info
    if plan.hub is None or plan.hub.kind != "local" or info.commit is None:
        return None
    try:
        fetched = plan.hub.fetch_variant(info.repo, info.commit, info.variant)
        data, meta = _read_metadata_once(fetched.path)
        try:
            verify_variant(fetched.path, meta, metadata_sha256=plan.metadata_sha256,
                           recorded=fetched.recorded, locked=plan.locked,
                           bytecode="allow-pycache", metadata_data=data)
        except IntegrityError as err:
            try:  # an intact copy unlike the lock's pins: the lock differs, not the hub
                _raise_if_unlike_lock(plan, fetched.path, fetched.recorded, err)
            except IntegrityError as unlike:
                return _on_one_line(str(unlike))
            raise
    except (HubError, IntegrityError) as err:
        return _damaged(err, _lockfile_named(plan))
    return None


def _lockfile_named(plan: Plan) -> str | None:
    """The lock file that pins a locked load's files (``None`` for a load without one)."""
    if plan.locked is None:
        return None
    return (plan.request.pinned if plan.request is not None else None) or "the lock file"


def _damaged(err: Exception, lockfile: str | None) -> str:
    """``kernelforge info``'s line for a local hub's copy that a load would refuse."""
    from kernelforge.hub.local import damage_fix

    return f"{_on_one_line(str(err))}; {damage_fix(lockfile)}"


def _on_one_line(text: str) -> str:
    """An error of several lines (an :class:`IntegrityError` lists a file a line) as one,
    its later lines in parentheses: the trust decision is one line of ``kernelforge
    info``'s report, which writes a line break inside a line as ``\\n``."""
    head, *rest = [line.strip() for line in text.splitlines() if line.strip()] or [""]
    return head.rstrip(":") + (f" ({'; '.join(rest)})" if rest else "")


def has_kernel(
    repo_id: str,
    revision: str | None = None,
    version: int | None = None,
    backend: str | None = None,
    *,
    hub: Hub | str | os.PathLike[str] | None = None,
    check_arch: bool = True,
    trust_remote_code: bool | Sequence[str] = False,
) -> bool:
    """Whether :func:`get_kernel` would find a build for this system.

    Args:
        repo_id, revision, version, backend, hub, check_arch: as for :func:`get_kernel`.
        trust_remote_code: accepted as Hugging Face's ``kernels.has_kernel`` accepts it;
            the answer does not depend on it, since trust is not judged here
            (:func:`kernel_info` tells whether a load would be allowed).

    Returns:
        ``False`` when the repository, version, revision or a fitting variant is missing,
        when ``backend`` cannot be used by this torch, or when the hub cannot provide the
        variant: it is unreachable, or offline and the variant is not in the download
        cache. A local build (``LOCAL_KERNELS``), whose files are on disk, is also
        verified against its digests as :func:`get_kernel` verifies it: ``False`` when
        the load would refuse its files. Also ``False`` when one of the kernels its
        ``kernel-depends`` lists (and theirs) would be ``False``, since
        :func:`get_kernel` loads them first, as Hugging Face's ``kernels.has_kernel``
        checks them. The reason is logged at INFO. It does not import, does not
        download or verify a hub's variant, and does not judge trust: it reads no
        signature, so a build that :func:`get_kernel` would refuse for its publisher or
        for its signature (one that cannot be read, or that does not verify) is still
        ``True``, and a trust store that cannot be read is no error here.

    Raises:
        ValueError: malformed arguments, as :func:`get_kernel` refuses them (both
            ``revision`` and ``version``, an empty or blank ``revision``, a malformed
            ``repo_id``, an unknown ``backend`` (:class:`~kernelforge.errors.VariantError`),
            a ``trust_remote_code`` entry that is not a repository id, ...).
        TypeError: a ``trust_remote_code`` that is neither a bool nor a list of
            repository ids, or a ``hub`` of another type, as :func:`get_kernel` refuses
            them.
    """
    from kernelforge.policy import allow_key

    _hub_repo_id(repo_id)
    _check_selector(revision, version)
    allow_key(trust_remote_code)  # a malformed one is refused as get_kernel refuses it
    return _has_kernel((repo_id, version, revision), backend, hub, check_arch, [], {})


def _has_kernel(wanted: Pin, backend: str | None, hub: HubArg, check_arch: bool,
                chain: list[Pin], known: dict[Pin, bool]) -> bool:
    """:func:`has_kernel` of ``wanted``, a kernel-depends entry of the kernels in
    ``chain`` (none for the kernel asked for), whose own ``kernel-depends`` are checked
    in turn. ``known``: the answers given so far in this call, so that a kernel that
    several others depend on is looked up once, as :func:`get_kernel` loads it once."""
    if wanted not in known:
        known[wanted] = _has_kernel_once(wanted, backend, hub, check_arch, chain, known)
    return known[wanted]


def _has_kernel_once(wanted: Pin, backend: str | None, hub: HubArg, check_arch: bool,
                     chain: list[Pin], known: dict[Pin, bool]) -> bool:
    """The answer :func:`_has_kernel` keeps."""
    from kernelforge import variants
    from kernelforge.errors import VariantError

    repo_id, version, revision = wanted
    try:
        # trust is not judged: a signature that cannot be read or does not verify is
        # get_kernel's to refuse, with its fix, as an untrusted publisher is
        plan = _locate(repo_id, revision, version, backend, hub, check_arch, False,
                       announce=False, judge=False)
    except (HubError, VariantNotFoundError) as err:
        logger.info("has_kernel(%r): no: %s", repo_id, err)
        return False
    except VariantError as err:
        if backend not in variants.BACKENDS:
            raise  # a misspelt backend is a malformed argument
        logger.info("has_kernel(%r): no: %s", repo_id, err)
        return False
    if plan.hub is not None and plan.info.path is None and getattr(plan.hub, "offline", False):
        logger.info("has_kernel(%r): no: variant %s at %s is not in the download cache "
                    "and the hub is offline", repo_id, plan.info.variant,
                    (plan.info.commit or "")[:12])
        return False
    if plan.hub is None and plan.info.path is not None:
        try:  # a local build: the check get_kernel makes before importing it
            _verify_local(plan.info.path)
        except (HubError, IntegrityError) as err:
            logger.info("has_kernel(%r): no: %s", repo_id, err)
            return False
    return _has_dependencies(wanted, plan.metadata, backend, hub, check_arch, chain, known)


def _has_dependencies(parent: Pin, meta: Mapping[str, Any], backend: str | None,
                      hub: HubArg, check_arch: bool, chain: list[Pin],
                      known: dict[Pin, bool]) -> bool:
    """Whether every ``kernel-depends`` entry of ``meta`` (the metadata of ``parent``'s
    chosen variant) has a build here, as :func:`_dependencies` would load them."""
    from kernelforge.lock._model import _dependency_keys  # the one reading of such a list

    try:
        entries = _dependency_keys(dict(meta), f"{parent[0]}: metadata.json")
    except HubError as err:
        logger.info("has_kernel(%r): no: %s", parent[0], err)
        return False
    chain = [*chain, parent]
    for wanted in entries:
        if any(_same_kernel(wanted, c) for c in chain):
            logger.info("has_kernel(%r): no: cyclic kernel dependency: %s", parent[0],
                        " -> ".join([c[0] for c in chain] + [wanted[0]]))
            return False
        if not _has_kernel(wanted, backend, hub, check_arch, chain, known):
            logger.info("has_kernel(%r): no: its kernel-depends entry %s has no build that "
                        "loads here", parent[0], wanted[0])
            return False
    return True


def _verify_local(variant_dir: Path) -> None:
    """Check a local build's files as :func:`_load` checks them (links to regular files
    followed), importing nothing."""
    from kernelforge.digest import verify_variant

    data, meta = _read_metadata_once(variant_dir)
    verify_variant(variant_dir, meta, bytecode="allow-pycache", metadata_data=data,
                   follow_links=True)
