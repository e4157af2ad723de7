"""Noarch projects (pure Python / Triton) are packaged without a compiler."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from kf_testutil import write_noarch_project

from kernelforge.build import build_project
from kernelforge.errors import BuildError

pytestmark = pytest.mark.usefixtures("cpu_system")


def noarch_project(root: Path, manifest: str) -> Path:
    pkg = root / "torch-ext" / "scale"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(
        "from ._ops import ops\n\ndef scale(x, s):\n    return x * s\n"
    )
    (pkg / "kernels.py").write_text("FACTOR = 3\n")
    (pkg / "notes.txt").write_text("not packaged: .txt is not in pyext\n")
    (root / "build.toml").write_text(textwrap.dedent(manifest))
    return root


EDITION5 = """
    [general]
    name = "scale"
    edition = 5
    version = 3
    license = "MIT"
    backends = ["cuda", "cpu"]

    [torch-noarch]
"""

LEGACY_UNIVERSAL = """
    [general]
    name = "scale"
    universal = true
"""


def test_noarch_builds_one_variant_per_backend(tmp_path: Path) -> None:
    project = noarch_project(tmp_path / "scale", EDITION5)
    results = build_project(project, progress=lambda _: None)
    assert sorted(r.variant for r in results) == ["torch-cpu", "torch-cuda"]
    for r in results:
        names = sorted(p.name for p in r.path.iterdir())
        assert names == ["__init__.py", "_ops.py", "kernels.py", "metadata.json"]
        meta = json.loads((r.path / "metadata.json").read_text())
        assert meta["version"] == 3 and meta["backend"]["type"] == r.backend
        assert set(meta["digest"]["files"]) == {"__init__.py", "_ops.py", "kernels.py"}
        ops = (r.path / "_ops.py").read_text()
        assert "from . import" not in ops  # no extension to import
        assert f"torch.ops._scale_{r.backend}_" in ops
    # unchanged: nothing is rewritten
    again = build_project(project, progress=lambda _: None)
    assert all(r.up_to_date for r in again)


def test_legacy_universal_builds_a_pure_python_variant_per_backend(tmp_path: Path) -> None:
    """As Hugging Face's builder does: its loader reads no ``universal`` backend type in
    metadata.json, so a ``torch-universal`` variant would not load there."""
    project = noarch_project(tmp_path / "scale", LEGACY_UNIVERSAL)
    results = build_project(project, progress=lambda _: None)
    assert sorted(r.variant for r in results) == [
        "torch-cpu", "torch-cuda", "torch-metal", "torch-neuron", "torch-npu", "torch-rocm",
        "torch-xpu"]
    for r in results:
        meta = json.loads((r.path / "metadata.json").read_text())
        assert meta["backend"] == {"type": r.backend}
    from kernelforge import get_local_kernel

    module = get_local_kernel(project)
    assert module.scale(2, 5) == 10


def test_noarch_refuses_backends_it_does_not_list(tmp_path: Path) -> None:
    project = noarch_project(tmp_path / "scale", EDITION5)
    with pytest.raises(BuildError, match=r"backend rocm is not listed by this project \(it "
                       r"lists: cuda, cpu\); fix: build one of those, or add it to "
                       r"general.backends"):
        build_project(project, backends=["rocm"], progress=lambda _: None)
    with pytest.raises(BuildError, match=r"backends rocm, xpu are not listed"):
        build_project(project, backends=["rocm", "xpu"], progress=lambda _: None)


def test_noarch_archs_and_backend_python_depends_reach_the_metadata(tmp_path: Path) -> None:
    """[torch-noarch] archs restrict where the loader accepts the build; [general.cuda]
    python-depends are the cuda variant's only (Hugging Face's builder merges them with
    [general] python-depends in the same way)."""
    project = noarch_project(tmp_path / "scale", """
        [general]
        name = "scale"
        edition = 5
        version = 1
        license = "MIT"
        backends = ["cuda", "rocm", "cpu"]
        python-depends = ["einops"]

        [general.cuda]
        python-depends = ["nvidia-cutlass-dsl"]

        [torch-noarch]
        cuda-capabilities = ["9.0", "10.0"]
        rocm-archs = ["gfx942"]
    """)
    results = build_project(project, progress=lambda _: None)
    meta = {r.backend: json.loads((r.path / "metadata.json").read_text()) for r in results}
    assert meta["cuda"]["backend"] == {"type": "cuda", "archs": ["9.0", "10.0"]}
    assert meta["rocm"]["backend"] == {"type": "rocm", "archs": ["gfx942"]}
    assert meta["cpu"]["backend"] == {"type": "cpu"}
    assert meta["cuda"]["python-depends"] == ["einops", "nvidia-cutlass-dsl"]
    assert meta["rocm"]["python-depends"] == ["einops"]
    assert meta["cpu"]["python-depends"] == ["einops"]


@pytest.mark.parametrize("folder", ["result", "build", ".private"])
def test_an_edit_in_a_package_subfolder_rebuilds_under_a_new_id(tmp_path: Path,
                                                                folder: str) -> None:
    """A subpackage named like a build output still ships, so editing it is a change: the
    build is not "up to date" and the new bytes get a new id."""
    project = noarch_project(tmp_path / "scale", EDITION5)
    sub = project / "torch-ext" / "scale" / folder
    sub.mkdir()
    (sub / "__init__.py").write_text("value = 1\n")
    (first,) = build_project(project, backends=["cpu"], progress=lambda _: None)
    old_id = json.loads((first.path / "metadata.json").read_text())["id"]
    (sub / "__init__.py").write_text("value = 2\n")
    (second,) = build_project(project, backends=["cpu"], progress=lambda _: None)
    assert not second.up_to_date
    assert (second.path / folder / "__init__.py").read_text() == "value = 2\n"
    assert json.loads((second.path / "metadata.json").read_text())["id"] != old_id


_CRASH_MID_SWAP = """
import os, signal, sys
import kernelforge.build.package as package

