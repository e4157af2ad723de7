"""Variant names, system facts and the choice of a build variant."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import time
import types

import pytest

from kernelforge.errors import VariantError, VariantNotFoundError
from kernelforge.variants import (
    SystemFacts,
    TorchInstall,
    Variant,
    VariantKind,
    arch_supported,
    build_variant,
    detect_system,
    noarch_variant,
    resolve_variant,
    torch_install_facts,
)

# ---------------------------------------------------------------------------- names

NAMES = [
    # name, kind, version, cxx11, backend, backend_version, cpu, os
    (
        "torch211-cxx11-cu130-x86_64-linux",
        "arch",
        (2, 11),
        True,
        "cuda",
        (13, 0),
        "x86_64",
        "linux",
    ),
    (
        "torch29-cxx11-cu126-aarch64-linux",
        "arch",
        (2, 9),
        True,
        "cuda",
        (12, 6),
        "aarch64",
        "linux",
    ),
    ("torch26-cxx98-cu118-x86_64-linux", "arch", (2, 6), False, "cuda", (11, 8), "x86_64", "linux"),
    ("torch27-cxx11-rocm63-x86_64-linux", "arch", (2, 7), True, "rocm", (6, 3), "x86_64", "linux"),
    ("torch28-cxx11-rocm64-x86_64-linux", "arch", (2, 8), True, "rocm", (6, 4), "x86_64", "linux"),
    (
        "torch29-cxx11-xpu20252-x86_64-linux",
        "arch",
        (2, 9),
        True,
        "xpu",
        (2025, 2),
        "x86_64",
        "linux",
    ),
    ("torch213-cxx11-cpu-x86_64-linux", "arch", (2, 13), True, "cpu", None, "x86_64", "linux"),
    (
        "torch29-cxx11-cann80-aarch64-linux",
        "arch",
        (2, 9),
        True,
        "cann",
        (8, 0),
        "aarch64",
        "linux",
    ),
    ("torch29-cxx11-neuron-x86_64-linux", "arch", (2, 9), True, "neuron", None, "x86_64", "linux"),
    ("torch29-cxx11-tpu-x86_64-linux", "arch", (2, 9), True, "tpu", None, "x86_64", "linux"),
    ("torch29-metal-aarch64-darwin", "arch", (2, 9), None, "metal", None, "aarch64", "darwin"),
    ("torch28-cpu-aarch64-darwin", "arch", (2, 8), None, "cpu", None, "aarch64", "darwin"),
    ("torch29-cu128-x86_64-windows", "arch", (2, 9), None, "cuda", (12, 8), "x86_64", "windows"),
    (
        "torch210-xpu20252-x86_64-windows",
        "arch",
        (2, 10),
        None,
        "xpu",
        (2025, 2),
        "x86_64",
        "windows",
    ),
    (
        "torch-stable-abi211-cu126-x86_64-linux",
        "stable-abi",
        (2, 11),
        None,
        "cuda",
        (12, 6),
        "x86_64",
        "linux",
    ),
    (
        "torch-stable-abi210-cpu-aarch64-darwin",
        "stable-abi",
        (2, 10),
        None,
        "cpu",
        None,
        "aarch64",
        "darwin",
    ),
    ("tvm-ffi01-cu126-x86_64-linux", "tvm-ffi", (0, 1), None, "cuda", (12, 6), "x86_64", "linux"),
    ("tvm-ffi10-metal-aarch64-darwin", "tvm-ffi", (1, 0), None, "metal", None, "aarch64", "darwin"),
    ("torch-cuda", "noarch", None, None, "cuda", None, None, None),
    ("torch-rocm", "noarch", None, None, "rocm", None, None, None),
    ("torch-cpu", "noarch", None, None, "cpu", None, None, None),
    ("torch-xpu", "noarch", None, None, "xpu", None, None, None),
    ("torch-metal", "noarch", None, None, "metal", None, None, None),
    ("torch-npu", "noarch", None, None, "cann", None, None, None),
    ("torch-neuron", "noarch", None, None, "neuron", None, None, None),
    ("torch-universal", "universal", None, None, None, None, None, None),
]


@pytest.mark.parametrize("row", NAMES, ids=[r[0] for r in NAMES])
def test_parse_round_trip_and_fields(row: tuple) -> None:
    name, kind, version, cxx11, backend, bver, cpu, os_ = row
    v = Variant.parse(name)
    assert str(v) == name
    assert (v.kind, v.version, v.cxx11, v.backend, v.backend_version, v.cpu, v.os) == (
        VariantKind(kind),
        version,
        cxx11,
        backend,
        bver,
        cpu,
        os_,
    )
    assert Variant.parse(str(v)) == v and hash(Variant.parse(name)) == hash(v)


def test_variant_is_frozen_and_typed() -> None:
    v = Variant.parse("torch211-cxx11-cu130-x86_64-linux")
    with pytest.raises(dataclasses.FrozenInstanceError):
        v.cpu = "aarch64"  # type: ignore[misc]
    assert v.compute == "cu130" and v.torch_version == (2, 11)
    assert Variant.parse("tvm-ffi01-cu126-x86_64-linux").torch_version is None
    assert {v, Variant.parse(str(v))} == {v}


MALFORMED = [
    ("", "unrecognised form"),
    ("torch", "unrecognised form"),
    ("torch-", "unrecognised form"),
    ("torch-foo", "unknown pure-Python backend 'foo'"),
    ("torch-CUDA", "unrecognised form"),
    ("torch29-cxx11-cu126-x86_64", "expected <compute>-<cpu>-<os> after the ABI tag"),
    ("torch29-cxx11-cu126-x86_64-linux-extra", "unrecognised form"),
    ("torch29-cxx14-cu126-x86_64-linux", "unrecognised form"),
    ("torch29-cxx11-cuda126-x86_64-linux", "unknown compute tag 'cuda126'"),
    ("torch29-cxx11-cu1-x86_64-linux", "unknown compute tag 'cu1'"),
    ("torch29-cxx11-cu0126-x86_64-linux", "unknown compute tag 'cu0126'"),
    ("torch29-cxx11-vulkan-x86_64-linux", "unknown compute tag 'vulkan'"),
    ("torch2013-cxx11-cpu-x86_64-linux", "unrecognised form"),
    ("torch2-cxx11-cpu-x86_64-linux", "unrecognised form"),
    ("torch-stable-abi-cu126-x86_64-linux", "unrecognised form"),
    ("tvm-ffi-cu126-x86_64-linux", "unrecognised form"),
    ("torch29-cxx11-cu126-x86_64-Linux", "unrecognised form"),
    (" torch-cuda", "unrecognised form"),
    # Only ASCII digits: Hugging Face's loader skips these names too.
    ("torch\u066211-cxx11-cpu-x86_64-linux", "unrecognised form"),
    ("torch211-cxx11-cu1\u0662\u0668-x86_64-linux", "unrecognised form"),
    ("torch-stable-abi\u06629-cpu-x86_64-linux", "unrecognised form"),
]


@pytest.mark.parametrize(("name", "detail"), MALFORMED)
def test_parse_rejects_malformed(name: str, detail: str) -> None:
    with pytest.raises(VariantError) as info:
        Variant.parse(name)
    message = str(info.value)
    assert repr(name) in message and detail in message
    assert "torch<MAJ><MIN>[-cxx11|-cxx98]-<compute>-<cpu>-<os>" in message  # the accepted forms


def test_parse_rejects_non_string() -> None:
    with pytest.raises(VariantError, match="string"):
        Variant.parse(211)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(
            kind="arch",
            version=(2, 9),
            backend="cuda",
            backend_version=(12, 10),
            cpu="x86_64",
            os="linux",
        ),
        dict(kind="arch", version=(2, 9), backend="cuda", cpu="x86_64", os="linux"),
        dict(
            kind="arch",
            version=(2, 9),
            backend="cpu",
            backend_version=(1, 0),
            cpu="x86_64",
            os="linux",
        ),
        dict(
            kind="stable-abi", version=(2, 9), cxx11=True, backend="cpu", cpu="x86_64", os="linux"
        ),
        dict(kind="noarch", backend="opencl"),
        dict(kind="universal", backend="cuda"),
        dict(kind="noarch", backend="cuda", cpu="x86_64"),
    ],
)
def test_variant_rejects_values_without_a_canonical_name(kwargs: dict) -> None:
    with pytest.raises(VariantError):
        Variant(**kwargs)


@pytest.mark.parametrize("kind", ["torch-cpu", "ARCH", 5, None])
def test_variant_refuses_an_unknown_kind_as_its_other_values(kind: object) -> None:
    """Before: the enum's own ValueError, which ``except VariantError`` missed."""
    with pytest.raises(VariantError, match=r"kind: .* is not a variant kind; expected one "
                       r"of 'arch', 'stable-abi', 'tvm-ffi', 'noarch', 'universal'"):
        Variant(kind, backend="cpu")  # type: ignore[arg-type]
    assert Variant("noarch", backend="cpu") == Variant(VariantKind.NOARCH, backend="cpu")


