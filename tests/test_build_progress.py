"""What `compile_plan` shows while the child compiles, and how it ends: the heartbeat,
interrupts (Ctrl-C) and compiler failures. The child is a small Python script standing
in for the driver (torch's extension tooling and ninja), so these run in seconds."""

from __future__ import annotations

import shlex
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from kernelforge.build import compile as compile_mod
from kernelforge.build.compile import compile_plan
from kernelforge.build.interpreter import PythonEnv
from kernelforge.build.plan import BuildPlan
from kernelforge.errors import BuildError

VARIANT = "torch-cpu-x86_64-linux"
NAMESPACE = "_demo_cpu_0123456"


def fake_driver(tmp_path: Path, body: str) -> tuple[BuildPlan, PythonEnv]:
    """A plan and an "interpreter" that runs ``body`` in place of the driver. ``body``
    sees ``root`` (the project), ``spec`` (the driver's instructions), ``out`` (print and
    flush) and ``succeed()`` (write the extension, as a successful build does)."""
    root = tmp_path / "project"
    (root / "k").mkdir(parents=True)
    script = tmp_path / "fake_driver.py"
    script.write_text(textwrap.dedent("""
        import json, os, signal, sys, time
        from pathlib import Path
        root = Path({root!r})
        spec = json.loads(Path(sys.argv[-1]).read_text())
        def out(*lines):
            for line in lines:
                print(line, flush=True)
        def succeed():
            lib = Path(spec["build_lib"])
            lib.mkdir(parents=True, exist_ok=True)
            (lib / (spec["namespace"] + ".abi3.so")).write_bytes(b"not really ELF")
        """).format(root=str(root)) + textwrap.dedent(body))
    # run as `<interpreter> -m kernelforge.build._driver SPEC`
    python = tmp_path / "fake-python"
    python.write_text(f"#!/bin/sh\nexec {shlex.quote(sys.executable)} "
                      f"{shlex.quote(str(script))} \"$@\"\n")
    python.chmod(0o755)
    plan = BuildPlan(root=root, variant=VARIANT, backend="cpu", namespace=NAMESPACE,
                     module_id="demo_cpu_0123456")
    return plan, PythonEnv(str(python))


def compile_with(tmp_path: Path, plan: BuildPlan, python: PythonEnv,
                 lines: list[str], verbose: bool = False) -> Path:
    return compile_plan(plan, work_dir=tmp_path / "work", verbose=verbose,
                        progress=lines.append, python=python)


NINJA_STEPS = """
    out("running build_ext", "building extension")  # setuptools' chatter, not shown
    time.sleep(0.8)
    out(f"[1/2] c++ -MMD -O3 -c {root}/k/k.cpp -o /obj/k.o -fPIC")
    time.sleep(0.8)
    out("[2/2] c++ -shared /obj/k.o -o /lib/x.so")
    succeed()
"""


def reader_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "kernelforge-compile-output"]