def crash(staging, final):  # dies between setting the old tree aside and the new rename
    os.rename(final, final.with_name(f".{final.name}.old-{package._owner()}"))
    os.kill(os.getpid(), signal.SIGKILL)

package._swap_into_place = crash
from kernelforge.build import build_project
build_project(sys.argv[1], backends=["cpu"], force=True, progress=lambda _: None)
"""


def test_a_build_killed_mid_swap_is_recovered_and_publish_refuses_it_until_then(
        tmp_path: Path) -> None:
    """A build killed after setting the old variant aside (older versions, or a file
    system without an atomic exchange) leaves it as .<variant>.old-<owner> beside its
    staging directory: publishing refuses the build (it would leave the variant out),
    naming the variant and the fix, and the next build puts the old variant back and
    removes the rest."""
    import subprocess
    import sys

    from kernelforge.errors import HubError
    from kernelforge.hub._staging import stage_build

    project = noarch_project(tmp_path / "scale", EDITION5)
    build_project(project, progress=lambda _: None)
    proc = subprocess.run([sys.executable, "-c", _CRASH_MID_SWAP, str(project)],
                          capture_output=True, text=True, check=False)
    assert proc.returncode < 0, proc.stderr  # killed
    build = project / "build"
    names = sorted(p.name for p in build.iterdir())
    assert "torch-cpu" not in names and names[0].startswith(".torch-cpu.")
    with pytest.raises(HubError, match=r"variant torch-cpu is missing.*\.torch-cpu\.old-"
                       r".*Run 'kernelforge build'"):
        stage_build(build, 3)
    lines: list[str] = []
    (result,) = build_project(project, backends=["cpu"], progress=lines.append)
    assert result.up_to_date  # the old tree is back, intact
    assert sorted(p.name for p in build.iterdir()) == ["torch-cpu", "torch-cuda"]
    assert any("restored torch-cpu" in line for line in lines), lines
    assert stage_build(build, 3).variants == ("torch-cpu", "torch-cuda")


def test_leftovers_of_a_running_build_are_left_alone(tmp_path: Path) -> None:
    import os

    from kernelforge.build.package import _machine

    project = noarch_project(tmp_path / "scale", EDITION5)
    build_project(project, progress=lambda _: None)
    build = project / "build"
    running = build / f".torch-cpu.tmp-{_machine()}-{os.getppid()}-abc123"
    # another machine or container sharing the folder: its process ids mean nothing here
    foreign = build / f".torch-cpu.tmp-{'0' * 8 if _machine() != '0' * 8 else '1' * 8}-1-x"
    dead = build / f".torch-cpu.tmp-{_machine()}-999999999-x"  # no such process here
    # not a build's own name: a user's folder that only looks like an old staging name
    users = [build / n for n in (".torch-cpu.tj7abgqp", ".notes.personal")]
    for path in (running, foreign, dead, *users):
        path.mkdir()
    build_project(project, force=True, progress=lambda _: None)
    assert running.is_dir() and foreign.is_dir() and all(path.is_dir() for path in users)
    assert not dead.exists()


def test_replacing_a_variant_never_leaves_it_missing(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """The new tree is exchanged with the old one in one step: no rename sets the old
    one aside first (Linux; elsewhere the two renames remain)."""
    import os
    import sys

    from kernelforge.build import package

    if not sys.platform.startswith("linux"):
        pytest.skip("renameat2 is Linux-only")
    final, staging = tmp_path / "torch-cpu", tmp_path / ".torch-cpu.tmp-1-x"
    for directory, text in ((final, "old"), (staging, "new")):
        directory.mkdir()
        (directory / "f.py").write_text(text)

    def no_rename(*args: object) -> None:
        raise AssertionError(f"a rename left the variant missing for a moment: {args}")

    monkeypatch.setattr(os, "rename", no_rename)
    package._swap_into_place(staging, final)
    assert (final / "f.py").read_text() == "new" and not staging.exists()


def test_building_for_two_environments_in_turn_does_not_rebuild(tmp_path: Path) -> None:
    """Each environment (--python) keeps its own up-to-date entry: building for A, then
    B, then A again finds A's build in place."""
    import sys

    project = noarch_project(tmp_path / "scale", EDITION5)
    other = tmp_path / "other" / "python"  # another path to this interpreter
    other.parent.mkdir()
    other.write_text(f'#!/bin/sh\nexec {sys.executable} "$@"\n')
    other.chmod(0o755)

    def build(python: Path | None) -> bool:
        (result,) = build_project(project, backends=["cpu"], python=python,
                                  progress=lambda _: None)
        return result.up_to_date

    assert not build(None)
    assert not build(other)  # another environment: built once
    assert build(None) and build(other) and build(None)