def test_noarch_variant() -> None:
    assert str(noarch_variant("cuda")) == "torch-cuda"
    assert str(noarch_variant("cann")) == str(noarch_variant("npu")) == "torch-npu"
    assert str(noarch_variant("universal")) == "torch-universal"
    with pytest.raises(VariantError, match="unknown backend 'opencl'"):
        noarch_variant("opencl")


# ---------------------------------------------------------------------------- choice


def facts(**changes: object) -> SystemFacts:
    base = SystemFacts(
        torch_version=(2, 11, 0),
        cxx11_abi=True,
        backend="cuda",
        backend_version=(12, 9),
        cpu="x86_64",
        os="linux",
        gpu_archs=("9.0",),
        python_version=(3, 12),
    )
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]


CUDA_129 = facts()
ROCM_63 = facts(backend="rocm", backend_version=(6, 3), gpu_archs=("gfx942",))
XPU = facts(backend="xpu", backend_version=(2025, 2), gpu_archs=())
CPU_213 = facts(torch_version=(2, 13, 0), backend="cpu", backend_version=None, gpu_archs=())
MAC = facts(
    torch_version=(2, 9, 1),
    cxx11_abi=None,
    backend="metal",
    backend_version=None,
    cpu="aarch64",
    os="darwin",
    gpu_archs=(),
    macos_version=(26, 1),
)

