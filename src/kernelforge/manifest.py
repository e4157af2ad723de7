"""``build.toml`` -> :class:`Manifest`, validated and normalised over all editions.

Three layouts are read, told apart the way Hugging Face's builder tells them apart:

* edition 5 (``[general] edition = 5``), the current one: ``name``, ``version``,
  ``license`` and ``backends`` required, exactly one framework section;
* edition 4: no ``edition`` key, otherwise as edition 5 less ``kernel-depends``,
  ``[general.tpu]`` and the per-backend ``[torch.stable-abi]`` table;
* the legacy layouts, reported as edition 3: the seed guide's (``[general] name,
  universal``, no ``backends``: they are derived from the kernels' ``backend``), and the
  one with ``general.backends`` but optional ``version``/``license`` and framework
  section (none meaning a pure-Python kernel). A file without ``edition`` that has
  ``backends`` is edition 4 when it can be, legacy otherwise.

``[tvm-ffi]`` projects are refused: kernelforge builds torch extensions only.
Problems raise :class:`~kernelforge.errors.ManifestError` naming the file, the dotted
key, what was expected and the fix. Unknown keys are errors, with a "did you mean"
suggestion. A manifest is read to its end: one error lists every problem found (its
``errors``), leaving out only checks that need a value another problem left unknown.

Example:
    >>> m = load_manifest("tests/projects/relu")                  # doctest: +SKIP
    >>> m.edition, m.backends, sorted(m.kernels)                   # doctest: +SKIP
    (5, ('cpu', 'cuda'), ['relu', 'relu_cpu'])
"""

from __future__ import annotations

import itertools
import os
import posixpath
import re
import sys
import unicodedata
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar, cast

from kernelforge import archs
from kernelforge._parse import toml_loads, undecodable_at
from kernelforge._paths import HERE, refuse_empty_path
from kernelforge.errors import ManifestError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

if TYPE_CHECKING:
    from packaging.version import Version

__all__ = [
    "BACKENDS", "KERNEL_BACKENDS", "KNOWN_DEPENDS", "DEFAULT_PYEXT", "KernelDependency",
    "TorchSpec", "KernelSpec", "Manifest", "load_manifest", "check_project", "check_buildable",
    "check_compiled_sources", "hub_branch_note",
]

#: Backends ``general.backends`` may list.
BACKENDS: tuple[str, ...] = ("cann", "cpu", "cuda", "metal", "neuron", "rocm", "tpu", "xpu")
#: Backends a ``[kernel.NAME]`` section may have.
KERNEL_BACKENDS: tuple[str, ...] = ("cpu", "cuda", "metal", "rocm", "xpu")
#: Values a kernel's ``depends`` may hold (``cutlass_sycl`` is the old name of sycl_tla).
KNOWN_DEPENDS: tuple[str, ...] = (
    "torch", "cutlass_2_10", "cutlass_3_5", "cutlass_3_6", "cutlass_3_8", "cutlass_3_9",
    "cutlass_4_0", "cutlass_4_4", "cutlass_4_5", "cutlass_4_6", "sycl_tla", "cutlass_sycl",
    "metal-cpp",
)
DEFAULT_PYEXT: tuple[str, ...] = ("py", "pyi")
# What a legacy `universal = true` kernel is built for: a pure-Python variant of each, as
# in Hugging Face's builder (its loader reads no `universal` backend in metadata.json).
_UNIVERSAL_BACKENDS = ("cann", "cpu", "cuda", "metal", "neuron", "rocm", "xpu")

# The python-depends names that Hugging Face's kernels know for one backend only (the
# "backends" part of their python_depends.json, kernels 0.17.2); the other names they
# know (its "general" part) are for every backend. The names, and the packages they
# stand for, are the loader's (kernelforge.loader._PYTHON_DEPENDS).
_PYTHON_DEPENDS_BACKEND = {"nvidia-cutlass-dsl": "cuda", "nki": "neuron", "onednn": "xpu"}

#: Kernel names (Hugging Face's loader refuses a metadata.json whose name has anything
#: else, '_' included).
_NAME_RE = re.compile(r"^[a-z][-a-z0-9]*[a-z0-9]\Z")
#: Names of the older layout the guide uses, which may hold '_' (kept as the Python
#: package's name, and written with '-' as the kernel's name).
_LEGACY_NAME_RE = re.compile(r"^[a-z][-_a-z0-9]*[a-z0-9]\Z")
_KERNEL_NAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_-]*\Z", re.ASCII)
_VERSION_RE = re.compile(r"^\d+(\.\d+)*\Z", re.ASCII)
#: What a hub repository id is (:func:`kernelforge.hub.base.validate_repo_id` decides).
_REPO_ID_EXPECTED = ("'<org>/<name>', each part up to 96 letters, digits, '.', '_' and '-' "
                     "that starts and ends with a letter or digit (no '..'), e.g. "
                     "'kernels-community/relu'")
_GIT_SCHEMES = ("https", "http", "git", "ssh", "git+ssh", "git+https", "git+http")
#: A URL's scheme, as URL parsers read one (``github.com:org/x`` has the scheme
#: ``github.com``).
_URL_SCHEME_RE = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):")

_KERNEL_COMMON = frozenset({"backend", "depends", "src", "include", "cxx-flags"})
_KERNEL_EXTRA = {
    "cpu": frozenset(), "metal": frozenset(),
    "cuda": frozenset({"cuda-capabilities", "cuda-flags", "cuda-minver"}),
    "rocm": frozenset({"rocm-archs", "hip-flags"}),
    "xpu": frozenset({"sycl-flags"}),
}
_COUNTERPART = {"cuda-capabilities": "rocm-archs", "rocm-archs": "cuda-capabilities",
                "cuda-flags": "hip-flags", "hip-flags": "cuda-flags"}
_NOARCH_KEYS = frozenset({"pyext", "cuda-capabilities", "rocm-archs",
                          "cuda_capabilities", "rocm_archs"})
_TVM_FFI = "tvm-ffi"
_T = TypeVar("_T")


@dataclass(frozen=True)
class _Schema:
    """The keys one layout allows."""

    edition: int
    label: str
    sections: frozenset[str]
    general: frozenset[str]
    required: tuple[str, ...]
    sub: Mapping[str, frozenset[str]]
    torch: frozenset[str]


_TORCH_OLD = frozenset({"include", "minver", "maxver", "pyext", "src"})
_TORCH_NEW = _TORCH_OLD | {"stable-abi", "cxx-flags"}
_SUB_OLD = {"cuda": frozenset({"minver", "maxver", "python-depends"}),
            "neuron": frozenset({"python-depends"}), "xpu": frozenset({"python-depends"}),
            "hub": frozenset({"repo-id", "branch"})}
_GENERAL_V4 = frozenset({"name", "version", "license", "upstream", "source", "backends",
                         "cuda", "hub", "neuron", "python-depends", "xpu"})
_V5 = _Schema(
    5, "edition 5", frozenset({"general", "torch", "torch-noarch", _TVM_FFI, "kernel"}),
    _GENERAL_V4 | {"edition", "kernel-depends", "tpu"},
    ("name", "version", "edition", "license", "backends"),
    {"cuda": frozenset({"minver", "maxver", "kernel-depends", "python-depends"}),
     "neuron": frozenset({"kernel-depends", "python-depends"}),
     "xpu": frozenset({"kernel-depends", "python-depends"}),
     "tpu": frozenset({"python-depends"}), "hub": frozenset({"repo-id", "branch"})},
    _TORCH_NEW,
)
_V4 = _Schema(4, "edition 4", _V5.sections, _GENERAL_V4,
              ("name", "version", "license", "backends"), _SUB_OLD, _TORCH_NEW)
_V3 = _Schema(3, "legacy layout with 'backends'",
              frozenset({"general", "torch", _TVM_FFI, "kernel"}),
              _GENERAL_V4 - {"source"}, ("name", "backends"), _SUB_OLD, _TORCH_OLD)
_GUIDE = _Schema(3, "legacy layout", frozenset({"general", "torch", "kernel"}),
                 frozenset({"name", "universal", "cuda-minver", "cuda-maxver", "hub",
                            "python-depends"}),
                 ("name",), {"hub": _SUB_OLD["hub"]}, _TORCH_OLD)

# How a missing required key is written.
_EXAMPLES = {"name": 'name = "my-kernel"', "version": "version = 1", "edition": "edition = 5",
             "license": 'license = "Apache-2.0"', "backends": 'backends = ["cuda"]',
             "src": 'src = ["..."]', "depends": 'depends = ["torch"]',
             "repo-id": 'repo-id = "org/name"'}

# Why a key is unknown when it belongs to another layout: (table, key) -> fix.
_EDITION5 = "'{key}' needs edition 5: add edition = 5 to [general]"
_NEWER = ("'{key}' is not part of the legacy layout: add backends = [...], version and "
          "license to [general] (edition 4), or move the file to edition 5")
_KEY_HINTS = {
    ("general", "universal"): "'universal' belongs to the legacy layout without 'backends'; "
                              "a pure-Python kernel declares a [torch-noarch] section",
    ("general", "cuda-minver"): 'write it as [general.cuda] minver = "..."',
    ("general", "cuda-maxver"): 'write it as [general.cuda] maxver = "..."',
    ("general", "kernel-depends"): _EDITION5, ("general", "tpu"): _EDITION5,
    ("general.cuda", "kernel-depends"): _EDITION5,
    ("general.neuron", "kernel-depends"): _EDITION5,
    ("general.xpu", "kernel-depends"): _EDITION5,
    ("general", "source"): _NEWER, ("general", "version"): _NEWER,
    ("general", "license"): _NEWER, ("general", "cuda"): _NEWER,
    ("general", "xpu"): _NEWER, ("general", "neuron"): _NEWER,
    ("torch", "stable-abi"): _NEWER, ("torch", "cxx-flags"): _NEWER,
    ("", "torch-noarch"): _NEWER,
    ("torch", "universal"): "the oldest layout is not supported: move 'universal' to "
                            "[general] and give each kernel a backend",
    ("kernel.*", "language"): "the oldest layout is not supported: replace 'language' "
                              'with backend = "cuda" (or rocm, metal, ...)',
}


@dataclass(frozen=True)
class KernelDependency:
    """Another hub kernel this one needs: ``{repo-id, version | revision}``."""

    repo_id: str
    version: int | None = None
    revision: str | None = None

    def as_dict(self) -> dict[str, str | int]:
        """The kebab-case form used in build.toml and metadata.json."""
        pin: dict[str, str | int] = (
            {"version": self.version} if self.version is not None
            else {"revision": self.revision or ""})
        return {"repo-id": self.repo_id, **pin}


@dataclass(frozen=True)
class TorchSpec:
    """The ``[torch]`` section: the binding sources of a compiled kernel."""

    src: tuple[str, ...]
    include: tuple[str, ...] = ()
    pyext: tuple[str, ...] = DEFAULT_PYEXT
    minver: str | None = None
    maxver: str | None = None
    cxx_flags: tuple[str, ...] = ()
    #: backend -> torch version built against the stable ABI (absent: normal ABI).
    stable_abi: Mapping[str, str] | None = None

    def stable_abi_for(self, backend: str) -> str | None:
        """The stable-ABI torch version for ``backend``, or None for the normal ABI."""
        return None if self.stable_abi is None else self.stable_abi.get(backend)