def test_steps_are_named_when_done_and_a_heartbeat_fills_the_silence(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ninja prints a step when it has finished: the line says "compiled"; while nothing
    comes, a "still compiling" line says how long and how far (no count before ninja
    gave one)."""
    monkeypatch.setattr(compile_mod, "HEARTBEAT_S", 0.2)
    plan, python = fake_driver(tmp_path, NINJA_STEPS)
    lines: list[str] = []
    built = compile_with(tmp_path, plan, python, lines)
    assert built == tmp_path / "work" / "lib" / f"{NAMESPACE}.abi3.so"

    first = lines.index("  [1/2] compiled k/k.cpp")
    second = lines.index("  [2/2] linked")
    before, between = lines[:first], lines[first + 1:second]
    assert before and all(
        ln.startswith(f"  still compiling {VARIANT}: ") and ln.endswith("s, no step finished yet")
        for ln in before), lines
    assert between and all(
        ln.startswith(f"  still compiling {VARIANT}: ") and ln.endswith("s, 1 of 2 steps done")
        for ln in between), lines
    # one line per HEARTBEAT_S of silence, not a flood (0.8 s of silence each time)
    assert len(before) <= 6 and len(between) <= 6, lines
    assert lines[second + 1].startswith(f"  compiled {VARIANT} in "), lines
    assert len(lines) == second + 2, lines
    # the log has everything the child wrote, shown or not
    log = (tmp_path / "work" / "build.log").read_text()
    assert log.startswith("running build_ext\nbuilding extension\n[1/2] c++ ")
    assert log.endswith("[2/2] c++ -shared /obj/k.o -o /lib/x.so\n")
    assert not reader_threads()


def test_verbose_shows_every_line_and_the_heartbeat(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(compile_mod, "HEARTBEAT_S", 0.2)
    plan, python = fake_driver(tmp_path, NINJA_STEPS)
    lines: list[str] = []
    compile_with(tmp_path, plan, python, lines, verbose=True)
    shown = [ln for ln in lines if not ln.startswith("  still compiling")]
    assert shown[:3] == ["running build_ext", "building extension",
                         f"[1/2] c++ -MMD -O3 -c {plan.root}/k/k.cpp -o /obj/k.o -fPIC"]
    assert shown[3] == "[2/2] c++ -shared /obj/k.o -o /lib/x.so"
    assert any(ln.endswith("s, 1 of 2 steps done") for ln in lines), lines


def test_no_heartbeat_while_steps_keep_coming(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(compile_mod, "HEARTBEAT_S", 30.0)
    plan, python = fake_driver(tmp_path, """
        out(*(f"[{i}/3] c++ -c {root}/k/k{i}.cpp -o /obj/k{i}.o" for i in (1, 2)))
        out("[3/3] c++ -shared /obj/k1.o /obj/k2.o -o /lib/x.so")
        succeed()
    """)
    lines: list[str] = []
    compile_with(tmp_path, plan, python, lines)
    assert lines[:3] == ["  [1/3] compiled k/k1.cpp", "  [2/3] compiled k/k2.cpp",
                         "  [3/3] linked"]
    assert len(lines) == 4 and "still compiling" not in "".join(lines)


# How a child that Ctrl-C reached ends: the driver's report of ninja's status (what a
# user saw as "compiling ... failed" with a setuptools traceback), ninja's own exit
# status, the driver's KeyboardInterrupt, a compiler's status reported by ninja, or
# death by SIGINT.
INTERRUPTED_CHILDREN = {
    "ninja status 130 in the driver's traceback": """
        out(f"[1/3] c++ -c {root}/k/a.cpp -o /obj/a.o",
            "ninja: build stopped: interrupted by user.",
            "Traceback (most recent call last):",
            '  File "setuptools/command/build_ext.py", line 99, in run',
            "    _build_ext.run(self)",
            "RuntimeError: error compiling objects for extension: ninja exited with status 130")
        sys.exit(1)
    """,
    "exit status 130": """
        out("[1/3] c++ -c x.cpp -o x.o", "ninja: build stopped: interrupted by user.")
        sys.exit(130)
    """,
    "driver's KeyboardInterrupt": """
        out("Traceback (most recent call last):", '  File "_driver.py", line 1, in <module>',
            "KeyboardInterrupt")
        sys.exit(1)
    """,
    "compiler's status": """
        out("[1/3] c++ -c a.cpp -o /obj/a.o", "FAILED: [code=130] /obj/a.o",
            "c++ -c a.cpp -o /obj/a.o", "ninja: build stopped: subcommand failed.")
        sys.exit(1)
    """,
    "setuptools' report of a compiler's status": """
        out("error: command '/usr/bin/c++' failed with exit code 130")
        sys.exit(1)
    """,
    "gcc's compiler killed by SIGINT": """
        out("[1/3] c++ -c a.cpp -o /obj/a.o", "FAILED: [code=1] /obj/a.o",
            "c++ -c a.cpp -o /obj/a.o",
            "c++: fatal error: Interrupt signal terminated program cc1plus",
            "compilation terminated.", "ninja: build stopped: subcommand failed.",
            "Traceback (most recent call last):",
            *[f'  File "setuptools/{i}.py", line {i}, in run' for i in range(60)],
            "RuntimeError: error compiling objects for extension: ninja exited with status 1")
        sys.exit(1)
    """,
    "killed by SIGINT": """
        out("[1/3] c++ -c x.cpp -o x.o")
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(30)
    """,
}


@pytest.mark.parametrize("body", INTERRUPTED_CHILDREN.values(), ids=INTERRUPTED_CHILDREN.keys())
def test_an_interrupted_child_is_an_interrupt_not_a_build_error(tmp_path: Path,
                                                                 body: str) -> None:
    """The CLI turns KeyboardInterrupt into "interrupted" (exit 130), not a traceback."""
    plan, python = fake_driver(tmp_path, body)
    lines: list[str] = []
    with pytest.raises(KeyboardInterrupt):
        compile_with(tmp_path, plan, python, lines)
    assert (tmp_path / "work" / "build.log").read_text()  # what the child wrote is kept
    assert not reader_threads()


def test_a_compiler_error_is_still_a_build_error_with_file_and_line(tmp_path: Path) -> None:
    plan, python = fake_driver(tmp_path, """
        out(f"[1/2] c++ -c {root}/k/b.cpp -o /obj/b.o",
            f"[2/2] c++ -c {root}/k/k.cpp -o /obj/k.o",
            "FAILED: [code=1] /obj/k.o",
            f"c++ -c {root}/k/k.cpp -o /obj/k.o",
            "k/k.cpp:3:5: error: expected ';' before '}' token",
            "ninja: build stopped: subcommand failed.",
            "Traceback (most recent call last):",
            "RuntimeError: error compiling objects for extension: ninja exited with status 1")
        sys.exit(1)
    """)
    lines: list[str] = []
    with pytest.raises(BuildError) as info:
        compile_with(tmp_path, plan, python, lines)
    message = str(info.value)
    assert message.startswith(f"compiling {VARIANT} failed after "), message
    assert "  k/k.cpp:3: error: expected ';' before '}' token" in message
    assert f"full compiler output: {tmp_path / 'work' / 'build.log'}" in message
    # ninja prints a failed step's line too, then FAILED
    assert lines == ["  [1/2] compiled k/b.cpp", "  [2/2] failed to compile k/k.cpp"]
    assert not reader_threads()



def test_a_driver_that_fails_before_compiling_shows_its_exception_not_its_traceback(
        tmp_path: Path) -> None:
    """torch's extension tooling may raise before ninja runs (no CUDA toolkit where it
    looks, a compiler it cannot ask): the error shows the exception that ended the
    driver, a message of several lines whole, and leaves the frames to the log."""
    plan, python = fake_driver(tmp_path, """
        out("running build_ext",
            "Traceback (most recent call last):",
            '  File "/venv/setuptools/x.py", line 1, in run',
            "    raise KeyError('inner')",
            "KeyError: 'inner'",
            "",
            "During handling of the above exception, another exception occurred:",
            "",
            "Traceback (most recent call last):",
            *[f'  File "/venv/torch/cpp_extension_{i}.py", line {i}, in f' for i in range(30)],
            "    raise OSError('CUDA_HOME environment variable is not set. '",
            "OSError: CUDA_HOME environment variable is not set.",
            "Please set it to your CUDA install root.")
        sys.exit(1)
    """)
    with pytest.raises(BuildError) as info:
        compile_with(tmp_path, plan, python, [])
    message = str(info.value)
    detail = message.split("\n")[1:]
    assert detail == ["  OSError: CUDA_HOME environment variable is not set.",
                      "  Please set it to your CUDA install root.",
                      f"full compiler output: {tmp_path / 'work' / 'build.log'}"], message
    assert "cpp_extension_29.py" in (tmp_path / "work" / "build.log").read_text()


def test_a_compile_a_full_disk_stopped_says_to_free_space(tmp_path: Path, monkeypatch) -> None:
    """The assembler's "No space left on device" names an object file, not a source
    line to correct: the error adds where to free space."""
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # as TMPDIR=tmp_path makes it
    plan, python = fake_driver(tmp_path, """
        out(f"[1/1] c++ -c {root}/k/k.cpp -o /obj/k.o",
            "FAILED: [code=1] /obj/k.o",
            f"c++ -c {root}/k/k.cpp -o /obj/k.o",
            "/tmp/cc1.s: Fatal error: can't write 42 bytes to section .text of /obj/k.o: "
            "'No space left on device'",
            "ninja: build stopped: subcommand failed.")
        sys.exit(1)
    """)
    with pytest.raises(BuildError) as info:
        compile_with(tmp_path, plan, python, [])
    work = tmp_path / "work"
    assert str(info.value).endswith(
        "'No space left on device'\n"
        f"fix: free space on the disk of {work} or of the temporary folder ({tmp_path}; "
        "TMPDIR chooses another), then build again\n"
        f"full compiler output: {work / 'build.log'}"), str(info.value)


def test_a_compile_that_writes_nothing_does_not_pass_off_the_last_extension(
        tmp_path: Path, monkeypatch) -> None:
    """A "compiler" that exits 0 and writes nothing (CXX=/bin/true) after a real build
    of the same namespace (--force): the extension that build left is not taken for
    this one's, which setuptools, finding it newer than the objects, would not link."""
    plan, python = fake_driver(tmp_path, """
        if not os.environ.get("CXX"):
            succeed()
        out("[1/1] c++ -c k.cpp -o k.o")
    """)
    monkeypatch.delenv("CXX", raising=False)
    earlier = compile_with(tmp_path, plan, python, [])
    assert earlier.is_file()
    monkeypatch.setenv("CXX", "/bin/true")
    with pytest.raises(BuildError) as info:
        compile_with(tmp_path, plan, python, [])
    assert str(info.value) == (
        f"compiling {VARIANT} reported success but wrote no extension ({NAMESPACE}.*.so "
        f"in {tmp_path / 'work' / 'lib'}): the C++ compiler that links it, '/bin/true', "
        "did not write it; fix: point CXX at a working g++ or clang++ (or unset it), then "
        f"build again; see {tmp_path / 'work' / 'build.log'}")
    assert not earlier.exists()


