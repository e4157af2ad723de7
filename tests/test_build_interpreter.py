"""Builds for another Python environment's torch (``kernelforge build --python``)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
from kf_testutil import copy_example, fake_environment, write_noarch_project

from kernelforge.build.interpreter import PythonEnv, python_env
from kernelforge.errors import ToolchainError


def test_the_running_interpreter_is_not_foreign() -> None:
    assert python_env(None).foreign is False
    assert python_env(sys.executable).foreign is False


def test_a_missing_interpreter_is_an_error_naming_the_option(tmp_path: Path) -> None:
    with pytest.raises(ToolchainError, match=r"--python .*no such Python interpreter"):
        python_env(tmp_path / "nope" / "python")


def test_a_file_that_cannot_be_run_is_not_called_missing(tmp_path: Path) -> None:
    """`--python /etc/passwd`: the file exists, so the error says it is not executable
    rather than that there is no such interpreter."""
    text = tmp_path / "notes.txt"
    text.write_text("not a program\n")
    text.chmod(0o644)
    with pytest.raises(ToolchainError) as info:
        python_env(text)
    assert str(info.value) == (
        f"--python {text} is a file but not an executable one, so it cannot be the Python "
        "interpreter to build for; fix: give the path of the python executable of the "
        "environment whose torch you want to build for")


def test_a_bare_name_of_a_file_here_suggests_its_path(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """A bare name is looked up on PATH, not in the current directory: an executable of
    that name here is pointed at with ./NAME."""
    python = fake_environment(tmp_path / "env", "2.9.1+cu128", "12.8")
    monkeypatch.chdir(python.parent)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(ToolchainError, match=r"^--python python: no such Python interpreter "
                       r"on PATH, but there is a file python here; fix: did you mean "
                       r"--python \./python\?$"):
        python_env("python")
    assert python_env("./python").executable == str(python)


def test_a_relative_interpreter_path_is_kept_absolute(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The compile starts the interpreter from the build's work directory, where a path
    relative to where ``build`` was run names nothing."""
    python = fake_environment(tmp_path / "env", "2.9.1+cu128", "12.8")
    monkeypatch.chdir(tmp_path)
    env = python_env(Path("env") / "bin" / "python")
    assert env.executable == str(python) and env.foreign


def test_a_probe_answering_in_another_encoding_is_a_clear_error(tmp_path: Path) -> None:
    fake = tmp_path / "latin1-python"
    fake.write_bytes(b"#!/bin/sh\nprintf 'Fehler: ung\\374ltig\\n' >&2\nexit 1\n")
    fake.chmod(0o755)
    with pytest.raises(ToolchainError, match="did not answer like a Python interpreter "
                       "running kernelforge's probe \\(exit 1: Fehler: ung\ufffdltig\\)"):
        python_env(fake).torch_install()


def test_an_environment_folder_is_answered_with_its_interpreter(tmp_path: Path) -> None:
    python = fake_environment(tmp_path / "env", "2.9.1+cu128", "12.8")
    with pytest.raises(ToolchainError, match=rf"--python {re.escape(str(tmp_path / 'env'))} "
                       rf"is a folder, not an interpreter; fix: did you mean --python "
                       rf"{re.escape(str(python))}\?"):
        python_env(tmp_path / "env")


def test_another_program_is_not_taken_for_a_python_that_failed(tmp_path: Path) -> None:
    """`--python /bin/ls`: its own complaint is not passed off as the probe's failure."""
    with pytest.raises(ToolchainError, match=r"--python /bin/ls did not answer like a Python "
                       r"interpreter running kernelforge's probe \(exit 2: .*\); fix: give "
                       r"the path of the python executable"):
        python_env("/bin/ls").torch_install()

def test_a_foreign_interpreter_reports_its_own_torch(tmp_path: Path) -> None:
    python = fake_environment(tmp_path, "2.9.1+cu128", "12.8")
    env = python_env(python)
    assert env.foreign
    install = env.torch_install()
    assert install is not None
    assert install.version == "2.9.1+cu128" and install.torch_version == (2, 9, 1)
    assert install.cuda == "12.8" and install.backend_version == (12, 8)
    assert install.path == tmp_path / "site" / "torch" / "version.py"


