"""Planning a build: from a manifest and the toolchain to sources, flags and names.

Planning is pure (no compiler runs, no torch import), so every rule here is unit-tested
for every backend, ROCm included, on a machine that has none of the toolchains.
"""

from __future__ import annotations

import hashlib
import os
import posixpath
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from kernelforge import archs
from kernelforge.build.toolchain import Dependency, Tool
from kernelforge.errors import BuildError, ToolchainError
from kernelforge.manifest import KernelSpec, Manifest, check_compiled_sources

#: Files compiled as translation units; everything else listed in `src` is a header.
COMPILED_SUFFIXES = {
    "cpu": (".cpp", ".cc", ".cxx", ".c"),
    "cuda": (".cpp", ".cc", ".cxx", ".c", ".cu"),
    "rocm": (".cpp", ".cc", ".cxx", ".c", ".cu", ".hip"),
}

#: The define each backend's sources see (as Hugging Face's builder sets them).
BACKEND_DEFINES = {
    "cpu": ("-DCPU_KERNEL",),
    "cuda": ("-DCUDA_KERNEL",),
    "rocm": ("-DROCM_KERNEL", "-DUSE_ROCM=1"),
}

#: Files and folders the tree walk leaves out at every depth, with every dot-file and
#: bytecode: build outputs, environments and editor state, which change without the
#: sources changing. A file the manifest lists is hashed wherever it is.
IGNORED_NAMES = frozenset({"build", ".kernelforge", ".git", "__pycache__", "result", ".venv"})

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

    def as_dict(self) -> dict[str, object]:
        """JSON-ready form (for the compiler driver and the build fingerprint)."""
        return {
            "name": self.name,
            "sources": [str(s) for s in self.sources],
            "include_dirs": [str(d) for d in self.include_dirs],
            "cxx_flags": list(self.cxx_flags),
            "device_flags": list(self.device_flags),
        }


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
        own name.
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
        return [pattern.sub(lambda m: names[m.group(0)], flag) for flag in flags]

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


def _walk(directory: Path, rel: str, ancestors: frozenset[str], *,
          listed: bool = False, outputs: frozenset[str] = frozenset()
          ) -> Iterable[tuple[str, Path]]:
    """``(relative path, path)`` of every file under ``directory`` but bytecode, ``.git``
    and Python environments, following symlinks (a link back to a directory being walked
    is not entered again; a dangling link is left out).

    The project tree also leaves out :data:`IGNORED_NAMES` and dot-files at every depth.
    A ``listed`` directory (an ``include`` of the manifest) is walked whole, since the
    compiler reads whatever it reaches there, but for the directories in ``outputs``
    (real paths: the project's own ``build/`` and ``.kernelforge/``).
    """
    for entry in sorted(os.scandir(directory), key=lambda e: e.name):
        name = entry.name
        if name in ("__pycache__", ".git") or name.endswith(".pyc"):
            continue
        if not listed and (name in IGNORED_NAMES or name.startswith(".")):
            continue
        path = Path(entry.path)
        relpath = f"{rel}{name}"
        if entry.is_dir():  # follows symlinks
            real = os.path.realpath(path)
            if real not in ancestors and real not in outputs and not _is_environment(path):
                yield from _walk(path, relpath + "/", ancestors | {real},
                                 listed=listed, outputs=outputs)
        elif entry.is_file():
            yield relpath, path


def iter_project_files(root: Path, listed: Iterable[str] = (),
                       extra: Iterable[tuple[str, Path]] = ()
                       ) -> Iterable[tuple[str, Path]]:
    """Every file of a project that can affect a build, as ``(relative path, path)`` in a
    stable order: the project tree (symlinks followed; build outputs, environments,
    dot-files and bytecode left out: :data:`IGNORED_NAMES`), plus every file ``listed`` (paths
    relative to the project, e.g. the manifest's sources and include directories), even
    where the tree walk leaves it out, and the ``extra`` files (the Python package the
    build ships: :func:`package_files`).

    A listed directory counts whole, dot-files and folders named ``build`` included, but
    for bytecode, ``.git``, Python environments and the project's own ``build/`` and
    ``.kernelforge/``; except the project folder itself (``include = ["."]``), which is
    the tree walk already: whole, it would count tool caches, editor and IDE files and
    build outputs, and every test or editor run would change the uid.
    """
    found: dict[str, Path] = dict(_walk(root, "", frozenset({os.path.realpath(root)})))
    outputs = frozenset(os.path.realpath(root / d) for d in ("build", ".kernelforge"))
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