def test_another_interpreters_log_is_its_own(tmp_path: Path) -> None:
    """``build --python A --python B`` of one variant: the log A's error names is still
    A's after B builds that variant in the same work directory."""
    from dataclasses import replace

    plan, python = fake_driver(tmp_path, """
        out("[1/1] c++ -c k.cpp -o k.o", "FAILED: k.o",
            "k/k.cpp:1:1: error: " + os.environ["WHICH"], "ninja: build stopped.")
        sys.exit(1)
    """)
    other = tmp_path / "other-python"
    other.symlink_to(python.executable)
    first = replace(python, foreign=True)
    second = replace(python, foreign=True, executable=str(other))
    logs = []
    for env, which in ((first, "from A"), (second, "from B")):
        plan_env = replace(plan, env={**plan.env, "WHICH": which})
        with pytest.raises(BuildError) as info:
            compile_with(tmp_path, plan_env, env, [])
        logs.append(Path(str(info.value).rsplit("full compiler output: ", 1)[1].strip()))
    assert logs[0] != logs[1] and logs[0].parent == logs[1].parent == tmp_path / "work"
    assert "from A" in logs[0].read_text() and "from B" in logs[1].read_text()
    assert not (tmp_path / "work" / "build.log").exists()  # this interpreter's own name

def _gone(pid: int) -> bool:
    """Whether the process has ended (a zombie that init has not reaped yet counts)."""
    deadline = time.monotonic() + 5  # init reaps an orphan on its own time
    while True:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            return True
        if state == "Z" or time.monotonic() > deadline:
            return state == "Z"
        time.sleep(0.05)


