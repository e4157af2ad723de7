"""CUDA capabilities and ROCm archs: parsing, nvcc support, compiler flags."""

from __future__ import annotations

import subprocess
import sys

import pytest

from kernelforge import archs
from kernelforge.archs import CudaCapability


@pytest.mark.parametrize(
    ("text", "major", "minor", "suffix", "ptx", "sm", "compute"),
    [
        ("9.0", 9, 0, "", False, "sm_90", "compute_90"),
        ("9.0a", 9, 0, "a", False, "sm_90a", "compute_90a"),
        ("10.0a", 10, 0, "a", False, "sm_100a", "compute_100a"),
        ("10.0f", 10, 0, "f", False, "sm_100f", "compute_100f"),
        ("12.1+PTX", 12, 1, "", True, "sm_121", "compute_121"),
        ("7.5", 7, 5, "", False, "sm_75", "compute_75"),
        ("11.0a", 11, 0, "a", False, "sm_110a", "compute_110a"),
    ],
)
def test_parse_fields_and_nvcc_names(text, major, minor, suffix, ptx, sm, compute):
    cap = CudaCapability.parse(text)
    assert (cap.major, cap.minor, cap.suffix, cap.ptx) == (major, minor, suffix, ptx)
    assert str(cap) == text
    assert cap.sm == sm
    assert cap.compute == compute
    assert cap.base == f"{major}.{minor}"


def test_every_known_capability_round_trips():
    for base in archs.CUDA_CAPABILITIES:
        for text in (base, f"{base}+PTX"):
            assert str(CudaCapability.parse(text)) == text


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("99999.0", r"unknown CUDA capability '99999\.0'.*valid: 3\.5, 3\.7, .*12\.1"),
        ("sm90", r"'sm90' is not a CUDA capability \(write it as '9\.0'\)"),
        ("sm_90a", r"write it as '9\.0a'"),
        ("9", r"'9' is not a CUDA capability"),
        ("", r"'' is not a CUDA capability"),
        ("9.0b", r"'9\.0b' is not a CUDA capability"),
        ("9.1", r"unknown CUDA capability '9\.1'"),
        ("8.0a", r"'a' suffix is valid only for 9\.0a, 10\.0a"),
        ("9.0f", r"'f' suffix is valid only for 10\.0f"),
        ("9.0+ptx", r"not a CUDA capability"),
    ],
)
def test_parse_rejects_with_the_value_and_the_valid_list(text, match):
    with pytest.raises(ValueError, match=match):
        CudaCapability.parse(text)


def test_parse_rejects_non_strings():
    with pytest.raises(ValueError, match="not a string"):
        CudaCapability.parse(9.0)  # type: ignore[arg-type]


def test_capabilities_order_by_version():
    caps = sorted(CudaCapability.parse(c) for c in ["12.0", "8.0", "10.0", "9.0"])
    assert [str(c) for c in caps] == ["8.0", "9.0", "10.0", "12.0"]


def test_nvcc_13_dropped_pre_turing_and_added_thor():
    cuda13 = archs.nvcc_supported((13, 0))
    assert {"7.5", "8.0", "9.0", "10.0", "10.3", "11.0", "12.0", "12.1"} <= cuda13
    assert not {"5.0", "6.1", "7.0", "7.2", "10.1"} & cuda13


def test_nvcc_12_8_and_12_9_add_blackwell():
    cuda128 = archs.nvcc_supported((12, 8))
    assert {"7.0", "10.0", "10.1", "12.0"} <= cuda128
    assert not {"10.3", "11.0", "12.1"} & cuda128
    cuda129 = archs.nvcc_supported((12, 9))
    assert {"10.3", "12.1"} <= cuda129
    assert "11.0" not in cuda129


def test_nvcc_older_toolkits():
    assert "3.5" in archs.nvcc_supported((11, 8))
    assert "3.5" not in archs.nvcc_supported((12, 0))
    assert {"8.9", "9.0"} <= archs.nvcc_supported((11, 8))
    assert "9.0" not in archs.nvcc_supported((11, 7))
    assert "10.0" not in archs.nvcc_supported((12, 6))
    assert "8.6" not in archs.nvcc_supported((11, 0))


@pytest.mark.parametrize("bad", [(10, 2), (9,), ("12", "8")])
def test_nvcc_supported_rejects_unknown_versions(bad):
    with pytest.raises(ValueError, match="CUDA"):
        archs.nvcc_supported(bad)


def test_nvcc_supports_checks_the_suffix():
    assert not archs.nvcc_supports("9.0a", (11, 8))
    assert archs.nvcc_supports("9.0a", (12, 0))
    assert not archs.nvcc_supports("10.0f", (12, 8))
    assert archs.nvcc_supports("10.0f", (12, 9))
    assert archs.nvcc_supports("12.1+PTX", (13, 0))
    assert not archs.nvcc_supports("7.0", (13, 0))


def test_default_capabilities_follow_the_toolkit():
    assert archs.default_cuda_capabilities((13, 0)) == (
        "7.5", "8.0", "8.6", "8.7", "8.9", "9.0", "10.0", "11.0", "12.0", "12.1+PTX",
    )
    assert archs.default_cuda_capabilities((12, 8))[-1] == "12.0+PTX"
    assert archs.default_cuda_capabilities((12, 6))[-1] == "9.0+PTX"
    for version in [(12, 4), (12, 6), (12, 8), (12, 9), (13, 0), (13, 1)]:
        for cap in archs.default_cuda_capabilities(version):
            assert archs.nvcc_supports(cap, version), (cap, version)