def _package_tree(root: Path, python_name: str) -> list[tuple[Path, Path]]:
    """``(path relative to the package, path)`` of every file of ``torch-ext/<python_name>/``
    but bytecode and ``__pycache__`` (a symlink to a folder is not entered)."""
    package = root / "torch-ext" / python_name
    if not package.is_dir():
        return []
    found: list[tuple[Path, Path]] = []
    for path in sorted(package.rglob("*")):
        rel = path.relative_to(package)
        if "__pycache__" in rel.parts or not path.is_file() or path.suffix == ".pyc":
            continue
        found.append((rel, path))
    return found


def package_files(root: Path, python_name: str, pyext: Iterable[str]
                  ) -> list[tuple[str, Path]]:
    """The files of the Python package ``torch-ext/<python_name>/`` that a build copies
    into the variant, as ``(path relative to the project, path)``: every file whose
    suffix is one of ``pyext`` (``[torch] pyext``) at any depth, dot-files and folders
    named ``build`` included, but bytecode and ``__pycache__``; a symlink to a folder
    is not entered."""
    suffixes = {"." + ext.lstrip(".") for ext in pyext}
    return [(f"torch-ext/{python_name}/{rel.as_posix()}", path)
            for rel, path in _package_tree(root, python_name) if path.suffix in suffixes]


def unshipped_package_files(root: Path, python_name: str, pyext: Iterable[str]) -> list[str]:
    """The files of the Python package ``torch-ext/<python_name>/`` that a build leaves
    out of the variant because their suffix is not one of ``pyext``, relative to the
    project, for a note (bytecode, ``__pycache__`` and dot-files or dot-folders, which
    tools and editors write, are not named)."""
    suffixes = {"." + ext.lstrip(".") for ext in pyext}
    return [f"torch-ext/{python_name}/{rel.as_posix()}"
            for rel, path in _package_tree(root, python_name)
            if path.suffix not in suffixes and not any(p.startswith(".") for p in rel.parts)]


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


def hash_sources(root: Path, listed: Iterable[str] = (),
                 extra: Iterable[tuple[str, Path]] = ()) -> str:
    """A sha256 over the relative paths and contents of the project's files
    (:func:`iter_project_files`)."""
    h = hashlib.sha256()
    try:
        for rel, path in iter_project_files(root, listed, extra):
            h.update(rel.encode() + b"\0")
            with path.open("rb") as fh:
                h.update(hashlib.sha256(fh.read()).digest())
    except OSError as err:  # a file left out would make the uid and up-to-date check lie
        raise BuildError(
            f"cannot read {err.filename or root} to hash the project's sources: "
            f"{err.strerror or err}; fix its permissions, or move it out of the project"
        ) from err
    return h.hexdigest()


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


