"""Runs torch's extension tooling (setuptools + ninja) for one build plan.

Started by :mod:`kernelforge.build.compile` as ``python -m kernelforge.build._driver SPEC``
in a child process, so that setuptools' global state, torch's import and the compiler
environment never leak into the caller. ``SPEC`` is a JSON file written by the parent.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

# The package imports this module's parent's compile module anyway (running
# ``-m kernelforge.build._driver`` imports ``kernelforge.build`` first).
from kernelforge.build.compile import NOTE_PREFIX, PARENT_VARIABLE, READS_FILE, _killed_by

#: Architecture flags: the extension's common device flags carry every kernel's; each
#: kernel section's sources get only their own.
ARCH_FLAG_PREFIXES = ("-gencode", "--offload-arch")

#: The define that names the extension (its op namespace, which holds the uid).
NAME_DEFINE = "-DTORCH_EXTENSION_NAME="

#: The longest file name most file systems take (bytes).
_NAME_MAX = 255

#: ``prctl``'s request for a signal when the parent dies (Linux, <sys/prctl.h>).
_PR_SET_PDEATHSIG = 1


def _stop_group(signum: int, frame: object) -> None:
    """End the compile: this process, ninja and the compilers, which share its process
    group (the parent started the driver in a session of its own)."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.killpg(os.getpgrp(), signal.SIGTERM)


def _end_with_parent() -> None:
    """Stop the compile when the kernelforge process that started it dies without
    stopping it (SIGKILL, the out-of-memory killer): the kernel then sends this process
    SIGTERM, which goes on to ninja and the compilers, so that they do not keep compiling
    into the work directory that the next build takes over. Linux only; where the request
    is not available the compile stops with its parent as before, on a signal the parent
    can catch (Ctrl-C, SIGTERM, SIGHUP)."""
    parent = os.environ.get(PARENT_VARIABLE, "")
    if not parent.isdigit() or not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0) != 0:
            return
    except (OSError, AttributeError):
        return
    signal.signal(signal.SIGTERM, _stop_group)
    # Whether kernelforge died before the request was made. Asked by its pid, not by
    # comparing it with this process's parent: an interpreter given as a wrapper script
    # (`build --python`) that runs python as its child is the parent then. (Such a
    # wrapper outlives a killed kernelforge, and so then does the compile.)
    try:
        os.kill(int(parent), 0)
    except ProcessLookupError:
        _stop_group(signal.SIGTERM, None)
    except OSError:  # pragma: no cover - alive, owned by someone else: not ours to judge
        pass


def _without_arch_flags(flags: list[str]) -> list[str]:
    return [f for f in flags if not f.startswith(ARCH_FLAG_PREFIXES)]


def _without_name_define(flags: list[str]) -> list[str]:
    """``flags`` without the ``-DTORCH_EXTENSION_NAME=`` torch's tooling adds."""
    return [f for f in flags if not f.startswith(NAME_DEFINE)]


def _without(values: list[str], start: int, part: list[str]) -> list[str]:
    """``values`` without ``part`` where it was put, at ``start``."""
    if part and values[start:start + len(part)] == part:
        return values[:start] + values[start + len(part):]
    return list(values)


def _fixed_commands(compiler: Any, environ: Mapping[str, str]) -> None:
    """Give setuptools' ``compiler`` the builder's own command lines: ``<cxx> -fPIC`` to
    compile and ``<cxx> -shared`` to link (on macOS ``-bundle -undefined
    dynamic_lookup``), ``<cxx>`` being ``$CXX`` or ``c++``, the compiler torch's ninja
    files run.

    setuptools builds these from the interpreter's ``sysconfig`` (``CFLAGS``/``OPT``,
    ``CCSHARED``, and ``LDSHARED`` or ``LDCXXSHARED`` depending on its version), so a
    distribution's own choices (Debian's ``-Werror=format-security``, pyenv's and conda's
    ``-Wl,-rpath`` to their prefix, ``-g``) would otherwise reach every kernel, and the
    same sources, torch and compiler would give other bytes for every Python that runs
    the build. torch's ninja files take the compile flags from ``compiler_so[1:]``; the
    link runs ``linker_so`` (``linker_so_cxx`` in newer setuptools, whose C++ link puts
    ``compiler_cxx`` in front of the linker's arguments)."""
    if getattr(compiler, "compiler_type", None) != "unix":  # pragma: no cover - Windows
        return
    cxx = environ.get("CXX") or "c++"
    # macOS links a Python extension as a bundle whose Python symbols the interpreter
    # provides at load time (what CPython's own LDSHARED says there)
    shared = (["-bundle", "-undefined", "dynamic_lookup"] if sys.platform == "darwin"
              else ["-shared"])
    commands = {
        "preprocessor": [cxx, "-E"],
        "compiler": [cxx],
        "compiler_so": [cxx, "-fPIC"],
        "compiler_cxx": [cxx],
        "compiler_so_cxx": [cxx, "-fPIC"],
        "linker_so": [cxx, *shared],
        "linker_so_cxx": [cxx, *shared],
        "linker_exe": [cxx],
        "linker_exe_cxx": [cxx],
    }
    # Each setuptools version knows its own set of executables (and refuses others).
    for key, command in commands.items():
        if key in compiler.executables:
            compiler.set_executable(key, command)