def test_an_entry_whose_variant_was_rewritten_is_stale(tmp_path: Path) -> None:
    """Sources A, then B, then A again: the variant directory holds B's build, so A's
    remembered build is not "up to date"."""
    project = noarch_project(tmp_path / "scale", EDITION5)
    kernels = project / "torch-ext" / "scale" / "kernels.py"

    def build() -> tuple[bool, str]:
        (result,) = build_project(project, backends=["cpu"], progress=lambda _: None)
        return result.up_to_date, (result.path / "kernels.py").read_text()

    assert build() == (False, "FACTOR = 3\n")
    kernels.write_text("FACTOR = 4\n")
    assert build() == (False, "FACTOR = 4\n")
    kernels.write_text("FACTOR = 3\n")
    assert build() == (False, "FACTOR = 3\n")
    assert build() == (True, "FACTOR = 3\n")


def test_files_left_out_of_the_package_are_named_once_per_build(tmp_path: Path) -> None:
    """notes.txt is not in pyext: the variants leave it out, and the build says so once
    (not once per variant), with the setting that would ship it; tool state (dot-folders,
    bytecode) is not named."""
    project = noarch_project(tmp_path / "scale", EDITION5)
    pkg = project / "torch-ext" / "scale"
    (pkg / "data").mkdir()
    (pkg / "data" / "table.bin").write_bytes(b"\0\1")
    (pkg / ".mypy_cache").mkdir()
    (pkg / ".mypy_cache" / "x.json").write_text("{}\n")
    (pkg / "__pycache__").mkdir()
    (pkg / "__pycache__" / "kernels.cpython-311.pyc").write_bytes(b"\0")
    lines: list[str] = []
    results = build_project(project, progress=lines.append)
    assert len(results) == 2
    notes = [ln for ln in lines if "not packaged" in ln]
    assert notes == [
        "note: not packaged: torch-ext/scale/data/table.bin, torch-ext/scale/notes.txt: their "
        "suffixes (.bin, .txt) are not in [torch-noarch] pyext (py, pyi); fix: add them to "
        "pyext in build.toml to ship them in the variant"], lines
    for r in results:
        assert not (r.path / "notes.txt").exists() and not (r.path / "data").exists()
    toml = project / "build.toml"
    toml.write_text(toml.read_text() + 'pyext = ["py", "txt", "bin"]\n')
    lines.clear()
    for r in build_project(project, progress=lines.append):
        assert (r.path / "notes.txt").is_file() and (r.path / "data" / "table.bin").is_file()
    assert not [ln for ln in lines if "not packaged" in ln], lines


