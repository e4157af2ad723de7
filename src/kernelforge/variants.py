"""Build variants: their names, the facts of a system, and which variant fits it.

A build variant is a directory under ``build/`` named for the environment it was compiled
for (``torch211-cxx11-cu130-x86_64-linux``). :class:`Variant` parses such names,
:func:`detect_system` gathers :class:`SystemFacts`, and :func:`resolve_variant` picks a
variant as a pure function of those facts, with a reason per candidate. Names and rules
follow Hugging Face's ``kernels`` loader, so builds load with either tool.

Example:
    >>> facts = SystemFacts(torch_version=(2, 11, 0), cxx11_abi=True, backend="cuda",
    ...                     backend_version=(12, 9), cpu="x86_64", os="linux")
    >>> res = resolve_variant(["torch211-cxx11-cu128-x86_64-linux", "torch-cuda"], facts)
    >>> str(res.chosen)
    'torch211-cxx11-cu128-x86_64-linux'
"""

from __future__ import annotations

import ast
import enum
import importlib.util
import platform
import re
import sys
import sysconfig
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernelforge.errors import KernelforgeError, VariantError, VariantNotFoundError

#: Backends a system (and a build) can have.
BACKENDS = ("cuda", "rocm", "xpu", "metal", "cpu", "cann", "neuron", "tpu")
# Compute tags that carry a version: tag prefix -> backend.
_VERSIONED = {"cu": "cuda", "rocm": "rocm", "xpu": "xpu", "cann": "cann"}
_PREFIX = {backend: prefix for prefix, backend in _VERSIONED.items()}
# Directory name of a pure-Python build per backend (Ascend builds say "npu").
_NOARCH_DIR = {b: ("npu" if b == "cann" else b) for b in BACKENDS}
_NOARCH_BACKEND = {d: b for b, d in _NOARCH_DIR.items()}
_ABI_TAG: dict[bool | None, str] = {True: "cxx11", False: "cxx98", None: "unknown"}
#: How messages name a backend.
BACKEND_LABELS = {"cuda": "CUDA", "rocm": "ROCm", "xpu": "XPU", "cann": "CANN", "metal": "Metal"}
# Metal builds use a shader language version that needs this macOS or newer.
_METAL_MIN_MACOS = (26, 0)

_FORMS = (
    "torch<MAJ><MIN>[-cxx11|-cxx98]-<compute>-<cpu>-<os>, "
    "torch-stable-abi<MAJ><MIN>-<compute>-<cpu>-<os>, tvm-ffi<MAJ><MIN>-<compute>-<cpu>-<os>, "
    "torch-<backend> or torch-universal; <compute> is cu<MAJ><MIN>, rocm<MAJ><MIN>, "
    "xpu<YEAR><MINOR>, cann<MAJ><MIN>, cpu, metal, neuron or tpu"
)
# Digits are ASCII only (re.ASCII): "torch\u066211" is not torch 2.11, and Hugging Face's
# loader, whose versions are PEP 440 versions, skips such names too.
_VERSION = r"(?P<major>\d)(?P<minor>0|[1-9]\d*)"
_TAIL = r"-(?P<compute>[a-z]+\d*)-(?P<cpu>[a-z][a-z0-9_]*)-(?P<os>[a-z][a-z0-9_]*)"
_ARCH_RE = re.compile(rf"torch{_VERSION}(?:-(?P<abi>cxx11|cxx98))?{_TAIL}", re.ASCII)
_STABLE_RE = re.compile(rf"torch-stable-abi{_VERSION}{_TAIL}", re.ASCII)
_TVM_RE = re.compile(rf"tvm-ffi{_VERSION}{_TAIL}", re.ASCII)
_NOARCH_RE = re.compile(r"torch-(?P<name>[a-z]+)", re.ASCII)
# The last digit is the minor version: cu126 is 12.6, xpu20252 is 2025.2.
_COMPUTE = r"(?P<prefix>cu|rocm|xpu|cann)(?P<major>[1-9]\d*)(?P<minor>\d)"
_COMPUTE_RE = re.compile(_COMPUTE, re.ASCII)


class VariantKind(str, enum.Enum):
    """What a build variant holds."""

    ARCH = "arch"  #: compiled against one torch minor version
    STABLE_ABI = "stable-abi"  #: compiled against torch's stable ABI
    TVM_FFI = "tvm-ffi"  #: compiled against tvm-ffi
    NOARCH = "noarch"  #: pure Python for one backend
    UNIVERSAL = "universal"  #: legacy pure Python for any backend


_COMPILED = (VariantKind.ARCH, VariantKind.STABLE_ABI, VariantKind.TVM_FFI)


def _variant_kind(kind: object) -> VariantKind:
    """``kind`` as a :class:`VariantKind`, refused as the other values of a
    :class:`Variant` are: with a :class:`VariantError`, which the enum's own
    ``ValueError`` is not, naming the kinds there are."""
    try:
        return VariantKind(kind)
    except ValueError:
        kinds = ", ".join(repr(k.value) for k in VariantKind)
        raise VariantError(f"kind: {kind!r} is not a variant kind; expected one of "
                           f"{kinds} (or the VariantKind itself)") from None