def ninja_escaped(flags: Any) -> Any:
    """``flags`` (a list, or torch's ``{"cxx": [...], "nvcc": [...]}``) with each ``$``
    written ``$$``, so that the compiler receives them as build.toml writes them.

    torch's extension tooling quotes each flag for the shell but writes it into its
    ``build.ninja`` as it is, where ``$`` starts a ninja variable: ``-DGREETING="a$b"``
    reached the compiler as ``-DGREETING="a"``, and ``${`` or ``$(`` stopped ninja.
    ``$$`` is ninja's literal ``$``, which the shell quoting then keeps literal too, as
    CMake's ninja files (Hugging Face's builder) pass ``$`` in compile options."""
    if isinstance(flags, dict):
        return {key: ninja_escaped(value) for key, value in flags.items()}
    if isinstance(flags, (list, tuple)):
        return [flag.replace("$", "$$") if isinstance(flag, str) else flag for flag in flags]
    return flags


def _ninja_path(path: str) -> str:
    return path.replace("$", "$$").replace(" ", "$ ").replace(":", "$:")


#: The ninja files run by this driver, with the directory each ran in, for
#: :func:`_write_reads`.
_NINJA_RUNS: list[tuple[str, str]] = []


def _outside_reads(root: str) -> list[str] | None:
    """The files outside ``root`` that the compiles of this build read, as ninja keeps
    them from the compilers' dependency lists (``ninja -t deps``), sorted; ``None`` when
    ninja could not say."""
    prefix = os.path.join(os.path.abspath(root), "")
    found: set[str] = set()
    for directory, ninja_file in _NINJA_RUNS:
        try:
            listing = subprocess.run(["ninja", "-f", ninja_file, "-t", "deps"], cwd=directory,
                                     capture_output=True, text=True, errors="surrogateescape",
                                     timeout=120, check=False)
        except (OSError, subprocess.TimeoutExpired):
            return None
        if listing.returncode != 0:
            return None
        for line in listing.stdout.splitlines():
            if line.startswith((" ", "\t")) and line.strip():
                path = os.path.normpath(os.path.join(directory, line.strip()))
                if not path.startswith(prefix):
                    found.add(path)
    return sorted(found)


def _write_reads(spec: Mapping[str, Any]) -> None:
    work_dir = Path(spec["build_temp"]).parent
    files = _outside_reads(spec["root"])
    (work_dir / READS_FILE).write_text(
        json.dumps({"files": files}, ensure_ascii=False, indent=0), errors="surrogateescape")


def _run_ninja_files(build_directory: str, others: list[str], error_prefix: str) -> None:
    """Run the ``build.ninja`` of ``build_directory`` and of each of ``others`` as one
    ninja build, so that ``-j`` spreads over all of their sources. Each file is a
    ``subninja``: its variables (the flags) stay its own."""
    top = os.path.join(build_directory, "kernelforge.ninja")
    lines = ["ninja_required_version = 1.3"]
    for directory in [build_directory, *others]:
        lines.append("subninja " + _ninja_path(os.path.join(directory, "build.ninja")))
    Path(top).write_text("\n".join(lines) + "\n")
    _NINJA_RUNS.append((build_directory, top))
    command = ["ninja", "-v", "-f", top]
    if os.environ.get("MAX_JOBS"):
        command += ["-j", os.environ["MAX_JOBS"]]
    sys.stdout.flush()
    sys.stderr.flush()
    code = subprocess.run(command, cwd=build_directory, stdout=1, stderr=subprocess.STDOUT,
                          check=False).returncode
    if code != 0:
        raise RuntimeError(f"{error_prefix}: ninja exited with status {code}")