# facts, candidates, chosen (None: nothing fits)
CHOICES = [
    pytest.param(
        CPU_213,
        ["torch212-cxx11-cpu-x86_64-linux", "torch213-cxx11-cpu-x86_64-linux"],
        "torch213-cxx11-cpu-x86_64-linux",
        id="exact-torch",
    ),
    pytest.param(
        CUDA_129,
        ["torch211-cxx11-cu128-x86_64-linux"],
        "torch211-cxx11-cu128-x86_64-linux",
        id="cuda-minor-fallback",
    ),
    pytest.param(
        CUDA_129,
        ["torch211-cxx11-cu126-x86_64-linux", "torch211-cxx11-cu128-x86_64-linux"],
        "torch211-cxx11-cu128-x86_64-linux",
        id="cuda-highest-minor",
    ),
    pytest.param(
        CUDA_129,
        ["torch211-cxx11-cu130-x86_64-linux", "torch211-cxx11-cu126-x86_64-linux"],
        "torch211-cxx11-cu126-x86_64-linux",
        id="cuda-newer-major-skipped",
    ),
    pytest.param(CUDA_129, ["torch211-cxx11-cu118-x86_64-linux"], None, id="cuda-older-major"),
    pytest.param(
        ROCM_63,
        ["torch211-cxx11-rocm62-x86_64-linux", "torch211-cxx11-rocm63-x86_64-linux"],
        "torch211-cxx11-rocm63-x86_64-linux",
        id="rocm-exact",
    ),
    pytest.param(
        ROCM_63,
        ["torch211-cxx11-rocm62-x86_64-linux", "torch211-cxx11-rocm64-x86_64-linux"],
        None,
        id="rocm-no-fallback",
    ),
    pytest.param(
        XPU,
        ["torch211-cxx11-xpu20251-x86_64-linux", "torch211-cxx11-xpu20252-x86_64-linux"],
        "torch211-cxx11-xpu20252-x86_64-linux",
        id="xpu-exact",
    ),
    pytest.param(
        CUDA_129,
        ["torch211-cxx11-cu128-x86_64-linux", "torch-cuda", "torch-universal"],
        "torch211-cxx11-cu128-x86_64-linux",
        id="arch-before-noarch",
    ),
    pytest.param(
        CUDA_129,
        ["torch210-cxx11-cu128-x86_64-linux", "torch-universal", "torch-cuda"],
        "torch-cuda",
        id="noarch-fallback",
    ),
    pytest.param(
        CUDA_129,
        ["torch210-cxx11-cu128-x86_64-linux", "torch-rocm", "torch-universal"],
        "torch-universal",
        id="universal-fallback",
    ),
    pytest.param(CUDA_129, ["torch-cpu"], None, id="noarch-cpu-not-on-cuda"),
    pytest.param(CPU_213, ["torch-cpu", "torch-cuda"], "torch-cpu", id="noarch-cpu-on-cpu"),
    pytest.param(
        CUDA_129,
        ["torch-stable-abi210-cu126-x86_64-linux", "torch211-cxx11-cu128-x86_64-linux"],
        "torch-stable-abi210-cu126-x86_64-linux",
        id="stable-abi-preferred",
    ),
    pytest.param(
        CUDA_129,
        ["torch-stable-abi29-cu128-x86_64-linux", "torch-stable-abi211-cu126-x86_64-linux"],
        "torch-stable-abi211-cu126-x86_64-linux",
        id="stable-abi-newest-abi-first",
    ),
    pytest.param(
        CUDA_129, ["torch-stable-abi212-cu128-x86_64-linux"], None, id="stable-abi-too-new"
    ),
    pytest.param(
        CUDA_129,
        ["torch211-cxx11-cu128-x86_64-linux", "torch211-cu128-x86_64-linux"],
        "torch211-cu128-x86_64-linux",
        id="untagged-before-tagged",
    ),
    pytest.param(CUDA_129, ["torch211-cxx98-cu128-x86_64-linux"], None, id="cxx98-on-cxx11-torch"),
    pytest.param(
        facts(cxx11_abi=False),
        ["torch211-cxx11-cu128-x86_64-linux", "torch211-cxx98-cu128-x86_64-linux"],
        "torch211-cxx98-cu128-x86_64-linux",
        id="cxx98-torch",
    ),
    pytest.param(
        MAC,
        ["torch29-metal-aarch64-darwin", "torch29-cxx11-cpu-aarch64-linux"],
        "torch29-metal-aarch64-darwin",
        id="metal",
    ),
    pytest.param(
        dataclasses.replace(MAC, macos_version=(15, 5)),
        ["torch29-metal-aarch64-darwin", "torch-metal"],
        "torch-metal",
        id="metal-needs-macos-26",
    ),
    pytest.param(
        dataclasses.replace(MAC, macos_version=(25, 9)),
        ["torch29-metal-aarch64-darwin", "torch-metal"],
        "torch-metal",
        id="metal-not-on-macos-25",
    ),
    pytest.param(
        dataclasses.replace(MAC, macos_version=(26, 0)),
        ["torch29-metal-aarch64-darwin", "torch-metal"],
        "torch29-metal-aarch64-darwin",
        id="metal-on-macos-26.0",
    ),
    pytest.param(
        facts(backend_version=None),
        ["torch211-cxx11-cu118-x86_64-linux", "torch-cuda"],
        "torch-cuda",
        id="cuda-version-unknown",
    ),
    pytest.param(
        facts(tvm_ffi_version=(0, 1)),
        ["tvm-ffi01-cu126-x86_64-linux", "tvm-ffi02-cu128-x86_64-linux"],
        "tvm-ffi01-cu126-x86_64-linux",
        id="tvm-ffi",
    ),
    pytest.param(
        facts(free_threaded=True, python_version=(3, 14)),
        ["torch211-cxx11-cu128-x86_64-linux", "torch-cuda"],
        "torch-cuda",
        id="free-threaded",
    ),
    pytest.param(
        facts(torch_version=None),
        ["torch211-cxx11-cu128-x86_64-linux", "torch-cuda"],
        "torch-cuda",
        id="no-torch",
    ),
    pytest.param(CUDA_129, [], None, id="empty"),
    pytest.param(
        CPU_213, ["torch\u066213-cxx11-cpu-x86_64-linux"], None, id="non-ascii-digits-rejected"
    ),
    # A minor above 9: the name's tag is compared, as Hugging Face's loader compares it,
    # so "rocm610" (which also reads as ROCm 61.0) fits ROCm 6.10 and not ROCm 6.1.
    pytest.param(
        facts(backend="rocm", backend_version=(6, 10)),
        ["torch211-cxx11-rocm61-x86_64-linux", "torch211-cxx11-rocm610-x86_64-linux"],
        "torch211-cxx11-rocm610-x86_64-linux",
        id="rocm-minor-above-9-by-tag",
    ),
    pytest.param(
        facts(backend="rocm", backend_version=(6, 1)),
        ["torch211-cxx11-rocm610-x86_64-linux", "torch211-cxx11-rocm61-x86_64-linux"],
        "torch211-cxx11-rocm61-x86_64-linux",
        id="rocm61-not-rocm610",
    ),
]


