"""Differential check of the variant choice against Hugging Face's loader, ``kernels`` 0.17.2.

For the same variant directory names and the same system facts, kernelforge's
:func:`resolve_variant` and their loader must accept the same variants, rank them alike
and choose the same one, or both refuse. Their loader is driven through its own pure
resolution step with the facts handed over as its own objects; a second part fakes torch
(and the platform) so that both detections read the same process.

Where we differ on purpose, the comparison sorts the case into a named class, and each
class is asserted on its own below with the reason:

- NONCANONICAL: a name with a leading zero (``torch209-...`` for torch 2.9). They read it
  as the canonical name and then fetch ``build/<canonical name>/``, which does not exist,
  so their choice cannot load; we reject the name and choose among the others.
- TIE: a tvm-ffi build whose backend minor is 0 (or that has no backend version) and the
  pure-Python build share their sort key, so their choice follows the order of the
  directory listing; ours follows their documented order, tvm-ffi before pure Python.
- an unreadable CANN version (detection): they fail on every load; we reject only the
  CANN builds and can still load a pure-Python one.
- Windows on Arm (detection): they compare the CPU as reported, "ARM64", with names their
  own builder writes as aarch64, so no compiled build fits; we read aarch64.
"""

from __future__ import annotations

import dataclasses
import importlib.machinery
import importlib.metadata
import itertools
import platform
import random
import re
import sys
import sysconfig
import types
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import pytest

from kernelforge.errors import VariantError
from kernelforge.variants import (
    SystemFacts,
    Variant,
    VariantKind,
    detect_system,
    resolve_variant,
)

HF_VERSION = "0.17.2"


def _their_modules() -> tuple[Any, Any, str]:
    """Their ``kernels.backends`` and ``kernels.variants``, or why they cannot be used."""
    try:
        version = importlib.metadata.version("kernels")
    except importlib.metadata.PackageNotFoundError:
        return None, None, f"needs Hugging Face's kernels {HF_VERSION}, which is not installed"
    if version != HF_VERSION:
        return None, None, f"needs Hugging Face's kernels {HF_VERSION}, found {version}"
    try:
        from kernels import backends, variants
    except Exception as err:  # any import failure means: not usable here
        return None, None, f"Hugging Face's kernels {version} cannot be imported: {err!r}"
    if not hasattr(variants, "_resolve_variant_for_system"):
        return None, None, f"kernels {version} has no _resolve_variant_for_system"
    return backends, variants, ""


HB, HV, WHY = _their_modules()
pytestmark = pytest.mark.skipif(HB is None, reason=WHY or "kernels unavailable")

Ranking = list[str] | None  # accepted names, most preferred first; None: refused


# ------------------------------------------------------------------------- both loaders


def _version(pair: Sequence[int] | None) -> Any:
    from packaging.version import Version

    return None if pair is None else Version(f"{pair[0]}.{pair[1]}")


def _their_backend(backend: str, version: tuple[int, int] | None) -> Any:
    versioned = {"cuda": "CUDA", "rocm": "ROCm", "xpu": "XPU", "cann": "CANN"}
    if backend in versioned:
        return getattr(HB, versioned[backend])(version=_version(version))
    plain = {"cpu": "CPU", "metal": "Metal", "neuron": "Neuron", "tpu": "TPU"}
    return getattr(HB, plain[backend])()


@contextmanager
def _patched(obj: Any, **attrs: Any) -> Iterator[None]:
    saved = {name: getattr(obj, name) for name in attrs}
    for name, value in attrs.items():
        setattr(obj, name, value)
    try:
        yield
    finally:
        for name, value in saved.items():
            setattr(obj, name, value)


_PARSED: dict[str, Any] = {}


def _their_parse(name: str) -> Any:
    """Their parse of a directory name; ``None`` where their listing skips it."""
    if name not in _PARSED:
        try:
            _PARSED[name] = HV.parse_variant(name)
        except ValueError:
            _PARSED[name] = None
    return _PARSED[name]


