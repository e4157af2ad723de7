"""Assembling a variant (kernelforge.build.package): builds racing for one variant,
leftovers of builds killed by a crash, and package files the build would clobber."""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import textwrap
import time
from pathlib import Path

import pytest

from kernelforge import digest
from kernelforge._durable import LEFTOVER_NAME
from kernelforge.build import build_project, package
from kernelforge.errors import BuildError, HubError
from kernelforge.hub._staging import stage_build

pytestmark = pytest.mark.usefixtures("cpu_system")


def cpu_project(root: Path, pyext: tuple[str, ...] = ()) -> Path:
    pkg = root / "torch-ext" / "scale"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("from ._ops import ops\n")
    (pkg / "kernels.py").write_text("FACTOR = 3\n")
    table = f"pyext = {json.dumps(list(pyext))}\n" if pyext else ""
    (root / "build.toml").write_text(textwrap.dedent("""
        [general]
        name = "scale"
        edition = 5
        version = 3
        license = "MIT"
        backends = ["cpu"]

        [torch-noarch]
    """) + table)
    return root


def _other(value: str) -> str:
    """A value of the same form as ``value`` that differs from it."""
    return ("1" if value[0] == "0" else "0") + value[1:]


@pytest.mark.parametrize("exchange", [True, False], ids=["exchange", "rename-aside"])
def test_a_file_where_the_variant_goes_is_replaced_and_leaves_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, exchange: bool) -> None:
    """build/<variant> is a plain file: the variant takes its place, and the file is
    removed rather than left in build/ under a leftover's name."""
    project = cpu_project(tmp_path / "scale")
    (first,) = build_project(project, progress=lambda _: None)
    shutil.rmtree(first.path)
    first.path.write_text("in the way\n")
    if not exchange:
        monkeypatch.setattr(package, "_exchange", lambda a, b: False)
    (second,) = build_project(project, force=True, progress=lambda _: None)
    assert (second.path / "metadata.json").is_file()
    assert sorted(p.name for p in second.path.parent.iterdir()) == [second.path.name]


@pytest.mark.parametrize("exchange", [True, False], ids=["exchange", "rename-aside"])
def test_a_variant_another_build_puts_in_place_first_is_replaced(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, exchange: bool) -> None:
    """Two builds of one variant into a build/ that does not have it yet both find it
    missing; the one that renames second must not fail on the first one's tree (the
    directory is not empty) but replace it, leaving a whole variant and no leftovers."""
    project = cpu_project(tmp_path / "scale")
    (first,) = build_project(project, progress=lambda _: None)
    winner = tmp_path / "winner"
    shutil.copytree(first.path, winner)
    shutil.rmtree(first.path)  # build/ without the variant, as on a first build
    (project / "torch-ext" / "scale" / "kernels.py").write_text("FACTOR = 4\n")

    real_rename = os.rename
    raced: list[str] = []

    def rename(src: os.PathLike[str] | str, dst: os.PathLike[str] | str) -> None:
        # the other build finishes between the check that the variant is missing and
        # this build's rename
        if not raced and Path(dst) == first.path and not first.path.exists():
            shutil.copytree(winner, first.path)
            raced.append(str(src))
        real_rename(src, dst)

    monkeypatch.setattr(os, "rename", rename)
    if not exchange:  # a system or file system without renameat2(RENAME_EXCHANGE)
        monkeypatch.setattr(package, "_exchange", lambda a, b: False)
    (second,) = build_project(project, progress=lambda _: None)
    assert raced, "the build never renamed its tree onto the missing variant"
    assert second.path == first.path
    assert (second.path / "kernels.py").read_text() == "FACTOR = 4\n"  # this build's tree
    meta = json.loads((second.path / "metadata.json").read_text())
    digest.verify_variant(second.path, meta)  # whole: every file its metadata lists
    assert sorted(p.name for p in second.path.parent.iterdir()) == ["torch-cpu"]

    # only a tree in the way is taken for the other build: other failures still raise
    staging = tmp_path / ".torch-cpu.tmp-1-x"
    staging.mkdir()
    shutil.rmtree(second.path)

    def denied(src: object, dst: object) -> None:
        raise OSError(errno.EACCES, "Permission denied", str(dst))

    monkeypatch.setattr(os, "rename", denied)
    with pytest.raises(PermissionError):
        package._swap_into_place(staging, second.path)


def _mark(monkeypatch: pytest.MonkeyPatch, **parts: str) -> str:
    """The owner mark this process would have with some of host, boot and pid space
    changed."""
    with monkeypatch.context() as m:
        for name, value in parts.items():
            m.setattr(package, f"_{name}", lambda value=value: value)
        return package._owner()