@dataclass(frozen=True)
class KernelSpec:
    """One ``[kernel.NAME]`` section, as :attr:`Manifest.kernels` holds it.

    Attributes:
        name: the section's ``NAME``.
        backend: the backend it compiles for (``cpu``, ``cuda``, ``rocm``, ...).
        src: its source files, relative to the project directory.
        depends: what it builds with (``torch``, ``cutlass_3_9``, ...).
        include: its include directories, relative to the project directory.
        cxx_flags: ``cxx-flags``, added to the C++ compiler's flags for its sources.
        cuda_capabilities: ``cuda-capabilities`` in their canonical spelling
            (``"9.0a"``), or ``None`` for the builder's defaults.
        cuda_flags: ``cuda-flags``, added to nvcc's flags.
        cuda_minver: ``cuda-minver``, the oldest CUDA that builds it, or ``None``.
        rocm_archs: ``rocm-archs``, or ``None`` for the builder's defaults.
        hip_flags: ``hip-flags``, added to hipcc's flags.
        sycl_flags: ``sycl-flags`` (read and kept; kernelforge builds no ``xpu``).
    """

    name: str
    backend: str
    src: tuple[str, ...]
    depends: tuple[str, ...]
    include: tuple[str, ...] = ()
    cxx_flags: tuple[str, ...] = ()
    cuda_capabilities: tuple[str, ...] | None = None
    cuda_flags: tuple[str, ...] = ()
    cuda_minver: str | None = None
    rocm_archs: tuple[str, ...] | None = None
    hip_flags: tuple[str, ...] = ()
    sycl_flags: tuple[str, ...] = ()


@dataclass(frozen=True)
class Manifest:
    """A validated ``build.toml``, the same shape whatever its edition.

    :func:`load_manifest` makes one; its values are already checked.

    Attributes:
        path: the ``build.toml`` file.
        root: the project directory (the folder holding it).
        edition: 5 or 4, or 3 for the guide's older layout (``[general] universal``,
            ``backend =`` per kernel).
        name: the kernel's name as ``metadata.json`` writes it (lowercase letters,
            digits and ``-``; an older layout's ``_`` is written ``-``).
        python_name: the Python package name: ``name`` with ``-`` as ``_``.
        version: ``[general] version``; ``None`` where an edition before 5 leaves it
            out (a publish then uses 1).
        license: ``[general] license``, or ``None``.
        backends: ``general.backends``; in the older layout, the backends of its
            kernel sections (every backend, where ``universal = true``).
        noarch: a pure-Python kernel (``[torch-noarch]``, or ``universal = true``).
        universal: the older layout's ``universal = true``: a pure-Python variant for
            every backend.
        torch: the ``[torch]`` section (binding sources, ``minver``, ``maxver``, ...);
            ``None`` for a noarch kernel.
        kernels: the ``[kernel.<name>]`` sections by name, in file order.
        upstream: ``[general] upstream``, a git URL, or ``None``.
        source: ``[general] source``, a git URL, or ``None``.
        python_depends: ``[general] python-depends``.
        kernel_depends: ``[general] kernel-depends``: other hub kernels this one needs.
        hub_repo_id: ``[general.hub] repo-id`` (``kernelforge publish``'s default
            ``--repo``), or ``None``.
        hub_branch: ``[general.hub] branch``, read but not used for publishing.
        cuda_minver: the oldest CUDA toolkit the cuda backend builds with, as written.
        cuda_maxver: the newest CUDA toolkit the cuda backend builds with, as written.
        pyext: the suffixes of the files shipped from ``torch-ext/<python_name>/``.
        noarch_cuda_capabilities: ``[torch-noarch] cuda-capabilities``, written to the
            noarch cuda variant's metadata; ``None``: all.
        noarch_rocm_archs: ``[torch-noarch] rocm-archs``, likewise for rocm.
        backend_python_depends: ``[general.<backend>] python-depends``, per backend.
        backend_kernel_depends: ``[general.<backend>] kernel-depends``, per backend.
        notes: what reading the manifest found worth saying that is not a problem (an
            unknown architecture left out of a list that has known ones), one line
            each.
    """

    path: Path
    root: Path
    edition: int
    name: str
    python_name: str
    version: int | None
    license: str | None
    backends: tuple[str, ...]
    noarch: bool
    universal: bool
    torch: TorchSpec | None
    kernels: dict[str, KernelSpec]
    upstream: str | None = None
    source: str | None = None
    python_depends: tuple[str, ...] = ()
    kernel_depends: tuple[KernelDependency, ...] = ()
    hub_repo_id: str | None = None
    hub_branch: str | None = None
    cuda_minver: str | None = None
    cuda_maxver: str | None = None
    pyext: tuple[str, ...] = DEFAULT_PYEXT
    noarch_cuda_capabilities: tuple[str, ...] | None = None
    noarch_rocm_archs: tuple[str, ...] | None = None
    backend_python_depends: dict[str, tuple[str, ...]] = field(default_factory=dict)
    backend_kernel_depends: dict[str, tuple[KernelDependency, ...]] = field(
        default_factory=dict)
    notes: tuple[str, ...] = ()

    def kernels_for(self, backend: str) -> tuple[KernelSpec, ...]:
        """The kernel sections of one backend.

        Args:
            backend: a backend name (``"cuda"``, ``"cpu"``, ...).

        Returns:
            The sections with ``backend = <backend>``, in file order; ``()`` for a
            backend the project has no section for.
        """
        return tuple(k for k in self.kernels.values() if k.backend == backend)


class _Unit:
    """What :meth:`_Reader.unit` yields: whether the part it checks had a problem."""

    def __init__(self, errors: list[ManifestError]) -> None:
        self._errors = errors
        self._start = len(errors)
        self._end: int | None = None  # the count when the block ended

    def close(self) -> None:
        self._end = len(self._errors)

    @property
    def failed(self) -> bool:
        """Whether this part (or a part inside it) had a problem: problems collected
        between the block's start and its end, not those of parts read after it."""
        end = len(self._errors) if self._end is None else self._end
        return end > self._start


class _Reader:
    """Typed access to one manifest's tables, raising ManifestError on misuse.

    :meth:`fail` raises at once and :meth:`flag` collects a problem; a part of the
    manifest that can be checked on its own runs inside ``with reader.unit():``, which
    collects the error that stopped it, so that reading goes on with the next part.
    :meth:`done` raises them all together.
    """

    def __init__(self, file: Path) -> None:
        self.file = file
        #: The problems collected so far, in the order they were found.
        self.errors: list[ManifestError] = []
        #: What is not a problem but should be said (one line each).
        self.notes: list[str] = []

    def fail(self, key: str | None, problem: str, expected: str | None = None,
             fix: str | None = None, cause: Exception | None = None) -> NoReturn:
        raise ManifestError(self.file, key, problem, expected=expected, fix=fix) from cause

    def flag(self, key: str | None, problem: str, expected: str | None = None,
             fix: str | None = None, cause: Exception | None = None) -> None:
        """Collect a problem and go on reading (:meth:`fail` stops the part being read)."""
        err = ManifestError(self.file, key, problem, expected=expected, fix=fix)
        err.__cause__ = cause
        self.errors.append(err)

    @contextmanager
    def unit(self) -> Iterator[_Unit]:
        """Check one independent part: a ManifestError raised inside the ``with`` block
        ends the block and is collected, and reading goes on after it.

        Yields:
            A :class:`_Unit` whose ``failed`` says, after the block, whether the part
            had a problem (so that parts needing its value can be skipped).
        """
        unit = _Unit(self.errors)
        try:
            yield unit
        except ManifestError as err:
            self.errors.extend(err.errors)
        finally:
            unit.close()

    def get(self, read: Callable[[], _T | None]) -> _T | None:
        """``read()`` as a part of its own: its value, or None if it failed (its error is
        collected)."""
        with self.unit():
            return read()
        return None

    def done(self) -> None:
        """Raise the problems collected so far, if any.

        Raises:
            ManifestError: all of them (see :meth:`ManifestError.combine`).
        """
        if self.errors:
            raise ManifestError.combine(self.errors)

    def check_keys(self, table: Mapping[str, Any], prefix: str, allowed: Collection[str],
                   required: Collection[str] = (), *, what: str = "",
                   parent: tuple[Mapping[str, Any], Collection[str]] | None = None) -> None:
        """Refuse unknown keys (with a suggestion) and missing required ones (except
        one that an unknown key is a misspelling of: that is said once, with the typo).

        A key written below a subtable's header belongs to the subtable: an unknown key
        of ``[X.Y]`` that is a key of ``[X]`` (``parent``: its table and its allowed
        keys) is said to be misplaced, and a required key missing from a table but
        found in one of its subtables is said to be there, each with the fix to move it.

        Raises:
            ManifestError: listing every unknown and every missing key.
        """
        problems: list[ManifestError] = []
        suggested: set[str] = set()
        for key in table:
            if key in allowed:
                continue
            dotted = f"{prefix}.{key}" if prefix else key
            # A key of another layout gets its explanation, a typo a suggestion.
            section = "kernel.*" if prefix.startswith("kernel.") else prefix
            hint = _KEY_HINTS.get((section, key))
            near = archs.closest(key, allowed)
            fix = hint.format(key=key) if hint else (
                f"did you mean '{near}'?" if near else "remove it")
            if parent is not None and key in parent[1]:
                fix = _misplaced(prefix, key, twice=key in parent[0])
            elif near and not hint:
                suggested.add(near)
            elif not hint and isinstance(table[key], dict) and prefix:
                # An unknown [X.Y] header above keys of [X]: they are not to be removed.
                ours = [k for k in table[key] if k in allowed and k not in table]
                if ours:
                    fix = (f"remove the [{dotted}] header, so that the keys below it "
                           f"({', '.join(ours)}) are read as part of [{prefix}]")
            problems.append(ManifestError(
                self.file, dotted, f"unknown key '{key}'{what}",
                expected="one of " + ", ".join(sorted(allowed)), fix=fix))
        for key in required:
            # A misspelt key is reported once, as unknown, with the name it misses.
            if key not in table and key not in suggested:
                dotted = f"{prefix}.{key}" if prefix else key
                where = f"[{prefix}]" if prefix else "the file"
                example = _EXAMPLES.get(key, f"{key} = ...")
                # Written below a subtable's header, it is read as the subtable's key.
                sub = next((sub for sub, value in table.items()
                            if isinstance(value, dict) and key in value), None)
                under = f"{prefix}.{sub}" if prefix else sub
                if sub is None:
                    fix = f"add {example} to {where}"
                elif sub in allowed:
                    fix = (f"it is written under [{under}] (as {under}.{key}): move it "
                           f"above the [{under}] header, into {where}")
                else:
                    fix = (f"it is written under [{under}], an unknown table: remove that "
                           f"header, so that it is read as part of {where}")
                problems.append(ManifestError(
                    self.file, dotted, f"missing required key '{key}'{what}",
                    expected=f"a '{key}' key, e.g. {example}", fix=fix))
        if problems:
            raise ManifestError.combine(problems)

    def known(self, table: Mapping[str, Any], prefix: str, allowed: Collection[str],
              required: Collection[str] = (), *, what: str = "",
              parent: tuple[Mapping[str, Any], Collection[str]] | None = None
              ) -> dict[str, Any]:
        """:meth:`check_keys` as a part of its own, then ``table`` without its unknown
        keys: reading goes on with the keys that are known, and a refused key is not
        refused a second time for its value."""
        with self.unit():
            self.check_keys(table, prefix, allowed, required, what=what, parent=parent)
        return {key: value for key, value in table.items() if key in allowed}

    def table(self, value: Any, key: str) -> dict[str, Any]:
        if not isinstance(value, dict):
            self.fail(key, f"is {_kind(value)}, not a table", expected=f"a [{key}] table",
                      fix=f"write the keys under a [{key}] header")
        return value

    def _typed(self, table: Mapping[str, Any], prefix: str, key: str, ok: Any,
               expected: str, example: str) -> Any:
        value = table.get(key)
        if value is not None and not ok(value):
            self.fail(f"{prefix}.{key}", f"is {_kind(value)}", expected=expected,
                      fix=f"write {key} = {example}")
        return value

    def string(self, table: Mapping[str, Any], prefix: str, key: str) -> str | None:
        return cast("str | None", self._typed(
            table, prefix, key, lambda v: isinstance(v, str), "a string", '"..."'))

    def integer(self, table: Mapping[str, Any], prefix: str, key: str) -> int | None:
        value = cast("int | None", self._typed(
            table, prefix, key,
            lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0,
            "a non-negative integer", "1"))
        if value is not None and value >= 2**63:  # TOML's integers are 64-bit
            self.fail(f"{prefix}.{key}", f"{value} is too large", expected="an integer "
                      "below 2**63, as TOML allows (Hugging Face's tools refuse more)",
                      fix=f"write {key} = 1")
        return value

    def strings(self, table: Mapping[str, Any], prefix: str, key: str
                ) -> tuple[str, ...] | None:
        value = table.get(key)
        if isinstance(value, list):
            # say which entry is wrong, and quote what TOML read as a number
            for i, x in enumerate(value):
                if not isinstance(x, str):
                    shown = repr(x) if isinstance(x, (int, float)) else _kind(x)
                    self.fail(f"{prefix}.{key}", f"entry {i + 1} ({shown}) is not a string",
                              expected="a list of strings",
                              fix=(f'quote it: "{x!r}"' if isinstance(x, (int, float))
                                   and not isinstance(x, bool) else "write it as a string"))
        value = self._typed(
            table, prefix, key,
            lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v),
            "a list of strings", '["...", "..."]')
        return None if value is None else tuple(value)

    def flags(self, table: Mapping[str, Any], prefix: str, key: str
              ) -> tuple[str, ...] | None:
        """A list of compiler flags: strings, each one a word the compile line can hold."""
        value = self.strings(table, prefix, key)
        for i, flag in enumerate(value or ()):
            if not flag.strip():
                # passed on as an empty argument, which the compiler reads as a file name
                self.fail(f"{prefix}.{key}", f"entry {i + 1} ({flag!r}) is empty",
                          expected="compiler flags such as \"-O3\"",
                          fix=f"remove the empty entry from {prefix}.{key}")
            elif "\n" in flag or "\r" in flag:
                self.fail(f"{prefix}.{key}", f"entry {i + 1} ({flag!r}) holds a line break, "
                          "which the build's ninja file cannot hold",
                          expected="one flag per entry, on one line",
                          fix="write each flag as an entry of its own")
        return value

    def version(self, table: Mapping[str, Any], prefix: str, key: str) -> str | None:
        value = table.get(key)
        if value is None:
            return None
        if isinstance(value, float):
            # TOML has read a number: 2.10 as 2.1, so the version meant is not known.
            self.fail(f"{prefix}.{key}", f"is the number {value!r}, not a version: TOML "
                      "reads an unquoted version as a number and drops its trailing zeros "
                      "(2.10 becomes 2.1)",
                      expected='a quoted version such as "2.7" or "12.8"',
                      fix=f'quote the version as you meant it, e.g. {key} = "{value!r}" or '
                          f'{key} = "{value!r}0"')
        if not isinstance(value, str) or not _VERSION_RE.match(value.strip()):
            example = f'"{value}.0"' if isinstance(value, int) else '"2.7"'
            self.fail(f"{prefix}.{key}", f"{value!r} is not a version",
                      expected='a quoted version such as "2.7" or "12.8"',
                      fix=f"write {key} = {example}")
        version = value.strip()
        parts = version.split(".")
        if len(parts) != 2:
            # kernelforge compares it as written; Hugging Face's reader (kernels 0.17)
            # takes major.minor only ("Version has 3 components, expected 2").
            two = ".".join((parts + ["0"])[:2])
            self.notes.append(
                f"{prefix}.{key}: '{version}' has {len(parts)} part"
                f"{'' if len(parts) == 1 else 's'}: Hugging Face's kernel-builder reads "
                f"versions as major.minor and refuses it (kernelforge reads it as "
                f'written); fix: write {key} = "{two}" for a file both build')
        return version

    def paths(self, table: Mapping[str, Any], prefix: str, key: str) -> tuple[str, ...]:
        """A list of project-relative paths (``src``, ``include``)."""
        values = self.strings(table, prefix, key) or ()
        for value in values:
            normal = posixpath.normpath(value.replace("\\", "/"))
            if not value or value.startswith(("/", "\\")) or re.match(r"^[A-Za-z]:", value):
                self.fail(f"{prefix}.{key}", f"'{value}' is not a relative path",
                          expected="paths relative to the project directory",
                          fix="write the path relative to the directory of build.toml")
            if normal == ".." or normal.startswith("../"):
                self.fail(f"{prefix}.{key}", f"'{value}' points outside the project",
                          expected="paths inside the project directory",
                          fix="move the file into the project")
        return values