def theirs(names: Sequence[str], f: SystemFacts, backend: str | None = None) -> Ranking:
    """Their accepted variants, most preferred first, each as the directory it names
    (``variant_str``: the path their loader then fetches)."""
    system = _their_backend(f.backend, f.backend_version)
    # Their free-threading check reads sys.version_info and sysconfig: give it the facts'.
    fake_sys = types.SimpleNamespace(version_info=(*f.python_version, 0, "final", 0))
    fake_sysconfig = types.SimpleNamespace(get_config_var=lambda key: int(f.free_threaded))
    with (
        _patched(HB, _backend=lambda: system),
        _patched(HV, sys=fake_sys, sysconfig=fake_sysconfig),
        _patched(HV.logger, disabled=True),
    ):
        try:
            selected = HV._select_backend(backend)
        except ValueError:
            return None
        parsed = [v for v in map(_their_parse, names) if v is not None]
        accepted, _trace = HV._resolve_variant_for_system(
            variants=parsed,
            selected_backend=selected,
            cpu=f.cpu,
            os=f.os,
            torch_version=_version(f.torch_version),
            torch_cxx11_abi=f.cxx11_abi,
            tvm_ffi_version=_version(f.tvm_ffi_version),
            macos_version=_version(f.macos_version),
        )
    return [v.variant_str for v in accepted]


def ours(names: Sequence[str], f: SystemFacts, backend: str | None = None) -> Ranking:
    try:
        res = resolve_variant(names, f, backend=backend)
    except VariantError:
        return None
    assert (res.chosen is None) == (not res.ranked)
    return [str(v) for v in res.ranked]


def _present(ranked: list[str], names: Sequence[str]) -> list[str]:
    """``ranked`` without directories that are not among ``names``, each once."""
    given = set(names)
    return list(dict.fromkeys(n for n in ranked if n in given))


# Outcome classes; any other outcome is a failure.
SAME, REFUSED, NONCANONICAL, TIE = "same", "both refuse", "non-canonical name", "order tie"


def classify(names: Sequence[str], fwd: Ranking, bwd: Ranking, mine: Ranking, case: str) -> str:
    """Sort one case into an outcome class; raise AssertionError on a real disagreement.

    ``fwd`` and ``bwd`` are their rankings for ``names`` listed forward and backward.
    """
    if fwd is None or bwd is None or mine is None:
        assert fwd is None and bwd is None and mine is None, (
            f"refusal differs: theirs {fwd}, ours {mine}{case}"
        )
        return REFUSED
    assert all(n in names for n in mine), f"ours chose a name not listed: {mine}{case}"
    real_fwd, real_bwd = _present(fwd, names), _present(bwd, names)
    assert set(real_fwd) == set(real_bwd) == set(mine), (
        f"accepted variants differ:\n  theirs {real_fwd}\n  ours   {mine}{case}"
    )
    if real_fwd != real_bwd:  # their ranking depends on the order of the listing
        _assert_documented_tie(mine, real_fwd, real_bwd, case)
        return TIE if real_fwd[0] != real_bwd[0] else SAME
    assert real_fwd == mine, f"rankings differ:\n  theirs {real_fwd}\n  ours   {mine}{case}"
    if fwd[:1] != mine[:1] or bwd[:1] != mine[:1]:
        _assert_phantom(fwd[0] if fwd[:1] != mine[:1] else bwd[0], names, case)
        return NONCANONICAL
    return SAME


def _assert_phantom(chosen: str, names: Sequence[str], case: str) -> None:
    """Their choice is a directory that is not listed: a non-canonical name read as
    ``chosen``. We reject such a name."""
    assert chosen not in names, case
    read_as = {n: getattr(_their_parse(n), "variant_str", None) for n in names}
    aliases = [n for n, canonical in read_as.items() if canonical == chosen and n != chosen]
    assert aliases, f"their choice {chosen} comes from no listed name{case}"
    for alias in aliases:
        with pytest.raises(VariantError):
            Variant.parse(alias)


def _kind(name: str) -> VariantKind:
    return Variant.parse(name).kind


def _assert_documented_tie(mine: list[str], fwd: list[str], bwd: list[str], case: str) -> None:
    """The only order-dependent ties: tvm-ffi builds with backend minor 0 or no backend
    version, beside the pure-Python build. Ours puts tvm-ffi first."""
    moved = {n for n in fwd if fwd.index(n) != bwd.index(n)}
    assert {_kind(n) for n in moved} == {VariantKind.TVM_FFI, VariantKind.NOARCH}, (
        f"unexpected tie {moved}{case}"
    )
    for name in moved:
        v = Variant.parse(name)
        assert v.kind is VariantKind.NOARCH or (v.backend_version or (0, 0))[1] == 0, case
    assert mine[0] in (fwd[0], bwd[0]), case
    firsts = [_kind(n) for n in mine if n in moved]
    assert firsts.index(VariantKind.TVM_FFI) < firsts.index(VariantKind.NOARCH), case
    # Apart from the tied pair, the rankings are the same.
    rest = [n for n in fwd if n not in moved]
    assert rest == [n for n in bwd if n not in moved] == [n for n in mine if n not in moved], case