@pytest.mark.parametrize("ignores_sigterm", [False, True], ids=["terminated", "killed"])
def test_an_interrupt_while_waiting_ends_the_child_and_what_it_started(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ignores_sigterm: bool
) -> None:
    """Ctrl-C reaching kernelforge while the child compiles (here: raised where the
    heartbeat is shown) ends the driver and what it started (ninja, here a process
    holding the output open), killing what ignores SIGTERM, waits for them, and leaves
    no reader thread; then the interrupt goes on to the CLI."""
    monkeypatch.setattr(compile_mod, "HEARTBEAT_S", 0.2)
    monkeypatch.setattr(compile_mod, "STOP_WAIT_S", 0.5)
    pids = tmp_path / "pids"
    plan, python = fake_driver(tmp_path, f"""
        import subprocess
        ninja = subprocess.Popen([sys.executable, "-c", "import signal, time\\n"
                                  "if {ignores_sigterm}:\\n"
                                  "    signal.signal(signal.SIGTERM, signal.SIG_IGN)\\n"
                                  "print('[1/2] c++ -c x.cpp -o x.o', flush=True)\\n"
                                  "time.sleep(60)"])
        Path({str(pids)!r}).write_text(f"{{os.getpid()}} {{ninja.pid}}")
        ninja.wait()
    """)

    shown: list[str] = []

    def progress(line: str) -> None:
        shown.append(line)
        if "still compiling" in line and "  [1/2] compiled x.cpp" in shown:
            raise KeyboardInterrupt

    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        compile_plan(plan, work_dir=tmp_path / "work", progress=progress, python=python)
    assert time.monotonic() - started < 20
    driver, ninja = map(int, pids.read_text().split())
    assert _gone(driver) and _gone(ninja)
    assert not reader_threads()
    assert (tmp_path / "work" / "build.log").read_text() == "[1/2] c++ -c x.cpp -o x.o\n"