def _misplaced(prefix: str, key: str, *, twice: bool) -> str:
    """The fix for ``key`` found in the subtable ``prefix`` (``general.hub``) when it is a
    key of the table above it (``general``): written below the subtable's header, it
    was read as the subtable's."""
    above = prefix.rpartition(".")[0]
    if twice:
        return (f"'{key}' belongs to [{above}], which has its own {key}: keep one of the "
                f"two, in [{above}] (above the [{prefix}] header)")
    return (f"'{key}' belongs to [{above}]: move it above the [{prefix}] header (a key "
            f"written below [{prefix}] is read as part of [{prefix}])")


def _kind(value: Any) -> str:
    names = {bool: "a boolean", int: "an integer", float: "a float", str: "a string",
             list: "a list", dict: "a table"}
    shown = repr(value) if not isinstance(value, (dict, list)) else ""
    return f"{names.get(type(value), type(value).__name__)} {shown}".rstrip()


def _read_toml(file: Path) -> dict[str, Any]:
    try:
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError:
        target = _dangling_target(file)
        if target is not None:
            raise ManifestError(file, None, f"a link to {target}, which does not exist",
                                expected="a kernel project directory (or its build.toml)",
                                fix="point the link at a kernel project, or pass the "
                                    "project directory itself") from None
        if _missing_path(file):
            raise ManifestError(file, None, "no such file or directory",
                                expected="a kernel project directory (or its build.toml)",
                                fix=_mistyped_project(file)) from None
        fix = "pass a kernel project directory that holds build.toml"
        if file.name == "build.toml" and file.parent.is_dir() and any(
                (d / "build.toml").is_file() for d in file.absolute().parents[1:]):
            # a folder inside a project (torch-ext/, build/): the project is above it
            folder = "the current directory" if file.parent == Path() else file.parent
            fix = f"{folder} is inside a kernel project: {_project_to_pass(file)}"
        elif file.name == "build.toml" and file.parent.is_dir():
            fix += _projects_below(file.parent)
        raise ManifestError(file, None, "no such file", expected="a build.toml",
                            fix=fix) from None
    except (OSError, UnicodeDecodeError) as err:
        if isinstance(err, UnicodeDecodeError) and file.name != "build.toml":
            raise _not_a_manifest(file, f"it is not a text file ({err})") from err
        if isinstance(err, UnicodeDecodeError):
            raise ManifestError(file, None, f"not UTF-8 text at {undecodable_at(err)} "
                                f"({err})", expected="a UTF-8 text file, as TOML is",
                                fix="save the file as UTF-8, or retype the character at "
                                    "that position") from err
        raise ManifestError(file, None, f"cannot read it: {err}",
                            expected="a readable UTF-8 text file",
                            fix="check the file's permissions and encoding") from err
    # A byte order mark (as some Windows editors save UTF-8) is no part of the document:
    # TOML parsers differ on it, and Hugging Face's builder reads such a file.
    text = text.removeprefix("\ufeff")
    try:
        return toml_loads(text)
    except tomllib.TOMLDecodeError as err:
        if file.suffix != ".toml":
            # A source file or another file of the project, given instead of the project:
            # its TOML syntax is not what is wrong.
            raise _not_a_manifest(file, f"it is not valid TOML ({err})") from err
        twice = _defined_twice(str(err), text) if file.name == "build.toml" else None
        if twice is not None:
            key, problem, fix = twice
            raise ManifestError(file, key, f"not valid TOML: {problem} ({err})",
                                expected="each key and each table defined once (TOML "
                                         "allows no duplicates)", fix=fix) from err
        fix = "fix the syntax at the position shown"
        if file.name != "build.toml":  # a manifest under another name, or another file
            fix = f"if it is the project's manifest, {fix}; if not, " + \
                _project_to_pass(file)
        raise ManifestError(file, None, f"not valid TOML: {err}",
                            expected="a TOML document (https://toml.io)", fix=fix) from err


#: The start of a ``key = value`` line (the key, bare, quoted or dotted).
_KEY_RE = re.compile(r"""^\s*((?:[A-Za-z0-9_-]+|"[^"]*"|'[^']*')"""
                     r"""(?:\s*\.\s*(?:[A-Za-z0-9_-]+|"[^"]*"|'[^']*'))*)\s*=""")
#: A table header line: ``[kernel.relu]`` or ``[[x]]`` (the dotted name).
_HEADER_RE = re.compile(r"^\s*\[\[?\s*([^\[\]]+?)\s*\]\]?\s*(?:#.*)?$")


def _defined_twice(message: str, text: str) -> tuple[str | None, str, str] | None:
    """What TOML's error ``message`` about ``text`` means where it defines a key or a
    table a second time (the parser says "Cannot overwrite a value", "Cannot declare
    ('kernel', 'k') twice"): the dotted key, the problem and the fix; None for
    another error."""
    import ast

    declared = re.match(r"Cannot (?:declare (\([^()]*\)) twice|mutate immutable namespace "
                        r"(\([^()]*\)))", message)
    if declared:
        try:
            parts = ast.literal_eval(declared[1] or declared[2])
        except (ValueError, SyntaxError):
            return None
        key = ".".join(parts)
        if declared[1]:
            return key, f"the table [{key}] is defined twice", (
                f"merge the two definitions of [{key}] (a [{key}] header, or dotted keys "
                "naming it) into one")
        return key, f"{key} is written as a value ({{...}} or [...]) and added to later", (
            f"write all of {key} in that value, or use a [{key}] header instead")
    if not message.startswith("Cannot overwrite a value"):
        return None
    at = re.search(r"at line (\d+),", message)
    lines = text.splitlines()
    # At the end of a file without a final newline, the error is of its last line.
    number = int(at[1]) if at else max(
        (i + 1 for i, line in enumerate(lines) if line.strip()), default=0)
    if not 0 < number <= len(lines) or (at is None and "end of document" not in message):
        return None, "a key is set twice", "remove one of the two, or merge them"
    table = _HEADER_RE.match(lines[number - 1])
    if table:  # [general] below a general = ... key
        return table[1], f"[{table[1]}] is declared where a value of that name is set " \
            f"(line {number})", f"remove the '{table[1]} = ...' line, or the [{table[1]}] " \
            "header"
    # The error is where the value ends: the key is on the line that starts it.
    start = next((i for i in range(number - 1, -1, -1)
                  if _KEY_RE.match(lines[i]) or _HEADER_RE.match(lines[i])), None)
    found = _KEY_RE.match(lines[start]) if start is not None else None
    if start is None or found is None:
        return None, f"a key is set twice (line {number})", \
            "remove one of the two, or merge them"
    name = found[1]
    header = next((m[1] for line in reversed(lines[:start])
                   if (m := _HEADER_RE.match(line))), None)
    key = f"{header}.{name}" if header else name
    where = f"[{header}]" if header else "the top of the file"
    return key, f"line {start + 1} sets '{name}' in {where}, which already has it", (
        f"keep one '{name}' in {where} (TOML allows a key once per table); merge the "
        "two values if both are wanted")