def _ver(v: tuple[int, ...] | None) -> str:
    return "?" if v is None else ".".join(str(x) for x in v)


def _unknown_backend(backend: object) -> str:
    from kernelforge.archs import closest

    near = closest(backend, BACKENDS) if isinstance(backend, str) else None
    return (f"unknown backend {backend!r}; expected one of {', '.join(BACKENDS)}"
            + (f" (did you mean {near!r}?)" if near else ""))


def _backend_label(backend: str | None, version: tuple[int, int] | None) -> str:
    label = BACKEND_LABELS.get(backend or "", backend or "any backend")
    return f"{label} {_ver(version)}" if version is not None else label


@dataclass(frozen=True)
class Variant:
    """A build variant name as a typed value; ``str(variant)`` is the canonical name.

    Attributes:
        kind: what the variant holds (:class:`VariantKind`; its string value is taken
            too).
        version: ``(major, minor)`` of torch (arch), of the stable ABI, or of tvm-ffi;
            ``None`` if pure Python.
        cxx11: ABI tag of a torch arch build: ``-cxx11`` ``True``, ``-cxx98`` ``False``,
            no tag ``None``.
        backend: one of ``BACKENDS`` (``"cuda"``, ``"rocm"``, ``"cpu"``, ...); ``None``
            for ``torch-universal``.
        backend_version: ``(12, 8)`` for ``cu128``, ``(2025, 2)`` for ``xpu20252``;
            ``None`` for unversioned backends.
        cpu: ``"x86_64"``, ``"aarch64"``, ...; ``None`` for pure-Python builds.
        os: ``"linux"``, ``"darwin"``, ``"windows"``; ``None`` for pure-Python builds.

    Raises:
        VariantError: the values have no canonical name that reads back as them (a
            compiled kind without a CPU, a backend that kind cannot have, ...).

    Example:
        >>> v = Variant.parse("torch29-cxx11-cu130-aarch64-linux")
        >>> v.torch_version, v.backend, v.backend_version
        ((2, 9), 'cuda', (13, 0))
    """

    kind: VariantKind
    version: tuple[int, int] | None = None
    cxx11: bool | None = None
    backend: str | None = None
    backend_version: tuple[int, int] | None = None
    cpu: str | None = None
    os: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", _variant_kind(self.kind))
        # A value is valid exactly when its canonical name reads back as the same value.
        name = str(self)
        parsed, problem = _parse(name)
        # (not dataclasses.astuple, which deep-copies: too slow for a loop over a listing)
        mine = (self.kind, self.version, self.cxx11, self.backend, self.backend_version,
                self.cpu, self.os)  # fmt: skip
        if parsed != mine:
            why = problem or "which reads back as a different value"
            raise VariantError(f"{self!r} has no canonical variant name: {name!r}, {why}")

    @classmethod
    def parse(cls, name: str) -> Variant:
        """Parse a variant directory name.

        Args:
            name: a variant directory name, e.g. ``"torch213-cxx11-cu130-x86_64-linux"``
                or ``"torch-cpu"``.

        Returns:
            The :class:`Variant`; ``str()`` of it gives ``name`` back.

        Raises:
            VariantError: ``name`` is not a variant name; the message lists the forms.
        """
        fields, problem = _parse(name)
        if fields is None:
            raise VariantError(
                f"{name!r} is not a build variant name ({problem}); expected {_FORMS}"
            )
        return cls(*fields)

    @property
    def compute(self) -> str | None:
        """The compute tag of a compiled build (``cu128``, ``cpu``); ``None`` otherwise."""
        if self.kind not in _COMPILED or self.backend is None:
            return None
        return _compute_tag(self.backend, self.backend_version)

    @property
    def torch_version(self) -> tuple[int, int] | None:
        """Torch (or stable ABI) version of a torch build; ``None`` for other kinds."""
        return self.version if self.kind in (VariantKind.ARCH, VariantKind.STABLE_ABI) else None

    def __str__(self) -> str:
        if self.kind is VariantKind.UNIVERSAL:
            return "torch-universal"
        if self.kind is VariantKind.NOARCH:
            return f"torch-{_NOARCH_DIR.get(str(self.backend), self.backend)}"
        major, minor = self.version or (0, 0)
        tail = f"{self.compute}-{self.cpu}-{self.os}"
        if self.kind is VariantKind.STABLE_ABI:
            return f"torch-stable-abi{major}{minor}-{tail}"
        if self.kind is VariantKind.TVM_FFI:
            return f"tvm-ffi{major}{minor}-{tail}"
        abi = "" if self.cxx11 is None else ("-cxx11" if self.cxx11 else "-cxx98")
        return f"torch{major}{minor}{abi}-{tail}"


_Fields = tuple[Any, ...]  # Variant's fields, in order


