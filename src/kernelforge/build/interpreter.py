"""The Python environment a build targets: this one, or another interpreter with its own
torch (``kernelforge build --python PATH``), so one checkout builds variants for several
torch and CUDA/ROCm versions without Nix.

Facts about a foreign interpreter come from running :mod:`kernelforge._probe` in it,
with this package put on its path (the probe needs only the standard library).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kernelforge.errors import ToolchainError
from kernelforge.variants import SystemFacts, TorchInstall

#: The directory holding the ``kernelforge`` package, put on a foreign interpreter's path.
PACKAGE_ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class PythonEnv:
    """A Python interpreter whose torch a build compiles against."""

    executable: str
    foreign: bool = False

    def env(self, base: dict[str, str]) -> dict[str, str]:
        """``base`` plus what a child process of this interpreter needs to import kernelforge."""
        env = dict(base)
        if self.foreign:
            parts = [str(PACKAGE_ROOT), env.get("PYTHONPATH", "")]
            env["PYTHONPATH"] = os.pathsep.join(p for p in parts if p)
        return env

    def torch_install(self) -> TorchInstall | None:
        """The installed torch, read without importing it."""
        if not self.foreign:
            from kernelforge.variants import torch_install_facts

            return torch_install_facts()
        data = self._probe("install")
        if data is None:
            return None
        data["path"] = Path(data["path"])
        return TorchInstall(**_tuples(data))

    def system(self) -> SystemFacts:
        """The system facts as that interpreter's torch sees them (imports torch there)."""
        if not self.foreign:
            from kernelforge.variants import detect_system

            return detect_system()
        data = self._probe("system")
        if data is None:  # pragma: no cover - torch_install() is checked first
            raise ToolchainError(f"{self.executable}: torch is not installed there")
        return SystemFacts(**_tuples(data))

    def _probe(self, what: str) -> Any:
        cmd = [self.executable, "-m", "kernelforge._probe", what]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300,
                                  env=self.env(dict(os.environ)), check=False)
        except (OSError, subprocess.TimeoutExpired) as err:
            raise ToolchainError(f"cannot run the Python interpreter {self.executable}: {err}") \
                from err
        if proc.returncode != 0:
            raise ToolchainError(
                f"{self.executable} could not report its torch installation "
                f"(exit {proc.returncode}):\n{proc.stderr.strip()[-2000:]}"
            )
        return json.loads(proc.stdout.strip().splitlines()[-1])


def _tuples(data: dict[str, Any]) -> dict[str, Any]:
    """JSON lists back to the tuples the dataclasses hold."""
    return {k: tuple(v) if isinstance(v, list) else v for k, v in data.items()}


def python_env(python: str | os.PathLike[str] | None) -> PythonEnv:
    """The environment for ``--python`` (``None``: the running interpreter).

    Raises:
        ToolchainError: the interpreter does not exist.
    """
    if python is None:
        return PythonEnv(sys.executable)
    found = shutil.which(str(python))
    if found is None:
        raise ToolchainError(
            f"--python {python}: no such Python interpreter; give the path of the "
            "python executable of the environment whose torch you want to build for"
        )
    # Not the resolved file: every virtual environment made from one base Python links
    # to the same binary, yet each has its own site-packages (and so its own torch). Any
    # other path is asked for its facts, which is right even when it is this environment.
    same = os.path.abspath(found) == os.path.abspath(sys.executable)
    return PythonEnv(found, foreign=not same)
