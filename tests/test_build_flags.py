"""What reaches the compile and link besides build.toml's flags (nothing of the
interpreter's sysconfig, nothing of the shell's include and library paths), what a failed
compile shows, which project paths are refused, and what the work directory keeps.

Most tests run a stand-in for the driver (see ``test_build_progress.fake_driver``), so
they take well under a second; the one marked ``slow`` compiles a tiny project."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import textwrap
from dataclasses import replace
from pathlib import Path

import pytest
from test_build import BINDING, tiny_cpu_project
from test_build_progress import NAMESPACE, compile_with, fake_driver

from kernelforge.build import build_project
from kernelforge.build import compile as compile_mod
from kernelforge.build.compile import (
    COMPILER_VARIABLES,
    FLAG_VARIABLES,
    build_path,
    check_ninja_paths,
    compiler_environment,
    parse_diagnostics,
)
from kernelforge.build.interpreter import PythonEnv
from kernelforge.build.plan import BuildPlan, CompileGroup
from kernelforge.errors import BuildError, ToolchainError

#: The shell's include and library paths, which gcc and ld read on their own.
PATH_VARIABLES = ("CPATH", "C_INCLUDE_PATH", "CPLUS_INCLUDE_PATH", "LIBRARY_PATH",
                  "LD_RUN_PATH")

# -- Python's own flags and the shell's paths (item 1 and 11 of the review) ---------------

#: Run by the driver's interpreter at start-up (``sitecustomize``): gives its sysconfig
#: what Debian's, pyenv's or conda's Python hold, a define and a run path, the way
#: setuptools reads them, and leaves a mark that it ran.
POLLUTED_SYSCONFIG = """
import os, sysconfig
config = sysconfig.get_config_vars()
for key in ("CFLAGS", "OPT", "BASECFLAGS", "CCSHARED", "PY_CFLAGS"):
    config[key] = (config.get(key) or "") + " -DFROM_SYSCONFIG"
for key in ("LDSHARED", "LDCXXSHARED", "BLDSHARED"):
    config[key] = "c++ -shared -Wl,-rpath,/from/sysconfig"
open(os.environ["KF_SYSCONFIG_MARK"], "w").close()
"""

#: A kernel source that fails to compile if the sysconfig define or a CPATH header
#: reaches it.
GUARDED_SOURCE = textwrap.dedent("""
    #ifdef FROM_SYSCONFIG
    #error the interpreter's sysconfig flags reached the compile
    #endif
    #if __has_include("kf_from_cpath.h")
    #error CPATH reached the compile
    #endif
    int guarded() { return 1; }