def _parse(name: object) -> tuple[_Fields | None, str]:
    """The fields of the variant ``name`` denotes, or ``None`` and what is wrong with it."""
    if not isinstance(name, str):
        return None, f"a name is a string, not {type(name).__name__}"
    if name == "torch-universal":
        return (VariantKind.UNIVERSAL, None, None, None, None, None, None), ""
    for kind, pattern in (
        (VariantKind.STABLE_ABI, _STABLE_RE),
        (VariantKind.TVM_FFI, _TVM_RE),
        (VariantKind.ARCH, _ARCH_RE),
    ):
        m = pattern.fullmatch(name)
        if m is None:
            continue
        tag = m["compute"]
        compute = _COMPUTE_RE.fullmatch(tag)
        if compute is not None:
            backend = _VERSIONED[compute["prefix"]]
            bver: tuple[int, int] | None = (int(compute["major"]), int(compute["minor"]))
        elif tag in BACKENDS and tag not in _PREFIX:
            backend, bver = tag, None
        elif tag in ("cxx11", "cxx98"):
            return None, "expected <compute>-<cpu>-<os> after the ABI tag"
        else:
            return None, f"unknown compute tag {tag!r}"
        abi = m.groupdict().get("abi")
        cxx11 = None if abi is None else abi == "cxx11"
        version = (int(m["major"]), int(m["minor"]))
        return (kind, version, cxx11, backend, bver, m["cpu"], m["os"]), ""
    m = _NOARCH_RE.fullmatch(name)
    if m is None:
        return None, "unrecognised form"
    if m["name"] not in _NOARCH_BACKEND:
        return None, f"unknown pure-Python backend {m['name']!r}"
    return (VariantKind.NOARCH, None, None, _NOARCH_BACKEND[m["name"]], None, None, None), ""


def noarch_variant(backend: str) -> Variant:
    """The pure-Python variant for ``backend``: ``torch-cuda``, ``torch-cpu``, ...

    ``"universal"`` gives the legacy ``torch-universal``; ``"npu"`` is accepted for cann.

    Raises:
        VariantError: ``backend`` is not a known backend.
    """
    if backend == "universal":
        return Variant(VariantKind.UNIVERSAL)
    backend = _NOARCH_BACKEND.get(backend, backend)
    if backend not in BACKENDS:
        raise VariantError(_unknown_backend(backend))
    return Variant(VariantKind.NOARCH, backend=backend)


def _running_python() -> tuple[int, int]:
    return (sys.version_info.major, sys.version_info.minor)


@dataclass(frozen=True)
class SystemFacts:
    """What variant choice needs to know about a process, as plain values.

    :func:`detect_system` gives this process's; make one by hand (or with
    ``dataclasses.replace``) to ask :func:`resolve_variant` about another system.

    Attributes:
        torch_version: ``(major, minor, patch)`` of the installed torch; ``None`` when
            torch is not installed.
        cxx11_abi: whether torch uses the C++11 ABI; ``None`` off Linux, where names
            carry no ABI tag.
        backend: one of ``BACKENDS``: the compute backend torch was built for (without
            torch: cuda when a CUDA runtime library is found, else cpu).
        backend_version: ``(12, 9)`` for CUDA 12.9, ``(6, 3)`` for ROCm 6.3,
            ``(2025, 2)`` for XPU; ``None`` if unversioned.
        cpu: the machine, as variant names spell it: ``"x86_64"``, ``"aarch64"``.
        os: ``"linux"``, ``"darwin"`` or ``"windows"``.
        gpu_archs: the GPU this process runs on (torch's current device) as a CUDA
            capability (``"9.0"``) or ROCm arch (``"gfx942"``); ``()`` if none.
        python_version: ``(major, minor)`` of the interpreter; by default the running
            one's.
        free_threaded: a free-threaded (no-GIL) interpreter.
        macos_version: ``(major, minor)`` of macOS; ``None`` off macOS or when unknown.
        tvm_ffi_version: ``(major, minor)`` of tvm-ffi; ``None`` when it is not
            installed.

    Raises:
        VariantError: ``backend`` is not one of ``BACKENDS``.
    """

    torch_version: tuple[int, int, int] | None
    cxx11_abi: bool | None
    backend: str
    backend_version: tuple[int, int] | None
    cpu: str
    os: str
    gpu_archs: tuple[str, ...] = ()
    python_version: tuple[int, int] = field(default_factory=_running_python)
    free_threaded: bool = False
    macos_version: tuple[int, int] | None = None
    tvm_ffi_version: tuple[int, int] | None = None

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise VariantError(_unknown_backend(self.backend))

    def describe(self) -> str:
        """One line for people, e.g. ``torch 2.11.0 (cxx11 ABI), CUDA 12.9, GPU 9.0,
        x86_64-linux, Python 3.12``."""
        torch = f"torch {_ver(self.torch_version)}" if self.torch_version else "no torch"
        if self.cxx11_abi is not None:
            torch += " (cxx11 ABI)" if self.cxx11_abi else " (pre-cxx11 ABI)"
        parts = [torch, _backend_label(self.backend, self.backend_version)]
        if self.gpu_archs:
            parts.append(f"GPU {', '.join(self.gpu_archs)}")
        parts.append(f"{self.cpu}-{self.os}")
        if self.macos_version:
            parts.append(f"macOS {_ver(self.macos_version)}")
        parts.append(f"Python {_ver(self.python_version)}{'t' if self.free_threaded else ''}")
        if self.tvm_ffi_version:
            parts.append(f"tvm-ffi {_ver(self.tvm_ffi_version)}")
        return ", ".join(parts)


