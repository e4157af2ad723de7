"""Planning a build: from a manifest and the toolchain to sources, flags and names.

Planning is pure (no compiler runs, no torch import), so every rule here is unit-tested
for every backend, ROCm included, on a machine that has none of the toolchains.
"""

from __future__ import annotations

import hashlib
import os
import posixpath
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path, PurePosixPath

from kernelforge import archs
from kernelforge.build.includes import IncludeGraph, Scanned, base_key, scan
from kernelforge.build.toolchain import Dependency, Tool
from kernelforge.digest import file_digest
from kernelforge.errors import BuildError, ToolchainError
from kernelforge.manifest import KernelSpec, Manifest, check_compiled_sources

#: Files compiled as translation units; everything else listed in `src` is a header.
COMPILED_SUFFIXES = {
    "cpu": (".cpp", ".cc", ".cxx", ".c"),
    "cuda": (".cpp", ".cc", ".cxx", ".c", ".cu"),
    "rocm": (".cpp", ".cc", ".cxx", ".c", ".cu", ".hip"),
}

#: The defines each backend's sources see (as Hugging Face's builder sets them).
BACKEND_DEFINES = {
    "cpu": ("-DCPU_KERNEL",),
    "cuda": ("-DCUDA_KERNEL", "-DUSE_CUDA=1"),
    "rocm": ("-DROCM_KERNEL", "-DUSE_ROCM=1"),
}

#: The device compiler's flags of Hugging Face's builder that torch's extension tooling
#: does not give, or gives otherwise. Kernels written for that builder rely on them:
#: device lambdas (``--expt-extended-lambda``, which torch's CMake configuration adds)
#: and, from CUDA 11.8, ``ENABLE_FP8`` and ``__half``/``__nv_bfloat16`` with their
#: conversions and operators. torch's tooling defines ``__CUDA_NO_HALF_OPERATORS__`` and
#: its kin (``__HIP_NO_HALF_*`` on ROCm) ahead of the builder's flags, so they are
#: undefined here, later on the line.
CUDA_FLAGS = ("--expt-relaxed-constexpr", "--expt-extended-lambda")
CUDA_11_8_FLAGS = ("-DENABLE_FP8", "-U__CUDA_NO_HALF_OPERATORS__",
                   "-U__CUDA_NO_HALF_CONVERSIONS__", "-U__CUDA_NO_BFLOAT16_CONVERSIONS__",
                   "-U__CUDA_NO_HALF2_OPERATORS__")
ROCM_FLAGS = ("-DENABLE_FP8", "-U__HIP_NO_HALF_CONVERSIONS__", "-U__HIP_NO_HALF_OPERATORS__",
              "-fno-gpu-rdc")

#: The folder below the project that every source may include from without an
#: ``include`` entry, as in Hugging Face's builder (kernel bindings include their
#: kernels' headers by name from it).
IMPLICIT_INCLUDE = "csrc"

#: What the tree walk leaves out at every depth: git's data and Python's bytecode
#: (``*.pyc`` files are left out too), which change without the sources changing.
ALWAYS_IGNORED = frozenset({".git", "__pycache__"})

#: The project's own outputs, left out at its top level only: the build's variants
#: (``build/``) and work folder (``.kernelforge/``), and Nix's ``result`` link. Deeper in
#: the tree a folder of these names is a source folder like any other, and is hashed.
TOP_LEVEL_OUTPUTS = frozenset({"build", ".kernelforge", "result"})

#: Dot-folders of tools and editors, left out below the top level too (at the top level
#: every dot-entry is): caches, checkpoints and settings that change as the tools run.
#: Every other dot-folder below the top level is hashed, since a source may include a
#: header from it (``#include ".inc/params.h"``).
TOOL_FOLDERS = frozenset({
    ".benchmarks", ".cache", ".ccls-cache", ".direnv", ".eggs", ".hg", ".hypothesis",
    ".idea", ".ipynb_checkpoints", ".kernelforge", ".mypy_cache", ".nox", ".pytest_cache",
    ".ruff_cache", ".svn", ".tox", ".venv", ".vs", ".vscode",
})

#: How a cache directory marks itself (https://bford.info/cachedir/): pytest, mypy, ruff
#: and kernelforge's own cache write it. A tagged folder is left out at any depth.
CACHEDIR_SIGNATURE = b"Signature: 8a477f597d28d172789f06886806bc55"

DATA_DIR = Path(__file__).with_name("data")


@dataclass(frozen=True)
class SourceId:
    """Identity of a project's sources: the op-namespace uid and the git provenance."""

    content_hash: str
    git_commit: str | None = None
    git_dirty: bool = False

    @property
    def uid(self) -> str:
        return self.content_hash[:7] + ("_dirty" if self.git_dirty else "")


@dataclass(frozen=True)
class CompileGroup:
    """The sources of one ``[kernel.*]`` section, compiled with that section's own flags
    (its CUDA capabilities or ROCm archs, ``cxx-flags``, ``cuda-flags``/``hip-flags`` and
    ``include``) on top of the extension's common flags, then linked with the rest.

    A source that several sections of one backend list is compiled once, in a group of
    its own named after those sections (``a+b``), with all of their flags, include
    directories and architectures: Hugging Face's builder adds each section's settings
    to the one source file."""

    name: str
    sources: tuple[Path, ...]
    include_dirs: tuple[Path, ...] = ()
    cxx_flags: tuple[str, ...] = ()
    device_flags: tuple[str, ...] = ()
    #: The sources compiled with ``-DTORCH_EXTENSION_NAME=<namespace>`` (all by
    #: default); see :func:`sources_using_extension_name`.
    named_sources: tuple[Path, ...] | None = None
    #: The define each of the other sources gets instead: a digest of what it may
    #: include (:func:`sources_using_extension_name`).
    source_defines: tuple[tuple[Path, str], ...] = ()
    #: Device-compiler flags of single sources (:func:`pinned_source_path_flags`), each
    #: such source compiled on its own.
    source_device_flags: tuple[tuple[Path, tuple[str, ...]], ...] = ()

    def as_dict(self) -> dict[str, object]:
        """JSON-ready form (for the compiler driver and the build fingerprint)."""
        named = self.sources if self.named_sources is None else self.named_sources
        out: dict[str, object] = {
            "name": self.name,
            "sources": [str(s) for s in self.sources],
            "named_sources": [str(s) for s in named],
            "source_defines": {str(p): d for p, d in self.source_defines},
            "include_dirs": [str(d) for d in self.include_dirs],
            "cxx_flags": list(self.cxx_flags),
            "device_flags": list(self.device_flags),
        }
        if self.source_device_flags:  # absent otherwise: earlier builds stay up to date
            out["source_device_flags"] = {str(p): list(f) for p, f in self.source_device_flags}
        return out


