"""Writing lock files: ``kernelforge.lock`` and ``kernels.lock`` replaced together (each
written to a temporary, then renamed, a failed rename undone), and Hugging Face's
``kernels.lock`` entries made from what was locked, in the order their reader expects."""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kernelforge.errors import LockError
from kernelforge.lock._model import (
    _TABLES,
    HF_LOCK_FILE,
    LOCK_FILE,
    DependencyKey,
    LockedKernel,
    _key_order,
    _request_json,
    dependency_key,
    describe_dependency,
)

# the package's name, as before it was split into modules: what users' logging filters on
logger = logging.getLogger("kernelforge.lock")


@dataclass
class _Staged:
    """A lock file written to a temporary beside the file it replaces, not yet renamed.

    Attributes:
        path: the lock file as named (perhaps a symbolic link).
        target: the file replaced: ``path``, or the file its link leads to (the link
            stays).
        tmp: the temporary, fsynced, with the target's permission bits.
        old: the target's content before, or ``None`` when there was none.
    """

    path: Path
    target: Path
    tmp: Path
    old: bytes | None


def _cannot_write(path: Path, target: Path, err: OSError, outcome: str) -> LockError:
    import errno

    via = f" (a link to {target})" if target != Path(os.path.abspath(path)) else ""
    # The file is replaced by a temporary written beside it and renamed: a refusal to
    # make (or rename) that temporary is the directory's, whatever the file allows.
    temp = Path(err.filename) if isinstance(err.filename, str) else None
    if (err.errno in (errno.EACCES, errno.EPERM, errno.EROFS) and temp is not None
            and temp != target and temp.parent == target.parent):
        return LockError(f"{path}{via}: cannot write the lock file: its directory "
                         f"{target.parent} is not writable ({err.strerror or err}), and the "
                         "file is replaced by a new one written there; fix: make the "
                         f"directory writable; {outcome}")
    return LockError(f"{path}{via}: cannot write the lock file "
                     f"({err.strerror or err}); {outcome}")


def _stage(path: Path, doc: Any) -> _Staged:
    """Write ``doc`` to a hidden temporary beside the file ``path`` names, fsynced.

    Raises:
        LockError: it cannot be written (names the file and the reason; nothing changed).
    """
    import errno
    import stat

    from kernelforge._durable import write_temp

    target = Path(os.path.realpath(path))  # a link is written through: its file replaced
    mode: int | None = None  # of the file it replaces, which keeps its permission bits
    old: bytes | None = None
    try:
        try:
            st = os.stat(target)
        except FileNotFoundError:
            pass
        else:
            if stat.S_ISDIR(st.st_mode):
                raise OSError(errno.EISDIR, "a directory is in the way")
            if not stat.S_ISREG(st.st_mode):
                raise OSError(errno.EINVAL, "it is not a regular file")
            mode, old = stat.S_IMODE(st.st_mode), target.read_bytes()
        # a new lock file: 0o644 as the umask leaves it
        tmp = write_temp(target, (json.dumps(doc, indent=2) + "\n").encode("utf-8"),
                         chmod=mode)
    except OSError as err:
        raise _cannot_write(path, target, err, "nothing was changed") from err
    return _Staged(path, target, tmp, old)


def _restore(staged: _Staged) -> None:
    """Put back, durably, what a renamed :class:`_Staged` replaced (or remove it)."""
    from kernelforge._durable import fsync_dir, replace_file

    if staged.old is None:
        staged.target.unlink()
        fsync_dir(staged.target.parent)
    else:
        mode = os.stat(staged.target).st_mode & 0o7777  # the bits it had, kept by _stage
        replace_file(staged.target, staged.old, mode=0o600, chmod=mode)