@dataclass(frozen=True)
class Decision:
    """One line of a resolution trace: a candidate name, accepted or not, and why."""

    variant: str
    accepted: bool
    reason: str

    def __str__(self) -> str:
        return f"{self.variant}: {'accepted' if self.accepted else 'rejected'}, {self.reason}"


@dataclass(frozen=True)
class Resolution:
    """The outcome of :func:`resolve_variant`.

    Attributes:
        chosen: the preferred accepted variant; ``None`` when nothing fits.
        ranked: every accepted variant, most preferred first.
        trace: a :class:`Decision` per distinct candidate: accepted ones first, in
            preference order.
        facts: the facts the choice was made for.
        backend: the backend chosen for: the system's, or the override.
    """

    chosen: Variant | None
    ranked: tuple[Variant, ...]
    trace: list[Decision]
    facts: SystemFacts
    backend: str

    def _facts_line(self) -> str:
        forced = "" if self.backend == self.facts.backend else f"; backend chosen: {self.backend}"
        return self.facts.describe() + forced

    def require(self, what: str) -> Variant:
        """Return the chosen variant or raise.

        Args:
            what: the thing being loaded, for the message (``"kernels-community/relu"``).

        Raises:
            VariantNotFoundError: nothing fits; the message lists every candidate with
                the reason it was rejected, and the facts.
        """
        if self.chosen is None:
            raise VariantNotFoundError(what, [str(d) for d in self.trace], self._facts_line())
        return self.chosen

    def explain(self) -> str:
        """A multi-line account of the choice, for ``--verbose`` output and errors."""
        lines = [f"system: {self._facts_line()}"]
        if not self.trace:
            lines.append("no candidate variants")
        for d in self.trace:
            mark = "accepted" if d.accepted else "rejected"
            if self.chosen is not None and d.variant == str(self.chosen):
                mark = "chosen"
            lines.append(f"  {mark:8} {d.variant}: {d.reason}")
        return "\n".join(lines)


#: Where the variants of a backend torch here does not support are found instead.
OTHER_MACHINES = ("'kernelforge versions REPO' lists every variant; 'kernelforge download "
                  "--all-variants' of a project's lock file fetches the variants other "
                  "machines need")


def check_backend(backend: str | None, facts: SystemFacts | None = None, *,
                  elsewhere: str = OTHER_MACHINES) -> None:
    """Raise :class:`VariantError` when ``backend`` cannot be chosen in this process (an
    unknown name, or one torch here does not support), before anything is looked up;
    ``facts``: this process's, when the caller has them (else detected); ``elsewhere``:
    how to reach that backend's variants all the same, which the error ends with (the
    caller's words where it already does what :data:`OTHER_MACHINES` says)."""
    if backend is not None:
        _select_backend(facts or detect_system(), backend, elsewhere)


def _select_backend(facts: SystemFacts, backend: str | None,
                    elsewhere: str = OTHER_MACHINES) -> tuple[str, tuple[int, int] | None]:
    """The backend (and its version) to choose for: the system's, or cpu on request."""
    if backend is None or backend == facts.backend:
        return facts.backend, facts.backend_version
    if backend == "cpu":
        return "cpu", None
    if backend not in BACKENDS:
        raise VariantError(f"backend: {_unknown_backend(backend)}")
    raise VariantError(
        f"backend {backend!r} cannot be used here: torch in this process supports "
        f"{facts.backend}" + ("" if facts.backend == "cpu" else " and cpu")
        + f" ({elsewhere})"
    )