""")


def _run_paths(extension: Path) -> list[str]:
    """The RUNPATH and RPATH entries of an ELF file."""
    out = subprocess.run(["readelf", "-d", str(extension)], capture_output=True, text=True,
                         check=True).stdout
    return [line for line in out.splitlines() if "RUNPATH" in line or "RPATH" in line]


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("readelf") is None, reason="needs readelf (binutils)")
def test_the_interpreters_flags_and_the_shells_paths_do_not_reach_the_build(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Only build.toml's flags and the builder's own compile and link the kernel: not
    the CFLAGS, CCSHARED and LDSHARED of the interpreter's sysconfig (which setuptools
    reads), nor CPATH, LIBRARY_PATH, LD_RUN_PATH and LDSHARED from the environment. Each
    would change the bytes (a define, a header, a RUNPATH of the build machine)."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(POLLUTED_SYSCONFIG)
    mark = tmp_path / "sysconfig-polluted"
    monkeypatch.setenv("KF_SYSCONFIG_MARK", str(mark))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        p for p in (str(site), os.environ.get("PYTHONPATH", "")) if p))
    shell_includes = tmp_path / "shell-include"
    shell_includes.mkdir()
    (shell_includes / "kf_from_cpath.h").write_text("#define FROM_CPATH 1\n")
    for name in ("CPATH", "C_INCLUDE_PATH", "CPLUS_INCLUDE_PATH"):
        monkeypatch.setenv(name, str(shell_includes))
    monkeypatch.setenv("LIBRARY_PATH", str(tmp_path))
    monkeypatch.setenv("LD_RUN_PATH", "/from/ld-run-path")
    monkeypatch.setenv("LDSHARED", "c++ -shared -Wl,-rpath,/from/ldshared")
    project = tiny_cpu_project(
        tmp_path / "clean", BINDING,
        """
        [kernel.k]
        backend = "cpu"
        depends = ["torch"]
        src = ["k/k.cpp"]
        """,
        {"k/k.cpp": GUARDED_SOURCE},
    )
    lines: list[str] = []
    (result,) = build_project(project, backends=["cpu"], progress=lines.append)
    assert mark.exists(), "the driver's interpreter did not run the sysconfig change"
    assert any("ignoring CPATH, C_INCLUDE_PATH, CPLUS_INCLUDE_PATH, LIBRARY_PATH, "
               "LD_RUN_PATH, LDSHARED from the environment" in ln for ln in lines), lines
    (extension,) = result.path.glob("*.abi3.so")
    assert _run_paths(extension) == []
    log = (project / ".kernelforge" / result.variant / "build.log").read_text()
    assert "FROM_SYSCONFIG" not in log and "/from/" not in log


def test_the_shells_include_and_library_paths_are_dropped_with_a_note(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """CPATH and the like are cleared for the compile, as CFLAGS is, so they neither
    change the binary nor need a place in the up-to-date check."""
    plan, python = fake_driver(tmp_path, """
        out("seen: " + ",".join(k for k in os.environ if k.endswith("_PATH") or k == "CPATH"))
        succeed()
    """)
    for name in PATH_VARIABLES:
        monkeypatch.setenv(name, str(tmp_path))
    lines: list[str] = []
    compile_with(tmp_path, plan, python, lines)
    assert f"  note: ignoring {', '.join(PATH_VARIABLES)} from the environment; put " \
           "compiler flags and include directories in build.toml (cxx-flags, cuda-flags, " \
           "hip-flags, include)" in lines
    seen = (tmp_path / "work" / "build.log").read_text().split("seen: ", 1)[1].split()[0]
    assert not set(seen.split(",")) & set(PATH_VARIABLES), seen
    assert set(PATH_VARIABLES) <= set(FLAG_VARIABLES)


def test_ldshared_is_dropped_and_gcc_s_own_paths_are_in_the_fingerprint() -> None:
    """The link is ``$CXX -shared`` whatever LDSHARED says (it carries flags, and newer
    setuptools ignore its program anyway); where gcc finds its own programs chooses the
    compiler, so a change of it rebuilds."""
    assert "LDSHARED" in FLAG_VARIABLES and "LDCXXSHARED" in FLAG_VARIABLES
    environ = {"LDSHARED": "gcc -shared", "GCC_EXEC_PREFIX": "/opt/gcc/lib/gcc/",
               "CXX": "g++", "CPATH": "/x"}
    assert compiler_environment(environ) == {"CXX": "g++",
                                             "GCC_EXEC_PREFIX": "/opt/gcc/lib/gcc/"}


# -- compile errors (item 3) --------------------------------------------------------------

@pytest.mark.parametrize(("line", "file", "number", "message"), [
    ("/p/copy (2)/k/k.cpp:8:8: error: expected ';' before 'oops'", "/p/copy (2)/k/k.cpp", 8,
     "expected ';' before 'oops'"),
    ("k (1).cu(12): error: identifier \"x\" is undefined", "k (1).cu", 12,
     'identifier "x" is undefined'),
    ("/a/b(2)/k.cu(7): catastrophic error: cannot open source file \"h (1).h\"",
     "/a/b(2)/k.cu", 7, 'cannot open source file "h (1).h"'),
    ("(x)/k.cpp:3: fatal error: h.h: No such file or directory", "(x)/k.cpp", 3,
     "h.h: No such file or directory"),
])
def test_a_path_with_parentheses_gives_a_diagnostic(line: str, file: str, number: int,
                                                    message: str) -> None:
    (diagnostic,) = parse_diagnostics(line)
    assert (diagnostic.file, diagnostic.line, diagnostic.message) == (file, number, message)


def test_lines_that_are_not_diagnostics_give_none() -> None:
    assert parse_diagnostics("\n".join([
        "c++: error: unrecognized command-line option '-mno-such-flag'",
        '  File "/p/_driver.py", line 54, in run_all',
        "RuntimeError: Error compiling objects for extension: ninja exited with status 1",
        "/p/k.cpp: In function 'void f()':",
        "/p/k.cpp:3:5: warning: unused variable 'x' (y)",
    ])) == []


#: The driver's traceback after a failure; none of it belongs in the error.
TRACEBACK = """
    "Traceback (most recent call last):",
    *[f'  File "/venv/setuptools/{i}.py", line {i}, in run' for i in range(40)],
    "RuntimeError: Error compiling objects for extension: ninja exited with status 1",
