"""The Python environment a build targets: this one, or another interpreter with its own
torch (``kernelforge build --python PATH``), so one checkout builds variants for several
torch and CUDA/ROCm versions without Nix.

Facts about a foreign interpreter come from running :mod:`kernelforge._probe` in it,
with this package put on its path (the probe needs only the standard library). Only the
``kernelforge`` package goes there, through a directory that holds nothing but a link to
it: the folder above the package is, in a regular install, this environment's
site-packages, whose torch and setuptools would shadow the other environment's own.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import os
import re
import shlex
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernelforge._userdirs import user_dir
from kernelforge.errors import KernelforgeError, ToolchainError
from kernelforge.variants import SystemFacts, TorchInstall

#: This ``kernelforge`` package, which a foreign interpreter imports (alone) from here.
PACKAGE_DIR = Path(__file__).resolve().parents[1]


def _link_package(directory: Path) -> Path:
    """``directory`` holding a ``kernelforge`` link to :data:`PACKAGE_DIR`, created
    atomically (a half-made link is never seen by another build)."""
    link = directory / "kernelforge"
    if os.path.realpath(link) == str(PACKAGE_DIR):
        return directory
    directory.mkdir(parents=True, exist_ok=True)
    staging = directory / f".kernelforge.{os.getpid()}"
    if staging.is_symlink():
        staging.unlink()
    os.symlink(PACKAGE_DIR, staging, target_is_directory=True)
    os.replace(staging, link)
    return directory


def package_path() -> Path:
    """A directory that holds only a link to this ``kernelforge`` package, for the front
    of a foreign interpreter's path: in the user cache directory, else (not writable) in a
    temporary directory removed at exit.

    Looked at on each call, which costs a few system calls: the user cache directory is
    the one ``XDG_CACHE_HOME`` and ``HOME`` name now, and a link removed since (the cache
    cleaned while a notebook keeps running) is made again, where a remembered answer
    would send the next build's interpreter to a folder that is gone.

    Raises:
        ToolchainError: neither can be written.
    """
    key = hashlib.sha256(str(PACKAGE_DIR).encode()).hexdigest()[:16]
    in_cache: Exception
    try:
        cached = user_dir("cache", "kernelforge's link for other interpreters",
                          "XDG_CACHE_HOME") / "pythonpath" / key
        return _link_package(cached)
    except (OSError, KernelforgeError) as err:  # not writable; no home directory
        in_cache = err
    try:
        return _link_package(_temporary_directory())
    except OSError as err:
        raise ToolchainError(
            f"cannot make kernelforge importable by another Python interpreter: {in_cache}; "
            f"and in a temporary directory: {err}; fix: make the user cache directory or "
            "the temporary directory writable"
        ) from err


#: The temporary directory :func:`package_path` fell back to in this process, if any.
_TEMPORARY: Path | None = None


def _temporary_directory() -> Path:
    """A temporary directory of this process, removed at exit: the one made before while
    it is still there and this user's, else a new one. One removed (by a cleaner of the
    temporary folder) is not made again by its name, which another user may have taken
    meanwhile, so that the interpreter does not import from a folder someone else holds.
    """
    global _TEMPORARY
    if _TEMPORARY is not None and _own_directory(_TEMPORARY):
        return _TEMPORARY
    made = Path(tempfile.mkdtemp(prefix="kernelforge-pythonpath-"))
    atexit.register(shutil.rmtree, made, ignore_errors=True)
    _TEMPORARY = made
    return made


def _own_directory(path: Path) -> bool:
    """Whether ``path`` is a directory (not a link to one) that this user owns."""
    try:
        st = path.lstat()
    except OSError:
        return False
    getuid = getattr(os, "getuid", None)  # no owners to compare on Windows
    return stat.S_ISDIR(st.st_mode) and (getuid is None or st.st_uid == getuid())


@dataclass(frozen=True)
class PythonEnv:
    """A Python interpreter whose torch a build compiles against."""

    executable: str
    foreign: bool = False
    #: What the probe answered this object, by question: a foreign interpreter is started
    #: once for its torch and setuptools (:meth:`_build_facts`), which a build asks one
    #: after the other.
    _answers: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    def env(self, base: dict[str, str]) -> dict[str, str]:
        """``base`` plus what a child process of this interpreter needs to import kernelforge."""
        env = dict(base)
        if self.foreign:
            parts = [str(package_path()), env.get("PYTHONPATH", "")]
            env["PYTHONPATH"] = os.pathsep.join(p for p in parts if p)
        return env

    def torch_install(self) -> TorchInstall | None:
        """The installed torch, read without importing it."""
        if not self.foreign:
            from kernelforge.variants import torch_install_facts

            return torch_install_facts()
        data = self._build_facts()["install"]
        if data is None:
            return None
        try:
            data = {**data, "path": Path(data["path"])}
            return TorchInstall(**_tuples(data))
        except (KeyError, TypeError, ValueError) as err:
            raise self._not_python(f"unexpected answer: {err}") from err

    def setuptools_version(self) -> str | None:
        """The version of setuptools there (``None``: not installed).

        Raises:
            ToolchainError: the interpreter could not be asked.
        """
        if not self.foreign:
            from importlib import metadata

            try:
                return metadata.version("setuptools")
            except metadata.PackageNotFoundError:
                return None
        version = self._build_facts()["setuptools"]
        return version if isinstance(version, str) else None

    def _build_facts(self) -> dict[str, Any]:
        """A foreign interpreter's torch installation (``"install"``) and setuptools
        version (``"setuptools"``), from one probe asked once by this object: starting
        the interpreter costs about as much as a no-op build's own work."""
        data = self._answers.get("build")
        if data is None:
            data = self._probe("build")
            if data is None or not {"install", "setuptools"} <= data.keys():
                raise self._not_python(f"unexpected answer: {data!r}"[:500])
            self._answers["build"] = data
        return data

    def system(self) -> SystemFacts:
        """The system facts as that interpreter's torch sees them (imports torch there)."""
        if not self.foreign:
            from kernelforge.variants import detect_system

            return detect_system()
        data = self._probe("system")
        if data is None:  # pragma: no cover - torch_install() is checked first
            raise ToolchainError(f"{self.executable}: torch is not installed there")
        try:
            return SystemFacts(**_tuples(data))
        except (KeyError, TypeError, ValueError) as err:
            raise self._not_python(f"unexpected answer: {err}") from err

    def _probe(self, what: str) -> Any:
        cmd = [self.executable, "-m", "kernelforge._probe", what]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, errors="replace",
                                  timeout=300, env=self.env(dict(os.environ)), check=False)
        except (OSError, subprocess.TimeoutExpired) as err:
            raise ToolchainError(f"cannot run the Python interpreter {self.executable}: {err}") \
                from err
        if proc.returncode != 0:
            said = proc.stderr.strip()
            if proc.returncode < 0 and what == "system":  # torch is imported for this one
                raise ToolchainError(
                    f"{self.executable} could not report its torch installation: it was "
                    f"killed by signal {-proc.returncode} (torch crashed while importing?)"
                    + (f":\n{said[-2000:]}" if said else ""))
            if proc.returncode < 0 or (_FATAL in said and what != "system"):
                raise self._cannot_start(proc.returncode, said)
            if "Traceback (most recent call last)" not in said and "No module named" not in said:
                # no Python error at all: another program (`--python /bin/ls`)
                last = said.splitlines()[-1][-300:] if said else "no output"
                raise self._not_python(f"exit {proc.returncode}: {last}")
            broken = _torch_import_error(said)
            if broken is not None:
                python = shlex.quote(self.executable)
                raise ToolchainError(
                    f"--python {self.executable} has torch installed, but importing it "
                    f"failed: {broken}; fix that installation (or reinstall it: {python} -m "
                    "pip install --force-reinstall torch), or point --python at another "
                    f"environment ({python} -c 'import torch' shows the whole error)")
            raise ToolchainError(
                f"{self.executable} could not report its torch installation "
                f"(exit {proc.returncode}):\n{said[-2000:]}"
            )
        lines = proc.stdout.strip().splitlines()
        try:
            data = json.loads(lines[-1])
        except (IndexError, ValueError):
            tail = (proc.stdout.strip() or proc.stderr.strip() or "no output")[-500:]
            raise self._not_python(f"it printed: {tail}") from None
        if data is not None and not isinstance(data, dict):
            raise self._not_python(f"it printed: {lines[-1][-500:]}")
        return data

    def _cannot_start(self, code: int, said: str) -> ToolchainError:
        """The error for an interpreter that dies before it runs any of kernelforge's
        probe, which reads files only: a crash (``code`` < 0), or Python's own ``Fatal
        Python error`` (a ``PYTHONHOME`` of another Python), whose report of its
        configuration would bury the one line that says why."""
        if code < 0:
            why = f"it was killed by {_signal_name(-code)}"
        else:
            lines = said.splitlines()
            at = next(i for i, line in enumerate(lines) if line.startswith(_FATAL))
            cause = next((line for line in lines[at + 1:] if line and not line[0].isspace()
                          and "Error" in line.split(":", 1)[0]), "")
            why = lines[at][:300] + (f" ({cause[:300]})" if cause else "")
        python = shlex.quote(self.executable)
        return ToolchainError(
            f"--python {self.executable} cannot start: {why}; fix: {python} -c pass shows "
            "the whole error (a PYTHONHOME or PYTHONPATH meant for another Python, or a "
            "damaged installation), or point --python at another environment")

    def _not_python(self, why: str) -> ToolchainError:
        return ToolchainError(
            f"--python {self.executable} did not answer like a Python interpreter running "
            f"kernelforge's probe ({why}); fix: give the path of the python executable of "
            "the environment whose torch you want to build for"
        )