def _judge(
    v: Variant, facts: SystemFacts, backend: str, bver: tuple[int, int] | None
) -> tuple[bool, str]:
    """Whether variant ``v`` runs on ``facts`` when choosing for ``backend``, and why."""
    if v.kind is VariantKind.UNIVERSAL:
        return True, "legacy universal pure-Python build, fits any backend"
    if v.kind is VariantKind.NOARCH:
        if v.backend == backend:
            return True, f"pure-Python build for {backend}"
        return False, f"pure-Python build for {v.backend}, the backend here is {backend}"
    if facts.free_threaded and facts.python_version < (3, 15):
        return False, "compiled builds need the stable Python ABI: no free-threaded Python < 3.15"
    if v.cpu != facts.cpu:
        return False, f"built for CPU {v.cpu}, this system's CPU is {facts.cpu}"
    if v.os != facts.os:
        return False, f"built for OS {v.os}, this system's OS is {facts.os}"
    installed = facts.torch_version[:2] if facts.torch_version else None
    have_torch = f"installed torch is {_ver(installed)}" if installed else "torch is not installed"
    if v.kind is VariantKind.ARCH:
        if v.version != installed:
            return False, f"built for torch {_ver(v.version)}, {have_torch}"
        if v.cxx11 is not None and v.cxx11 != facts.cxx11_abi:
            tag, have = _ABI_TAG[v.cxx11], _ABI_TAG[facts.cxx11_abi]
            return False, f"built with the {tag} C++ ABI, torch here uses the {have} ABI"
        framework = f"torch {_ver(v.version)}" + ("" if v.cxx11 is None else " (ABI tag matches)")
    elif v.kind is VariantKind.STABLE_ABI:
        if installed is None or (v.version or (0, 0)) > installed:
            return False, f"built for torch stable ABI {_ver(v.version)}, {have_torch}"
        framework = f"stable ABI {_ver(v.version)} <= torch {_ver(installed)}"
    else:
        if v.version != facts.tvm_ffi_version:
            have = _ver(facts.tvm_ffi_version) if facts.tvm_ffi_version else "not installed"
            return False, f"built for tvm-ffi {_ver(v.version)}, tvm-ffi here is {have}"
        framework = f"tvm-ffi {_ver(v.version)}"
    built = _backend_label(v.backend, v.backend_version)
    here = _backend_label(backend, bver)
    if v.backend == "cuda" and backend == "cuda":
        vv = v.backend_version or (0, 0)
        if bver is None:
            return False, f"built for {built}, the CUDA version here is unknown"
        if vv[0] != bver[0] or vv[1] > bver[1]:
            return (
                False,
                f"built for {built}, {here} here needs a {bver[0]}.x build up to {_ver(bver)}",
            )
    elif v.backend != backend or v.compute != _compute_tag(backend, bver):
        # Other backends must match exactly, by the tag written in the name: with a
        # minor above 9 (ROCm 6.10) the tag "rocm610" also reads as 61.0.
        return False, f"built for {built}, the backend here is {here}"
    elif v.backend == "metal" and (facts.macos_version or (0, 0)) < _METAL_MIN_MACOS:
        have = _ver(facts.macos_version) if facts.macos_version else "unknown"
        return False, f"Metal builds need macOS {_ver(_METAL_MIN_MACOS)}+, macOS here is {have}"
    if v.backend != "cuda" and v.backend_version != bver:
        built = f"{v.compute} (the tag written for {here} too)"
    return True, f"{framework}, {built} on {here}, {v.cpu}-{v.os}"


def _compute_tag(backend: str, version: tuple[int, int] | None) -> str | None:
    """The compute tag a build for ``backend`` ``version`` is named with (``rocm63``,
    ``cpu``); ``None`` for a versioned backend whose version is unknown."""
    if backend not in _PREFIX:
        return backend
    return None if version is None else f"{_PREFIX[backend]}{version[0]}{version[1]}"


def _preference(v: Variant) -> tuple[int, ...]:
    """Sort key, smaller is better: stable ABI (newest ABI first), torch arch (untagged
    before tagged), tvm-ffi, noarch, universal; then the newest backend version."""
    major, minor = v.backend_version or (0, 0)
    if v.kind is VariantKind.STABLE_ABI:
        abi = v.version or (0, 0)
        return (0, -abi[0], -abi[1], -major, -minor)
    if v.kind is VariantKind.ARCH:
        return (1, 0, 0 if v.cxx11 is None else 1, -major, -minor)
    if v.kind is VariantKind.TVM_FFI:
        return (2, 0, 0, -major, -minor)
    return (3 if v.kind is VariantKind.NOARCH else 4, 0, 0, 0, 0)


def resolve_variant(
    candidates: Iterable[str | Variant], facts: SystemFacts, *, backend: str | None = None
) -> Resolution:
    """Choose the build variant that fits ``facts``, recording a decision per candidate.

    Rules: compiled builds need the system's CPU and OS; a ``torch<MAJ><MIN>`` build needs
    that torch major.minor and, when tagged, torch's C++ ABI; a stable-ABI build needs an
    ABI version <= installed torch; a tvm-ffi build needs that tvm-ffi major.minor. CUDA
    builds need the system's CUDA major and a minor no newer than the system's; other
    backends must match exactly (ROCm and XPU versions included). ``torch-<backend>``
    needs that backend; ``torch-universal`` fits anything. Preference: stable ABI, torch
    arch, tvm-ffi, noarch, universal; within a kind, the newest backend version.

    Args:
        candidates: variant names (unparsable ones are rejected in the trace) or values.
        facts: the system to choose for, e.g. from :func:`detect_system`.
        backend: choose for this backend instead of the system's; only ``"cpu"`` or the
            system's own backend are possible.

    Returns:
        The :class:`Resolution`: ``chosen`` (``None`` when nothing fits; its
        ``require(what)`` raises :class:`~kernelforge.errors.VariantNotFoundError`
        then), every accepted variant ``ranked``, and a ``trace`` with the reason for
        each candidate.

    Raises:
        TypeError: ``candidates`` is one string (or a variant) instead of a collection.
        VariantError: ``backend`` is not a known backend, or neither cpu nor the
            system's backend.
    """
    if isinstance(candidates, (str, Variant)):
        # a string would be read one character at a time, each rejected
        raise TypeError(f"candidates: expected a list of variant names, got {candidates!r}; "
                        f"fix: pass [{str(candidates)!r}] for that one variant")
    chosen_backend, bver = _select_backend(facts, backend)
    judged: list[tuple[tuple[Any, ...], Decision, Variant | None]] = []
    seen: set[str] = set()
    for cand in candidates:
        name = str(cand)
        if name in seen:
            continue
        seen.add(name)
        fields, problem = (None, "") if isinstance(cand, Variant) else _parse(cand)
        variant = cand if isinstance(cand, Variant) else Variant(*fields) if fields else None
        if variant is None:
            reason = f"not a build variant name ({problem})"
            judged.append(((2, name), Decision(name, False, reason), None))
            continue
        ok, reason = _judge(variant, facts, chosen_backend, bver)
        judged.append(
            ((0 if ok else 1, _preference(variant), name), Decision(name, ok, reason), variant)
        )
    judged.sort(key=lambda item: item[0])
    ranked = tuple(v for _, d, v in judged if d.accepted and v is not None)
    return Resolution(
        chosen=ranked[0] if ranked else None,
        ranked=ranked,
        trace=[d for _, d, _ in judged],
        facts=facts,
        backend=chosen_backend,
    )