def compare(
    names: Sequence[str], f: SystemFacts, backend: str | None = None, mine: Ranking = None
) -> str:
    """Classify one case (``mine``: our ranking, when already at hand)."""
    case = f"\n  facts: {f}\n  backend: {backend}\n  names: {list(names)}"
    fwd = theirs(names, f, backend)
    bwd = theirs(list(reversed(names)), f, backend)
    return classify(names, fwd, bwd, mine or ours(names, f, backend), case)


# ------------------------------------------------------------------------- the matrix

COMPUTES = (
    "cu118", "cu120", "cu124", "cu126", "cu128", "cu129", "cu130", "cu131", "cu132",
    "rocm62", "rocm63", "rocm64", "rocm70", "rocm71", "xpu20250", "xpu20251", "xpu20252",
    "cpu", "metal", "cann80", "cann81", "neuron", "tpu",
)  # fmt: skip
NOARCH = (
    "torch-cuda", "torch-rocm", "torch-xpu", "torch-cpu", "torch-metal", "torch-npu",
    "torch-neuron", "torch-tpu", "torch-universal",
)  # fmt: skip
# Names that are not canonical, or not variant names, in one loader or both.
ODD = (
    "torch209-cxx11-cu128-x86_64-linux", "torch2011-cxx11-cu128-x86_64-linux",
    "torch2013-cxx11-cpu-x86_64-linux", "torch208-cpu-aarch64-darwin",
    "torch2010-cu128-x86_64-windows", "torch-stable-abi209-cu128-x86_64-linux",
    "torch-stable-abi2010-cpu-x86_64-linux", "torch-stable-abi2011-cu130-x86_64-linux",
    "torch29-cxx11-cu0128-x86_64-linux", "torch211-cxx11-cu0129-x86_64-linux",
    "torch211-cxx11-rocm063-x86_64-linux", "torch213-cxx11-xpu020252-x86_64-linux",
    "tvm-ffi001-cu128-x86_64-linux", "tvm-ffi010-cpu-x86_64-linux",
    "torch29-cxx11-cu128-X86_64-linux", "torch211-cxx11-cu128-x86_64-Linux",
    "torch29-cxx11-cuda128-x86_64-linux", "torch211-cxx11-cu12-x86_64-linux",
    "torch211-cxx11-cu128-x86_64-linux-gnu", "torch211-cxx11-cu128-x86_64",
    "torch-stable-abi29-cxx11-cu128-x86_64-linux", "torch211-cxx17-cu128-x86_64-linux",
    "torch211-cxx11-cu128--linux", "torch211-cxx11-cpu-x86_64-",
    "Torch211-cxx11-cpu-x86_64-linux", "torch211-cxx11-cu1210-x86_64-linux",
    "torch211-cxx11-rocm610-x86_64-linux", "torch211-cxx11-cann-aarch64-linux",
    "torch211-cxx11-npu-aarch64-linux", "torch211-cxx11-cuda-x86_64-linux",
    "torch211-cxx11-xpu2025-x86_64-linux", "tvm-ffi01-cxx11-cu128-x86_64-linux",
    "torch-cann", "torch-foo", "torch-", "torch", "torch-CUDA", "torch-cuda-extra",
    "torch-universal2", "universal", "build",
    # Non-ASCII digits: not digits of a variant name.
    "torch\u066211-cxx11-cpu-x86_64-linux", "torch\u066213-cxx11-cpu-x86_64-linux",
    "torch211-cxx11-cu1\u0662\u0668-x86_64-linux", "torch-stable-abi\u06629-cpu-x86_64-linux",
    "torch211-cxx11-cpu-x86_64-linux ", "torch2_11-cxx11-cpu-x86_64-linux",
)  # fmt: skip