def test_a_pyext_without_py_still_ships_the_python_modules(tmp_path: Path) -> None:
    """pyext lists the data files to ship besides the Python modules: Hugging Face's
    builder always ships the .py files, so pyext = ["txt"] (a data extension alone) gives
    a variant with its package and the .txt file, not one without __init__.py."""
    project = noarch_project(tmp_path / "scale", EDITION5 + '    pyext = ["txt"]\n')
    lines: list[str] = []
    results = build_project(project, backends=["cpu"], progress=lines.append)
    names = sorted(p.name for p in results[0].path.iterdir())
    assert names == ["__init__.py", "_ops.py", "kernels.py", "metadata.json", "notes.txt"]
    assert not [ln for ln in lines if "not packaged" in ln], lines


def test_a_hub_branch_that_publish_ignores_is_noted_once(tmp_path: Path) -> None:
    project = noarch_project(tmp_path / "scale", EDITION5.replace(
        "[torch-noarch]", '[general.hub]\nbranch = "main"\n\n    [torch-noarch]'))
    lines: list[str] = []
    build_project(project, progress=lines.append)
    notes = [ln for ln in lines if "general.hub.branch" in ln]
    assert notes == ["note: general.hub.branch = 'main' is ignored: kernelforge publish writes "
                     "the builds to branch v3 (from general.version), the branch that "
                     "get_kernel(..., version=3) loads; the key is for Hugging Face's "
                     "kernel-builder upload (remove it, or set it to \"v3\", to silence this "
                     "note)"], lines


def test_noarch_names_an_unknown_backend_with_the_likely_one(tmp_path: Path) -> None:
    project = noarch_project(tmp_path / "scale", EDITION5)
    with pytest.raises(BuildError, match=r"--backend Cuda: unknown backend.*this project has: "
                                         r"cuda, cpu\); fix: did you mean --backend cuda\?"):
        build_project(project, backends=["Cuda"], progress=lambda _: None)


def test_a_second_build_of_a_backend_waits_for_the_first(tmp_path: Path) -> None:
    """Two builds of one project's backend at once (two terminals, CI jobs sharing a
    checkout): the second says it waits, and goes on when the first is done."""
    import threading
    import time

    import filelock

    project = noarch_project(tmp_path / "scale", EDITION5)
    lines: list[str] = []
    held = filelock.FileLock(str(project / ".kernelforge" / "cpu.lock"))
    (project / ".kernelforge").mkdir()
    held.acquire()  # the first build
    try:
        second = threading.Thread(target=build_project, args=(project,),
                                  kwargs={"backends": ["cpu"], "progress": lines.append})
        second.start()
        deadline = time.monotonic() + 30
        while not any("waiting for another build" in line for line in lines):
            assert time.monotonic() < deadline, lines
            time.sleep(0.05)
        time.sleep(0.3)
        assert second.is_alive() and not (project / "build" / "torch-cpu").exists()
    finally:
        held.release()
    second.join(timeout=60)
    assert not second.is_alive()
    assert ("cpu: waiting for another build of this project's cpu backend to "
            f"finish (it holds {project / '.kernelforge' / 'cpu.lock'})") in lines
    assert (project / "build" / "torch-cpu" / "metadata.json").is_file()


