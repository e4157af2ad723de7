"""Reading lock files: a ``kernelforge.lock`` or a Hugging Face ``kernels.lock`` named by
path or found in a project directory (:func:`read_lock`), or the one in an installed
package's metadata (:func:`installed_lock`), each checked entry by entry so that an
error names the file, the entry and the fix."""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kernelforge._parse import UPGRADE, json_loads, newer_format
from kernelforge._paths import HERE, blank_name_hint, empty_path_why, is_empty_path
from kernelforge.errors import LockError
from kernelforge.hub.base import is_commit, validate_repo_id
from kernelforge.lock._model import (
    FORMAT,
    HF_LOCK_FILE,
    LOCK_FILE,
    DependencyKey,
    LockedKernel,
    LockedVariant,
    LockFile,
    _key_order,
    dependency_key,
    describe_dependency,
)


def _is_variant_name(name: str) -> bool:
    """Whether ``name`` can be a variant's folder under ``build/`` (and in the download
    cache): one path part, so that it names no other place."""
    return name not in ("", ".", "..") and not any(c in name for c in "/\\\0")


def _kernel_from_json(repo_id: str, doc: Any, path: Path, where: str | None = None,
                      nested: bool = False) -> LockedKernel:
    """One entry of ``kernels`` (or, ``nested``, of a kernel's ``depends``, which holds
    no ``depends`` of its own); ``where`` names it in messages."""
    def bad(problem: str) -> LockError:
        return LockError(f"{path}: {where or f'kernel {repo_id!r}'}: {problem}; run "
                         "'kernelforge lock' again to rewrite the file")

    def optional_str(value: Any, field: str) -> str | None:
        if value is not None and not isinstance(value, str):
            raise bad(f"{field} must be a string or null, got {value!r}")
        return value

    if not nested:
        try:
            validate_repo_id(repo_id)
        except ValueError:
            raise bad("the key must be a repository id 'org/name' (letters, digits, '.', "
                      "'_' and '-')") from None
    if not isinstance(doc, dict):
        raise bad("expected an object")
    if not is_commit(doc.get("commit")):
        raise bad(f"'commit' must be a 40-hex commit id, got {doc.get('commit')!r}")
    repo = doc.get("repo")
    if repo is None:
        repo = repo_id
    else:
        try:
            validate_repo_id(repo)
        except ValueError:
            raise bad(f"'repo' must be a repository id 'org/name', got {repo!r}") from None
    variants: dict[str, LockedVariant] = {}
    raw = doc.get("variants")
    if not isinstance(raw, dict) or not raw:
        raise bad("'variants' must map variant names to {files: {path: sha256}}")
    for name, entry in raw.items():
        if not _is_variant_name(name):
            raise bad(f"variant {name!r} is not a variant name (one folder name, not empty, "
                      "'.' or '..', without '/' or '\\')")
        files = entry.get("files") if isinstance(entry, dict) else None
        if not isinstance(files, dict) or "metadata.json" not in files:
            raise bad(f"variant {name!r} has no 'files' map with metadata.json")
        for file, digest in files.items():
            if not isinstance(digest, str) or not digest:
                raise bad(f"variant {name!r}: 'files': the digest of {file!r} must be a "
                          f"base64 sha256 string, got {digest!r}")
        signer = optional_str(entry.get("signer"), f"variant {name!r}: 'signer'")
        variants[str(name)] = LockedVariant(dict(files), signer)
    hub = doc.get("hub", "hf")
    if hub not in ("hf", "local"):
        raise bad(f"'hub' must be 'hf' or 'local', got {hub!r}")
    if nested and doc.get("depends") is not None:
        raise bad("a dependency holds no 'depends' of its own (the kernel's 'depends' "
                  "lists every dependency, transitively)")
    branch = optional_str(doc.get("branch"), "'branch'")
    requested = doc.get("requested")
    if requested is not None and not isinstance(requested, dict):
        raise bad('\'requested\' must be an object: {"version": N}, {"version": ">=N"} or '
                  f'{{"revision": "..."}}, got {requested!r}')
    if nested and isinstance(requested, dict):  # as Requirement.to_json gives it
        requested = {k: v for k, v in requested.items() if k != "repo-id"}
    depends = None if nested else _depends_from_json(repo_id, doc.get("depends"), path)
    return LockedKernel(repo_id, repo, doc["commit"], hub, branch, requested, variants,
                        depends)


