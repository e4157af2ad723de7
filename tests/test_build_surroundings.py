"""What a real build takes from around the project, and what it leaves there: the
compiler the caller's PATH names (not one in an environment's bin/), a fixed build date,
the git commit it records, and no compile left running when kernelforge is killed.

Each test compiles a tiny cpu project that includes none of torch's headers (seconds)."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from test_build import BINDING, tiny_cpu_project

from kernelforge.build import build_project
from kernelforge.build import compile as compile_mod
from kernelforge.build.compile import reads_digest

KERNEL = """
    [kernel.k]
    backend = "cpu"
    depends = ["torch"]
    src = ["k/k.cpp"]
    """


def project_with(path: Path, source: str) -> Path:
    return tiny_cpu_project(path, BINDING, KERNEL, {"k/k.cpp": source})


def extension_bytes(variant: Path) -> bytes:
    (so,) = variant.glob("*.abi3.so")
    return so.read_bytes()


def _gone(pid: int, within: float) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        # a zombie (exited, not yet reaped by init) has ended too
        try:
            if Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z":
                return True
        except OSError:
            return True
        time.sleep(0.1)
    return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="parent-death signal: Linux")
def test_a_killed_build_leaves_no_compiler_running(tmp_path: Path) -> None:
    """SIGKILL (a hard time limit, the out-of-memory killer) gives kernelforge no chance
    to stop the compile it started in a session of its own; the compile must end anyway,
    not keep writing into the work directory that the next build takes over."""
    pids = tmp_path / "compiler.pid"
    slow = tmp_path / "slow-c++"
    # a C++ compiler that answers version queries at once and sits in each compile
    slow.write_text(textwrap.dedent(f"""\
        #!/bin/sh
        case " $* " in
          *" -c "*) echo $$ > {pids}; sleep 120 ;;
        esac
        exec c++ "$@"
        """))
    slow.chmod(0o755)
    project = project_with(tmp_path / "killed", "int k() { return 1; }\n")
    env = {**os.environ, "CXX": str(slow)}
    build = subprocess.Popen([sys.executable, "-m", "kernelforge", "build", str(project)],
                             env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while not pids.exists() or not pids.read_text().strip():
            assert build.poll() is None, "the build ended before its compile started"
            assert time.monotonic() < deadline, "no compile started"
            time.sleep(0.1)
        compiler = int(pids.read_text())
        build.kill()
        build.wait(timeout=30)
        assert _gone(compiler, within=15), "the compile outlived the killed kernelforge"
    finally:
        if build.poll() is None:
            build.kill()
        # whatever is left of the build's own group (the test's failure path)
        for line in subprocess.run(["ps", "-eo", "pid,args"], capture_output=True,
                                   text=True, check=False).stdout.splitlines():
            if str(project) in line and "kernelforge.build._driver" in line:
                try:
                    os.killpg(int(line.split()[0]), signal.SIGKILL)
                except (ProcessLookupError, PermissionError, ValueError):
                    pass


def test_a_c_plus_plus_in_the_environments_bin_does_not_replace_the_callers(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The build runs the compiler that the up-to-date check and metadata.json name
    (the caller's PATH decides), not a ``c++`` in the directories the build adds to
    PATH to find ninja (the interpreter's bin/: a conda environment with compiler
    packages holds one)."""
    env_bin = tmp_path / "env" / "bin"
    env_bin.mkdir(parents=True)
    mark = tmp_path / "wrong-compiler-ran"
    for name in ("c++", "g++", "cc", "gcc"):
        wrapper = env_bin / name
        wrapper.write_text(f"#!/bin/sh\ntouch {mark}\nexit 1\n")
        wrapper.chmod(0o755)
    ninja_dirs = compile_mod._ninja_dirs
    monkeypatch.setattr(compile_mod, "_ninja_dirs",
                        lambda python: [str(env_bin), *ninja_dirs(python)])
    monkeypatch.delenv("CXX", raising=False)
    monkeypatch.delenv("CC", raising=False)
    project = project_with(tmp_path / "pathorder", "int k() { return 1; }\n")
    (result,) = build_project(project, backends=["cpu"], progress=lambda _: None)
    assert not mark.exists(), "a compiler from the environment's bin/ ran"
    assert (result.path / "metadata.json").is_file()


def test_date_macros_give_the_same_bytes_at_any_time(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """``__DATE__``/``__TIME__`` expand to one fixed date, whatever the clock or a
    ``SOURCE_DATE_EPOCH`` in the environment says (which is ignored, with a note)."""
    source = ('extern "C" const char* k_stamp() { return "stamp:" __DATE__ " " __TIME__; }\n')
    project = project_with(tmp_path / "dated", source)
    (first,) = build_project(project, backends=["cpu"], progress=lambda _: None)
    before = extension_bytes(first.path)
    assert b"stamp:Jan  1 1980 00:00:00" in before
    time.sleep(1.1)  # __TIME__ would move on
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    lines: list[str] = []
    (again,) = build_project(project, backends=["cpu"], force=True, progress=lines.append)
    assert extension_bytes(again.path) == before
    assert any("ignoring SOURCE_DATE_EPOCH=1700000000" in ln for ln in lines), lines


def _git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.com",
                           "-C", str(root), *args], capture_output=True, text=True,
                          check=True).stdout.strip()


