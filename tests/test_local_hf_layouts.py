"""Local builds in the layouts Hugging Face's ``kernels`` loads them from.

- A snapshot of their download cache (huggingface_hub's layout): every file of a variant
  is a symbolic link into ``blobs/``; ``kernels.install_kernel`` returns such a path and
  ``LOCAL_KERNELS`` may name one. Their digest follows the links ("Hub cache path can be
  symlinks", ``kernels-data/src/digest.rs``), so a local load does too, verifying the
  bytes it imports; links to anything but a regular file stay refused.
- A directory with variants both at its top level and in ``build/``: they try the top
  level first, then ``build/`` (``kernels/resolver.py``, ``resolve_local_kernel``).
- A build whose provenance says it came from a dirty git tree: they log a warning
  (``kernels/validate.py``, ``DirtyValidator``).
- A build/ as their builder fills it for a release (other torch versions, the other C++
  ABI, CUDA/ROCm/XPU/Metal builds, noarch and ``torch-universal``), with the oldest
  metadata.json their loader reads: this process's variant is picked, the others are
  named with their reason.

The layouts are made here by hand, so these tests need no ``kernels`` package, but the
last, which puts the same directories to their loader's ``resolve_local_kernel``.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import logging
import os
import shutil
import sys
import uuid
from pathlib import Path

import pytest
from kf_testutil import write_metadata

from kernelforge import loader
from kernelforge.errors import IntegrityError, VariantNotFoundError
from kernelforge.locate import locate_local

pytestmark = pytest.mark.usefixtures("cpu_system")

COMMIT = "2" * 40


def uid(tag: str) -> str:
    """A module id no other test uses (ids live in sys.modules for the whole run)."""
    return f"_hfl_{tag}_{uuid.uuid4().hex[:10]}"


def make_variant(vdir: Path, module_id: str, value: int = 1,
                 provenance: dict | None = None) -> Path:
    """A tiny pure-Python kernel package with its metadata.json (and digest)."""
    vdir.mkdir(parents=True)
    (vdir / "__init__.py").write_text(f"from . import helper\nVALUE = {value}\n")
    (vdir / "helper.py").write_text("def double(x):\n    return 2 * x\n")
    (vdir / "sub").mkdir()
    (vdir / "sub" / "__init__.py").write_text("NESTED = True\n")
    write_metadata(vdir, module_id)
    if provenance is not None:
        meta = json.loads((vdir / "metadata.json").read_text())
        meta["provenance"] = provenance
        (vdir / "metadata.json").write_text(json.dumps(meta))
    return vdir


def as_hub_cache(build: Path, cache: Path, repo: str = "org/relu") -> Path:
    """Lay ``build`` out as huggingface_hub's cache does: ``snapshots/<commit>/build/...``
    with every file a relative symbolic link to ``blobs/<sha256>``. Returns the snapshot."""
    repo_dir = cache / f"kernels--{repo.replace('/', '--')}"
    snapshot = repo_dir / "snapshots" / COMMIT
    blobs = repo_dir / "blobs"
    blobs.mkdir(parents=True, exist_ok=True)
    for path in sorted(build.rglob("*")):
        rel = path.relative_to(build.parent)
        target = snapshot / rel
        if path.is_dir():
            target.mkdir(parents=True, exist_ok=True)
            continue
        data = path.read_bytes()
        blob = blobs / hashlib.sha256(data).hexdigest()
        blob.write_bytes(data)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.symlink_to(os.path.relpath(blob, target.parent))
    (repo_dir / "refs").mkdir(exist_ok=True)
    (repo_dir / "refs" / "v1").write_text(COMMIT)
    return snapshot


@pytest.fixture
def snapshot(tmp_path: Path) -> tuple[Path, str]:
    module_id = uid("snap")
    make_variant(tmp_path / "project" / "build" / "torch-cpu", module_id, value=3)
    snap = as_hub_cache(tmp_path / "project" / "build", tmp_path / "hfcache")
    assert (snap / "build" / "torch-cpu" / "helper.py").is_symlink()
    return snap, module_id


# --- D2: files that are links into blobs/ -------------------------------------------------


@pytest.mark.parametrize("where", ["snapshot", "build", "variant"])
def test_a_snapshot_of_the_hf_download_cache_loads(snapshot, where: str) -> None:
    snap, module_id = snapshot
    path = {"snapshot": snap, "build": snap / "build",
            "variant": snap / "build" / "torch-cpu"}[where]
    module = loader.get_local_kernel(path)
    assert module.__name__ == module_id and module.VALUE == 3
    assert module.helper.double(4) == 8
    assert importlib.import_module(f"{module_id}.sub").NESTED  # a subpackage, through links
    # imported through the links, where the digests were checked
    assert Path(module.__file__) == (snap / "build" / "torch-cpu" / "__init__.py").absolute()


def test_local_kernels_naming_a_snapshot_loads_and_has_kernel_agrees(snapshot,
                                                                      monkeypatch) -> None:
    snap, module_id = snapshot
    monkeypatch.setenv("LOCAL_KERNELS", f"org/d={snap}")
    assert loader.has_kernel("org/d", version=1) is True
    assert loader.get_kernel("org/d", version=1).__name__ == module_id


def test_the_digest_is_checked_on_the_bytes_a_link_leads_to(snapshot) -> None:
    snap, module_id = snapshot
    blob = (snap / "build" / "torch-cpu" / "helper.py").resolve()
    blob.write_text("import os\n")
    with pytest.raises(IntegrityError) as info:
        loader.get_local_kernel(snap)
    assert info.value.problems == ["changed: helper.py"]
    assert module_id not in sys.modules


def test_a_blob_changed_after_the_check_is_refused_at_import(snapshot, monkeypatch) -> None:
    """The import reads the bytes through the link once more and checks them: a blob
    rewritten between the verification and the import does not run."""
    snap, module_id = snapshot
    blob = (snap / "build" / "torch-cpu" / "helper.py").resolve()
    real = loader._import_package

    def rewrite_then_import(*args, **kwargs):
        blob.write_text("raise SystemExit('unverified code ran')\n")
        return real(*args, **kwargs)

    monkeypatch.setattr(loader, "_import_package", rewrite_then_import)
    with pytest.raises(IntegrityError, match=r"changed: helper\.py \(after the kernel was "
                                             r"verified"):
        loader.get_local_kernel(snap)
    assert module_id not in sys.modules


def _link_to_dir(vdir: Path) -> tuple[str, str]:
    shutil.move(vdir / "sub", vdir.parent / "elsewhere")
    (vdir / "sub").symlink_to(vdir.parent / "elsewhere", target_is_directory=True)
    return "sub", "a symbolic link to a directory"


def _dangling(vdir: Path) -> tuple[str, str]:
    target = (vdir / "helper.py").resolve()
    target.unlink()
    return "helper.py", f"a dangling symbolic link to {os.readlink(vdir / 'helper.py')}"


def _to_fifo(vdir: Path) -> tuple[str, str]:
    (vdir / "helper.py").unlink()
    os.mkfifo(vdir.parent / "fifo")
    (vdir / "helper.py").symlink_to(vdir.parent / "fifo")
    return "helper.py", "a symbolic link to something that is not a regular file"


def _loop(vdir: Path) -> tuple[str, str]:
    (vdir / "helper.py").unlink()
    (vdir / "helper.py").symlink_to("helper.py")
    return "helper.py", "a symbolic link that cannot be followed"


@pytest.mark.parametrize("break_it", [_link_to_dir, _dangling, _to_fifo, _loop],
                         ids=["to-directory", "dangling", "to-fifo", "loop"])
def test_links_to_anything_but_a_regular_file_are_refused_once(snapshot, monkeypatch,
                                                                break_it) -> None:
    snap, module_id = snapshot
    vdir = snap / "build" / "torch-cpu"
    rel, why = break_it(vdir)
    with pytest.raises(IntegrityError) as info:
        loader.get_local_kernel(snap)
    refused = [p for p in info.value.problems if p.startswith(f"refused: {rel}")]
    assert len(refused) == 1 and why in refused[0], info.value.problems
    # named once: not also as "missing" (the review found each refused file listed twice)
    assert not any(p.startswith("missing: ") for p in info.value.problems), info.value.problems
    assert module_id not in sys.modules
    # has_kernel answers as get_kernel does for the same LOCAL_KERNELS entry
    monkeypatch.setenv("LOCAL_KERNELS", f"org/d={snap}")
    assert loader.has_kernel("org/d", version=1) is False
    with pytest.raises(IntegrityError):
        loader.get_kernel("org/d", version=1)


def test_has_kernel_says_no_to_a_local_build_get_kernel_would_refuse(tmp_path: Path,
                                                                     monkeypatch) -> None:
    vdir = make_variant(tmp_path / "p" / "build" / "torch-cpu", uid("hk"))
    (vdir / "helper.py").write_text("import os\n")
    monkeypatch.setenv("LOCAL_KERNELS", f"org/d={tmp_path / 'p'}")
    assert loader.has_kernel("org/d") is False
    with pytest.raises(IntegrityError, match="changed: helper.py"):
        loader.get_kernel("org/d")


# --- D5: variants at the top level and in build/ ------------------------------------------


def test_the_top_level_is_tried_before_build(tmp_path: Path) -> None:
    top = uid("top")
    make_variant(tmp_path / "s17" / "torch-cpu", top, value=1)
    make_variant(tmp_path / "s17" / "build" / "torch-cpu", uid("build"), value=2)
    assert loader.get_local_kernel(tmp_path / "s17").__name__ == top


def test_build_is_used_when_nothing_at_the_top_level_fits(tmp_path: Path) -> None:
    inside = uid("inbuild")
    make_variant(tmp_path / "s" / "torch-cuda", uid("cuda"))
    make_variant(tmp_path / "s" / "build" / "torch-cpu", inside)
    info = locate_local(tmp_path / "s", None, True).info
    assert info.path == tmp_path / "s" / "build" / "torch-cpu"
    assert info.trace[0].startswith("torch-cuda: rejected")
    assert info.trace[-1].startswith("build/torch-cpu: accepted")
    assert loader.get_local_kernel(tmp_path / "s").__name__ == inside


def test_when_neither_fits_both_are_listed(tmp_path: Path) -> None:
    make_variant(tmp_path / "n" / "torch-cuda", uid("c1"))
    make_variant(tmp_path / "n" / "build" / "torch-rocm", uid("c2"))
    with pytest.raises(VariantNotFoundError) as info:
        loader.get_local_kernel(tmp_path / "n")
    text = str(info.value)
    assert "its top level, then build/" in text
    assert "torch-cuda: rejected" in text and "build/torch-rocm: rejected" in text


def test_cuda_archs_of_a_universal_build_do_not_refuse_it_on_a_rocm_gpu(
        tmp_path: Path, monkeypatch) -> None:
    """The GPU is checked against a build's archs only when its metadata names the GPU's
    backend, as Hugging Face's loader does: it loads this build on a ROCm GPU too."""
    from kernelforge import variants

    rocm = variants.SystemFacts((2, 11, 0), True, "rocm", (6, 3), "x86_64", "linux",
                                gpu_archs=("gfx942",))
    monkeypatch.setattr(variants, "detect_system", lambda: rocm)
    vdir = tmp_path / "build" / "torch-universal"
    vdir.mkdir(parents=True)
    (vdir / "__init__.py").write_text("VALUE = 1\n")
    write_metadata(vdir, uid("univ"), backend="cuda", archs=["9.0"])
    info = locate_local(tmp_path, None, True).info
    assert info.variant == "torch-universal"
    # archs for ROCm are still checked
    write_metadata(vdir, uid("univ"), backend="rocm", archs=["gfx90a"])
    with pytest.raises(VariantNotFoundError, match="GPU gfx942 not covered"):
        locate_local(tmp_path, None, True)
    # ... also where the metadata spells the backend in capitals
    write_metadata(vdir, uid("univ"), backend="ROCm", archs=["gfx90a"])
    with pytest.raises(VariantNotFoundError, match="GPU gfx942 not covered"):
        locate_local(tmp_path, None, True)


