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
                                    "signer": "3f2a9c..."}}}}}

When the project uses ``[tool.kernels.dependencies]`` it also writes Hugging Face's
``kernels.lock`` (commit only; their reader rejects unknown fields, hence two files), so
their loader keeps working. Both formats are read: a ``kernels.lock`` pins the commit
and the files are checked against their metadata only.
"""

from __future__ import annotations

import json
import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kernelforge.errors import LockError
from kernelforge.hub.base import is_commit, validate_repo_id

__all__ = [
    "HF_LOCK_FILE",
    "LOCK_FILE",
    "LockFile",
    "LockedKernel",
    "LockedVariant",
    "Requirement",
    "download_locked",
    "lock_project",
    "read_lock",
    "read_requirements",
]

logger = logging.getLogger(__name__)

LOCK_FILE = "kernelforge.lock"
HF_LOCK_FILE = "kernels.lock"
FORMAT = "kernelforge-lock/1"
_TABLES = ("tool.kernelforge.dependencies", "tool.kernels.dependencies")


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
        hub: ``"hf"`` or ``"local"``: the kind of hub it was locked from.
        branch: the branch the commit was on when locked, if any.
        requested: the requirement, as in :meth:`Requirement.to_json`.
        variants: ``{variant: LockedVariant}``; ``None`` for a Hugging Face
            ``kernels.lock``, which pins no digests.
    """

    repo_id: str
    repo: str
    commit: str
    hub: str = "hf"
    branch: str | None = None
    requested: dict[str, Any] | None = None
    variants: dict[str, LockedVariant] | None = None

    def to_json(self) -> dict[str, Any]:
        """The entry written to ``kernelforge.lock``."""
        return {
            "requested": self.requested or {},
            "hub": self.hub,
            "repo": self.repo,
            "branch": self.branch,
            "commit": self.commit,
            "variants": {name: {"files": dict(sorted(v.files.items())), "signer": v.signer}
                         for name, v in sorted((self.variants or {}).items())},
        }


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
        """The entry for ``repo_id``.

        Raises:
            LockError: the lock does not list it (names the file and the fix).
        """
        try:
            return self.kernels[repo_id]
        except KeyError:
            listed = ", ".join(sorted(self.kernels)) or "none"
            raise LockError(
                f"{self.path}: {repo_id} is not locked (locked: {listed}); add it to the "
                "project's [tool.kernelforge.dependencies] and run 'kernelforge lock'"
            ) from None


# --- pyproject.toml -----------------------------------------------------------------------


def _parse_spec(repo_id: str, value: Any, table: str, where: Path) -> Requirement:
    key = f"{table}.{repo_id!r}"

    def bad(problem: str) -> LockError:
        return LockError(f"{where}: key {key}: {problem}; expected a major version (1), "
                         "'>=N', or a table {version = N} / {revision = \"branch, tag or "
                         "commit\"}")

    try:
        validate_repo_id(repo_id)
    except ValueError as err:
        raise bad(str(err)) from err
    if isinstance(value, dict):
        unknown = set(value) - {"version", "revision"}
        if unknown or len(value) != 1:
            raise bad(f"a table needs exactly one of 'version' or 'revision', got "
                      f"{sorted(value)}")
        if "revision" in value:
            if not isinstance(value["revision"], str) or not value["revision"]:
                raise bad(f"revision {value['revision']!r} is not a string")
            return Requirement(repo_id, revision=value["revision"], table=table)
        value = value["version"]
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return Requirement(repo_id, version=value, table=table)
    if isinstance(value, str):
        m = re.fullmatch(r"\s*(>=|==)?\s*v?(\d+)\s*", value)
        if m:
            n = int(m.group(2))
            return (Requirement(repo_id, min_version=n, table=table) if m.group(1) == ">="
                    else Requirement(repo_id, version=n, table=table))
    raise bad(f"{value!r} is not a version requirement")