@pytest.mark.parametrize(("system", "candidates", "chosen"), CHOICES)
def test_resolve(system: SystemFacts, candidates: list[str], chosen: str | None) -> None:
    res = resolve_variant(candidates, system)
    assert (str(res.chosen) if res.chosen else None) == chosen
    assert sorted(d.variant for d in res.trace) == sorted(candidates)
    assert [d.accepted for d in res.trace] == sorted((d.accepted for d in res.trace), reverse=True)
    if chosen is not None:
        assert res.trace[0].variant == chosen and res.ranked[0] == res.chosen


# facts, candidate, words of the rejection reason
REJECTIONS = [
    (CUDA_129, "torch211-cxx11-cu130-x86_64-linux", ["CUDA 13.0", "CUDA 12.9"]),
    (ROCM_63, "torch211-cxx11-rocm62-x86_64-linux", ["ROCm 6.2", "ROCm 6.3"]),
    (CUDA_129, "torch211-cxx98-cu128-x86_64-linux", ["cxx98", "ABI"]),
    (CUDA_129, "torch211-cxx11-cu128-aarch64-linux", ["CPU aarch64", "x86_64"]),
    (CUDA_129, "torch211-cu128-x86_64-windows", ["OS windows", "linux"]),
    (CUDA_129, "torch210-cxx11-cu128-x86_64-linux", ["torch 2.10", "2.11"]),
    (CUDA_129, "torch-stable-abi212-cu128-x86_64-linux", ["stable ABI 2.12", "2.11"]),
    (CUDA_129, "torch-rocm", ["rocm", "cuda"]),
    (CUDA_129, "torch211-cxx11-cpu-x86_64-linux", ["cpu", "CUDA 12.9"]),
    (CUDA_129, "tvm-ffi01-cu126-x86_64-linux", ["tvm-ffi 0.1", "not installed"]),
    (dataclasses.replace(MAC, macos_version=None), "torch29-metal-aarch64-darwin", ["macOS 26.0"]),
    (CUDA_129, "not-a-variant", ["not a build variant name"]),
    (facts(backend_version=None), "torch211-cxx11-cu118-x86_64-linux",
     ["CUDA 11.8", "CUDA version here is unknown"]),
]


