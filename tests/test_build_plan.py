"""Build planning for every backend, without any toolchain (pure functions)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelforge.build.plan import SourceId, namespace_for, plan_build
from kernelforge.build.toolchain import Tool, resolve_dependency
from kernelforge.errors import BuildError, ToolchainError
from kernelforge.manifest import load_manifest

GCC = Tool("gcc", Path("/usr/bin/c++"), (12, 2), "c++ (GCC) 12.2.0")
NVCC_13 = Tool("nvcc", Path("/opt/cuda/bin/nvcc"), (13, 0), "release 13.0")
NVCC_12_4 = Tool("nvcc", Path("/opt/cuda/bin/nvcc"), (12, 4), "release 12.4")
HIPCC = Tool("hipcc", Path("/opt/rocm/bin/hipcc"), (6, 3), "HIP 6.3")
SID = SourceId("0123456789abcdef" * 4)


def write_project(root: Path, kernels: str, general_extra: str = "") -> Path:
    (root / "torch-ext" / "demo").mkdir(parents=True)
    (root / "torch-ext" / "demo" / "__init__.py").write_text("from ._ops import ops\n")
    (root / "torch-ext" / "torch_binding.cpp").write_text("// binding\n")
    (root / "torch-ext" / "torch_binding.h").write_text("#pragma once\n")
    for sub, name in [("k", "k.cpp"), ("k", "k.cu"), ("k", "k.hip"), ("k", "k.h")]:
        (root / sub).mkdir(exist_ok=True)
        (root / sub / name).write_text("// src\n")
    (root / "build.toml").write_text(
        f"""
[general]
name = "demo"
edition = 5
version = 2
license = "Apache-2.0"
{general_extra}

[torch]
src = ["torch-ext/torch_binding.cpp", "torch-ext/torch_binding.h"]

{kernels}
"""
    )
    return root


KERNELS = """
[kernel.k_cpu]
backend = "cpu"
depends = ["torch"]
src = ["k/k.cpp", "k/k.h"]

[kernel.k_cuda]
backend = "cuda"
depends = ["torch"]
cuda-capabilities = ["8.0", "9.0a", "10.0"]
src = ["k/k.cu", "k/k.h"]
include = ["k"]

[kernel.k_rocm]
backend = "rocm"
depends = ["torch"]
rocm-archs = ["gfx942", "gfx90a"]
src = ["k/k.hip", "k/k.h"]
"""


@pytest.fixture
def manifest(tmp_path: Path):
    return load_manifest(write_project(tmp_path, KERNELS, 'backends = ["cpu", "cuda", "rocm"]'))


def test_namespace_is_unique_per_source_identity() -> None:
    assert namespace_for("relu", "cuda", "30dc0ae") == "_relu_cuda_30dc0ae"
    assert SourceId("abcdef0123", None, False).uid == "abcdef0"
    assert SourceId("abcdef0123", "c" * 40, True).uid == "abcdef0_dirty"


def test_cpu_plan_compiles_only_translation_units(manifest) -> None:
    plan = plan_build(manifest, backend="cpu", variant="torch213-cxx11-cpu-x86_64-linux",
                      source_id=SID, cxx=GCC)
    assert [p.name for p in plan.sources] == ["torch_binding.cpp"]
    (group,) = plan.groups
    assert group.name == "k_cpu" and [p.name for p in group.sources] == ["k.cpp"]
    assert "-DCPU_KERNEL" in plan.cxx_flags
    assert "-fno-gnu-unique" in plan.cxx_flags
    # a release build, as Hugging Face's CMake Release builds (the interpreter's own
    # -DNDEBUG no longer reaches the compile)
    assert {"-O3", "-DNDEBUG"} <= set(plan.cxx_flags)
    assert plan.device_flags == ()
    assert plan.archs is None
    assert plan.namespace == "_demo_cpu_0123456"
    assert plan.module_id == "_demo_cpu_0123456"  # as Hugging Face's builder writes it
    # registration.h comes from kernelforge, not from the project
    assert any((d / "registration.h").is_file() for d in plan.include_dirs)


def test_cuda_plan_reaches_sm90a_and_drops_what_nvcc_cannot_target(manifest) -> None:
    plan = plan_build(manifest, backend="cuda", variant="torch211-cxx11-cu124-x86_64-linux",
                      source_id=SID, cxx=GCC, device_compiler=NVCC_12_4)
    assert [p.name for p in plan.sources] == ["torch_binding.cpp"]
    (group,) = plan.groups
    assert [p.name for p in group.sources] == ["k.cu"]
    assert group.include_dirs[-1].name == "k"
    assert "-gencode=arch=compute_90a,code=sm_90a" in group.device_flags
    assert "-gencode=arch=compute_90a,code=sm_90a" in plan.device_flags
    assert "-gencode=arch=compute_80,code=sm_80" in plan.device_flags
    assert not any("100" in f for f in plan.device_flags if f.startswith("-gencode"))
    assert plan.archs == ("8.0", "9.0a")
    assert any("10.0" in note for note in plan.notes)
    assert "-DCUDA_KERNEL" in plan.device_flags and "-DCUDA_KERNEL" in plan.cxx_flags
    assert {"-O3", "-DNDEBUG"} <= set(plan.device_flags) & set(plan.cxx_flags)
    assert plan.env["CUDA_HOME"] == "/opt/cuda"


#: What kernels written for Hugging Face's builder expect from the CUDA compile: device
#: lambdas, ENABLE_FP8, USE_CUDA, and __half with its conversions (torch's tooling
#: defines __CUDA_NO_HALF_CONVERSIONS__ and its kin, which must be undone after it).
HF_CUDA_FLAGS = ["--expt-extended-lambda", "-DENABLE_FP8", "-U__CUDA_NO_HALF_OPERATORS__",
                 "-U__CUDA_NO_HALF_CONVERSIONS__", "-U__CUDA_NO_BFLOAT16_CONVERSIONS__",
                 "-U__CUDA_NO_HALF2_OPERATORS__"]


def test_cuda_plan_gives_the_device_flags_of_hugging_faces_builder(manifest) -> None:
    plan = plan_build(manifest, backend="cuda", variant="v", source_id=SID, cxx=GCC,
                      device_compiler=NVCC_13)
    for flag in HF_CUDA_FLAGS:
        assert flag in plan.device_flags, flag
    assert "-DUSE_CUDA=1" in plan.device_flags and "-DUSE_CUDA=1" in plan.cxx_flags
    # before CUDA 11.8 that builder keeps torch's half defines and leaves out ENABLE_FP8
    old = plan_build(manifest, backend="cuda", variant="v", source_id=SID, cxx=GCC,
                     device_compiler=Tool("nvcc", Path("/opt/cuda/bin/nvcc"), (11, 7), "11.7"),
                     arch_override=["8.0"])
    assert "--expt-extended-lambda" in old.device_flags
    assert not set(HF_CUDA_FLAGS[1:]) & set(old.device_flags)


def test_rocm_plan_undoes_torchs_half_defines(manifest) -> None:
    plan = plan_build(manifest, backend="rocm", variant="v", source_id=SID, cxx=GCC,
                      device_compiler=HIPCC)
    for flag in ["-DENABLE_FP8", "-U__HIP_NO_HALF_CONVERSIONS__",
                 "-U__HIP_NO_HALF_OPERATORS__", "-fno-gpu-rdc"]:
        assert flag in plan.device_flags, flag


def test_csrc_is_on_every_sources_include_path_when_the_project_has_it(tmp_path: Path) -> None:
    # Hugging Face's builder puts <project>/csrc on the include path of every target, so a
    # binding includes its kernels' headers by bare name (megablocks' "cumsum.h")
    root = write_project(tmp_path, KERNELS, 'backends = ["cpu", "cuda", "rocm"]')
    plan = plan_build(load_manifest(root), backend="cpu", variant="v", source_id=SID, cxx=GCC)
    assert root / "csrc" not in plan.include_dirs
    (root / "csrc").mkdir()
    for backend, tool in [("cpu", None), ("cuda", NVCC_13), ("rocm", HIPCC)]:
        plan = plan_build(load_manifest(root), backend=backend, variant="v", source_id=SID,
                          cxx=GCC, device_compiler=tool)
        assert plan.include_dirs.count(root / "csrc") == 1, backend


def test_cuda_arch_override_picks_the_sections_capabilities(manifest) -> None:
    # the section declares 8.0, 9.0a and 10.0: --arch 9.0 and 9.0a both get its 9.0a
    for given in (["9.0a"], ["9.0"]):
        plan = plan_build(manifest, backend="cuda", variant="v", source_id=SID, cxx=GCC,
                          device_compiler=NVCC_13, arch_override=given)
        gencodes = [f for f in plan.device_flags if f.startswith("-gencode")]
        assert gencodes == ["-gencode=arch=compute_90a,code=sm_90a"], given
        assert plan.archs == ("9.0a",)


def test_cuda_plan_with_nothing_buildable_is_an_error(tmp_path: Path) -> None:
    root = write_project(tmp_path / "p", KERNELS.replace('["8.0", "9.0a", "10.0"]',
                                                         '["10.0"]'),
                         'backends = ["cpu", "cuda", "rocm"]')
    with pytest.raises(BuildError, match="none of the CUDA capabilities"):
        plan_build(load_manifest(root), backend="cuda", variant="v", source_id=SID, cxx=GCC,
                   device_compiler=NVCC_12_4)
    # with --arch: the section's 10.0 would serve it, but nvcc 12.4 cannot build it
    with pytest.raises(BuildError, match=r"kernel\.k_cuda: none of the CUDA capabilities "
                                         r"\['10\.0'\] can be built with nvcc 12\.4; fix: "):
        plan_build(load_manifest(root), backend="cuda", variant="v", source_id=SID, cxx=GCC,
                   device_compiler=NVCC_12_4, arch_override=["10.0"])


ARCH_KERNELS = """
[kernel.hopper]
backend = "cuda"
depends = ["torch"]
cuda-capabilities = ["8.0", "9.0a"]
src = ["k/k.cu"]