def read_requirements(project: str | os.PathLike[str]) -> list[Requirement]:
    """The kernels a project depends on, from its ``pyproject.toml``.

    Args:
        project: the project directory (or its ``pyproject.toml``).

    Returns:
        The requirements, sorted by repository id.

    Raises:
        LockError: no ``pyproject.toml``, no dependency table, a malformed entry, or
            one kernel listed differently in both tables.
    """
    try:
        import tomllib
    except ModuleNotFoundError:  # pragma: no cover - Python 3.10
        import tomli as tomllib  # type: ignore[no-redef]
    path = Path(project)
    path = path if path.name == "pyproject.toml" else path / "pyproject.toml"
    try:
        doc = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise LockError(f"{path}: not found; 'kernelforge lock' reads the project's "
                        "pyproject.toml") from None
    except (OSError, tomllib.TOMLDecodeError) as err:
        raise LockError(f"{path}: cannot be read as TOML ({err})") from err
    found: dict[str, Requirement] = {}
    for table in _TABLES:
        node: Any = doc
        for part in table.split("."):
            node = node.get(part, {}) if isinstance(node, dict) else {}
        if not isinstance(node, dict):
            raise LockError(f"{path}: [{table}] must be a table of 'org/name' = version")
        for repo_id, value in node.items():
            req = _parse_spec(repo_id, value, table, path)
            other = found.get(repo_id)
            if other is not None and other.to_json() != req.to_json():
                raise LockError(f"{path}: {repo_id} is listed in [{other.table}] as "
                                f"{other.to_json()} and in [{table}] as {req.to_json()}; "
                                "keep one")
            found[repo_id] = req
    if not found:
        raise LockError(f"{path}: no kernel dependencies; add a [{_TABLES[0]}] table, e.g. "
                        '"kernels-community/relu" = 1')
    return [found[k] for k in sorted(found)]


# --- reading and writing lock files -------------------------------------------------------


def _kernel_from_json(repo_id: str, doc: Any, path: Path) -> LockedKernel:
    def bad(problem: str) -> LockError:
        return LockError(f"{path}: kernel {repo_id!r}: {problem}; run 'kernelforge lock' "
                         "again to rewrite the file")

    if not isinstance(doc, dict):
        raise bad("expected an object")
    if not is_commit(doc.get("commit")):
        raise bad(f"'commit' must be a 40-hex commit id, got {doc.get('commit')!r}")
    variants: dict[str, LockedVariant] = {}
    raw = doc.get("variants")
    if not isinstance(raw, dict) or not raw:
        raise bad("'variants' must map variant names to {files: {path: sha256}}")
    for name, entry in raw.items():
        files = entry.get("files") if isinstance(entry, dict) else None
        if not isinstance(files, dict) or "metadata.json" not in files:
            raise bad(f"variant {name!r} has no 'files' map with metadata.json")
        variants[str(name)] = LockedVariant({str(k): str(v) for k, v in files.items()},
                                            entry.get("signer"))
    hub = doc.get("hub", "hf")
    if hub not in ("hf", "local"):
        raise bad(f"'hub' must be 'hf' or 'local', got {hub!r}")
    return LockedKernel(repo_id, str(doc.get("repo") or repo_id), doc["commit"], hub,
                        doc.get("branch"), doc.get("requested"), variants)


def read_lock(path: str | os.PathLike[str]) -> LockFile:
    """Read a ``kernelforge.lock`` or a Hugging Face ``kernels.lock``.

    Args:
        path: the lock file, or a project directory holding one (``kernelforge.lock``
            preferred).

    Returns:
        The :class:`LockFile`.

    Raises:
        LockError: missing, not JSON, or not in either format (names the file).
    """
    p = Path(path)
    if p.is_dir():
        p = p / LOCK_FILE if (p / LOCK_FILE).is_file() else p / HF_LOCK_FILE
    try:
        doc = json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        where = (f"{p.parent}: neither {LOCK_FILE} nor {HF_LOCK_FILE} found"
                 if Path(path).is_dir() else f"{p}: lock file not found")
        raise LockError(f"{where}; write it with 'kernelforge lock PROJECT'") from None
    except (OSError, ValueError) as err:
        raise LockError(f"{p}: not a readable JSON lock file ({err})") from err
    if isinstance(doc, list):  # Hugging Face's kernels.lock
        kernels: dict[str, LockedKernel] = {}
        for item in doc:
            dep = item.get("dependency") if isinstance(item, dict) else None
            lock = item.get("lock") if isinstance(item, dict) else None
            repo_id = dep.get("repo-id") if isinstance(dep, dict) else None
            commit = lock.get("commit") if isinstance(lock, dict) else None
            if not isinstance(dep, dict) or not isinstance(repo_id, str) or not is_commit(commit):
                raise LockError(f"{p}: entry {item!r} is not {{dependency: {{repo-id}}, "
                                "lock: {commit}}")
            requested = {k: v for k, v in dep.items() if k != "repo-id"}
            # A repository listed twice (say, at two versions for two dependents): the
            # first entry is the one loaded, as Hugging Face's kernels does.
            kernels.setdefault(repo_id, LockedKernel(repo_id, repo_id, str(commit), "hf",
                                                     None, requested, None))
        return LockFile(p, "kernels", kernels)
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise LockError(f"{p}: not a lock file (expected \"format\": {FORMAT!r}, or Hugging "
                        "Face's kernels.lock list)")
    entries = doc.get("kernels")
    if not isinstance(entries, dict):
        raise LockError(f"{p}: 'kernels' must be an object keyed by repository id")
    return LockFile(p, "kernelforge",
                    {str(k): _kernel_from_json(str(k), v, p) for k, v in entries.items()})


