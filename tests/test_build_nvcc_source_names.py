"""nvcc names a translation unit's anonymous namespaces after the source's absolute path;
the build gives it the path under the project instead, so that CUDA builds of one project
in two folders are byte-identical."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from test_build_plan import GCC, KERNELS, NVCC_12_4, NVCC_13, SID, write_project

from kernelforge.build.plan import pinned_source_path_flags, plan_build
from kernelforge.build.toolchain import Tool, find_nvcc
from kernelforge.manifest import load_manifest

#: An anonymous namespace's kernel (named after the path), beside a static kernel and a
#: static device variable (which are not, without relocatable device code).
INTERNAL = """\
static __device__ int calls;
static __global__ void count(float* x) { x[0] = calls; }
namespace { __global__ void twice(float* x) { x[threadIdx.x] *= 2.f; atomicAdd(&calls, 1); } }
void launch(float* x) { twice<<<1, 32>>>(x); count<<<1, 1>>>(x); }
"""


def _plan(root: Path, nvcc: Tool = NVCC_13):
    manifest = load_manifest(write_project(root, KERNELS, 'backends = ["cpu", "cuda", "rocm"]'))
    return plan_build(manifest, backend="cuda", variant="v", source_id=SID, cxx=GCC,
                      device_compiler=nvcc)


def test_each_cu_source_of_a_cuda_plan_is_named_by_its_project_path(tmp_path: Path) -> None:
    plan = _plan(tmp_path / "p")
    flags = {src: f for g in plan.groups for src, f in g.source_device_flags}
    assert flags == {tmp_path / "p" / "k" / "k.cu":
                     ("-Xcudafe", "--orig_src_path_name=k/k.cu")}
    group = next(g for g in plan.groups if g.source_device_flags)
    assert group.as_dict()["source_device_flags"] == {
        str(tmp_path / "p" / "k" / "k.cu"): ["-Xcudafe", "--orig_src_path_name=k/k.cu"]}
    # in the build's fingerprint, so that a change of the name recompiles
    assert "source_device_flags" in str(plan.fingerprint_inputs()["groups"])


def test_no_pinned_name_where_it_was_not_checked_or_cannot_pass(tmp_path: Path) -> None:
    # an nvcc older than the one it was checked with
    assert not any(g.source_device_flags for g in _plan(tmp_path / "old", NVCC_12_4).groups)
    # a group without the key keeps the fingerprint builds made before had
    assert all("source_device_flags" not in g.as_dict()
               for g in _plan(tmp_path / "old2", NVCC_12_4).groups)
    maps = [(tmp_path / "torch", "torch"), (tmp_path / "p", ".")]
    assert pinned_source_path_flags(tmp_path / "p" / "a.cpp", maps, NVCC_13) == ()
    assert pinned_source_path_flags(tmp_path / "elsewhere" / "a.cu", maps, NVCC_13) == ()
    # nvcc pastes the value unquoted into shell lines: anything a shell reads is left
    # unpinned, however it would have compiled before
    for odd in ("a,b.cu", "a b.cu", "a$b.cu", "a'b.cu", 'a"b.cu', "a;b.cu", "a&b.cu",
                "k(1).cu", "a<b.cu", "a>b.cu", "a|b.cu", "a`b.cu", "a\\b.cu", "a*b.cu",
                "a?b.cu", "a!b.cu", "é.cu", "a\tb.cu"):
        assert pinned_source_path_flags(tmp_path / "p" / odd, maps, NVCC_13) == (), odd
    for fine in ("a#b.cu", "a=b.cu", "a~b.cu", "a+b.cu", "a@b.cu", "a%b.cu", "-a.cu"):
        assert pinned_source_path_flags(tmp_path / "p" / fine, maps, NVCC_13) == (
            "-Xcudafe", f"--orig_src_path_name={fine}"), fine
    # a source under another mapped directory is named under that directory's name
    assert pinned_source_path_flags(tmp_path / "torch" / "x" / "t.cu", maps, NVCC_13) == (
        "-Xcudafe", "--orig_src_path_name=torch/x/t.cu")
    # the project inside the toolkit's folder: its own, more specific map wins
    nested = [(tmp_path, "cuda"), (tmp_path / "p", ".")]
    assert pinned_source_path_flags(tmp_path / "p" / "k.cu", nested, NVCC_13) == (
        "-Xcudafe", "--orig_src_path_name=k.cu")


def _library(project: Path, extra: list[str], link_flags: list[str]) -> bytes:
    nvcc, gxx = find_nvcc(), shutil.which("g++")
    assert nvcc is not None and gxx is not None
    obj, lib = project / "k.o", project / "k.so"
    subprocess.run([str(nvcc.path), "-O3", "-c", str(project / "k" / "k.cu"), "-o", str(obj),
                    "-Xcompiler=-fPIC", "-gencode=arch=compute_90a,code=sm_90a",
                    "-gencode=arch=compute_80,code=compute_80", *extra],
                   check=True, cwd=project, capture_output=True)
    subprocess.run([gxx, "-shared", "-o", str(lib), str(obj), *link_flags],
                   check=True, cwd=project, capture_output=True)
    return lib.read_bytes()


def test_one_project_in_two_folders_links_to_identical_libraries(tmp_path: Path) -> None:
    nvcc = find_nvcc()
    if nvcc is None or shutil.which("g++") is None:
        pytest.skip("needs nvcc and g++")
    if nvcc.version < (13, 0):
        pytest.skip(f"pinned source names are given from nvcc 13.0; this is {nvcc.version_str}")
    built: dict[str, list[bytes]] = {"plan": [], "bare": []}
    for where in (tmp_path / "a" / "p", tmp_path / "somewhere" / "else" / "p"):
        plan = _plan(where, nvcc)
        (where / "k" / "k.cu").write_text(INTERNAL)
        flags = [f for g in plan.groups for _, fl in g.source_device_flags for f in fl]
        assert flags, "the plan names the source"
        built["plan"].append(_library(where, flags, list(plan.link_flags)))
        built["bare"].append(_library(where, [], list(plan.link_flags)))
    assert built["plan"][0] == built["plan"][1]
    # the control: without the name, the folder shows in the library
    assert built["bare"][0] != built["bare"][1]


def test_recorded_flags_do_not_depend_on_where_the_project_lies(tmp_path: Path) -> None:
    """The path maps' order on the command line follows the directories' depth; the
    flags metadata.json records list them in one order, so a project shallower than
    torch's folder in one place and deeper in another records the same flags."""
    torch_dir = Path("/envs/a/b/c/d/e/f/g/h/i/site-packages/torch")
    plans = []
    for where in (tmp_path / "p", tmp_path.joinpath(*"abcdefghij", "p")):
        manifest = load_manifest(write_project(where, KERNELS,
                                               'backends = ["cpu", "cuda", "rocm"]'))
        plans.append(plan_build(manifest, backend="cuda", variant="v", source_id=SID,
                                cxx=GCC, device_compiler=NVCC_13, torch_dir=torch_dir))
    shallow, deep = plans
    def order(plan) -> list[str]:  # the maps' names, in command-line order
        return [f.rsplit("=", 1)[1] for f in plan.cxx_flags if f.startswith("-ffile-prefix-")]
    assert order(shallow) != order(deep)
    assert shallow.path_free(shallow.cxx_flags) == deep.path_free(deep.cxx_flags)
    assert shallow.path_free(shallow.device_flags) == deep.path_free(deep.device_flags)