def test_the_probe_agrees_with_this_process() -> None:
    from importlib import metadata

    from kernelforge.variants import detect_system, torch_install_facts

    foreign = PythonEnv(sys.executable, foreign=True)  # asked through a child process
    assert foreign.torch_install() == torch_install_facts()
    assert foreign.system() == detect_system()
    # the setuptools version the build fingerprint records, read in-process and asked
    installed = metadata.version("setuptools")
    assert PythonEnv(sys.executable).setuptools_version() == installed
    assert foreign.setuptools_version() == installed


def test_a_build_starts_a_foreign_interpreter_once_for_its_torch_and_setuptools(
        tmp_path: Path) -> None:
    """Every build asks a --python interpreter for its torch and then its setuptools:
    one start of it answers both (a start costs about what a no-op build's own work
    does), and the answers are those asked separately."""
    from importlib import metadata

    from kernelforge.variants import torch_install_facts

    starts = tmp_path / "starts"
    python = tmp_path / "python"
    python.write_text(f'#!/bin/sh\necho "$@" >> {starts}\nexec {sys.executable} "$@"\n')
    python.chmod(0o755)
    env = python_env(python)
    assert env.foreign
    assert env.torch_install() == torch_install_facts()
    assert env.setuptools_version() == metadata.version("setuptools")
    assert env.torch_install() == torch_install_facts()
    assert starts.read_text().splitlines() == ["-m kernelforge._probe build"]


def test_backends_are_judged_by_the_foreign_torch(tmp_path: Path) -> None:
    """A CUDA torch elsewhere makes the cuda backend buildable from here, whatever this
    process's torch is: the build goes on to ask that environment for its system facts
    (which the stub cannot answer) or stops for want of nvcc, never for want of CUDA."""
    from kernelforge.build import build_project
    from kernelforge.variants import torch_install_facts

    python = fake_environment(tmp_path / "env", "2.9.1+cu128", "12.8")
    project = copy_example(tmp_path / "relu")  # a build writes under the project
    local = torch_install_facts()
    if local is not None and local.cuda:
        pytest.skip("this torch has CUDA too, so the test could not tell them apart")
    with pytest.raises(ToolchainError) as info:
        build_project(project, backends=["cuda"], python=str(python), progress=lambda _: None)
    message = str(info.value)
    assert "no CUDA support" not in message
    assert "could not report its torch installation" in message or "nvcc" in message


def test_another_environment_of_the_same_base_python_is_foreign(tmp_path: Path) -> None:
    """Every virtual environment made from one base Python links to the same binary, yet
    has its own packages: a bare one is asked for its torch, which it does not have."""
    import venv

    from kernelforge.build import build_project

    venv.create(tmp_path / "bare", with_pip=False, symlinks=True)
    python = tmp_path / "bare" / "bin" / "python"
    env = python_env(python)
    assert env.foreign
    assert env.torch_install() is None
    project = Path(__file__).resolve().parents[1] / "src" / "kernelforge" / "examples" / "relu"
    with pytest.raises(ToolchainError, match=r"--python .*bare/bin/python: torch is not "
                       r"installed in that Python environment; fix: .* -m pip install torch"):
        build_project(project, backends=["cpu"], python=str(python), progress=lambda _: None)


