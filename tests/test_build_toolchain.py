"""The host C++ compiler as builds see it (:func:`kernelforge.build.toolchain.find_cxx`):
its version, and an identity that changes with the compiler that really runs."""

from __future__ import annotations

import re
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kf_testutil import fake_environment

from kernelforge.build.toolchain import find_cxx


@pytest.fixture(autouse=True)
def _fresh() -> Iterator[None]:
    find_cxx.cache_clear()
    yield
    find_cxx.cache_clear()


def fake_cxx(path: Path, version_text: bytes, full_version: str | None) -> Path:
    """A compiler answering ``--version`` with ``version_text`` and ``-dumpfullversion``
    with ``full_version`` (``None``: it does not know the option)."""
    dump = (f'  -dumpfullversion) echo {full_version};;\n' if full_version
            else '  -dumpfullversion) echo "unrecognized option" >&2; exit 1;;\n')
    path.write_bytes(b'#!/bin/sh\ncase "$1" in\n' + dump.encode()
                     + b"  --version) printf '%s' '" + version_text + b"';;\nesac\n")
    path.chmod(0o755)
    return path


GCC_COPYRIGHT = b"Copyright (C) 2022 Free Software Foundation, Inc.\n"


@pytest.mark.parametrize(("first_line", "full", "expected"), [
    (b"g++ (Debian 12.2.0-14+deb12u1) 12.2.0\n", "12.2.0", (12, 2, 0)),
    # a package version with dotted numbers of its own before the compiler's
    (b"x86_64-conda_cos6-linux-gnu-c++ (crosstool-NG 1.24.0.133_b0863d8_dirty) 7.5.0\n",
     "7.5.0", (7, 5, 0)),
    # a gcc too old for -dumpfullversion: the first line's number
    (b"g++ (GCC) 6.3.1\n", None, (6, 3, 1)),
])
def test_the_gcc_version_is_the_compilers_own(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                              first_line: bytes, full: str | None,
                                              expected: tuple[int, ...]) -> None:
    monkeypatch.setenv("CXX", str(fake_cxx(tmp_path / "g++", first_line + GCC_COPYRIGHT, full)))
    tool = find_cxx()
    assert (tool.name, tool.version) == ("gcc", expected)