def _pool(f: SystemFacts) -> list[str]:
    """Names around the system ``f``: torch minors one below, equal and one above, every
    ABI tag and compute tag, its own and another CPU and OS, stable ABI from below to
    above the installed torch, tvm-ffi, pure Python and odd names."""
    major, minor = (f.torch_version or (2, 11, 0))[:2]
    torches = [(major, minor - 1), (major, minor), (major, minor + 1)]
    other_cpu = "aarch64" if f.cpu == "x86_64" else "x86_64"
    other_os = {"linux": "windows", "darwin": "linux", "windows": "darwin"}[f.os]
    names: list[str] = []
    for (tmaj, tmin), abi, compute in itertools.product(
        torches, ("-cxx11", "-cxx98", ""), COMPUTES
    ):
        names.append(f"torch{tmaj}{tmin}{abi}-{compute}-{f.cpu}-{f.os}")
    for compute in ("cu128", "cu130", "rocm63", "xpu20252", "cpu", "metal"):
        names.append(f"torch{major}{minor}-cxx11-{compute}-{other_cpu}-{f.os}")
        names.append(f"torch{major}{minor}-{compute}-{f.cpu}-{other_os}")
        names.append(f"torch-stable-abi{major}{minor}-{compute}-{other_cpu}-{f.os}")
    for (smaj, smin), compute in itertools.product(
        [(2, 9), (major, minor - 1), (major, minor), (major, minor + 1), (3, 0)], COMPUTES
    ):
        names.append(f"torch-stable-abi{smaj}{smin}-{compute}-{f.cpu}-{f.os}")
    for tvm, compute in itertools.product(("01", "02", "10"), COMPUTES):
        names.append(f"tvm-ffi{tvm}-{compute}-{f.cpu}-{f.os}")
    names += NOARCH + ODD
    return list(dict.fromkeys(names))


def _systems() -> list[SystemFacts]:
    cuda = [(11, 8), (12, 0), (12, 6), (12, 8), (12, 9), (13, 0), (13, 1)]
    backends: list[tuple[str, tuple[int, int] | None]] = [("cuda", v) for v in cuda]
    backends += [("rocm", (6, 3)), ("rocm", (6, 4)), ("rocm", (7, 0))]
    backends += [("xpu", (2025, 0)), ("xpu", (2025, 2)), ("cann", (8, 1))]
    backends += [("cpu", None), ("neuron", None), ("tpu", None)]
    out = []
    for torch, abi, cpu, (backend, bver) in itertools.product(
        [(2, 9, 0), (2, 13, 0)], (True, False), ("x86_64", "aarch64"),
        backends,
    ):  # fmt: skip
        out.append(SystemFacts(torch, abi, backend, bver, cpu, "linux"))
    for torch, backend, mac in itertools.product(
        [(2, 9, 1), (2, 10, 0)], ("metal", "cpu"), [(26, 1), (26, 0), (15, 5), None]
    ):
        out.append(SystemFacts(torch, None, backend, None, "aarch64", "darwin", macos_version=mac))
    out.append(SystemFacts((2, 9, 0), None, "cpu", None, "x86_64", "darwin", macos_version=(14, 0)))
    for torch, (backend, bver) in itertools.product(
        [(2, 9, 0), (2, 11, 0)],
        [("cuda", (12, 8)), ("cuda", (13, 0)), ("xpu", (2025, 2)), ("cpu", None)],
    ):
        out.append(SystemFacts(torch, None, backend, bver, "x86_64", "windows"))
    base = SystemFacts((2, 11, 0), True, "cuda", (13, 0), "x86_64", "linux")
    out += [
        dataclasses.replace(base, tvm_ffi_version=(0, 1)),
        dataclasses.replace(base, tvm_ffi_version=(1, 0), backend="cpu", backend_version=None),
        dataclasses.replace(base, tvm_ffi_version=(0, 2), backend="rocm", backend_version=(7, 0)),
        dataclasses.replace(base, tvm_ffi_version=(0, 2), backend="cuda", backend_version=(12, 8)),
        dataclasses.replace(base, tvm_ffi_version=(0, 1), backend="neuron", backend_version=None),
        dataclasses.replace(base, torch_version=None),
        dataclasses.replace(base, torch_version=None, backend="cpu", backend_version=None),
        dataclasses.replace(base, free_threaded=True, python_version=(3, 14)),
        dataclasses.replace(base, free_threaded=True, python_version=(3, 15)),
        dataclasses.replace(base, free_threaded=False, python_version=(3, 14)),
        # A minor above 9: both loaders read cu1210 as CUDA 121.0, so nothing fits CUDA
        # 12.10's own tag; ROCm tags are compared as written, so rocm610 fits ROCm 6.10.
        dataclasses.replace(base, backend_version=(12, 10)),
        dataclasses.replace(base, backend="rocm", backend_version=(6, 10)),
        SystemFacts((2, 11, 0), None, "metal", None, "aarch64", "darwin",
                    macos_version=(26, 0), tvm_ffi_version=(0, 1)),
    ]  # fmt: skip
    return out


SYSTEMS = _systems()


