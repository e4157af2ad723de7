"""Compile one build plan into an abi3 extension, showing progress and compiler errors."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import queue
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import IO

from kernelforge.build.interpreter import PythonEnv
from kernelforge.build.plan import BuildPlan
from kernelforge.build.toolchain import absolute_environment, ask_tool
from kernelforge.errors import BuildError, ToolchainError

# gcc/clang: "file:line:col: error: msg"; nvcc/cicc: "file(line): error: msg". A path
# may hold parentheses ("copy (2)/k.cu(12): error: ..."): nvcc's "(line)" is the one that
# the ": error" follows, which the shortest file part finds.
_DIAGNOSTIC = re.compile(
    r"^(?P<file>[^\s:][^:]*?)(?::(?P<line>\d+)(?::\d+)?|\((?P<line2>\d+)\)):\s*"
    r"(?P<kind>fatal error|error|catastrophic error)\b:?\s*(?P<msg>.*)$"
)
_NINJA_STEP = re.compile(r"^\[(\d+)/(\d+)\]\s+(.*)$")
# Where the driver's Python traceback begins: what the compiler said comes before it.
_TRACEBACK = "Traceback (most recent call last):"
#: Lines of compiler output an error shows when none of them has a file and line.
SHOWN_LINES = 25
# How the driver's output says the build was interrupted (Ctrl-C) rather than failed:
# ninja's own message, its exit status as the driver reports it (128 + SIGINT), a
# compiler's as ninja or setuptools reports it, gcc's word for a compiler killed by
# SIGINT, or the traceback of a KeyboardInterrupt.
_INTERRUPTED = re.compile(
    r"^(?:ninja: build stopped: interrupted by user\b"
    r"|.*\bexit(?:ed with)? (?:status|code) 130\b"
    r"|FAILED: \[code=130\]"
    r"|.*: Interrupt signal terminated program\b"
    r"|KeyboardInterrupt\b)"
)

#: Seconds without a progress line after which the build says it is still compiling.
#: Output to a pipe, ninja prints a step's ``[n/N]`` line when the step has finished, so
#: a long compile (minutes, for CUDA) would otherwise show nothing at all.
HEARTBEAT_S = 25.0

#: Seconds a step's line waits for the next line, which says whether the step failed
#: (ninja follows a failed step's line with ``FAILED: <output>``).
FAILED_WAIT_S = 0.5

#: Seconds the child and what it started are given to end when asked to (an interrupt,
#: an error here), before they are killed.
STOP_WAIT_S = 10.0


@dataclass(frozen=True)
class Diagnostic:
    """A compiler error pointing at a source location."""

    file: str
    line: int
    message: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: error: {self.message}"


def parse_diagnostics(log: str) -> list[Diagnostic]:
    """Extract ``file:line: error`` diagnostics from compiler output (gcc, clang, nvcc)."""
    seen: set[tuple[str, int, str]] = set()
    out: list[Diagnostic] = []
    for raw in log.splitlines():
        m = _DIAGNOSTIC.match(raw.strip())
        if not m:
            continue
        key = (m["file"], int(m["line"] or m["line2"]), m["msg"].strip())
        if key not in seen:
            seen.add(key)
            out.append(Diagnostic(*key))
    return out


def _compiler_lines(lines: list[str]) -> list[str]:
    """What the compiler, the linker or ninja said about a failure that gave no
    ``file:line`` diagnostic (an unknown option, a missing library), for the error
    message: the output of each step ninja reports as ``FAILED:``, after the command it
    echoes, with ninja's own errors; else, when ninja did not fail (setuptools runs the
    linker itself), what came after ninja's last step. Never the driver's traceback,
    which follows and says only that ninja or the linker failed."""
    own = [ln.rstrip() for ln in lines]
    if _TRACEBACK in own:
        own = own[:own.index(_TRACEBACK)]
    shown = [ln for ln in own if ln.startswith("ninja: error:")]
    i = 0
    while i < len(own):
        if not own[i].startswith("FAILED:"):
            i += 1
            continue
        i += 2  # FAILED: <outputs>, then the step's command line
        while i < len(own) and not (_NINJA_STEP.match(own[i]) or
                                    own[i].startswith(("FAILED:", "ninja: "))):
            shown.append(own[i])
            i += 1
    if not shown:
        last_step = max((i for i, ln in enumerate(own) if _NINJA_STEP.match(ln)), default=-1)
        # no step at all: the driver failed before ninja ran, and what it raised says why
        shown = (_raised(lines) if last_step < 0 else []) or own[last_step + 1:]
    shown = [ln for ln in shown if ln.strip()]
    if not shown:  # the driver failed before any of that: its own last words
        shown = [ln.rstrip() for ln in lines if ln.strip()][-SHOWN_LINES:]
    if len(shown) > SHOWN_LINES:
        shown = shown[:SHOWN_LINES] + [f"... and {len(shown) - SHOWN_LINES} more lines"]
    return shown


def _raised(lines: list[str]) -> list[str]:
    """The exception that ended the driver, as its last traceback ends with it
    (``OSError: CUDA_HOME environment variable is not set. ...``, a message of several
    lines whole); none when it wrote no traceback. The frames above it are the workings
    of setuptools and torch's extension tooling, which the log keeps."""
    own = [ln.rstrip() for ln in lines]
    if _TRACEBACK not in own:
        return []
    start = len(own) - own[::-1].index(_TRACEBACK)
    # the frames are indented; the exception starts at the first line that is not
    first = next((i for i in range(start, len(own)) if own[i] and not own[i][0].isspace()),
                 len(own))
    return [ln for ln in own[first:] if ln.strip()]