def cuda_capabilities(
    kernels: Sequence[KernelSpec], nvcc: Tool, override: Sequence[str] | None
) -> tuple[list[str], list[str]]:
    """Capabilities to compile for, and notes on what was dropped.

    The manifest's capabilities (or the default list) intersected with what this nvcc
    can target; ``override`` (``--arch``) replaces the manifest's list.
    """
    notes: list[str] = []
    if override:
        wanted = list(override)
    else:
        wanted = []
        for k in kernels:
            caps = k.cuda_capabilities or archs.default_cuda_capabilities(nvcc.version[:2])
            wanted.extend(c for c in caps if c not in wanted)
    kept: list[str] = []
    for cap in wanted:
        try:
            parsed = archs.CudaCapability.parse(cap)
        except ValueError as err:  # only --arch reaches here unchecked: a ROCm arch, say
            raise BuildError(f"--arch {cap}: {err}; the cuda backend needs CUDA capabilities "
                             "(fix: pass --backend for the archs given, or CUDA "
                             "capabilities such as 9.0a)") from None
        if archs.nvcc_supports(parsed, nvcc.version[:2]):
            kept.append(str(parsed))
        else:
            notes.append(f"skipping capability {cap}: nvcc {nvcc.version_str} cannot target it")
    if not kept:
        raise BuildError(
            f"none of the CUDA capabilities {wanted} can be built with nvcc {nvcc.version_str}; "
            "fix: use a newer CUDA toolkit or pass --arch with a capability it supports"
        )
    return kept, notes


def _compile_groups(manifest: Manifest, backend: str, kernels: Sequence[KernelSpec],
                    suffixes: Sequence[str], kernel_archs: Mapping[str, Sequence[str]]
                    ) -> list[CompileGroup]:
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
            device = archs.nvcc_gencode_flags(wanted) + [f for k in sections
                                                         for f in k.cuda_flags]
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
        arch_override: capabilities / archs replacing the manifest's (``--arch``).
        torch_dir: the ``torch`` package of the build's environment, whose header paths
            (in ``__FILE__`` of torch's checks) are written as ``torch/...``.

    Returns:
        A :class:`BuildPlan`.
    """
    namespace = namespace_for(manifest.python_name, backend, source_id.uid)
    module_id = namespace.lstrip("_")
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
    include_dirs += _rel_paths(manifest, manifest.torch.include)
    for k in kernels:
        include_dirs += [d for d in _rel_paths(manifest, k.include) if d not in include_dirs]
    for dep in dependencies:
        include_dirs += [d for d in dep.include_dirs if d not in include_dirs]

    # -g0 overrides the -g of Python's own CFLAGS: kernels ship without debug info
    # (smaller, faster to compile, no build paths inside).
    cxx_flags = ["-O3", "-g0", *BACKEND_DEFINES[backend]]
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
        for k in kernels:
            caps, dropped = cuda_capabilities([k], device_compiler, arch_override)
            notes += [f"{n} (kernel.{k.name})" for n in dropped if n not in notes]
            all_archs += [c for c in caps if c not in all_archs]
            kernel_archs[k.name] = caps
        # --threads 0: nvcc compiles the per-capability passes in parallel.
        device_flags = ["-O3", *BACKEND_DEFINES[backend], "--expt-relaxed-constexpr",
                        "--threads", "0"]
        device_flags += [f"-Xcompiler=-ffile-prefix-map={old}={new}" for old, new in prefix_maps]
        if cxx is not None and cxx.name == "gcc":
            device_flags.append("-Xcompiler=-fno-gnu-unique")
        # for CUDA files of the [torch] binding itself: every kernel's capabilities
        device_flags += archs.nvcc_gencode_flags(all_archs)
        env["CUDA_HOME"] = str(device_compiler.path.parent.parent)
    elif backend == "rocm":
        if device_compiler is None:
            raise ToolchainError("building the rocm backend needs hipcc")
        for k in kernels:
            wanted = list(arch_override or k.rocm_archs or archs.ROCM_ARCHS)
            unknown = [a for a in wanted if not archs.is_known_rocm_arch(a)]
            if unknown:
                raise BuildError(
                    f"unknown ROCm arch(s) {unknown}; known: {', '.join(archs.ROCM_ARCHS)}"
                )
            all_archs += [a for a in wanted if a not in all_archs]
            kernel_archs[k.name] = wanted
        device_flags = ["-O3", *BACKEND_DEFINES[backend], *archs.hipcc_offload_flags(all_archs)]
        env["ROCM_HOME"] = str(device_compiler.path.parent.parent)

    groups = _compile_groups(manifest, backend, kernels, suffixes, kernel_archs)
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
