"""Differential check of the choice of a local build against Hugging Face's loader,
``kernels`` 0.17.2, on random directories: variants at the top level and in ``build/``,
each with a ``metadata.json`` whose ``backend.type`` and ``backend.archs`` vary, chosen
for random processes, most with a CUDA or ROCm GPU.

test_variants_hf.py compares the choice among names; this adds what a directory and the
metadata bring: which of the two places is used, and the GPU check. Their side is their
``get_kernel`` with ``LOCAL_KERNELS``: ``resolve_local_kernel``, then the arch check of
``ArchValidator``; ours is ``locate_local``. Both detect the same faked process (torch,
its GPU, the platform).

Every case ends in one of two outcomes; anything else fails:

- SAME: the same variant directory, or both refuse.
- MOVED_ON, deliberate (README, "How a variant is chosen and loaded"): the archs of their
  choice do not cover the GPU, so they refuse; ours passes that variant over for the
  next one that fits and covers the GPU, which their own check accepts, and refuses only
  when no variant that fits covers it.
"""

from __future__ import annotations

import importlib
import platform
import random
import sys
import types
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from kf_testutil import write_metadata
from test_variants_hf import HB, HV, WHY, _fake_torch

from kernelforge import variants
from kernelforge.errors import VariantNotFoundError
from kernelforge.locate import locate_local

pytestmark = pytest.mark.skipif(HB is None, reason=WHY or "kernels unavailable")
# Their resolution of a local path, and their GPU check.
HR, HA = ((importlib.import_module("kernels.resolver"), importlib.import_module("kernels.archs"))
          if HB is not None else (None, None))  # fmt: skip

CAPABILITIES = [(7, 5), (8, 0), (8, 6), (8, 9), (9, 0), (10, 0), (10, 3), (12, 0), (12, 1)]
GFX = ["gfx90a", "gfx942", "gfx950", "gfx1100", "gfx1201"]
CUDA = ["11.8", "12.4", "12.6", "12.8", "12.9", "13.0", "13.1"]
HIP = ["6.2.41133-dd7f95766", "6.3.42131-fa1d09cbd", "6.4.43482-0f2d60242",
       "7.0.51831-a3e329ad8"]  # fmt: skip
Process = tuple[dict[str, Any], str, str, str, dict[str, Any]]
Outcome = tuple[str, Path | None]  # ("ok" | "none" | "arch", their variant directory)

SAME, MOVED_ON = "same", "moved on"


def _random_process(rng: random.Random) -> Process:
    """(fake torch arguments, platform.machine(), platform.system(), mac_ver, GPU)."""
    kind = rng.choices(["cuda", "rocm", "cpu", "xpu", "metal"], [45, 30, 15, 5, 5])[0]
    torch: dict[str, Any] = {"version": f"2.{rng.randint(9, 13)}.{rng.randint(0, 1)}",
                             "abi": rng.random() < 0.9}  # fmt: skip
    machine, system, mac = rng.choice(["x86_64", "aarch64"]), "Linux", ""
    gpu: dict[str, Any] = {}
    if kind == "cuda":
        torch["cuda"] = rng.choice(CUDA)
        gpu = {"available": rng.random() < 0.9, "capability": rng.choice(CAPABILITIES)}
    elif kind == "rocm":
        torch["hip"] = rng.choice(HIP)
        arch = rng.choice(GFX) + rng.choice(["", ":sramecc+:xnack-"])
        gpu = {"available": rng.random() < 0.9, "arch": arch}
    elif kind == "xpu":
        torch["xpu"] = rng.choice(["20250101", "20250200"])
    elif kind == "metal":
        torch["mps"] = True
        machine, system, mac = "arm64", "Darwin", "26.1"
    return torch, machine, system, mac, gpu


def _fake_gpu(gpu: dict[str, Any]) -> types.SimpleNamespace:
    """``torch.cuda`` as far as both detections read it."""
    props = types.SimpleNamespace(gcnArchName=gpu.get("arch", ""))
    return types.SimpleNamespace(
        is_available=lambda: gpu.get("available", False),
        current_device=lambda: 0,
        get_device_capability=lambda index=None: gpu.get("capability", (0, 0)),
        get_device_properties=lambda index=None: props,
    )


def _enter(mp: pytest.MonkeyPatch, process: Process) -> None:
    torch_args, machine, system, mac, gpu = process
    torch = _fake_torch(**torch_args)
    torch.cuda = _fake_gpu(gpu)  # type: ignore[attr-defined]
    mp.setitem(sys.modules, "torch", torch)
    mp.setattr(platform, "machine", lambda: machine)
    mp.setattr(platform, "system", lambda: system)
    mp.setattr(platform, "mac_ver", lambda: (mac, ("", "", ""), ""))
    for module in (HB, HV, HA):
        mp.setattr(module, "has_torch", True)
    mp.setattr(HV.logger, "disabled", True)


def _compute(rng: random.Random, f: variants.SystemFacts) -> str:
    """A compute tag: mostly the system's backend around its version, else any."""
    major, minor = f.backend_version or (0, 0)
    near = {"cuda": f"cu{major}{max(0, minor + rng.choice([-2, -1, 0, 0, 1]))}",
            "rocm": f"rocm{major}{max(0, minor + rng.choice([-1, 0, 0, 1]))}",
            "xpu": f"xpu{major}{max(0, minor + rng.choice([-1, 0, 1]))}"}  # fmt: skip
    if f.backend in near and rng.random() < 0.65:
        return near[f.backend]
    return rng.choice(["cu126", "cu128", "cu130", "rocm63", "rocm70", "cpu", "metal"])


