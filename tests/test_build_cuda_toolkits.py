"""Which CUDA toolkit builds for which torch: the one of the torch's CUDA version, found
among the standard installation folders, or the one CUDA_HOME names; a toolkit of
another CUDA major version than the torch's is refused before compiling."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from kf_testutil import copy_example, fake_environment

from kernelforge.build import toolchain
from kernelforge.build.toolchain import Tool, cuda_mismatch, find_nvcc
from kernelforge.errors import ToolchainError


def fake_toolkit(home: Path, version: str, asked: Path | None = None) -> Path:
    """A CUDA toolkit at ``home`` whose nvcc only answers ``--version`` (writing a line
    to ``asked`` each time, where given)."""
    (home / "bin").mkdir(parents=True)
    (home / "include").mkdir()
    (home / "include" / "cuda_runtime.h").write_text("")
    nvcc = home / "bin" / "nvcc"
    log = f"echo {version} >> '{asked}'\n" if asked is not None else ""
    nvcc.write_text(f"#!/bin/sh\n{log}echo 'nvcc: NVIDIA (R) Cuda compiler driver'\n"
                    f"echo 'Cuda compilation tools, release {version}, V{version}.88'\n")
    nvcc.chmod(0o755)
    return home


def install_standard_folders(local: Path, monkeypatch: pytest.MonkeyPatch,
                             asked: Path | None = None) -> None:
    """Toolkits 12.6, 12.8 and 13.0 side by side in ``local``, ``cuda`` (the default
    installation) a link to 13.0, ``local`` the only folder searched; no nvcc on PATH and
    no toolkit variable set. Each nvcc logs to ``asked`` where given (:func:`fake_toolkit`)."""
    for version in ("12.6", "12.8", "13.0"):
        fake_toolkit(local / f"cuda-{version}", version, asked)
    (local / "cuda").symlink_to(local / "cuda-13.0")
    entry = toolchain._DEVICE_COMPILERS["nvcc"]
    monkeypatch.setitem(toolchain._DEVICE_COMPILERS, "nvcc",
                        (entry[0], str(local / "cuda"), *entry[2:]))
    monkeypatch.setattr(toolchain, "CUDA_TOOLKIT_FOLDERS", (str(local),))
    for var in ("CUDA_HOME", "CUDA_PATH"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("PATH", "/usr/bin:/bin")


@pytest.fixture
def installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The standard folders, made in ``tmp_path/local``: toolkits 12.6, 12.8 and 13.0
    side by side, ``cuda`` (the default installation) a link to 13.0; no nvcc on PATH
    and no toolkit variable set. Returns the folder."""
    local = tmp_path / "local"
    install_standard_folders(local, monkeypatch)
    find_nvcc.cache_clear()
    yield local
    find_nvcc.cache_clear()


@pytest.mark.parametrize(("cuda", "chosen"), [
    ("12.8", "cuda-12.8"),  # the same major.minor
    ("13.0", "cuda-13.0"),  # the default installation already fits
    ("12.9", "cuda-12.8"),  # the closest older minor: its code runs on torch's runtime
    ("12.7", "cuda-12.6"),  # an older minor before a newer one as close
    ("12.4", "cuda-12.6"),  # no older minor: the closest newer one
    ("12.8.1", "cuda-12.8"),  # a torch that gives its CUDA version in three parts
    ("11.8", "cuda-13.0"),  # no CUDA 11 at all: what the plain lookup finds
    (None, "cuda-13.0"),    # no torch version to match: the plain lookup
])
def test_the_toolkit_of_the_torchs_cuda_version_is_chosen(installed: Path, cuda: str | None,
                                                           chosen: str) -> None:
    nvcc = find_nvcc(cuda)
    assert nvcc is not None
    assert nvcc.path == installed / chosen / "bin" / "nvcc"
    if chosen != "cuda-13.0":
        assert nvcc.found == f"found in {installed / chosen}"