@dataclass(frozen=True)
class BuildPlan:
    """Everything needed to compile and package one variant.

    ``sources`` (the ``[torch]`` binding) compile with the common flags; each of
    ``groups`` (a kernel section) compiles with the common flags minus the architecture
    flags and minus ``binding_cxx_flags``, plus its own.
    """

    root: Path
    variant: str
    backend: str
    namespace: str
    module_id: str
    sources: tuple[Path, ...] = ()
    include_dirs: tuple[Path, ...] = ()
    cxx_flags: tuple[str, ...] = ()
    #: The end of ``cxx_flags`` that only the binding's sources get: ``[torch] cxx-flags``
    #: (Hugging Face's builder gives them to the ``[torch]`` sources alone).
    binding_cxx_flags: tuple[str, ...] = ()
    device_flags: tuple[str, ...] = ()
    link_flags: tuple[str, ...] = ()
    archs: tuple[str, ...] | None = None
    groups: tuple[CompileGroup, ...] = ()
    dependencies: tuple[Dependency, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    #: The directories the compilers write under relative names (``-ffile-prefix-map``),
    #: each with its name: the project (``.``), torch, dependency include directories
    #: and the CUDA toolkit.
    prefix_maps: tuple[tuple[Path, str], ...] = ()

    @property
    def noarch(self) -> bool:
        return not self.sources and not self.groups

    def path_free(self, flags: Iterable[str]) -> list[str]:
        """``flags`` with every directory of :attr:`prefix_maps` written as a placeholder:
        the project as ``<project>``, the others as ``<name>`` (``<torch>``, ``<cuda>``,
        ``<cutlass_4_0>``), so that the flags recorded in ``metadata.json`` are the same
        wherever the project, torch, the dependencies and the toolkit are installed.

        A directory is replaced only where its last component ends (``/opt/cuda`` is not
        replaced in ``/opt/cuda-12``), the longest first, so one inside another keeps its
        own name. The builder's own path maps (``-ffile-prefix-map=`` of
        :attr:`prefix_maps`, for the host compiler or through nvcc) are listed in one
        order, sorted, in the places they hold: on the command line the most deeply
        nested directory comes last, an order that depends on where each is. Maps from
        ``build.toml`` stay where they are.
        """
        names: dict[str, str] = {}
        for path, name in self.prefix_maps:
            text = str(path)
            if len(path.parts) > 1:  # never the filesystem root: it would match everywhere
                names.setdefault(text, "<project>" if path == self.root else f"<{name}>")
        if not names:
            return list(flags)
        alternatives = "|".join(re.escape(p) for p in sorted(names, key=len, reverse=True))
        pattern = re.compile(rf"(?:{alternatives})(?![\w.+-])")
        flags = list(flags)
        out = [pattern.sub(lambda m: names[m.group(0)], flag) for flag in flags]
        for prefix in ("-ffile-prefix-map=", "-Xcompiler=-ffile-prefix-map="):
            own = {f"{prefix}{old}={new}" for old, new in self.prefix_maps}
            at = [i for i, flag in enumerate(flags) if flag in own]  # not a user's map
            for i, flag in zip(at, sorted(out[i] for i in at), strict=True):
                out[i] = flag
        return out

    def fingerprint_inputs(self) -> dict[str, object]:
        """What decides the build's output apart from the source files themselves."""
        return {
            "variant": self.variant,
            "namespace": self.namespace,
            "sources": [str(s) for s in self.sources],
            "include_dirs": [str(d) for d in self.include_dirs],
            "cxx_flags": list(self.cxx_flags),
            "binding_cxx_flags": list(self.binding_cxx_flags),
            "device_flags": list(self.device_flags),
            "link_flags": list(self.link_flags),
            "archs": list(self.archs) if self.archs is not None else None,
            "groups": [g.as_dict() for g in self.groups],
            "dependencies": [d.provenance() for d in self.dependencies],
        }


def _is_environment(path: Path) -> bool:
    """Whether ``path`` is a Python environment (a virtualenv or a conda environment),
    whatever its name: installed packages are not the project's sources."""
    return (path / "pyvenv.cfg").is_file() or (path / "conda-meta").is_dir()


def _is_tagged_cache(path: Path) -> bool:
    """Whether the folder ``path`` holds a ``CACHEDIR.TAG`` (:data:`CACHEDIR_SIGNATURE`)."""
    try:
        with open(path / "CACHEDIR.TAG", "rb") as tag:
            return tag.read(len(CACHEDIR_SIGNATURE)) == CACHEDIR_SIGNATURE
    except OSError:
        return False


def _always_left_out(name: str) -> bool:
    """Whether an entry of this name is left out wherever it is, a listed folder too."""
    return name in ALWAYS_IGNORED or name.endswith(".pyc")


def _tree_leaves_out(name: str, path: Path, *, top: bool, is_dir: bool) -> bool:
    """Whether the tree walk leaves out the entry ``name`` (at ``path``), by its name:
    ``top`` when it is in the project folder itself. Python environments and the
    build's output folders are left out by what they are (:func:`_walk`).

    The rules: :data:`ALWAYS_IGNORED` names and ``*.pyc`` files anywhere; at the top
    level, :data:`TOP_LEVEL_OUTPUTS` and every dot-entry (``.git``, ``.venv``,
    ``.github``, tool caches, editor state); below it, dot-files (editor swap and lock
    files, ``.DS_Store``) and :data:`TOOL_FOLDERS`; and folders tagged as caches
    (:data:`CACHEDIR_SIGNATURE`) anywhere. Any other folder is walked, dot-folders and
    folders named ``build`` or ``result`` below the top level included.
    """
    if _always_left_out(name):
        return True
    if top and (name in TOP_LEVEL_OUTPUTS or name.startswith(".")):
        return True
    if not is_dir:
        return name.startswith(".")
    return name in TOOL_FOLDERS or _is_tagged_cache(path)


def _walk(directory: Path, rel: str, ancestors: frozenset[str], *,
          listed: bool = False, outputs: frozenset[str] = frozenset()
          ) -> Iterable[tuple[str, Path]]:
    """``(relative path, path)`` of every file under ``directory`` but bytecode, ``.git``,
    Python environments and the folders in ``outputs`` (real paths: the project's
    ``build/``, ``.kernelforge/`` and the build's ``out_dir``), following symlinks (a link
    back to a directory being walked is not entered again; a dangling link is left out).

    The project tree (``rel`` empty at its top) also leaves out what
    :func:`_tree_leaves_out` names. A ``listed`` directory (an ``include`` of the
    manifest) is walked whole, since the compiler reads whatever it reaches there.
    """
    for entry in sorted(os.scandir(directory), key=lambda e: e.name):
        name = entry.name
        path = Path(entry.path)
        is_dir = entry.is_dir()  # follows symlinks
        if listed:
            if _always_left_out(name):
                continue
        elif _tree_leaves_out(name, path, top=not rel, is_dir=is_dir):
            continue
        relpath = f"{rel}{name}"
        if is_dir:
            real = os.path.realpath(path)
            if real not in ancestors and real not in outputs and not _is_environment(path):
                yield from _walk(path, relpath + "/", ancestors | {real},
                                 listed=listed, outputs=outputs)
        elif entry.is_file():
            yield relpath, path


def output_dirs(root: Path, out_dir: Path | None = None) -> frozenset[str]:
    """The real paths of the folders a build of the project at ``root`` writes, which no
    walk hashes: ``build/``, ``.kernelforge/`` and ``out_dir`` where given."""
    dirs = [root / "build", root / ".kernelforge", *([out_dir] if out_dir is not None else [])]
    return frozenset(os.path.realpath(d) for d in dirs)


def iter_project_files(root: Path, listed: Iterable[str] = (),
                       extra: Iterable[tuple[str, Path]] = (),
                       outputs: frozenset[str] | None = None,
                       ) -> list[tuple[str, Path]]:
    """Every file of a project that can affect a build, as ``(relative path, path)`` in a
    stable order: the project tree (symlinks followed, with what :func:`_tree_leaves_out`
    and :func:`_walk` leave out: bytecode, ``.git``, Python environments, the top level's
    outputs and dot-entries, dot-files and tool caches below it), plus every file
    ``listed`` (paths relative to the project, e.g. the manifest's sources and include
    directories), even where the tree walk leaves it out, and the ``extra`` files (the
    Python package the build ships: :func:`package_files`).

    ``outputs`` are the real paths of the folders the build writes (:func:`output_dirs`;
    by default ``build/`` and ``.kernelforge/``), left out wherever they are.

    A listed directory counts whole, dot-files included, but for bytecode, ``.git``,
    Python environments and ``outputs``; except the project folder itself
    (``include = ["."]``), which is the tree walk already: whole, it would count tool
    caches, editor and IDE files and build outputs, and every test or editor run would
    change the uid.
    """
    if outputs is None:
        outputs = output_dirs(root)
    found: dict[str, Path] = dict(_walk(root, "", frozenset({os.path.realpath(root)}),
                                        outputs=outputs))
    for name in listed:
        path = root / name
        rel = Path(name).as_posix()
        if path.is_dir() and os.path.realpath(path) == os.path.realpath(root):
            continue  # the project folder: the tree walk above
        if path.is_dir():
            prefix = "" if rel in (".", "") else rel.rstrip("/") + "/"
            found.update(_walk(path, prefix, frozenset({os.path.realpath(path)}),
                               listed=True, outputs=outputs))
        elif path.is_file():
            found[rel] = path
    found.update(extra)
    return sorted(found.items(), key=lambda item: _walk_order(item[0]))


def leaves_out(root: Path, rel: str, *, listed: Iterable[str] = (),
               outputs: frozenset[str] | None = None) -> bool:
    """Whether the project's hash (:func:`iter_project_files`) leaves out the path ``rel``
    (relative to the project, ``/``-separated), whether or not it exists: for the git
    dirty check, which must not count a change to a file the hash leaves out, nor miss
    one to a file it covers that was deleted. A path under a ``listed`` one counts."""
    if outputs is None:
        outputs = output_dirs(root)
    parts = [p for p in rel.split("/") if p]
    if any(_always_left_out(p) for p in parts):
        return True
    for name in listed:
        prefix = Path(name).as_posix().strip("/")
        if prefix not in ("", ".") and (rel == prefix or rel.startswith(prefix + "/")):
            return False
    for depth, name in enumerate(parts):
        path = root.joinpath(*parts[:depth + 1])
        is_dir = depth < len(parts) - 1 or path.is_dir()
        if _tree_leaves_out(name, path, top=depth == 0, is_dir=is_dir):
            return True
        if is_dir and (os.path.realpath(path) in outputs or _is_environment(path)):
            return True
    return False


@dataclass(frozen=True)
class _PackageTree:
    """What the walk of ``torch-ext/<python_name>/`` found (:func:`_package_tree`)."""

    #: ``(path relative to the package, path)`` of every file, symlinks followed.
    files: tuple[tuple[PurePosixPath, Path], ...] = ()
    #: Folders reached through a symlink that lead back to a folder containing them (a
    #: loop: their files cannot be copied), each with that folder's real path.
    loops: tuple[tuple[Path, str], ...] = ()
    #: ``(path relative to the package, path)`` of symlinks whose target does not exist.
    dangling: tuple[tuple[PurePosixPath, Path], ...] = ()


def _package_tree(root: Path, python_name: str) -> _PackageTree:
    """The files of ``torch-ext/<python_name>/`` but bytecode and ``__pycache__``, with
    symlinks followed: a linked file or folder is shipped as the files it holds (a
    sub-package shared with another kernel, say), wherever it points, so that the variant
    holds what importing the source package finds. A link to a folder that contains it
    cannot be copied, and a dangling one has nothing to copy: both are reported."""
    package = root / "torch-ext" / python_name
    try:
        if not package.is_dir():
            return _PackageTree()
    except OSError:  # a name too long for the file system: check_project reports it
        return _PackageTree()
    files: list[tuple[PurePosixPath, Path]] = []
    loops: list[tuple[Path, str]] = []
    dangling: list[tuple[PurePosixPath, Path]] = []

    def walk(directory: Path, rel: PurePosixPath, ancestors: frozenset[str]) -> None:
        for entry in sorted(os.scandir(directory), key=lambda e: e.name):
            if entry.name == "__pycache__" or entry.name.endswith(".pyc"):
                continue
            path, sub = Path(entry.path), rel / entry.name
            if entry.is_dir():  # follows symlinks
                real = os.path.realpath(path)
                if real in ancestors:
                    loops.append((path, real))
                else:
                    walk(path, sub, ancestors | {real})
            elif entry.is_file():
                files.append((sub, path))
            elif entry.is_symlink() and not os.path.exists(path):
                dangling.append((sub, path))

    walk(package, PurePosixPath(), frozenset({os.path.realpath(package)}))
    return _PackageTree(tuple(files), tuple(loops), tuple(dangling))


def _suffixes(pyext: Iterable[str]) -> set[str]:
    return {"." + ext.lstrip(".") for ext in pyext}


def package_files(root: Path, python_name: str, pyext: Iterable[str]
                  ) -> list[tuple[str, Path]]:
    """The files of the Python package ``torch-ext/<python_name>/`` that a build copies
    into the variant, as ``(path relative to the project, path)``: every file whose
    suffix is one of ``pyext`` (``[torch] pyext``) at any depth, dot-files and folders
    named ``build`` included, but bytecode and ``__pycache__``; symlinks are followed
    (:func:`_package_tree`), and the files they reach are copied as regular files."""
    suffixes = _suffixes(pyext)
    return [(f"torch-ext/{python_name}/{rel.as_posix()}", path)
            for rel, path in _package_tree(root, python_name).files
            if path.suffix in suffixes]


def unshipped_package_files(root: Path, python_name: str, pyext: Iterable[str]) -> list[str]:
    """The files of the Python package ``torch-ext/<python_name>/`` that a build leaves
    out of the variant because their suffix is not one of ``pyext``, relative to the
    project, for a note (bytecode, ``__pycache__`` and dot-files or dot-folders, which
    tools and editors write, are not named)."""
    suffixes = _suffixes(pyext)
    return [f"torch-ext/{python_name}/{rel.as_posix()}"
            for rel, path in _package_tree(root, python_name).files
            if path.suffix not in suffixes and not any(p.startswith(".") for p in rel.parts)]


#: Files the build writes at the top of a variant, which a package file of the same name
#: would clash with: name -> (what would happen, the fix).
_GENERATED_FILES = {
    "_ops.py": ("would be overwritten by the generated _ops.py", "delete it"),
    # The variant's own metadata.json is written after the copy, and readers take a
    # metadata.json.sigstore beside it for its signature bundle (and leave it out of
    # the digest): a package file of either name would be lost or misread silently.
    "metadata.json": ("would be overwritten by the generated metadata.json",
                      "rename it (and the code that reads it)"),
    "metadata.json.sigstore": ("would be taken for the signature bundle of the variant's "
                               "metadata.json", "rename it"),
}


def package_problems(root: Path, python_name: str, pyext: Iterable[str]
                     ) -> list[tuple[Path, str, str]]:
    """Why the Python package ``torch-ext/<python_name>/`` cannot be shipped as it is, as
    ``(path, problem, fix)``: a shipped file named like one the build generates at the
    top of the variant (``_ops.py``, ``metadata.json``, ``metadata.json.sigstore``), a
    symlink to a folder that contains it, and a dangling symlink that would be shipped
    (a dot-named one, such as an editor's lock file, is left alone). ``kernelforge
    build`` refuses each before it compiles, and ``kernelforge check`` reports them."""
    tree = _package_tree(root, python_name)
    suffixes = _suffixes(pyext)
    problems: list[tuple[Path, str, str]] = []
    for rel, path in tree.files:
        clash = _GENERATED_FILES.get(rel.as_posix())
        if clash is not None and path.suffix in suffixes:  # shipped, so it would clash
            problems.append((path, *clash))
    for path, real in tree.loops:
        problems.append((path, f"leads back to {real}, a folder that contains it (a loop of "
                         "symbolic links), so the build cannot copy its files into the "
                         "variant", "remove the link, or point it at the folder to ship"))
    for rel, path in tree.dangling:
        if path.suffix in suffixes and not rel.name.startswith("."):
            problems.append((path, f"is a symbolic link to {os.readlink(path)}, which does "
                             "not exist, so the variant would lack it",
                             "restore its target, or remove the link"))
    return problems


def _walk_order(rel: str) -> list[tuple[int, str]]:
    """Sort key of a relative path: in each folder its files, then its subfolders, each
    by name (the order of a top-down walk, which the content hash has always used)."""
    *dirs, name = rel.split("/")
    return [*((1, d) for d in dirs), (0, name)]


def manifest_inputs(manifest: Manifest) -> list[str]:
    """The files and include directories a manifest lists (relative to the project)."""
    listed: list[str] = ["build.toml"]
    if manifest.torch is not None:
        listed += [*manifest.torch.src, *manifest.torch.include]
    for kernel in manifest.kernels.values():
        listed += [*kernel.src, *kernel.include]
    return listed


def manifest_package_files(manifest: Manifest) -> list[tuple[str, Path]]:
    """The files of the manifest's Python package that a build ships (:func:`package_files`)."""
    return package_files(manifest.root, manifest.python_name, manifest.pyext)


@contextmanager
def _reading(root: Path) -> Iterator[None]:
    """Turn a file or folder of the project that cannot be read into a BuildError: a file
    left out would make the uid and the up-to-date check lie."""
    try:
        yield
    except OSError as err:
        raise BuildError(
            f"cannot read {err.filename or root} to hash the project's sources: "
            f"{err.strerror or err}; fix its permissions, or move it out of the project"
        ) from err


def project_files(root: Path, listed: Iterable[str] = (),
                  extra: Iterable[tuple[str, Path]] = (),
                  outputs: frozenset[str] | None = None) -> list[tuple[str, Path]]:
    """:func:`iter_project_files`, with a folder that cannot be read a BuildError."""
    with _reading(root):
        return iter_project_files(root, listed, extra, outputs)


def hash_files(root: Path, files: Iterable[tuple[str, Path]]) -> str:
    """A sha256 over the relative paths and contents of ``files`` (from
    :func:`project_files`), each file read in chunks."""
    h = hashlib.sha256()
    with _reading(root):
        for rel, path in files:
            h.update(rel.encode() + b"\0")
            with path.open("rb") as fh:
                h.update(file_digest(fh))
    return h.hexdigest()


def hash_sources(root: Path, listed: Iterable[str] = (),
                 extra: Iterable[tuple[str, Path]] = (),
                 outputs: frozenset[str] | None = None) -> str:
    """A sha256 over the relative paths and contents of the project's files
    (:func:`iter_project_files`)."""
    return hash_files(root, project_files(root, listed, extra, outputs))


def namespace_for(python_name: str, backend: str, uid: str) -> str:
    """The unique op namespace and extension name: ``_<name>_<backend>_<uid>``."""
    return f"_{python_name}_{backend}_{uid}"


def _kernels_for(manifest: Manifest, backend: str) -> list[KernelSpec]:
    return [k for k in manifest.kernels.values() if k.backend == backend]


def version_tuple(text: str) -> tuple[int, ...]:
    """``"12.8"`` -> ``(12, 8)`` (a manifest version, already validated)."""
    return tuple(int(p) for p in text.split(".") if p.isdigit())


def kernel_applies(kernel: KernelSpec, device_compiler: Tool | None) -> bool:
    """Whether a kernel section is compiled with this toolkit: a ``cuda-minver`` above
    the nvcc version leaves the section out, as Hugging Face's builder does."""
    if kernel.cuda_minver is None or device_compiler is None or kernel.backend != "cuda":
        return True
    return device_compiler.version[:2] >= version_tuple(kernel.cuda_minver)[:2]


def _rel_paths(manifest: Manifest, names: Iterable[str]) -> list[Path]:
    return [manifest.root / n for n in names]


def _serving(declared: Sequence[archs.CudaCapability],
             target: archs.CudaCapability) -> archs.CudaCapability | None:
    """The declared capability that best serves a GPU of capability ``target``: the
    architecture-specific one of that capability (``9.0a`` for ``9.0``), else the
    newest family-specific one of its major, else the newest that runs there (same major,
    not newer; or, with PTX, any older one); ``None`` when none runs there."""
    want = (target.major, target.minor)
    same = [d for d in declared if d.suffix == "a" and (d.major, d.minor) == want]
    if same:
        return same[0]
    family = [d for d in declared if d.suffix == "f" and d.major == target.major
              and d.minor <= target.minor]
    if family:
        return max(family)
    runs = [d for d in declared if not d.suffix and (d.major, d.minor) <= want
            and (d.major == target.major or d.ptx)]
    return max(runs, key=lambda d: (d.major, d.minor, d.ptx)) if runs else None


def _arch_targets(override: Sequence[str]) -> list[archs.CudaCapability]:
    """The ``--arch`` values as CUDA capabilities, each once.

    Raises:
        BuildError: a value that is not one (a ROCm arch, say), with the fix.
    """
    targets: list[archs.CudaCapability] = []
    for text in dict.fromkeys(override):
        try:
            target = archs.CudaCapability.parse(text)
        except ValueError as err:  # only --arch reaches here unchecked: a ROCm arch, say
            raise BuildError(f"--arch {text}: {err}; the cuda backend needs CUDA "
                             "capabilities (fix: pass --backend for the archs given, or "
                             "CUDA capabilities such as 9.0a)") from None
        targets.append(target)
    return targets


def serving_capabilities(kernel: KernelSpec, override: Sequence[str], nvcc: Tool
                         ) -> tuple[list[str], list[str]]:
    """For a section that declares ``cuda-capabilities``, built with ``--arch``: the
    capabilities of its own (those this nvcc can target) that serve the values given,
    and the values none of them serves.

    As Hugging Face's builder matches a section's capabilities with the build's: for each
    value, the capability that serves a GPU of it (:func:`_serving`: ``9.0a`` for
    ``--arch 9.0`` when the section declares it, ``8.0`` for ``8.6``), never one the
    section does not declare. A value is read as a GPU: its suffix or ``+PTX`` does not
    change what serves it.
    """
    declared = [archs.CudaCapability.parse(c) for c in kernel.cuda_capabilities or ()]
    buildable = [d for d in declared if archs.nvcc_supports(d, nvcc.version[:2])]
    chosen: list[str] = []
    unserved: list[str] = []
    for target in _arch_targets(override):
        found = _serving(buildable, target)
        if found is None:
            unserved.append(str(target))
        elif str(found) not in chosen:
            chosen.append(str(found))
    return chosen, unserved


def cuda_capabilities(
    kernel: KernelSpec, nvcc: Tool, override: Sequence[str] | None
) -> tuple[list[str], list[str], bool]:
    """The capabilities one section compiles for, notes on what was dropped (each naming
    the section), and whether the section serves ``--arch`` (``override``).

    Without ``override``: the section's capabilities (or the default list) intersected
    with what this nvcc can target. With it: for a section that declares
    ``cuda-capabilities``, those of its own that serve the values given
    (:func:`serving_capabilities`), with a note per value none serves; a section that
    serves none of them compiles for its own capabilities, as without ``--arch`` (its
    sources are part of the extension), with a note; a section that declares none
    compiles for the values themselves.
    """
    notes: list[str] = []
    served_any = not override
    version = nvcc.version_str
    caps: Sequence[str]
    if override and kernel.cuda_capabilities:
        listed = ", ".join(kernel.cuda_capabilities)
        served, unserved = serving_capabilities(kernel, override, nvcc)
        if served:
            served_any = True
            notes += [f"kernel.{kernel.name} has no capability for --arch {t} (its "
                      f"cuda-capabilities: {listed}; nvcc {version}); its ops will not "
                      "run on such a GPU" for t in unserved]
            caps = served
        else:
            notes.append(f"kernel.{kernel.name} serves none of --arch "
                         f"{', '.join(dict.fromkeys(override))} (its cuda-capabilities: "
                         f"{listed}; nvcc {version}): compiled for its own capabilities")
            caps = kernel.cuda_capabilities
    elif override:
        served_any = True
        caps = [str(t) for t in _arch_targets(override)]
    else:
        caps = kernel.cuda_capabilities or archs.default_cuda_capabilities(nvcc.version[:2])
    wanted = list(dict.fromkeys(caps))
    kept: list[str] = []
    for cap in wanted:
        parsed = archs.CudaCapability.parse(cap)
        if archs.nvcc_supports(parsed, nvcc.version[:2]):
            kept.append(str(parsed))
        else:
            notes.append(f"skipping capability {cap}: nvcc {version} cannot target it "
                         f"(kernel.{kernel.name})")
    if not kept:
        raise BuildError(
            f"kernel.{kernel.name}: none of the CUDA capabilities {wanted} can be built with "
            f"nvcc {version}; fix: use a CUDA toolkit that can target one of them, or "
            "declare one this nvcc can target in the section's cuda-capabilities"
        )
    return kept, notes, served_any


#: An nvcc option of CUDA 12.8 and newer that Hugging Face's builder leaves out of a
#: kernel's ``cuda-flags`` for older toolkits (which refuse it).
_NVCC_12_8_OPTION = re.compile(r"^--?static-global-template-stub=(?:true|false)$")


def _compile_groups(manifest: Manifest, backend: str, kernels: Sequence[KernelSpec],
                    suffixes: Sequence[str], kernel_archs: Mapping[str, Sequence[str]],
                    device_version: tuple[int, ...] | None = None) -> list[CompileGroup]:
    """One group per kernel section with the sources only it lists, in file order, then
    one group per set of sections that share sources (``a+b``, in the order those sources
    are first listed).

    A shared source is compiled once, as Hugging Face's builder compiles it: with every
    listing section's architectures, include directories, ``cxx-flags`` and
    ``cuda-flags``/``hip-flags`` (in the sections' order; repeated flags are kept, since
    dropping one could split an option from its argument).
    """
    owners: dict[str, list[KernelSpec]] = {}
    first: dict[str, str] = {}
    for k in kernels:
        for name in k.src:
            if PurePosixPath(name).suffix not in suffixes:
                continue
            normal = posixpath.normpath(name.replace("\\", "/"))
            listed_by = owners.setdefault(normal, [])
            if k not in listed_by:
                listed_by.append(k)
            first.setdefault(normal, name)
    shared: dict[tuple[str, ...], list[Path]] = {}
    own: dict[str, list[Path]] = {k.name: [] for k in kernels}
    for normal, listed_by in owners.items():
        path = manifest.root / first[normal]
        if len(listed_by) == 1:
            own[listed_by[0].name].append(path)
        else:
            shared.setdefault(tuple(k.name for k in listed_by), []).append(path)

    by_name = {k.name: k for k in kernels}

    def group(name: str, sections: Sequence[KernelSpec], sources: Sequence[Path]
              ) -> CompileGroup:
        wanted: list[str] = []
        for k in sections:
            wanted += [a for a in kernel_archs.get(k.name, ()) if a not in wanted]
        device: list[str] = []
        if backend == "cuda":
            device = archs.nvcc_gencode_flags(wanted) + [
                f for k in sections for f in k.cuda_flags
                if not (device_version and device_version < (12, 8)
                        and _NVCC_12_8_OPTION.match(f))]
        elif backend == "rocm":
            device = archs.hipcc_offload_flags(wanted) + [f for k in sections
                                                          for f in k.hip_flags]
        include_dirs: list[Path] = []
        for k in sections:
            include_dirs += [d for d in _rel_paths(manifest, k.include) if d not in include_dirs]
        return CompileGroup(
            name=name,
            sources=tuple(sources),
            include_dirs=tuple(include_dirs),
            cxx_flags=tuple(f for k in sections for f in k.cxx_flags),
            device_flags=tuple(device),
        )

    groups = [group(k.name, [k], own[k.name]) for k in kernels if own[k.name]]
    groups += [group("+".join(names), [by_name[n] for n in names], sources)
               for names, sources in shared.items()]
    return groups


#: Files no source includes (documents, manifests, Python), which need not be read
#: unless an ``#include`` names them.
_NOT_INCLUDED = frozenset({".md", ".rst", ".txt", ".toml", ".nix", ".lock", ".json",
                           ".yaml", ".yml", ".py", ".pyi", ".cfg", ".ini", ".sh",
                           ".png", ".jpg", ".svg", ".so", ".o", ".a", ".whl"})

#: The define the sources compiled without the namespace get instead
#: (:func:`sources_using_extension_name`).
SOURCE_DEFINE = "-DKERNELFORGE_SOURCES="


#: The first nvcc whose front end kernelforge gives each source's path as the build's
#: relative name (:func:`pinned_source_path_flags`); older ones were not tried with it.
PINNED_SOURCE_PATH_NVCC = (13, 0)

#: What a pinned path may hold: nvcc splits ``-Xcudafe`` values at commas and pastes them
#: unquoted into the shell lines that run its front end, so anything a shell reads (a
#: space, ``;``, ``&``, ``(``, a quote, ``$``, ...) leaves the source unpinned.
_PINNABLE = re.compile(r"[A-Za-z0-9._/+@%=~^#-]+")


def pinned_source_path_flags(source: Path, prefix_maps: Sequence[tuple[Path, str]],
                             nvcc: Tool | None) -> tuple[str, ...]:
    """The nvcc flags that name a ``.cu`` source by its path under the build's
    :attr:`~BuildPlan.prefix_maps` (``relu_cuda/relu.cu`` for a project file) rather
    than by its absolute path.

    nvcc's front end names a translation unit's anonymous namespaces after a hash of the
    source's absolute path, in the host object and in the device code alike: without
    this the same project built in two folders gives different libraries. The path it
    is given is what it hashes; diagnostics still name the file where it is.

    Args:
        source: the source file.
        prefix_maps: the plan's directories and their relative names, most specific
            last.
        nvcc: the device compiler (none before :data:`PINNED_SOURCE_PATH_NVCC`).

    Returns:
        ``("-Xcudafe", "--orig_src_path_name=<name>")``, or nothing for another suffix,
        an older nvcc, a source outside every mapped directory or a name with anything
        but letters, digits and ``._/+@%=~^#-`` (which could not pass through nvcc's
        shell lines).
    """
    if source.suffix != ".cu" or nvcc is None or nvcc.version < PINNED_SOURCE_PATH_NVCC:
        return ()
    for root, name in reversed(prefix_maps):  # the most specific map first
        if len(root.parts) > 1 and source.is_relative_to(root):
            rel = source.relative_to(root).as_posix()
            pinned = rel if name == "." else f"{name}/{rel}"
            if not _PINNABLE.fullmatch(pinned):
                return ()
            return ("-Xcudafe", f"--orig_src_path_name={pinned}")
    return ()


#: The options that take a file joined to them (gcc's ``-includek.h``, ``-imacrosk.h``).
_JOINED_FILE_OPTION = re.compile(r"^-(?:include|imacros)(?=.)")


def _flag_files(group: CompileGroup, by_base: Mapping[str, list[Path]]) -> set[Path]:
    """The project's files a section's flags name by path (``-include k/k.h``,
    ``-includek.h``, ``-imacros k.h``, ``-Xcompiler -include,k.h``): each word of a
    flag, split at ``=`` and ``,``, whose base name (without a joined ``-include`` or
    ``-imacros``) is a file's."""
    return {q for flag in (*group.cxx_flags, *group.device_flags)
            for word in re.split(r"[=,\s]", flag) if word
            for name in {word, _JOINED_FILE_OPTION.sub("", word)}
            for q in by_base.get(posixpath.basename(name).lower(), ())}



def sources_using_extension_name(manifest: Manifest, groups: Sequence[CompileGroup],
                                 binding: Sequence[Path]) -> list[CompileGroup]:
    """``groups`` with their ``named_sources``: the sources that may use the build's
    namespace, which they are compiled with as ``-DTORCH_EXTENSION_NAME=<namespace>``.

    The namespace carries the uid, which any edit of the project changes. What a source
    may read is found by name (:mod:`kernelforge.build.includes`): the files of the
    project whose base name it names in an ``#include`` (or ``__has_include``, ...),
    what those name in turn, and the files its section's flags name (``-include k.h``).
    The binding's sources always get the namespace; a kernel source gets it when its
    section's flags name the define, or when what it may read names the define or
    includes ``registration.h``, holds a binding source or such a section's source, or
    reads a file by a name the scan cannot see (an ``#include`` of a macro, ``.incbin``):
    that may be any file, and the uid covers them all.

    Each other source gets ``-DKERNELFORGE_SOURCES=<digest>`` instead (``source_defines``),
    a digest of the paths and contents of what it may read, itself included. Its command
    line, and so ninja's object, changes when one of the project's files it may read
    does, by content: not on an edit of a document, of another kernel source it does not
    include or of a header it does not include, and without relying on file times or the
    compiler's list of headers (hipcc writes none). Every file of a base name it includes
    counts, so a new header found first on the include path changes it too. Files outside
    the project (torch's, a dependency's) are covered by the build's other keys and
    ninja's dependency files, and their own includes are not followed: a project file that
    shadows a header one of them includes is seen by a build from scratch only. A source
    that does not use the name compiles to the same object with either define."""
    with _reading(manifest.root):
        files = project_files(manifest.root, manifest_inputs(manifest))
        by_base: dict[str, list[Path]] = {}
        for _, path in files:
            by_base.setdefault(base_key(path), []).append(path)
        flag_files = {g.name: sorted(_flag_files(g, by_base), key=str) for g in groups}
        queue = [path for _, path in files if path.suffix.lower() not in _NOT_INCLUDED]
        queue += [q for named in flag_files.values() for q in named]
        scanned: dict[Path, Scanned] = {}
        while queue:  # and what those name in an #include, whatever its suffix
            path = queue.pop()
            if path in scanned:
                continue
            scanned[path] = scan(path)
            queue += [q for base in scanned[path].includes for q in by_base.get(base, ())
                      if q not in scanned]
    sources = {p for g in groups for p in g.sources}
    for path in sources:  # a listed source that is missing: the compile says so
        scanned.setdefault(path, Scanned(True, frozenset(), b""))

    flag_named = {p for g in groups if any("TORCH_EXTENSION_NAME" in f
                                           for f in (*g.cxx_flags, *g.device_flags))
                  for p in g.sources}
    uses_name = {p for p, found in scanned.items() if found.mentions_name}
    graph = IncludeGraph(scanned, by_base, {path: rel for rel, path in files},
                         uses_name | set(binding) | flag_named)
    roots = {p: [p, *flag_files[g.name]] for g in groups for p in g.sources}
    named = {p for p in sources if graph.may_use_name(roots[p])}
    return [replace(g, named_sources=tuple(p for p in g.sources if p in named),
                    source_defines=tuple((p, f"{SOURCE_DEFINE}{graph.digest(roots[p])[:16]}")
                                         for p in g.sources if p not in named))
            for g in groups]


def plan_build(
    manifest: Manifest,
    *,
    backend: str,
    variant: str,
    source_id: SourceId,
    cxx: Tool | None = None,
    device_compiler: Tool | None = None,
    dependencies: Sequence[Dependency] = (),
    arch_override: Sequence[str] | None = None,
    torch_dir: Path | None = None,
) -> BuildPlan:
    """Plan the build of ``manifest`` for one backend and variant.

    Args:
        manifest: the validated project.
        backend: ``cpu``, ``cuda`` or ``rocm``; for noarch projects any backend listed.
        variant: the variant directory name the build goes to.
        source_id: identity of the sources (uid for the namespace).
        cxx: the host compiler (decides gcc-only flags).
        device_compiler: nvcc or hipcc for GPU backends.
        dependencies: resolved ``depends`` of the backend's kernels.
        arch_override: capabilities / archs to build for (``--arch``; see
            :func:`cuda_capabilities`).
        torch_dir: the ``torch`` package of the build's environment, whose header paths
            (in ``__FILE__`` of torch's checks) are written as ``torch/...``.

    Returns:
        A :class:`BuildPlan`.
    """
    namespace = namespace_for(manifest.python_name, backend, source_id.uid)
    # the package is imported under the op namespace, "_<name>_<backend>_<uid>", the
    # metadata id Hugging Face's builder writes
    module_id = namespace
    if manifest.noarch:
        # The [torch-noarch] archs go to the metadata, for the loader's GPU check.
        declared = {"cuda": manifest.noarch_cuda_capabilities,
                    "rocm": manifest.noarch_rocm_archs}.get(backend)
        return BuildPlan(manifest.root, variant, backend, namespace, module_id,
                         archs=tuple(declared) if declared else None)

    kernels = _kernels_for(manifest, backend)
    if not kernels:
        raise BuildError(
            f"{manifest.path}: no [kernel.*] section has backend = \"{backend}\"; "
            f"this project builds for: {', '.join(manifest.backends)}"
        )
    notes = [
        f"skipping kernel.{k.name}: it needs CUDA >= {k.cuda_minver} (cuda-minver), "
        f"nvcc is {device_compiler.version_str if device_compiler else 'absent'}"
        for k in kernels if not kernel_applies(k, device_compiler)
    ]
    kernels = [k for k in kernels if kernel_applies(k, device_compiler)]
    if manifest.torch is None:  # pragma: no cover - the manifest enforces a framework
        raise BuildError(f"{manifest.path}: a compiled kernel needs a [torch] section")
    suffixes = COMPILED_SUFFIXES[backend]
    check_compiled_sources(manifest, kernels, suffixes)
    sources = [
        p for p in _rel_paths(manifest, manifest.torch.src) if p.suffix in suffixes
    ]

    include_dirs: list[Path] = [DATA_DIR, manifest.root]
    if (manifest.root / IMPLICIT_INCLUDE).is_dir():
        include_dirs.append(manifest.root / IMPLICIT_INCLUDE)
    include_dirs += [d for d in _rel_paths(manifest, manifest.torch.include)
                     if d not in include_dirs]
    for k in kernels:
        include_dirs += [d for d in _rel_paths(manifest, k.include) if d not in include_dirs]
    for dep in dependencies:
        include_dirs += [d for d in dep.include_dirs if d not in include_dirs]

    # A release build, as Hugging Face's builder makes (CMake's Release: -O3 -DNDEBUG),
    # without debug info (smaller, faster to compile, no build paths inside). These are
    # the builder's own: the interpreter's sysconfig flags do not reach the compile.
    cxx_flags = ["-O3", "-DNDEBUG", "-g0", *BACKEND_DEFINES[backend]]
    # Keep build paths out of the binary so builds in different folders are identical:
    # the project's, and those of the headers it includes from torch (whose checks embed
    # __FILE__), from resolved dependencies and from the CUDA toolkit.
    prefix_maps: list[tuple[Path, str]] = [(manifest.root, ".")]
    if torch_dir is not None:
        prefix_maps.append((torch_dir, "torch"))
    for dep in dependencies:
        prefix_maps += [(d, f"{dep.name}-{i}" if i else dep.name)
                        for i, d in enumerate(dep.include_dirs)]
    if backend == "cuda" and device_compiler is not None:
        prefix_maps.append((device_compiler.path.parent.parent, "cuda"))
    # The compilers apply the last map that matches: the most specific roots go last (a
    # CUDA toolkit in /usr must not rewrite a project or a torch below it).
    prefix_maps.sort(key=lambda m: len(m[0].parts))
    cxx_flags += [f"-ffile-prefix-map={old}={new}" for old, new in prefix_maps]
    if cxx is not None and cxx.name == "gcc":
        # One copy of each template static per extension: two builds of one kernel
        # must not share state when loaded side by side.
        cxx_flags.append("-fno-gnu-unique")
    # [torch] cxx-flags go to the binding's sources only (the driver leaves them out of
    # the kernel sections'), as in Hugging Face's builder.
    cxx_flags += list(manifest.torch.cxx_flags)

    device_flags: list[str] = []
    all_archs: list[str] = []
    kernel_archs: dict[str, list[str]] = {}
    env: dict[str, str] = {}
    if backend == "cuda":
        if device_compiler is None:
            raise ToolchainError("building the cuda backend needs nvcc")
        served_any = False
        for k in kernels:
            caps, dropped, served = cuda_capabilities(k, device_compiler, arch_override)
            served_any = served_any or served
            notes += [n for n in dropped if n not in notes]
            all_archs += [c for c in caps if c not in all_archs]
            kernel_archs[k.name] = caps
        if arch_override and not served_any:
            listed = "; ".join(f"kernel.{k.name}: {', '.join(k.cuda_capabilities or ())}"
                               for k in kernels)
            raise BuildError(
                f"no kernel section serves --arch {', '.join(dict.fromkeys(arch_override))} "
                f"with nvcc {device_compiler.version_str} (their cuda-capabilities: "
                f"{listed}); fix: pass the capability of a GPU they declare, or build "
                "without --arch")
        # --threads 0: nvcc compiles the per-capability passes in parallel.
        device_flags = ["-O3", "-DNDEBUG", *BACKEND_DEFINES[backend], *CUDA_FLAGS]
        if device_compiler.version >= (11, 8):
            device_flags += CUDA_11_8_FLAGS
        device_flags += ["--threads", "0"]
        device_flags += [f"-Xcompiler=-ffile-prefix-map={old}={new}" for old, new in prefix_maps]
        if cxx is not None and cxx.name == "gcc":
            device_flags.append("-Xcompiler=-fno-gnu-unique")
        # for CUDA files of the [torch] binding itself: every kernel's capabilities
        device_flags += archs.nvcc_gencode_flags(all_archs)
        env["CUDA_HOME"] = str(device_compiler.path.parent.parent)
    elif backend == "rocm":
        if device_compiler is None:
            raise ToolchainError("building the rocm backend needs hipcc")
        given = list(dict.fromkeys(arch_override or ()))
        served_any = not given
        for k in kernels:
            wanted = list(given or k.rocm_archs or archs.ROCM_ARCHS)
            unknown = [a for a in wanted if not archs.is_known_rocm_arch(a)]
            if unknown:
                raise BuildError(
                    f"unknown ROCm arch(s) {unknown}; known: {', '.join(archs.ROCM_ARCHS)}"
                )
            own = list(k.rocm_archs or ())
            if own:
                # as Hugging Face's builder: a section's archs are intersected with the
                # archs it compiles for; the others are left out without a word there
                dropped = [a for a in own if a not in archs.ROCM_ARCHS]
                own = [a for a in own if a in archs.ROCM_ARCHS]
                if not own and not any(a in (k.rocm_archs or ()) for a in given):
                    raise BuildError(
                        f"kernel.{k.name}: none of its rocm-archs ({', '.join(dropped)}) is "
                        "among the archs Hugging Face's builder compiles for "
                        f"({', '.join(archs.ROCM_ARCHS)}); fix: list one of those, or build "
                        "with --arch for the one you need")
                if dropped:
                    notes.append(f"kernel.{k.name}: rocm-archs {', '.join(dropped)} left out, "
                                 "as Hugging Face's builder leaves them out (it compiles for "
                                 f"{', '.join(archs.ROCM_ARCHS)})")
                if not given:
                    wanted = own
            if given and k.rocm_archs:
                # as Hugging Face's builder: a section that declares its archs builds
                # for those of them that --arch names; one that names none of them, for
                # its own (its sources are part of the extension)
                listed = ", ".join(k.rocm_archs)
                wanted = [a for a in given if a in k.rocm_archs]
                if wanted:
                    notes += [f"kernel.{k.name} has no code for --arch {a} (its rocm-archs: "
                              f"{listed}); its ops will not run on such a GPU"
                              for a in given if a not in k.rocm_archs]
                else:
                    notes.append(f"kernel.{k.name} has none of --arch {', '.join(given)} "
                                 f"among its rocm-archs ({listed}): compiled for its own")
                    wanted = own
            served_any = served_any or not k.rocm_archs or any(a in k.rocm_archs
                                                               for a in given)
            all_archs += [a for a in wanted if a not in all_archs]
            kernel_archs[k.name] = wanted
        if not served_any:
            listed = "; ".join(f"kernel.{k.name}: {', '.join(k.rocm_archs or ())}"
                               for k in kernels)
            raise BuildError(
                f"no kernel section builds for --arch {', '.join(given)} (their rocm-archs: "
                f"{listed}); fix: pass an arch they declare, or build without --arch")
        device_flags = ["-O3", "-DNDEBUG", *BACKEND_DEFINES[backend], *ROCM_FLAGS,
                        *archs.hipcc_offload_flags(all_archs)]
        env["ROCM_HOME"] = str(device_compiler.path.parent.parent)

    groups = _compile_groups(manifest, backend, kernels, suffixes, kernel_archs,
                             device_compiler.version if device_compiler else None)
    groups = sources_using_extension_name(manifest, groups, sources)
    if backend == "cuda":
        # (with no compiled [torch] source the first section's sources are the
        # extension's own, compiled together: those keep their absolute names)
        groups = [replace(g, source_device_flags=tuple(
            (src, flags) for src in g.sources
            if (flags := pinned_source_path_flags(src, prefix_maps, device_compiler))))
            if sources or i else g for i, g in enumerate(groups)]
    if not sources and not groups:
        skipped = "".join(f"; {n}" for n in notes if n.startswith("skipping kernel."))
        raise BuildError(f"{manifest.path}: nothing to compile for backend {backend}{skipped}")
    metadata_archs = tuple(all_archs) if backend in ("cuda", "rocm") else None
    # nvcc compiles the host side from a temporary file named after its process id
    # (tmpxft_<pid>_...cudafe1.cpp), which stays in the symbol table as a local file
    # symbol: dropping local symbols at link time keeps builds byte-identical.
    link_flags = ["-Wl,-x"] if backend in ("cuda", "rocm") else []

    return BuildPlan(
        root=manifest.root,
        variant=variant,
        backend=backend,
        namespace=namespace,
        module_id=module_id,
        prefix_maps=tuple(prefix_maps),
        sources=tuple(sources),
        include_dirs=tuple(include_dirs),
        cxx_flags=tuple(cxx_flags),
        binding_cxx_flags=tuple(manifest.torch.cxx_flags),
        device_flags=tuple(device_flags),
        link_flags=tuple(link_flags),
        archs=metadata_archs,
        groups=tuple(groups),
        dependencies=tuple(dependencies),
        env=env,
        notes=tuple(notes),
    )