def test_without_a_compiled_binding_the_first_sections_sources_are_not_pinned(
        tmp_path: Path) -> None:
    """With no compiled [torch] source the driver compiles the first kernel section as the
    extension's own sources, all in one call: the plan does not claim names for them."""
    root = write_project(tmp_path / "p", KERNELS + """
[kernel.k2_cuda]
backend = "cuda"
depends = ["torch"]
src = ["k2/k2.cu"]
""", 'backends = ["cpu", "cuda", "rocm"]')
    (root / "k2").mkdir()
    (root / "k2" / "k2.cu").write_text("")
    text = (root / "build.toml").read_text().replace(
        '"torch-ext/torch_binding.cpp", ', "")
    (root / "build.toml").write_text(text)
    plan = plan_build(load_manifest(root / "build.toml"), backend="cuda", variant="v",
                      source_id=SID, cxx=GCC, device_compiler=NVCC_13)
    assert not plan.sources and len(plan.groups) == 2
    assert plan.groups[0].source_device_flags == ()
    assert plan.groups[1].source_device_flags == ((root / "k2" / "k2.cu", (
        "-Xcudafe", "--orig_src_path_name=k2/k2.cu")),)


def test_a_users_own_path_map_keeps_its_place(tmp_path: Path) -> None:
    """The order of the builder's maps is recorded sorted; one from build.toml stays
    where it is on the command line (after the builder's: the last match applies)."""
    manifest = load_manifest(write_project(tmp_path / "p", KERNELS,
                                           'backends = ["cpu", "cuda", "rocm"]'))
    plan = plan_build(manifest, backend="cuda", variant="v", source_id=SID, cxx=GCC,
                      device_compiler=NVCC_13,
                      torch_dir=Path("/envs/a/b/c/d/e/f/g/h/i/site-packages/torch"))
    user = f"-ffile-prefix-map={tmp_path}/p/k=kernels"
    flags = [*plan.cxx_flags, user]
    recorded = plan.path_free(flags)
    assert recorded[-1] == "-ffile-prefix-map=<project>/k=kernels"
    own = [f for f in recorded[:-1] if f.startswith("-ffile-prefix-map=")]
    assert own == sorted(own) and len(own) == len(plan.prefix_maps)