def _choice_cases(pool: list[str], accepted: list[str], rng: random.Random) -> Iterator[list[str]]:
    """Candidate lists for one system: pairs of the best accepted names, mixes of accepted
    and rejected names, and the odd names alone (no canonical twin beside them)."""
    yield from (list(p) for p in itertools.combinations(accepted[:6], 2))
    rejected = [n for n in pool if n not in set(accepted)]
    for _ in range(6):
        some = rng.sample(accepted, min(len(accepted), rng.randint(0, 3)))
        yield some + rng.sample(rejected, rng.randint(1, 4))
    yield list(ODD)


def test_matrix_chooses_like_hugging_face() -> None:
    """Every system of the matrix: the whole pool at once (the accepted set and the full
    ranking), smaller candidate lists (the choice), and each backend override."""
    rng = random.Random(20260117)
    counts: Counter[str] = Counter()
    for f in SYSTEMS:
        pool = _pool(f)
        accepted = ours(pool, f)
        counts[compare(pool, f, mine=accepted)] += 1
        for names in _choice_cases(pool, accepted or [], rng):
            counts[compare(names, f)] += 1
        sample = rng.sample(pool, 30) + ["torch-cpu", "torch-universal"]
        for backend in sorted({"cpu", f.backend, "cuda", "metal", "npu", "bogus"}):
            counts[compare(sample, f, backend)] += 1
    total = sum(counts.values())
    assert total >= 3000, counts
    # Each deliberate class occurs, so both stay exercised and asserted.
    assert {SAME, REFUSED, NONCANONICAL, TIE} <= set(counts), counts
    print(f"\n{len(SYSTEMS)} systems, {total} cases: {dict(counts)}")


def test_names_parse_alike() -> None:
    """We read a name as a variant exactly when they read it back as itself, except for
    names no system of theirs can accept; names they read as another name we reject."""
    plain_field = re.compile(r"[a-z][a-z0-9_]*", re.ASCII)
    noarch_names = {n.removeprefix("torch-") for n in NOARCH}
    names = sorted({n for f in SYSTEMS for n in _pool(f)})
    for name in names:
        try:
            mine: str | None = str(Variant.parse(name))
        except VariantError:
            mine = None
        parsed = _their_parse(name)
        if parsed is None:
            assert mine is None, f"{name!r}: we read it as {mine!r}, they skip it"
        elif parsed.variant_str != name:
            assert mine is None, f"{name!r}: non-canonical, yet we read it as {mine!r}"
        elif mine is None:
            # They read it as itself but no system of theirs matches it: a pure-Python
            # name for no backend, or an empty, upper-case or spaced CPU or OS field,
            # which their detected facts (a lower-cased OS, x86_64, aarch64) never equal.
            if isinstance(parsed, HV.NoarchVariant):
                assert parsed.arch.backend_name not in noarch_names, name
            else:
                fields = (parsed.arch.platform, parsed.arch.os)
                assert not all(plain_field.fullmatch(x) for x in fields), name
        else:
            assert mine == name


# ------------------------------------------------------------------ deliberate differences


def test_deliberate_noncanonical_names_are_rejected() -> None:
    """``torch209-...`` reads as torch 2.9 in their parser, and their loader then fetches
    ``build/torch29-.../``, a directory that is not there: their choice cannot load. Ours
    rejects the name and falls back to a variant that exists."""
    f = SystemFacts((2, 9, 0), True, "cuda", (12, 8), "x86_64", "linux")
    names = ["torch209-cxx11-cu128-x86_64-linux", "torch-cuda"]
    assert theirs(names, f) == ["torch29-cxx11-cu128-x86_64-linux", "torch-cuda"]
    assert ours(names, f) == ["torch-cuda"]
    assert compare(names, f) == NONCANONICAL
    # With the canonical directory present, both choose it.
    assert compare([*names, "torch29-cxx11-cu128-x86_64-linux"], f) == SAME


def test_deliberate_tvm_ffi_before_pure_python_on_a_tie() -> None:
    """tvm-ffi ``cu130`` and ``torch-cuda`` share their sort key, so their choice follows
    the directory listing (a set, in no fixed order). Ours always takes tvm-ffi, the order
    their own documentation of the ranking gives."""
    f = SystemFacts((2, 11, 0), True, "cuda", (13, 1), "x86_64", "linux",
                    tvm_ffi_version=(0, 1))  # fmt: skip
    names = ["tvm-ffi01-cu130-x86_64-linux", "torch-cuda"]
    assert theirs(names, f) == names and theirs(names[::-1], f) == names[::-1]
    assert ours(names, f) == ours(names[::-1], f) == names
    assert compare(names, f) == TIE
    # With a nonzero CUDA minor there is no tie: both take tvm-ffi.
    names = ["torch-cuda", "tvm-ffi01-cu131-x86_64-linux"]
    assert compare(names, f) == SAME and ours(names, f) == names[::-1]