def test_owner_marks_tell_a_reboot_of_this_host_from_another_host(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A build of an earlier boot of this host is dead; one of another host, or of
    another container on this one, may still run. Older versions' marks (one hash of
    host, boot and pid namespace) are read as before. The marks fit LEFTOVER_NAME, which
    publish reads too, whatever dashes the variant name has."""
    me = package._owner()
    earlier_boot = _mark(monkeypatch, boot=_other(package._boot()))
    other_host = _mark(monkeypatch, host=_other(package._host()))
    other_container = _mark(monkeypatch, pid_space=_other(package._pid_space()))
    assert package._alive(me)
    booted = package._boot_time()
    assert booted is not None  # Linux
    assert not package._alive(earlier_boot, changed=booted - 1)  # untouched since
    # a host of this name and machine id (a clone of one image) building now
    assert package._alive(earlier_boot, changed=booted + 1)
    assert package._alive(earlier_boot)  # when it changed is not known
    assert package._alive(other_host)
    assert package._alive(other_container)
    assert package._alive(f"{me[:-len(str(os.getpid()))]}{os.getppid()}")
    assert not package._alive(f"{me[:-len(str(os.getpid()))]}999999999")  # no such pid
    # older versions' <machine>-<pid>
    assert package._alive(f"{package._machine()}-{os.getppid()}")
    assert not package._alive(f"{package._machine()}-999999999")
    assert package._alive(f"{_other(package._machine())}-999999999")
    assert package._alive("not-a-mark")
    for variant in ("torch-cpu", "torch28-cxx11-cu128-x86_64-linux"):
        for owner in (me, earlier_boot, f"{package._machine()}-42"):
            old = LEFTOVER_NAME.match(f".{variant}.old-{owner}")
            tmp = LEFTOVER_NAME.match(f".{variant}.tmp-{owner}-ab_c12de")
            assert old is not None and old["variant"] == variant and old["old"] == owner
            assert tmp is not None and tmp["variant"] == variant and tmp["tmp"] == owner


def test_leftovers_of_a_build_killed_before_a_reboot_are_recovered(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A build killed by a crash or power loss: after the reboot its set-aside variant is
    put back and its staging directory removed (so publish's advice, build again, works),
    while another host's leftovers in a shared build/ are left alone."""
    project = cpu_project(tmp_path / "scale")
    build_project(project, progress=lambda _: None)
    build = project / "build"
    before_reboot = _mark(monkeypatch, boot=_other(package._boot()))
    foreign = _mark(monkeypatch, host=_other(package._host()))
    aside = build / f".torch-cpu.old-{before_reboot}"
    os.rename(build / "torch-cpu", aside)
    staging = build / f".torch-cpu.tmp-{before_reboot}-ab12cd"
    shutil.copytree(aside, staging)
    kept = [build / f".torch-cpu.tmp-{foreign}-ef34gh", build / f".torch-cpu.old-{foreign}"]
    for path in kept:
        shutil.copytree(aside, path)
    with pytest.raises(HubError, match=r"variant torch-cpu is missing.*Run 'kernelforge build'"):
        stage_build(build, 3)
    shutil.rmtree(kept[1])  # another host's set-aside variant would still be refused
    del kept[1]
    # the reboot: these leftovers have not changed since
    booted = time.time() + 1
    monkeypatch.setattr(package, "_boot_time", lambda: booted)

    lines: list[str] = []
    (result,) = build_project(project, progress=lines.append)
    assert result.up_to_date  # the old tree is back, intact
    assert any("restored torch-cpu" in line for line in lines), lines
    assert any(f"removed {staging.name}" in line for line in lines), lines
    assert sorted(p.name for p in build.iterdir()) == sorted(
        ["torch-cpu", *(path.name for path in kept)])
    assert stage_build(build, 3).variants == ("torch-cpu",)


@pytest.mark.parametrize("name, says", [
    ("metadata.json", "would be overwritten by the generated metadata.json"),
    ("metadata.json.sigstore", "would be taken for the signature bundle"),
])
def test_a_package_file_the_variant_metadata_would_clobber_is_refused(
        tmp_path: Path, name: str, says: str) -> None:
    """A package file named metadata.json would be replaced by the generated one, and a
    metadata.json.sigstore taken for its signature bundle: the build refuses either,
    naming the file and the fix, and leaves nothing behind."""
    project = cpu_project(tmp_path / "scale", pyext=("py", "json", "sigstore"))
    clash = project / "torch-ext" / "scale" / name
    clash.write_text('{"block_sizes": [64, 128]}\n')
    nested = project / "torch-ext" / "scale" / "configs" / name  # not the variant's own
    nested.parent.mkdir()
    nested.write_text("{}\n")
    with pytest.raises(BuildError, match=rf"{re.escape(str(clash))} {says}.*fix: rename it"):
        build_project(project, progress=lambda _: None)
    build = project / "build"
    assert not build.exists() or not any(build.iterdir())
    clash.rename(clash.with_name("block_sizes.json"))
    (result,) = build_project(project, progress=lambda _: None)
    assert (result.path / "block_sizes.json").is_file()
    assert (result.path / "configs" / name).read_text() == "{}\n"