def _describe_step(command: str, root: Path, *, failed: bool = False) -> str:
    """Turn the command line of a finished ninja step into 'compiled <relative source>' /
    'linked', or, for a step that ``failed``, 'failed to compile <relative source>' /
    'failed to link'. (Writing to a pipe, ninja prints a step when it has finished, not
    when it starts.)"""
    # ninja quotes $in when it holds spaces: '-c '/a dir/k.cpp' -o ...'
    m = re.search(r"\s-c\s+(?:-c\s+)?('[^']*'|\"[^\"]*\"|\S+)\s+-o\s", command)
    if m:
        src = Path(m.group(1).strip("'\""))
        name = src.relative_to(root) if src.is_relative_to(root) else src
        return f"failed to compile {name}" if failed else f"compiled {name}"
    if " -shared" in command or "-o " in command:
        return "failed to link" if failed else "linked"
    program = command.split(" ", 1)[0]
    return f"{program} failed" if failed else f"ran {program}"


def _still_compiling(variant: str, elapsed: float, done: int, total: int | None) -> str:
    """The heartbeat line: how long the compile has run and how far it is."""
    if total is None:  # ninja gives the number of steps with the first it finishes
        return f"  still compiling {variant}: {elapsed:.0f}s, no step finished yet"
    # ninja compiles; setuptools links once ninja is done
    after = ", linking" if done == total else ""
    return (f"  still compiling {variant}: {elapsed:.0f}s, {done} of {total} "
            f"step{'' if total == 1 else 's'} done{after}")


def _killed_by(code: int) -> str | None:
    """The signal other than SIGINT that ended the child (``SIGTERM``, ``SIGKILL``, ...),
    by its exit status (negative, or 128 + the signal as a shell reports it)."""
    number = -code if code < 0 else code - 128 if 128 < code < 160 else 0
    if number <= 0 or number == signal.SIGINT:
        return None
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _was_interrupted(code: int, lines: list[str]) -> bool:
    """Whether the child ended because of an interrupt (Ctrl-C) rather than an error: it
    died of SIGINT or exited with 130 (128 + SIGINT), or its output says that ninja, a
    compiler or the driver itself was interrupted. A child that another signal ended
    (SIGTERM from a time limit or a job scheduler, after which ninja also says
    "interrupted by user") was not interrupted: it failed."""
    if code in (-signal.SIGINT, 128 + signal.SIGINT):
        return True
    if _killed_by(code) is not None:
        return False
    return any(_INTERRUPTED.match(line.strip()) for line in lines)