def build_variant(
    facts: SystemFacts, *, backend: str | None = None, stable_abi: bool | tuple[int, int] = False
) -> Variant:
    """The variant a compiled build made in this environment is named for.

    Linux names carry the ``-cxx11`` tag (``-cxx98`` for a pre-cxx11 torch); macOS and
    Windows names carry none, and neither do stable-ABI names.

    Args:
        facts: the build environment.
        backend: build for this backend instead of torch's: ``"cpu"``, or ``"metal"``
            on macOS.
        stable_abi: name a stable-ABI build: ``True`` for the installed torch's
            major.minor, or an explicit ``(major, minor)`` ABI target.

    Raises:
        VariantError: torch is not installed, the backend version is unknown, or the
            backend cannot be built for with this torch.

    Example:
        >>> f = SystemFacts((2, 13, 0), True, "cpu", None, "x86_64", "linux")
        >>> str(build_variant(f))
        'torch213-cxx11-cpu-x86_64-linux'
    """
    if backend == "metal" and facts.os == "darwin":  # MPS need not be usable to build
        chosen, bver = "metal", None
    else:
        chosen, bver = _select_backend(facts, backend)
    if facts.torch_version is None:
        raise VariantError("cannot name a build variant: torch is not installed")
    if chosen in _PREFIX and bver is None:
        raise VariantError(f"cannot name a {chosen} build variant: the {chosen} version is unknown")
    if bver is not None and not 0 <= bver[1] <= 9:
        raise VariantError(f"{_backend_label(chosen, bver)}: a minor version above 9 cannot be "
                           "written in a variant name")  # fmt: skip
    torch_mm = (facts.torch_version[0], facts.torch_version[1])
    if stable_abi is not False:
        abi = torch_mm if stable_abi is True else (int(stable_abi[0]), int(stable_abi[1]))
        return Variant(VariantKind.STABLE_ABI, abi, None, chosen, bver, facts.cpu, facts.os)
    cxx11 = (facts.cxx11_abi is not False) if facts.os == "linux" else None
    return Variant(VariantKind.ARCH, torch_mm, cxx11, chosen, bver, facts.cpu, facts.os)


def _parse_cuda_arch(arch: str) -> tuple[int, int, str, bool] | None:
    """``"9.0a+PTX"`` -> ``(9, 0, "a", True)``; ``None`` when not a CUDA capability."""
    ptx = arch.upper().endswith("+PTX")
    arch = arch[:-4] if ptx else arch
    suffix = arch[-1] if arch[-1:] in ("a", "f") else ""
    m = re.fullmatch(r"(\d+)\.(\d+)", arch[: len(arch) - len(suffix)])
    return (int(m[1]), int(m[2]), suffix, ptx) if m else None


def _cuda_arch_covers(parsed: tuple[int, int, str, bool], cap: tuple[int, int]) -> bool:
    major, minor, suffix, ptx = parsed
    if suffix == "a":  # architecture-specific code runs on that capability only
        return cap == (major, minor)
    if ptx and not suffix:  # PTX is compiled on load for any newer capability
        return cap >= (major, minor)
    return cap[0] == major and cap[1] >= minor  # SASS (and family "f"): same major