"""


def _error_of(tmp_path: Path, output: str) -> str:
    items = textwrap.dedent(output) + textwrap.dedent(TRACEBACK)
    plan, python = fake_driver(tmp_path, f"out({textwrap.indent(items, '    ')})\nsys.exit(1)\n")
    with pytest.raises(BuildError) as info:
        compile_with(tmp_path, plan, python, [])
    message = str(info.value)
    assert "Traceback" not in message and "File " not in message, message
    assert "RuntimeError" not in message, message
    assert message.endswith(f"full compiler output: {tmp_path / 'work' / 'build.log'}")
    return message


def test_a_compile_error_without_file_and_line_shows_the_compilers_words(
        tmp_path: Path) -> None:
    """An unknown option in cxx-flags: the compiler's line, not the driver's traceback."""
    message = _error_of(tmp_path, """
        f"[1/2] c++ -mno-such-flag -c {root}/k/k.cpp -o /obj/k.o",
        "FAILED: [code=1] /obj/k.o",
        f"c++ -mno-such-flag -c {root}/k/k.cpp -o /obj/k.o",
        "c++: error: unrecognized command-line option '-mno-such-flag'",
        f"[2/2] c++ -c {root}/torch-ext/torch_binding.cpp -o /obj/b.o",
        "ninja: build stopped: subcommand failed.",
    """)
    detail = message.split("\n")[1:-1]
    assert detail == ["  c++: error: unrecognized command-line option '-mno-such-flag'"]


def test_a_link_error_shows_the_linkers_words(tmp_path: Path) -> None:
    """setuptools runs the linker itself, after ninja: what came after ninja's steps."""
    message = _error_of(tmp_path, """
        f"[1/1] c++ -c {root}/k/k.cpp -o /obj/k.o",
        "/usr/bin/ld: cannot find -lmissing: No such file or directory",
        "collect2: error: ld returned 1 exit status",
    """)
    assert message.split("\n")[1:-1] == [
        "  /usr/bin/ld: cannot find -lmissing: No such file or directory",
        "  collect2: error: ld returned 1 exit status",
    ]


def test_the_driver_s_own_error_is_shown_when_nothing_else_is(tmp_path: Path) -> None:
    plan, python = fake_driver(tmp_path, """
        out("error: /venv/bin/python cannot import setuptools, which builds need")
        sys.exit(1)
    """)
    with pytest.raises(BuildError, match=r"failed after .*\n  error: /venv/bin/python "
                                         r"cannot import setuptools"):
        compile_with(tmp_path, plan, python, [])


# -- paths ninja cannot express (item 7) --------------------------------------------------

def _plan(root: Path, **fields: object) -> BuildPlan:
    plan = BuildPlan(root=root, variant="torch-cpu", backend="cpu", namespace=NAMESPACE,
                     module_id="demo_cpu_0123456", sources=(root / "torch-ext" / "b.cpp",))
    return replace(plan, **fields)


@pytest.mark.parametrize(("char", "said"), [
    (":", "':'"), ("$", "'$'"), ("|", "'|'"), ("\n", "a newline"), ("\r", "a carriage return"),
])
def test_a_project_path_ninja_cannot_express_is_refused_before_the_compile(
        tmp_path: Path, char: str, said: str) -> None:
    plan, python = fake_driver(tmp_path, """
        open(os.environ["KF_DRIVER_RAN"], "w").close()
        succeed()
    """)
    ran = tmp_path / "driver-ran"
    root = tmp_path / f"a{char}b" / "demo"
    plan = replace(plan, root=root, sources=(root / "torch-ext" / "b.cpp",),
                   env={"KF_DRIVER_RAN": str(ran)})
    with pytest.raises(BuildError) as info:
        compile_with(tmp_path, plan, python, [])
    assert str(info.value) == (
        f"the project path {str(root)!r} contains {said}, which the ninja files of torch's "
        f"extension tooling cannot express; fix: move or rename the project so that its "
        f"path has no {said}")
    assert not ran.exists()


@pytest.mark.parametrize("name", ["with space", "hash#", "it's", "ünï cödé", "copy (2)",
                                  "a=b", "semi;colon", 'quo"te', "back\\slash", "tab\tx"])
def test_paths_ninja_can_express_pass_the_check(tmp_path: Path, name: str) -> None:
    """Projects under these names build, and give the same bytes as anywhere else."""
    root = tmp_path / name / "demo"
    check_ninja_paths(_plan(root), root / ".kernelforge" / "torch-cpu")


def test_an_include_directory_may_hold_a_colon_but_not_a_dollar(tmp_path: Path) -> None:
    """An include directory is only a flag in torch's ninja files, where ``:`` and ``|``
    are plain characters; a source is a path of a build line, where they are not."""
    root = tmp_path / "demo"
    work = root / ".kernelforge" / "torch-cpu"
    group = CompileGroup("k", (root / "k" / "k.cpp",), include_dirs=(root / "inc:x|y",))
    check_ninja_paths(_plan(root, groups=(group,)), work)
    dollar = replace(group, include_dirs=(root / "inc$x",))
    with pytest.raises(BuildError, match=r"the include directory '.*/inc\$x' contains '\$'"
                                         r".*; fix: rename it \(and its mention in "
                                         r"build.toml\) without '\$'"):
        check_ninja_paths(_plan(root, groups=(dollar,)), work)
    colon = replace(group, sources=(root / "k" / "a:b.cpp",))
    with pytest.raises(BuildError, match=r"the source '.*/k/a:b.cpp' contains ':'"):
        check_ninja_paths(_plan(root, groups=(colon,)), work)
    torch_dir = tmp_path / "site$packages" / "torch"
    with pytest.raises(BuildError, match=r"the directory '.*/site\$packages/torch' contains "
                                         r"'\$'.*; fix: install it under a path without"):
        check_ninja_paths(_plan(root, prefix_maps=((torch_dir, "torch"),)), work)


