"""Assembling ``build/<variant>/``: the flattened package, ``_ops.py``, the extension and
``metadata.json`` with per-file digests. The directory appears atomically: it is built
under a temporary name next to its final place (``.<variant>.tmp-<owner>-<random>``,
the owner naming the host, its boot, the pid namespace and the process: :func:`_owner`)
and exchanged with the old one in one step (``renameat2(RENAME_EXCHANGE)`` on Linux),
so the variant is always there, old or new.
Where the exchange is not available the old tree is first renamed aside
(``.<variant>.old-<owner>``); a build killed in between leaves it there, ``publish``
refuses the directory until then, and the next build puts it back
(:func:`recover_leftovers`). The names are ``kernelforge._durable.LEFTOVER_NAME``.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import functools
import hashlib
import json
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path

from kernelforge import __version__, digest
from kernelforge._durable import DISK_FULL, LEFTOVER_NAME, NOT_WRITABLE, nearest_folder
from kernelforge.build.plan import BuildPlan, manifest_package_files, package_problems
from kernelforge.errors import BuildError
from kernelforge.manifest import Manifest

OPS_TEMPLATE = '''\
import torch
{import_line}
ops = torch.ops.{namespace}


def add_op_namespace_prefix(op_name: str) -> str:
    """Prefix op_name with this build's unique op namespace."""
    return f"{namespace}::{{op_name}}"