def _write_lock_files(files: list[tuple[Path, Any]]) -> None:
    """Replace the lock files together: each is written to a temporary (fsynced) first,
    and renamed only once every one is written; when a rename fails, the files already
    renamed get their previous content back.

    Raises:
        LockError: naming the file that cannot be written and the reason, and what was
            changed (nothing, unless putting a file back failed too: then which file now
            disagrees with the other).
    """
    from kernelforge._durable import fsync_dir

    staged: list[_Staged] = []
    try:
        for path, doc in files:
            staged.append(_stage(path, doc))
    except BaseException:
        for s in staged:
            s.tmp.unlink(missing_ok=True)
        raise
    done: list[_Staged] = []
    for i, s in enumerate(staged):
        try:
            os.replace(s.tmp, s.target)
        except BaseException as err:  # an OSError, or Ctrl-C between the two renames
            for rest in staged[i:]:
                rest.tmp.unlink(missing_ok=True)
            kept = []
            for d in reversed(done):
                try:
                    _restore(d)
                except OSError as undo:
                    kept.append(f"{d.path} was updated and could not be put back "
                                f"({undo.strerror or undo})")
            if not isinstance(err, OSError):
                raise
            outcome = ("nothing was changed" if not kept else
                       "; ".join(kept) + f", so it disagrees with {s.path}: run "
                       "'kernelforge lock' again once the cause is fixed")
            raise _cannot_write(s.path, s.target, err, outcome) from err
        done.append(s)
    for parent in dict.fromkeys(s.target.parent for s in staged):
        fsync_dir(parent)


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


def _warn_redirected(key: DependencyKey, repo: str, fix: str) -> None:
    """Say that ``kernels.lock`` leaves out a request that a redirect resolves to ``repo``."""
    from kernelforge.hub.base import STATUS_FILE

    logger.warning(
        "kernelforge: %s: %s is redirected to %s (%s); this file can only pin a commit of the "
        "repository it names (Hugging Face's kernels looks the commit up there and follows no "
        "redirect), so it leaves %s out, and their loader reports it as not locked (%s pins %s and "
        "loads it). %s", HF_LOCK_FILE, key[0], repo, STATUS_FILE,
        describe_dependency(key), LOCK_FILE, repo, fix)


def _hf_entries(kernels: list[LockedKernel]) -> list[dict[str, Any]]:
    """Hugging Face's ``kernels.lock``: the project's kernels and every ``kernel-depends``
    request they pin, once each, in their reader's order (by repository, versions
    ascending, then revisions), as their ``kernels lock`` writes it: their loader
    resolves a dependency by its exact request, and a kernel loaded by name by the first
    entry of its repository. Where a dependency of the same repository sorts before a
    project kernel, a load by name takes the dependency's pin: that is logged.

    A request that ``kernel-status.toml`` redirects to another repository is left out,
    with a WARNING naming the destination: the file can only pin a commit of the
    repository it names, and the destination's commit under the original id is a commit
    that repository does not hold."""
    tops = [(k, _hf_entry(k)) for k in kernels]
    entries: dict[DependencyKey, dict[str, Any]] = {}
    left_out: set[DependencyKey] = set()
    for k, top in tops:
        key = dependency_key(top["dependency"])
        if k.repo.lower() != k.repo_id.lower():
            if key not in left_out:
                left_out.add(key)
                _warn_redirected(key, k.repo, f"Depend on {k.repo} instead (list it in "
                                 f"[{_TABLES[1]}] in place of {k.repo_id}).")
            continue
        entries.setdefault(key, top)
    for k in kernels:
        for key, dep in (k.depends or {}).items():
            if dep.repo.lower() != key[0].lower():
                if key not in left_out:
                    left_out.add(key)
                    _warn_redirected(key, dep.repo, f"It is a kernel-depends entry of "
                                     f"{k.repo_id}'s kernels: ask their publisher to depend "
                                     f"on {dep.repo} instead.")
                continue
            entries.setdefault(key, {"dependency": _request_json(key),
                                     "lock": {"commit": dep.commit}})
    ordered = sorted(entries.items(), key=lambda kv: _key_order(kv[0]))
    for k, top in tops:
        top_key = dependency_key(top["dependency"])
        if top_key in left_out:
            continue
        shadow = next(key for key, _e in ordered if key[0] == top_key[0])
        if shadow != top_key:
            logger.warning(
                "kernelforge: %s: Hugging Face's kernels, loading %s by name from kernels.lock, "
                "takes its first entry, %s (a kernel-depends entry), not the project's %s; "
                "kernelforge.lock keeps them apart (load with it, or give them one version)",
                HF_LOCK_FILE, k.repo_id, describe_dependency(shadow),
                describe_dependency(top_key))
    return [entry for _key, entry in ordered]