def test_the_toolkit_on_path_is_kept_when_it_fits(installed: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """PATH comes first as before: a 12.8 toolkit there wins over /usr/local/cuda-12.8,
    and a 12.6 one on PATH gives way to the 12.8 folder for a torch built with 12.8."""
    other = fake_toolkit(installed.parent / "opt" / "cuda-12.8", "12.8")
    monkeypatch.setenv("PATH", f"{other / 'bin'}:/usr/bin:/bin")
    nvcc = find_nvcc("12.8")
    assert nvcc is not None and (nvcc.path, nvcc.found) == (other / "bin" / "nvcc",
                                                             "found on PATH")
    monkeypatch.setenv("PATH", f"{installed / 'cuda-12.6' / 'bin'}:/usr/bin:/bin")
    nvcc = find_nvcc("12.8")
    assert nvcc is not None and nvcc.path == installed / "cuda-12.8" / "bin" / "nvcc"


def test_on_a_tie_the_toolkit_found_first_is_kept(installed: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """No toolkit of torch's 12.9: a 12.8 one on PATH and /usr/local/cuda-12.8 fit as well,
    and the one on PATH, which the plain lookup finds first, is taken."""
    other = fake_toolkit(installed.parent / "opt" / "cuda-12.8", "12.8")
    monkeypatch.setenv("PATH", f"{other / 'bin'}:/usr/bin:/bin")
    nvcc = find_nvcc("12.9")
    assert nvcc is not None and (nvcc.path, nvcc.found) == (other / "bin" / "nvcc",
                                                             "found on PATH")


def test_each_nvcc_is_asked_once_and_only_until_one_fits(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every build asks for the toolkit again (an up-to-date one too), so the search
    stays short: the toolkit found the plain way is kept when it fits, without asking
    any other; the search stops at the first toolkit of torch's version; a toolkit
    reached twice (/usr/local/cuda and the folder it links to) is asked once; and in one
    process an nvcc is not asked again."""
    local, asked = tmp_path / "local", tmp_path / "asked"
    install_standard_folders(local, monkeypatch, asked)
    for cuda, chosen, asked_now in [("13.0", "cuda-13.0", ["13.0"]),
                                    ("12.8", "cuda-12.8", ["12.8"]),
                                    ("12.9", "cuda-12.8", ["12.6"]),
                                    ("12.9", "cuda-12.8", [])]:
        nvcc = find_nvcc(cuda)
        assert nvcc is not None and nvcc.path == local / chosen / "bin" / "nvcc"
        said = asked.read_text().split() if asked.exists() else []
        assert said == asked_now, (cuda, said)
        asked.unlink(missing_ok=True)
    find_nvcc.cache_clear()


def test_a_cuda_folder_named_for_its_major_version_is_a_toolkit_too(
        installed: Path) -> None:
    """A toolkit installed as /usr/local/cuda-12 (a runfile's --toolkitpath, or the link
    NVIDIA's packages make to the release they chose) is looked at as the others are."""
    fake_toolkit(installed / "cuda-12", "12.4")
    nvcc = find_nvcc("12.4")
    assert nvcc is not None and nvcc.path == installed / "cuda-12" / "bin" / "nvcc"
    assert nvcc.found == f"found in {installed / 'cuda-12'}"


def test_a_lone_wrapper_on_path_gives_way_to_a_toolkit_of_torchs_version(
        installed: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A wrapper script on PATH that runs cuda-12.8's nvcc, and no /usr/local/cuda: the
    plain lookup takes the wrapper for want of a toolkit, whose folder holds none of the
    headers and libraries a build takes from there. For a cu128 torch the build takes
    the toolkit itself, as it does for a cu130 torch; with no toolkit of torch's major
    version, the wrapper is still what it finds."""
    (installed / "cuda").unlink()
    wrappers = installed.parent / "wrappers"
    wrappers.mkdir()
    (wrappers / "nvcc").write_text(
        f'#!/bin/sh\nexec {installed / "cuda-12.8" / "bin" / "nvcc"} "$@"\n')
    (wrappers / "nvcc").chmod(0o755)
    monkeypatch.setenv("PATH", f"{wrappers}:/usr/bin:/bin")
    assert find_nvcc().path == wrappers / "nvcc"  # no torch version: as before
    for cuda in ("12.8", "12.9", "13.0"):
        nvcc = find_nvcc(cuda)
        want = "cuda-13.0" if cuda == "13.0" else "cuda-12.8"
        assert nvcc is not None and nvcc.path == installed / want / "bin" / "nvcc", cuda
    assert find_nvcc("11.8").path == wrappers / "nvcc"


def test_a_toolkit_cuda_home_names_wins_whatever_its_version(installed: Path,
                                                            monkeypatch) -> None:
    monkeypatch.setenv("CUDA_HOME", str(installed / "cuda-13.0"))
    nvcc = find_nvcc("12.8")
    assert nvcc is not None and nvcc.version[:2] == (13, 0)
    assert nvcc.found == "named by CUDA_HOME"
    # one that names no toolkit is passed over, with the note, and the search goes on
    monkeypatch.setenv("CUDA_HOME", str(installed / "missing"))
    nvcc = find_nvcc("12.8")
    assert nvcc is not None and nvcc.path == installed / "cuda-12.8" / "bin" / "nvcc"
    assert f"CUDA_HOME={installed / 'missing'} has no bin/nvcc" in nvcc.note


def test_a_folder_that_holds_no_usable_toolkit_is_passed_over(installed: Path) -> None:
    """A leftover folder without the toolkit's headers, or whose nvcc gives no version,
    is no candidate, and no error either: the toolkits around it still serve."""
    leftover = installed / "cuda-12.9"
    (leftover / "bin").mkdir(parents=True)
    (leftover / "bin" / "nvcc").write_text("#!/bin/sh\necho 'Cuda compilation tools'\n")
    (leftover / "bin" / "nvcc").chmod(0o755)
    nvcc = find_nvcc("12.9")
    assert nvcc is not None and nvcc.path == installed / "cuda-12.8" / "bin" / "nvcc"
    # an nvcc that answers 12.9, but no toolkit around it (no headers to compile with)
    (leftover / "bin" / "nvcc").write_text(
        "#!/bin/sh\necho 'Cuda compilation tools, release 12.9, V12.9.41'\n")
    nvcc = find_nvcc("12.9")
    assert nvcc is not None and nvcc.path == installed / "cuda-12.8" / "bin" / "nvcc"
    (leftover / "bin" / "nvcc").write_text("#!/bin/sh\necho 'Cuda compilation tools'\n")
    (leftover / "include").mkdir()
    (leftover / "include" / "cuda_runtime.h").write_text("")
    nvcc = find_nvcc("12.9")
    assert nvcc is not None and nvcc.path == installed / "cuda-12.8" / "bin" / "nvcc"


def test_a_toolkit_folder_whose_nvcc_hangs_is_named_in_the_error(
        installed: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A hung nvcc stops the lookup as it stops the plain one, named with the folder it
    was found in, and the variable that gets past it."""
    monkeypatch.setattr(toolchain, "VERSION_TIMEOUT_S", 0.5)
    hung = installed / "cuda-12.8" / "bin" / "nvcc"
    hung.write_text("#!/bin/sh\nsleep 30\n")
    with pytest.raises(ToolchainError) as info:
        find_nvcc("12.8")
    assert str(info.value).startswith(
        f"nvcc {hung} (found in {installed / 'cuda-12.8'}) hung: ")
    assert "or point CUDA_HOME at another CUDA toolkit" in str(info.value)


def test_a_toolkit_installed_meanwhile_is_found_by_the_next_lookup(installed: Path) -> None:
    assert find_nvcc("12.9").path == installed / "cuda-12.8" / "bin" / "nvcc"
    fake_toolkit(installed / "cuda-12.9", "12.9")
    assert find_nvcc("12.9").path == installed / "cuda-12.9" / "bin" / "nvcc"


NVCC_13 = Tool("nvcc", Path("/usr/local/cuda-13.0/bin/nvcc"), (13, 0, 88), "V13.0.88",
               chooser="PATH")
TARGET = "torch 2.9.1+cu128 of /envs/t29/bin/python"


def test_a_major_mismatch_names_both_versions_the_environment_and_the_fix() -> None:
    refused, message = cuda_mismatch(NVCC_13, "12.8", TARGET)
    assert refused
    assert message == (
        "torch 2.9.1+cu128 of /envs/t29/bin/python was built with CUDA 12.8, but nvcc "
        "13.0.88 (/usr/local/cuda-13.0/bin/nvcc, found on PATH) is CUDA 13.0: code "
        "compiled by another CUDA major version than torch's does not work with it, so the "
        "build stopped before compiling; fix: install the CUDA 12.8 toolkit in "
        "/usr/local/cuda-12.8, where the build looks for it, or point CUDA_HOME at a CUDA "
        "12.x toolkit (12.8 matches torch exactly)")
    named = Tool("nvcc", NVCC_13.path, (13, 0), "V13.0", chooser="CUDA_PATH")
    refused, message = cuda_mismatch(named, "12.8", TARGET)
    assert refused and message.endswith(
        "named by CUDA_PATH) is CUDA 13.0: code compiled by another CUDA major version than "
        "torch's does not work with it, so the build stopped before compiling; fix: point "
        "CUDA_PATH at a CUDA 12.x toolkit (12.8 matches torch exactly)")


def test_the_fix_names_the_toolkit_release_for_a_three_part_cuda_version() -> None:
    """A torch whose ``torch.version.cuda`` is '12.8.1' needs the 12.8 release, which
    NVIDIA installs in /usr/local/cuda-12.8: the fix names that folder, not a
    cuda-12.8.1 no installer makes; the versions said stay as torch gives them."""
    refused, message = cuda_mismatch(NVCC_13, "12.8.1", TARGET)
    assert refused and "was built with CUDA 12.8.1, but nvcc 13.0.88" in message
    assert message.endswith(
        "fix: install the CUDA 12.8 toolkit in /usr/local/cuda-12.8, where the build looks "
        "for it, or point CUDA_HOME at a CUDA 12.x toolkit (12.8 matches torch exactly)")
    older = Tool("nvcc", Path("/usr/local/cuda-12.6/bin/nvcc"), (12, 6, 85), "V12.6.85",
                 chooser="PATH")
    refused, message = cuda_mismatch(older, "12.8.1", TARGET)
    assert not refused and message.endswith(
        "for a matching toolkit, install the CUDA 12.8 toolkit in /usr/local/cuda-12.8, "
        "where the build looks for it, or point CUDA_HOME at one")
    named = Tool("nvcc", older.path, older.version, older.description, chooser="CUDA_HOME")
    assert cuda_mismatch(named, "12.8.1", TARGET)[1].endswith(
        "point CUDA_HOME at a CUDA 12.8 toolkit")
    matching = Tool("nvcc", Path("/usr/local/cuda-12.8/bin/nvcc"), (12, 8, 93), "V12.8.93")
    assert cuda_mismatch(matching, "12.8.1", TARGET) is None


def test_a_minor_mismatch_is_a_note_and_a_match_is_nothing() -> None:
    nvcc = Tool("nvcc", Path("/opt/cuda/bin/nvcc"), (12, 6, 85), "V12.6.85", chooser="CUDA_HOME")
    refused, message = cuda_mismatch(nvcc, "12.8", TARGET)
    assert not refused
    assert "CUDA 12.8, but nvcc 12.6.85 (/opt/cuda/bin/nvcc, named by CUDA_HOME) is CUDA " \
           "12.6, a minor version apart" in message
    assert message.endswith("point CUDA_HOME at a CUDA 12.8 toolkit")
    assert cuda_mismatch(nvcc, "12.6", TARGET) is None


def _fake_system(monkeypatch: pytest.MonkeyPatch) -> None:
    """Builds for fake environments get their system facts from their torch's version
    file."""
    from kernelforge.build.interpreter import PythonEnv
    from kernelforge.variants import SystemFacts

    def system(self: PythonEnv) -> SystemFacts:
        install = self.torch_install()
        assert install is not None and install.cuda is not None
        return SystemFacts(install.torch_version, True, "cuda", install.backend_version,
                           "x86_64", "linux")

    monkeypatch.setattr(PythonEnv, "system", system)


def _cuda_builds(monkeypatch: pytest.MonkeyPatch) -> list:
    """Builds for fake environments (:func:`_fake_system`) compile nothing: each plan is
    kept, its extension a few bytes."""
    from kernelforge import build

    _fake_system(monkeypatch)
    compiled: list = []

    def compile_plan(plan, *, work_dir: Path, **kwargs: object) -> Path:
        compiled.append(plan)
        work_dir.mkdir(parents=True, exist_ok=True)
        (work_dir / f"{plan.namespace}.abi3.so").write_bytes(b"\x7fELF")
        return work_dir / f"{plan.namespace}.abi3.so"

    monkeypatch.setattr(build, "compile_plan", compile_plan)
    return compiled


def test_one_build_compiles_each_environment_with_its_torchs_toolkit(
        installed: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """`kernelforge build --python A --python B` for a cu128 and a cu130 torch: each
    variant is named for its torch's CUDA, compiled with the toolkit of that version,
    and its metadata records that nvcc; the output says which nvcc each one used."""
    from kernelforge.cli import main

    compiled = _cuda_builds(monkeypatch)
    project = copy_example(tmp_path / "relu")
    envs = {cuda: fake_environment(tmp_path / f"env{cuda}", f"2.9.1+cu{cuda.replace('.', '')}",
                                   cuda) for cuda in ("12.8", "13.0")}
    assert main(["build", str(project), "--backend", "cuda",
                 "--python", str(envs["12.8"]), "--python", str(envs["13.0"])]) == 0
    out = capsys.readouterr().out
    for cuda, tag in (("12.8", "cu128"), ("13.0", "cu130")):
        home = installed / f"cuda-{cuda}"
        assert (f"cuda: nvcc {cuda}.88 ({home / 'bin' / 'nvcc'}, found in "
                f"{installed / 'cuda' if cuda == '13.0' else home}) for torch 2.9.1+{tag} "
                f"(CUDA {cuda})") in out, out
        meta = json.loads((project / "build" / f"torch29-cxx11-{tag}-x86_64-linux" /
                           "metadata.json").read_text())
        assert meta["provenance"]["toolchain"]["nvcc"] == f"{cuda}.88"
        assert meta["provenance"]["torch"] == f"2.9.1+{tag}"
    assert [Path(p.env["CUDA_HOME"]) for p in compiled] == [installed / "cuda-12.8",
                                                            installed / "cuda-13.0"]
    # the same choice again: both variants are up to date
    assert main(["build", str(project), "--backend", "cuda",
                 "--python", str(envs["12.8"]), "--python", str(envs["13.0"])]) == 0
    assert capsys.readouterr().out.count(": up to date -> ") == 2
    assert len(compiled) == 2


def test_a_toolkit_of_torchs_version_installed_since_builds_the_variant_again(
        installed: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A cu129 torch is built with 12.8, the closest toolkit there is. Naming that same
    toolkit with CUDA_HOME changes nothing: the variant is up to date. Once 12.9 is
    installed, a build from scratch would take it, so the variant is no longer up to
    date and is compiled again with 12.9, which its metadata names."""
    from kernelforge.build import build_project

    compiled = _cuda_builds(monkeypatch)
    project = copy_example(tmp_path / "relu")
    python = fake_environment(tmp_path / "env", "2.9.1+cu129", "12.9")

    def build() -> tuple[bool, str]:
        (result,) = build_project(project, backends=["cuda"], python=str(python),
                                  progress=lambda _: None)
        meta = json.loads((result.path / "metadata.json").read_text())
        return result.up_to_date, meta["provenance"]["toolchain"]["nvcc"]

    assert build() == (False, "12.8.88")
    assert build() == (True, "12.8.88")
    monkeypatch.setenv("CUDA_HOME", str(installed / "cuda-12.8"))
    assert build() == (True, "12.8.88")
    monkeypatch.delenv("CUDA_HOME")
    fake_toolkit(installed / "cuda-12.9", "12.9")
    assert build() == (False, "12.9.88")
    assert [Path(plan.env["CUDA_HOME"]).name for plan in compiled] == ["cuda-12.8",
                                                                      "cuda-12.9"]


def test_a_toolkit_of_another_major_version_stops_the_build_before_compiling(
        installed: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """CUDA_HOME names a 13.0 toolkit for a cu128 torch: no variant, even without
    --backend (the cpu one would hide that the CUDA one was not built)."""
    from kernelforge.build import build_project

    compiled = _cuda_builds(monkeypatch)
    project = copy_example(tmp_path / "relu")
    python = fake_environment(tmp_path / "env", "2.9.1+cu128", "12.8")
    monkeypatch.setenv("CUDA_HOME", str(installed / "cuda-13.0"))
    for backends in (["cuda"], None):
        with pytest.raises(ToolchainError) as info:
            build_project(project, backends=backends, python=str(python),
                          progress=lambda _: None)
        assert str(info.value).startswith(
            f"cannot build backend 'cuda': torch 2.9.1+cu128 of {python} was built with CUDA "
            f"12.8, but nvcc 13.0.88 ({installed / 'cuda-13.0' / 'bin' / 'nvcc'}, named by "
            "CUDA_HOME) is CUDA 13.0")
        assert str(info.value).endswith(
            "fix: point CUDA_HOME at a CUDA 12.x toolkit (12.8 matches torch exactly)"
            + ("" if backends else ", or build the other backends meanwhile with "
               "--backend cpu"))
    assert compiled == [] and not (project / "build").exists()
    # asked for the cpu backend only, the environment builds it: no CUDA build was meant
    (result,) = build_project(project, backends=["cpu"], python=str(python),
                              progress=lambda _: None)
    assert result.backend == "cpu" and result.variant.endswith("-cpu-x86_64-linux")
    assert [plan.backend for plan in compiled] == ["cpu"]


def test_a_minor_mismatch_builds_the_torchs_variant_with_a_note(
        installed: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """CUDA_HOME names 12.6 for a cu128 torch: torch's tooling allows it, so the variant
    is built, named for torch's CUDA 12.8, its metadata naming nvcc 12.6."""
    from kernelforge.build import build_project

    _cuda_builds(monkeypatch)
    project = copy_example(tmp_path / "relu")
    python = fake_environment(tmp_path / "env", "2.9.1+cu128", "12.8")
    monkeypatch.setenv("CUDA_HOME", str(installed / "cuda-12.6"))
    lines: list[str] = []
    (result,) = build_project(project, backends=["cuda"], python=str(python),
                              progress=lines.append)
    assert result.variant == "torch29-cxx11-cu128-x86_64-linux"
    meta = json.loads((result.path / "metadata.json").read_text())
    assert meta["provenance"]["toolchain"]["nvcc"] == "12.6.88"
    assert any(line.startswith("note: torch 2.9.1+cu128 of ") and
               "is CUDA 12.6, a minor version apart" in line for line in lines), lines


@pytest.mark.parametrize("command", [None, "ccache nvcc"])
def test_a_pytorch_nvcc_command_runs_the_nvcc_the_build_chose(
        installed: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        command: str | None) -> None:
    """PATH's nvcc is 13.0 and the build chooses 12.8 for a cu128 torch. torch's tooling
    runs ``$PYTORCH_NVCC`` in place of that nvcc, and a shell finds the ``nvcc`` of
    ``ccache nvcc`` on the compile's PATH: there it is the chosen one, which metadata.json
    names, not PATH's of another major version, and nothing else comes before the
    caller's PATH. Without PYTORCH_NVCC, PATH is the caller's (torch runs
    ``$CUDA_HOME/bin/nvcc``)."""
    from kernelforge.build import build_project
    from kernelforge.build import compile as compile_module

    _fake_system(monkeypatch)
    given: dict[str, str] = {}

    class Started(Exception):
        """Where the driver would start, with what it was given kept."""

    def driver(cmd: list[str], *, cwd: Path, env: dict[str, str]) -> None:
        given.update(env)
        raise Started

    monkeypatch.setattr(compile_module, "_Child", driver)
    callers = f"{installed / 'cuda-13.0' / 'bin'}:/usr/bin:/bin"
    monkeypatch.setenv("PATH", callers)
    if command is None:
        monkeypatch.delenv("PYTORCH_NVCC", raising=False)
    else:
        monkeypatch.setenv("PYTORCH_NVCC", command)
    project = copy_example(tmp_path / "relu")
    python = fake_environment(tmp_path / "env", "2.9.1+cu128", "12.8")
    with pytest.raises(Started):
        build_project(project, backends=["cuda"], python=str(python), progress=lambda _: None)
    chosen = installed / "cuda-12.8" / "bin" / "nvcc"
    assert given["CUDA_HOME"] == str(chosen.parent.parent)
    found = Path(shutil.which("nvcc", path=given["PATH"]) or "")
    first, _, rest = given["PATH"].partition(os.pathsep)
    if command is None:
        assert given["PATH"].startswith(callers)
        assert found == installed / "cuda-13.0" / "bin" / "nvcc"
    else:
        assert found.resolve() == chosen
        assert rest.startswith(callers) and os.listdir(first) == ["nvcc"]


def test_the_rocm_compiler_is_named_without_a_version_match(tmp_path: Path) -> None:
    """hipcc is not matched to torch's HIP version, but the build still says which one
    an environment uses, with no note about versions."""
    from kernelforge.build import _device_notes
    from kernelforge.build.interpreter import PythonEnv
    from kernelforge.variants import TorchInstall

    hipcc = Tool("hipcc", Path("/opt/rocm-6.2.4/bin/hipcc"), (6, 2, 41134), "HIP 6.2",
                 chooser="/opt/rocm")
    torch = TorchInstall("2.9.1+rocm6.3", (2, 9, 1), None, "6.3.42131-fa1d09cbd", None,
                         None, tmp_path / "version.py", 0)
    assert _device_notes("rocm", hipcc, torch, PythonEnv("/envs/r/bin/python")) == [
        "rocm: hipcc 6.2.41134 (/opt/rocm-6.2.4/bin/hipcc, found in /opt/rocm) for torch "
        "2.9.1+rocm6.3 (HIP 6.3.42131-fa1d09cbd)"]