@pytest.mark.parametrize(
    ("system", "candidate", "words"), REJECTIONS, ids=[r[1] for r in REJECTIONS]
)
def test_rejection_reasons(system: SystemFacts, candidate: str, words: list[str]) -> None:
    (decision,) = resolve_variant([candidate], system).trace
    assert not decision.accepted
    for word in words:
        assert word in decision.reason


def test_reasons_name_the_backend_chosen_and_the_tag_compared() -> None:
    """A CUDA build rejected when choosing for cpu is rejected for its backend (not for a
    CUDA version); a ROCm 6.10 build is accepted by its tag, which the reason names
    instead of the ROCm 61.0 the tag also reads as."""
    cuda = "torch211-cxx11-cu128-x86_64-linux"
    (decision,) = resolve_variant([cuda], CUDA_129, backend="cpu").trace
    assert not decision.accepted
    assert "built for CUDA 12.8, the backend here is cpu" in decision.reason
    rocm = "torch211-cxx11-rocm610-x86_64-linux"
    (decision,) = resolve_variant([rocm], facts(backend="rocm", backend_version=(6, 10))).trace
    assert decision.accepted
    assert "rocm610 (the tag written for ROCm 6.10 too)" in decision.reason
    assert "61.0" not in decision.reason


def test_unparsable_candidates_do_not_raise_and_duplicates_fold() -> None:
    res = resolve_variant(
        ["garbage", "torch-cuda", "torch-cuda", Variant.parse("torch-cuda")], CUDA_129
    )
    assert [d.variant for d in res.trace] == ["torch-cuda", "garbage"]
    assert str(res.chosen) == "torch-cuda"


@pytest.mark.parametrize("one", ["torch-cuda", Variant.parse("torch-cuda")])
def test_one_name_instead_of_a_list_is_refused_with_the_fix(one: str | Variant) -> None:
    with pytest.raises(TypeError, match=r"expected a list of variant names.*\['torch-cuda'\]"):
        resolve_variant(one, CUDA_129)  # type: ignore[arg-type]
    assert str(resolve_variant([one], CUDA_129).chosen) == "torch-cuda"


def test_backend_override() -> None:
    names = ["torch211-cxx11-cu128-x86_64-linux", "torch211-cxx11-cpu-x86_64-linux", "torch-cpu"]
    assert str(resolve_variant(names, CUDA_129).chosen) == "torch211-cxx11-cu128-x86_64-linux"
    res = resolve_variant(names, CUDA_129, backend="cpu")
    assert str(res.chosen) == "torch211-cxx11-cpu-x86_64-linux" and res.backend == "cpu"
    assert [str(v) for v in res.ranked] == ["torch211-cxx11-cpu-x86_64-linux", "torch-cpu"]
    assert str(resolve_variant(names, CUDA_129, backend="cuda").chosen) == names[0]
    with pytest.raises(VariantError, match="backend 'rocm' cannot be used here") as info:
        resolve_variant(names, CUDA_129, backend="rocm")
    assert "'kernelforge download --all-variants'" in str(info.value)
    assert "'kernelforge versions REPO' lists every variant" in str(info.value)
    assert "download_locked" not in str(info.value)  # a command's words, not Python's


