"""The dependency model: what a project asks for (:class:`Requirement`), what a lock file
pins (:class:`LockedKernel`, :class:`LockedVariant`, :class:`LockFile`), and the requests
of a variant's ``kernel-depends`` (:data:`DependencyKey`), shared by the readers, the
writers, locking and downloading."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kernelforge.errors import LockError
from kernelforge.hub.base import validate_repo_id

LOCK_FILE = "kernelforge.lock"
HF_LOCK_FILE = "kernels.lock"
FORMAT = "kernelforge-lock/1"
_TABLES = ("tool.kernelforge.dependencies", "tool.kernels.dependencies")

#: A ``kernel-depends`` request: ``(repo_id, version, revision)``, one of the last two set.
DependencyKey = tuple[str, int | None, str | None]


def dependency_key(entry: object) -> DependencyKey:
    """The request a ``kernel-depends`` entry (or a lock's ``requested``) makes.

    Args:
        entry: ``{"repo-id": "org/name", "version": N}`` or ``{"repo-id": ...,
            "revision": "..."}``.

    Returns:
        ``(repo_id, version, revision)``.

    Raises:
        ValueError: not an object with a valid ``repo-id`` and exactly one of a
            non-negative integer ``version`` or a non-empty string ``revision``.
    """
    if not isinstance(entry, dict):
        raise ValueError("expected an object {repo-id, version | revision}")
    repo_id, version, revision = entry.get("repo-id"), entry.get("version"), entry.get("revision")
    if not isinstance(repo_id, str):
        raise ValueError(f"'repo-id' must be 'org/name', got {repo_id!r}")
    validate_repo_id(repo_id)
    if (version is None) == (revision is None):
        raise ValueError("needs exactly one of 'version' or 'revision'")
    if version is not None and (isinstance(version, bool) or not isinstance(version, int)
                                or version < 0):
        raise ValueError(f"'version' must be a non-negative integer, got {version!r}")
    if revision is not None and (not isinstance(revision, str) or not revision):
        raise ValueError(f"'revision' must be a branch, tag or commit, got {revision!r}")
    return repo_id, version, revision


def describe_dependency(key: DependencyKey) -> str:
    """``org/name version 1`` or ``org/name revision 'main'``, for messages.

    Args:
        key: the request, as :func:`dependency_key` makes it.
    """
    repo_id, version, revision = key
    if revision is None:
        return f"{repo_id} version {version}"
    return f"{repo_id} revision {revision!r}"


def _request_json(key: DependencyKey) -> dict[str, Any]:
    """The ``requested`` of a dependency entry: the ``kernel-depends`` entry itself."""
    repo_id, version, revision = key
    return ({"repo-id": repo_id, "version": version} if revision is None
            else {"repo-id": repo_id, "revision": revision})


def _key_order(key: DependencyKey) -> tuple[str, bool, int, str]:
    return key[0], key[1] is None, key[1] or 0, key[2] or ""


@dataclass(frozen=True)
class Requirement:
    """One kernel a project depends on.

    Attributes:
        repo_id: ``org/name``.
        version: an exact major version, or ``None``.
        min_version: the lowest acceptable major version (``">=N"``), or ``None``.
        revision: a branch, tag or commit, or ``None``.
        table: the ``pyproject.toml`` table it came from.
    """

    repo_id: str
    version: int | None = None
    min_version: int | None = None
    revision: str | None = None
    table: str = _TABLES[0]

    def to_json(self) -> dict[str, Any]:
        """``{"version": 1}``, ``{"version": ">=2"}`` or ``{"revision": "..."}``."""
        if self.revision is not None:
            return {"revision": self.revision}
        if self.min_version is not None:
            return {"version": f">={self.min_version}"}
        return {"version": self.version}


@dataclass(frozen=True)
class LockedVariant:
    """What a lock pins for one build variant.

    Attributes:
        files: ``{relpath: base64 sha256}`` of every file, ``metadata.json`` included.
        signer: the key id or sigstore identity that signed it when locked, if any.
    """

    files: dict[str, str]
    signer: str | None = None


@dataclass(frozen=True)
class LockedKernel:
    """One locked kernel.

    Attributes:
        repo_id: the id the project asks for.
        repo: where it is loaded from (differs after a redirect).
        commit: the pinned commit.
        hub: ``"hf"`` or ``"local"``: the kind of hub it was locked from; ``None`` for a
            Hugging Face ``kernels.lock``, which does not record it.
        branch: the branch the commit was on when locked, if any.
        requested: the requirement, as in :meth:`Requirement.to_json`.
        variants: ``{variant: LockedVariant}``; ``None`` for a Hugging Face
            ``kernels.lock``, which pins no digests.
        depends: ``{request: LockedKernel}``: the ``kernel-depends`` of every pinned
            variant, transitively, each pinned the same way (their own ``depends`` is
            ``None``: this map holds them all); ``None`` when the lock pins no
            dependencies (a ``kernels.lock``, or a ``kernelforge.lock`` written before
            kernelforge pinned them).
    """

    repo_id: str
    repo: str
    commit: str
    hub: str | None = "hf"
    branch: str | None = None
    requested: dict[str, Any] | None = None
    variants: dict[str, LockedVariant] | None = None
    depends: dict[DependencyKey, LockedKernel] | None = None

    def to_json(self) -> dict[str, Any]:
        """The entry written to ``kernelforge.lock``."""
        doc: dict[str, Any] = {
            "requested": self.requested or {},
            "hub": self.hub,
            "repo": self.repo,
            "branch": self.branch,
            "commit": self.commit,
            "variants": {name: {"files": dict(sorted(v.files.items())), "signer": v.signer}
                         for name, v in sorted((self.variants or {}).items())},
        }
        if self.depends is not None:
            doc["depends"] = [{**dep.to_json(), "requested": _request_json(key)}
                              for key, dep in sorted(self.depends.items(),
                                                     key=lambda kv: _key_order(kv[0]))]
        return doc


@dataclass(frozen=True)
class LockFile:
    """A parsed lock file.

    Attributes:
        path: the file.
        kind: ``"kernelforge"`` or ``"kernels"`` (Hugging Face's format).
        kernels: ``{repo_id: LockedKernel}``.
    """

    path: Path
    kind: str
    kernels: dict[str, LockedKernel]

    def require(self, repo_id: str) -> LockedKernel:
        """The entry for ``repo_id`` (spelled in any case, as the hubs resolve ids).

        A ``kernelforge.lock`` lists each repository under one spelling (:func:`read_lock`
        refuses two). A ``kernels.lock`` may list two spellings (a kernel and another's
        ``kernel-depends`` request): the exact one is taken, as Hugging Face's loader
        takes it, and another spelling of the id is refused as ambiguous.

        Args:
            repo_id: ``org/name``, in any case.

        Returns:
            The :class:`LockedKernel` the lock pins for it.

        Raises:
            LockError: the lock does not list it, or lists it under several spellings
                none of which is ``repo_id`` (names the file and the fix).
        """
        try:
            return self.kernels[repo_id]
        except KeyError:
            same = sorted(k for k in self.kernels if k.lower() == repo_id.lower())
            if len(same) == 1:
                return self.kernels[same[0]]
            if same:
                raise LockError(
                    f"{self.path}: {repo_id} is locked under {len(same)} spellings "
                    f"({', '.join(same)}), which name one repository; keep one entry "
                    "(run 'kernelforge lock' again after fixing the project's dependencies)"
                ) from None
            listed = ", ".join(sorted(self.kernels)) or "none"
            # kernels.lock holds the kernels of [tool.kernels.dependencies] only
            table = _TABLES[1] if self.kind == "kernels" else _TABLES[0]
            raise LockError(
                f"{self.path}: {repo_id} is not locked (locked: {listed}); add it to the "
                f"project's [{table}] and run 'kernelforge lock'"
            ) from None


def warn_unpinned(log: logging.Logger, lock: LockFile, locked: LockedKernel,
                  key: DependencyKey, parent: str) -> None:
    """Log a WARNING that ``lock`` leaves a ``kernel-depends`` request of a kernel it locks
    unpinned, so that it loads as :func:`kernelforge.get_kernel` would choose it.

    Args:
        log: the logger to write to.
        lock: the lock file.
        locked: its entry for the kernel being loaded (or fetched).
        key: the request that is not pinned.
        parent: who lists it (a repository, or a repository and variant).
    """
    if locked.depends is None:  # (read_lock gives every kernels.lock entry its depends)
        why = "the lock was written before kernelforge pinned dependencies"
    elif lock.kind == "kernels":
        why = "it has no entry for that request"
    else:
        why = f"its entry for {locked.repo_id} does not list it"
    log.warning(
        "kernelforge: %s (a kernel-depends entry of %s) is not pinned by %s (%s): it is taken as "
        "get_kernel would choose it (the newest commit of that version or revision, checked "
        "against its own metadata only), so what loads can change; run 'kernelforge lock' "
        "on the project again to pin it (and load with the kernelforge.lock it writes)",
        describe_dependency(key), parent, lock.path, why)


def _dependency_keys(meta: dict[str, Any], where: str | None) -> list[DependencyKey]:
    """The requests of a variant's ``kernel-depends``.

    Args:
        meta: the variant's metadata.
        where: its ``metadata.json`` for messages: a malformed list or entry is refused;
            ``None``: left out (a load refuses it, naming it).

    Raises:
        HubError: with ``where``, a malformed list or entry.
    """
    from kernelforge.errors import HubError

    entries = meta.get("kernel-depends") or []
    if not isinstance(entries, list):
        if where is None:
            return []
        raise HubError(f"{where}: 'kernel-depends' must be a list of {{repo-id, version | "
                       f"revision}}, got {entries!r}; ask the publisher to fix it")
    keys = []
    for entry in entries:
        try:
            keys.append(dependency_key(entry))
        except ValueError as err:
            if where is not None:
                raise HubError(f"{where}: 'kernel-depends': entry {entry!r} is not {{repo-id, "
                               f"version | revision}} ({err}); ask the publisher to fix it"
                               ) from None
    return keys