def test_the_driver_compiles_each_pinned_source_on_its_own() -> None:
    from kernelforge.build._driver import group_parts

    args = {"cxx": ["-O3", "-DTORCH_EXTENSION_NAME=_k_abc"],
            "nvcc": ["-O3", "-DTORCH_EXTENSION_NAME=_k_abc"]}
    pin = ["-Xcudafe", "--orig_src_path_name=k/x.cu"]
    group = {"name": "k", "sources": ["/p/k/a.cpp", "/p/k/named.cu", "/p/k/x.cu", "/p/k/y.cpp"],
             "named_sources": ["/p/k/a.cpp", "/p/k/named.cu"],
             "source_defines": {"/p/k/x.cu": "-DKERNELFORGE_SOURCES=1",
                                "/p/k/y.cpp": "-DKERNELFORGE_SOURCES=2"},
             "source_device_flags": {"/p/k/named.cu": ["-Xcudafe",
                                                       "--orig_src_path_name=k/named.cu"],
                                     "/p/k/x.cu": pin}}
    parts = group_parts(group, args)
    by_sources = {tuple(sources): (suffix, flags) for suffix, sources, flags in parts}
    assert set(by_sources) == {("/p/k/a.cpp",), ("/p/k/named.cu",), ("/p/k/x.cu",),
                               ("/p/k/y.cpp",)}
    # the named .cu keeps the namespace define and gets its name, in a folder of its own
    suffix, flags = by_sources[("/p/k/named.cu",)]
    assert suffix.startswith(".named.") and flags["nvcc"] == [
        *args["nvcc"], "-Xcudafe", "--orig_src_path_name=k/named.cu"]
    assert by_sources[("/p/k/a.cpp",)] == (".named", args)
    # an unnamed .cu: its digest instead of the define, and its name
    suffix, flags = by_sources[("/p/k/x.cu",)]
    assert flags["nvcc"] == ["-O3", "-DKERNELFORGE_SOURCES=1", *pin]
    assert flags["cxx"] == ["-O3", "-DKERNELFORGE_SOURCES=1"]
    assert by_sources[("/p/k/y.cpp",)][1]["nvcc"] == ["-O3", "-DKERNELFORGE_SOURCES=2"]
    assert args["nvcc"] == ["-O3", "-DTORCH_EXTENSION_NAME=_k_abc"]  # not changed
    # without names, the parts are what they were: the named sources together
    del group["source_device_flags"]
    assert [(s, src) for s, src, _ in group_parts(group, args)][0] == (
        ".named", ["/p/k/a.cpp", "/p/k/named.cu"])


def test_the_up_to_date_key_asks_for_a_rebuild_only_where_names_are_pinned(
        tmp_path: Path) -> None:
    from kernelforge.build import _pinned_names

    manifest = load_manifest(write_project(tmp_path / "p", KERNELS,
                                           'backends = ["cpu", "cuda", "rocm"]'))
    assert _pinned_names("cuda", manifest, NVCC_13) == {"pinned-names": 1}
    assert _pinned_names("cuda", manifest, NVCC_12_4) == {}
    assert _pinned_names("cpu", manifest, None) == {}
    assert _pinned_names("rocm", manifest, NVCC_13) == {}