def arch_supported(
    archs: Sequence[str] | None, facts: SystemFacts, *, build_backend: str | None = None
) -> tuple[bool, str]:
    """Whether the GPU (every one in ``facts.gpu_archs``) is covered by a build's
    ``backend.archs``.

    CUDA entries (``"8.0"``, ``"9.0a"``, ``"10.0f"``, ``"12.1+PTX"``): plain and family
    builds cover the same major with an equal or newer minor, ``a`` builds only their
    exact capability, ``+PTX`` any equal or newer capability. ROCm entries
    (``"gfx942"``) must name the GPU's arch. No archs, no GPU, a backend without archs,
    or CUDA archs none of which can be read (a newer format) count as supported.

    Args:
        archs: the build's ``backend.archs``.
        facts: the system, whose ``gpu_archs`` are checked.
        build_backend: the build's ``backend.type``, when known. Archs declared for
            another backend than the GPU's (CUDA capabilities in the metadata of a
            ``torch-universal`` build, on a ROCm GPU) say nothing about this GPU, so
            they count as supported, as in Hugging Face's loader. Its case does not
            matter: a build whose metadata says ``"CUDA"`` is checked on a CUDA GPU,
            not let through unchecked.

    Returns:
        ``(supported, reason)``; the reason names the uncovered GPUs.
    """
    if not archs:
        return True, "the build declares no GPU architectures"
    if not facts.gpu_archs or facts.backend not in ("cuda", "rocm"):
        return True, "no GPU to check"
    built_for = build_backend.lower() if build_backend is not None else None
    if built_for is not None and built_for != facts.backend:
        return True, (f"the build's archs are for {_backend_label(built_for, None)}, "
                      f"the GPU here is a {_backend_label(facts.backend, None)} GPU")
    listed = ", ".join(archs)
    if facts.backend == "rocm":
        names = {a.split(":")[0] for a in archs}
        missing = [g for g in facts.gpu_archs if g.split(":")[0] not in names]
    else:
        parsed = [p for p in (_parse_cuda_arch(a) for a in archs) if p is not None]
        if not parsed:
            return True, f"no entry of the build's archs ({listed}) is a CUDA capability"
        missing = []
        for gpu in facts.gpu_archs:
            cap = _parse_cuda_arch(gpu)
            if cap is None or not any(_cuda_arch_covers(p, (cap[0], cap[1])) for p in parsed):
                missing.append(gpu)
    if missing:
        return False, f"GPU {', '.join(missing)} not covered by the build's archs ({listed})"
    return True, f"GPU {', '.join(facts.gpu_archs)} covered by the build's archs ({listed})"


def _major_minor(text: str) -> tuple[int, int] | None:
    m = re.match(r"(\d+)\.(\d+)", text)
    return (int(m[1]), int(m[2])) if m else None


def _xpu_version(text: str) -> tuple[int, int] | None:
    """torch.version.xpu is ``YYYYMMxx`` (``20250200`` is 2025.2) or dotted."""
    if "." in text:
        return _major_minor(text)
    return (int(text[:4]), int(text[4:6])) if re.fullmatch(r"\d{6,}", text) else None


def _host_platform() -> tuple[str, str]:
    machine = platform.machine().lower()
    cpu = {"amd64": "x86_64", "x64": "x86_64", "arm64": "aarch64"}.get(machine, machine)
    return cpu, platform.system().lower()


def detect_system() -> SystemFacts:
    """Gather the facts of this process. Imports torch (and tvm-ffi) here, on call.

    Reads torch's version, C++ ABI, backend (CUDA, ROCm, Metal via MPS, XPU, ...) and
    its version, and the capability or arch of the GPU this process runs on (torch's
    current device; other visible GPUs are not checked, as in Hugging Face's ``kernels``).
    Without torch ``torch_version`` is ``None`` and the backend is cuda when the dynamic
    loader finds a CUDA runtime library (its version), else cpu, as in their loader: a
    tvm-ffi CUDA build needs no torch.

    Returns:
        The :class:`SystemFacts` of this process, read anew on every call.
    """
    cpu, os_name = _host_platform()
    torch_version, cxx11, backend, bver, archs = None, None, "cpu", None, []
    if importlib.util.find_spec("torch") is not None:
        import torch

        torch_version = _version_triple(torch.__version__)
        cxx11 = bool(torch._C._GLIBCXX_USE_CXX11_ABI) if os_name == "linux" else None
        backend, bver = _torch_backend(torch)
        if backend in ("cuda", "rocm") and torch.cuda.is_available():
            index = torch.cuda.current_device()
            if backend == "rocm":  # "gfx90a:sramecc+:xnack-" -> "gfx90a"
                archs.append(str(torch.cuda.get_device_properties(index).gcnArchName).split(":")[0])
            else:
                archs.append("{}.{}".format(*torch.cuda.get_device_capability(index)))
    else:
        cudart = _cudart_version()
        if cudart is not None:
            backend, bver = "cuda", cudart
    tvm = None
    if importlib.util.find_spec("tvm_ffi") is not None:
        import tvm_ffi  # type: ignore[import-not-found]

        tvm = _major_minor(str(tvm_ffi.__version__))
    mac = _major_minor(platform.mac_ver()[0] or "") if os_name == "darwin" else None
    free_threaded = bool(sysconfig.get_config_var("Py_GIL_DISABLED"))
    return SystemFacts(
        torch_version, cxx11, backend, bver, cpu, os_name, tuple(archs), _running_python(),
        free_threaded, mac, tvm,
    )  # fmt: skip