[kernel.ampere]
backend = "cuda"
depends = ["torch"]
cuda-capabilities = ["7.5", "8.0+PTX"]
src = ["a/a.cu"]

[kernel.any]
backend = "cuda"
depends = ["torch"]
src = ["n/n.cu"]
"""


def _arch_plan(root: Path, given: list[str]):
    project = write_project(root, ARCH_KERNELS, 'backends = ["cuda"]')
    for rel in ("a/a.cu", "n/n.cu"):
        (project / rel).parent.mkdir(exist_ok=True)
        (project / rel).write_text("")
    return plan_build(load_manifest(project), backend="cuda", variant="v", source_id=SID,
                      cxx=GCC, device_compiler=NVCC_13, arch_override=given)


@pytest.mark.parametrize(("given", "hopper", "ampere", "any_"), [
    # the section's architecture-specific capability for its base
    (["9.0"], ["9.0a"], ["8.0+PTX"], ["9.0"]),
    # SASS runs on newer minors of its major: the newest declared one not newer
    (["8.6"], ["8.0"], ["8.0+PTX"], ["8.6"]),
    (["8.0", "9.0"], ["8.0", "9.0a"], ["8.0+PTX"], ["8.0", "9.0"]),
])
def test_arch_override_gives_each_section_what_serves_it(tmp_path: Path, given, hopper,
                                                         ampere, any_) -> None:
    """As Hugging Face's builder matches a section's capabilities with the build's: a
    section that declares capabilities compiles for those of them that serve the GPUs
    --arch names (never one it does not declare: a CUTLASS 9.0a kernel compiled for plain
    sm_90 keeps none of its code); a section that declares none, for --arch itself."""
    plan = _arch_plan(tmp_path / "p", given)
    by_group = {g.name: [f.split("=", 1)[1] for f in g.device_flags if f.startswith("-gencode")]
                for g in plan.groups}
    from kernelforge.archs import nvcc_gencode_flags

    for name, caps in (("hopper", hopper), ("ampere", ampere), ("any", any_)):
        assert by_group[name] == [f.split("=", 1)[1] for f in nvcc_gencode_flags(caps)], name


def test_arch_override_no_section_capability_serves(tmp_path: Path) -> None:
    # 10.0: the ampere section's 8.0+PTX serves it (PTX runs on newer GPUs), the "any"
    # section compiles for it; the hopper section serves none of it and compiles for its
    # own capabilities (its sources are part of the extension), with a note
    plan = _arch_plan(tmp_path / "p", ["10.0", "10.0"])
    by_group = {g.name: [f.split("=", 1)[1] for f in g.device_flags if f.startswith("-gencode")]
                for g in plan.groups}
    assert by_group["hopper"] == ["arch=compute_80,code=sm_80", "arch=compute_90a,code=sm_90a"]
    assert [n for n in plan.notes if "hopper" in n] == [
        "kernel.hopper serves none of --arch 10.0 (its cuda-capabilities: 8.0, 9.0a; nvcc "
        "13.0): compiled for its own capabilities"]
    # a value one section cannot serve beside one it can: built, with one note (a value
    # given twice is one)
    plan = _arch_plan(tmp_path / "q", ["7.5", "9.0", "7.5"])
    assert [n for n in plan.notes if "hopper" in n] == [
        "kernel.hopper has no capability for --arch 7.5 (its cuda-capabilities: 8.0, 9.0a; "
        "nvcc 13.0); its ops will not run on such a GPU"]
    # no section serves any value: the build stops, naming them all
    root = write_project(tmp_path / "r", ARCH_KERNELS.split("[kernel.any]")[0],
                         'backends = ["cuda"]')
    (root / "a").mkdir()
    (root / "a" / "a.cu").write_text("")
    with pytest.raises(BuildError, match=r"no kernel section serves --arch 7\.0 with nvcc 13\.0 "
                                         r"\(their cuda-capabilities: kernel\.hopper: 8\.0, "
                                         r"9\.0a; kernel\.ampere: 7\.5, 8\.0\+PTX\); fix: "):
        plan_build(load_manifest(root), backend="cuda", variant="v", source_id=SID, cxx=GCC,
                   device_compiler=NVCC_13, arch_override=["7.0"])


def test_arch_override_serves_from_what_nvcc_can_build(tmp_path: Path) -> None:
    """A section's capability nvcc cannot target does not serve: one it can does (9.0 for
    --arch 9.0 where nvcc 11.8 has no 9.0a)."""
    root = write_project(tmp_path / "p", KERNELS.replace('["8.0", "9.0a", "10.0"]',
                                                         '["8.0", "9.0", "9.0a"]'),
                         'backends = ["cpu", "cuda", "rocm"]')
    old_nvcc = Tool("nvcc", Path("/opt/cuda/bin/nvcc"), (11, 8), "release 11.8")
    plan = plan_build(load_manifest(root), backend="cuda", variant="v", source_id=SID,
                      cxx=GCC, device_compiler=old_nvcc, arch_override=["9.0"])
    assert plan.archs == ("9.0",)


@pytest.mark.parametrize(("declared", "given", "chosen"), [
    (["10.0f", "12.0f"], ["10.3"], ["10.0f"]),  # family code runs on its later members
    (["10.0a", "10.0f"], ["10.0"], ["10.0a"]),  # the architecture-specific one first
    (["10.0", "10.0f"], ["10.3"], ["10.0f"]),   # family before plain SASS
    (["10.0f"], ["12.0"], []),                  # not across majors
])
def test_arch_override_family_capabilities(tmp_path: Path, declared, given, chosen) -> None:
    from kernelforge.build.plan import serving_capabilities
    from kernelforge.manifest import KernelSpec

    kernel = KernelSpec(name="k", backend="cuda", src=("k.cu",), depends=("torch",),
                        cuda_capabilities=tuple(declared))
    served, unserved = serving_capabilities(kernel, given, NVCC_13)
    assert served == chosen
    assert unserved == ([] if chosen else given)


def test_rocm_plan(manifest) -> None:
    plan = plan_build(manifest, backend="rocm", variant="torch27-cxx11-rocm63-x86_64-linux",
                      source_id=SID, cxx=GCC, device_compiler=HIPCC)
    assert [p.name for p in plan.sources] == ["torch_binding.cpp"]
    assert [p.name for p in plan.groups[0].sources] == ["k.hip"]
    assert "--offload-arch=gfx942" in plan.groups[0].device_flags
    assert "-DROCM_KERNEL" in plan.device_flags and "-DUSE_ROCM=1" in plan.device_flags
    assert "--offload-arch=gfx942" in plan.device_flags
    assert "--offload-arch=gfx90a" in plan.device_flags
    assert plan.archs == ("gfx942", "gfx90a")
    assert plan.env["ROCM_HOME"] == "/opt/rocm"
    assert plan.namespace == "_demo_rocm_0123456"


def test_rocm_plan_refuses_unknown_arch_override(manifest) -> None:
    with pytest.raises(BuildError, match="gfx99999"):
        plan_build(manifest, backend="rocm", variant="v", source_id=SID, cxx=GCC,
                   device_compiler=HIPCC, arch_override=["gfx99999"])


def test_gpu_plans_need_their_compiler(manifest) -> None:
    with pytest.raises(ToolchainError, match="nvcc"):
        plan_build(manifest, backend="cuda", variant="v", source_id=SID, cxx=GCC)
    with pytest.raises(ToolchainError, match="hipcc"):
        plan_build(manifest, backend="rocm", variant="v", source_id=SID, cxx=GCC)


def test_backend_without_kernels_is_an_error(tmp_path: Path) -> None:
    only_cpu = KERNELS.split("[kernel.k_cuda]")[0]
    m = load_manifest(write_project(tmp_path, only_cpu, 'backends = ["cpu"]'))
    with pytest.raises(BuildError, match='backend = "cuda"'):
        plan_build(m, backend="cuda", variant="v", source_id=SID, cxx=GCC,
                   device_compiler=NVCC_13)


def test_unknown_dependency_names_the_known_ones() -> None:
    with pytest.raises(ToolchainError, match="cutlass_4_0"):
        resolve_dependency("cutlass_3_9")
    assert resolve_dependency("torch").include_dirs == ()


def test_cutlass_dependency_resolves_to_the_pinned_wheel(monkeypatch) -> None:
    import importlib.metadata

    monkeypatch.setattr(importlib.metadata, "version", lambda dist: "4.1.0")
    with pytest.raises(ToolchainError, match=r"pinned to nvidia-cutlass==4\.2\.0\.0.*pip install"):
        resolve_dependency("cutlass_4_0")


def test_nvcc_is_found_in_a_real_toolkit_not_a_wrapper(tmp_path: Path, monkeypatch) -> None:
    from kernelforge.build import toolchain

    home = tmp_path / "cuda-12.8"
    (home / "bin").mkdir(parents=True)
    (home / "include").mkdir()
    (home / "include" / "cuda_runtime.h").write_text("")
    (home / "bin" / "nvcc").write_text("#!/bin/sh\necho 'Cuda compilation tools, release 12.8'\n")
    wrappers = tmp_path / "wrappers"
    wrappers.mkdir()
    (wrappers / "nvcc").write_text(f"#!/bin/sh\nexec {home}/bin/nvcc \"$@\"\n")
    for script in (home / "bin" / "nvcc", wrappers / "nvcc"):
        script.chmod(0o755)
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.delenv("CUDA_PATH", raising=False)
    monkeypatch.setenv("PATH", f"{wrappers}:/usr/bin:/bin")
    toolchain.find_nvcc.cache_clear()
    try:
        # CUDA_HOME names the toolkit; the wrapper on PATH is not taken for it
        monkeypatch.setenv("CUDA_HOME", str(home))
        nvcc = toolchain.find_nvcc()
        assert nvcc is not None and nvcc.path == home / "bin" / "nvcc"
        assert nvcc.version == (12, 8)
        # A wrapper comes first (CUDA_PATH names a directory holding only bin/nvcc) and
        # the toolkit is on PATH: the toolkit, with its headers, is taken.
        monkeypatch.delenv("CUDA_HOME")
        (tmp_path / "wrap-home").mkdir()
        (tmp_path / "wrap-home" / "bin").symlink_to(wrappers)
        monkeypatch.setenv("CUDA_PATH", str(tmp_path / "wrap-home"))
        monkeypatch.setenv("PATH", f"{home / 'bin'}:/usr/bin:/bin")
        toolchain.find_nvcc.cache_clear()
        nvcc = toolchain.find_nvcc()
        assert nvcc is not None and nvcc.path == home / "bin" / "nvcc"
        # ... and the build says why the toolkit CUDA_PATH names was passed over
        assert f"CUDA_PATH={tmp_path / 'wrap-home'} holds bin/nvcc but no " \
            "include/cuda_runtime.h" in nvcc.note, nvcc.note
        assert str(home / "bin" / "nvcc") in nvcc.note and "unset it" in nvcc.note
    finally:
        toolchain.find_nvcc.cache_clear()


def _fake_toolkit(home: Path, release: str = "12.8") -> Path:
    """A CUDA toolkit folder whose nvcc only answers --version."""
    (home / "bin").mkdir(parents=True)
    (home / "include").mkdir()
    (home / "include" / "cuda_runtime.h").write_text("")
    nvcc = home / "bin" / "nvcc"
    nvcc.write_text(f"#!/bin/sh\necho 'Cuda compilation tools, release {release}'\n")
    nvcc.chmod(0o755)
    return nvcc


def test_a_cuda_home_that_is_not_used_is_explained(tmp_path: Path, monkeypatch) -> None:
    """CUDA_HOME naming no toolkit is not passed over in silence: the toolkit found
    instead carries a note, and finding none names the variable."""
    from kernelforge.build import toolchain

    default = _fake_toolkit(tmp_path / "default-cuda")
    monkeypatch.setitem(toolchain._DEVICE_COMPILERS, "nvcc", (
        ("CUDA_HOME", "CUDA_PATH"), str(tmp_path / "default-cuda"), r"release (\d+\.\d+)",
        "include/cuda_runtime.h"))
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    monkeypatch.delenv("CUDA_PATH", raising=False)
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "cuda-12.9"))  # a typo: no such folder
    toolchain.find_nvcc.cache_clear()
    try:
        nvcc = toolchain.find_nvcc()
        assert nvcc is not None and nvcc.path == default
        assert nvcc.note.startswith(f"CUDA_HOME={tmp_path / 'cuda-12.9'} has no bin/nvcc, "
                                    f"so {default} is used; fix: point CUDA_HOME at"), nvcc.note
        # the variable naming a usable toolkit: no note
        monkeypatch.setenv("CUDA_HOME", str(tmp_path / "default-cuda"))
        toolchain.find_nvcc.cache_clear()
        nvcc = toolchain.find_nvcc()
        assert nvcc is not None and nvcc.path == default and nvcc.note == ""
        # nothing to fall back to: the reason the build gives names the variable
        monkeypatch.setitem(toolchain._DEVICE_COMPILERS, "nvcc", (
            ("CUDA_HOME", "CUDA_PATH"), str(tmp_path / "nowhere"), r"release (\d+\.\d+)",
            "include/cuda_runtime.h"))
        monkeypatch.setenv("CUDA_HOME", str(tmp_path / "cuda-12.9"))
        toolchain.find_nvcc.cache_clear()
        assert toolchain.find_nvcc() is None
        assert toolchain.not_found_reason("nvcc") == (
            f"nvcc was not found: CUDA_HOME={tmp_path / 'cuda-12.9'} has no bin/nvcc, and none "
            f"is on PATH or in {tmp_path / 'nowhere'}; fix: point CUDA_HOME at the toolkit's "
            "folder (the one holding bin/nvcc)")
        monkeypatch.delenv("CUDA_HOME")
        assert toolchain.not_found_reason("nvcc") == \
            "nvcc was not found (set CUDA_HOME or put nvcc on PATH)"
    finally:
        toolchain.find_nvcc.cache_clear()


def test_extension_with_a_private_cxx_runtime_is_refused(tmp_path: Path, monkeypatch) -> None:
    from kernelforge.build import compile as compile_mod

    so = tmp_path / "_x.abi3.so"
    so.write_bytes(b"")
    monkeypatch.setenv("CXX", "/opt/gcc/bin/g++")
    monkeypatch.setattr(compile_mod, "needed_libraries",
                        lambda path: ["libc10.so", "libc10_cuda.so", "libgcc_s.so.1"])
    monkeypatch.setattr(compile_mod, "bundles_cxx_runtime", lambda path: True)
    message = r"'/opt/gcc/bin/g\+\+' linked libstdc\+\+ statically.*CXX="
    with pytest.raises(BuildError, match=message):
        compile_mod.check_cxx_runtime(so)
    monkeypatch.setattr(compile_mod, "needed_libraries",
                        lambda path: ["libc10.so", "libstdc++.so.6", "libc.so.6"])
    compile_mod.check_cxx_runtime(so)  # a normal extension passes
    monkeypatch.setattr(compile_mod, "needed_libraries", lambda path: ["libc.so.6"])
    monkeypatch.setattr(compile_mod, "bundles_cxx_runtime", lambda path: False)
    compile_mod.check_cxx_runtime(so)  # no C++ runtime used at all: nothing to share


def test_needed_libraries_reads_a_real_elf_file() -> None:
    import sys as _sys

    from kernelforge.build.compile import needed_libraries

    libs = needed_libraries(Path(_sys.executable).resolve())
    if libs is None:
        pytest.skip("readelf is not installed")
    assert any(lib.startswith("libc.so") for lib in libs), libs


def test_each_kernel_section_keeps_its_own_capabilities_and_flags(tmp_path: Path) -> None:
    """Two CUDA kernels, one Hopper-only: the Hopper one is not compiled for sm_80."""
    kernels = """