def group_parts(group: Mapping[str, Any], args: Mapping[str, list[str]]
                ) -> list[tuple[str, list[str], dict[str, list[str]]]]:
    """How a kernel section's sources compile: ``(folder suffix, sources, flags)`` per
    compile call, none empty.

    A source that does not use the namespace compiles without its define but with its
    own digest of what it may read (the plan's ``source_defines``), in a folder of its
    own: its command line, and so ninja's object, stays the same from one uid to the
    next until that changes. Those that do use it compile together (``.named``), but
    for a source with device flags of its own (nvcc's name for it, the plan's
    ``source_device_flags``), which compiles on its own (``.named.<tag>``).

    Args:
        group: the plan's :meth:`~kernelforge.build.plan.CompileGroup.as_dict`.
        args: the section's flags per compiler (``cxx``, and ``nvcc`` for a GPU build).
    """
    named = group.get("named_sources", group["sources"])
    own_define = group.get("source_defines", {})
    own_flags = group.get("source_device_flags", {})
    parts = [(".named", [s for s in group["sources"] if s in named and s not in own_flags],
              {k: list(v) for k, v in args.items()})]
    for source in group["sources"]:
        if source in named and source not in own_flags:
            continue
        tag = hashlib.sha256(source.encode()).hexdigest()[:12]
        if source in named:
            suffix, part_args = f".named.{tag}", {k: list(v) for k, v in args.items()}
        else:
            suffix = f".{tag}"
            part_args = {k: [*_without_name_define(v), own_define[source]]
                         for k, v in args.items()}
        if source in own_flags:
            part_args["nvcc"] = [*part_args["nvcc"], *own_flags[source]]
        parts.append((suffix, [source], part_args))
    return [part for part in parts if part[1]]


def group_folder(name: str, suffix: str) -> str:
    """The folder a kernel section's objects compile into: ``kernel.<name><suffix>``.

    The name of sources several sections share joins theirs (``a+b+...``), which for
    many sections is longer than a file name may be: such a name is cut, and a digest
    of the whole added, so that the folder stays one of its own.

    Args:
        name: the plan's group name (:class:`~kernelforge.build.plan.CompileGroup`).
        suffix: the part's suffix (:func:`group_parts`).
    """
    folder = f"kernel.{name}{suffix}"
    if len(folder.encode()) <= _NAME_MAX:
        return folder
    digest = hashlib.sha256(name.encode()).hexdigest()[:16]
    keep = _NAME_MAX - len(f"kernel.-{digest}{suffix}".encode())
    return f"kernel.{name.encode()[:keep].decode(errors='ignore')}-{digest}{suffix}"


def _import_advice(err: ImportError) -> str:
    """What to say when setuptools or torch cannot be imported: a package that is not
    installed is installed; one that is installed but fails to import (a shared library
    torch links against is missing) is named with its own error, which no install of a
    module name fixes."""
    top = (err.name or "").partition(".")[0]
    if isinstance(err, ModuleNotFoundError) and err.name == top and top:
        return (f"{sys.executable} cannot import {top}, which builds need; "
                f"fix: {shlex.quote(sys.executable)} -m pip install {top}")
    return (f"{sys.executable} has {top or 'a package builds need'} installed, but importing "
            f"it failed: {err}; fix that installation (or reinstall it) and build again")


#: What the dynamic loader says of a symbol that nothing loaded defines (glibc, macOS).
_UNDEFINED_SYMBOL = re.compile(r"undefined symbol: (\S+)|symbol not found in flat namespace "
                               r"'_?([^']+)'")


def _demangled(symbol: str) -> str:
    """``symbol`` as C++ writes it (``c++filt``), or as it is where that cannot be told."""
    try:
        out = subprocess.run(["c++filt", symbol], capture_output=True, text=True, timeout=30,
                             check=False).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return symbol
    return out or symbol


def _using(symbol: str, built_from: Mapping[str, str]) -> list[str]:
    """The sources whose objects (``built_from``: object -> source) use ``symbol``
    without defining it (``readelf``); none where that cannot be told."""
    users = []
    for obj, source in built_from.items():
        try:
            out = subprocess.run(["readelf", "-sW", obj], capture_output=True, text=True,
                                 timeout=60, check=False).stdout
        except (OSError, subprocess.TimeoutExpired):
            return []
        for line in out.splitlines():
            fields = line.split()  # Num: Value Size Type Bind Vis Ndx Name
            if len(fields) >= 8 and fields[6] == "UND" and fields[7] == symbol:
                users.append(source)
                break
    return sorted(set(users))