def test_not_found_lists_every_candidate_with_its_reason() -> None:
    names = [
        "torch211-cxx11-cu130-x86_64-linux",
        "torch211-cxx11-cu128-aarch64-linux",
        "torch210-cxx11-cu128-x86_64-linux",
        "torch-rocm",
        "bogus",
    ]
    res = resolve_variant(names, CUDA_129)
    with pytest.raises(VariantNotFoundError) as info:
        res.require("org/relu")
    message = str(info.value)
    assert "org/relu" in message and CUDA_129.describe() in message
    for decision in res.trace:
        assert f"{decision.variant}: rejected, {decision.reason}" in message
    assert len(info.value.trace) == len(names)


def test_require_and_explain() -> None:
    res = resolve_variant(
        ["torch211-cxx11-cu128-x86_64-linux", "torch-cuda", "torch-rocm"], CUDA_129
    )
    assert res.require("org/relu") == Variant.parse("torch211-cxx11-cu128-x86_64-linux")
    text = res.explain()
    assert CUDA_129.describe() in text
    assert "chosen   torch211-cxx11-cu128-x86_64-linux" in text
    assert "accepted torch-cuda" in text and "rejected torch-rocm" in text


# ---------------------------------------------------------------------------- build names


@pytest.mark.parametrize(
    ("system", "kwargs", "name"),
    [
        (CPU_213, {}, "torch213-cxx11-cpu-x86_64-linux"),
        (facts(backend_version=(13, 0)), {}, "torch211-cxx11-cu130-x86_64-linux"),
        (ROCM_63, {}, "torch211-cxx11-rocm63-x86_64-linux"),
        (XPU, {}, "torch211-cxx11-xpu20252-x86_64-linux"),
        (facts(cxx11_abi=False), {}, "torch211-cxx98-cu129-x86_64-linux"),
        (CUDA_129, {"backend": "cpu"}, "torch211-cxx11-cpu-x86_64-linux"),
        (CUDA_129, {"stable_abi": True}, "torch-stable-abi211-cu129-x86_64-linux"),
        (CUDA_129, {"stable_abi": (2, 10)}, "torch-stable-abi210-cu129-x86_64-linux"),
        (MAC, {}, "torch29-metal-aarch64-darwin"),
        (
            dataclasses.replace(MAC, backend="cpu"),
            {"backend": "metal"},
            "torch29-metal-aarch64-darwin",
        ),
        (facts(os="windows", cxx11_abi=None), {}, "torch211-cu129-x86_64-windows"),
    ],
)
def test_build_variant(system: SystemFacts, kwargs: dict, name: str) -> None:
    built = build_variant(system, **kwargs)
    assert str(built) == name
    # what we build here is what the loader picks here
    if built.backend in (system.backend, "cpu"):
        assert resolve_variant([built], system, backend=kwargs.get("backend")).chosen == built


def test_build_variant_errors() -> None:
    with pytest.raises(VariantError, match="torch is not installed"):
        build_variant(facts(torch_version=None))
    with pytest.raises(VariantError, match="cuda version is unknown"):
        build_variant(facts(backend_version=None))
    with pytest.raises(VariantError, match="cannot be used here"):
        build_variant(CPU_213, backend="cuda")
    with pytest.raises(VariantError, match="minor version above 9"):
        build_variant(facts(backend_version=(12, 10)))


# ---------------------------------------------------------------------------- archs


@pytest.mark.parametrize(
    ("archs", "gpus", "backend", "ok"),
    [
        (None, ("9.0",), "cuda", True),
        ([], ("9.0",), "cuda", True),
        (["8.0", "9.0"], (), "cuda", True),
        (["9.0"], ("9.0",), "cuda", True),
        (["8.0"], ("8.6",), "cuda", True),  # SASS runs on newer minors of its major
        (["8.6"], ("8.0",), "cuda", False),
        (["8.0"], ("9.0",), "cuda", False),  # ... but not on another major
        (["9.0a"], ("9.0",), "cuda", True),
        (["9.0a"], ("9.1",), "cuda", False),  # arch-specific: exact only
        (["9.0a+PTX"], ("10.0",), "cuda", False),
        (["10.0f"], ("10.3",), "cuda", True),
        (["10.0f"], ("12.0",), "cuda", False),
        (["8.0+PTX"], ("12.0",), "cuda", True),  # PTX covers newer capabilities
        (["12.1+PTX"], ("12.0",), "cuda", False),
        (["7.5", "8.0", "12.1+PTX"], ("12.1",), "cuda", True),
        (["9.0"], ("9.0", "8.6"), "cuda", False),  # every visible GPU must be covered
        (["sm_whatever"], ("9.0",), "cuda", True),  # unreadable archs: cannot tell
        (["gfx942"], ("gfx942",), "rocm", True),
        (["gfx90a", "gfx942"], ("gfx942",), "rocm", True),
        (["gfx90a"], ("gfx942",), "rocm", False),
        (["gfx90a:xnack-"], ("gfx90a",), "rocm", True),
        (["gfx942"], ("gfx942", "gfx90a"), "rocm", False),  # every GPU, ROCm too
    ],
)
def test_arch_supported(
    archs: list[str] | None, gpus: tuple[str, ...], backend: str, ok: bool
) -> None:
    supported, reason = arch_supported(archs, facts(backend=backend, gpu_archs=gpus))
    assert supported is ok, reason
    if not ok:
        assert "not covered" in reason and all(a in reason for a in archs or [])