def test_an_environment_without_setuptools_is_refused_before_the_compile(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A virtual environment given torch alone (here through a .pth file, as a stub):
    one line naming the interpreter and the fix, before any backend starts to compile,
    not a failed compile per backend. A pure-Python (noarch) build needs no setuptools."""
    import venv

    from kernelforge.cli import main

    venv.create(tmp_path / "env", with_pip=False, symlinks=True)
    python = tmp_path / "env" / "bin" / "python"
    (site,) = (tmp_path / "env" / "lib").glob("python*/site-packages")
    torch_only = tmp_path / "torch-only"
    (torch_only / "torch").mkdir(parents=True)
    (torch_only / "torch" / "__init__.py").write_text("")
    (torch_only / "torch" / "version.py").write_text(
        "__version__ = '2.13.0+cpu'\ncuda = None\nhip = None\n")
    (site / "torch_only.pth").write_text(f"{torch_only}\n")
    env = python_env(python)
    assert env.torch_install() is not None and env.setuptools_version() is None

    project = copy_example(tmp_path / "relu")
    assert main(["build", str(project), "--backend", "cpu", "--python", str(python)]) == 1
    out, err = capsys.readouterr()
    assert err == (f"error: --python {python} has torch but not setuptools, which torch's "
                   f"extension tooling needs to compile; fix: {python} -m pip install "
                   "setuptools\n"), err
    assert "building" not in out and not (project / ".kernelforge").exists(), out

    noarch = write_noarch_project(tmp_path / "na")
    assert main(["build", str(noarch), "--python", str(python)]) == 0
    assert (noarch / "build" / "torch-cpu").is_dir()


def test_only_kernelforge_is_put_on_a_foreign_path(tmp_path: Path) -> None:
    """Installed from a wheel, kernelforge sits in the host's site-packages next to the
    host's torch: the other environment must still see its own torch first."""
    import os
    import shutil
    import subprocess

    import kernelforge
    from kernelforge.variants import torch_install_facts

    site = tmp_path / "site-packages"
    shutil.copytree(Path(kernelforge.__file__).parent, site / "kernelforge",
                    ignore=shutil.ignore_patterns("__pycache__"))
    (site / "torch").mkdir()
    (site / "torch" / "__init__.py").write_text("")
    (site / "torch" / "version.py").write_text(
        "__version__ = '2.99.0+cpu'\ncuda = None\nhip = None\n")
    other = tmp_path / "other" / "python"  # another environment with this torch
    other.parent.mkdir()
    other.write_text(f'#!/bin/sh\nexec {sys.executable} "$@"\n')
    other.chmod(0o755)
    code = (f"import sys; sys.path.insert(0, {str(site)!r})\n"
            "from kernelforge.build import interpreter\n"
            f"env = interpreter.python_env({str(other)!r})\n"
            "print(env.foreign, env.torch_install().version, interpreter.PACKAGE_DIR)\n")
    environ = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    environ["XDG_CACHE_HOME"] = str(tmp_path / "cache")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=environ, cwd=tmp_path, check=False)
    assert proc.returncode == 0, proc.stderr
    local = torch_install_facts()
    assert local is not None
    assert proc.stdout.split() == ["True", local.version, str(site / "kernelforge")]


@pytest.mark.parametrize("answer", ["", "-m kernelforge._probe install",
                                    'echo \'{"version": "2.5"}\'', "echo '[1, 2]'"])
def test_an_interpreter_that_is_not_python_is_a_clear_error(tmp_path: Path,
                                                            answer: str) -> None:
    fake = tmp_path / "not-python"
    body = answer if answer.startswith("echo") else f"echo {answer}" if answer else "true"
    fake.write_text(f"#!/bin/sh\n{body}\n")
    fake.chmod(0o755)
    env = python_env(fake)
    with pytest.raises(ToolchainError, match=r"--python .*not-python did not answer like a "
                       r"Python interpreter.*fix: give the path of the python executable"):
        env.torch_install()