#: How many entries of a folder that is no kernel project are looked at for projects in
#: its subfolders, so that the error of a command run in a home or data folder holding
#: many thousands of entries comes at once.
_PROJECTS_LOOKED_AT = 1000


def _dangling_target(file: Path) -> str | None:
    """Where ``file``, a symbolic link that could not be read through, points (a folder
    moved or removed since the link was made), or ``None`` where it is no link: not a
    name mistyped, so no project is suggested in its place."""
    try:
        return os.readlink(file) if file.is_symlink() else None
    except OSError:
        return None


def _missing_path(file: Path) -> bool:
    """Whether ``file``, given as the project, is no path at all (a project's name
    mistyped, or one not made yet), rather than a folder or file without build.toml."""
    if file.name == "build.toml":
        return False
    try:
        return not file.exists() and not file.is_symlink()
    except OSError:
        return False


def _mistyped_project(file: Path) -> str:
    """The fix for a project path ``file`` that does not exist: the project beside it
    whose name is closest (a typo); else the project it is inside of; else the projects
    its folder holds, or how to make one."""
    folder = file.parent
    near = archs.closest(file.name, _projects_in(folder))
    if near is not None:
        return f"did you mean {folder / near}?"
    if any((d / "build.toml").is_file() for d in file.absolute().parents):
        return _project_to_pass(file)
    return "pass a kernel project directory that holds build.toml" + _projects_below(folder)


def _projects_in(folder: Path) -> list[str]:
    """The names of ``folder``'s subfolders that hold a build.toml, hidden ones left out
    (the first :data:`_PROJECTS_LOOKED_AT` entries looked at)."""
    def project(entry: Path) -> bool:
        try:
            return not entry.name.startswith(".") and (entry / "build.toml").is_file()
        except OSError:  # a subfolder this user may not enter hides none of the others
            return False

    try:
        return sorted(d.name for d in itertools.islice(folder.iterdir(), _PROJECTS_LOOKED_AT)
                      if project(d))
    except OSError:
        return []


def _projects_below(folder: Path) -> str:
    """The end of the fix for a ``folder`` that is no kernel project: the projects in its
    subfolders (the folder that ``kernelforge init`` made, run from the one above it), or
    how to make one."""
    found = _projects_in(folder)
    if not found:
        return " (to start one, run 'kernelforge init NAME')"
    more = f" and {len(found) - 5} more" if len(found) > 5 else ""
    return (f" (in {'the current directory' if folder == Path() else folder}: "
            f"{', '.join(found[:5])}{more})")


def _project_to_pass(file: Path) -> str:
    """What to pass instead of ``file``: the directory above it that holds a build.toml,
    shown as ``file`` is (relative or absolute), where there is one."""
    project = next((d for d in file.absolute().parents if (d / "build.toml").is_file()),
                   None)
    if project is None:
        return "pass the kernel project directory (the one that holds build.toml), or its " \
               "build.toml"
    shown = project if file.is_absolute() else Path(os.path.relpath(project))
    return f"pass the project directory {shown} (or its build.toml)"


def _not_a_manifest(file: Path, why: str) -> ManifestError:
    """The error for a file that is not named build.toml and cannot be read as one (a
    source file given instead of its project)."""
    return ManifestError(file, None, "is not a build.toml: its name is not build.toml and "
                         + why, expected="a kernel project directory or its "
                         "build.toml", fix=_project_to_pass(file))


def _pick_schema(r: _Reader, data: Mapping[str, Any]) -> _Schema:
    if "general" not in data:
        r.fail("general", "missing the [general] section", expected="a [general] table",
               fix='add [general] with name = "..." (and edition = 5, version, license, '
                   "backends)")
    general = r.table(data["general"], "general")
    if "edition" in general:
        edition = general["edition"]
        if isinstance(edition, bool) or not isinstance(edition, int):
            r.fail("general.edition", f"is {_kind(edition)}", expected="the integer 5",
                   fix="write edition = 5")
        if edition == 5:
            return _V5
        if edition in (3, 4):
            r.fail("general.edition", f"edition {edition} files have no 'edition' key",
                   expected="edition = 5, or no 'edition' key for the older layouts",
                   fix="remove the 'edition' line, or move the file to edition 5")
        r.fail("general.edition", f"unknown edition {edition}", expected="5 (the current)",
               fix="set edition = 5, or remove the key for the older layouts")
    # A 'backends' written below a [general.<table>] header is misplaced, not missing:
    # the layout is the one the file meant (the misplaced key is reported as such).
    if "backends" not in general and not any(
            isinstance(value, dict) and "backends" in value for value in general.values()):
        return _GUIDE
    # Like their builder, prefer edition 4 and fall back to the laxer legacy layout
    # (version, license and the framework section optional) when it cannot be edition 4;
    # keys only edition 4 knows mark the file as edition 4, so errors speak of it.
    torch: Mapping[str, Any] = data["torch"] if isinstance(data.get("torch"), dict) else {}
    complete = "version" in general and "license" in general and (
        "torch" in data or _TVM_FFI in data)
    newer = "source" in general or "torch-noarch" in data or "stable-abi" in torch \
        or "cxx-flags" in torch
    return _V4 if complete or newer else _V3


#: What to pass instead of an empty project path, in Python and on the command line.
PROJECT_GIVE = f"the project directory ({HERE}) or its build.toml"


def refuse_empty_project(path: object) -> None:
    """Refuse an empty (or blank) project path, the current directory read from an unset
    variable (``kernelforge build "$PROJECT"``): every reader of a project
    (:func:`load_manifest`, ``build_project``, ``kernelforge check``, ``build``,
    ``publish``) says the same.

    Raises:
        ValueError: ``path`` is an empty or blank string.
    """
    refuse_empty_path(path, "path", "a kernel project", PROJECT_GIVE)


def load_manifest(path: str | Path) -> Manifest:
    """Read and validate a kernel project's ``build.toml``.

    The manifest is read to its end, so that the error lists every problem of it: each
    part that can be checked on its own (the sections, the keys of each table, the
    ``[general]`` fields, ``general.backends``, each ``[kernel.<name>]`` section, the
    framework section) is checked even when another has a problem; a check that needs
    the value of a part that has one is left out, so that no problem is reported only
    because of another.

    Args:
        path: the project directory, or its ``build.toml``.

    Returns:
        The normalised :class:`Manifest`.

    Raises:
        ManifestError: naming the file, the dotted key, what was expected and the fix;
            its ``errors`` lists every problem found.
        ValueError: ``path`` is an empty or blank string (:func:`refuse_empty_project`).

    Example:
        >>> load_manifest("tests/projects/relu").python_name      # doctest: +SKIP
        'relu'
    """
    refuse_empty_project(path)
    path = Path(path)
    file = path / "build.toml" if path.is_dir() else path
    r = _Reader(file)
    data = _read_toml(file)
    if "general" not in data and file.suffix != ".toml":  # an empty source file, say
        raise _not_a_manifest(file, "it has no [general] section")
    # Everything else depends on the layout: a file whose layout is unclear stops here.
    schema = _pick_schema(r, data)
    # A rule about a missing section or key holds only where every section (and key of
    # [general]) is a known one: an unknown one may be the missing one, misspelt.
    with r.unit() as sections_read:
        r.check_keys(data, "", schema.sections, what=f" ({schema.label})")
    data = {key: value for key, value in data.items() if key in schema.sections}
    with r.unit() as general_read:
        r.check_keys(data["general"], "general", schema.general, schema.required,
                     what=f" ({schema.label})")
    general = {key: value for key, value in data["general"].items()
               if key in schema.general}
    fields = _read_general(r, schema, general)
    # general.backends: None where it is unknown (a missing key was reported above);
    # `valid` holds the backends it lists that are known ones.
    declared: tuple[str, ...] | None = None
    valid: tuple[str, ...] = ()
    if schema is not _GUIDE and "backends" in general:
        with r.unit() as backends_read:
            valid = _declared_backends(r, general)
        declared = None if backends_read.failed else valid
    kernels: dict[str, KernelSpec] = {}
    with r.unit() as kernels_read:
        kernels = _kernels(r, data, declared)
    section = data.get("kernel")
    names = [name for name, value in section.items() if isinstance(value, dict)] \
        if isinstance(section, dict) else []
    fields.update(_read_framework(r, schema, data, general,
                                  valid if declared is None else declared, names,
                                  complete=not sections_read.failed))
    if declared is not None:
        backends = declared
    elif schema is _GUIDE and general.get("universal") is True:
        backends = _UNIVERSAL_BACKENDS
    else:
        backends = tuple(sorted({k.backend for k in kernels.values()}))
        # Only where the sections, [general] and the kernel sections could be read: a
        # section with a problem is still a section.
        if schema is _GUIDE and not backends and general.get("universal", False) is False \
                and not (sections_read.failed or general_read.failed or kernels_read.failed):
            r.flag("general.universal", "this legacy manifest has no kernel sections "
                   "and is not universal, so it builds nothing",
                   expected="universal = true, or at least one [kernel.<name>] section",
                   fix="set universal = true for a pure-Python kernel, or add "
                       "[kernel.<name>] sections")
    r.notes.extend(_python_depends_notes(fields["python_depends"],
                                         fields["backend_python_depends"], backends))
    r.done()
    return Manifest(path=file, root=file.parent, edition=schema.edition, backends=backends,
                    kernels=kernels, notes=tuple(r.notes), **fields)