def _cudart_version() -> tuple[int, int] | None:
    """``(major, minor)`` of the CUDA runtime library the dynamic loader finds; ``None``
    when there is none or it does not answer."""
    import ctypes
    import ctypes.util

    path = ctypes.util.find_library("cudart")
    if path is None:
        return None
    try:
        number = ctypes.c_int(0)
        if ctypes.CDLL(path).cudaRuntimeGetVersion(ctypes.byref(number)) != 0:
            return None
    except (OSError, AttributeError):  # not loadable, or not a CUDA runtime
        return None
    return number.value // 1000, number.value % 1000 // 10  # 12080 is CUDA 12.8


def _torch_backend(torch: Any) -> tuple[str, tuple[int, int] | None]:
    """The backend torch is built for, in the order the ``kernels`` loader checks."""
    if hasattr(torch.backends, "tpu"):
        return "tpu", None
    if hasattr(torch, "neuron"):  # loads into other builds, so it comes first
        return "neuron", None
    if torch.version.cuda:
        return "cuda", _major_minor(torch.version.cuda)
    if torch.version.hip:
        return "rocm", _major_minor(torch.version.hip)
    if torch.backends.mps.is_available():
        return "metal", None
    xpu = getattr(torch.version, "xpu", None)
    if xpu:
        return "xpu", _xpu_version(str(xpu))
    privateuse = getattr(torch._C, "_get_privateuse1_backend_name", None)
    if privateuse is not None and privateuse() == "npu":
        return "cann", _cann_version()
    return "cpu", None


def _cann_version() -> tuple[int, int] | None:
    """The Ascend CANN toolkit's major.minor as torch_npu reports it (``"8.1.RC1"`` is
    8.1), the version ``cann81`` builds are named for; ``None`` when it cannot be read."""
    try:
        from torch_npu.utils.collect_env import (  # type: ignore[import-not-found]
            get_cann_version,
        )

        return _major_minor(str(get_cann_version()))
    except Exception:  # no torch_npu, or no toolkit where it looks: the version is unknown
        return None


def _version_triple(text: str) -> tuple[int, int, int]:
    m = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?", text)
    if m is None:
        raise KernelforgeError(f"cannot read torch version {text!r}")
    return int(m[1]), int(m[2]), int(m[3] or 0)


@dataclass(frozen=True)
class TorchInstall:
    """The installed torch as ``torch/version.py`` describes it, read without importing."""

    version: str  #: the full version string, "2.13.0+cpu"
    torch_version: tuple[int, int, int]
    cuda: str | None  #: the CUDA version torch was built with ("12.9")
    hip: str | None  #: the HIP version ("6.3.42131-fa1d09cbd")
    xpu: str | None  #: the oneAPI version string
    git_version: str | None  #: the commit torch was built from
    path: Path  #: the version.py read; with mtime_ns a cache key for "same torch"
    mtime_ns: int

    @property
    def backend(self) -> str:
        """cuda, rocm, xpu or cpu (Metal needs a running process to tell)."""
        return "cuda" if self.cuda else "rocm" if self.hip else "xpu" if self.xpu else "cpu"

    @property
    def backend_version(self) -> tuple[int, int] | None:
        """``(major, minor)`` of the backend, ``None`` for cpu."""
        if self.cuda or self.hip:
            return _major_minor(self.cuda or self.hip or "")
        return _xpu_version(self.xpu) if self.xpu else None


def torch_install_facts() -> TorchInstall | None:
    """Read the installed torch's version and CUDA/HIP/XPU versions without importing it.

    Locates the package with :func:`importlib.util.find_spec` and parses the literal
    assignments of ``torch/version.py`` (nothing is executed), in about a millisecond.

    Returns:
        The facts, or ``None`` when torch is not installed or has no ``version.py``.

    Raises:
        KernelforgeError: ``version.py`` exists but cannot be read or parsed.
    """
    spec = importlib.util.find_spec("torch")
    if spec is None or spec.origin is None:
        return None
    path = Path(spec.origin).parent / "version.py"
    if not path.is_file():
        return None
    try:
        mtime_ns = path.stat().st_mtime_ns
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    except (OSError, UnicodeDecodeError, SyntaxError) as err:
        raise KernelforgeError(f"{path}: cannot read torch's version file: {err}") from err
    values: dict[str, object] = {}
    for node in tree.body:  # NAME = "literal" and NAME: type = "literal"
        target = node.targets[0] if isinstance(node, ast.Assign) else getattr(node, "target", None)
        value = getattr(node, "value", None)
        if isinstance(target, ast.Name) and isinstance(value, ast.Constant):
            values[target.id] = value.value

    def text(key: str) -> str | None:
        value = values.get(key)
        return value if isinstance(value, str) and value else None

    version = text("__version__")
    if version is None:
        raise KernelforgeError(f"{path}: no '__version__ = \"...\"' assignment found")
    return TorchInstall(
        version, _version_triple(version), text("cuda"), text("hip"), text("xpu"),
        text("git_version"), path, mtime_ns,
    )  # fmt: skip