# ------------------------------------------------------------------ detection, end to end


def _fake_torch(
    version: str, *, cuda: str | None = None, hip: str | None = None, xpu: str | None = None,
    mps: bool = False, abi: bool = True, neuron: bool = False, tpu: bool = False,
    privateuse: str = "privateuseone",
) -> types.ModuleType:  # fmt: skip
    """A stand-in for torch with just what both detections read."""
    torch = types.ModuleType("torch")
    torch.__spec__ = importlib.machinery.ModuleSpec("torch", None)
    torch.__version__ = version  # type: ignore[attr-defined]
    attrs: dict[str, Any] = {
        "version": types.SimpleNamespace(cuda=cuda, hip=hip, xpu=xpu),
        "backends": types.SimpleNamespace(mps=types.SimpleNamespace(is_available=lambda: mps)),
        "_C": types.SimpleNamespace(
            _GLIBCXX_USE_CXX11_ABI=abi, _get_privateuse1_backend_name=lambda: privateuse
        ),
        "compiled_with_cxx11_abi": lambda: abi,
        "cuda": types.SimpleNamespace(is_available=lambda: False),
    }
    if tpu:
        attrs["backends"].tpu = types.SimpleNamespace()
    if neuron:
        attrs["neuron"] = types.SimpleNamespace()
    for key, value in attrs.items():
        setattr(torch, key, value)
    return torch


def _fake_torch_npu(cann: str) -> dict[str, types.ModuleType]:
    """torch_npu, as far as it tells the CANN version (``"8.1.RC1"``)."""
    names = ("torch_npu", "torch_npu.utils", "torch_npu.utils.collect_env")
    modules = {n: types.ModuleType(n) for n in names}
    collect_env: Any = modules["torch_npu.utils.collect_env"]
    collect_env.get_cann_version = lambda: cann
    return modules


# id: (fake torch arguments, platform.machine(), platform.system(), mac_ver, CANN version)
PROCESSES: dict[str, tuple[dict[str, Any], str, str, str, str | None]] = {
    "cuda129": ({"version": "2.11.0+cu129", "cuda": "12.9"}, "x86_64", "Linux", "", None),
    "cuda130-aarch64": ({"version": "2.10.0", "cuda": "13.0"}, "aarch64", "Linux", "", None),
    "cuda118-cxx98": ({"version": "2.8.0+cu118", "cuda": "11.8", "abi": False}, "x86_64",
                      "Linux", "", None),
    "cuda128-dev": ({"version": "2.10.0a0+git1234abc", "cuda": "12.8"}, "x86_64", "Linux", "",
                    None),
    "rocm63": ({"version": "2.11.0+rocm6.3", "hip": "6.3.42131-fa1d09cbd"}, "x86_64", "Linux",
               "", None),
    "rocm70": ({"version": "2.13.0", "hip": "7.0.51831-a3e329ad8"}, "x86_64", "Linux", "", None),
    "xpu20252": ({"version": "2.9.0+xpu", "xpu": "20250200"}, "x86_64", "Linux", "", None),
    "xpu20251": ({"version": "2.11.0+xpu", "xpu": "20250101"}, "x86_64", "Linux", "", None),
    "cpu": ({"version": "2.13.0+cpu"}, "x86_64", "Linux", "", None),
    "cpu-aarch64": ({"version": "2.11.0"}, "aarch64", "Linux", "", None),
    "neuron": ({"version": "2.9.0", "neuron": True, "cuda": "12.8"}, "x86_64", "Linux", "",
               None),
    "tpu": ({"version": "2.9.0", "tpu": True}, "x86_64", "Linux", "", None),
    "cann81": ({"version": "2.9.0", "privateuse": "npu"}, "aarch64", "Linux", "", "8.1.RC1"),
    "cann80": ({"version": "2.11.0", "privateuse": "npu"}, "x86_64", "Linux", "", "8.0.0"),
    "metal-26": ({"version": "2.9.1", "mps": True}, "arm64", "Darwin", "26.1", None),
    "metal-15": ({"version": "2.10.0", "mps": True}, "arm64", "Darwin", "15.5", None),
    "darwin-cpu": ({"version": "2.9.0"}, "arm64", "Darwin", "26.0", None),
    "darwin-x86_64": ({"version": "2.9.0"}, "x86_64", "Darwin", "14.6.1", None),
    "windows-cuda": ({"version": "2.9.0+cu128", "cuda": "12.8"}, "AMD64", "Windows", "", None),
    "windows-xpu": ({"version": "2.11.0+xpu", "xpu": "20250200"}, "AMD64", "Windows", "",
                    None),
    "windows-cpu": ({"version": "2.11.0+cpu"}, "AMD64", "Windows", "", None),
}  # fmt: skip