#: How Python says it could not start (an unusable standard library, say).
_FATAL = "Fatal Python error: "


def _signal_name(number: int) -> str:
    """``SIGSEGV`` for 11, and so on; ``signal N`` for a number without a name here."""
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _torch_import_error(said: str) -> str | None:
    """The exception, in one line, of a probe whose ``import torch`` failed (``OSError:
    libcudart.so.12: cannot open shared object file``), or ``None`` for another failure:
    the traceback says nothing the exception does not, and buries it at its end."""
    if re.search(r"^\s+import torch\s*$", said, re.MULTILINE) is None:
        return None
    last = [line for line in said.splitlines() if line.strip() and not line[0].isspace()]
    return last[-1][-500:] if last else None


def _tuples(data: dict[str, Any]) -> dict[str, Any]:
    """JSON lists back to the tuples the dataclasses hold."""
    return {k: tuple(v) if isinstance(v, list) else v for k, v in data.items()}


def python_env(python: str | os.PathLike[str] | None) -> PythonEnv:
    """The environment for ``--python`` (``None``: the running interpreter).

    Raises:
        ToolchainError: the interpreter does not exist, or is a folder or a file that
            cannot be run.
    """
    if python is None:
        return PythonEnv(sys.executable)
    found = shutil.which(str(python))
    if found is None:
        fix = ("give the path of the python executable of the environment whose torch you "
               "want to build for")
        if Path(python).is_dir():  # an environment's folder
            inside = [p for p in (Path(python) / "bin" / "python", Path(python) / "python.exe",
                                  Path(python) / "Scripts" / "python.exe") if p.is_file()]
            fix = f"did you mean --python {shlex.quote(str(inside[0]))}?" if inside else fix
            raise ToolchainError(f"--python {python} is a folder, not an interpreter; fix: {fix}")
        if Path(python).is_file():
            if os.access(python, os.X_OK):  # a bare name is looked up on PATH only
                raise ToolchainError(
                    f"--python {python}: no such Python interpreter on PATH, but there is "
                    f"a file {python} here; fix: did you mean --python "
                    f"{shlex.quote(os.path.join('.', python))}?")
            raise ToolchainError(
                f"--python {python} is a file but not an executable one, so it cannot be "
                f"the Python interpreter to build for; fix: {fix}")
        raise ToolchainError(f"--python {python}: no such Python interpreter; fix: {fix}")
    # Not the resolved file: every virtual environment made from one base Python links
    # to the same binary, yet each has its own site-packages (and so its own torch). Any
    # other path is asked for its facts, which is right even when it is this environment.
    # Absolute: the compile runs it from the build's work directory.
    found = os.path.abspath(found)
    same = found == os.path.abspath(sys.executable)
    return PythonEnv(found, foreign=not same)