def _random_names(rng: random.Random, f: variants.SystemFacts) -> list[str]:
    """Canonical variant names around the system ``f`` (the names alone are compared in
    test_variants_hf.py)."""
    major, minor = (f.torch_version or (2, 11, 0))[:2]
    names = []
    for _ in range(rng.randint(1, 7)):
        cpu = f.cpu if rng.random() < 0.9 else rng.choice(["x86_64", "aarch64"])
        tail = f"{_compute(rng, f)}-{cpu}-{f.os}"
        torch = minor + rng.choice([-1, 0, 0, 0, 1])
        pick = rng.random()
        if pick < 0.55:
            abi = rng.choice(["-cxx11", "-cxx11", "-cxx98", ""]) if f.os == "linux" else ""
            names.append(f"torch{major}{torch}{abi}-{tail}")
        elif pick < 0.7:
            names.append(f"torch-stable-abi{major}{torch - rng.randint(0, 2)}-{tail}")
        else:
            names.append(rng.choice(["torch-universal", f"torch-{f.backend}", "torch-cpu",
                                     "torch-cuda", "torch-rocm"]))  # fmt: skip
    return list(dict.fromkeys(names))


def _cuda_arch(rng: random.Random) -> str:
    """A CUDA capability as builders write it in ``backend.archs``."""
    major, minor = rng.choice(CAPABILITIES)
    return f"{major}.{minor}{rng.choice(['', '', 'a', 'f'])}{rng.choice(['', '', '+PTX'])}"


def _write_variant(rng: random.Random, vdir: Path, module_id: str) -> None:
    """A variant whose metadata names its backend (any of three for torch-universal)
    and, most of the time for CUDA and ROCm, the GPU archs it was built for."""
    built_for = variants.Variant.parse(vdir.name).backend or rng.choice(["cuda", "rocm", "cpu"])
    archs = None
    if built_for == "cuda" and rng.random() < 0.7:
        archs = [_cuda_arch(rng) for _ in range(rng.randint(1, 4))]
    elif built_for == "rocm" and rng.random() < 0.7:
        archs = rng.sample([g for g in GFX if g != "gfx950"], rng.randint(1, 3))
    vdir.mkdir(parents=True)
    (vdir / "__init__.py").write_text("VALUE = 1\n")
    write_metadata(vdir, module_id, backend=built_for, archs=archs, with_digest=False)


def _theirs(root: Path, backend: str | None, check_arch: bool) -> Outcome:
    try:
        found = HR.resolve_local_kernel(root, backend=backend)
    except FileNotFoundError:
        return "none", None
    if check_arch and not _their_arch_check(found.variant_path):
        return "arch", found.variant_path
    return "ok", found.variant_path


def _their_arch_check(vdir: Path) -> bool:
    try:
        HA._check_arch_incompatibility(HR.Metadata.read_from_file(vdir / "metadata.json"),
                                       vdir.name)  # fmt: skip
    except RuntimeError:
        return False
    return True


def _their_ranking(base: Path, backend: str | None) -> list[Path]:
    """Their accepted variants of ``base`` (a directory of variants), best first."""
    accepted, _trace = HV.resolve_variants(HV.get_variants_local(base), backend)
    return [base / v.variant_str for v in accepted]


def classify(root: Path, backend: str | None, check_arch: bool, case: str) -> str:
    """Sort one case into an outcome class; raise AssertionError on a real disagreement."""
    kind, their_path = _theirs(root, backend, check_arch)
    try:
        info = locate_local(root, backend, check_arch).info
        ours, trace = info.path, list(info.trace)
    except VariantNotFoundError as err:
        ours, trace = None, err.trace
    if kind != "arch":
        assert ours == their_path, f"theirs {their_path}, ours {ours}{case}"
        return SAME
    # Ours passed their choice over, for the GPU.
    assert their_path is not None
    passed = (their_path.relative_to(root).as_posix(), their_path.name)
    assert any(line.startswith(f"{n}: rejected after all, GPU") for n in passed for line in trace
               ), f"theirs {their_path}, not passed over in ours:\n{trace}{case}"  # fmt: skip
    # What fits by name, in their order: the top level's variants, then build/'s.
    fits = [p for b in (root, root / "build") for p in _their_ranking(b, backend)]
    later = fits[fits.index(their_path) + 1:]
    if ours is None:
        assert not any(_their_arch_check(p) for p in later), f"ours refused{case}"
    else:
        assert ours in later and _their_arch_check(ours), f"ours chose {ours}{case}"
        assert not any(_their_arch_check(p) for p in later[: later.index(ours)]), case
    return MOVED_ON


def test_random_layouts_choose_like_hugging_face(tmp_path: Path) -> None:
    """A few hundred random directories and processes, each with and without the GPU
    check, and with the cpu backend asked for now and then."""
    rng = random.Random(5617)
    counts: Counter[str] = Counter()
    for i in range(300):
        process = _random_process(rng)
        root = tmp_path / f"case{i}"
        with pytest.MonkeyPatch.context() as mp:
            _enter(mp, process)
            facts = variants.detect_system()
            layout = []
            for name in _random_names(rng, facts):
                for base in rng.choices([["build"], [""], ["", "build"]], [80, 12, 8])[0]:
                    _write_variant(rng, root / base / name, f"_lay_{i}")
                    layout.append(f"{base}/{name}".lstrip("/"))
            backend = rng.choice([None, None, None, "cpu"])
            case = f"\n  process: {process}\n  backend: {backend}\n  layout: {layout}"
            for check_arch in (True, False):
                counts[classify(root, backend, check_arch, case)] += 1
    # Both classes occur, so both stay exercised and asserted.
    assert counts[SAME] >= 450 and counts[MOVED_ON] >= 10, counts