def test_a_version_answer_in_another_encoding_is_read(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    text = b"g++ (GCC) 12.2.0\nCopyright \xa9 2022 Free Software Foundation, Inc.\n"
    monkeypatch.setenv("CXX", str(fake_cxx(tmp_path / "g++", text, "12.2.0")))
    assert find_cxx().version == (12, 2, 0)


def test_a_wrappers_identity_follows_the_compiler_it_runs(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """A wrapper (ccache's links, a site script) stays the same file when the compiler
    behind it changes; the build's fingerprint must not say "up to date" then."""
    new = fake_cxx(tmp_path / "g++-13", b"g++ (GCC) 13.1.0\n" + GCC_COPYRIGHT, "13.1.0")
    old = fake_cxx(tmp_path / "g++-12", b"g++ (GCC) 12.2.0\n" + GCC_COPYRIGHT, "12.2.0")
    wrapper = tmp_path / "c++"
    wrapper.write_text('#!/bin/sh\nexec "$REAL_CXX" "$@"\n')
    wrapper.chmod(0o755)
    monkeypatch.setenv("CXX", str(wrapper))
    monkeypatch.setenv("REAL_CXX", str(old))
    before = find_cxx().identity()
    find_cxx.cache_clear()
    monkeypatch.setenv("REAL_CXX", str(new))
    after = find_cxx()
    assert after.version == (13, 1, 0)
    assert after.identity() != before


@pytest.mark.parametrize(("name", "said", "version"), [
    ("nvcc", "nvcc: NVIDIA (R) Cuda compiler driver\nCuda compilation tools, release 13.0, "
             "V13.0.88\nBuild cuda_13.0.r13.0/compiler.36424714_0", "13.0.88"),
    ("nvcc", "Cuda compilation tools, release 12.8", "12.8"),
    ("hipcc", "HIP version: 6.2.41133-dd7f95766\nAMD clang version 18.0.0git", "6.2.41133"),
])
def test_a_gpu_compiler_s_version_is_its_full_version(tmp_path: Path, monkeypatch, name: str,
                                                     said: str, version: str) -> None:
    """metadata.json records the GPU compiler's version as the tool gives it in full:
    two updates of one CUDA release (13.0.48, 13.0.88) may compile to other bytes, so
    'nvcc 13.0' alone does not say which toolkit to rebuild with."""
    from kernelforge.build import toolchain

    home = tmp_path / "toolkit"
    marker = "include/cuda_runtime.h" if name == "nvcc" else "include/hip/hip_runtime.h"
    (home / marker).parent.mkdir(parents=True)
    (home / marker).write_text("")
    (home / "bin").mkdir()
    (home / "bin" / name).write_text(f"#!/bin/sh\nprintf '%s\\n' '{said}'\n")
    (home / "bin" / name).chmod(0o755)
    for var in ("CUDA_HOME", "CUDA_PATH", "ROCM_HOME", "ROCM_PATH"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("CUDA_HOME" if name == "nvcc" else "ROCM_HOME", str(home))
    find = toolchain.find_nvcc if name == "nvcc" else toolchain.find_hipcc
    find.cache_clear()
    try:
        tool = find()
    finally:
        find.cache_clear()
    assert tool is not None and tool.version_str == version


@pytest.mark.parametrize("cxx", ["ccache g++", "g++ -m64"])
def test_a_cxx_with_arguments_is_refused_with_what_to_set(tmp_path: Path, monkeypatch,
                                                         cxx: str) -> None:
    """CXX='ccache g++' (a launcher) or 'g++ -m64' (flags) is not one program: the error
    says so and how to get the same, rather than 'no C++ compiler found; install g++'
    while g++ is installed."""
    from kernelforge.errors import ToolchainError

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("ccache", "g++"):
        fake_cxx(bin_dir / tool, b"g++ (GCC) 12.2.0\n", "12.2.0")
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    monkeypatch.setenv("CXX", cxx)
    with pytest.raises(ToolchainError) as err:
        find_cxx()
    text = str(err.value)
    assert f"CXX='{cxx}' is a command with arguments" in text
    assert "point CXX at the compiler itself" in text and "install g++" not in text


@pytest.mark.parametrize("cxx", ["{tmp}/missing/g++", "clang++-99", "{tmp}/notes.txt"])
def test_a_cxx_naming_no_program_says_so(tmp_path: Path, monkeypatch, cxx: str) -> None:
    """CXX naming a file that is not there, a command not on PATH or a file that cannot
    run: the error blames CXX, not the machine ("no C++ compiler found; install g++")."""
    from kernelforge.errors import ToolchainError

    (tmp_path / "notes.txt").write_text("not a compiler\n")
    cxx = cxx.format(tmp=tmp_path)
    monkeypatch.setenv("CXX", cxx)
    with pytest.raises(ToolchainError) as err:
        find_cxx()
    assert str(err.value) == (
        f"CXX='{cxx}' names no program (no such executable file, nor a command on PATH); "
        "fix: point CXX at an installed C++ compiler (CXX=g++ or CXX=clang++, or its full "
        "path), or unset it to use c++ from PATH")


def test_no_cxx_on_path_says_to_install_one(tmp_path: Path, monkeypatch) -> None:
    from kernelforge.errors import ToolchainError

    monkeypatch.delenv("CXX", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ToolchainError) as err:
        find_cxx()
    assert str(err.value) == ("no C++ compiler found (looked for 'c++' on PATH); install "
                              "g++ or clang++, or point the CXX environment variable at one")


@pytest.mark.parametrize("chosen", ["gcc on PATH", "CC", "NVCC_CCBIN folder"])
def test_nvcc_s_host_compiler_is_the_one_nvcc_runs(tmp_path: Path, monkeypatch,
                                                   chosen: str) -> None:
    """nvcc compiles the host side of a .cu source with $CC (torch passes it as -ccbin),
    else $NVCC_CCBIN, else the gcc on PATH, not with $CXX: that compiler, not c++, is
    the one a CUDA variant's metadata must name beside nvcc."""
    from kernelforge.build import toolchain

    bin_dir, other = tmp_path / "bin", tmp_path / "gcc-11" / "bin"
    bin_dir.mkdir()
    other.mkdir(parents=True)
    fake_cxx(bin_dir / "c++", b"c++ (GCC) 12.2.0\n", "12.2.0")
    fake_cxx(bin_dir / "gcc", b"gcc (GCC) 13.3.0\n", "13.3.0")
    fake_cxx(other / "gcc", b"gcc (GCC) 11.4.0\n", "11.4.0")
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    for var in ("CXX", "CC", "NVCC_CCBIN"):
        monkeypatch.delenv(var, raising=False)
    if chosen == "CC":
        monkeypatch.setenv("CC", str(other / "gcc"))
    elif chosen == "NVCC_CCBIN folder":
        monkeypatch.setenv("NVCC_CCBIN", str(other))
    toolchain.find_nvcc_host.cache_clear()
    try:
        host = toolchain.find_nvcc_host()
    finally:
        toolchain.find_nvcc_host.cache_clear()
    assert find_cxx().version_str == "12.2.0"
    assert host is not None and host.name == "gcc"
    assert host.version_str == ("13.3.0" if chosen == "gcc on PATH" else "11.4.0")


@pytest.mark.parametrize(("script", "answer"), [
    ("echo 'false (GNU coreutils) 9.1'; exit 1",
     "exits with status 1: false (GNU coreutils) 9.1"),
    ("exit 0", "prints nothing"),
])
@pytest.mark.parametrize("chosen", ["CXX", "c++ on PATH"])
def test_a_cxx_that_is_no_compiler_is_refused_before_the_build(
        tmp_path: Path, monkeypatch, script: str, answer: str, chosen: str) -> None:
    """A program that fails ``--version`` or says nothing (``CXX=/bin/false``) is no
    compiler: the error names it and the fix, instead of torch's extension tooling
    failing on it with a traceback, or a build whose compiler did nothing."""
    from kernelforge.errors import ToolchainError

    program = tmp_path / "c++"
    program.write_text(f"#!/bin/sh\n{script}\n")
    program.chmod(0o755)
    if chosen == "CXX":
        monkeypatch.setenv("CXX", str(program))
        named = f"CXX='{program}'"
        fix = "fix: point CXX at an installed C++ compiler"
    else:
        monkeypatch.delenv("CXX", raising=False)
        monkeypatch.setenv("PATH", str(tmp_path))
        named = f"the C++ compiler 'c++' on PATH ({program})"
        fix = "fix: install g++ or clang++, or point the CXX environment variable at one"
    with pytest.raises(ToolchainError) as err:
        find_cxx()
    assert str(err.value).startswith(
        f"{named} is not a C++ compiler: '{program} --version' {answer}; {fix}")


def _alive(pid: int) -> bool:
    """Whether process ``pid`` still runs (a zombie no parent reaped does not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def _ends(pid: int, within: float = 5) -> bool:
    """Whether process ``pid`` has ended, or does within ``within`` seconds: a process
    sent SIGKILL may still be running for a moment before it ends."""
    deadline = time.monotonic() + within
    while _alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


@pytest.mark.parametrize("chosen", ["CXX", "c++ on PATH"])
def test_a_cxx_that_hangs_is_named_with_how_long_and_the_fix(
        tmp_path: Path, monkeypatch, chosen: str) -> None:
    """A compiler that never answers ``--version`` (a wrapper that waits, a compiler
    waiting for its license server): the error says what hung, for how long, and where
    to look, and the wrapper's child is not left running."""
    import shutil

    from kernelforge.build import toolchain
    from kernelforge.errors import ToolchainError

    pid_file = tmp_path / "child.pid"
    program = tmp_path / "c++"
    sleep = shutil.which("sleep")  # before PATH holds only the program
    program.write_text(f"#!/bin/sh\n{sleep} 30 &\necho $! > '{pid_file}'\nwait\n")
    program.chmod(0o755)
    monkeypatch.setattr(toolchain, "VERSION_TIMEOUT_S", 0.5)
    if chosen == "CXX":
        monkeypatch.setenv("CXX", str(program))
        named = f"CXX='{program}'"
        fix = "point CXX at another C++ compiler (CXX=g++ or CXX=clang++)"
    else:
        monkeypatch.delenv("CXX", raising=False)
        monkeypatch.setenv("PATH", str(tmp_path))
        named = f"the C++ compiler 'c++' on PATH ({program})"
        fix = "point the CXX environment variable at another C++ compiler"
    started = time.monotonic()
    with pytest.raises(ToolchainError) as err:
        find_cxx()
    assert time.monotonic() - started < 15  # not the 30 s of the wrapper's child
    assert str(err.value) == (
        f"{named} hung: '{program} --version' did not end within 0.5 s, so the build "
        f"stopped before compiling; fix: run '{program} --version' to see it wait (a "
        "wrapper script that waits, or a compiler waiting for its license server) and fix "
        f"that, or {fix}")
    if sys.platform.startswith("linux"):
        assert _ends(int(pid_file.read_text()))


def _toolkit(home: Path, name: str, body: str) -> Path:
    """A toolkit folder for ``name`` (nvcc or hipcc) whose compiler runs ``body``."""
    marker = "include/cuda_runtime.h" if name == "nvcc" else "include/hip/hip_runtime.h"
    (home / marker).parent.mkdir(parents=True)
    (home / marker).write_text("")
    (home / "bin").mkdir()
    (home / "bin" / name).write_text(f"#!/bin/sh\n{body}\n")
    (home / "bin" / name).chmod(0o755)
    return home


@pytest.mark.parametrize(("name", "chooser"), [
    ("nvcc", "CUDA_HOME"), ("nvcc", "CUDA_PATH"), ("nvcc", "PATH"), ("nvcc", "default"),
    ("hipcc", "ROCM_HOME"), ("hipcc", "default"),
])
def test_a_gpu_compiler_that_hangs_is_named_with_what_chose_it_and_the_fix(
        tmp_path: Path, monkeypatch, name: str, chooser: str) -> None:
    """An nvcc or hipcc that never answers ``--version`` (a wrapper waiting for input, a
    broken toolkit): the error names it and the variable that chose it, says how long it
    waited, and gives a fix that works; the wrapper's child is not left running."""
    import shutil

    from kernelforge.build import toolchain
    from kernelforge.errors import ToolchainError

    pid_file = tmp_path / "child.pid"
    sleep = shutil.which("sleep")  # before PATH holds only the toolkit
    hung = _toolkit(tmp_path / "hung", name,
                    f"{sleep} 30 &\necho $! > '{pid_file}'\nwait")
    for var in ("CUDA_HOME", "CUDA_PATH", "ROCM_HOME", "ROCM_PATH"):
        monkeypatch.delenv(var, raising=False)
    if chooser == "PATH":
        monkeypatch.setenv("PATH", str(hung / "bin"))
        where = "found on PATH"
    elif chooser == "default":  # no variable, nothing on PATH: the default folder
        entry = toolchain._DEVICE_COMPILERS[name]
        monkeypatch.setitem(toolchain._DEVICE_COMPILERS, name,
                            (entry[0], str(hung), *entry[2:]))
        monkeypatch.setenv("PATH", str(tmp_path / "nothing"))
        where = f"found in {hung}"
    else:
        monkeypatch.setenv(chooser, str(hung))
        where = f"named by {chooser}={hung}"
    # the fix names the variable that chose it; CUDA_HOME (ROCM_HOME) where none did
    var = (chooser if chooser not in ("PATH", "default")
           else "CUDA_HOME" if name == "nvcc" else "ROCM_HOME")
    toolkit, marker = (("CUDA toolkit", "include/cuda_runtime.h") if name == "nvcc"
                       else ("ROCm installation", "include/hip/hip_runtime.h"))
    monkeypatch.setattr(toolchain, "VERSION_TIMEOUT_S", 0.5)
    find = toolchain.find_nvcc if name == "nvcc" else toolchain.find_hipcc
    find.cache_clear()
    try:
        started = time.monotonic()
        with pytest.raises(ToolchainError) as err:
            find()
        assert time.monotonic() - started < 15  # not the 30 s of the wrapper's child
        program = hung / "bin" / name
        assert str(err.value) == (
            f"{name} {program} ({where}) hung: '{program} --version' did not end within "
            f"0.5 s, so the build stopped before compiling; fix: run '{program} --version' "
            f"to see it wait (a wrapper script waiting for input, or a broken {toolkit}: "
            f"reinstall it) and fix that, or point {var} at another {toolkit} (the folder "
            f"holding bin/{name} and {marker})")
        if sys.platform.startswith("linux"):
            assert _ends(int(pid_file.read_text()))
        # the fix it gives gets past the hung compiler
        said = ("Cuda compilation tools, release 12.8, V12.8.93" if name == "nvcc"
                else "HIP version: 6.2.41133-dd7f95766")
        good = _toolkit(tmp_path / "good", name, f"echo '{said}'")
        monkeypatch.setenv(var, str(good))
        find.cache_clear()
        tool = find()
        assert tool is not None and tool.path == (good / "bin" / name).resolve()
    finally:
        find.cache_clear()


def _counting(path: Path, count: Path, then: str) -> Path:
    """A program that adds a line to ``count`` each time it starts, then runs ``then``."""
    path.write_text(f"#!/bin/sh\necho started >> '{count}'\n{then}\n")
    path.chmod(0o755)
    return path


def _starts(count: Path) -> int:
    return len(count.read_text().splitlines()) if count.exists() else 0


def test_several_environments_wait_once_for_a_cxx_that_hangs(
        tmp_path: Path, monkeypatch, capsys: pytest.CaptureFixture[str]) -> None:
    """``kernelforge build --python A --python B --python C`` with a ``$CXX`` that hangs:
    the first environment waits for it and fails; the others fail at once with the same
    error, saying it was not asked again. The next run asks it again."""
    import shutil

    from kf_testutil import copy_example

    from kernelforge.build import toolchain
    from kernelforge.cli import main

    count = tmp_path / "starts"
    cxx = _counting(tmp_path / "c++", count, f"exec {shutil.which('sleep')} 30")
    monkeypatch.setenv("CXX", str(cxx))
    monkeypatch.setattr(toolchain, "VERSION_TIMEOUT_S", 0.5)
    project = copy_example(tmp_path / "relu")
    pythons = []
    for env in ("a", "b", "c"):  # three paths to this environment
        python = tmp_path / env / "python"
        python.parent.mkdir()
        python.write_text(f'#!/bin/sh\nexec {sys.executable} "$@"\n')
        python.chmod(0o755)
        pythons += ["--python", str(python)]
    command = ["build", str(project), "--backend", "cpu", *pythons]

    assert main(command) == 1
    assert _starts(count) == 1
    errors = [line for line in capsys.readouterr().err.splitlines()
              if line.startswith("error: --python ")]
    hung = (f"CXX='{cxx}' hung: '{cxx} --version' {{}}, so the build stopped before "
            f"compiling; fix: run '{cxx} --version' to see it wait")
    assert len(errors) == 3
    assert errors[0].startswith(f"error: --python {tmp_path / 'a' / 'python'}: "
                                + hung.format("did not end within 0.5 s"))
    for env, line in zip("bc", errors[1:], strict=True):
        assert line.startswith(f"error: --python {tmp_path / env / 'python'}: " + hung.format(
            "was already found not to answer within 0.5 s earlier in this run (not asked "
            "again)")), line

    assert main(command) == 1  # a run of its own: the compiler may have been fixed since
    assert _starts(count) == 2


def test_a_gpu_compiler_that_hangs_is_asked_once_in_a_build_run(tmp_path: Path,
                                                                monkeypatch) -> None:
    """``build_run`` makes several ``build_project`` calls one run, as the command line
    does for its environments: an nvcc that hung for the first is not waited for again."""
    import shutil

    from kf_testutil import copy_example

    from kernelforge.build import build_project, build_run, toolchain
    from kernelforge.errors import ToolchainError

    count = tmp_path / "starts"
    home = _toolkit(tmp_path / "cuda", "nvcc", "true")
    _counting(home / "bin" / "nvcc", count, f"exec {shutil.which('sleep')} 30")
    for var in ("CUDA_HOME", "CUDA_PATH"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("CUDA_HOME", str(home))
    monkeypatch.setattr(toolchain, "VERSION_TIMEOUT_S", 0.5)
    project = copy_example(tmp_path / "relu")
    pythons = [fake_environment(tmp_path / env, "2.9.1+cu128", "12.8") for env in ("a", "b")]
    toolchain.find_nvcc.cache_clear()
    try:
        said = []
        with build_run():
            for python in pythons:
                with pytest.raises(ToolchainError) as err:
                    build_project(project, backends=["cuda"], python=python,
                                  progress=lambda line: None)
                said.append(str(err.value))
        assert _starts(count) == 1
        assert "--version' did not end within 0.5 s" in said[0]
        assert said[1] == said[0].replace(
            "did not end within 0.5 s", "was already found not to answer within 0.5 s "
            "earlier in this run (not asked again)")
    finally:
        toolchain.find_nvcc.cache_clear()


def test_threads_that_run_in_a_copy_of_the_run_s_context_share_its_memory(
        tmp_path: Path, monkeypatch) -> None:
    """Builds in worker threads join the run they were started in when each runs in a
    copy of its context, as ``build_run``'s docstring says to submit them: a compiler
    that hung for one worker is not waited for by the next. Every copy holds the one
    memory, which ends with the run for all of them."""
    import concurrent.futures
    import contextvars
    import shutil

    from kernelforge.build import toolchain

    monkeypatch.setattr(toolchain, "VERSION_TIMEOUT_S", 0.5)
    count = tmp_path / "starts"
    hung = _counting(tmp_path / "hung", count, f"exec {shutil.which('sleep')} 30")

    def ask() -> str:
        try:
            toolchain._ask([str(hung), "--version"])
        except toolchain._NoAnswer as err:
            return str(err)
        return "answered"

    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        with toolchain.build_run():
            said = [pool.submit(contextvars.copy_context().run, ask).result()
                    for _ in range(3)]
        assert said[0].endswith("did not end within 0.5 s"), said
        assert all(s.endswith("earlier in this run (not asked again)") for s in said[1:]), said
        assert _starts(count) == 1
        after = pool.submit(contextvars.copy_context().run, ask).result()  # a run of its own
    assert after.endswith("did not end within 0.5 s") and _starts(count) == 2


def test_nvcc_s_host_compiler_that_hung_is_not_remembered_beyond_the_run(
        tmp_path: Path, monkeypatch) -> None:
    """nvcc's host compiler ($CC here) that did not answer ``--version`` in time is
    passed over (nvcc reports the problem itself) and, as $CXX, nvcc and hipcc, not
    asked again within the run; but the answer is not kept beyond it. Before, it was
    cached for the process: once the compiler answered again (its license server back),
    every later build of the process still went without it, and its metadata named no
    host compiler."""
    import shutil

    from kernelforge.build import toolchain

    monkeypatch.setattr(toolchain, "VERSION_TIMEOUT_S", 0.5)
    count = tmp_path / "starts"
    gcc = _counting(tmp_path / "gcc", count, f"exec {shutil.which('sleep')} 30")
    monkeypatch.setenv("CC", str(gcc))
    toolchain.find_nvcc_host.cache_clear()
    try:
        with toolchain.build_run():
            assert toolchain.find_nvcc_host() is None
            assert toolchain.find_nvcc_host() is None
        assert _starts(count) == 1
        fake_cxx(gcc, b"gcc (GCC) 12.2.0\n" + GCC_COPYRIGHT, "12.2.0")  # it answers now
        host = toolchain.find_nvcc_host()
        assert host is not None and (host.path, host.version) == (gcc, (12, 2, 0))
    finally:
        toolchain.find_nvcc_host.cache_clear()


def test_a_run_remembers_only_the_questions_that_hung(tmp_path: Path, monkeypatch) -> None:
    """Within a run, a program that answered is asked again as usual, and one that hung
    is still asked by another name (ccache's links run other compilers by their names)
    or another question; a run inside a run keeps its memory; outside one, nothing is
    remembered."""
    import shutil

    from kernelforge.build import toolchain

    monkeypatch.setattr(toolchain, "VERSION_TIMEOUT_S", 0.5)
    answers, hangs = tmp_path / "answers", tmp_path / "hangs"
    good = _counting(tmp_path / "good", answers, "echo 'g++ 12.2.0'")
    hung = _counting(tmp_path / "hung", hangs, f"exec {shutil.which('sleep')} 30")
    alias = tmp_path / "alias"
    alias.symlink_to(hung)
    with toolchain.build_run():
        assert toolchain._ask([str(good), "--version"]) == (0, "g++ 12.2.0\n")
        assert toolchain._ask([str(good), "--version"]) == (0, "g++ 12.2.0\n")
        assert _starts(answers) == 2
        for cmd in ([str(hung), "--version"], [str(alias), "--version"],
                    [str(hung), "-dumpfullversion"]):
            with pytest.raises(toolchain._NoAnswer, match="did not end within 0.5 s"):
                toolchain._ask(cmd)
        assert _starts(hangs) == 3
        with toolchain.build_run():
            with pytest.raises(toolchain._NoAnswer, match="already found not to answer"):
                toolchain._ask([str(hung), "--version"])
        same = tmp_path / "links" / "hung"  # the same file by the same name
        same.parent.mkdir()
        same.symlink_to(hung)
        with pytest.raises(toolchain._NoAnswer, match="already found not to answer"):
            toolchain._ask([str(same), "--version"])
        assert _starts(hangs) == 3
    with pytest.raises(toolchain._NoAnswer, match="did not end within 0.5 s"):
        toolchain._ask([str(hung), "--version"])
    with pytest.raises(toolchain._NoAnswer, match="did not end within 0.5 s"):
        toolchain._ask([str(hung), "--version"])
    assert _starts(hangs) == 5


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_an_interrupted_version_probe_stops_the_compiler_and_its_children(
        tmp_path: Path, monkeypatch) -> None:
    """Ctrl-C while the compiler is asked its version ends the wait at once, and the
    wrapper's child is stopped with it rather than left running."""
    import shutil

    from kernelforge.build import toolchain

    pid_file = tmp_path / "child.pid"
    program = tmp_path / "c++"
    program.write_text(f"#!/bin/sh\n{shutil.which('sleep')} 30 &\n"
                       f"echo $! > '{pid_file}'\nwait\n")
    program.chmod(0o755)
    monkeypatch.setenv("CXX", str(program))
    monkeypatch.setattr(toolchain, "VERSION_TIMEOUT_S", 30)

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGALRM, interrupt)
    started = time.monotonic()
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.5)
        with pytest.raises(KeyboardInterrupt):
            find_cxx()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert time.monotonic() - started < 15
    assert _ends(int(pid_file.read_text()))


def test_a_cxx_set_between_two_lookups_is_the_one_found(tmp_path: Path, monkeypatch) -> None:
    """A process that builds twice (a notebook, a service) and sets CXX in between gets
    the compiler CXX names now, not the first one; each compiler is asked its version
    once however often the choice comes back to it."""
    count = tmp_path / "starts"
    old = fake_cxx(tmp_path / "g++-12", b"g++ (GCC) 12.2.0\n" + GCC_COPYRIGHT, "12.2.0")
    new = fake_cxx(tmp_path / "g++-13", b"g++ (GCC) 13.1.0\n" + GCC_COPYRIGHT, "13.1.0")
    (tmp_path / "counted").mkdir()
    counted = _counting(tmp_path / "counted" / "g++", count, f'exec {new} "$@"')
    monkeypatch.setenv("CXX", str(old))
    assert find_cxx().version == (12, 2, 0)
    monkeypatch.setenv("CXX", str(counted))
    assert (find_cxx().path, find_cxx().version) == (counted, (13, 1, 0))
    asked = _starts(count)  # --version, then -dumpfullversion
    monkeypatch.setenv("CXX", str(old))
    assert find_cxx().version == (12, 2, 0)
    monkeypatch.setenv("CXX", str(counted))
    assert find_cxx().version == (13, 1, 0)
    assert _starts(count) == asked == 2


def test_a_c_compiler_put_first_on_path_between_two_lookups_is_found(
        tmp_path: Path, monkeypatch) -> None:
    """With CXX unset, the ``c++`` on PATH is the compiler: a PATH changed between two
    lookups (an environment activated in a notebook) is followed, for nvcc's host
    compiler too."""
    from kernelforge.build import toolchain

    first, second = tmp_path / "first", tmp_path / "second"
    for folder, version in ((first, "12.2.0"), (second, "13.1.0")):
        folder.mkdir()
        for name in ("c++", "gcc"):
            fake_cxx(folder / name, f"{name} (GCC) {version}\n".encode() + GCC_COPYRIGHT,
                     version)
    for var in ("CXX", "CC", "NVCC_CCBIN"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("PATH", f"{first}:/usr/bin:/bin")
    host = toolchain.find_nvcc_host()
    assert find_cxx().version == (12, 2, 0) and host is not None and host.version == (12, 2, 0)
    monkeypatch.setenv("PATH", f"{second}:{first}:/usr/bin:/bin")
    host = toolchain.find_nvcc_host()
    assert find_cxx().version == (13, 1, 0) and host is not None and host.version == (13, 1, 0)
    # CC names nvcc's host compiler before PATH does
    monkeypatch.setenv("CC", str(first / "gcc"))
    host = toolchain.find_nvcc_host()
    assert host is not None and host.path == first / "gcc"


@pytest.mark.parametrize("first", ["unset", "empty"])
def test_cxx_set_to_nothing_is_not_taken_for_cxx_unset(tmp_path: Path, monkeypatch,
                                                       first: str) -> None:
    """``CXX=`` (set, to nothing) and no CXX at all are two settings, looked up apart in
    either order: the first names no program and is refused with the fix, the second
    takes ``c++`` from PATH. Neither answer stands in for the other's."""
    from kernelforge.errors import ToolchainError

    (tmp_path / "bin").mkdir()
    cxx = fake_cxx(tmp_path / "bin" / "c++", b"c++ (GCC) 12.2.0\n" + GCC_COPYRIGHT, "12.2.0")
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    for setting in ([first, "empty" if first == "unset" else "unset"] * 2):
        if setting == "unset":
            monkeypatch.delenv("CXX", raising=False)
            assert find_cxx().path == cxx
        else:
            monkeypatch.setenv("CXX", "")
            with pytest.raises(ToolchainError, match="^CXX='' names no program .*; fix: "):
                find_cxx()


def _no_toolkit_found(tmp_path: Path, monkeypatch, name: str) -> None:
    """No toolkit variable set, nothing on ``PATH`` and no default installation: the
    GPU compiler ``name`` is found only where a test puts it."""
    from kernelforge.build import toolchain

    for var in ("CUDA_HOME", "CUDA_PATH", "ROCM_HOME", "ROCM_PATH"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "nothing"))
    entry = toolchain._DEVICE_COMPILERS[name]  # no default installation to fall back to
    monkeypatch.setitem(toolchain._DEVICE_COMPILERS, name,
                        (entry[0], str(tmp_path / "nowhere"), *entry[2:]))


@pytest.mark.parametrize(("name", "variable"), [("nvcc", "CUDA_HOME"), ("nvcc", "CUDA_PATH"),
                                                ("nvcc", "PATH"), ("hipcc", "ROCM_HOME"),
                                                ("hipcc", "ROCM_PATH"), ("hipcc", "PATH")])
def test_a_toolkit_named_between_two_lookups_is_the_one_found(
        tmp_path: Path, monkeypatch, name: str, variable: str) -> None:
    """CUDA_HOME (or ROCM_HOME, ..., or PATH, holding its bin folder) pointed at another
    toolkit between two builds of one process: the second builds with that toolkit's
    compiler, and one not named any more is not taken either."""
    from kernelforge.build import toolchain

    said = {"nvcc": "echo 'Cuda compilation tools, release {0}, V{0}.1'",
            "hipcc": "echo 'HIP version: {0}.41133-dd7f95766'"}[name]
    first = _toolkit(tmp_path / "first", name, said.format("12.8"))
    second = _toolkit(tmp_path / "second", name, said.format("13.0"))
    _no_toolkit_found(tmp_path, monkeypatch, name)
    find = toolchain.find_nvcc if name == "nvcc" else toolchain.find_hipcc
    find.cache_clear()
    on_path = variable == "PATH"  # a toolkit's bin folder, not the toolkit
    try:
        monkeypatch.setenv(variable, str(first / "bin" if on_path else first))
        tool = find()
        assert tool is not None and tool.path == first / "bin" / name
        monkeypatch.setenv(variable, str(second / "bin" if on_path else second))
        tool = find()
        assert tool is not None and tool.path == second / "bin" / name
        assert tool.version[:2] == (13, 0)
        if on_path:
            monkeypatch.setenv(variable, str(tmp_path / "nothing"))
        else:
            monkeypatch.delenv(variable)
        assert find() is None
    finally:
        find.cache_clear()


def test_a_build_after_cuda_home_changed_uses_the_toolkit_it_names(tmp_path: Path,
                                                                  monkeypatch) -> None:
    """Two ``build_project`` calls of one process with CUDA_HOME pointed elsewhere in
    between: the second judges (and would compile with) the toolkit CUDA_HOME names
    now. A minimum CUDA version neither toolkit meets stops each build before it
    compiles, naming the nvcc it found."""
    from kf_testutil import copy_example

    from kernelforge.build import build_project, toolchain
    from kernelforge.errors import ToolchainError

    said = "echo 'Cuda compilation tools, release {0}, V{0}.1'"
    first = _toolkit(tmp_path / "cuda-12.8", "nvcc", said.format("12.8"))
    second = _toolkit(tmp_path / "cuda-12.9", "nvcc", said.format("12.9"))
    project = copy_example(tmp_path / "relu")
    manifest = project / "build.toml"
    manifest.write_text(manifest.read_text().replace(
        "[general.hub]", '[general.cuda]\nminver = "13.0"\n\n[general.hub]'))
    python = fake_environment(tmp_path / "env", "2.9.1+cu128", "12.8")
    monkeypatch.delenv("CUDA_PATH", raising=False)
    toolchain.find_nvcc.cache_clear()
    try:
        for home, version in ((first, "12.8.1"), (second, "12.9.1")):
            monkeypatch.setenv("CUDA_HOME", str(home))
            with pytest.raises(ToolchainError) as err:
                build_project(project, backends=["cuda"], python=python,
                              progress=lambda line: None)
            assert f"nvcc {version} ({home / 'bin' / 'nvcc'}) is installed" in str(err.value)
    finally:
        toolchain.find_nvcc.cache_clear()


def _counted_gcc(path: Path, count: Path, version: str) -> Path:
    """A gcc ``version`` that adds a line to ``count`` each time it is asked something."""
    path.write_text(f"#!/bin/sh\necho started >> '{count}'\n"
                    f'case "$1" in\n  -dumpfullversion) echo {version};;\n'
                    f"  *) echo 'g++ (GCC) {version}'\n"
                    "     echo 'Copyright (C) 2022 Free Software Foundation, Inc.';;\nesac\n")
    path.chmod(0o755)
    return path


@pytest.mark.parametrize("how", ["rewritten", "replaced"])
def test_a_compiler_upgraded_in_place_is_asked_again(tmp_path: Path, monkeypatch,
                                                     how: str) -> None:
    """A compiler upgraded where it stands between two builds of one process (the same
    path, the same CXX, CC and PATH) is asked again, so that the second build records
    the version it compiles with; before, the first answer stood for the rest of the
    process. A package manager rewrites the file (new times: here the size and inode
    stay) or puts a new one in its place (another inode: here the times and size stay).
    A compiler left alone is still asked once, however often it is looked up."""
    import os

    from kernelforge.build import toolchain

    count = tmp_path / "starts"
    gcc = _counted_gcc(tmp_path / "g++", count, "12.2.0")
    before = gcc.stat()
    monkeypatch.setenv("CXX", str(gcc))
    monkeypatch.setenv("CC", str(gcc))  # nvcc's host compiler

    def versions() -> list[tuple[int, ...]]:
        host = toolchain.find_nvcc_host()
        assert host is not None
        return [find_cxx().version, host.version]

    toolchain.find_nvcc_host.cache_clear()
    try:
        assert versions() == [(12, 2, 0)] * 2
        asked = _starts(count)
        assert versions() == [(12, 2, 0)] * 2 and _starts(count) == asked
        if how == "rewritten":
            _counted_gcc(gcc, count, "13.1.0")
            os.utime(gcc, ns=(before.st_atime_ns, before.st_mtime_ns + 10**9))
        else:
            _counted_gcc(tmp_path / "g++.new", count, "13.1.0")
            os.utime(tmp_path / "g++.new", ns=(before.st_atime_ns, before.st_mtime_ns))
            os.replace(tmp_path / "g++.new", gcc)
        after = gcc.stat()
        assert after.st_size == before.st_size
        assert (after.st_ino == before.st_ino) == (how == "rewritten")
        assert versions() == [(13, 1, 0)] * 2
        assert _starts(count) == 2 * asked
        assert versions() == [(13, 1, 0)] * 2 and _starts(count) == 2 * asked
    finally:
        toolchain.find_nvcc_host.cache_clear()


def test_a_toolkit_link_moved_to_another_release_is_asked_again(tmp_path: Path,
                                                                monkeypatch) -> None:
    """``CUDA_HOME=/usr/local/cuda``, a link that an upgrade moves from cuda-12.8 to
    cuda-12.9 while the old release stays installed: the next lookup of the process
    finds the nvcc the link leads to now, by its own path and version, instead of the
    one it led to before."""
    import os

    from kernelforge.build import toolchain

    count = tmp_path / "starts"
    said = f"echo started >> '{count}'; echo 'Cuda compilation tools, release {{0}}, V{{0}}.1'"
    old = _toolkit(tmp_path / "cuda-12.8", "nvcc", said.format("12.8"))
    new = _toolkit(tmp_path / "cuda-12.9", "nvcc", said.format("12.9"))
    link = tmp_path / "cuda"
    link.symlink_to(old)
    monkeypatch.delenv("CUDA_PATH", raising=False)
    monkeypatch.setenv("CUDA_HOME", str(link))
    toolchain.find_nvcc.cache_clear()
    try:
        for _ in range(2):
            tool = toolchain.find_nvcc()
            assert tool is not None
            assert (tool.path, tool.version) == (old / "bin" / "nvcc", (12, 8, 1))
        assert _starts(count) == 1
        (tmp_path / "cuda.new").symlink_to(new)
        os.replace(tmp_path / "cuda.new", link)
        for _ in range(2):
            tool = toolchain.find_nvcc()
            assert tool is not None
            assert (tool.path, tool.version) == (new / "bin" / "nvcc", (12, 9, 1))
        assert _starts(count) == 2
    finally:
        toolchain.find_nvcc.cache_clear()


# -- values relative to the current directory ---------------------------------------------

def _two_folders(tmp_path: Path, name: str, sub: str = "") -> tuple[Path, Path]:
    """Folders ``a`` and ``b``, each holding a gcc named ``name`` (in ``sub``, if given)
    of another version: 12.2.0 in ``a``, 13.1.0 in ``b``."""
    folders = tmp_path / "a", tmp_path / "b"
    for folder, version in zip(folders, ("12.2.0", "13.1.0"), strict=True):
        (folder / sub).mkdir(parents=True)
        fake_cxx(folder / sub / name, f"g++ (GCC) {version}\n".encode() + GCC_COPYRIGHT,
                 version)
    return folders


@pytest.mark.parametrize(("cxx", "search_path", "found"), [
    ("./mycc", None, "mycc"),
    ("tools/mycc", None, "tools/mycc"),
    ("mycc", "tools", "tools/mycc"),  # a relative PATH entry
    ("mycc", "", "mycc"),  # an empty PATH entry: the current directory, as for a shell
    (None, "tools", "tools/c++"),
])
def test_a_relative_cxx_is_read_from_the_current_directory(
        tmp_path: Path, monkeypatch, cxx: str | None, search_path: str | None,
        found: str) -> None:
    """``CXX=./mycc kernelforge build .`` builds with ./mycc, as make and CMake take it:
    the lookup reads it from the directory it runs in and names the compiler by its
    absolute path (the compile runs elsewhere). In another directory the same value is
    another compiler, looked up there, not the first one's cached answer."""
    name = Path(found).name
    a, b = _two_folders(tmp_path, name, str(Path(found).parent))
    if cxx is None:
        monkeypatch.delenv("CXX", raising=False)
    else:
        monkeypatch.setenv("CXX", cxx)
    if search_path is not None:
        monkeypatch.setenv("PATH", f"{search_path}:/usr/bin:/bin" if search_path
                           else ":/usr/bin:/bin")
    for folder, version in ((a, (12, 2, 0)), (b, (13, 1, 0)), (a, (12, 2, 0))):
        monkeypatch.chdir(folder)
        tool = find_cxx()
        assert (tool.path, tool.version) == (folder / found, version)
        assert tool.path.is_absolute()


def test_a_relative_cxx_that_names_no_file_says_where_it_looked(tmp_path: Path,
                                                               monkeypatch) -> None:
    """The error names the file a relative CXX was read as, and the directory it was
    read from, rather than a 'could not run' about a name that lost its ./."""
    from kernelforge.errors import ToolchainError

    here = tmp_path / "project"
    here.mkdir()
    monkeypatch.chdir(here)
    monkeypatch.setenv("CXX", "./mycc")
    with pytest.raises(ToolchainError) as err:
        find_cxx()
    assert str(err.value) == (
        f"CXX='./mycc' names no program (no executable file {here / 'mycc'}: a relative "
        f"CXX is read from the current directory, {here}); fix: point CXX at an "
        "installed C++ compiler (CXX=g++ or CXX=clang++, or its full path), or unset it "
        "to use c++ from PATH")


def test_a_relative_cxx_that_is_no_compiler_is_named_by_its_path(tmp_path: Path,
                                                                monkeypatch) -> None:
    from kernelforge.errors import ToolchainError

    monkeypatch.chdir(tmp_path)
    (tmp_path / "mycc").write_text("#!/bin/sh\nexit 3\n")
    (tmp_path / "mycc").chmod(0o755)
    monkeypatch.setenv("CXX", "./mycc")
    with pytest.raises(ToolchainError, match=(
            rf"^CXX='\./mycc' \({re.escape(str(tmp_path / 'mycc'))}\) is not a C\+\+ "
            rf"compiler: '{re.escape(str(tmp_path / 'mycc'))} --version' exits with "
            "status 3; fix: ")):
        find_cxx()


@pytest.mark.parametrize(("variable", "value", "sub"), [
    ("CC", "./gcc-11", ""),
    ("CC", "bin/gcc-11", "bin"),
    ("NVCC_CCBIN", "bin", "bin"),  # a folder: its gcc, as nvcc takes it
    ("NVCC_CCBIN", "./bin/gcc", "bin"),
    ("PATH", "bin", "bin"),
])
def test_a_relative_nvcc_host_compiler_is_read_from_the_current_directory(
        tmp_path: Path, monkeypatch, variable: str, value: str, sub: str) -> None:
    from kernelforge.build import toolchain

    name = Path(value).name if variable == "CC" or value.endswith("gcc") else "gcc"
    a, b = _two_folders(tmp_path, name, sub)
    for var in ("CC", "NVCC_CCBIN"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    monkeypatch.setenv(variable, f"{value}:/usr/bin:/bin" if variable == "PATH" else value)
    toolchain.find_nvcc_host.cache_clear()
    try:
        for folder, version in ((a, (12, 2, 0)), (b, (13, 1, 0))):
            monkeypatch.chdir(folder)
            host = toolchain.find_nvcc_host()
            assert host is not None
            assert (host.path, host.version) == (folder / sub / name, version)
    finally:
        toolchain.find_nvcc_host.cache_clear()


def test_a_default_gcc_is_not_a_folder_of_the_current_directory(tmp_path: Path,
                                                                monkeypatch) -> None:
    """Without CC and NVCC_CCBIN nvcc runs the gcc on PATH, whatever folders the
    current directory holds (a project with a folder named gcc)."""
    from kernelforge.build import toolchain

    (tmp_path / "bin").mkdir()
    fake_cxx(tmp_path / "bin" / "gcc", b"gcc (GCC) 13.3.0\n", "13.3.0")
    (tmp_path / "gcc").mkdir()
    fake_cxx(tmp_path / "gcc" / "gcc", b"gcc (GCC) 9.1.0\n", "9.1.0")
    for var in ("CC", "NVCC_CCBIN"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:/usr/bin:/bin")
    monkeypatch.chdir(tmp_path)
    toolchain.find_nvcc_host.cache_clear()
    try:
        host = toolchain.find_nvcc_host()
    finally:
        toolchain.find_nvcc_host.cache_clear()
    assert host is not None and host.path == tmp_path / "bin" / "gcc"


@pytest.mark.parametrize(("name", "variable", "value"), [
    ("nvcc", "CUDA_HOME", "toolkit"), ("nvcc", "CUDA_PATH", "./toolkit"),
    ("nvcc", "PATH", "toolkit/bin"), ("hipcc", "ROCM_HOME", "toolkit"),
    ("hipcc", "ROCM_PATH", "./toolkit"), ("hipcc", "PATH", "toolkit/bin")])
def test_a_relative_toolkit_is_read_from_the_current_directory(
        tmp_path: Path, monkeypatch, name: str, variable: str, value: str) -> None:
    """CUDA_HOME=toolkit (or ROCM_PATH, or a relative PATH entry) names the toolkit in
    the current directory, by its absolute path; another directory's is another one."""
    from kernelforge.build import toolchain

    said = {"nvcc": "echo 'Cuda compilation tools, release {0}, V{0}.1'",
            "hipcc": "echo 'HIP version: {0}.41133-dd7f95766'"}[name]
    a = _toolkit(tmp_path / "a" / "toolkit", name, said.format("12.8")).parent
    b = _toolkit(tmp_path / "b" / "toolkit", name, said.format("13.0")).parent
    _no_toolkit_found(tmp_path, monkeypatch, name)
    monkeypatch.setenv(variable, value)
    find = toolchain.find_nvcc if name == "nvcc" else toolchain.find_hipcc
    find.cache_clear()
    try:
        for folder, version in ((a, (12, 8)), (b, (13, 0)), (a, (12, 8))):
            monkeypatch.chdir(folder)
            tool = find()
            assert tool is not None and tool.path == folder / "toolkit" / "bin" / name
            assert tool.version[:2] == version
    finally:
        find.cache_clear()


def test_a_relative_toolkit_that_holds_no_compiler_is_named_by_its_folder(
        tmp_path: Path, monkeypatch) -> None:
    from kernelforge.build import toolchain

    for var in ("CUDA_HOME", "CUDA_PATH"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "nothing"))
    entry = toolchain._DEVICE_COMPILERS["nvcc"]
    monkeypatch.setitem(toolchain._DEVICE_COMPILERS, "nvcc",
                        (entry[0], str(tmp_path / "nowhere"), *entry[2:]))
    (tmp_path / "cuda").mkdir()
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CUDA_HOME", "cuda")
    toolchain.find_nvcc.cache_clear()
    try:
        assert toolchain.find_nvcc() is None
    finally:
        toolchain.find_nvcc.cache_clear()
    assert toolchain.not_found_reason("nvcc") == (
        f"nvcc was not found: CUDA_HOME=cuda ({tmp_path / 'cuda'}) has no bin/nvcc, and "
        f"none is on PATH or in {tmp_path / 'nowhere'}; fix: point CUDA_HOME at the "
        "toolkit's folder (the one holding bin/nvcc)")


def test_a_relative_value_in_a_removed_current_directory_is_refused(tmp_path: Path,
                                                                   monkeypatch) -> None:
    from kernelforge.errors import ToolchainError

    gone = tmp_path / "gone"
    gone.mkdir()
    monkeypatch.chdir(gone)
    gone.rmdir()
    monkeypatch.setenv("CXX", "./mycc")
    with pytest.raises(ToolchainError, match=(
            r"^CXX='\./mycc' is relative to the current directory, which cannot be read "
            r"\(.*\); fix: run the build from a folder that exists, or give CXX as an "
            r"absolute path$")):
        find_cxx()