def test_arch_supported_leaves_archs_of_another_backend_unchecked() -> None:
    """A build's archs are checked against the GPU only when its metadata names the GPU's
    backend: CUDA capabilities in a ``torch-universal`` build say nothing about a ROCm
    GPU (Hugging Face's loader checks them only on a CUDA torch, too)."""
    rocm = facts(backend="rocm", backend_version=(6, 3), gpu_archs=("gfx942",))
    ok, reason = arch_supported(["9.0"], rocm, build_backend="cuda")
    assert ok and "archs are for CUDA" in reason and "ROCm GPU" in reason
    assert not arch_supported(["gfx90a"], rocm, build_backend="rocm")[0]
    assert not arch_supported(["9.0"], rocm)[0]  # backend not given: the GPU's is assumed
    cuda = facts(gpu_archs=("9.0",))
    assert arch_supported(["gfx942"], cuda, build_backend="rocm")[0]
    assert arch_supported(["8.0"], cuda, build_backend="cpu")[0]
    assert not arch_supported(["8.0"], cuda, build_backend="cuda")[0]
    # the backend named in another case is the same backend: checked, not let through
    assert not arch_supported(["8.0"], cuda, build_backend="CUDA")[0]
    assert not arch_supported(["gfx90a"], rocm, build_backend="ROCm")[0]


# ---------------------------------------------------------------------------- this machine


def test_detect_system_on_this_machine() -> None:
    import torch

    found = detect_system()
    major, minor = (int(x) for x in torch.__version__.split(".")[:2])
    assert found.torch_version is not None and found.torch_version[:2] == (major, minor)
    assert found.python_version == sys.version_info[:2]
    if torch.version.cuda is None and torch.version.hip is None:
        assert found.backend == "cpu" and found.backend_version is None and found.gpu_archs == ()
    if torch.__version__.startswith("2.13") and "+cpu" in torch.__version__:
        assert str(build_variant(found)).startswith("torch213-")
    assert found.describe().startswith(f"torch {major}.{minor}")
    assert resolve_variant([build_variant(found)], found).chosen == build_variant(found)


def test_torch_install_facts_agrees_with_torch() -> None:
    import torch

    start = time.perf_counter()
    info = torch_install_facts()
    elapsed = time.perf_counter() - start
    assert isinstance(info, TorchInstall)
    assert info.version == torch.__version__
    assert info.cuda == torch.version.cuda and info.hip == torch.version.hip
    assert info.path.name == "version.py" and info.mtime_ns > 0
    assert info.backend == (
        "cuda" if torch.version.cuda else "rocm" if torch.version.hip else info.backend
    )
    assert elapsed < 0.05, f"torch_install_facts took {elapsed * 1000:.1f} ms"


def test_torch_install_facts_does_not_import_torch() -> None:
    code = (
        "import sys, time; from kernelforge.variants import torch_install_facts; "
        "t = time.perf_counter(); info = torch_install_facts(); t = time.perf_counter() - t; "
        "assert 'torch' not in sys.modules, 'torch was imported'; "
        "assert t < 0.05, t; print(info.version)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr
    import torch

    assert out.stdout.strip() == torch.__version__


def test_importing_the_module_does_not_import_torch() -> None:
    code = "import sys, kernelforge.variants; assert 'torch' not in sys.modules"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr


def test_detect_system_checks_the_current_gpu_only(monkeypatch) -> None:
    """The GPU check is for the device this process runs on (torch's current device), as
    Hugging Face's kernels checks it: another visible GPU does not reject a build."""
    import torch

    from kernelforge import variants as v

    caps = {0: (8, 9), 1: (9, 0)}
    monkeypatch.setattr(v, "_torch_backend", lambda _torch: ("cuda", (12, 8)))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 1)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda i=None: caps[i])
    found = v.detect_system()
    assert found.gpu_archs == ("9.0",)
    assert arch_supported(["9.0a"], found)[0]