def _read_general(r: _Reader, schema: _Schema, general: Mapping[str, Any]) -> dict[str, Any]:
    """The [general] fields of the Manifest, except the backends; each field is checked
    on its own (a field with a problem gets a placeholder: the manifest is refused)."""
    name = r.get(lambda: r.string(general, "general", "name"))
    name_re = _LEGACY_NAME_RE if schema is _GUIDE else _NAME_RE
    if name is not None and name_re is _LEGACY_NAME_RE and "_" in name and name_re.match(name):
        r.notes.append(f"general.name '{name}' is written '{name.replace('_', '-')}' in "
                       f"metadata.json (kernel names have no '_', and Hugging Face's loader "
                       f"refuses one that has); the Python package stays "
                       f"{name.replace('-', '_')}")
        name = name.replace("_", "-")
    if name is not None and not name_re.match(name):  # a missing name is reported as such
        r.flag("general.name", f"'{name}' is not a valid kernel name",
               expected=f"a name matching {name_re.pattern} (lowercase letters, digits "
                        "and '-', at least 2 characters)",
               fix=f"use '{suggest_name(name)}'")
    name = name or ""
    subs: dict[str, dict[str, Any]] = {}
    for sub, allowed in schema.sub.items():
        if sub in general:
            with r.unit():
                subs[sub] = r.known(r.table(general[sub], f"general.{sub}"), f"general.{sub}",
                                    allowed, parent=(general, schema.general))
    hub = subs.get("hub", {})
    repo_id = r.get(lambda: _repo_id(r, hub))
    if schema is _GUIDE:
        cuda, cuda_prefix, minver, maxver = general, "general", "cuda-minver", "cuda-maxver"
    else:
        cuda, cuda_prefix, minver, maxver = subs.get("cuda", {}), "general.cuda", "minver", \
            "maxver"
    backend_python: dict[str, tuple[str, ...]] = {}
    backend_kernels: dict[str, tuple[KernelDependency, ...]] = {}
    for sub in ("cuda", "neuron", "tpu", "xpu"):
        if sub in subs:
            with r.unit():
                deps = r.strings(subs[sub], f"general.{sub}", "python-depends")
                if deps:
                    backend_python[sub] = deps
            with r.unit():
                kdeps = _kernel_depends(r, subs[sub], f"general.{sub}")
                if kdeps:
                    backend_kernels[sub] = kdeps
    return dict(
        name=name, python_name=name.replace("-", "_"),
        version=r.get(lambda: r.integer(general, "general", "version")),
        license=r.get(lambda: r.string(general, "general", "license")),
        upstream=r.get(lambda: _git_url(r, general, "upstream")),
        source=r.get(lambda: _git_url(r, general, "source")),
        python_depends=r.get(lambda: r.strings(general, "general", "python-depends")) or (),
        kernel_depends=r.get(lambda: _kernel_depends(r, general, "general")) or (),
        hub_repo_id=repo_id,
        hub_branch=r.get(lambda: r.string(hub, "general.hub", "branch")),
        cuda_minver=r.get(lambda: r.version(cuda, cuda_prefix, minver)),
        cuda_maxver=r.get(lambda: r.version(cuda, cuda_prefix, maxver)),
        backend_python_depends=backend_python, backend_kernel_depends=backend_kernels,
    )


def _python_depends_notes(general: Sequence[str], per_backend: Mapping[str, Sequence[str]],
                          backends: Sequence[str]) -> list[str]:
    """Notes on the python-depends names that Hugging Face's kernels loader refuses.

    kernelforge takes any name (an unknown one as the package and module name), but
    their loader refuses a variant whose metadata lists a name outside its table: the
    general names, and those of the variant's backend. A variant lists ``[general]
    python-depends`` and its backend's ``[general.<backend>] python-depends``.
    """
    lists = [("general.python-depends", general, tuple(backends))]
    # A [general.<backend>] table of a backend not built is in no build's metadata.
    lists += [(f"general.{b}.python-depends", names, (b,))
              for b, names in per_backend.items() if b in backends]
    if not any(names for _, names, _ in lists):
        # most projects list none; the table's module (the loader, with the hub) would
        # be imported by every check and build for nothing
        return []
    from kernelforge.loader import _PYTHON_DEPENDS

    known = [n for n in _PYTHON_DEPENDS if n not in _PYTHON_DEPENDS_BACKEND]
    table = ", ".join(known) + "; " + ", ".join(
        f"{n} for {b}" for n, b in _PYTHON_DEPENDS_BACKEND.items())
    notes = []
    for key, names, applies in lists:
        unique = list(dict.fromkeys(names))
        unknown = [n for n in unique if n not in _PYTHON_DEPENDS]
        if unknown:
            shown = ", ".join(f"'{n}'" for n in unknown)
            one = len(unknown) == 1
            notes.append(
                f"{key}: {shown} {'is not a name' if one else 'are not names'} that Hugging "
                f"Face's kernels know (they know {table}): builds that list "
                f"{'it' if one else 'them'} load with kernelforge, which takes "
                f"{'it' if one else 'each'} as the package and module name, but Hugging "
                f"Face's kernels loader refuses them (and their kernel-builder does not "
                f"build the project)")
        for name in unique:
            only = _PYTHON_DEPENDS_BACKEND.get(name)
            refused = [b for b in applies if only is not None and b != only]
            if refused:
                variants = ", ".join(refused)
                notes.append(
                    f"{key}: Hugging Face's kernels know '{name}' for {only} only, and the "
                    f"{variants} build{'s list' if len(refused) > 1 else ' lists'} it: "
                    "it loads with kernelforge, but Hugging Face's kernels loader refuses "
                    f"it; fix: move '{name}' to [general.{only}] python-depends"
                    + ("" if only in backends else
                       f", or remove it (general.backends does not list {only})"))
    return notes


def _repo_id(r: _Reader, hub: Mapping[str, Any]) -> str | None:
    """``[general.hub] repo-id``, refused here as ``kernelforge publish`` (every hub)
    would refuse it (:func:`kernelforge.hub.base.validate_repo_id`), so that a project
    that passes ``check`` and ``build`` is not stopped only when it is published."""
    from kernelforge.hub.base import validate_repo_id  # the hubs' reading of the id

    repo_id = r.string(hub, "general.hub", "repo-id")
    if repo_id is not None:
        try:
            validate_repo_id(repo_id)
        except ValueError as err:
            r.fail("general.hub.repo-id", f"'{repo_id}' is not a hub repository id",
                   expected=_REPO_ID_EXPECTED, fix='write repo-id = "<org>/<name>"',
                   cause=err)
    return repo_id


def _read_framework(r: _Reader, schema: _Schema, data: Mapping[str, Any],
                    general: Mapping[str, Any], declared: tuple[str, ...] | None,
                    kernels: Sequence[str], *, complete: bool) -> dict[str, Any]:
    """torch, noarch, universal, pyext and the noarch archs of the Manifest.

    ``kernels`` names the ``[kernel.*]`` sections (read or not): the rules about kernel
    sections and the framework need only to know that there are some. ``complete``:
    the file has no unknown section, so that a framework section missing from it is
    missing, not misspelt.
    """
    frameworks = [s for s in ("torch", "torch-noarch", _TVM_FFI) if s in data]
    with r.unit() as sections:
        if len(frameworks) > 1:
            r.fail(frameworks[1],
                   f"more than one framework section: [{'], ['.join(frameworks)}]",
                   expected="exactly one of [torch], [torch-noarch]",
                   fix=f"keep one of them and remove [{frameworks[1]}]")
        if _TVM_FFI in data:
            r.fail(_TVM_FFI, "tvm-ffi kernels are not supported by kernelforge",
                   expected="a [torch] or [torch-noarch] section",
                   fix="build this project with a [torch] section and torch bindings")
        if not frameworks and schema.edition in (4, 5) and complete:
            r.fail("torch", "no framework section",
                   expected="exactly one of [torch] (compiled kernels) or [torch-noarch] "
                            "(pure Python / Triton)",
                   fix="add a [torch] section listing torch-ext/torch_binding.cpp, or "
                       "[torch-noarch] for a kernel with nothing to compile")
    universal = general.get("universal", False) if schema is _GUIDE else False
    with r.unit() as universal_read:
        if not isinstance(universal, bool):
            r.fail("general.universal", f"is {_kind(universal)}", expected="true or false",
                   fix="write universal = false (or true for a pure-Python kernel)")
    torch: TorchSpec | None = None
    if "torch" in data:
        with r.unit():
            torch = _torch(r, data["torch"], schema, declared)
    pyext = torch.pyext if torch is not None else DEFAULT_PYEXT
    # These rules need the framework sections, `universal` and [torch] as they are meant.
    if not (sections.failed or universal_read.failed or ("torch" in data and torch is None)
            or ("torch" not in data and not complete)):
        with r.unit():
            torch = _framework_rules(r, data, universal, torch, kernels)
    caps = rocm = None
    if "torch-noarch" in data:
        with r.unit():
            table = r.known(r.table(data["torch-noarch"], "torch-noarch"), "torch-noarch",
                            _NOARCH_KEYS)
            pyext = _pyext(r.get(lambda: r.strings(table, "torch-noarch", "pyext")))
            caps = r.get(lambda: _noarch_archs(r, table, "cuda-capabilities"))
            rocm = r.get(lambda: _noarch_archs(r, table, "rocm-archs"))
    return dict(torch=torch, noarch=torch is None, universal=universal is True, pyext=pyext,
                noarch_cuda_capabilities=caps, noarch_rocm_archs=rocm)


def _pyext(listed: tuple[str, ...] | None) -> tuple[str, ...]:
    """The suffixes of the package files a build ships, from a ``pyext`` list: the
    Python modules always, as in Hugging Face's builder (``pyext`` adds data files to
    them), so ``pyext = ["json"]`` ships the ``.py`` and ``.json`` files."""
    if not listed:
        return DEFAULT_PYEXT
    return listed if "py" in (e.lstrip(".") for e in listed) else (*listed, "py")


def _framework_rules(r: _Reader, data: Mapping[str, Any], universal: bool,
                     torch: TorchSpec | None, kernels: Sequence[str]) -> TorchSpec | None:
    """Refuse a framework that does not fit ``universal`` and the kernel sections.

    Returns:
        The [torch] section, or None where the kernel compiles nothing.
    """
    if universal and torch is not None:
        if torch.src:
            r.fail("torch.src", "a universal kernel compiles nothing, yet [torch] lists "
                   "sources", expected="no sources with universal = true",
                   fix="set universal = false, or empty torch.src")
        torch = None
    if torch is None and kernels:
        key = f"kernel.{kernels[0]}"
        if universal:
            r.fail(key, "a universal (pure-Python) kernel cannot have kernel sections",
                   expected="no [kernel.*] sections with universal = true",
                   fix="set universal = false and add a [torch] section, or remove the "
                       "kernel sections")
        if "torch-noarch" in data:
            r.fail(key, "a [torch-noarch] kernel compiles nothing, so it cannot have "
                   "kernel sections", expected="no [kernel.*] sections with [torch-noarch]",
                   fix="replace [torch-noarch] with a [torch] section "
                   "listing the bindings")
        r.fail(key, "kernel sections need a [torch] section with the binding sources",
               expected="a [torch] section next to the [kernel.*] sections",
               fix='add [torch] src = ["torch-ext/torch_binding.cpp", '
                   '"torch-ext/torch_binding.h"]')
    return torch


def suggest_name(name: str, default: str = "my-kernel") -> str:
    """``name`` as a kernel name might be meant (``MyRelu``, ``my_relu`` and ``2-relu``
    as ``my-relu``, ``my-relu`` and ``relu``); ``default`` when nothing usable is left.
    Accented letters lose their accents (``Übung`` as ``ubung``), rather than the letter."""
    plain = "".join(c for c in unicodedata.normalize("NFKD", name.strip())
                    if not unicodedata.combining(c))
    words = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "-", plain).casefold()
    fixed = re.sub(r"[^a-z0-9]+", "-", words)
    fixed = re.sub(r"^[^a-z]+", "", fixed).strip("-")
    return fixed if len(fixed) >= 2 else default