def test_the_heartbeat_says_step_or_steps() -> None:
    from kernelforge.build.compile import _still_compiling

    assert _still_compiling("v", 45.4, 0, 1) == "  still compiling v: 45s, 0 of 1 step done"
    assert _still_compiling("v", 61, 1, 1) == "  still compiling v: 61s, 1 of 1 step done, linking"
    assert _still_compiling("v", 90, 2, 5) == "  still compiling v: 90s, 2 of 5 steps done"
    assert _still_compiling("v", 25, 0, None) == "  still compiling v: 25s, no step finished yet"


@pytest.mark.parametrize(("body", "name"), [
    ("""
        out("[1/3] c++ -c x.cpp -o x.o", "ninja: build stopped: interrupted by user.")
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(30)
    """, "SIGTERM"),
    ("""
        os.kill(os.getpid(), signal.SIGKILL)
    """, "SIGKILL"),
], ids=["SIGTERM after ninja's interrupt line", "SIGKILL, no output"])
def test_a_child_ended_by_another_signal_is_a_build_error_naming_it(
        tmp_path: Path, body: str, name: str) -> None:
    """A time limit or a job scheduler ends the build with SIGTERM (ninja then says
    "interrupted by user" too) or SIGKILL: a failure of this build, which the error
    names, not a Ctrl-C that would stop every other build of the command."""
    plan, python = fake_driver(tmp_path, body)
    with pytest.raises(BuildError, match=rf"the compiler driver was ended by {name} "
                                         r"\(not by a compile error\)"):
        compile_with(tmp_path, plan, python, [])
    assert not reader_threads()