def test_an_unchanged_project_is_found_up_to_date_without_the_lock(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A no-op build writes nothing, so it works on a read-only checkout."""
    import kernelforge.build as build_module

    project = noarch_project(tmp_path / "scale", EDITION5)
    build_project(project, backends=["cpu"], progress=lambda _: None)

    def no_lock(*args: object) -> None:
        raise AssertionError("the lock was taken")

    monkeypatch.setattr(build_module, "_build_lock", no_lock)
    (result,) = build_project(project, backends=["cpu"], progress=lambda _: None)
    assert result.up_to_date


def test_a_lock_that_cannot_be_taken_is_a_build_error(tmp_path: Path) -> None:
    project = noarch_project(tmp_path / "scale", EDITION5)
    (project / ".kernelforge").write_text("not a directory")
    with pytest.raises(BuildError, match=r"cannot take the build lock .*cpu\.lock: .*fix: "
                       r"make .*\.kernelforge writable"):
        build_project(project, backends=["cpu"], progress=lambda _: None)


def test_an_older_torch_universal_build_gives_way(tmp_path: Path) -> None:
    """A universal kernel built by an older version left build/torch-universal, which
    publish would still ship (and Hugging Face's loader cannot read): the next build
    removes it, saying so; another kernel's is left alone."""
    project = noarch_project(tmp_path / "scale", LEGACY_UNIVERSAL)
    old = project / "build" / "torch-universal"
    old.mkdir(parents=True)
    (old / "metadata.json").write_text(json.dumps({"name": "scale", "backend": {
        "type": "universal"}}))
    lines: list[str] = []
    build_project(project, progress=lines.append)
    assert not old.exists()
    assert "note: build/: removed torch-universal, an older build of this universal " \
        "kernel: it now builds a pure-Python variant for each backend in its place" in lines
    old.mkdir()
    (old / "metadata.json").write_text(json.dumps({"name": "other"}))
    build_project(project, progress=lambda _: None)
    assert old.is_dir()
    with pytest.raises(BuildError, match=r"--backend universal: .*is universal, which builds "
                       r"a pure-Python variant for each backend .*fix: name those backends "
                       r"\(cann, cpu, cuda, metal, neuron, rocm, xpu\)"):
        build_project(project, backends=["universal"], progress=lambda _: None)


@pytest.mark.parametrize("umask", [0o022, 0o002])
def test_the_build_lock_file_has_the_modes_the_umask_allows(tmp_path: Path,
                                                            umask: int) -> None:
    """Whoever may build in the project may take its lock, as the umask says: group
    members with umask 002, nobody else with 022 (the file is never world-writable)."""
    import os
    import stat

    project = write_noarch_project(tmp_path / "na")
    old = os.umask(umask)
    try:
        build_project(project, backends=["cpu"], progress=lambda _: None)
    finally:
        os.umask(old)
    mode = stat.S_IMODE((project / ".kernelforge" / "cpu.lock").stat().st_mode)
    assert mode == 0o666 & ~umask, oct(mode)


@pytest.mark.parametrize("umask", [0o022, 0o077])
def test_variant_files_have_the_same_modes_under_any_umask(tmp_path: Path, umask: int) -> None:
    """A variant's folders are 755 and its files 644 whatever the umask, so two builds of
    the same sources give the same directory, permissions included (under 077 the files
    were 600 below a folder that was 755)."""
    import os
    import stat

    project = noarch_project(tmp_path / "scale", EDITION5)
    sub = project / "torch-ext" / "scale" / "sub"
    sub.mkdir()
    (sub / "__init__.py").write_text("")
    old = os.umask(umask)
    try:
        results = build_project(project, backends=["cpu"], progress=lambda _: None)
    finally:
        os.umask(old)
    (variant,) = [r.path for r in results]
    modes = {p.relative_to(variant).as_posix(): stat.S_IMODE(p.stat().st_mode)
             for p in [variant, *variant.rglob("*")]}
    assert modes == {".": 0o755, "sub": 0o755, "sub/__init__.py": 0o644,
                     "__init__.py": 0o644, "kernels.py": 0o644, "_ops.py": 0o644,
                     "metadata.json": 0o644}, {k: oct(v) for k, v in modes.items()}


class _Killed(BaseException):
    """The process dying at this point: nothing after it runs, no cleanup either."""


def test_a_stamp_temporary_a_killed_build_left_is_removed_by_the_next_build(
        tmp_path: Path, monkeypatch) -> None:
    """A build killed between writing its up-to-date stamp's temporary and renaming it
    leaves that temporary in .kernelforge/; the next build that writes the stamp removes
    it (and no file of the user's)."""
    from kernelforge import _durable
    from kernelforge import build as build_mod

    project = noarch_project(tmp_path / "scale", EDITION5)
    stamp = project / ".kernelforge" / "cpu.stamp.json"
    replace_file = _durable.replace_file

    def dying(path: Path, data: bytes, **kwargs) -> None:
        if path == stamp:
            _durable.write_temp(path, data)
            raise _Killed
        replace_file(path, data, **kwargs)

    monkeypatch.setattr(build_mod, "replace_file", dying)
    with pytest.raises(_Killed):
        build_project(project, backends=["cpu"], progress=lambda _: None)
    monkeypatch.setattr(build_mod, "replace_file", replace_file)
    assert not stamp.exists() and len(_durable.temp_leftovers(stamp)) == 1
    mine = stamp.with_name(".cpu.stamp.json.notes.tmp")
    mine.write_text("the user's")

    (result,) = build_project(project, backends=["cpu"], progress=lambda _: None)
    assert not result.up_to_date and stamp.is_file()
    assert _durable.temp_leftovers(stamp) == []
    assert mine.read_text() == "the user's"