# --- D8: builds from a dirty git tree -------------------------------------------------------


@pytest.mark.parametrize(("provenance", "what"), [
    ({"kernel-builder": {"version": "0.1.0", "name": "kernelforge"},
      "kernel": {"commit": "5f81272346e3ea283dabcb370c21d8b98c3759a2", "dirty": True}},
     "the kernel source at commit 5f81272346e3 had uncommitted changes"),
    # Hugging Face's builder records its own git state flattened into kernel-builder
    ({"kernel-builder": {"version": "0.13.0", "commit": "a" * 40, "dirty": True},
      "kernel": {"commit": "b" * 40, "dirty": False}},
     f"the builder at commit {'a' * 12} had uncommitted changes"),
])
def test_a_build_from_a_dirty_tree_warns_once_per_load(tmp_path: Path, caplog,
                                                       provenance, what) -> None:
    vdir = make_variant(tmp_path / "p" / "build" / "torch-cpu", uid("dirty"),
                        provenance=provenance)
    caplog.set_level(logging.INFO, logger="kernelforge")
    loader.get_local_kernel(tmp_path / "p")
    warned = [r for r in caplog.records if "dirty git tree" in r.getMessage()]
    assert len(warned) == 1, warned
    assert warned[0].levelno == logging.WARNING and warned[0].name == "kernelforge.loader"
    assert what in warned[0].getMessage() and str(vdir) in warned[0].getMessage()
    caplog.clear()
    loader.get_local_kernel(vdir)  # another load (another call) of the same build
    assert len([r for r in caplog.records if "dirty git tree" in r.getMessage()]) == 1


