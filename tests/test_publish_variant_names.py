"""Publishing refuses a variant directory whose name contradicts its metadata.json.

The loader chooses a variant by its directory name alone, and the README has users gather
CI-matrix ``build/<variant>/`` directories by hand: a CPU build renamed (or copied) to a
CUDA name would load on CUDA machines. Where metadata.json records a fact the name also
encodes (``backend.type``; kernelforge's ``provenance.torch``), the two must agree; builds
that record less (Hugging Face's kernel-builder, older kernelforge) are not refused.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from kf_sharing import FakeHfApi, isolate
from kf_testutil import write_metadata

from kernelforge.errors import HubError
from kernelforge.hub import LocalHub
from kernelforge.hub._staging import stage_build
from kernelforge.hub.hf import HfHub

REPO = "kernels-test/relu"
CPU = "torch29-cxx11-cpu-x86_64-linux"
CU128 = "torch29-cxx11-cu128-x86_64-linux"


def fabricate(project: Path, name: str, *, backend: str | None = "cpu",
              torch: str | None = "2.9.0+cpu", builder: str | None = "kernelforge",
              archs: list[str] | None = None) -> Path:
    """``project/build/<name>/`` with a metadata.json like kernelforge's: ``backend.type``
    (left out when ``backend`` is None) and ``provenance.torch`` (left out when ``torch``
    is None; ``builder`` None leaves out the whole provenance, as older builds did)."""
    vdir = project / "build" / name
    vdir.mkdir(parents=True)
    (vdir / "__init__.py").write_text("VALUE = 1\n")
    write_metadata(vdir, "_relu_cpu_0000001", backend=backend or "cpu", archs=archs)
    meta = json.loads((vdir / "metadata.json").read_text())
    if backend is None:
        del meta["backend"]
    if builder is not None:
        meta["provenance"] = {"kernel-builder": {"name": builder, "version": "0.1.0"}}
        if torch is not None:
            meta["provenance"]["torch"] = torch
    (vdir / "metadata.json").write_text(json.dumps(meta))
    return vdir


def refusal(project: Path) -> str:
    with pytest.raises(HubError) as info:
        stage_build(project / "build", 1)
    return str(info.value)


# --- the reported case -------------------------------------------------------------------


def test_a_cpu_build_renamed_and_copied_to_cuda_names_is_refused_and_nothing_published(
        tmp_path: Path) -> None:
    """The user's report: a CPU build renamed to ...-cu128-x86_64-linux and copied to
    ...-aarch64-linux; publish refused neither."""
    project = tmp_path / "relu"
    vdir = fabricate(project, CU128)
    shutil.copytree(vdir, project / "build" / "torch29-cxx11-cu128-aarch64-linux")
    hub = LocalHub(tmp_path / "hub")
    with pytest.raises(HubError) as info:
        hub.publish(REPO, project, version=1)
    text = str(info.value)
    # the first offending directory (sorted), what its name says, what metadata says, the fix
    assert text.startswith(f"{project / 'build' / 'torch29-cxx11-cu128-aarch64-linux'}: ")
    assert "the directory name torch29-cxx11-cu128-aarch64-linux contradicts its metadata" in text
    assert "backend: the name says cuda (cu128), metadata.json says cpu (backend.type)" in text
    assert "Rename the directory to torch29-cxx11-cpu-aarch64-linux" in text
    assert "does not record the CPU and OS" in text and "keep -aarch64-linux only if" in text
    assert "or rebuild it (kernelforge build)" in text and "nothing was published" in text
    assert not hub.has_repo(REPO)

    shutil.rmtree(project / "build" / "torch29-cxx11-cu128-aarch64-linux")
    text = refusal(project)
    assert f"{vdir}: the directory name {CU128} contradicts" in text
    assert f"Rename the directory to {CPU}," in text


def test_the_hf_hub_refuses_it_too_before_uploading(monkeypatch, tmp_path: Path) -> None:
    env = isolate(monkeypatch, tmp_path)
    api = FakeHfApi(tmp_path / "remote")
    hub = HfHub(api=api, cache=env["cache"])
    project = tmp_path / "relu"
    fabricate(project, CU128)
    with pytest.raises(HubError, match="backend: the name says cuda"):
        hub.publish(REPO, project, version=1)
    assert not (tmp_path / "remote" / "repos").exists()  # not even created


def test_a_copy_beside_the_build_it_came_from_is_called_a_copy(tmp_path: Path) -> None:
    project = tmp_path / "relu"
    vdir = fabricate(project, CPU)
    shutil.copytree(vdir, project / "build" / CU128)
    text = refusal(project)
    assert f"{CPU}, the name its metadata.json implies, is already a directory beside it" in text
    assert "probably a renamed copy: remove it, or rebuild" in text


def test_the_rebuild_command_names_the_project(tmp_path: Path) -> None:
    project = tmp_path / "relu"
    (project / "build").mkdir(parents=True)
    (project / "build.toml").write_text("[general]\nname = \"relu\"\n")
    fabricate(project, CU128)
    assert f"or rebuild it (kernelforge build {project})" in refusal(project)


# --- each fact that metadata.json records ------------------------------------------------


def test_a_torch_version_the_name_contradicts_is_refused(tmp_path: Path) -> None:
    project = tmp_path / "relu"
    fabricate(project, CPU, torch="2.10.1+cpu")
    text = refusal(project)
    assert "torch: the name says 2.9, metadata.json says 2.10.1+cpu (provenance.torch)" in text
    assert "Rename the directory to torch210-cxx11-cpu-x86_64-linux," in text


def test_a_cuda_version_the_name_contradicts_is_refused(tmp_path: Path) -> None:
    project = tmp_path / "relu"
    fabricate(project, CU128, backend="cuda", torch="2.9.0+cu126", archs=["9.0"])
    text = refusal(project)
    assert "CUDA version: the name says 12.8 (cu128), metadata.json says 12.6" in text
    assert "torch 2.9.0+cu126, a CUDA 12.6 build" in text
    assert "Rename the directory to torch29-cxx11-cu126-x86_64-linux," in text


def test_a_rocm_version_the_name_contradicts_is_refused(tmp_path: Path) -> None:
    project = tmp_path / "relu"
    fabricate(project, "torch27-cxx11-rocm63-x86_64-linux", backend="rocm",
              torch="2.7.1+rocm6.2.4", archs=["gfx942"])
    text = refusal(project)
    assert "ROCm version: the name says 6.3 (rocm63), metadata.json says 6.2" in text
    assert "Rename the directory to torch27-cxx11-rocm62-x86_64-linux," in text


def test_every_contradiction_is_listed_at_once(tmp_path: Path) -> None:
    project = tmp_path / "relu"
    fabricate(project, "torch28-cxx11-cpu-aarch64-linux", backend="cuda", torch="2.9.0+cu130")
    text = refusal(project)
    assert "backend: the name says cpu, metadata.json says cuda (backend.type)" in text
    assert "torch: the name says 2.8, metadata.json says 2.9.0+cu130" in text
    assert "Rename the directory to torch29-cxx11-cu130-aarch64-linux," in text


def test_a_backend_version_metadata_does_not_record_is_left_for_the_user(tmp_path: Path) -> None:
    """A CUDA build with PyPI's default torch (no +cuXYZ tag) renamed to a cpu name: the
    CUDA version is not recorded, so the name it implies shows where it goes."""
    project = tmp_path / "relu"
    fabricate(project, CPU, backend="cuda", torch="2.9.0")
    text = refusal(project)
    assert "Rename the directory to torch29-cxx11-cu<MAJ><MIN>-x86_64-linux," in text
    assert "<MAJ><MIN> is the CUDA version it was built for" in text


def test_stable_abi_and_tvm_ffi_names_are_checked_for_their_backend(tmp_path: Path) -> None:
    project = tmp_path / "a"
    fabricate(project, "torch-stable-abi29-cu128-x86_64-linux", backend="cpu")
    assert "Rename the directory to torch-stable-abi29-cpu-x86_64-linux," in refusal(project)
    project = tmp_path / "b"
    fabricate(project, "tvm-ffi10-cpu-x86_64-linux", backend="rocm", torch=None)
    assert "Rename the directory to tvm-ffi10-rocm<MAJ><MIN>-x86_64-linux," in refusal(project)


# --- builds that must still publish ------------------------------------------------------


@pytest.mark.parametrize(("name", "backend", "torch"), [
    (CPU, "cpu", "2.9.0+cpu"),
    (CPU, "cpu", "2.9.0+cu128"),  # --backend cpu with a CUDA torch
    (CPU, "cpu", "2.9.1"),
    (CU128, "cuda", "2.9.0+cu128"),
    (CU128, "cuda", "2.9.0"),  # PyPI's default CUDA torch carries no tag
    (CU128, "cuda", "2.9.0a0+git1234567"),  # a source build: no CUDA version recorded
    ("torch210-cxx11-cu130-aarch64-linux", "cuda", "2.10.0.dev20260101+cu130"),
    ("torch27-cxx11-rocm63-x86_64-linux", "rocm", "2.7.1+rocm6.3"),
    ("torch27-cxx11-rocm63-x86_64-linux", "rocm", "2.7.1+rocm6.3.4"),
    ("torch29-cxx11-xpu20252-x86_64-linux", "xpu", "2.9.0+xpu"),
    ("torch29-metal-aarch64-darwin", "metal", "2.9.0"),
    ("torch29-cxx11-cann81-aarch64-linux", "npu", "2.9.0"),  # Ascend's other name
    ("torch-stable-abi28-cu126-x86_64-linux", "cuda", "2.9.0+cu126"),  # ABI 2.8, torch 2.9
    ("tvm-ffi10-cu128-x86_64-linux", "cuda", "2.9.0+cu126"),  # torch says nothing here
    ("torch-cpu", "cpu", "2.9.0+cpu"),
    ("torch-cuda", "cuda", "2.9.0+cpu"),  # pure Python: torch's CUDA is not the build's
    ("torch-universal", "cpu", None),  # Hugging Face's universal builds say cpu
    ("torch-universal", "universal", "2.9.0"),
])
def test_builds_whose_name_agrees_with_their_metadata_publish(
        tmp_path: Path, name: str, backend: str, torch: str | None) -> None:
    project = tmp_path / "relu"
    fabricate(project, name, backend=backend, torch=torch)
    assert stage_build(project / "build", 1).variants == (name,)


@pytest.mark.parametrize("meta", [
    {"backend": None},  # older builds: no backend block
    {"backend": {"archs": ["9.0"]}},  # no type
    {"backend": {"type": "vulkan"}},  # a backend this kernelforge does not know
    {"provenance": None},  # older builds: no provenance
    {"provenance": {"kernel-builder": {"version": "0.13.0"}}},  # Hugging Face's builder
    {"provenance": {"torch": 2.8}},  # not a version string
    {"provenance": {"torch": "unknown"}},
])
def test_facts_the_metadata_does_not_record_are_not_compared(
        tmp_path: Path, meta: dict[str, object]) -> None:
    project = tmp_path / "relu"
    vdir = fabricate(project, CU128, backend="cuda", torch="2.9.0+cu128")
    data = json.loads((vdir / "metadata.json").read_text())
    for key, value in meta.items():
        if value is None:
            del data[key]
        else:
            data[key] = value
    (vdir / "metadata.json").write_text(json.dumps(data))
    assert stage_build(project / "build", 1).variants == (CU128,)


def test_a_hugging_face_build_publishes(tmp_path: Path) -> None:
    """metadata.json as their kernel-builder writes it: backend type and archs, their
    provenance; with a matching name it publishes, with a contradicting one it does not."""
    project = tmp_path / "relu"
    vdir = project / "build" / CU128
    vdir.mkdir(parents=True)
    (vdir / "__init__.py").write_text("VALUE = 1\n")
    meta = {"name": "relu", "id": "_relu_cuda_1a2b3c4", "version": 1, "license": "Apache-2.0",
            "python-depends": [], "backend": {"type": "cuda", "archs": ["8.0", "9.0"]},
            "provenance": {"kernel-builder": {"version": "0.13.0"}}}
    (vdir / "metadata.json").write_text(json.dumps(meta))
    hub = LocalHub(tmp_path / "hub")
    assert hub.publish(REPO, project, version=1).variants == (CU128,)
    vdir.rename(vdir.with_name("torch29-cxx11-rocm63-x86_64-linux"))
    with pytest.raises(HubError, match=r"the name says rocm \(rocm63\), metadata.json says cuda"):
        hub.publish(REPO, project, version=1)


def test_an_unparsable_name_is_still_refused(tmp_path: Path) -> None:
    project = tmp_path / "relu"
    fabricate(project, "torch29-cxx11-cuda-x86_64-linux")
    assert "'torch29-cxx11-cuda-x86_64-linux' is not a build variant name" in refusal(project)


# --- a real build ------------------------------------------------------------------------


@pytest.mark.slow
def test_a_real_cpu_build_publishes_and_renamed_to_cuda_is_refused(
        built_relu: Path, tmp_path: Path) -> None:
    (variant,) = [p for p in (built_relu / "build").iterdir() if "-cpu-" in p.name]
    project = tmp_path / "relu"
    shutil.copytree(variant, project / "build" / variant.name)
    assert stage_build(project / "build", 1).variants == (variant.name,)
    wrong = variant.name.replace("-cpu-", "-cu128-")
    (project / "build" / variant.name).rename(project / "build" / wrong)
    text = refusal(project)
    assert "backend: the name says cuda (cu128), metadata.json says cpu" in text
    assert f"Rename the directory to {variant.name}," in text


# --- the CPU a shared library was built for ----------------------------------------------


def _elf(machine: int) -> bytes:
    """The start of a 64-bit little-endian ELF shared object for ``machine``."""
    return b"\x7fELF\x02\x01\x01" + bytes(9) + (3).to_bytes(2, "little") + \
        machine.to_bytes(2, "little") + bytes(44)


@pytest.mark.parametrize(("cpu", "machine", "built_for"), [
    ("aarch64", 0x3E, "x86_64"),  # an x86_64 build copied to an aarch64 name
    ("x86_64", 0xB7, "aarch64"),  # and the other way round
    ("x86_64", 0x3E, None),
    ("aarch64", 0xB7, None),
    ("x86_64", 0x28, None),  # a machine no variant name gives: not judged
])
def test_a_shared_library_for_another_cpu_than_the_name_is_refused(
        tmp_path: Path, cpu: str, machine: int, built_for: str | None) -> None:
    """metadata.json records no CPU, but an ELF file does: an x86_64 build copied to an
    aarch64 name would be chosen on aarch64, where its library cannot load."""
    name = f"torch29-cxx11-cpu-{cpu}-linux"
    vdir = fabricate(tmp_path / "p", name)
    (vdir / "_relu_cpu_0000001.abi3.so").write_bytes(_elf(machine))
    write_metadata(vdir, "_relu_cpu_0000001")  # the digest now covers the library
    if built_for is None:
        assert stage_build(tmp_path / "p" / "build", 1).variants == (name,)
        return
    text = refusal(tmp_path / "p")
    assert f"this shared library is built for {built_for}, but its variant directory" in text
    assert f"rename the directory to torch29-cxx11-cpu-{built_for}-linux" in text


def test_the_real_relu_build_copied_to_another_cpu_is_refused(built_relu: Path,
                                                             tmp_path: Path) -> None:
    (variant,) = [p for p in (built_relu / "build").iterdir() if "-cpu-" in p.name]
    here = variant.name.split("-")[-2]
    other = "aarch64" if here == "x86_64" else "x86_64"
    project = tmp_path / "relu"
    shutil.copytree(variant, project / "build" / variant.name.replace(here, other))
    text = refusal(project)
    assert f"built for {here}, but its variant directory" in text
    assert f"rename the directory to {variant.name}" in text


@pytest.mark.parametrize(("name", "backend", "refused"), [
    ("torch-cuda", "cpu", "backend: the name says cuda, metadata.json says cpu"),
    ("torch-cpu", "rocm", "backend: the name says cpu, metadata.json says rocm"),
    ("torch-cuda", "cuda", None),
    ("torch-npu", "npu", None),  # Ascend's directory name for the cann backend
    ("torch-universal", "cpu", None),  # fits any backend
])
def test_a_pure_python_directory_is_checked_on_its_backend(
        tmp_path: Path, name: str, backend: str, refused: str | None) -> None:
    fabricate(tmp_path / "p", name, backend=backend, torch=None)
    if refused is None:
        assert stage_build(tmp_path / "p" / "build", 1).variants == (name,)
        return
    text = refusal(tmp_path / "p")
    assert refused in text
    implied = "torch-cpu" if backend == "cpu" else f"torch-{backend}"
    assert f"Rename the directory to {implied}, the name its metadata.json implies" in text