def _depends_from_json(repo_id: str, raw: Any,
                       path: Path) -> dict[DependencyKey, LockedKernel] | None:
    """A kernel's ``depends``: ``None`` when absent (a lock written before kernelforge
    pinned dependencies, which loads them unpinned)."""
    if raw is None:
        return None
    if not isinstance(raw, list):
        raise LockError(f"{path}: kernel {repo_id!r}: 'depends' must be a list of pinned "
                        "kernels, each with 'requested': {repo-id, version | revision}; run "
                        "'kernelforge lock' again to rewrite the file")
    out: dict[DependencyKey, LockedKernel] = {}
    for i, item in enumerate(raw):
        field = f"kernel {repo_id!r}: depends[{i}]"
        try:
            key = dependency_key(item.get("requested") if isinstance(item, dict) else None)
        except ValueError as err:
            raise LockError(f"{path}: {field}: 'requested': {err}; run 'kernelforge lock' "
                            "again to rewrite the file") from None
        field += f" ({describe_dependency(key)})"
        if key in out:
            raise LockError(f"{path}: {field}: pinned twice; run 'kernelforge lock' again "
                            "to rewrite the file")
        out[key] = _kernel_from_json(key[0], item, path, field, nested=True)
    return out


def _kernels_lock_entries(doc: list[Any], p: Path) -> dict[str, LockedKernel]:
    """The kernels of a Hugging Face ``kernels.lock``, read as their loader reads it.

    Its entries form one map from a request (``repo-id`` with ``version`` or
    ``revision``) to a commit: a request listed twice is refused, as their reader refuses
    it. A kernel loaded by name takes the first of its repository's entries in their
    order (versions ascending, then revisions; the order their ``kernels lock`` writes),
    and every entry also pins its exact request for the kernels that list it in
    ``kernel-depends`` (the list is flat: every kernel of the dependency tree).
    """
    first: dict[str, tuple[tuple[Any, ...], LockedKernel]] = {}
    pins: dict[DependencyKey, LockedKernel] = {}
    for n, item in enumerate(doc):
        dep = item.get("dependency") if isinstance(item, dict) else None
        lock = item.get("lock") if isinstance(item, dict) else None
        repo_id = dep.get("repo-id") if isinstance(dep, dict) else None
        commit = lock.get("commit") if isinstance(lock, dict) else None
        if isinstance(commit, str):
            commit = commit.lower()  # hex in either case, as their reader takes it
        if not isinstance(dep, dict) or not isinstance(repo_id, str) or not is_commit(commit):
            problem = ("is not an object" if not isinstance(item, dict)
                       else "has no 'dependency' object" if not isinstance(dep, dict)
                       else "has no 'dependency.repo-id' string" if not isinstance(repo_id, str)
                       else "has no 'lock' object" if not isinstance(lock, dict)
                       else f"'lock.commit' must be a 40-hex commit id, got {commit!r}")
            raise LockError(f"{p}: entry {n} {problem} (each entry is {{dependency: "
                            "{repo-id, version | revision}, lock: {commit}}); run "
                            "'kernelforge lock' (or 'kernels lock') again to rewrite the file")
        try:
            validate_repo_id(repo_id)
        except ValueError:
            raise LockError(f"{p}: entry {n} (kernel {repo_id!r}): 'dependency.repo-id' must "
                            f"be a repository id 'org/name', got {repo_id!r}; run 'kernelforge "
                            "lock' (or 'kernels lock') again to rewrite the file") from None
        requested = {k: v for k, v in dep.items() if k != "repo-id"}
        entry = LockedKernel(repo_id, repo_id, str(commit), None, None, requested, None)
        try:
            key: DependencyKey | None = dependency_key(dep)
        except ValueError as err:
            if not isinstance(dep.get("version"), str) or "revision" in dep:
                raise LockError(f"{p}: entry {n} (kernel {repo_id!r}): 'dependency': {err}; "
                                "run 'kernelforge lock' (or 'kernels lock') again to rewrite "
                                "the file") from None
            key = None  # not an exact request ("version": ">=2"): by name only, in file order
        if key is not None:
            if key in pins:
                raise LockError(f"{p}: {describe_dependency(key)} is listed twice (Hugging "
                                "Face's kernels refuses such a file too); keep one entry, or "
                                "run 'kernelforge lock' / 'kernels lock' again")
            pins[key] = entry
        order = (0, *_key_order(key)) if key is not None else (1, n)
        if repo_id not in first or order < first[repo_id][0]:
            first[repo_id] = (order, entry)
    return {name: dataclasses.replace(k, depends=dict(pins)) for name, (_o, k) in first.items()}


#: What to pass instead of an empty lock file path, in Python and on the command line.
EMPTY_LOCK_GIVE = f"the lock file, or the project directory holding one ({HERE})"
#: Why an empty lock file path is refused, and what to pass instead: the start of the
#: refusals of ``lockfile=""`` (:func:`check_lockfile`) and of the command line's
#: ``info --lock ''`` and ``download ''``.
EMPTY_LOCK_WHY = empty_path_why("a lock file", EMPTY_LOCK_GIVE)