def _note_other_namespaces(registered: list[str], namespace: str) -> None:
    """Say when the extension defined ops (``registered``, ``ns::name``) but none in
    the build's ``namespace``, which ``_ops.py`` binds as ``ops``: a binding written with
    ``TORCH_LIBRARY(name, ops)`` rather than ``TORCH_LIBRARY_EXPAND(TORCH_EXTENSION_NAME,
    ops)``. ``ops.<op>`` then finds nothing, and two builds of the kernel cannot be loaded
    in one process (torch takes a namespace once). A note, not an error: a package may
    reach such ops through ``torch.ops.<name>`` itself."""
    if not registered or any(op.split("::", 1)[0] == namespace for op in registered):
        return
    spaces = sorted({op.split("::", 1)[0] for op in registered})
    shown = ", ".join(registered[:3]) + (f" and {len(registered) - 3} more"
                                         if len(registered) > 3 else "")
    print(f"{NOTE_PREFIX}the extension registers its ops under "
          f"{', '.join(repr(n) for n in spaces)} ({shown}), not under the build's "
          f"namespace {namespace}, which _ops.py binds as ops: ops.<name> will not find "
          "them, and two builds of this kernel cannot be loaded in one process; fix: "
          "register them with TORCH_LIBRARY_EXPAND(TORCH_EXTENSION_NAME, ops) from "
          '"registration.h"', flush=True)


#: The start of the warning torch gives on its import where numpy is not installed (it
#: does not need it), as the command line leaves it out (``cli``): here its two lines
#: would stand among the compiler's, which ``kernelforge build -v`` shows.
TORCH_WITHOUT_NUMPY = "Failed to initialize NumPy"


#: Run by :func:`_check_loads` in a process of its own: import torch, load the extension
#: (``argv[1]``) as Python's import does, and write to ``argv[2]`` what the loader said
#: (``{"error": ...}``) or the ops the load defined (``{"ops": [...]}``); torch's warning
#: that starts with ``argv[3]`` (:data:`TORCH_WITHOUT_NUMPY`) is left out.
_LOAD_SCRIPT = """
import ctypes, json, sys, warnings
warnings.filterwarnings("ignore", message=sys.argv[3], category=UserWarning)
import torch
names = getattr(torch._C, "_dispatch_get_all_op_names", None)
before = set(names()) if names is not None else set()
try:
    ctypes.CDLL(sys.argv[1], mode=sys.getdlopenflags())
except OSError as err:
    result = {"error": str(err)}
else:
    result = {"ops": sorted(set(names()) - before) if names is not None else []}
with open(sys.argv[2], "w", encoding="utf-8") as f:
    json.dump(result, f)
"""

#: How long the load may take (seconds): a static initializer that waits for a device
#: that this machine lacks must not hold the build.
LOAD_TIMEOUT_S = 300


def _load_ended(extension: Path, how: str, said: str) -> None:
    """Note that the load of ``extension`` ended (``how``) before it could tell anything:
    nothing is checked, the build goes on."""
    last = "; ".join(ln.strip() for ln in said.splitlines() if ln.strip())[-300:]
    print(f"{NOTE_PREFIX}{extension.name} was not checked for undefined symbols: loading "
          f"it as its import would (in a process of its own) {how}"
          + (f" ({last})" if last else "")
          + "; its static initializers may need what this machine lacks (a GPU?), and "
          "get_kernel's import fails the same way where they do", flush=True)