def _write_json(path: Path, doc: Any) -> None:
    from kernelforge._durable import replace_file

    replace_file(path, (json.dumps(doc, indent=2) + "\n").encode("utf-8"))


def _hf_entry(k: LockedKernel) -> dict[str, Any]:
    req = k.requested or {}
    version = req.get("version")
    if isinstance(version, str) and k.branch and k.branch[1:].isdigit():
        version = int(k.branch[1:])  # their format knows exact majors only
    dep: dict[str, Any] = {"repo-id": k.repo_id}
    if "revision" in req:
        dep["revision"] = req["revision"]
    else:
        dep["version"] = version
    return {"dependency": dep, "lock": {"commit": k.commit}}


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


def lock_kernel(req: Requirement, *, hub: Any = None, allow: Any = False) -> LockedKernel:
    """Resolve one requirement and pin its commit and every variant's files.

    Args:
        req: the requirement.
        hub: the ``hub=`` argument (see :func:`kernelforge.locate.hub_for`).
        allow: ``trust_remote_code``: locking enforces the trust policy for every
            variant, so that what the lock pins was trusted when it was written.

    Returns:
        The :class:`LockedKernel`.

    Raises:
        HubError, TrustError, IntegrityError: resolving, trusting or hashing failed.
    """
    from kernelforge import policy, revisions
    from kernelforge.digest import b64_sha256, verify_variant
    from kernelforge.errors import HubError
    from kernelforge.hub._staging import parse_metadata
    from kernelforge.hub.base import signature_path, version_branches
    from kernelforge.locate import hub_for

    h = hub_for(hub, req.repo_id)
    version = req.version
    if req.min_version is not None:
        # The versions on offer are the ones of the repository a load ends up in.
        target = _redirect_target(h, req.repo_id)
        fits = [v for v in version_branches(h.branches(target)) if v >= req.min_version]
        if not fits:
            moved = f" (redirected from {req.repo_id})" if target != req.repo_id else ""
            raise HubError(f"{target}{moved}: no version >= {req.min_version} in "
                           f"{h.describe()}")
        version = max(fits)
    sel = revisions.select(h, req.repo_id, revision=req.revision, version=version)
    variants: dict[str, LockedVariant] = {}
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
    return LockedKernel(req.repo_id, sel.repo_id, sel.commit, h.kind, sel.branch,
                        req.to_json(), variants)


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
        project: the project directory (holding ``pyproject.toml``).
        hub: the ``hub=`` argument; ``None``: per repository, the local hub when it
            holds it, else the Hugging Face Hub.
        allow: ``trust_remote_code`` for kernels that are not signed by a trusted key.

    Returns:
        The :class:`LockResult`. Files are replaced atomically; nothing is written
        when any kernel fails to lock.
    """
    root = Path(project)
    root = root.parent if root.name == "pyproject.toml" else root
    reqs = read_requirements(root)
    kernels = [lock_kernel(r, hub=hub, allow=allow) for r in reqs]
    doc = {"format": FORMAT, "kernels": {k.repo_id: k.to_json() for k in kernels}}
    _write_json(root / LOCK_FILE, doc)
    hf_path = None
    hf_reqs = {r.repo_id for r in reqs if r.table == _TABLES[1]}
    if hf_reqs:
        hf_path = root / HF_LOCK_FILE
        _write_json(hf_path, [_hf_entry(k) for k in kernels if k.repo_id in hf_reqs])
    return LockResult(root / LOCK_FILE, hf_path, kernels)


# --- downloading ----------------------------------------------------------------------------


def _fetch_checked(h: Any, locked: LockedKernel, name: str) -> Path:
    """Fetch one locked variant and verify it against the lock; re-fetch a bad copy once."""
    from kernelforge.cache import is_intact
    from kernelforge.digest import verify_variant
    from kernelforge.errors import IntegrityError
    from kernelforge.hub._staging import read_metadata

    pins = locked.variants[name].files if locked.variants is not None else None

    def check(path: Path, recorded: dict[str, str] | None) -> Path:
        verify_variant(path, read_metadata(path),
                       metadata_sha256=pins.get("metadata.json") if pins else None,
                       recorded=recorded, locked=pins)
        return path

    fetched = h.fetch_variant(locked.repo, locked.commit, name)
    try:
        return check(fetched.path, fetched.recorded)
    except IntegrityError:
        if (fetched.fetched or h.kind == "local" or getattr(h, "offline", True)
                or is_intact(fetched.path, fetched.recorded)):
            raise
        logger.warning("%s: the cached copy of %s failed verification; fetching it again",
                       locked.repo_id, name)
    fetched = h.fetch_variant(locked.repo, locked.commit, name, refresh=True)
    return check(fetched.path, fetched.recorded)


def _cache_load_files(h: Any, repo: str, commit: str, name: str) -> None:
    """Read the files an offline load reads besides the variant's own, so that a remote
    hub keeps them in its download cache: the variant's ``metadata.json`` and its
    signature and sigstore bundle (or the record that they are absent)."""
    from kernelforge.hub.base import signature_path

    for path in (f"build/{name}/metadata.json", signature_path(name),
                 f"build/{name}/metadata.json.sigstore"):
        h.read_file(repo, commit, path)


def _fetch_dependencies(hub: Any, variant_dir: Path, backend: str | None,
                        seen: set[tuple[Any, ...]]) -> list[tuple[str, str, Path]]:
    """Fetch the ``kernel-depends`` of a fetched variant, and theirs, as a load of it would
    choose them (the lock pins the kernel, not its dependencies), for offline loads."""
    from kernelforge.hub._staging import read_metadata
    from kernelforge.locate import locate_hub

    out: list[tuple[str, str, Path]] = []
    for entry in read_metadata(variant_dir).get("kernel-depends") or []:
        if not isinstance(entry, dict):
            continue  # the load refuses it, naming it
        key = (entry.get("repo-id"), entry.get("version"), entry.get("revision"))
        if key in seen or not isinstance(key[0], str):
            continue
        seen.add(key)
        plan = locate_hub(key[0], revision=key[2], version=key[1], backend=backend, hub=hub,
                          check_arch=True, allow=True)  # trust is the load's decision
        info = plan.info
        if plan.hub is None or info.commit is None:  # a LOCAL_KERNELS override: on disk
            continue
        fetched = plan.hub.fetch_variant(info.repo, info.commit, info.variant)
        _cache_load_files(plan.hub, info.repo, info.commit, info.variant)
        out.append((info.repo, info.variant, fetched.path))
        out += _fetch_dependencies(hub, fetched.path, backend, seen)
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
) -> list[tuple[str, str, Path]]:
    """Fetch every locked kernel into the download cache, for offline loads.

    Args:
        lockfile: the lock file, or a project directory holding one.
        hub: the ``hub=`` argument; ``None`` uses the kind each lock entry records.
        all_variants: every locked variant, not only the one this system loads.
        backend: choose for this backend instead of the system's.

    Returns:
        ``(repo_id, variant, path)`` for each variant fetched (or already cached), all
        verified against the lock. A variant a load would refuse (a lock without
        digests, for a kernel neither signed by a trusted key nor allowed) is fetched
        all the same, with a WARNING log line saying how to allow it. Then, for each,
        the kernels its ``kernel-depends`` name (and theirs), as a load would choose
        them: verified against their own metadata, not pinned by the lock.

    Raises:
        LockError, HubError, IntegrityError, VariantNotFoundError.
    """
    from kernelforge.locate import hub_for_lock, locate_locked

    lock = read_lock(lockfile)
    out = []
    deps_seen: set[tuple[Any, ...]] = set()  # each dependency fetched once per download
    for repo_id, locked in sorted(lock.kernels.items()):
        h = hub_for_lock(hub, locked)
        if all_variants:
            names = sorted(locked.variants) if locked.variants is not None else h.variants(
                locked.repo, locked.commit)
        else:
            plan = locate_locked(locked, lockfile=str(lock.path), backend=backend, hub=h,
                                 check_arch=True, allow=True, cache_only=False)
            names = [plan.info.variant]
        for name in names:
            path = _fetch_checked(h, locked, name)
            _cache_load_files(h, locked.repo, locked.commit, name)
            problem = _trust_problem(h, locked, name, path)
            if problem is not None:
                logger.warning(
                    "%s (variant %s): %s pins only its commit, and a load will refuse it: "
                    "%s. To load it: trust its publisher's key ('kernelforge trust add KEY "
                    "--repo ORG/*'), allow the repository ('kernelforge trust allow %s'), or "
                    "pass trust_remote_code=[%r] to load_kernel / get_locked_kernel",
                    repo_id, name, lock.path.name, problem, locked.repo, locked.repo)
            out.append((repo_id, name, path))
            out += _fetch_dependencies(hub, path, backend, deps_seen)
    return out