def check_lockfile(lockfile: object, default: str = "") -> None:
    """Refuse an empty (or blank) ``lockfile`` string, as ``hub=""`` is refused: read as
    a path it names the current directory, so ``lockfile=os.environ.get("LOCK", "")``
    with the variable unset would load whatever lock the working directory holds.

    Args:
        lockfile: the argument as given.
        default: what leaving it out means, where it may be left out, ending the message
            (``", or nothing (None in Python) for ..."``).

    Raises:
        ValueError: ``lockfile`` is an empty or blank string.
    """
    if is_empty_path(lockfile):
        raise ValueError(f"lockfile: {EMPTY_LOCK_WHY}{default}{blank_name_hint(lockfile)}")


def lock_file_path(path: str | os.PathLike[str]) -> Path:
    """The lock file ``path`` names: itself, or in a project directory (or the directory
    of a ``pyproject.toml`` named, as ``kernelforge lock`` takes it) its
    ``kernelforge.lock``, else its ``kernels.lock`` (``~`` is the home directory, as in
    ``hub=``)."""
    p = Path(os.path.expanduser(os.fspath(path)))
    if p.name == "pyproject.toml" and p.is_file():
        p = p.parent
    if p.is_dir():
        return p / LOCK_FILE if (p / LOCK_FILE).is_file() else p / HF_LOCK_FILE
    return p


def read_lock(path: str | os.PathLike[str]) -> LockFile:
    """Read a ``kernelforge.lock`` or a Hugging Face ``kernels.lock``.

    Args:
        path: the lock file, or a project directory holding one (``kernelforge.lock``
            preferred), or that directory's ``pyproject.toml``.

    Returns:
        The :class:`LockFile`.

    Raises:
        LockError: missing, not JSON, or not in either format (names the file).
    """
    path = os.path.expanduser(os.fspath(path))
    p = lock_file_path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        where = (f"{p.parent}: neither {LOCK_FILE} nor {HF_LOCK_FILE} found"
                 if p != Path(path) else f"{p}: lock file not found"
                 + ("" if p.is_absolute() else f" (looked for {p.absolute()})"))
        raise LockError(f"{where}; write it with 'kernelforge lock PROJECT'") from None
    except (OSError, ValueError) as err:
        raise LockError(f"{p}: not a readable JSON lock file ({err})") from err
    return _parse_lock(text, p)


#: The lock files looked for in an installed package's metadata, in this order: the one
#: that pins every file first, as in a project directory (:func:`lock_file_path`).
METADATA_LOCK_FILES = (LOCK_FILE, HF_LOCK_FILE)


def installed_lock(module: str, caller: str) -> tuple[LockFile, str]:
    """The lock file in the installed metadata of the package that ``module`` belongs to,
    for a locked load given no lock file, as Hugging Face's ``kernels`` documents it:
    an installed package loads the kernels it locked without knowing where its project
    directory was. Hugging Face's ``kernels`` writes ``kernels.lock`` there when a package
    is built with it among the build requirements; a ``kernelforge.lock`` a package puts
    there is read first.

    Args:
        module: the calling module's name (its top-level package names the
            distributions, as :func:`importlib.metadata.packages_distributions` maps them).
        caller: the function called, for the message (``load_kernel``).

    Returns:
        The parsed lock file (its ``path`` the file in the distribution's metadata
        folder) and the sha256 of its text.

    Raises:
        LockError: no distribution provides ``module``, or none of those that do holds
            a lock file: the message says where it looked and how to fix it.
    """
    import hashlib
    import importlib.metadata as metadata

    package = module.partition(".")[0]
    names = sorted(set(_packages_distributions().get(package, ())))
    if len(names) > 1:  # a namespace package that several distributions share
        names = _owners(names, module, caller)
    looked = []
    for name in names:
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:  # pragma: no cover - removed meanwhile
            continue
        for lock_name in METADATA_LOCK_FILES:
            text = dist.read_text(lock_name)
            if text is not None:
                path = _metadata_path(dist, lock_name)
                return _parse_lock(text, path), hashlib.sha256(text.encode()).hexdigest()
        looked.append(f"{name} {dist.version} ({_metadata_path(dist, '')})")
    where = (f"the installed metadata of {', '.join(looked)}, the distribution"
             f"{'s' if len(looked) > 1 else ''} that provide{'' if len(looked) > 1 else 's'} "
             f"the calling module {module!r}, holds neither {LOCK_FILE} nor {HF_LOCK_FILE}"
             if looked else
             f"the calling module {module!r} belongs to no installed distribution, so there "
             f"is no package metadata to read a {LOCK_FILE} or {HF_LOCK_FILE} from")
    raise LockError(
        f"{caller}(lockfile=None) reads the lock file from the installed metadata of the "
        f"calling package, but {where}. Fix: pass lockfile= the path of the project's "
        f"{LOCK_FILE} or {HF_LOCK_FILE} (written by 'kernelforge lock PROJECT'), or install "
        f"the package with its lock file in its metadata (Hugging Face's kernels writes "
        f"{HF_LOCK_FILE} there when the package is built with 'kernels' in its "
        f"[build-system] requires and locked with [tool.kernels.dependencies])")