def test_a_new_commit_is_recorded_without_recompiling(tmp_path: Path) -> None:
    """A commit that changes none of the project's files (one elsewhere in the
    repository) leaves the objects as they are, but metadata.json names the new commit,
    as a build from a clean checkout of it would."""
    repo = tmp_path / "repo"
    project = project_with(repo / "proj", "int k() { return 1; }\n")
    (repo / ".gitignore").write_text("build/\n.kernelforge/\n")
    (repo / "other.txt").write_text("one\n")
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "one")
    (first,) = build_project(project, backends=["cpu"], progress=lambda _: None)
    (repo / "other.txt").write_text("two\n")
    _git(repo, "commit", "-qam", "two")
    head = _git(repo, "rev-parse", "HEAD")
    lines: list[str] = []
    (again,) = build_project(project, backends=["cpu"], progress=lines.append)
    assert not again.up_to_date
    meta = json.loads((again.path / "metadata.json").read_text())
    assert meta["provenance"]["kernel"]["commit"] == head
    assert not any("compiled k/k.cpp" in ln for ln in lines), lines
    assert again.path.name == first.path.name


def test_an_edit_of_a_header_outside_the_project_rebuilds(tmp_path: Path) -> None:
    """A source may read a header outside the project (``#include "../../shared/x.h"``,
    an ``-I/abs`` flag); the project's digest does not cover it, but the up-to-date check
    compares what the compilers read there, so an edit of it is compiled in rather than
    the old binary being called up to date."""
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "value.h").write_text("#define SHARED_VALUE 10\n")
    an_hour_ago = time.time() - 3600  # not changed while the first compile ran
    os.utime(shared / "value.h", (an_hour_ago, an_hour_ago))
    project = project_with(tmp_path / "reader", textwrap.dedent("""\
        #include "../../shared/value.h"
        #define KF_TEXT(x) #x
        #define KF_VALUE(x) KF_TEXT(x)
        extern "C" const char* k_value() { return "value:" KF_VALUE(SHARED_VALUE); }
        """))
    (first,) = build_project(project, backends=["cpu"], progress=lambda _: None)
    assert b"value:10" in extension_bytes(first.path)
    (same,) = build_project(project, backends=["cpu"], progress=lambda _: None)
    assert same.up_to_date
    (shared / "value.h").write_text("#define SHARED_VALUE 20\n")
    (again,) = build_project(project, backends=["cpu"], progress=lambda _: None)
    assert not again.up_to_date
    assert b"value:20" in extension_bytes(again.path)


def test_a_file_outside_the_project_changed_while_it_compiled_is_not_trusted(
        tmp_path: Path) -> None:
    """A header outside the project edited while the compile ran may have been read
    before or after the edit: the up-to-date entry then matches no later check, so the
    next build runs ninja again (project files are hashed before the compile instead)."""
    work = tmp_path / "work"
    work.mkdir()
    header = tmp_path / "outside.h"
    header.write_text("#define X 1\n")
    an_hour_ago = time.time() - 3600
    os.utime(header, (an_hour_ago, an_hour_ago))
    (work / "reads.json").write_text(json.dumps({"files": [str(header)]}))
    started = time.time_ns()
    assert reads_digest(work, compiled_since_ns=started) == reads_digest(work)
    header.write_text("#define X 2\n")  # during the compile
    assert reads_digest(work, compiled_since_ns=started) == "unsettled"
    assert reads_digest(work) not in ("unsettled", None)


def test_an_interpreter_given_as_a_wrapper_script_builds(tmp_path: Path) -> None:
    """``--python`` may name a script that runs python as its child (not by exec): the
    driver's parent is then the script, which must not pass for a dead kernelforge."""
    wrapper = tmp_path / "pywrap"
    wrapper.write_text(f'#!/bin/sh\n{shlex.quote(sys.executable)} "$@"\n')
    wrapper.chmod(0o755)
    project = project_with(tmp_path / "wrapped", "int k() { return 1; }\n")
    (result,) = build_project(project, backends=["cpu"], python=str(wrapper),
                              progress=lambda _: None)
    assert (result.path / "metadata.json").is_file()


def test_a_project_file_changed_while_it_compiled_is_not_taken_as_built(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The project is hashed before the compile: a source saved while the compile ran
    (and saved back since, an undo) may have been compiled in either version, so the
    build says so and leaves no up-to-date entry: the next build compiles the source as
    it is rather than finding the hash of before up to date."""
    project = project_with(tmp_path / "edited", 'extern "C" const char* k() '
                                                '{ return "kf-old"; }\n')
    source = project / "k" / "k.cpp"
    original = source.read_text()
    real_compile = compile_mod.compile_plan

    def compile_an_edit(*args, **kwargs):  # the user saves an edit, then undoes it
        source.write_text(original.replace("kf-old", "kf-new"))
        try:
            return real_compile(*args, **kwargs)
        finally:
            source.write_text(original)

    monkeypatch.setattr("kernelforge.build.compile_plan", compile_an_edit)
    lines: list[str] = []
    build_project(project, backends=["cpu"], progress=lines.append)
    assert any("k/k.cpp changed while" in line for line in lines), lines
    monkeypatch.undo()
    (again,) = build_project(project, backends=["cpu"], progress=lambda _: None)
    assert not again.up_to_date
    assert b"kf-old" in extension_bytes(again.path)
    assert b"kf-new" not in extension_bytes(again.path)
    (same,) = build_project(project, backends=["cpu"], progress=lambda _: None)
    assert same.up_to_date