LIVE_COMPUTES = (
    "cu118", "cu126", "cu128", "cu129", "cu130", "rocm63", "rocm70", "xpu20251", "xpu20252",
    "cpu", "metal", "cann80", "cann81", "neuron", "tpu",
)  # fmt: skip


def _process_pool(cpu: str, os_: str) -> list[str]:
    """Every torch, ABI and compute combination for ``cpu``-``os_``, stable-ABI builds,
    pure Python, and the same builds for the other CPUs and OSes of one torch."""
    names = []
    for t, abi, compute in itertools.product(
        ("28", "29", "210", "211", "213"), ("-cxx11", "-cxx98", ""), LIVE_COMPUTES
    ):
        names.append(f"torch{t}{abi}-{compute}-{cpu}-{os_}")
    for abi, compute in itertools.product(("28", "210", "212"), LIVE_COMPUTES):
        names.append(f"torch-stable-abi{abi}-{compute}-{cpu}-{os_}")
    for other_cpu, other_os in itertools.product(("x86_64", "aarch64", "arm64", "amd64"),
                                                 ("linux", "darwin", "windows")):  # fmt: skip
        if (other_cpu, other_os) != (cpu, os_):
            for compute in ("cu128", "rocm63", "xpu20252", "cpu", "metal", "cann81"):
                names.append(f"torch29-{compute}-{other_cpu}-{other_os}")
                names.append(f"torch211-cxx11-{compute}-{other_cpu}-{other_os}")
                names.append(f"torch-stable-abi28-{compute}-{other_cpu}-{other_os}")
    return names + list(NOARCH)


@contextmanager
def _process(
    monkeypatch: pytest.MonkeyPatch, key: str, *, free_threaded: bool = False
) -> Iterator[None]:
    torch_args, machine, system, mac, cann = PROCESSES[key]
    with monkeypatch.context() as mp:
        mp.setitem(sys.modules, "torch", _fake_torch(**torch_args))
        if cann is not None:
            for name, module in _fake_torch_npu(cann).items():
                mp.setitem(sys.modules, name, module)
        mp.setattr(platform, "machine", lambda: machine)
        mp.setattr(platform, "system", lambda: system)
        mp.setattr(platform, "mac_ver", lambda: (mac, ("", "", ""), ""))
        if free_threaded:
            real = sysconfig.get_config_var
            mp.setattr(sysconfig, "get_config_var",
                       lambda k: 1 if k == "Py_GIL_DISABLED" else real(k))  # fmt: skip
        mp.setattr(HV.logger, "disabled", True)
        yield


def _their_live(names: Sequence[str], backend: str | None = None) -> Ranking:
    """Their whole resolution, detection included (``resolve_variants``)."""
    parsed = [v for v in map(_their_parse, names) if v is not None]
    try:
        accepted, _trace = HV.resolve_variants(parsed, backend)
    except ValueError:
        return None
    return [v.variant_str for v in accepted]


def _compare_live(names: Sequence[str], backend: str | None = None) -> str:
    facts = detect_system()
    case = f"\n  detected by us: {facts}\n  backend: {backend}"
    mine = ours(names, facts, backend)
    fwd, bwd = _their_live(names, backend), _their_live(list(reversed(names)), backend)
    return classify(names, fwd, bwd, mine, case)