def _url_problem(url: str) -> str | None:
    """Why ``url`` is no git URL as Hugging Face's kernel metadata reads one (which it
    refuses to load otherwise), or ``None``: a URL (its scheme in any case) of one of
    :data:`_GIT_SCHEMES`, with a host where the scheme needs one and a valid port; or,
    for a text that is no URL, scp's ``host:path``, the path not starting with ``/``."""
    from urllib.parse import urlsplit

    scheme = _URL_SCHEME_RE.match(url)
    if scheme:
        name = scheme[1].lower()
        try:
            parts = urlsplit(url)
            port = parts.port  # a port that is no number (github.com:org) raises
            parsed = (_host_problem(parts.netloc, special=name in ("http", "https")) is None
                      and (port is None or 0 <= port <= 65535))
        except ValueError:  # an unclosed [ of an IPv6 host, a bad port
            parsed = False
        if parsed:
            if name not in _GIT_SCHEMES:
                return f"its scheme '{scheme[1]}' is not one of {', '.join(_GIT_SCHEMES)}"
            return None
    host, colon, path = url.partition(":")
    if colon and host and path and not path.startswith("/") and not any(
            c in "/?#" for c in host) and _host_problem(host, special=False) is None:
        return None
    return "it is neither a URL nor scp's host:path form"


def _host_problem(netloc: str, *, special: bool) -> str | None:
    """What is wrong with the host of a URL's authority ``netloc`` (``user@host:port``),
    by the rules of the URL parser Hugging Face's metadata uses, or ``None``. Stricter
    where those rules are intricate (a host with ``%``, a dotted number that is no
    IPv4 address): such a URL is refused here rather than accepted into a metadata.json
    that their loader would refuse."""
    import ipaddress

    user, at, hostport = netloc.rpartition("@")
    if hostport.startswith("["):
        inside, bracket, rest = hostport[1:].partition("]")
        try:
            if "%" in inside:  # a zone (fe80::1%eth0): no URL host
                raise ValueError(inside)
            ipaddress.IPv6Address(inside)
        except ValueError:
            return f"[{inside}] is no IPv6 address"
        return None if bracket and (not rest or rest.startswith(":")) else "a bad [ ] host"
    host, colon, _port = hostport.partition(":")
    if not host:
        # "ssh://" alone parses; an empty host with a user or port, or for http(s), not
        return "no host" if special or at or colon or "@" in user else None
    if any(c.isspace() or c in "<>\\^|%[]@" for c in host):
        return f"the host {host!r} holds a character hosts cannot"
    if all(part.isdigit() for part in host.rstrip(".").split(".")) and "." in host:
        try:
            ipaddress.IPv4Address(host)
        except ValueError:
            return f"the host {host!r} is no IPv4 address"
    return None


def _git_url(r: _Reader, general: Mapping[str, Any], key: str) -> str | None:
    url = r.string(general, "general", key)
    problem = None if url is None else _url_problem(url)
    if problem is not None:
        r.fail(f"general.{key}", f"'{url}' is not a git URL: {problem}",
               expected="an https://, ssh://, git:// URL or git@host:org/repo.git",
               fix=f'write {key} = "https://github.com/<org>/<repo>"')
    return url


def _kernel_depends(r: _Reader, table: Mapping[str, Any], prefix: str
                    ) -> tuple[KernelDependency, ...]:
    value = table.get("kernel-depends")
    if value is None:
        return ()
    key = f"{prefix}.kernel-depends"
    if not isinstance(value, list):
        r.fail(key, f"is {_kind(value)}", expected='a list of {repo-id = "org/name", '
               "version = N} tables", fix='write kernel-depends = [{repo-id = "org/name", '
               "version = 1}]")
    deps = []
    for item in value:  # each dependency is checked on its own
        with r.unit():
            if not isinstance(item, dict):  # a list entry, not a table of the file
                shown = f'"{item}"' if isinstance(item, str) else _kind(item)
                example = item if isinstance(item, str) and "/" in item else "org/name"
                r.fail(key, f"the entry {shown} is not a table",
                       expected='{repo-id = "org/name", version = N} tables',
                       fix=f'write kernel-depends = [{{repo-id = "{example}", version = 1}}]')
            item = r.table(item, key)
            r.check_keys(item, key, ("repo-id", "version", "revision"), ("repo-id",))
            repo_id = r.string(item, key, "repo-id") or ""
            version = r.integer(item, key, "version")
            revision = r.string(item, key, "revision")
            _check_dependency_pin(r, key, repo_id, revision)
            if (version is None) == (revision is None):
                r.fail(key, f"the dependency on '{repo_id}' needs exactly one of 'version' "
                       "and 'revision'",
                       expected="version = N or revision = \"<branch/commit>\"",
                       fix=f'write {{repo-id = "{repo_id}", version = 1}}')
            deps.append(KernelDependency(repo_id, version, revision))
    return tuple(deps)


def _check_dependency_pin(r: _Reader, key: str, repo_id: str, revision: str | None) -> None:
    """Refuse a ``kernel-depends`` entry that goes into every variant's ``metadata.json``
    but that the loader refuses there (:func:`kernelforge.lock.dependency_key`): a
    ``repo-id`` that is no hub repository id, or an empty ``revision``. Hugging Face's
    builder writes such an entry as it is; caught here, the publisher fixes it, rather
    than each user meeting an error at load that only the publisher can fix."""
    from kernelforge.hub.base import validate_repo_id  # the loaders' reading of the id

    try:
        validate_repo_id(repo_id)
    except ValueError:
        r.fail(key, f"the dependency '{repo_id}' is not a hub repository id",
               expected=_REPO_ID_EXPECTED,
               fix='write {repo-id = "<org>/<name>", version = 1}')
    if revision is not None and not revision.strip():
        r.fail(key, f"the dependency on '{repo_id}' has an empty revision",
               expected='a branch, tag or commit, e.g. revision = "v1"',
               fix=f'write {{repo-id = "{repo_id}", version = 1}} to follow a version')


def _declared_backends(r: _Reader, general: Mapping[str, Any]) -> tuple[str, ...]:
    """``general.backends``, less the unknown backends it lists (each is collected as a
    problem: the caller tells a complete list by the unit it reads it in)."""
    values = r.strings(general, "general", "backends") or ()
    if not values:
        r.fail("general.backends", "is empty", expected="at least one of "
               + ", ".join(BACKENDS), fix='list the backends you build, e.g. ["cuda"]')
    out: list[str] = []
    for value in values:
        if value not in BACKENDS:  # each unknown backend is a problem of its own
            near = archs.closest(value, BACKENDS)
            r.flag("general.backends", f"unknown backend '{value}'",
                   expected="one of " + ", ".join(BACKENDS),
                   fix=f"did you mean '{near}'?" if near else "remove it")
            continue
        if value not in out:
            out.append(value)
    return tuple(out)


def _arch_list(r: _Reader, table: Mapping[str, Any], prefix: str, key: str
               ) -> tuple[str, ...] | None:
    """A list of CUDA capabilities or ROCm archs (by ``key``), validated and normalised."""
    if key.startswith("cuda"):
        what, plural = "CUDA capability", "CUDA capabilities"
        example = '"8.0", "9.0a" or "12.1+PTX"'
        parse: Any = lambda v: str(archs.CudaCapability.parse(v))  # noqa: E731
    else:
        what, plural, example = "ROCm arch", "ROCm archs", '"gfx942"'
        parse = archs.parse_rocm_arch
    values = r.strings(table, prefix, key)
    if values is None:
        return None
    if not values:
        r.fail(f"{prefix}.{key}", "is an empty list, which builds nothing",
               expected=f"at least one {what}", fix="remove the key to use the default list")
    out: list[str] = []
    unknown: list[archs.UnknownArchError] = []
    for value in values:
        try:
            parsed = parse(value)
        except archs.UnknownArchError as err:
            if str(err) not in map(str, unknown):  # listed twice: said once
                unknown.append(err)  # left out below, unless nothing else is left
            continue
        except ValueError as err:
            r.fail(f"{prefix}.{key}", str(err), expected=f"{plural} such as {example}",
                   fix="use one of the listed values", cause=err)
        if parsed not in out:
            out.append(parsed)
    if unknown and not out:
        r.fail(f"{prefix}.{key}", str(unknown[0]), expected=f"{plural} such as {example}",
               fix="use one of the listed values", cause=unknown[0])
    # Hugging Face's builder builds the architectures of a list it knows and drops the
    # others without a word; kernelforge drops them too, saying so.
    r.notes.extend(f"{prefix}.{key}: {str(err).partition('; valid:')[0]}; it is left "
                   f"out, and the build is for the others ({', '.join(out)}); fix: remove "
                   "it from the list" for err in unknown)
    return tuple(out)


def _noarch_archs(r: _Reader, table: Mapping[str, Any], key: str
                  ) -> tuple[str, ...] | None:
    # Their builder reads these two keys with underscores (cuda_capabilities), their
    # documentation writes them with dashes: accept both, not both at once.
    snake = key.replace("-", "_")
    if key in table and snake in table:
        r.fail(f"torch-noarch.{snake}", f"both '{key}' and '{snake}' are set",
               expected="one of the two spellings", fix=f"keep only '{key}'")
    if key in table:  # their reader refuses it: "Unknown field cuda-capabilities"
        r.notes.append(f"torch-noarch.{key}: Hugging Face's kernel-builder refuses "
                       f"'{key}' in [torch-noarch] (it reads '{snake}', with '_', though "
                       f"its documentation writes '-'); kernelforge reads both; fix: write "
                       f"{snake} for a file both build")
    return _arch_list(r, table, "torch-noarch", snake if snake in table else key)


def _torch(r: _Reader, value: Any, schema: _Schema, declared: tuple[str, ...] | None
           ) -> TorchSpec:
    """The [torch] section; each key is checked on its own.

    Raises:
        ManifestError: [torch] is not a table (its keys cannot be read at all).
    """
    table = r.table(value, "torch")
    # `src` may be left out (their reader defaults it to []): the kernels' src may list the
    # binding; check_buildable refuses a backend that is left with nothing to compile.
    table = r.known(table, "torch", schema.torch, what=f" ({schema.label})")
    stable = table.get("stable-abi")
    stable_abi: dict[str, str] | None = None
    if stable is not None:
        with r.unit():
            if isinstance(stable, str):
                ver = r.version(table, "torch", "stable-abi") or ""
                stable_abi = {b: ver for b in declared or BACKENDS}
            elif isinstance(stable, dict) and schema.edition == 5:
                # A single version covers every backend; a table only the backends it
                # names (entries for backends missing from general.backends are ignored).
                stable = r.known(stable, "torch.stable-abi", BACKENDS,
                                 parent=(table, schema.torch))
                stable_abi = {b: r.version(stable, "torch.stable-abi", b) or ""
                              for b in stable if declared is None or b in declared}
            else:
                r.fail("torch.stable-abi", f"is {_kind(stable)}",
                       expected='a torch version such as "2.11"' + (
                           ' or a table {cuda = "2.11"}' if schema.edition == 5 else ""),
                       fix='write stable-abi = "2.11"' + (
                           "" if schema.edition == 5 else ", or move the file to edition 5 "
                           "for per-backend versions"))
    return TorchSpec(
        src=r.get(lambda: r.paths(table, "torch", "src")) or (),
        include=r.get(lambda: r.paths(table, "torch", "include")) or (),
        pyext=_pyext(r.get(lambda: r.strings(table, "torch", "pyext"))),
        minver=r.get(lambda: r.version(table, "torch", "minver")),
        maxver=r.get(lambda: r.version(table, "torch", "maxver")),
        cxx_flags=r.get(lambda: r.flags(table, "torch", "cxx-flags")) or (),
        stable_abi=stable_abi,
    )