def test_the_warning_names_the_variant_of_a_downloaded_copy(tmp_path: Path, monkeypatch,
                                                          caplog) -> None:
    """The download cache keeps a variant's files in ``<variant>/files/``: the warning
    names the variant, not that folder."""
    from kf_sharing import FakeHfApi, isolate

    from kernelforge.hub.hf import HfHub

    env = isolate(monkeypatch, tmp_path)
    make_variant(tmp_path / "p" / "build" / "torch-cpu", uid("dl"), provenance={
        "kernel": {"commit": "d" * 40, "dirty": True}})
    hub = HfHub(api=FakeHfApi(tmp_path / "remote"), cache=env["cache"])
    hub.publish("org/dirty", tmp_path / "p", version=1)
    caplog.set_level(logging.INFO, logger="kernelforge")
    loader.get_kernel("org/dirty", version=1, hub=hub, trust_remote_code=True)
    warned = [r.getMessage() for r in caplog.records if "dirty git tree" in r.getMessage()]
    assert len(warned) == 1, warned
    assert "variant torch-cpu (" in warned[0] and "variant files" not in warned[0]
    assert f"{env['cache']}{os.sep}" in warned[0]  # the path is still the copy's own


def test_a_clean_build_does_not_warn(tmp_path: Path, caplog) -> None:
    make_variant(tmp_path / "p" / "build" / "torch-cpu", uid("clean"), provenance={
        "kernel-builder": {"version": "0.1.0"}, "kernel": {"commit": "c" * 40, "dirty": False}})
    caplog.set_level(logging.INFO, logger="kernelforge")
    loader.get_local_kernel(tmp_path / "p")
    assert "dirty" not in caplog.text


