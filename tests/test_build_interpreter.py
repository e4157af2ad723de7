"""Builds for another Python environment's torch (``kernelforge build --python``)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from kernelforge.build.interpreter import PythonEnv, python_env
from kernelforge.errors import ToolchainError


def fake_environment(root: Path, version: str, cuda: str | None) -> Path:
    """An interpreter whose torch is a stub with only ``torch/version.py``."""
    torch_dir = root / "site" / "torch"
    torch_dir.mkdir(parents=True)
    (torch_dir / "__init__.py").write_text("")
    (torch_dir / "version.py").write_text(
        f"__version__ = {version!r}\ncuda = {cuda!r}\nhip = None\ngit_version = 'abc'\n"
    )
    python = root / "bin" / "python"
    python.parent.mkdir()
    python.write_text(f'#!/bin/sh\nPYTHONPATH="{root / "site"}:$PYTHONPATH" '
                      f'exec {sys.executable} "$@"\n')
    python.chmod(0o755)
    return python


def test_the_running_interpreter_is_not_foreign() -> None:
    assert python_env(None).foreign is False
    assert python_env(sys.executable).foreign is False


def test_a_missing_interpreter_is_an_error_naming_the_option(tmp_path: Path) -> None:
    with pytest.raises(ToolchainError, match=r"--python .*no such Python interpreter"):
        python_env(tmp_path / "nope" / "python")


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
    from kernelforge.variants import detect_system, torch_install_facts

    foreign = PythonEnv(sys.executable, foreign=True)  # asked through a child process
    assert foreign.torch_install() == torch_install_facts()
    assert foreign.system() == detect_system()


def test_backends_are_judged_by_the_foreign_torch(tmp_path: Path) -> None:
    """A CUDA torch elsewhere makes the cuda backend buildable from here, whatever this
    process's torch is: the build goes on to ask that environment for its system facts
    (which the stub cannot answer) or stops for want of nvcc, never for want of CUDA."""
    from kernelforge.build import build_project
    from kernelforge.variants import torch_install_facts

    python = fake_environment(tmp_path / "env", "2.9.1+cu128", "12.8")
    project = Path(__file__).resolve().parents[1] / "src" / "kernelforge" / "examples" / "relu"
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
