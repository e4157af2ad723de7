"""``kernelforge build``: compile a kernel project into ``build/<variant>/`` directories.

The steps, each in its own module: :mod:`.toolchain` finds compilers and resolves
``depends``; :mod:`.plan` turns the manifest into sources, flags and names (pure);
:mod:`.compile` runs torch's extension tooling with ninja in a child process;
:mod:`.package` writes the variant directory atomically.

An unchanged project is detected before torch is imported (a fingerprint of sources,
flags, toolchain and torch installation), so a no-op rebuild takes well under a second.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import operator
import os
import shlex
import subprocess
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from kernelforge import __version__, archs, digest
from kernelforge._durable import nearest_folder, remove_temp_leftovers, replace_file
from kernelforge._parse import json_loads
from kernelforge._paths import HERE, refuse_empty_path
from kernelforge.build.compile import (
    compile_plan,
    compiler_environment,
    reads_digest,
)
from kernelforge.build.interpreter import PythonEnv, python_env
from kernelforge.build.package import (
    assemble_variant,
    builder_provenance,
    package_error,
    recover_leftovers,
)
from kernelforge.build.plan import (
    PINNED_SOURCE_PATH_NVCC,
    BuildPlan,
    SourceId,
    hash_files,
    kernel_applies,
    leaves_out,
    manifest_inputs,
    manifest_package_files,
    output_dirs,
    plan_build,
    project_files,
    unshipped_package_files,
    version_tuple,
)
from kernelforge.build.toolchain import (
    Dependency,
    Tool,
    build_run,
    cuda_mismatch,
    find_cxx,
    find_hipcc,
    find_nvcc,
    find_nvcc_host,
    not_found_reason,
    resolve_dependency,
)
from kernelforge.errors import BuildError, IntegrityError, ToolchainError
from kernelforge.manifest import (
    BACKENDS,
    Manifest,
    check_project,
    dependency_error,
    hub_branch_note,
    refuse_empty_project,
    torch_series,
)
from kernelforge.variants import BACKEND_LABELS, TorchInstall

__all__ = ["BuildResult", "build_project", "build_run", "source_identity"]

COMPILED_BACKENDS = ("cpu", "cuda", "rocm")
#: Backends whose builds ``--arch`` (CUDA capabilities, ROCm archs) changes.
ARCH_BACKENDS = ("cuda", "rocm")


@dataclass(frozen=True)
class BuildResult:
    """One variant a build produced (or found up to date).

    Attributes:
        variant: the variant name (``torch213-cxx11-cpu-x86_64-linux``).
        backend: the backend it was built for.
        path: its directory (``<out_dir>/<variant>``).
        up_to_date: whether it was found up to date, so nothing was compiled.
        seconds: how long building (or checking) it took.
    """

    variant: str
    backend: str
    path: Path
    up_to_date: bool
    seconds: float


def _git(root: Path, *args: str) -> str | None:
    try:
        proc = subprocess.run(
            ["git", "-C", str(root), *args], capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return proc.stdout.strip() if proc.returncode == 0 else None


def _git_changes(root: Path, excluded: Sequence[str]) -> list[str] | None:
    """The paths under ``root`` that differ from git's index or HEAD, or are untracked,
    ignored files included (an untracked or ignored folder as one path ending in ``/``),
    relative to ``root``; git leaves out the ``excluded`` paths (relative to ``root``).
    ``None`` when git cannot tell.

    Ignored files count: the content hash covers them like any other file of the
    project, but a checkout of the commit does not have them."""
    try:
        shown = subprocess.run(["git", "-C", str(root), "rev-parse", "--show-prefix"],
                               capture_output=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if shown.returncode != 0:
        return None
    # only the line's end is git's: a folder name may start or end with a space
    prefix = os.fsdecode(shown.stdout).removesuffix("\n")
    pathspec = [".", *(f":(exclude,literal){path}" for path in excluded)]
    try:
        # -z: paths as they are (bytes, not quoted), decoded as the file system names them
        proc = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "-z", "--no-renames",
             "--untracked-files=normal", "--ignored=matching", "--", *pathspec],
            capture_output=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if proc.returncode != 0:
        return None
    # Each entry is "XY <path from the top of the repository>".
    paths = [os.fsdecode(entry[3:]) for entry in proc.stdout.split(b"\0") if entry]
    return [path[len(prefix):] for path in paths if path.startswith(prefix)]


def _dirty(root: Path, hashed: Collection[str], listed: Sequence[str],
           outputs: frozenset[str], excluded: Sequence[str]) -> bool:
    """Whether git holds changes to the files the content hash covers (``hashed``,
    relative to ``root``): a change or a new file there (one git ignores included), a
    new or ignored folder holding one, or a
    deleted file the hash would cover (:func:`~kernelforge.build.plan.leaves_out`, with
    ``listed`` and ``outputs`` as the hash had them). What the hash leaves out, such as
    the ``__pycache__`` a test run writes, a Python environment or the build's outputs,
    does not make the project dirty; git is not asked about the ``excluded`` folders
    (the outputs inside the project) at all. Where git cannot tell, the project counts
    as clean, as a project outside git does."""
    changes = _git_changes(root, excluded)
    if changes is None:
        return False
    folders = {rel.rsplit("/", 1)[0] + "/" for rel in hashed if "/" in rel}
    parents = {f[:i + 1] for f in folders for i, c in enumerate(f) if c == "/"}
    for path in changes:
        if path in ("", "/"):  # the project folder itself: untracked as a whole
            return True
        if path.endswith("/"):  # an untracked folder: dirty if the hash covers a file in it
            if path in parents:
                return True
        elif path in hashed:
            return True
        elif path + "/" in parents:
            # one entry for a folder whose files the hash covers: a submodule, or a link
            # to a folder
            return True
        elif not os.path.lexists(root / path) and not leaves_out(
                root, path, listed=listed, outputs=outputs):
            return True  # a deleted file the hash covered
    return False


def source_identity(root: Path, manifest: Manifest | None = None, *,
                    out_dir: Path | None = None) -> SourceId:
    """Content hash of the project's sources plus its git commit and dirtiness, if any.

    The op namespace uid is the first 7 hex digits of the content hash: it is the same
    wherever and whenever the same sources are built, and differs whenever they differ,
    so two builds of one kernel never share a namespace. ``_dirty`` is appended when the
    project sits in a git work tree with uncommitted changes to the files the hash
    covers (changes to what it leaves out, bytecode written by a test run say, do not
    count).

    The hash covers every file of the project tree, symlinks followed, but for what
    ``plan.iter_project_files`` leaves out: bytecode, ``__pycache__`` and ``.git`` at any
    depth, Python environments (a folder holding ``pyvenv.cfg`` or ``conda-meta/``) and
    the build's outputs (``build/``, ``.kernelforge/`` and ``out_dir``) wherever they are,
    ``result`` (Nix's link) and every dot-entry at the top level, and below it dot-files
    and the dot-folders of tools (``plan.TOOL_FOLDERS``, such as ``.ipynb_checkpoints``)
    or folders tagged as caches (``CACHEDIR.TAG``). Any other folder counts, a
    dot-folder or one named ``build`` or ``result`` below the top level included. Given
    the ``manifest``, the hash also covers every file it lists in ``src``, every file
    under its ``include`` directories (dot-files included) and every file of the Python
    package the build ships, wherever they are.

    Args:
        root: the project folder.
        manifest: the project's manifest.
        out_dir: where the build writes its variants, when not ``<root>/build``: left out
            like ``build/`` if it is inside the project.
    """
    return _identity(root, manifest, out_dir, _hashed_files(root, manifest, out_dir))


#: What :func:`_hashed_files` lists: the paths the manifest lists, the files the hash
#: covers (relative path, path) and the output folders it leaves out.
_Listing = tuple[list[str], list[tuple[str, Path]], frozenset[str]]


def _identity(root: Path, manifest: Manifest | None, out_dir: Path | None,
              listing: _Listing) -> SourceId:
    """:func:`source_identity` of the files ``listing`` gives (:func:`_hashed_files` for
    the same arguments)."""
    listed, files, outputs = listing
    content = hash_files(root, files)
    commit = _git(root, "rev-parse", "HEAD")
    dirty = False
    if commit is not None:
        excluded = ["build", ".kernelforge"]  # the outputs, which git need not look into
        if out_dir is not None:
            inside = os.path.relpath(os.path.realpath(out_dir), os.path.realpath(root))
            if inside != "." and not inside.startswith(".."):
                excluded.append(Path(inside).as_posix())
        # A deleted file of the package counts whatever its name: it may have been shipped.
        package = [f"torch-ext/{manifest.python_name}"] if manifest is not None else []
        dirty = _dirty(root, {rel for rel, _ in files}, [*listed, *package], outputs,
                       excluded)
    return SourceId(content, commit, dirty)


def _hashed_files(root: Path, manifest: Manifest | None, out_dir: Path | None) -> _Listing:
    """What :func:`source_identity` hashes: the paths the manifest lists, the files the
    hash covers (relative path, path) and the output folders it leaves out."""
    listed: list[str] = []
    extra: list[tuple[str, Path]] = []
    if manifest is not None:
        listed = manifest_inputs(manifest)
        extra = manifest_package_files(manifest)
    outputs = output_dirs(root, out_dir)
    return listed, project_files(root, listed, extra, outputs), outputs


def _file_times(manifest: Manifest, out: Path,
                listing: _Listing | None = None) -> dict[str, tuple[int, int]]:
    """The size and modification time of each file the source hash covers, by its path
    relative to the project (``(-1, -1)`` for one that vanished meanwhile); of those
    ``listing`` gives, where the caller listed them already."""
    if listing is None:
        listing = _hashed_files(manifest.root, manifest, out)
    times: dict[str, tuple[int, int]] = {}
    for rel, path in listing[1]:
        try:
            st = path.stat()
            times[rel] = (st.st_size, st.st_mtime_ns)
        except OSError:
            times[rel] = (-1, -1)
    return times


def _changed_since(manifest: Manifest, out: Path, before: dict[str, tuple[int, int]]
                   ) -> list[str]:
    """The project files written, added or removed since ``before`` (:func:`_file_times`
    taken before they were hashed), relative to the project."""
    after = _file_times(manifest, out)
    return sorted(rel for rel in before.keys() | after.keys()
                  if before.get(rel) != after.get(rel))


def _buildable(
    manifest: Manifest, backend: str, torch_install: TorchInstall, env: PythonEnv
) -> tuple[Tool | None, str | None, str]:
    """The device compiler for ``backend``; if it cannot be built here, why not, and the
    fix a ``--backend`` asking for it gives where there is one ("" otherwise).

    Raises:
        ToolchainError: the nvcc found is of another CUDA major version than the torch
            of ``env``: whichever other backends were asked for beside cuda (or none
            were asked for), since building the others would pass over a CUDA build the
            user meant to make with a toolkit they have. A build asked for other
            backends only does not look at cuda.
    """
    if backend == "cpu":
        return None, None, ""
    if backend == "cuda":
        if not torch_install.cuda:
            return _no_torch_support("cuda")
        nvcc = find_nvcc(torch_install.cuda)
        if nvcc is None:
            return None, not_found_reason("nvcc"), ""
        mismatch = cuda_mismatch(nvcc, torch_install.cuda, _target(torch_install, env))
        if mismatch is not None and mismatch[0]:
            raise ToolchainError(f"cannot build backend 'cuda': {mismatch[1]}")
        return nvcc, _outside_cuda_range(manifest, nvcc), ""
    if backend == "rocm":
        if not torch_install.hip:
            return _no_torch_support("rocm")
        hipcc = find_hipcc()
        if hipcc is None:
            return None, not_found_reason("hipcc"), ""
        return hipcc, None, ""
    return None, f"kernelforge cannot build the {backend} backend yet", ""


def _target(torch_install: TorchInstall, env: PythonEnv) -> str:
    """The torch a build is for and its environment, in words."""
    return f"torch {torch_install.version} of {env.executable}"


def _device_notes(backend: str, tool: Tool, torch_install: TorchInstall,
                  env: PythonEnv) -> list[str]:
    """The line saying which GPU compiler builds ``backend`` for this environment's
    torch (several environments may each get another toolkit), and the notes about it:
    a toolkit variable passed over, a CUDA minor version other than torch's."""
    built_with = (f"CUDA {torch_install.cuda}" if backend == "cuda"
                  else f"HIP {torch_install.hip}")
    lines = [f"{backend}: {tool.name} {tool.version_str} ({tool.path}"
             + (f", {tool.found}" if tool.found else "")
             + f") for torch {torch_install.version} ({built_with})"]
    if tool.note:
        lines.append(f"note: {tool.note}")
    if backend == "cuda" and torch_install.cuda:
        mismatch = cuda_mismatch(tool, torch_install.cuda, _target(torch_install, env))
        if mismatch is not None:
            lines.append(f"note: {mismatch[1]}")
    return lines


def _no_torch_support(backend: str) -> tuple[None, str, str]:
    label = BACKEND_LABELS[backend]
    return None, f"the installed torch has no {label} support", (
        f"install a {label} build of torch here, or build for another environment's torch "
        "with --python PATH")


def _outside_cuda_range(manifest: Manifest, nvcc: Tool) -> str | None:
    """Why ``[general.cuda] minver``/``maxver`` exclude this CUDA toolkit, if they do."""
    have = nvcc.version[:2]
    if manifest.cuda_minver and have < version_tuple(manifest.cuda_minver)[:2]:
        return (f"{manifest.path}: key 'general.cuda.minver' requires CUDA >= "
                f"{manifest.cuda_minver}, but nvcc {nvcc.version_str} ({nvcc.path}) is "
                "installed; fix: install a newer CUDA toolkit and point CUDA_HOME at it")
    if manifest.cuda_maxver and have > version_tuple(manifest.cuda_maxver)[:2]:
        return (f"{manifest.path}: key 'general.cuda.maxver' allows CUDA <= "
                f"{manifest.cuda_maxver}, but nvcc {nvcc.version_str} ({nvcc.path}) is "
                "installed; fix: install an older CUDA toolkit and point CUDA_HOME at it")
    return None


def _check_backend_names(wanted: Sequence[str], project: Sequence[str]) -> None:
    """Refuse a ``--backend`` that names no backend at all (a typo, ``CPU``), suggesting
    the closest one, first among the ``project``'s own. A real backend the project has
    no kernels for is the caller's to explain."""
    known = set(BACKENDS) | set(project)
    for name in wanted:
        if name in known:
            continue
        word = name.strip().lower()
        parts = [p.strip() for p in word.split(",") if p.strip()]
        near = word if word in known else (
            archs.closest(word, project) or archs.closest(word, sorted(known)))
        fix = f"did you mean --backend {near}?" if near else "use one of this project's backends"
        if len(parts) > 1:  # "cuda,cpu": one backend per option
            fix = "give each backend its own option: " + " ".join(
                f"--backend {p}" for p in parts)
        raise BuildError(
            f"--backend {name}: unknown backend; expected one of {', '.join(BACKENDS)} "
            f"(this project has: {', '.join(project)}); fix: {fix}"
        )


def _stable_abi_note(manifest: Manifest, backend: str) -> str | None:
    """What the build does with ``[torch] stable-abi``: kernelforge does not build
    stable-ABI variants yet, so the variant is a regular one, named and compiled for the
    installed torch (loadable by that torch only)."""
    if manifest.torch is None:
        return None
    version = manifest.torch.stable_abi_for(backend)
    if version is None:
        return None
    return (f"{backend}: torch.stable-abi = {version!r} is not built yet; this is a regular "
            "variant for the installed torch only")


def _unshipped_note(manifest: Manifest) -> str | None:
    """Which files of the Python package the variant leaves out (their suffix is not in
    ``pyext``), if any: silently missing files would surface only when the kernel loads."""
    left_out = unshipped_package_files(manifest.root, manifest.python_name, manifest.pyext)
    if not left_out:
        return None
    shown = ", ".join(left_out[:5]) + (f" and {len(left_out) - 5} more" if len(left_out) > 5
                                       else "")
    section = "torch-noarch" if manifest.noarch and not manifest.universal else "torch"
    suffixes = sorted({PurePosixPath(f).suffix or "(none)" for f in left_out})
    return (f"not packaged: {shown}: their suffixes ({', '.join(suffixes)}) are not in "
            f"[{section}] pyext ({', '.join(manifest.pyext)}); fix: add them to pyext in "
            "build.toml to ship them in the variant")


def _torch_install(env: PythonEnv) -> TorchInstall:
    inst = env.torch_install()
    if inst is None:
        if env.foreign:
            raise ToolchainError(
                f"--python {env.executable}: torch is not installed in that Python "
                f"environment; fix: {shlex.quote(env.executable)} -m pip install torch "
                "setuptools, "
                "or point --python at an environment that has torch"
            )
        raise ToolchainError(
            "torch is not installed in this Python environment; fix: pip install torch"
        )
    return inst


def _setuptools_version(env: PythonEnv) -> str:
    """The version of setuptools in the environment built for, which torch's extension
    tooling compiles with. Asked right after its torch, so that an environment without
    it (a ``--python`` one made with torch alone) is refused before any backend starts
    to compile, in one line, rather than when the compile imports it.

    Raises:
        ToolchainError: setuptools is not installed there, naming the interpreter and
            the fix.
    """
    version = env.setuptools_version()
    if version is None:
        named = f"--python {env.executable}" if env.foreign else env.executable
        raise ToolchainError(
            f"{named} has torch but not setuptools, which torch's extension tooling needs "
            f"to compile; fix: {shlex.quote(env.executable)} -m pip install setuptools")
    return version


#: Raised whenever a change to the builder changes what a build makes from the same
#: project and toolchain (2: `[torch] cxx-flags` reach the binding's sources only, and a
#: source shared by kernel sections compiles once; 3: the compile and link commands are
#: the builder's own, not those of the interpreter's sysconfig; 4: the device flags and
#: defines of Hugging Face's builder, and ``csrc/`` on the include path; 5: the metadata
#: id is the op namespace with its leading ``_``, and ROCm archs are those Hugging Face's
#: builder compiles for), so that builds made before are not taken as up to date.
BUILD_RULES = 5


def _pinned_names(backend: str, manifest: Manifest, device: Tool | None) -> dict[str, int]:
    """The up-to-date key's term for ``.cu`` sources named by their project paths
    (:func:`~kernelforge.build.plan.pinned_source_path_flags`): present only for the
    builds that get them, so that other builds made before stay up to date."""
    if (backend == "cuda" and not manifest.noarch and device is not None
            and device.version >= PINNED_SOURCE_PATH_NVCC):
        return {"pinned-names": 1}
    return {}


def _dollar_flags(backend: str, manifest: Manifest) -> dict[str, int]:
    """The up-to-date key's term for a build whose flags hold ``$``, which reaches the
    compiler as written since the driver escapes it for ninja (before, ninja read
    ``$ORIGIN`` as an empty variable): present only for such builds, so that one made
    before is compiled again and other builds stay up to date."""
    flags = [*(manifest.torch.cxx_flags if manifest.torch else ())]
    for kernel in manifest.kernels.values():
        if kernel.backend == backend:
            flags += [*kernel.cxx_flags, *kernel.cuda_flags, *kernel.hip_flags]
    return {"dollar-flags": 1} if any("$" in flag for flag in flags) else {}


def _arch_terms(backend: str, manifest: Manifest,
                archs: Sequence[str] | None) -> dict[str, int]:
    """The up-to-date key's term for ``--arch`` matched with each section's capabilities
    or archs: present only for the GPU builds given ``--arch`` (a build made before
    compiled every section for ``--arch`` itself), so that other builds stay up to date."""
    if archs and backend in ("cuda", "rocm") and not manifest.noarch:
        return {"arch-match": 1}
    return {}


def _fingerprint(parts: dict[str, object]) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


#: Builds remembered per backend by the up-to-date check (one per environment and
#: source state built lately; the oldest is forgotten first).
STAMP_ENTRIES = 32


def _stamp_path(root: Path, backend: str) -> Path:
    return root / ".kernelforge" / f"{backend}.stamp.json"


def _stamps(root: Path, backend: str) -> dict[str, dict[str, str]]:
    """The recent builds of ``backend``: fingerprint -> ``{"variant", "metadata"}`` (the
    variant directory written and the sha256 of its ``metadata.json``), oldest first."""
    try:
        data = json_loads(_stamp_path(root, backend).read_text())
        builds = data["builds"]
    except (OSError, ValueError, KeyError, TypeError):
        return {}
    if not isinstance(builds, dict):
        return {}
    return {k: v for k, v in builds.items() if isinstance(v, dict)
            and isinstance(v.get("variant"), str) and isinstance(v.get("metadata"), str)}


def _up_to_date(root: Path, out_dir: Path, backend: str, key: str) -> Path | None:
    """The variant directory if a recent build of ``backend`` had this fingerprint and the
    directory still holds what that build wrote, intact, else ``None``.

    Builds for several environments (``--python``) each keep their entry, so building
    for them in turn does not recompile; one that rewrote the same variant directory
    with other bytes makes the others' entries stale.
    """
    entry = _stamps(root, backend).get(key)
    if entry is None:
        return None
    variant_dir = out_dir / entry["variant"]
    if entry.get("reads") != reads_digest(root / ".kernelforge" / entry["variant"]):
        return None  # a file outside the project that a compile read has changed
    try:
        raw = (variant_dir / "metadata.json").read_bytes()
        if hashlib.sha256(raw).hexdigest() != entry["metadata"]:
            return None
        meta = json_loads(raw)
        digest.verify_tree(variant_dir, meta["digest"]["files"])
    except (OSError, ValueError, KeyError, TypeError, IntegrityError):
        return None
    return variant_dir


def _found_up_to_date(root: Path, out_dir: Path, backend: str, key: str, started: float,
                      progress: Callable[[str], None]) -> BuildResult | None:
    """The result for ``backend`` when :func:`_up_to_date` finds its variant, said."""
    existing = _up_to_date(root, out_dir, backend, key)
    if existing is None:
        return None
    progress(f"{existing.name}: up to date")
    return BuildResult(existing.name, backend, existing, True, time.monotonic() - started)


def _umask() -> int:
    """This process's umask, read without changing it where the system says it
    (Linux's /proc), else set and restored at once."""
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def _build_lock(root: Path, backend: str, progress: Callable[[str], None]) -> Iterator[None]:
    """Held while ``backend`` of the project at ``root`` is checked, compiled and put in
    place: a second build of it (another terminal, CI jobs sharing a checkout, another
    ``--python`` environment) waits, saying so, and then finds the first one's variant up
    to date rather than compiling the same files in the same work directory."""
    import filelock

    path = root / ".kernelforge" / f"{backend}.lock"
    # readable and writable by whoever may build here, as the build directory is: the
    # umask decides (a lock file only its first user can open would stop the others).
    # filelock sets an explicit mode exactly, so the umask is applied here.
    lock = filelock.FileLock(str(path), mode=0o666 & ~_umask())
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            lock.acquire(timeout=0)
        except filelock.Timeout:
            progress(f"{backend}: waiting for another build of this project's {backend} "
                     f"backend to finish (it holds {path})")
            lock.acquire()
    except OSError as err:
        raise BuildError(f"cannot take the build lock {path}: {err.strerror or err}; fix: "
                         f"make {path.parent} writable (a build writes there and to "
                         "build/)") from err
    try:
        yield
    finally:
        lock.release()


def _write_stamp(root: Path, backend: str, key: str, final: Path, reads: str | None) -> None:
    """Record the build just made among the backend's up-to-date entries. Called under
    the backend's build lock, which every writer of the stamp holds: the temporaries of
    the stamp found there are those of builds killed before their rename, removed."""
    builds = _stamps(root, backend)
    builds.pop(key, None)
    builds[key] = {
        "variant": final.name,
        "metadata": hashlib.sha256((final / "metadata.json").read_bytes()).hexdigest(),
    }
    if reads is not None:
        builds[key]["reads"] = reads
    kept = dict(list(builds.items())[-STAMP_ENTRIES:])
    path = _stamp_path(root, backend)
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_temp_leftovers(path, "'kernelforge build'")
    replace_file(path, json.dumps({"builds": kept}, indent=1).encode())


def _variant_name(manifest: Manifest, backend: str, facts) -> str:
    from kernelforge import variants

    if manifest.noarch:
        return str(variants.noarch_variant(backend))
    return str(variants.build_variant(facts, backend=backend))


def _backends_words(names: Sequence[str], singular: str, plural: str) -> str:
    """``backend rocm <singular>`` or ``backends rocm, xpu <plural>``."""
    if len(names) == 1:
        return f"backend {names[0]} {singular}"
    return f"backends {', '.join(names)} {plural}"


def _drop_torch_universal(out: Path, name: str) -> str | None:
    """Remove ``torch-universal`` of kernel ``name`` that an older kernelforge built into
    ``out``: a universal kernel now builds a variant per backend, and ``publish`` would
    still ship that one, whose ``universal`` backend Hugging Face's loader cannot read.
    Returns what was done, if anything."""
    old = out / "torch-universal"
    if old.is_symlink() or not old.is_dir():
        return None
    try:
        meta = json_loads((old / "metadata.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None  # whose build it is cannot be told: left as it is (publish checks it)
    if not isinstance(meta, dict) or meta.get("name") != name:
        return None  # not this kernel's build: not ours to remove
    import shutil

    shutil.rmtree(old)
    return ("removed torch-universal, an older build of this universal kernel: it now "
            "builds a pure-Python variant for each backend in its place")


def _check_torch_range(manifest: Manifest, torch_version: str) -> None:
    """Refuse a torch outside ``[torch] minver``/``maxver``. ``maxver`` is compared with
    the torch version of the variant (major.minor, ``torch212``), as Hugging Face's build
    matrix compares it: ``maxver = "2.12"`` admits torch 2.12.1."""
    if manifest.torch is None:
        return
    from packaging.version import Version

    installed = Version(Version(torch_version).base_version)
    series = torch_series(torch_version)
    if manifest.torch.minver and installed < Version(manifest.torch.minver):
        raise BuildError(
            f"{manifest.path}: key 'torch.minver' requires torch >= {manifest.torch.minver}, "
            f"but {torch_version} is installed; fix: install a newer torch"
        )
    if manifest.torch.maxver and series > Version(manifest.torch.maxver):
        raise BuildError(
            f"{manifest.path}: key 'torch.maxver' allows torch <= {manifest.torch.maxver}, "
            f"but {torch_version} is installed; fix: install an older torch"
        )


def _refuse_empty_paths(path: object, out_dir: object, python: object) -> None:
    """Refuse ``build_project``'s path arguments given as empty strings, before anything
    is read: ``out_dir=""`` would write the variants into the current directory, and
    ``python=""`` is no interpreter (``None`` is this one)."""
    refuse_empty_project(path)
    refuse_empty_path(out_dir, "out_dir", "an output directory",
                      f"the directory for the variants ({HERE}), or nothing (None in "
                      "Python) for the project's build/")
    refuse_empty_path(python, "python", "a Python interpreter",
                      "the path of the environment's python, or nothing (None in Python) "
                      "to build for this one")


def build_project(
    path: str | Path = ".",
    *,
    backends: Sequence[str] | None = None,
    archs: Sequence[str] | None = None,
    jobs: int | None = None,
    out_dir: str | Path | None = None,
    force: bool = False,
    verbose: bool = False,
    progress: Callable[[str], None] = print,
    python: str | os.PathLike[str] | None = None,
) -> list[BuildResult]:
    """Build a kernel project for this environment.

    Args:
        path: the project directory (or its ``build.toml``); default: the current
            directory.
        backends: backends to build, a list such as ``["cpu"]``; default: every
            backend of the project that this environment can build (cpu always; cuda
            with a CUDA torch and nvcc; rocm with a ROCm torch and hipcc), the others
            skipped with a progress line. A backend named here that cannot be built is
            an error instead. Noarch projects package every backend.
        archs: CUDA capabilities or ROCm archs to build for (``--arch``), a list such
            as ``["9.0a"]`` or ``["gfx942"]``: for CUDA, each section that declares
            capabilities gets those of its own that serve them. Only the GPU backends'
            builds use them.
        jobs: parallel compile jobs, at least 1 (default: ``$MAX_JOBS`` when set, else
            all cores).
        out_dir: where variant directories go (default: ``<project>/build``). One
            inside the project is left out of the source hash and the git dirty check,
            as ``build/`` is; the project folder itself, or one above it, is refused.
        force: build even when the project is up to date, rewriting the variant; ninja
            still reuses the object files in ``.kernelforge/<variant>/`` whose sources
            and flags are unchanged (delete that folder for a build from scratch).
        verbose: show every compiler line.
        progress: receives progress lines (default: :func:`print`).
        python: build for the torch of another Python environment (its interpreter's
            path), e.g. to make variants for several torch versions from one checkout.
            Its CUDA variant is compiled with the toolkit of its torch's CUDA version
            where no ``CUDA_HOME``/``CUDA_PATH`` names one (``toolchain.find_nvcc``).

    Returns:
        One :class:`BuildResult` per variant: its name, backend, directory, whether it
        was found up to date, and the seconds it took.

    Raises:
        ManifestError: the project is invalid, or a ``depends`` entry is one kernelforge
            cannot resolve.
        ToolchainError: a needed compiler or dependency is missing, the nvcc found is
            of another CUDA major version than the torch built for (whatever
            ``backends`` names), a backend named in ``backends`` cannot be built here,
            or ``python`` is not a usable interpreter (no such file, or no torch there),
            or the interpreter built for has no setuptools and the project compiles.
        BuildError: compiling failed (the message lists errors with file and line), the
            Python package holds a file the build cannot ship, ``backends`` names a
            backend the project does not have, none of the project's backends can be
            built here, or ``out_dir`` holds the project or lies under a file.
        TypeError: ``backends`` or ``archs`` is one string instead of a list, or a
            backend is not a string.
        ValueError: an ``archs`` entry is not a CUDA capability or ROCm arch (``sm_90``
            is refused, with the spelling to use), ``archs`` mixes CUDA capabilities
            and ROCm archs or are not those of a GPU backend ``backends`` names
            (``["gfx942"]`` with ``backends=["cuda"]``), as ``kernelforge build``
            refuses them, or ``jobs`` is not a positive integer; or ``path``,
            ``out_dir`` or ``python`` is an empty or blank string (read as a path, it
            would be the current directory: an unset variable, most likely).

    Example:
        >>> build_project("kernels/relu", backends=["cpu"])  # doctest: +SKIP
    """
    backends, archs, jobs = _checked_arguments(backends, archs, jobs)
    _refuse_empty_paths(path, out_dir, python)
    manifest = check_project(Path(path).resolve())
    root = manifest.root
    out = Path(out_dir) if out_dir is not None else root / "build"
    _check_out_dir(root, out, given=out_dir is not None)
    # What the package cannot ship is refused before anything is compiled.
    unshippable = package_error(manifest)
    if unshippable is not None:
        raise unshippable
    # The project is walked once for both: listing a tree of thousands of headers costs
    # about what hashing them does.
    listing = _hashed_files(root, manifest, out)
    hashed = _file_times(manifest, out, listing)  # taken before the files are read
    source_id = _identity(root, manifest, out, listing)
    env = python_env(python)
    torch_install = _torch_install(env)
    # asked once, with torch: the up-to-date key of every backend holds it
    setuptools = None if manifest.noarch else _setuptools_version(env)

    if manifest.noarch:
        candidates = list(manifest.backends)
        targets = [b for b in candidates if not backends or b in backends]
        if backends and manifest.universal and "universal" in backends:
            raise BuildError(
                f"--backend universal: {manifest.path} is universal, which builds a "
                "pure-Python variant for each backend (torch-cpu, torch-cuda, ...) in place "
                "of torch-universal, as Hugging Face's builder does; fix: name those "
                f"backends ({', '.join(candidates)}), or leave --backend out to build them all"
            )
        if backends:
            _check_backend_names(backends, candidates)
            missing = [b for b in backends if b not in candidates]
            if missing:
                raise BuildError(
                    f"{manifest.path}: {_backends_words(missing, 'is', 'are')} not listed "
                    f"by this project (it lists: {', '.join(candidates)}); fix: build one of "
                    "those, or add it to general.backends"
                )
        compilers: dict[str, Tool | None] = {b: None for b in targets}
    else:
        if backends:
            _check_backend_names(backends, manifest.backends)
            unknown = [b for b in backends if b not in manifest.backends]
            if unknown:
                raise BuildError(
                    f"{manifest.path}: {_backends_words(unknown, 'has', 'have')} no kernels in "
                    f"this project (it has: {', '.join(manifest.backends)}); fix: build one "
                    "of those, or add a [kernel.<name>] section with that backend"
                )
        compilers = {}
        skipped: list[str] = []
        for b in manifest.backends:
            if backends and b not in backends:
                continue
            try:
                tool, why_not, fix = _buildable(manifest, b, torch_install, env)
            except ToolchainError as err:
                others = [o for o in manifest.backends if o != b]
                if backends or not others:
                    raise
                # nothing named: the other backends can still be built, if asked for
                raise ToolchainError(f"{err}, or build the other backends meanwhile with "
                                     + " ".join(f"--backend {o}" for o in others)) from err
            if why_not:
                if backends:
                    raise ToolchainError(f"cannot build backend '{b}' here: {why_not}"
                                         + (f"; fix: {fix}" if fix else ""))
                skipped.append(f"{b}: {why_not}")
                continue
            compilers[b] = tool
        for line in skipped:
            progress(f"skipping backend {line}")
        if not compilers:
            raise BuildError(
                f"{manifest.path}: none of this project's backends can be built here:\n"
                + "\n".join(f"  {s}" for s in skipped)
            )
        targets = list(compilers)
        _check_torch_range(manifest, torch_install.version)

    for backend in targets:
        tool = compilers.get(backend)
        for line in _device_notes(backend, tool, torch_install, env) if tool else ():
            progress(line)
        note = _stable_abi_note(manifest, backend)
        if note:
            progress(f"note: {note}")
    for note in (*manifest.notes, hub_branch_note(manifest), _unshipped_note(manifest)):
        if note:
            progress(f"note: {note}")
    for line in recover_leftovers(out):
        progress(f"note: {out.name}/: {line}")
    if manifest.universal:
        dropped = _drop_torch_universal(out, manifest.name)
        if dropped:
            progress(f"note: {out.name}/: {dropped}")
    # Every backend's dependencies are resolved before the first one is compiled.
    depends = {backend: _dependencies(manifest, backend, compilers.get(backend))
               for backend in targets}
    cxx = None if manifest.noarch else find_cxx()
    facts = None
    results: list[BuildResult] = []
    for backend in targets:
        started = time.monotonic()
        device = compilers.get(backend)
        host = find_nvcc_host() if device is not None and device.name == "nvcc" else None
        deps = depends[backend]
        key = _fingerprint(
            {
                "kernelforge": __version__,
                "rules": BUILD_RULES,
                "backend": backend,
                "sources": source_id.content_hash,
                "dirty": source_id.git_dirty,
                # the commit the metadata records: a new one rewrites it (a commit of
                # files outside the project, or put under git since the last build)
                "git": source_id.git_commit,
                "python": env.executable,
                "torch": [str(torch_install.path), torch_install.mtime_ns, torch_install.version],
                "cxx": cxx.identity() if cxx else None,
                "device": device.identity() if device else None,
                # nvcc's host compiler, for cuda only (other builds' keys stay as they were)
                **({"nvcc-host": host.identity()} if host else {}),
                "deps": [d.provenance() for d in deps],
                # --arch only changes the GPU backends' builds
                "archs": (list(archs) if archs and backend in ARCH_BACKENDS and not manifest.noarch
                          else None),
                "compilers": compiler_environment(),
                # it writes the compile and link options (noarch builds compile nothing)
                "setuptools": setuptools,
                **_pinned_names(backend, manifest, device),
                **_arch_terms(backend, manifest, archs),
                **_dollar_flags(backend, manifest),
            }
        )
        # Checked before the lock too, so that an unchanged project needs no write (a
        # read-only checkout), and again under it: a build this one waited for may have
        # made the variant.
        found = None if force else _found_up_to_date(root, out, backend, key, started,
                                                     progress)
        if found is not None:
            results.append(found)
            continue
        with _build_lock(root, backend, progress):
            found = None if force else _found_up_to_date(root, out, backend, key, started,
                                                         progress)
            if found is not None:
                results.append(found)
                continue
            _check_out_writable(out, given=out_dir is not None)

            if facts is None and not manifest.noarch:
                facts = env.system()
            variant = _variant_name(manifest, backend, facts)
            plan = plan_build(
                manifest,
                backend=backend,
                variant=variant,
                source_id=source_id,
                cxx=cxx,
                device_compiler=device,
                dependencies=deps,
                arch_override=archs,
                torch_dir=torch_install.path.parent,
            )
            progress(f"{variant}: building {manifest.name} ({backend}, ops namespace "
                     f"{plan.namespace})")
            for note in plan.notes:
                progress(f"  note: {note}")
            extension = None
            work_dir = root / ".kernelforge" / variant
            compiled_since = time.time_ns()
            if not plan.noarch:
                extension = compile_plan(
                    plan, work_dir=work_dir, jobs=jobs,
                    verbose=verbose, progress=progress, python=env,
                )
            final = assemble_variant(
                manifest, plan, extension=extension, out_dir=out,
                provenance=_provenance(plan, source_id, torch_install, cxx, device, host),
            )
            # A project file written since it was hashed (an edit saved while this
            # compiled, even one undone since) may have been read in either version:
            # no up-to-date entry, so the next build runs ninja again.
            changed = [] if plan.noarch else _changed_since(manifest, out, hashed)
            if changed:
                shown = ", ".join(changed[:5]) + (f" and {len(changed) - 5} more"
                                                  if len(changed) > 5 else "")
                progress(f"  note: {shown} changed while {variant} compiled, so it may "
                         "hold either version; the next build compiles again")
            else:
                _write_stamp(root, backend, key, final, None if plan.noarch else
                             reads_digest(work_dir, compiled_since_ns=compiled_since))
            elapsed = time.monotonic() - started
            progress(f"{variant}: wrote {final}")
            results.append(BuildResult(variant, backend, final, False, elapsed))
    return results


def _checked_arguments(backends: Iterable[str] | None, wanted: Iterable[str] | None,
                       jobs: int | None) -> tuple[list[str] | None, list[str] | None,
                                                  int | None]:
    """Refuse the arguments of :func:`build_project` that the command line's parser
    refuses, before anything is read: a string where a list belongs (read one letter
    at a time), a backend that is no name, an architecture that is not one (``sm_90``,
    silently unused by a CPU build otherwise), archs that do not fit together or with
    the backends named (:func:`~kernelforge.archs.arch_backend_problem`: CUDA
    capabilities with ROCm archs, a ROCm arch for ``backends=["cuda"]``) and a number
    of jobs below 1.

    Returns:
        ``backends`` as a list (a generator or other one-pass iterable is read once
        here, not once per check), the archs ``wanted`` in the spelling ``--arch``
        gives them (``"9.0a"``, ``"gfx942"``), and ``jobs`` as an ``int`` (numpy's
        integers are taken too, as any integer type).
    """
    for name, value in (("backends", backends), ("archs", wanted)):
        if isinstance(value, (str, bytes)):
            raise TypeError(f"{name}: expected a list, got the string {value!r}; fix: pass "
                            f"[{value!r}]")
    count = None if jobs is None else _jobs_count(jobs)
    listed = None if backends is None else list(backends)
    for name in listed or ():
        if not isinstance(name, str):
            raise TypeError(f"backends: expected backend names such as 'cpu' or 'cuda', "
                            f"got {name!r}")
    if wanted is None:
        return listed, None, count
    try:
        parsed = [archs.parse_arch(a) for a in wanted]
    except ValueError as err:
        raise ValueError(f"archs: {err}") from err
    problem = archs.arch_backend_problem(parsed, listed or (), python=True)
    if problem:
        raise ValueError(problem)
    return listed, parsed, count


def _jobs_count(jobs: int) -> int:
    """``build_project``'s ``jobs``, a positive integer (not a bool)."""
    try:
        count = None if isinstance(jobs, bool) else operator.index(jobs)
    except TypeError:
        count = None
    if count is None or count < 1:
        raise ValueError(f"jobs: expected a positive number of compile jobs, got {jobs!r}; "
                         "fix: pass a positive integer such as 8, or None for the default "
                         "($MAX_JOBS, else all cores)")
    return count


def _check_out_dir(root: Path, out: Path, *, given: bool) -> None:
    """Refuse an ``out_dir`` that is the project folder or a folder above it: the
    variants written there would be taken for the project's sources, and change its uid
    at every build. One inside the project is left out of the hash like ``build/``.
    Also refuse, before the compile rather than when the first variant is written, an
    ``out_dir`` (the project's ``build/`` unless ``given``) that lies under a file."""
    real_root, real_out = Path(os.path.realpath(root)), Path(os.path.realpath(out))
    if real_out == real_root or real_out in real_root.parents:
        raise BuildError(
            f"out_dir {out} holds the project {root}, so the variants written there would "
            f"count as its sources; fix: write them to a folder of their own, such as "
            f"{root / 'build'} (the default)"
        )
    named = f"out_dir {out}" if given else str(out)
    other = ", or pass another out_dir" if given else ""
    for where in (out, *out.parents):
        if where.exists() or where.is_symlink():
            if not where.is_dir():
                raise BuildError(
                    f"{named}: {where} is not a directory, so no variant can be "
                    f"written there; fix: move or delete {where}{other}")
            break


def _check_out_writable(out: Path, *, given: bool) -> None:
    """Refuse, before a compile rather than once it is done, an ``out_dir`` (the
    project's ``build/`` unless ``given``) that this user may not write: a ``build/``
    that a build under sudo made, a read-only checkout. Not asked of a build that is up
    to date, which writes nothing there."""
    where = nearest_folder(out)  # _check_out_dir refused a file on the way
    if os.access(where, os.W_OK | os.X_OK):
        return
    named = f"out_dir {out}" if given else str(out)
    if _read_only_mount(where):  # no chmod helps there
        raise BuildError(
            f"{named}: {where} is on a read-only file system, so no variant can be written "
            "there; fix: build a copy of the project on a writable file system"
            + (", or pass another out_dir" if given else ""))
    fix = f"make it writable (chmod u+w {shlex.quote(str(where))})"
    if where == out:
        fix += ", or remove it if another user made it (a build run with sudo)"
    elif not given:
        fix += ", or build a copy of the project in a folder you can write"
    if given:
        fix += ", or pass another out_dir"
    raise BuildError(f"{named}: {where} may not be written by this user, so no variant can "
                     f"be written there; fix: {fix}")


def _read_only_mount(folder: Path) -> bool:
    """Whether ``folder`` lies on a file system mounted read-only (a container's volume,
    a checkout on a read-only share), where no permission is what refuses a write."""
    try:
        return bool(os.statvfs(folder).f_flag & os.ST_RDONLY)
    except (OSError, AttributeError):  # not POSIX: no statvfs
        return False


def _dependencies(manifest: Manifest, backend: str, device: Tool | None
                  ) -> list[Dependency]:
    """The resolved ``depends`` of the kernel sections ``backend`` compiles with the
    device compiler ``device``; none for a noarch project.

    Raises:
        ManifestError: a dependency kernelforge cannot resolve at all, naming build.toml
            and the kernel section as ``kernelforge check`` does.
        ToolchainError: one it resolves that is not installed as pinned here.
    """
    if manifest.noarch:
        return []
    deps: dict[str, Dependency] = {}
    for k in manifest.kernels.values():
        if k.backend != backend or not kernel_applies(k, device):
            continue
        for name in k.depends:
            if name in deps:
                continue
            try:
                deps[name] = resolve_dependency(name)
            except ToolchainError as err:
                unresolvable = dependency_error(manifest, k.name, name, err)
                if unresolvable is not None:
                    raise unresolvable from err
                raise
    return list(deps.values())


def _provenance(
    plan: BuildPlan,
    source_id: SourceId,
    torch_install: TorchInstall,
    cxx: Tool | None,
    device: Tool | None,
    host: Tool | None = None,
) -> dict[str, object]:
    prov: dict[str, object] = {"kernel-builder": builder_provenance()}
    if source_id.git_commit:
        prov["kernel"] = {"commit": source_id.git_commit, "dirty": source_id.git_dirty}
    prov["source-sha256"] = source_id.content_hash
    prov["torch"] = torch_install.version
    toolchain: dict[str, str] = {}
    if cxx is not None:
        toolchain[cxx.name] = cxx.version_str
    if device is not None:
        toolchain[device.name] = device.version_str
    if host is not None:
        # what compiled the host side of the .cu sources: not $CXX, but $CC or gcc
        toolchain["nvcc-host"] = f"{host.name} {host.version_str}"
    if toolchain:
        prov["toolchain"] = toolchain
    if plan.dependencies:
        prov["dependencies"] = [d.provenance() for d in plan.dependencies]
    if not plan.noarch:
        # Without the paths of the project, torch, the dependencies and the CUDA toolkit,
        # so the same sources give the same metadata wherever they are built.
        prov["flags"] = {
            "cxx": plan.path_free(plan.cxx_flags),
            "device": plan.path_free(plan.device_flags),
        }
    return prov