@pytest.mark.parametrize("signame", ["SIGTERM", "SIGHUP"])
def test_a_terminated_build_stops_its_compilers(tmp_path: Path, signame: str) -> None:
    """``timeout``, a cancelled CI job or a closed terminal signal kernelforge alone: the
    compilers, in a session of their own, are stopped as on Ctrl-C, not left running,
    and the process then ends by the signal (not by an exception a caller could catch)."""
    import os
    import signal
    import subprocess

    pids = tmp_path / "pids"
    body = f"""
        import subprocess
        ninja = subprocess.Popen([sys.executable, "-c", "import time\\n"
                                  "print('[1/2] c++ -c x.cpp -o x.o', flush=True)\\n"
                                  "time.sleep(60)"])
        Path({str(pids)!r}).write_text(f"{{os.getpid()}} {{ninja.pid}}")
        ninja.wait()
    """
    code = textwrap.dedent(f"""
        import sys
        from pathlib import Path
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        from test_build_progress import fake_driver
        from kernelforge.build.compile import compile_plan
        plan, python = fake_driver(Path({str(tmp_path)!r}), {body!r})
        try:
            compile_plan(plan, work_dir=Path({str(tmp_path / "work")!r}), python=python)
        except BaseException as err:  # a caller cannot take the signal for an exception
            print("swallowed", repr(err))
        print("not reached")
    """)
    build = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    while not pids.exists() or len(pids.read_text().split()) != 2:
        assert time.monotonic() < deadline and build.poll() is None, build.communicate()
        time.sleep(0.05)
    time.sleep(0.3)  # the driver's output is being read
    signum = getattr(signal, signame)
    os.kill(build.pid, signum)
    out, err = build.communicate(timeout=30)
    assert build.returncode == -signum, (out, err)  # ended by the signal, as it asked
    assert "not reached" not in out and "Traceback" not in err
    driver, ninja = map(int, pids.read_text().split())
    assert _gone(driver) and _gone(ninja)


@pytest.mark.parametrize("verbose", [False, True])
def test_the_drivers_notes_are_shown_as_notes(tmp_path: Path, verbose: bool) -> None:
    plan, python = fake_driver(tmp_path, """
        out(f"[1/1] c++ -c {root}/k/k.cpp -o /obj/k.o")
        out("kernelforge-note: the extension registers its ops under 'k'")
        succeed()
    """)
    lines: list[str] = []
    compile_with(tmp_path, plan, python, lines, verbose=verbose)
    assert "  note: the extension registers its ops under 'k'" in lines, lines
    assert not any("kernelforge-note" in ln for ln in lines), lines


@pytest.mark.parametrize(("registered", "noted"), [
    (["vadd::vadd", "vadd::vmul"], True),  # TORCH_LIBRARY(vadd, ops): ops.vadd is not there
    ([f"{NAMESPACE}::vadd"], False),  # TORCH_LIBRARY_EXPAND(TORCH_EXTENSION_NAME, ops)
    ([f"{NAMESPACE}::vadd", "other::helper"], False),  # its own ops are there too
    ([], False),  # no op defined (impls of existing ops only)
])
def test_ops_registered_under_another_namespace_are_noted(
    capsys: pytest.CaptureFixture[str], registered: list[str], noted: bool
) -> None:
    from kernelforge.build import _driver

    _driver._note_other_namespaces(registered, NAMESPACE)
    out = capsys.readouterr().out
    if not noted:
        assert out == ""
        return
    assert out.startswith(compile_mod.NOTE_PREFIX), out
    assert "under 'vadd' (vadd::vadd, vadd::vmul)" in out, out
    assert f"not under the build's namespace {NAMESPACE}" in out, out
    assert "fix: register them with TORCH_LIBRARY_EXPAND(TORCH_EXTENSION_NAME, ops)" in out