def test_build_with_a_non_python_interpreter_is_a_clean_cli_error(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from kernelforge.cli import main

    project = write_noarch_project(tmp_path / "na")
    assert main(["build", str(project), "--python", "/bin/true"]) != 0
    err = capsys.readouterr().err
    assert "did not answer like a Python interpreter" in err and "Traceback" not in err


def test_build_for_several_environments_goes_on_past_a_failed_one(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``--python`` repeats: each environment is built in turn, and one that fails is
    named, at the end too, without hiding what the others built."""
    from kernelforge.cli import main

    project = write_noarch_project(tmp_path / "na")
    assert main(["build", str(project), "--python", "/bin/true",
                 "--python", sys.executable]) == 1
    out, err = capsys.readouterr()
    assert "error: --python /bin/true did not answer like a Python" in err
    assert "the build failed for 1 of 2 environments: /bin/true" in err
    assert "torch-cpu: built in" in out and (project / "build" / "torch-cpu").is_dir()


def test_two_environments_building_one_variant_are_noted(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from kernelforge.cli import main

    project = write_noarch_project(tmp_path / "na")
    other = tmp_path / "other" / "python"  # another path to this environment
    other.parent.mkdir()
    other.write_text(f'#!/bin/sh\nexec {sys.executable} "$@"\n')
    other.chmod(0o755)
    assert main(["build", str(project), "--python", sys.executable, "--python", str(other),
                 "--python", sys.executable]) == 0
    out, err = capsys.readouterr()
    assert f"note: --python {other} builds torch-cpu again" in err
    assert out.count("torch-cpu: built in") == 2  # the repeated path is built once


def test_a_note_about_the_project_is_said_once_for_several_environments(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from kernelforge.cli import main

    project = write_noarch_project(tmp_path / "na")
    (project / "torch-ext" / "na" / "extra.txt").write_text("not packaged")
    other = tmp_path / "other" / "python"
    other.parent.mkdir()
    other.write_text(f'#!/bin/sh\nexec {sys.executable} "$@"\n')
    other.chmod(0o755)
    assert main(["build", str(project), "--python", sys.executable,
                 "--python", str(other)]) == 0
    out = capsys.readouterr().out
    notes = [line for line in out.splitlines() if line.startswith("note: ") and "extra.txt" in line]
    assert len(notes) == 1, out


@pytest.mark.parametrize(("torch_init", "said"), [
    # installed, but a library it links against is missing: no pip install of a module
    # name fixes that, and the cause is what the user needs to see
    ('raise ImportError("libcudnn.so.9: cannot open shared object file", name="torch._C")',
     "has torch installed, but importing it failed: libcudnn.so.9: cannot open shared object"),
    ("import torch._C", "has torch installed, but importing it failed: No module named "
     "'torch._C'"),
    ('raise ModuleNotFoundError("No module named \'torch\'", name="torch")',
     "cannot import torch, which builds need; fix: {python} -m pip install torch"),
])
def test_the_compile_drivers_import_error_names_its_cause(tmp_path: Path, torch_init: str,
                                                         said: str) -> None:
    import os
    import subprocess

    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "__init__.py").write_text(torch_init + "\n")
    (tmp_path / "spec.json").write_text("{}")
    source = str(Path(__file__).resolve().parents[1] / "src")
    environ = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), source])}
    proc = subprocess.run([sys.executable, "-m", "kernelforge.build._driver", "spec.json"],
                          capture_output=True, text=True, cwd=tmp_path, env=environ,
                          check=False)
    assert proc.returncode == 1
    assert proc.stderr.startswith(f"error: {sys.executable} "), proc.stderr
    assert said.format(python=sys.executable) in proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_torch_whose_import_fails_is_named_in_one_line(tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]
                                                        ) -> None:
    """`--python` of an environment whose torch is installed but does not import (a CUDA
    library it links against is missing): one error line with the exception and the fix,
    not the probe's traceback, whose frames are kernelforge's."""
    from kernelforge.cli import main

    python = fake_environment(tmp_path / "env", "2.13.0+cpu", None)
    (tmp_path / "env" / "site" / "torch" / "__init__.py").write_text(
        'raise OSError("libcudart.so.12: cannot open shared object file")\n')
    assert main(["build", str(copy_example(tmp_path / "relu")), "--backend", "cpu",
                 "--python", str(python)]) == 1
    err = capsys.readouterr().err
    assert err == (
        f"error: --python {python} has torch installed, but importing it failed: OSError: "
        f"libcudart.so.12: cannot open shared object file; fix that installation (or "
        f"reinstall it: {python} -m pip install --force-reinstall torch), or point --python "
        f"at another environment ({python} -c 'import torch' shows the whole error)\n"), err


def test_an_interpreter_that_crashes_is_not_called_another_program(tmp_path: Path) -> None:
    """A torch that segfaults on import leaves no traceback: it is a crash, named so.
    The first question, which imports no torch, is asked of an interpreter that crashes
    whatever it runs: that is said instead, with how to see why."""
    crashing = tmp_path / "python"
    crashing.write_text("#!/bin/sh\nkill -SEGV $$\n")
    crashing.chmod(0o755)
    with pytest.raises(ToolchainError, match=r"could not report its torch installation: it "
                       r"was killed by signal 11 \(torch crashed while importing\?\)"):
        python_env(crashing).system()
    with pytest.raises(ToolchainError) as info:
        python_env(crashing).torch_install()
    assert str(info.value) == (
        f"--python {crashing} cannot start: it was killed by SIGSEGV; fix: {crashing} -c "
        "pass shows the whole error (a PYTHONHOME or PYTHONPATH meant for another Python, "
        "or a damaged installation), or point --python at another environment")


def test_a_python_that_cannot_start_says_why_in_one_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A PYTHONHOME meant for another Python: the interpreter prints its whole path
    configuration, then the one line that matters; the error gives that line and the
    exception under it, not 2000 characters of configuration."""
    from kernelforge.cli import main

    broken = tmp_path / "python"
    broken.write_text(f"#!/bin/sh\nPYTHONHOME={tmp_path / 'nowhere'} exec {sys.executable} "
                      '"$@"\n')
    broken.chmod(0o755)
    project = write_noarch_project(tmp_path / "na")
    assert main(["build", str(project), "--python", str(broken)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(
        f"error: --python {broken} cannot start: Fatal Python error: "), err
    assert "(ModuleNotFoundError: No module named 'encodings'); fix: " in err, err
    assert err.count("\n") == 1 and "sys.path" not in err, err


def test_the_link_for_other_interpreters_follows_the_user_cache(tmp_path: Path,
                                                                monkeypatch) -> None:
    """A process that builds for another environment more than once (a notebook) while
    its user cache is cleaned, or XDG_CACHE_HOME set, in between: kernelforge is linked
    again where the cache is now, rather than the other interpreter being sent to a
    folder that is gone."""
    import shutil

    from kernelforge.build import interpreter

    foreign = PythonEnv(sys.executable, foreign=True)
    for cache in (tmp_path / "cache-a", tmp_path / "cache-b"):
        monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
        for _ in range(2):  # the second time after the cache was cleaned
            linked = interpreter.package_path()
            assert linked.is_relative_to(cache)
            assert (linked / "kernelforge").resolve() == interpreter.PACKAGE_DIR
            assert foreign.env({})["PYTHONPATH"] == str(linked)
            shutil.rmtree(cache)


def _link_folders_in_temporary(tmp_path: Path, monkeypatch) -> None:
    """The user cache unusable (``XDG_CACHE_HOME`` names a file), so that
    ``interpreter.package_path`` makes its link folder in ``tmp_path/tmp``, the temporary
    folder; none made yet in this process."""
    import tempfile

    from kernelforge.build import interpreter

    (tmp_path / "a-file").write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "a-file"))  # holds no folders
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    monkeypatch.setattr(interpreter, "_TEMPORARY", None, raising=False)  # none made yet


def test_the_temporary_link_folder_is_made_once_and_again_when_gone(tmp_path: Path,
                                                                     monkeypatch) -> None:
    """Where the user cache cannot be written, kernelforge is linked from a temporary
    folder: one per process, not one per build; one removed meanwhile (a cleaner of the
    temporary folder), or found to be a link, is replaced by a new one, not made again by
    its name, which another user could hold by then."""
    import shutil

    from kernelforge.build import interpreter

    _link_folders_in_temporary(tmp_path, monkeypatch)

    first = interpreter.package_path()
    assert first.parent == tmp_path / "tmp" and interpreter.package_path() == first
    assert list((tmp_path / "tmp").iterdir()) == [first]
    shutil.rmtree(first)
    second = interpreter.package_path()
    assert second != first and not first.exists()
    assert (second / "kernelforge").resolve() == interpreter.PACKAGE_DIR
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    shutil.rmtree(second)
    second.symlink_to(elsewhere, target_is_directory=True)  # the name taken meanwhile
    third = interpreter.package_path()
    assert third not in (first, second) and not (elsewhere / "kernelforge").exists()
    assert (third / "kernelforge").resolve() == interpreter.PACKAGE_DIR


def test_a_temporary_link_folder_another_user_holds_is_not_used(tmp_path: Path,
                                                                monkeypatch) -> None:
    """The temporary folder made before, found owned by someone else (removed by a
    cleaner, and its name taken by another user since), is not used again: the other
    interpreter would import what that user put there. A new one is made."""
    import os

    from kernelforge.build import interpreter

    _link_folders_in_temporary(tmp_path, monkeypatch)
    first = interpreter.package_path()
    assert interpreter.package_path() == first
    owner = first.stat().st_uid
    monkeypatch.setattr(os, "getuid", lambda: owner + 1)  # first is now another user's
    second = interpreter.package_path()
    assert second != first and second.parent == tmp_path / "tmp"
    assert (second / "kernelforge").resolve() == interpreter.PACKAGE_DIR