# -- `$` in build.toml's flags ---------------------------------------------------------------

#: Kernel flags whose ``$`` ninja read as a variable (``$b``, ``${HOME}``: empty) or
#: refused (``$(``, a ``$`` that ends the flag), and a flag already written as ninja's
#: escape (``$$``).
DOLLAR_FLAGS = ['-DGREETING="a$b"', "-DPLAIN=x$y$$z", "-DBRACED=${HOME}$(pwd)", "-DTAIL=t$"]

#: A kernel source that puts what the flags defined into the extension, between markers.
DOLLAR_SOURCE = textwrap.dedent("""
    #define KF_TEXT(x) #x
    #define KF_STR(x) KF_TEXT(x)
    extern "C" const char kf_kernel_flags[] =
        "<kernel:" GREETING "|" KF_STR(PLAIN) "|" KF_STR(BRACED) "|" KF_STR(TAIL) ">";
""")


@pytest.mark.slow
def test_a_dollar_in_the_flags_reaches_the_compiler_as_written(tmp_path: Path) -> None:
    """torch's tooling writes flags into build.ninja as they are, where ``$`` starts a
    ninja variable: ``-DGREETING="a$b"`` compiled as ``"a"``. The build escapes it, as
    CMake's ninja files (Hugging Face's builder) do, for a kernel section's flags and for
    the binding's ([torch] cxx-flags) alike."""
    binding = BINDING + textwrap.dedent("""
        #define KF_TEXT(x) #x
        #define KF_STR(x) KF_TEXT(x)
        extern "C" const char kf_binding_flags[] = "<binding:" KF_STR(BINDING_VALUE) ">";
    """)
    project = tiny_cpu_project(
        tmp_path / "dollar", binding,
        f"""
        cxx-flags = ["-DBINDING_VALUE=$ORIGIN"]

        [kernel.k]
        backend = "cpu"
        depends = ["torch"]
        src = ["k/k.cpp"]
        cxx-flags = {DOLLAR_FLAGS!r}
        """,
        {"k/k.cpp": DOLLAR_SOURCE},
    )
    (result,) = build_project(project, backends=["cpu"], progress=lambda _: None)
    (extension,) = result.path.glob("*.abi3.so")
    binary = extension.read_bytes()
    assert b"<kernel:a$b|x$y$$z|${HOME}$(pwd)|t$>" in binary
    assert b"<binding:$ORIGIN>" in binary


def test_only_builds_whose_flags_hold_a_dollar_get_a_new_up_to_date_key(
        tmp_path: Path) -> None:
    """A build made before the escape compiled a flag's ``$`` away: such builds are
    compiled again, any other stays up to date (no term in its key)."""
    from kernelforge.build import _dollar_flags
    from kernelforge.manifest import load_manifest

    project = tiny_cpu_project(tmp_path / "keyed", BINDING, """
        [kernel.k]
        backend = "cpu"
        depends = ["torch"]
        src = ["k/k.cpp"]
        cxx-flags = ["-DA=1"]

        [kernel.g]
        backend = "cuda"
        depends = ["torch"]
        src = ["g/g.cu"]
        cuda-flags = ["-Xlinker=-rpath,$ORIGIN"]
        """, {"k/k.cpp": "", "g/g.cu": ""})
    toml = project / "build.toml"
    toml.write_text(toml.read_text().replace('backends = ["cpu"]', 'backends = ["cpu", "cuda"]'))
    manifest = load_manifest(toml)
    assert _dollar_flags("cpu", manifest) == {}
    assert _dollar_flags("cuda", manifest) == {"dollar-flags": 1}
    toml.write_text(toml.read_text().replace(
        'src = ["torch-ext/torch_binding.cpp"]',
        'src = ["torch-ext/torch_binding.cpp"]\ncxx-flags = ["-DX=$Y"]'))
    assert _dollar_flags("cpu", load_manifest(toml)) == {"dollar-flags": 1}


@pytest.mark.parametrize(("backend", "key", "flag"), [
    ("cpu", "cxx-flags", "-DX=a$"), ("cuda", "cxx-flags", "-DX=$$"),
    ("cuda", "cuda-flags", "-DX=$Y"), ("rocm", "hip-flags", "-DX=${Y}")])