#: :func:`importlib.metadata.packages_distributions` as last read, and what it was read
#: for: each folder on ``sys.path`` with its modification time.
_DISTRIBUTIONS: tuple[tuple[tuple[str, int], ...], Mapping[str, list[str]]] | None = None


def _packages_distributions() -> Mapping[str, list[str]]:
    """:func:`importlib.metadata.packages_distributions`, read again only when a folder on
    ``sys.path`` was added, removed or changed its entries (a package installed, removed
    or upgraded: its ``.dist-info`` folder is new), since reading every installed
    distribution's metadata takes tens of milliseconds, and a model may make a locked load
    for each of its layers."""
    import importlib.metadata as metadata

    global _DISTRIBUTIONS
    state = []
    for entry in sys.path:
        try:
            state.append((entry, os.stat(entry or ".").st_mtime_ns))
        except (OSError, ValueError):
            state.append((entry, -1))
    key = tuple(state)
    if _DISTRIBUTIONS is None or _DISTRIBUTIONS[0] != key:
        _DISTRIBUTIONS = (key, metadata.packages_distributions())
    return _DISTRIBUTIONS[1]


def _owners(names: list[str], module: str, caller: str) -> list[str]:
    """Of the distributions ``names`` that provide the top-level package of ``module``
    (a namespace package they share), the one whose installed files (its ``RECORD``)
    hold the module's file.

    Raises:
        LockError: none or several of them do: which one's lock to read cannot be told.
    """
    import importlib.metadata as metadata

    found = sys.modules.get(module)
    main = sys.modules.get("__main__")  # a module run with 'python -m', as it is named
    if found is None and getattr(getattr(main, "__spec__", None), "name", None) == module:
        found = main
    path = getattr(found, "__file__", None)
    owners = []
    if path:
        target = Path(path).resolve()
        for name in names:
            try:
                dist = metadata.distribution(name)
                files = dist.files or []
            except metadata.PackageNotFoundError:  # pragma: no cover - removed meanwhile
                continue
            if any(Path(str(dist.locate_file(f))).resolve() == target for f in files):
                owners.append(name)
    if len(owners) == 1:
        return owners
    raise LockError(
        f"{caller}(lockfile=None) reads the lock file from the installed metadata of the "
        f"calling package, but the calling module {module!r} is in a package that the "
        f"distributions {', '.join(names)} all provide, and "
        f"{'none' if not owners else 'more than one'} of them lists its file "
        f"({path or 'no file'}) as installed; fix: pass lockfile= the path of the "
        f"project's {LOCK_FILE} or {HF_LOCK_FILE}")


def _metadata_path(dist: Any, name: str) -> Path:
    """Where a distribution's metadata file ``name`` is, for messages and for telling
    lock files apart: its path in a metadata folder on disk (``<name>.dist-info``), else
    a name saying which distribution's metadata holds it."""
    folder = getattr(dist, "_path", None)  # a PathDistribution's metadata folder
    if isinstance(folder, Path):
        return folder / name
    return Path(f"<metadata of {dist.metadata['Name']} {dist.version}>") / name


def _parse_lock(text: str, p: Path) -> LockFile:
    """A lock file's text, read from ``p`` (named in its errors), parsed."""
    try:
        doc = json_loads(text)
    except ValueError as err:
        raise LockError(f"{p}: not a readable JSON lock file ({err})") from err
    if isinstance(doc, list):  # Hugging Face's kernels.lock
        return LockFile(p, "kernels", _kernels_lock_entries(doc, p))
    newer = newer_format(doc, FORMAT)
    if newer is not None:
        raise LockError(f"{p}: this lock file is of format {newer!r}, written by a newer "
                        f"kernelforge (this version reads {FORMAT!r}); {UPGRADE}, "
                        "or run 'kernelforge lock' with this version to rewrite it in its "
                        "format")
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise LockError(f"{p}: not a lock file (expected \"format\": {FORMAT!r}, or Hugging "
                        "Face's kernels.lock list)")
    entries = doc.get("kernels")
    if not isinstance(entries, dict):
        raise LockError(f"{p}: 'kernels' must be an object keyed by repository id")
    spellings: dict[str, str] = {}
    for name in entries:
        first = spellings.setdefault(name.lower(), name)
        if first != name:
            raise LockError(f"{p}: 'kernels' lists {first!r} and {name!r}, which name one "
                            "repository (repository ids ignore case); keep one spelling in the "
                            "project's dependencies and run 'kernelforge lock' again")
    return LockFile(p, "kernelforge",
                    {k: _kernel_from_json(k, v, p) for k, v in entries.items()})