def _check_loads(extension: Path, spec: Mapping[str, Any],
                 built_from: Mapping[str, str]) -> str | None:
    """Load the linked ``extension`` as Python's import does (``sys.getdlopenflags()``,
    torch imported), and say why it cannot be loaded when a symbol it uses is defined
    nowhere: a function declared and called (an op's implementation) but defined in no
    source compiled for this backend. The linker leaves such a symbol for the loader to
    find, so without this the build would succeed and the kernel fail at its import
    (``get_kernel``); Hugging Face's builder, which loads what it built, fails there too.
    Any other failure to load (a library that this machine lacks but the one the kernel
    runs on has) is left to the import. The load runs in a process of its own
    (:data:`_LOAD_SCRIPT`), since it runs the extension's static initializers: one that
    aborts or crashes here (it needs a GPU), or hangs past :data:`LOAD_TIMEOUT_S`, gets a
    note, not a failed build."""
    result_path = Path(spec["build_temp"]) / "load-check.json"
    result_path.unlink(missing_ok=True)
    try:
        proc = subprocess.run([sys.executable, "-c", _LOAD_SCRIPT, str(extension),
                               str(result_path), TORCH_WITHOUT_NUMPY],
                              capture_output=True, text=True,
                              errors="replace", timeout=LOAD_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        _load_ended(extension, f"did not end in {LOAD_TIMEOUT_S} s", "")
        return None
    try:
        result = json.loads(result_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        killed = _killed_by(proc.returncode)
        _load_ended(extension, f"was ended by {killed}" if killed
                    else f"exited with status {proc.returncode}", proc.stderr)
        return None
    if "error" not in result:
        _note_other_namespaces(list(result.get("ops") or []), spec["namespace"])
        return None
    found = _UNDEFINED_SYMBOL.search(str(result["error"]))
    if found is None:
        return None
    symbol = found[1] or found[2]
    name = _demangled(symbol)
    shown = f"{name} ({symbol})" if name != symbol else symbol
    root = Path(spec["root"])
    users = [str(Path(s).relative_to(root)) if Path(s).is_relative_to(root) else s
             for s in _using(symbol, built_from)]
    backend = spec["backend"]
    return "\n".join([
        f"{extension.name} was linked, but it cannot be loaded (get_kernel would fail on "
        f"its import): undefined symbol {shown}",
        (f"used by {', '.join(users)}; " if users else "")
        + f"none of the sources compiled for {backend} defines it",
        f"fix: define it in a source that build.toml lists for {backend} ([torch] src or a "
        f"[kernel.*] section with backend = \"{backend}\"), or do not use it in the "
        f"{backend} build",
    ])


def main(spec_path: str) -> int:
    _end_with_parent()
    spec = json.loads(Path(spec_path).read_text())

    warnings.filterwarnings("ignore", message=TORCH_WITHOUT_NUMPY, category=UserWarning)
    # Imported here: this module only runs in the child process.
    try:
        from setuptools import setup
        from torch.utils import cpp_extension
    except ImportError as err:
        print(f"error: {_import_advice(err)}", file=sys.stderr)
        return 1

    backend = spec["backend"]
    # each object file compiled, with its source (for an undefined symbol's users)
    built_from: dict[str, str] = {}
    extension_cls = cpp_extension.CppExtension if backend == "cpu" else cpp_extension.CUDAExtension
    sources, include_dirs = list(spec["sources"]), list(spec["include_dirs"])
    cxx_flags, device_flags = list(spec["cxx_flags"]), list(spec["device_flags"])
    groups = list(spec["groups"])
    # The flags that end cxx_flags for the binding's sources alone ([torch] cxx-flags).
    binding_cxx = list(spec.get("binding_cxx_flags", []))
    # The common flags and include dirs, which every other kernel section builds on.
    common_cxx = _without(cxx_flags, len(cxx_flags) - len(binding_cxx), binding_cxx)
    common_device = _without_arch_flags(device_flags)
    common_includes = list(include_dirs)
    own: dict[str, list[str]] = {"cxx": cxx_flags[len(common_cxx):], "nvcc": [],
                                 "include_dirs": []}
    if not sources:  # no binding source of its own: the first kernel section is the base
        first = groups.pop(0)
        sources, include_dirs = first["sources"], include_dirs + first["include_dirs"]
        cxx_flags = common_cxx + first["cxx_flags"]
        device_flags = _without_arch_flags(device_flags) + first["device_flags"]
        # that section's own, kept out of the others (the extension's lists hold them)
        own = {"cxx": first["cxx_flags"], "nvcc": first["device_flags"],
               "include_dirs": first["include_dirs"]}
    extra_compile_args = {"cxx": cxx_flags}
    if backend != "cpu":
        # torch passes the 'nvcc' flags to hipcc on ROCm builds of torch.
        extra_compile_args["nvcc"] = device_flags

    class BuildKernelExtension(cpp_extension.BuildExtension):
        """torch's BuildExtension, minus ``-DTORCH_API_INCLUDE_EXTENSION_H``.

        That define makes ``<torch/torch.h>`` pull in pybind11, which cannot be
        compiled against the Python limited API. Kernel bindings register ops with
        TORCH_LIBRARY and never need pybind11 (Hugging Face's builder does not set
        the define either).
        """

        def _add_compile_flag(self, extension, flag):  # type: ignore[no-untyped-def]
            if flag == "-DTORCH_API_INCLUDE_EXTENSION_H":
                return None
            return super()._add_compile_flag(extension, flag)

        def build_extensions(self) -> None:
            # self.compiler is set up from the interpreter's sysconfig by now
            _fixed_commands(self.compiler, os.environ)
            super().build_extensions()

        def build_extension(self, ext: Any) -> None:
            # Each kernel section compiles with the common flags (torch's additions
            # included, they are in ext.extra_compile_args by now) plus its own, into
            # objects that the extension links with its binding. torch writes one ninja
            # file per section; they run together with the binding's, in one parallel
            # ninja step, just before the link.
            # torch appends its own flags (the extension's name, the C++ ABI, ...) and
            # include dirs to the ones given; those of a section that took the binding's
            # place are left out.
            base = {
                "cxx": _without(ext.extra_compile_args["cxx"], len(common_cxx), own["cxx"]),
            }
            if "nvcc" in ext.extra_compile_args:
                base["nvcc"] = _without(ext.extra_compile_args["nvcc"], len(common_device),
                                        own["nvcc"])
            common_dirs = _without(ext.include_dirs, len(common_includes), own["include_dirs"])
            deferred: list[str] = []
            run_ninja = cpp_extension._run_ninja_build
            compile_sources = self.compiler.compile

            def compile_recorded(sources: list[str], output_dir: str | None = None,
                                 macros: Any = None, include_dirs: Any = None, debug: int = 0,
                                 extra_preargs: Any = None, extra_postargs: Any = None,
                                 depends: Any = None) -> list[str]:
                # setuptools' compile(), whose extra_postargs torch writes to build.ninja
                objects: list[str] = compile_sources(
                    sources, output_dir=output_dir, macros=macros, include_dirs=include_dirs,
                    debug=debug, extra_preargs=extra_preargs,
                    extra_postargs=ninja_escaped(extra_postargs), depends=depends)
                built_from.update(zip(objects, sources, strict=False))
                return objects

            def defer(build_directory: str, verbose: bool, error_prefix: str) -> None:
                deferred.append(build_directory)

            def run_all(build_directory: str, verbose: bool, error_prefix: str) -> None:
                if not deferred:
                    _NINJA_RUNS.append((build_directory, "build.ninja"))
                    run_ninja(build_directory, verbose, error_prefix)
                    return
                _run_ninja_files(build_directory, deferred, error_prefix)
                deferred.clear()

            try:
                self.compiler.compile = compile_recorded
                cpp_extension._run_ninja_build = defer
                for group in groups:
                    args = {"cxx": base["cxx"] + group["cxx_flags"]}
                    if "nvcc" in base:
                        args["nvcc"] = _without_arch_flags(base["nvcc"]) + group["device_flags"]
                    for suffix, part, part_args in group_parts(group, args):
                        objects = self.compiler.compile(
                            part,
                            output_dir=os.path.join(self.build_temp,
                                                    group_folder(group["name"], suffix)),
                            include_dirs=common_dirs + group["include_dirs"],
                            debug=self.debug,
                            extra_postargs=part_args,
                            depends=ext.depends,
                        )
                        ext.extra_objects = [*ext.extra_objects, *objects]
                cpp_extension._run_ninja_build = run_all
                return super().build_extension(ext)
            finally:
                cpp_extension._run_ninja_build = run_ninja
                self.compiler.compile = compile_sources

    ext = extension_cls(
        name=spec["namespace"],
        sources=sources,
        include_dirs=include_dirs,
        extra_compile_args=extra_compile_args,
        extra_link_args=spec.get("link_flags", []),
        py_limited_api=True,
    )
    setup(
        name=spec["namespace"],
        version="0",
        ext_modules=[ext],
        cmdclass={"build_ext": BuildKernelExtension.with_options(use_ninja=True)},
        options={"bdist_wheel": {"py_limited_api": "cp39"}},
        script_args=[
            "--quiet",
            "build_ext",
            "--build-lib",
            spec["build_lib"],
            "--build-temp",
            spec["build_temp"],
        ],
    )
    _write_reads(spec)
    built = [p for p in Path(spec["build_lib"]).glob("*.so")
             if p.name.split(".", 1)[0] == spec["namespace"]]
    problem = _check_loads(built[0], spec, built_from) if len(built) == 1 else None
    if problem is not None:
        print(problem, flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