def test_a_dollar_in_any_flag_of_a_backends_sections_is_in_its_key(
        tmp_path: Path, backend: str, key: str, flag: str) -> None:
    """Every list the driver escapes counts (a kernel section's ``cxx-flags`` and its
    ``cuda-flags`` or ``hip-flags``), for its own backend only."""
    from kernelforge.build import _dollar_flags
    from kernelforge.manifest import load_manifest

    project = tiny_cpu_project(tmp_path / "keyed", BINDING, f"""
        [kernel.k]
        backend = "{backend}"
        depends = ["torch"]
        src = ["k/k.cpp"]
        {key} = [{flag!r}]
        """, {"k/k.cpp": ""})
    toml = project / "build.toml"
    toml.write_text(toml.read_text().replace(
        'backends = ["cpu"]', 'backends = ["cpu", "cuda", "rocm"]'))
    manifest = load_manifest(toml)
    for other in ("cpu", "cuda", "rocm"):
        expected = {"dollar-flags": 1} if other == backend else {}
        assert _dollar_flags(other, manifest) == expected, other


def test_the_dollar_term_reaches_the_up_to_date_key(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """build_project puts the term in the key it looks up, for a cpu build whose flags
    hold a ``$`` and not for one without (stopped at the key, before anything compiles)."""
    import kernelforge.build as build_mod

    keys: list[dict[str, object]] = []

    class Stop(Exception):
        pass

    def fingerprint(data: dict[str, object]) -> str:
        keys.append(data)
        raise Stop

    monkeypatch.setattr(build_mod, "_fingerprint", fingerprint)
    for name, flags in (("plain", ["-DA=1"]), ("dollar", ["-DA=$B"])):
        project = tiny_cpu_project(tmp_path / name, BINDING, f"""
            [kernel.k]
            backend = "cpu"
            depends = ["torch"]
            src = ["k/k.cpp"]
            cxx-flags = {flags!r}
            """, {"k/k.cpp": ""})
        with pytest.raises(Stop):
            build_project(project, backends=["cpu"], progress=lambda _: None)
    assert [key.get("dollar-flags") for key in keys] == [None, 1]


def test_ninja_escaped_writes_each_dollar_of_every_flag_list_twice() -> None:
    """torch's tooling hands ``extra_postargs`` as a list or as a dict of lists (``cxx``,
    ``nvcc``, ``nvcc_dlink``): each string flag in each gets ``$$`` for ``$``, one that
    ends in ``$`` or holds ``$$`` already too; what is not a string is left as it is."""
    from kernelforge.build._driver import ninja_escaped

    assert ninja_escaped(["-DA=$B", "-DT=t$", "-DD=$$", "-O3"]) == [
        "-DA=$$B", "-DT=t$$", "-DD=$$$$", "-O3"]
    assert ninja_escaped(("-D$",)) == ["-D$$"]
    assert ninja_escaped({"cxx": ["-DA=$B"], "nvcc": ["-Xcompiler", "-DB=$C"],
                          "nvcc_dlink": ["-DL=$"]}) == {
        "cxx": ["-DA=$$B"], "nvcc": ["-Xcompiler", "-DB=$$C"], "nvcc_dlink": ["-DL=$$"]}
    assert ninja_escaped(["-DA=$B", None]) == ["-DA=$$B", None]
    assert ninja_escaped(None) is None


# -- ninja on the build's PATH ------------------------------------------------------------

def _ninja_nowhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """A caller's PATH and an environment's bin/ (where the ninja package would put it)
    that hold no ninja: the package uninstalled, a --python environment without it."""
    callers, env_bin = tmp_path / "callers-bin", tmp_path / "env-bin"
    callers.mkdir()
    env_bin.mkdir()
    monkeypatch.setenv("PATH", str(callers))
    monkeypatch.setattr(compile_mod, "_ninja_dirs", lambda python: [str(env_bin)])
    return callers, env_bin


def test_no_ninja_is_refused_before_the_compile(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """Without ninja, torch's extension tooling would fall back, without a word, to
    compiling one source at a time, and the driver could not list the headers outside
    the project the compile read, so an edit of one would pass as up to date."""
    plan, python = fake_driver(tmp_path, """
        open(os.environ["KF_DRIVER_RAN"], "w").close()
        succeed()
    """)
    ran = tmp_path / "driver-ran"
    plan = replace(plan, env={"KF_DRIVER_RAN": str(ran)})
    callers, env_bin = _ninja_nowhere(tmp_path, monkeypatch)
    with pytest.raises(ToolchainError) as info:
        compile_with(tmp_path, plan, python, [])
    assert str(info.value) == (
        f"ninja was not found on the build's PATH (searched {callers}, {env_bin}); without "
        "ninja torch's extension tooling compiles one source at a time and the build cannot "
        "tell which headers outside the project the compile read; fix: "
        f"{shlex.quote(sys.executable)} -m pip install ninja (into the environment that "
        "runs kernelforge), or put a ninja on PATH")
    assert not ran.exists()
    assert not (tmp_path / "work").exists()


def test_a_ninja_that_does_not_run_is_refused(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """torch decides with ``ninja --version``: one that fails there (a stale script, a
    binary for another machine) would make it fall back just the same."""
    _, env_bin = _ninja_nowhere(tmp_path, monkeypatch)
    broken = env_bin / "ninja"
    broken.write_text("#!/bin/sh\necho 'bad interpreter' >&2\nexit 126\n")
    broken.chmod(0o755)
    with pytest.raises(ToolchainError, match=(
            rf"^the ninja on the build's PATH, {re.escape(str(broken))}, does not run "
            r"\(exit status 126: bad interpreter\); .*pip install ninja")):
        build_path(PythonEnv(sys.executable))


def test_a_ninja_that_hangs_is_waited_for_once_in_a_build_run(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``kernelforge build --python A --python B`` with a ninja that never answers
    ``--version``: the first environment waits for it and fails; the next fails at once
    with the same error, saying it was not asked again, as for a compiler that hangs.
    Before, each environment waited 60 s for it. The next run asks it again."""
    from kernelforge.build import build_run, toolchain

    sleep = shutil.which("sleep")
    _, env_bin = _ninja_nowhere(tmp_path, monkeypatch)
    count = tmp_path / "starts"
    ninja = env_bin / "ninja"
    ninja.write_text(f"#!/bin/sh\necho started >> '{count}'\nexec {sleep} 30\n")
    ninja.chmod(0o755)
    monkeypatch.setattr(toolchain, "VERSION_TIMEOUT_S", 0.5)

    def starts() -> int:
        return len(count.read_text().splitlines()) if count.exists() else 0

    said = []
    with build_run():
        for env in ("a", "b"):
            with pytest.raises(ToolchainError) as err:
                build_path(PythonEnv(str(tmp_path / env / "bin" / "python"), foreign=True))
            said.append(str(err.value))
    assert starts() == 1
    assert said[0].startswith(f"the ninja on the build's PATH, {ninja}, does not run "
                              f"('{ninja} --version' did not end within 0.5 s); "), said[0]
    assert said[1] == said[0].replace(
        "did not end within 0.5 s",
        "was already found not to answer within 0.5 s earlier in this run (not asked again)")
    with pytest.raises(ToolchainError, match="did not end within 0.5 s"):
        build_path(PythonEnv(sys.executable))  # a run of its own: it may be fixed since
    assert starts() == 2


def test_a_ninja_that_runs_goes_after_the_callers_path(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    callers, env_bin = _ninja_nowhere(tmp_path, monkeypatch)
    ninja = env_bin / "ninja"
    ninja.write_text("#!/bin/sh\necho 1.11.1\n")
    ninja.chmod(0o755)
    assert build_path(PythonEnv(sys.executable)) == f"{callers}{os.pathsep}{env_bin}"


# -- compilers named relative to the current directory ------------------------------------

#: Values relative to the current directory (``{here}``) and what the compile, which
#: runs in the work directory, gets for them; a bare program name is a command on PATH.
RELATIVE_VALUES = {
    "CXX": ("./mycc", "{here}/mycc"),
    "CC": ("tools/gcc", "{here}/tools/gcc"),
    "NVCC_CCBIN": ("tools", "{here}/tools"),  # a folder, named by its bare name
    "AR": ("../ar", "{here}/../ar"),
    "CUDAHOSTCXX": ("g++", "g++"),
    "PYTORCH_NVCC": ("./ccache ./cuda/bin/nvcc --some-option",  # a command: every path
                     "{here}/ccache {here}/cuda/bin/nvcc --some-option"),
    "CUDA_HOME": ("cuda", "{here}/cuda"),
    "CUDA_PATH": ("./cuda", "{here}/cuda"),
    "ROCM_HOME": ("/opt/rocm", "/opt/rocm"),
    "ROCM_PATH": ("rocm/.", "{here}/rocm"),
    "GCC_EXEC_PREFIX": ("tc/lib/gcc/", "{here}/tc/lib/gcc/"),
    "COMPILER_PATH": ("tc/bin::/opt/tc/bin", "{here}/tc/bin:{here}:/opt/tc/bin"),
}


def test_compilers_named_relative_to_the_current_directory_reach_the_compile_absolute(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``CXX=./mycc kernelforge build .``: the compile runs in the work directory, where
    ./mycc is another file or none, so each variable naming a compiler, a toolkit or a
    folder of them reaches it read from the directory the build started in, as make and
    CMake read it; so does a relative PATH entry."""
    plan, python = fake_driver(tmp_path, """
        names = os.environ["KF_SEEN"].split()
        out("seen: " + json.dumps({name: os.environ.get(name) for name in names}))
        succeed()
    """)
    here = tmp_path / "here"
    (here / "tools").mkdir(parents=True)
    monkeypatch.chdir(here)
    for name, (value, _) in RELATIVE_VALUES.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("PATH", f"bin{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("KF_SEEN", " ".join([*RELATIVE_VALUES, "PATH"]))
    compile_with(tmp_path, plan, python, [])
    log = (tmp_path / "work" / "build.log").read_text()
    seen = json.loads(log.split("seen: ", 1)[1].splitlines()[0])
    assert seen.pop("PATH").startswith(f"{here / 'bin'}{os.pathsep}")
    assert seen == {name: absolute.format(here=here)
                    for name, (_, absolute) in RELATIVE_VALUES.items()}
    assert set(COMPILER_VARIABLES) <= set(seen)


def test_the_fingerprint_records_compilers_named_relative_to_the_current_directory_absolute(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``AR=./ar`` in another folder is another program: the up-to-date check keys it by
    the file it names."""
    (tmp_path / "tools").mkdir()
    monkeypatch.chdir(tmp_path)
    environ = {name: value for name, (value, _) in RELATIVE_VALUES.items()}
    assert compiler_environment(environ) == {
        name: RELATIVE_VALUES[name][1].format(here=tmp_path) for name in COMPILER_VARIABLES}


@pytest.mark.parametrize(("command", "compiled"), [
    ("ccache ./nvcc", "ccache <nvcc>"),
    ("./ccache  cuda/bin/nvcc -O2", "<ccache>  <cuda/bin/nvcc> -O2"),
    ("nvcc -ccbin ./gcc --x=./y", "nvcc -ccbin <gcc> --x=./y"),
    ("CCACHE_DIR=./cache ccache ./nvcc", "CCACHE_DIR=./cache ccache <nvcc>"),
    # bare names are commands on PATH; quoted words and ~ are the shell's to read
    ("ccache nvcc", None),
    ("""nvcc -Xcompiler '-I ./include' "./a b" ~/nvcc""", None),
])
def test_every_relative_path_in_pytorch_nvcc_reaches_the_compile_absolute(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: str,
        compiled: str | None) -> None:
    """``PYTORCH_NVCC`` is a command, which torch writes into its ninja files for a shell
    to run in the work directory: each word of it that names a file by a relative path
    is read from the directory the build started in, not only the first (``ccache
    ./nvcc`` ran ccache on a ./nvcc of the work directory), and quoted for the shell
    where that directory's name has a blank. Options and assignments stay as written."""
    here = tmp_path / "my project"
    here.mkdir()
    monkeypatch.chdir(here)
    expected = None if compiled is None else re.sub(
        r"<([^>]+)>", lambda m: shlex.quote(f"{here}/{m[1]}"), compiled)
    assert compiler_environment({"PYTORCH_NVCC": command}) == {
        "PYTORCH_NVCC": command if expected is None else expected}


def test_a_relative_path_entry_is_read_from_the_current_directory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    path = build_path(PythonEnv(sys.executable), f"bin{os.pathsep}{os.pathsep}/usr/bin")
    assert path.startswith(os.pathsep.join([str(tmp_path / "bin"), str(tmp_path),
                                            "/usr/bin", ""]))


@pytest.mark.slow
def test_a_build_with_a_relative_cxx_compiles_and_records_that_compiler(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``CXX=./mycc`` from the project folder: the build compiles and links with that
    file, and metadata.json names the compiler it is (a wrapper that says it is gcc
    99.1.0, compiling with the real c++)."""
    real = shutil.which("c++") or shutil.which("g++")
    if real is None:
        pytest.skip("needs a C++ compiler")
    project = tiny_cpu_project(tmp_path / "relcxx", BINDING, """
        [kernel.k]
        backend = "cpu"
        depends = ["torch"]
        src = ["k/k.cpp"]
        """, {"k/k.cpp": "int k() { return 1; }\n"})
    ran = tmp_path / "ran"
    wrapper = project / "mycc"
    wrapper.write_text(textwrap.dedent(f"""\
        #!/bin/sh
        case "$1" in
          --version) echo "g++ (GCC) 99.1.0"
                     echo "Copyright (C) 2022 Free Software Foundation, Inc."; exit 0;;
          -dumpfullversion) echo 99.1.0; exit 0;;
        esac
        echo "$0" >> {shlex.quote(str(ran))}
        exec {shlex.quote(real)} "$@"
        """))
    wrapper.chmod(0o755)
    monkeypatch.chdir(project)
    monkeypatch.setenv("CXX", "./mycc")
    (result,) = build_project(".", backends=["cpu"], progress=lambda _: None)
    metadata = json.loads((result.path / "metadata.json").read_text())
    assert metadata["provenance"]["toolchain"] == {"gcc": "99.1.0"}
    runs = ran.read_text().splitlines()
    assert len(runs) >= 3 and set(runs) == {str(wrapper)}  # two compiles and the link


# -- the work directory's extensions (item 9) ---------------------------------------------

#: Extensions earlier builds of this variant made (other uids), which a build removes.
EARLIER = ["_demo_cpu_1111111.abi3.so", "_demo_cpu_2222222_dirty.abi3.so",
           "_demo_cpu_0123456_dirty.abi3.so",
           "_demo_cpu_3333333.cpython-311-x86_64-linux-gnu.so"]
#: Files in lib/ that are not this builder's extensions of this variant, which it keeps.
OTHERS = ["_demo_cuda_1111111.abi3.so", "_demo_cpu_cpu_1111111.abi3.so",
          "_demo_cpu_xyz1234.abi3.so", "_demo_cpu_11111111.abi3.so",
          "_demo_cpu_1111111.abi3.so.bak", "x_demo_cpu_1111111.abi3.so", "notes.txt"]


def test_a_build_removes_the_extensions_of_earlier_uids_only(tmp_path: Path) -> None:
    plan, python = fake_driver(tmp_path, """
        if os.environ.get("KF_FAIL"):
            out("c++: error: no", "ninja: build stopped: subcommand failed.")
            sys.exit(1)
        succeed()
    """)
    lib = tmp_path / "work" / "lib"
    lib.mkdir(parents=True)
    for name in EARLIER + OTHERS:
        (lib / name).write_bytes(b"old")
    with pytest.raises(BuildError):  # a failed build removes nothing
        compile_with(tmp_path, replace(plan, env={"KF_FAIL": "1"}), python, [])
    assert sorted(p.name for p in lib.iterdir()) == sorted(EARLIER + OTHERS)
    built = compile_with(tmp_path, plan, python, [])
    assert built == lib / f"{NAMESPACE}.abi3.so"
    assert sorted(p.name for p in lib.iterdir()) == sorted([built.name, *OTHERS])


@pytest.mark.parametrize(("max_jobs", "jobs", "expected", "noted"), [
    ("3", None, "3", False),   # torch's variable caps the build when -j is not given
    ("3", 5, "5", False),      # -j wins
    ("lots", None, str(os.cpu_count() or 1), True),
    (None, None, str(os.cpu_count() or 1), False),
])
def test_max_jobs_from_the_environment_is_the_default_for_j(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, max_jobs: str | None, jobs: int | None,
    expected: str, noted: bool
) -> None:
    plan, python = fake_driver(tmp_path, """
        out("jobs " + os.environ["MAX_JOBS"])
        succeed()
    """)
    if max_jobs is None:
        monkeypatch.delenv("MAX_JOBS", raising=False)
    else:
        monkeypatch.setenv("MAX_JOBS", max_jobs)
    lines: list[str] = []
    from kernelforge.build.compile import compile_plan

    compile_plan(plan, work_dir=tmp_path / "work", verbose=True, progress=lines.append,
                 python=python, jobs=jobs)
    assert any(line.strip() == f"jobs {expected}" for line in lines), lines
    assert any("ignoring MAX_JOBS='lots'" in line for line in lines) is noted, lines


@pytest.mark.parametrize(("platform", "link"), [
    ("linux", ["g++", "-shared"]),
    ("darwin", ["g++", "-bundle", "-undefined", "dynamic_lookup"]),
])
def test_the_driver_sets_the_builders_own_commands(monkeypatch: pytest.MonkeyPatch,
                                                   platform: str, link: list[str]) -> None:
    """Only the commands setuptools' compiler knows are set; macOS links a bundle whose
    Python symbols the interpreter provides (a plain -shared would leave them undefined)."""
    from kernelforge.build import _driver

    class Compiler:
        compiler_type = "unix"
        executables = {"compiler_so": None, "linker_so": None, "linker_exe": None}

        def __init__(self) -> None:
            self.set: dict[str, list[str]] = {}

        def set_executable(self, key: str, value: list[str]) -> None:
            self.set[key] = value

    monkeypatch.setattr(_driver.sys, "platform", platform)
    compiler = Compiler()
    _driver._fixed_commands(compiler, {"CXX": "g++"})
    assert compiler.set == {"compiler_so": ["g++", "-fPIC"], "linker_so": link,
                            "linker_exe": ["g++"]}