[kernel.portable]
backend = "cuda"
depends = ["torch"]
cuda-capabilities = ["8.0", "9.0"]
cuda-flags = ["-DPORTABLE"]
src = ["k/k.cu"]

[kernel.hopper]
backend = "cuda"
depends = ["torch"]
cuda-capabilities = ["9.0a"]
cuda-flags = ["-DHOPPER"]
cxx-flags = ["-DHOPPER_HOST"]
src = ["h/h.cu"]
"""
    root = write_project(tmp_path, kernels, 'backends = ["cuda"]')
    (root / "h").mkdir()
    (root / "h" / "h.cu").write_text("// wgmma\n")
    plan = plan_build(load_manifest(root), backend="cuda", variant="v", source_id=SID,
                      cxx=GCC, device_compiler=NVCC_13)
    by_name = {g.name: g for g in plan.groups}
    hopper, portable = by_name["hopper"], by_name["portable"]
    gencode = [f for f in hopper.device_flags if f.startswith("-gencode")]
    assert gencode == ["-gencode=arch=compute_90a,code=sm_90a"]
    assert "-DHOPPER" in hopper.device_flags and "-DPORTABLE" not in hopper.device_flags
    assert hopper.cxx_flags == ("-DHOPPER_HOST",) and "-DHOPPER_HOST" not in plan.cxx_flags
    assert [f for f in portable.device_flags if f.startswith("-gencode")] == [
        "-gencode=arch=compute_80,code=sm_80", "-gencode=arch=compute_90,code=sm_90"]
    assert plan.archs == ("8.0", "9.0", "9.0a")


NEW_CUDA_KERNEL = """
[kernel.k_new]
backend = "cuda"
depends = ["torch"]
cuda-minver = "14.0"
src = ["k/new.cu"]
"""


def test_kernel_section_needing_a_newer_cuda_is_left_out(tmp_path: Path) -> None:
    """`cuda-minver` above the toolkit skips the section (as Hugging Face's builder does)."""
    root = write_project(tmp_path, KERNELS + NEW_CUDA_KERNEL, 'backends = ["cpu", "cuda", "rocm"]')
    (root / "k" / "new.cu").write_text("// needs CUDA 14\n")
    m = load_manifest(root)
    plan = plan_build(m, backend="cuda", variant="v", source_id=SID, cxx=GCC,
                      device_compiler=NVCC_13)
    assert [g.name for g in plan.groups] == ["k_cuda"]
    assert any("kernel.k_new" in n and "cuda-minver" in n for n in plan.notes), plan.notes
    nvcc_14 = Tool("nvcc", Path("/opt/cuda/bin/nvcc"), (14, 0), "release 14.0")
    plan = plan_build(m, backend="cuda", variant="v", source_id=SID, cxx=GCC,
                      device_compiler=nvcc_14)
    assert [g.name for g in plan.groups] == ["k_cuda", "k_new"]


def _cuda_here(monkeypatch: pytest.MonkeyPatch) -> None:
    """Present a CUDA 13.0 torch and nvcc 13.0 to the build, whatever this machine has."""
    import dataclasses

    import kernelforge.build as build

    real = build._torch_install
    monkeypatch.setattr(build, "_torch_install",
                        lambda env: dataclasses.replace(real(env), cuda="13.0", hip=None))
    monkeypatch.setattr(build, "find_nvcc", lambda cuda=None: NVCC_13)


@pytest.mark.parametrize(("key", "value", "message"), [
    ("minver", "13.5", r"'general.cuda.minver' requires CUDA >= 13.5, but nvcc 13.0"),
    ("maxver", "12.8", r"'general.cuda.maxver' allows CUDA <= 12.8, but nvcc 13.0"),
])
def test_cuda_toolkit_outside_the_manifest_range_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, key: str, value: str, message: str
) -> None:
    from kernelforge.build import build_project

    _cuda_here(monkeypatch)
    root = write_project(tmp_path, KERNELS,
                         f'backends = ["cpu", "cuda", "rocm"]\n[general.cuda]\n{key} = "{value}"')
    with pytest.raises(ToolchainError, match=r"cannot build backend 'cuda' here: .*" + message):
        build_project(root, backends=["cuda"], progress=lambda _: None)