def _kernels(r: _Reader, data: Mapping[str, Any], declared: tuple[str, ...] | None
             ) -> dict[str, KernelSpec]:
    """The ``[kernel.*]`` sections that are valid; each is checked on its own (a problem
    of one is collected, and the next is read).

    Raises:
        ManifestError: ``kernel`` is not a table.
    """
    section = r.table(data.get("kernel", {}), "kernel")
    kernels: dict[str, KernelSpec] = {}
    for name, value in section.items():
        with r.unit():
            kernel = _kernel(r, name, value, declared)
            # one of a backend general.backends does not list is left out (with a note),
            # its files unchecked, as Hugging Face's builder ignores it
            if declared is None or kernel.backend in declared:
                kernels[name] = kernel
    return kernels


def _kernel(r: _Reader, name: str, table: Any, declared: tuple[str, ...] | None
            ) -> KernelSpec:
    """One ``[kernel.NAME]`` section.

    A section that is not a table, or whose backend is missing or unknown, stops at that
    problem (its keys depend on the backend); the other problems of the section (its
    name, its backend missing from ``general.backends`` where those are known, every
    unknown key, each value) are collected one by one.

    Raises:
        ManifestError: the first problem that stops the section.
    """
    prefix = f"kernel.{name}"
    if not isinstance(table, dict):
        r.fail(prefix, f"is {_kind(table)}, not a table",
               expected="kernel sections named [kernel.<name>]",
               fix="put the keys under a [kernel.<name>] header, not [kernel]")
    if not _KERNEL_NAME_RE.match(name):
        r.flag(prefix, f"'{name}' is not a valid kernel section name",
               expected="ASCII letters, digits, '_' and '-' (a folder name of the build)",
               fix=f"rename [{prefix}], e.g. to "
                   f"[kernel.{suggest_name(name).replace('-', '_')}]")
    if "backend" not in table:
        r.fail(f"{prefix}.backend", "missing required key 'backend'",
               expected="one of " + ", ".join(KERNEL_BACKENDS),
               fix=f'add backend = "cuda" (or another backend) to [{prefix}]')
    backend = table["backend"]
    if backend not in KERNEL_BACKENDS:
        near = archs.closest(str(backend), KERNEL_BACKENDS)
        r.fail(f"{prefix}.backend", f"unknown kernel backend {backend!r}",
               expected="one of " + ", ".join(KERNEL_BACKENDS),
               fix=f"did you mean '{near}'?" if near else "use one of the listed backends")
    if declared is not None and backend not in declared and backend in KERNEL_BACKENDS:
        # as in Hugging Face's builder, which builds the listed backends only
        r.notes.append(f"[{prefix}] is for backend '{backend}', which general.backends "
                       f"({', '.join(declared)}) does not list: it is not built (add "
                       f"'{backend}' to general.backends to build it)")
    allowed = _KERNEL_COMMON | _KERNEL_EXTRA[backend]
    foreign: set[str] = set()
    for key in table:
        owner = next((b for b, keys in _KERNEL_EXTRA.items() if key in keys), None)
        if key not in allowed and owner is not None:
            foreign.add(key)
            counterpart = _COUNTERPART.get(key)
            r.flag(f"{prefix}.{key}", f"'{key}' applies to {owner} kernels, and this "
                   f"kernel has backend = \"{backend}\"",
                   expected="keys of a " + backend + " kernel: "
                            + ", ".join(sorted(allowed)),
                   fix=f"use '{counterpart}'" if counterpart in allowed else "remove it")
    table = r.known({k: v for k, v in table.items() if k not in foreign}, prefix, allowed,
                    ("depends", "src"), what=f" for a {backend} kernel")
    if table.get("src") == [] and (declared is None or backend in declared):
        # Hugging Face's builder stops on it ("SOURCES argument is required").
        r.flag(f"{prefix}.src", "is an empty list: a kernel section needs at least one "
               "source, and Hugging Face's builder stops on one without",
               expected="the kernel's source files",
               fix=f"list the kernel's sources in {prefix}.src, or remove [{prefix}]")
    depends = r.get(lambda: r.strings(table, prefix, "depends")) or ()
    for dep in depends:
        if dep not in KNOWN_DEPENDS:
            # Suggest only what `kernelforge build` resolves: a name Hugging Face's
            # builder knows but kernelforge cannot resolve is refused by `check`.
            resolvable = _resolvable_depends()
            near = archs.closest(dep, resolvable)
            r.flag(f"{prefix}.depends", f"unknown dependency '{dep}'",
                   expected="one of " + ", ".join(KNOWN_DEPENDS) + " (kernelforge "
                            "builds with: " + ", ".join(resolvable) + ")",
                   fix=f"did you mean '{near}'?" if near else "remove it")
    return KernelSpec(
        name=name, backend=backend, depends=depends,
        src=r.get(lambda: r.paths(table, prefix, "src")) or (),
        include=r.get(lambda: r.paths(table, prefix, "include")) or (),
        cxx_flags=r.get(lambda: r.flags(table, prefix, "cxx-flags")) or (),
        cuda_capabilities=r.get(lambda: _arch_list(r, table, prefix, "cuda-capabilities")),
        cuda_flags=r.get(lambda: r.flags(table, prefix, "cuda-flags")) or (),
        cuda_minver=r.get(lambda: r.version(table, prefix, "cuda-minver")),
        rocm_archs=r.get(lambda: _arch_list(r, table, prefix, "rocm-archs")),
        hip_flags=r.get(lambda: r.flags(table, prefix, "hip-flags")) or (),
        sycl_flags=r.get(lambda: r.flags(table, prefix, "sycl-flags")) or (),
    )


def _resolvable_depends() -> list[str]:
    """The ``depends`` names ``kernelforge build`` resolves, ``torch`` first."""
    from kernelforge.build.toolchain import BUILTIN_DEPENDS, HEADER_PACKAGES

    return [d for d in KNOWN_DEPENDS if d in BUILTIN_DEPENDS or d in HEADER_PACKAGES]


def check_project(path: str | Path) -> Manifest:
    """Load the manifest and check that the project's files are where it says.

    Every ``src`` file (of ``[torch]`` and each kernel) must exist, every ``include``
    must be a directory, and ``torch-ext/<python_name>/__init__.py`` must exist. The
    files are checked only when the manifest is valid, and then all of them.

    Args:
        path: the project directory, or its ``build.toml``.

    Returns:
        The :class:`Manifest`.

    Raises:
        ManifestError: the problems of the manifest (see :func:`load_manifest`), or else
            every missing file, each naming the key that lists it.
        ValueError: ``path`` is an empty or blank string.
    """
    m = load_manifest(path)
    r = _Reader(m.path)
    lists: list[tuple[str, tuple[str, ...], bool]] = []
    if m.torch is not None:
        lists += [("torch.src", m.torch.src, False), ("torch.include", m.torch.include, True)]
    for k in m.kernels.values():
        lists += [(f"kernel.{k.name}.src", k.src, False),
                  (f"kernel.{k.name}.include", k.include, True)]
    for key, names, is_dir in lists:
        for name in names:
            target = m.root / name
            kind = "directory" if is_dir else "file"
            try:
                ok = target.is_dir() if is_dir else target.is_file()
            except OSError as err:  # a name too long for the file system, say
                r.flag(key, f"lists '{name}', which the file system cannot look up "
                       f"({err.strerror or err})", expected=f"a {kind} relative to {m.root}",
                       fix=f"correct or shorten '{name}' in {key}")
                continue
            if not ok and _exists(target):
                r.flag(key, f"lists '{name}', but {target} is {_wrong_kind(target, is_dir)}",
                       expected=f"a {kind} relative to {m.root}",
                       fix=_wrong_kind_fix(target, name, key, is_dir))
            elif not ok:
                near = _nearest_path(m.root, name, is_dir=is_dir)
                if near is not None and not is_dir and _suggests_another_file(name, near,
                                                                               names):
                    near = None
                fix = f"create {name} or remove it from {key}"
                r.flag(key, f"lists '{name}', but {target} is not an existing {kind}",
                       expected=f"a {kind} relative to {m.root}",
                       fix=f"did you mean '{near}'? (paths are matched exactly, case "
                           f"included, with '/' between folders); or {fix}" if near else fix)
    package = m.root / "torch-ext" / m.python_name / "__init__.py"
    try:
        missing = not package.is_file()
    except OSError as err:  # a name too long for the file system
        r.flag("general.name", f"the Python package of kernel '{m.name}', torch-ext/"
               f"{m.python_name}/, cannot be looked up ({err.strerror or err})",
               expected="a name the file system can hold as a folder name",
               fix="shorten general.name")
        missing = False
    if missing:
        others = _other_packages(m.root / "torch-ext", m.python_name)
        fix = (f"create torch-ext/{m.python_name}/__init__.py, or correct general.name"
               if len(others) != 1 else
               f"rename torch-ext/{others[0]}/ to torch-ext/{m.python_name}/"
               + (f", or set general.name = \"{others[0].replace('_', '-')}\""
                  if _NAME_RE.match(others[0].replace("_", "-")) else ""))
        r.flag("general.name", f"the Python package of kernel '{m.name}' is missing: "
               f"{package} does not exist"
               + (f" (torch-ext/ holds {', '.join(f'{o}/' for o in others)})"
                  if others else ""),
               expected=f"torch-ext/{m.python_name}/__init__.py (the package is named "
                        "after general.name, with '-' as '_')", fix=fix)
    r.done()
    return m


def _wrong_kind(target: Path, is_dir: bool) -> str:
    """What ``target``, listed as a folder (``is_dir``) or a file, is instead."""
    if is_dir:
        return "not a directory"
    return "a directory, not a file" if target.is_dir() else "not a regular file"


def _wrong_kind_fix(target: Path, name: str, key: str, is_dir: bool) -> str:
    """The fix for :func:`_wrong_kind`: a source list names files, an include list
    folders; a pipe or device where a source is meant is neither, and no listing fixes
    it (the compiler would wait on a pipe for ever)."""
    if is_dir:
        return (f"list the folder that holds the headers (include takes folders), or "
                f"remove '{name}' from {key}")
    if target.is_dir():
        return (f"list the source files themselves ({key} takes files, not folders), or "
                f"remove '{name}' from it")
    return f"replace {name} with the source file it stands for, or remove it from {key}"


def _other_packages(folder: Path, meant: str) -> list[str]:
    """The Python packages in ``folder`` (``torch-ext``), sorted: where ``meant``'s is
    missing, the one there is likely it under another name."""
    try:
        return sorted(e.name for e in os.scandir(folder) if e.name != meant
                      and e.is_dir() and (Path(e.path) / "__init__.py").is_file())
    except OSError:
        return []


def _exists(path: Path) -> bool:
    """Whether something is at ``path``, a link followed (False where it cannot be
    looked up)."""
    try:
        return path.exists()
    except OSError:
        return False


def _suggests_another_file(name: str, near: str, listed: Iterable[str]) -> bool:
    """Whether ``near``, the project file nearest the missing ``src`` entry ``name``, is
    another file rather than the one meant: one the same list names already (the
    binding's header beside a missing ``torch_binding.cpp``), or a header where ``name``
    is a source that a backend compiles, which would leave nothing to compile in its
    place."""
    from kernelforge.build.plan import COMPILED_SUFFIXES

    normal = posixpath.normpath(near)
    if any(posixpath.normpath(n.replace("\\", "/")) == normal for n in listed if n != name):
        return True
    compiled = {s for suffixes in COMPILED_SUFFIXES.values() for s in suffixes}
    return (PurePosixPath(name).suffix.lower() in compiled
            and PurePosixPath(near).suffix.lower() not in compiled)


