"""Known GPU architectures: CUDA compute capabilities and ROCm (AMDGPU) targets.

Pure data and string handling, no torch and no compiler: the manifest validates against
these tables and the build turns them into compiler flags.

CUDA capabilities are written the way ``build.toml`` writes them: ``"9.0"``, the
architecture-specific ``"9.0a"`` (Hopper-only instructions such as ``wgmma``; code built
for it runs on that one architecture only), the family-specific ``"10.0f"`` (CUDA 12.9
and newer) and ``"12.1+PTX"`` (also embed PTX so newer GPUs can JIT-compile it).

Example:
    >>> cap = CudaCapability.parse("9.0a")
    >>> cap.sm, cap.compute
    ('sm_90a', 'compute_90a')
    >>> nvcc_gencode_flags(["8.0", "12.1+PTX"])[-1]
    '-gencode=arch=compute_121,code=compute_121'
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

CudaVersion = tuple[int, int]

# Base capability -> (first CUDA release whose nvcc targets it, last one or None).
# The table starts at CUDA 11.0: for older toolkits nvcc_supported() refuses to guess.
# 8.7 (Jetson Orin) is recorded from 11.5, a conservative choice.
_CUDA_BASE: dict[str, tuple[CudaVersion, CudaVersion | None]] = {
    "3.5": ((11, 0), (11, 8)),
    "3.7": ((11, 0), (11, 8)),
    "5.0": ((11, 0), (12, 9)),
    "5.2": ((11, 0), (12, 9)),
    "5.3": ((11, 0), (12, 9)),
    "6.0": ((11, 0), (12, 9)),
    "6.1": ((11, 0), (12, 9)),
    "6.2": ((11, 0), (12, 9)),
    "7.0": ((11, 0), (12, 9)),
    "7.2": ((11, 0), (12, 9)),
    "7.5": ((11, 0), None),
    "8.0": ((11, 0), None),
    "8.6": ((11, 1), None),
    "8.7": ((11, 5), None),
    "8.9": ((11, 8), None),
    "9.0": ((11, 8), None),
    "10.0": ((12, 8), None),
    # CUDA 13.0 renamed 10.1 (Thor) to 11.0.
    "10.1": ((12, 8), (12, 9)),
    "10.3": ((12, 9), None),
    "11.0": ((13, 0), None),
    "12.0": ((12, 8), None),
    "12.1": ((12, 9), None),
}

# Architecture-specific ("a") and family-specific ("f") variants: base -> first CUDA.
_CUDA_ARCH_SPECIFIC: dict[str, CudaVersion] = {
    "9.0": (12, 0),
    "10.0": (12, 8),
    "10.1": (12, 8),
    "10.3": (12, 9),
    "11.0": (13, 0),
    "12.0": (12, 8),
    "12.1": (12, 9),
}
_CUDA_FAMILY_SPECIFIC: dict[str, CudaVersion] = {
    "10.0": (12, 9),
    "10.1": (12, 9),
    "10.3": (12, 9),
    "11.0": (13, 0),
    "12.0": (12, 9),
    "12.1": (12, 9),
}
_SUFFIX_TABLES = {"a": _CUDA_ARCH_SPECIFIC, "f": _CUDA_FAMILY_SPECIFIC}

#: Every base capability kernelforge knows, oldest first.
CUDA_CAPABILITIES: tuple[str, ...] = tuple(_CUDA_BASE)

#: Default capabilities of Hugging Face's builder for CUDA >= 13.0.
DEFAULT_CUDA_CAPABILITIES: tuple[str, ...] = (
    "7.5", "8.0", "8.6", "8.7", "8.9", "9.0", "10.0", "11.0", "12.0", "12.1+PTX",
)
# Their defaults for CUDA 12.8 - 12.9 and for older 12.x / 11.x toolkits.
_DEFAULT_CUDA_12_8: tuple[str, ...] = (
    "7.0", "7.2", "7.5", "8.0", "8.6", "8.7", "8.9", "9.0", "10.0", "10.1", "12.0+PTX",
)
_DEFAULT_CUDA_OLDER: tuple[str, ...] = (
    "7.0", "7.2", "7.5", "8.0", "8.6", "8.7", "8.9", "9.0+PTX",
)

#: ROCm archs Hugging Face's builder compiles for (its default list).
ROCM_ARCHS: tuple[str, ...] = (
    "gfx906", "gfx908", "gfx90a", "gfx942", "gfx950",
    "gfx1030", "gfx1100", "gfx1101", "gfx1200", "gfx1201",
)

#: Every AMDGPU target a manifest may name: the builder's list plus other real targets
#: (their project template lists gfx940 and gfx941, for example).
KNOWN_ROCM_ARCHS: frozenset[str] = frozenset(ROCM_ARCHS) | {
    "gfx900", "gfx90c", "gfx940", "gfx941",
    "gfx1010", "gfx1011", "gfx1012",
    "gfx1031", "gfx1032", "gfx1033", "gfx1034", "gfx1035", "gfx1036",
    "gfx1102", "gfx1103", "gfx1150", "gfx1151",
}

_CAP_RE = re.compile(r"^(\d+)\.(\d+)([af]?)(\+PTX)?$")
_ROCM_RE = re.compile(r"^gfx[0-9a-f]+$")
_SM_RE = re.compile(r"^(?:sm|compute)_?(\d+)(\d)([af]?)$", re.IGNORECASE)


class UnknownArchError(ValueError):
    """A well-formed CUDA capability or ROCm arch that does not exist (``"11.8"``,
    ``"gfx99999"``), as opposed to a malformed one (``"sm_90"``)."""


def closest(word: str, candidates: Iterable[str]) -> str | None:
    """The candidate that looks most like ``word`` (a typo's likely meaning), or None.

    Example:
        >>> closest("cuda-capabilites", ["cuda-capabilities", "cuda-flags"])
        'cuda-capabilities'
    """
    # Case aside ('CPU' means 'cpu'), the candidate returned as it is spelled.
    spelled = {c.lower(): c for c in reversed(list(candidates))}
    matches = difflib.get_close_matches(word.lower(), list(spelled), n=1, cutoff=0.6)
    return spelled[matches[0]] if matches else None


def _valid_capability_list() -> str:
    return ", ".join(CUDA_CAPABILITIES) + " (optionally with 'a', 'f' or '+PTX')"


@dataclass(frozen=True, order=True)
class CudaCapability:
    """One CUDA compute capability as written in ``build.toml``.

    Attributes:
        major: the major version (9 for Hopper).
        minor: the minor version.
        suffix: ``""``, ``"a"`` (architecture-specific) or ``"f"`` (family-specific).
        ptx: whether PTX is embedded too (``+PTX``).
    """

    major: int
    minor: int
    suffix: str = ""
    ptx: bool = False

    @classmethod
    def parse(cls, text: str) -> CudaCapability:
        """Parse ``"9.0"``, ``"9.0a"``, ``"10.0f"`` or ``"12.1+PTX"``.

        Raises:
            ValueError: naming the value and listing the valid capabilities when it is
                malformed; :class:`UnknownArchError` when it is well formed but not a
                capability kernelforge knows.
        """
        if not isinstance(text, str):
            raise ValueError(
                f"CUDA capability {text!r} is not a string; valid: {_valid_capability_list()}"
            )
        m = _CAP_RE.match(text.strip())
        if m is None:
            hint = ""
            sm = _SM_RE.match(text.strip())
            if sm is not None:
                hint = f" (write it as '{sm.group(1)}.{sm.group(2)}{sm.group(3).lower()}')"
            raise ValueError(
                f"'{text}' is not a CUDA capability{hint}; "
                f"valid: {_valid_capability_list()}"
            )
        major, minor, suffix, ptx = int(m.group(1)), int(m.group(2)), m.group(3), bool(m.group(4))
        base = f"{major}.{minor}"
        if base not in _CUDA_BASE:
            near = closest(base, CUDA_CAPABILITIES)
            hint = f" (did you mean '{near}'?)" if near else ""
            raise UnknownArchError(
                f"unknown CUDA capability '{text}'{hint}; valid: {_valid_capability_list()}"
            )
        if suffix and base not in _SUFFIX_TABLES[suffix]:
            with_suffix = ", ".join(f"{b}{suffix}" for b in _SUFFIX_TABLES[suffix])
            raise UnknownArchError(
                f"CUDA capability '{text}' does not exist: the '{suffix}' suffix is valid "
                f"only for {with_suffix}"
            )
        return cls(major, minor, suffix, ptx)

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}{self.suffix}{'+PTX' if self.ptx else ''}"

    @property
    def base(self) -> str:
        """The capability without suffix or ``+PTX``: ``"9.0"`` for ``"9.0a"``."""
        return f"{self.major}.{self.minor}"

    @property
    def number(self) -> str:
        """The digits nvcc uses, with the suffix: ``"90a"``."""
        return f"{self.major}{self.minor}{self.suffix}"

    @property
    def sm(self) -> str:
        """The real architecture for nvcc's ``code=``: ``"sm_90a"``."""
        return f"sm_{self.number}"

    @property
    def compute(self) -> str:
        """The virtual architecture for nvcc's ``arch=``: ``"compute_90a"``."""
        return f"compute_{self.number}"


def _as_capability(cap: str | CudaCapability) -> CudaCapability:
    return cap if isinstance(cap, CudaCapability) else CudaCapability.parse(cap)


def _check_cuda_version(cuda_version: Sequence[int]) -> CudaVersion:
    if len(cuda_version) < 2 or not all(isinstance(v, int) for v in cuda_version[:2]):
        raise ValueError(f"CUDA version {cuda_version!r} is not a (major, minor) pair of ints")
    version = (cuda_version[0], cuda_version[1])
    if version < (11, 0):
        raise ValueError(
            f"CUDA {version[0]}.{version[1]} is older than 11.0, the oldest toolkit "
            "kernelforge knows the targets of"
        )
    return version


def nvcc_supported(cuda_version: Sequence[int]) -> frozenset[str]:
    """Base capabilities (``"9.0"``, no suffix) an nvcc of ``cuda_version`` can target.

    Args:
        cuda_version: ``(major, minor)`` of the toolkit, e.g. ``(12, 8)``.

    Returns:
        A frozenset such as ``{"7.5", "8.0", ..., "12.1"}`` for CUDA 13.0 (which dropped
        everything below 7.5).

    Raises:
        ValueError: for a malformed version or one older than CUDA 11.0.
    """
    version = _check_cuda_version(cuda_version)
    return frozenset(
        cap
        for cap, (first, last) in _CUDA_BASE.items()
        if first <= version and (last is None or version <= last)
    )


def nvcc_supports(cap: str | CudaCapability, cuda_version: Sequence[int]) -> bool:
    """Whether an nvcc of ``cuda_version`` can target ``cap``, its suffix included.

    Example:
        >>> nvcc_supports("9.0a", (11, 8)), nvcc_supports("9.0a", (12, 0))
        (False, True)
    """
    parsed = _as_capability(cap)
    version = _check_cuda_version(cuda_version)
    if parsed.base not in nvcc_supported(version):
        return False
    if parsed.suffix:
        return _SUFFIX_TABLES[parsed.suffix][parsed.base] <= version
    return True


def default_cuda_capabilities(cuda_version: Sequence[int]) -> tuple[str, ...]:
    """The capabilities Hugging Face's builder compiles for when a kernel lists none.

    Args:
        cuda_version: ``(major, minor)`` of the toolkit.

    Returns:
        For CUDA >= 13.0 :data:`DEFAULT_CUDA_CAPABILITIES`; for 12.8 and 12.9 a list that
        still has 7.0/7.2/10.1 and ends in ``12.0+PTX``; older toolkits end in ``9.0+PTX``.
    """
    version = _check_cuda_version(cuda_version)
    if version >= (13, 0):
        return DEFAULT_CUDA_CAPABILITIES
    if version >= (12, 8):
        return _DEFAULT_CUDA_12_8
    return _DEFAULT_CUDA_OLDER


def nvcc_gencode_flags(caps: Iterable[str | CudaCapability]) -> list[str]:
    """nvcc ``-gencode`` flags for ``caps``, in order and without duplicates.

    Each capability gives ``-gencode=arch=compute_XX,code=sm_XX`` (``compute_90a`` /
    ``sm_90a`` for ``9.0a``, the form Hopper-only instructions need); ``+PTX`` adds
    ``-gencode=arch=compute_XX,code=compute_XX``.

    Raises:
        ValueError: for a capability :meth:`CudaCapability.parse` rejects.
    """
    flags: list[str] = []
    for cap in caps:
        parsed = _as_capability(cap)
        wanted = [f"-gencode=arch={parsed.compute},code={parsed.sm}"]
        if parsed.ptx:
            wanted.append(f"-gencode=arch={parsed.compute},code={parsed.compute}")
        flags.extend(f for f in wanted if f not in flags)
    return flags


def is_known_rocm_arch(arch: str) -> bool:
    """Whether ``arch`` (``"gfx942"``) is an AMDGPU target kernelforge knows."""
    return isinstance(arch, str) and arch in KNOWN_ROCM_ARCHS


def parse_rocm_arch(arch: str) -> str:
    """Return ``arch`` if it is a known ROCm arch.

    Raises:
        ValueError: naming the value, the likely intended arch and the valid ones;
            :class:`UnknownArchError` for one written as an arch (``gfx`` and hex
            digits) that does not exist.
    """
    if is_known_rocm_arch(arch):
        return arch
    near = closest(str(arch), sorted(KNOWN_ROCM_ARCHS))
    hint = f" (did you mean '{near}'?)" if near else ""
    error = UnknownArchError if isinstance(arch, str) and _ROCM_RE.match(arch) else ValueError
    base, colon, features = arch.partition(":") if isinstance(arch, str) else ("", "", "")
    if colon and is_known_rocm_arch(base):
        # A target ID (gfx90a:xnack-): an arch Hugging Face's builder does not know, so
        # that it leaves it out of a list; its base arch is what was meant.
        error = UnknownArchError
        hint = (f" (target features such as ':{features}' are not supported: did you mean "
                f"'{base}'?)")
    raise error(
        f"unknown ROCm arch '{arch}'{hint}; valid: {', '.join(sorted_rocm_archs())}"
    )


def sorted_rocm_archs() -> list[str]:
    """Every known ROCm arch, in a human order (by generation number)."""
    return sorted(KNOWN_ROCM_ARCHS, key=lambda a: (len(a), a))


def hipcc_offload_flags(archs: Iterable[str]) -> list[str]:
    """hipcc flags for ``archs``: ``["--offload-arch=gfx942", ...]``, without duplicates.

    Raises:
        ValueError: for an arch :func:`parse_rocm_arch` rejects.
    """
    flags: list[str] = []
    for arch in archs:
        flag = f"--offload-arch={parse_rocm_arch(arch)}"
        if flag not in flags:
            flags.append(flag)
    return flags


def arch_backend_problem(archs: Sequence[str], backends: Iterable[str], *,
                         python: bool = False) -> str | None:
    """Why the archs asked for do not fit the backends being built, if they do not: one
    build takes CUDA capabilities or ROCm archs, not both, and only those of a GPU
    backend it names. ``kernelforge build`` refuses them as it reads ``--arch`` and
    ``--backend``, :func:`kernelforge.build.build_project` before it reads anything:
    otherwise a build of the other backend (or of cpu only) takes them without a word.

    Args:
        archs: the archs as :func:`parse_arch` returns them.
        backends: the backends named (none: every backend the build can make).
        python: name ``build_project``'s arguments (``archs``, ``backends=[...]``) in
            the message rather than the command line's options.

    Returns:
        The problem in words, naming the values at fault and what to pass instead.
    """
    rocm = [a for a in archs if is_known_rocm_arch(a)]
    cuda = [a for a in archs if not is_known_rocm_arch(a)]
    named = set(backends)

    def given(values: list[str]) -> str:
        return f"archs {values!r}" if python else f"--arch {' '.join(values)}"

    def backend(name: str) -> str:
        return f"backends=[{name!r}]" if python else f"--backend {name}"

    if rocm and cuda:
        return (f"{'archs' if python else '--arch'} mixes CUDA capabilities "
                f"({', '.join(cuda)}) and ROCm archs ({', '.join(rocm)}); build one GPU "
                f"backend at a time: {backend('cuda')} with capabilities, or "
                f"{backend('rocm')} with archs")
    if "cuda" in named and rocm:
        return (f"{given(rocm)}: {backend('cuda')} takes CUDA capabilities such as 9.0a, "
                "not ROCm archs")
    if "rocm" in named and cuda:
        return (f"{given(cuda)}: {backend('rocm')} takes ROCm archs such as gfx942, not "
                "CUDA capabilities")
    return None


def parse_arch(text: str) -> str:
    """A ``--arch`` value: a CUDA capability or a ROCm arch, in its canonical spelling.

    Raises:
        ValueError: naming the value and both accepted forms (with the likely intended
            spelling, e.g. ``'9.0'`` for ``sm_90``).

    Example:
        >>> parse_arch("9.0a"), parse_arch(" gfx942 ")
        ('9.0a', 'gfx942')
    """
    if not isinstance(text, str):
        raise ValueError(f"architecture {text!r} is not a string")
    word = text.strip()
    if word.lower().startswith("gfx"):
        return parse_rocm_arch(word)
    try:
        return str(CudaCapability.parse(word))
    except ValueError as err:
        raise ValueError(f"{err}; or a ROCm arch such as 'gfx942'") from err