class _Compiling(Exception):
    """Raised in place of the compiler: the build got past its checks."""


def _stop_at_compile(monkeypatch: pytest.MonkeyPatch) -> None:
    from kernelforge import build

    def compile_plan(*args: object, **kwargs: object) -> None:
        raise _Compiling

    monkeypatch.setattr(build, "compile_plan", compile_plan)


def test_cuda_toolkit_inside_the_manifest_range_passes_the_check(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same check lets nvcc 13.0 through for minver 12.8 / maxver 13.0: the build
    goes on to compile."""
    from kernelforge import build
    from kernelforge.build import build_project

    _cuda_here(monkeypatch)
    monkeypatch.setattr(build, "_variant_name",
                        lambda m, backend, facts: "torch213-cxx11-cu130-x86_64-linux")
    _stop_at_compile(monkeypatch)
    root = write_project(tmp_path, KERNELS, 'backends = ["cpu", "cuda", "rocm"]\n'
                         '[general.cuda]\nminver = "12.8"\nmaxver = "13.0"')
    with pytest.raises(_Compiling):
        build_project(root, backends=["cuda"], progress=lambda _: None)



def _fake_compile(monkeypatch) -> list:
    """Stand in for the compile: each plan's extension is a few bytes in its work
    folder. Returns the list the compiled plans are appended to."""
    from kernelforge import build

    compiled: list = []

    def compile_plan(plan, *, work_dir: Path, **kwargs: object) -> Path:
        compiled.append(plan)
        work_dir.mkdir(parents=True, exist_ok=True)
        extension = work_dir / f"{plan.namespace}.abi3.so"
        extension.write_bytes(b"\x7fELF")
        return extension

    monkeypatch.setattr(build, "compile_plan", compile_plan)
    return compiled


def test_a_cuda_variant_names_the_host_compiler_nvcc_ran(tmp_path: Path, monkeypatch) -> None:
    """nvcc compiles the host side of .cu sources with $CC or the gcc on PATH, not with
    $CXX: metadata.json names that compiler and its version beside c++ and nvcc, so a
    CUDA variant's toolchain says what built all of it."""
    import json

    from kernelforge import build
    from kernelforge.build import build_project

    _cuda_here(monkeypatch)
    monkeypatch.setattr(build, "_variant_name",
                        lambda m, backend, facts: "torch213-cxx11-cu130-x86_64-linux")
    host = Tool("gcc", Path("/opt/gcc-11/bin/gcc"), (11, 4, 0), "gcc (GCC) 11.4.0")
    monkeypatch.setattr(build, "find_nvcc_host", lambda: host)
    _fake_compile(monkeypatch)
    root = write_project(tmp_path, KERNELS, 'backends = ["cpu", "cuda", "rocm"]')
    (result,) = build_project(root, backends=["cuda"], progress=lambda _: None)
    toolchain = json.loads((result.path / "metadata.json").read_text())["provenance"]["toolchain"]
    assert toolchain["nvcc"] == "13.0" and toolchain["nvcc-host"] == "gcc 11.4.0"


@pytest.mark.parametrize("given", [[" 9.0a "], ["09.0a"], (" 9.0a ",)])
def test_build_project_reads_archs_as_arch_reads_them(tmp_path: Path, monkeypatch,
                                                      given: list[str]) -> None:
    """``build_project(archs=[" 9.0a "])`` is the build ``archs=["9.0a"]`` (and ``--arch
    9.0a``) made: found up to date, not compiled again for an arch written otherwise."""
    from kernelforge import build
    from kernelforge.build import build_project

    _cuda_here(monkeypatch)
    monkeypatch.setattr(build, "_variant_name",
                        lambda m, backend, facts: "torch213-cxx11-cu130-x86_64-linux")
    compiled = _fake_compile(monkeypatch)
    root = write_project(tmp_path, KERNELS, 'backends = ["cpu", "cuda", "rocm"]')
    (first,) = build_project(root, backends=["cuda"], archs=["9.0a"], progress=lambda _: None)
    (plan,) = compiled
    assert [f for f in plan.device_flags if f.startswith("-gencode")] == [
        "-gencode=arch=compute_90a,code=sm_90a"]
    (again,) = build_project(root, backends=["cuda"], archs=given, progress=lambda _: None)
    assert (again.up_to_date, again.path) == (True, first.path)
    assert len(compiled) == 1


def test_the_build_prints_the_compilers_note(tmp_path: Path, monkeypatch) -> None:
    from kernelforge import build
    from kernelforge.build import build_project

    _cuda_here(monkeypatch)
    noted = Tool("nvcc", Path("/opt/cuda/bin/nvcc"), (13, 0), "release 13.0",
                 "CUDA_HOME=/opt/cuda-13.1 has no bin/nvcc, so /opt/cuda/bin/nvcc is used")
    monkeypatch.setattr(build, "find_nvcc", lambda cuda=None: noted)
    monkeypatch.setattr(build, "_variant_name",
                        lambda m, backend, facts: "torch213-cxx11-cu130-x86_64-linux")
    _stop_at_compile(monkeypatch)
    root = write_project(tmp_path, KERNELS, 'backends = ["cpu", "cuda", "rocm"]')
    lines: list[str] = []
    with pytest.raises(_Compiling):
        build_project(root, backends=["cuda"], progress=lines.append)
    assert f"note: {noted.note}" in lines, lines


def test_stable_abi_builds_a_regular_variant_with_a_note(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """kernelforge does not build stable-ABI variants yet: a project asking for one gets
    a regular variant for the installed torch, and a note that says so."""
    from kernelforge.build import build_project

    _stop_at_compile(monkeypatch)
    root = write_project(tmp_path, KERNELS, 'backends = ["cpu", "cuda", "rocm"]')
    toml = root / "build.toml"
    toml.write_text(toml.read_text().replace("[torch]\n", '[torch]\nstable-abi = "2.11"\n'))
    lines: list[str] = []
    with pytest.raises(_Compiling):
        build_project(root, backends=["cpu"], progress=lines.append)
    assert any("torch.stable-abi = '2.11' is not built yet; this is a regular variant for "
               "the installed torch only" in line for line in lines), lines


@pytest.mark.parametrize("command", [
    "c++ -MMD -MF '/p/a dir/obj/k.o.d' -O3 -c '/p/a dir/k/k.cpp' -o '/p/a dir/obj/k.o' -fPIC",
    'c++ -MMD -MF /p/obj/k.o.d -O3 -c "/p/a dir/k/k.cpp" -o /p/obj/k.o -fPIC',
])
def test_progress_names_sources_in_folders_with_spaces(command: str) -> None:
    from kernelforge.build.compile import _describe_step

    assert _describe_step(command, Path("/p/a dir")) == "compiled k/k.cpp"
    plain = "c++ -MMD -MF /p/obj/k.o.d -O3 -c /p/k/k.cpp -o /p/obj/k.o -fPIC"
    assert _describe_step(plain, Path("/p")) == "compiled k/k.cpp"
    assert _describe_step("c++ -shared /p/obj/k.o -o /p/lib/x.so", Path("/p")) == "linked"


@pytest.mark.parametrize(("backend", "compiler"), [("cuda", NVCC_13), ("rocm", HIPCC)])
def test_gpu_links_drop_local_symbols(manifest, backend: str, compiler: Tool) -> None:
    """nvcc's host-side temporary file (tmpxft_<pid>_...cudafe1.cpp) is a local file
    symbol of each object: the link drops local symbols so that builds do not differ."""
    plan = plan_build(manifest, backend=backend, variant="v", source_id=SID, cxx=GCC,
                      device_compiler=compiler)
    assert "-Wl,-x" in plan.link_flags
    assert plan.fingerprint_inputs()["link_flags"] == list(plan.link_flags)


def test_nvcc_objects_link_to_identical_libraries(tmp_path: Path) -> None:
    """The link flags of the cuda plan make two nvcc builds of one source byte-identical
    (without them the process id in nvcc's temporary file name differs)."""
    import shutil
    import subprocess

    from kernelforge.build.toolchain import find_nvcc

    nvcc, gxx = find_nvcc(), shutil.which("g++")
    if nvcc is None or gxx is None:
        pytest.skip("needs nvcc and g++")
    source = tmp_path / "k.cu"
    source.write_text("__global__ void k(float* x) { x[threadIdx.x] += 1; }\n"
                      "void launch(float* x) { k<<<1, 32>>>(x); }\n")
    manifest = load_manifest(write_project(tmp_path / "p", KERNELS,
                                           'backends = ["cpu", "cuda", "rocm"]'))
    link_flags = plan_build(manifest, backend="cuda", variant="v", source_id=SID, cxx=GCC,
                            device_compiler=NVCC_13).link_flags
    built = []
    for name in ("a", "b"):
        obj, lib = tmp_path / f"{name}.o", tmp_path / f"{name}.so"
        subprocess.run([str(nvcc.path), "-O3", "-c", str(source), "-o", str(obj),
                        "-Xcompiler=-fPIC", "-gencode=arch=compute_80,code=sm_80"],
                       check=True, cwd=tmp_path)
        subprocess.run([gxx, "-shared", "-o", str(lib), str(obj), *link_flags],
                       check=True, cwd=tmp_path)
        built.append(lib.read_bytes())
    assert built[0] == built[1]


def test_header_paths_of_torch_dependencies_and_cuda_are_mapped(manifest) -> None:
    """torch's checks embed __FILE__ of its headers: with only the project's folder
    mapped, builds against one torch in two environments differed. Every include root
    the build takes headers from is written as a relative name."""
    from kernelforge.build.toolchain import Dependency

    cutlass = Dependency("cutlass_4_0", "nvidia-cutlass", "4.2.0.0",
                         (Path("/envs/a/site-packages/cutlass_library/source/include"),))
    torch_dir = Path("/envs/a/site-packages/torch")
    plan = plan_build(manifest, backend="cuda", variant="v", source_id=SID, cxx=GCC,
                      device_compiler=NVCC_13, dependencies=[cutlass], torch_dir=torch_dir)
    wanted = [f"-ffile-prefix-map={manifest.root}=.", f"-ffile-prefix-map={torch_dir}=torch",
              f"-ffile-prefix-map={cutlass.include_dirs[0]}=cutlass_4_0",
              "-ffile-prefix-map=/opt/cuda=cuda"]
    for flag in wanted:
        assert flag in plan.cxx_flags, plan.cxx_flags
        assert f"-Xcompiler={flag}" in plan.device_flags, plan.device_flags


def test_the_most_specific_path_map_comes_last(tmp_path: Path) -> None:
    """A CUDA toolkit in a parent of the project (nvcc in /usr/bin): the compilers apply
    the last map that matches, so the project's own map must come after it."""
    manifest = load_manifest(write_project(tmp_path / "usr" / "src" / "p", KERNELS,
                                           'backends = ["cpu", "cuda", "rocm"]'))
    nvcc = Tool("nvcc", tmp_path / "usr" / "bin" / "nvcc", (13, 0), "release 13.0")
    plan = plan_build(manifest, backend="cuda", variant="v", source_id=SID, cxx=GCC,
                      device_compiler=nvcc)
    maps = [f for f in plan.cxx_flags if f.startswith("-ffile-prefix-map=")]
    assert maps == [f"-ffile-prefix-map={tmp_path / 'usr'}=cuda",
                    f"-ffile-prefix-map={manifest.root}=."]


def test_recorded_flags_name_no_install_paths(tmp_path: Path) -> None:
    """metadata.json records the flags: with the prefix maps' absolute paths in them, two
    builds against one torch, CUTLASS and CUDA installed at other paths differed. Each
    mapped directory is written as a placeholder instead."""
    from kernelforge.build.toolchain import Dependency

    recorded = []
    for env in ("a", "b-longer"):
        project = write_project(tmp_path / env / "project", KERNELS,
                                'backends = ["cpu", "cuda", "rocm"]')
        site = tmp_path / env / "venv" / "site-packages"
        cutlass = Dependency("cutlass_4_0", "nvidia-cutlass", "4.2.0.0",
                             (site / "cutlass_library" / "source" / "include",))
        nvcc = Tool("nvcc", tmp_path / env / "cuda-13.0" / "bin" / "nvcc", (13, 0), "13.0")
        plan = plan_build(load_manifest(project), backend="cuda", variant="v", source_id=SID,
                          cxx=GCC, device_compiler=nvcc, dependencies=[cutlass],
                          torch_dir=site / "torch")
        flags = (plan.path_free(plan.cxx_flags), plan.path_free(plan.device_flags))
        assert not any(str(tmp_path) in f for f in flags[0] + flags[1]), flags
        recorded.append(flags)
    assert recorded[0] == recorded[1]
    cxx, device = recorded[0]
    for old, new in [("<project>", "."), ("<torch>", "torch"),
                     ("<cutlass_4_0>", "cutlass_4_0"), ("<cuda>", "cuda")]:
        assert f"-ffile-prefix-map={old}={new}" in cxx, cxx
        assert f"-Xcompiler=-ffile-prefix-map={old}={new}" in device, device


def test_a_directory_inside_another_keeps_its_own_placeholder(tmp_path: Path) -> None:
    """A virtual environment inside the project: torch is <torch>, not <project>/.venv/...;
    and a path is replaced only whole (/x/cuda is not replaced in /x/cuda-12)."""
    manifest = load_manifest(write_project(tmp_path / "p", KERNELS,
                                           'backends = ["cpu", "cuda", "rocm"]'))
    torch_dir = manifest.root / ".venv" / "lib" / "site-packages" / "torch"
    nvcc = Tool("nvcc", tmp_path / "cuda" / "bin" / "nvcc", (13, 0), "13.0")
    plan = plan_build(manifest, backend="cuda", variant="v", source_id=SID, cxx=GCC,
                      device_compiler=nvcc, torch_dir=torch_dir)
    assert "-ffile-prefix-map=<torch>=torch" in plan.path_free(plan.cxx_flags)
    assert plan.path_free([f"-I{torch_dir}/include", f"-I{tmp_path}/cuda-12/include",
                           f"-DROOT={manifest.root}", f"-I{tmp_path}/p2"]) == [
        "-I<torch>/include", f"-I{tmp_path}/cuda-12/include", "-DROOT=<project>",
        f"-I{tmp_path}/p2"]


SHARED_KERNELS = """
[kernel.older]
backend = "cuda"
depends = ["torch"]
cuda-capabilities = ["8.0"]
cuda-flags = ["-Xcompiler", "-fopenmp", "-DOLDER"]
cxx-flags = ["-DOLDER_HOST"]
include = ["k"]
src = ["k/older.cu", "k/both.cu", "k/k.h"]

[kernel.newer]
backend = "cuda"
depends = ["torch"]
cuda-capabilities = ["9.0a"]
cuda-flags = ["-Xcompiler", "-fopenmp", "-DNEWER"]
include = ["n"]
src = ["./k/both.cu", "k/newer.cu"]
"""


def _shared_project(tmp_path: Path, kernels: str = SHARED_KERNELS) -> Path:
    root = write_project(tmp_path, kernels, 'backends = ["cuda"]')
    (root / "n").mkdir()
    for name in ("older.cu", "newer.cu", "both.cu"):
        (root / "k" / name).write_text("// src\n")
    return root


def test_a_source_two_sections_list_is_compiled_once_with_both_sections_settings(
        tmp_path: Path) -> None:
    """Hugging Face's builder adds each listing section's capabilities and flags to the
    one source file, and compiles it once: two copies would define its symbols twice."""
    plan = plan_build(load_manifest(_shared_project(tmp_path)), backend="cuda", variant="v",
                      source_id=SID, cxx=GCC, device_compiler=NVCC_13)
    assert [(g.name, [p.name for p in g.sources]) for g in plan.groups] == [
        ("older", ["older.cu"]), ("newer", ["newer.cu"]), ("older+newer", ["both.cu"])]
    shared = plan.groups[2]
    assert shared.sources == (tmp_path / "k" / "both.cu",)
    assert list(shared.device_flags) == [
        "-gencode=arch=compute_80,code=sm_80", "-gencode=arch=compute_90a,code=sm_90a",
        "-Xcompiler", "-fopenmp", "-DOLDER", "-Xcompiler", "-fopenmp", "-DNEWER"]
    assert shared.cxx_flags == ("-DOLDER_HOST",)
    assert shared.include_dirs == (tmp_path / "k", tmp_path / "n")
    older, newer = plan.groups[:2]
    assert "-DNEWER" not in older.device_flags and "-DOLDER" not in newer.device_flags
    assert [f for f in newer.device_flags if f.startswith("-gencode")] == [
        "-gencode=arch=compute_90a,code=sm_90a"]


def test_a_shared_source_of_a_skipped_section_gets_the_other_sections_settings(
        tmp_path: Path) -> None:
    """A section left out by its cuda-minver adds nothing: the shared source compiles
    with the remaining section, as part of it."""
    kernels = SHARED_KERNELS.replace('[kernel.newer]\n', '[kernel.newer]\ncuda-minver = "14.0"\n')
    plan = plan_build(load_manifest(_shared_project(tmp_path, kernels)), backend="cuda",
                      variant="v", source_id=SID, cxx=GCC, device_compiler=NVCC_13)
    assert [(g.name, [p.name for p in g.sources]) for g in plan.groups] == [
        ("older", ["older.cu", "both.cu"])]


def test_rocm_and_cpu_sections_share_sources_the_same_way(tmp_path: Path) -> None:
    kernels = """
[kernel.a]
backend = "rocm"
depends = ["torch"]
rocm-archs = ["gfx942"]
hip-flags = ["-DA"]
src = ["k/k.hip"]

[kernel.b]
backend = "rocm"
depends = ["torch"]
rocm-archs = ["gfx90a", "gfx942"]
hip-flags = ["-DB"]
src = ["k/k.hip"]

[kernel.c]
backend = "cpu"
depends = ["torch"]
cxx-flags = ["-DC"]
src = ["k/k.cpp"]

[kernel.d]
backend = "cpu"
depends = ["torch"]
cxx-flags = ["-DD"]
src = ["k/k.cpp"]
"""
    m = load_manifest(write_project(tmp_path, kernels, 'backends = ["cpu", "rocm"]'))
    (rocm,) = plan_build(m, backend="rocm", variant="v", source_id=SID, cxx=GCC,
                         device_compiler=HIPCC).groups
    assert (rocm.name, list(rocm.device_flags)) == (
        "a+b", ["--offload-arch=gfx942", "--offload-arch=gfx90a", "-DA", "-DB"])
    (cpu,) = plan_build(m, backend="cpu", variant="v", source_id=SID, cxx=GCC).groups
    assert (cpu.name, cpu.cxx_flags, cpu.device_flags) == ("c+d", ("-DC", "-DD"), ())


def test_torch_cxx_flags_are_the_bindings_own(tmp_path: Path) -> None:
    root = write_project(tmp_path, KERNELS, 'backends = ["cpu", "cuda", "rocm"]')
    toml = root / "build.toml"
    toml.write_text(toml.read_text().replace("[torch]\n",
                                             '[torch]\ncxx-flags = ["-DB1", "-DB2"]\n'))
    plan = plan_build(load_manifest(root), backend="cpu", variant="v", source_id=SID, cxx=GCC)
    assert plan.binding_cxx_flags == ("-DB1", "-DB2")
    assert plan.cxx_flags[-2:] == ("-DB1", "-DB2")
    assert plan.fingerprint_inputs()["binding_cxx_flags"] == ["-DB1", "-DB2"]


@pytest.mark.parametrize(("torch_version", "refused"), [
    ("2.12.0", None), ("2.12.1", None), ("2.12.3+cu130", None), ("2.11.9", "minver"),
    ("2.13.0", "maxver")])
def test_torch_maxver_admits_every_release_of_its_minor_version(
        tmp_path: Path, torch_version: str, refused: str | None) -> None:
    """Their build matrix compares torch 2.12 (the variant's torch212) with the bounds, so
    maxver = "2.12" builds for torch 2.12.1 too."""
    from kernelforge.build import _check_torch_range

    root = write_project(tmp_path, KERNELS, 'backends = ["cpu", "cuda", "rocm"]')
    toml = root / "build.toml"
    toml.write_text(toml.read_text().replace(
        "[torch]\n", '[torch]\nminver = "2.12"\nmaxver = "2.12"\n'))
    m = load_manifest(root)
    if refused is None:
        _check_torch_range(m, torch_version)
        return
    with pytest.raises(BuildError, match=f"key 'torch.{refused}'.*{torch_version}.*fix: "):
        _check_torch_range(m, torch_version)


@pytest.mark.slow
def test_shared_sources_and_binding_flags_compile_as_their_builder_does(
        tmp_path: Path) -> None:
    """A real CPU build: the binding alone sees [torch] cxx-flags, and a source two
    sections list is compiled once (twice would define its function twice) with both
    sections' cxx-flags."""
    from kernelforge.build import build_project

    root = tmp_path / "twice"
    files = {
        "torch-ext/twice/__init__.py": "from ._ops import ops\n",
        "torch-ext/binding.cpp": '#ifndef FOR_BINDING\n#error "binding flag missing"\n#endif\n'
                                 '#include "registration.h"\n'
                                 "REGISTER_EXTENSION(TORCH_EXTENSION_NAME)\n",
        "k/one.cpp": "#ifdef FOR_BINDING\n#error \"binding flag leaked\"\n#endif\n"
                     "int twice_one() { return 1; }\n",
        "k/two.cpp": "#ifdef FOR_BINDING\n#error \"binding flag leaked\"\n#endif\n"
                     "int twice_two() { return 2; }\n",
        "k/common.cpp": "#if !defined(SIDE_ONE) || !defined(SIDE_TWO) || defined(FOR_BINDING)\n"
                        '#error "wrong flags"\n#endif\nint twice_common() { return 3; }\n',
        "build.toml": """
[general]
name = "twice"
edition = 5
version = 1
license = "Apache-2.0"
backends = ["cpu"]

[torch]
src = ["torch-ext/binding.cpp"]
cxx-flags = ["-DFOR_BINDING"]

[kernel.one]
backend = "cpu"
depends = ["torch"]
cxx-flags = ["-DSIDE_ONE"]
src = ["k/one.cpp", "k/common.cpp"]

[kernel.two]
backend = "cpu"
depends = ["torch"]
cxx-flags = ["-DSIDE_TWO"]
src = ["k/common.cpp", "k/two.cpp"]
""",
    }
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    (result,) = build_project(root, backends=["cpu"], jobs=2, progress=lambda _: None)
    assert any(result.path.glob("_twice_cpu_*.abi3.so"))


def one_section_project(root: Path, backend: str, section: str, files: dict[str, str]) -> Path:
    """A project of a binding and the kernel ``section`` (TOML) for ``backend``."""
    root = write_project(root, section, f'backends = ["{backend}"]')
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def plan_for(root: Path, backend: str, tool: Tool | None = None):
    return plan_build(load_manifest(root), backend=backend, variant="v", source_id=SID,
                      cxx=GCC, device_compiler=tool)


def named_in(plan) -> dict[str, list[str]]:
    return {g.name: sorted(Path(p).name for p in g.as_dict()["named_sources"])
            for g in plan.groups}


NAMED_KERNEL = """
[kernel.n_cpu]
backend = "cpu"
depends = ["torch"]
src = ["n/plain.cpp", "n/uses.cpp"]
"""


def test_only_sources_that_use_the_name_are_compiled_with_it(tmp_path: Path) -> None:
    root = write_project(tmp_path, KERNELS + NAMED_KERNEL, 'backends = ["cpu", "cuda", "rocm"]')
    (root / "n").mkdir()
    (root / "n" / "plain.cpp").write_text("int plain() { return 1; }\n")
    (root / "n" / "uses.cpp").write_text("const char* n = STR(TORCH_EXTENSION_NAME);\n")
    # a document that names the define is no source's header
    (root / "README.md").write_text("TORCH_EXTENSION_NAME is defined by the builder\n")
    assert named_in(plan_for(root, "cpu")) == {"k_cpu": [], "n_cpu": ["uses.cpp"]}
    # a header that includes registration.h (or names the define) reaches the sources
    # that include it, through other headers too, and no other
    (root / "k" / "k.h").write_text('#include "registration.h"\n')
    assert named_in(plan_for(root, "cpu")) == {"k_cpu": [], "n_cpu": ["uses.cpp"]}
    (root / "n" / "mid.inc").write_text('#include "../k/k.h"\n')
    (root / "n" / "plain.cpp").write_text('#include "mid.inc"\nint plain() { return 1; }\n')
    assert named_in(plan_for(root, "cpu")) == {"k_cpu": [], "n_cpu": ["plain.cpp", "uses.cpp"]}
    # as does one the section's flags include (-include), or a header of a name the scan
    # cannot see (an #include of a macro) may be
    (root / "n" / "plain.cpp").write_text("int plain() { return 1; }\n")
    (root / "k" / "k.cpp").write_text("#include KERNEL_HEADER\n")
    assert named_in(plan_for(root, "cpu")) == {"k_cpu": ["k.cpp"], "n_cpu": ["uses.cpp"]}
    (root / "k" / "k.cpp").write_text("// src\n")
    manifest = (root / "build.toml").read_text()
    (root / "build.toml").write_text(manifest.replace(
        'src = ["n/plain.cpp"', 'cxx-flags = ["-include", "k/k.h"]\nsrc = ["n/plain.cpp"'))
    assert named_in(plan_for(root, "cpu")) == {"k_cpu": [], "n_cpu": ["plain.cpp", "uses.cpp"]}


def test_the_name_reaches_a_source_through_its_sections_flags(tmp_path: Path) -> None:
    root = one_section_project(tmp_path, "cpu", """
[kernel.k]
backend = "cpu"
depends = ["torch"]
cxx-flags = ["-DOPS_NAMESPACE=TORCH_EXTENSION_NAME"]
src = ["k/k.cpp"]
""", {"k/k.cpp": "const char* ns = STR(OPS_NAMESPACE);\n"})
    assert named_in(plan_for(root, "cpu")) == {"k": ["k.cpp"]}


def test_the_name_reaches_a_source_that_includes_one_using_it(tmp_path: Path) -> None:
    root = one_section_project(tmp_path, "cpu", """
[kernel.a]
backend = "cpu"
depends = ["torch"]
src = ["a/a.cpp"]

[kernel.b]
backend = "cpu"
depends = ["torch"]
src = ["b/b.cpp"]

[kernel.c]
backend = "cpu"
depends = ["torch"]
src = ["c/c.cpp"]
""", {"a/a.cpp": '#include "../b/b.cpp"\n',
      "b/b.cpp": "static const char* ns = STR(TORCH_EXTENSION_NAME);\n",
      "c/c.cpp": "int c() { return 3; }\n"})
    assert named_in(plan_for(root, "cpu")) == {"a": ["a.cpp"], "b": ["b.cpp"], "c": []}


def test_the_other_sources_get_a_digest_of_what_they_may_read(tmp_path: Path) -> None:
    """A source compiled without the namespace gets a define of its own that changes, by
    content, exactly when what it may read does: so neither file times, nor a compiler
    that lists no headers (hipcc), nor a new header found first on the include path can
    leave a stale object."""
    for backend, suffix, tool in [("cpu", "cpp", None), ("rocm", "hip", HIPCC),
                                  ("cuda", "cu", NVCC_13)]:
        root = one_section_project(tmp_path / backend, backend, f"""
[kernel.k]
backend = "{backend}"
depends = ["torch"]
src = ["k/k.{suffix}", "k/other.{suffix}", "k/k.h"]
""", {f"k/k.{suffix}": '#include "k.h"\nstatic const int t[] = {\n#include "table.txt"\n};\n',
      f"k/other.{suffix}": "int other() { return 1; }\n",
      "k/k.h": "#define K 1\n", "k/table.txt": "1, 2\n"})

        def defines(root: Path = root, backend: str = backend,
                    tool: Tool | None = tool) -> dict[str, str]:
            (group,) = plan_for(root, backend, tool).groups
            assert group.as_dict()["named_sources"] == []
            return {p.name: d for p, d in group.source_defines}

        first = defines()
        assert set(first) == {f"k.{suffix}", f"other.{suffix}"}
        assert all(d.startswith("-DKERNELFORGE_SOURCES=") for d in first.values())
        (root / "README.md").write_text("a document\n")
        assert defines() == first, backend
        (root / "k" / f"other.{suffix}").write_text("int other() { return 2; }\n")
        edited = defines()
        assert edited[f"k.{suffix}"] == first[f"k.{suffix}"]
        assert edited[f"other.{suffix}"] != first[f"other.{suffix}"]
        # a header, a table a source includes, and a new header of an included name
        # (found first on the include path): that source alone
        for rel, text in [("k/k.h", "#define K 2\n"), ("k/table.txt", "3, 4\n"),
                          ("csrc/k.h", "#define SHADOW 1\n")]:
            before = defines()
            (root / rel).parent.mkdir(exist_ok=True)
            (root / rel).write_text(text)
            after = defines()
            assert after[f"k.{suffix}"] != before[f"k.{suffix}"], (backend, rel)
            assert after[f"other.{suffix}"] == before[f"other.{suffix}"], (backend, rel)
        # a header no source includes: none
        before = defines()
        (root / "k" / "unused.h").write_text("#define U 1\n")
        assert defines() == before, backend


def test_a_header_edit_recompiles_the_sources_that_may_read_it(tmp_path: Path) -> None:
    """What a source may read is what it names, through the files it names, whatever
    their folder; a header named only by another source's chain, or by none, is not."""
    root = one_section_project(tmp_path, "cpu", """
[kernel.k]
backend = "cpu"
depends = ["torch"]
src = ["k/a.cpp", "k/b.cpp", "k/c.cpp"]
""", {"k/a.cpp": '#include "common/a.h"\n', "k/b.cpp": '#include <common.h>\n',
      "k/c.cpp": "int c() { return 3; }\n", "k/common/a.h": '#include "../deep/d.cuh"\n',
      "csrc/common.h": "#pragma once\n", "k/deep/d.cuh": "#define D 1\n"})

    def changed(rel: str, text: str | bytes) -> list[str]:
        """The sources whose digest the edit changes; a source that is now compiled
        with the namespace (which any edit changes) counts as changed, named."""
        (before,) = plan_for(root, "cpu").groups
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        if isinstance(text, bytes):
            (root / rel).write_bytes(text)
        else:
            (root / rel).write_text(text)
        (after,) = plan_for(root, "cpu").groups
        old, new = dict(before.source_defines), dict(after.source_defines)
        return sorted([p.name for p in new if new[p] != old.get(p)]
                      + [f"{p.name} (named)" for p in after.named_sources])

    assert changed("k/deep/d.cuh", "#define D 2\n") == ["a.cpp"]
    assert changed("csrc/common.h", "#pragma once\n// edited\n") == ["b.cpp"]
    assert changed("k/unrelated.h", "#define U 1\n") == []
    assert changed("docs/d.cuh", "// another file of an included name\n") == ["a.cpp"]
    assert changed("docs/D.CUH", "// the same name in another case\n") == ["a.cpp"]
    # a file tested for (__has_include, __has_embed)
    assert changed("k/c.cpp", "#if __has_include(\"opt.h\") || __has_embed(<e.bin>)\n"
                              "#endif\n") == ["c.cpp"]
    assert changed("k/opt.h", "#define OPT 1\n") == ["c.cpp"]
    assert changed("k/e.bin", "1") == ["c.cpp"]
    # a source edit changes that source alone
    assert changed("k/b.cpp", "#include <common.h>\nint b() { return 2; }\n") == ["b.cpp"]
    # spellings of #include the compiler reads: a byte order mark, comments, line splices,
    # the digraph, form feeds, CR line ends, C++20's import; and the file they name counts
    for spelling in [b'\xef\xbb\xbf#include "spelt.h"\n', b'/* x */ #include "spelt.h"\n',
                     b'# /* x */ include "spelt.h"\n', b'#\\\ninclude "spelt.h"\n',
                     b'#inc\\\r\nlude "spelt.h"\n', b'%:include "spelt.h"\n',
                     b'#\finclude "spelt.h"\n', b'int x;\r#include "spelt.h"\r',
                     b'import "spelt.h";\n', b'#include \\\n "spelt.h"\n']:
        assert changed("k/c.cpp", spelling) == ["c.cpp"], spelling
        assert changed("k/spelt.h", spelling + b"// edited\n") == ["c.cpp"], spelling
    (root / "k" / "c.cpp").write_text("int c() { return 3; }\n")
    # a name the scan cannot see (a macro, the assembler's .incbin and .include): compiled
    # with the namespace, which the uid (every file) changes
    for reads_any in ["#define H <common.h>\n#include H\n", "#if __has_include(H)\n#endif\n",
                      'asm(".incbin \\"k/blob.bin\\"");\n', 'asm(".include \\"m.s\\"");\n']:
        assert changed("k/c.cpp", reads_any) == ["c.cpp (named)"], reads_any
    (root / "k" / "c.cpp").write_text("int c() { return 3; }\n")
    # an opaque header reached through others makes its includers named
    assert changed("k/deep/d.cuh", "#include D_IMPL\n") == ["a.cpp (named)"]


def test_an_include_past_the_first_mebibyte_is_seen(tmp_path: Path) -> None:
    """A large generated header is scanned whole: an #include across the reader's chunk
    boundary, or a long line before it, is read like any other."""
    filler = b"// " + b"x" * ((1 << 20) - 10) + b"\n"
    root = one_section_project(tmp_path, "cpu", """
[kernel.k]
backend = "cpu"
depends = ["torch"]
src = ["k/a.cpp"]
""", {"k/a.cpp": "int a() { return 1; }\n", "k/big.h": "", "k/conf.h": "#define C 1\n"})
    (root / "k" / "a.cpp").write_text('#include "big.h"\n')
    for i, big in enumerate([filler + b'#include "conf.h"\n',
                             b"#" + b" " * (1 << 20) + b'include "conf.h"\n']):
        (root / "k" / "big.h").write_bytes(big)
        (before,) = plan_for(root, "cpu").groups
        (root / "k" / "conf.h").write_text(f"#define C {i + 2}\n")
        (after,) = plan_for(root, "cpu").groups
        assert before.named_sources == after.named_sources == ()
        assert before.source_defines != after.source_defines
        (root / "k" / "unrelated.h").write_text("// not included\n")
        (again,) = plan_for(root, "cpu").groups
        assert again.source_defines == after.source_defines


def test_only_files_a_flag_names_by_path_count_for_it(tmp_path: Path) -> None:
    """A flag's words name files (-include=k/h.h, -Xcompiler -include,k/h.h); a file whose
    name is only part of a word (native in -march=native) is not named."""
    root = one_section_project(tmp_path, "cpu", """
[kernel.k]
backend = "cpu"
depends = ["torch"]
cxx-flags = ["-march=native", "-Xcompiler", "-include,k/h.h", "-includej.h"]
src = ["k/k.cpp"]
""", {"k/k.cpp": "int k() { return 1; }\n", "tools/tive": "TORCH_EXTENSION_NAME\n",
      "k/h.h": "#define H 1\n", "j.h": "#define J 1\n"})
    (first,) = plan_for(root, "cpu").groups
    assert first.named_sources == ()
    (root / "tools" / "tive").write_text("TORCH_EXTENSION_NAME edited\n")
    assert plan_for(root, "cpu").groups[0].source_defines == first.source_defines
    (root / "k" / "h.h").write_text("#define H 2\n")
    second = plan_for(root, "cpu").groups[0].source_defines
    assert second != first.source_defines
    (root / "j.h").write_text("#define J 2\n")  # joined to its option
    assert plan_for(root, "cpu").groups[0].source_defines != second


def test_a_header_the_sections_flags_include_counts_for_its_sources(tmp_path: Path) -> None:
    root = one_section_project(tmp_path, "cpu", """
[kernel.k]
backend = "cpu"
depends = ["torch"]
cxx-flags = ["-include", "k/forced.txt"]
src = ["k/k.cpp"]
""", {"k/k.cpp": "int k() { return 1; }\n", "k/forced.txt": '#include "more.h"\n',
      "k/more.h": "#define M 1\n"})
    (first,) = plan_for(root, "cpu").groups
    (root / "k" / "more.h").write_text("#define M 2\n")
    (second,) = plan_for(root, "cpu").groups
    assert second.source_defines != first.source_defines


def test_nvcc_before_12_8_does_not_get_the_template_stub_option(tmp_path: Path) -> None:
    root = one_section_project(tmp_path, "cuda", """
[kernel.k]
backend = "cuda"
depends = ["torch"]
cuda-capabilities = ["9.0"]
cuda-flags = ["-static-global-template-stub=false", "-lineinfo"]
src = ["k/k.cu"]
""", {"k/k.cu": "// kernel\n"})
    (old,) = plan_for(root, "cuda", NVCC_12_4).groups
    assert "-lineinfo" in old.device_flags
    assert not any("static-global-template-stub" in f for f in old.device_flags)
    (new,) = plan_for(root, "cuda", NVCC_13).groups
    assert "-static-global-template-stub=false" in new.device_flags


def test_the_name_reaches_a_source_through_a_file_it_includes_whatever_its_suffix(
        tmp_path: Path) -> None:
    root = one_section_project(tmp_path, "cpu", """
[kernel.k]
backend = "cpu"
depends = ["torch"]
src = ["k/k.cpp"]
""", {"k/k.cpp": '#include "ops.txt"\n',
      "k/ops.txt": "const char* n = STR(TORCH_EXTENSION_NAME);\n"})
    assert named_in(plan_for(root, "cpu")) == {"k": ["k.cpp"]}


def test_a_source_path_the_scan_cannot_open_is_left_to_the_compiler(tmp_path: Path) -> None:
    """A Windows-style path the manifest accepts (it normalises backslashes) names no file
    on POSIX: the plan takes it as using the name, and the compiler reports it, instead of
    a "cannot read ... fix its permissions" from the plan."""
    root = one_section_project(tmp_path, "cpu", """
[kernel.k]
backend = "cpu"
depends = ["torch"]
src = ["k\\\\k.cpp"]
""", {"k/k.cpp": "int k() { return 1; }\n"})
    (group,) = plan_for(root, "cpu").groups
    assert [p.name for p in group.sources] == ["k\\k.cpp"]
    assert group.named_sources == group.sources


def test_rocm_arch_override_keeps_to_each_sections_archs(manifest) -> None:
    """A section that declares rocm-archs builds for those of them --arch names, as
    Hugging Face's builder intersects them; none in common stops the build."""
    plan = plan_build(manifest, backend="rocm", variant="v", source_id=SID, cxx=GCC,
                      device_compiler=HIPCC, arch_override=["gfx942", "gfx1100"])
    assert plan.archs == ("gfx942",)
    assert [f for f in plan.groups[0].device_flags if f.startswith("--offload-arch")] == [
        "--offload-arch=gfx942"]
    assert any(n.startswith("kernel.k_rocm has no code for --arch gfx1100") for n in plan.notes)
    with pytest.raises(BuildError, match=r"no kernel section builds for --arch gfx1100 \(their "
                                         r"rocm-archs: kernel\.k_rocm: gfx942, gfx90a\)"):
        plan_build(manifest, backend="rocm", variant="v", source_id=SID, cxx=GCC,
                   device_compiler=HIPCC, arch_override=["gfx1100", "gfx1100"])


def test_rocm_section_naming_none_of_the_archs_builds_for_its_own(tmp_path: Path) -> None:
    root = write_project(tmp_path / "p", KERNELS + """
[kernel.newer_rocm]
backend = "rocm"
depends = ["torch"]
rocm-archs = ["gfx1100"]
src = ["r/r.hip"]
""", 'backends = ["cpu", "cuda", "rocm"]')
    (root / "r").mkdir()
    (root / "r" / "r.hip").write_text("")
    plan = plan_build(load_manifest(root), backend="rocm", variant="v", source_id=SID, cxx=GCC,
                      device_compiler=HIPCC, arch_override=["gfx942"])
    by_group = {g.name: [f for f in g.device_flags if f.startswith("--offload-arch")]
                for g in plan.groups}
    assert by_group == {"k_rocm": ["--offload-arch=gfx942"],
                        "newer_rocm": ["--offload-arch=gfx1100"]}
    assert "kernel.newer_rocm has none of --arch gfx942 among its rocm-archs (gfx1100): " \
           "compiled for its own" in plan.notes


def test_the_up_to_date_key_rebuilds_what_arch_now_means_otherwise(tmp_path: Path) -> None:
    """A build made with --arch before the sections' capabilities were matched with it
    must not be taken as up to date: the key gains a term for GPU builds with --arch."""
    import kernelforge.build as build

    manifest = load_manifest(write_project(tmp_path / "p", KERNELS,
                                           'backends = ["cpu", "cuda", "rocm"]'))
    for backend, given in (("cuda", ("9.0",)), ("rocm", ("gfx942",)), ("cuda", None),
                           ("cpu", None)):
        terms = build._arch_terms(backend, manifest, given)
        assert ("arch-match" in terms) == (given is not None), (backend, given)


def test_rocm_archs_are_those_hugging_faces_builder_compiles_for(tmp_path: Path) -> None:
    """Hugging Face's builder intersects a section's rocm-archs with the archs it
    compiles for (gfx940 and gfx941, which its project template once listed, are not
    among them): the same archs reach hipcc and metadata.json here, with a note."""
    root = write_project(tmp_path / "p", KERNELS.replace(
        'rocm-archs = ["gfx942", "gfx90a"]', 'rocm-archs = ["gfx90a", "gfx940", "gfx941"]'),
        'backends = ["cpu", "cuda", "rocm"]')
    plan = plan_build(load_manifest(root), backend="rocm", variant="v", source_id=SID, cxx=GCC,
                      device_compiler=HIPCC)
    assert plan.archs == ("gfx90a",)
    assert [f for f in plan.groups[0].device_flags if f.startswith("--offload-arch")] == [
        "--offload-arch=gfx90a"]
    assert any("rocm-archs gfx940, gfx941 left out" in n for n in plan.notes), plan.notes
    only_old = write_project(tmp_path / "q", KERNELS.replace(
        'rocm-archs = ["gfx942", "gfx90a"]', 'rocm-archs = ["gfx940"]'),
        'backends = ["cpu", "cuda", "rocm"]')
    with pytest.raises(BuildError, match="none of its rocm-archs"):
        plan_build(load_manifest(only_old), backend="rocm", variant="v", source_id=SID,
                   cxx=GCC, device_compiler=HIPCC)
    # --arch for another arch does not bring a left-out one back for "its own" archs
    with pytest.raises(BuildError, match="none of its rocm-archs"):
        plan_build(load_manifest(only_old), backend="rocm", variant="v", source_id=SID,
                   cxx=GCC, device_compiler=HIPCC, arch_override=["gfx942"])
    # named by --arch, it is built: the user asked for it
    plan = plan_build(load_manifest(only_old), backend="rocm", variant="v", source_id=SID,
                      cxx=GCC, device_compiler=HIPCC, arch_override=["gfx940"])
    assert plan.archs == ("gfx940",)