@pytest.mark.parametrize("key", sorted(PROCESSES))
def test_detection_chooses_like_hugging_face(key: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Both loaders detect the same (faked) process and choose alike from a listing of
    every torch, ABI, compute, CPU and OS combination."""
    with _process(monkeypatch, key):
        facts = detect_system()
        names = _process_pool(facts.cpu, facts.os)
        assert ours(names, facts), "the listing has a variant for every process"
        assert _compare_live(names) == SAME
        assert _compare_live(names, "cpu") == SAME
        assert _compare_live(names[:50], "bogus") == REFUSED
        free = [n for n in names if n.startswith("torch-")]
    with _process(monkeypatch, key, free_threaded=True):
        assert _compare_live(names) == SAME
        assert (ours(names, detect_system()) or [""])[0] in free  # compiled builds are out


class _FakeCudart:
    def __init__(self, number: int) -> None:
        self.number = number

    def cudaRuntimeGetVersion(self, out: Any) -> int:  # noqa: N802 (the C function's name)
        out._obj.value = self.number
        return 0


@pytest.mark.parametrize("cudart", [12080, 13000, None], ids=["cu128", "cu130", "none"])
@pytest.mark.parametrize("tvm_ffi", [False, True], ids=["", "tvm-ffi"])
def test_detection_without_torch(
    cudart: int | None, tvm_ffi: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No torch: both take the CUDA runtime library's version as the backend (else cpu),
    so a tvm-ffi CUDA build fits and torch builds do not."""
    import ctypes
    import ctypes.util

    monkeypatch.setitem(sys.modules, "torch", None)  # not installed, for both
    for module in (HB, HV):
        monkeypatch.setattr(module, "has_torch", False)
    library = None if cudart is None else "libcudart.so"
    monkeypatch.setattr(ctypes.util, "find_library", lambda name: library)
    monkeypatch.setattr(ctypes, "CDLL", lambda path: _FakeCudart(cudart or 0))
    if tvm_ffi:  # their loader reads tvm_ffi.__version__, as ours does
        fake = types.ModuleType("tvm_ffi")
        fake.__spec__ = importlib.machinery.ModuleSpec("tvm_ffi", None)
        fake.__version__ = "0.1.4"  # type: ignore[attr-defined]
        monkeypatch.setitem(sys.modules, "tvm_ffi", fake)
        monkeypatch.setattr(HV, "has_tvm_ffi", True)
    facts = detect_system()
    assert facts.torch_version is None
    names = _process_pool(facts.cpu, facts.os)
    names += [f"tvm-ffi01-{c}-{facts.cpu}-{facts.os}" for c in LIVE_COMPUTES]
    # (a tvm-ffi cu130 or cpu build ties with the pure-Python one in their ranking)
    assert _compare_live(names) in ((SAME, TIE) if tvm_ffi else (SAME,))
    best = (ours(names, facts) or [""])[0]
    if tvm_ffi:
        compute = f"cu{cudart // 1000}{cudart % 1000 // 10}" if cudart else "cpu"
        assert best == f"tvm-ffi01-{compute}-{facts.cpu}-{facts.os}"
    else:
        assert best == ("torch-cuda" if cudart else "torch-cpu")


def test_detection_of_this_process() -> None:
    """No fakes: the torch installed here, detected by both."""
    facts = detect_system()
    names = _process_pool(facts.cpu, facts.os)
    assert _compare_live(names) == SAME


def test_deliberate_unreadable_cann_version(monkeypatch: pytest.MonkeyPatch) -> None:
    """torch_npu reports "not known" when it finds no CANN toolkit. Their loader then fails
    on every load, pure-Python builds included; ours treats the version as unknown,
    rejects the CANN builds only, and can still load ``torch-npu``."""
    monkeypatch.setitem(PROCESSES, "cann-unknown", PROCESSES["cann81"][:4] + ("not known",))
    names = ["torch29-cxx11-cann81-aarch64-linux", "torch-npu"]
    with _process(monkeypatch, "cann-unknown"):
        parsed = [_their_parse(n) for n in names]
        with pytest.raises(ValueError):  # packaging's InvalidVersion for "n.t"
            HV.resolve_variants(parsed)
        assert detect_system().backend_version is None
        assert ours(names, detect_system()) == ["torch-npu"]


def test_deliberate_windows_on_arm_reads_aarch64(monkeypatch: pytest.MonkeyPatch) -> None:
    """Windows on Arm reports its CPU as "ARM64". Their builder names such builds
    ``...-aarch64-windows`` (it maps ARM64 to aarch64, as for every OS), but their loader
    compares the unmapped "ARM64", so no compiled build ever fits there. Ours maps ARM64
    to aarch64 on every OS and chooses the build their builder wrote."""
    arm = ({"version": "2.11.0+cpu"}, "ARM64", "Windows", "", None)
    monkeypatch.setitem(PROCESSES, "windows-arm64", arm)
    names = ["torch211-cpu-aarch64-windows", "torch-cpu"]
    with _process(monkeypatch, "windows-arm64"):
        assert _their_live(names) == ["torch-cpu"]
        assert detect_system().cpu == "aarch64"
        assert ours(names, detect_system()) == names