def _npu_torch() -> types.SimpleNamespace:
    """Just what backend detection reads of a torch with torch_npu loaded."""
    return types.SimpleNamespace(
        backends=types.SimpleNamespace(mps=types.SimpleNamespace(is_available=lambda: False)),
        version=types.SimpleNamespace(cuda=None, hip=None, xpu=None),
        _C=types.SimpleNamespace(_get_privateuse1_backend_name=lambda: "npu"),
    )


@pytest.mark.parametrize(
    ("reported", "version"),
    [("8.1.RC1", (8, 1)), ("8.0.0", (8, 0)), ("10.2.RC1", (10, 2)), ("not known", None)],
)
def test_cann_version_is_read_from_torch_npu(monkeypatch, reported: str, version) -> None:
    """An Ascend torch names its CANN version, so cann81 builds fit a CANN 8.1 process
    (before, the version was never read and every CANN build was rejected)."""
    from kernelforge import variants as v

    module = types.ModuleType("torch_npu.utils.collect_env")
    module.get_cann_version = lambda: reported  # type: ignore[attr-defined]
    for name in ("torch_npu", "torch_npu.utils"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    monkeypatch.setitem(sys.modules, "torch_npu.utils.collect_env", module)
    assert v._torch_backend(_npu_torch()) == ("cann", version)
    found = facts(torch_version=(2, 9, 0), backend="cann", backend_version=version, cpu="aarch64")
    names = ["torch29-cxx11-cann81-aarch64-linux", "torch-npu"]
    best = resolve_variant(names, found).chosen
    assert str(best) == (names[0] if version == (8, 1) else "torch-npu")


@pytest.mark.parametrize(
    ("reported", "version"),
    [("20250200", (2025, 2)), ("20250101", (2025, 1)), ("2025.2", (2025, 2)), ("2025", None)],
)
def test_xpu_version_is_read_as_year_and_minor(reported: str, version) -> None:
    """torch.version.xpu "20250200" is oneAPI 2025.2, the version xpu20252 builds are
    named for."""
    from kernelforge import variants as v

    torch = _npu_torch()
    torch.version.xpu = reported
    torch._C = types.SimpleNamespace()
    assert v._torch_backend(torch) == ("xpu", version)
    found = facts(backend="xpu", backend_version=version, gpu_archs=())
    names = ["torch211-cxx11-xpu20252-x86_64-linux", "torch-xpu"]
    assert str(resolve_variant(names, found).chosen) == (
        names[0] if version == (2025, 2) else "torch-xpu")


def test_cann_version_unknown_without_torch_npu(monkeypatch) -> None:
    from kernelforge import variants as v

    monkeypatch.setitem(sys.modules, "torch_npu", None)  # import fails
    assert v._torch_backend(_npu_torch()) == ("cann", None)


class _FakeCudart:
    """A CUDA runtime library that answers cudaRuntimeGetVersion with ``number``."""

    def __init__(self, number: int, status: int = 0) -> None:
        self.number, self.status = number, status

    def cudaRuntimeGetVersion(self, out) -> int:  # noqa: N802 (the C function's name)
        out._obj.value = self.number
        return self.status


@pytest.mark.parametrize(
    ("library", "runtime", "expected"),
    [
        ("libcudart.so.12", _FakeCudart(12080), ("cuda", (12, 8))),
        ("libcudart.so.13", _FakeCudart(13000), ("cuda", (13, 0))),
        ("libcudart.so.13", _FakeCudart(0, status=35), ("cpu", None)),  # runtime error
        (None, None, ("cpu", None)),  # no CUDA runtime library
    ],
)
def test_detect_system_without_torch_reads_the_cuda_runtime(
    monkeypatch, library, runtime, expected
) -> None:
    """Without torch, a CUDA runtime library makes the backend cuda (as in Hugging Face's
    loader), so a tvm-ffi CUDA build, which needs no torch, can be chosen."""
    import ctypes
    import ctypes.util

    monkeypatch.setitem(sys.modules, "torch", None)  # torch not installed
    monkeypatch.setattr(ctypes.util, "find_library", lambda name: library)
    monkeypatch.setattr(ctypes, "CDLL", lambda path: runtime)
    found = detect_system()
    assert found.torch_version is None and found.cxx11_abi is None
    assert (found.backend, found.backend_version) == expected
    if expected[0] == "cuda":
        tvm = dataclasses.replace(found, tvm_ffi_version=(0, 1), cpu="x86_64", os="linux")
        names = [f"tvm-ffi01-cu{expected[1][0]}0-x86_64-linux", "torch-cpu"]
        assert str(resolve_variant(names, tvm).chosen) == names[0]