# --- a build/ as their builder fills it, for several torch versions and backends ----------


def _this_torch() -> tuple[str, str]:
    """This machine's torch as variant names write it (``torch213``) and its platform
    (``x86_64-linux``)."""
    from kernelforge import variants

    facts = variants.detect_system()
    if facts.torch_version is None or facts.os != "linux":
        pytest.skip("needs torch on Linux, where variant names carry the cxx11 tag")
    major, minor = facts.torch_version[:2]
    return f"torch{major}{minor}", f"{facts.cpu}-{facts.os}"


def _their_build_names() -> dict[str, str]:
    """Variant name -> why kernelforge passes it over here: a build/ their builder makes
    for a release matrix (other torch versions, the other C++ ABI, every backend),
    ``torch-universal`` from builders before noarch variants."""
    torch, here = _this_torch()
    major, minor = int(torch[5]), int(torch[6:])
    return {
        f"torch{major}{minor - 1}-cxx11-cpu-{here}": "built for torch",
        f"torch{major}{minor + 1}-cxx11-cpu-{here}": "built for torch",
        f"{torch}-cxx98-cpu-{here}": "built with the cxx98 C++ ABI",
        f"{torch}-cxx11-cu130-{here}": "built for CUDA 13.0",
        f"{torch}-cxx11-rocm71-{here}": "built for ROCm 7.1",
        f"{torch}-cxx11-xpu20252-{here}": "built for XPU 2025.2",
        f"{torch}-metal-aarch64-darwin": "built for CPU aarch64",
        f"torch-stable-abi{major}{minor + 1}-cpu-{here}": "built for torch stable ABI",
        "torch-cuda": "pure-Python build for cuda",
        "torch-rocm": "pure-Python build for rocm",
    }


def their_variant(vdir: Path, module_id: str, backend: str, value: int = 1) -> Path:
    """A variant with the metadata.json of the oldest builds their loader 0.17 reads: the
    fields its parser requires, no digest, no provenance, no archs."""
    vdir.mkdir(parents=True)
    (vdir / "__init__.py").write_text(f"VALUE = {value}\n")
    (vdir / "metadata.json").write_text(json.dumps({
        "id": module_id, "name": "relu", "version": 1, "license": "Apache-2.0",
        "python-depends": [], "backend": {"type": backend}}))
    return vdir


def _backend_of(name: str) -> str:
    for tag, backend in (("-cu", "cuda"), ("-rocm", "rocm"), ("-xpu", "xpu"),
                         ("-metal", "metal")):
        if tag in name:
            return backend
    return "cpu"