def test_gencode_flags():
    assert archs.nvcc_gencode_flags(["9.0a"]) == ["-gencode=arch=compute_90a,code=sm_90a"]
    assert archs.nvcc_gencode_flags(["8.0", "12.1+PTX", "8.0"]) == [
        "-gencode=arch=compute_80,code=sm_80",
        "-gencode=arch=compute_121,code=sm_121",
        "-gencode=arch=compute_121,code=compute_121",
    ]
    assert archs.nvcc_gencode_flags([CudaCapability(9, 0)]) == [
        "-gencode=arch=compute_90,code=sm_90"
    ]
    with pytest.raises(ValueError, match="99999"):
        archs.nvcc_gencode_flags(["99999.0"])


def test_rocm_archs():
    assert archs.ROCM_ARCHS == (
        "gfx906", "gfx908", "gfx90a", "gfx942", "gfx950",
        "gfx1030", "gfx1100", "gfx1101", "gfx1200", "gfx1201",
    )
    assert all(archs.is_known_rocm_arch(a) for a in archs.ROCM_ARCHS)
    assert archs.is_known_rocm_arch("gfx940")  # in their project template
    assert not archs.is_known_rocm_arch("gfx99999")
    assert not archs.is_known_rocm_arch("sm_90")
    assert archs.hipcc_offload_flags(["gfx942", "gfx90a", "gfx942"]) == [
        "--offload-arch=gfx942", "--offload-arch=gfx90a",
    ]


def test_unknown_rocm_arch_message():
    with pytest.raises(ValueError, match=r"unknown ROCm arch 'gfx9422' \(did you mean "
                                         r"'gfx942'\?\); valid: gfx900, .*gfx1201"):
        archs.parse_rocm_arch("gfx9422")
    with pytest.raises(ValueError, match="gfx99999"):
        archs.hipcc_offload_flags(["gfx99999"])


def test_closest():
    assert archs.closest("cuda-capabilites", ["cuda-flags", "cuda-capabilities"]) == (
        "cuda-capabilities"
    )
    assert archs.closest("zzz", ["cuda", "rocm"]) is None


def test_importing_archs_and_manifest_does_not_import_torch():
    code = (
        "import sys, kernelforge.archs, kernelforge.manifest; "
        "sys.exit(1 if 'torch' in sys.modules else 0)"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize(("text", "canonical"), [
    ("9.0a", "9.0a"), (" 12.1+PTX ", "12.1+PTX"), ("10.0f", "10.0f"), ("gfx942", "gfx942"),
])
def test_parse_arch_accepts_both_kinds(text: str, canonical: str) -> None:
    assert archs.parse_arch(text) == canonical


@pytest.mark.parametrize(("text", "message"), [
    ("sm_90", r"'sm_90' is not a CUDA capability \(write it as '9\.0'\).*or a ROCm arch such "
              r"as 'gfx942'"),
    ("bogus", r"'bogus' is not a CUDA capability; valid: 3\.5.*or a ROCm arch"),
    ("9.9", r"unknown CUDA capability '9\.9'"),
    ("gfx94", r"unknown ROCm arch 'gfx94' \(did you mean 'gfx942'\?\)"),
])
def test_parse_arch_names_the_value_and_the_forms(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        archs.parse_arch(text)


@pytest.mark.parametrize(("given", "backends"), [
    (["9.0a", "8.0"], []), (["gfx942"], []), (["9.0a"], ["cuda", "cpu"]),
    (["gfx942", "gfx90a"], ["rocm"]), (["gfx942"], ["cpu"]), (["9.0"], ["cpu"]),
])
def test_arch_backend_problem_takes_archs_that_fit(given: list[str],
                                                   backends: list[str]) -> None:
    for python in (False, True):
        assert archs.arch_backend_problem(given, backends, python=python) is None


@pytest.mark.parametrize(("given", "backends", "option", "argument"), [
    (["9.0", "gfx942"], [],
     "--arch mixes CUDA capabilities (9.0) and ROCm archs (gfx942); build one GPU backend "
     "at a time: --backend cuda with capabilities, or --backend rocm with archs",
     "archs mixes CUDA capabilities (9.0) and ROCm archs (gfx942); build one GPU backend "
     "at a time: backends=['cuda'] with capabilities, or backends=['rocm'] with archs"),
    (["gfx942", "gfx90a"], ["cpu", "cuda"],
     "--arch gfx942 gfx90a: --backend cuda takes CUDA capabilities such as 9.0a, not ROCm "
     "archs",
     "archs ['gfx942', 'gfx90a']: backends=['cuda'] takes CUDA capabilities such as 9.0a, "
     "not ROCm archs"),
    (["9.0a"], ["rocm"],
     "--arch 9.0a: --backend rocm takes ROCm archs such as gfx942, not CUDA capabilities",
     "archs ['9.0a']: backends=['rocm'] takes ROCm archs such as gfx942, not CUDA "
     "capabilities"),
])
def test_arch_backend_problem_names_the_options_or_the_arguments(
        given: list[str], backends: list[str], option: str, argument: str) -> None:
    """One check for ``kernelforge build`` and ``build_project``, each in its own words."""
    assert archs.arch_backend_problem(given, backends) == option
    assert archs.arch_backend_problem(given, backends, python=True) == argument