'''


def render_ops_py(namespace: str, *, has_extension: bool) -> str:
    """The generated ``_ops.py`` of a variant."""
    import_line = f"from . import {namespace}" if has_extension else ""
    return OPS_TEMPLATE.format(namespace=namespace, import_line=import_line)


def package_error(manifest: Manifest) -> BuildError | None:
    """The error for what stops the Python package ``torch-ext/<name>/`` from being
    shipped (:func:`~kernelforge.build.plan.package_problems`), one line per problem;
    ``None`` when nothing does. ``kernelforge check`` reports the same problems in the
    same words."""
    problems = package_problems(manifest.root, manifest.python_name, manifest.pyext)
    if not problems:
        return None
    return BuildError("\n".join(f"{path} {problem}; fix: {fix}"
                                for path, problem, fix in problems))


def _copy_python_package(manifest: Manifest, dest: Path) -> None:
    package = manifest.root / "torch-ext" / manifest.python_name
    if not (package / "__init__.py").is_file():
        raise BuildError(
            f"{manifest.path}: the Python package {package}/__init__.py is missing; "
            f"fix: create torch-ext/{manifest.python_name}/__init__.py"
        )
    error = package_error(manifest)  # build_project refuses these before it compiles
    if error is not None:
        raise error
    # Exactly the files the source hash covers (plan.package_files), a linked file or
    # folder's as regular files.
    prefix = f"torch-ext/{manifest.python_name}/"
    for relpath, path in manifest_package_files(manifest):
        target = dest / relpath[len(prefix):]
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target)


def metadata_for(
    manifest: Manifest,
    plan: BuildPlan,
    files: Mapping[str, str],
    provenance: Mapping[str, object],
) -> dict[str, object]:
    """The ``metadata.json`` document of a variant (kebab-case keys)."""
    backend: dict[str, object] = {"type": plan.backend}
    if plan.archs is not None:
        backend["archs"] = list(plan.archs)
    meta: dict[str, object] = {
        "name": manifest.name,
        "id": plan.module_id,
        "version": manifest.version if manifest.version is not None else 1,
        "license": manifest.license or "unknown",
        # [general] python-depends, then the backend's own ([general.cuda] ...), as
        # Hugging Face's builder writes them
        "python-depends": [*manifest.python_depends,
                           *manifest.backend_python_depends.get(plan.backend, ())],
        "backend": backend,
    }
    if manifest.upstream:
        meta["upstream"] = manifest.upstream
    if manifest.source:
        meta["source"] = manifest.source
    kernel_depends = [*manifest.kernel_depends,
                      *manifest.backend_kernel_depends.get(plan.backend, ())]
    if kernel_depends:
        meta["kernel-depends"] = [d.as_dict() for d in kernel_depends]
    meta["digest"] = {"algorithm": "sha256", "files": dict(sorted(files.items()))}
    meta["provenance"] = dict(provenance)
    return meta


def assemble_variant(
    manifest: Manifest,
    plan: BuildPlan,
    *,
    extension: Path | None,
    out_dir: Path,
    provenance: Mapping[str, object],
) -> Path:
    """Write ``out_dir/<variant>/`` atomically and return its path.

    Args:
        manifest: the project.
        plan: the build plan (names, archs).
        extension: the compiled ``.abi3.so``, or ``None`` for noarch builds.
        out_dir: the project's ``build/`` directory.
        provenance: the ``provenance`` object of ``metadata.json``.
    """
    final = out_dir / plan.variant
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{plan.variant}.tmp-{_owner()}-",
                                        dir=out_dir))
    except OSError as err:
        refused = _write_error(err, final)
        if refused is None:
            raise
        raise refused from err
    try:
        _copy_python_package(manifest, staging)
        (staging / "_ops.py").write_text(
            render_ops_py(plan.namespace, has_extension=extension is not None)
        )
        if extension is not None:
            shutil.copyfile(extension, staging / f"{plan.namespace}.abi3.so")
        files = digest.hash_tree(staging)
        meta = metadata_for(manifest, plan, files, provenance)
        (staging / "metadata.json").write_text(json.dumps(meta, indent=2) + "\n")
        _set_modes(staging, extension=f"{plan.namespace}.abi3.so" if extension else None)
        _swap_into_place(staging, final)
    except BaseException as err:
        shutil.rmtree(staging, ignore_errors=True)
        refused = _write_error(err, final) if isinstance(err, OSError) else None
        if refused is not None:
            raise refused from err
        raise
    return final


#: The permission bits of a variant's files, folders and extension, whatever the umask.
FILE_MODE = 0o644
FOLDER_MODE = 0o755
EXTENSION_MODE = 0o755


def _set_modes(staging: Path, *, extension: str | None) -> None:
    """Give the variant's folders and files fixed modes: the same sources build the same
    directory, permissions included, under any umask (``mkdtemp`` makes the top folder
    0700, and the files would otherwise follow the umask: 0600 under 077, below a
    folder every user may read). The folders above it keep what the umask gave.
    ``extension``: the name of the compiled extension at the top, if any."""
    for dirpath, _dirnames, filenames in os.walk(staging):
        os.chmod(dirpath, FOLDER_MODE)
        for name in filenames:
            os.chmod(os.path.join(dirpath, name), FILE_MODE)
    if extension is not None:
        os.chmod(staging / extension, EXTENSION_MODE)


def _write_error(err: OSError, final: Path) -> BuildError | None:
    """The error for ``err``, met writing the variant ``final``: a full disk or a
    ``build/`` one may not write, said with the fix (the system's message names a
    temporary folder, or, for a full disk, often no file at all), or ``None`` for another
    error, such as a project file that cannot be read, which names its file itself."""
    out = final.parent
    names = [Path(os.fsdecode(n)) for n in (err.filename, err.filename2) if n is not None]
    ours = not names or any(n == out or out in n.parents or n in out.parents for n in names)
    if err.errno not in DISK_FULL | NOT_WRITABLE or not ours:
        return None
    if err.errno in DISK_FULL:
        fix = f"free space on the disk of {out}"
    else:
        where = nearest_folder(out)
        fix = f"make {where} writable" + (", or remove it if another user made it (a build "
                                          "run with sudo)" if where == out else "")
    return BuildError(f"{final}: writing the variant failed ({err.strerror or err}); what "
                      f"was there is left as it was; fix: {fix}")


#: Linux ``renameat2`` arguments: the current directory, and "exchange the two paths".
_AT_FDCWD = -100
_RENAME_EXCHANGE = 2


def _exchange(a: Path, b: Path) -> bool:
    """Swap two existing paths in one atomic step; ``False`` where the system or the file
    system cannot (then nothing was changed)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):  # no libc, or a libc older than glibc 2.28
        return False
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p,
                          ctypes.c_uint]
    renameat2.restype = ctypes.c_int
    if renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP, errno.ENOTSUP):
        return False
    raise OSError(err, os.strerror(err), str(b))


def _swap_into_place(staging: Path, final: Path) -> None:
    """Replace ``final`` with ``staging``; a reader sees the old or the new tree, whole.

    Another build of the same variant may put its tree in place between the check that
    ``final`` is missing and the rename (two environments, or CI jobs, sharing a
    checkout): the rename then fails as the directory is not empty, and that tree is
    replaced like any old one."""
    if not os.path.lexists(final):
        try:
            os.rename(staging, final)
            return
        except OSError as err:
            if err.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                raise
    if _exchange(staging, final):
        _remove(staging)  # the old tree, now under that name
        return
    trash = final.with_name(f".{final.name}.old-{_owner()}")
    os.rename(final, trash)
    try:
        os.rename(staging, final)
    except BaseException:
        os.rename(trash, final)
        raise
    _remove(trash)


def _remove(path: Path) -> None:
    """Remove a replaced variant or a leftover, as far as possible: a symlink (a
    ``build/<variant>`` that pointed elsewhere) or a plain file there is unlinked, a
    link's target left alone; ``shutil.rmtree`` refuses both, and its ``ignore_errors``
    would keep them forever."""
    if path.is_symlink() or (path.exists() and not path.is_dir()):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
    else:
        shutil.rmtree(path, ignore_errors=True)


def _read_id(*paths: str) -> str:
    """The first of ``paths`` that can be read, stripped; ``""`` where none can."""
    for path in paths:
        try:
            return Path(path).read_text().strip()
        except (OSError, UnicodeDecodeError):
            continue
    return ""


def _digits(text: str) -> str:
    """8 decimal digits of a hash of ``text``."""
    return f"{int(hashlib.sha256(text.encode()).hexdigest(), 16) % 10**8:08d}"


@functools.lru_cache(maxsize=1)
def _host() -> str:
    """This host as 8 hex digits: its name and machine id, which a reboot keeps (the
    machine id tells apart hosts of one name, such as two ``localhost`` sharing a
    network file system)."""
    node = os.uname().nodename if hasattr(os, "uname") else ""
    machine_id = _read_id("/etc/machine-id", "/var/lib/dbus/machine-id")
    return hashlib.sha256(f"{node}/{machine_id}".encode()).hexdigest()[:8]


@functools.lru_cache(maxsize=1)
def _boot() -> str:
    """This boot of the host as 8 digits (Linux's boot id; one value where the system
    does not tell its boots apart, then the process ids are checked as before)."""
    return _digits(_read_id("/proc/sys/kernel/random/boot_id"))


@functools.lru_cache(maxsize=1)
def _pid_space() -> str:
    """This process's pid namespace as 8 digits: a container's processes cannot be seen
    from another one on the same host."""
    try:
        return _digits(str(Path("/proc/self/ns/pid").stat().st_ino))
    except OSError:
        return _digits("")


@functools.lru_cache(maxsize=1)
def _machine() -> str:
    """The owner mark of older versions, as 8 hex digits: one hash of the host, its boot
    and the pid namespace, which cannot tell a reboot of this host from another host.
    Only read now (:func:`_alive`)."""
    parts = [os.uname().nodename if hasattr(os, "uname") else ""]
    boot_id, pid_ns = Path("/proc/sys/kernel/random/boot_id"), Path("/proc/self/ns/pid")
    if boot_id.is_file():  # Linux
        parts += [boot_id.read_text().strip(), str(pid_ns.stat().st_ino)]
    return hashlib.sha256("/".join(parts).encode()).hexdigest()[:8]


#: An owner mark: ``<host>-0<boot><pid space><pid>`` (:func:`_owner`), or older
#: versions' ``<machine>-<pid>``, told apart by the ``0`` (a pid has no leading zero).
#: It is matched whole, as ``LEFTOVER_NAME`` captures it: the variant before it is cut
#: off at its dots, so dashes in a variant name cannot shift its parts.
_OWNER_MARK = re.compile(
    r"(?P<host>[0-9a-f]{8})-(?:0(?P<boot>\d{8})(?P<space>\d{8})(?P<pid>[1-9]\d*)"
    r"|(?P<legacy_pid>[1-9]\d*))"
)


def _owner() -> str:
    """The owner mark of this process's leftovers: ``<host>-0<boot><pid space><pid>``.

    The host and its boot are kept apart so that a later boot of the same host knows
    the owner is dead (a crash or power loss, which is what recovery is for), while a
    leftover of another host sharing the directory is left alone. Everything after the
    host is decimal digits as ``LEFTOVER_NAME`` (``<8 hex>-<digits>``) expects, which
    ``publish`` reads too; the leading ``0`` tells it from the older
    ``<machine>-<pid>``."""
    return f"{_host()}-0{_boot()}{_pid_space()}{os.getpid()}"


@functools.lru_cache(maxsize=1)
def _boot_time() -> float | None:
    """When this host booted (seconds since the epoch; Linux's ``btime``), if known."""
    try:
        with open("/proc/stat", encoding="ascii", errors="replace") as stat_file:
            for line in stat_file:
                if line.startswith("btime "):
                    return float(line.split()[1])
    except (OSError, ValueError, IndexError):  # no /proc (not Linux), or unreadable
        return None
    return None


def _alive(owner: str, changed: float | None = None) -> bool:
    """Whether the build that named a leftover ``owner`` may still be running;
    ``changed``: when the leftover last changed (its inode's ctime).

    A build of another host (or one whose mark this version does not know) counts as
    running: its processes cannot be seen from here. One of an earlier boot of this
    host is dead when its leftover has not changed since this boot began: a host of the
    same name and machine id (clones of one image share it) running a build now would
    be changing it. One whose process is gone is dead; one of another pid namespace (a
    container) of this boot counts as running. An older version's mark counts as this
    host's only when host, boot and pid namespace are all this process's."""
    m = _OWNER_MARK.fullmatch(owner)
    if m is None:
        return True
    if m["legacy_pid"] is not None:
        if m["host"] != _machine():
            return True
        pid = int(m["legacy_pid"])
    else:
        if m["host"] != _host():
            return True
        if m["boot"] != _boot():
            booted = _boot_time()
            # this host restarted since, and the leftover is older: every process of that
            # boot ended
            return booted is None or changed is None or changed >= booted
        if m["space"] != _pid_space():
            return True
        pid = int(m["pid"])
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError):  # gone, or no pid this system can have
        return False
    except OSError:  # another user's process
        return True
    return True


def recover_leftovers(out_dir: Path) -> list[str]:
    """Clean up after builds that were killed while writing ``out_dir``: an old variant
    set aside whose new one never arrived is put back, and the rest of what a dead build
    left (staging directories, old trees) is removed. Entries of a build that is still
    running are left alone.

    Returns:
        One line per entry recovered or removed.
    """
    done: list[str] = []
    try:
        entries = sorted(out_dir.iterdir())
    except OSError:
        return done
    for entry in entries:
        m = LEFTOVER_NAME.match(entry.name)
        # A link is a variant that pointed elsewhere, swapped out by a killed build (a
        # dangling one too): it is put back or unlinked like a tree.
        if m is None or not (entry.is_symlink() or entry.is_dir()):
            continue
        try:
            changed: float | None = entry.lstat().st_ctime
        except OSError:
            changed = None
        if _alive(m["old"] or m["tmp"], changed):
            continue
        final = out_dir / m["variant"]
        if m["old"] is not None and not os.path.lexists(final):
            os.rename(entry, final)
            done.append(f"restored {final.name} from {entry.name}, left by a killed build")
            continue
        _remove(entry)
        done.append(f"removed {entry.name}, left by a killed build")
    return done


def builder_provenance() -> dict[str, object]:
    """The ``kernel-builder`` entry of the provenance (names kernelforge as the builder)."""
    return {"version": __version__, "name": "kernelforge"}