def test_this_torchs_variant_is_picked_from_their_release_build(tmp_path: Path,
                                                                monkeypatch) -> None:
    torch, here = _this_torch()
    others = _their_build_names()
    for name in [*others, "torch-universal", "torch-cpu"]:
        their_variant(tmp_path / "p" / "build" / name, uid("other"), _backend_of(name))
    mine = uid("mine")
    their_variant(tmp_path / "p" / "build" / f"{torch}-cxx11-cpu-{here}", mine, "cpu", 7)

    info = locate_local(tmp_path / "p", None, True).info
    assert info.variant == f"{torch}-cxx11-cpu-{here}"
    # the pure-Python builds that fit too rank after it, noarch before universal
    accepted = [line.split(":")[0] for line in info.trace if ": accepted" in line]
    assert accepted == [info.variant, "torch-cpu", "torch-universal"], info.trace
    for name, why in others.items():
        (line,) = [t for t in info.trace if t.startswith(f"{name}: ")]
        assert line.startswith(f"{name}: rejected, {why}"), line
    assert loader.get_local_kernel(tmp_path / "p").__name__ == mine
    monkeypatch.setenv("LOCAL_KERNELS", f"org/release={tmp_path / 'p'}")
    assert loader.get_kernel("org/release", version=1).VALUE == 7


def test_noarch_is_picked_before_universal_when_no_compiled_build_fits(tmp_path: Path) -> None:
    noarch = uid("noarch")
    for name in [*_their_build_names(), "torch-universal"]:
        their_variant(tmp_path / "build" / name, uid("other"), _backend_of(name))
    their_variant(tmp_path / "build" / "torch-cpu", noarch, "cpu")
    assert loader.get_local_kernel(tmp_path).__name__ == noarch
    shutil.rmtree(tmp_path / "build" / "torch-cpu")
    assert locate_local(tmp_path, None, True).info.variant == "torch-universal"


def test_when_no_build_of_theirs_fits_each_is_named_with_its_reason(tmp_path: Path) -> None:
    others = _their_build_names()
    for name in others:
        their_variant(tmp_path / "build" / name, uid("none"), _backend_of(name))
    with pytest.raises(VariantNotFoundError) as info:
        loader.get_local_kernel(tmp_path)
    assert len(info.value.trace) == len(others), info.value.trace
    for name, why in others.items():
        assert f"  {name}: rejected, {why}" in str(info.value), str(info.value)


# --- both loaders on the same directory ---------------------------------------------------


LAYOUTS = ("release matrix", "untagged beside tagged", "noarch and universal",
           "universal only fits", "top level fits", "top level does not fit", "nothing fits")


def _layouts() -> dict[str, tuple[list[str], list[str]]]:
    """Named layouts: (variants at the top level, variants in build/)."""
    torch, here = _this_torch()
    mine, others = f"{torch}-cxx11-cpu-{here}", list(_their_build_names())
    return {
        "release matrix": ([], [*others, mine, "torch-cpu", "torch-universal"]),
        "untagged beside tagged": ([], [mine, f"{torch}-cpu-{here}", "torch-cpu"]),
        "noarch and universal": ([], [*others, "torch-universal", "torch-cpu"]),
        "universal only fits": ([], [*others, "torch-universal"]),
        "top level fits": (["torch-cpu"], [mine]),
        "top level does not fit": ([*others[:3]], [mine, "torch-universal"]),
        "nothing fits": (["torch-cuda"], others),
    }


@pytest.mark.parametrize("layout", LAYOUTS)
def test_both_loaders_pick_the_same_variant_of_a_directory(tmp_path: Path, layout: str) -> None:
    """Their ``resolve_local_kernel`` and our ``locate_local`` on one directory, for the
    cpu backend (which any torch can choose for): the same variant, or both refuse."""
    resolver = pytest.importorskip("kernels.resolver")
    top, in_build = _layouts()[layout]
    for base, names in ((tmp_path, top), (tmp_path / "build", in_build)):
        for name in names:
            their_variant(base / name, uid("both"), _backend_of(name))
    try:
        theirs: Path | None = resolver.resolve_local_kernel(tmp_path, backend="cpu").variant_path
    except FileNotFoundError:
        theirs = None
    try:
        ours: Path | None = locate_local(tmp_path, "cpu", True).info.path
    except VariantNotFoundError:
        ours = None
    assert ours == theirs
    assert (ours is None) == (layout == "nothing fits")