class _Child:
    """The driver process, its output (stdout and stderr) read line by line on a thread,
    so that the wait for the next line can time out (for the heartbeat).

    The driver runs in a session (so a process group) of its own, with ninja and the
    compilers it starts; Ctrl-C at a terminal reaches this process alone. Leaving the
    ``with`` block before the output ended (an exception here, KeyboardInterrupt
    included) sends SIGTERM to that group, which ninja passes on to the compilers, then
    SIGKILL after :data:`STOP_WAIT_S` to what is left, and waits for the driver and for
    the end of the output, so neither a process nor the reader thread outlives the block.
    """

    def __init__(self, cmd: list[str], *, cwd: Path, env: dict[str, str]) -> None:
        # None marks the end of the output
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._reader = threading.Thread(target=self._read, name="kernelforge-compile-output",
                                        daemon=True)
        self.proc = subprocess.Popen(
            cmd,
            cwd=cwd,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
            start_new_session=True,  # a process group of its own, see above
        )
        try:
            if self.proc.stdout is None:  # pragma: no cover - Popen with PIPE always sets it
                raise BuildError("could not read the compiler's output")
            self._stdout: IO[str] = self.proc.stdout
            self._reader.start()
        except BaseException:
            self._stop()
            raise

    def _read(self) -> None:
        try:
            for line in self._stdout:
                self._lines.put(line)
        except (OSError, ValueError) as err:
            # The pipe closed under the reader (a stop) or failed: either way the output
            # ends here, and the log and the error message say so rather than nothing.
            self._lines.put(f"kernelforge: the compiler's output ended early ({err})\n")
        finally:
            self._lines.put(None)

    def next_line(self, timeout: float) -> str | None:
        """The next line of output; ``None`` at its end.

        Raises:
            queue.Empty: no line came within ``timeout`` seconds.
        """
        return self._lines.get(timeout=max(timeout, 0.0))

    def _running(self) -> bool:
        """Whether the driver, or anything holding its output open (ninja), runs."""
        return self.proc.poll() is None or self._reader.is_alive()

    def _signal(self, signum: int) -> None:
        # The group outlives the driver while ninja runs, and its id is not reused then.
        killpg = getattr(os, "killpg", None)
        try:
            if killpg is not None:
                killpg(self.proc.pid, signum)
            else:  # pragma: no cover - not POSIX: no process groups, the driver alone
                self.proc.terminate() if signum == signal.SIGTERM else self.proc.kill()
        except ProcessLookupError:  # the group has ended already: nothing left to signal
            pass

    def _wait(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return
        if self._reader.ident is not None:  # started
            self._reader.join(timeout=max(deadline - time.monotonic(), 0.0))

    def _stop(self) -> None:
        """End the driver and what it started, if they run: SIGTERM, then SIGKILL."""
        if not self._running():
            return
        try:
            self._signal(signal.SIGTERM)
            self._wait(STOP_WAIT_S)
        except KeyboardInterrupt:  # a second Ctrl-C: do not wait any longer
            pass
        finally:
            if self._running():
                self._signal(signal.SIGKILL)
                self._wait(STOP_WAIT_S)

    def __enter__(self) -> _Child:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._stop()
        if not self._reader.is_alive():
            self._stdout.close()


class _Terminated(BaseException):
    """SIGTERM or SIGHUP arrived while the compile ran (see :func:`_ended_like_an_interrupt`)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


@contextlib.contextmanager
def _ended_like_an_interrupt() -> Iterator[None]:
    """While the compile runs, SIGTERM and SIGHUP (a time limit, a cancelled CI job, a
    closed terminal) leave through the ``with _Child`` block, as Ctrl-C does, so that the
    compilers stop too: they run in a session of their own, which a signal to this
    process alone does not reach, and the default action would leave them running. The
    signal is then delivered again with its default action, so the process ends by it as
    it would have (no caller can take it for an exception to handle). Only where the
    program has not chosen a handler of its own, and only in the main thread."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def end(signum: int, frame: object) -> None:
        raise _Terminated(signum)

    chosen = {}
    for signum in (getattr(signal, "SIGTERM", None), getattr(signal, "SIGHUP", None)):
        if signum is not None and signal.getsignal(signum) is signal.SIG_DFL:
            chosen[signum] = signal.signal(signum, end)
    ended: int | None = None
    try:
        yield
    except _Terminated as stop:
        ended = stop.signum
    finally:
        for signum, handler in chosen.items():
            signal.signal(signum, handler)
    if ended is not None:
        signal.raise_signal(ended)  # the default action again: the process ends here
        raise SystemExit(128 + ended)  # pragma: no cover - not reached


def _ninja_dirs(python: PythonEnv) -> list[str]:
    """Where ninja lives when installed from PyPI, so the build finds it even when the
    virtual environment is not activated (torch looks for ``ninja`` on PATH)."""
    dirs = [os.path.dirname(python.executable), os.path.dirname(sys.executable)]
    try:
        import ninja  # the PyPI package ships the binary
    except ImportError:
        return dirs
    bin_dir = getattr(ninja, "BIN_DIR", None)
    return [str(bin_dir), *dirs] if bin_dir else dirs


def build_path(python: PythonEnv, environ_path: str | None = None) -> str:
    """The ``PATH`` the compile runs with: the caller's (``environ_path``, default
    ``$PATH``) first, so that the compilers the build runs are the ones the up-to-date
    check and the metadata name (``find_cxx`` reads the caller's ``PATH``), not a ``c++``
    that an environment's ``bin/`` directory happens to hold; then where ninja lives.
    Relative entries are made absolute: read from the current directory, as the lookups
    read them, not from the work directory the compile runs in.

    Raises:
        ToolchainError: no ninja there that runs. torch's extension tooling would fall
            back, without a word, to compiling one source at a time with no progress,
            and the driver could not list the headers outside the project the compile
            read (``ninja -t deps``), so a later edit of one would pass as up to date.
    """
    environ_path = os.environ.get("PATH", "") if environ_path is None else environ_path
    environ_path = absolute_environment({"PATH": environ_path}).get("PATH", environ_path)
    path = os.pathsep.join(p for p in (environ_path, *_ninja_dirs(python)) if p)
    searched = list(dict.fromkeys(d for d in path.split(os.pathsep) if d))
    found = shutil.which("ninja", path=path)
    if found is None:
        problem = (f"ninja was not found on the build's PATH (searched "
                   f"{', '.join(searched) or 'nothing'})")
    else:
        failure = _ninja_fails(found, path)
        if failure is None:
            return path
        problem = f"the ninja on the build's PATH, {found}, does not run ({failure})"
    raise ToolchainError(
        f"{problem}; without ninja torch's extension tooling compiles one source at a "
        "time and the build cannot tell which headers outside the project the compile "
        f"read; fix: {shlex.quote(sys.executable)} -m pip install ninja (into the "
        "environment that runs kernelforge), or put a ninja on PATH")


def _ninja_fails(ninja: str, path: str) -> str | None:
    """Why ``ninja --version`` fails, as torch's extension tooling runs it to decide
    whether to use ninja; ``None`` when it runs. Asked as the compilers are asked their
    versions (``toolchain.ask_tool``): a ninja that hangs is waited for once in a
    ``build_run``, not once for each ``--python`` environment."""
    try:
        code, said = ask_tool([ninja, "--version"], env={**os.environ, "PATH": path})
    except ToolchainError as err:
        return str(err)
    if code == 0:
        return None
    lines = said.strip().splitlines()
    return f"exit status {code}" + (f": {lines[-1]}" if lines else "")


#: Environment variables through which setuptools, torch's extension tooling, nvcc,
#: hipcc, the compilers gcc and clang and the linker add flags, include directories,
#: library directories or a run path to every compile or link. They are cleared for the
#: compile: the flags of a build come from build.toml alone, so that the same sources,
#: toolchain and torch give the same binary whatever shell (a conda environment, an HPC
#: ``module load`` that sets ``CPATH``) runs the build. ``LDSHARED`` and ``LDCXXSHARED``
#: are setuptools' link commands, flags included; the driver links with ``$CXX -shared``.
FLAG_VARIABLES = (
    "CFLAGS", "CPPFLAGS", "CXXFLAGS", "LDFLAGS", "ARFLAGS",
    "NVCC_APPEND_FLAGS", "NVCC_PREPEND_FLAGS",
    "HIPCC_COMPILE_FLAGS_APPEND", "HIPCC_LINK_FLAGS_APPEND",
    # read by gcc and clang (and so by nvcc and hipcc, which run them)
    "CPATH", "C_INCLUDE_PATH", "CPLUS_INCLUDE_PATH", "LIBRARY_PATH",
    # clang's rewrite of its own command line; ld's run path when none is given
    "CCC_OVERRIDE_OPTIONS", "LD_RUN_PATH",
    "LDSHARED", "LDCXXSHARED",
)

#: Environment variables that choose the compilers the build runs and where gcc finds
#: its own programs (``COMPILER_PATH``, ``GCC_EXEC_PREFIX``: a relocated toolchain may
#: need them); they are honoured and are part of the up-to-date check. ``CC`` is the
#: host compiler torch gives nvcc; ``PYTORCH_NVCC`` replaces nvcc in torch's ninja files.
#: A relative value is made absolute for both (``toolchain.absolute_environment``).
COMPILER_VARIABLES = ("CC", "CXX", "AR", "NVCC_CCBIN", "CUDAHOSTCXX", "PYTORCH_NVCC",
                      "COMPILER_PATH", "GCC_EXEC_PREFIX")


#: The environment variable through which a build gives the driver its process id, so
#: that the driver can stop the compile when this process dies
#: (``_driver._end_with_parent``).
PARENT_VARIABLE = "KERNELFORGE_BUILD_PARENT"

#: How a line of the driver's output that the build shows as a note begins.
NOTE_PREFIX = "kernelforge-note: "

#: Written by the driver next to the objects' folder: the files outside the project that
#: the compilers read (``{"files": [...]}``, or ``{"files": null}`` when ninja could not
#: tell); see :func:`reads_digest`.
READS_FILE = "reads.json"

#: The date ``__DATE__`` and ``__TIME__`` expand to in every build (gcc and clang read
#: ``SOURCE_DATE_EPOCH``, and nvcc and hipcc preprocess with them): 1980-01-01 00:00:00
#: UTC, the date Nix gives the builds of Hugging Face's builder. A source that prints its
#: build date then gives the same bytes wherever and whenever it is built.
SOURCE_DATE_EPOCH = "315532800"


#: The folder of a CUDA build's work directory that holds only ``nvcc``, a link to the nvcc
#: the build chose (:func:`_chosen_nvcc_first`).
NVCC_FOLDER = "nvcc-path"


def _chosen_nvcc_first(work_dir: Path, nvcc: Path, path: str) -> str:
    """``path`` (the compile's ``PATH``) with a folder first that holds only ``nvcc``, a
    link to ``nvcc``, the one the build chose for the torch it builds for.

    torch's extension tooling runs ``$PYTORCH_NVCC`` in place of the toolkit's nvcc, and
    the ``nvcc`` of such a command (``ccache nvcc``) is looked up on ``PATH``, where the
    caller's may find another toolkit's: the compile would run another nvcc than the one
    the up-to-date check and ``metadata.json`` name, even of another CUDA major version
    than torch's. A folder of its own rather than the toolkit's ``bin``, so that no other
    program there (a conda environment's, when ``CUDA_HOME`` is one) comes before the
    caller's ``PATH``."""
    folder = work_dir / NVCC_FOLDER
    folder.mkdir(parents=True, exist_ok=True)
    link = folder / "nvcc"
    link.unlink(missing_ok=True)
    link.symlink_to(nvcc)
    return f"{folder}{os.pathsep}{path}"


def compiler_environment(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The compiler-choosing variables that are set (for the build fingerprint), a
    relative value made absolute: ``AR=./ar`` in another folder is another program.

    Raises:
        ToolchainError: a value is relative to a current directory that cannot be read.
    """
    environ = os.environ if environ is None else environ
    absolute = absolute_environment(environ)
    return {k: absolute.get(k, environ[k]) for k in COMPILER_VARIABLES if environ.get(k)}


def compile_environment(environ: Mapping[str, str]) -> tuple[dict[str, str], list[str]]:
    """``environ`` without the :data:`FLAG_VARIABLES`, and the names of those removed
    that were set. The variables naming compilers, toolkits and their folders
    (``toolchain.TOOL_LOCATION_VARIABLES``) are made absolute where relative: the
    compile runs in the work directory, where ``CXX=./mycc`` would name another file.

    Raises:
        ToolchainError: a value is relative to a current directory that cannot be read.
    """
    env = dict(environ)
    dropped = [k for k in FLAG_VARIABLES if env.pop(k, None)]
    env.update(absolute_environment(env))
    return env, dropped


def _jobs_from_environment(progress: Callable[[str], None]) -> int | None:
    """``MAX_JOBS`` as torch's extension tooling reads it (users set it to cap a build's
    memory), when no ``-j`` was given; a value that is not a positive number is noted
    and left out."""
    text = os.environ.get("MAX_JOBS", "").strip()
    if not text:
        return None
    if text.isdigit() and int(text) > 0:
        return int(text)
    progress(f"  note: ignoring MAX_JOBS={text!r}: not a positive number of jobs; "
             "using every core (-j N sets the number)")
    return None


#: Characters that ninja cannot read in the ``build.ninja`` files torch's extension
#: tooling writes, which escape only spaces: in a flag (an include directory), ``$``
#: starts a variable and a line ends at a newline or carriage return; in the path of a
#: source or an object file, ``:`` and ``|`` end the path too.
NINJA_UNSAFE_IN_FLAGS = {"$": "'$'", "\n": "a newline", "\r": "a carriage return"}
NINJA_UNSAFE_IN_PATHS = {":": "':'", "|": "'|'", **NINJA_UNSAFE_IN_FLAGS}


def check_ninja_paths(plan: BuildPlan, work_dir: Path) -> None:
    """Refuse a build whose project, work directory, sources or include directories
    have a path that torch's ninja files cannot express (:data:`NINJA_UNSAFE_IN_PATHS`,
    :data:`NINJA_UNSAFE_IN_FLAGS`).

    Without this, ninja fails with an error about an unknown rule or a missing file of
    a truncated name. Spaces, quotes, ``#``, ``=``, ``(`` and non-ASCII names work.

    Raises:
        BuildError: naming the path, the character and the fix.
    """
    # what is said, the path, and whether ninja reads it as a path (a build line)
    paths: list[tuple[str, Path, bool]] = [("the project path", plan.root, True),
                                           ("the build's work directory", work_dir, True)]
    sources = [*plan.sources, *(p for g in plan.groups for p in g.sources)]
    include_dirs = [*plan.include_dirs, *(d for g in plan.groups for d in g.include_dirs)]
    paths += [("the source", p, True) for p in sources]
    paths += [("the include directory", d, False) for d in include_dirs]
    paths += [("the directory", d, False) for d, _ in plan.prefix_maps]
    for what, path, in_build_line in paths:
        unsafe = NINJA_UNSAFE_IN_PATHS if in_build_line else NINJA_UNSAFE_IN_FLAGS
        text = str(path)
        bad = next((c for c in unsafe if c in text), None)
        if bad is None:
            continue
        # The project comes first: a path under it is its own fault only past that.
        if path == plan.root:
            fix = f"move or rename the project so that its path has no {unsafe[bad]}"
        elif path == work_dir:
            fix = f"give the build a work directory whose path has no {unsafe[bad]}"
        elif path.is_relative_to(plan.root):
            fix = f"rename it (and its mention in build.toml) without {unsafe[bad]}"
        else:
            fix = f"install it under a path without {unsafe[bad]}"
        raise BuildError(
            f"{what} {text!r} contains {unsafe[bad]}, which the ninja files of torch's "
            f"extension tooling cannot express; fix: {fix}"
        )


def _remove_extension(build_lib: Path, namespace: str) -> None:
    """Remove the extension an earlier compile of ``namespace`` left in ``build_lib``
    (``--force``, a variant directory to write again), so that the one found afterwards
    is this compile's: setuptools skips a link whose output is newer than its objects, so
    a compiler that writes nothing and exits 0 (``CXX=/bin/true``) would pass the old
    extension off as built with it. The link this costs is short beside the compile."""
    if not build_lib.is_dir():
        return
    for path in build_lib.iterdir():
        if path.name.split(".", 1)[0] == namespace and path.name.endswith(".so"):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()


def _remove_other_extensions(build_lib: Path, namespace: str) -> None:
    """Remove the extensions that earlier builds of this variant left in ``build_lib``,
    one per uid (``<namespace less its uid><other uid>.*.so``): a CUDA extension can
    weigh hundreds of MB, and each edit of the project makes another. Only names this
    builder gives (``_<name>_<backend>_`` then 7 hex digits, ``_dirty`` or not)."""
    prefix = re.sub(r"[0-9a-f]{7}(?:_dirty)?$", "", namespace)
    if prefix == namespace:  # pragma: no cover - a namespace always ends in its uid
        return
    pattern = re.compile(re.escape(prefix) + r"[0-9a-f]{7}(?:_dirty)?\.(?:[\w-]+\.)?so")
    for path in build_lib.iterdir():
        name = path.name
        if name.split(".", 1)[0] != namespace and pattern.fullmatch(name):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()


def _disk_full_fix(output: str, work_dir: Path) -> str:
    """A line with the fix, for a compile that a full disk stopped (the compiler or the
    assembler says so among its errors, which name no source line to correct); ``""``
    otherwise. The compilers write to the work directory and to the temporary folder."""
    if "No space left on device" not in output:  # as the C library says it
        return ""
    return (f"fix: free space on the disk of {work_dir} or of the temporary folder "
            f"({tempfile.gettempdir()}; TMPDIR chooses another), then build again\n")


def log_name(python: PythonEnv) -> str:
    """The name of a compile's log in its work directory: ``build.log`` for this
    interpreter's torch, ``build-<hash>.log`` for another interpreter (``build --python``),
    so that the log a failed environment names is not overwritten when a later environment
    builds the same variant (the same torch and CUDA/ROCm versions)."""
    if not python.foreign:
        return "build.log"
    key = hashlib.sha256(os.path.abspath(python.executable).encode()).hexdigest()[:12]
    return f"build-{key}.log"


def compile_plan(
    plan: BuildPlan,
    *,
    work_dir: Path,
    jobs: int | None = None,
    verbose: bool = False,
    progress: Callable[[str], None] = print,
    python: PythonEnv | None = None,
) -> Path:
    """Compile ``plan`` with torch's extension tooling in a child process.

    Args:
        plan: what to compile and how.
        work_dir: intermediate directory for objects, the ninja file and the log.
        jobs: parallel compile jobs (default: ``$MAX_JOBS`` when set, else all cores).
        verbose: echo every line of compiler output.
        progress: where progress lines go.
        python: the interpreter (and so the torch) to build with; default: this one.

    Returns:
        The path of the built ``<namespace>.abi3.so``.

    Progress: a ``[n/N] compiled <source>`` line as each ninja step finishes, and, when
    no line has been shown for :data:`HEARTBEAT_S` seconds, a ``still compiling`` line
    with the time spent and the steps done. Everything the child writes goes to
    ``work_dir``'s log (:func:`log_name`).

    Raises:
        BuildError: the compiler failed; the message lists errors with file and line.
        ToolchainError: no ninja that runs on the build's ``PATH`` (:func:`build_path`);
            raised before anything compiles.
        KeyboardInterrupt: the build was interrupted (Ctrl-C), here or in the child; the
            child has ended when it is raised.
    """
    check_ninja_paths(plan, work_dir)
    python = python or PythonEnv(sys.executable)
    path = build_path(python)
    work_dir.mkdir(parents=True, exist_ok=True)
    build_lib = work_dir / "lib"
    # The driver's instructions: what the plan fingerprints, plus where to build.
    spec = {
        **plan.fingerprint_inputs(),
        "backend": plan.backend,
        "root": str(plan.root),
        "build_lib": str(build_lib),
        "build_temp": str(work_dir / "obj"),
    }
    spec_path = work_dir / "spec.json"
    spec_path.write_text(json.dumps(spec, indent=2))
    _remove_extension(build_lib, plan.namespace)
    log_path = work_dir / log_name(python)
    base, dropped = compile_environment(os.environ)
    if dropped:
        progress(f"  note: ignoring {', '.join(dropped)} from the environment; "
                 "put compiler flags and include directories in build.toml (cxx-flags, "
                 "cuda-flags, hip-flags, include)")
    given_date = base.get("SOURCE_DATE_EPOCH")
    if given_date and given_date != SOURCE_DATE_EPOCH:
        progress(f"  note: ignoring SOURCE_DATE_EPOCH={given_date} from the environment; "
                 "__DATE__ and __TIME__ are 1980-01-01 00:00:00 in every build")
    base["SOURCE_DATE_EPOCH"] = SOURCE_DATE_EPOCH
    env = python.env(base)
    env["PATH"] = path
    env[PARENT_VARIABLE] = str(os.getpid())
    env["MAX_JOBS"] = str(jobs or _jobs_from_environment(progress) or os.cpu_count() or 1)
    env.update(plan.env)
    if "PYTORCH_NVCC" in env and "CUDA_HOME" in plan.env:
        env["PATH"] = _chosen_nvcc_first(work_dir, Path(plan.env["CUDA_HOME"]) / "bin" / "nvcc",
                                         env["PATH"])
    # Keep bytecode out of the project and the build tree.
    env["PYTHONDONTWRITEBYTECODE"] = "1"

    cmd = [python.executable, "-m", "kernelforge.build._driver", str(spec_path)]
    started = time.monotonic()
    lines: list[str] = []
    # line-buffered, so that `tail -f build.log` follows the compile
    with _ended_like_an_interrupt(), log_path.open("w", buffering=1) as log, \
            _Child(cmd, cwd=work_dir, env=env) as child:
        shown = started  # when the user last saw a line
        done, total = 0, None  # steps finished, of how many (known with the first)
        # A step's line waits for the next line of output, which says whether it failed.
        held: tuple[str, str, float] | None = None  # ("[n/N]", its command, when it came)

        def show_step(failed: bool) -> None:
            nonlocal held, shown
            if held:
                counter, command, _ = held
                progress(f"  {counter} {_describe_step(command, plan.root, failed=failed)}")
                held, shown = None, time.monotonic()

        while True:
            deadline = held[2] + FAILED_WAIT_S if held else shown + HEARTBEAT_S
            try:
                line = child.next_line(timeout=deadline - time.monotonic())
            except queue.Empty:
                if held:
                    show_step(failed=False)
                else:
                    progress(_still_compiling(plan.variant, time.monotonic() - started,
                                              done, total))
                    shown = time.monotonic()
                continue
            if line is None:
                break
            log.write(line)
            lines.append(line)
            show_step(failed=line.startswith("FAILED:"))
            step = _NINJA_STEP.match(line.strip())
            if step:
                done, total = int(step[1]), int(step[2])
            if line.startswith(NOTE_PREFIX):
                progress(f"  note: {line[len(NOTE_PREFIX):].rstrip()}")
                shown = time.monotonic()
            elif verbose:
                progress(line.rstrip())
                shown = time.monotonic()
            elif step:
                held = (f"[{done}/{total}]", step[3], time.monotonic())
        show_step(failed=False)
        code = child.proc.wait()
    elapsed = time.monotonic() - started

    if code != 0 and _was_interrupted(code, lines):
        # Ctrl-C (SIGINT) reached ninja, a compiler or the driver, but not this process:
        # an interrupt, not a failure (the CLI says "interrupted", without a traceback).
        raise KeyboardInterrupt
    if code != 0:
        output = "".join(lines)
        diagnostics = parse_diagnostics(output)
        if diagnostics:
            detail = "\n".join(f"  {d}" for d in diagnostics[:20])
            if len(diagnostics) > 20:
                detail += f"\n  ... and {len(diagnostics) - 20} more"
        else:
            detail = "\n".join(f"  {ln}" for ln in _compiler_lines(lines))
        killed = _killed_by(code)
        if killed is not None:  # by something outside the build: say so first
            detail = (f"  the compiler driver was ended by {killed} (not by a compile "
                      "error)" + (f"\n{detail}" if detail.strip() else ""))
        raise BuildError(
            f"compiling {plan.variant} failed after {elapsed:.1f}s:\n{detail}\n"
            + _disk_full_fix(output, work_dir) + f"full compiler output: {log_path}"
        )
    # <namespace>.<tag>.so exactly: <namespace>_dirty.abi3.so is another build's
    built = sorted(p for p in build_lib.glob("*.so") if p.name.split(".", 1)[0] == plan.namespace)
    if not built:
        raise BuildError(
            f"compiling {plan.variant} reported success but wrote no extension "
            f"({plan.namespace}.*.so in {build_lib}): the C++ compiler that links it, "
            f"{os.environ.get('CXX', 'c++')!r}, did not write it; fix: point CXX at a "
            f"working g++ or clang++ (or unset it), then build again; see {log_path}"
        )
    if len(built) != 1:
        raise BuildError(
            f"the compiler reported success but produced {len(built)} extension files "
            f"named {plan.namespace}.*.so in {build_lib}; see {log_path}"
        )
    if not built[0].name.endswith(".abi3.so"):
        raise BuildError(
            f"{built[0].name} is not an abi3 extension; the Python limited API was not applied "
            f"(torch's extension tooling too old?); see {log_path}"
        )
    check_cxx_runtime(built[0])
    _remove_other_extensions(build_lib, plan.namespace)
    progress(f"  compiled {plan.variant} in {elapsed:.1f}s")
    return built[0]


#: A file outside the project changed this close to the compile's start, or after it
#: (seconds; file times come from a coarse clock), may have been read in either form:
#: :func:`reads_digest` then gives a digest that matches nothing, so the next build
#: runs ninja again rather than trusting the objects.
UNSETTLED_S = 1.0


def reads_digest(work_dir: Path, *, compiled_since_ns: int | None = None) -> str | None:
    """A digest of the size and modification time of each file outside the project that
    the last compile in ``work_dir`` read (a header of torch's, the system's, or one a
    source includes by a path that leaves the project), as the driver listed them; ``None``
    when the compile left no list. The up-to-date check compares it, so that a changed
    file there rebuilds (ninja then recompiles what read it).

    ``compiled_since_ns``: when the compile that wrote the list began (``time.time_ns``);
    a file changed since (or :data:`UNSETTLED_S` before) gives ``"unsettled"``, which no
    later digest equals."""
    try:
        files = json.loads((work_dir / READS_FILE).read_text(errors="surrogateescape"))["files"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not isinstance(files, list):
        return "unknown"
    h = hashlib.sha256()
    for name in files:
        try:
            st = os.stat(name)
            facts = f"{st.st_size} {st.st_mtime_ns}"
            if (compiled_since_ns is not None
                    and st.st_mtime_ns >= compiled_since_ns - int(UNSETTLED_S * 1e9)):
                return "unsettled"
        except (OSError, TypeError, ValueError):
            facts = "missing"
        h.update(f"{name}\0{facts}\0".encode(errors="surrogateescape"))
    return h.hexdigest()


def _readelf(*args: str) -> str | None:
    try:
        proc = subprocess.run(["readelf", *args], capture_output=True, text=True, timeout=60,
                              check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return proc.stdout if proc.returncode == 0 else None


def needed_libraries(extension: Path) -> list[str] | None:
    """The shared libraries an ELF file declares it needs (``readelf -d``), or ``None``
    when ``readelf`` is not available."""
    out = _readelf("-d", str(extension))
    if out is None:
        return None
    return re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", out)


def bundles_cxx_runtime(extension: Path) -> bool:
    """Whether the file defines the C++ runtime's own symbols (libstdc++ linked in)."""
    out = _readelf("-sW", str(extension))
    if out is None:
        return False
    for line in out.splitlines():
        fields = line.split()
        # Num: Value Size Type Bind Vis Ndx Name; defined symbols have a section index
        if len(fields) >= 8 and fields[6] != "UND" and (
            fields[7].startswith("__gxx_personality_v0") or fields[7].startswith("_ZNSo")
        ):
            return True
    return False


def check_cxx_runtime(extension: Path) -> None:
    """Refuse an extension that does not share torch's C++ runtime.

    A compiler set up to link libstdc++ statically (some toolchains in /opt do, when
    only ``libstdc++.a`` is on their search path) gives the extension its own copy of
    the C++ runtime. The kernel then works until a ``TORCH_CHECK`` formats a message
    with torch's stream operators, and the process dies with a segmentation fault.
    """
    needed = needed_libraries(extension)
    if needed is None:
        return
    shares_runtime = any(lib.startswith(("libstdc++", "libc++")) for lib in needed)
    if not shares_runtime and bundles_cxx_runtime(extension):
        cxx = os.environ.get("CXX", "c++")
        raise BuildError(
            f"{extension.name} does not link the C++ runtime dynamically (it needs only "
            f"{', '.join(needed) or 'nothing'}): the C++ compiler '{cxx}' linked libstdc++ "
            "statically, so the kernel would run a second copy of it beside torch's and crash "
            "when an error message is formatted; fix: point CXX at a g++ that links "
            "libstdc++.so (for example CXX=/usr/bin/g++) and rebuild with --force"
        )