def _nearest_path(root: Path, name: str, *, is_dir: bool) -> str | None:
    """The path of the project that ``name``, a ``src`` or ``include`` entry that does not
    exist, likely means: the same path in another case (as a file system that ignores
    case finds it), with '/' for '\\', or a near name in its folder; None if none."""
    if (root / name).exists():
        return None  # there, but not a file (or not a folder): that is what to say
    parts = [p for p in name.replace("\\", "/").split("/") if p not in ("", ".")]
    here, found = root, []
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        if part == "..":
            return None
        try:
            names = [e.name for e in os.scandir(here)
                     if (e.is_dir() if is_dir or not last else e.is_file())]
        except OSError:
            return None
        same = [n for n in names if n == part] or [n for n in names
                                                      if n.lower() == part.lower()]
        pick = same[0] if same else archs.closest(part, names) if last else None
        if pick is None:
            return None
        found.append(pick)
        here = here / pick
    near = "/".join(found)
    return near if found and near != name else None


def dependency_error(m: Manifest, kernel: str, dep: str, err: Exception
                     ) -> ManifestError | None:
    """The error for the ``depends`` entry ``dep`` of ``[kernel.<kernel>]`` that could not
    be resolved (``err``, from ``kernelforge.build.toolchain.resolve_dependency``), when
    kernelforge resolves no such dependency at all: a mistake of the manifest, which
    ``check`` and ``build`` word alike. ``None`` for one it resolves that is not
    installed here (``err`` says how to install it).
    """
    from kernelforge.build.toolchain import BUILTIN_DEPENDS, HEADER_PACKAGES

    if dep in BUILTIN_DEPENDS or dep in HEADER_PACKAGES:
        return None
    error = ManifestError(m.path, f"kernel.{kernel}.depends", str(err),
                          fix=f"use one of those, or remove '{dep}' and list a copy of its "
                              "headers in include")
    error.__cause__ = err
    return error


def check_buildable(m: Manifest) -> list[str]:
    """Check what ``kernelforge build`` needs beyond a valid manifest, without building.

    The rules are the builder's own: every backend it compiles (cpu, cuda, rocm) that
    ``general.backends`` lists needs a ``[kernel.*]`` section and a file to compile, the
    torch (and CUDA) version range must not be empty, and every ``depends`` entry must be
    one the builder resolves (:func:`dependency_error`). The files of the Python package
    must be ones the build can ship (no ``_ops.py``, ``metadata.json`` or
    ``metadata.json.sigstore`` it would ship, no symlink loop or dangling link:
    ``kernelforge.build.plan.package_problems``). A dependency whose pinned package is
    not installed here is not an error (it may be installed where the project is
    built); it gives a note, as does a ``[general.hub] branch`` that publishing ignores
    (:func:`hub_branch_note`).
    Every rule is checked, and the error lists each one that is broken.

    Args:
        m: a manifest from :func:`check_project`.

    Returns:
        Notes for people (one line each), possibly none.

    Raises:
        ManifestError: naming the key at fault and the fix, for each broken rule.
    """
    from packaging.version import Version

    from kernelforge.build.plan import COMPILED_SUFFIXES, package_problems
    from kernelforge.build.toolchain import resolve_dependency
    from kernelforge.errors import ToolchainError

    r = _Reader(m.path)
    # The Python package is shipped by every build, noarch or not: the files it cannot
    # ship are refused as the build refuses them, in its words.
    for path, problem, fix in package_problems(m.root, m.python_name, m.pyext):
        r.flag(None, f"{path} {problem}", fix=fix)
    for key, low, high in (("torch", m.torch.minver if m.torch else None,
                            m.torch.maxver if m.torch else None),
                           ("general.cuda", m.cuda_minver, m.cuda_maxver)):
        if low and high and key == "torch":  # a torch major.minor <= maxver, as built
            low = str(torch_series(low))
        if low and high and Version(low) > Version(high):  # as the build compares them
            r.flag(f"{key}.maxver", f"is {high}, lower than {key}.minver {low}, so no "
                   "version can be built", expected=f"{key}.maxver >= {key}.minver",
                   fix=f"raise {key}.maxver or lower {key}.minver")
    notes = [*m.notes, *(note for note in (hub_branch_note(m),) if note)]
    if m.noarch:
        r.done()
        return notes
    skipped = [b for b in m.backends if b not in COMPILED_SUFFIXES]
    if skipped:
        notes.append(f"general.backends lists {', '.join(skipped)}, which kernelforge checks "
                     "but does not build: 'kernelforge build' skips "
                     + ("them" if len(skipped) > 1 else "it")
                     + ("" if len(skipped) < len(m.backends) else
                        ", so it builds nothing for this project"))
    needs: dict[str, tuple[list[str], str]] = {}  # dependency -> (kernels, why)
    for backend in m.backends:
        suffixes = COMPILED_SUFFIXES.get(backend)
        if suffixes is None:
            continue  # not compiled by kernelforge: the build skips it (noted above)
        kernels = m.kernels_for(backend)
        if not kernels:
            r.flag("general.backends", f"lists '{backend}', but no [kernel.*] section has "
                   f'backend = "{backend}", so kernelforge cannot build it',
                   expected="a [kernel.<name>] section for every compiled backend listed",
                   fix=f"add a [kernel.<name>] section with backend = \"{backend}\", or "
                       f"remove '{backend}' from general.backends")
            continue  # the rules below are about the backend's kernel sections
        listed = list(m.torch.src if m.torch else ()) + [s for k in kernels for s in k.src]
        with r.unit():  # a problem found for two backends is listed once
            check_compiled_sources(m, kernels, suffixes)
        _check_ninja_names(r, m, kernels, suffixes)
        if not any(PurePosixPath(s).suffix in suffixes for s in listed):
            key = f"kernel.{kernels[0].name}.src"
            r.flag(key, f"backend '{backend}' has nothing to compile: neither torch.src "
                   f"nor the src of its kernels lists a {', '.join(suffixes)} file",
                   expected="the kernel's source files in src",
                   fix=f"list the kernel's sources in {key}")
        for k in kernels:
            for dep in k.depends:
                try:
                    resolve_dependency(dep)
                except ToolchainError as err:
                    unresolvable = dependency_error(m, k.name, dep, err)
                    if unresolvable is not None:
                        r.errors.append(unresolvable)
                        continue
                    named, _why = needs.setdefault(dep, ([], str(err)))
                    if f"kernel.{k.name}" not in named:
                        named.append(f"kernel.{k.name}")
    notes += [f"{', '.join(named)}: {why}" for named, why in needs.values()]  # once each
    r.done()
    return notes


def _check_ninja_names(r: _Reader, m: Manifest, kernels: Iterable[KernelSpec],
                       suffixes: Collection[str]) -> None:
    """Flag the sources (``suffixes`` files) and include directories of ``kernels`` and
    ``[torch]`` whose name has a character that the ninja files of torch's extension
    tooling cannot express, which the build refuses (``compile.check_ninja_paths``)."""
    from kernelforge.build.compile import NINJA_UNSAFE_IN_FLAGS, NINJA_UNSAFE_IN_PATHS

    lists = [("torch", m.torch.src if m.torch else (), m.torch.include if m.torch else ())]
    lists += [(f"kernel.{k.name}", k.src, k.include) for k in kernels]
    for section, sources, includes in lists:
        named = [(f"{section}.src", n, NINJA_UNSAFE_IN_PATHS) for n in sources
                 if PurePosixPath(n).suffix in suffixes]
        named += [(f"{section}.include", n, NINJA_UNSAFE_IN_FLAGS) for n in includes]
        for key, name, unsafe in named:
            bad = next((c for c in unsafe if c in name), None)
            if bad is not None:
                r.flag(key, f"'{name}' contains {unsafe[bad]}, which the ninja files of "
                       "torch's extension tooling cannot express, so the build would stop",
                       expected=f"names without {', '.join(unsafe.values())}",
                       fix=f"rename it (and its mention in {key}) without {unsafe[bad]}")


def hub_branch_note(m: Manifest) -> str | None:
    """Why ``[general.hub] branch`` does nothing here, if it is set to another branch than
    ``v<version>``: Hugging Face's ``kernel-builder upload`` sends the builds to that
    branch, but ``kernelforge publish`` always writes them to ``v<version>``, the branch
    that loading by ``version=`` reads (and a signed build's ``version`` must match).
    The key is kept valid: projects written for their builder carry it."""
    if m.hub_branch is None:
        return None
    version = m.version if m.version is not None else 1
    if m.hub_branch == f"v{version}":
        return None
    return (f"general.hub.branch = {m.hub_branch!r} is ignored: kernelforge publish writes "
            f"the builds to branch v{version} (from general.version), the branch that "
            f"get_kernel(..., version={version}) loads; the key is for Hugging Face's "
            f"kernel-builder upload (remove it, or set it to \"v{version}\", to silence "
            "this note)")


def torch_series(version: str) -> Version:
    """The torch major.minor of ``version`` (``2.12.1`` -> ``2.12``): what a variant is
    built for (``torch212``), and so what ``[torch] maxver`` is compared with, as in
    Hugging Face's build matrix."""
    from packaging.version import Version

    return Version(".".join(str(n) for n in (Version(version).release + (0,))[:2]))


def check_compiled_sources(m: Manifest, kernels: Iterable[KernelSpec],
                           suffixes: Collection[str]) -> None:
    """Refuse ``src`` lists that torch's extension tooling cannot compile: a source file
    (a ``suffixes`` file) listed twice in one list, or in ``torch.src`` and a kernel's
    (it would be compiled and linked twice), or two sources of one list that differ only
    in their suffix (``foo.cu`` and ``foo.cpp``), which would compile to the same object
    file (objects are named after the source without its suffix).

    A source that several ``[kernel.*]`` sections list is fine: the build compiles it
    once, with the settings of all of them, as Hugging Face's builder does.

    Args:
        m: the manifest.
        kernels: the kernel sections built together (one backend's).
        suffixes: the suffixes of the files that backend compiles.

    Raises:
        ManifestError: naming the key and the files.
    """
    r = _Reader(m.path)
    lists = [("torch.src", m.torch.src if m.torch else ())]
    lists += [(f"kernel.{k.name}.src", k.src) for k in kernels]
    binding: dict[str, str] = {}
    for key, names in lists:
        listed: dict[str, str] = {}
        stems: dict[str, str] = {}
        for name in names:
            if PurePosixPath(name).suffix not in suffixes:
                continue
            normal = posixpath.normpath(name.replace("\\", "/"))
            for where, seen in ((key, listed), ("torch.src", binding)):
                if normal not in seen:
                    continue
                first = seen[normal]
                again = "twice" if where == key else f"and {where} lists it too"
                shown = f"'{first}'" + (f" (as '{name}')" if first != name else "")
                r.fail(key, f"lists the source {shown} {again}, so it would be compiled "
                       "and linked twice", expected="each source file listed once",
                       fix=f"remove the second '{name}'" if where == key else
                       f"keep '{name}' in one of {where} and {key}")
            listed[normal] = name
            stem = posixpath.splitext(normal)[0]
            if stem in stems:
                r.fail(key, f"lists '{stems[stem]}' and '{name}', which would compile to the "
                       f"same object file {stem}.o (objects are named after the source "
                       "without its suffix)",
                       expected="sources of one section with distinct names apart from "
                                "their suffixes",
                       fix=f"rename one of them (e.g. {stem}_host{posixpath.splitext(name)[1]})"
                           ", or move it to another [kernel.*] section")
            stems[stem] = name
        if key == "torch.src":
            binding = listed
